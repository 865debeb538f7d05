"""Reference implementations of the sequence mixers (float64-capable
ground truth for the C++ parity tests). Math: docs/attention-math.md
§2 (softmax), §3 (linear attention feature maps), §4 (AFT), §5 (Longformer
windows), §6 (GAU / FLASH), §7 (Linformer), §8 (Reformer).

Every mixer is an `nn.Module` built as `MIXERS[cfg["type"]](cfg, d_model)`; its
`state_dict()` names are relative to the mixer (`query.weight`, `feature_map.omega`,
...), so inside a block they become `blocks.{i}.mixer.<name>`.

Common interface (x: (B, N, d_model), x_t: (B, d_model)):
  forward(x)                      parallel form → (B, N, d_model); causal or not per cfg
  recurrent                       True when step/initial_state exist (causal mixers)
  initial_state(batch, max_context=None) → dict of tensors (the state before position 0)
  step(x_t, state)                → (y_t (B, d_model), new state); never mutates `state`
  prefill(x, state)               → (y (B, N, d_model), new state): the chunked form,
                                    continuing from `state` (== N steps)
  state_size()                    == state_bytes(cfg, d_model)
Mixers without a recurrent form (non-causal variants, Linformer, Reformer) raise ValueError
from initial_state / step / prefill with a message that says so.

State dicts: float tensors with a leading batch dimension plus, where the mixer
needs the absolute position, "pos": a 0-d int64 tensor (positions consumed so
far, the same for the whole batch). `state_bytes` counts the float tensors only
(f32 bytes per stream, i.e. batch 1), not "pos".
"""

import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Chunk length of the chunked parallel form of linear attention (any T ≥ 1 gives the same result).
LINEAR_CHUNK = 64


# --------------------------------------------------------------------------------------
# Config validation and state sizes
# --------------------------------------------------------------------------------------

def _pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _nonneg_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _pos_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)


FEATURE_MAPS = ("elu_plus_one", "relu", "favor", "poly2")
FAVOR_LAYOUTS = ("performer", "fast_transformers")
LINFORMER_SHARING = ("none", "headwise", "kv", "layerwise")
AFT_BIAS_FORMS = ("add", "multiply")

# type → (required keys, optional keys); "type" itself is implied.
_KEYS = {
    "softmax_attention": ({"heads", "dk", "dv"}, {"causal"}),
    "linear_attention": ({"heads", "dk", "dv", "feature_map", "eps"},
                         {"causal", "n_features", "favor_layout", "softmax_temp"}),
    "sliding_window": ({"heads", "dk", "dv", "window"}, {"dilation", "global_tokens", "causal"}),
    "aft_simple": ({"heads", "dk"}, {"causal"}),
    "aft_local": ({"heads", "dk", "window"}, {"causal"}),
    "aft_conv": ({"heads", "dk", "window"}, {"causal"}),
    "aft_full": ({"heads", "dk", "max_length"}, {"bias_rank", "bias_form", "causal"}),
    "gau": ({"expansion_dim", "qk_dim", "max_length"}, {"scale", "causal"}),
    "flash": ({"expansion_dim", "qk_dim", "chunk"}, {"scale", "causal"}),
    "linformer": ({"heads", "dk", "dv", "seq_len", "proj_dim"}, {"sharing", "causal"}),
    "reformer": ({"heads", "dk", "dv", "n_buckets", "chunk", "rounds"}, {"causal"}),
}
# Mixer types with no causal form at all (encoder only): causal defaults to false, true is rejected.
ENCODER_ONLY = ("linformer", "reformer")


def is_causal(cfg: dict) -> bool:
    """cfg's causal flag; default true, except linformer and reformer (encoder only: default false)."""
    return cfg.get("causal", cfg.get("type") not in ENCODER_ONLY)


