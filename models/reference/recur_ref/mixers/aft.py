"""AFT, the attention-free transformer (§4): aft_simple, aft_local, aft_full, and aft_conv
(AFT-local with a per-head kernel: the converter's alias of aft_local, a class of its own here)."""

from typing import Dict

import torch
from torch import Tensor, nn

from .base import Mixer, _BoundedKVCache
from .common import CHUNK, F32_BYTES, StateSize, _dtype, _pos_int

__all__ = ["AFT_BIAS_FORMS", "AFTSimple", "AFTLocal", "AFTConv", "AFTFull", "fast_transformers_aft_full"]


AFT_BIAS_FORMS = ("add", "multiply")   # aft_full's "bias_form"


class _AFTBase(Mixer):
    """Y_t = σ(Q_t) ⊙ Σ_{t'} exp(K_{t'} + w_{t,t'}) ⊙ V_{t'} / Σ_{t'} exp(K_{t'} + w_{t,t'})
    element-wise over D = heads·dk channels (causal: t' ≤ t).
    Tensors: query (D, d), key (D, d), value (D, d), out (d, D) (.weight/.bias) plus the
    bias tensors of the variant."""

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk = cfg["heads"], cfg["dk"]
        self.D = self.heads * self.dk
        self.query = nn.Linear(d_model, self.D)
        self.key = nn.Linear(d_model, self.D)
        self.value = nn.Linear(d_model, self.D)
        self.out = nn.Linear(self.D, d_model)

    @staticmethod
    def _channels(cfg: dict) -> int:
        """D = heads·dk, the channels of a config."""
        return cfg["heads"] * cfg["dk"]

    def _qkv(self, x):
        return torch.sigmoid(self.query(x)), self.key(x), self.value(x)   # (B, N, D)

    def bias(self, t: Tensor, p: Tensor) -> Tensor:
        """w_{t,p} for query positions t (Nt,) and key positions p (Np,) → (Nt, Np, D)."""
        raise NotImplementedError

    def _logits(self, k: Tensor, t: Tensor, p: Tensor) -> Tensor:
        """k (B, Np, D) keys at positions p; → (B, Nt, Np, D) logits K_p + w_{t,p}, −inf where masked."""
        lg = k[:, None] + self.bias(t, p)[None]
        if self.causal:
            lg = lg.masked_fill((p[None, :] > t[:, None])[None, :, :, None], float("-inf"))
        return lg

    def forward(self, x):
        self._check_x(x, 3)
        N = x.shape[1]
        q, k, v = self._qkv(x)
        ar = torch.arange(N)
        a = torch.softmax(self._logits(k, ar, ar), dim=2)                # softmax over key positions
        return self.out(q * torch.einsum("btpd,bpd->btd", a, v))


def _fold(num, den, mx, k, v):
    """Add exp(k)·v, exp(k) to (num, den) kept relative to the running max mx (all (B, D))."""
    m2 = torch.maximum(mx, k)
    a, b = torch.exp(mx - m2), torch.exp(k - m2)
    return num * a + b * v, den * a + b, m2


