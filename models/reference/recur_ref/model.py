"""The reference model: a causal linear-attention (or softmax-attention baseline,
sliding-window attention, AFT-simple, AFT-local, AFT-conv, AFT-full, GAU, FLASH; or the encoder-only Linformer or
Reformer) transformer, run either over a whole sequence at once (parallel form) or one
position at a time (RNN form). A mixed model gives each block its own mixer
(config "mixer" a list of n_layers mixer dicts; see mixer_configs).

Math: docs/attention-math.md §1 (the block); each block's mixer is its class in the
mixers package (mixers/<file>.py, built by mixers.build_mixer), run through that class's
per-stream forms. Config keys and tensor names: models/configs/README.md; the module attribute
names here and in mixers/ are chosen so that `state_dict()` yields exactly those tensor names.
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
CHUNK = mixers.CHUNK

_REQUIRED_KEYS = {"layout", "d_model", "n_layers", "norm_placement", "layer_norm_eps", "input",
                  "max_positions", "mixer", "ffn", "final_norm", "head"}
_OPTIONAL_KEYS = {"notes", "input_description", "output_description", "tokenizer", "token_shift", "norm",
                  "positions", "residual"}
# "norm": {"type": one of these} (default layer_norm); scale_norm adds "scale", SCALE_NORM_SCALES.
NORM_TYPES = ("layer_norm", "rms_norm", "scale_norm")
SCALE_NORM_SCALES = ("l2", "rms")
# "positions": {"type": "sinusoid", "base": > 0 (default 10000), "scale": one of these (default "none"),
# "freq": one of POSITION_FREQS (default "base")}.
POSITION_SCALES = ("none", "learned")
POSITION_FREQS = ("base", "stored")
# "residual": how blocks add to the stream (default "standard"; "reversible": two streams, RevNet-style,
# summed after the last block; "reversible_concat": the same two streams concatenated, [x1 | x2], for the
# final norm and head, which are then 2·d_model wide: Hugging Face's Reformer).
RESIDUALS = ("standard", "reversible", "reversible_concat")
# Mixer keys valid only with feature_map "favor" (mixers.validate_mixer checks them).
_FAVOR_KEYS = {"n_features", "favor_layout", "softmax_temp", "feature_eps", "eps_per_feature",
               "smoothing"}
# The mixer types a recur config may name ("mixer": one mixer dict for every block, or a
# list of n_layers mixer dicts, block i using entry i: a mixed model): every class of
# mixers.MIXERS (the classes of the mixer modules runtime/mixers/mixers.inc names), so that a
# new mixer is its line there and its module in mixers/.
MIXER_TYPES = tuple(mixers.MIXERS)


def mixer_configs(config: dict) -> List[dict]:
    """The mixer config of each of the n_layers blocks of a recur config: config["mixer"]
    repeated when it is one dict, or the list itself (block i uses entry i)."""
    mixer = config["mixer"]
    return list(mixer) if isinstance(mixer, list) else [mixer] * config["n_layers"]


def _is_causal(mixer: dict) -> bool:
    """The mixer's causal flag: default true, except linformer and reformer (encoder only: default false)."""
    return mixers.is_causal(mixer)


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _positive_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _validate_mixer(mixer, d_model) -> None:
    """ValueError (message without the "recur config: " prefix, as a single "mixer"
    dict's messages read) unless `mixer` is a well-formed mixer dict."""

    def need(ok, what):
        if not ok:
            raise ValueError(what)

    if isinstance(mixer, dict):
        mixers.mixer_class(mixer.get("type"))   # MixerNotInReference: listed in mixers.inc, not in the reference
    need(isinstance(mixer, dict) and mixer.get("type") in MIXER_TYPES,
         f"mixer.type must be one of {list(MIXER_TYPES)}")
    if mixer["type"] != "linear_attention":
        # softmax_attention, sliding_window, flash (and linear_attention): also optional rotary;
        # softmax_attention: type, heads, dk, dv, optional causal (no eps, no feature_map);
        # sliding_window: type, heads, dk, dv, window, optional dilation, global_tokens, causal;
        # aft_simple: type, heads, dk, optional causal; aft_local, aft_conv: type, heads, dk,
        # window, optional causal; aft_full: type, heads, dk, max_length, optional bias_rank,
        # bias_form, causal; gau: type, expansion_dim, qk_dim, max_length, optional scale, causal;
        # flash: type, expansion_dim, qk_dim,
        # chunk, optional scale, causal; linformer: type, heads, dk, dv, seq_len, proj_dim, optional
        # sharing, causal (false only); reformer: type, heads, dk, dv, n_buckets, chunk, rounds, optional
        # causal (false only). The mixer classes' rules, whose messages name the offending key.
        mixers.validate_mixer(mixer, d_model)
    else:
        need({"type", "heads", "dk", "dv", "feature_map", "eps"} <= set(mixer)
             <= {"type", "heads", "dk", "dv", "feature_map", "eps", "causal", "rotary"} | _FAVOR_KEYS,
             "mixer must have the keys type, heads, dk, dv, feature_map, eps and optionally causal, rotary "
             f"(and, with feature_map 'favor', {sorted(_FAVOR_KEYS)})")
        need(isinstance(mixer.get("causal", True), bool), "mixer.causal must be true or false")
        need(all(_positive_int(mixer[k]) for k in ("heads", "dk", "dv")), "mixer.heads/dk/dv must be positive integers")
        need(mixer["feature_map"] in mixers.FEATURE_MAPS,
             f"mixer.feature_map must be one of {list(mixers.FEATURE_MAPS)}")
        # eps (> 0, or 0 for the performer maps) and the feature-map rules (favor keys,
        # n_features, favor_layout, softmax_temp, feature_eps, eps_per_feature): mixers/linear_attention.py
        mixers.validate_mixer(mixer, d_model)


