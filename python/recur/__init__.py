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

import enum as _enum

from . import _recur
from ._recur import Model, Session, backends, max_threads, simd_target

__all__ = [
    "Model", "Session", "Status", "Error", "InvalidArgument", "InvalidModel", "Unsupported",
    "IoError", "OutOfMemory", "OutOfRange", "InvalidState", "Internal", "backends",
    "max_threads", "simd_target", "version",
]

__version__ = "0.1.0"


def version():
    """The runtime library's version, "MAJOR.MINOR.PATCH"."""
    return _recur.version()


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
