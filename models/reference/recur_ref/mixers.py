"""The sequence mixers of the reference, one class per mixer (float64-capable ground
truth for the C++ parity tests). Math: docs/attention-math.md §2 (softmax), §3 (linear
attention feature maps), §4 (AFT), §5 (Longformer windows), §6 (GAU / FLASH), §7
(Linformer), §8 (Reformer), §11 (RetNet retention).

Every mixer is an `nn.Module` built as `build_mixer(cfg, d_model)` (= `MIXERS[cfg["type"]](cfg,
d_model)`); its `state_dict()` names are relative to the mixer (`query.weight`,
`feature_map.omega`, ...), so inside a block they become `blocks.{i}.mixer.<name>`. Parameters
are created in one fixed order per class, so a torch seed gives the same weights every time.

Each class has two sets of forms over the same parameters.

Per stream (what RecurModel runs, and so what the goldens are made from): x (N, d_model) is
one stream at absolute positions pos..pos+N−1; the state is a dict of tensors without a
batch dimension (the layouts of model.State):
  empty_state(dtype)                          the state before position 0
  parallel(x, state, [pos,] chunk)            chunked causal form → (y (N, d_model), state after x)
  recurrent(x, state, [pos])                  one position at a time, same result
  noncausal(x, state, [pos])                  encoder form over a whole utterance
Mixers whose math depends on absolute positions (USES_POS) take `pos`; linear_attention
passes (S, z) instead of a state dict.

Batched (x: (B, N, d_model), x_t: (B, d_model)):
  forward(x)                      parallel form → (B, N, d_model); causal or not per cfg
  has_step                        True when step/initial_state exist (causal mixers)
  initial_state(batch, max_context=None) → dict of tensors (the state before position 0)
  step(x_t, state)                → (y_t (B, d_model), new state); never mutates `state`
  prefill(x, state)               → (y (B, N, d_model), new state): the chunked form,
                                    continuing from `state` (== N steps)
  state_size()                    == state_bytes(cfg, d_model)
Mixers without a recurrent form (non-causal variants, Linformer, Reformer) raise ValueError
from initial_state / step / prefill with a message that says so.

Batched state dicts: float tensors with a leading batch dimension plus, where the mixer
needs the absolute position, "pos": a 0-d int64 tensor (positions consumed so far, the
same for the whole batch); KV caches are allocated for their bound. `state_bytes` counts
the float tensors only (f32 bytes per stream, i.e. batch 1), not "pos".
"""

import math
from typing import Dict, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Default chunk length T of the chunked parallel forms (any T ≥ 1 gives the same result), and
# the query block of the quadratic encoder forms.
CHUNK = 64


# --------------------------------------------------------------------------------------
# Config validation and state sizes
# --------------------------------------------------------------------------------------

def _pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _nonneg_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _pos_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)


FEATURE_MAPS = ("elu_plus_one", "relu", "favor", "poly2", "favor_stabilized", "generalized_relu",
                "random_fourier", "smoothed_random_fourier")
# fast-transformers' RandomFourierFeatures / SmoothedRandomFourierFeatures: ω (dk, m//2),
# features cos and sin of ωᵀx̃ (and the constant `smoothing`).
FOURIER_MAPS = ("random_fourier", "smoothed_random_fourier")
# performer-pytorch's kernels (favor_stabilized: its softmax kernel; generalized_relu: its
# generalized kernel with relu): ω (dk, m) like 'favor', and ε added to every feature.
PERFORMER_MAPS = {"favor_stabilized": 1e-4, "generalized_relu": 1e-3}
FAVOR_LAYOUTS = ("performer", "fast_transformers")
LINFORMER_SHARING = ("none", "headwise", "kv", "layerwise")
AFT_BIAS_FORMS = ("add", "multiply")

# type → (required keys, optional keys); "type" itself is implied.
_KEYS = {
    "softmax_attention": ({"heads", "dk", "dv"}, {"causal", "rotary"}),
    "linear_attention": ({"heads", "dk", "dv", "feature_map", "eps"},
                         {"causal", "n_features", "favor_layout", "softmax_temp", "feature_eps",
                          "eps_per_feature", "smoothing", "rotary"}),
    "sliding_window": ({"heads", "dk", "dv", "window"},
                       {"dilation", "global_tokens", "causal", "global_projections", "rotary"}),
    "aft_simple": ({"heads", "dk"}, {"causal"}),
    "aft_local": ({"heads", "dk", "window"}, {"causal"}),
    "aft_conv": ({"heads", "dk", "window"}, {"causal"}),
    "aft_full": ({"heads", "dk", "max_length"}, {"bias_rank", "bias_form", "causal"}),
    "gau": ({"expansion_dim", "qk_dim", "max_length"}, {"scale", "causal", "length_scale"}),
    "flash": ({"expansion_dim", "qk_dim", "chunk"}, {"scale", "causal", "rotary"}),
    "linformer": ({"heads", "dk", "dv", "seq_len", "proj_dim"}, {"sharing", "causal"}),
    "reformer": ({"heads", "dk", "dv", "n_buckets", "chunk", "rounds"},
                 {"causal", "form", "chunks_before", "chunks_after", "causal_mask", "pad_multiple", "pad_above"}),
    "retnet": ({"heads", "dk", "dv"}, {"decay", "eps"}),
    "block_local": ({"heads", "dk", "dv", "chunk"},
                    {"chunks_before", "chunks_after", "causal", "pad_multiple", "pad_above"}),
    "rwkv7": ({"heads", "head_size", "decay_rank", "rate_rank", "value_rank", "gate_rank"},
              {"group_norm_eps", "decay_scale"}),
}
# Reformer's forms (§8): the paper's LSH attention, and Hugging Face transformers' LSHSelfAttention
# with the keys only it takes; at most REFORMER_MAX_CHUNKS chunks in a query's window.
REFORMER_FORMS = ("paper", "transformers")
REFORMER_HF_KEYS = ("chunks_before", "chunks_after", "causal_mask", "pad_multiple", "pad_above")
REFORMER_MAX_CHUNKS = 64
# Mixer types with no causal form at all (encoder only): causal defaults to false, true is rejected.
ENCODER_ONLY = ("linformer", "reformer")
# "rotary" (rotary position embeddings of q and k, §12): its pair layouts and default base; where
# its angles come from ("theta": "base" or "stored"; or "table": rows); the key that names the
# width it turns within (each head's q/k features).
ROTARY_PAIRS = ("interleaved", "half")
ROTARY_BASE = 10000
ROTARY_THETA = ("base", "stored")
ROTARY_KEYS = {"dims", "pairs", "base", "theta", "table"}
ROTARY_WIDTH = {"softmax_attention": "dk", "linear_attention": "dk", "sliding_window": "dk", "flash": "qk_dim"}


