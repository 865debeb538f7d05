"""Mamba2: the reference's mixer (models/reference/recur_ref/mixers/mamba2.py) against
transformers' Mamba2Mixer, and the layouts "hf-mamba2" (transformers' Mamba2ForCausalLM, its
save_pretrained files) and "state-spaces" (mamba_ssm's MambaLMHeadModel: its config.json and
pytorch_model.bin, written here from the same weights under mamba_ssm's names) converted with
one recur-convert command each and run by recur against the model's logits.

transformers 4.47.1 has no CUDA kernels on the CPU: its `torch_forward` is the chunked SSD in
PyTorch, which differs from mamba_ssm's kernels (the model's real math, which recur computes) in
three ways: it clamps Δ below at time_step_min (an initialisation setting; mamba_ssm clamps to
dt_limit, by default not at all), its chunked form tiles B and C over the heads with repeat
(head h reads group h mod G; mamba_ssm's head h reads group h // (H/G)), and its gated RMS norm
runs over all d_inner features (mamba_ssm's over each group's d_inner/G). So: the clamp is set
to 0 on the modules (time_step_min = 0, as the config's dt limit says); with one group the
reference is held to torch_forward itself; with groups, to torch_forward's one-token decode path
(which groups heads as mamba_ssm does) with mamba_ssm's grouped norm (rms_norm_ref of
mamba_ssm/ops/triton/layernorm_gated.py, transcribed below) in place of transformers' norm. The
models' logits ("want") are transformers' Mamba2ForCausalLM with each mixer's forward replaced by
the reference's, in float64. The state-spaces files are also held to mamba_ssm's own math: its
MambaLMHeadModel stepped as its generation steps it, with mamba_ssm 2.2.4's references of its
kernels (selective_state_update_ref, rms_norm_ref; read from its files by mamba_ssm_ref.py)."""
import json
import math

import gguf
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import Mamba2Config, Mamba2ForCausalLM
from transformers.models.mamba2.modeling_mamba2 import Mamba2Cache

from layout_harness import assert_close, check_forms, recur_convert, refusal, tokens
from mamba_ssm_ref import rms_norm_ref, selective_state_update_ref
from recur_ref import gguf_mamba2
from recur_ref.mixers import build_mixer

import recur

# (name, hidden, heads, head_dim, state, groups, kernel, layers, vocab, positions, batch,
#  tied, bias, conv_bias, time_step_limit)
CASES = [
    ("long", 32, 4, 16, 16, 1, 4, 2, 67, 1000, 2, False, False, True, None),
    ("grouped", 24, 6, 8, 8, 3, 4, 2, 56, 90, 3, True, False, True, None),
    ("odd", 15, 5, 3, 7, 5, 3, 3, 41, 70, 3, False, True, False, (0.02, 1.5)),
]
IDS = [c[0] for c in CASES]


def make_model(case, seed=0):
    """transformers' Mamba2ForCausalLM of `case`, float64, every parameter moved off its
    initialisation (norm weights, D, A_log, biases), the clamp at time_step_min off."""
    (_, hidden, heads, head_dim, state, groups, kernel, layers, vocab, _, _, tied, bias, conv_bias,
     limit) = case
    torch.manual_seed(seed)
    cfg = Mamba2Config(hidden_size=hidden, num_heads=heads, head_dim=head_dim, expand=heads * head_dim // hidden,
                       state_size=state, n_groups=groups, conv_kernel=kernel, num_hidden_layers=layers,
                       vocab_size=vocab, tie_word_embeddings=tied, use_bias=bias, use_conv_bias=conv_bias,
                       chunk_size=64, **({"time_step_limit": limit} if limit else {}))
    model = Mamba2ForCausalLM(cfg).double().eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("norm_f.weight") or name.endswith(".D"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape, dtype=p.dtype).uniform_(1, 16, generator=g)))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype) if "dt_bias" not in name
                        else p + 0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            elif "embeddings" in name or "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    for layer in model.backbone.layers:
        layer.mixer.time_step_min = 0.0
    return model


