"""recur's golden files: the float64 truth the runtime's parity tests compare against.

Format (little-endian): magic b"RCURGOLD", u32 version (GOLDEN_VERSION),
u32 record count, then per record: u32 name length, name (UTF-8), u32 dtype
(0 f32, 1 f64, 2 i32, 3 u8), u32 ndim, ndim × i64 dims, raw data in C order.

Records, in this order:
  meta          u8 (bytes,)    UTF-8 JSON: config, seed, input_seed, steps, layout,
                               golden_version, reference_version, command (run from
                               the repository root to regenerate the file)
  input         i32 (N,) token ids, or f32 (N, F) frames
  output        f64 (N, out_width)
  layer.{i}     f64 (N, d_model)   residual stream after block i (before final norm/head;
                                   a reversible model's x1 + x2)
  state.{i}.S   f64 (H, C, dv)     linear_attention: after all N positions (causal
  state.{i}.z   f64 (H, C)         models only: an encoder keeps no state between
                                   utterances); C = the feature width (dk for
                                   elu_plus_one and relu, dk² for poly2, m or
                                   2·(m//2) for favor)
  state.{i}.K   f64 (H, N, dk)     softmax_attention (causal only): the KV cache of
  state.{i}.V   f64 (H, N, dv)     all N positions, keys then values
  state.{i}.k_glob  f64 (H, g, dk)  sliding_window (causal only), R = (w−1)·max_h(d_h) + 1:
  state.{i}.k_ring  f64 (H, R, dk)  ring slot p mod R holds position p (global positions
  state.{i}.v_glob  f64 (H, g, dv)  too), glob slot p holds position p < g, slots never
  state.{i}.v_ring  f64 (H, R, dv)  written are 0; with g = 0 the glob records are
                                    written with a 0-length middle dimension (H, 0, ·)
  state.{i}.den f64 (D,)           aft_simple (causal only), D = heads·dk: den = Σ exp(k_p − max),
  state.{i}.max f64 (D,)           max = running max of k per channel,
  state.{i}.num f64 (D,)           num = Σ exp(k_p − max)·v_p
  state.{i}.den    f64 (D,)        aft_local, aft_conv (causal only), s = window: den, max,
  state.{i}.k_ring f64 (s, D)      num as aft_simple's but over the positions p ≤ N − s
  state.{i}.max    f64 (D,)        (those that left the window; max −inf while none has);
  state.{i}.num    f64 (D,)        ring slot p mod s holds position p's k and v (slots
  state.{i}.v_ring f64 (s, D)      never written are 0)
  state.{i}.S       f64 (s, E)     flash (causal only): S = Σ over completed chunks
  state.{i}.kl_buf  f64 (C, s)     [g·C, (g+1)·C) of K^linᵀV; buffer slot p mod C holds
  state.{i}.kq_buf  f64 (C, s)     position p's K^lin, K^quad, V (the last written;
  state.{i}.v_buf   f64 (C, E)     slots ≥ N mod C are stale, from the previous chunk)
  state.{i}.k_ring  f64 (H, R, dk)  block_local with the step form, R = (chunks_before + 1)·chunk:
  state.{i}.v_ring  f64 (H, R, dv)  ring slot p mod R holds position p (slots never written are 0)
  state.{i}.S     f64 (H, P, N)    mamba2: the SSM state per head; the convolution's last K − 1
  state.{i}.conv  f64 (K − 1, W)   inputs, oldest first (zeros before position 0)
  state.{i}.shift.mixer  f64 (c,)  token_shift (causal only), after the layer's mixer records:
  state.{i}.shift.ffn    f64 (c,)  the previous position's shift-1 features of norm1's (and,
                                   with ffn, norm2's) output; c = the shift-1 widths' sum
No "pos" record. Each layer's state records come in sorted-name order (the order in
which the C++ checker concatenates them), the token shift's last (the checker compares
them with the end of the layer's state).
"""

import copy
import json
import struct
import sys
from typing import Dict, List, Tuple

import torch
from torch import Tensor

from .model import REFERENCE_VERSION, RecurModel

assert sys.byteorder == "little", "raw tensor bytes are written and read in host order"

