"""Linear attention with feature maps (§3); the maps themselves are feature_maps.py."""

import math
from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Mixer
from .common import CHUNK, F32_BYTES, StateSize, _dtype, _pos_int, _pos_number
from .feature_maps import (FAVOR_LAYOUTS, FEATURE_MAPS, FOURIER_MAPS, PERFORMER_MAPS, _FeatureMapParams,
                           fast_transformers_favor, feature_dim, performer_favor, poly2, random_fourier)
from .rotary import _rotate

__all__ = ["LinearAttention"]


class LinearAttention(Mixer):
    """Linear attention (§3): V'_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ z + ε), no 1/√dk (as fast-transformers).

    Config: heads, dk, dv, feature_map, eps, causal; with feature_map 'favor' also
    n_features (m), favor_layout ('performer' default | 'fast_transformers'), softmax_temp
    (default 1/√dk). Feature maps (φ applied per head to the dk-vector):
      elu_plus_one  φ = elu(x)+1                               C = dk
      relu          φ = max(x, 0)                              C = dk
      poly2         φ = vec(x xᵀ)                              C = dk²
      favor/performer         φ = performer_favor(x, ω)        C = m,          ω (dk, m)
      favor/fast_transformers φ = fast_transformers_favor(x, ω, n_dims=m)
                                                               C = 2·(m//2),   ω (dk, m//2)
      random_fourier          φ = random_fourier(x, ω, m, t)   C = 2·(m//2),   ω (dk, m//2)
      smoothed_random_fourier φ = random_fourier(x, ω, m, t, smoothing)
                                                               C = 2·(m//2)+1, ω (dk, m//2)
    ω is shared by all heads (as in fast-transformers: one feature map per attention layer).
    Tensors: query, key, value, out (.weight/.bias as softmax_attention) and, for favor,
    feature_map.omega (the fast-transformers name inner_attention.feature_map.omega), one per
    layer, initialised by orthogonal_random_matrix_ from the global torch RNG.
    State: S = Σ φ(k)vᵀ, z = Σ φ(k); per stream S (H, C, dv), z (H, C) (the forms take and
    return them as two tensors); batched (causal) S (B, H, C, dv), z (B, H, C).
    With "rotary" (§12), q and k are turned by their position before φ; the per-stream forms
    then take the position of x's first row (pos), and the batched state has "pos" too.
    """
    TYPE = "linear_attention"
    KEYS = ({"heads", "dk", "dv", "feature_map", "eps"},
            {"causal", "n_features", "favor_layout", "softmax_temp", "feature_eps", "eps_per_feature", "smoothing",
             "rotary"})
    ROTARY_WIDTH = "dk"

    @classmethod
    def check_config(cls, cfg, need, causal):
        fm = cfg["feature_map"]
        need(fm in FEATURE_MAPS, f"unknown mixer.feature_map {fm!r}; expected one of {list(FEATURE_MAPS)}")
        performer = fm in PERFORMER_MAPS
        need(_pos_number(cfg["eps"]) or (performer and cfg["eps"] == 0 and not isinstance(cfg["eps"], bool)),
             "mixer.eps must be > 0")
        need(isinstance(cfg.get("eps_per_feature", False), bool), "mixer.eps_per_feature must be true or false")
        need("feature_eps" not in cfg or (performer and _pos_number(cfg["feature_eps"])),
             "mixer.feature_eps must be > 0 and applies only to feature_map 'favor_stabilized' or "
             "'generalized_relu'")
        favor_keys = {"n_features", "favor_layout", "softmax_temp"} & set(cfg)
        if performer:
            need(_pos_int(cfg.get("n_features")), f"mixer.n_features must be a positive integer with feature_map {fm!r}")
            need("favor_layout" not in cfg, "mixer.favor_layout applies only to feature_map 'favor'")
            need("softmax_temp" not in cfg or _pos_number(cfg["softmax_temp"]), "mixer.softmax_temp must be > 0")
            need(fm != "favor_stabilized" or not causal,
                 "mixer.feature_map 'favor_stabilized' is encoder-only (causal false): its key stabiliser "
                 "is a maximum over the whole sequence")
        elif fm in FOURIER_MAPS:
            need(_pos_int(cfg.get("n_features")) and cfg["n_features"] >= 2,
                 f"mixer.n_features must be an integer >= 2 with feature_map {fm!r}")
            need("favor_layout" not in cfg, "mixer.favor_layout applies only to feature_map 'favor'")
            need("softmax_temp" not in cfg or _pos_number(cfg["softmax_temp"]), "mixer.softmax_temp must be > 0")
        elif fm == "favor":
            need("n_features" in cfg, "mixer.n_features is required with feature_map 'favor'")
            layout = cfg.get("favor_layout", "performer")
            need(layout in FAVOR_LAYOUTS, f"unknown mixer.favor_layout {layout!r}; expected one of {list(FAVOR_LAYOUTS)}")
            need(_pos_int(cfg["n_features"]) and (layout == "performer" or cfg["n_features"] >= 2),
                 "mixer.n_features must be a positive integer (>= 2 for favor_layout 'fast_transformers')")
            if "softmax_temp" in cfg:
                need(_pos_number(cfg["softmax_temp"]), "mixer.softmax_temp must be > 0")
        else:
            need(not favor_keys, f"keys {sorted(favor_keys)} are only valid with feature_map 'favor'")
        sm = cfg.get("smoothing", 1.0)
        need("smoothing" not in cfg or (fm == "smoothed_random_fourier" and isinstance(sm, (int, float))
                                        and not isinstance(sm, bool) and math.isfinite(sm)),
             "mixer.smoothing must be a finite number and applies only to feature_map "
             "'smoothed_random_fourier'")

    @classmethod
    def recurrent_state(cls, cfg, d_model):
        c = feature_dim(cfg)
        return StateSize(True, F32_BYTES * cfg["heads"] * (c * cfg["dv"] + c), 0, None)

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv, self.eps = cfg["heads"], cfg["dk"], cfg["dv"], cfg["eps"]
        self.fm = cfg["feature_map"]
        self.C = feature_dim(cfg)
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        self.eps_per_feature = cfg.get("eps_per_feature", False)
        if self.fm in FOURIER_MAPS:
            self.n_features = cfg["n_features"]
            self.softmax_temp = cfg.get("softmax_temp", 1 / math.sqrt(self.dk))
            self.smoothing = cfg.get("smoothing", 1.0) if self.fm == "smoothed_random_fourier" else None
            self.feature_map = _FeatureMapParams(self.dk, self.n_features // 2)
        if self.fm == "favor" or self.fm in PERFORMER_MAPS:
            self.layout = cfg.get("favor_layout", "performer")
            self.n_features = cfg["n_features"]
            self.softmax_temp = cfg.get("softmax_temp", 1 / math.sqrt(self.dk))
            self.feature_eps = cfg.get("feature_eps", PERFORMER_MAPS.get(self.fm, 0.0))
            cols = self.n_features if self.layout == "performer" else self.n_features // 2
            self.feature_map = _FeatureMapParams(self.dk, cols)

    def phi(self, x: Tensor) -> Tensor:
        if self.fm == "elu_plus_one":
            return F.elu(x) + 1
        if self.fm == "relu":
            return F.relu(x)
        if self.fm == "poly2":
            return poly2(x)
        omega = self.feature_map.omega
        if self.fm in FOURIER_MAPS:
            return random_fourier(x, omega, self.n_features, self.softmax_temp, self.smoothing)
        if self.fm == "generalized_relu":   # relu(ω_jᵀx̃) + ε
            return F.relu((x * math.sqrt(self.softmax_temp)) @ omega) + self.feature_eps
        if self.layout == "performer":
            return performer_favor(x, omega, self.softmax_temp)
        return fast_transformers_favor(x, omega, self.n_features, self.softmax_temp)

    def _stabilized(self, x: Tensor, keys: bool) -> Tensor:
        """favor_stabilized (performer-pytorch's softmax_kernel) of x (..., N, H, dk): s = x̃ω,
        φ = (exp(s − ‖x̃‖²/2 − max) + ε)/√m with the max over j (queries) or over the
        sequence and j per head (keys: dims N and C of (..., N, H, C))."""
        x = x * math.sqrt(self.softmax_temp)
        s = x @ self.feature_map.omega
        top = s.amax(dim=(-3, -1), keepdim=True) if keys else s.amax(dim=-1, keepdim=True)
        diag = 0.5 * (x * x).sum(-1, keepdim=True)
        return (torch.exp(s - diag - top) + self.feature_eps) / math.sqrt(self.n_features)

    def _features(self, x, pos: int = 0):
        """x ([B,] N, d_model) at positions pos.. → φ(q), φ(k) ([B,] N, H, C) (of q, k turned by
        the rotary, if any), v ([B,] N, H, dv)."""
        lead = x.shape[:-1]
        q = _rotate(self, self.query(x).view(*lead, self.heads, self.dk), pos, heads_last=True)
        k = _rotate(self, self.key(x).view(*lead, self.heads, self.dk), pos, heads_last=True)
        if self.fm == "favor_stabilized":
            q, k = self._stabilized(q, False), self._stabilized(k, True)
        else:
            q, k = self.phi(q), self.phi(k)
        v = self.value(x).view(*lead, self.heads, self.dv)
        return q, k, v

    def _eps(self, q: Tensor):
        """The denominator's ε for query features q (..., C): eps, or eps·Σq
        (φ(q)·(z + eps), eps_per_feature)."""
        return self.eps * q.sum(-1) if self.eps_per_feature else self.eps

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S (H, C, dv) and z (H, C) zero."""
        return {"S": torch.zeros(self.heads, self.C, self.dv, dtype=dtype),
                "z": torch.zeros(self.heads, self.C, dtype=dtype)}

    def parallel(self, x: Tensor, S: Tensor, z: Tensor, chunk: int, pos: int = 0):
        """Chunked parallel form (docs/attention-math.md §3, "Parallel (chunked) form").

        x (N, d_model); S (H, C, dv), z (H, C): the state before x.
        Returns (out (N, d_model), S, z after x). chunk ≥ N is the plain masked
        φ(Q)φ(K)ᵀ form; chunk = 1 is the RNN with a different summation order.
        pos: the position of x's first row (read by the rotary only).
        """
        q, k, v = self._features(x, pos)
        outs = []
        for c in range(0, len(x), chunk):
            qc, kc, vc = q[c:c + chunk], k[c:c + chunk], v[c:c + chunk]  # (T, H, ·)
            sim = torch.einsum("ihc,jhc->hij", qc, kc).tril()            # (H, T, T): φ(q_i)·φ(k_j), j ≤ i
            num = torch.einsum("hij,jhm->ihm", sim, vc) + torch.einsum("ihc,hcm->ihm", qc, S)  # (T, H, dv)
            den = sim.sum(-1).T + torch.einsum("ihc,hc->ih", qc, z)      # (T, H)
            outs.append(num / (den + self._eps(qc)).unsqueeze(-1))
            S = S + torch.einsum("jhc,jhm->hcm", kc, vc)                 # S += φ(K_c)ᵀ V_c
            z = z + kc.sum(0)                                            # z += Σ_rows φ(K_c)
        o = torch.cat(outs)                                              # (N, H, dv)
        return self.out(o.reshape(len(x), -1)), S, z

    def noncausal(self, x: Tensor, S: Tensor, z: Tensor, pos: int = 0):
        """Non-causal (encoder) form, docs/attention-math.md §3 without the mask:
        every position sees the whole sequence, V'_i = φ(q_i)ᵀ S_N / (φ(q_i)ᵀ z_N + ε),
        with S_N, z_N summed over all N positions (added to the given S, z,
        which are zero for a whole utterance). Same result shape as `parallel`."""
        q, k, v = self._features(x, pos)
        S = S + torch.einsum("jhc,jhm->hcm", k, v)                      # (H, C, dv)
        z = z + k.sum(0)                                                # (H, C)
        num = torch.einsum("ihc,hcm->ihm", q, S)                        # (N, H, dv)
        den = torch.einsum("ihc,hc->ih", q, z) + self._eps(q)           # (N, H)
        o = num / den.unsqueeze(-1)
        return self.out(o.reshape(len(x), -1)), S, z

    def recurrent(self, x: Tensor, S: Tensor, z: Tensor, pos: int = 0):
        """RNN form, position by position (docs/attention-math.md §3, "Causal masking = an RNN").

        Same arguments and result as `parallel`.
        """
        q, k, v = self._features(x, pos)
        outs = []
        for qi, ki, vi in zip(q, k, v):                      # (H, C), (H, C), (H, dv)
            S = S + torch.einsum("hc,hm->hcm", ki, vi)       # S_i = S_{i−1} + φ(k_i) v_iᵀ
            z = z + ki                                       # z_i = z_{i−1} + φ(k_i)
            num = torch.einsum("hc,hcm->hm", qi, S)          # φ(q_i)ᵀ S_i       (H, dv)
            den = torch.einsum("hc,hc->h", qi, z) + self._eps(qi)  # φ(q_i)ᵀ z_i + ε  (H,)
            outs.append(num / den.unsqueeze(-1))
        o = torch.stack(outs)                                # (N, H, dv)
        return self.out(o.reshape(len(x), -1)), S, z

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        if self.causal:
            return self._prefill(x, self._initial_state(x.shape[0], None))[0]
        B, N, _ = x.shape
        q, k, v = self._features(x)
        S = torch.einsum("bjhc,bjhm->bhcm", k, v)
        z = k.sum(1)
        num = torch.einsum("bihc,bhcm->bihm", q, S)
        den = torch.einsum("bihc,bhc->bih", q, z) + self._eps(q)
        return self.out((num / den.unsqueeze(-1)).reshape(B, N, -1))

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        state = {"S": torch.zeros(batch, self.heads, self.C, self.dv, dtype=dt, device=dev),
                 "z": torch.zeros(batch, self.heads, self.C, dtype=dt, device=dev)}
        return state if self.rotary is None else {**state, "pos": torch.tensor(0)}

    def _advance(self, state: dict, new: dict, n: int) -> dict:
        """`new` (S, z) with the position moved n on, when the state keeps one (rotary)."""
        return new if "pos" not in state else {**new, "pos": torch.tensor(int(state["pos"]) + n)}

    def _prefill(self, x, state, chunk: int = CHUNK):
        """Chunked form (§3 "Parallel (chunked) form"), continuing from state."""
        B, N, _ = x.shape
        q, k, v = self._features(x, int(state.get("pos", 0)))
        S, z = state["S"], state["z"]
        outs = []
        for c in range(0, N, chunk):
            qc, kc, vc = q[:, c:c + chunk], k[:, c:c + chunk], v[:, c:c + chunk]
            sim = torch.einsum("bihc,bjhc->bhij", qc, kc).tril()
            num = torch.einsum("bhij,bjhm->bihm", sim, vc) + torch.einsum("bihc,bhcm->bihm", qc, S)
            den = sim.sum(-1).transpose(1, 2) + torch.einsum("bihc,bhc->bih", qc, z)
            outs.append(num / (den + self._eps(qc)).unsqueeze(-1))
            S = S + torch.einsum("bjhc,bjhm->bhcm", kc, vc)
            z = z + kc.sum(1)
        o = torch.cat(outs, 1)
        return self.out(o.reshape(B, N, -1)), self._advance(state, {"S": S, "z": z}, N)

    def step(self, x_t, state):
        """The RNN form of §3 literally: S += φ(k)vᵀ, z += φ(k), y = φ(q)ᵀS / (φ(q)ᵀz + ε)."""
        if not self.has_step:
            self._no_rnn()
        self._check_x(x_t, 2)
        q, k, v = (t[:, 0] for t in self._features(x_t[:, None], int(state.get("pos", 0))))   # (B, H, ·)
        S = state["S"] + torch.einsum("bhc,bhm->bhcm", k, v)
        z = state["z"] + k
        num = torch.einsum("bhc,bhcm->bhm", q, S)
        den = torch.einsum("bhc,bhc->bh", q, z) + self._eps(q)
        y = self.out((num / den.unsqueeze(-1)).reshape(len(x_t), -1))
        return y, self._advance(state, {"S": S, "z": z}, 1)


# The classes of this module's config names, for the registry (registry.py).
MIXER_CLASSES = (LinearAttention,)