def validate(config: dict) -> None:
    """Raise ValueError unless `config` is a well-formed recur-layout config."""

    def need(ok, what):
        if not ok:
            raise ValueError(f"recur config: {what}")

    def exact_keys(d, keys, where):
        need(isinstance(d, dict) and set(d) == keys, f"{where} must have exactly the keys {sorted(keys)}")

    keys = set(config)
    need(keys >= _REQUIRED_KEYS, f"missing keys {sorted(_REQUIRED_KEYS - keys)}")
    need(keys <= _REQUIRED_KEYS | _OPTIONAL_KEYS, f"unknown keys {sorted(keys - _REQUIRED_KEYS - _OPTIONAL_KEYS)}")
    need(config["layout"] == "recur", "layout must be 'recur'")
    # "tokenizer": the token model's vocabulary file (the rwkv package's format), a path relative
    # to config.json; metadata for the converter and the tools, no part of the model's math.
    need(isinstance(config.get("tokenizer", ""), str), "tokenizer must be a string (a vocabulary file)")
    need(_positive_int(config["d_model"]), "d_model must be a positive integer")
    need(_positive_int(config["n_layers"]), "n_layers must be a positive integer")
    need(config["norm_placement"] in ("pre", "post"), "norm_placement must be 'pre' or 'post'")
    need(_positive_number(config["layer_norm_eps"]), "layer_norm_eps must be > 0")
    if "norm" in config:
        norm = config["norm"]
        need(isinstance(norm, dict) and norm.get("type") in NORM_TYPES, f"norm.type must be one of {list(NORM_TYPES)}")
        if norm["type"] == "scale_norm":
            exact_keys(norm, {"type", "scale"}, "norm (scale_norm)")
            need(norm["scale"] in SCALE_NORM_SCALES, f"norm.scale must be one of {list(SCALE_NORM_SCALES)}")
        else:
            exact_keys(norm, {"type"}, f"norm ({norm['type']})")
    if "positions" in config:
        positions = config["positions"]
        need(isinstance(positions, dict) and positions.get("type") == "sinusoid", "positions.type must be 'sinusoid'")
        need(set(positions) <= {"type", "base", "scale", "freq"},
             f"positions has unknown keys {sorted(set(positions) - {'type', 'base', 'scale', 'freq'})}")
        need(positions.get("freq", "base") in POSITION_FREQS, f"positions.freq must be one of {list(POSITION_FREQS)}")
        need(_positive_number(positions.get("base", 10000)) and math.isfinite(positions.get("base", 10000)),
             "positions.base must be a positive number")
        need(positions.get("scale", "none") in POSITION_SCALES, f"positions.scale must be one of {list(POSITION_SCALES)}")
        need(config["d_model"] % 2 == 0, f"positions (sinusoid) needs an even d_model, got {config['d_model']}")
    mp = config["max_positions"]
    need(isinstance(mp, int) and not isinstance(mp, bool) and mp >= 0, "max_positions must be an integer >= 0")
    need(isinstance(config["final_norm"], bool), "final_norm must be true or false")

    inp = config["input"]
    need(isinstance(inp, dict) and inp.get("kind") in ("tokens", "features"), "input.kind must be 'tokens' or 'features'")
    need(isinstance(inp.get("norm", False), bool), "input.norm must be true or false")
    if inp["kind"] == "tokens":
        exact_keys({k: v for k, v in inp.items() if k != "norm"}, {"kind", "vocab_size"}, "input (tokens)")
        need(_positive_int(inp["vocab_size"]), "input.vocab_size must be a positive integer")
    else:
        exact_keys({k: v for k, v in inp.items() if k != "norm"}, {"kind", "feature_width", "projection"},
                   "input (features)")
        need(_positive_int(inp["feature_width"]), "input.feature_width must be a positive integer")
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

    if "token_shift" in config:
        _validate_token_shift(config, need)

    ffn = config["ffn"]
    if ffn is not None:   # null: blocks without a feed-forward (and without norm2)
        need(isinstance(ffn, dict) and {"d_ff", "activation"} <= set(ffn) <= {"d_ff", "activation", "glu", "token_mix"},
             "ffn must have the keys ['activation', 'd_ff'] and optionally 'glu', 'token_mix'")
        need(isinstance(ffn.get("glu", False), bool), "ffn.glu must be true or false")
        need(isinstance(ffn.get("token_mix", False), bool), "ffn.token_mix must be true or false")
        need(not ffn.get("token_mix", False) or config["norm_placement"] == "pre",
             "ffn.token_mix needs norm_placement 'pre' (it mixes norm2's outputs of consecutive positions)")
        need(_positive_int(ffn["d_ff"]), "ffn.d_ff must be a positive integer")
        need(ffn["activation"] in ACTIVATIONS, f"ffn.activation must be one of {sorted(ACTIVATIONS)}")

    residual = config.get("residual", "standard")
    need(residual in RESIDUALS, f"residual must be one of {list(RESIDUALS)}")
    if residual in ("reversible", "reversible_concat"):
        need(config["norm_placement"] == "pre",
             f"residual '{residual}' needs norm_placement 'pre': its blocks add Mixer(norm1(x2)) to x1 and "
             "FFN(norm2(y1)) to x2, a pre-norm pairing with no post-norm form")
        need(config["ffn"] is not None,
             f"residual '{residual}' needs a feed-forward (\"ffn\" is null): y2 = x2 + FFN(norm2(y1))")

    head = config["head"]
    if head is not None:
        exact_keys(head, {"out", "activation"}, "head")
        need(_positive_int(head["out"]), "head.out must be a positive integer")
        need(head["activation"] in ("none", "softmax", "log_softmax"),
             "head.activation must be 'none', 'softmax' or 'log_softmax'")


