"""The flash-pytorch layout against FLASH-pytorch itself (FLASHTransformer):
step-by-step and chunked-prefill outputs of causal models and encoder outputs
of non-causal ones within the layout bound, from torch.save and safetensors
files (float32, and float16 and bfloat16 state_dicts loaded into a float32
model), and the options recur refuses, by name. Its GAU module as an encoder:
the same, with the whole output and the attention's part of it (output − x)
held to the bound."""
import pytest
import recur
import torch
from flash_pytorch import GAU, FLASHTransformer
from flash_pytorch.flash_pytorch import ScaleNorm

import layout_harness as h

# (name, keyword arguments, batch, positions)
CASES = [
    # The defaults (ScaleNorm, token shift, rotary of min(32, s) dims) causal, over
    # 1,000 positions: groups complete and one partial, T5 buckets past the exact ones.
    ("causal_defaults_1000", dict(num_tokens=50, dim=32, depth=2, group_size=64,
                                  query_key_dim=16, causal=True), 1, 1000),
    # LayerNorm, no token shift, an odd group (groups straddle every prefill chunk),
    # a query_key_dim above 32 (partial rotary), expansion 1.5.
    ("causal_layernorm_odd_group", dict(num_tokens=40, dim=24, depth=3, group_size=7,
                                        query_key_dim=40, expansion_factor=1.5, causal=True,
                                        norm_type="layernorm", shift_tokens=False), 2, 150),
    # An encoder: quadratic inside groups, linear over the whole sequence / n.
    ("encoder", dict(num_tokens=30, dim=16, depth=2, group_size=16, query_key_dim=8), 2, 100),
    # An encoder with a group longer than the sequence (one partial group).
    ("encoder_one_group", dict(num_tokens=30, dim=20, depth=1, group_size=128,
                               query_key_dim=12, shift_tokens=False), 1, 90),
]


def build(kwargs, seed):
    torch.manual_seed(seed)
    model = FLASHTransformer(**kwargs)
    h.perturb_norms(model, seed)
    with torch.no_grad():  # off their initial values, so that a wrong mapping shows
        for name, p in model.named_parameters():
            if name.endswith((".g", "abs_pos_emb.scale", "qk_offset_scale.beta",
                              "relative_attention_bias.weight")):
                p.add_(0.3 * torch.randn(p.shape))
    return model, {"layout": "flash-pytorch", "class": "FLASHTransformer", **kwargs}


def check_modes(paths, xs, want, name, causal):
    """Step by step and prefill in chunks of 5, 33 and the rest (causal), or encode; max |Δ|."""
    return h.check_modes(paths, xs, want, name, causal, first_chunks=(5, 33))


@pytest.mark.parametrize("name,kwargs,batch,n", CASES, ids=[c[0] for c in CASES])
def test_matches_the_library(tmp_path, name, kwargs, batch, n):
    model, config = build(kwargs, seed=len(name))
    paths = h.save_and_convert(model, config, tmp_path, name)
    xs = h.tokens(1, batch, n, kwargs["num_tokens"])
    check_modes(paths, xs, h.library_forward(model, xs), name, kwargs.get("causal"))


# Half-precision state_dicts loaded into a fresh float32 model (h.saved_in): the
# library computes with the rounded values of every stored tensor, the positions'
# abs_pos_emb.inv_freq and the rotary's freqs included, and so must recur.
# OffsetScale's γ (initially N(0, 0.02), which leaves q·k too small for the rotary
# to matter) is moved near 1: with the base's frequencies for the rotary alone,
# the causal cases fail; for the positions, all of them.
HALF_CASES = [
    ("causal", dict(num_tokens=40, dim=32, depth=2, group_size=16, query_key_dim=16,
                    causal=True), 1, 300),
    ("encoder_partial_rotary", dict(num_tokens=30, dim=24, depth=2, group_size=16,
                                    query_key_dim=40), 2, 120),
]


