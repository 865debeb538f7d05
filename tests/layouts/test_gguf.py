"""llama.cpp's GGUF files of RWKV-7 (layout "gguf") against BlinkDL's `rwkv` package:
random models with the package's own names and trained-like magnitudes
(recur_ref/rwkv7.random_state_dict), renamed to the Hugging Face form that llama.cpp's
convert_hf_to_gguf.py reads and written with llama.cpp's `gguf` package the way that
script's Rwkv7Model writes them (llama_cpp_tensors below: llama.cpp's names through the
package's own name map, the low-rank matrices transposed, the six token-shift mixes
fused into one (6, 1, 1, C) tensor, r_k flattened, layer 0's unused value-residual
tensors written as copies of its a0, a1, a2, the metadata keys) at F32, F16 and BF16,
and with the weight matrices in Q4_0 as llama-quantize --pure leaves them. Each file is
converted with one command and no config, run by the recur package stepped token by
token and prefilled in uneven chunks, and held to 1e-4 + 1e-5·|y| of the package's own
logits (its RWKV_x070 CPU path, float32) on the weights the file holds: read back from
the file with the `gguf` package, dequantised, and renamed back to BlinkDL's names.
Q8_0, which no recur weight type holds exactly yet, and other ggml types are refused
by name."""
import json
import os
import subprocess

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from layout_harness import assert_close, recur_convert, tokens
from recur_ref.rwkv7 import random_state_dict
from test_rwkv import package_logits
from test_rwkv7_reference import load_with_rwkv

import recur

# (layers, C, head size, vocab, decay / a / v / gate low-rank dims, positions)
CASES = [
    (2, 64, 16, 97, 16, 16, 8, 32, 40),
    (3, 128, 64, 301, 32, 32, 16, 64, 24),
]
MIXES = ["r", "w", "k", "v", "a", "g"]  # convert_hf_to_gguf.py's lerp_list: the fused tensor's rows
LORAS = [f"time_mix_{p}{i}.weight" for p in "wavg" for i in (1, 2)]


def hf_names(sd):
    """BlinkDL's names as the Hugging Face RWKV-7 checkpoints that convert_hf_to_gguf.py
    reads without fla's lora modules have them (model.layers.<i>.attention.w1, ...)."""
    out = {}
    for name, t in sd.items():
        if name == "emb.weight":
            name = "model.embeddings.weight"
        elif name.startswith("ln_out."):
            name = "model." + name
        elif name.startswith("blocks.0.ln0."):
            name = "model.layers.0.pre_norm." + name.split(".")[-1]
        elif name.startswith("blocks."):
            _, i, rest = name.split(".", 2)
            rest = rest.replace("att.", "attention.").replace("ffn.", "feed_forward.")
            name = f"model.layers.{i}.{rest}"
        out[name] = t
    return out


def llama_cpp_tensors(hf, layers):
    """The tensors of llama.cpp's convert_hf_to_gguf.py, class Rwkv7Model, modify_tensors
    (conversion/rwkv.py where the script is split into modules), for a checkpoint with
    BlinkDL's low-rank layout (lora_needs_transpose stays True): (GGUF name, float32
    array) in the order the script yields them."""
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.RWKV7, layers)
    map_name = lambda n: names.get_name(n, try_suffixes=(".weight", ".bias"))  # noqa: E731
    lerp, out = {}, []
    for name, data in hf.items():
        bid = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        if "attention.v" in name and "value" not in map_name(name) and bid == 0:
            continue  # layer 0's v0, v1, v2: unused, dropped
        if bid is not None and "attention.x_" in name:
            lerp.setdefault(bid, {})[name] = data
            if all(f"model.layers.{bid}.attention.x_{i}" in lerp[bid] for i in MIXES):
                fused = torch.stack([lerp[bid][f"model.layers.{bid}.attention.x_{i}"] for i in MIXES],
                                    dim=0)  # six (1, 1, C): (6, 1, 1, C)
                out.append((f"blk.{bid}.time_mix_lerp_fused.weight", fused.numpy()))
            continue
        data = data.squeeze()
        new = map_name(name)
        if not (new.endswith(".weight") or new.endswith(".bias")):
            new += ".weight"
        if any(new.endswith(t) for t in LORAS):
            data = data.transpose(0, 1)
        if "r_k" in new:
            data = data.flatten()
        if bid == 0 and "time_mix_a" in new:  # layer 0's dummy v0, v1, v2 for llama.cpp's loader
            out.append((new.replace("time_mix_a", "time_mix_v"), data.contiguous().numpy()))
        out.append((new, data.contiguous().numpy()))
    return out