def _validate_token_shift(config: dict, need) -> None:
    """config["token_shift"] (docs/attention-math.md §13): {"segments": [[width, shift], ...],
    optional "ffn"}, widths ≥ 1 summing to at most d_model, shifts −1 (encoders only), 0 or 1;
    pre-norm blocks only."""
    ts, d = config["token_shift"], config["d_model"]
    need(isinstance(ts, dict) and "segments" in ts and set(ts) <= {"segments", "ffn"},
         "token_shift must be a dict with the key segments and optionally ffn")
    need(config["norm_placement"] == "pre",
         "token_shift needs norm_placement 'pre' (it shifts the normalised inputs of the mixer and the FFN)")
    segments = ts["segments"]
    need(isinstance(segments, list) and segments, "token_shift.segments must be a non-empty list of [width, shift] pairs")
    for i, seg in enumerate(segments):
        need(isinstance(seg, list) and len(seg) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in seg),
             f"token_shift.segments[{i}] must be a pair [width, shift] of integers, got {seg!r}")
        need(1 <= seg[0] <= d, f"token_shift.segments[{i}] has width {seg[0]}: must be in [1, d_model]")
        need(seg[1] in (-1, 0, 1), f"token_shift.segments[{i}] shifts by {seg[1]}: must be -1, 0 or 1")
    covered = sum(w for w, _ in segments)
    need(covered <= d, f"token_shift.segments cover {covered} features, more than d_model ({d})")
    need(isinstance(ts.get("ffn", False), bool), "token_shift.ffn must be true or false")
    for i, (_, by) in enumerate(segments):
        need(by != -1 or not _is_causal(mixer_configs(config)[0]),
             f"token_shift.segments[{i}] takes the next position (shift -1), which a causal model has not "
             "seen: only encoders (causal false) shift by -1")


