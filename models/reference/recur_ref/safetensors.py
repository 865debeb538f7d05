"""A pure-Python reader and writer of the safetensors format.

File: u64 little-endian N; N bytes of JSON header, padded with spaces to a
multiple of 8; then the data segment. The header maps each tensor name to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data
segment) plus an optional "__metadata__" {str: str}. This writer stores tensors
in sorted-name order, contiguous, in little-endian C order.
"""

import json
import math
import struct
import sys
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

assert sys.byteorder == "little", "raw tensor bytes are written and read in host order"

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def tensor_bytes(t: Tensor) -> bytes:
    """The raw bytes of t in C order (any dtype, including bf16 and 0-d)."""
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def write(path: str, tensors: Dict[str, Tensor], metadata: Optional[Dict[str, str]] = None) -> None:
    header, chunks, offset = {}, [], 0
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError("safetensors metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    for name in sorted(tensors):
        if name == "__metadata__":
            raise ValueError("'__metadata__' is not a tensor name")
        t = tensors[name]
        if t.dtype not in _NAMES:
            raise ValueError(f"{name}: dtype {t.dtype} has no safetensors name")
        data = tensor_bytes(t)
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in chunks:
            f.write(data)


def read(path: str) -> Tuple[Dict[str, Tensor], Dict[str, str]]:
    """Returns ({name: tensor} in file order, metadata). Raises ValueError on a
    malformed file: unknown dtype, sizes that disagree with shapes, data that
    overlaps, leaves holes, or does not fill the file exactly."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack_from("<Q", blob)
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} exceeds the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    metadata = header.pop("__metadata__", None) or {}
    tensors, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        if info["dtype"] not in DTYPES:
            raise ValueError(f"{path}: {name}: unknown dtype {info['dtype']}")
        dtype, shape = DTYPES[info["dtype"]], info["shape"]
        begin, stop = info["data_offsets"]
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if begin != end or stop - begin != size:
            raise ValueError(f"{path}: {name}: bad data_offsets {[begin, stop]} for shape {shape} {info['dtype']}")
        end = stop
        if size == 0:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            tensors[name] = torch.frombuffer(bytearray(data[begin:stop]), dtype=dtype).reshape(shape)
    if end != len(data):
        raise ValueError(f"{path}: data segment is {len(data)} bytes, tensors cover {end}")
    return tensors, metadata
