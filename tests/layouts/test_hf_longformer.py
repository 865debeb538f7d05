"""The hf-longformer layout against Hugging Face transformers' LongformerModel
itself: last_hidden_state within the layout bound, from torch.save and
safetensors files converted with the config.json transformers writes, and
the options recur refuses, by name."""
import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from transformers import LongformerConfig, LongformerModel  # noqa: E402

import layout_harness as h  # noqa: E402

# (name, LongformerConfig arguments, global tokens, batch, positions)
CASES = [
    # 1,000 positions, windows per layer, the CLS token global (classification).
    ("windows_1000", dict(vocab_size=60, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64, attention_window=[8, 16],
                          max_position_embeddings=1030, layer_norm_eps=1e-5), 1, 1, 1000),
    # No global positions: every query local; relu; the default eps 1e-12;
    # N not a multiple of the window (transformers pads, with no effect).
    ("local_only", dict(vocab_size=40, hidden_size=24, num_hidden_layers=3,
                        num_attention_heads=3, intermediate_size=48, attention_window=6,
                        max_position_embeddings=300, hidden_act="relu"), 0, 2, 203),
    # A question-answering-style global prefix; pad_token_id 0 moves the
    # positions; two token types (row 0 used).
    ("global_prefix", dict(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=40, attention_window=4,
                           max_position_embeddings=200, pad_token_id=0, type_vocab_size=2,
                           layer_norm_eps=1e-5), 5, 2, 150),
]


def build(kwargs, seed):
    torch.manual_seed(seed)
    model = LongformerModel(LongformerConfig(**kwargs))
    h.perturb_norms(model, seed)
    return model


def saved_config(model, tmp_path, global_tokens):
    """The config.json save_pretrained writes, plus recur's global_tokens."""
    model.config.to_json_file(tmp_path / "hf_config.json")
    config = json.loads((tmp_path / "hf_config.json").read_text())
    if global_tokens:
        config["global_tokens"] = global_tokens
    return config


def library_forward(model, ids, global_tokens):
    model = model.double().eval()
    mask = torch.zeros(ids.shape, dtype=torch.long)
    mask[:, :global_tokens] = 1
    with torch.no_grad():
        return model(torch.as_tensor(ids).long(), global_attention_mask=mask).last_hidden_state.numpy()


@pytest.mark.parametrize("name,kwargs,g,batch,n", CASES, ids=[c[0] for c in CASES])
def test_encoder_matches_the_library(tmp_path, name, kwargs, g, batch, n):
    model = build(kwargs, seed=len(name))
    config = saved_config(model, tmp_path, g)
    assert "layout" not in config  # recognised by its model_type
    paths = h.save_and_convert(model, config, tmp_path, name)
    ids = h.tokens(2, batch, n, kwargs["vocab_size"])
    ids[ids == kwargs.get("pad_token_id", 1)] += 1  # no padding inside a stream
    want = library_forward(model, ids, g)
    for path in paths:
        h.assert_close(h.encode(path, ids), want, f"{name} {path.name}")


@pytest.mark.parametrize("dtype", h.HALF_DTYPES, ids=str)
def test_half_precision_state_dict(tmp_path, dtype):
    """A float16 or bfloat16 state_dict loaded into a fresh float32 model (h.saved_in):
    transformers computes with the rounded values (LongformerModel has no buffers; its
    position ids come from the input ids), and so must recur."""
    name, kwargs, g, batch, n = CASES[2]
    model = build(kwargs, seed=len(name))
    config = saved_config(model, tmp_path, g)
    state, fresh = h.saved_in(dtype, model, lambda: build(kwargs, seed=0))
    paths = h.save_and_convert(fresh, config, tmp_path, name, state)
    ids = h.tokens(3, batch, n, kwargs["vocab_size"])
    ids[ids == kwargs["pad_token_id"]] += 1  # no padding inside a stream
    want = library_forward(fresh, ids, g)
    for path in paths:
        h.assert_close(h.encode(path, ids), want, f"{name} {dtype} {path.name}")


BASE = dict(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=12, attention_window=4, max_position_embeddings=40)


@pytest.mark.parametrize("change,message", [
    ({"hidden_act": "gelu_new"}, '"hidden_act" must be one of'),
    ({"attention_window": 5}, '"attention_window" entries must be positive even integers'),
    ({"is_decoder": True}, '"is_decoder" must be false: Longformer is an encoder here'),
    ({"architectures": ["LongformerForMaskedLM"]}, '"architectures" must be ["LongformerModel"]'),
    ({"attention_windows": 4}, '"attention_windows" is not a LongformerConfig key'),
    ({"pruned_heads": {"0": [1]}}, '"pruned_heads" must be empty'),
], ids=["gelu_new", "odd_window", "decoder", "masked_lm", "typo", "pruned"])
def test_refusals_name_the_option(tmp_path, change, message):
    config = json.loads(LongformerConfig(**BASE).to_json_string())
    config.update(change)
    assert message in h.refusal(config, tmp_path)