def validate_mixer(cfg: dict, d_model: int) -> None:
    """Raise ValueError (message names the key and the problem) unless `cfg` is a
    well-formed mixer config for a model of width d_model."""

    def need(ok, what):
        if not ok:
            raise ValueError(f"mixer ({cfg.get('type') if isinstance(cfg, dict) else '?'}): {what}")

    need(_pos_int(d_model), "d_model must be a positive integer")
    need(isinstance(cfg, dict), "mixer config must be a dict")
    t = cfg.get("type")
    need(t in _KEYS, f"unknown mixer.type {t!r}; expected one of {sorted(_KEYS)}")
    req, opt = _KEYS[t]
    keys = set(cfg) - {"type"}
    need(keys >= req, f"missing keys {sorted(req - keys)}")
    need(keys <= req | opt, f"unknown keys {sorted(keys - req - opt)} (allowed: {sorted(req | opt)})")
    need(isinstance(cfg.get("causal", True), bool), "mixer.causal must be true or false")
    causal = is_causal(cfg)
    for k in ("heads", "dk", "dv", "expansion_dim", "qk_dim"):
        if k in cfg:
            need(_pos_int(cfg[k]), f"mixer.{k} must be a positive integer, got {cfg[k]!r}")

    if t == "linear_attention":
        fm = cfg["feature_map"]
        need(fm in FEATURE_MAPS, f"unknown mixer.feature_map {fm!r}; expected one of {list(FEATURE_MAPS)}")
        need(_pos_number(cfg["eps"]), "mixer.eps must be > 0")
        favor_keys = {"n_features", "favor_layout", "softmax_temp"} & set(cfg)
        if fm == "favor":
            need("n_features" in cfg, "mixer.n_features is required with feature_map 'favor'")
            layout = cfg.get("favor_layout", "performer")
            need(layout in FAVOR_LAYOUTS, f"unknown mixer.favor_layout {layout!r}; expected one of {list(FAVOR_LAYOUTS)}")
            need(_pos_int(cfg["n_features"]) and (layout == "performer" or cfg["n_features"] >= 2),
                 "mixer.n_features must be a positive integer (>= 2 for favor_layout 'fast_transformers')")
            if "softmax_temp" in cfg:
                need(_pos_number(cfg["softmax_temp"]), "mixer.softmax_temp must be > 0")
        else:
            need(not favor_keys, f"keys {sorted(favor_keys)} are only valid with feature_map 'favor'")
    elif t == "sliding_window":
        need(_pos_int(cfg["window"]), f"mixer.window must be a positive integer, got {cfg['window']!r}")
        dil = cfg.get("dilation", 1)
        if isinstance(dil, list):
            need(len(dil) == cfg["heads"], f"mixer.dilation has {len(dil)} entries, expected heads = {cfg['heads']}")
            need(all(_pos_int(d) for d in dil), "mixer.dilation entries must be positive integers")
        else:
            need(_pos_int(dil), f"mixer.dilation must be a positive integer or a list of one per head, got {dil!r}")
        need(_nonneg_int(cfg.get("global_tokens", 0)), "mixer.global_tokens must be an integer >= 0")
    elif t in ("aft_local", "aft_conv"):
        need(_pos_int(cfg["window"]), f"mixer.window must be a positive integer, got {cfg['window']!r}")
    elif t == "aft_full":
        need(_pos_int(cfg["max_length"]), "mixer.max_length must be a positive integer")
        r = cfg.get("bias_rank")
        need(r is None or _pos_int(r), "mixer.bias_rank must be a positive integer or null (full bias matrix)")
        need(cfg.get("bias_form", "add") in AFT_BIAS_FORMS,
             f"unknown mixer.bias_form {cfg.get('bias_form')!r}; expected one of {list(AFT_BIAS_FORMS)}")
    elif t == "gau":
        need(_pos_int(cfg["max_length"]), "mixer.max_length must be a positive integer")
    elif t == "flash":
        need(_pos_int(cfg["chunk"]), "mixer.chunk must be a positive integer")
    elif t == "linformer":
        need(not causal, "linformer is encoder-only: mixer.causal must be false")
        need(_pos_int(cfg["seq_len"]), "mixer.seq_len must be a positive integer")
        need(_pos_int(cfg["proj_dim"]), "mixer.proj_dim must be a positive integer")
        s = cfg.get("sharing", "none")
        need(s in LINFORMER_SHARING, f"unknown mixer.sharing {s!r}; expected one of {list(LINFORMER_SHARING)}")
    elif t == "reformer":
        need(not causal, "reformer has no causal/recurrent form: mixer.causal must be false")
        nb = cfg["n_buckets"]
        need(_pos_int(nb) and nb >= 2 and nb % 2 == 0, f"mixer.n_buckets must be an even integer >= 2, got {nb!r}")
        need(_pos_int(cfg["chunk"]), f"mixer.chunk must be a positive integer, got {cfg['chunk']!r}")
        need(_pos_int(cfg["rounds"]), f"mixer.rounds must be a positive integer, got {cfg['rounds']!r}")
    if "scale" in cfg:
        need(_pos_number(cfg["scale"]), "mixer.scale must be > 0")


class StateSize(NamedTuple):
    """f32 state of one stream (batch 1), excluding the position counter.
    Total bytes after n positions = fixed_bytes + per_position_bytes · n, n ≤ bound."""
    recurrent: bool            # False: no step form (encoder only)
    fixed_bytes: int
    per_position_bytes: int    # > 0: the state grows with N (a KV cache)
    bound: Optional[int]       # max positions (config's max_length), None: given at session creation

    @property
    def grows(self) -> bool:
        return self.per_position_bytes > 0