def reference_mixer(mixer, limit):
    """The reference's Mamba2 with transformers' mixer's weights (A = −exp(A_log))."""
    cfg = {"type": "mamba2", "heads": mixer.num_heads, "head_dim": mixer.head_dim,
           "state_size": mixer.ssm_state_size, "groups": mixer.n_groups,
           "conv_kernel": mixer.conv_kernel_size, "norm_eps": mixer.layer_norm_epsilon,
           "bias": mixer.use_bias}
    if limit:
        cfg.update(dt_min=limit[0], dt_max=limit[1])
    ref = build_mixer(cfg, mixer.hidden_size).double()
    with torch.no_grad():
        ref.in_proj.weight.copy_(mixer.in_proj.weight)
        ref.out_proj.weight.copy_(mixer.out_proj.weight)
        if mixer.use_bias:
            ref.in_proj.bias.copy_(mixer.in_proj.bias)
            ref.out_proj.bias.copy_(mixer.out_proj.bias)
        ref.conv.weight.copy_(mixer.conv1d.weight[:, 0])
        ref.conv.bias.copy_(mixer.conv1d.bias if mixer.use_conv_bias else torch.zeros_like(ref.conv.bias))
        ref.dt_bias.copy_(mixer.dt_bias)
        ref.A.copy_(-torch.exp(mixer.A_log))
        ref.D.copy_(mixer.D)
        ref.norm.weight.copy_(mixer.norm.weight)
    return ref.eval()


def want_logits(model, case, xs):
    """Mamba2ForCausalLM's logits with the reference's mixers, float64."""
    saved = []
    for layer in model.backbone.layers:
        ref = reference_mixer(layer.mixer, case[-1])
        saved.append(layer.mixer.forward)
        layer.mixer.forward = lambda h, *a, ref=ref, **k: ref(h)
    try:
        with torch.no_grad():
            hidden = model.backbone(torch.as_tensor(xs).long(), use_cache=False).last_hidden_state
            return model.lm_head(hidden).numpy()
    finally:
        for layer, forward in zip(model.backbone.layers, saved):
            layer.mixer.forward = forward


class GroupedGatedRmsNorm(torch.nn.Module):
    """mamba_ssm's RMSNormGated with norm_before_gate False (rms_norm_ref, group_size):
    y = x ⊙ silu(z), each group of `group` features over √(mean(y²) + eps), ⊙ weight."""

    def __init__(self, weight, eps, group):
        super().__init__()
        self.weight, self.eps, self.group = weight, eps, group

    def forward(self, x, z):
        y = x * F.silu(z)
        g = y.unflatten(-1, (-1, self.group))
        return (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2) * self.weight


