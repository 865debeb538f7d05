# Type stubs of the package recur (python/src/recur_py.cc holds the full docstrings).
import enum
import os
from typing import Iterable, Iterator, Literal, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

def version() -> str: ...
def simd_target() -> str: ...
def backends() -> str: ...
def max_threads() -> int: ...
def layouts() -> tuple[str, ...]: ...
def dtypes() -> tuple[str, ...]: ...
def convert(
    weights: Union[str, os.PathLike, Mapping[str, object]],
    config: Optional[Union[str, os.PathLike, dict]] = None,
    output: Optional[Union[str, os.PathLike]] = None,
    *,
    dtype: Optional[str] = None,  # one of dtypes(); None: f32, or a GGUF file's own types
    layout: str = "auto",  # one of layouts()
    group: int = 32,
    state_dict_key: str = "",
    quantize_head: bool = False,
    allow_extra: bool = False,
    tokenizer: Optional[Union[str, os.PathLike]] = None,  # rwkv text format or a tokenizer.json
) -> Union[bytes, dict]:
    """Trained weights -> a recur model: its bytes (output None) or a report after writing output."""

class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    INVALID_MODEL = 2
    UNSUPPORTED = 3
    IO_ERROR = 4
    OUT_OF_MEMORY = 5
    OUT_OF_RANGE = 6
    INVALID_STATE = 7
    INTERNAL = 8

class Error(Exception):
    message: str
    status: Status
    def __init__(self, message: str, status: int = ...) -> None: ...

class InvalidArgument(Error, ValueError): ...
class InvalidModel(Error): ...
class Unsupported(Error): ...
class IoError(Error, OSError): ...
class OutOfMemory(Error, MemoryError): ...
class OutOfRange(Error, IndexError): ...
class InvalidState(Error): ...
class Internal(Error): ...

_Source = Union[str, os.PathLike[str], bytes, bytearray, memoryview]
_Array = npt.ArrayLike

class Model:
    """An immutable, loaded model; thread-safe. Model(path to a .recur or GGUF file, or bytes)."""
    def __init__(self, source: _Source, *, mmap: bool = True, trusted: bool = False) -> None: ...
    @property
    def input_kind(self) -> Literal["tokens", "features"]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def feature_width(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def output_width(self) -> int: ...
    @property
    def max_positions(self) -> int: ...
    @property
    def parameter_count(self) -> int: ...
    @property
    def state_bytes(self) -> int: ...
    @property
    def state_bytes_plain_sums(self) -> int: ...
    @property
    def state_bytes_per_position(self) -> int: ...
    @property
    def max_context_bound(self) -> int: ...
    @property
    def output_kind(self) -> Literal["values", "probabilities", "log_probabilities"]: ...
    @property
    def recurrent(self) -> bool: ...
    @property
    def step_weight_bytes(self) -> int: ...
    @property
    def step_flops(self) -> int: ...
    @property
    def source(self) -> str: ...
    def session(
        self,
        batch: int = 1,
        threads: int = 1,
        max_context: int = 0,
        backend: Optional[str] = None,
        state_sums: Literal["compensated", "plain"] = "compensated",
        prefill_chunk: int = 0,
        weight_packing: Literal["auto", "off", "on"] = "auto",
        int8_activations: Literal["auto", "float", "quantized", "blocks"] = "auto",
    ) -> Session:
        """A new session of `batch` streams in the initial state."""

class Tokenizer:
    """The vocabulary a model carries: text -> token ids -> bytes. Tokenizer(model)."""
    def __init__(self, model: Model) -> None: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def end_of_text(self) -> Optional[int]: ...
    @property
    def model(self) -> Model: ...
    def encode(self, text: Union[str, bytes, bytearray, memoryview]) -> list[int]: ...
    def decode(self, ids: Sequence[int], errors: str = "strict") -> str: ...
    def decode_bytes(self, ids: Sequence[int]) -> bytes: ...
    def token_bytes(self, id: int) -> bytes: ...
    def __len__(self) -> int: ...

class Session:
    """B streams of one model. Calls are serialised by a lock and release the GIL."""
    @property
    def batch(self) -> int: ...
    @property
    def model(self) -> Model: ...
    @property
    def closed(self) -> bool: ...
    @property
    def state_size(self) -> int: ...
    @property
    def backends(self) -> str: ...
    def step(self, x: _Array) -> npt.NDArray[np.float32]:
        """(B,) int32 tokens or (B, F) float32 frames -> (B, output_width) float32."""
    def prefill(self, xs: _Array, outputs: bool = True) -> Optional[npt.NDArray[np.float32]]:
        """(B, N) tokens or (B, N, F) frames -> (B, N, output_width), or None."""
    def encode(self, xs: _Array) -> npt.NDArray[np.float32]:
        """Whole sequences from an empty history -> (B, N, output_width); state unchanged."""
    def reset(self, stream: int = -1) -> None: ...
    def save_state(self, stream: int) -> bytes: ...
    def load_state(self, stream: int, state: Union[bytes, bytearray, memoryview]) -> None: ...
    def fork(self) -> Session: ...
    def generate(
        self,
        prompt: Union[str, bytes, Sequence[int]],
        n: int,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: Union[None, str, Sequence[str]] = None,
        repeat_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        penalty_decay: float = 1.0,
        penalty_last_n: int = 0,
        min_p: float = 0.0,
    ) -> Generation:
        """Reads the prompt, then yields up to n token ids, each read into the session."""
    def close(self) -> None: ...
    def __enter__(self) -> Session: ...
    def __exit__(self, *args: object) -> None: ...

class Generation(Iterator[int]):
    """Session.generate's iterator of token ids."""
    def __iter__(self) -> Generation: ...
    def __next__(self) -> int: ...
    @property
    def generated(self) -> int: ...
    @property
    def rng_state(self) -> int: ...

def sample(
    logits: _Array,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    rng_state: int = 0,
) -> Tuple[int, int]:
    """One token id drawn from one row of logits, and the next rng_state."""
def apply_penalties(
    logits: _Array,
    recent: Sequence[int],
    repeat_penalty: float = 1.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    penalty_decay: float = 1.0,
) -> npt.NDArray[np.float32]:
    """The logits with the penalties on the ids in recent; a new array."""
def stream_text(tokenizer: Tokenizer, ids: Iterable[int], errors: str = "replace") -> Iterator[str]:
    """The text of ids as they come, whole UTF-8 characters only."""