def file_type(name, data, outtype):
    """The ggml type convert_hf_to_gguf.py (ModelBase.prepare_tensors, conversion/base.py
    where split) gives a tensor for --outtype f32/f16/bf16/q8_0, or llama-quantize --pure
    for Q4_0 (from an F32 file: src/llama-quant.cpp's tensor_allows_quantization keeps
    norms, 1-D tensors and the RWKV low-rank and mix tensors as they are)."""
    if data.ndim <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return Q.F32
    if any(k in name for k in ("time_mix_w1", "time_mix_w2", "time_mix_lerp_fused")):
        return Q.F32
    if outtype == Q.Q4_0:
        skip = ("time_mix_w0", "time_mix_v0", "time_mix_v1", "time_mix_v2", "time_mix_a0",
                "time_mix_a1", "time_mix_a2", "time_mix_g1", "time_mix_g2")
        return Q.F32 if any(k in name for k in skip) else Q.Q4_0
    if outtype == Q.Q8_0 and data.shape[-1] % 32 != 0:
        return Q.F16  # gguf.QuantError: the script falls back to F16
    return outtype


def write_gguf(path, sd, outtype, layers, c, n, d_w, d_a, d_v, d_g, eps=1e-5):
    """A GGUF file of BlinkDL state dict `sd`, as Rwkv7Model's set_gguf_parameters and
    modify_tensors and prepare_tensors write it."""
    w = gguf.GGUFWriter(str(path), arch="rwkv7")
    w.add_context_length(1048576)
    w.add_embedding_length(c)
    w.add_block_count(layers)
    w.add_layer_norm_eps(eps)
    w.add_wkv_head_size(n)
    w.add_decay_lora_rank(d_w)
    w.add_iclr_lora_rank(d_a)
    w.add_value_residual_mix_lora_rank(d_v)
    w.add_gate_lora_rank(d_g)
    w.add_feed_forward_length(sd["blocks.0.ffn.key.weight"].shape[0])
    w.add_file_type({Q.F32: 0, Q.F16: 1, Q.Q4_0: 2, Q.Q8_0: 7, Q.BF16: 32}[outtype])
    w.add_head_count(0)
    types = {}
    for name, data in llama_cpp_tensors(hf_names(sd), layers):
        qtype = types[name] = file_type(name, data, outtype)
        q = gguf.quants.quantize(data.astype(np.float32), qtype)
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, q)
        else:
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def blinkdl_from_gguf(path, heads, n):
    """The file's tensors, dequantised to float32 and renamed back to BlinkDL's names and
    shapes: the weights the converted model must compute with."""
    sd = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        data = torch.from_numpy(data.reshape([int(d) for d in reversed(t.shape)]).copy())
        name = t.name
        if name == "token_embd.weight":
            sd["emb.weight"] = data
        elif name == "output.weight":
            sd["head.weight"] = data
        elif name.startswith("output_norm."):
            sd["ln_out." + name.split(".")[-1]] = data
        elif name.startswith("token_embd_norm."):
            sd["blocks.0.ln0." + name.split(".")[-1]] = data
        else:
            _, i, rest = name.split(".", 2)
            b, att, ffn = f"blocks.{i}.", f"blocks.{i}.att.", f"blocks.{i}.ffn."
            part, suffix = rest.rsplit(".", 1)
            vec = data.reshape(1, 1, -1)
            if part in ("time_mix_v0", "time_mix_v1", "time_mix_v2") and i == "0":
                continue  # copies of a0, a1, a2; the package ignores layer 0's v0, v1, v2
            if part == "attn_norm":
                sd[b + "ln1." + suffix] = data
            elif part == "attn_norm_2":
                sd[b + "ln2." + suffix] = data
            elif part == "time_mix_lerp_fused":
                for k, m in enumerate(MIXES):
                    sd[att + "x_" + m] = data[k].reshape(1, 1, -1)
            elif part in ("time_mix_w0", "time_mix_a0", "time_mix_v0"):
                sd[att + part[-2:]] = vec
            elif part[:-1] in ("time_mix_w", "time_mix_a", "time_mix_v", "time_mix_g"):
                sd[att + part[-2:]] = data.T.contiguous()
            elif part in ("time_mix_k_k", "time_mix_k_a"):
                sd[att + part[-3:]] = vec
            elif part == "time_mix_r_k":
                sd[att + "r_k"] = data.reshape(heads, n)
            elif part == "time_mix_ln":
                sd[att + "ln_x." + suffix] = data
            elif part in ("time_mix_key", "time_mix_value", "time_mix_receptance"):
                sd[att + part[9:] + ".weight"] = data
            elif part == "time_mix_output":
                sd[att + "output.weight"] = data
            elif part == "channel_mix_lerp_k":
                sd[ffn + "x_k"] = vec
            elif part in ("channel_mix_key", "channel_mix_value"):
                sd[ffn + part[12:] + ".weight"] = data
            else:
                raise AssertionError(f"unexpected tensor {name}")
    return sd


