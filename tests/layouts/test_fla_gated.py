"""fla-hub's Gated DeltaNet and GLA (flash-linear-attention's `GatedDeltaNetForCausalLM` and
`GLAForCausalLM`, layout "fla"): the state dict and config.json as fla's Hugging Face models save them, converted with
one command, against the reference's float64 model (recur_ref) run with fla's names mapped
here. fla's model classes need triton (not in the tests' environment), so the weights are
made here with the exact names and shapes of fla's modules; the reference's layer itself is
held to fla's layer as fla computes it: its short convolution as nn.Conv1d's, its state update
by fla's own naive recurrence (fla_naive), on the same weights."""
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fla_naive import naive_recurrent_gated_delta_rule, naive_recurrent_gla
from layout_harness import recur_convert, refusal, tokens
from recur_ref import safetensors
from recur_ref.mixers.registry import build_mixer
from recur_ref.model import RecurModel
from test_rwkv import check_forms


def uniform(gen, bound, *shape):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound


def conv_state(gen, K, widths, prefix):
    """nn.Conv1d(C, C, K, groups=C) weights [C, 1, K] at its default range, by fla's names."""
    return {prefix + name + ".weight": uniform(gen, K ** -0.5, c, 1, K) for name, c in widths}


# ----------------------------------------------------------------------------------------
# Gated DeltaNet
# ----------------------------------------------------------------------------------------

def gdn_widths(cfg):
    """(H, HV, dk, dv, K) of a GatedDeltaNetConfig dict, as fla's layer derives them."""
    H, dk = cfg["num_heads"], cfg["head_dim"]
    HV = cfg.get("num_v_heads") or H
    K = cfg.get("conv_size", 4) if cfg.get("use_short_conv", True) else 0
    return H, HV, dk, int(dk * cfg.get("expand_v", 2.0)), K


