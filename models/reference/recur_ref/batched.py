"""Batched forward of a RecurModel, for training and fast evaluation.

RecurModel runs one sequence at a time (it is the parity reference); training
needs batches. `forward(model, x)` computes the same function over a batch of
equal-length sequences from the initial state, with the model's own parameters
(so its state_dict is what export writes). Only the mixers the shipped models
use are here: linear_attention (any feature map), softmax_attention and
sliding_window, causal or not, with their rotary position embeddings (§12), token shift
(§13), and rwkv7 with the FFN's token mix (§16; the recurrence in its chunked form). test_training.py checks it against RecurModel.forward.
"""

import math

import torch
from torch import Tensor

from functools import partial

from .mixers import LinearAttention, Rwkv7, SlidingWindowAttention, SoftmaxAttention
from .mixers.rotary import _rotate
from .model import RecurModel, sinusoid

# Chunk length of the causal linear-attention form (docs/attention-math.md §3): memory
# (B, H, T, T) per chunk instead of (B, H, N, N).
CHUNK = 64


def _split(x: Tensor, heads: int, width: int) -> Tensor:
    """(B, N, heads·width) → (B, H, N, width)."""
    b, n, _ = x.shape
    return x.view(b, n, heads, width).transpose(1, 2)


def _merge(o: Tensor) -> Tensor:
    """(B, H, N, width) → (B, N, H·width)."""
    b, h, n, w = o.shape
    return o.transpose(1, 2).reshape(b, n, h * w)


def linear_attention(m: LinearAttention, x: Tensor) -> Tensor:
    """x (B, N, d_model) → (B, N, d_model): docs/attention-math.md §3, chunked when causal."""
    q = m.phi(_rotate(m, _split(m.query(x), m.heads, m.dk), 0))   # (B, H, N, C)
    k = m.phi(_rotate(m, _split(m.key(x), m.heads, m.dk), 0))     # (B, H, N, C)
    v = _split(m.value(x), m.heads, m.dv)              # (B, H, N, dv)
    if not m.causal:
        S = k.transpose(-1, -2) @ v                    # (B, H, C, dv)
        z = k.sum(2, keepdim=True)                     # (B, H, 1, C)
        o = (q @ S) / ((q * z).sum(-1, keepdim=True) + m.eps)
        return m.out(_merge(o))
    b, h, n, c = q.shape
    S = q.new_zeros(b, h, c, m.dv)
    z = q.new_zeros(b, h, 1, c)
    outs = []
    for s in range(0, n, CHUNK):
        qc, kc, vc = q[:, :, s:s + CHUNK], k[:, :, s:s + CHUNK], v[:, :, s:s + CHUNK]
        sim = (qc @ kc.transpose(-1, -2)).tril()                  # (B, H, T, T)
        num = sim @ vc + qc @ S
        den = sim.sum(-1, keepdim=True) + (qc * z).sum(-1, keepdim=True)
        outs.append(num / (den + m.eps))
        S = S + kc.transpose(-1, -2) @ vc
        z = z + kc.sum(2, keepdim=True)
    return m.out(_merge(torch.cat(outs, 2)))


def softmax_attention(m: SoftmaxAttention, x: Tensor) -> Tensor:
    """x (B, N, d_model) → (B, N, d_model): docs/attention-math.md §2, masked when causal."""
    q = _rotate(m, _split(m.query(x), m.heads, m.dk), 0)
    k = _rotate(m, _split(m.key(x), m.heads, m.dk), 0)
    v = _split(m.value(x), m.heads, m.dv)
    s = q @ k.transpose(-1, -2) / math.sqrt(m.dk)     # (B, H, N, N)
    if m.causal:
        n = x.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
    return m.out(_merge(torch.softmax(s, -1) @ v))


def sliding_window(m: SlidingWindowAttention, x: Tensor) -> Tensor:
    """x (B, N, d_model) → (B, N, d_model): softmax attention where m.allowed(t, p)."""
    q = _rotate(m, _split(m.query(x), m.heads, m.dk), 0)
    k = _rotate(m, _split(m.key(x), m.heads, m.dk), 0)
    v = _split(m.value(x), m.heads, m.dv)
    pos = torch.arange(x.shape[1], device=x.device)
    ok = m.allowed(pos[:, None], pos[None, :]).to(x.device)      # (H, N, N)
    s = (q @ k.transpose(-1, -2) / math.sqrt(m.dk)).masked_fill(~ok, float("-inf"))
    return m.out(_merge(torch.softmax(s, -1) @ v))


