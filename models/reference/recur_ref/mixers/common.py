"""What every mixer module shares besides the base class (base.py): the default chunk, the
predicates of the config rules, the state size record and two small tensor helpers."""

import math
from typing import NamedTuple, Optional

import torch
from torch import nn

# Default chunk length T of the chunked parallel forms (any T ≥ 1 gives the same result), and
# the query block of the quadratic encoder forms.
CHUNK = 64

# Bytes of one state float: state sizes count float32 (what the runtime keeps).
F32_BYTES = 4


# --------------------------------------------------------------------------------------
# Config predicates (validate_mixer and each mixer's check_config)
# --------------------------------------------------------------------------------------

def _pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _nonneg_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _pos_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)


# --------------------------------------------------------------------------------------
# State sizes
# --------------------------------------------------------------------------------------

class StateSize(NamedTuple):
    """f32 state of one stream (batch 1), excluding the position counter.
    Total bytes after n positions = fixed_bytes + per_position_bytes · n, n ≤ bound."""
    recurrent: bool            # False: no step form (encoder only)
    fixed_bytes: int
    per_position_bytes: int    # > 0: the state grows with N (a KV cache)
    bound: Optional[int]       # max positions (config's max_length), None: given at session creation

    @property
    def grows(self) -> bool:
        return self.per_position_bytes > 0


# --------------------------------------------------------------------------------------
# Tensor helpers
# --------------------------------------------------------------------------------------

def _dtype(m: nn.Module):
    for p in m.parameters():
        return p.dtype, p.device
    return torch.get_default_dtype(), None


def _check_pos(pos: int, n: int, bound: int, what: str, mixer: str):
    if pos + n > bound:
        raise ValueError(f"mixer {mixer}: positions {pos}..{pos + n - 1} exceed {what} {bound}")


def by_positions(parallel, x: torch.Tensor, state: dict):
    """The RNN form of a mixer whose parallel(x, state, chunk) runs the recurrence: `parallel`
    on one position at a time, the same arguments and result."""
    outs = []
    for t in range(x.shape[0]):
        y, state = parallel(x[t:t + 1], state, 1)
        outs.append(y)
    return torch.cat(outs), state
