"""The reference model: a causal linear-attention (or softmax-attention baseline,
sliding-window attention, AFT-simple, AFT-local, AFT-conv, AFT-full, GAU, FLASH; or the encoder-only Linformer or
Reformer) transformer, run either over a whole sequence at once (parallel form) or one
position at a time (RNN form). A mixed model gives each block its own mixer
(config "mixer" a list of n_layers mixer dicts; see mixer_configs).

Math: docs/attention-math.md §1 (the block), §2 (softmax
attention, the KV-cache baseline) and §3 (linear attention). Config keys and
tensor names: models/configs/README.md; the module attribute names below are
chosen so that `state_dict()` yields exactly those tensor names.
"""

import contextlib
import json
import math
from functools import partial
from typing import Dict, List, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import mixers

# Bumped whenever the reference's math changes (so old goldens are stale).
REFERENCE_VERSION = 1

# Default chunk length T of the parallel form (any T ≥ 1 gives the same result).
CHUNK = 64

_REQUIRED_KEYS = {"layout", "d_model", "n_layers", "norm_placement", "layer_norm_eps", "input",
                  "max_positions", "mixer", "ffn", "final_norm", "head"}
_OPTIONAL_KEYS = {"notes", "input_description", "output_description"}
# Mixer keys valid only with feature_map "favor" (mixers.validate_mixer checks them).
_FAVOR_KEYS = {"n_features", "favor_layout", "softmax_temp"}
# The mixer types a recur config may name ("mixer": one mixer dict for every block, or a
# list of n_layers mixer dicts, block i using entry i: a mixed model).
MIXER_TYPES = ("linear_attention", "softmax_attention", "sliding_window", "aft_simple", "aft_local", "aft_conv",
               "aft_full", "gau", "flash", "linformer", "reformer")


def mixer_configs(config: dict) -> List[dict]:
    """The mixer config of each of the n_layers blocks of a recur config: config["mixer"]
    repeated when it is one dict, or the list itself (block i uses entry i)."""
    mixer = config["mixer"]
    return list(mixer) if isinstance(mixer, list) else [mixer] * config["n_layers"]


def _is_causal(mixer: dict) -> bool:
    """The mixer's causal flag: default true, except linformer and reformer (encoder only: default false)."""
    return mixers.is_causal(mixer)


def _validate_mixer(mixer, d_model) -> None:
    """ValueError (message without the "recur config: " prefix, as a single "mixer"
    dict's messages read) unless `mixer` is a well-formed mixer dict."""

    def need(ok, what):
        if not ok:
            raise ValueError(what)

    def positive_int(v):
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    def positive_number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0

    need(isinstance(mixer, dict) and mixer.get("type") in MIXER_TYPES,
         f"mixer.type must be one of {list(MIXER_TYPES)}")
    if mixer["type"] != "linear_attention":
        # softmax_attention: type, heads, dk, dv, optional causal (no eps, no feature_map);
        # sliding_window: type, heads, dk, dv, window, optional dilation, global_tokens, causal;
        # aft_simple: type, heads, dk, optional causal; aft_local, aft_conv: type, heads, dk,
        # window, optional causal; aft_full: type, heads, dk, max_length, optional bias_rank,
        # bias_form, causal; gau: type, expansion_dim, qk_dim, max_length, optional scale, causal;
        # flash: type, expansion_dim, qk_dim,
        # chunk, optional scale, causal; linformer: type, heads, dk, dv, seq_len, proj_dim, optional
        # sharing, causal (false only); reformer: type, heads, dk, dv, n_buckets, chunk, rounds, optional
        # causal (false only). mixers.py's rules, whose messages name the offending key.
        mixers.validate_mixer(mixer, d_model)
    else:
        need({"type", "heads", "dk", "dv", "feature_map", "eps"} <= set(mixer)
             <= {"type", "heads", "dk", "dv", "feature_map", "eps", "causal"} | _FAVOR_KEYS,
             "mixer must have the keys type, heads, dk, dv, feature_map, eps and optionally causal "
             f"(and, with feature_map 'favor', {sorted(_FAVOR_KEYS)})")
        need(isinstance(mixer.get("causal", True), bool), "mixer.causal must be true or false")
        need(all(positive_int(mixer[k]) for k in ("heads", "dk", "dv")), "mixer.heads/dk/dv must be positive integers")
        need(mixer["feature_map"] in mixers.FEATURE_MAPS,
             f"mixer.feature_map must be one of {list(mixers.FEATURE_MAPS)}")
        need(positive_number(mixer["eps"]), "mixer.eps must be > 0")
        # the feature-map rules (favor keys, n_features, favor_layout, softmax_temp): mixers.py
        mixers.validate_mixer(mixer, d_model)


def validate(config: dict) -> None:
    """Raise ValueError unless `config` is a well-formed recur-layout config."""

    def need(ok, what):
        if not ok:
            raise ValueError(f"recur config: {what}")

    def positive_int(v):
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    def positive_number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0

    def exact_keys(d, keys, where):
        need(isinstance(d, dict) and set(d) == keys, f"{where} must have exactly the keys {sorted(keys)}")

    keys = set(config)
    need(keys >= _REQUIRED_KEYS, f"missing keys {sorted(_REQUIRED_KEYS - keys)}")
    need(keys <= _REQUIRED_KEYS | _OPTIONAL_KEYS, f"unknown keys {sorted(keys - _REQUIRED_KEYS - _OPTIONAL_KEYS)}")
    need(config["layout"] == "recur", "layout must be 'recur'")
    need(positive_int(config["d_model"]), "d_model must be a positive integer")
    need(positive_int(config["n_layers"]), "n_layers must be a positive integer")
    need(config["norm_placement"] in ("pre", "post"), "norm_placement must be 'pre' or 'post'")
    need(positive_number(config["layer_norm_eps"]), "layer_norm_eps must be > 0")
    mp = config["max_positions"]
    need(isinstance(mp, int) and not isinstance(mp, bool) and mp >= 0, "max_positions must be an integer >= 0")
    need(isinstance(config["final_norm"], bool), "final_norm must be true or false")

    inp = config["input"]
    need(isinstance(inp, dict) and inp.get("kind") in ("tokens", "features"), "input.kind must be 'tokens' or 'features'")
    if inp["kind"] == "tokens":
        exact_keys(inp, {"kind", "vocab_size"}, "input (tokens)")
        need(positive_int(inp["vocab_size"]), "input.vocab_size must be a positive integer")
    else:
        exact_keys(inp, {"kind", "feature_width", "projection"}, "input (features)")
        need(positive_int(inp["feature_width"]), "input.feature_width must be a positive integer")
        need(isinstance(inp["projection"], bool), "input.projection must be true or false")
        need(inp["projection"] or inp["feature_width"] == config["d_model"],
             "input.feature_width must equal d_model when projection is false")

    mixer = config["mixer"]
    if not isinstance(mixer, list):   # one mixer dict for every block
        try:
            _validate_mixer(mixer, config["d_model"])
        except ValueError as e:
            raise ValueError(f"recur config: {e}") from None
    else:                             # a mixed model: one mixer dict per block
        need(len(mixer) == config["n_layers"],
             f"mixer is a list of {len(mixer)} entries, expected one per block (n_layers = {config['n_layers']})")
        for i, m in enumerate(mixer):
            t = m.get("type") if isinstance(m, dict) else None
            where = f"mixer[{i}] ({t})" if isinstance(t, str) else f"mixer[{i}]"
            try:
                _validate_mixer(m, config["d_model"])
            except ValueError as e:
                msg = str(e)
                inner = f"mixer ({t}): "     # mixers.validate_mixer's own prefix, replaced by `where`
                raise ValueError(f"recur config: {where}: {msg[len(inner):] if msg.startswith(inner) else msg}") \
                    from None
            need(_is_causal(m) == _is_causal(mixer[0]),
                 f"mixer[{i}]: causal {json.dumps(_is_causal(m))} differs from mixer[0] "
                 f"(causal {json.dumps(_is_causal(mixer[0]))}): all blocks must be causal, or all non-causal")
        # Linformer blocks with sharing "layerwise" share one E [proj_dim, seq_len] (LAYERWISE_E).
        tied = [(i, m) for i, m in enumerate(mixer) if _is_layerwise(m)]
        for i, m in tied[1:]:
            j, first = tied[0]
            need((m["seq_len"], m["proj_dim"]) == (first["seq_len"], first["proj_dim"]),
                 f"mixer[{i}] (linformer): sharing 'layerwise' ties E across blocks, but its seq_len/proj_dim "
                 f"({m['seq_len']}, {m['proj_dim']}) differ from mixer[{j}]'s ({first['seq_len']}, {first['proj_dim']})")

    ffn = config["ffn"]
    exact_keys(ffn, {"d_ff", "activation"}, "ffn")
    need(positive_int(ffn["d_ff"]), "ffn.d_ff must be a positive integer")
    need(ffn["activation"] in ("relu", "gelu"), "ffn.activation must be 'relu' or 'gelu'")

    head = config["head"]
    if head is not None:
        exact_keys(head, {"out", "activation"}, "head")
        need(positive_int(head["out"]), "head.out must be a positive integer")
        need(head["activation"] in ("none", "softmax", "log_softmax"),
             "head.activation must be 'none', 'softmax' or 'log_softmax'")


