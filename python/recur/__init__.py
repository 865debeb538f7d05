"""recur: transformers as RNNs on the CPU, from Python.

The binding of recur's C API (recur.h). Load a model, make a session of B
streams, and step it one element at a time, prefill a prompt, or encode
whole sequences:

    import numpy as np, recur
    model = recur.Model("model.recur")
    with model.session(batch=1) as s:
        y = s.step(np.array([3], dtype=np.int32))   # (1, model.output_width)

Every failure raises a subclass of recur.Error carrying the runtime's
status (.status, a recur.Status) and message.
"""

import codecs as _codecs
import enum as _enum
import json as _json
import os as _os
import tempfile as _tempfile

import numpy as _np

from . import _recur
from ._recur import (Generation, Model, Session, Tokenizer, backends, dtypes, layouts, max_threads,
                     simd_target)

__all__ = [
    "Model", "Session", "Tokenizer", "Status", "Error", "InvalidArgument", "InvalidModel",
    "Unsupported", "IoError", "OutOfMemory", "OutOfRange", "InvalidState", "Internal", "backends",
    "dtypes", "layouts", "max_threads", "simd_target", "version", "convert", "Generation",
    "stream_text", "sample", "apply_penalties",
]

__version__ = "0.1.0"


def stream_text(tokenizer, ids, errors="replace"):
    """Yields the text of token ids as they come (from Session.generate, say):
    each id's bytes are decoded as UTF-8 as far as they form whole characters,
    and a character cut between two tokens comes out with the later one. An
    empty piece is not yielded; what is left at the end (bytes that never
    became a character) is decoded with `errors` ("replace": U+FFFD).

        tok = recur.Tokenizer(model)
        for piece in recur.stream_text(tok, s.generate("User: hi\\n\\nAssistant:", 200)):
            print(piece, end="", flush=True)
    """
    decoder = _codecs.getincrementaldecoder("utf-8")(errors)
    for i in ids:
        piece = decoder.decode(tokenizer.token_bytes(i))
        if piece:
            yield piece
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail


def version():
    """The runtime library's version, "MAJOR.MINOR.PATCH"."""
    return _recur.version()


def _logits_row(logits, call):
    row = _float32(logits)
    if row.ndim != 1:
        raise InvalidArgument(f"{call}: logits must be one row (1-D), got shape {row.shape}",
                              int(Status.INVALID_ARGUMENT))
    return row


def sample(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, rng_state=0):
    """Draws a token id from one row of logits with the library's sampler
    (recur_sample: temperature 0 or top_k 1 greedy; top_k 0 all tokens; top_p in
    (0, 1]; min_p in [0, 1]) and returns (id, rng_state): pass the returned
    rng_state to the next draw, as Session.generate does, so a seed gives the
    same ids on every platform.

        logits = s.step(np.array([token], np.int32))[0]
        token, rng = recur.sample(logits, temperature=0.8, top_p=0.9, rng_state=rng)
    """
    return _recur._sample(_logits_row(logits, "sample"), float(temperature), int(top_k),
                          float(top_p), float(min_p), int(rng_state))


def apply_penalties(logits, recent, repeat_penalty=1.0, presence_penalty=0.0,
                    frequency_penalty=0.0, penalty_decay=1.0):
    """One row of logits with the penalties on the token ids in `recent` (oldest
    first) applied as recur_apply_penalties applies them (docs/generate.md
    "Penalties"); returns a new float32 array, the input unchanged."""
    row = _logits_row(logits, "apply_penalties").copy()
    ids = _np.asarray(recent)
    if ids.size and (ids.dtype.kind not in "iu" or ids.min() < -2**31 or ids.max() >= 2**31):
        raise InvalidArgument("apply_penalties: recent must hold int32 token ids",
                              int(Status.INVALID_ARGUMENT))
    ids = _np.ascontiguousarray(ids.reshape(-1), dtype=_np.int32)
    _recur._apply_penalties(row, ids, float(repeat_penalty), float(presence_penalty),
                            float(frequency_penalty), float(penalty_decay))
    return row


class Status(_enum.IntEnum):
    """recur_status: the C API's error codes."""

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
    """A failing recur call: .status (a Status) and .message (the runtime's)."""

    def __init__(self, message, status=Status.INTERNAL):
        super().__init__(message)
        self.message = message
        self.status = Status(status)


class InvalidArgument(Error, ValueError):
    """A bad argument: shape, size, closed session, option value."""


class InvalidModel(Error):
    """Model bytes that fail verification or validation."""


class Unsupported(Error):
    """Valid, but not supported by this build or this model (e.g. step on an encoder)."""


class IoError(Error, OSError):
    """A model file that could not be opened, mapped or read."""


class OutOfMemory(Error, MemoryError):
    """An allocation failed."""