MAGIC = b"RCURGOLD"
GOLDEN_VERSION = 1
DTYPES = {0: torch.float32, 1: torch.float64, 2: torch.int32, 3: torch.uint8}
_CODES = {dtype: code for code, dtype in DTYPES.items()}


def write(path: str, records: List[Tuple[str, Tensor]]) -> None:
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<II", GOLDEN_VERSION, len(records)))
        for name, t in records:
            if t.dtype not in _CODES:
                raise ValueError(f"{name}: dtype {t.dtype} not allowed in a golden file")
            t = t.detach().cpu().contiguous()
            encoded = name.encode("utf-8")
            f.write(struct.pack("<I", len(encoded)) + encoded)
            f.write(struct.pack(f"<II{t.dim()}q", _CODES[t.dtype], t.dim(), *t.shape))
            f.write(t.numpy().tobytes())


def read(path: str) -> Dict[str, Tensor]:
    """{name: tensor} in file order; ValueError on a malformed file."""
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != MAGIC:
        raise ValueError(f"{path}: not a recur golden file")
    pos = len(MAGIC)

    def take(fmt):
        nonlocal pos
        if pos + struct.calcsize(fmt) > len(blob):
            raise ValueError(f"{path}: truncated")
        values = struct.unpack_from(fmt, blob, pos)
        pos += struct.calcsize(fmt)
        return values

    version, count = take("<II")
    if version != GOLDEN_VERSION:
        raise ValueError(f"{path}: golden version {version}, this reader knows {GOLDEN_VERSION}")
    records = {}
    for _ in range(count):
        (length,) = take("<I")
        (name,) = take(f"<{length}s")
        name = name.decode("utf-8")
        code, ndim = take("<II")
        if code not in DTYPES or name in records:
            raise ValueError(f"{path}: record {name!r}: bad dtype {code} or duplicate name")
        shape = take(f"<{ndim}q")
        dtype = DTYPES[code]
        size = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        if pos + size > len(blob):
            raise ValueError(f"{path}: record {name!r} runs past the end of the file")
        data = bytearray(blob[pos:pos + size])
        records[name] = torch.frombuffer(data, dtype=dtype).reshape(shape) if size else torch.empty(shape, dtype=dtype)
        pos += size
    if pos != len(blob):
        raise ValueError(f"{path}: {len(blob) - pos} trailing bytes")
    return records


def meta(records: Dict[str, Tensor]) -> dict:
    """The decoded "meta" record."""
    return json.loads(records["meta"].numpy().tobytes().decode("utf-8"))


def random_inputs(config: dict, steps: int, seed: int) -> Tensor:
    """`steps` inputs for a recur config: token ids uniform in [0, vocab) as i32
    (N,), or frames ~ N(0, 1) as f32 (N, F)."""
    g = torch.Generator().manual_seed(seed)
    inp = config["input"]
    if inp["kind"] == "tokens":
        return torch.randint(0, inp["vocab_size"], (steps,), generator=g, dtype=torch.int32)
    return torch.randn(steps, inp["feature_width"], generator=g, dtype=torch.float32)


def compute(model: RecurModel, inputs: Tensor, info: dict) -> List[Tuple[str, Tensor]]:
    """The records of a golden for `model` (f32 weights, left unchanged) run in
    float64 on `inputs`; `info` goes into "meta" with the two versions."""
    model64 = copy.deepcopy(model).double()
    with torch.no_grad():
        out, layers, state = model64(inputs, return_layers=True)
    info = {**info, "golden_version": GOLDEN_VERSION, "reference_version": REFERENCE_VERSION}
    text = json.dumps(info, sort_keys=True).encode("utf-8")
    records = [("meta", torch.frombuffer(bytearray(text), dtype=torch.uint8)), ("input", inputs), ("output", out)]
    records += [(f"layer.{i}", h) for i, h in enumerate(layers)]
    if model.causal:
        for i, layer_state in enumerate(state.layers):  # S, z / K, V / sorted names (model.State)
            records += [(f"state.{i}.{name}", t) for name, t in layer_state.items()]
    return records
