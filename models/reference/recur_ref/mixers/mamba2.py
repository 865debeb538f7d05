"""Mamba2's SSD mixer (mamba_ssm's Mamba2 module, §17): a gated in-projection, a causal
depthwise convolution, the scalar-decay state-space recurrence per head with B and C shared by
a group of heads, a grouped gated RMS norm and the out-projection."""

import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Mixer
from .common import F32_BYTES, StateSize, _dtype, _pos_int, _pos_number, by_positions

__all__ = ["Mamba2"]


def _f32(x: float) -> float:
    """x rounded to float32, as the model file stores it."""
    return float(torch.tensor(x, dtype=torch.float32))


class Mamba2(Mixer):
    """Mamba2's mixer (mamba_ssm.modules.mamba2.Mamba2 with rmsnorm, norm_before_gate false
    and d_ssm = d_inner; §17), causal only.

    Config: heads H, head_dim P, state_size N, optionally groups G (default 1; divides H),
    conv_kernel K (default 4), norm_eps (default 1e-5), dt_min and dt_max (the clamp of Δ,
    mamba_ssm's dt_limit; default 0 and none), bias (default false: in_proj and out_proj
    without biases). I = H·P, the convolution's width W = I + 2·G·N.
    Tensors: in_proj (2·I + 2·G·N + H, d) (rows z, x, B, C, dt), conv.weight (W, K),
    conv.bias (W,), dt_bias, A, D (H,) (A = −exp(A_log), negative), norm.weight (I,),
    out_proj (d, I). Per position, u = the convolution's inputs:
      z, u, dt = in_proj(x) split (I, W, H)
      u' = silu(conv.bias + Σ_k conv.weight[:, k] ⊙ u_{t−K+1+k})   (zeros before position 0)
      x_c, B, C = u' split (I, G·N, G·N)
      Δ = clamp(softplus(dt + dt_bias), dt_min, dt_max);  a = exp(Δ ⊙ A)           (H)
      head h, group g = h // (H/G):  S_h ← a_h S_h + (Δ_h x_h) B_gᵀ;  y_h = S_h C_g + D_h x_h
      y ← RMSNorm_G(y ⊙ silu(z)) ⊙ norm.weight   (over each group's I/G features)
      out_proj(y)
    State: S (H, P, N), then conv (K−1, W), the last K−1 inputs u (oldest first); batched
    S (B, H, P, N), conv (B, K−1, W)."""
    TYPE = "mamba2"
    KEYS = ({"heads", "head_dim", "state_size"},
            {"groups", "conv_kernel", "norm_eps", "dt_min", "dt_max", "bias"})

    @classmethod
    def check_config(cls, cfg, need, causal):
        for k in ("head_dim", "state_size", "groups", "conv_kernel"):
            if k in cfg:
                need(_pos_int(cfg[k]), f"mixer.{k} must be a positive integer, got {cfg[k]!r}")
        need(cfg["heads"] % cfg.get("groups", 1) == 0,
             f"mixer.groups ({cfg.get('groups')}) must divide mixer.heads ({cfg['heads']})")
        if "norm_eps" in cfg:
            need(_pos_number(cfg["norm_eps"]), "mixer.norm_eps must be > 0")
        lo, hi = cfg.get("dt_min", 0.0), cfg.get("dt_max", math.inf)
        for k, v in (("dt_min", lo), ("dt_max", hi)):
            need(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and not math.isnan(v),
                 f"mixer.{k} must be a number >= 0")
        need(lo < hi, "mixer.dt_min must be below mixer.dt_max")
        need(isinstance(cfg.get("bias", False), bool), "mixer.bias must be true or false")

    @classmethod
    def widths(cls, cfg):
        """(I, W, in_proj rows) of a config."""
        inner = cfg["heads"] * cfg["head_dim"]
        gn = cfg.get("groups", 1) * cfg["state_size"]
        return inner, inner + 2 * gn, 2 * inner + 2 * gn + cfg["heads"]

    @classmethod
    def recurrent_state(cls, cfg, d_model):   # S (H, P, N) and conv (K−1, W)
        _, w, _ = cls.widths(cfg)
        k = cfg.get("conv_kernel", 4)
        return StateSize(True, F32_BYTES * ((k - 1) * w + cfg["heads"] * cfg["head_dim"] * cfg["state_size"]),
                         0, None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.p, self.n = cfg["heads"], cfg["head_dim"], cfg["state_size"]
        self.groups, self.k = cfg.get("groups", 1), cfg.get("conv_kernel", 4)
        self.eps = _f32(cfg.get("norm_eps", 1e-5))
        self.dt_min, self.dt_max = _f32(cfg.get("dt_min", 0.0)), _f32(cfg.get("dt_max", math.inf))
        inner, w, rows = self.widths(cfg)
        self.inner, self.w = inner, w
        bias = cfg.get("bias", False)
        H = self.heads
        self.in_proj = nn.Linear(d_model, rows, bias=bias)
        self.conv = nn.Module()
        self.conv.weight = nn.Parameter(torch.randn(w, self.k) / math.sqrt(self.k))
        self.conv.bias = nn.Parameter(0.1 * torch.randn(w))
        # Magnitudes like a trained model's: Δ spread over (1e-3, 0.1) at dt = 0, A in −[1, 16].
        dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A = nn.Parameter(-torch.empty(H).uniform_(1.0, 16.0))
        self.D = nn.Parameter(1.0 + 0.2 * torch.randn(H))
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(1.0 + 0.2 * torch.randn(inner))
        self.out_proj = nn.Linear(inner, d_model, bias=bias)

    def _run(self, x: Tensor, conv: Tensor, S: Tensor):
        """x (B, T, d) after conv (B, K−1, W) and S (B, H, P, N) → (out (B, T, d), conv, S)."""
        B, T, _ = x.shape
        H, P, N, G, I = self.heads, self.p, self.n, self.groups, self.inner
        z, u, dt = self.in_proj(x).split([I, self.w, H], -1)
        full = torch.cat([conv, u], 1)                                      # (B, K−1+T, W)
        u = sum(full[:, k:k + T] * self.conv.weight[:, k] for k in range(self.k)) + self.conv.bias
        u = F.silu(u)
        xs, b, c = u.split([I, G * N, G * N], -1)
        delta = F.softplus(dt + self.dt_bias).clamp(self.dt_min, self.dt_max)    # (B, T, H)
        a = torch.exp(delta * self.A)
        xh = xs.view(B, T, H, P)
        per = H // G                                     # head h reads group h // per
        bh = b.view(B, T, G, 1, N).expand(B, T, G, per, N).reshape(B, T, H, N)
        ch = c.view(B, T, G, 1, N).expand(B, T, G, per, N).reshape(B, T, H, N)
        ys = []
        for t in range(T):
            S = (a[:, t, :, None, None] * S
                 + (delta[:, t, :, None] * xh[:, t])[..., None] * bh[:, t, :, None, :])
            ys.append(torch.einsum("bhpn,bhn->bhp", S, ch[:, t]))
        y = torch.stack(ys, 1) + self.D[:, None] * xh                       # (B, T, H, P)
        g = (y.reshape(B, T, I) * F.silu(z)).view(B, T, G, I // G)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        y = g.reshape(B, T, I) * self.norm.weight
        return self.out_proj(y), full[:, T:], S

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S (H, P, N) and conv (K−1, W) zero."""
        return {"S": torch.zeros(self.heads, self.p, self.n, dtype=dtype),
                "conv": torch.zeros(self.k - 1, self.w, dtype=dtype)}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], chunk: int):
        """x (N, d_model) after `state` → (out (N, d_model), state). chunk: unused (the
        recurrence runs position by position, as the runtime's prefill does)."""
        y, conv, S = self._run(x[None], state["conv"][None], state["S"][None])
        return y[0], {"S": S[0], "conv": conv[0]}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor]):
        """RNN form, one position at a time: the same arguments and result as `parallel`."""
        return by_positions(self.parallel, x, state)

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        return self._prefill(x, self._initial_state(x.shape[0], None))[0]

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return {"S": torch.zeros(batch, self.heads, self.p, self.n, dtype=dt, device=dev),
                "conv": torch.zeros(batch, self.k - 1, self.w, dtype=dt, device=dev)}

    def _prefill(self, x, state, chunk: Optional[int] = None):
        y, conv, S = self._run(x, state["conv"], state["S"])
        return y, {"S": S, "conv": conv}


MIXER_CLASSES = (Mamba2,)