@pytest.mark.parametrize("dtype", h.HALF_DTYPES, ids=str)
@pytest.mark.parametrize("name,kwargs,batch,n", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_half_precision_state_dict(tmp_path, name, kwargs, batch, n, dtype):
    model, config = build(kwargs, seed=len(name))
    with torch.no_grad():
        for layer in model.layers:
            layer.qk_offset_scale.gamma.add_(1.0)
    state, fresh = h.saved_in(dtype, model, lambda: FLASHTransformer(**kwargs))
    paths = h.save_and_convert(fresh, config, tmp_path, name, state)
    xs = h.tokens(2, batch, n, kwargs["num_tokens"])
    worst = check_modes(paths, xs, h.library_forward(fresh, xs), name, kwargs.get("causal"))
    print(f"{name} {dtype}: max |Δ| {worst:.3g}")


BASE = {"layout": "flash-pytorch", "class": "FLASHTransformer", "num_tokens": 10, "dim": 16,
        "depth": 1, "group_size": 8, "query_key_dim": 8}


@pytest.mark.parametrize("change,message", [
    ({"laplace_attn_fn": True}, '"laplace_attn_fn" must be false'),
    ({"reduce_group_non_causal_attn": False}, '"reduce_group_non_causal_attn" must be true'),
    ({"dim": 15}, '"dim" must be even'),
    ({"query_key_dim": 7}, '"query_key_dim" must be even'),
    ({"norm_type": "rmsnorm"}, '"norm_type" must be one of'),
    ({"group": 8}, '"group" is not a known key'),
], ids=["laplace", "reduce_group", "odd_dim", "odd_qk", "norm_type", "typo"])
def test_refusals_name_the_option(tmp_path, change, message):
    assert message in h.refusal({**BASE, **change}, tmp_path)


# GAU: (name, keyword arguments, recur's keys, batch, positions)
GAU_CASES = [
    # The defaults (LayerNorm, query_key_dim 128, expansion 2), non-causal, over
    # 1,000 positions: T5 buckets past max_distance both ways.
    ("gau_defaults_1000", dict(dim=32), dict(max_length=1024), 1, 1000),
    # The causal mask: a position reads no later key, yet the scores are / N.
    ("gau_causal_300", dict(dim=24, query_key_dim=16, causal=True, rel_pos_bias=True),
     dict(max_length=300), 2, 300),
    # ScaleNorm, a small query_key_dim, expansion 1.5, sequences shorter than max_length.
    ("gau_scalenorm_200", dict(dim=20, query_key_dim=12, expansion_factor=1.5,
                               norm_klass=ScaleNorm, dropout=0.1),
     dict(norm_type="scalenorm", max_length=256), 2, 200),
]


def build_gau(kwargs, recur_keys, seed):
    torch.manual_seed(seed)
    model = GAU(**kwargs)
    h.perturb_norms(model, seed)
    with torch.no_grad():  # OffsetScale's γ starts at N(0, 0.02): move it, β and g visibly
        model.offsetscale.gamma.add_(1.0)
        for name, p in model.named_parameters():
            if name.endswith(("norm.g", "offsetscale.beta", "relative_attention_bias.weight")):
                p.add_(0.3 * torch.randn(p.shape))
    config = {k: v for k, v in kwargs.items() if k != "norm_klass"}
    return model, {"layout": "flash-pytorch", "class": "GAU", **config, **recur_keys}


@pytest.mark.parametrize("name,kwargs,keys,batch,n", GAU_CASES, ids=[c[0] for c in GAU_CASES])
def test_gau_matches_the_library(tmp_path, name, kwargs, keys, batch, n):
    model, config = build_gau(kwargs, keys, seed=len(name))
    paths = h.save_and_convert(model, config, tmp_path, name)
    xs = h.frames(3, batch, n, kwargs["dim"])
    want = h.library_forward(model, xs)
    assert abs(want - xs).max() > 1e-2, "the attention adds next to nothing: a weak test"
    for path in paths:
        got = h.encode(path, xs)
        whole = h.assert_close(got, want, f"{name} {path.name}")
        part = h.assert_close(got - xs, want - xs, f"{name} {path.name} output − x")
        print(f"{name} {path.name}: max |Δ| {whole:.3g} (output − x {part:.3g})")
    if kwargs.get("causal"):  # the mask: earlier outputs ignore a later input (same N)
        later = xs.copy()
        later[:, -1] += 1.0
        h.assert_close(h.encode(paths[1], later)[:, :-1], want[:, :-1], f"{name} mask")
    with recur.Model(str(paths[1])).session(batch=batch) as s:  # an encoder: no step form
        with pytest.raises(recur.Error):
            s.step(xs[:, 0])


def test_gau_sequence_longer_than_max_length_is_refused(tmp_path):
    model, config = build_gau(dict(dim=16, query_key_dim=8), dict(max_length=40), seed=4)
    path = h.save_and_convert(model, config, tmp_path, "gau_short")[1]
    xs = h.frames(5, 1, 41, 16)
    h.assert_close(h.encode(path, xs[:, :40]), h.library_forward(model, xs[:, :40]), "40 of 40")
    with recur.Model(str(path)).session(batch=1) as s:
        with pytest.raises(recur.Error, match="takes sequences of at most 40 positions"):
            s.encode(xs)


GAU_BASE = {"layout": "flash-pytorch", "class": "GAU", "dim": 16, "query_key_dim": 8,
            "max_length": 64}


@pytest.mark.parametrize("change,message", [
    ({"add_residual": False}, '"add_residual" must be true: recur\'s blocks add the residual'),
    ({"laplace_attn_fn": True}, '"laplace_attn_fn" must be false: recur\'s GAU'),
    ({"max_length": None}, '"max_length"'),
    ({"max_length": 65537}, '"max_length" must be at most 65536'),
    ({"norm_type": "rmsnorm"}, '"norm_type" must be one of'),
    ({"group_size": 8}, '"group_size" is not a known key'),
], ids=["add_residual", "laplace", "no_max_length", "max_length_big", "norm_type", "flash_key"])
def test_gau_refusals_name_the_option(tmp_path, change, message):
    config = {k: v for k, v in {**GAU_BASE, **change}.items() if v is not None}
    assert message in h.refusal(config, tmp_path)
