"""RetNet multi-scale retention (§11)."""

import math
from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Mixer
from .common import CHUNK, F32_BYTES, StateSize, _dtype, _pos_number
from .rotary import rotate_pairs, rotation_angles

__all__ = ["RETNET_DEFAULT_HEADS", "RetNet", "retnet_angles", "retnet_decays", "retnet_rotate"]


# RetNet's default decays γ_h = 1 − 2^(−5−h) stay below 1 in float32 for h < 20.
RETNET_DEFAULT_HEADS = 20


def _f32(x: float) -> float:
    """x rounded to float32, as the model file stores it."""
    return float(torch.tensor(x, dtype=torch.float32))


def _decay_ok(g) -> bool:
    """g is a number in (0, 1) after rounding to float32 (0.99999999 rounds to 1)."""
    if not isinstance(g, (int, float)) or isinstance(g, bool):
        return False
    try:
        return 0 < _f32(float(g)) < 1
    except OverflowError:   # an int beyond float's range
        return False


def retnet_decays(cfg: dict) -> list:
    """A retnet config's per-head decays γ_h as float32 values: its "decay" list, or
    1 − 2^(−5−h) (torchscale's RetNetRelPos)."""
    return [_f32(g) for g in cfg.get("decay", [1 - 2.0 ** (-5 - h) for h in range(cfg["heads"])])]


def retnet_angles(dk: int, pos: int, n: int, dtype: torch.dtype):
    """cos, sin (n, dk/2) of the rotation at positions pos..pos+n−1: pair i of a head's
    dims turns by p·θ_i, θ_i = 10000^(−i/(dk/2 − 1)) (θ_0 = 1 when dk = 2): torchscale's
    RetNetRelPos angle, 1/10000^linspace(0, 1, dk/2) (rotation_angles)."""
    m = dk // 2
    theta = torch.tensor([10000.0 ** (-i / (m - 1)) if m > 1 else 1.0 for i in range(m)], dtype=torch.float64)
    return rotation_angles(theta, pos, n, dtype)