def feature_dim(cfg: dict) -> int:
    """C, the width of φ(x) of a linear_attention mixer."""
    fm, dk = cfg["feature_map"], cfg["dk"]
    if fm == "poly2":
        return dk * dk
    if fm == "favor":
        m = cfg["n_features"]
        return m if cfg.get("favor_layout", "performer") == "performer" else 2 * (m // 2)
    return dk


def _dilations(cfg: dict):
    d = cfg.get("dilation", 1)
    return list(d) if isinstance(d, list) else [d] * cfg["heads"]


def state_bytes(cfg: dict, d_model: int) -> StateSize:
    """The f32 state size per stream of mixer `cfg` (see the state layouts in each class)."""
    validate_mixer(cfg, d_model)
    t, f4 = cfg["type"], 4
    if not is_causal(cfg) or t in ENCODER_ONLY:
        return StateSize(False, 0, 0, None)
    if t == "softmax_attention":
        return StateSize(True, 0, f4 * cfg["heads"] * (cfg["dk"] + cfg["dv"]), None)
    if t == "linear_attention":
        c = feature_dim(cfg)
        return StateSize(True, f4 * cfg["heads"] * (c * cfg["dv"] + c), 0, None)
    if t == "sliding_window":
        ring = (cfg["window"] - 1) * max(_dilations(cfg)) + 1
        g = cfg.get("global_tokens", 0)
        return StateSize(True, f4 * cfg["heads"] * (ring + g) * (cfg["dk"] + cfg["dv"]), 0, None)
    D = cfg.get("heads", 0) * cfg.get("dk", 0)
    if t == "aft_simple":
        return StateSize(True, f4 * 3 * D, 0, None)
    if t in ("aft_local", "aft_conv"):
        return StateSize(True, f4 * D * (3 + 2 * cfg["window"]), 0, None)
    if t == "aft_full":
        return StateSize(True, 0, f4 * 2 * D, cfg["max_length"])
    if t == "gau":
        return StateSize(True, 0, f4 * (cfg["qk_dim"] + cfg["expansion_dim"]), cfg["max_length"])
    if t == "flash":
        s, e, c = cfg["qk_dim"], cfg["expansion_dim"], cfg["chunk"]
        return StateSize(True, f4 * (s * e + c * (2 * s + e)), 0, None)
    raise AssertionError(t)


# --------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------

class Mixer(nn.Module):
    TYPE = ""

    def __init__(self, cfg: dict, d_model: int):
        super().__init__()
        validate_mixer(cfg, d_model)
        if cfg["type"] != self.TYPE:
            raise ValueError(f"mixer: config type {cfg['type']!r} given to {type(self).__name__}")
        self.cfg = dict(cfg)
        self.d_model = d_model
        self.causal = is_causal(cfg)

    @property
    def recurrent(self) -> bool:
        return self.causal

    def state_size(self) -> StateSize:
        return state_bytes(self.cfg, self.d_model)

    def _no_rnn(self):
        why = "it is encoder-only" if self.TYPE in ENCODER_ONLY else "it is non-causal (causal: false)"
        raise ValueError(f"mixer {self.TYPE}: no recurrent (step) form because {why}; use forward(x) "
                         "over the whole sequence")

    def _check_x(self, x: Tensor, dims: int):
        if x.dim() != dims or x.shape[-1] != self.d_model:
            shape = "(B, N, d_model)" if dims == 3 else "(B, d_model)"
            raise ValueError(f"mixer {self.TYPE}: expected {shape} with d_model={self.d_model}, got {tuple(x.shape)}")

    # Subclasses with a recurrent form override _initial_state and _prefill.
    def initial_state(self, batch: int, max_context: Optional[int] = None) -> dict:
        if not self.recurrent:
            self._no_rnn()
        return self._initial_state(batch, max_context)

    def prefill(self, x: Tensor, state: dict):
        if not self.recurrent:
            self._no_rnn()
        self._check_x(x, 3)
        return self._prefill(x, state)

    def step(self, x_t: Tensor, state: dict):
        if not self.recurrent:
            self._no_rnn()
        self._check_x(x_t, 2)
        y, state = self._prefill(x_t[:, None], state)
        return y[:, 0], state

    def _steps(self, x: Tensor, state: dict):
        """Fallback prefill: N single steps (_step_one: (B, d) → (B, d))."""
        ys = []
        for t in range(x.shape[1]):
            y, state = self._step_one(x[:, t], state)
            ys.append(y)
        return torch.stack(ys, 1), state

    def _weight(self):
        for p in self.parameters():
            return p


def _dtype(m: nn.Module):
    for p in m.parameters():
        return p.dtype, p.device
    return torch.get_default_dtype(), None


def _check_pos(pos: int, n: int, bound: int, what: str, mixer: str):
    if pos + n > bound:
        raise ValueError(f"mixer {mixer}: positions {pos}..{pos + n - 1} exceed {what} {bound}")


# --------------------------------------------------------------------------------------
# 1. Softmax attention (§2)
# --------------------------------------------------------------------------------------

class SoftmaxAttention(Mixer):
    """softmax(Q Kᵀ / √dk) V per head (causal: mask j > i). Step form: the KV cache.

    Tensors: query (H·dk, d), key (H·dk, d), value (H·dv, d), out (d, H·dv) (.weight, .bias).
    State (causal), allocated once for max_context positions (given to initial_state,
    required; stepping past it raises ValueError):
      k (B, H, max_context, dk), v (B, H, max_context, dv), pos.
    """
    TYPE = "softmax_attention"

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)

    def _qkv(self, x):
        B, N, _ = x.shape
        H = self.heads
        q = self.query(x).view(B, N, H, self.dk).transpose(1, 2)
        k = self.key(x).view(B, N, H, self.dk).transpose(1, 2)
        v = self.value(x).view(B, N, H, self.dv).transpose(1, 2)
        return q, k, v   # (B, H, N, ·)

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        q, k, v = self._qkv(x)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)
        if self.causal:
            s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        o = torch.softmax(s, -1) @ v
        return self.out(o.transpose(1, 2).reshape(B, N, -1))

    def _initial_state(self, batch, max_context):
        if not _pos_int(max_context):
            raise ValueError("mixer softmax_attention: initial_state needs max_context (a positive integer: "
                             "the KV cache is allocated for that many positions)")
        dt, dev = _dtype(self)
        return {"k": torch.zeros(batch, self.heads, max_context, self.dk, dtype=dt, device=dev),
                "v": torch.zeros(batch, self.heads, max_context, self.dv, dtype=dt, device=dev),
                "pos": torch.tensor(0)}

    def _prefill(self, x, state):
        B, N, _ = x.shape
        pos, T = int(state["pos"]), state["k"].shape[2]
        _check_pos(pos, N, T, "max_context", self.TYPE)
        q, k, v = self._qkv(x)
        K, V = state["k"].clone(), state["v"].clone()
        K[:, :, pos:pos + N], V[:, :, pos:pos + N] = k, v
        s = q @ K[:, :, :pos + N].transpose(-1, -2) / math.sqrt(self.dk)       # (B, H, N, pos+N)
        i = torch.arange(N)[:, None] + pos
        j = torch.arange(pos + N)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
        o = torch.softmax(s, -1) @ V[:, :, :pos + N]
        return self.out(o.transpose(1, 2).reshape(B, N, -1)), {"k": K, "v": V, "pos": torch.tensor(pos + N)}


