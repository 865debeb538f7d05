"""The flash-pytorch layout against FLASH-pytorch itself (FLASHTransformer):
step-by-step and chunked-prefill outputs of causal models and encoder outputs
of non-causal ones within the layout bound, from torch.save and safetensors
files, and the options recur refuses, by name."""
import pytest
import torch
from flash_pytorch import FLASHTransformer

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


@pytest.mark.parametrize("name,kwargs,batch,n", CASES, ids=[c[0] for c in CASES])
def test_matches_the_library(tmp_path, name, kwargs, batch, n):
    model, config = build(kwargs, seed=len(name))
    paths = h.save_and_convert(model, config, tmp_path, name)
    xs = h.tokens(1, batch, n, kwargs["num_tokens"])
    want = h.library_forward(model, xs)
    for path in paths:
        if kwargs.get("causal"):
            h.assert_close(h.step_by_step(path, xs), want, f"{name} {path.name} step")
            h.assert_close(h.prefill_in_chunks(path, xs, [5, 33, n - 38]), want,
                           f"{name} {path.name} prefill")
        else:
            h.assert_close(h.encode(path, xs), want, f"{name} {path.name}")


BASE = {"layout": "flash-pytorch", "class": "FLASHTransformer", "num_tokens": 10, "dim": 16,
        "depth": 1, "group_size": 8, "query_key_dim": 8}


@pytest.mark.parametrize("change,message", [
    ({"laplace_attn_fn": True}, '"laplace_attn_fn" must be false'),
    ({"reduce_group_non_causal_attn": False}, '"reduce_group_non_causal_attn" must be true'),
    ({"dim": 15}, '"dim" must be even'),
    ({"query_key_dim": 7}, '"query_key_dim" must be even'),
    ({"norm_type": "rmsnorm"}, '"norm_type" must be one of'),
    ({"class": "GAU"}, '"class" GAU is refused: the library\'s GAU divides its attention'),
    ({"group": 8}, '"group" is not a known key'),
], ids=["laplace", "reduce_group", "odd_dim", "odd_qk", "norm_type", "gau", "typo"])
def test_refusals_name_the_option(tmp_path, change, message):
    assert message in h.refusal({**BASE, **change}, tmp_path)
