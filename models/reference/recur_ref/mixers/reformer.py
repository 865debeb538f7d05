"""Reformer LSH attention (§8), encoder only: the paper's form and Hugging Face transformers'."""

import math
from typing import Dict

import torch
from torch import Tensor, nn

from .base import Mixer, _EncoderOnly
from .common import _nonneg_int, _pos_int

__all__ = ["REFORMER_FORMS", "REFORMER_HF_KEYS", "REFORMER_MAX_CHUNKS", "Reformer", "lsh_buckets"]


# Reformer's forms (§8): the paper's LSH attention, and Hugging Face transformers' LSHSelfAttention
# with the keys only it takes; at most REFORMER_MAX_CHUNKS chunks in a query's window.
REFORMER_FORMS = ("paper", "transformers")
REFORMER_HF_KEYS = ("chunks_before", "chunks_after", "causal_mask", "pad_multiple", "pad_above")
REFORMER_MAX_CHUNKS = 64


def lsh_buckets(k: Tensor, rotations: Tensor) -> Tensor:
    """The bucket of every key of every round: k (..., N, dk) (unit-norm keys), rotations
    (r, dk, nb/2) → (r, ..., N) int64, argmax over the nb values [P, −P] with P = k · rotations[i]
    (concatenated in that order; ties → the lowest index)."""
    p = torch.einsum("...nd,rdb->r...nb", k, rotations)
    return torch.argmax(torch.cat([p, -p], -1), -1)