# --------------------------------------------------------------------------------------
# 2. Linear attention with feature maps (§3)
# --------------------------------------------------------------------------------------

def orthogonal_random_matrix_(w: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
    """Fill w (rows, columns) in place with blocks of orthogonal columns whose norms are
    chi(rows)-distributed, after fast-transformers' orthogonal_random_matrix_
    (idiap/fast-transformers fast_transformers/feature_maps/fourier_features.py), plus the
    sign fix of the QR factor. Only an initialisation: runs use the stored ω."""
    rows, columns = w.shape
    start = 0
    with torch.no_grad():
        while start < columns:
            end = min(start + rows, columns)
            block = torch.randn(rows, rows, generator=generator, dtype=torch.float64)
            norms = torch.sqrt(torch.einsum("ab,ab->a", block, block))
            Q, R = torch.linalg.qr(block)
            Q = Q * torch.sign(torch.diagonal(R))[None, :]   # Haar-uniform directions (the library
            #                                                     omits this sign fix: biased columns)
            w[:, start:end] = (Q[:, :end - start] * norms[None, :end - start]).to(w.dtype)
            start += rows
    return w


def performer_favor(x: Tensor, omega: Tensor, softmax_temp: float) -> Tensor:
    """Our FAVOR+ (Performer positive random features, docs/attention-math.md §3):

        x̃ = x·√softmax_temp,  φ(x)_j = exp(ω_jᵀx̃ − ‖x̃‖²/2) / √m,   j = 1..m

    omega (dk, m): column j is ω_j. φ(q)·φ(k) is an unbiased estimate of
    exp(softmax_temp · qᵀk) (softmax_temp = 1/√dk: the softmax kernel of §2)."""
    m = omega.shape[1]
    x = x * math.sqrt(softmax_temp)
    return torch.exp(x @ omega - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(m)


def fast_transformers_favor(x: Tensor, omega: Tensor, n_dims: Optional[int] = None,
                            softmax_temp: Optional[float] = None, stabilize: bool = False) -> Tensor:
    """fast-transformers' `Favor.forward`, transcribed exactly from
    idiap/fast-transformers, fast_transformers/feature_maps/fourier_features.py
    (class Favor(RandomFourierFeatures); omega is the buffer registered by
    RandomFourierFeatures.__init__ as torch.zeros(query_dimensions, self.n_dims//2)):

        self.softmax_temp = 1/sqrt(query_dimensions) if softmax_temp is None else softmax_temp
        x = x * sqrt(self.softmax_temp)
        norm_x_squared = torch.einsum("...d,...d->...", x, x).unsqueeze(-1)
        u = x.unsqueeze(-2).matmul(self.omega).squeeze(-2)
        offset = norm_x_squared * 0.5 + 0.5 * log(self.n_dims)
        if self.stabilize:
            offset = offset + norm_x_squared.max(1, keepdim=True)[0]
        exp_u1 = torch.exp(u - offset)
        exp_u2 = torch.exp(-u - offset)
        phi = torch.cat([exp_u1, exp_u2], dim=-1)

    i.e. φ(x) = [exp(ωᵀx̃ − ‖x̃‖²/2), exp(−ωᵀx̃ − ‖x̃‖²/2)] / √n_dims (hyperbolic positive
    random features, width 2·(n_dims//2)), x̃ = x·√softmax_temp. x: (..., query_dimensions);
    omega: (query_dimensions, n_dims//2); n_dims defaults to 2·omega.shape[1] (the library's
    n_dims, which appears only in the log term, may be odd). `stabilize` subtracts the max of
    ‖x̃‖² over dim 1 (the library assumes (N, L, H, D): the sequence axis) — sequence-global,
    so it has no causal/RNN form; recur's mixer uses stabilize=False (the factor it applies is
    a per-(batch, head) constant that cancels between numerator and denominator up to ε).
    """
    query_dimensions = x.shape[-1]
    if n_dims is None:
        n_dims = 2 * omega.shape[1]
    if softmax_temp is None:
        softmax_temp = 1 / math.sqrt(query_dimensions)
    x = x * math.sqrt(softmax_temp)
    norm_x_squared = torch.einsum("...d,...d->...", x, x).unsqueeze(-1)
    u = x.unsqueeze(-2).matmul(omega).squeeze(-2)
    offset = norm_x_squared * 0.5 + 0.5 * math.log(n_dims)
    if stabilize:
        offset = offset + norm_x_squared.max(1, keepdim=True)[0]
    exp_u1 = torch.exp(u - offset)
    exp_u2 = torch.exp(-u - offset)
    return torch.cat([exp_u1, exp_u2], dim=-1)


def poly2(x: Tensor) -> Tensor:
    """Degree-2 polynomial feature map: φ(x) = vec(x xᵀ) (C = dk², row-major:
    φ_{a·dk+b} = x_a x_b), so φ(q)·φ(k) = (qᵀk)² exactly."""
    return (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2)


class _FeatureMapParams(nn.Module):
    """Holds the FAVOR+ projection: buffer `omega` (dk, columns), exported in state_dict."""

    def __init__(self, dk: int, columns: int):
        super().__init__()
        self.register_buffer("omega", orthogonal_random_matrix_(torch.zeros(dk, columns)))


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
    ω is shared by all heads (as in fast-transformers: one feature map per attention layer).
    Tensors: query, key, value, out (.weight/.bias as softmax_attention) and, for favor,
    feature_map.omega (the fast-transformers name inner_attention.feature_map.omega).
    State (causal): S (B, H, C, dv) = Σ φ(k)vᵀ, z (B, H, C) = Σ φ(k).
    """
    TYPE = "linear_attention"

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv, self.eps = cfg["heads"], cfg["dk"], cfg["dv"], cfg["eps"]
        self.fm = cfg["feature_map"]
        self.C = feature_dim(cfg)
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        if self.fm == "favor":
            self.layout = cfg.get("favor_layout", "performer")
            self.n_features = cfg["n_features"]
            self.softmax_temp = cfg.get("softmax_temp", 1 / math.sqrt(self.dk))
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
        if self.layout == "performer":
            return performer_favor(x, omega, self.softmax_temp)
        return fast_transformers_favor(x, omega, self.n_features, self.softmax_temp)

    def _features(self, x):
        B, N, _ = x.shape
        q = self.phi(self.query(x).view(B, N, self.heads, self.dk))
        k = self.phi(self.key(x).view(B, N, self.heads, self.dk))
        v = self.value(x).view(B, N, self.heads, self.dv)
        return q, k, v   # (B, N, H, C), (B, N, H, C), (B, N, H, dv)

    def forward(self, x):
        self._check_x(x, 3)
        if self.causal:
            return self._prefill(x, self._initial_state(x.shape[0], None))[0]
        B, N, _ = x.shape
        q, k, v = self._features(x)
        S = torch.einsum("bjhc,bjhm->bhcm", k, v)
        z = k.sum(1)
        num = torch.einsum("bihc,bhcm->bihm", q, S)
        den = torch.einsum("bihc,bhc->bih", q, z) + self.eps
        return self.out((num / den.unsqueeze(-1)).reshape(B, N, -1))

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return {"S": torch.zeros(batch, self.heads, self.C, self.dv, dtype=dt, device=dev),
                "z": torch.zeros(batch, self.heads, self.C, dtype=dt, device=dev)}

    def _prefill(self, x, state, chunk: int = LINEAR_CHUNK):
        """Chunked form (§3 "Parallel (chunked) form"), continuing from state."""
        B, N, _ = x.shape
        q, k, v = self._features(x)
        S, z = state["S"], state["z"]
        outs = []
        for c in range(0, N, chunk):
            qc, kc, vc = q[:, c:c + chunk], k[:, c:c + chunk], v[:, c:c + chunk]
            sim = torch.einsum("bihc,bjhc->bhij", qc, kc).tril()
            num = torch.einsum("bhij,bjhm->bihm", sim, vc) + torch.einsum("bihc,bhcm->bihm", qc, S)
            den = sim.sum(-1).transpose(1, 2) + torch.einsum("bihc,bhc->bih", qc, z)
            outs.append(num / (den + self.eps).unsqueeze(-1))
            S = S + torch.einsum("bjhc,bjhm->bhcm", kc, vc)
            z = z + kc.sum(1)
        o = torch.cat(outs, 1)
        return self.out(o.reshape(B, N, -1)), {"S": S, "z": z}

    def step(self, x_t, state):
        """The RNN form of §3 literally: S += φ(k)vᵀ, z += φ(k), y = φ(q)ᵀS / (φ(q)ᵀz + ε)."""
        if not self.recurrent:
            self._no_rnn()
        self._check_x(x_t, 2)
        q, k, v = (t[:, 0] for t in self._features(x_t[:, None]))      # (B, H, ·)
        S = state["S"] + torch.einsum("bhc,bhm->bhcm", k, v)
        z = state["z"] + k
        num = torch.einsum("bhc,bhcm->bhm", q, S)
        den = torch.einsum("bhc,bhc->bh", q, z) + self.eps
        y = self.out((num / den.unsqueeze(-1)).reshape(len(x_t), -1))
        return y, {"S": S, "z": z}


# --------------------------------------------------------------------------------------
# 3. Longformer sliding window (+ dilation, + global tokens) (§5)
# --------------------------------------------------------------------------------------

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
    everything".) The global positions use the same Q/K/V projections as the rest
    (Longformer's separate global projections are not modelled).
    Tensors: query, key, value, out (as softmax_attention).
    State (causal, fixed size), R = (w−1)·max_h(d_h) + 1:
      k_ring (B, H, R, dk), v_ring (B, H, R, dv): position p lives in slot p mod R;
      k_glob (B, H, g, dk), v_glob (B, H, g, dv): position p < g in slot p; pos.
    """
    TYPE = "sliding_window"

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

    _qkv = SoftmaxAttention._qkv

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

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        q, k, v = self._qkv(x)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)                 # (B, H, N, N)
        ar = torch.arange(N)
        mask = self.allowed(ar[:, None], ar[None, :])                    # (H, N, N)
        s = s.masked_fill(~mask, float("-inf"))
        o = torch.softmax(s, -1) @ v
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
        q, k, v = (a[:, :, 0] for a in self._qkv(x_t[:, None]))          # (B, H, ·)
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


# --------------------------------------------------------------------------------------
# 4. AFT (§4)
# --------------------------------------------------------------------------------------

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
    start): num = Σ exp(K_p − max)·V_p, den = Σ exp(K_p − max)."""
    TYPE = "aft_simple"

    def bias(self, t, p):
        return torch.zeros(len(t), len(p), self.D, dtype=self._weight().dtype)

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
    then position t − s + 1 (if ≥ 0) is folded into (num, den, max) with w = 0."""
    TYPE = "aft_local"

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.s = cfg["window"]
        self._make_bias()

    def _make_bias(self):
        n = self.s if self.causal else 2 * self.s - 1
        self.pos_bias = nn.Parameter(0.5 * torch.randn(n))

    def _kernel(self) -> Tensor:
        """(n, D): the bias of each relative offset for each channel."""
        return self.pos_bias[:, None].expand(-1, self.D)

    def bias(self, t, p):
        off = t[:, None] - p[None, :]
        inside = off.abs() < self.s if not self.causal else (off >= 0) & (off < self.s)
        idx = off if self.causal else off + self.s - 1
        idx = idx.clamp(0, self._kernel().shape[0] - 1)
        return torch.where(inside[..., None], self._kernel()[idx], torch.zeros((), dtype=self._weight().dtype))

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

    def _make_bias(self):
        n = self.s if self.causal else 2 * self.s - 1
        self.conv_kernel = nn.Parameter(0.5 * torch.randn(self.heads, n))

    def _kernel(self):
        return self.conv_kernel.t().repeat_interleave(self.dk, dim=1)   # (n, D)