# RetNet's default decays γ_h = 1 − 2^(−5−h) stay below 1 in float32 for h < 20.
RETNET_DEFAULT_HEADS = 20


def _f32(x: float) -> float:
    """x rounded to float32, as the model file stores it."""
    return float(torch.tensor(x, dtype=torch.float32))


def _decay_ok(g) -> bool:
    """g is a number in (0, 1) after rounding to float32 (0.99999999 rounds to 1)."""
    if not isinstance(g, (int, float)) or isinstance(g, bool):
        return False
    try:
        return 0 < _f32(float(g)) < 1
    except OverflowError:   # an int beyond float's range
        return False


def retnet_decays(cfg: dict) -> list:
    """A retnet config's per-head decays γ_h as float32 values: its "decay" list, or
    1 − 2^(−5−h) (torchscale's RetNetRelPos)."""
    return [_f32(g) for g in cfg.get("decay", [1 - 2.0 ** (-5 - h) for h in range(cfg["heads"])])]


def is_causal(cfg: dict) -> bool:
    """Whether the mixer has a recurrent form: cfg's causal flag; default true, except linformer and
    reformer (encoder only: default false). block_local's "causal" is its mask: it has the step
    form only when causal with chunks_after 0 and chunks_before ≤ 1 (an encoder otherwise)."""
    if cfg.get("type") == "block_local":
        return block_local_streamable(cfg)
    if cfg.get("type") == "gau" and cfg.get("length_scale", False):
        return False   # gau's length_scale divides by the whole length: an encoder, "causal" its mask
    return cfg.get("causal", cfg.get("type") not in ENCODER_ONLY)


def block_local_streamable(cfg: dict) -> bool:
    """A block_local config with the step form: causal, chunks_after 0, chunks_before ≤ 1 (then
    the cyclically wrapped chunks hold only later, masked positions)."""
    return cfg.get("causal", True) is True and cfg.get("chunks_after", 0) == 0 and cfg.get("chunks_before", 1) <= 1


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
    elif t == "sliding_window":
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
        need(isinstance(cfg.get("length_scale", False), bool), "mixer.length_scale must be true or false")
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
    elif t == "block_local":
        c = cfg["chunk"]
        need(_pos_int(c), f"mixer.chunk must be a positive integer, got {c!r}")
        for k in ("chunks_before", "chunks_after"):
            need(_nonneg_int(cfg.get(k, 0)), f"mixer.{k} must be an integer >= 0, got {cfg.get(k)!r}")
        pm = cfg.get("pad_multiple", c)
        need(_pos_int(pm) and pm % c == 0, f"mixer.pad_multiple must be a positive multiple of chunk ({c}), got {pm!r}")
        pa = cfg.get("pad_above", c)
        need(_nonneg_int(pa) and pa <= c, f"mixer.pad_above must be an integer in [0, chunk ({c})], got {pa!r}")
    elif t == "rwkv7":
        for k in ("head_size", "decay_rank", "rate_rank", "value_rank", "gate_rank"):
            need(_pos_int(cfg[k]), f"mixer.{k} must be a positive integer, got {cfg[k]!r}")
        for k in ("group_norm_eps", "decay_scale"):
            if k in cfg:
                need(_pos_number(cfg[k]), f"mixer.{k} must be > 0")
    elif t == "retnet":
        need(cfg["dk"] % 2 == 0, f"mixer.dk must be even (the rotation turns pairs of dims), got {cfg['dk']}")
        if "decay" in cfg:
            d = cfg["decay"]
            need(isinstance(d, list) and len(d) == cfg["heads"],
                 f"mixer.decay must be a list of one number per head (heads = {cfg['heads']}), got {d!r}")
            need(all(_decay_ok(g) for g in d), f"mixer.decay entries must be in (0, 1) as float32, got {d!r}")
        else:
            need(cfg["heads"] <= RETNET_DEFAULT_HEADS,
                 f"mixer.decay is required with more than {RETNET_DEFAULT_HEADS} heads (the default "
                 "1 − 2^(−5−h) rounds to 1 in float32 beyond)")
        if "eps" in cfg:
            need(_pos_number(cfg["eps"]), "mixer.eps must be > 0")
    if "scale" in cfg:
        need(_pos_number(cfg["scale"]), "mixer.scale must be > 0")
    if "rotary" in cfg:
        r, width = cfg["rotary"], ROTARY_WIDTH[t]
        need(isinstance(r, dict), f"mixer.rotary must be a dict, got {r!r}")
        need({"dims", "pairs"} <= set(r), f"mixer.rotary: missing keys {sorted({'dims', 'pairs'} - set(r))}")
        need(set(r) <= ROTARY_KEYS,
             f"mixer.rotary: unknown keys {sorted(set(r) - ROTARY_KEYS)} (allowed: {', '.join(sorted(ROTARY_KEYS))})")
        need(_pos_int(r["dims"]) and r["dims"] % 2 == 0 and r["dims"] <= cfg[width],
             f"mixer.rotary.dims must be even and at most {width} ({cfg[width]}), got {r['dims']!r}")
        need(r["pairs"] in ROTARY_PAIRS, f"unknown mixer.rotary.pairs {r['pairs']!r}; expected one of {list(ROTARY_PAIRS)}")
        need(_pos_number(r.get("base", ROTARY_BASE)), f"mixer.rotary.base must be a finite number > 0, got {r.get('base')!r}")
        need(r.get("theta", "base") in ROTARY_THETA,
             f"unknown mixer.rotary.theta {r.get('theta')!r}; expected one of {list(ROTARY_THETA)}")
        if "table" in r:
            need(_pos_int(r["table"]), f"mixer.rotary.table must be a positive integer (rows), got {r['table']!r}")
            need(r.get("theta", "base") == "base", 'mixer.rotary.table excludes "theta": "stored" (the table holds the angles)')


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
    if fm in PERFORMER_MAPS:
        return cfg["n_features"]
    if fm in FOURIER_MAPS:
        return 2 * (cfg["n_features"] // 2) + (fm == "smoothed_random_fourier")
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
    if t == "retnet":
        return StateSize(True, f4 * cfg["heads"] * cfg["dk"] * cfg["dv"], 0, None)
    if t == "rwkv7":   # S (H, N, N) and x₋₁ (d_model)
        return StateSize(True, f4 * (cfg["heads"] * cfg["head_size"] ** 2 + d_model), 0, None)
    if t == "block_local":   # the step form's ring of (chunks_before + 1)·chunk positions
        ring = (cfg.get("chunks_before", 1) + 1) * cfg["chunk"]
        return StateSize(True, f4 * cfg["heads"] * ring * (cfg["dk"] + cfg["dv"]), 0, None)
    raise AssertionError(t)


# --------------------------------------------------------------------------------------
# Rotations by absolute position: RetNet's (§11) and rotary position embeddings (§12)
# --------------------------------------------------------------------------------------

def rotation_angles(theta: Tensor, pos: int, n: int, dtype: torch.dtype):
    """cos, sin (n, len(theta)) of the angles p·θ_i at positions p = pos..pos+n−1, computed in
    float64 whatever `dtype` (p·θ reaches thousands of radians), then rounded to it."""
    p = torch.arange(pos, pos + n, dtype=torch.float64)
    a = p[:, None] * theta.to(device=p.device, dtype=torch.float64)[None, :]
    return torch.cos(a).to(dtype), torch.sin(a).to(dtype)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, pairs: str = "interleaved") -> Tensor:
    """x (..., dk) with its first 2m dims turned pairwise (m = cos.shape[-1]; cos, sin broadcast
    against x[..., :m]), the rest passed: pair i, (a, b) → (a cos − b sin, b cos + a sin), is
    dims (2i, 2i+1) for pairs "interleaved" (RetNet's theta_shift, performer-pytorch's
    rotate_every_two, rotary-embedding-torch) or (i, i + m) for "half" (GPT-NeoX's and Hugging
    Face's rotate_half). The one rotation of every mixer that turns q and k by position."""
    m = cos.shape[-1]
    a, rest = x[..., :2 * m], x[..., 2 * m:]
    if pairs == "interleaved":
        x0, x1 = a[..., 0::2], a[..., 1::2]
        turned = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1).flatten(-2)
    else:
        x0, x1 = a[..., :m], a[..., m:]
        turned = torch.cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1)
    return torch.cat([turned, rest], -1)


