"""The fast-transformers layout (models/configs/README.md): a builder config and
the tensor names of a `TransformerEncoder` / `RecurrentEncoder` state dict."""

import re
from typing import Dict

from torch import Tensor

from .model import _positive_int

# The builder's keyword arguments (fast_transformers/builders/transformer_builders.py).
# The dimensions are required: n_heads and query_dimensions cannot be told apart
# from the weight shapes, so the builder's defaults for them are not assumed
# (as in converter/config.cc). The rest default as in the builder.
REQUIRED_KEYS = ("n_layers", "n_heads", "query_dimensions", "value_dimensions", "feed_forward_dimensions")
DEFAULTS = {"activation": "relu", "final_normalization": True, "attention_type": "full"}
# The attention types this transcription covers; recur-convert maps more ("full",
# "local", more feature maps: docs/layouts.md), tested against the library itself.
ATTENTION_TYPES = ("linear", "causal-linear", "aft-full")
# Passed through to the recur config (model metadata).
_METADATA_KEYS = ("notes", "input_description", "output_description")
# No effect on inference.
_IGNORED_KEYS = {"layout", "dropout", "attention_dropout"}
# Optional: the attention's feature map (absent: elu+1). Only the library's
# `Favor` (fast_transformers/feature_maps/fourier_features.py) is supported:
# {"type": "favor", "n_dims": m, "softmax_temp": t (optional; null = 1/√query_dimensions),
#  "stabilize": false (optional; true subtracts a sequence-wide max: no causal/RNN form)}.
FEATURE_MAP_KEY = "feature_map"
_FAVOR_REQUIRED = {"type", "n_dims"}

# attention_type "aft-full": the library's AFTFullAttention, registered in
# idiap/fast-transformers fast_transformers/attention/aft_attention.py as
#     AttentionRegistry.register(
#         "aft-full", AFTFullAttention,
#         [
#             ("max_sequence_length", Optional(Int, 1024)),
#             ("aft_parameterization", Optional(Int, 64)),
#             ("event_dispatcher", Optional(EventDispatcherInstance, ""))
#         ]
#     )
# with  self.u = torch.nn.Parameter(torch.randn(max_sequence_length, aft_parameterization) * 0.01)
# (self.v likewise), forward:  w = (self.u[:L].mm(self.v[:S].t())) + attn_mask.additive_matrix;
# K = K[:, None, :, :, :] * w[None, :, None, None, :];  K = torch.softmax(K, dim=-1),
# and  "if E != D: raise ValueError("AFT requires that queries, keys and values have the same
# dimensionality")". Only the (non-recurrent) AttentionRegistry holds "aft-full" (no
# RecurrentAttentionRegistry entry, no "causal-aft-full"), and its causal use multiplies K by
# the mask's −∞ (NaN/±∞), so the mapping is the encoder (all-ones mask): causal false, where
# recur's bias_form "multiply", bias_rank = aft_parameterization equals the library exactly.
# The two keys are valid only with attention_type "aft-full" and default as in the registry.
AFT_FULL = "aft-full"
AFT_FULL_DEFAULTS = {"max_sequence_length": 1024, "aft_parameterization": 64}
_FAVOR_OPTIONAL = {"softmax_temp", "stabilize"}


def _favor_mixer_keys(fm) -> dict:
    """The recur mixer keys of a fast-transformers "feature_map" entry."""

    def need(ok, what):
        if not ok:
            raise ValueError(f"fast-transformers config: feature_map{what}")

    need(isinstance(fm, dict), " must be an object {\"type\": \"favor\", \"n_dims\": m, ...}")
    need(fm.get("type") == "favor", f".type must be 'favor' (the only supported feature map), got {fm.get('type')!r}")
    keys = set(fm)
    need(keys >= _FAVOR_REQUIRED, f": missing keys {sorted(_FAVOR_REQUIRED - keys)}")
    need(keys <= _FAVOR_REQUIRED | _FAVOR_OPTIONAL,
         f": unsupported keys {sorted(keys - _FAVOR_REQUIRED - _FAVOR_OPTIONAL)}")
    m = fm["n_dims"]
    need(isinstance(m, int) and not isinstance(m, bool) and m >= 2, f".n_dims must be an integer >= 2, got {m!r}")
    need(isinstance(fm.get("stabilize", False), bool), ".stabilize must be true or false")
    need(not fm.get("stabilize", False),
         ".stabilize must be false: the stabilised Favor subtracts a maximum over the whole sequence, "
         "which has no causal/recurrent form")
    out = {"feature_map": "favor", "n_features": m, "favor_layout": "fast_transformers"}
    t = fm.get("softmax_temp")
    if t is not None:
        need(isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0, f".softmax_temp must be > 0, got {t!r}")
        out["softmax_temp"] = t
    return out


def _aft_full_mixer(c: dict) -> dict:
    """The recur mixer of attention_type "aft-full" (c: the config with defaults filled in)."""

    def need(ok, what):
        if not ok:
            raise ValueError(f"fast-transformers config (attention_type 'aft-full'): {what}")

    need(c["value_dimensions"] == c["query_dimensions"],
         f"value_dimensions {c['value_dimensions']!r} must equal query_dimensions {c['query_dimensions']!r} "
         "(AFT requires that queries, keys and values have the same dimensionality)")
    need(FEATURE_MAP_KEY not in c, "feature_map is only valid with linear attention")
    for k in AFT_FULL_DEFAULTS:
        need(_positive_int(c[k]), f"{k} must be a positive integer, got {c[k]!r}")
    return {"type": "aft_full", "heads": c["n_heads"], "dk": c["query_dimensions"],
            "max_length": c["max_sequence_length"], "bias_rank": c["aft_parameterization"],
            "bias_form": "multiply", "causal": False}