def test_reference_matches_transformers_chunked_form():
    """One group: the reference's mixer against transformers' Mamba2Mixer.torch_forward, the
    chunked SSD, over 256 positions of two streams in one chunk. (Past the first chunk 4.47.1's
    form is wrong: errors of order 1e-2 from position 64 on with chunks of 64, where the first
    chunk agrees to 1e-7; the one-token path below holds the reference over 1,000 positions.)"""
    case = CASES[0]
    mixer = make_model(case).backbone.layers[0].mixer
    mixer.chunk_size = 256
    h = torch.randn(2, 256, case[1], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = mixer.torch_forward(h).numpy()
        got = reference_mixer(mixer, None)(h).numpy()
    print(f"max |Δ| {assert_close(got, want, 'reference vs torch_forward'):.2e}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reference_matches_transformers_steps(case):
    """The reference's mixer against transformers' one-token path (torch_forward with a cache
    past position 0), whose heads read their groups as mamba_ssm's do, with mamba_ssm's grouped
    gated norm when there are groups; one stream (4.47.1's path mixes the streams of a batch in
    its norm's gate), 1,000 positions in the long case. Δ's clamp (time_step_limit) is not in
    that path: the reference runs without it here."""
    model = make_model(case)
    mixer = model.backbone.layers[0].mixer
    if mixer.n_groups > 1:
        mixer.norm = GroupedGatedRmsNorm(mixer.norm.weight, mixer.layer_norm_epsilon,
                                         mixer.intermediate_size // mixer.n_groups)
    n = case[9] if case[9] >= 1000 else 100
    h = torch.randn(1, n, case[1], dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    cache = Mamba2Cache(model.config, 1, dtype=torch.float64)
    cache.seqlen_offset = 1   # every call the one-token path, from empty states
    with torch.no_grad():
        want = torch.cat([mixer.torch_forward(h[:, t:t + 1], cache_params=cache) for t in range(n)], 1)
        got = reference_mixer(mixer, None)(h)
    print(f"max |Δ| {assert_close(got.numpy(), want.numpy(), 'reference vs one-token path'):.2e}")


def test_model_of_reference_mixers_is_transformers_model():
    """One group, no limit: the logits with the reference's mixers are transformers' own (its
    chunked form, in one chunk)."""
    case = CASES[0]
    model = make_model(case)
    for layer in model.backbone.layers:
        layer.mixer.chunk_size = 256
    xs = tokens(5, 2, 200, case[8])
    with torch.no_grad():
        own = model(torch.as_tensor(xs).long(), use_cache=False).logits.double().numpy()
    assert_close(want_logits(model, case, xs), own, "reference mixers vs transformers")


def state_spaces_files(model, case, tmp_path):
    """mamba_ssm's config.json (MambaConfig) and pytorch_model.bin of the same model; a
    vocabulary of a multiple of 8 rows is written as mamba_ssm pads it (vocab_size 7 fewer,
    pad_vocab_size_multiple 8)."""
    (_, hidden, heads, head_dim, state, groups, kernel, layers, vocab, _, _, tied, bias, conv_bias,
     limit) = case
    ssm_cfg = {"layer": "Mamba2", "d_state": state, "d_conv": kernel, "expand": heads * head_dim // hidden,
               "headdim": head_dim, "ngroups": groups, "bias": bias, "conv_bias": conv_bias,
               "chunk_size": 256, "rmsnorm": True, "norm_before_gate": False}
    if limit:
        ssm_cfg["dt_limit"] = list(limit)
    config = {"d_model": hidden, "d_intermediate": 0, "n_layer": layers, "vocab_size": vocab,
              "ssm_cfg": ssm_cfg, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True,
              "residual_in_fp32": True, "fused_add_norm": True, "pad_vocab_size_multiple": 1,
              "tie_embeddings": tied}
    if vocab % 8 == 0:
        config.update(vocab_size=vocab - 7, pad_vocab_size_multiple=8)
    sd = {k.replace("backbone.embeddings.", "backbone.embedding."): v.float()
          for k, v in model.state_dict().items()}
    folder = tmp_path / "state_spaces"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    torch.save(sd, folder / "pytorch_model.bin")
    return folder


def save_transformers(model, tmp_path):
    """save_pretrained in float32 as a user does: safetensors, but pytorch_model.bin for a tied
    head (transformers 4.47.1 refuses to write Mamba2's shared tensors to safetensors)."""
    hf = tmp_path / "hf"
    model.float().save_pretrained(hf, safe_serialization=not model.config.tie_word_embeddings)
    model.double()
    return hf


def weights_file(folder):
    return next(p for p in (folder / "model.safetensors", folder / "pytorch_model.bin") if p.exists())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_layouts(case, tmp_path):
    model = make_model(case)
    positions, batch = case[9], case[10]
    xs = tokens(positions, batch, positions, case[8])
    want = want_logits(model, case, xs)
    hf = save_transformers(model, tmp_path)
    text = (hf / "config.json").read_text()
    assert "Infinity" in text or case[-1]   # Python's JSON for an unlimited clamp
    ss = state_spaces_files(model, case, tmp_path)
    for weights, config in ((weights_file(hf), hf / "config.json"),
                            (ss / "pytorch_model.bin", ss / "config.json")):
        out = tmp_path / f"{weights.parent.name}.recur"
        rc, err = recur_convert(weights, "--config", config, "-o", out)
        assert rc == 0, err
        check_forms(out, xs, want)


def mamba_ssm_logits(folder, xs):
    """mamba_ssm's MambaLMHeadModel on the state-spaces files in `folder`, token by token as
    its generation runs it, float64: per block the residual add and RMS norm (eps 1e-5),
    then Mamba2.step: in_proj, the convolution's rolling state, the SSM step and the gated
    norm by mamba_ssm's own references of its kernels (selective_state_update_ref: head h
    reads group h // (H/G); rms_norm_ref over each group's features), out_proj; the final
    norm and the head. Its step applies no dt_limit where its chunked forward clamps Δ
    (mamba_chunk_scan_combined's dt_limit): with a limit, the forward's softplus and clamp
    are applied here before the step rule, as recur computes the forward's math."""
    cfg = json.loads((folder / "config.json").read_text())
    sd = {k: v.double() for k, v in torch.load(folder / "pytorch_model.bin").items()}
    ssm = cfg["ssm_cfg"]
    d_ssm = ssm["expand"] * cfg["d_model"]
    heads, p, groups, n = d_ssm // ssm["headdim"], ssm["headdim"], ssm["ngroups"], ssm["d_state"]
    eps = 1e-5
    rms = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w  # noqa: E731
    linear = lambda x, key: F.linear(x, sd[key + ".weight"], sd.get(key + ".bias"))  # noqa: E731
    batch, positions = xs.shape
    states = []
    for i in range(cfg["n_layer"]):
        width = sd[f"backbone.layers.{i}.mixer.conv1d.weight"].shape[0]
        states.append((torch.zeros(batch, width, ssm["d_conv"], dtype=torch.float64),
                       torch.zeros(batch, heads, p, n, dtype=torch.float64)))
    head = sd.get("lm_head.weight", sd["backbone.embedding.weight"])
    out = []
    for t in range(positions):
        hidden, residual = sd["backbone.embedding.weight"][torch.as_tensor(xs[:, t]).long()], None
        for i, (conv_state, ssm_state) in enumerate(states):
            m = f"backbone.layers.{i}.mixer."
            residual = hidden if residual is None else hidden + residual
            h = rms(residual, sd[f"backbone.layers.{i}.norm.weight"])
            z, xbc, dt = torch.split(linear(h, m + "in_proj"), [d_ssm, d_ssm + 2 * groups * n, heads], -1)
            conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=-1))
            conv_state[:, :, -1] = xbc
            xbc = torch.sum(conv_state * sd[m + "conv1d.weight"][:, 0], dim=-1)
            if m + "conv1d.bias" in sd:
                xbc = xbc + sd[m + "conv1d.bias"]
            x, b, c = torch.split(F.silu(xbc), [d_ssm, groups * n, groups * n], -1)
            a = -torch.exp(sd[m + "A_log"])[:, None, None].expand(heads, p, n)
            dt_bias, softplus = sd[m + "dt_bias"][:, None].expand(heads, p), True
            dt = dt[:, :, None].expand(batch, heads, p)
            if "dt_limit" in ssm:
                dt = F.softplus(dt + dt_bias).clamp(*ssm["dt_limit"])
                dt_bias, softplus = None, False
            y = selective_state_update_ref(ssm_state, x.view(batch, heads, p), dt, a,
                                           b.view(batch, groups, n), c.view(batch, groups, n),
                                           sd[m + "D"][:, None].expand(heads, p), z=None,
                                           dt_bias=dt_bias, dt_softplus=softplus)
            y = rms_norm_ref(y.reshape(batch, d_ssm), sd[m + "norm.weight"], None, z=z, eps=eps,
                             group_size=d_ssm // groups, norm_before_gate=False, upcast=False)
            hidden = linear(y, m + "out_proj")
        out.append(F.linear(rms(hidden + residual, sd["backbone.norm_f.weight"]), head))
    return torch.stack(out, 1).numpy()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_state_spaces_against_mamba_ssm(case, tmp_path):
    """The state-spaces files against mamba_ssm's own math (mamba_ssm_logits), converted
    with one command and held stepped, prefilled in uneven chunks, in batches and resumed;
    the reference's logits (want_logits) agree with mamba_ssm's too."""
    model = make_model(case)
    positions, batch = case[9], case[10]
    xs = tokens(positions + 1, batch, positions, case[8])
    folder = state_spaces_files(model, case, tmp_path)
    want = mamba_ssm_logits(folder, xs)
    model.float().double()   # the weights as the file holds them (float32)
    print(f"reference vs mamba_ssm: max |Δ| {assert_close(want_logits(model, case, xs), want, 'reference'):.2e}")
    out = tmp_path / "state_spaces.recur"
    rc, err = recur_convert(folder / "pytorch_model.bin", "--config", folder / "config.json", "-o", out)
    assert rc == 0, err
    print(f"recur vs mamba_ssm: max |Δ| {check_forms(out, xs, want):.2e}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_files(dtype, tmp_path):
    """save_pretrained of the model in half precision (model.half(), model.bfloat16()):
    recur reads the file's f16/bf16 tensors and matches the logits of the rounded weights."""
    case = CASES[2]
    model = make_model(case)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).double())
    xs = tokens(11, 2, 50, case[8])
    want = want_logits(model, case, xs)
    hf = tmp_path / "hf"
    model.to(dtype).save_pretrained(hf, safe_serialization=True)
    model.double()
    out = tmp_path / "half.recur"
    rc, err = recur_convert(hf / "model.safetensors", "--config", hf / "config.json", "-o", out)
    assert rc == 0, err
    check_forms(out, xs, want)


def test_narrow_weights(tmp_path):
    """--dtype narrows in_proj and out_proj (and the embedding and head) and leaves the
    small vectors f32: the model still follows the logits, to the narrow types' error."""
    case = CASES[1]
    model = make_model(case)
    xs = tokens(9, 2, 40, case[8])
    want = want_logits(model, case, xs)
    hf = save_transformers(model, tmp_path)
    for dtype, bound in (("f16", 0.02), ("int8", 0.2)):
        out = tmp_path / f"{dtype}.recur"
        rc, err = recur_convert(weights_file(hf), "--config", hf / "config.json",
                                "--dtype", dtype, "-o", out)
        assert rc == 0, err
        with recur.Model(str(out)).session(batch=2) as s:
            got = s.prefill(xs)
        worst = np.abs(got - want).max()
        assert worst < bound * np.abs(want).max(), (dtype, worst)


def write_gguf(model, path, outtype, flat_norm=False):
    """A GGUF file of transformers' model as llama.cpp's convert_hf_to_gguf.py writes it
    (recur_ref/gguf_mamba2.py), the weight matrices in `outtype` (a GGMLQuantizationType:
    F32 or F16); flat_norm: the gated norm's weight of one group as llama-quantize rewrites
    it, 1-D (ggml drops the trailing dimension of 1)."""
    cfg = model.config
    inner = cfg.num_heads * cfg.head_dim
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["backbone.embeddings.weight"], "output_norm.weight": sd["backbone.norm_f.weight"]}
    if not torch.equal(sd["lm_head.weight"], sd["backbone.embeddings.weight"]):
        out["output.weight"] = sd["lm_head.weight"]
    for i in range(cfg.num_hidden_layers):
        m, b = f"backbone.layers.{i}.mixer.", f"blk.{i}."
        out[b + "attn_norm.weight"] = sd[f"backbone.layers.{i}.norm.weight"]
        out[b + "ssm_in.weight"] = sd[m + "in_proj.weight"]
        out[b + "ssm_conv1d.weight"] = sd[m + "conv1d.weight"].squeeze()
        out[b + "ssm_conv1d.bias"] = sd[m + "conv1d.bias"]
        out[b + "ssm_dt.bias"] = sd[m + "dt_bias"]
        out[b + "ssm_a"] = -torch.exp(sd[m + "A_log"]).reshape(-1, 1)
        out[b + "ssm_d"] = sd[m + "D"].reshape(-1, 1)
        out[b + "ssm_norm.weight"] = sd[m + "norm.weight"].reshape(cfg.n_groups, inner // cfg.n_groups)
        if flat_norm and cfg.n_groups == 1:
            out[b + "ssm_norm.weight"] = out[b + "ssm_norm.weight"].reshape(-1)
        out[b + "ssm_out.weight"] = sd[m + "out_proj.weight"]
    gguf_mamba2.write_gguf(path, {k: v.numpy() for k, v in out.items()}, hidden=cfg.hidden_size,
                           layers=cfg.num_hidden_layers, heads=cfg.num_heads, head_dim=cfg.head_dim,
                           state=cfg.state_size, groups=cfg.n_groups, kernel=cfg.conv_kernel,
                           vocab=cfg.vocab_size, eps=cfg.layer_norm_epsilon, outtype=outtype)


@pytest.mark.parametrize("outtype", ["F32", "F16"])
@pytest.mark.parametrize("case", CASES[:2], ids=IDS[:2])
def test_gguf(case, outtype, tmp_path):
    """llama.cpp's GGUF of the model (layout "gguf"), converted with one command and no
    config, against the logits of the weights the file holds (F16: the matrices rounded to
    half, as the file stores them; exact in recur, which keeps the file's types)."""
    qtype = getattr(gguf.GGMLQuantizationType, outtype)
    model = make_model(case)
    if qtype == gguf.GGMLQuantizationType.F16:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2 and "conv1d" not in name:
                    p.copy_(p.half().double())
    positions = min(case[9], 300)
    xs = tokens(positions, case[10], positions, case[8])
    want = want_logits(model, case, xs)
    path = tmp_path / "model.gguf"
    write_gguf(model, path, qtype, flat_norm=outtype == "F16")  # both forms of a one-group norm
    out = tmp_path / "model.recur"
    rc, err = recur_convert(path, "-o", out)
    assert rc == 0, err
    check_forms(out, xs, want)


def test_gguf_refusals(tmp_path):
    model = make_model(CASES[1])
    good = tmp_path / "good.gguf"
    write_gguf(model, good, gguf.GGMLQuantizationType.F32)

    def rewritten(name, keys=None, drop=()):
        """good.gguf with metadata `keys` changed and the tensors `drop` left out."""
        w = gguf.GGUFWriter(str(tmp_path / name), arch="mamba2")
        reader = gguf.GGUFReader(str(good))
        for field in reader.fields.values():
            if field.name.startswith("GGUF.") or field.name == "general.architecture":
                continue
            if keys and field.name in keys:
                if keys[field.name] is not None:
                    w.add_uint32(field.name, keys[field.name])
                continue
            w.add_key_value(field.name, field.contents(), field.types[0])
        for t in reader.tensors:
            if t.name not in drop:
                w.add_tensor(t.name, np.array(t.data).reshape([int(d) for d in reversed(t.shape)]))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        rc, err = recur_convert(tmp_path / name, "-o", tmp_path / "x.recur")
        assert rc == 1, name
        return err

    err = rewritten("groups.gguf", {"mamba2.ssm.group_count": 4})
    assert '"mamba2.ssm.group_count" (4) does not divide "mamba2.ssm.time_step_rank" (6)' in err, err
    err = rewritten("heads.gguf", {"mamba2.ssm.time_step_rank": 5})
    assert '"mamba2.ssm.time_step_rank" (5) does not divide "mamba2.ssm.inner_size" (48)' in err, err
    err = rewritten("no_state.gguf", {"mamba2.ssm.state_size": None})
    assert 'metadata key "mamba2.ssm.state_size" is missing' in err, err
    err = rewritten("no_norm.gguf", drop=("blk.1.ssm_norm.weight",))
    assert "blk.1.ssm_norm.weight: missing tensor" in err, err


HF_BASE = {"model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"], "hidden_size": 16,
           "num_heads": 4, "head_dim": 8, "expand": 2, "state_size": 8, "n_groups": 2,
           "num_hidden_layers": 1, "vocab_size": 20, "time_step_limit": [0.0, math.inf]}
SS_BASE = {"d_model": 16, "n_layer": 1, "vocab_size": 20,
           "ssm_cfg": {"layer": "Mamba2", "d_state": 8, "headdim": 8, "ngroups": 2}}


def test_refusals(tmp_path):
    hf = [({"hidden_act": "gelu"}, '"hidden_act" must be "silu"'),
          ({"num_heads": 3}, '"num_heads" · head_dim (3 · 8) must equal expand · hidden_size (32)'),
          ({"n_groups": 3, "num_heads": 8, "head_dim": 4}, '"n_groups" (3) must divide num_heads (8)'),
          ({"rms_norm": False}, '"rms_norm" must be true'),
          ({"time_step_limit": [0.5, 0.1]}, '"time_step_limit" must be [lo, hi] with 0 <= lo < hi'),
          ({"time_step_limit": ["Infinity", 1.0]}, '"time_step_limit" must be [lo, hi]'),
          ({"architectures": ["Mamba2Model"]}, '"architectures" must be ["Mamba2ForCausalLM"]'),
          ({"d_mlp": 4}, '"d_mlp" is not a Mamba2Config key')]
    for change, message in hf:
        err = refusal(dict(HF_BASE, **change), tmp_path)
        assert message in err, (change, err)

    def ss(**ssm):
        return dict(SS_BASE, ssm_cfg=dict(SS_BASE["ssm_cfg"], **ssm))
    cases = [(ss(layer="Mamba1"), '"ssm_cfg.layer" must be "Mamba2"'),
             (dict(SS_BASE, ssm_cfg={"d_state": 8}), '"ssm_cfg.layer" must be "Mamba2"'),
             (ss(d_ssm=16), '"ssm_cfg.d_ssm" must be null or expand·d_model'),
             (ss(D_has_hdim=True), '"ssm_cfg.D_has_hdim" must be false'),
             (ss(rmsnorm=False), '"ssm_cfg.rmsnorm" must be true'),
             (ss(norm_before_gate=True), '"ssm_cfg.norm_before_gate" must be false'),
             (ss(ngroups=3), '"ssm_cfg.ngroups" (3) must divide the heads (4)'),
             (ss(headdim=5), '"ssm_cfg.headdim" (5) must divide expand·d_model (32)'),
             (ss(dt_limit=[0.1]), '"ssm_cfg.dt_limit" must be [lo, hi]'),
             (ss(dt_min="x"), '"ssm_cfg.dt_min" must be a number'),
             (ss(process_group=1), '"ssm_cfg.process_group" is not a known key'),
             (dict(SS_BASE, d_intermediate=64), '"d_intermediate" must be 0'),
             (dict(SS_BASE, attn_layer_idx=[0]), '"attn_layer_idx" must be empty'),
             (dict(SS_BASE, rms_norm=False), '"rms_norm" must be true')]
    for config, message in cases:
        err = refusal(config, tmp_path)
        assert message in err, (config, err)

    # A checkpoint whose tensor does not fit its config is named.
    model = make_model(CASES[1])
    sd = {k.replace("backbone.embeddings.", "backbone.embedding."): v.float()
          for k, v in model.state_dict().items()}
    sd["backbone.layers.1.mixer.A_log"] = torch.zeros(5)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(SS_BASE, d_model=24, n_layer=2, vocab_size=56, pad_vocab_size_multiple=1,
                                      ssm_cfg={"layer": "Mamba2", "d_state": 8, "headdim": 8, "ngroups": 3},
                                      tie_embeddings=True)))
    weights = tmp_path / "pytorch_model.bin"
    torch.save(sd, weights)
    rc, err = recur_convert(weights, "--config", config, "-o", tmp_path / "bad.recur")
    assert rc == 1 and "backbone.layers.1.mixer.A_log" in err, err
