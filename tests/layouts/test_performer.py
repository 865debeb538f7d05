"""The performer layout against performer-pytorch itself (Performer,
PerformerLM): encoder outputs (the softmax kernel) and step-by-step and chunked
prefill outputs (the generalized kernel, causal) within the layout bound, from
torch.save and safetensors files (float32, and float16 and bfloat16
state_dicts loaded into a float32 model), and the options recur refuses, by
name."""
import warnings

import pytest
import torch

warnings.filterwarnings("ignore")
from performer_pytorch import Performer, PerformerLM  # noqa: E402

import layout_harness as h  # noqa: E402

# (name, class, keyword arguments, batch, positions)
CASES = [
    # The softmax kernel (FAVOR+ with its stabilisers) in an encoder LM, 1,000
    # positions, learned positions, a tied head.
    ("lm_softmax_1000", PerformerLM, dict(num_tokens=50, max_seq_len=1024, dim=32, depth=2, heads=4,
                                          dim_head=8, nb_features=24, rotary_position_emb=False,
                                          tie_embed=True), 1, 1000),
    # The generalized relu kernel, causal: streamed, prefilled, encoded; the default
    # nb_features (int(16·ln 16) = 44); axial positions.
    ("lm_generalized_causal", PerformerLM, dict(num_tokens=40, max_seq_len=256, dim=32, depth=2,
                                                heads=2, dim_head=16, causal=True,
                                                generalized_attention=True, rotary_position_emb=False,
                                                axial_position_emb=True,
                                                axial_position_shape=(16, 16)), 2, 200),
    # A bare Performer (biases on by default), dim_head·heads ≠ dim, non-causal.
    ("performer_softmax", Performer, dict(dim=24, depth=2, heads=3, dim_head=10, nb_features=16),
     2, 150),
    # A bare causal Performer with the generalized kernel and no biases.
    ("performer_generalized_causal", Performer, dict(dim=16, depth=3, heads=2, dim_head=8,
                                                     causal=True, generalized_attention=True,
                                                     qkv_bias=False, attn_out_bias=False),
     1, 120),
    # PerformerLM's defaults: rotary embeddings (its fixed sinusoid positions too),
    # the softmax kernel, an encoder.
    ("lm_defaults_rotary", PerformerLM, dict(num_tokens=30, max_seq_len=128, dim=24, depth=2,
                                             heads=2, dim_head=12), 2, 100),
    # Causal with rotary and token shift (segments (0, 1) of the normed input of the
    # attention and of the FFN), streamed.
    ("lm_rotary_shift_causal", PerformerLM, dict(num_tokens=40, max_seq_len=1100, dim=24, depth=2,
                                                 heads=4, dim_head=6, causal=True,
                                                 generalized_attention=True, shift_tokens=True),
     1, 1000),
    # Reversible blocks with ScaleNorm (g·x/max(‖x‖, 1e-5)) and a GLU feed-forward,
    # causal, streamed.
    ("lm_reversible_scalenorm_glu", PerformerLM, dict(num_tokens=30, max_seq_len=300, dim=16,
                                                      depth=2, heads=2, dim_head=8, causal=True,
                                                      generalized_attention=True, reversible=True,
                                                      use_scalenorm=True, ff_glu=True), 2, 200),
    # ScaleNorm wins over ReZero in the library; the softmax kernel, an encoder.
    ("performer_scalenorm_rezero", Performer, dict(dim=16, depth=2, heads=2, dim_head=8,
                                                   use_scalenorm=True, use_rezero=True), 1, 60),
    # Non-causal token shift (−1, 0, 1): the next position's features too, an encoder;
    # 20 = 3·6 + 2 features, the last 2 unshifted.
    ("performer_shift_encoder", Performer, dict(dim=20, depth=2, heads=2, dim_head=6,
                                                shift_tokens=True), 2, 90),
]


def build(cls, kwargs, seed):
    torch.manual_seed(seed)
    model = cls(**kwargs)
    h.perturb_norms(model, seed)
    with torch.no_grad():  # ScaleNorm's and ReZero's gains off their initial values
        for name, p in model.named_parameters():
            if name.endswith(".g"):
                p.add_(0.3 * torch.randn(p.shape))
    config = {"layout": "performer", "class": cls.__name__,
              **{k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()}}
    return model, config