def recur_config(ft_config: dict) -> dict:
    """The recur-layout config of the model a fast-transformers builder config
    describes: the one place this mapping is made (models/configs/README.md,
    "fast-transformers layout")."""
    missing = [k for k in REQUIRED_KEYS if k not in ft_config]
    unknown = (set(ft_config) - set(REQUIRED_KEYS) - set(DEFAULTS) - set(_METADATA_KEYS) - _IGNORED_KEYS
               - {FEATURE_MAP_KEY} - set(AFT_FULL_DEFAULTS))
    if missing or unknown:
        raise ValueError(f"fast-transformers config: missing keys {missing}, unsupported keys {sorted(unknown)}")
    c = {**DEFAULTS, **ft_config}
    if c["attention_type"] not in ATTENTION_TYPES:
        raise ValueError(f"fast-transformers config: attention_type {c['attention_type']!r} (the builder's "
                         "default is 'full'): the reference transcribes only 'linear', 'causal-linear' and "
                         "'aft-full'")
    aft_keys = sorted(set(AFT_FULL_DEFAULTS) & set(ft_config))
    if c["attention_type"] != AFT_FULL and aft_keys:
        raise ValueError(f"fast-transformers config: keys {aft_keys} are only valid with attention_type 'aft-full'")
    d_model = c["n_heads"] * c["value_dimensions"]
    config = {
        "layout": "recur",
        "d_model": d_model,
        "n_layers": c["n_layers"],
        "norm_placement": "post",
        "layer_norm_eps": 1e-5,
        "input": {"kind": "features", "feature_width": d_model, "projection": False},
        "max_positions": 0,
        "mixer": {"type": "linear_attention", "heads": c["n_heads"], "dk": c["query_dimensions"],
                  "dv": c["value_dimensions"], "feature_map": "elu_plus_one", "eps": 1e-6,
                  "causal": c["attention_type"] == "causal-linear"},
        "ffn": {"d_ff": c["feed_forward_dimensions"], "activation": c["activation"]},
        "final_norm": c["final_normalization"],
        "head": None,
    }
    if c["attention_type"] == AFT_FULL:
        config["mixer"] = _aft_full_mixer({**AFT_FULL_DEFAULTS, **c})
    if FEATURE_MAP_KEY in ft_config:
        config["mixer"].update(_favor_mixer_keys(ft_config[FEATURE_MAP_KEY]))
    config.update({k: ft_config[k] for k in _METADATA_KEYS if k in ft_config})
    return config


# (recur name pattern, fast-transformers name); the two lists are inverses.
_TO_FT = [
    (r"blocks\.(\d+)\.mixer\.(query|key|value|out)\.(weight|bias)", r"layers.\1.attention.\2_projection.\3"),
    (r"blocks\.(\d+)\.mixer\.feature_map\.omega", r"layers.\1.attention.inner_attention.feature_map.omega"),
    (r"blocks\.(\d+)\.mixer\.(u|v)", r"layers.\1.attention.inner_attention.\2"),   # aft-full's low-rank bias
    (r"blocks\.(\d+)\.ffn\.(linear[12])\.(weight|bias)", r"layers.\1.\2.\3"),
    (r"blocks\.(\d+)\.(norm[12])\.(weight|bias)", r"layers.\1.\2.\3"),
    (r"final_norm\.(weight|bias)", r"norm.\1"),
]
_FROM_FT = [
    (r"layers\.(\d+)\.attention\.(query|key|value|out)_projection\.(weight|bias)", r"blocks.\1.mixer.\2.\3"),
    (r"layers\.(\d+)\.attention\.inner_attention\.feature_map\.omega", r"blocks.\1.mixer.feature_map.omega"),
    (r"layers\.(\d+)\.attention\.inner_attention\.(u|v)", r"blocks.\1.mixer.\2"),
    (r"layers\.(\d+)\.(linear[12])\.(weight|bias)", r"blocks.\1.ffn.\2.\3"),
    (r"layers\.(\d+)\.(norm[12])\.(weight|bias)", r"blocks.\1.\2.\3"),
    (r"norm\.(weight|bias)", r"final_norm.\1"),
]


def _rename(tensors: Dict[str, Tensor], rules, target: str) -> Dict[str, Tensor]:
    out = {}
    for name, t in tensors.items():
        for pattern, replacement in rules:
            if re.fullmatch(pattern, name):
                out[re.sub(pattern, replacement, name)] = t
                break
        else:
            raise ValueError(f"tensor {name!r} has no {target} name")
    return out


def to_fast_transformers(state_dict: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """recur tensor names → fast-transformers names."""
    return _rename(state_dict, _TO_FT, "fast-transformers")


def from_fast_transformers(tensors: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """fast-transformers tensor names → recur names."""
    return _rename(tensors, _FROM_FT, "recur")