class TokenShift:
    """Token shift (docs/attention-math.md §13) of a pre-norm block's normalised inputs, config
    "token_shift" {"segments": [[width, shift], ...], "ffn"}: the segments cover the first
    features in order, each passed (shift 0), taken from the previous position (1: zeros before
    stream position 0) or from the next (−1: zeros after the last; encoders only); features
    past them pass. norm1's output (the mixer's input) shifts, and with ffn norm2's too.
    FLASH-pytorch's shift_tokens: [[⌈d/2⌉, 1]]; performer-pytorch's causal shifts (0, 1):
    [[⌊d/2⌋, 0], [⌊d/2⌋, 1]] with ffn, non-causal (−1, 0, 1) in thirds."""

    def __init__(self, cfg: dict):
        self.segments = [(w, by) for w, by in cfg["segments"]]
        self.ffn = cfg.get("ffn", False)
        self.carried = sum(w for w, by in self.segments if by == 1)   # state per shifted input

    def __call__(self, h: Tensor, prev: Optional[Tensor]):
        """h (N, d_model) at consecutive stream positions → (h shifted, the carry after h: the
        shift-1 features of h's last row, (carried,)). prev: the carry before h's first row
        (zeros before position 0); None for an encoder's whole utterance (zeros before it)."""
        out, carry, o, c = h.clone(), [], 0, 0
        for w, by in self.segments:
            seg = h[:, o:o + w]
            if by == 1:
                before = h.new_zeros(1, w) if prev is None else prev[None, c:c + w]
                out[:, o:o + w] = torch.cat([before, seg[:-1]])
                carry.append(seg[-1])
                c += w
            elif by == -1:
                out[:, o:o + w] = torch.cat([seg[1:], h.new_zeros(1, w)])
            o += w
        return out, (torch.cat(carry) if carry else h.new_zeros(0))


# A causal block's token-shift state records, after its mixer's (§13), then the FFN's token
# mix's carry.
SHIFT_STATE = ("shift.mixer", "shift.ffn")
FFN_MIX_STATE = "shift.ffn_mix"


def _is_layerwise(mixer: dict) -> bool:
    """A linformer mixer whose E is shared by every layerwise block of the model."""
    return mixer.get("type") == "linformer" and mixer.get("sharing", "none") == "layerwise"


class State(NamedTuple):
    """The recurrent state after `pos` positions: one dict of tensors per layer, as the
    layer's mixer class makes it (mixers/, `empty_state` and the per-stream forms).

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
    With token_shift (§13), a causal layer's dict also holds, after its mixer's entries,
      "shift.mixer" (carried,): the shift-1 features of the previous position's norm1 output
      "shift.ffn" (carried,): the same of norm2's output (token_shift.ffn only)
    (carried = the widths of the shift-1 segments; zeros before position 0).
    Every mixer class documents its own layout (its docstring and `empty_state` in its
    module of mixers/); the list above repeats those of the mixers named. In a mixed model each
    layer's dict is its own mixer's.
    Golden records "state.{i}.{name}" follow each dict's order (S, z / K, V / sorted names
    for sliding_window, aft_simple, aft_local, aft_conv, aft_full, gau and flash; then the
    token shift's).
    """
    pos: int                        # positions consumed so far = index of the next position
    layers: List[Dict[str, Tensor]]

    @property
    def S(self) -> List[Tensor]:    # linear_attention layers only
        return [layer["S"] for layer in self.layers]

    @property
    def z(self) -> List[Tensor]:
        return [layer["z"] for layer in self.layers]


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) ⊙ weight (the T5/LLaMA form), weight [d], no bias."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


