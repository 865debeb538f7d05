"""FLASH, mixed-chunk attention (§6, Hua et al. 2022), on GAU's projections (gau.py)."""

from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .common import F32_BYTES, StateSize, _dtype, _pos_int
from .gau import _GAUBase
from .rotary import _rotate

__all__ = ["FLASH"]


class FLASH(_GAUBase):
    """FLASH mixed-chunk attention (§6). Chunks are absolute: chunk g = positions
    [g·C, (g+1)·C) (the last may be shorter). Rows of qk_gamma/qk_beta (4, s):
    0 = Q^quad, 1 = K^quad, 2 = Q^lin, 3 = K^lin. For t in chunk g, with slot i = t − g·C:
      quad_t = Σ_{p in chunk g, p ≤ t} relu(scale · Q^quad_t·K^quad_p + rel_bias[t − p])² V_p
      lin_t  = scale · Q^lin_t · Σ_{p in chunks h < g} K^lin_pᵀ V_p
      y_t    = out(U_t ⊙ (quad_t + lin_t))
    Non-causal: quad over the whole chunk (rel_bias[t − p + C − 1]) and
      lin_t = (1/N) · Q^lin_t · Σ_{all p} K^lin_pᵀ V_p  (the paper's code divides by the length).
    Config: expansion_dim E, qk_dim s, chunk C, scale (default 1/C, the paper's group size), causal.
    rel_bias: causal (C,), non-causal (2C−1,).
    State (causal, fixed size): S (B, s, E) = Σ over completed chunks of K^linᵀV; the current
    chunk's buffers kq_buf (B, C, s), kl_buf (B, C, s), v_buf (B, C, E) (slot i = position
    g·C + i; slots ≥ pos mod C are stale); pos. When a chunk completes, S += kl_bufᵀ v_buf.
    Per stream the same without B and pos: {"S" (s, E), "kl_buf" (C, s), "kq_buf" (C, s),
    "v_buf" (C, E)}.
    With "rotary" (§12, within qk_dim), Q^quad, K^quad, Q^lin and K^lin are all turned by their
    position (as FLASH-pytorch's rotary_pos_emb), so the buffers hold turned keys.
    """
    TYPE = "flash"
    USES_POS = True
    KEYS = ({"expansion_dim", "qk_dim", "chunk"}, {"scale", "causal", "rotary"})
    ROTARY_WIDTH = "qk_dim"

    @classmethod
    def check_config(cls, cfg, need, causal):
        need(_pos_int(cfg["chunk"]), "mixer.chunk must be a positive integer")

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        s, e, c = cfg["qk_dim"], cfg["expansion_dim"], cfg["chunk"]
        return StateSize(True, F32_BYTES * (s * e + c * (2 * s + e)), 0, None)
    ROWS = 4

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.C = cfg["chunk"]
        self.scale = cfg.get("scale", 1.0 / self.C)
        self.rel_bias = nn.Parameter(0.3 * torch.randn(self.C if self.causal else 2 * self.C - 1))

    def _proj_at(self, x: Tensor, pos: int):
        """_proj of x at positions pos..: u, v and the four query/key rows, turned by the rotary."""
        u, v, qk = self._proj(x)
        return u, v, tuple(_rotate(self, t, pos) for t in qk)

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S and every buffer slot 0 (sorted names)."""
        return {"S": torch.zeros(self.s, self.E, dtype=dtype), "kl_buf": torch.zeros(self.C, self.s, dtype=dtype),
                "kq_buf": torch.zeros(self.C, self.s, dtype=dtype), "v_buf": torch.zeros(self.C, self.E, dtype=dtype)}

    def _write(self, state: Dict[str, Tensor], kl: Tensor, kq: Tensor, v: Tensor, pos: int) -> Dict[str, Tensor]:
        """The buffers after positions pos..pos+N−1 are written to slots p mod C (the last
        C positions win); S unchanged."""
        n = len(v)
        new = {name: t.clone() for name, t in state.items()}
        p = torch.arange(max(pos, pos + n - self.C), pos + n)
        for name, t in (("kl_buf", kl), ("kq_buf", kq), ("v_buf", v)):
            new[name][p % self.C] = t[p - pos]
        return new

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form: x (N, d_model) at positions pos..pos+N−1 after `state`.
        The context is the current group's earlier positions (buffer slots 0..pos mod C − 1)
        followed by x's; per group h of the context, S_h = state S + Σ of K^linᵀV over the
        context's groups before h. Each parallel chunk of `chunk` queries attends (quadratic
        part, masked to same group and p ≤ t) to the context keys from its first query's
        group start to its last query, and reads S_{group(t)} (linear part). Returns
        (out (N, d_model), the state after x)."""
        u, v, (qq, kq, ql, kl) = self._proj_at(x, pos)
        n, C = len(x), self.C
        j0 = pos % C
        start = pos - j0                                                   # first position of the context
        Kq = torch.cat([state["kq_buf"][:j0], kq])
        Kl = torch.cat([state["kl_buf"][:j0], kl])
        V = torch.cat([state["v_buf"][:j0], v])
        p_ctx = torch.arange(start, pos + n)
        groups = (len(p_ctx) + C - 1) // C                                 # context group h = [start + h·C, ...)
        S_before = [state["S"]]
        for h in range(groups):
            S_before.append(S_before[-1] + Kl[h * C:(h + 1) * C].T @ V[h * C:(h + 1) * C])
        S_before = torch.stack(S_before)                                   # (groups + 1, s, E)
        outs = []
        for c in range(0, n, chunk):
            t = torch.arange(pos + c, pos + min(c + chunk, n))
            lo, hi = (int(t[0]) // C) * C - start, int(t[-1]) + 1 - start
            p = p_ctx[lo:hi]
            off = t[:, None] - p[None, :]
            ok = (off >= 0) & (t[:, None] // C == p[None, :] // C)
            s_qk = self.scale * qq[c:c + len(t)] @ Kq[lo:hi].T
            a = F.relu(s_qk + self.rel_bias[off.clamp(0, C - 1)]) ** 2
            quad = a.masked_fill(~ok, 0.0) @ V[lo:hi]
            lin = self.scale * torch.einsum("ts,tse->te", ql[c:c + len(t)], S_before[(t - start) // C])
            outs.append(u[c:c + len(t)] * (quad + lin))
        new = self._write(state, kl, kq, v, pos)
        new["S"] = S_before[(pos + n) // C - start // C]                   # groups completed by pos + N
        return self.out(torch.cat(outs)), new

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form, as the batched step: per position t (slot j = t mod C) write K^quad_t,
        K^lin_t, V_t into slot j, attend over slots 0..j, read S; when j = C − 1 the group is
        complete: S += kl_bufᵀ v_buf. Same arguments and result as `parallel`."""
        u, v, (qq, kq, ql, kl) = self._proj_at(x, pos)
        S, kqb, klb, vb = state["S"], state["kq_buf"].clone(), state["kl_buf"].clone(), state["v_buf"].clone()
        outs = []
        for i in range(len(x)):
            j = (pos + i) % self.C
            kqb[j], klb[j], vb[j] = kq[i], kl[i], v[i]
            a = F.relu(self.scale * kqb[:j + 1] @ qq[i] + self.rel_bias[j - torch.arange(j + 1)]) ** 2   # (j+1,)
            outs.append(u[i] * (a @ vb[:j + 1] + self.scale * ql[i] @ S))
            if j == self.C - 1:
                S = S + klb.T @ vb
        return self.out(torch.stack(outs)), {"S": S, "kl_buf": klb, "kq_buf": kqb, "v_buf": vb}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x as a whole utterance (positions 0..N−1; an encoder
        keeps no state, so `state` comes back unchanged): quad over each whole group with
        rel_bias[t − p + C − 1], lin_t = (1/N) · Q^lin_t · Σ_all K^lin_pᵀ V_p."""
        if pos != 0:
            raise ValueError("a non-causal flash mixer runs on a whole utterance from position 0")
        u, v, (qq, kq, ql, kl) = self._proj_at(x, 0)
        n = len(x)
        lin = ql @ (kl.T @ v) / n
        quad = []
        for c in range(0, n, self.C):
            m = min(self.C, n - c)
            off = torch.arange(m)[:, None] - torch.arange(m)[None, :]
            a = F.relu(self.scale * qq[c:c + m] @ kq[c:c + m].T + self.rel_bias[off + self.C - 1]) ** 2
            quad.append(a @ v[c:c + m])
        return self.out(u * (torch.cat(quad) + lin)), state

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        if self.causal:
            return self._prefill(x, self._initial_state(x.shape[0], None))[0]
        B, N, _ = x.shape
        u, v, (qq, kq, ql, kl) = self._proj_at(x, 0)
        lin = torch.einsum("bis,bse->bie", ql, torch.einsum("bjs,bje->bse", kl, v)) / N
        quad = []
        for c in range(0, N, self.C):
            n = min(self.C, N - c)
            off = torch.arange(n)[:, None] - torch.arange(n)[None, :]
            a = F.relu(self.scale * torch.einsum("bis,bjs->bij", qq[:, c:c + n], kq[:, c:c + n])
                       + self.rel_bias[off + self.C - 1]) ** 2
            quad.append(a @ v[:, c:c + n])
        return self.out(u * (torch.cat(quad, 1) + lin))

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        z = lambda *s: torch.zeros(batch, *s, dtype=dt, device=dev)
        return {"S": z(self.s, self.E), "kq_buf": z(self.C, self.s), "kl_buf": z(self.C, self.s),
                "v_buf": z(self.C, self.E), "pos": torch.tensor(0)}

    def _prefill(self, x, state):
        """Chunked form continuing from state (also used by step, with N = 1)."""
        N, pos0 = x.shape[1], int(state["pos"])
        u, v, (qq, kq, ql, kl) = self._proj_at(x, pos0)
        S = state["S"]
        kqb, klb, vb = state["kq_buf"].clone(), state["kl_buf"].clone(), state["v_buf"].clone()
        outs, i = [], 0
        while i < N:
            j0 = (pos0 + i) % self.C                                      # slot of x[:, i]
            n = min(self.C - j0, N - i)
            kqb[:, j0:j0 + n], klb[:, j0:j0 + n], vb[:, j0:j0 + n] = kq[:, i:i + n], kl[:, i:i + n], v[:, i:i + n]
            ti = torch.arange(j0, j0 + n)[:, None]
            pj = torch.arange(j0 + n)[None, :]
            off = ti - pj
            a = F.relu(self.scale * torch.einsum("bis,bjs->bij", qq[:, i:i + n], kqb[:, :j0 + n])
                       + self.rel_bias[off.clamp(min=0)]) ** 2
            a = a.masked_fill(off < 0, 0.0)
            quad = a @ vb[:, :j0 + n]
            lin = self.scale * torch.einsum("bis,bse->bie", ql[:, i:i + n], S)
            outs.append(u[:, i:i + n] * (quad + lin))
            if j0 + n == self.C:                                          # chunk complete
                S = S + torch.einsum("bjs,bje->bse", klb, vb)
            i += n
        y = self.out(torch.cat(outs, 1))
        return y, {"S": S, "kq_buf": kqb, "kl_buf": klb, "v_buf": vb, "pos": torch.tensor(pos0 + N)}


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (FLASH,)
