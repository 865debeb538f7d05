"""Gated DeltaNet (flash-linear-attention's GatedDeltaNet layer, §18): the gated delta rule
over short-convolved, L2-normalised queries and keys, several value heads per key head, and
the gated RMS norm per head of the output."""

import math
from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Mixer
from .common import F32_BYTES, StateSize, _nonneg_int, _pos_int, _pos_number
from .short_conv import StateForms, f32, gated_rms_norm_heads

__all__ = ["GatedDeltaNet"]


class GatedDeltaNet(StateForms, Mixer):
    """Gated DeltaNet (fla's GatedDeltaNet, §18), causal only.

    Config: heads H (query/key heads), optionally v_heads HV (a multiple of H; default H),
    head_k_dim dk, head_v_dim dv, optionally conv_size K (default 4; 0: no convolutions),
    gate (default true), norm_eps (default 1e-5) and beta_scale (default 1; 2 is fla's
    allow_neg_eigval), floats rounded to float32 as the model file stores them. Q = H·dk,
    V = HV·dv. Tensors: query, key (Q, d), value (V, d), decay, beta (HV, d), gate (V, d; with
    gate), out (d, V) (weights only), a_log, dt_bias (HV,), query_conv, key_conv (Q, K),
    value_conv (V, K) (with K > 0), norm_weight (dv,). Per position:
      q, k, v = silu(conv(query(x))), silu(conv(key(x))), silu(conv(value(x)))   (K = 0: no conv)
      q, k ← q/√(‖q‖² + 1e-6), k/√(‖k‖² + 1e-6) per key head
      β = beta_scale·σ(beta(x));  g = −e^{a_log}·softplus(decay(x) + dt_bias)       (HV)
      S_j ← e^{g_j} S_j;  S_j ← S_j + β_j (v_j − S_j k) kᵀ;  o_j = S_j q/√dk   (k, q of head ⌊j·H/HV⌋)
      o_j ← RMSNorm(o_j) ⊙ norm_weight ⊙ silu(gate(x)_j);  out(o)
    State: S (HV, dv, dk) (S_j[i][m], i over values, m over keys) and the convolutions' last
    K−1 inputs conv_k (K−1, Q), conv_q (K−1, Q), conv_v (K−1, V) (the runtime's order: sorted
    names); batched with a leading B."""
    TYPE = "gated_deltanet"
    KEYS = ({"heads", "head_k_dim", "head_v_dim"},
            {"v_heads", "conv_size", "gate", "norm_eps", "beta_scale"})

    @classmethod
    def check_config(cls, cfg, need, causal):
        for k in ("head_k_dim", "head_v_dim", "v_heads"):
            if k in cfg:
                need(_pos_int(cfg[k]), f"mixer.{k} must be a positive integer, got {cfg[k]!r}")
        need(cfg.get("v_heads", cfg["heads"]) % cfg["heads"] == 0, "mixer.v_heads must be a multiple of heads")
        need(_nonneg_int(cfg.get("conv_size", 4)) and cfg.get("conv_size", 4) <= 64,
             "mixer.conv_size must be an integer in [0, 64]")
        need(isinstance(cfg.get("gate", True), bool), "mixer.gate must be true or false")
        for k in ("norm_eps", "beta_scale"):
            if k in cfg:
                need(_pos_number(cfg[k]), f"mixer.{k} must be > 0")
        need(causal, "mixer.causal: gated_deltanet is causal only")

    @classmethod
    def _widths(cls, cfg):
        H, HV = cfg["heads"], cfg.get("v_heads", cfg["heads"])
        return H * cfg["head_k_dim"], HV * cfg["head_v_dim"], max(cfg.get("conv_size", 4) - 1, 0)

    @classmethod
    def recurrent_state(cls, cfg, d_model):   # S (HV, dv, dk) and the convolutions' carries
        q, v, carry = cls._widths(cfg)
        return StateSize(True, F32_BYTES * (v * cfg["head_k_dim"] + carry * (2 * q + v)), 0, None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        d = d_model
        self.heads, self.v_heads = cfg["heads"], cfg.get("v_heads", cfg["heads"])
        self.dk, self.dv = cfg["head_k_dim"], cfg["head_v_dim"]
        self.K = cfg.get("conv_size", 4)
        self.eps = f32(cfg.get("norm_eps", 1e-5))
        self.beta_scale = f32(cfg.get("beta_scale", 1.0))
        Q, V, HV = self.heads * self.dk, self.v_heads * self.dv, self.v_heads
        self.query = nn.Linear(d, Q, bias=False)
        self.key = nn.Linear(d, Q, bias=False)
        self.value = nn.Linear(d, V, bias=False)
        self.decay = nn.Linear(d, HV, bias=False)
        self.beta = nn.Linear(d, HV, bias=False)
        self.gate = nn.Linear(d, V, bias=False) if cfg.get("gate", True) else None
        self.out = nn.Linear(V, d, bias=False)
        # fla's initialisation: A in (1, 16), dt in (0.001, 0.1) log-uniform, dt_bias its
        # inverse softplus.
        self.a_log = nn.Parameter(torch.log(1 + 15 * torch.rand(HV)))
        dt = torch.exp(torch.rand(HV) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self._init_convs(Q, Q, V)
        self.norm_weight = nn.Parameter(0.5 + torch.rand(self.dv))

    def _run(self, x: Tensor, state: Dict[str, Tensor]):
        """x (B, T, d) after `state` (batched) → (out (B, T, d), state)."""
        B, T, _ = x.shape
        H, HV, dk, dv = self.heads, self.v_heads, self.dk, self.dv
        q, k, v = self.query(x), self.key(x), self.value(x)
        new = {}
        if self.K:
            q, k, v = self._convolve(q, k, v, state, new)
        else:
            q, k, v = F.silu(q), F.silu(k), F.silu(v)
        norm = lambda t: t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)  # noqa: E731
        group = HV // H
        # (B, T, HV, dk): each value head's key head.
        q = norm(q.view(B, T, H, dk)).repeat_interleave(group, 2) / math.sqrt(dk)
        k = norm(k.view(B, T, H, dk)).repeat_interleave(group, 2)
        v = v.view(B, T, HV, dv)
        beta = self.beta_scale * torch.sigmoid(self.beta(x))                     # (B, T, HV)
        z = self.decay(x) + self.dt_bias
        softplus = torch.where(z > 20, z, torch.log1p(torch.exp(z.clamp(max=20))))
        decay = torch.exp(-torch.exp(self.a_log) * softplus)                      # e^g
        S, ys = state["S"], []
        for t in range(T):
            S = S * decay[:, t, :, None, None]
            err = v[:, t] - torch.einsum("bjim,bjm->bji", S, k[:, t])
            S = S + (beta[:, t, :, None] * err)[..., None] * k[:, t, :, None, :]
            ys.append(torch.einsum("bjim,bjm->bji", S, q[:, t]))
        o = torch.stack(ys, 1)                                                    # (B, T, HV, dv)
        gate = None if self.gate is None else self.gate(x).view(B, T, HV, dv)
        o = gated_rms_norm_heads(o, gate, self.norm_weight, self.eps)
        return self.out(o.reshape(B, T, HV * dv)), self._ordered(S, new)

    def _zeros(self, batch, dtype, device):
        Q, V, _ = self._widths(self.cfg)
        state = {"S": torch.zeros(batch, self.v_heads, self.dv, self.dk, dtype=dtype, device=device)}
        return self._conv_zeros(state, (Q, Q, V), batch, dtype, device)


MIXER_CLASSES = (GatedDeltaNet,)