class AFTFull(_AFTBase):
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
    State (causal, bounded by T_max, stepping past it raises ValueError):
      k (B, T_max, D), v (B, T_max, D), pos.
    """
    TYPE = "aft_full"

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

    def w(self) -> Tensor:
        return self.pos_bias if self.rank is None else self.u @ self.v.t()

    def _logits(self, k, t, p):
        w = self.w()[t[:, None], p[None, :]][None, :, :, None]           # (1, Nt, Np, 1)
        lg = k[:, None] + w if self.form == "add" else k[:, None] * w
        if self.causal:
            lg = lg.masked_fill((p[None, :] > t[:, None])[None, :, :, None], float("-inf"))
        return lg

    def forward(self, x):
        self._check_x(x, 3)
        _check_pos(0, x.shape[1], self.T, "max_length", self.TYPE)
        return super().forward(x)

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return {"k": torch.zeros(batch, self.T, self.D, dtype=dt, device=dev),
                "v": torch.zeros(batch, self.T, self.D, dtype=dt, device=dev), "pos": torch.tensor(0)}

    def _prefill(self, x, state):
        B, N, _ = x.shape
        pos = int(state["pos"])
        _check_pos(pos, N, self.T, "max_length", self.TYPE)
        q, k, v = self._qkv(x)
        K, V = state["k"].clone(), state["v"].clone()
        K[:, pos:pos + N], V[:, pos:pos + N] = k, v
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


# --------------------------------------------------------------------------------------
# 5. GAU and FLASH (§6, Hua et al. 2022)
# --------------------------------------------------------------------------------------

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


class GAU(_GAUBase):
    """Gated attention unit, one head:
      Q = γ_0 ⊙ Z + β_0, K = γ_1 ⊙ Z + β_1,
      A_{t,p} = relu(scale · Q_t·K_p + rel_bias[·])²   (causal: p ≤ t; no softmax, no normaliser)
      y = out(U ⊙ A V)
    Config: expansion_dim E, qk_dim s, max_length T (sequences/contexts longer raise
    ValueError), scale (default 1/T: the paper divides by the sequence length), causal.
    rel_bias: causal (T,), index t − p; non-causal (2T−1,), index t − p + T − 1
    (a learned bias per relative offset; the paper uses T5-style buckets or RoPE).
    State (causal, a KV cache bounded by T): k (B, T, s), v (B, T, E), pos.
    """
    TYPE = "gau"

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.T = cfg["max_length"]
        self.scale = cfg.get("scale", 1.0 / self.T)
        self.rel_bias = nn.Parameter(0.3 * torch.randn(self.T if self.causal else 2 * self.T - 1))

    def _attn(self, q, k, t, p):
        off = t[:, None] - p[None, :]
        b = self.rel_bias[off.clamp(min=0)] if self.causal else self.rel_bias[off + self.T - 1]
        a = F.relu(self.scale * torch.einsum("bis,bjs->bij", q, k) + b) ** 2
        if self.causal:
            a = a.masked_fill(off < 0, 0.0)
        return a

    def forward(self, x):
        self._check_x(x, 3)
        N = x.shape[1]
        _check_pos(0, N, self.T, "max_length", self.TYPE)
        u, v, (q, k) = self._proj(x)
        ar = torch.arange(N)
        return self.out(u * (self._attn(q, k, ar, ar) @ v))

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return {"k": torch.zeros(batch, self.T, self.s, dtype=dt, device=dev),
                "v": torch.zeros(batch, self.T, self.E, dtype=dt, device=dev), "pos": torch.tensor(0)}

    def _prefill(self, x, state):
        N, pos = x.shape[1], int(state["pos"])
        _check_pos(pos, N, self.T, "max_length", self.TYPE)
        u, v, (q, k) = self._proj(x)
        K, V = state["k"].clone(), state["v"].clone()
        K[:, pos:pos + N], V[:, pos:pos + N] = k, v
        a = self._attn(q, K[:, :pos + N], torch.arange(pos, pos + N), torch.arange(pos + N))
        return self.out(u * (a @ V[:, :pos + N])), {"k": K, "v": V, "pos": torch.tensor(pos + N)}


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
    """
    TYPE = "flash"
    ROWS = 4

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.C = cfg["chunk"]
        self.scale = cfg.get("scale", 1.0 / self.C)
        self.rel_bias = nn.Parameter(0.3 * torch.randn(self.C if self.causal else 2 * self.C - 1))

    def forward(self, x):
        self._check_x(x, 3)
        if self.causal:
            return self._prefill(x, self._initial_state(x.shape[0], None))[0]
        B, N, _ = x.shape
        u, v, (qq, kq, ql, kl) = self._proj(x)
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
        u, v, (qq, kq, ql, kl) = self._proj(x)
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


