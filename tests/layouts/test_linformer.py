"""The linformer layout against the linformer library itself (Linformer,
LinformerLM): encoder outputs within the layout bound, from torch.save and
safetensors files, and the options recur refuses, by name."""
import pytest
import torch
from linformer import Linformer, LinformerLM

import layout_harness as h

# (name, library keyword arguments, batch, positions)
CASES = [
    # 1,000 positions of a 1,024-position model: the projections' first rows.
    ("features_1000", dict(dim=32, seq_len=1024, depth=2, k=64, heads=4), 1, 1000),
    # Keys and values share one projection and one linear layer; dim_head is
    # not dim / heads; the full length.
    ("lm_share_kv", dict(num_tokens=50, dim=24, seq_len=128, depth=3, k=16, heads=3,
                         dim_head=12, share_kv=True), 2, 128),
    # One key and one value head that every query head reads.
    ("lm_one_kv_head", dict(num_tokens=40, dim=32, seq_len=200, depth=2, k=32, heads=4,
                            one_kv_head=True), 2, 150),
    ("features_one_kv_shared", dict(dim=16, seq_len=64, depth=1, k=8, heads=2,
                                    one_kv_head=True, share_kv=True), 3, 40),
    # Reversible blocks: two streams of the input, summed at the end.
    ("lm_reversible", dict(num_tokens=30, dim=24, seq_len=96, depth=3, k=12, heads=2,
                           reversible=True), 2, 90),
]


def build(kwargs, seed):
    torch.manual_seed(seed)
    lm = "num_tokens" in kwargs
    model = (LinformerLM if lm else Linformer)(**kwargs)
    h.perturb_norms(model, seed)
    config = {"layout": "linformer", "class": "LinformerLM" if lm else "Linformer", **kwargs}
    return model, config


def inputs(kwargs, seed, batch, n):
    """Token ids for LinformerLM, frames for Linformer."""
    if "num_tokens" in kwargs:
        return h.tokens(seed, batch, n, kwargs["num_tokens"])
    return h.frames(seed, batch, n, kwargs["dim"])


@pytest.mark.parametrize("name,kwargs,batch,n", CASES, ids=[c[0] for c in CASES])
def test_encoder_matches_the_library(tmp_path, name, kwargs, batch, n):
    model, config = build(kwargs, seed=len(name))
    paths = h.save_and_convert(model, config, tmp_path, name)
    xs = inputs(kwargs, 1, batch, n)
    want = h.library_forward(model, xs)
    for path in paths:
        h.assert_close(h.encode(path, xs), want, f"{name} {path.name}")


@pytest.mark.parametrize("dtype", h.HALF_DTYPES, ids=str)
@pytest.mark.parametrize("name,kwargs,batch,n", [CASES[1], CASES[3]], ids=[CASES[1][0], CASES[3][0]])
def test_half_precision_state_dict(tmp_path, name, kwargs, batch, n, dtype):
    """A float16 or bfloat16 state_dict loaded into a fresh float32 model (h.saved_in):
    the library computes with the rounded values (linformer has no buffers: its
    projections E and F are parameters), and so must recur."""
    model, config = build(kwargs, seed=len(name))
    state, fresh = h.saved_in(dtype, model, lambda: build(kwargs, seed=0)[0])
    paths = h.save_and_convert(fresh, config, tmp_path, name, state)
    xs = inputs(kwargs, 2, batch, n)
    want = h.library_forward(fresh, xs)
    for path in paths:
        h.assert_close(h.encode(path, xs), want, f"{name} {dtype} {path.name}")


def test_longer_than_seq_len_is_refused_at_run_time(tmp_path):
    model, config = build(dict(dim=16, seq_len=32, depth=1, k=8, heads=2), seed=3)
    path, _ = h.save_and_convert(model, config, tmp_path, "short")
    with pytest.raises(h.recur.Error, match="seq_len|32"):
        h.encode(path, h.frames(0, 1, 33, 16))


BASE = {"layout": "linformer", "class": "Linformer", "dim": 16, "seq_len": 32, "depth": 1}


@pytest.mark.parametrize("change,message", [
    ({"heads": 3}, '"heads" must divide dim (16), as the library asserts'),
    ({"num_tokens": 10}, '"num_tokens" applies only to class LinformerLM'),
    ({"causal": True}, '"causal" is not a known key'),
    ({"class": "LinformerSelfAttention"}, '"class" must be one of'),
    ({"dropout": 2}, '"dropout" must be a number in [0.0, 1.0]'),
], ids=["heads", "num_tokens", "unknown_key", "class", "dropout"])
def test_refusals_name_the_option(tmp_path, change, message):
    assert message in h.refusal({**BASE, **change}, tmp_path)