class ScaleNorm(nn.Module):
    """y = g·x / max(c·‖x‖₂, eps), g = weight [1]: c = 1 ("l2", performer-pytorch's
    PreScaleNorm) or c = d^(−1/2) ("rms", FLASH-pytorch's ScaleNorm)."""

    def __init__(self, d: int, eps: float, scale: str):
        super().__init__()
        self.eps = eps
        self.c = 1.0 if scale == "l2" else d ** -0.5
        self.weight = nn.Parameter(torch.ones(1))

    def forward(self, x: Tensor) -> Tensor:
        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True) * self.c
        return x / n.clamp(min=self.eps) * self.weight


def make_norm(config: dict, width: Optional[int] = None) -> nn.Module:
    """A norm of the config's "norm" kind (default layer_norm) over `width` (default d_model), eps
    layer_norm_eps."""
    d, eps = width or config["d_model"], config["layer_norm_eps"]
    norm = config.get("norm", {"type": "layer_norm"})
    if norm["type"] == "rms_norm":
        return RMSNorm(d, eps)
    if norm["type"] == "scale_norm":
        return ScaleNorm(d, eps, norm["scale"])
    return nn.LayerNorm(d, eps=eps)


# The FFN's activations: relu, the exact (erf) gelu, relu² (RWKV's channel mix) and silu
# (x·σ(x): with glu, the SwiGLU of fla's GatedMLP).
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "relu_squared": lambda x: F.relu(x) ** 2, "silu": F.silu}


class FeedForward(nn.Module):
    """FFN(x) = linear2(act(linear1(x))); gelu is the exact erf form. glu: linear1 has 2·d_ff
    outputs [a | b] and FFN(x) = linear2(act(a) ⊙ b) (performer-pytorch's and linformer's
    `x, v = w1(x).chunk(2, -1); act(x) * v`). token_mix: the input is first x + (x₋₁ − x) ⊙ μ
    per position, x₋₁ the previous position's (carried in the layer's state as "shift.ffn_mix",
    zeros before stream position 0; RWKV's channel mix), μ = token_mix (d_model,)."""

    def __init__(self, d_model: int, d_ff: int, activation: str, glu: bool = False,
                 token_mix: bool = False):
        super().__init__()
        self.glu = glu
        self.linear1 = nn.Linear(d_model, 2 * d_ff if glu else d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]
        self.token_mix = nn.Parameter(torch.rand(d_model)) if token_mix else None

    def mix(self, x: Tensor, prev: Tensor):
        """x (N, d_model) after prev (d_model,) → (the mixed rows, x's last row: the next carry)."""
        before = torch.cat([prev[None], x[:-1]])
        return x + (before - x) * self.token_mix, x[-1]

    def forward(self, x: Tensor) -> Tensor:
        h = self.linear1(x)
        if self.glu:
            a, b = h.chunk(2, -1)
            return self.linear2(self.activation(a) * b)
        return self.linear2(self.activation(h))


