"""The hf-reformer layout against Hugging Face transformers' ReformerModel and
ReformerModelWithLMHead themselves: outputs within the layout bound, from
torch.save and safetensors files converted with the config.json transformers
writes; the causal LM with local layers streamed position by position and in
prefill chunks; and the options recur refuses, by name.

The library draws its LSH rotations with torch.randn after
torch.manual_seed(hash_seed) at every forward, in the dtype of the model. The
converter draws them as float32 torch does on a CPU; the float64 forward here
draws the same float32 values (then widens them), so that it runs the model a
float32 user runs, without float32's rounding elsewhere.
"""
import contextlib
import json
import os

# torch's baseline CPU kernel for randn (its AVX2 kernel rounds the draws
# differently in the last bits: docs/layouts.md); read when torch first draws.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import ReformerConfig, ReformerModel, ReformerModelWithLMHead  # noqa: E402

import layout_harness as h  # noqa: E402


@contextlib.contextmanager
def float32_rotations():
    """torch.randn draws float32 values whatever dtype it is asked for."""
    randn = torch.randn

    def draw(*shape, dtype=None, device=None, **kw):
        return randn(*shape, dtype=torch.float32, device=device, **kw).to(dtype or torch.float32)

    torch.randn = draw
    try:
        yield
    finally:
        torch.randn = randn


def build(cls, kwargs, seed):
    torch.manual_seed(seed)
    model = cls(ReformerConfig(**kwargs))
    h.perturb_norms(model, seed)
    with torch.no_grad():  # axial weights start as ones; make each row its own
        for p in model.parameters():
            if p.dim() == 3:
                p.copy_(torch.randn(p.shape) * 0.5)
    return model.eval()


def saved_config(model, tmp_path):
    """The config.json save_pretrained writes (it names the class in "architectures")."""
    model.config.architectures = [type(model).__name__]
    model.config.to_json_file(tmp_path / "hf_config.json")
    return json.loads((tmp_path / "hf_config.json").read_text())


def library_forward(model, ids):
    model = model.double().eval()
    with torch.no_grad(), float32_rotations():
        out = model(torch.as_tensor(ids).long())
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state).numpy()


COMMON = dict(hidden_size=32, num_attention_heads=2, attention_head_size=16, feed_forward_size=48,
              axial_pos_shape=[32, 32], axial_pos_embds_dim=[12, 20], max_position_embeddings=1024,
              hash_seed=11, layer_norm_eps=1e-5)

# (name, class, ReformerConfig arguments, batch, positions)
CASES = [
    # Local and LSH layers over 1,000 positions: padded to 1,008 (lcm of the
    # chunks 16 and 8), two hash rounds, a local window before and after.
    ("encoder_mixed_1000", ReformerModel,
     dict(COMMON, vocab_size=50, attn_layers=["local", "lsh", "local", "lsh"], num_buckets=8,
          num_hashes=2, lsh_attn_chunk_length=16, local_attn_chunk_length=8,
          local_num_chunks_after=1), 1, 1000),
    # A sequence no longer than the shortest chunk: standard attention, no hashing.
    ("encoder_short", ReformerModel,
     dict(COMMON, vocab_size=30, attn_layers=["lsh", "local"], num_buckets=4, num_hashes=3,
          lsh_attn_chunk_length=16, local_attn_chunk_length=16, hidden_act="gelu"), 2, 12),
    # Windows wider than the sequence's chunks: transformers' look-adjacent slices
    # leave the order as it is for an offset past the chunk count (6 positions
    # padded to 8: 2 chunks, offsets −3 .. 2; LSH one round); 22 positions: 6 chunks.
    ("encoder_wide_6", ReformerModel,
     dict(COMMON, vocab_size=30, attn_layers=["local", "lsh"], num_buckets=4, num_hashes=1,
          lsh_attn_chunk_length=4, local_attn_chunk_length=4, local_num_chunks_before=3,
          local_num_chunks_after=2, lsh_num_chunks_before=3, lsh_num_chunks_after=1), 2, 6),
    ("encoder_wide_22", ReformerModel,
     dict(COMMON, vocab_size=30, attn_layers=["local", "lsh"], num_buckets=4, num_hashes=2,
          lsh_attn_chunk_length=4, local_attn_chunk_length=4, local_num_chunks_before=3,
          local_num_chunks_after=2, lsh_num_chunks_before=3, lsh_num_chunks_after=1), 2, 22),
    # The causal LM with LSH layers (encode: no recurrent form), three rounds.
    ("lm_lsh_causal", ReformerModelWithLMHead,
     dict(COMMON, vocab_size=40, attn_layers=["lsh", "local", "lsh"], num_buckets=4, num_hashes=3,
          lsh_attn_chunk_length=8, local_attn_chunk_length=8, is_decoder=True), 2, 256),
]


@pytest.mark.parametrize("name,cls,kwargs,batch,n", CASES, ids=[c[0] for c in CASES])
def test_encode_matches_the_library(tmp_path, name, cls, kwargs, batch, n):
    model = build(cls, kwargs, seed=len(name))
    config = saved_config(model, tmp_path)
    assert "layout" not in config  # recognised by its model_type
    paths = h.save_and_convert(model, config, tmp_path, name)
    ids = h.tokens(3, batch, n, kwargs["vocab_size"])
    want = library_forward(model, ids)
    for path in paths:
        h.assert_close(h.encode(path, ids), want, f"{name} {path.name}")