class AFTSimple(_AFTBase):
    """AFT-simple: w = 0. Matches fast-transformers' AFTSimpleAttention
    (idiap/fast-transformers fast_transformers/attention/aft_attention.py): causal
    `M = K.max(dim=1); Kexp = exp(K − M); V = Q * (Kexp/Kexp.cumsum(1) * values).cumsum(1)`
    — algebraically our Σ exp(K)V / Σ exp(K); forward() computes it with logcumsumexp.
    State (causal): num (B, D), den (B, D), max (B, D) (running max of K per channel, −inf at
    start): num = Σ exp(K_p − max)·V_p, den = Σ exp(K_p − max) (per stream: (D,) each).
    `heads` only names the width; the math does not split channels into heads."""
    TYPE = "aft_simple"
    KEYS = ({"heads", "dk"}, {"causal"})

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        return StateSize(True, F32_BYTES * 3 * cls._channels(cfg), 0, None)

    def bias(self, t, p):
        return torch.zeros(len(t), len(p), self.D, dtype=self._weight().dtype)

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: num = den = 0, max = −inf (sorted names)."""
        return {"den": torch.zeros(self.D, dtype=dtype), "max": torch.full((self.D,), float("-inf"), dtype=dtype),
                "num": torch.zeros(self.D, dtype=dtype)}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], chunk: int):
        """Chunked parallel form. Per chunk of T positions: the running max
        m_t = max(max, k_c..k_t) (T, D), then per t the masked (T, T, D) sum
        Σ_{p≤t} exp(k_p − m_t)·v_p plus the state's num·exp(max − m_t) (likewise den);
        every exponent is ≤ 0. The state after the chunk is row T−1's sums.
        Returns (out (N, d_model), the state after x)."""
        q, k, v = self._qkv(x)
        num, den, mx = state["num"], state["den"], state["max"]
        outs = []
        for c in range(0, len(x), chunk):
            qc, kc, vc = q[c:c + chunk], k[c:c + chunk], v[c:c + chunk]              # (T, D)
            m = torch.maximum(mx, torch.cummax(kc, 0).values)                         # (T, D)
            T = len(kc)
            later = torch.ones(T, T, dtype=torch.bool).triu(1)[:, :, None]            # p > t
            e = torch.exp((kc[None, :, :] - m[:, None, :]).masked_fill(later, float("-inf")))  # (t, p, D)
            carry = torch.exp(mx - m)                                                 # (T, D); 0 from −inf
            nums = num * carry + torch.einsum("tpd,pd->td", e, vc)
            dens = den * carry + e.sum(1)
            outs.append(qc * nums / dens)
            num, den, mx = nums[-1], dens[-1], m[-1]
        return self.out(torch.cat(outs)), {"den": den, "max": mx, "num": num}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor]):
        """RNN form: per position _fold(num, den, max, k_t, v_t), y_t = σ(q_t)·num/den.
        Same arguments and result as `parallel`."""
        q, k, v = self._qkv(x)
        num, den, mx = state["num"], state["den"], state["max"]
        outs = []
        for qi, ki, vi in zip(q, k, v):
            num, den, mx = _fold(num, den, mx, ki, vi)
            outs.append(qi * num / den)
        return self.out(torch.stack(outs)), {"den": den, "max": mx, "num": num}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor]):
        """Non-causal (encoder) form: x's positions folded into the state (empty for a whole
        utterance) at once, then every position reads the final sums:
        y_t = σ(q_t)·num_N/den_N. Same result shape as `parallel`."""
        q, k, v = self._qkv(x)
        mx = torch.maximum(state["max"], k.max(0).values)
        e, carry = torch.exp(k - mx), torch.exp(state["max"] - mx)
        num = state["num"] * carry + (e * v).sum(0)
        den = state["den"] * carry + e.sum(0)
        return self.out(q * num / den), {"den": den, "max": mx, "num": num}

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        q, k, v = self._qkv(x)
        if not self.causal:
            return self.out(q * (torch.softmax(k, 1) * v).sum(1, keepdim=True))
        # Σ_{p≤t} e^{k_p} v_p / Σ_{p≤t} e^{k_p} in log space (v split by sign), robust to any
        # key range. (The library's global-max form above underflows to 0/0 once a channel's
        # keys span more than ~700 in f64, ~88 in f32.)
        lden = torch.logcumsumexp(k, 1)
        pos = torch.logcumsumexp(k + torch.log(v.clamp(min=0)), 1)
        neg = torch.logcumsumexp(k + torch.log((-v).clamp(min=0)), 1)
        return self.out(q * (torch.exp(pos - lden) - torch.exp(neg - lden)))

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        z = torch.zeros(batch, self.D, dtype=dt, device=dev)
        return {"num": z, "den": z.clone(), "max": torch.full_like(z, float("-inf"))}

    def _prefill(self, x, state):
        return self._steps(x, state)

    def _step_one(self, x_t, state):
        q, k, v = self._qkv(x_t)
        num, den, mx = _fold(state["num"], state["den"], state["max"], k, v)
        return self.out(q * num / den), {"num": num, "den": den, "max": mx}


class AFTLocal(_AFTBase):
    """AFT-local with a relative (position-independent) bias inside the window, 0 outside
    (not −∞; §4). Window s = cfg window:
      causal:     w_{t,p} = pos_bias[t − p]        for 0 ≤ t − p < s, else 0;  pos_bias (s,)
      non-causal: w_{t,p} = pos_bias[t − p + s − 1] for |t − p| < s, else 0;  pos_bias (2s−1,)
    The bias is shared by all channels and heads (aft_conv: one kernel per head). Note: the
    paper's AFT-local masks a learned pairwise T×T matrix; the relative form is recur's
    choice (no T_max, fixed-size state).
    State (causal): num, den, max (B, D) over the positions that left the window
    (p ≤ t − s, where w = 0), and a ring k_ring, v_ring (B, s, D) of the last s positions
    (position p in slot p mod s); pos. Step t: M = max(max, max_p∈window(K_p + w_{t,p})),
    y = σ(q)·(num·e^{max−M} + Σ_window e^{K_p+w−M} V_p)/(den·e^{max−M} + Σ_window e^{K_p+w−M});
    then position t − s + 1 (if ≥ 0) is folded into (num, den, max) with w = 0.
    Per stream the same without B and pos: {"den" (D,), "k_ring" (s, D), "max" (D,), "num" (D,),
    "v_ring" (s, D)}; {} when non-causal."""
    TYPE = "aft_local"
    USES_POS = True
    KEYS = ({"heads", "dk", "window"}, {"causal"})

    @classmethod
    def check_config(cls, cfg, need, causal):
        need(_pos_int(cfg["window"]), f"mixer.window must be a positive integer, got {cfg['window']!r}")

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        return StateSize(True, F32_BYTES * cls._channels(cfg) * (3 + 2 * cfg["window"]), 0, None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.s = cfg["window"]
        self._make_bias()

    def _make_bias(self):
        n = self.s if self.causal else 2 * self.s - 1
        self.pos_bias = nn.Parameter(0.5 * torch.randn(n))

    def kernel(self) -> Tensor:
        """(s or 2s−1, D): the bias of each relative offset for each channel."""
        return self.pos_bias[:, None].expand(-1, self.D)

    def _bias(self, off: Tensor) -> Tensor:
        """w for offsets off = t − p (any shape) → (*off.shape, D); 0 outside the window."""
        W = self.kernel()
        if self.causal:
            inside, idx = (off >= 0) & (off < self.s), off
        else:
            inside, idx = off.abs() < self.s, off + self.s - 1
        w = W[idx.clamp(0, len(W) - 1)]
        return torch.where(inside[..., None], w, torch.zeros((), dtype=w.dtype))

    def bias(self, t, p):
        return self._bias(t[:, None] - p[None, :])

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: num = den = 0, max = −inf, rings 0 (sorted names);
        {} for a non-causal (encoder) mixer, which keeps no state."""
        D, s = self.D, self.s
        if not self.causal:
            return {}
        return {"den": torch.zeros(D, dtype=dtype), "k_ring": torch.zeros(s, D, dtype=dtype),
                "max": torch.full((D,), float("-inf"), dtype=dtype), "num": torch.zeros(D, dtype=dtype),
                "v_ring": torch.zeros(s, D, dtype=dtype)}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form: x (N, d_model) at positions pos..pos+N−1 after `state`.
        The context is the ring's unfolded positions max(0, pos − s + 1)..pos − 1 followed by
        x's. A chunk of queries t0..t1 reads the folded sums (num, den, max: positions
        ≤ t0 − s) plus, masked to p ≤ t, the context keys t0 − s + 1..t1 with bias w_{t,p}
        (0 for t − p ≥ s); per query M_t = max(max, max_p(k_p + w)), so every exponent is ≤ 0.
        Then positions t0 − s + 1..t1 − s + 1 are folded in with w = 0. Returns
        (out (N, d_model), the state after x)."""
        q, k, v = self._qkv(x)
        n, s = len(x), self.s
        p_old = torch.arange(max(0, pos - s + 1), pos)
        K = torch.cat([state["k_ring"][p_old % s], k])
        V = torch.cat([state["v_ring"][p_old % s], v])
        p_ctx = torch.cat([p_old, torch.arange(pos, pos + n)])
        num, den, mx = state["num"], state["den"], state["max"]
        outs = []
        for c in range(0, n, chunk):
            t = torch.arange(pos + c, pos + min(c + chunk, n))
            t0, t1 = int(t[0]), int(t[-1])
            sel = (p_ctx >= t0 - s + 1) & (p_ctx <= t1)
            p, Kc, Vc = p_ctx[sel], K[sel], V[sel]
            off = t[:, None] - p[None, :]                                            # (T, P)
            lg = (Kc[None] + self._bias(off)).masked_fill((off < 0)[..., None], float("-inf"))   # (T, P, D)
            M = torch.maximum(mx, lg.max(1).values)                                  # (T, D)
            e = torch.exp(lg - M[:, None])
            carry = torch.exp(mx - M)                                                # 0 from −inf
            nums = num * carry + torch.einsum("tpd,pd->td", e, Vc)
            dens = den * carry + e.sum(1)
            outs.append(q[c:c + len(t)] * nums / dens)
            leave = p <= t1 - s + 1                                                  # leave the window now
            if leave.any():
                kf, vf = Kc[leave], Vc[leave]
                m2 = torch.maximum(mx, kf.max(0).values)
                a, b = torch.exp(mx - m2), torch.exp(kf - m2)
                num, den, mx = num * a + (b * vf).sum(0), den * a + b.sum(0), m2
        kr, vr = state["k_ring"].clone(), state["v_ring"].clone()
        p = torch.arange(max(pos, pos + n - s), pos + n)                            # the last s positions
        kr[p % s], vr[p % s] = k[p - pos], v[p - pos]
        return self.out(torch.cat(outs)), {"den": den, "k_ring": kr, "max": mx, "num": num, "v_ring": vr}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form, as _step_one (see the class docstring) per position. Same arguments and
        result as `parallel`."""
        q, k, v = self._qkv(x)
        s = self.s
        num, den, mx = state["num"], state["den"], state["max"]
        kr, vr = state["k_ring"].clone(), state["v_ring"].clone()
        outs = []
        for i in range(len(x)):
            t = pos + i
            kr[t % s], vr[t % s] = k[i], v[i]
            p = torch.arange(max(0, t - s + 1), t + 1)                                # the window
            lg = kr[p % s] + self._bias(t - p)                                      # (n, D)
            M = torch.maximum(mx, lg.max(0).values)
            e, a = torch.exp(lg - M), torch.exp(mx - M)
            outs.append(q[i] * (num * a + (e * vr[p % s]).sum(0)) / (den * a + e.sum(0)))
            leave = t - s + 1
            if leave >= 0:
                num, den, mx = _fold(num, den, mx, kr[leave % s], vr[leave % s])
        return self.out(torch.stack(outs)), {"den": den, "k_ring": kr, "max": mx, "num": num, "v_ring": vr}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x as a whole utterance (positions 0..N−1; an
        encoder keeps no state, so `state` comes back unchanged): per query t a softmax over
        every p of k_p + w_{t,p} (w = pos_bias[t − p + s − 1] for |t − p| < s, else 0),
        computed per block of CHUNK queries."""
        if pos != 0:
            raise ValueError(f"a non-causal {self.TYPE} mixer runs on a whole utterance from position 0")
        q, k, v = self._qkv(x)
        n = len(x)
        p = torch.arange(n)
        outs = []
        for c in range(0, n, CHUNK):
            t = torch.arange(c, min(c + CHUNK, n))
            a = torch.softmax(k[None] + self._bias(t[:, None] - p[None, :]), 1)      # (T, N, D)
            outs.append(q[c:c + len(t)] * torch.einsum("tpd,pd->td", a, v))
        return self.out(torch.cat(outs)), state

    # Batched.

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        z = torch.zeros(batch, self.D, dtype=dt, device=dev)
        return {"num": z, "den": z.clone(), "max": torch.full_like(z, float("-inf")),
                "k_ring": torch.zeros(batch, self.s, self.D, dtype=dt, device=dev),
                "v_ring": torch.zeros(batch, self.s, self.D, dtype=dt, device=dev),
                "pos": torch.tensor(0)}

    def _prefill(self, x, state):
        return self._steps(x, state)

    def _step_one(self, x_t, state):
        t, s = int(state["pos"]), self.s
        q, k, v = self._qkv(x_t)
        kr, vr = state["k_ring"].clone(), state["v_ring"].clone()
        kr[:, t % s], vr[:, t % s] = k, v
        p = torch.arange(max(0, t - s + 1), t + 1)                        # window positions
        lg = kr[:, p % s] + self.bias(torch.tensor([t]), p)[0][None]     # (B, n, D)
        M = torch.maximum(state["max"], lg.max(1)[0])
        e = torch.exp(lg - M[:, None])
        a = torch.exp(state["max"] - M)
        num = state["num"] * a + (e * vr[:, p % s]).sum(1)
        den = state["den"] * a + e.sum(1)
        y = self.out(q * num / den)
        num2, den2, mx2 = state["num"], state["den"], state["max"]
        leave = t - s + 1
        if leave >= 0:
            num2, den2, mx2 = _fold(num2, den2, mx2, kr[:, leave % s], vr[:, leave % s])
        return y, {"num": num2, "den": den2, "max": mx2, "k_ring": kr, "v_ring": vr, "pos": torch.tensor(t + 1)}


class AFTConv(AFTLocal):
    """AFT-conv: as aft_local but the bias is a per-head depth-wise kernel:
    conv_kernel (H, s) causal [offset t − p = 0..s−1] / (H, 2s−1) non-causal
    [offset t − p + s − 1]; channel c uses head c // dk. Same state as aft_local."""
    TYPE = "aft_conv"
    # Keys, rules and state: aft_local's.

    def _make_bias(self):
        n = self.s if self.causal else 2 * self.s - 1
        self.conv_kernel = nn.Parameter(0.5 * torch.randn(self.heads, n))

    def kernel(self):
        return self.conv_kernel.t().repeat_interleave(self.dk, dim=1)   # (n, D)


