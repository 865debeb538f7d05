"""Softmax attention (§2): the KV cache as its state."""

import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn

from .base import Mixer
from .common import F32_BYTES, StateSize, _check_pos, _dtype, _pos_int
from .rotary import _rotate

__all__ = ["SoftmaxAttention"]


class SoftmaxAttention(Mixer):
    """softmax(Q Kᵀ / √dk) V per head (causal: mask j > i). Step form: the KV cache.

    Tensors: query (H·dk, d), key (H·dk, d), value (H·dv, d), out (d, H·dv) (.weight, .bias).
    Per-stream state: the KV cache {"K" (H, P, dk), "V" (H, P, dv)} of the P positions so
    far, unbounded here (the runtime bounds it by a max_context chosen at session creation).
    Batched state (causal), allocated once for max_context positions (given to initial_state,
    required; stepping past it raises ValueError):
      k (B, H, max_context, dk), v (B, H, max_context, dv), pos.
    With "rotary" (§12), q and k are turned by their position before the scores, so the cache
    holds turned keys; a stream's position is its cache length P.
    """
    TYPE = "softmax_attention"
    KEYS = ({"heads", "dk", "dv"}, {"causal", "rotary"})
    ROTARY_WIDTH = "dk"

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        return StateSize(True, 0, F32_BYTES * cfg["heads"] * (cfg["dk"] + cfg["dv"]), None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)

    def _qkv(self, x, pos: int = 0):
        """x ([B,] N, d_model) at positions pos.. → q, k ([B,] H, N, dk) (turned by the rotary,
        if any), v ([B,] H, N, dv)."""
        lead, H = x.shape[:-1], self.heads
        q = self.query(x).view(*lead, H, self.dk).transpose(-3, -2)
        k = self.key(x).view(*lead, H, self.dk).transpose(-3, -2)
        v = self.value(x).view(*lead, H, self.dv).transpose(-3, -2)
        return _rotate(self, q, pos), _rotate(self, k, pos), v

    def _output(self, o: Tensor) -> Tensor:
        """(H, N, dv) → out(concat heads) (N, d_model)."""
        return self.out(o.transpose(0, 1).reshape(o.shape[1], -1))

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """The state before the first position: an empty KV cache."""
        return {"K": torch.zeros(self.heads, 0, self.dk, dtype=dtype),
                "V": torch.zeros(self.heads, 0, self.dv, dtype=dtype)}

    def _attend(self, q: Tensor, K: Tensor, V: Tensor, first: Optional[int]) -> Tensor:
        """q (H, T, dk) over keys K (H, P, dk) and values V (H, P, dv) → (H, T, dv).
        first: the position of q's first row, masking keys j > first + t (causal);
        None: no mask (every key is seen)."""
        s = q @ K.transpose(-1, -2) / math.sqrt(self.dk)                 # (H, T, P)
        if first is not None:
            i = torch.arange(q.shape[1])[:, None] + first
            j = torch.arange(K.shape[1])[None, :]
            s = s.masked_fill(j > i, float("-inf"))
        return torch.softmax(s, -1) @ V

    def parallel(self, x: Tensor, state: Dict[str, Tensor], chunk: int):
        """Chunked parallel form: x (N, d_model) after the state's P positions.
        Chunk c (rows c..c+T−1) attends to the P + c + T keys up to its last
        position, causally masked; chunk ≥ N is the plain masked softmax(QKᵀ)V.
        Returns (out (N, d_model), state with x's keys and values appended)."""
        P = state["K"].shape[1]
        q, k, v = self._qkv(x, P)
        K, V = torch.cat([state["K"], k], 1), torch.cat([state["V"], v], 1)
        outs = []
        for c in range(0, len(x), chunk):
            end = P + min(c + chunk, len(x))
            outs.append(self._attend(q[:, c:c + chunk], K[:, :end], V[:, :end], P + c))
        return self._output(torch.cat(outs, 1)), {"K": K, "V": V}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor]):
        """RNN form: per position, append k_i, v_i to the cache, then attend over
        all of it (no mask needed). Same arguments and result as `parallel`."""
        q, k, v = self._qkv(x, state["K"].shape[1])
        K, V = state["K"], state["V"]
        outs = []
        for i in range(len(x)):
            K, V = torch.cat([K, k[:, i:i + 1]], 1), torch.cat([V, v[:, i:i + 1]], 1)
            outs.append(self._attend(q[:, i:i + 1], K, V, None))   # (H, 1, dv)
        return self._output(torch.cat(outs, 1)), {"K": K, "V": V}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor]):
        """Non-causal (encoder) form: every position attends to the state's keys
        (none for a whole utterance) and all of x's. Same result shape as `parallel`."""
        q, k, v = self._qkv(x, state["K"].shape[1])
        K, V = torch.cat([state["K"], k], 1), torch.cat([state["V"], v], 1)
        return self._output(self._attend(q, K, V, None)), {"K": K, "V": V}

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        q, k, v = self._qkv(x)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)
        if self.causal:
            s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        o = torch.softmax(s, -1) @ v
        return self.out(o.transpose(1, 2).reshape(B, N, -1))

    def _initial_state(self, batch, max_context):
        if not _pos_int(max_context):
            raise ValueError("mixer softmax_attention: initial_state needs max_context (a positive integer: "
                             "the KV cache is allocated for that many positions)")
        dt, dev = _dtype(self)
        return {"k": torch.zeros(batch, self.heads, max_context, self.dk, dtype=dt, device=dev),
                "v": torch.zeros(batch, self.heads, max_context, self.dv, dtype=dt, device=dev),
                "pos": torch.tensor(0)}

    def _prefill(self, x, state):
        B, N, _ = x.shape
        pos, T = int(state["pos"]), state["k"].shape[2]
        _check_pos(pos, N, T, "max_context", self.TYPE)
        q, k, v = self._qkv(x, pos)
        K, V = state["k"].clone(), state["v"].clone()
        K[:, :, pos:pos + N], V[:, :, pos:pos + N] = k, v
        s = q @ K[:, :, :pos + N].transpose(-1, -2) / math.sqrt(self.dk)       # (B, H, N, pos+N)
        i = torch.arange(N)[:, None] + pos
        j = torch.arange(pos + N)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
        o = torch.softmax(s, -1) @ V[:, :, :pos + N]
        return self.out(o.transpose(1, 2).reshape(B, N, -1)), {"k": K, "v": V, "pos": torch.tensor(pos + N)}


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (SoftmaxAttention,)
