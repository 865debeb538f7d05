"""fla-hub's RWKV-7 (flash-linear-attention's `RWKV7ForCausalLM`, layout "fla"): the
state dict and config.json as fla's Hugging Face models save them, converted with one
command, against the reference's float64 RWKV-7 (recur_ref/rwkv7.py, held to BlinkDL's
`rwkv` package and, for the state update, to fla's own dplr naive recurrence by
test_rwkv7_reference.py) run with fla's constants: the exact decay scale e^{-0.5} and the
group norm's eps head_dim·norm_eps, both as float32 as the model file stores them. fla's
model class itself needs triton (not in the tests' environment), so the files are written
here with fla's names from BlinkDL-named weights, as fla-hub's conversions of BlinkDL's
checkpoints are made."""
import json
import math
from unittest import mock

import numpy as np
import pytest
import torch

from layout_harness import check_forms, recur_convert, refusal, tokens
from recur_ref import safetensors
import recur_ref.rwkv7 as blinkdl
from recur_ref.rwkv7 import random_state_dict

# (layers, C, head size, vocab, decay / a / v / gate low-rank dims, positions)
CASES = [
    (2, 64, 16, 97, 16, 16, 8, 32, 40),
    (3, 128, 64, 301, 32, 32, 16, 64, 24),
    (2, 64, 32, 50, 16, 16, 8, 16, 1000),
]
NORM_EPS = 1e-5


def fla_state_dict(sd, layers, tied=False):
    """BlinkDL's names → fla's (RWKV7ForCausalLM: model.*, lm_head)."""
    out = {"model.embeddings.weight": sd["emb.weight"],
           "model.layers.0.pre_norm.weight": sd["blocks.0.ln0.weight"],
           "model.layers.0.pre_norm.bias": sd["blocks.0.ln0.bias"],
           "model.norm.weight": sd["ln_out.weight"], "model.norm.bias": sd["ln_out.bias"]}
    if not tied:
        out["lm_head.weight"] = sd["head.weight"]
    for i in range(layers):
        b, att, ffn = f"blocks.{i}.", f"blocks.{i}.att.", f"blocks.{i}.ffn."
        layer = f"model.layers.{i}."
        attn = layer + "attn."
        for ln, name in (("ln1", "attn_norm"), ("ln2", "ffn_norm")):
            out[layer + name + ".weight"], out[layer + name + ".bias"] = sd[b + ln + ".weight"], sd[b + ln + ".bias"]
        for m in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            out[attn + m] = sd[att + m]
        out[attn + "k_k"], out[attn + "k_a"] = sd[att + "k_k"].reshape(-1), sd[att + "k_a"].reshape(-1)
        out[attn + "r_k"] = sd[att + "r_k"]
        for ours, theirs in (("receptance", "r_proj"), ("key", "k_proj"), ("value", "v_proj"),
                             ("output", "o_proj")):
            out[attn + theirs + ".weight"] = sd[att + ours + ".weight"]
        for letter in ("w", "a", "g") + (("v",) if i > 0 else ()):
            lora = attn + letter + "_lora.lora."
            out[lora + "0.weight"] = sd[att + letter + "1"].T.contiguous()
            out[lora + "2.weight"] = sd[att + letter + "2"].T.contiguous()
            if letter != "g":
                out[lora + "2.bias"] = sd[att + letter + "0"].reshape(-1)
        out[attn + "g_norm.weight"], out[attn + "g_norm.bias"] = sd[att + "ln_x.weight"], sd[att + "ln_x.bias"]
        out[layer + "ffn.x_k"] = sd[ffn + "x_k"].reshape(-1)
        out[layer + "ffn.key.weight"], out[layer + "ffn.value.weight"] = sd[ffn + "key.weight"], sd[ffn + "value.weight"]
    return out


