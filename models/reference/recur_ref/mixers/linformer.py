"""Linformer (§7), encoder only."""

import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn

from .base import Mixer, _EncoderOnly
from .common import _pos_int
from .softmax_attention import SoftmaxAttention

__all__ = ["LINFORMER_SHARING", "Linformer"]


LINFORMER_SHARING = ("none", "headwise", "kv", "layerwise")


class Linformer(_EncoderOnly, Mixer):
    """Per head h: K'_h = E_h K_h, V'_h = F_h V_h (E, F ∈ R^{k×n}), A = softmax(Q K'ᵀ/√dk) V'.
    Config: heads, dk, dv, seq_len n, proj_dim k, sharing, causal (must be false).
    sharing → tensors (besides query, key, value, out as softmax_attention):
      'none'      E (H, k, n), F (H, k, n)
      'headwise'  E (k, n), F (k, n)          (shared by all heads)
      'kv'        E (k, n)                    (F = E, shared by heads)
      'layerwise' E (k, n)                    (F = E, shared by heads and by every layerwise
                  block of the model: RecurModel builds the first layerwise block's E and
                  hands that same Parameter to the others (`E`; training sees one tensor);
                  state_dict, and so the export, holds blocks.{i}.mixer.E for each such
                  block, identical copies)
    A sequence of N < n positions uses E[:, :N], F[:, :N] (= keys/values of absent positions
    are zero, i.e. padding to n); N > n raises ValueError. No recurrent form, no state.
    """
    TYPE = "linformer"
    USES_POS = True
    KEYS = ({"heads", "dk", "dv", "seq_len", "proj_dim"}, {"sharing", "causal"})
    ENCODER_ONLY = True

    @classmethod
    def check_config(cls, cfg, need, causal):
        need(not causal, "linformer is encoder-only: mixer.causal must be false")
        need(_pos_int(cfg["seq_len"]), "mixer.seq_len must be a positive integer")
        need(_pos_int(cfg["proj_dim"]), "mixer.proj_dim must be a positive integer")
        s = cfg.get("sharing", "none")
        need(s in LINFORMER_SHARING, f"unknown mixer.sharing {s!r}; expected one of {list(LINFORMER_SHARING)}")

    def __init__(self, cfg, d_model, E: Optional[nn.Parameter] = None):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.n, self.k = cfg["seq_len"], cfg["proj_dim"]
        self.sharing = cfg.get("sharing", "none")
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        shape = (self.heads, self.k, self.n) if self.sharing == "none" else (self.k, self.n)
        if E is not None:                  # a later layerwise block: the model's shared E
            if self.sharing != "layerwise" or tuple(E.shape) != shape:
                raise ValueError(f"a shared linformer E {tuple(E.shape)} needs sharing 'layerwise' and shape {shape}")
            self.E = E
        else:
            self.E = nn.Parameter(torch.randn(*shape) / math.sqrt(self.n))
        if self.sharing in ("none", "headwise"):
            self.F = nn.Parameter(torch.randn(*shape) / math.sqrt(self.n))

    _qkv = SoftmaxAttention._qkv
    _output = SoftmaxAttention._output

    NO_FORM_WHY = "the projections E, F mix all positions"

    # Per stream.

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x (N, d_model) as a whole utterance (positions
        0..N−1, N ≤ seq_len) → (out (N, d_model), state unchanged)."""
        if pos != 0:
            raise ValueError("a linformer mixer runs on a whole utterance from position 0")
        n = len(x)
        if n > self.n:
            raise ValueError(f"mixer linformer: sequence length {n} exceeds seq_len {self.n}")
        q, k, v = self._qkv(x)                                             # (H, N, ·)
        E = self.E[..., :n]
        Fm = (self.F if self.sharing in ("none", "headwise") else self.E)[..., :n]
        eq = "hkn,hnd->hkd" if E.dim() == 3 else "kn,hnd->hkd"
        k2, v2 = torch.einsum(eq, E, k), torch.einsum(eq, Fm, v)           # (H, k, dk), (H, k, dv)
        a = torch.softmax(q @ k2.transpose(-1, -2) / math.sqrt(self.dk), -1)   # (H, N, k)
        return self._output(a @ v2), state

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        if N > self.n:
            raise ValueError(f"mixer linformer: sequence length {N} exceeds seq_len {self.n}")
        q, k, v = self._qkv(x)                                           # (B, H, N, ·)
        E = self.E[..., :N]
        Fm = (self.F if hasattr(self, "F") else self.E)[..., :N]
        eq = "hkn,bhnd->bhkd" if E.dim() == 3 else "kn,bhnd->bhkd"
        k2, v2 = torch.einsum(eq, E, k), torch.einsum(eq, Fm, v)
        a = torch.softmax(q @ k2.transpose(-1, -2) / math.sqrt(self.dk), -1)
        return self.out((a @ v2).transpose(1, 2).reshape(B, N, -1))


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (Linformer,)