def _is_layerwise(mixer: dict) -> bool:
    """A linformer mixer whose E is shared by every layerwise block of the model."""
    return mixer.get("type") == "linformer" and mixer.get("sharing", "none") == "layerwise"


class State(NamedTuple):
    """The recurrent state after `pos` positions: one dict of tensors per layer.

    linear_attention (docs/attention-math.md §3), fixed size:
      "S" (H, C, dv): Σ_j φ(k_j) v_jᵀ   (C = feature_dim(mixer config))
      "z" (H, C):     Σ_j φ(k_j)
    softmax_attention (§2), the KV cache, grows by one row per position:
      "K" (H, pos, dk): the keys of every position so far
      "V" (H, pos, dv): their values
    sliding_window, fixed size (R = (w−1)·max_h(d_h) + 1, g = global_tokens):
      "k_glob" (H, g, dk), "k_ring" (H, R, dk), "v_glob" (H, g, dv), "v_ring" (H, R, dv):
      ring slot p mod R holds position p (global positions too); glob slot p holds p < g;
      slots never written are 0
    aft_simple, fixed size (D = heads·dk):
      "den" (D,), "max" (D,), "num" (D,): max = running max of k (−inf before the first
      position), num = Σ exp(k_p − max)·v_p, den = Σ exp(k_p − max)
    aft_local, aft_conv, fixed size (s = window):
      "den" (D,), "k_ring" (s, D), "max" (D,), "num" (D,), "v_ring" (s, D): num, den, max as
      aft_simple's but over the positions that left the window (p ≤ pos − s; −inf max while
      none has); ring slot p mod s holds position p's k and v (slots never written are 0)
    aft_full, the KV cache (bounded by max_length T), grows by one row per position:
      "k" (pos, D), "v" (pos, D): the keys and values of every position so far
    gau, the KV cache (bounded by max_length T), grows by one row per position (E =
      expansion_dim, s = qk_dim): "k" (pos, s), "v" (pos, E): the K and V rows of every
      position so far
    flash, fixed size (E = expansion_dim, s = qk_dim, C = chunk):
      "S" (s, E) = Σ over completed absolute chunks of K^linᵀV; "kl_buf" (C, s),
      "kq_buf" (C, s), "v_buf" (C, E): slot p mod C holds position p's K^lin, K^quad, V
      (the last written; slots ≥ pos mod C are stale, left from the previous chunk)
    linformer, reformer (encoder only): {} (no state).
    In a mixed model each layer's dict is its own mixer's (one of the above per layer).
    Golden records "state.{i}.{name}" follow each dict's order (S, z / K, V / sorted names
    for sliding_window, aft_simple, aft_local, aft_conv, aft_full, gau and flash).
    """
    pos: int                        # positions consumed so far = index of the next position
    layers: List[Dict[str, Tensor]]

    @property
    def S(self) -> List[Tensor]:    # linear_attention layers only
        return [layer["S"] for layer in self.layers]

    @property
    def z(self) -> List[Tensor]:
        return [layer["z"] for layer in self.layers]


