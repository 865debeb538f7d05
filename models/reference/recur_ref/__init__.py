"""PyTorch reference of recur: the executable definition of the math the C++
runtime must match (docs/attention-math.md §1, §3; models/configs/README.md)."""

from . import checkpoint, fast_transformers_layout, golden, safetensors
from .model import CHUNK, REFERENCE_VERSION, RecurModel, State, validate

__all__ = ["checkpoint", "fast_transformers_layout", "golden", "safetensors",
           "CHUNK", "REFERENCE_VERSION", "RecurModel", "State", "validate"]