class Rotary(nn.Module):
    """Rotary position embeddings (§12) of a mixer config's "rotary" {"dims": r, "pairs",
    optional "base" (default ROTARY_BASE), "theta", "table"}: at absolute position t, pair i < r/2
    of the first r features of every head's q and k turns by t·θ_i, θ_i = base^(−2i/r)
    (rotate_pairs); the other features pass. With "theta": "stored", θ is the tensor `theta`
    [r/2] (a library's frequency buffer; initially the base's values); with "table": T, pair i at
    t < T turns by (cos, sin) = (table[t, r/2 + i], table[t, i]) of the tensor `table` [T, r]
    (a library's [sin | cos] buffer; initially the base's angles). Either is in state_dict as
    rotary.theta or rotary.table, not trained (requires_grad False); without them nothing is."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.dims, self.pairs = cfg["dims"], cfg["pairs"]
        base = float(cfg.get("base", ROTARY_BASE))
        theta = torch.tensor([base ** (-2 * i / self.dims) for i in range(self.dims // 2)], dtype=torch.float64)
        self.theta_stored = cfg.get("theta", "base") == "stored"
        self.table = None
        if self.theta_stored:
            self.theta = nn.Parameter(theta.float(), requires_grad=False)
        else:
            self.theta = theta
        if "table" in cfg:
            cos, sin = rotation_angles(theta, 0, cfg["table"], torch.float32)
            self.table = nn.Parameter(torch.cat([sin, cos], -1), requires_grad=False)

    def forward(self, x: Tensor, pos: int, heads_last: bool = False) -> Tensor:
        """x (..., n, dk) (heads_last: (..., n, H, dk)) whose rows are positions pos..pos+n−1,
        turned."""
        n = x.shape[-3] if heads_last else x.shape[-2]
        if self.table is not None:
            if pos + n > len(self.table):
                raise ValueError(f"positions {pos}..{pos + n - 1} exceed the rotary table's {len(self.table)} rows")
            m = self.dims // 2
            rows = self.table[pos:pos + n].to(x.dtype)
            sin, cos = rows[:, :m], rows[:, m:]
        else:
            cos, sin = rotation_angles(self.theta, pos, n, x.dtype)
        if heads_last:
            cos, sin = cos[:, None, :], sin[:, None, :]
        return rotate_pairs(x, cos.to(x.device), sin.to(x.device), self.pairs)


def _rotate(m, x: Tensor, pos: int, heads_last: bool = False) -> Tensor:
    """x turned by m's rotary (§12), or x itself when m has none."""
    return x if m.rotary is None else m.rotary(x, pos, heads_last)


# --------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------