def recur_forms(path, xs, want, int8_activations):
    """The converted model stepped token by token and prefilled in uneven chunks against
    `want`; the largest |Δ|."""
    batch, positions = xs.shape
    model = recur.Model(str(path))
    opts = {"int8_activations": int8_activations}
    with model.session(batch=batch, **opts) as s:
        got = np.stack([s.step(xs[:, t]) for t in range(positions)], axis=1)
    worst = assert_close(got, want, "step")
    cuts = [1, 7, positions // 3, positions - 8 - positions // 3]
    with model.session(batch=batch, **opts) as s:
        parts, t = [], 0
        for k in cuts + [positions - sum(cuts)]:
            parts.append(s.prefill(xs[:, t:t + k]))
            t += k
    return max(worst, assert_close(np.concatenate(parts, axis=1), want, "prefill in chunks"))


def dtypes_of(path):
    """The stored dtype of each tensor of a .recur file (recur-convert inspect --json)."""
    done = subprocess.run([os.environ["RECUR_CONVERT"], "inspect", "--json", str(path)],
                          capture_output=True, text=True, check=True)
    return {t["name"]: t["dtype"] for t in json.loads(done.stdout)["tensors"]}


# The weight matrices recur stores in a narrow type: what a GGUF file's F16, BF16 and
# Q4_0 tensors become (the low-rank paths, mixes, norms and embedding are f32 in recur).
def narrow(name):
    return name == "head.weight" or name.endswith((".ffn.linear1.weight", ".ffn.linear2.weight",
                                                   ".mixer.receptance.weight", ".mixer.key.weight",
                                                   ".mixer.value.weight", ".mixer.out.weight"))


@pytest.mark.parametrize("outtype,stored", [(Q.F32, "f32"), (Q.F16, "f16"), (Q.BF16, "bf16"),
                                            (Q.Q4_0, "int4")])
@pytest.mark.parametrize("case", CASES)
def test_gguf_file(case, outtype, stored, tmp_path):
    layers, c, n, vocab, d_w, d_a, d_v, d_g, positions = case
    sd = random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed=layers * 1000 + c)
    path = tmp_path / "rwkv7.gguf"
    types = write_gguf(path, sd, outtype, layers, c, n, d_w, d_a, d_v, d_g)
    assert (outtype in types.values()) and (Q.F32 in types.values())
    model = tmp_path / "rwkv7.recur"
    rc, err = recur_convert(path, "-o", model)
    assert rc == 0, err
    dtypes = dtypes_of(model)
    assert all(d == (stored if narrow(k) else "f32") for k, d in dtypes.items()), dtypes

    pth = tmp_path / "dequantised.pth"
    torch.save(blinkdl_from_gguf(path, c // n, n), pth)
    xs = tokens(positions, 3, positions, vocab)
    want = package_logits(load_with_rwkv(str(pth)), xs)
    # int4 layers with float32 activations: the weights' numbers, nothing rounded besides.
    worst = recur_forms(model, xs, want, "float" if stored == "int4" else "auto")
    print(f"{outtype.name} {case}: max |Δ| {worst:.2e} of logits up to {np.abs(want).max():.2f}")

    if outtype == Q.Q4_0:
        # --dtype f32 widens every tensor: the same numbers (Q4_0's are exact in float32).
        wide = tmp_path / "wide.recur"
        rc, err = recur_convert(path, "-o", wide, "--dtype", "f32")
        assert rc == 0, err
        assert set(dtypes_of(wide).values()) == {"f32"}
        recur_forms(wide, xs, want, "auto")
        # --dtype int4 in groups of 32 takes the Q4_0 blocks over as they are.
        again = tmp_path / "again.recur"
        rc, err = recur_convert(path, "-o", again, "--dtype", "int4", "--quantize-head")
        assert rc == 0, err
        assert open(again, "rb").read() == open(model, "rb").read()


def test_refusals(tmp_path):
    layers, c, n, vocab, d_w, d_a, d_v, d_g = 2, 64, 16, 97, 16, 16, 8, 32
    sd = random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed=9)
    path = tmp_path / "q8.gguf"
    types = write_gguf(path, sd, Q.Q8_0, layers, c, n, d_w, d_a, d_v, d_g)
    first = next(name for name, t in types.items() if t == Q.Q8_0)
    rc, err = recur_convert(path, "-o", tmp_path / "q8.recur")
    assert rc == 1 and f'tensor "{first}" is Q8_0, which no recur weight type holds exactly' in err, err
    assert not os.path.exists(tmp_path / "q8.recur")

    good = tmp_path / "f32.gguf"
    write_gguf(good, sd, Q.F32, layers, c, n, d_w, d_a, d_v, d_g)
    cfg = tmp_path / "config.json"
    cfg.write_text('{"layout": "rwkv", "n_layer": 2, "n_embd": 64, "head_size": 16, "vocab_size": 97, '
                   '"dim_ffn": 256, "d_decay_lora": 16, "d_aaa_lora": 16, "d_mv_lora": 8, '
                   '"d_gate_lora": 32}')
    rc, err = recur_convert(good, "--config", cfg, "-o", tmp_path / "x.recur")
    assert rc == 1 and "f32.gguf is a GGUF file, which carries its configuration in its metadata" in err, err
    rc, err = recur_convert(good, "--layout", "rwkv", "-o", tmp_path / "x.recur")
    assert rc == 1 and "is a GGUF file, of layout gguf (got --layout rwkv)" in err, err

    # A file missing a tensor: named, with the shape it needs.
    w = gguf.GGUFWriter(str(tmp_path / "missing.gguf"), arch="rwkv7")
    reader = gguf.GGUFReader(str(good))
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        w.add_key_value(field.name, field.contents(), field.types[0])
    for t in reader.tensors:
        if t.name != "blk.1.time_mix_a2.weight":
            w.add_tensor(t.name, np.array(t.data).reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    rc, err = recur_convert(tmp_path / "missing.gguf", "-o", tmp_path / "x.recur")
    assert rc == 1 and "blk.1.time_mix_a2.weight: missing tensor, expected shape [64,16]" in err, err


def test_python_convert(tmp_path):
    """recur.convert(file.gguf) needs no config and, with dtype left None, keeps the file's
    types as recur-convert does: the same bytes."""
    layers, c, n, vocab, d_w, d_a, d_v, d_g = 2, 64, 16, 97, 16, 16, 8, 32
    sd = random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed=4)
    path = tmp_path / "q4.gguf"
    write_gguf(path, sd, Q.Q4_0, layers, c, n, d_w, d_a, d_v, d_g)
    model = tmp_path / "q4.recur"
    rc, err = recur_convert(path, "-o", model)
    assert rc == 0, err
    assert recur.convert(str(path)) == open(model, "rb").read()
    report = recur.convert(str(path), output=str(tmp_path / "py.recur"))
    assert report["layout"] == "gguf" and report["narrow_tensors"] == 6 * layers + 1, report  # r, k, v, o, FFN; head