class Reformer(_EncoderOnly, Mixer):
    """Reformer LSH attention (shared-QK, chunked, several hash rounds), encoder only.

    Config: heads H, dk, dv, n_buckets nb (even, ≥ 2), chunk c (≥ 1), rounds r (≥ 1), causal
    (false only; default false). Tensors: query (H·dk, d), value (H·dv, d), out (d, H·dv)
    (.weight/.bias; no key projection) and the buffer rotations (r, dk, nb/2): the random hash
    projections, N(0, 1), created after the linear layers, stored with the weights.
    Per stream and head, positions 0..N−1 (any N ≥ 1):
      Q = query(x) per head (N, dk), K_j = Q_j / ‖Q_j‖ (shared QK), V = value(x) per head.
      Round i: P = K rotations[i] (N, nb/2); bucket_j = argmax [P_j, −P_j] (first max);
        order = the positions sorted by (bucket, position); sorted slot s holds order[s] and
        lies in chunk s // c (the last chunk may be shorter). The query at slot s of chunk g
        attends to the positions in the slots of chunks g and g − 1 (chunk 0: itself only; no
        wrap-around), minus its own position unless that is its only candidate:
        o^i_j = Σ_{p ∈ cand} softmax_p(Q_j · K_p / √dk) V_p.
      y_j = (1/r) Σ_i o^i_j (the plain average of the rounds); Mixer(x) = out(concat_h y).
    No recurrent form, no state. The per-stream form computes it chunk by chunk (each chunk of
    sorted queries against its 2c look-back keys), the batched one as masked N × N scores.

    form "transformers" (Hugging Face transformers' LSHSelfAttention, eval mode): optional keys
    chunks_before b (default 1), chunks_after a (0), causal_mask (false), pad_multiple M
    (default c, a multiple of c), pad_above A (default c, ≤ c); rotations is (H, dk, r, nb/2)
    (transformers' random_rotations, one per head). Per stream and head, positions 0..T−1:
      n = T rounded up to a multiple of M when T > A and T % M ≠ 0, else T (slots T..n−1 are
        pads: masked as keys, their outputs dropped).
      Q as above, K_j = Q_j / sqrt(mean_e Q_je² + 1e−6) / √dk; the score is Q_i·K_p, unscaled.
      masked keys (p ≥ T; p > i with causal_mask) score −1e9, then p == i scores −1e5.
      n ≤ c: y_i = softmax over all n slots of those scores · V (no hashing).
      n > c: bucket = argmax [Q R_h[:, i], −Q R_h[:, i]] of the raw Q (pads: bucket nb);
        per round the positions sorted by (bucket, position), the rounds concatenated (r·n
        slots) and cut into chunks of c; the query in chunk g attends to the slots of chunks
        g + d, d = −b..a, taken cyclically over all r·n/c chunks (an offset |d| ≥ r·n/c is 0,
        as Python's slices give); o_i^ρ, lse_i^ρ = its softmax output and logsumexp in round ρ;
        y_i = o_i^0 (r = 1) or Σ_ρ o_i^ρ exp(lse_i^ρ − logsumexp_ρ lse_i^ρ).
    See docs/attention-math.md §8.
    """
    TYPE = "reformer"
    USES_POS = True
    KEYS = ({"heads", "dk", "dv", "n_buckets", "chunk", "rounds"},
            {"causal", "form", "chunks_before", "chunks_after", "causal_mask", "pad_multiple", "pad_above"})
    ENCODER_ONLY = True

    @classmethod
    def check_config(cls, cfg, need, causal):
        need(not causal, "reformer has no causal/recurrent form: mixer.causal must be false")
        nb = cfg["n_buckets"]
        need(_pos_int(nb) and nb >= 2 and nb % 2 == 0, f"mixer.n_buckets must be an even integer >= 2, got {nb!r}")
        need(_pos_int(cfg["chunk"]), f"mixer.chunk must be a positive integer, got {cfg['chunk']!r}")
        need(_pos_int(cfg["rounds"]), f"mixer.rounds must be a positive integer, got {cfg['rounds']!r}")
        form = cfg.get("form", "paper")
        need(form in REFORMER_FORMS, f"unknown mixer.form {form!r}; expected one of {list(REFORMER_FORMS)}")
        if form == "paper":
            extra = sorted(set(cfg) & set(REFORMER_HF_KEYS))
            need(not extra, f"keys {extra} apply only to mixer.form 'transformers'")
        else:
            for k in ("chunks_before", "chunks_after"):
                need(_nonneg_int(cfg.get(k, 0)), f"mixer.{k} must be an integer >= 0, got {cfg.get(k)!r}")
            window = cfg.get("chunks_before", 1) + cfg.get("chunks_after", 0) + 1
            need(window <= REFORMER_MAX_CHUNKS,
                 f"mixer.chunks_before + mixer.chunks_after + 1 must be at most {REFORMER_MAX_CHUNKS}, got {window}")
            need(isinstance(cfg.get("causal_mask", False), bool), "mixer.causal_mask must be true or false")
            pm = cfg.get("pad_multiple", cfg["chunk"])
            need(_pos_int(pm) and pm % cfg["chunk"] == 0,
                 f"mixer.pad_multiple must be a positive multiple of mixer.chunk ({cfg['chunk']}), got {pm!r}")
            pa = cfg.get("pad_above", cfg["chunk"])
            need(_nonneg_int(pa) and pa <= cfg["chunk"],
                 f"mixer.pad_above must be an integer in [0, mixer.chunk ({cfg['chunk']})], got {pa!r}")

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.n_buckets, self.chunk, self.rounds = cfg["n_buckets"], cfg["chunk"], cfg["rounds"]
        self.form = cfg.get("form", "paper")
        self.chunks_before, self.chunks_after = cfg.get("chunks_before", 1), cfg.get("chunks_after", 0)
        self.causal_mask = cfg.get("causal_mask", False)
        self.pad_multiple = cfg.get("pad_multiple", self.chunk)
        self.pad_above = cfg.get("pad_above", self.chunk)
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        shape = (self.rounds, self.dk, self.n_buckets // 2) if self.form == "paper" else \
            (self.heads, self.dk, self.rounds, self.n_buckets // 2)
        self.register_buffer("rotations", torch.randn(*shape))

    NO_FORM_WHY = "the hash buckets sort the whole utterance"

    # Per stream.

    def hashes(self, x: Tensor) -> Tensor:
        """[P, −P] of every round, head and position: (r, H, N, nb) (the bucket is its argmax;
        form "transformers": P from the raw Q and each head's rotations)."""
        q = self.query(x).view(len(x), self.heads, self.dk).transpose(0, 1)
        if self.form == "transformers":
            p = torch.einsum("hnd,hdrb->rhnb", q, self.rotations)
        else:
            p = torch.einsum("hnd,rdb->rhnb", q / q.norm(dim=-1, keepdim=True), self.rotations)
        return torch.cat([p, -p], -1)

    def padded_length(self, n: int) -> int:
        """Form "transformers": the slots the sequence takes, pads included."""
        m = self.pad_multiple
        return n + (-n) % m if n > self.pad_above and n % m else n

    def _transformers(self, q: Tensor, v: Tensor) -> Tensor:
        """Form "transformers" per head: q (B, H, T, dk), v (B, H, T, dv) → (B, H, T, dv)."""
        B, H, T, dk = q.shape
        n, c, r = self.padded_length(T), self.chunk, self.rounds
        k = q / torch.sqrt((q * q).mean(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
        qp, kp, vp = (torch.cat([t, t.new_zeros(B, H, n - T, t.shape[-1])], 2) for t in (q, k, v))
        pos = torch.arange(n, device=q.device)

        def scores(s, qpos, kpos):   # the masks, by position: pads and (causal) later ones, then self
            masked = (kpos >= T)[..., None, :]
            if self.causal_mask:
                masked = masked | (kpos[..., None, :] > qpos[..., :, None])
            s = s.masked_fill(masked, -1e9)
            return s.masked_fill(kpos[..., None, :] == qpos[..., :, None], -1e5)

        if n <= c:   # transformers' "standard" path: no hashing
            s = scores(q @ kp.transpose(-1, -2), pos[:T], pos)
            return torch.softmax(s, -1) @ vp
        p = torch.einsum("bhtd,hdrk->bhrtk", q, self.rotations)
        bucket = torch.cat([p, -p], -1).argmax(-1)                          # (B, H, r, T)
        bucket = torch.cat([bucket, bucket.new_full((B, H, r, n - T), self.n_buckets)], -1)
        order = torch.argsort(bucket * n + pos, -1)                          # (B, H, r, n) positions
        G = r * n // c
        qpos = order.reshape(B, H, G, c)                                     # the rounds' slots in a row

        def adjacent(t):   # transformers' _look_adjacent: chunk g's keys from chunks g−b .. g+a
            return torch.cat([t if d == 0 else torch.cat([t[:, :, d:], t[:, :, :d]], 2)
                              for d in range(-self.chunks_before, self.chunks_after + 1)], 3)

        kpos = adjacent(qpos)                                                # (B, H, G, W)

        def take(t, idx):
            flat = idx.reshape(B, H, -1, 1).expand(-1, -1, -1, t.shape[-1])
            return torch.gather(t, 2, flat).view(*idx.shape, t.shape[-1])

        s = scores(take(qp, qpos) @ take(kp, kpos).transpose(-1, -2), qpos, kpos)   # (B, H, G, c, W)
        # softmax, not exp(s − lse): in float32 an lse near −1e5 (a query whose only unmasked
        # key is itself) loses its last bits, and transformers' weights then miss 1 by ~2e−3
        lse = torch.logsumexp(s, -1)
        o = torch.softmax(s, -1) @ take(vp, kpos)                            # (B, H, G, c, dv)
        o, lse = o.reshape(B, H, r, n, -1), lse.reshape(B, H, r, n)
        o = torch.empty_like(o).scatter_(3, order[..., None].expand_as(o), o)[:, :, :, :T]
        lse = torch.empty_like(lse).scatter_(3, order, lse)[:, :, :, :T]
        if r == 1:
            return o[:, :, 0]
        return (o * torch.softmax(lse, 2)[..., None]).sum(2)

    def _round(self, q: Tensor, k: Tensor, v: Tensor, bucket: Tensor) -> Tensor:
        """One hash round: q, k (H, N, dk), v (H, N, dv), bucket (H, N) → o (H, N, dv)."""
        H, n = bucket.shape
        c = self.chunk
        G = -(-n // c)
        order = torch.argsort(bucket * n + torch.arange(n), -1)          # (bucket, position) ascending
        idx = torch.full((H, G * c), 0, dtype=torch.long)                # sorted slots, padded to G·c
        idx[:, :n] = order
        valid = torch.arange(G * c) < n                                  # (G·c,) real slots
        qs, ks, vs = (t[torch.arange(H)[:, None], idx].view(H, G, c, -1) for t in (q, k, v))
        vld = valid.view(G, c)
        # keys of chunk g: chunk g − 1's slots (none for g = 0), then chunk g's
        kk = torch.cat([torch.cat([torch.zeros_like(ks[:, :1]), ks[:, :-1]], 1), ks], 2)   # (H, G, 2c, dk)
        vv = torch.cat([torch.cat([torch.zeros_like(vs[:, :1]), vs[:, :-1]], 1), vs], 2)
        kvalid = torch.cat([torch.cat([torch.zeros_like(vld[:1]), vld[:-1]], 0), vld], 1)  # (G, 2c)
        own = torch.cat([torch.zeros(c, c, dtype=torch.bool), torch.eye(c, dtype=torch.bool)], 1)   # (c, 2c)
        alone = kvalid.sum(-1) == 1                                       # (G,) one candidate: keep it
        mask = kvalid[:, None, :] & (~own[None] | alone[:, None, None])   # (G, c, 2c)
        s = (qs @ kk.transpose(-1, -2) / math.sqrt(self.dk)).masked_fill(~mask, float("-inf"))
        s = s.masked_fill(~vld[None, :, :, None], 0.0)                    # padded query rows: harmless
        o = (torch.softmax(s, -1) @ vv).reshape(H, G * c, -1)[:, :n]      # sorted order
        out = torch.empty_like(o)
        out[torch.arange(H)[:, None], order] = o
        return out

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x (N, d_model) as a whole utterance (positions
        0..N−1) → (out (N, d_model), state unchanged)."""
        if pos != 0:
            raise ValueError("a reformer mixer runs on a whole utterance from position 0")
        n = len(x)
        q = self.query(x).view(n, self.heads, self.dk).transpose(0, 1)    # (H, N, dk)
        v = self.value(x).view(n, self.heads, self.dv).transpose(0, 1)    # (H, N, dv)
        if self.form == "transformers":
            y = self._transformers(q[None], v[None])[0]
            return self.out(y.transpose(0, 1).reshape(n, -1)), state
        k = q / q.norm(dim=-1, keepdim=True)
        buckets = self.hashes(x).argmax(-1)                                 # (r, H, N)
        y = sum(self._round(q, k, v, b) for b in buckets) / self.rounds
        return self.out(y.transpose(0, 1).reshape(n, -1)), state

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        H = self.heads
        q = self.query(x).view(B, N, H, self.dk).transpose(1, 2)          # (B, H, N, dk)
        v = self.value(x).view(B, N, H, self.dv).transpose(1, 2)          # (B, H, N, dv)
        if self.form == "transformers":
            return self.out(self._transformers(q, v).transpose(1, 2).reshape(B, N, -1))
        k = q / q.norm(dim=-1, keepdim=True)
        pos = torch.arange(N, device=x.device)
        g = pos // self.chunk                                              # chunk of each sorted slot
        allowed = (g[:, None] - g[None, :] == 0) | (g[:, None] - g[None, :] == 1)   # (slot, slot)
        own = torch.eye(N, dtype=torch.bool, device=x.device)
        allowed = allowed & (~own | (allowed.sum(-1, keepdim=True) == 1))
        y = 0
        for bucket in lsh_buckets(k, self.rotations):                      # (B, H, N) per round
            order = torch.argsort(bucket * N + pos, -1)                    # stable by bucket
            take = lambda t: torch.gather(t, 2, order[..., None].expand(*order.shape, t.shape[-1]))
            qs, ks, vs = take(q), take(k), take(v)
            s = (qs @ ks.transpose(-1, -2) / math.sqrt(self.dk)).masked_fill(~allowed, float("-inf"))
            o = torch.softmax(s, -1) @ vs                                  # sorted order
            y = y + torch.empty_like(o).scatter_(2, order[..., None].expand_as(o), o)
        y = y / self.rounds
        return self.out(y.transpose(1, 2).reshape(B, N, -1))


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (Reformer,)