def token_shift(ts, h: Tensor) -> Tensor:
    """h (B, N, d_model) through the token shift `ts` (model.TokenShift, §13) over whole
    sequences: zeros before the first position and after the last."""
    out, o = h.clone(), 0
    for w, by in ts.segments:
        if by == 1:
            out[:, :, o:o + w] = torch.cat([h.new_zeros(h.shape[0], 1, w), h[:, :-1, o:o + w]], 1)
        elif by == -1:
            out[:, :, o:o + w] = torch.cat([h[:, 1:, o:o + w], h.new_zeros(h.shape[0], 1, w)], 1)
        o += w
    return out


def rwkv7(m: Rwkv7, x: Tensor, shared: dict) -> Tensor:
    """x (B, N, d_model) → (B, N, d_model) from the zero state; `shared`: the pass's rows the
    blocks share (the first RWKV-7 block's v)."""
    return m._prefill(x, m._initial_state(x.shape[0], None), shared=shared, chunked=True)[0]


def ffn_token_mix(ffn, h: Tensor) -> Tensor:
    """h (B, N, d_model) + (h₋₁ − h) ⊙ ffn.token_mix, zeros before the first position."""
    before = torch.cat([h.new_zeros(h.shape[0], 1, h.shape[2]), h[:, :-1]], 1)
    return h + (before - h) * ffn.token_mix


_MIXERS = {LinearAttention: linear_attention, SoftmaxAttention: softmax_attention,
           SlidingWindowAttention: sliding_window, Rwkv7: rwkv7}


def check_supported(model: RecurModel) -> None:
    """ValueError naming the first block whose mixer has no batched form here."""
    for i, block in enumerate(model.blocks):
        if type(block.mixer) not in _MIXERS:
            raise ValueError(f"block {i}: mixer {type(block.mixer).__name__} has no batched form "
                             "(recur_ref/batched.py supports linear_attention, softmax_attention, sliding_window "
                             "and rwkv7)")


def forward(model: RecurModel, x: Tensor) -> Tensor:
    """RecurModel.forward over a batch: x (B, N) token ids or (B, N, F) frames, every
    sequence from the initial state → (B, N, out_width). Same math as the reference's
    parallel form (a different summation order)."""
    check_supported(model)
    inp = model.input
    if inp.kind == "tokens":
        h = inp.embedding[x.long()]
    else:
        x = x.to(model.dtype)
        h = x if inp.projection is None else inp.projection(x).to(model.dtype)  # f32 under autocast too
    if inp.positions is not None:
        if x.shape[1] > len(inp.positions):
            raise ValueError(f"{x.shape[1]} positions exceed max_positions {len(inp.positions)}")
        h = h + inp.positions[:x.shape[1]]
    if inp.sinusoid_base is not None:
        pe = sinusoid(0, x.shape[1], h.shape[-1], inp.sinusoid_base, inp.position_freq).to(h.device, h.dtype)
        h = h + (pe if inp.position_scale is None else pe * inp.position_scale)
    if inp.norm is not None:
        h = inp.norm(h)
    x2 = h   # residual "reversible": the second stream
    shared = {}
    for block in model.blocks:
        mix = _MIXERS[type(block.mixer)]
        if mix is rwkv7:
            mix = partial(rwkv7, shared=shared)
        ts = block.token_shift
        if model.reversible:   # y1 = x1 + Mixer(norm1(x2)); y2 = x2 + FFN(norm2(y1))
            a = block.norm1(x2)
            h = h + mix(block.mixer, a if ts is None else token_shift(ts, a))
            f = block.norm2(h)
            f = f if ts is None or not ts.ffn else token_shift(ts, f)
            x2 = x2 + block.ffn(f if block.ffn.token_mix is None else ffn_token_mix(block.ffn, f))
        elif block.pre_norm:
            a = block.norm1(h)
            h = h + mix(block.mixer, a if ts is None else token_shift(ts, a))
            if block.ffn is not None:
                f = block.norm2(h)
                f = f if ts is None or not ts.ffn else token_shift(ts, f)
                h = h + block.ffn(f if block.ffn.token_mix is None else ffn_token_mix(block.ffn, f))
        else:
            h = block.norm1(h + mix(block.mixer, h))
            if block.ffn is not None:
                h = block.norm2(h + block.ffn(h))
    if model.reversible:
        h = torch.cat([h, x2], dim=-1) if model.concat_streams else h + x2
    if model.final_norm is not None:
        h = model.final_norm(h)
    if model.head is not None:
        h = model.head(h)
        if model.head_activation == "softmax":
            h = torch.softmax(h, -1)
        elif model.head_activation == "log_softmax":
            h = torch.log_softmax(h, -1)
    return h