def fla_config(layers, c, n, vocab, d_w, d_a, d_v, d_g, **extra):
    """config.json as RWKV7Config.save_pretrained writes it (bookkeeping keys included)."""
    return {"model_type": "rwkv7", "architectures": ["RWKV7ForCausalLM"], "attn": None,
            "attn_mode": "chunk", "hidden_size": c, "num_hidden_layers": layers, "head_dim": n,
            "num_heads": None, "decay_low_rank_dim": d_w, "a_low_rank_dim": d_a,
            "v_low_rank_dim": d_v, "gate_low_rank_dim": d_g, "hidden_act": "sqrelu",
            "hidden_ratio": 4, "intermediate_size": None, "max_position_embeddings": 2048,
            "norm_first": True, "norm_bias": True, "norm_eps": NORM_EPS, "vocab_size": vocab,
            "tie_word_embeddings": False, "fuse_norm": True, "fuse_cross_entropy": True,
            "use_cache": True, "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": None, "torch_dtype": "bfloat16", "transformers_version": "4.48.0",
            **extra}


def reference_logits(sd, xs, head_size):
    """The reference's float64 logits (B, N, V) with fla's constants, as float32."""
    f32 = lambda x: float(np.float32(x))  # noqa: E731
    with mock.patch.object(blinkdl, "DECAY_SCALE", f32(math.exp(-0.5))), \
            mock.patch.object(blinkdl, "GROUP_NORM_EPS", f32(head_size * NORM_EPS)):
        model = blinkdl.Rwkv7(sd)
        return np.stack([model.forward(row.tolist())[0].numpy() for row in xs])


def write(tmp_path, state, config, dtype):
    st, cfg = tmp_path / "model.safetensors", tmp_path / "config.json"
    safetensors.write(str(st), {k: v.to(dtype).contiguous() for k, v in state.items()})
    cfg.write_text(json.dumps(config))
    return st, cfg


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_fla_checkpoint(case, dtype, tmp_path):
    layers, c, n, vocab, d_w, d_a, d_v, d_g, positions = case
    sd = random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed=layers * 1000 + c + 1)
    sd = {k: v.to(dtype) for k, v in sd.items()}  # the values the file holds
    st, cfg = write(tmp_path, fla_state_dict(sd, layers), fla_config(layers, c, n, vocab, d_w, d_a, d_v, d_g),
                    dtype)
    path = tmp_path / "model.recur"
    rc, err = recur_convert(st, "--config", cfg, "-o", path)
    assert rc == 0, err
    batch = 2 if positions > 100 else 3
    xs = tokens(positions + 1, batch, positions, vocab)
    check_forms(path, xs, reference_logits(sd, xs, n))


def test_fla_defaults_and_tied_head(tmp_path):
    """Widths left null take fla's formulas, the FFN width hidden_size·hidden_ratio rounded up
    to 32, and a tied head reads the embedding."""
    layers, c, n, vocab = 2, 64, 32, 40
    w = lambda f: max(32, int(round(f / 32) * 32))  # noqa: E731
    d_w, d_v, d_g = w(2.5 * math.sqrt(c) * n / 64), w(1.7 * math.sqrt(c) * n / 64), w(5 * math.sqrt(c))
    sd = random_state_dict(layers, c, n, vocab, d_w, d_w, d_v, d_g, seed=9)
    sd["head.weight"] = sd["emb.weight"].clone()
    config = fla_config(layers, c, n, vocab, None, None, None, None, tie_word_embeddings=True)
    st, cfg = write(tmp_path, fla_state_dict(sd, layers, tied=True), config, torch.float32)
    path = tmp_path / "model.recur"
    rc, err = recur_convert(st, "--config", cfg, "-o", path)
    assert rc == 0, err
    xs = tokens(3, 2, 30, vocab)
    check_forms(path, xs, reference_logits(sd, xs, n))


def test_fla_refusals(tmp_path):
    base = fla_config(2, 64, 16, 97, 16, 16, 8, 32)
    cases = [
        (dict(base, attn={"layers": [1], "num_heads": 4}), '"attn" must be null: hybrid models'),
        (dict(base, hidden_act="gelu"), '"hidden_act" must be "sqrelu"'),
        (dict(base, value_dim=[64, 32]), '"value_dim" must equal hidden_size'),
        (dict(base, head_dim=48), '"head_dim" (48) must divide hidden_size (64)'),
        (dict(base, head_dim=None, num_heads=48), '"num_heads" (48) must divide hidden_size (64)'),
        (dict(base, architectures=["RWKV7Model"]), '"architectures" must be ["RWKV7ForCausalLM"]'),
        (dict(base, sliding_window=4), '"sliding_window" is not a RWKV7Config key this converter knows'),
    ]
    for config, message in cases:
        err = refusal(config, tmp_path)
        assert message in err, (message, err)
