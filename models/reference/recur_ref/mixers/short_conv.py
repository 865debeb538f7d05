"""What the gated recurrent mixers of flash-linear-attention's kind share (Gated DeltaNet,
GLA; §18, §19): the short causal convolution of a projection with its carried inputs, the
output's RMS norm per head with its swish gate, and their per-stream and batched forms."""

import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .common import CHUNK, _dtype, by_positions


def f32(x: float) -> float:
    """x rounded to float32, as the model file stores it."""
    return float(torch.tensor(x, dtype=torch.float32))


def short_conv(x: Tensor, weight: Tensor, carry: Tensor):
    """Depthwise causal convolution then silu: x (B, T, C) after carry (B, K−1, C) (the
    previous K−1 inputs, oldest first; zeros before position 0), weight (C, K), column K−1 the
    current position's → (y (B, T, C), the last K−1 inputs)."""
    K = weight.shape[1]
    full = torch.cat([carry, x], 1)                                   # (B, K−1+T, C)
    T = x.shape[1]
    y = sum(full[:, j:j + T] * weight[:, j] for j in range(K))
    return F.silu(y), full[:, full.shape[1] - (K - 1):]


def gated_rms_norm_heads(o: Tensor, gate: Optional[Tensor], weight: Tensor, eps: float) -> Tensor:
    """o (..., heads, dv) → o/√(mean(o²) + eps) ⊙ weight per head, times silu(gate) (same
    shape) unless gate is None."""
    o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + eps) * weight
    return o if gate is None else o * F.silu(gate)


class StateForms:
    """The forms of a mixer whose batched _run(x (B, T, d), state) → (out, state) runs the
    recurrence position by position from a state of fixed size (_zeros(batch, dtype, device):
    S and the convolutions' carries), and its q, k, v convolutions (self.K wide, 0: none)."""

    def _init_convs(self, q: int, k: int, v: int):
        """query_conv, key_conv, value_conv (width, K) at nn.Conv1d's default range (K > 0)."""
        if self.K:
            bound = 1 / math.sqrt(self.K)
            conv = lambda c: nn.Parameter(torch.empty(c, self.K).uniform_(-bound, bound))  # noqa: E731
            self.query_conv, self.key_conv, self.value_conv = conv(q), conv(k), conv(v)

    def _convolve(self, q: Tensor, k: Tensor, v: Tensor, state: Dict[str, Tensor], new: Dict[str, Tensor]):
        """q, k, v (B, T, ·) through their convolutions after the carries of `state`, the new
        carries into `new`; unchanged when K = 0."""
        if not self.K:
            return q, k, v
        q, new["conv_q"] = short_conv(q, self.query_conv, state["conv_q"])
        k, new["conv_k"] = short_conv(k, self.key_conv, state["conv_k"])
        v, new["conv_v"] = short_conv(v, self.value_conv, state["conv_v"])
        return q, k, v

    def _conv_zeros(self, state: Dict[str, Tensor], widths, batch, dtype, device):
        """Zero carries (batch, K−1, width) for q, k, v (widths) into `state` (K > 0), by name."""
        if self.K:
            for key, width in sorted(zip(("conv_q", "conv_k", "conv_v"), widths)):
                state[key] = torch.zeros(batch, self.K - 1, width, dtype=dtype, device=device)
        return state

    @staticmethod
    def _ordered(S: Tensor, carries: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """The state in the runtime's (and the goldens') order: S, then the carries by name."""
        return {"S": S, **{key: carries[key] for key in sorted(carries)}}

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S and the carries zero."""
        return {key: v[0] for key, v in self._zeros(1, dtype, None).items()}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], chunk: int):
        """x (N, d_model) after `state` → (out (N, d_model), state). chunk: unused (the
        recurrence runs position by position, as the runtime's prefill does)."""
        y, new = self._run(x[None], {key: v[None] for key, v in state.items()})
        return y[0], {key: v[0] for key, v in new.items()}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor]):
        """RNN form, one position at a time: the same arguments and result as `parallel`."""
        return by_positions(self.parallel, x, state)

    def forward(self, x):
        self._check_x(x, 3)
        return self._prefill(x, self._initial_state(x.shape[0], None))[0]

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return self._zeros(batch, dt, dev)

    def _prefill(self, x, state, chunk: int = CHUNK):
        return self._run(x, state)
