"""Block-local attention: Hugging Face Reformer's LocalSelfAttention (§14)."""

import math
from typing import Dict

import torch
from torch import Tensor, nn

from .base import Mixer
from .common import F32_BYTES, StateSize, _dtype, _nonneg_int, _pos_int
from .sliding_window import SlidingWindowAttention
from .softmax_attention import SoftmaxAttention

__all__ = ["BLOCK_LOCAL_MASKED", "BlockLocalAttention", "block_local_streamable"]


def block_local_streamable(cfg: dict) -> bool:
    """A block_local config with the step form: causal, chunks_after 0, chunks_before ≤ 1 (then
    the cyclically wrapped chunks hold only later, masked positions)."""
    return cfg.get("causal", True) is True and cfg.get("chunks_after", 0) == 0 and cfg.get("chunks_before", 1) <= 1


BLOCK_LOCAL_MASKED = -1e9   # transformers' mask_value_float32: a masked key's score (not −inf)


class BlockLocalAttention(Mixer):
    """Hugging Face transformers' Reformer LocalSelfAttention (eval, full sequence, no user
    attention mask beyond the model's own padding), per stream and head.

    Config: heads H, dk, dv, chunk c ≥ 1, chunks_before b ≥ 0 (default 1), chunks_after a ≥ 0
    (default 0), causal (the mask j > i, transformers' is_decoder; default true), pad_multiple
    (a multiple of c; default c), pad_above (≤ c; default c). Tensors: query, key, value, out
    (as softmax_attention; transformers' have no bias: zeros).
    Positions 0..T−1:
      n = T, or T rounded up to a multiple of pad_multiple when T > pad_above and T is not
      one already; slots T..n−1 are pads (transformers pads the input; they are never keys).
      score(i, j) = q_i · k_j / √dk; masked keys score −1e9 (not −inf): pads j ≥ T, and
      j > i when causal.
      n ≤ c: query i over all slots j < n. Else (m = n / c chunks): query i of chunk
      g = i // c over the slots of chunks (g + o) mod m, o = −b..a — cyclic (chunk 0 looks back
      at chunk m − 1), and a chunk listed twice (m ≤ b + a) counts twice.
      y_i = Σ softmax(scores) v_j; Mixer(x) = out(concat_h y).
    Step form (block_local_streamable: causal, a = 0, b ≤ 1): the wrapped chunks hold only
    later, masked positions, so query i sees exactly the positions c·(i//c − b) (at least 0)
    to i, whatever T. State: k_ring (H, R, dk), v_ring (H, R, dv), R = (b + 1)·c: position p
    in slot p mod R; slots never written are 0. Otherwise an encoder (no state): the full form
    with its masks, its wrap and its repeats.
    """
    TYPE = "block_local"
    USES_POS = True
    KEYS = ({"heads", "dk", "dv", "chunk"}, {"chunks_before", "chunks_after", "causal", "pad_multiple", "pad_above"})

    @classmethod
    def config_causal(cls, cfg):
        """"causal" is the mask: the step form needs block_local_streamable (an encoder otherwise)."""
        return block_local_streamable(cfg)

    @classmethod
    def check_config(cls, cfg, need, causal):
        c = cfg["chunk"]
        need(_pos_int(c), f"mixer.chunk must be a positive integer, got {c!r}")
        for k in ("chunks_before", "chunks_after"):
            need(_nonneg_int(cfg.get(k, 0)), f"mixer.{k} must be an integer >= 0, got {cfg.get(k)!r}")
        pm = cfg.get("pad_multiple", c)
        need(_pos_int(pm) and pm % c == 0, f"mixer.pad_multiple must be a positive multiple of chunk ({c}), got {pm!r}")
        pa = cfg.get("pad_above", c)
        need(_nonneg_int(pa) and pa <= c, f"mixer.pad_above must be an integer in [0, chunk ({c})], got {pa!r}")

    @classmethod
    def recurrent_state(cls, cfg, d_model):   # the step form's ring of (chunks_before + 1)·chunk positions
        ring = (cfg.get("chunks_before", 1) + 1) * cfg["chunk"]
        return StateSize(True, F32_BYTES * cfg["heads"] * ring * (cfg["dk"] + cfg["dv"]), 0, None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv, self.c = cfg["heads"], cfg["dk"], cfg["dv"], cfg["chunk"]
        self.before, self.after = cfg.get("chunks_before", 1), cfg.get("chunks_after", 0)
        self.mask = cfg.get("causal", True)
        self.pad_multiple, self.pad_above = cfg.get("pad_multiple", self.c), cfg.get("pad_above", self.c)
        self.R = (self.before + 1) * self.c
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)

    _qkv = SoftmaxAttention._qkv
    _output = SoftmaxAttention._output

    def _no_rnn(self):
        why = "it is non-causal (causal: false)" if not self.mask else \
            "chunks_after > 0 or chunks_before > 1 (an encoder: its look-adjacent chunks wrap around the sequence)"
        raise ValueError(f"mixer block_local: no recurrent (step) form because {why}; use forward(x) over the "
                         "whole sequence")

    def padded_length(self, T: int) -> int:
        """n: T padded as transformers' ReformerModel pads it."""
        if T > self.pad_above and T % self.pad_multiple != 0:
            return (T // self.pad_multiple + 1) * self.pad_multiple
        return T

    def full(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """The full-sequence form as transformers computes it: q, k ([B,] H, T, dk), v
        ([B,] H, T, dv) → ([B,] H, T, dv). Pads (zero rows here; masked, so their content does
        not matter), chunks, _look_adjacent's cyclic concatenation, −1e9 masks."""
        T = q.shape[-2]
        n = self.padded_length(T)
        pad = lambda t: torch.cat([t, t.new_zeros(*t.shape[:-2], n - T, t.shape[-1])], -2)
        q, k, v = pad(q), pad(k) / math.sqrt(self.dk), pad(v)
        idx = torch.arange(n)
        if n <= self.c:
            s = q @ k.transpose(-1, -2)                                         # (.., n, n)
            qi, kj = idx[:, None], idx[None, :]
        else:
            m = n // self.c
            chunks = lambda t: t.reshape(*t.shape[:-2], m, self.c, t.shape[-1])
            q, k, v = chunks(q), self._adjacent(chunks(k)), self._adjacent(chunks(v))
            s = q @ k.transpose(-1, -2)                                         # (.., m, c, (b+1+a)·c)
            qi = idx.view(m, self.c)[:, :, None]
            kj = self._adjacent(idx.view(m, self.c, 1))[..., 0][:, None, :]
        ok = kj < T
        if self.mask:
            ok = ok & (kj <= qi)
        s = torch.where(ok, s, torch.tensor(BLOCK_LOCAL_MASKED, dtype=s.dtype))
        o = torch.softmax(s, -1) @ v
        return o.reshape(*o.shape[:-3], n, self.dv)[..., :T, :] if n > self.c else o[..., :T, :]

    def _adjacent(self, t: Tensor) -> Tensor:
        """transformers' _look_adjacent: t (.., m, c, d) → (.., m, (b+1+a)·c, d): row g holds
        chunks g−b .. g+a (mod m) in that order, each chunk's c slots ascending."""
        if self.before == 0 and self.after == 0:
            return t
        parts = [t if o == 0 else torch.cat([t[..., o:, :, :], t[..., :o, :, :]], -3)
                 for o in range(-self.before, self.after + 1)]
        return torch.cat(parts, -2)

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: zero rings (sorted names); {} for an encoder."""
        if not self.causal:
            return {}
        return {"k_ring": torch.zeros(self.heads, self.R, self.dk, dtype=dtype),
                "v_ring": torch.zeros(self.heads, self.R, self.dv, dtype=dtype)}

    def _first(self, t: Tensor) -> Tensor:
        """The first key position of query positions t (step form)."""
        return ((t // self.c - self.before) * self.c).clamp(min=0)

    def _write(self, state: Dict[str, Tensor], k: Tensor, v: Tensor, pos: int) -> Dict[str, Tensor]:
        """The rings after positions pos..pos+N−1 with keys k (H, N, dk), values v (H, N, dv)."""
        n = k.shape[1]
        kr, vr = state["k_ring"].clone(), state["v_ring"].clone()
        p = torch.arange(max(pos, pos + n - self.R), pos + n)       # only the last R stay
        kr[:, p % self.R], vr[:, p % self.R] = k[:, p - pos], v[:, p - pos]
        return {"k_ring": kr, "v_ring": vr}

    # The sliding window's ring and masked attention, on this mixer's dk and R.
    _attend = SlidingWindowAttention._attend
    _ring_positions = SlidingWindowAttention._ring_positions

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked form of the step form: x (N, d_model) at positions pos..pos+N−1 after
        `state`; each query chunk attends (masked to first(t) ≤ p ≤ t) to the ring's positions
        before pos and x's. Returns (out (N, d_model), the state after x)."""
        if not self.causal:
            self._no_rnn()
        q, k, v = self._qkv(x)
        n = len(x)
        p_old = self._ring_positions(pos)
        order = torch.argsort(p_old)
        keep = p_old[order] >= 0
        K = torch.cat([state["k_ring"][:, order][:, keep], k], 1)
        V = torch.cat([state["v_ring"][:, order][:, keep], v], 1)
        p = torch.cat([p_old[order][keep], torch.arange(pos, pos + n)])
        outs = []
        for c0 in range(0, n, chunk):
            t = torch.arange(pos + c0, pos + min(c0 + chunk, n))
            ok = (p[None, :] <= t[:, None]) & (p[None, :] >= self._first(t)[:, None])
            outs.append(self._attend(q[:, c0:c0 + chunk], K, V, ok))
        return self._output(torch.cat(outs, 1)), self._write(state, k, v, pos)

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form: per position t, write k_t, v_t into ring slot t mod R, then attend over the
        ring's positions first(t)..t. Same result as `parallel`."""
        if not self.causal:
            self._no_rnn()
        q, k, v = self._qkv(x)
        outs = []
        for i in range(len(x)):
            t = pos + i
            state = self._write(state, k[:, i:i + 1], v[:, i:i + 1], t)
            p = self._ring_positions(t + 1)
            ok = ((p >= self._first(torch.tensor(t))) & (p <= t) & (p >= 0))[None]   # (1, R)
            outs.append(self._attend(q[:, i:i + 1], state["k_ring"], state["v_ring"], ok))
        return self._output(torch.cat(outs, 1)), state

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """The encoder form over x as a whole utterance (positions 0..N−1; no state)."""
        if pos != 0:
            raise ValueError("a block_local encoder runs on a whole utterance from position 0")
        q, k, v = self._qkv(x)
        return self._output(self.full(q, k, v)), state

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        q, k, v = self._qkv(x)
        return self.out(self.full(q, k, v).transpose(1, 2).reshape(B, N, -1))

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        z = lambda d: torch.zeros(batch, self.heads, self.R, d, dtype=dt, device=dev)
        return {"k_ring": z(self.dk), "v_ring": z(self.dv), "pos": torch.tensor(0)}

    def _prefill(self, x, state):
        return self._steps(x, state)

    def _step_one(self, x_t, state):
        B = len(x_t)
        t = int(state["pos"])
        q, k, v = (a[:, :, 0] for a in self._qkv(x_t[:, None]))              # (B, H, ·)
        kr, vr = state["k_ring"].clone(), state["v_ring"].clone()
        kr[:, :, t % self.R], vr[:, :, t % self.R] = k, v
        p = t - (t - torch.arange(self.R)) % self.R                          # position of each slot
        ok = (p >= self._first(torch.tensor(t))) & (p >= 0)
        s = torch.einsum("bhd,bhjd->bhj", q, kr) / math.sqrt(self.dk)
        o = torch.einsum("bhj,bhjm->bhm", torch.softmax(s.masked_fill(~ok, float("-inf")), -1), vr)
        return self.out(o.reshape(B, -1)), {"k_ring": kr, "v_ring": vr, "pos": torch.tensor(t + 1)}


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (BlockLocalAttention,)