class OutOfRange(Error, IndexError):
    """A token id, stream index or position past its limit."""


class InvalidState(Error):
    """A state blob that does not fit this session."""


class Internal(Error):
    """A bug in recur."""


_recur._set_error_classes({
    Status.INVALID_ARGUMENT: InvalidArgument,
    Status.INVALID_MODEL: InvalidModel,
    Status.UNSUPPORTED: Unsupported,
    Status.IO_ERROR: IoError,
    Status.OUT_OF_MEMORY: OutOfMemory,
    Status.OUT_OF_RANGE: OutOfRange,
    Status.INVALID_STATE: InvalidState,
    Status.INTERNAL: Internal,
})

Model.__module__ = "recur"
Session.__module__ = "recur"


def _float32(array):
    if hasattr(array, "detach"):  # a torch tensor, without importing torch here
        array = array.detach().cpu().numpy()
    return _np.ascontiguousarray(array, dtype=_np.float32)


def convert(weights, config=None, output=None, *, dtype=None, layout="auto", group=32,
            state_dict_key="", quantize_head=False, allow_extra=False, tokenizer=None):
    """Converts trained weights into a recur model, as `recur-convert` does.

    weights: a path (str or os.PathLike) to a .safetensors file, a torch.save
    checkpoint (.pt, .pth, .bin, .ckpt; a nested state dict is chosen with
    state_dict_key, "model" or "model.encoder") or a GGUF file (llama.cpp's
    architecture rwkv7 or mamba2, layout "gguf"), or a mapping of tensor names to
    arrays (numpy arrays, torch tensors, anything numpy converts), stored as
    float32. config: a path to the config JSON or the config as a dict
    (models/configs/README.md has the contract), or None for a checkpoint
    whose tensors give its configuration (BlinkDL's RWKV-7 .pth, layout "rwkv") and for
    a GGUF file (its metadata gives it). dtype: the blocks' weight matrices as one of
    recur.dtypes(), e.g. "bf16" or "int8"; None: f32, and for a GGUF file the types it
    stores them (and the head) in, Q4_0 as int4 in groups of 32, Q4_K, Q5_K and Q6_K as
    q4_k, q5_k and q6_k (which recur-convert makes from those files only; group: int4
    inputs per scale, 32, 64, 128 or 256; quantize_head: head.weight too). layout: one of
    recur.layouts() ("auto": the config's "layout" key, else detected from the
    config). allow_extra: unused tensors are warnings. tokenizer: a path to a
    vocabulary in the rwkv package's text format (lines "ID LITERAL
    BYTE_LENGTH", as its rwkv_vocab_v20230424.txt) or a Hugging Face
    tokenizer.json of a byte-level BPE (GPT-2's, GPT-NeoX's; a name ending in
    .json) for the model to carry
    (recur.Tokenizer reads it); a recur config may name one as "tokenizer"
    instead, relative to the config file's folder (to the working directory
    for a config given as a dict), and a GGUF file carries its own.

    Returns the model's bytes (for recur.Model(bytes)) when output is None;
    otherwise writes the file output atomically and returns a report (a dict:
    layout, tensors, file_bytes, narrow_tensors, source_hash, warnings).
    The model is loaded by the runtime before it is returned or written.

    Raises InvalidArgument (a bad config, missing, extra or mis-shaped tensors,
    non-finite values, a bad option; the message names it), IoError (a file
    that cannot be read or written), Unsupported (a checkpoint format or option
    the converter does not read), InvalidModel (the runtime refuses the result).
    """
    with _tempfile.TemporaryDirectory(prefix="recur-convert-") as tmp:
        if isinstance(weights, (str, _os.PathLike)):
            weights_path = _os.fspath(weights)
        else:
            weights_path = _os.path.join(tmp, "weights.safetensors")
            _recur._write_safetensors(weights_path,
                                      {str(k): _float32(v) for k, v in dict(weights).items()})
        if config is None:
            config_path = ""
        elif isinstance(config, dict):
            if isinstance(config.get("tokenizer"), str) and config["tokenizer"]:
                config = dict(config, tokenizer=_os.path.abspath(config["tokenizer"]))
            config_path = _os.path.join(tmp, "config.json")
            with open(config_path, "w") as f:
                _json.dump(config, f)
        else:
            config_path = _os.fspath(config)
        output_path = _os.path.join(tmp, "model.recur") if output is None else _os.fspath(output)
        report = _recur._convert_files(weights_path, config_path, output_path,
                                       "" if dtype is None else dtype, layout,
                                       int(group), state_dict_key, bool(quantize_head),
                                       bool(allow_extra),
                                       "" if tokenizer is None else _os.fspath(tokenizer))
        if output is None:
            with open(output_path, "rb") as f:
                return f.read()
        return report