class Mixer(nn.Module):
    TYPE = ""
    USES_POS = False    # the per-stream forms take the absolute position of x's first row

    def __init__(self, cfg: dict, d_model: int):
        super().__init__()
        validate_mixer(cfg, d_model)
        if cfg["type"] != self.TYPE:
            raise ValueError(f"mixer: config type {cfg['type']!r} given to {type(self).__name__}")
        self.cfg = dict(cfg)
        self.d_model = d_model
        self.causal = is_causal(cfg)
        self.rotary = Rotary(cfg["rotary"]) if "rotary" in cfg else None   # q, k turned by position (§12)

    @property
    def has_step(self) -> bool:
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
        if not self.has_step:
            self._no_rnn()
        return self._initial_state(batch, max_context)

    def prefill(self, x: Tensor, state: dict):
        if not self.has_step:
            self._no_rnn()
        self._check_x(x, 3)
        return self._prefill(x, state)

    def step(self, x_t: Tensor, state: dict):
        if not self.has_step:
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


class _BoundedKVCache:
    """The per-stream forms of a mixer whose causal state is the KV cache of every position
    so far, bounded by max_length T (AFT-full, GAU): per stream {"k" (P, kw), "v" (P, vw)}
    ({} when non-causal), batched k (B, T, kw), v (B, T, vw), pos; positions past T raise
    ValueError naming max_length. The subclass sets self.T and gives _kv_widths() → (kw, vw),
    _project(x) → (q, k, v, finish: attended rows → output) and _attend(q, K, V, t, mask)."""

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: an empty KV cache (sorted names k, v); {} for a
        non-causal (encoder) mixer, which keeps no state."""
        if not self.causal:
            return {}
        kw, vw = self._kv_widths()
        return {"k": torch.zeros(0, kw, dtype=dtype), "v": torch.zeros(0, vw, dtype=dtype)}

    def _check(self, pos: int, n: int):
        _check_pos(pos, n, self.T, "max_length", self.TYPE)

    def _cache(self, state: Dict[str, Tensor], pos: int):
        K, V = state["k"], state["v"]
        if len(K) != pos or len(V) != pos:
            raise ValueError(f"{self.TYPE} state holds {len(K)} positions, the stream is at {pos}")
        return K, V

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form: x (N, d_model) at positions pos..pos+N−1 after the state's
        pos cached positions. A chunk of queries t0..t1 attends to the keys 0..t1, masked to
        p ≤ t; chunk ≥ N is the plain masked form. Returns (out (N, d_model), the state with
        x's keys and values appended)."""
        n = len(x)
        self._check(pos, n)
        q, k, v, finish = self._project(x)
        K0, V0 = self._cache(state, pos)
        K, V = torch.cat([K0, k]), torch.cat([V0, v])
        outs = []
        for c in range(0, n, chunk):
            end = min(c + chunk, n)
            outs.append(self._attend(q[c:end], K[:pos + end], V[:pos + end], torch.arange(pos + c, pos + end), True))
        return finish(torch.cat(outs)), {"k": K, "v": V}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form: per position t, append k_t, v_t to the cache, then attend over all of it
        (p ≤ t: no mask needed). Same arguments and result as `parallel`."""
        self._check(pos, len(x))
        q, k, v, finish = self._project(x)
        K, V = self._cache(state, pos)
        outs = []
        for i in range(len(x)):
            K, V = torch.cat([K, k[i:i + 1]]), torch.cat([V, v[i:i + 1]])
            outs.append(self._attend(q[i:i + 1], K, V, torch.tensor([pos + i]), False))
        return finish(torch.cat(outs)), {"k": K, "v": V}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x as a whole utterance (positions 0..N−1, N ≤ T; an
        encoder keeps no state, so `state` comes back unchanged): every query over every
        position, computed per block of CHUNK queries."""
        if pos != 0:
            raise ValueError(f"a non-causal {self.TYPE} mixer runs on a whole utterance from position 0")
        n = len(x)
        self._check(0, n)
        q, k, v, finish = self._project(x)
        outs = [self._attend(q[c:c + CHUNK], k, v, torch.arange(c, min(c + CHUNK, n)), False)
                for c in range(0, n, CHUNK)]
        return finish(torch.cat(outs)), state

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        kw, vw = self._kv_widths()
        return {"k": torch.zeros(batch, self.T, kw, dtype=dt, device=dev),
                "v": torch.zeros(batch, self.T, vw, dtype=dt, device=dev), "pos": torch.tensor(0)}

    @staticmethod
    def _append(state, k: Tensor, v: Tensor, pos: int):
        """Batched: copies of the state's k, v with x's rows k, v (B, N, ·) written at pos."""
        K, V = state["k"].clone(), state["v"].clone()
        K[:, pos:pos + k.shape[1]], V[:, pos:pos + v.shape[1]] = k, v
        return K, V


class _EncoderOnly:
    """Per stream, an encoder-only mixer keeps no state and has only the non-causal form;
    the subclass says why in NO_FORM_WHY."""
    NO_FORM_WHY = ""

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """No state (an encoder)."""
        return {}

    def _no_form(self, *args, **kwargs):
        raise ValueError(f"mixer {self.TYPE}: no recurrent form (encoder only: {self.NO_FORM_WHY}); "
                         "use the non-causal form over a whole utterance")

    parallel = _no_form
    recurrent = _no_form


# --------------------------------------------------------------------------------------
# 1. Softmax attention (§2)
# --------------------------------------------------------------------------------------