def elu_plus_one(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1 > 0 (docs/attention-math.md §3)."""
    return F.elu(x) + 1


def feature_dim(mixer: dict) -> int:
    """C, the width of φ per head of a mixer config (mixers.feature_dim):
    dk (elu_plus_one, relu), dk² (poly2), m (favor performer), 2·(m//2)
    (favor fast_transformers)."""
    return mixers.feature_dim(mixer)


class LinearAttention(nn.Module):
    """Linear attention; no 1/√dk scaling (as in fast-transformers).

    φ per head, on the dk-vector (the functions of recur_ref/mixers.py):
      elu_plus_one  elu(x) + 1                                        C = dk
      relu          max(x, 0)                                         C = dk
      poly2         mixers.poly2: φ_{a·dk+b} = x_a x_b                C = dk²
      favor         performer:         mixers.performer_favor          C = m,        ω (dk, m)
                    fast_transformers: mixers.fast_transformers_favor  C = 2·(m//2), ω (dk, m//2)
                                       (n_dims = m, stabilize = False)
    With favor, ω is the buffer `feature_map.omega`, one per layer, shared by
    all heads, initialised by mixers.orthogonal_random_matrix_ from the global
    torch RNG (so torch.manual_seed makes it deterministic).
    """

    def __init__(self, d_model: int, heads: int, dk: int, dv: int, eps: float, causal: bool = True,
                 feature_map: str = "elu_plus_one", n_features: Optional[int] = None,
                 favor_layout: str = "performer", softmax_temp: Optional[float] = None):
        super().__init__()
        self.heads, self.dk, self.dv, self.eps, self.causal = heads, dk, dv, eps, causal
        self.feature_map_name = feature_map
        cfg = {"feature_map": feature_map, "dk": dk}
        if feature_map == "favor":
            cfg.update(n_features=n_features, favor_layout=favor_layout)
        self.C = mixers.feature_dim(cfg)
        self.query = nn.Linear(d_model, heads * dk)
        self.key = nn.Linear(d_model, heads * dk)
        self.value = nn.Linear(d_model, heads * dv)
        self.out = nn.Linear(heads * dv, d_model)
        if feature_map == "favor":
            if favor_layout not in mixers.FAVOR_LAYOUTS:
                raise ValueError(f"unknown favor_layout {favor_layout!r}")
            self.favor_layout, self.n_features = favor_layout, n_features
            self.softmax_temp = 1 / math.sqrt(dk) if softmax_temp is None else softmax_temp
            columns = n_features if favor_layout == "performer" else n_features // 2
            self.feature_map = mixers._FeatureMapParams(dk, columns)   # buffer feature_map.omega (dk, columns)

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "LinearAttention":
        """The mixer of a recur config's "mixer" section."""
        return cls(d_model, mixer["heads"], mixer["dk"], mixer["dv"], mixer["eps"], mixer.get("causal", True),
                   mixer["feature_map"], mixer.get("n_features"), mixer.get("favor_layout", "performer"),
                   mixer.get("softmax_temp"))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S (H, C, dv) and z (H, C) zero."""
        return {"S": torch.zeros(self.heads, self.C, self.dv, dtype=dtype),
                "z": torch.zeros(self.heads, self.C, dtype=dtype)}

    def phi(self, x: Tensor) -> Tensor:
        """φ of (..., dk) per-head vectors → (..., C)."""
        fm = self.feature_map_name
        if fm == "elu_plus_one":
            return elu_plus_one(x)
        if fm == "relu":
            return F.relu(x)
        if fm == "poly2":
            return mixers.poly2(x)
        omega = self.feature_map.omega
        if self.favor_layout == "performer":
            return mixers.performer_favor(x, omega, self.softmax_temp)
        return mixers.fast_transformers_favor(x, omega, n_dims=self.n_features, softmax_temp=self.softmax_temp,
                                              stabilize=False)

    def _features(self, x: Tensor):
        """x (N, d_model) → φ(q) (N, H, C), φ(k) (N, H, C), v (N, H, dv)."""
        n = len(x)
        q = self.phi(self.query(x).view(n, self.heads, self.dk))
        k = self.phi(self.key(x).view(n, self.heads, self.dk))
        v = self.value(x).view(n, self.heads, self.dv)
        return q, k, v

    def parallel(self, x: Tensor, S: Tensor, z: Tensor, chunk: int):
        """Chunked parallel form (docs/attention-math.md §3, "Parallel (chunked) form").

        x (N, d_model); S (H, C, dv), z (H, C): the state before x.
        Returns (out (N, d_model), S, z after x). chunk ≥ N is the plain masked
        φ(Q)φ(K)ᵀ form; chunk = 1 is the RNN with a different summation order.
        """
        q, k, v = self._features(x)
        outs = []
        for c in range(0, len(x), chunk):
            qc, kc, vc = q[c:c + chunk], k[c:c + chunk], v[c:c + chunk]  # (T, H, ·)
            sim = torch.einsum("ihc,jhc->hij", qc, kc).tril()            # (H, T, T): φ(q_i)·φ(k_j), j ≤ i
            num = torch.einsum("hij,jhm->ihm", sim, vc) + torch.einsum("ihc,hcm->ihm", qc, S)  # (T, H, dv)
            den = sim.sum(-1).T + torch.einsum("ihc,hc->ih", qc, z)      # (T, H)
            outs.append(num / (den + self.eps).unsqueeze(-1))
            S = S + torch.einsum("jhc,jhm->hcm", kc, vc)                 # S += φ(K_c)ᵀ V_c
            z = z + kc.sum(0)                                            # z += Σ_rows φ(K_c)
        o = torch.cat(outs)                                              # (N, H, dv)
        return self.out(o.reshape(len(x), -1)), S, z

    def noncausal(self, x: Tensor, S: Tensor, z: Tensor):
        """Non-causal (encoder) form, docs/attention-math.md §3 without the mask:
        every position sees the whole sequence, V'_i = φ(q_i)ᵀ S_N / (φ(q_i)ᵀ z_N + ε),
        with S_N, z_N summed over all N positions (added to the given S, z,
        which are zero for a whole utterance). Same result shape as `parallel`."""
        q, k, v = self._features(x)
        S = S + torch.einsum("jhc,jhm->hcm", k, v)                      # (H, C, dv)
        z = z + k.sum(0)                                                # (H, C)
        num = torch.einsum("ihc,hcm->ihm", q, S)                        # (N, H, dv)
        den = torch.einsum("ihc,hc->ih", q, z) + self.eps               # (N, H)
        o = num / den.unsqueeze(-1)
        return self.out(o.reshape(len(x), -1)), S, z

    def recurrent(self, x: Tensor, S: Tensor, z: Tensor):
        """RNN form, position by position (docs/attention-math.md §3, "Causal masking = an RNN").

        Same arguments and result as `parallel`.
        """
        q, k, v = self._features(x)
        outs = []
        for qi, ki, vi in zip(q, k, v):                      # (H, C), (H, C), (H, dv)
            S = S + torch.einsum("hc,hm->hcm", ki, vi)       # S_i = S_{i−1} + φ(k_i) v_iᵀ
            z = z + ki                                       # z_i = z_{i−1} + φ(k_i)
            num = torch.einsum("hc,hcm->hm", qi, S)          # φ(q_i)ᵀ S_i       (H, dv)
            den = torch.einsum("hc,hc->h", qi, z) + self.eps  # φ(q_i)ᵀ z_i + ε  (H,)
            outs.append(num / den.unsqueeze(-1))
        o = torch.stack(outs)                                # (N, H, dv)
        return self.out(o.reshape(len(x), -1)), S, z


class SoftmaxAttention(nn.Module):
    """Softmax attention, the KV-cache baseline (docs/attention-math.md §2), per head:

        o_i = Σ_j p_ij v_j,  p_ij = softmax_j(q_i·k_j / √dk),  j ≤ i (causal) or all j,

    out(concat heads). The same math as recur_ref/mixers.py's SoftmaxAttention
    (batched, fixed max_context) and the same tensor names as LinearAttention;
    computed in the weights' dtype. The state is the KV cache {"K" (H, P, dk),
    "V" (H, P, dv)} of the P positions so far: unbounded here (the runtime
    bounds it by a max_context chosen at session creation).
    """

    def __init__(self, d_model: int, heads: int, dk: int, dv: int, causal: bool = True):
        super().__init__()
        self.heads, self.dk, self.dv, self.causal = heads, dk, dv, causal
        self.query = nn.Linear(d_model, heads * dk)
        self.key = nn.Linear(d_model, heads * dk)
        self.value = nn.Linear(d_model, heads * dv)
        self.out = nn.Linear(heads * dv, d_model)

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "SoftmaxAttention":
        """The mixer of a recur config's "mixer" section (type softmax_attention)."""
        return cls(d_model, mixer["heads"], mixer["dk"], mixer["dv"], mixer.get("causal", True))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """The state before the first position: an empty KV cache."""
        return {"K": torch.zeros(self.heads, 0, self.dk, dtype=dtype),
                "V": torch.zeros(self.heads, 0, self.dv, dtype=dtype)}

    def _qkv(self, x: Tensor):
        """x (N, d_model) → q, k (H, N, dk), v (H, N, dv)."""
        n = len(x)
        q = self.query(x).view(n, self.heads, self.dk).transpose(0, 1)
        k = self.key(x).view(n, self.heads, self.dk).transpose(0, 1)
        v = self.value(x).view(n, self.heads, self.dv).transpose(0, 1)
        return q, k, v

    def _attend(self, q: Tensor, K: Tensor, V: Tensor, first: Optional[int]) -> Tensor:
        """q (H, T, dk) over keys K (H, P, dk) and values V (H, P, dv) → (H, T, dv).
        first: the position of q's first row, masking keys j > first + t (causal);
        None: no mask (every key is seen)."""
        s = q @ K.transpose(-1, -2) / math.sqrt(self.dk)                 # (H, T, P)
        if first is not None:
            i = torch.arange(q.shape[1])[:, None] + first
            j = torch.arange(K.shape[1])[None, :]
            s = s.masked_fill(j > i, float("-inf"))
        return torch.softmax(s, -1) @ V

    def _output(self, o: Tensor) -> Tensor:
        """(H, N, dv) → out(concat heads) (N, d_model)."""
        return self.out(o.transpose(0, 1).reshape(o.shape[1], -1))

    def parallel(self, x: Tensor, state: Dict[str, Tensor], chunk: int):
        """Chunked parallel form: x (N, d_model) after the state's P positions.
        Chunk c (rows c..c+T−1) attends to the P + c + T keys up to its last
        position, causally masked; chunk ≥ N is the plain masked softmax(QKᵀ)V.
        Returns (out (N, d_model), state with x's keys and values appended)."""
        q, k, v = self._qkv(x)
        P = state["K"].shape[1]
        K, V = torch.cat([state["K"], k], 1), torch.cat([state["V"], v], 1)
        outs = []
        for c in range(0, len(x), chunk):
            end = P + min(c + chunk, len(x))
            outs.append(self._attend(q[:, c:c + chunk], K[:, :end], V[:, :end], P + c))
        return self._output(torch.cat(outs, 1)), {"K": K, "V": V}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor]):
        """RNN form: per position, append k_i, v_i to the cache, then attend over
        all of it (no mask needed). Same arguments and result as `parallel`."""
        q, k, v = self._qkv(x)
        K, V = state["K"], state["V"]
        outs = []
        for i in range(len(x)):
            K, V = torch.cat([K, k[:, i:i + 1]], 1), torch.cat([V, v[:, i:i + 1]], 1)
            outs.append(self._attend(q[:, i:i + 1], K, V, None))   # (H, 1, dv)
        return self._output(torch.cat(outs, 1)), {"K": K, "V": V}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor]):
        """Non-causal (encoder) form: every position attends to the state's keys
        (none for a whole utterance) and all of x's. Same result shape as `parallel`."""
        q, k, v = self._qkv(x)
        K, V = torch.cat([state["K"], k], 1), torch.cat([state["V"], v], 1)
        return self._output(self._attend(q, K, V, None)), {"K": K, "V": V}


class SlidingWindowAttention(nn.Module):
    """Longformer-style sparse softmax attention (recur_ref/mixers.py's SlidingWindowAttention,
    whose docstring is the exact semantics), per head h with dilation d_h, scaled by 1/√dk:

        o_t = Σ_{p∈A_h(t)} softmax_p(q_t·k_p / √dk) v_p,  Mixer(x) = out(concat_heads(o))
        causal:     A_h(t) = {t − j·d_h : 0 ≤ j < w, t − j·d_h ≥ 0} ∪ {p < g : p ≤ t}
        non-causal: A_h(t) = {t + j·d_h : |j| ≤ ⌊w/2⌋, 0 ≤ t + j·d_h < N} ∪ {0..g−1} ∩ [0, N),
                    and every position when t < g (a global query).

    Positions are absolute stream indices (the non-causal form takes x as a whole utterance,
    positions 0..N−1). The causal state is fixed size, R = (w−1)·max_h(d_h) + 1:
    {"k_glob" (H, g, dk), "k_ring" (H, R, dk), "v_glob" (H, g, dv), "v_ring" (H, R, dv)}:
    ring slot p mod R holds position p (global positions are also written to their ring
    slot), glob slot p holds position p < g; slots never written stay 0. Ring entries of
    global positions are never read (glob serves them), so no key is counted twice.
    """

    def __init__(self, d_model: int, heads: int, dk: int, dv: int, window: int, dilation=1,
                 global_tokens: int = 0, causal: bool = True):
        super().__init__()
        self.heads, self.dk, self.dv, self.causal = heads, dk, dv, causal
        self.w, self.g = window, global_tokens
        self.dil = list(dilation) if isinstance(dilation, list) else [dilation] * heads
        self.R = (self.w - 1) * max(self.dil) + 1
        self.query = nn.Linear(d_model, heads * dk)
        self.key = nn.Linear(d_model, heads * dk)
        self.value = nn.Linear(d_model, heads * dv)
        self.out = nn.Linear(heads * dv, d_model)

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "SlidingWindowAttention":
        """The mixer of a recur config's "mixer" section (type sliding_window)."""
        return cls(d_model, mixer["heads"], mixer["dk"], mixer["dv"], mixer["window"], mixer.get("dilation", 1),
                   mixer.get("global_tokens", 0), mixer.get("causal", True))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """The state before the first position: all slots 0 (sorted names)."""
        H = self.heads
        return {"k_glob": torch.zeros(H, self.g, self.dk, dtype=dtype),
                "k_ring": torch.zeros(H, self.R, self.dk, dtype=dtype),
                "v_glob": torch.zeros(H, self.g, self.dv, dtype=dtype),
                "v_ring": torch.zeros(H, self.R, self.dv, dtype=dtype)}

    _qkv = SoftmaxAttention._qkv
    _output = SoftmaxAttention._output

    def allowed(self, t: Tensor, p: Tensor) -> Tensor:
        """Boolean (H, *broadcast(t, p)): may query position t attend to key position p
        (absolute, int64), per head (mixers.SlidingWindowAttention.allowed). Non-causal
        also needs 0 ≤ p < N (the caller's)."""
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
        q, k, v = self._qkv(x)
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
        """RNN form, as mixers.SlidingWindowAttention's step: per position t, write k_t, v_t
        into ring slot t mod R (and glob slot t when t < g), then attend over the ring's
        allowed positions ≥ g and the glob's positions ≤ t. Same result as `parallel`."""
        q, k, v = self._qkv(x)
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
        return self._output(self._attend(q, k, v, self.allowed(ar[:, None], ar[None, :]))), state


