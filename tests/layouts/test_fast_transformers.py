"""The fast-transformers layout against pytorch-fast-transformers itself: models
made by the library's builders (TransformerEncoderBuilder, RecurrentEncoderBuilder),
saved, converted and run with the recur package, within the layout bound of
the library's own forward: encode for the non-causal models; step by step and
prefill in uneven chunks for the causal ones, against TransformerEncoder with a
TriangularCausalMask and, for RecurrentEncoder models, also against the
library's recurrent step loop. Then every option recur refuses, by its message.

The library's random feature maps redraw ω on every forward unless built with
deterministic_eval=True (fast_transformers/feature_maps/fourier_features.py),
so these tests build them so, draw ω once in train mode, and run in eval mode:
the library then computes with the ω of the state_dict, as recur does.
"""
import pytest
import torch
from fast_transformers.builders import RecurrentEncoderBuilder, TransformerEncoderBuilder
from fast_transformers.feature_maps import (ActivationFunctionFeatureMap, Favor,
                                            GeneralizedRandomFeatures, RandomFourierFeatures,
                                            SmoothedRandomFourierFeatures)
from fast_transformers.masking import TriangularCausalMask

import layout_harness as h

RELU_MAP = ActivationFunctionFeatureMap.factory(torch.relu)

# The feature maps a config may name: (config entry, the library's factory).
FEATURE_MAPS = {
    "elu": ({"type": "elu"}, None),
    "relu": ({"type": "activation", "activation_function": "relu"}, RELU_MAP),
    "favor_odd": ({"type": "favor", "n_dims": 13, "deterministic_eval": True},
                  Favor.factory(n_dims=13, deterministic_eval=True)),
    "favor_temp": ({"type": "favor", "n_dims": None, "softmax_temp": 0.2, "orthogonal": False,
                    "deterministic_eval": True},
                   Favor.factory(softmax_temp=0.2, orthogonal=False, deterministic_eval=True)),
    "grf": ({"type": "generalized_random", "n_dims": 12, "softmax_temp": 0.5,
             "deterministic_eval": True},
            GeneralizedRandomFeatures.factory(n_dims=12, softmax_temp=0.5,
                                              deterministic_eval=True)),
    "grf_default": ({"type": "generalized_random", "kernel_fn": "relu", "redraw": 3,
                     "deterministic_eval": True},
                    GeneralizedRandomFeatures.factory(redraw=3, deterministic_eval=True)),
    # Random Fourier features: cos and sin, signed, so the denominators are too.
    "rff": ({"type": "random_fourier", "n_dims": 33, "softmax_temp": 0.1, "orthogonal": True,
             "deterministic_eval": True},
            RandomFourierFeatures.factory(n_dims=33, softmax_temp=0.1, orthogonal=True,
                                          deterministic_eval=True)),
    "rff_default": ({"type": "random_fourier", "n_dims": None, "deterministic_eval": True},
                    RandomFourierFeatures.factory(deterministic_eval=True)),
    "srff": ({"type": "smoothed_random_fourier", "n_dims": 16, "smoothing": 0.5,
              "deterministic_eval": True},
             SmoothedRandomFourierFeatures.factory(n_dims=16, smoothing=0.5,
                                                   deterministic_eval=True)),
    "srff_default": ({"type": "smoothed_random_fourier", "softmax_temp": None, "redraw": 2,
                      "deterministic_eval": True},
                     SmoothedRandomFourierFeatures.factory(redraw=2, deterministic_eval=True)),
}


def build(builder, kwargs, feature_map=None, mask=None, seed=0):
    """A model made by the library's builder with random init and perturbed
    norms, its random feature maps' ω drawn once; and its config."""
    torch.manual_seed(seed)
    lib_kwargs = dict(kwargs)
    config = {"builder": builder.__name__, "dropout": 0.1, "attention_dropout": 0.1, **kwargs}
    if feature_map:
        entry, factory = FEATURE_MAPS[feature_map]
        config["feature_map"] = entry
        if factory:
            lib_kwargs["feature_map"] = factory
    if mask:
        config["attn_mask"] = mask
    model = builder.from_kwargs(dropout=0.1, attention_dropout=0.1, **lib_kwargs).get()
    model.train()
    for m in model.modules():
        if hasattr(m, "new_feature_map") and hasattr(m, "omega"):
            m.new_feature_map("cpu")
    model.eval()
    h.perturb_norms(model, seed)
    return model, config