def retnet_rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (..., n, H, dk): pair (x_2i, x_2i+1) → (x_2i cos − x_2i+1 sin, x_2i+1 cos + x_2i sin)
    with the angles of x's row (cos, sin (n, dk/2)); torchscale's theta_shift (rotate_pairs)."""
    return rotate_pairs(x, cos[:, None, :], sin[:, None, :], "interleaved")


class RetNet(Mixer):
    """RetNet multi-scale retention (Sun et al. 2023, §11), causal only.

    Config: heads H, dk (even), dv, optionally decay (one γ_h in (0, 1) per head; default
    1 − 2^(−5−h), required beyond RETNET_DEFAULT_HEADS heads) and eps (> 0, default 1e-6,
    torchscale's layernorm_eps). No causal key: there is no encoder form. The decays are
    rounded to float32, as the model file stores them. Tensors: query, key (H·dk, d), value,
    gate (H·dv, d), out (d, H·dv) (.weight/.bias). Per head h at absolute position n:
      q = query(x)_h, k = key(x)_h / √dk, v = value(x)_h
      q̃, k̃ = q, k rotated by n·θ (retnet_angles, retnet_rotate: xPos without its scale)
      S_n = γ_h S_{n−1} + k̃_nᵀ v_n      (dk × dv, S_{−1} = 0)
      o_n = q̃_n S_n
      ô_n = o_n / √(mean(o_n²) + eps)   (per head over dv: RMS norm without weight)
      y_n = out(silu(gate(x_n)) ⊙ concat_h ô_n)
    torchscale's decay-mask row scaling and |q·k| row-sum scaling multiply o_n by a positive
    scalar per (position, head), which the norm removes up to eps; they are left out.
    State: S (H, dk, dv) per stream; batched S (B, H, dk, dv), pos.
    """
    TYPE = "retnet"
    USES_POS = True
    KEYS = ({"heads", "dk", "dv"}, {"decay", "eps"})

    @classmethod
    def check_config(cls, cfg, need, causal):
        need(cfg["dk"] % 2 == 0, f"mixer.dk must be even (the rotation turns pairs of dims), got {cfg['dk']}")
        if "decay" in cfg:
            d = cfg["decay"]
            need(isinstance(d, list) and len(d) == cfg["heads"],
                 f"mixer.decay must be a list of one number per head (heads = {cfg['heads']}), got {d!r}")
            need(all(_decay_ok(g) for g in d), f"mixer.decay entries must be in (0, 1) as float32, got {d!r}")
        else:
            need(cfg["heads"] <= RETNET_DEFAULT_HEADS,
                 f"mixer.decay is required with more than {RETNET_DEFAULT_HEADS} heads (the default "
                 "1 − 2^(−5−h) rounds to 1 in float32 beyond)")
        if "eps" in cfg:
            need(_pos_number(cfg["eps"]), "mixer.eps must be > 0")

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        return StateSize(True, F32_BYTES * cfg["heads"] * cfg["dk"] * cfg["dv"], 0, None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.eps = cfg.get("eps", 1e-6)
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.gate = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        # From the config, not the weights file: not in state_dict; .double() promotes it exactly.
        self.register_buffer("decay", torch.tensor(retnet_decays(cfg), dtype=torch.float32), persistent=False)

    def _qkv(self, x: Tensor, pos: int):
        """x ([B,] N, d_model) at positions pos.. → q̃, k̃ ([B,] N, H, dk), v ([B,] N, H, dv)."""
        lead, H = x.shape[:-1], self.heads
        cos, sin = retnet_angles(self.dk, pos, x.shape[-2], x.dtype)
        q = self.query(x).view(*lead, H, self.dk)
        k = self.key(x).view(*lead, H, self.dk) / math.sqrt(self.dk)
        v = self.value(x).view(*lead, H, self.dv)
        return retnet_rotate(q, cos, sin), retnet_rotate(k, cos, sin), v

    def _output(self, x: Tensor, o: Tensor) -> Tensor:
        """o ([B,] N, H, dv) → out(silu(gate(x)) ⊙ the per-head RMS-normed o)."""
        o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.out(F.silu(self.gate(x)) * o.flatten(-2))

    def _chunks(self, q: Tensor, k: Tensor, v: Tensor, S: Tensor, chunk: int):
        """The chunked form over q, k ([B,] N, H, dk), v ([B,] N, H, dv) from S ([B,] H, dk, dv):
        per chunk of T rows, row i: o_i = γ^{i+1} q̃_i S + Σ_{j≤i} γ^{i−j} (q̃_i·k̃_j) v_j, then
        S ← γ^T S + Σ_j γ^{T−1−j} k̃_jᵀ v_j. Returns (o ([B,] N, H, dv), S after)."""
        g = self.decay.to(q.dtype)                                        # (H,)
        outs = []
        for c in range(0, q.shape[-3], chunk):
            qc, kc, vc = q[..., c:c + chunk, :, :], k[..., c:c + chunk, :, :], v[..., c:c + chunk, :, :]
            T = qc.shape[-3]
            i = torch.arange(T)
            e = i[:, None] - i[None, :]                                   # i − j
            D = torch.where(e >= 0, g[:, None, None] ** e.clamp(min=0), torch.zeros((), dtype=q.dtype))
            A = torch.einsum("...ihc,...jhc->...hij", qc, kc) * D          # ([B,] H, T, T)
            inner = torch.einsum("...hij,...jhm->...ihm", A, vc)
            cross = torch.einsum("...ihc,...hcm->...ihm", qc, S) * (g[None, :] ** (i[:, None] + 1))[..., None]
            outs.append(inner + cross)
            kd = kc * (g[None, :] ** (T - 1 - i)[:, None])[..., None]     # γ^{T−1−j} k̃_j
            S = (g ** T)[:, None, None] * S + torch.einsum("...jhc,...jhm->...hcm", kd, vc)
        return torch.cat(outs, -3), S

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S (H, dk, dv) zero."""
        return {"S": torch.zeros(self.heads, self.dk, self.dv, dtype=dtype)}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form (§11): x (N, d_model) at positions pos..pos+N−1 after `state`.
        chunk ≥ N is the plain decay-masked (Q̃K̃ᵀ ⊙ D)V form. Returns (out (N, d_model), state)."""
        q, k, v = self._qkv(x, pos)
        o, S = self._chunks(q, k, v, state["S"], chunk)
        return self._output(x, o), {"S": S}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form, position by position: S = γ S + k̃ᵀv, o = q̃ S. Same arguments and result
        as `parallel`."""
        q, k, v = self._qkv(x, pos)
        g = self.decay.to(x.dtype)[:, None, None]
        S = state["S"]
        outs = []
        for qi, ki, vi in zip(q, k, v):                                   # (H, dk), (H, dk), (H, dv)
            S = g * S + torch.einsum("hc,hm->hcm", ki, vi)
            outs.append(torch.einsum("hc,hcm->hm", qi, S))
        return self._output(x, torch.stack(outs)), {"S": S}

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        return self._prefill(x, self._initial_state(x.shape[0], None))[0]

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return {"S": torch.zeros(batch, self.heads, self.dk, self.dv, dtype=dt, device=dev), "pos": torch.tensor(0)}

    def _prefill(self, x, state, chunk: int = CHUNK):
        pos = int(state["pos"])
        q, k, v = self._qkv(x, pos)
        o, S = self._chunks(q, k, v, state["S"], chunk)
        return self._output(x, o), {"S": S, "pos": torch.tensor(pos + x.shape[1])}


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (RetNet,)