class AFTSimple(nn.Module):
    """AFT-simple (recur_ref/mixers.py's AFTSimple), element-wise over D = heads·dk channels:

        y_t = σ(q_t) ⊙ Σ_{p≤t} exp(k_p) ⊙ v_p / Σ_{p≤t} exp(k_p)   (causal false: all p),
        Mixer(x) = out(y),  q = query(x), k = key(x), v = value(x), each (N, D).

    The causal state {"den" (D,), "max" (D,), "num" (D,)} keeps the sums relative to the
    running max of k per channel (−inf before the first position): num = Σ exp(k_p − max)·v_p,
    den = Σ exp(k_p − max) (mixers._fold). `heads` only names the width; the math does not
    split channels into heads.
    """

    def __init__(self, d_model: int, heads: int, dk: int, causal: bool = True):
        super().__init__()
        self.heads, self.dk, self.causal = heads, dk, causal
        self.D = heads * dk
        self.query = nn.Linear(d_model, self.D)
        self.key = nn.Linear(d_model, self.D)
        self.value = nn.Linear(d_model, self.D)
        self.out = nn.Linear(self.D, d_model)

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "AFTSimple":
        """The mixer of a recur config's "mixer" section (type aft_simple)."""
        return cls(d_model, mixer["heads"], mixer["dk"], mixer.get("causal", True))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: num = den = 0, max = −inf (sorted names)."""
        return {"den": torch.zeros(self.D, dtype=dtype), "max": torch.full((self.D,), float("-inf"), dtype=dtype),
                "num": torch.zeros(self.D, dtype=dtype)}

    def _qkv(self, x: Tensor):
        """x (N, d_model) → σ(q), k, v, each (N, D)."""
        return torch.sigmoid(self.query(x)), self.key(x), self.value(x)

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
        """RNN form: per position mixers._fold(num, den, max, k_t, v_t), y_t = σ(q_t)·num/den.
        Same arguments and result as `parallel`."""
        q, k, v = self._qkv(x)
        num, den, mx = state["num"], state["den"], state["max"]
        outs = []
        for qi, ki, vi in zip(q, k, v):
            num, den, mx = mixers._fold(num, den, mx, ki, vi)
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


class AFTLocal(nn.Module):
    """AFT-local (recur_ref/mixers.py's AFTLocal, whose docstring and _step_one are the exact
    semantics), element-wise over D = heads·dk channels with a relative bias in a window of s:

        y_t = σ(q_t) ⊙ Σ_p exp(k_p + w_{t,p}) ⊙ v_p / Σ_p exp(k_p + w_{t,p}),  Mixer(x) = out(y)
        causal (p ≤ t):  w_{t,p} = pos_bias[t − p]          if t − p < s, else 0
        non-causal (all p): w_{t,p} = pos_bias[t − p + s − 1] if |t − p| < s, else 0

    (0 outside the window, not −inf: far positions still count, unbiased.) Tensors: query,
    key, value (D, d_model), out (d_model, D) (.weight/.bias), pos_bias (s,) causal / (2s−1,)
    non-causal, created in mixers.AFTLocal's order (same init from the same torch seed).
    Positions are absolute stream indices. The causal state is fixed size, sorted names:
    {"den" (D,), "k_ring" (s, D), "max" (D,), "num" (D,), "v_ring" (s, D)}: num, den, max
    over the positions that left the window (p ≤ pos − s, where w = 0; max = their running
    max of k per channel, −inf while there are none; num = Σ exp(k_p − max)·v_p, den =
    Σ exp(k_p − max), mixers._fold); ring slot p mod s holds position p's k and v (slots
    never written are 0). Step t: write k_t, v_t to slot t mod s; M = max(max, max over the
    window p ∈ [t − s + 1, t] of k_p + w_{t,p}); y_t = σ(q_t)·(num·e^{max−M} + Σ_window
    e^{k_p+w−M} v_p)/(den·e^{max−M} + Σ_window e^{k_p+w−M}); then position t − s + 1 (if
    ≥ 0) is folded into (num, den, max) with w = 0.
    """

    TYPE = "aft_local"

    def __init__(self, d_model: int, heads: int, dk: int, window: int, causal: bool = True):
        super().__init__()
        self.heads, self.dk, self.s, self.causal = heads, dk, window, causal
        self.D = heads * dk
        self.query = nn.Linear(d_model, self.D)
        self.key = nn.Linear(d_model, self.D)
        self.value = nn.Linear(d_model, self.D)
        self.out = nn.Linear(self.D, d_model)
        self._make_bias()

    def _make_bias(self):
        self.pos_bias = nn.Parameter(0.5 * torch.randn(self.s if self.causal else 2 * self.s - 1))

    def kernel(self) -> Tensor:
        """(s or 2s−1, D): the bias of each relative offset for each channel."""
        return self.pos_bias[:, None].expand(-1, self.D)

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "AFTLocal":
        """The mixer of a recur config's "mixer" section (type aft_local / aft_conv)."""
        if mixer.get("type") != cls.TYPE:
            raise ValueError(f"mixer type {mixer.get('type')!r} given to {cls.__name__}")
        mixers.validate_mixer(mixer, d_model)
        return cls(d_model, mixer["heads"], mixer["dk"], mixer["window"], mixer.get("causal", True))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: num = den = 0, max = −inf, rings 0 (sorted names);
        {} for a non-causal (encoder) mixer, which keeps no state."""
        D, s = self.D, self.s
        if not self.causal:
            return {}
        return {"den": torch.zeros(D, dtype=dtype), "k_ring": torch.zeros(s, D, dtype=dtype),
                "max": torch.full((D,), float("-inf"), dtype=dtype), "num": torch.zeros(D, dtype=dtype),
                "v_ring": torch.zeros(s, D, dtype=dtype)}

    def _qkv(self, x: Tensor):
        """x (N, d_model) → σ(q), k, v, each (N, D)."""
        return torch.sigmoid(self.query(x)), self.key(x), self.value(x)

    def _bias(self, off: Tensor) -> Tensor:
        """w for offsets off = t − p (any shape) → (*off.shape, D); 0 outside the window."""
        W = self.kernel()
        if self.causal:
            inside, idx = (off >= 0) & (off < self.s), off
        else:
            inside, idx = off.abs() < self.s, off + self.s - 1
        w = W[idx.clamp(0, len(W) - 1)]
        return torch.where(inside[..., None], w, torch.zeros((), dtype=w.dtype))

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
        """RNN form, as mixers.AFTLocal._step_one (see the class docstring) per position.
        Same arguments and result as `parallel`."""
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
                num, den, mx = mixers._fold(num, den, mx, kr[leave % s], vr[leave % s])
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


class AFTConv(AFTLocal):
    """AFT-conv (recur_ref/mixers.py's AFTConv): AFT-local whose bias is a per-head depth-wise
    kernel, conv_kernel (heads, s) causal [offset t − p = 0..s−1] / (heads, 2s−1) non-causal
    [offset t − p + s − 1]; channel c uses head c // dk. Same forms and state as AFTLocal."""

    TYPE = "aft_conv"

    def _make_bias(self):
        self.conv_kernel = nn.Parameter(0.5 * torch.randn(self.heads, self.s if self.causal else 2 * self.s - 1))

    def kernel(self) -> Tensor:
        return self.conv_kernel.t().repeat_interleave(self.dk, dim=1)          # (s or 2s−1, D)


class AFTFull(nn.Module):
    """AFT-full (recur_ref/mixers.py's AFTFull, batched and with a T-padded cache there),
    element-wise over D = heads·dk channels with a learned pairwise bias w (T, T), T = max_length:

        y_t = σ(q_t) ⊙ Σ_p exp(ℓ_{t,p}) ⊙ v_p / Σ_p exp(ℓ_{t,p}),  Mixer(x) = out(y)
        ℓ_{t,p} = k_p + w_{t,p}  (bias_form "add", the default)  or  k_p · w_{t,p}  ("multiply")
        p ≤ t (causal) or every p < N (non-causal);  w shared by all channels:
        bias_rank null: w = pos_bias (T, T);  bias_rank r: w = u vᵀ, u (T, r), v (T, r)

    "multiply" with a rank is fast-transformers' AFTFullAttention (non-causal: exactly the
    library; causal: the softmax over p ≤ t of k_p·w_{t,p}, the intended meaning of the
    library's masked form, see mixers.AFTFull). Tensors: query, key, value (D, d_model),
    out (d_model, D) (.weight/.bias), then pos_bias or u, v, created in mixers.AFTFull's order
    and with its init (same weights from the same torch seed). Positions are absolute stream
    indices 0..T−1; a position ≥ T raises ValueError naming max_length. The causal state is
    the KV cache {"k" (P, D), "v" (P, D)} of the P positions so far (P ≤ T; mixers.AFTFull pads
    it to T rows); a non-causal (encoder) mixer keeps none ({}).
    """

    TYPE = "aft_full"

    def __init__(self, d_model: int, heads: int, dk: int, max_length: int, bias_rank: Optional[int] = None,
                 bias_form: str = "add", causal: bool = True):
        super().__init__()
        if bias_form not in mixers.AFT_BIAS_FORMS:
            raise ValueError(f"unknown mixer.bias_form {bias_form!r}; expected one of {list(mixers.AFT_BIAS_FORMS)}")
        self.heads, self.dk, self.T, self.rank, self.form, self.causal = heads, dk, max_length, bias_rank, bias_form, causal
        self.D = heads * dk
        self.query = nn.Linear(d_model, self.D)
        self.key = nn.Linear(d_model, self.D)
        self.value = nn.Linear(d_model, self.D)
        self.out = nn.Linear(self.D, d_model)
        if bias_rank is None:
            self.pos_bias = nn.Parameter(0.5 * torch.randn(max_length, max_length))
        else:
            self.u = nn.Parameter(0.7 * torch.randn(max_length, bias_rank))
            self.v = nn.Parameter(0.7 * torch.randn(max_length, bias_rank))

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "AFTFull":
        """The mixer of a recur config's "mixer" section (type aft_full)."""
        if mixer.get("type") != cls.TYPE:
            raise ValueError(f"mixer type {mixer.get('type')!r} given to {cls.__name__}")
        mixers.validate_mixer(mixer, d_model)
        return cls(d_model, mixer["heads"], mixer["dk"], mixer["max_length"], mixer.get("bias_rank"),
                   mixer.get("bias_form", "add"), mixer.get("causal", True))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: an empty KV cache (sorted names k, v); {} for a
        non-causal (encoder) mixer, which keeps no state."""
        if not self.causal:
            return {}
        return {"k": torch.zeros(0, self.D, dtype=dtype), "v": torch.zeros(0, self.D, dtype=dtype)}

    def _qkv(self, x: Tensor):
        """x (N, d_model) → σ(q), k, v, each (N, D)."""
        return torch.sigmoid(self.query(x)), self.key(x), self.value(x)

    def _check(self, pos: int, n: int):
        mixers._check_pos(pos, n, self.T, "max_length", self.TYPE)

    def bias(self, t: Tensor, p: Tensor) -> Tensor:
        """w_{t,p} for query positions t (Nt,) and key positions p (Np,) → (Nt, Np)."""
        if self.rank is None:
            return self.pos_bias[t[:, None], p[None, :]]
        return self.u[t] @ self.v[p].t()

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

    def _cache(self, state: Dict[str, Tensor], pos: int):
        K, V = state["k"], state["v"]
        if len(K) != pos or len(V) != pos:
            raise ValueError(f"aft_full state holds {len(K)} positions, the stream is at {pos}")
        return K, V

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form: x (N, d_model) at positions pos..pos+N−1 after the state's
        pos cached positions. A chunk of queries t0..t1 attends to the keys 0..t1, masked to
        p ≤ t; chunk ≥ N is the plain masked form. Returns (out (N, d_model), the state with
        x's keys and values appended)."""
        n = len(x)
        self._check(pos, n)
        q, k, v = self._qkv(x)
        K0, V0 = self._cache(state, pos)
        K, V = torch.cat([K0, k]), torch.cat([V0, v])
        outs = []
        for c in range(0, n, chunk):
            end = min(c + chunk, n)
            outs.append(self._attend(q[c:end], K[:pos + end], V[:pos + end], torch.arange(pos + c, pos + end), True))
        return self.out(torch.cat(outs)), {"k": K, "v": V}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form: per position t, append k_t, v_t to the cache, then attend over all of it
        (p ≤ t: no mask needed). Same arguments and result as `parallel`."""
        self._check(pos, len(x))
        q, k, v = self._qkv(x)
        K, V = self._cache(state, pos)
        outs = []
        for i in range(len(x)):
            K, V = torch.cat([K, k[i:i + 1]]), torch.cat([V, v[i:i + 1]])
            outs.append(self._attend(q[i:i + 1], K, V, torch.tensor([pos + i]), False))
        return self.out(torch.cat(outs)), {"k": K, "v": V}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x as a whole utterance (positions 0..N−1, N ≤ T; an
        encoder keeps no state, so `state` comes back unchanged): per query t a softmax over
        every p, computed per block of CHUNK queries."""
        if pos != 0:
            raise ValueError(f"a non-causal {self.TYPE} mixer runs on a whole utterance from position 0")
        n = len(x)
        self._check(0, n)
        q, k, v = self._qkv(x)
        outs = [self._attend(q[c:c + CHUNK], k, v, torch.arange(c, min(c + CHUNK, n)), False)
                for c in range(0, n, CHUNK)]
        return self.out(torch.cat(outs)), state


class GAU(nn.Module):
    """Gated attention unit, one head (recur_ref/mixers.py's GAU, batched and with a T-padded
    cache there, whose docstring is the exact semantics). Per position, with SiLU projections

        U = silu(x W_u + b_u) (E), V = silu(x W_v + b_v) (E), Z = silu(x W_z + b_z) (s),
        Q = qk_gamma[0] ⊙ Z + qk_beta[0],  K = qk_gamma[1] ⊙ Z + qk_beta[1],

        causal:     A_{t,p} = relu(scale · Q_t·K_p + rel_bias[t − p])²          p ≤ t (0 for p > t)
        non-causal: A_{t,p} = relu(scale · Q_t·K_p + rel_bias[t − p + T − 1])²  every p < N
        y_t = out(U_t ⊙ Σ_p A_{t,p} V_p)                                        (no softmax, no normaliser)

    T = max_length, scale defaults to 1/T. Tensors: u_proj (E, d), v_proj (E, d), z_proj
    (s, d), out (d, E) (.weight/.bias), qk_gamma (2, s), qk_beta (2, s), rel_bias (T,) causal /
    (2T−1,) non-causal; created in mixers.GAU's order (same init from the same torch seed).
    Positions are absolute stream indices 0..T−1; a position ≥ T raises ValueError naming
    max_length. The causal state is the KV cache {"k" (P, s), "v" (P, E)} of the P positions
    so far (P ≤ T; mixers.GAU pads it to T rows); a non-causal (encoder) mixer keeps none ({}).
    """

    TYPE = "gau"
    ROWS = 2

    def __init__(self, d_model: int, expansion_dim: int, qk_dim: int, max_length: int, scale: Optional[float] = None,
                 causal: bool = True):
        super().__init__()
        self.E, self.s, self.T, self.causal = expansion_dim, qk_dim, max_length, causal
        self.scale = 1.0 / max_length if scale is None else scale
        self.u_proj = nn.Linear(d_model, self.E)
        self.v_proj = nn.Linear(d_model, self.E)
        self.z_proj = nn.Linear(d_model, self.s)
        self.qk_gamma = nn.Parameter(1 + 0.3 * torch.randn(self.ROWS, self.s))
        self.qk_beta = nn.Parameter(0.3 * torch.randn(self.ROWS, self.s))
        self.out = nn.Linear(self.E, d_model)
        self.rel_bias = nn.Parameter(0.3 * torch.randn(max_length if causal else 2 * max_length - 1))

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "GAU":
        """The mixer of a recur config's "mixer" section (type gau)."""
        if mixer.get("type") != cls.TYPE:
            raise ValueError(f"mixer type {mixer.get('type')!r} given to {cls.__name__}")
        mixers.validate_mixer(mixer, d_model)
        return cls(d_model, mixer["expansion_dim"], mixer["qk_dim"], mixer["max_length"], mixer.get("scale"),
                   mixer.get("causal", True))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: an empty KV cache (sorted names k, v); {} for a
        non-causal (encoder) mixer, which keeps no state."""
        if not self.causal:
            return {}
        return {"k": torch.zeros(0, self.s, dtype=dtype), "v": torch.zeros(0, self.E, dtype=dtype)}

    def _proj(self, x: Tensor):
        """x (N, d_model) → U, V (N, E), Q, K (N, s)."""
        u, v, z = F.silu(self.u_proj(x)), F.silu(self.v_proj(x)), F.silu(self.z_proj(x))
        qk = z[:, None, :] * self.qk_gamma + self.qk_beta                # (N, 2, s)
        q, k = qk.unbind(1)
        return u, v, q, k

    def _check(self, pos: int, n: int):
        mixers._check_pos(pos, n, self.T, "max_length", self.TYPE)

    def _attend(self, q: Tensor, K: Tensor, V: Tensor, t: Tensor, mask: bool) -> Tensor:
        """Σ_p A_{t,p} V_p (Nt, E) for queries q (Nt, s) at positions t over keys K (Np, s),
        values V (Np, E) at positions 0..Np−1; mask: drop p > t (causal)."""
        off = t[:, None] - torch.arange(len(K))[None, :]                  # t − p
        b = self.rel_bias[off.clamp(min=0)] if self.causal else self.rel_bias[off + self.T - 1]
        a = F.relu(self.scale * q @ K.T + b) ** 2
        if mask:
            a = a.masked_fill(off < 0, 0.0)
        return a @ V

    def _cache(self, state: Dict[str, Tensor], pos: int):
        K, V = state["k"], state["v"]
        if len(K) != pos or len(V) != pos:
            raise ValueError(f"gau state holds {len(K)} positions, the stream is at {pos}")
        return K, V

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form: x (N, d_model) at positions pos..pos+N−1 after the state's
        pos cached positions. A chunk of queries t0..t1 attends to the keys 0..t1, masked to
        p ≤ t; chunk ≥ N is the plain masked form. Returns (out (N, d_model), the state with
        x's K and V rows appended)."""
        n = len(x)
        self._check(pos, n)
        u, v, q, k = self._proj(x)
        K0, V0 = self._cache(state, pos)
        K, V = torch.cat([K0, k]), torch.cat([V0, v])
        outs = []
        for c in range(0, n, chunk):
            end = min(c + chunk, n)
            outs.append(self._attend(q[c:end], K[:pos + end], V[:pos + end], torch.arange(pos + c, pos + end), True))
        return self.out(u * torch.cat(outs)), {"k": K, "v": V}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form: per position t, append K_t, V_t to the cache, then attend over all of it
        (p ≤ t: no mask needed). Same arguments and result as `parallel`."""
        self._check(pos, len(x))
        u, v, q, k = self._proj(x)
        K, V = self._cache(state, pos)
        outs = []
        for i in range(len(x)):
            K, V = torch.cat([K, k[i:i + 1]]), torch.cat([V, v[i:i + 1]])
            outs.append(self._attend(q[i:i + 1], K, V, torch.tensor([pos + i]), False))
        return self.out(u * torch.cat(outs)), {"k": K, "v": V}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x as a whole utterance (positions 0..N−1, N ≤ T; an
        encoder keeps no state, so `state` comes back unchanged): every query over every p with
        rel_bias[t − p + T − 1], computed per block of CHUNK queries."""
        if pos != 0:
            raise ValueError(f"a non-causal {self.TYPE} mixer runs on a whole utterance from position 0")
        n = len(x)
        self._check(0, n)
        u, v, q, k = self._proj(x)
        outs = [self._attend(q[c:c + CHUNK], k, v, torch.arange(c, min(c + CHUNK, n)), False)
                for c in range(0, n, CHUNK)]
        return self.out(u * torch.cat(outs)), state


class FLASH(nn.Module):
    """FLASH mixed-chunk attention (recur_ref/mixers.py's FLASH, whose docstring is the exact
    semantics), one head. Per position, with SiLU projections

        U = silu(x W_u + b_u) (E), V = silu(x W_v + b_v) (E), Z = silu(x W_z + b_z) (s),
        Q^quad, K^quad, Q^lin, K^lin = qk_gamma[r] ⊙ Z + qk_beta[r]   (rows r = 0, 1, 2, 3),

    chunks are ABSOLUTE position groups [g·C, (g+1)·C) (independent of how the input is
    split into calls or parallel chunks). For t in group g:

        quad_t = Σ_{p in group g, p ≤ t} relu(scale · Q^quad_t·K^quad_p + rel_bias[t − p])² V_p
        lin_t  = scale · Q^lin_t · Σ_{p in groups h < g} K^lin_pᵀ V_p
        y_t    = out(U_t ⊙ (quad_t + lin_t))

    Non-causal: quad over the whole group (rel_bias[t − p + C − 1]) and
    lin_t = (1/N) · Q^lin_t · Σ_{all p} K^lin_pᵀ V_p. scale defaults to 1/C.
    Tensors: u_proj (E, d), v_proj (E, d), z_proj (s, d), out (d, E) (.weight/.bias),
    qk_gamma (4, s), qk_beta (4, s), rel_bias (C,) causal / (2C−1,) non-causal; created in
    mixers.FLASH's order (same init from the same torch seed).
    Causal state, fixed size (sorted names): "S" (s, E) = Σ over completed groups of
    K^linᵀV; "kl_buf" (C, s), "kq_buf" (C, s), "v_buf" (C, E): slot p mod C holds position
    p's K^lin, K^quad, V (the last written; slots ≥ pos mod C are stale, left from the
    previous group, never read). When a group completes, S += kl_bufᵀ v_buf.
    """

    ROWS = 4

    def __init__(self, d_model: int, expansion_dim: int, qk_dim: int, chunk: int, scale: Optional[float] = None,
                 causal: bool = True):
        super().__init__()
        self.E, self.s, self.C, self.causal = expansion_dim, qk_dim, chunk, causal
        self.scale = 1.0 / chunk if scale is None else scale
        self.u_proj = nn.Linear(d_model, self.E)
        self.v_proj = nn.Linear(d_model, self.E)
        self.z_proj = nn.Linear(d_model, self.s)
        self.qk_gamma = nn.Parameter(1 + 0.3 * torch.randn(self.ROWS, self.s))
        self.qk_beta = nn.Parameter(0.3 * torch.randn(self.ROWS, self.s))
        self.out = nn.Linear(self.E, d_model)
        self.rel_bias = nn.Parameter(0.3 * torch.randn(chunk if causal else 2 * chunk - 1))

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "FLASH":
        """The mixer of a recur config's "mixer" section (type flash)."""
        return cls(d_model, mixer["expansion_dim"], mixer["qk_dim"], mixer["chunk"], mixer.get("scale"),
                   mixer.get("causal", True))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S and every buffer slot 0 (sorted names)."""
        return {"S": torch.zeros(self.s, self.E, dtype=dtype), "kl_buf": torch.zeros(self.C, self.s, dtype=dtype),
                "kq_buf": torch.zeros(self.C, self.s, dtype=dtype), "v_buf": torch.zeros(self.C, self.E, dtype=dtype)}

    def _proj(self, x: Tensor):
        """x (N, d_model) → U, V (N, E), Q^quad, K^quad, Q^lin, K^lin (N, s)."""
        u, v, z = F.silu(self.u_proj(x)), F.silu(self.v_proj(x)), F.silu(self.z_proj(x))
        qk = z[:, None, :] * self.qk_gamma + self.qk_beta                # (N, 4, s)
        return (u, v, *qk.unbind(1))

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
        u, v, qq, kq, ql, kl = self._proj(x)
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
        """RNN form, as mixers.FLASH's step: per position t (slot j = t mod C) write K^quad_t,
        K^lin_t, V_t into slot j, attend over slots 0..j, read S; when j = C − 1 the group is
        complete: S += kl_bufᵀ v_buf. Same arguments and result as `parallel`."""
        u, v, qq, kq, ql, kl = self._proj(x)
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
        u, v, qq, kq, ql, kl = self._proj(x)
        n = len(x)
        lin = ql @ (kl.T @ v) / n
        quad = []
        for c in range(0, n, self.C):
            m = min(self.C, n - c)
            off = torch.arange(m)[:, None] - torch.arange(m)[None, :]
            a = F.relu(self.scale * qq[c:c + m] @ kq[c:c + m].T + self.rel_bias[off + self.C - 1]) ** 2
            quad.append(a @ v[c:c + m])
        return self.out(u * (torch.cat(quad) + lin)), state


class Linformer(nn.Module):
    """Linformer (recur_ref/mixers.py's Linformer, whose docstring is the exact semantics),
    encoder only. Per head h, over the N ≤ n = seq_len positions of a whole utterance:

        K'_h = E_h[:, :N] K_h,  V'_h = F_h[:, :N] V_h          (k = proj_dim rows)
        o_h  = softmax(Q_h K'_hᵀ / √dk) V'_h,  Mixer(x) = out(concat heads)

    (N < n uses the first N columns, i.e. zero keys/values for the absent positions;
    N > n is a ValueError naming seq_len). Tensors: query, key, value, out (.weight/.bias,
    as softmax_attention) and, per sharing,
      'none'      E (H, k, n), F (H, k, n)
      'headwise'  E (k, n), F (k, n)         shared by the heads
      'kv'        E (k, n)                   F = E, shared by the heads
      'layerwise' E (k, n)                   F = E, shared by the heads and by every layerwise
                  block of the model: RecurModel builds the first layerwise block's E and hands
                  that same Parameter to the others (training sees one tensor); state_dict, and
                  so the export, holds blocks.{i}.mixer.E for each such block, identical copies.
    Created in mixers.Linformer's order (query, key, value, out, E, F: the same init from the
    same torch seed). No state, no recurrent or chunked form (parallel/recurrent raise).
    """

    def __init__(self, d_model: int, heads: int, dk: int, dv: int, seq_len: int, proj_dim: int,
                 sharing: str = "none", causal: bool = False, E: Optional[nn.Parameter] = None):
        super().__init__()
        if causal:
            raise ValueError("linformer is encoder-only: mixer.causal must be false")
        if sharing not in mixers.LINFORMER_SHARING:
            raise ValueError(f"unknown mixer.sharing {sharing!r}; expected one of {list(mixers.LINFORMER_SHARING)}")
        self.heads, self.dk, self.dv, self.causal = heads, dk, dv, False
        self.n, self.k, self.sharing = seq_len, proj_dim, sharing
        self.query = nn.Linear(d_model, heads * dk)
        self.key = nn.Linear(d_model, heads * dk)
        self.value = nn.Linear(d_model, heads * dv)
        self.out = nn.Linear(heads * dv, d_model)
        shape = (heads, proj_dim, seq_len) if sharing == "none" else (proj_dim, seq_len)
        if E is not None:                  # a later layerwise block: the model's shared E
            if sharing != "layerwise" or tuple(E.shape) != shape:
                raise ValueError(f"a shared linformer E {tuple(E.shape)} needs sharing 'layerwise' and shape {shape}")
            self.E = E
        else:
            self.E = nn.Parameter(torch.randn(*shape) / math.sqrt(seq_len))
        if sharing in ("none", "headwise"):
            self.F = nn.Parameter(torch.randn(*shape) / math.sqrt(seq_len))

    @classmethod
    def from_config(cls, d_model: int, mixer: dict, E: Optional[nn.Parameter] = None) -> "Linformer":
        """The mixer of a recur config's "mixer" section (type linformer); E: the shared
        parameter of a later layerwise block (None: create one)."""
        return cls(d_model, mixer["heads"], mixer["dk"], mixer["dv"], mixer["seq_len"], mixer["proj_dim"],
                   mixer.get("sharing", "none"), mixer.get("causal", False), E)

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """No state (an encoder)."""
        return {}

    _qkv = SoftmaxAttention._qkv
    _output = SoftmaxAttention._output

    def _no_rnn(self, *args, **kwargs):
        raise ValueError("mixer linformer: no recurrent form (encoder only: the projections E, F mix all "
                         "positions); use the non-causal form over a whole utterance")

    parallel = _no_rnn
    recurrent = _no_rnn

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x (N, d_model) as a whole utterance (positions
        0..N−1, N ≤ seq_len) → (out (N, d_model), state unchanged)."""
        if pos != 0:
            raise ValueError("a linformer mixer runs on a whole utterance from position 0")
        n = len(x)
        if n > self.n:
            raise ValueError(f"mixer linformer: sequence length {n} exceeds seq_len {self.n}")
        q, k, v = self._qkv(x)                                             # (H, N, ·)
        E = self.E[..., :n]
        Fm = (self.F if self.sharing in ("none", "headwise") else self.E)[..., :n]
        eq = "hkn,hnd->hkd" if E.dim() == 3 else "kn,hnd->hkd"
        k2, v2 = torch.einsum(eq, E, k), torch.einsum(eq, Fm, v)           # (H, k, dk), (H, k, dv)
        a = torch.softmax(q @ k2.transpose(-1, -2) / math.sqrt(self.dk), -1)   # (H, N, k)
        return self._output(a @ v2), state


class Reformer(nn.Module):
    """Reformer LSH attention (recur_ref/mixers.py's Reformer, whose docstring is the exact
    semantics), encoder only, shared QK. Per head h, over the N positions of a whole utterance
    (any N ≥ 1), Q = query(x)_h (N, dk), K_j = Q_j/‖Q_j‖, V = value(x)_h (N, dv); per round i:

        P = K rotations[i] (N, nb/2),  bucket_j = argmax [P_j, −P_j]   (first max)
        order = positions sorted by (bucket, position); slot s in chunk s // c
        o^i_j = Σ_{p ∈ cand(j)} softmax_p(Q_j·K_p/√dk) V_p,  cand(j) = the positions in j's chunk
                and the chunk before it (none before chunk 0), minus j unless j is alone
        y_j = (1/r) Σ_i o^i_j,  Mixer(x) = out(concat_h y)

    Tensors: query (H·dk, d), value (H·dv, d), out (d, H·dv) (.weight/.bias; no key) and the
    buffer rotations (r, dk, nb/2), N(0, 1), created after the linear layers (mixers.Reformer's
    order: the same init from the same torch seed). Computed chunk by chunk (each chunk of
    sorted queries against its 2c look-back keys), not as mixers.Reformer's masked N × N scores.
    No state, no recurrent or chunked form (parallel/recurrent raise).
    """

    def __init__(self, d_model: int, heads: int, dk: int, dv: int, n_buckets: int, chunk: int, rounds: int,
                 causal: bool = False):
        super().__init__()
        if causal:
            raise ValueError("reformer has no causal/recurrent form: mixer.causal must be false")
        self.heads, self.dk, self.dv, self.causal = heads, dk, dv, False
        self.n_buckets, self.chunk, self.rounds = n_buckets, chunk, rounds
        self.query = nn.Linear(d_model, heads * dk)
        self.value = nn.Linear(d_model, heads * dv)
        self.out = nn.Linear(heads * dv, d_model)
        self.register_buffer("rotations", torch.randn(rounds, dk, n_buckets // 2))

    @classmethod
    def from_config(cls, d_model: int, mixer: dict) -> "Reformer":
        """The mixer of a recur config's "mixer" section (type reformer)."""
        if mixer.get("type") != "reformer":
            raise ValueError(f"mixer type {mixer.get('type')!r} given to {cls.__name__}")
        mixers.validate_mixer(mixer, d_model)
        return cls(d_model, mixer["heads"], mixer["dk"], mixer["dv"], mixer["n_buckets"], mixer["chunk"],
                   mixer["rounds"], mixer.get("causal", False))

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """No state (an encoder)."""
        return {}

    def _no_rnn(self, *args, **kwargs):
        raise ValueError("mixer reformer: no recurrent form (encoder only: the hash buckets sort the whole "
                         "utterance); use the non-causal form over a whole utterance")

    parallel = _no_rnn
    recurrent = _no_rnn

    def hashes(self, x: Tensor) -> Tensor:
        """[P, −P] of every round, head and position: (r, H, N, nb) (the bucket is its argmax)."""
        q = self.query(x).view(len(x), self.heads, self.dk).transpose(0, 1)
        p = torch.einsum("hnd,rdb->rhnb", q / q.norm(dim=-1, keepdim=True), self.rotations)
        return torch.cat([p, -p], -1)

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
        k = q / q.norm(dim=-1, keepdim=True)
        buckets = self.hashes(x).argmax(-1)                                 # (r, H, N)
        y = sum(self._round(q, k, v, b) for b in buckets) / self.rounds
        return self.out(y.transpose(0, 1).reshape(n, -1)), state


class FeedForward(nn.Module):
    """FFN(x) = linear2(act(linear1(x))); gelu is the exact erf form."""

    def __init__(self, d_model: int, d_ff: int, activation: str):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.activation(self.linear1(x)))


# The model's mixer class per config "type".
_MIXER_CLASSES = {"linear_attention": LinearAttention, "softmax_attention": SoftmaxAttention,
                  "sliding_window": SlidingWindowAttention, "aft_simple": AFTSimple, "aft_local": AFTLocal,
                  "aft_conv": AFTConv, "aft_full": AFTFull, "gau": GAU, "flash": FLASH,
                  "linformer": Linformer, "reformer": Reformer}


class Block(nn.Module):
    """One transformer layer (docs/attention-math.md §1), pre- or post-norm, whose mixer is
    built from `mixer` (one mixer dict: its entry of mixer_configs(config)). shared_E: a
    linformer layerwise block's E, the model's one shared parameter (None: its own)."""

    def __init__(self, config: dict, mixer: dict, shared_E: Optional[nn.Parameter] = None):
        super().__init__()
        d, eps, m = config["d_model"], config["layer_norm_eps"], mixer
        self.pre_norm = config["norm_placement"] == "pre"
        self.norm1 = nn.LayerNorm(d, eps=eps)
        if shared_E is not None:
            self.mixer = Linformer.from_config(d, m, E=shared_E)
        else:
            self.mixer = _MIXER_CLASSES[m["type"]].from_config(d, m)
        self.norm2 = nn.LayerNorm(d, eps=eps)
        self.ffn = FeedForward(d, config["ffn"]["d_ff"], config["ffn"]["activation"])

    def _mix(self, h: Tensor, state: Dict[str, Tensor], chunk: Optional[int], pos: int):
        """The mixer's form for `chunk` (None: the RNN form) on h, whose first row is
        stream position pos → (out, new layer state)."""
        m = self.mixer
        if not m.causal:
            form = m.noncausal
        elif chunk is None:
            form = m.recurrent
        else:
            form = partial(m.parallel, chunk=chunk)
        if isinstance(m, (SlidingWindowAttention, AFTLocal, AFTFull, GAU, FLASH, Linformer, Reformer)):   # absolute positions (windows, biases, groups, E columns, sort ties)
            return form(h, state, pos=pos)
        if isinstance(m, LinearAttention):
            a, S, z = form(h, state["S"], state["z"])
            return a, {"S": S, "z": z}
        return form(h, state)

    def forward(self, x: Tensor, state: Dict[str, Tensor], chunk: Optional[int], pos: int = 0):
        """x (N, d_model) at stream positions pos.. → (N, d_model), the layer's state after x.
        chunk None: the RNN form."""
        if self.pre_norm:    # x = x + Mixer(norm1(x)); x = x + FFN(norm2(x))
            a, state = self._mix(self.norm1(x), state, chunk, pos)
            x = x + a
            x = x + self.ffn(self.norm2(x))
        else:                # x = norm1(x + Mixer(x)); x = norm2(x + FFN(x))
            a, state = self._mix(x, state, chunk, pos)
            x = self.norm1(x + a)
            x = self.norm2(x + self.ffn(x))
        return x, state


class InputAdapter(nn.Module):
    """Tokens → embedding rows, or frames → projection (or as is); + learned positions."""

    def __init__(self, config: dict):
        super().__init__()
        inp, d = config["input"], config["d_model"]
        self.kind = inp["kind"]
        self.embedding = None
        self.projection = None
        self.positions = None
        if self.kind == "tokens":
            self.vocab_size = inp["vocab_size"]
            self.embedding = nn.Parameter(0.5 * torch.randn(inp["vocab_size"], d))
        else:
            self.feature_width = inp["feature_width"]
            if inp["projection"]:
                self.projection = nn.Linear(inp["feature_width"], d)
        if config["max_positions"] > 0:
            self.positions = nn.Parameter(0.5 * torch.randn(config["max_positions"], d))

    def forward(self, x: Tensor, pos: int) -> Tensor:
        """x: (N,) integer token ids or (N, F) frames already in the model's dtype;
        pos: stream index of x[0]. Returns (N, d_model)."""
        if self.kind == "tokens":
            if x.dim() != 1 or x.is_floating_point():
                raise ValueError(f"expected (N,) integer token ids, got {tuple(x.shape)} {x.dtype}")
            if x.min() < 0 or x.max() >= self.vocab_size:
                raise ValueError(f"token id out of range [0, {self.vocab_size})")
            h = self.embedding[x.long()]
        else:
            if x.dim() != 2 or x.shape[1] != self.feature_width:
                raise ValueError(f"expected (N, {self.feature_width}) frames, got {tuple(x.shape)}")
            h = x if self.projection is None else self.projection(x)
        if self.positions is not None:
            if pos + len(x) > len(self.positions):
                raise ValueError(f"positions {pos}..{pos + len(x) - 1} exceed max_positions {len(self.positions)}")
            h = h + self.positions[pos:pos + len(x)]
        return h


class RecurModel(nn.Module):
    """The model of a recur-layout config (models/configs/README.md)."""

    def __init__(self, config: dict):
        super().__init__()
        validate(config)
        self.config = config
        self.input = InputAdapter(config)
        self.mixers = mixer_configs(config)   # block i's mixer config
        # Linformer sharing "layerwise": the first such block creates E, the later ones reuse it.
        self.blocks = nn.ModuleList()
        shared_E = None
        for m in self.mixers:
            block = Block(config, m, shared_E if _is_layerwise(m) else None)
            if _is_layerwise(m) and shared_E is None:
                shared_E = block.mixer.E
            self.blocks.append(block)
        d = config["d_model"]
        self.final_norm = nn.LayerNorm(d, eps=config["layer_norm_eps"]) if config["final_norm"] else None
        head = config["head"]
        self.head = nn.Linear(d, head["out"]) if head else None
        self.head_activation = head["activation"] if head else "none"

    @property
    def causal(self) -> bool:
        return _is_causal(self.mixers[0])   # validate(): every block agrees

    def load_state_dict(self, state_dict, *args, **kwargs):
        """nn.Module.load_state_dict, after checking that the copies of a shared linformer E
        (blocks.{i}.mixer.E of every layerwise block) are identical: ValueError otherwise."""
        names = [f"blocks.{i}.mixer.E" for i, m in enumerate(self.mixers) if _is_layerwise(m)]
        present = [n for n in names if n in state_dict]
        for n in present[1:]:
            a, b = state_dict[present[0]], state_dict[n]
            if a.shape != b.shape or not torch.equal(a, b.to(a.dtype)):
                raise ValueError(f"{n} differs from {present[0]}: linformer sharing 'layerwise' stores one E "
                                 "per layerwise block, all identical")
        return super().load_state_dict(state_dict, *args, **kwargs)

    @property
    def dtype(self) -> torch.dtype:
        return self.blocks[0].norm1.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.blocks[0].norm1.weight.device

    def _on_device(self):
        """A context in which the tensors the forward makes (positions, masks, empty states)
        are made on the model's device. PyTorch 2.0 made torch.device such a context; on
        older versions the reference runs on the CPU only."""
        if self.device.type == "cpu":
            return contextlib.nullcontext()
        if not hasattr(torch.device, "__enter__"):
            raise RuntimeError(f"the reference on {self.device} needs PyTorch 2.0 or newer "
                               f"(this is {torch.__version__}); run it on the CPU")
        return self.device

    def init_state(self) -> State:
        """The state before the first position (docs/attention-math.md §2, §3): zero S and z
        per linear-attention layer, an empty KV cache per softmax-attention layer, zero
        rings per sliding-window layer, num = den = 0 and max = −inf per aft_simple layer (and
        zero rings too per aft_local / aft_conv layer), an empty KV cache per causal aft_full or gau layer,
        zero S and buffers per flash layer, nothing per linformer or reformer layer; each layer as its own mixer (a mixed model
        mixes these)."""
        with self._on_device():
            return State(pos=0, layers=[block.mixer.empty_state(self.dtype) for block in self.blocks])

    def _run(self, x: Tensor, state: State, chunk: Optional[int]):
        """Positions x starting from `state`. Returns (output (N, out_width),
        per-block outputs [(N, d_model)], state after x)."""
        if len(x) == 0:
            raise ValueError("empty input")
        with self._on_device():
            return self._run_on_device(x, state, chunk)

    def _run_on_device(self, x: Tensor, state: State, chunk: Optional[int]):
        if x.is_floating_point():
            x = x.to(self.dtype)
        h = self.input(x, state.pos)
        layers, states = [], []
        for block, layer_state in zip(self.blocks, state.layers):
            h, layer_state = block(h, layer_state, chunk, state.pos)
            layers.append(h)
            states.append(layer_state)
        if self.final_norm is not None:
            h = self.final_norm(h)
        if self.head is not None:
            h = self.head(h)
            if self.head_activation == "softmax":
                h = torch.softmax(h, dim=-1)
            elif self.head_activation == "log_softmax":
                h = torch.log_softmax(h, dim=-1)
        return h, layers, State(state.pos + len(x), states)

    def forward(self, x: Tensor, state: Optional[State] = None, return_layers: bool = False,
                chunk: int = CHUNK):
        """Parallel causal forward over a sequence: x (N,) token ids or (N, F) frames.

        Returns the output (N, out_width); with return_layers, also the per-block
        outputs [(N, d_model)] (the residual stream after each block, before the
        final norm and head) and the State after the last position. `state`
        (default: init_state()) continues a stream, e.g. after a prefill.
        """
        if chunk < 1:
            raise ValueError("chunk must be >= 1")
        out, layers, state = self._run(x, self.init_state() if state is None else state, chunk)
        return (out, layers, state) if return_layers else out

    def step(self, x_t, state: State):
        """One position of the RNN form: x_t a token id (int or 0-d tensor) or a
        frame (F,). Returns (out_t (out_width,), new State, [block outputs (d_model,)])."""
        if not self.causal:
            raise ValueError("a non-causal (encoder) model has no recurrent form; use forward")
        x = torch.as_tensor(x_t)
        x = x.reshape(1) if self.input.kind == "tokens" else x.reshape(1, -1)
        out, layers, state = self._run(x, state, chunk=None)
        return out[0], state, [h[0] for h in layers]