class SoftmaxAttention(Mixer):
    """softmax(Q Kᵀ / √dk) V per head (causal: mask j > i). Step form: the KV cache.

    Tensors: query (H·dk, d), key (H·dk, d), value (H·dv, d), out (d, H·dv) (.weight, .bias).
    Per-stream state: the KV cache {"K" (H, P, dk), "V" (H, P, dv)} of the P positions so
    far, unbounded here (the runtime bounds it by a max_context chosen at session creation).
    Batched state (causal), allocated once for max_context positions (given to initial_state,
    required; stepping past it raises ValueError):
      k (B, H, max_context, dk), v (B, H, max_context, dv), pos.
    With "rotary" (§12), q and k are turned by their position before the scores, so the cache
    holds turned keys; a stream's position is its cache length P.
    """
    TYPE = "softmax_attention"

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)

    def _qkv(self, x, pos: int = 0):
        """x ([B,] N, d_model) at positions pos.. → q, k ([B,] H, N, dk) (turned by the rotary,
        if any), v ([B,] H, N, dv)."""
        lead, H = x.shape[:-1], self.heads
        q = self.query(x).view(*lead, H, self.dk).transpose(-3, -2)
        k = self.key(x).view(*lead, H, self.dk).transpose(-3, -2)
        v = self.value(x).view(*lead, H, self.dv).transpose(-3, -2)
        return _rotate(self, q, pos), _rotate(self, k, pos), v

    def _output(self, o: Tensor) -> Tensor:
        """(H, N, dv) → out(concat heads) (N, d_model)."""
        return self.out(o.transpose(0, 1).reshape(o.shape[1], -1))

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """The state before the first position: an empty KV cache."""
        return {"K": torch.zeros(self.heads, 0, self.dk, dtype=dtype),
                "V": torch.zeros(self.heads, 0, self.dv, dtype=dtype)}

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

    def parallel(self, x: Tensor, state: Dict[str, Tensor], chunk: int):
        """Chunked parallel form: x (N, d_model) after the state's P positions.
        Chunk c (rows c..c+T−1) attends to the P + c + T keys up to its last
        position, causally masked; chunk ≥ N is the plain masked softmax(QKᵀ)V.
        Returns (out (N, d_model), state with x's keys and values appended)."""
        P = state["K"].shape[1]
        q, k, v = self._qkv(x, P)
        K, V = torch.cat([state["K"], k], 1), torch.cat([state["V"], v], 1)
        outs = []
        for c in range(0, len(x), chunk):
            end = P + min(c + chunk, len(x))
            outs.append(self._attend(q[:, c:c + chunk], K[:, :end], V[:, :end], P + c))
        return self._output(torch.cat(outs, 1)), {"K": K, "V": V}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor]):
        """RNN form: per position, append k_i, v_i to the cache, then attend over
        all of it (no mask needed). Same arguments and result as `parallel`."""
        q, k, v = self._qkv(x, state["K"].shape[1])
        K, V = state["K"], state["V"]
        outs = []
        for i in range(len(x)):
            K, V = torch.cat([K, k[:, i:i + 1]], 1), torch.cat([V, v[:, i:i + 1]], 1)
            outs.append(self._attend(q[:, i:i + 1], K, V, None))   # (H, 1, dv)
        return self._output(torch.cat(outs, 1)), {"K": K, "V": V}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor]):
        """Non-causal (encoder) form: every position attends to the state's keys
        (none for a whole utterance) and all of x's. Same result shape as `parallel`."""
        q, k, v = self._qkv(x, state["K"].shape[1])
        K, V = torch.cat([state["K"], k], 1), torch.cat([state["V"], v], 1)
        return self._output(self._attend(q, K, V, None)), {"K": K, "V": V}

    # Batched.

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
        q, k, v = self._qkv(x, pos)
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


