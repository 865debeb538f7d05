"""Gated linear attention (flash-linear-attention's GatedLinearAttention layer, §19): linear
attention with a data-dependent decay per key dimension from a low-rank gate, grouped key/value
heads, optional short convolutions, and the gated RMS norm per head of the output."""

import math
from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Mixer
from .common import F32_BYTES, StateSize, _nonneg_int, _pos_int, _pos_number
from .short_conv import StateForms, f32, gated_rms_norm_heads

__all__ = ["Gla"]


class Gla(StateForms, Mixer):
    """GLA (fla's GatedLinearAttention, §19), causal only.

    Config: heads H (query heads), optionally kv_heads KV (dividing H; default H), head_k_dim
    dk, head_v_dim dv, optionally gate_rank R (default 16), conv_size K (default 0: no
    convolutions), gate (default true), norm_eps (default 1e-5), gate_logit_normalizer
    (default 16), clamp_min (≤ 0; default none), floats rounded to float32 as the model file
    stores them. Q = H·dk, C = KV·dk, U = KV·dv. Tensors: query (Q, d), key (C, d), value
    (U, d), gate_down (R, d), gate_up (C, R) with its bias, gate (H·dv, d; with gate), out
    (d, H·dv) (weights only but gate_up's), query_conv (Q, K), key_conv (C, K), value_conv
    (U, K) (with K > 0), norm_weight (dv,). Per position:
      q, k, v = query(x), key(x), value(x)   (K > 0: each silu(conv(·)))
      α = max(logsigmoid(gate_up(gate_down(x)))/gate_logit_normalizer, clamp_min)
      S_h ← S_h diag(e^{α}) + v kᵀ;  o_h = S_h q_h/√dk   (k, v, α of key/value head ⌊h·KV/H⌋)
      o_h ← RMSNorm(o_h) ⊙ norm_weight ⊙ silu(gate(x)_h);  out(o)
    State: S (H, dv, dk) (S_h[i][m], i over values, m over keys) and the convolutions' last
    K−1 inputs conv_k (K−1, C), conv_q (K−1, Q), conv_v (K−1, U) (the runtime's order: sorted
    names); batched with a leading B."""
    TYPE = "gla"
    KEYS = ({"heads", "head_k_dim", "head_v_dim"},
            {"kv_heads", "gate_rank", "conv_size", "gate", "norm_eps", "gate_logit_normalizer", "clamp_min"})

    @classmethod
    def check_config(cls, cfg, need, causal):
        for k in ("head_k_dim", "head_v_dim", "kv_heads", "gate_rank"):
            if k in cfg:
                need(_pos_int(cfg[k]), f"mixer.{k} must be a positive integer, got {cfg[k]!r}")
        need(cfg["heads"] % cfg.get("kv_heads", cfg["heads"]) == 0, "mixer.kv_heads must divide heads")
        need(_nonneg_int(cfg.get("conv_size", 0)) and cfg.get("conv_size", 0) <= 64,
             "mixer.conv_size must be an integer in [0, 64]")
        need(isinstance(cfg.get("gate", True), bool), "mixer.gate must be true or false")
        for k in ("norm_eps", "gate_logit_normalizer"):
            if k in cfg:
                need(_pos_number(cfg[k]), f"mixer.{k} must be > 0")
        if "clamp_min" in cfg:
            c = cfg["clamp_min"]
            need(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c <= 0,
                 "mixer.clamp_min must be a finite number <= 0")

    @classmethod
    def _widths(cls, cfg):
        H, KV = cfg["heads"], cfg.get("kv_heads", cfg["heads"])
        dk, dv = cfg["head_k_dim"], cfg["head_v_dim"]
        return H * dk, KV * dk, KV * dv, max(cfg.get("conv_size", 0) - 1, 0)

    @classmethod
    def recurrent_state(cls, cfg, d_model):   # S (H, dv, dk) and the convolutions' carries
        q, c, u, carry = cls._widths(cfg)
        return StateSize(True, F32_BYTES * (cfg["heads"] * cfg["head_v_dim"] * cfg["head_k_dim"]
                                            + carry * (q + c + u)), 0, None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        d = d_model
        self.heads, self.kv_heads = cfg["heads"], cfg.get("kv_heads", cfg["heads"])
        self.dk, self.dv = cfg["head_k_dim"], cfg["head_v_dim"]
        self.K = cfg.get("conv_size", 0)
        self.eps = f32(cfg.get("norm_eps", 1e-5))
        self.normalizer = f32(cfg.get("gate_logit_normalizer", 16))
        self.clamp_min = f32(cfg["clamp_min"]) if "clamp_min" in cfg else None
        Q, C, U, _ = self._widths(cfg)
        R = cfg.get("gate_rank", 16)
        self.query = nn.Linear(d, Q, bias=False)
        self.key = nn.Linear(d, C, bias=False)
        self.value = nn.Linear(d, U, bias=False)
        self.gate_down = nn.Linear(d, R, bias=False)
        self.gate_up = nn.Linear(R, C)
        self.gate = nn.Linear(d, self.heads * self.dv, bias=False) if cfg.get("gate", True) else None
        self.out = nn.Linear(self.heads * self.dv, d, bias=False)
        self._init_convs(Q, C, U)
        self.norm_weight = nn.Parameter(0.5 + torch.rand(self.dv))

    def _run(self, x: Tensor, state: Dict[str, Tensor]):
        """x (B, T, d) after `state` (batched) → (out (B, T, d), state)."""
        B, T, _ = x.shape
        H, KV, dk, dv = self.heads, self.kv_heads, self.dk, self.dv
        new = {}
        q, k, v = self._convolve(self.query(x), self.key(x), self.value(x), state, new)
        alpha = F.logsigmoid(self.gate_up(self.gate_down(x))) / self.normalizer
        if self.clamp_min is not None:
            alpha = alpha.clamp(min=self.clamp_min)
        group = H // KV
        # (B, T, H, ·): each query head's key/value head.
        q = q.view(B, T, H, dk) / math.sqrt(dk)
        k = k.view(B, T, KV, dk).repeat_interleave(group, 2)
        v = v.view(B, T, KV, dv).repeat_interleave(group, 2)
        w = torch.exp(alpha).view(B, T, KV, dk).repeat_interleave(group, 2)
        S, ys = state["S"], []
        for t in range(T):
            S = S * w[:, t, :, None, :] + v[:, t, :, :, None] * k[:, t, :, None, :]
            ys.append(torch.einsum("bhim,bhm->bhi", S, q[:, t]))
        o = torch.stack(ys, 1)                                                    # (B, T, H, dv)
        gate = None if self.gate is None else self.gate(x).view(B, T, H, dv)
        o = gated_rms_norm_heads(o, gate, self.norm_weight, self.eps)
        return self.out(o.reshape(B, T, H * dv)), self._ordered(S, new)

    def _zeros(self, batch, dtype, device):
        Q, C, U, _ = self._widths(self.cfg)
        state = {"S": torch.zeros(batch, self.heads, self.dv, self.dk, dtype=dtype, device=device)}
        return self._conv_zeros(state, (Q, C, U), batch, dtype, device)


MIXER_CLASSES = (Gla,)
