"""GAU, the gated attention unit (§6, Hua et al. 2022), and the projections it shares with
FLASH (flash.py)."""

from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Mixer, _BoundedKVCache
from .common import F32_BYTES, StateSize, _pos_int

__all__ = ["GAU"]


class _GAUBase(Mixer):
    """Shared projections. Note: in the paper a GAU block *replaces* attention + FFN (and
    carries its own residual/norm); here GAU/FLASH are only the sequence mixer of a recur
    block (norm → mixer → FFN), so a GAU-only model uses this mixer with its block's FFN
    configured as in the model config (the exporter decides).
      U = silu(x W_u + b_u) (E), V = silu(x W_v + b_v) (E), Z = silu(x W_z + b_z) (s)
      row r of (qk_gamma, qk_beta): Q_r = qk_gamma[r] ⊙ Z + qk_beta[r]
      output = out(U ⊙ Ô)
    Tensors: u_proj (E, d), v_proj (E, d), z_proj (s, d), out (d, E) (.weight/.bias),
    qk_gamma (R, s), qk_beta (R, s), rel_bias (see subclasses)."""
    ROWS = 2

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.E, self.s = cfg["expansion_dim"], cfg["qk_dim"]
        self.u_proj = nn.Linear(d_model, self.E)
        self.v_proj = nn.Linear(d_model, self.E)
        self.z_proj = nn.Linear(d_model, self.s)
        self.qk_gamma = nn.Parameter(1 + 0.3 * torch.randn(self.ROWS, self.s))
        self.qk_beta = nn.Parameter(0.3 * torch.randn(self.ROWS, self.s))
        self.out = nn.Linear(self.E, d_model)

    def _proj(self, x):
        u, v, z = F.silu(self.u_proj(x)), F.silu(self.v_proj(x)), F.silu(self.z_proj(x))
        qk = z.unsqueeze(-2) * self.qk_gamma + self.qk_beta               # (..., R, s)
        return u, v, qk.unbind(-2)


class GAU(_BoundedKVCache, _GAUBase):
    """Gated attention unit, one head:
      Q = γ_0 ⊙ Z + β_0, K = γ_1 ⊙ Z + β_1,
      A_{t,p} = relu(scale · Q_t·K_p + rel_bias[·])²   (causal: p ≤ t; no softmax, no normaliser)
      y = out(U ⊙ A V)
    Config: expansion_dim E, qk_dim s, max_length T (sequences/contexts longer raise
    ValueError), scale (default 1/T: the paper divides by the sequence length), causal.
    length_scale (FLASH-pytorch's GAU): A_{t,p} = relu((scale · Q_t·K_p + rel_bias[·]) / N)²,
    N the length of the encoded sequence: an encoder only (noncausal), where "causal" is the
    mask p ≤ t (rel_bias (T,), index t − p); no step form.
    rel_bias: causal (T,), index t − p; non-causal (2T−1,), index t − p + T − 1
    (a learned bias per relative offset; the paper uses T5-style buckets or RoPE).
    State (causal, a KV cache bounded by T): per stream {"k" (P, s), "v" (P, E)} of the P
    positions so far ({} when non-causal); batched k (B, T, s), v (B, T, E), pos.
    """
    TYPE = "gau"
    USES_POS = True
    KEYS = ({"expansion_dim", "qk_dim", "max_length"}, {"scale", "causal", "length_scale"})

    @classmethod
    def config_causal(cls, cfg):
        if cfg.get("length_scale", False):
            return False   # length_scale divides by the whole length: an encoder, "causal" its mask
        return super().config_causal(cfg)

    @classmethod
    def check_config(cls, cfg, need, causal):
        need(_pos_int(cfg["max_length"]), "mixer.max_length must be a positive integer")
        need(isinstance(cfg.get("length_scale", False), bool), "mixer.length_scale must be true or false")

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        return StateSize(True, 0, F32_BYTES * (cfg["qk_dim"] + cfg["expansion_dim"]), cfg["max_length"])

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.T = cfg["max_length"]
        self.scale = cfg.get("scale", 1.0 / self.T)
        self.length_scale = cfg.get("length_scale", False)
        self.mask = cfg.get("causal", True)    # p ≤ t (the step form's, or length_scale's mask)
        self.rel_bias = nn.Parameter(0.3 * torch.randn(self.T if self.mask else 2 * self.T - 1))

    # Per stream.

    def _kv_widths(self):
        return self.s, self.E

    def _project(self, x):
        u, v, (q, k) = self._proj(x)
        return q, k, v, lambda y: self.out(u * y)

    def _attend(self, q: Tensor, K: Tensor, V: Tensor, t: Tensor, mask: bool) -> Tensor:
        """Σ_p A_{t,p} V_p ([B,] Nt, E) for queries q ([B,] Nt, s) at positions t over keys
        K ([B,] Np, s), values V ([B,] Np, E) at positions 0..Np−1; mask: drop p > t (causal).
        With length_scale the keys are the whole sequence, N = Np."""
        off = t[:, None] - torch.arange(K.shape[-2])[None, :]             # t − p
        b = self.rel_bias[off.clamp(min=0)] if self.mask else self.rel_bias[off + self.T - 1]
        sim = self.scale * q @ K.transpose(-1, -2) + b
        if self.length_scale:
            sim = sim / K.shape[-2]
        a = F.relu(sim) ** 2
        if mask or (self.length_scale and self.mask):   # noncausal passes mask False
            a = a.masked_fill(off < 0, 0.0)
        return a @ V

    def _no_rnn(self):
        if not self.length_scale:
            super()._no_rnn()
        raise ValueError("mixer gau: no recurrent (step) form because length_scale divides by the whole "
                         "sequence's length (an encoder, causal its mask); use forward(x) over the whole sequence")

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        if self.length_scale:
            self._no_rnn()
        return super().parallel(x, state, pos, chunk)

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        if self.length_scale:
            self._no_rnn()
        return super().recurrent(x, state, pos)

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        N = x.shape[1]
        self._check(0, N)
        u, v, (q, k) = self._proj(x)
        return self.out(u * self._attend(q, k, v, torch.arange(N), self.mask))

    def _prefill(self, x, state):
        N, pos = x.shape[1], int(state["pos"])
        self._check(pos, N)
        u, v, (q, k) = self._proj(x)
        K, V = self._append(state, k, v, pos)
        y = self._attend(q, K[:, :pos + N], V[:, :pos + N], torch.arange(pos, pos + N), True)
        return self.out(u * y), {"k": K, "v": V, "pos": torch.tensor(pos + N)}


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (GAU,)