class Block(nn.Module):
    """One transformer layer (docs/attention-math.md §1), pre- or post-norm, whose mixer is
    built from `mixer` (one mixer dict: its entry of mixer_configs(config)). shared_E: a
    linformer layerwise block's E, the model's one shared parameter (None: its own)."""

    def __init__(self, config: dict, mixer: dict, shared_E: Optional[nn.Parameter] = None,
                 first: bool = True):
        super().__init__()
        d, m = config["d_model"], mixer
        self.pre_norm = config["norm_placement"] == "pre"
        self.norm1 = make_norm(config)
        kwargs = {} if shared_E is None else {"E": shared_E}
        if getattr(mixers.MIXERS.get(m.get("type")), "PLACED", False):
            kwargs["first"] = first   # the model's first block of its type (RWKV-7: no value residual)
        self.mixer = mixers.build_mixer(m, d, **kwargs)
        ffn = config["ffn"]   # None: no feed-forward, no norm2
        self.norm2 = make_norm(config) if ffn is not None else None
        self.ffn = FeedForward(d, ffn["d_ff"], ffn["activation"], ffn.get("glu", False),
                               ffn.get("token_mix", False)) if ffn is not None else None
        self.token_shift = TokenShift(config["token_shift"]) if "token_shift" in config else None

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """The layer's state before position 0: its mixer's, then (causal, with token_shift)
        zero carries of the shifted inputs."""
        state = dict(self.mixer.empty_state(dtype))
        ts = self.token_shift
        if ts is not None and self.mixer.causal:
            for key in SHIFT_STATE[:2 if ts.ffn and self.ffn is not None else 1]:
                state[key] = torch.zeros(ts.carried, dtype=dtype)
        if self.ffn is not None and self.ffn.token_mix is not None:
            state[FFN_MIX_STATE] = torch.zeros(self.ffn.token_mix.shape[0], dtype=dtype)
        return state

    def _shift(self, h: Tensor, carries: Dict[str, Tensor], key: str) -> Tensor:
        """h through the token shift, with the carry `key` of `carries` (none: an encoder)."""
        h, carry = self.token_shift(h, carries.get(key))
        if key in carries:
            carries[key] = carry
        return h

    def _mix(self, h: Tensor, state: Dict[str, Tensor], chunk: Optional[int], pos: int,
             shared: Optional[dict] = None):
        """The mixer's form for `chunk` (None: the RNN form) on h, whose first row is
        stream position pos → (out, new layer state). shared: the rows the blocks' mixers share
        in this pass (SHARES_ROWS: RWKV-7's first-layer value)."""
        m = self.mixer
        if getattr(m, "SHARES_ROWS", False):
            form = m.recurrent if chunk is None else partial(m.parallel, chunk=chunk)
            return form(h, state, shared=shared if shared is not None else {})
        if not m.causal:
            form = m.noncausal
        elif chunk is None:
            form = m.recurrent
        else:
            form = partial(m.parallel, chunk=chunk)
        if m.USES_POS:       # absolute positions (windows, biases, groups, E columns, sort ties)
            return form(h, state, pos=pos)
        if isinstance(m, mixers.LinearAttention):   # pos: for its rotary, if any
            a, S, z = form(h, state["S"], state["z"], pos=pos)
            return a, {"S": S, "z": z}
        return form(h, state)

    def reversible(self, x1: Tensor, x2: Tensor, state: Dict[str, Tensor], chunk: Optional[int], pos: int = 0,
                   shared: Optional[dict] = None):
        """A reversible block on the two streams (residual "reversible", pre-norm):
        y1 = x1 + Mixer(shift(norm1(x2))); y2 = x2 + FFN(shift(norm2(y1))), shift the token
        shift where the block has one → (y1, y2, the layer's state)."""
        state = dict(state)
        carries = {key: state.pop(key) for key in (*SHIFT_STATE, FFN_MIX_STATE) if key in state}
        h = self.norm1(x2)
        if self.token_shift is not None:
            h = self._shift(h, carries, "shift.mixer")
        a, state = self._mix(h, state, chunk, pos, shared)
        y1 = x1 + a
        h = self.norm2(y1)
        if self.token_shift is not None and self.token_shift.ffn:
            h = self._shift(h, carries, "shift.ffn")
        if self.ffn.token_mix is not None:
            h, carries[FFN_MIX_STATE] = self.ffn.mix(h, carries[FFN_MIX_STATE])
        return y1, x2 + self.ffn(h), {**state, **carries}

    def forward(self, x: Tensor, state: Dict[str, Tensor], chunk: Optional[int], pos: int = 0,
                shared: Optional[dict] = None):
        """x (N, d_model) at stream positions pos.. → (N, d_model), the layer's state after x.
        chunk None: the RNN form. shared: what the pass's mixers share (see _mix)."""
        state = dict(state)
        carries = {key: state.pop(key) for key in (*SHIFT_STATE, FFN_MIX_STATE) if key in state}
        if self.pre_norm:    # x = x + Mixer(shift(norm1(x))); x = x + FFN(shift(norm2(x)))
            h = self.norm1(x)
            if self.token_shift is not None:
                h = self._shift(h, carries, "shift.mixer")
            a, state = self._mix(h, state, chunk, pos, shared)
            x = x + a
            if self.ffn is not None:
                h = self.norm2(x)
                if self.token_shift is not None and self.token_shift.ffn:
                    h = self._shift(h, carries, "shift.ffn")
                if self.ffn.token_mix is not None:
                    h, carries[FFN_MIX_STATE] = self.ffn.mix(h, carries[FFN_MIX_STATE])
                x = x + self.ffn(h)
        else:                # x = norm1(x + Mixer(x)); x = norm2(x + FFN(x))
            a, state = self._mix(x, state, chunk, pos)
            x = self.norm1(x + a)
            if self.ffn is not None:
                x = self.norm2(x + self.ffn(x))
        return x, {**state, **carries}