def library_forward(model, xs, causal, dtype=torch.float64):
    """TransformerEncoder's eval() forward, with a TriangularCausalMask when causal."""
    model = model.to(dtype).eval()
    x = torch.as_tensor(xs, dtype=dtype)
    mask = TriangularCausalMask(x.shape[1]) if causal else None
    with torch.no_grad():
        return model(x, attn_mask=mask).numpy()


def library_steps(model, xs, dtype=torch.float64):
    """RecurrentTransformerEncoder's eval() forward, one position at a time."""
    model = model.to(dtype).eval()
    x = torch.as_tensor(xs, dtype=dtype)
    out, state = [], None
    with torch.no_grad():
        for t in range(x.shape[1]):
            y, state = model(x[:, t], state=state)
            out.append(y)
    return torch.stack(out, dim=1).numpy()


def uneven_chunks(n):
    out = [c for c in (1, 7, n // 3, 2) if c]
    while sum(out) > n:
        out.pop()
    return out + [n - sum(out)] if sum(out) < n else out


def check_causal(paths, xs, want, name):
    """Step by step and prefill in uneven chunks from both files; max |Δ|."""
    worst = 0.0
    for path in paths:
        worst = max(worst, h.assert_close(h.step_by_step(path, xs), want, f"{name} step"))
        got = h.prefill_in_chunks(path, xs, uneven_chunks(xs.shape[1]))
        worst = max(worst, h.assert_close(got, want, f"{name} prefill"))
    return worst


def report(name, worst):
    print(f"\n{name}: max |Δ| {worst:.3g}")


def dims(layers, heads, dq, dv, ff, **more):
    return dict(n_layers=layers, n_heads=heads, query_dimensions=dq, value_dimensions=dv,
                feed_forward_dimensions=ff, **more)


# (name, kwargs, feature map, batch, positions): TransformerEncoder encoders.
ENCODERS = [
    # attention_type left out: the builder's default, "full".
    ("full_default", dims(2, 2, 8, 8, 32), None, 2, 200),
    ("full_temp_zero", dims(2, 3, 6, 4, 24, attention_type="full", softmax_temp=0.0,
                            activation="gelu"), None, 2, 120),
    ("full_temp", dims(1, 2, 8, 6, 16, attention_type="full", softmax_temp=-0.3,
                       final_normalization=False), None, 3, 64),
    ("linear_elu_1000", dims(2, 2, 8, 8, 32, attention_type="linear"), None, 1, 1000),
    ("linear_relu", dims(2, 3, 6, 4, 24, attention_type="linear", activation="gelu",
                         final_normalization=False), "relu", 2, 150),
    ("linear_favor", dims(2, 2, 8, 8, 32, attention_type="linear"), "favor_odd", 2, 100),
    ("linear_grf", dims(1, 2, 6, 8, 32, attention_type="linear"), "grf", 2, 90),
    ("linear_rff", dims(2, 2, 8, 8, 32, attention_type="linear"), "rff", 2, 100),
    ("linear_rff_default", dims(1, 2, 8, 4, 16, attention_type="linear"), "rff_default", 2, 60),
    ("linear_srff", dims(2, 3, 6, 4, 24, attention_type="linear", activation="gelu"), "srff",
     2, 120),
    ("local_7", dims(2, 2, 8, 8, 32, attention_type="local", local_context=7), None, 2, 150),
    ("local_1", dims(1, 2, 4, 8, 16, attention_type="local", local_context=1), None, 1, 20),
    ("local_temp_1000", dims(1, 2, 8, 4, 16, attention_type="local", local_context=31,
                             softmax_temp=0.4, activation="gelu"), None, 1, 1000),
]

# TransformerEncoder with a TriangularCausalMask.
CAUSAL = [
    ("causal_linear_elu_1000", dims(2, 2, 8, 8, 32, attention_type="causal-linear"), "elu", 1,
     1000),
    ("causal_linear_favor", dims(2, 2, 8, 6, 24, attention_type="causal-linear",
                                 activation="gelu"), "favor_temp", 2, 120),
    ("causal_linear_grf", dims(2, 3, 4, 8, 32, attention_type="causal-linear",
                               final_normalization=False), "grf_default", 2, 100),
    ("causal_linear_relu", dims(1, 2, 8, 8, 16, attention_type="causal-linear"), "relu", 3, 60),
    ("causal_linear_rff", dims(2, 2, 8, 6, 24, attention_type="causal-linear"), "rff", 2, 120),
    ("causal_linear_srff", dims(2, 2, 8, 8, 32, attention_type="causal-linear",
                                final_normalization=False), "srff_default", 2, 100),
    ("full_causal_1000", dims(2, 2, 8, 8, 32, attention_type="full"), None, 1, 1000),
    ("full_causal_temp", dims(2, 3, 6, 4, 24, attention_type="full", softmax_temp=0.25,
                              activation="gelu"), None, 2, 100),
    ("full_causal_no_norm", dims(1, 2, 4, 8, 16, attention_type="full",
                                 final_normalization=False), None, 3, 50),
    ("local_causal_even_1000", dims(2, 2, 8, 8, 32, attention_type="local", local_context=8),
     None, 1, 1000),
    ("local_causal_odd", dims(2, 3, 6, 4, 24, attention_type="local", local_context=5,
                              softmax_temp=0.5), None, 2, 100),
    ("local_causal_wide", dims(1, 2, 4, 8, 16, attention_type="local", local_context=64,
                               final_normalization=False), None, 2, 50),
]

# RecurrentEncoderBuilder: (name, kwargs, feature map, the TransformerEncoder
# attention_type with the same weights, batch, positions).
RECURRENT = [
    ("recurrent_linear", dims(2, 2, 8, 8, 32, attention_type="linear"), None, "causal-linear",
     2, 100),
    ("recurrent_causal_linear_favor", dims(2, 2, 8, 8, 32, attention_type="causal-linear"),
     "favor_odd", "causal-linear", 2, 80),
    ("recurrent_linear_grf", dims(1, 2, 6, 4, 16, attention_type="linear"), "grf",
     "causal-linear", 1, 60),
    ("recurrent_causal_linear_srff", dims(2, 2, 8, 8, 32, attention_type="causal-linear"),
     "srff", "causal-linear", 2, 80),
    ("recurrent_linear_rff", dims(1, 2, 6, 4, 16, attention_type="linear"), "rff",
     "causal-linear", 1, 60),
    ("recurrent_full_1000", dims(2, 2, 8, 8, 32, attention_type="full", softmax_temp=0.3),
     None, "full", 1, 1000),
    ("recurrent_full_default", dims(1, 3, 4, 6, 24, activation="gelu"), None, "full", 2, 70),
]


def library_dtype(attention_type):
    """The library's CPU kernels of local and causal-linear attention
    (local_product_cpu.cpp, causal_product_cpu.cpp) take float32 only; the
    other attentions run in float64."""
    return torch.float32 if attention_type in ("local", "causal-linear") else torch.float64


@pytest.mark.parametrize("name,kwargs,fm,batch,n", ENCODERS, ids=[c[0] for c in ENCODERS])
def test_encoder_matches_the_library(tmp_path, name, kwargs, fm, batch, n):
    model, config = build(TransformerEncoderBuilder, kwargs, fm, seed=len(name))
    paths = h.save_and_convert(model, config, tmp_path, name)
    d_model = kwargs["n_heads"] * kwargs["value_dimensions"]
    xs = h.frames(1, batch, n, d_model)
    want = library_forward(model, xs, causal=False, dtype=library_dtype(kwargs.get("attention_type")))
    worst = max(h.assert_close(h.encode(p, xs), want, f"{name} {p.name}") for p in paths)
    report(name, worst)


@pytest.mark.parametrize("name,kwargs,fm,batch,n", CAUSAL, ids=[c[0] for c in CAUSAL])
def test_causal_matches_the_library(tmp_path, name, kwargs, fm, batch, n):
    mask = None if kwargs["attention_type"] == "causal-linear" else "triangular"
    model, config = build(TransformerEncoderBuilder, kwargs, fm, mask=mask, seed=len(name))
    paths = h.save_and_convert(model, config, tmp_path, name)
    d_model = kwargs["n_heads"] * kwargs["value_dimensions"]
    xs = h.frames(2, batch, n, d_model)
    want = library_forward(model, xs, causal=True, dtype=library_dtype(kwargs.get("attention_type")))
    report(name, check_causal(paths, xs, want, name))


@pytest.mark.parametrize("name,kwargs,fm,batch_type,batch,n", RECURRENT,
                         ids=[c[0] for c in RECURRENT])
def test_recurrent_matches_the_library(tmp_path, name, kwargs, fm, batch_type, batch, n):
    model, config = build(RecurrentEncoderBuilder, kwargs, fm, seed=len(name))
    paths = h.save_and_convert(model, config, tmp_path, name)
    d_model = kwargs["n_heads"] * kwargs["value_dimensions"]
    xs = h.frames(3, batch, n, d_model)
    steps = library_steps(model, xs)
    worst = check_causal(paths, xs, steps, f"{name} (recurrent loop)")
    # The same weights in a TransformerEncoder with a causal mask.
    batch_kwargs = {**kwargs, "attention_type": batch_type}
    twin, _ = build(TransformerEncoderBuilder, batch_kwargs, fm, seed=0)
    twin.load_state_dict(model.float().state_dict())
    want = library_forward(twin, xs, causal=True, dtype=library_dtype(batch_type))
    worst = max(worst, check_causal(paths, xs, want, f"{name} (masked forward)"))
    report(name, worst)


# Half-precision state_dicts loaded into a fresh float32 model (h.saved_in): the
# library computes with the rounded values, the feature maps' ω buffers included
# (deterministic_eval: not redrawn in eval), and so must recur. (name, builder,
# kwargs, feature map, attn_mask, batch, positions); encoders encode, the causal
# models step and prefill.
HALF_CASES = [
    ("linear_favor", TransformerEncoderBuilder, dims(2, 2, 8, 8, 32, attention_type="linear"),
     "favor_odd", None, 2, 100),
    ("full_causal", TransformerEncoderBuilder, dims(2, 2, 8, 8, 32, attention_type="full"),
     None, "triangular", 2, 120),
    ("recurrent_causal_linear_srff", RecurrentEncoderBuilder,
     dims(2, 2, 8, 8, 32, attention_type="causal-linear"), "srff", None, 1, 80),
]


@pytest.mark.parametrize("dtype", h.HALF_DTYPES, ids=str)
@pytest.mark.parametrize("name,builder,kwargs,fm,mask,batch,n", HALF_CASES,
                         ids=[c[0] for c in HALF_CASES])
def test_half_precision_state_dict(tmp_path, name, builder, kwargs, fm, mask, batch, n, dtype):
    model, config = build(builder, kwargs, fm, mask=mask, seed=len(name))
    state, fresh = h.saved_in(dtype, model,
                              lambda: build(builder, kwargs, fm, mask=mask, seed=0)[0])
    paths = h.save_and_convert(fresh, config, tmp_path, name, state)
    d_model = kwargs["n_heads"] * kwargs["value_dimensions"]
    xs = h.frames(4, batch, n, d_model)
    if builder is RecurrentEncoderBuilder:
        report(name, check_causal(paths, xs, library_steps(fresh, xs), f"{name} {dtype}"))
    elif mask:
        want = library_forward(fresh, xs, causal=True)
        report(name, check_causal(paths, xs, want, f"{name} {dtype}"))
    else:
        want = library_forward(fresh, xs, causal=False)
        report(name, max(h.assert_close(h.encode(p, xs), want, f"{name} {dtype} {p.name}")
                         for p in paths))


def test_reformer_is_not_reproducible():
    """Why "reformer" is refused: the library's own eval() forward differs from
    call to call, and its hash planes are nowhere in the state_dict."""
    model, _ = build(TransformerEncoderBuilder,
                     dims(1, 2, 8, 8, 16, attention_type="reformer", chunk_size=8, bits=2,
                          rounds=1))
    x = torch.randn(1, 32, 16)
    with torch.no_grad():
        assert not torch.allclose(model(x), model(x))
    assert all("projection" in k or k.split(".")[-2] in ("linear1", "linear2", "norm1", "norm2",
                                                          "norm")
               for k in model.state_dict())


BASE = {"layout": "fast-transformers", **dims(1, 2, 4, 4, 8)}


@pytest.mark.parametrize("change,message", [
    ({"attention_type": "reformer"},
     '"attention_type" "reformer" is not supported: ReformerAttention draws its hash planes with '
     'normal_() in every round of every forward call'),
    ({"attention_type": "clustered", "clusters": 4},
     '"attention_type" "clustered" is not supported: ClusteredAttention clusters the queries'),
    ({"attention_type": "improved-clustered"},
     '"attention_type" "improved-clustered" is not supported: ImprovedClusteredAttention'),
    ({"attention_type": "causal-improved-clustered"},
     '"attention_type" "causal-improved-clustered" is not supported: '
     'ImprovedClusteredCausalAttention'),
    ({"attention_type": "exact-topk"},
     '"attention_type" "exact-topk" is not supported: ExactTopKAttention keeps each query\'s '
     'topk'),
    ({"attention_type": "conditional-full:linear"},
     '"attention_type" "conditional-full:linear" is not supported: ConditionalFullAttention '
     'switches'),
    ({"attention_type": "full:linear"}, '"attention_type" "full:linear" composes attentions'),
    ({"attention_type": "performer"}, '"attention_type" must be one of "full", "linear", '
     '"causal-linear", "local", "aft-full" (got "performer")'),
    ({"builder": "RecurrentEncoderBuilder", "attention_type": "local", "local_context": 3},
     '"attention_type" "local" is not a recurrent attention'),
    ({"builder": "RecurrentEncoderBuilder", "attn_mask": "triangular"},
     '"attn_mask" applies only to builder "TransformerEncoderBuilder"'),
    ({"builder": "TransformerDecoderBuilder"}, '"builder" must be one of'),
    ({"attention_type": "linear", "attn_mask": "triangular"},
     '"attn_mask" must be "full" for attention_type "linear": LinearAttention raises'),
    ({"attention_type": "causal-linear", "attn_mask": "full"},
     '"attn_mask" must be "triangular" for attention_type "causal-linear"'),
    ({"attention_type": "aft-full", "attn_mask": "triangular"},
     '"attn_mask" must be "full" for attention_type "aft-full"'),
    ({"attn_mask": "lower"}, '"attn_mask" must be one of "full", "triangular"'),
    ({"attention_type": "local", "local_context": 4},
     '"local_context" must be odd without a causal mask'),
    ({"attention_type": "local"}, 'missing key "local_context"'),
    ({"attention_type": "local", "local_context": 0}, '"local_context" must be a positive'),
    ({"attention_type": "local", "local_context": 3, "softmax_temp": -1.0},
     '"softmax_temp" must not be negative for attention_type "local"'),
    ({"attention_type": "full", "softmax_temp": "0.5"}, '"softmax_temp" must be a number'),
    ({"attention_type": "linear", "softmax_temp": 0.5},
     '"softmax_temp" applies only to attention_type "full" and "local"'),
    ({"local_context": 3}, '"local_context" applies only to attention_type "local"'),
    ({"feature_map": {"type": "elu"}},
     '"feature_map" applies only to attention_type "linear" and "causal-linear"'),
    ({"max_sequence_length": 64}, '"max_sequence_length" applies only to attention_type'),
    ({"attention_type": "linear", "feature_map": {"type": "random_fourier", "n_dims": 1}},
     '"feature_map.n_dims" leaves RandomFourierFeatures no random features'),
    ({"attention_type": "linear", "feature_map": {"type": "smoothed_random_fourier", "n_dims": 2}},
     '"feature_map.n_dims" leaves SmoothedRandomFourierFeatures no random features'),
    ({"attention_type": "linear", "query_dimensions": 2,
      "feature_map": {"type": "smoothed_random_fourier"}},
     '"query_dimensions" leaves SmoothedRandomFourierFeatures no random features'),
    ({"attention_type": "linear",
      "feature_map": {"type": "smoothed_random_fourier", "smoothing": "1"}},
     '"feature_map.smoothing" must be a finite number'),
    ({"attention_type": "linear", "feature_map": {"type": "random_fourier", "smoothing": 1.0}},
     '"feature_map.smoothing" is not a known key'),
    ({"attention_type": "linear", "feature_map": {"type": "random_fourier", "softmax_temp": -1}},
     '"feature_map.softmax_temp" must be a positive number'),
    ({"attention_type": "linear",
      "feature_map": {"type": "activation", "activation_function": "tanh"}},
     '"feature_map.activation_function" must be one of "elu_plus_one", "relu" (got "tanh")'),
    ({"attention_type": "linear", "feature_map": {"type": "favor", "stabilize": True}},
     '"feature_map.stabilize" must be false: the stabilised Favor subtracts a maximum'),
    ({"attention_type": "linear", "feature_map": {"type": "favor", "n_dims": 1}},
     '"feature_map.n_dims" must be at least 2'),
    ({"attention_type": "linear",
      "feature_map": {"type": "generalized_random", "kernel_fn": "elu"}},
     '"feature_map.kernel_fn" must be one of "relu" (got "elu")'),
    ({"attention_type": "linear",
      "feature_map": {"type": "generalized_random", "softmax_temp": 0}},
     '"feature_map.softmax_temp" must be a positive number'),
    ({"attention_type": "linear", "feature_map": {"type": "favor", "redraw": 0}},
     '"feature_map.redraw" must be a positive integer'),
    ({"dropout": 1.5}, '"dropout" must be a number in [0.0, 1.0]'),
    ({"event_dispatcher": ""}, '"event_dispatcher" is not a known key'),
], ids=lambda v: None if isinstance(v, str) else "-".join(f"{k}={v[k]}" for k in v))
def test_refusals_name_the_option(tmp_path, change, message):
    assert message in h.refusal({**BASE, **change}, tmp_path)