def random_fourier(x: Tensor, omega: Tensor, n_dims: int, softmax_temp: float,
                   smoothing: Optional[float] = None) -> Tensor:
    """fast-transformers' `RandomFourierFeatures.forward` (and, with `smoothing`,
    `SmoothedRandomFourierFeatures.forward`), fast_transformers/feature_maps/fourier_features.py:

        x = x * sqrt(self.softmax_temp)
        u = x.unsqueeze(-2).matmul(self.omega).squeeze(-2)
        phi = torch.cat([torch.cos(u), torch.sin(u)], dim=-1)
        return phi * sqrt(2/self.n_dims)

    then [phi, smoothing] for the smoothed map. omega (dk, n_dims//2); n_dims is the
    RandomFourierFeatures' own (the smoothed map's constructor passes it its n_dims − 1).
    The features can be negative: φ(q)·φ(k) estimates exp(−t·‖q − k‖²/2) (+ smoothing²)."""
    u = (x * math.sqrt(softmax_temp)) @ omega
    phi = torch.cat([torch.cos(u), torch.sin(u)], dim=-1) * math.sqrt(2 / n_dims)
    if smoothing is None:
        return phi
    return torch.cat([phi, torch.full(phi.shape[:-1] + (1,), float(smoothing), dtype=phi.dtype)], dim=-1)


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
    start): num = Σ exp(K_p − max)·V_p, den = Σ exp(K_p − max) (per stream: (D,) each).
    `heads` only names the width; the math does not split channels into heads."""
    TYPE = "aft_simple"

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


# --------------------------------------------------------------------------------------
# 6. Linformer (§7), encoder only
# --------------------------------------------------------------------------------------

class Linformer(_EncoderOnly, Mixer):
    """Per head h: K'_h = E_h K_h, V'_h = F_h V_h (E, F ∈ R^{k×n}), A = softmax(Q K'ᵀ/√dk) V'.
    Config: heads, dk, dv, seq_len n, proj_dim k, sharing, causal (must be false).
    sharing → tensors (besides query, key, value, out as softmax_attention):
      'none'      E (H, k, n), F (H, k, n)
      'headwise'  E (k, n), F (k, n)          (shared by all heads)
      'kv'        E (k, n)                    (F = E, shared by heads)
      'layerwise' E (k, n)                    (F = E, shared by heads and by every layerwise
                  block of the model: RecurModel builds the first layerwise block's E and
                  hands that same Parameter to the others (`E`; training sees one tensor);
                  state_dict, and so the export, holds blocks.{i}.mixer.E for each such
                  block, identical copies)
    A sequence of N < n positions uses E[:, :N], F[:, :N] (= keys/values of absent positions
    are zero, i.e. padding to n); N > n raises ValueError. No recurrent form, no state.
    """
    TYPE = "linformer"
    USES_POS = True

    def __init__(self, cfg, d_model, E: Optional[nn.Parameter] = None):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.n, self.k = cfg["seq_len"], cfg["proj_dim"]
        self.sharing = cfg.get("sharing", "none")
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        shape = (self.heads, self.k, self.n) if self.sharing == "none" else (self.k, self.n)
        if E is not None:                  # a later layerwise block: the model's shared E
            if self.sharing != "layerwise" or tuple(E.shape) != shape:
                raise ValueError(f"a shared linformer E {tuple(E.shape)} needs sharing 'layerwise' and shape {shape}")
            self.E = E
        else:
            self.E = nn.Parameter(torch.randn(*shape) / math.sqrt(self.n))
        if self.sharing in ("none", "headwise"):
            self.F = nn.Parameter(torch.randn(*shape) / math.sqrt(self.n))

    _qkv = SoftmaxAttention._qkv
    _output = SoftmaxAttention._output

    NO_FORM_WHY = "the projections E, F mix all positions"

    # Per stream.

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

    # Batched.

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


# --------------------------------------------------------------------------------------
# 8. RetNet multi-scale retention (§11)
# --------------------------------------------------------------------------------------

def retnet_angles(dk: int, pos: int, n: int, dtype: torch.dtype):
    """cos, sin (n, dk/2) of the rotation at positions pos..pos+n−1: pair i of a head's
    dims turns by p·θ_i, θ_i = 10000^(−i/(dk/2 − 1)) (θ_0 = 1 when dk = 2): torchscale's
    RetNetRelPos angle, 1/10000^linspace(0, 1, dk/2) (rotation_angles)."""
    m = dk // 2
    theta = torch.tensor([10000.0 ** (-i / (m - 1)) if m > 1 else 1.0 for i in range(m)], dtype=torch.float64)
    return rotation_angles(theta, pos, n, dtype)


def retnet_rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (..., n, H, dk): pair (x_2i, x_2i+1) → (x_2i cos − x_2i+1 sin, x_2i+1 cos + x_2i sin)
    with the angles of x's row (cos, sin (n, dk/2)); torchscale's theta_shift (rotate_pairs)."""
    return rotate_pairs(x, cos[:, None, :], sin[:, None, :], "interleaved")


class RetNet(Mixer):
    """RetNet multi-scale retention (Sun et al. 2023, §11), causal only.

    Config: heads H, dk (even), dv, optionally decay (one γ_h in (0, 1) per head; default
    1 − 2^(−5−h), required beyond RETNET_DEFAULT_HEADS heads) and eps (> 0, default 1e-6,
    torchscale's layernorm_eps). No causal key: there is no encoder form. The decays are
    rounded to float32, as the model file stores them. Tensors: query, key (H·dk, d), value,
    gate (H·dv, d), out (d, H·dv) (.weight/.bias). Per head h at absolute position n:
      q = query(x)_h, k = key(x)_h / √dk, v = value(x)_h
      q̃, k̃ = q, k rotated by n·θ (retnet_angles, retnet_rotate: xPos without its scale)
      S_n = γ_h S_{n−1} + k̃_nᵀ v_n      (dk × dv, S_{−1} = 0)
      o_n = q̃_n S_n
      ô_n = o_n / √(mean(o_n²) + eps)   (per head over dv: RMS norm without weight)
      y_n = out(silu(gate(x_n)) ⊙ concat_h ô_n)
    torchscale's decay-mask row scaling and |q·k| row-sum scaling multiply o_n by a positive
    scalar per (position, head), which the norm removes up to eps; they are left out.
    State: S (H, dk, dv) per stream; batched S (B, H, dk, dv), pos.
    """
    TYPE = "retnet"
    USES_POS = True

    def __init__(self, cfg, d_model):
        super().__init__(cfg, d_model)
        self.heads, self.dk, self.dv = cfg["heads"], cfg["dk"], cfg["dv"]
        self.eps = cfg.get("eps", 1e-6)
        self.query = nn.Linear(d_model, self.heads * self.dk)
        self.key = nn.Linear(d_model, self.heads * self.dk)
        self.value = nn.Linear(d_model, self.heads * self.dv)
        self.gate = nn.Linear(d_model, self.heads * self.dv)
        self.out = nn.Linear(self.heads * self.dv, d_model)
        # From the config, not the weights file: not in state_dict; .double() promotes it exactly.
        self.register_buffer("decay", torch.tensor(retnet_decays(cfg), dtype=torch.float32), persistent=False)

    def _qkv(self, x: Tensor, pos: int):
        """x ([B,] N, d_model) at positions pos.. → q̃, k̃ ([B,] N, H, dk), v ([B,] N, H, dv)."""
        lead, H = x.shape[:-1], self.heads
        cos, sin = retnet_angles(self.dk, pos, x.shape[-2], x.dtype)
        q = self.query(x).view(*lead, H, self.dk)
        k = self.key(x).view(*lead, H, self.dk) / math.sqrt(self.dk)
        v = self.value(x).view(*lead, H, self.dv)
        return retnet_rotate(q, cos, sin), retnet_rotate(k, cos, sin), v

    def _output(self, x: Tensor, o: Tensor) -> Tensor:
        """o ([B,] N, H, dv) → out(silu(gate(x)) ⊙ the per-head RMS-normed o)."""
        o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.out(F.silu(self.gate(x)) * o.flatten(-2))

    def _chunks(self, q: Tensor, k: Tensor, v: Tensor, S: Tensor, chunk: int):
        """The chunked form over q, k ([B,] N, H, dk), v ([B,] N, H, dv) from S ([B,] H, dk, dv):
        per chunk of T rows, row i: o_i = γ^{i+1} q̃_i S + Σ_{j≤i} γ^{i−j} (q̃_i·k̃_j) v_j, then
        S ← γ^T S + Σ_j γ^{T−1−j} k̃_jᵀ v_j. Returns (o ([B,] N, H, dv), S after)."""
        g = self.decay.to(q.dtype)                                        # (H,)
        outs = []
        for c in range(0, q.shape[-3], chunk):
            qc, kc, vc = q[..., c:c + chunk, :, :], k[..., c:c + chunk, :, :], v[..., c:c + chunk, :, :]
            T = qc.shape[-3]
            i = torch.arange(T)
            e = i[:, None] - i[None, :]                                   # i − j
            D = torch.where(e >= 0, g[:, None, None] ** e.clamp(min=0), torch.zeros((), dtype=q.dtype))
            A = torch.einsum("...ihc,...jhc->...hij", qc, kc) * D          # ([B,] H, T, T)
            inner = torch.einsum("...hij,...jhm->...ihm", A, vc)
            cross = torch.einsum("...ihc,...hcm->...ihm", qc, S) * (g[None, :] ** (i[:, None] + 1))[..., None]
            outs.append(inner + cross)
            kd = kc * (g[None, :] ** (T - 1 - i)[:, None])[..., None]     # γ^{T−1−j} k̃_j
            S = (g ** T)[:, None, None] * S + torch.einsum("...jhc,...jhm->...hcm", kd, vc)
        return torch.cat(outs, -3), S

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S (H, dk, dv) zero."""
        return {"S": torch.zeros(self.heads, self.dk, self.dv, dtype=dtype)}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form (§11): x (N, d_model) at positions pos..pos+N−1 after `state`.
        chunk ≥ N is the plain decay-masked (Q̃K̃ᵀ ⊙ D)V form. Returns (out (N, d_model), state)."""
        q, k, v = self._qkv(x, pos)
        o, S = self._chunks(q, k, v, state["S"], chunk)
        return self._output(x, o), {"S": S}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form, position by position: S = γ S + k̃ᵀv, o = q̃ S. Same arguments and result
        as `parallel`."""
        q, k, v = self._qkv(x, pos)
        g = self.decay.to(x.dtype)[:, None, None]
        S = state["S"]
        outs = []
        for qi, ki, vi in zip(q, k, v):                                   # (H, dk), (H, dk), (H, dv)
            S = g * S + torch.einsum("hc,hm->hcm", ki, vi)
            outs.append(torch.einsum("hc,hcm->hm", qi, S))
        return self._output(x, torch.stack(outs)), {"S": S}

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        return self._prefill(x, self._initial_state(x.shape[0], None))[0]

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return {"S": torch.zeros(batch, self.heads, self.dk, self.dv, dtype=dt, device=dev), "pos": torch.tensor(0)}

    def _prefill(self, x, state, chunk: int = CHUNK):
        pos = int(state["pos"])
        q, k, v = self._qkv(x, pos)
        o, S = self._chunks(q, k, v, state["S"], chunk)
        return self._output(x, o), {"S": S, "pos": torch.tensor(pos + x.shape[1])}


# --------------------------------------------------------------------------------------
# 9. Block-local attention: Hugging Face Reformer's LocalSelfAttention (§14)
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# 10. RWKV-7's time mix (§16)
# --------------------------------------------------------------------------------------

RWKV7_MIXES = 6   # token_mix rows: r, w, k, v, a, g


class Rwkv7(Mixer):
    """RWKV-7's time mix (BlinkDL's RWKV_x070, §16), causal only.

    Config: heads H, head_size N, the low-rank widths decay_rank, rate_rank, value_rank,
    gate_rank, optionally group_norm_eps (default 64e-5) and decay_scale (default 0.606531,
    BlinkDL's e^{-0.5}), both rounded to float32 as the model file stores them. A = H·N.
    Tensors: token_mix (6, d), receptance, key, value (A, d), out (d, A) (weights only),
    decay_down (D_w, d), decay_up (A, D_w) with bias w0, rate_down/rate_up likewise (a0),
    value_down/value_up (v0; not in the model's first RWKV-7 block), gate_down (D_g, d),
    gate_up (A, D_g) (no biases), key_norm, key_rate, bonus (A,), group_norm.weight/.bias (A,).
    Per position, x₋₁ the previous position's input (zeros before position 0):
      x_c = x + (x₋₁ − x) ⊙ token_mix[c]            c = r, w, k, v, a, g
      r, k, v = receptance(x_r), key(x_k), value(x_v)
      w = exp(−decay_scale·σ(decay_up(tanh(decay_down(x_w)))))
      α = σ(rate_up(rate_down(x_a)));  g = gate_up(σ(gate_down(x_g)))
      κ̂ = normalize(k ⊙ key_norm) per head;  k ← k ⊙ (1 + (α − 1) ⊙ key_rate)
      v ← v + (v₀ − v) ⊙ σ(value_up(value_down(x_v)))   (v₀: the first block's v, `shared`)
      S_h ← S_h diag(w_h) + (S_h (−κ̂_h))(κ̂_h ⊙ α_h)ᵀ + v_h k_hᵀ;  y_h = S_h r_h
      y = GroupNorm_H(y) + (Σ_h r ⊙ k ⊙ bonus) v;  out(y ⊙ g)
    The recurrence runs position by position in every form (chunk is not used: the runtime
    prefills the same way). State: S (H, N, N) (S_h[i][j], i over values, j over keys) and
    x_prev (d_model,); batched S (B, H, N, N), x_prev (B, d_model). first: the model's first
    RWKV-7 block (no value residual: its v is v₀, written to `shared`)."""
    TYPE = "rwkv7"
    SHARES_ROWS = True   # the forms take `shared`, the pass's dict of the blocks' shared rows
    PLACED = True        # the constructor takes `first`

    def __init__(self, cfg, d_model, first: bool = True):
        super().__init__(cfg, d_model)
        H, N, d = cfg["heads"], cfg["head_size"], d_model
        self.heads, self.n, self.first = H, N, first
        A = H * N
        self.eps = _f32(cfg.get("group_norm_eps", 64e-5))
        self.decay_scale = _f32(cfg.get("decay_scale", 0.606531))
        u = lambda *shape, lo, hi: nn.Parameter(lo + (hi - lo) * torch.rand(*shape))  # noqa: E731
        # Magnitudes like a trained model's: mixes in (0, 1), decays spread over (e^{-0.61}, 1),
        # low-rank paths that move their sigmoids.
        self.token_mix = u(RWKV7_MIXES, d, lo=0.0, hi=1.0)
        self.receptance = nn.Linear(d, A, bias=False)
        self.key = nn.Linear(d, A, bias=False)
        self.value = nn.Linear(d, A, bias=False)
        self.out = nn.Linear(A, d, bias=False)
        self.decay_down = nn.Linear(d, cfg["decay_rank"], bias=False)
        self.decay_up = nn.Linear(cfg["decay_rank"], A)
        self.rate_down = nn.Linear(d, cfg["rate_rank"], bias=False)
        self.rate_up = nn.Linear(cfg["rate_rank"], A)
        if not first:
            self.value_down = nn.Linear(d, cfg["value_rank"], bias=False)
            self.value_up = nn.Linear(cfg["value_rank"], A)
        self.gate_down = nn.Linear(d, cfg["gate_rank"], bias=False)
        self.gate_up = nn.Linear(cfg["gate_rank"], A, bias=False)
        self.key_norm = u(A, lo=0.7, hi=1.0)
        self.key_rate = u(A, lo=0.8, hi=1.2)
        self.bonus = nn.Parameter(0.3 * torch.randn(A))
        self.group_norm = nn.GroupNorm(H, A, eps=self.eps)
        with torch.no_grad():
            self.decay_up.bias.uniform_(-6.0, 1.0)
            self.group_norm.weight.uniform_(0.5, 1.5)
            self.group_norm.bias.uniform_(-0.1, 0.1)

    def _run(self, x: Tensor, S: Tensor, x_prev: Tensor, shared: dict):
        """x (B, T, d) after S (B, H, N, N) and x_prev (B, d) → (out (B, T, d), S, x_prev)."""
        B, T, _ = x.shape
        H, N = self.heads, self.n
        before = torch.cat([x_prev[:, None], x[:, :-1]], 1)
        xr, xw, xk, xv, xa, xg = (x + (before - x) * self.token_mix[c] for c in range(RWKV7_MIXES))
        r, k, v = self.receptance(xr), self.key(xk), self.value(xv)
        w = torch.exp(-self.decay_scale * torch.sigmoid(self.decay_up(torch.tanh(self.decay_down(xw)))))
        a = torch.sigmoid(self.rate_up(self.rate_down(xa)))
        g = self.gate_up(torch.sigmoid(self.gate_down(xg)))
        kk = F.normalize((k * self.key_norm).view(B, T, H, N), dim=-1, p=2.0).view(B, T, -1)
        k = k * (1 + (a - 1) * self.key_rate)
        if self.first:
            shared["v_first"] = v
        else:
            if "v_first" not in shared:
                raise ValueError("mixer rwkv7: a block with a value residual needs an earlier "
                                 "RWKV-7 block's v (shared['v_first'])")
            v = v + (shared["v_first"] - v) * torch.sigmoid(self.value_up(self.value_down(xv)))
        view = lambda t: t.view(B, T, H, N)  # noqa: E731
        rr, ww, kk4, kr, ab, vv = view(r), view(w), view(kk), view(k), view(kk * a), view(v)
        ys = []
        for t in range(T):
            sa = torch.einsum("bhij,bhj->bhi", S, -kk4[:, t])
            S = (S * ww[:, t, :, None, :] + sa[..., None] * ab[:, t, :, None, :]
                 + vv[:, t, :, :, None] * kr[:, t, :, None, :])
            ys.append(torch.einsum("bhij,bhj->bhi", S, rr[:, t]))
        y = torch.stack(ys, 1).reshape(B * T, -1)                              # (B·T, A)
        y = F.group_norm(y, H, self.group_norm.weight, self.group_norm.bias, self.eps).view(B, T, -1)
        y = y + ((r * k * self.bonus).view(B, T, H, N).sum(-1, keepdim=True) * vv).view(B, T, -1)
        return self.out(y * g), S, x[:, -1]

    # Per stream.

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: S (H, N, N) and x_prev (d_model,) zero."""
        return {"S": torch.zeros(self.heads, self.n, self.n, dtype=dtype),
                "x_prev": torch.zeros(self.d_model, dtype=dtype)}

    def parallel(self, x: Tensor, state: Dict[str, Tensor], chunk: int, shared: Optional[dict] = None):
        """x (N, d_model) after `state` → (out (N, d_model), state). chunk: unused (the
        recurrence runs position by position, as the runtime's prefill does)."""
        shared = {} if shared is None else shared
        one = {key: v[None] for key, v in shared.items()}
        y, S, xp = self._run(x[None], state["S"][None], state["x_prev"][None], one)
        shared.update({key: v[0] for key, v in one.items()})
        return y[0], {"S": S[0], "x_prev": xp[0]}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], shared: Optional[dict] = None):
        """RNN form, one position at a time: the same arguments and result as `parallel`."""
        shared = {} if shared is None else shared
        outs, rows = [], {}
        for t in range(x.shape[0]):
            one = {key: v[t:t + 1] for key, v in shared.items()}
            y, state = self.parallel(x[t:t + 1], state, 1, one)
            outs.append(y)
            for key, v in one.items():
                rows.setdefault(key, []).append(v)
        shared.update({key: torch.cat(v) for key, v in rows.items()})
        return torch.cat(outs), state

    # Batched.

    def forward(self, x):
        self._check_x(x, 3)
        return self._prefill(x, self._initial_state(x.shape[0], None))[0]

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        return {"S": torch.zeros(batch, self.heads, self.n, self.n, dtype=dt, device=dev),
                "x_prev": torch.zeros(batch, self.d_model, dtype=dt, device=dev)}

    def _prefill(self, x, state, chunk: int = CHUNK, shared: Optional[dict] = None):
        y, S, xp = self._run(x, state["S"], state["x_prev"], {} if shared is None else shared)
        return y, {"S": S, "x_prev": xp}


MIXERS = {c.TYPE: c for c in (SoftmaxAttention, LinearAttention, SlidingWindowAttention, AFTSimple,
                              AFTLocal, AFTConv, AFTFull, GAU, FLASH, Linformer, Reformer, RetNet,
                              BlockLocalAttention, Rwkv7)}


def build_mixer(cfg: dict, d_model: int, **kwargs) -> Mixer:
    """The mixer module of config `cfg` (validated); kwargs go to its class (Linformer's E)."""
    validate_mixer(cfg, d_model)
    return MIXERS[cfg["type"]](cfg, d_model, **kwargs)
