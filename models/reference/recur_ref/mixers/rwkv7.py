"""RWKV-7's time mix (BlinkDL's RWKV_x070, §16): the diagonal-plus-low-rank recurrence with
its token mixes and low-rank paths; the model's first RWKV-7 block shares its value with the
later ones."""

from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Mixer
from .common import CHUNK, F32_BYTES, StateSize, _dtype, _pos_int, _pos_number

__all__ = ["RWKV7_MIXES", "Rwkv7"]


def _f32(x: float) -> float:
    """x rounded to float32, as the model file stores it."""
    return float(torch.tensor(x, dtype=torch.float32))


RWKV7_MIXES = 6   # token_mix rows: r, w, k, v, a, g


class Rwkv7(Mixer):
    """RWKV-7's time mix (BlinkDL's RWKV_x070, §16), causal only.

    Config: heads H, head_size N, the low-rank widths decay_rank, rate_rank, value_rank,
    gate_rank, optionally group_norm_eps (default 64e-5) and decay_scale (default 0.606531,
    BlinkDL's e^{-0.5}), both rounded to float32 as the model file stores them. A = H·N.
    Tensors: token_mix (6, d), receptance, key, value (A, d), out (d, A) (weights only),
    decay_down (D_w, d), decay_up (A, D_w) with bias w0, rate_down/rate_up likewise (a0),
    value_down/value_up (v0; not in the model's first RWKV-7 block), gate_down (D_g, d),
    gate_up (A, D_g) (no biases), key_norm, key_rate, bonus (A,), group_norm.weight/.bias (A,).
    Per position, x₋₁ the previous position's input (zeros before position 0):
      x_c = x + (x₋₁ − x) ⊙ token_mix[c]            c = r, w, k, v, a, g
      r, k, v = receptance(x_r), key(x_k), value(x_v)
      w = exp(−decay_scale·σ(decay_up(tanh(decay_down(x_w)))))
      α = σ(rate_up(rate_down(x_a)));  g = gate_up(σ(gate_down(x_g)))
      κ̂ = normalize(k ⊙ key_norm) per head;  k ← k ⊙ (1 + (α − 1) ⊙ key_rate)
      v ← v + (v₀ − v) ⊙ σ(value_up(value_down(x_v)))   (v₀: the first block's v, `shared`)
      S_h ← S_h diag(w_h) + (S_h (−κ̂_h))(κ̂_h ⊙ α_h)ᵀ + v_h k_hᵀ;  y_h = S_h r_h
      y = GroupNorm_H(y) + (Σ_h r ⊙ k ⊙ bonus) v;  out(y ⊙ g)
    The recurrence runs position by position in every form (chunk is not used: the runtime
    prefills the same way). State: S (H, N, N) (S_h[i][j], i over values, j over keys) and
    x_prev (d_model,); batched S (B, H, N, N), x_prev (B, d_model). first: the model's first
    RWKV-7 block (no value residual: its v is v₀, written to `shared`)."""
    TYPE = "rwkv7"
    KEYS = ({"heads", "head_size", "decay_rank", "rate_rank", "value_rank", "gate_rank"},
            {"group_norm_eps", "decay_scale"})
    SHARES_ROWS = True   # the forms take `shared`, the pass's dict of the blocks' shared rows
    PLACED = True        # the constructor takes `first`

    @classmethod
    def check_config(cls, cfg, need, causal):
        for k in ("head_size", "decay_rank", "rate_rank", "value_rank", "gate_rank"):
            need(_pos_int(cfg[k]), f"mixer.{k} must be a positive integer, got {cfg[k]!r}")
        for k in ("group_norm_eps", "decay_scale"):
            if k in cfg:
                need(_pos_number(cfg[k]), f"mixer.{k} must be > 0")

    @classmethod
    def recurrent_state(cls, cfg, d_model):   # S (H, N, N) and x₋₁ (d_model)
        return StateSize(True, F32_BYTES * (cfg["heads"] * cfg["head_size"] ** 2 + d_model), 0, None)

    def __init__(self, cfg, d_model, first: bool = True):
        super().__init__(cfg, d_model)
        H, N, d = cfg["heads"], cfg["head_size"], d_model
        self.heads, self.n, self.first = H, N, first
        A = H * N
        self.eps = _f32(cfg.get("group_norm_eps", 64e-5))
        self.decay_scale = _f32(cfg.get("decay_scale", 0.606531))
        u = lambda *shape, lo, hi: nn.Parameter(lo + (hi - lo) * torch.rand(*shape))  # noqa: E731
        # Magnitudes like a trained model's: mixes in (0, 1), decays spread over (e^{-0.61}, 1),
        # low-rank paths that move their sigmoids.
        self.token_mix = u(RWKV7_MIXES, d, lo=0.0, hi=1.0)
        self.receptance = nn.Linear(d, A, bias=False)
        self.key = nn.Linear(d, A, bias=False)
        self.value = nn.Linear(d, A, bias=False)
        self.out = nn.Linear(A, d, bias=False)
        self.decay_down = nn.Linear(d, cfg["decay_rank"], bias=False)
        self.decay_up = nn.Linear(cfg["decay_rank"], A)
        self.rate_down = nn.Linear(d, cfg["rate_rank"], bias=False)
        self.rate_up = nn.Linear(cfg["rate_rank"], A)
        if not first:
            self.value_down = nn.Linear(d, cfg["value_rank"], bias=False)
            self.value_up = nn.Linear(cfg["value_rank"], A)
        self.gate_down = nn.Linear(d, cfg["gate_rank"], bias=False)
        self.gate_up = nn.Linear(cfg["gate_rank"], A, bias=False)
        self.key_norm = u(A, lo=0.7, hi=1.0)
        self.key_rate = u(A, lo=0.8, hi=1.2)
        self.bonus = nn.Parameter(0.3 * torch.randn(A))
        self.group_norm = nn.GroupNorm(H, A, eps=self.eps)
        with torch.no_grad():
            self.decay_up.bias.uniform_(-6.0, 1.0)
            self.group_norm.weight.uniform_(0.5, 1.5)
            self.group_norm.bias.uniform_(-0.1, 0.1)

    def _run(self, x: Tensor, S: Tensor, x_prev: Tensor, shared: dict, chunked: bool = False):
        """x (B, T, d) after S (B, H, N, N) and x_prev (B, d) → (out (B, T, d), S, x_prev).
        chunked: the recurrence in chunks (_chunked_recurrence; training's batched form)."""
        B, T, _ = x.shape
        H, N = self.heads, self.n
        before = torch.cat([x_prev[:, None], x[:, :-1]], 1)
        xr, xw, xk, xv, xa, xg = (x + (before - x) * self.token_mix[c] for c in range(RWKV7_MIXES))
        r, k, v = self.receptance(xr), self.key(xk), self.value(xv)
        w = torch.exp(-self.decay_scale * torch.sigmoid(self.decay_up(torch.tanh(self.decay_down(xw)))))
        a = torch.sigmoid(self.rate_up(self.rate_down(xa)))
        g = self.gate_up(torch.sigmoid(self.gate_down(xg)))
        kk = F.normalize((k * self.key_norm).view(B, T, H, N), dim=-1, p=2.0).view(B, T, -1)
        k = k * (1 + (a - 1) * self.key_rate)
        if self.first:
            shared["v_first"] = v
        else:
            if "v_first" not in shared:
                raise ValueError("mixer rwkv7: a block with a value residual needs an earlier "
                                 "RWKV-7 block's v (shared['v_first'])")
            v = v + (shared["v_first"] - v) * torch.sigmoid(self.value_up(self.value_down(xv)))
        view = lambda t: t.view(B, T, H, N)  # noqa: E731
        rr, ww, kk4, kr, ab, vv = view(r), view(w), view(kk), view(k), view(kk * a), view(v)
        if chunked:
            y, S = _chunked_recurrence(rr, ww, -kk4, ab, kr, vv, S)
        else:
            ys = []
            for t in range(T):
                sa = torch.einsum("bhij,bhj->bhi", S, -kk4[:, t])
                S = (S * ww[:, t, :, None, :] + sa[..., None] * ab[:, t, :, None, :]
                     + vv[:, t, :, :, None] * kr[:, t, :, None, :])
                ys.append(torch.einsum("bhij,bhj->bhi", S, rr[:, t]))
            y = torch.stack(ys, 1)
        y = y.reshape(B * T, -1)                                               # (B·T, A)
        y = F.group_norm(y, H, self.group_norm.weight, self.group_norm.bias, self.eps).view(B, T, -1)
        y = y + ((r * k * self.bonus).view(B, T, H, N).sum(-1, keepdim=True) * vv).view(B, T, -1)
        return self.out(y * g), S, x[:, -1]

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S (H, N, N) and x_prev (d_model,) zero."""
        return {"S": torch.zeros(self.heads, self.n, self.n, dtype=dtype),
                "x_prev": torch.zeros(self.d_model, dtype=dtype)}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], chunk: int, shared: Optional[dict] = None):
        """x (N, d_model) after `state` → (out (N, d_model), state). chunk: unused (the
        recurrence runs position by position, as the runtime's prefill does)."""
        shared = {} if shared is None else shared
        one = {key: v[None] for key, v in shared.items()}
        y, S, xp = self._run(x[None], state["S"][None], state["x_prev"][None], one)
        shared.update({key: v[0] for key, v in one.items()})
        return y[0], {"S": S[0], "x_prev": xp[0]}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], shared: Optional[dict] = None):
        """RNN form, one position at a time: the same arguments and result as `parallel`."""
        shared = {} if shared is None else shared
        outs, rows = [], {}
        for t in range(x.shape[0]):
            one = {key: v[t:t + 1] for key, v in shared.items()}
            y, state = self.parallel(x[t:t + 1], state, 1, one)
            outs.append(y)
            for key, v in one.items():
                rows.setdefault(key, []).append(v)
        shared.update({key: torch.cat(v) for key, v in rows.items()})
        return torch.cat(outs), state

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        return self._prefill(x, self._initial_state(x.shape[0], None))[0]

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return {"S": torch.zeros(batch, self.heads, self.n, self.n, dtype=dt, device=dev),
                "x_prev": torch.zeros(batch, self.d_model, dtype=dt, device=dev)}

    def _prefill(self, x, state, chunk: int = CHUNK, shared: Optional[dict] = None, chunked: bool = False):
        y, S, xp = self._run(x, state["S"], state["x_prev"], {} if shared is None else shared, chunked)
        return y, {"S": S, "x_prev": xp}