class AFTFull(_BoundedKVCache, _AFTBase):
    """AFT-full: a learned pairwise bias w (shared by all channels) for positions < max_length.
      bias_rank absent/null: pos_bias (T_max, T_max),  w_{t,p} = pos_bias[t, p]
      bias_rank r:           u (T_max, r), v (T_max, r), w = u vᵀ, w_{t,p} = u[t]·v[p]
                             (fast-transformers AFTFullAttention: inner_attention.u / .v,
                             r = aft_parameterization, T_max = max_sequence_length)
    bias_form 'add' (default, the paper and §4): logits K_p + w_{t,p}.
    bias_form 'multiply': logits K_p · w_{t,p}, which is what fast-transformers computes
    (idiap/fast-transformers fast_transformers/attention/aft_attention.py, AFTFullAttention.forward:
        w = (self.u[:L].mm(self.v[:S].t())) + attn_mask.additive_matrix
        K = K[:, None, :, :, :] * w[None, :, None, None, :]
        K = torch.softmax(K, dim=-1)
        V = Q * torch.einsum("nlhds,nhds->nlhd", K, V)          with Q = sigmoid(queries)).
    Non-causal 'multiply' equals the library exactly. With a causal mask the library multiplies
    K by the −∞ of the additive mask (→ ±∞/NaN for K ≤ 0); recur's causal 'multiply' uses the
    intended meaning: the softmax over p ≤ t of K_p·w_{t,p}.
    State (causal, bounded by T_max, stepping past it raises ValueError): per stream the KV
    cache {"k" (P, D), "v" (P, D)} of the P positions so far ({} when non-causal); batched
      k (B, T_max, D), v (B, T_max, D), pos.
    """
    TYPE = "aft_full"
    USES_POS = True
    KEYS = ({"heads", "dk", "max_length"}, {"bias_rank", "bias_form", "causal"})

    @classmethod
    def check_config(cls, cfg, need, causal):
        need(_pos_int(cfg["max_length"]), "mixer.max_length must be a positive integer")
        r = cfg.get("bias_rank")
        need(r is None or _pos_int(r), "mixer.bias_rank must be a positive integer or null (full bias matrix)")
        need(cfg.get("bias_form", "add") in AFT_BIAS_FORMS,
             f"unknown mixer.bias_form {cfg.get('bias_form')!r}; expected one of {list(AFT_BIAS_FORMS)}")

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        return StateSize(True, 0, F32_BYTES * 2 * cls._channels(cfg), cfg["max_length"])

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.T = cfg["max_length"]
        self.rank = cfg.get("bias_rank")
        self.form = cfg.get("bias_form", "add")
        if self.rank is None:
            self.pos_bias = nn.Parameter(0.5 * torch.randn(self.T, self.T))
        else:
            self.u = nn.Parameter(0.7 * torch.randn(self.T, self.rank))
            self.v = nn.Parameter(0.7 * torch.randn(self.T, self.rank))

    def bias(self, t: Tensor, p: Tensor) -> Tensor:
        """w_{t,p} for query positions t (Nt,) and key positions p (Np,) → (Nt, Np)."""
        if self.rank is None:
            return self.pos_bias[t[:, None], p[None, :]]
        return self.u[t] @ self.v[p].t()

    # Per stream.

    def _kv_widths(self):
        return self.D, self.D

    def _project(self, x):
        q, k, v = self._qkv(x)
        return q, k, v, self.out

    def _attend(self, q: Tensor, K: Tensor, V: Tensor, t: Tensor, mask: bool) -> Tensor:
        """σ(q) (Nt, D) at positions t over keys K, values V (Np, D) at positions 0..Np−1
        → (Nt, D); mask: drop p > t (causal)."""
        p = torch.arange(len(K))
        w = self.bias(t, p)[..., None]                                          # (Nt, Np, 1)
        lg = K[None] + w if self.form == "add" else K[None] * w                 # (Nt, Np, D)
        if mask:
            lg = lg.masked_fill((p[None, :] > t[:, None])[..., None], float("-inf"))
        a = torch.softmax(lg, 1)                                                # over key positions
        return q * torch.einsum("tpd,pd->td", a, V)

    # Batched.

    def _logits(self, k, t, p):
        w = self.bias(t, p)[None, :, :, None]                             # (1, Nt, Np, 1)
        lg = k[:, None] + w if self.form == "add" else k[:, None] * w
        if self.causal:
            lg = lg.masked_fill((p[None, :] > t[:, None])[None, :, :, None], float("-inf"))
        return lg

    def forward(self, x):
        self._check_x(x, 3)
        self._check(0, x.shape[1])
        return super().forward(x)

    def _prefill(self, x, state):
        B, N, _ = x.shape
        pos = int(state["pos"])
        self._check(pos, N)
        q, k, v = self._qkv(x)
        K, V = self._append(state, k, v, pos)
        t, p = torch.arange(pos, pos + N), torch.arange(pos + N)
        a = torch.softmax(self._logits(K[:, :pos + N], t, p), dim=2)
        y = self.out(q * torch.einsum("btpd,bpd->btd", a, V[:, :pos + N]))
        return y, {"k": K, "v": V, "pos": torch.tensor(pos + N)}


def fast_transformers_aft_full(queries, keys, values, u, v):
    """fast-transformers AFTFullAttention.forward, non-causal, all lengths full (additive
    masks = 0), transcribed from idiap/fast-transformers fast_transformers/attention/aft_attention.py.
    queries/keys/values (N, L, H, E) as the library's inner attention receives them."""
    N, L, H, E = queries.shape
    _, S, _, D = values.shape
    Q = torch.sigmoid(queries)
    K = keys.permute(0, 2, 3, 1).contiguous()
    V = values.permute(0, 2, 3, 1).contiguous()
    w = u[:L].mm(v[:S].t())
    K = K[:, None, :, :, :] * w[None, :, None, None, :]
    K = torch.softmax(K, dim=-1)
    return Q * torch.einsum("nlhds,nhds->nlhd", K, V)


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (AFTSimple, AFTLocal, AFTConv, AFTFull)