def gated_mlp_width(cfg):
    """GatedMLP's intermediate_size."""
    if cfg.get("intermediate_size") is not None:
        return cfg["intermediate_size"]
    f = int(cfg["hidden_size"] * (cfg.get("hidden_ratio") or 4) * 2 / 3)
    return 256 * ((f + 256 - 1) // 256)


def gdn_attn_state(cfg, gen, prefix):
    """A GatedDeltaNet layer's parameters with fla's names and shapes (nn.Linear's and
    nn.Conv1d's default ranges, fla's A_log and dt_bias initialisation)."""
    d = cfg["hidden_size"]
    H, HV, dk, dv, K = gdn_widths(cfg)
    Q, V = H * dk, HV * dv
    sd = {"q_proj.weight": uniform(gen, d ** -0.5, Q, d), "k_proj.weight": uniform(gen, d ** -0.5, Q, d),
          "v_proj.weight": uniform(gen, d ** -0.5, V, d), "a_proj.weight": uniform(gen, d ** -0.5, HV, d),
          "b_proj.weight": uniform(gen, d ** -0.5, HV, d), "o_proj.weight": uniform(gen, V ** -0.5, d, V),
          "A_log": torch.log(1 + 15 * torch.rand(HV, generator=gen, dtype=torch.float64))}
    dt = torch.exp(torch.rand(HV, generator=gen, dtype=torch.float64) * (math.log(0.1) - math.log(0.001))
                   + math.log(0.001))
    sd["dt_bias"] = dt + torch.log(-torch.expm1(-dt))
    if K:
        sd.update(conv_state(gen, K, (("q_conv1d", Q), ("k_conv1d", Q), ("v_conv1d", V)), ""))
    if cfg.get("use_gate", True):
        sd["g_proj.weight"] = uniform(gen, d ** -0.5, V, d)
    sd["o_norm.weight"] = 0.5 + torch.rand(dv, generator=gen, dtype=torch.float64)
    return {prefix + k: v for k, v in sd.items()}


def model_state_dict(cfg, seed, attn_state):
    """GatedDeltaNetForCausalLM's or GLAForCausalLM's state dict (model.*, lm_head unless
    tied), float64; attn_state(cfg, gen, prefix) makes a layer's attn tensors."""
    gen = torch.Generator().manual_seed(seed)
    d, vocab, f = cfg["hidden_size"], cfg["vocab_size"], gated_mlp_width(cfg)
    norm = lambda: 1 + 0.2 * torch.randn(d, generator=gen, dtype=torch.float64)  # noqa: E731
    sd = {"model.embeddings.weight": torch.randn(vocab, d, generator=gen, dtype=torch.float64),
          "model.norm.weight": norm()}
    for i in range(cfg["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        sd[layer + "attn_norm.weight"], sd[layer + "mlp_norm.weight"] = norm(), norm()
        sd.update(attn_state(cfg, gen, layer + "attn."))
        sd[layer + "mlp.gate_proj.weight"] = uniform(gen, d ** -0.5, f, d)
        sd[layer + "mlp.up_proj.weight"] = uniform(gen, d ** -0.5, f, d)
        sd[layer + "mlp.down_proj.weight"] = uniform(gen, f ** -0.5, d, f)
    if not cfg.get("tie_word_embeddings", False):
        sd["lm_head.weight"] = uniform(gen, d ** -0.5, vocab, d)
    return sd


def gdn_config(layers, d, heads, head_dim, vocab, **extra):
    """config.json as GatedDeltaNetConfig.save_pretrained writes it (bookkeeping keys too)."""
    return {"model_type": "gated_deltanet", "architectures": ["GatedDeltaNetForCausalLM"],
            "attn": None, "attn_mode": "chunk", "hidden_size": d, "expand_v": 2.0, "use_gate": True,
            "use_short_conv": True, "allow_neg_eigval": False, "conv_size": 4, "head_dim": head_dim,
            "num_heads": heads, "num_v_heads": None, "max_position_embeddings": 2048,
            "hidden_ratio": 4, "intermediate_size": None, "hidden_act": "swish",
            "num_hidden_layers": layers, "norm_eps": 1e-6, "use_cache": True, "pad_token_id": None,
            "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
            "initializer_range": 0.02, "fuse_norm": True, "fuse_swiglu": True,
            "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False, "use_l2warp": False,
            "vocab_size": vocab, "attnres_block_size": None, "torch_dtype": "bfloat16",
            "transformers_version": "4.53.0", **extra}


def gdn_mixer_config(cfg):
    """The reference's gated_deltanet mixer config for fla's layer config."""
    H, HV, dk, dv, K = gdn_widths(cfg)
    return {"type": "gated_deltanet", "heads": H, "v_heads": HV, "head_k_dim": dk, "head_v_dim": dv,
            "conv_size": K, "gate": cfg.get("use_gate", True), "norm_eps": cfg.get("norm_eps", 1e-6),
            "beta_scale": 2.0 if cfg.get("allow_neg_eigval", False) else 1.0}


# fla's GatedDeltaNet names → the reference's (recur's) under blocks.<i>.mixer.
GDN_NAMES = {"q_proj.weight": "query.weight", "k_proj.weight": "key.weight", "v_proj.weight": "value.weight",
             "a_proj.weight": "decay.weight", "b_proj.weight": "beta.weight", "g_proj.weight": "gate.weight",
             "o_proj.weight": "out.weight", "A_log": "a_log", "dt_bias": "dt_bias",
             "o_norm.weight": "norm_weight", "q_conv1d.weight": "query_conv",
             "k_conv1d.weight": "key_conv", "v_conv1d.weight": "value_conv"}


def mixer_from_fla(attn_sd, names, prefix, dv):
    """A mixer's reference tensors from fla's layer tensors (convolutions [C, 1, K] → [C, K]);
    an output norm without a weight (GLA's elementwise_affine false) is ones (dv)."""
    out = {prefix + "norm_weight": torch.ones(dv, dtype=torch.float64)}
    for theirs, ours in names.items():
        if theirs in attn_sd:
            t = attn_sd[theirs]
            out[prefix + ours] = t[:, 0] if t.dim() == 3 else t
    return out


def reference_model(cfg, sd, mixer_cfg, names):
    """The reference's float64 model with fla's weights: RMSNorm pre-norm blocks, the mixer,
    GatedMLP as a silu GLU (linear1 = [gate | up]), the final RMSNorm and the head."""
    d, vocab, f = cfg["hidden_size"], cfg["vocab_size"], gated_mlp_width(cfg)
    config = {"layout": "recur", "d_model": d, "n_layers": cfg["num_hidden_layers"],
              "norm_placement": "pre", "norm": {"type": "rms_norm"}, "layer_norm_eps": cfg["norm_eps"],
              "input": {"kind": "tokens", "vocab_size": vocab}, "max_positions": 0, "mixer": mixer_cfg,
              "ffn": {"d_ff": f, "activation": "silu", "glu": True}, "final_norm": True,
              "head": {"out": vocab, "activation": "none"}}
    model = RecurModel(config).double()
    ours = {"input.embedding": sd["model.embeddings.weight"], "final_norm.weight": sd["model.norm.weight"],
            "head.weight": sd.get("lm_head.weight", sd["model.embeddings.weight"]),
            "head.bias": torch.zeros(vocab, dtype=torch.float64)}
    for i in range(cfg["num_hidden_layers"]):
        layer, block = f"model.layers.{i}.", f"blocks.{i}."
        attn = {k[len(layer + "attn."):]: v for k, v in sd.items() if k.startswith(layer + "attn.")}
        ours.update(mixer_from_fla(attn, names, block + "mixer.", mixer_cfg["head_v_dim"]))
        ours[block + "norm1.weight"], ours[block + "norm2.weight"] = sd[layer + "attn_norm.weight"], \
            sd[layer + "mlp_norm.weight"]
        ours[block + "ffn.linear1.weight"] = torch.cat([sd[layer + "mlp.gate_proj.weight"],
                                                        sd[layer + "mlp.up_proj.weight"]])
        ours[block + "ffn.linear1.bias"] = torch.zeros(2 * f, dtype=torch.float64)
        ours[block + "ffn.linear2.weight"] = sd[layer + "mlp.down_proj.weight"]
        ours[block + "ffn.linear2.bias"] = torch.zeros(d, dtype=torch.float64)
    model.load_state_dict({k: v.double() for k, v in ours.items()})
    return model


def reference_logits(model, xs):
    with torch.no_grad():
        return np.stack([model(torch.as_tensor(row, dtype=torch.long)).numpy() for row in xs])


def short_conv_fla(x, weight):
    """fla's ShortConvolution without its kernels: nn.Conv1d(C, C, K, groups=C,
    padding=K−1) over (B, T, C), the first T outputs, then silu."""
    T = x.shape[1]
    return F.silu(F.conv1d(x.transpose(1, 2), weight, padding=weight.shape[-1] - 1,
                           groups=weight.shape[0])[..., :T].transpose(1, 2))


def rms_norm_gated_fla(o, g, weight, eps):
    """FusedRMSNormGated (swish) as its kernel computes it; g None: fla's RMSNorm."""
    y = o / torch.sqrt((o * o).mean(-1, keepdim=True) + eps) * weight
    return y if g is None else y * g * torch.sigmoid(g)


def gdn_layer_fla(cfg, sd, x):
    """fla's GatedDeltaNet.forward on x (B, T, d), the state update by fla's
    naive_recurrent_gated_delta_rule (which runs in float32)."""
    B, T, _ = x.shape
    H, HV, dk, dv, K = gdn_widths(cfg)
    q, k, v = (x @ sd[n + "_proj.weight"].T for n in "qkv")
    if K:
        q, k, v = (short_conv_fla(t, sd[n + "_conv1d.weight"]) for t, n in zip((q, k, v), "qkv"))
    else:
        q, k, v = F.silu(q), F.silu(k), F.silu(v)
    l2 = lambda t: t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)  # noqa: E731 (the kernel's)
    # Value head j reads key head j // (HV/H) (the kernel's i_h = i_hv // (HV // H)).
    q = l2(q.view(B, T, H, dk)).repeat_interleave(HV // H, 2)
    k = l2(k.view(B, T, H, dk)).repeat_interleave(HV // H, 2)
    beta = torch.sigmoid(x @ sd["b_proj.weight"].T) * (2 if cfg.get("allow_neg_eigval") else 1)
    g = -torch.exp(sd["A_log"]) * F.softplus(x @ sd["a_proj.weight"].T + sd["dt_bias"])
    o, _ = naive_recurrent_gated_delta_rule(q, k, v.view(B, T, HV, dv), beta, g, scale=dk ** -0.5)
    gate = (x @ sd["g_proj.weight"].T).view(B, T, HV, dv) if cfg.get("use_gate", True) else None
    o = rms_norm_gated_fla(o.double(), gate, sd["o_norm.weight"], cfg["norm_eps"])
    return o.reshape(B, T, HV * dv) @ sd["o_proj.weight"].T


GDN_LAYERS = [
    dict(hidden_size=64, num_heads=2, head_dim=16, num_v_heads=4, norm_eps=1e-6),
    dict(hidden_size=48, num_heads=3, head_dim=8, expand_v=1.5, use_gate=False, allow_neg_eigval=True,
         conv_size=3, norm_eps=1e-5),
    dict(hidden_size=32, num_heads=2, head_dim=8, use_short_conv=False, norm_eps=1e-6),
]


def check_layer_is_fla(layer, attn_state, mixer_config, names, layer_fla):
    """The reference's mixer for fla's layer config `layer` equals fla's layer (layer_fla) on
    the same weights, in one pass and resumed from its state."""
    gen = torch.Generator().manual_seed(5)
    sd = attn_state(layer, gen, "")
    mixer = build_mixer(mixer_config(layer), layer["hidden_size"]).double()
    mixer.load_state_dict(mixer_from_fla(sd, names, "", mixer.norm_weight.shape[0]))
    x = torch.randn(2, 50, layer["hidden_size"], generator=gen, dtype=torch.float64)
    want = layer_fla(layer, sd, x)
    got = mixer(x)
    state = mixer.initial_state(2)
    first, state = mixer.prefill(x[:, :23], state)
    rest, _ = mixer.prefill(x[:, 23:], state)
    scale = want.abs().max().item()
    for what, y in (("one pass", got), ("resumed", torch.cat([first, rest], 1))):
        err = (y - want).abs().max().item()
        # fla's naive recurrences run in float32.
        assert err <= 1e-5 * max(scale, 1.0), (what, err, scale)


@pytest.mark.parametrize("layer", GDN_LAYERS)
def test_reference_gdn_layer_is_fla(layer):
    """fla's GatedDeltaNet: its convolution as nn.Conv1d's, its recurrence fla's naive one."""
    check_layer_is_fla(layer, gdn_attn_state, gdn_mixer_config, GDN_NAMES, gdn_layer_fla)


# (config overrides, positions, file dtype)
GDN_CASES = [
    (dict(layers=2, d=64, heads=2, head_dim=16, vocab=97, num_v_heads=4), 40, torch.float32),
    (dict(layers=2, d=64, heads=2, head_dim=16, vocab=97, num_v_heads=4), 24, torch.bfloat16),
    (dict(layers=3, d=48, heads=3, head_dim=8, vocab=61, expand_v=1.5, use_gate=False,
          allow_neg_eigval=True, conv_size=3, tie_word_embeddings=True, intermediate_size=80,
          norm_eps=1e-5), 30, torch.float32),
    (dict(layers=2, d=32, heads=2, head_dim=8, vocab=50, num_v_heads=2, hidden_ratio=2,
          use_short_conv=False), 30, torch.float32),
    (dict(layers=2, d=32, heads=1, head_dim=16, vocab=50, num_v_heads=2, expand_v=1.0), 1000,
     torch.float32),
]


def write(tmp_path, state, config, dtype):
    st, cfg = tmp_path / "model.safetensors", tmp_path / "config.json"
    safetensors.write(str(st), {k: v.to(dtype).contiguous() for k, v in state.items()})
    cfg.write_text(json.dumps(config))
    return st, cfg


def convert_and_check(tmp_path, cfg, sd, mixer_cfg, names, positions, dtype):
    """Converts fla's files with one command; recur's logits against the reference's float64
    model in every form (check_forms)."""
    sd = {k: v.to(dtype).double() for k, v in sd.items()}   # the values the file holds
    st, cfg_path = write(tmp_path, sd, cfg, dtype)
    path = tmp_path / "model.recur"
    rc, err = recur_convert(st, "--config", cfg_path, "-o", path)
    assert rc == 0, err
    batch = 2 if positions > 100 else 3
    xs = tokens(positions + 7, batch, positions, cfg["vocab_size"])
    check_forms(path, xs, reference_logits(reference_model(cfg, sd, mixer_cfg, names), xs))


@pytest.mark.parametrize("case", GDN_CASES)
def test_fla_gated_deltanet(case, tmp_path):
    shape, positions, dtype = case
    shape = dict(shape)
    cfg = gdn_config(shape.pop("layers"), shape.pop("d"), shape.pop("heads"), shape.pop("head_dim"),
                     shape.pop("vocab"), **shape)
    sd = model_state_dict(cfg, positions + cfg["hidden_size"], gdn_attn_state)
    convert_and_check(tmp_path, cfg, sd, gdn_mixer_config(cfg), GDN_NAMES, positions, dtype)


def test_fla_gated_deltanet_refusals(tmp_path):
    base = gdn_config(2, 64, 2, 16, 97)
    cases = [
        (dict(base, attn={"layers": [1], "num_heads": 4}), '"attn" must be null: hybrid models'),
        (dict(base, attnres_block_size=2), '"attnres_block_size" must be null'),
        (dict(base, hidden_act="powlu"), '"hidden_act" must be "swish"'),
        (dict(base, num_v_heads=3), '"num_v_heads" (3) must be a multiple of num_heads (2)'),
        (dict(base, expand_v=1.03), '"expand_v" times head_dim (16) must be a whole number'),
        (dict(base, architectures=["GatedDeltaNetModel"]),
         '"architectures" must be ["GatedDeltaNetForCausalLM"]'),
        (dict(base, conv_bias=True), '"conv_bias" is not a GatedDeltaNetConfig key this converter knows'),
    ]
    for config, message in cases:
        err = refusal(config, tmp_path)
        assert message in err, (message, err)


# ----------------------------------------------------------------------------------------
# GLA
# ----------------------------------------------------------------------------------------

def gla_widths(cfg):
    """(H, KV, dk, dv, K) of a GLAConfig dict, as fla's layer derives them."""
    d, H = cfg["hidden_size"], cfg["num_heads"]
    KV = cfg.get("num_kv_heads") or H
    K = cfg.get("conv_size", 4) if cfg.get("use_short_conv", False) else 0
    return H, KV, int(d * cfg.get("expand_k", 0.5)) // H, int(d * cfg.get("expand_v", 1.0)) // H, K


def gla_norm_name(cfg):
    """The output norm's module: fused with the swish gate, plain, or without a weight (None)."""
    if cfg.get("elementwise_affine", True) is not True:
        return None
    fused = cfg.get("fuse_norm", True) and cfg.get("use_output_gate", True)
    return "g_norm_swish_gate" if fused else "g_norm"


def gla_attn_state(cfg, gen, prefix):
    """A GatedLinearAttention layer's parameters with fla's names and shapes (gate_low_rank_dim
    16, the layer's default, which GLAForCausalLM keeps)."""
    d = cfg["hidden_size"]
    H, KV, dk, dv, K = gla_widths(cfg)
    Q, C, U, O = H * dk, KV * dk, KV * dv, H * dv
    sd = {"q_proj.weight": uniform(gen, d ** -0.5, Q, d), "k_proj.weight": uniform(gen, d ** -0.5, C, d),
          "v_proj.weight": uniform(gen, d ** -0.5, U, d), "gk_proj.0.weight": uniform(gen, d ** -0.5, 16, d),
          "gk_proj.1.weight": uniform(gen, 0.25, C, 16),
          # Decays e^α from about 0.87 to nearly 1, as a trained gate's.
          "gk_proj.1.bias": -2 + 6 * torch.rand(C, generator=gen, dtype=torch.float64),
          "o_proj.weight": uniform(gen, O ** -0.5, d, O)}
    if cfg.get("use_output_gate", True):
        sd["g_proj.weight"] = uniform(gen, d ** -0.5, O, d)
    if K:
        sd.update(conv_state(gen, K, (("q_conv1d", Q), ("k_conv1d", C), ("v_conv1d", U)), ""))
    if gla_norm_name(cfg):
        sd[gla_norm_name(cfg) + ".weight"] = 0.5 + torch.rand(dv, generator=gen, dtype=torch.float64)
    return {prefix + k: v for k, v in sd.items()}


def gla_config(layers, d, heads, vocab, **extra):
    """config.json as GLAConfig.save_pretrained writes it (bookkeeping keys too)."""
    return {"model_type": "gla", "architectures": ["GLAForCausalLM"], "attn": None, "attn_mode": "chunk",
            "hidden_size": d, "expand_k": 0.5, "expand_v": 1.0, "hidden_ratio": 4, "intermediate_size": None,
            "num_hidden_layers": layers, "num_heads": heads, "num_kv_heads": None, "feature_map": None,
            "use_short_conv": False, "conv_size": 4, "use_output_gate": True, "clamp_min": None,
            "hidden_act": "swish", "max_position_embeddings": 2048, "elementwise_affine": True,
            "norm_eps": 1e-6, "use_gk": True, "use_gv": False, "use_cache": True, "pad_token_id": None,
            "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "initializer_range": 0.02,
            "fuse_norm": True, "fuse_swiglu": True, "fuse_cross_entropy": True,
            "fuse_linear_cross_entropy": False, "use_l2warp": False, "vocab_size": vocab,
            "attnres_block_size": None, "torch_dtype": "bfloat16", "transformers_version": "4.53.0", **extra}


def gla_mixer_config(cfg):
    """The reference's gla mixer config for fla's layer config."""
    H, KV, dk, dv, K = gla_widths(cfg)
    out = {"type": "gla", "heads": H, "kv_heads": KV, "head_k_dim": dk, "head_v_dim": dv, "gate_rank": 16,
           "conv_size": K, "gate": cfg.get("use_output_gate", True), "norm_eps": cfg.get("norm_eps", 1e-6)}
    if cfg.get("clamp_min") is not None:
        out["clamp_min"] = cfg["clamp_min"]
    return out


# fla's GatedLinearAttention names → the reference's under blocks.<i>.mixer.
GLA_NAMES = {"q_proj.weight": "query.weight", "k_proj.weight": "key.weight", "v_proj.weight": "value.weight",
             "gk_proj.0.weight": "gate_down.weight", "gk_proj.1.weight": "gate_up.weight",
             "gk_proj.1.bias": "gate_up.bias", "g_proj.weight": "gate.weight", "o_proj.weight": "out.weight",
             "g_norm_swish_gate.weight": "norm_weight", "g_norm.weight": "norm_weight",
             "q_conv1d.weight": "query_conv", "k_conv1d.weight": "key_conv", "v_conv1d.weight": "value_conv"}


def gla_layer_fla(cfg, sd, x):
    """fla's GatedLinearAttention.forward on x (B, T, d), the state update by fla's
    naive_recurrent_gla (which runs in float32)."""
    B, T, _ = x.shape
    H, KV, dk, dv, K = gla_widths(cfg)
    q, k, v = (x @ sd[n + "_proj.weight"].T for n in "qkv")
    if K:
        q, k, v = (short_conv_fla(t, sd[n + "_conv1d.weight"]) for t, n in zip((q, k, v), "qkv"))
    gk = (x @ sd["gk_proj.0.weight"].T) @ sd["gk_proj.1.weight"].T + sd["gk_proj.1.bias"]
    # repeat(x, '... (h d) -> ... (h g) d', g=H/KV): query head h reads head h // (H/KV).
    q = q.view(B, T, H, dk)
    k, gk = (t.view(B, T, KV, dk).repeat_interleave(H // KV, 2) for t in (k, gk))
    v = v.view(B, T, KV, dv).repeat_interleave(H // KV, 2)
    gk = F.logsigmoid(gk) / 16
    if cfg.get("clamp_min") is not None:
        gk = torch.clamp_min(gk, cfg["clamp_min"])
    o, _ = naive_recurrent_gla(q, k, v, gk)
    o = o.double()
    weight = sd[gla_norm_name(cfg) + ".weight"] if gla_norm_name(cfg) else torch.ones(dv, dtype=torch.float64)
    if cfg.get("use_output_gate", True):
        g = x @ sd["g_proj.weight"].T
        if gla_norm_name(cfg) == "g_norm_swish_gate":
            o = rms_norm_gated_fla(o, g.view(B, T, H, dv), weight, cfg["norm_eps"]).reshape(B, T, H * dv)
        else:   # g_norm, then o * swish(g)
            o = rms_norm_gated_fla(o, None, weight, cfg["norm_eps"]).reshape(B, T, H * dv) * F.silu(g)
    else:
        o = rms_norm_gated_fla(o, None, weight, cfg["norm_eps"]).reshape(B, T, H * dv)
    return o @ sd["o_proj.weight"].T


GLA_LAYERS = [
    dict(hidden_size=64, num_heads=4, norm_eps=1e-6),
    dict(hidden_size=48, num_heads=4, num_kv_heads=2, use_short_conv=True, conv_size=3, clamp_min=-0.05,
         expand_v=2.0, norm_eps=1e-5),
    dict(hidden_size=32, num_heads=2, use_output_gate=False, elementwise_affine=False, norm_eps=1e-6),
    dict(hidden_size=32, num_heads=2, fuse_norm=False, norm_eps=1e-6),
]


@pytest.mark.parametrize("layer", GLA_LAYERS)
def test_reference_gla_layer_is_fla(layer):
    """fla's GatedLinearAttention: its recurrence fla's naive one, grouped heads repeated as
    fla repeats them."""
    check_layer_is_fla(layer, gla_attn_state, gla_mixer_config, GLA_NAMES, gla_layer_fla)


# (config overrides, positions, file dtype)
GLA_CASES = [
    (dict(layers=2, d=64, heads=4, vocab=97), 40, torch.float32),
    (dict(layers=2, d=64, heads=4, vocab=97, num_kv_heads=2, use_short_conv=True, clamp_min=-0.05),
     30, torch.bfloat16),
    (dict(layers=3, d=48, heads=2, vocab=61, use_output_gate=False, elementwise_affine=False,
          tie_word_embeddings=True, expand_k=1.0, intermediate_size=80, norm_eps=1e-5), 30, torch.float32),
    (dict(layers=2, d=32, heads=4, vocab=50, num_kv_heads=1, use_short_conv=True, conv_size=2,
          fuse_norm=False), 1000, torch.float32),
]


@pytest.mark.parametrize("case", GLA_CASES)
def test_fla_gla(case, tmp_path):
    shape, positions, dtype = case
    shape = dict(shape)
    cfg = gla_config(shape.pop("layers"), shape.pop("d"), shape.pop("heads"), shape.pop("vocab"), **shape)
    sd = model_state_dict(cfg, positions + cfg["hidden_size"], gla_attn_state)
    convert_and_check(tmp_path, cfg, sd, gla_mixer_config(cfg), GLA_NAMES, positions, dtype)


def test_fla_gla_refusals(tmp_path):
    base = gla_config(2, 64, 4, 97)
    cases = [
        (dict(base, feature_map="relu"), '"feature_map" must be null'),
        (dict(base, attn={"layers": [1], "num_heads": 4}), '"attn" must be null: hybrid models'),
        (dict(base, hidden_act="gelu"), '"hidden_act" must be "swish"'),
        (dict(base, num_kv_heads=3), '"num_kv_heads" (3) must divide num_heads (4)'),
        (dict(base, expand_k=0.1), '"expand_k" times hidden_size (6) must be a positive multiple of num_heads'),
        (dict(base, clamp_min=0.5), '"clamp_min" must be a number in'),
        (dict(base, architectures=["GLAModel"]), '"architectures" must be ["GLAForCausalLM"]'),
        (dict(base, gate_low_rank_dim=8), '"gate_low_rank_dim" is not a GLAConfig key this converter knows'),
    ]
    for config, message in cases:
        err = refusal(config, tmp_path)
        assert message in err, (message, err)