def _chunked_recurrence(r, w, a, b, k, v, S, L: int = 16):
    """The recurrence S_t = S_{t-1} (diag(w_t) + a_t b_tᵀ) + v_t k_tᵀ, y_t = S_t r_t over chunks
    of L positions (§16, "chunked form"): r, w, a, b, k, v (B, T, H, N), S (B, H, N, N) →
    (y (B, T, H, N), S). Within a chunk, with G_t = Σ_{s≤t} log w_s and u_t = S_{t-1} a_t:
      U = (I − tril(ã b̃ᵀ, −1))⁻¹ (ã S₀ᵀ + tril(ã k̃ᵀ, −1) V),  ã_t = a_t e^{G_{t−1}}, k̃_s = k_s e^{−G_s}
      Y = r̃ S₀ᵀ + tril(r̃ k̃ᵀ) V + tril(r̃ b̃ᵀ) U,                r̃_t = r_t e^{G_t}, b̃_s = b_s e^{−G_s}
    The decay is bounded (log w ≥ −decay_scale), so e^{−G} ≤ e^{0.61·L} stays finite in float32.
    Computed in at least float32 (outside autocast); the sum order differs from position by
    position, so it is the training form, not the goldens'."""
    B, T, H, N = r.shape
    dt = torch.promote_types(r.dtype, torch.float32)
    with torch.autocast("cpu", enabled=False):
        pad = (-T) % L
        parts = [t.to(dt) for t in (r, w, a, b, k, v)]
        if pad:   # w = 1 and zeros elsewhere: the padding leaves S as it is
            parts = [F.pad(t, (0, 0, 0, 0, 0, pad), value=1.0 if i == 1 else 0.0) for i, t in enumerate(parts)]
        n = (T + pad) // L
        r, w, a, b, k, v = (t.view(B, n, L, H, N).transpose(2, 3) for t in parts)   # (B, n, H, L, N)
        G = torch.log(w).cumsum(3)
        G_before = G - torch.log(w)
        at, rt = a * torch.exp(G_before), r * torch.exp(G)
        kt, bt = k * torch.exp(-G), b * torch.exp(-G)
        strict = torch.ones(L, L, dtype=torch.bool, device=r.device).tril(-1)
        causal = torch.ones(L, L, dtype=torch.bool, device=r.device).tril()
        A_ak = (at @ kt.transpose(-1, -2)).masked_fill(~strict, 0)
        A_ab = (at @ bt.transpose(-1, -2)).masked_fill(~strict, 0)
        A_rk = (rt @ kt.transpose(-1, -2)).masked_fill(~causal, 0)
        A_rb = (rt @ bt.transpose(-1, -2)).masked_fill(~causal, 0)
        eye = torch.eye(L, dtype=dt, device=r.device)
        solve = torch.linalg.solve_triangular(eye - A_ab, eye.expand_as(A_ab), upper=False,
                                              unitriangular=True)                # (B, n, H, L, L)
        AkV = A_ak @ v
        RkV = A_rk @ v
        to_end = torch.exp(G[:, :, :, -1:] - G)                                  # (B, n, H, L, N)
        k_end, b_end = k * to_end, b * to_end
        decay_end = torch.exp(G[:, :, :, -1])                                    # (B, n, H, N)
        S = S.to(dt)
        ys = []
        for c in range(n):
            St = S.transpose(-1, -2)                                             # (B, H, Nk, Nv)
            U = solve[:, c] @ (at[:, c] @ St + AkV[:, c])                        # (B, H, L, Nv)
            ys.append(rt[:, c] @ St + RkV[:, c] + A_rb[:, c] @ U)
            S = (S * decay_end[:, c, :, None, :] + v[:, c].transpose(-1, -2) @ k_end[:, c]
                 + U.transpose(-1, -2) @ b_end[:, c])
        y = torch.stack(ys, 1).transpose(2, 3).reshape(B, n * L, H, N)[:, :T]
    return y, S


MIXER_CLASSES = (Rwkv7,)