def check_modes(paths, xs, want, name, causal):
    """Step by step and prefill in chunks of 7, 64 and the rest (causal), or encode; max |Δ|."""
    return h.check_modes(paths, xs, want, name, causal, first_chunks=(7, 64))


def inputs(cls, kwargs, seed, batch, n):
    if cls is PerformerLM:
        return h.tokens(seed, batch, n, kwargs["num_tokens"])
    return h.frames(seed, batch, n, kwargs["dim"])


@pytest.mark.parametrize("name,cls,kwargs,batch,n", CASES, ids=[c[0] for c in CASES])
def test_matches_the_library(tmp_path, name, cls, kwargs, batch, n):
    model, config = build(cls, kwargs, seed=len(name))
    paths = h.save_and_convert(model, config, tmp_path, name)
    xs = inputs(cls, kwargs, 1, batch, n)
    check_modes(paths, xs, h.library_forward(model, xs), name, kwargs.get("causal"))


# Half-precision state_dicts loaded into a fresh float32 model (h.saved_in): the
# library computes with the rounded values of every stored tensor, the rotary's
# [sin | cos] table layer_pos_emb.emb included (its sines and cosines rounded
# apart, which no θ reproduces), and so must recur. The query, key and value
# projections are scaled up, so that the rotary's angles show in the output
# (with the base's angles instead, the causal model's float16 and bfloat16
# cases fail).
HALF_CASES = [
    ("lm_rotary_encoder", PerformerLM, dict(num_tokens=30, max_seq_len=256, dim=32, depth=2,
                                            heads=2, dim_head=16, nb_features=32), 2, 200),
    ("lm_rotary_causal", PerformerLM, dict(num_tokens=40, max_seq_len=300, dim=32, depth=2,
                                           heads=2, dim_head=16, causal=True,
                                           generalized_attention=True), 1, 300),
    ("performer_generalized_causal", Performer, dict(dim=16, depth=2, heads=2, dim_head=8,
                                                     causal=True, generalized_attention=True),
     1, 100),
]


@pytest.mark.parametrize("dtype", h.HALF_DTYPES, ids=str)
@pytest.mark.parametrize("name,cls,kwargs,batch,n", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_half_precision_state_dict(tmp_path, name, cls, kwargs, batch, n, dtype):
    model, config = build(cls, kwargs, seed=len(name))
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith(("to_q.weight", "to_k.weight")):
                p.mul_(4.0)
            if key.endswith("to_v.weight"):
                p.mul_(10.0)
    state, fresh = h.saved_in(dtype, model, lambda: cls(**kwargs))
    paths = h.save_and_convert(fresh, config, tmp_path, name, state)
    xs = inputs(cls, kwargs, 2, batch, n)
    worst = check_modes(paths, xs, h.library_forward(fresh, xs), name, kwargs.get("causal"))
    print(f"{name} {dtype}: max |Δ| {worst:.3g}")


BASE = {"layout": "performer", "class": "PerformerLM", "num_tokens": 10, "max_seq_len": 32,
        "dim": 16, "depth": 1, "heads": 2, "dim_head": 8, "rotary_position_emb": False}


@pytest.mark.parametrize("change,message", [
    ({"causal": True}, '"causal" must be false with the softmax kernel'),
    ({"local_attn_heads": 1}, '"local_attn_heads" must be 0'),
    ({"kernel_fn": "gelu", "generalized_attention": True}, '"kernel_fn" must be "relu"'),
    ({"no_projection": True}, '"no_projection" must be false'),
    ({"cross_attend": True}, '"cross_attend" must be false'),
    ({"use_rezero": True}, '"use_rezero" must be false (unless use_scalenorm is true'),
    ({"rotary_position_emb": True, "dim_head": 7}, '"dim_head" must be even with rotary'),
    ({"heads": 3}, '"heads" must divide dim (16), as the library asserts'),
    ({"rotary_position_emb": True, "dim": 15, "heads": 1, "dim_head": 8},
     '"dim" must be even with rotary_position_emb'),
    ({"heads_": 2}, '"heads_" is not a known key'),
], ids=["causal_softmax", "local_heads", "kernel_fn", "no_projection", "cross_attend",
        "rezero", "odd_rotary", "heads", "odd_dim", "typo"])
def test_refusals_name_the_option(tmp_path, change, message):
    assert message in h.refusal({**BASE, **change}, tmp_path)