# --------------------------------------------------------------------------------------
# 6. Linformer (§7), encoder only
# --------------------------------------------------------------------------------------

class Linformer(Mixer):
    """Per head h: K'_h = E_h K_h, V'_h = F_h V_h (E, F ∈ R^{k×n}), A = softmax(Q K'ᵀ/√dk) V'.
    Config: heads, dk, dv, seq_len n, proj_dim k, sharing, causal (must be false).
    sharing → tensors (besides query, key, value, out as softmax_attention):
      'none'      E (H, k, n), F (H, k, n)
      'headwise'  E (k, n), F (k, n)          (shared by all heads)
      'kv'        E (k, n)                    (F = E, shared by heads)
      'layerwise' E (k, n)                    (F = E, shared by heads and by all layers: the
                  module holds its own E; the exporter stores a single E (layer 0's) and the
                  converter resolves the sharing for the other layers)
    A sequence of N < n positions uses E[:, :N], F[:, :N] (= keys/values of absent positions
    are zero, i.e. padding to n); N > n raises ValueError. No recurrent form.
    """
    TYPE = "linformer"

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.n, self.k = cfg["seq_len"], cfg["proj_dim"]
        self.sharing = cfg.get("sharing", "none")
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        shape = (self.heads, self.k, self.n) if self.sharing == "none" else (self.k, self.n)
        self.E = nn.Parameter(torch.randn(*shape) / math.sqrt(self.n))
        if self.sharing in ("none", "headwise"):
            self.F = nn.Parameter(torch.randn(*shape) / math.sqrt(self.n))

    @property
    def recurrent(self):
        return False

    _qkv = SoftmaxAttention._qkv

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        if N > self.n:
            raise ValueError(f"mixer linformer: sequence length {N} exceeds seq_len {self.n}")
        q, k, v = self._qkv(x)                                           # (B, H, N, ·)
        E = self.E[..., :N]
        Fm = (self.F if hasattr(self, "F") else self.E)[..., :N]
        eq = "hkn,bhnd->bhkd" if E.dim() == 3 else "kn,bhnd->bhkd"
        k2, v2 = torch.einsum(eq, E, k), torch.einsum(eq, Fm, v)
        a = torch.softmax(q @ k2.transpose(-1, -2) / math.sqrt(self.dk), -1)
        return self.out((a @ v2).transpose(1, 2).reshape(B, N, -1))


