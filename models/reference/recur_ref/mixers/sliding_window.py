"""Longformer sliding-window attention, with dilation and global tokens (§5)."""

import math
from typing import Dict

import torch
from torch import Tensor, nn

from .base import Mixer
from .common import F32_BYTES, StateSize, _dtype, _nonneg_int, _pos_int
from .softmax_attention import SoftmaxAttention

__all__ = ["SlidingWindowAttention"]


def _dilations(cfg: dict):
    d = cfg.get("dilation", 1)
    return list(d) if isinstance(d, list) else [d] * cfg["heads"]


class SlidingWindowAttention(Mixer):
    """Longformer-style sparse softmax attention, scaled by 1/√dk.

    Config: heads, dk, dv, window w ≥ 1, dilation (int d, or one int per head; default 1),
    global_tokens g ≥ 0 (default 0), causal. Head h has dilation d_h. Global positions are
    the first g positions of the sequence (0..g−1). Query t of head h attends to the set
    (no duplicates; one softmax over the set):
      causal:     {t − j·d_h : 0 ≤ j < w, t − j·d_h ≥ 0}  ∪  {p : 0 ≤ p < g, p ≤ t}
      non-causal: {t + j·d_h : |j| ≤ ⌊w/2⌋, 0 ≤ t + j·d_h < N}  ∪  {0..g−1} ∩ [0, N);
                  and a global query (t < g) attends to every position 0..N−1.
    (Causal global queries t < g see {0..t}: the causal window already covers "attend to
    everything".) The global positions use the same Q/K/V projections as the rest, unless
    global_projections (non-causal, g > 0: Longformer's query_global, key_global,
    value_global): then a global query t < g attends to every position with
    query_global(x_t) against key_global(x_p), value_global(x_p); other queries unchanged.
    Tensors: query, key, value, out (as softmax_attention), and the three global ones.
    State (causal, fixed size), R = (w−1)·max_h(d_h) + 1 (per stream without the B and pos):
      k_ring (B, H, R, dk), v_ring (B, H, R, dv): position p lives in slot p mod R (global
      positions too; their ring entries are never read, glob serves them);
      k_glob (B, H, g, dk), v_glob (B, H, g, dv): position p < g in slot p; pos.
      Slots never written are 0.
    With "rotary" (§12), q and k are turned by their position first: the rings hold turned keys.
    """
    TYPE = "sliding_window"
    USES_POS = True
    KEYS = ({"heads", "dk", "dv", "window"},
            {"dilation", "global_tokens", "causal", "global_projections", "rotary"})
    ROTARY_WIDTH = "dk"

    @classmethod
    def check_config(cls, cfg, need, causal):
        need(_pos_int(cfg["window"]), f"mixer.window must be a positive integer, got {cfg['window']!r}")
        dil = cfg.get("dilation", 1)
        if isinstance(dil, list):
            need(len(dil) == cfg["heads"], f"mixer.dilation has {len(dil)} entries, expected heads = {cfg['heads']}")
            need(all(_pos_int(d) for d in dil), "mixer.dilation entries must be positive integers")
        else:
            need(_pos_int(dil), f"mixer.dilation must be a positive integer or a list of one per head, got {dil!r}")
        need(_nonneg_int(cfg.get("global_tokens", 0)), "mixer.global_tokens must be an integer >= 0")
        gp = cfg.get("global_projections", False)
        need(isinstance(gp, bool), "mixer.global_projections must be true or false")
        need(not gp or (cfg.get("causal", True) is False and cfg.get("global_tokens", 0) > 0),
             "mixer.global_projections needs a non-causal mixer (causal false) with global_tokens > 0")

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        ring = (cfg["window"] - 1) * max(_dilations(cfg)) + 1
        g = cfg.get("global_tokens", 0)
        return StateSize(True, F32_BYTES * cfg["heads"] * (ring + g) * (cfg["dk"] + cfg["dv"]), 0, None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.w, self.g = cfg["window"], cfg.get("global_tokens", 0)
        self.dil = _dilations(cfg)
        self.R = (self.w - 1) * max(self.dil) + 1
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        self.global_projections = cfg.get("global_projections", False)
        if self.global_projections:
            self.query_global = nn.Linear(d_model, self.heads * self.dk)
            self.key_global = nn.Linear(d_model, self.heads * self.dk)
            self.value_global = nn.Linear(d_model, self.heads * self.dv)

    _qkv = SoftmaxAttention._qkv
    _output = SoftmaxAttention._output

    def _global_rows(self, x: Tensor, o: Tensor) -> Tensor:
        """With global_projections: o ([B,] H, N, dv) with the global queries' rows (t < g)
        replaced by their attention over every position through the global projections."""
        if not self.global_projections:
            return o
        lead, H, g = x.shape[:-1], self.heads, min(self.g, x.shape[-2])
        heads = lambda t, d: t.view(*lead[:-1], t.shape[-2], H, d).transpose(-3, -2)
        qg = heads(self.query_global(x[..., :g, :]), self.dk)
        kg, vg = heads(self.key_global(x), self.dk), heads(self.value_global(x), self.dv)
        s = qg @ kg.transpose(-1, -2) / math.sqrt(self.dk)
        o = o.clone()
        o[..., :g, :] = torch.softmax(s, -1) @ vg
        return o

    def allowed(self, t: Tensor, p: Tensor) -> Tensor:
        """Boolean (H, *broadcast(t, p)): may query position t attend to key position p
        (both absolute, int64), per head. Non-causal also needs p < N (caller)."""
        d = torch.tensor(self.dil).view(-1, *([1] * max(t.dim(), p.dim())))
        diff = t - p
        if self.causal:
            win = (diff >= 0) & (diff % d == 0) & (diff // d < self.w)
            glob = (p < self.g) & (diff >= 0)
        else:
            a = diff.abs()
            win = (a % d == 0) & (a // d <= self.w // 2)
            glob = (p < self.g) | (t < self.g)
        return win | glob

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """The state before the first position: all slots 0 (sorted names)."""
        H = self.heads
        return {"k_glob": torch.zeros(H, self.g, self.dk, dtype=dtype),
                "k_ring": torch.zeros(H, self.R, self.dk, dtype=dtype),
                "v_glob": torch.zeros(H, self.g, self.dv, dtype=dtype),
                "v_ring": torch.zeros(H, self.R, self.dv, dtype=dtype)}

    def _attend(self, q: Tensor, K: Tensor, V: Tensor, ok: Tensor) -> Tensor:
        """q (H, T, dk) over K (H, P, dk), V (H, P, dv) where ok (H, T, P) → (H, T, dv)."""
        s = q @ K.transpose(-1, -2) / math.sqrt(self.dk)
        return torch.softmax(s.masked_fill(~ok, float("-inf")), -1) @ V

    def _ring_positions(self, pos: int) -> Tensor:
        """The position each ring slot holds after `pos` positions (negative: never written)."""
        slots = torch.arange(self.R)
        return (pos - 1) - (pos - 1 - slots) % self.R

    def _write(self, state: Dict[str, Tensor], k: Tensor, v: Tensor, pos: int) -> Dict[str, Tensor]:
        """The state after positions pos..pos+N−1 with keys k (H, N, dk), values v (H, N, dv)."""
        n = k.shape[1]
        kg, kr, vg, vr = (state[name].clone() for name in ("k_glob", "k_ring", "v_glob", "v_ring"))
        first = max(pos, pos + n - self.R)                      # only the last R positions stay in the ring
        p = torch.arange(first, pos + n)
        kr[:, p % self.R], vr[:, p % self.R] = k[:, p - pos], v[:, p - pos]
        p = torch.arange(pos, max(pos, min(self.g, pos + n)))   # global positions among the new ones
        kg[:, p], vg[:, p] = k[:, p - pos], v[:, p - pos]
        return {"k_glob": kg, "k_ring": kr, "v_glob": vg, "v_ring": vr}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form: x (N, d_model) at positions pos..pos+N−1 after `state`.
        Chunk c attends (masked by `allowed`) to the g global keys and to the keys of
        positions ≥ g from R − 1 before its first query up to its last query: the ring's
        positions before pos followed by x's. Returns (out (N, d_model), the state after x)."""
        q, k, v = self._qkv(x, pos)
        n = len(x)
        new = self._write(state, k, v, pos)
        # The recent keys in position order: the ring's valid positions before pos, then x's.
        p_old = self._ring_positions(pos)
        order = torch.argsort(p_old)
        p_old = p_old[order]
        keep = (p_old >= 0)
        K = torch.cat([state["k_ring"][:, order][:, keep], k], 1)
        V = torch.cat([state["v_ring"][:, order][:, keep], v], 1)
        p_ctx = torch.cat([p_old[keep], torch.arange(pos, pos + n)])
        p_glob = torch.arange(self.g)
        outs = []
        for c in range(0, n, chunk):
            t = torch.arange(pos + c, pos + min(c + chunk, n))
            sel = (p_ctx >= t[0] - self.R + 1) & (p_ctx <= t[-1]) & (p_ctx >= self.g)
            p = torch.cat([p_glob, p_ctx[sel]])
            ok = self.allowed(t[:, None], p[None, :])                      # (H, T, g + ·)
            Kc = torch.cat([new["k_glob"], K[:, sel]], 1)
            Vc = torch.cat([new["v_glob"], V[:, sel]], 1)
            outs.append(self._attend(q[:, c:c + chunk], Kc, Vc, ok))
        return self._output(torch.cat(outs, 1)), new

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form: per position t, write k_t, v_t into ring slot t mod R (and glob slot t
        when t < g), then attend over the ring's allowed positions ≥ g and the glob's
        positions ≤ t. Same result as `parallel`."""
        q, k, v = self._qkv(x, pos)
        outs = []
        for i in range(len(x)):
            t = pos + i
            state = self._write(state, k[:, i:i + 1], v[:, i:i + 1], t)
            p_ring = self._ring_positions(t + 1)
            ok_ring = self.allowed(torch.tensor(t), p_ring) & (p_ring >= 0) & (p_ring >= self.g)   # (H, R)
            ok_glob = (torch.arange(self.g) <= t).expand(self.heads, self.g)                       # (H, g)
            K = torch.cat([state["k_ring"], state["k_glob"]], 1)
            V = torch.cat([state["v_ring"], state["v_glob"]], 1)
            ok = torch.cat([ok_ring, ok_glob], 1)[:, None]                                           # (H, 1, R + g)
            outs.append(self._attend(q[:, i:i + 1], K, V, ok))
        return self._output(torch.cat(outs, 1)), state

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x as a whole utterance (positions 0..N−1; an
        encoder keeps no state, so `state` comes back unchanged)."""
        if pos != 0:
            raise ValueError("a non-causal sliding_window mixer runs on a whole utterance from position 0")
        q, k, v = self._qkv(x)
        ar = torch.arange(len(x))
        o = self._attend(q, k, v, self.allowed(ar[:, None], ar[None, :]))
        return self._output(self._global_rows(x, o)), state

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        q, k, v = self._qkv(x)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)                 # (B, H, N, N)
        ar = torch.arange(N)
        mask = self.allowed(ar[:, None], ar[None, :])                    # (H, N, N)
        s = s.masked_fill(~mask, float("-inf"))
        o = self._global_rows(x, torch.softmax(s, -1) @ v)
        return self.out(o.transpose(1, 2).reshape(B, N, -1))

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        H = self.heads
        z = lambda n, d: torch.zeros(batch, H, n, d, dtype=dt, device=dev)
        return {"k_ring": z(self.R, self.dk), "v_ring": z(self.R, self.dv),
                "k_glob": z(self.g, self.dk), "v_glob": z(self.g, self.dv), "pos": torch.tensor(0)}

    def _prefill(self, x, state):
        return self._steps(x, state)

    def _step_one(self, x_t, state):
        B = len(x_t)
        t = int(state["pos"])
        q, k, v = (a[:, :, 0] for a in self._qkv(x_t[:, None], t))          # (B, H, ·)
        kr, vr = state["k_ring"].clone(), state["v_ring"].clone()
        kg, vg = state["k_glob"].clone(), state["v_glob"].clone()
        slot = t % self.R
        kr[:, :, slot], vr[:, :, slot] = k, v
        if t < self.g:
            kg[:, :, t], vg[:, :, t] = k, v
        slots = torch.arange(self.R)
        p_ring = t - (t - slots) % self.R                                # position held by each slot
        ok_ring = self.allowed(torch.tensor(t), p_ring) & (p_ring >= 0) & (p_ring >= self.g)  # (H, R)
        p_glob = torch.arange(self.g)
        ok_glob = (p_glob <= t).expand(self.heads, self.g)               # (H, g)
        keys = torch.cat([kr, kg], 2)
        vals = torch.cat([vr, vg], 2)
        ok = torch.cat([ok_ring, ok_glob], 1)                            # (H, R+g)
        s = torch.einsum("bhd,bhjd->bhj", q, keys) / math.sqrt(self.dk)
        s = s.masked_fill(~ok, float("-inf"))
        o = torch.einsum("bhj,bhjm->bhm", torch.softmax(s, -1), vals)
        y = self.out(o.reshape(B, -1))
        return y, {"k_ring": kr, "v_ring": vr, "k_glob": kg, "v_glob": vg, "pos": torch.tensor(t + 1)}


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (SlidingWindowAttention,)