# The causal LM of local layers (chunks_before 1): exact streaming form.
LOCAL_LM = dict(COMMON, vocab_size=40, attn_layers=["local", "local"], local_attn_chunk_length=16,
                is_decoder=True, axial_pos_embds=False, max_position_embeddings=512,
                hidden_act="gelu")


def test_local_lm_streams_like_the_library(tmp_path):
    model = build(ReformerModelWithLMHead, LOCAL_LM, seed=5)
    paths = h.save_and_convert(model, saved_config(model, tmp_path), tmp_path, "local_lm")
    ids = h.tokens(4, 2, 300, LOCAL_LM["vocab_size"])
    want = library_forward(model, ids)
    for path in paths:
        h.assert_close(h.step_by_step(path, ids), want, f"step {path.name}")
        h.assert_close(h.prefill_in_chunks(path, ids, [1, 40, 17, 242]), want, f"prefill {path.name}")
        h.assert_close(h.encode(path, ids), want, f"encode {path.name}")


@pytest.mark.parametrize("dtype", h.HALF_DTYPES, ids=str)
def test_half_precision_state_dict(tmp_path, dtype):
    """Float16 and bfloat16 state_dicts loaded into fresh float32 models (h.saved_in):
    transformers computes with the rounded values (the state_dict holds parameters only;
    its mask values are non-persistent buffers and its rotations float32 draws), and so
    must recur: an encoder of LSH and local layers (encode) and the local-layer LM
    (step, prefill, encode)."""
    name, cls, kwargs, batch, n = CASES[4]
    model = build(cls, kwargs, seed=len(name))
    state, fresh = h.saved_in(dtype, model, lambda: build(cls, kwargs, seed=0))
    paths = h.save_and_convert(fresh, saved_config(fresh, tmp_path), tmp_path, name, state)
    ids = h.tokens(5, batch, n, kwargs["vocab_size"])
    want = library_forward(fresh, ids)
    for path in paths:
        h.assert_close(h.encode(path, ids), want, f"{name} {dtype} {path.name}")

    model = build(ReformerModelWithLMHead, LOCAL_LM, seed=6)
    state, fresh = h.saved_in(dtype, model, lambda: build(ReformerModelWithLMHead, LOCAL_LM, seed=0))
    paths = h.save_and_convert(fresh, saved_config(fresh, tmp_path), tmp_path, "local_lm", state)
    ids = h.tokens(6, 2, 120, LOCAL_LM["vocab_size"])
    want = library_forward(fresh, ids)
    for path in paths:
        h.assert_close(h.step_by_step(path, ids), want, f"local_lm {dtype} step {path.name}")
        h.assert_close(h.prefill_in_chunks(path, ids, [1, 40, 79]), want,
                       f"local_lm {dtype} prefill {path.name}")
        h.assert_close(h.encode(path, ids), want, f"local_lm {dtype} encode {path.name}")


BASE = dict(vocab_size=20, hidden_size=8, num_attention_heads=2, attention_head_size=4,
            feed_forward_size=12, attn_layers=["lsh"], num_buckets=4, hash_seed=1,
            axial_pos_shape=[4, 8], axial_pos_embds_dim=[4, 4], max_position_embeddings=32)


@pytest.mark.parametrize("change,message", [
    ({"hash_seed": None}, '"hash_seed" must be set for LSH layers'),
    ({"num_buckets": None}, '"num_buckets" must be set for LSH layers'),
    ({"num_buckets": [2, 4]}, '"num_buckets" must be an even integer (a list of factors'),
    ({"axial_pos_shape": [2, 4, 4]}, '"axial_pos_shape" must be a list of two positive integers'),
    ({"hidden_act": "gelu_new"}, '"hidden_act" must be one of'),
    ({"architectures": ["ReformerForMaskedLM"]}, '"architectures" must be ["ReformerModel"]'),
    ({"architectures": ["ReformerModelWithLMHead"]}, '"is_decoder" must be true for ReformerModelWithLMHead'),
    ({"attn_layers": ["lsh", "full"]}, '"attn_layers" entries must be "lsh" or "local"'),
    ({"num_hashs": 2}, '"num_hashs" is not a ReformerConfig key'),
    ({"pruned_heads": {"0": [1]}}, '"pruned_heads" must be empty'),
    ({"num_hidden_layers": 2}, '"num_hidden_layers" must equal the length of attn_layers (1)'),
    ({"axial_pos_embds_dim": [4, 8]}, '"axial_pos_embds_dim" must sum to hidden_size (8)'),
    ({"num_buckets": 5}, '"num_buckets" must be even'),
], ids=["no_seed", "no_buckets", "factorised", "axial_3d", "gelu_new", "masked_lm", "lm_encoder",
        "full_layer", "typo", "pruned", "layer_count", "axial_dims", "odd_buckets"])
def test_refusals_name_the_option(tmp_path, change, message):
    config = json.loads(ReformerConfig(**BASE).to_json_string())
    config.update(change)
    assert message in h.refusal(config, tmp_path)