# --------------------------------------------------------------------------------------
# 7. Reformer LSH attention, encoder only
# --------------------------------------------------------------------------------------

def lsh_buckets(k: Tensor, rotations: Tensor) -> Tensor:
    """The bucket of every key of every round: k (..., N, dk) (unit-norm keys), rotations
    (r, dk, nb/2) → (r, ..., N) int64, argmax over the nb values [P, −P] with P = k · rotations[i]
    (concatenated in that order; ties → the lowest index)."""
    p = torch.einsum("...nd,rdb->r...nb", k, rotations)
    return torch.argmax(torch.cat([p, -p], -1), -1)


class Reformer(Mixer):
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
    No recurrent form, no state.
    """
    TYPE = "reformer"

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.n_buckets, self.chunk, self.rounds = cfg["n_buckets"], cfg["chunk"], cfg["rounds"]
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        self.register_buffer("rotations", torch.randn(self.rounds, self.dk, self.n_buckets // 2))

    @property
    def recurrent(self):
        return False

    def forward(self, x):
        self._check_x(x, 3)
        B, N, _ = x.shape
        H = self.heads
        q = self.query(x).view(B, N, H, self.dk).transpose(1, 2)          # (B, H, N, dk)
        v = self.value(x).view(B, N, H, self.dv).transpose(1, 2)          # (B, H, N, dv)
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


MIXERS = {c.TYPE: c for c in (SoftmaxAttention, LinearAttention, SlidingWindowAttention, AFTSimple,
                              AFTLocal, AFTConv, AFTFull, GAU, FLASH, Linformer, Reformer)}


def build_mixer(cfg: dict, d_model: int) -> Mixer:
    """The mixer module of config `cfg` (validated)."""
    validate_mixer(cfg, d_model)
    return MIXERS[cfg["type"]](cfg, d_model)