def sinusoid(pos: int, n: int, d: int, base: float, freq: Optional[Tensor] = None) -> Tensor:
    """(n, d) float64 fixed sinusoidal positions of stream positions pos..pos+n−1:
    pe[t, i] = sin(t·f_i), pe[t, d/2 + i] = cos(t·f_i), f_i = base^(−2i/d) or freq[i], i < d/2 (the
    [sin | cos] halves of performer-pytorch's FixedPositionalEmbedding and FLASH-pytorch's
    ScaledSinuEmbedding, whose inv_freq buffer is `freq`). In float64 whatever the model's dtype:
    at t ≥ 10³ a float32 angle t·f_0 is already off by ~10⁻⁴ rad."""
    t = torch.arange(pos, pos + n, dtype=torch.float64)
    if freq is None:
        f = base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    else:
        f = freq.detach().to(t.device, torch.float64)
    a = t[:, None] * f[None, :]
    return torch.cat([torch.sin(a), torch.cos(a)], -1)


class InputAdapter(nn.Module):
    """Tokens → embedding rows, or frames → projection (or as is); + learned positions;
    + fixed sinusoidal positions (times position_scale when learned); then, with
    "norm": true, a LayerNorm (eps layer_norm_eps)."""

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
        self.norm = nn.LayerNorm(d, eps=config["layer_norm_eps"]) if inp.get("norm", False) else None
        positions = config.get("positions")
        self.sinusoid_base = positions.get("base", 10000) if positions else None
        self.position_scale = None
        if positions and positions.get("scale", "none") == "learned":
            self.position_scale = nn.Parameter(torch.ones(1))
        # "freq": "stored": the frequencies are the tensor input.position_freq (initially the
        # base's), not trained.
        self.position_freq = None
        if positions and positions.get("freq", "base") == "stored":
            f = self.sinusoid_base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
            self.position_freq = nn.Parameter(f.float(), requires_grad=False)

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
        if self.sinusoid_base is not None:
            pe = sinusoid(pos, len(x), h.shape[-1], self.sinusoid_base, self.position_freq).to(h.dtype)
            h = h + (pe if self.position_scale is None else pe * self.position_scale)
        return h if self.norm is None else self.norm(h)


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
        for i, m in enumerate(self.mixers):
            first = all(e.get("type") != m.get("type") for e in self.mixers[:i])
            block = Block(config, m, shared_E if _is_layerwise(m) else None, first)
            if _is_layerwise(m) and shared_E is None:
                shared_E = block.mixer.E
            self.blocks.append(block)
        residual = config.get("residual", "standard")
        self.reversible = residual in ("reversible", "reversible_concat")
        self.concat_streams = residual == "reversible_concat"
        d = config["d_model"] * (2 if self.concat_streams else 1)   # what reaches the final norm and head
        self.final_norm = make_norm(config, d) if config["final_norm"] else None
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
        mixes these); with token_shift, zero carries after a causal layer's mixer state (§13)."""
        with self._on_device():
            return State(pos=0, layers=[block.empty_state(self.dtype) for block in self.blocks])

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
        x2 = h   # reversible: x1 = x2 = the input; the stream after block i (and the output) is x1 + x2
        shared = {}   # what the blocks' mixers share in this pass (RWKV-7's first-layer value)
        for block, layer_state in zip(self.blocks, state.layers):
            if self.reversible:
                h, x2, layer_state = block.reversible(h, x2, layer_state, chunk, state.pos, shared)
                layers.append(h + x2)
            else:
                h, layer_state = block(h, layer_state, chunk, state.pos, shared)
                layers.append(h)
            states.append(layer_state)
        h = torch.cat([h, x2], dim=-1) if self.concat_streams else layers[-1]
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
        final norm and head; reversible: x1 + x2) and the State after the last position. `state`
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
