"""llama.cpp's GGUF files of RWKV-7 (layout "gguf") against BlinkDL's `rwkv` package:
random models with the package's own names and trained-like magnitudes
(recur_ref/rwkv7.random_state_dict), renamed to the Hugging Face form that llama.cpp's
convert_hf_to_gguf.py reads and written with llama.cpp's `gguf` package the way that
script's Rwkv7Model writes them (llama_cpp_tensors below: llama.cpp's names through the
package's own name map, the low-rank matrices transposed, the six token-shift mixes
fused into one (6, 1, 1, C) tensor, r_k flattened, layer 0's unused value-residual
tensors written as copies of its a0, a1, a2, the metadata keys) at F32, F16 and BF16,
and with the weight matrices in Q4_0 as llama-quantize --pure leaves them, and in Q4_K, Q5_K
and Q6_K as its Q4_K_M, Q5_K_M and Q6_K mixes choose them (blocks of recur_ref's own
quantiser, the gguf package having none for the K-quants). Each file is
converted with one command and no config, run by the recur package stepped token by
token and prefilled in uneven chunks, and held to 1e-4 + 1e-5·|y| of the package's own
logits (its RWKV_x070 CPU path, float32) on the weights the file holds: read back from
the file with the `gguf` package, dequantised, and renamed back to BlinkDL's names.
Q8_0 files as convert_hf_to_gguf.py --outtype q8_0 writes them take the same path (q8_0
blocks unchanged); other ggml types are refused by name."""
import json
import os
import subprocess

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from layout_harness import assert_close, recur_convert, tokens
from recur_ref.gguf_rwkv7 import blinkdl_from_gguf, write_gguf
from recur_ref.rwkv7 import random_state_dict
from test_rwkv import package_logits
from test_rwkv7_reference import load_with_rwkv

import recur

# (layers, C, head size, vocab, decay / a / v / gate low-rank dims, positions)
CASES = [
    (2, 64, 16, 97, 16, 16, 8, 32, 40),
    (3, 128, 64, 301, 32, 32, 16, 64, 24),
]
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
# Q4_0 tensors become (mixes and norms are f32 in recur; the embedding keeps
# token_embd's type, STORED).
def narrow(name):
    return name == "head.weight" or name.endswith((".ffn.linear1.weight", ".ffn.linear2.weight",
                                                   ".mixer.receptance.weight", ".mixer.key.weight",
                                                   ".mixer.value.weight", ".mixer.out.weight"))


# The low-rank matrices, which keep the type the file gives them (recur name → llama.cpp's).
LOW_RANK = {"decay_down": "w1", "decay_up": "w2", "rate_down": "a1", "rate_up": "a2",
            "value_down": "v1", "value_up": "v2", "gate_down": "g1", "gate_up": "g2"}


# recur's type for a ggml type it keeps.
STORED = {Q.F32: "f32", Q.F16: "f16", Q.BF16: "bf16", Q.Q4_0: "int4", Q.Q8_0: "q8_0",
          Q.Q4_K: "q4_k", Q.Q5_K: "q5_k", Q.Q6_K: "q6_k"}


def step_logits(path, xs):
    """The model's logits stepped token by token, float32 activations."""
    with recur.Model(str(path)).session(batch=xs.shape[0], int8_activations="float") as s:
        return np.stack([s.step(xs[:, t]) for t in range(xs.shape[1])], axis=1)


def expected_dtype(name, types, stored):
    """What recur stores tensor `name` of a file whose tensor types are `types` as."""
    if name == "input.embedding":
        return STORED[types["token_embd.weight"]]
    parts = name.split(".")
    if len(parts) == 5 and parts[3] in LOW_RANK and parts[4] == "weight":
        gguf_name = f"blk.{parts[1]}.time_mix_{LOW_RANK[parts[3]]}.weight"
        return STORED[types[gguf_name]]
    return stored if narrow(name) else "f32"


@pytest.mark.parametrize("outtype,stored", [(Q.F32, "f32"), (Q.F16, "f16"), (Q.BF16, "bf16"),
                                            (Q.Q4_0, "int4"), (Q.Q8_0, "q8_0")])
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
    wrong = {k: d for k, d in dtypes.items() if d != expected_dtype(k, types, stored)}
    assert not wrong, wrong

    pth = tmp_path / "dequantised.pth"
    torch.save(blinkdl_from_gguf(path, c // n, n), pth)
    xs = tokens(positions, 3, positions, vocab)
    want = package_logits(load_with_rwkv(str(pth)), xs)
    # int4 and q8_0 layers with float32 activations: the weights' numbers, nothing rounded besides.
    worst = recur_forms(model, xs, want, "float" if stored in ("int4", "q8_0") else "auto")
    print(f"{outtype.name} {case}: max |Δ| {worst:.2e} of logits up to {np.abs(want).max():.2f}")

    if outtype == Q.Q4_0:
        # --dtype f32 widens every tensor: the same numbers (Q4_0's are exact in float32).
        wide = tmp_path / "wide.recur"
        rc, err = recur_convert(path, "-o", wide, "--dtype", "f32")
        assert rc == 0, err
        assert set(dtypes_of(wide).values()) == {"f32"}
        recur_forms(wide, xs, want, "auto")
        # --dtype int4 in groups of 32 takes the Q4_0 blocks over as they are; it leaves
        # the embedding f32, its values those of the int4 rows: the same logits, bit for bit.
        again = tmp_path / "again.recur"
        rc, err = recur_convert(path, "-o", again, "--dtype", "int4", "--quantize-head")
        assert rc == 0, err
        assert dtypes_of(again) == {**dtypes, "input.embedding": "f32"}
        assert os.path.getsize(again) > os.path.getsize(model)
        assert np.array_equal(step_logits(again, xs), step_logits(model, xs))


# K-quant rows are whole blocks of 256: C and the FFN's 4C are multiples of 256.
KQUANT_CASE = (2, 256, 64, 97, 32, 32, 16, 64, 24)


@pytest.mark.parametrize("outtype,stored,head", [(Q.Q4_K, "q4_k", "q6_k"),
                                                 (Q.Q5_K, "q5_k", "q6_k"),
                                                 (Q.Q6_K, "q6_k", "q6_k")])
def test_gguf_kquants(outtype, stored, head, tmp_path):
    """Q4_K_M's mix (Q4_K, the head Q6_K), Q5_K_M's and Q6_K: the blocks become q4_k, q5_k
    and q6_k as they are, so that recur computes with the numbers the gguf package
    dequantises."""
    layers, c, n, vocab, d_w, d_a, d_v, d_g, positions = KQUANT_CASE
    sd = random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed=77)
    path = tmp_path / "rwkv7.gguf"
    types = write_gguf(path, sd, outtype, layers, c, n, d_w, d_a, d_v, d_g)
    assert types["output.weight"] == Q.Q6_K and types["token_embd.weight"] == outtype
    model = tmp_path / "rwkv7.recur"
    rc, err = recur_convert(path, "-o", model)
    assert rc == 0, err
    dtypes = dtypes_of(model)
    want_types = {k: (head if k == "head.weight" else stored)
                  if narrow(k) or k == "input.embedding" else "f32" for k in dtypes}
    assert dtypes == want_types, dtypes

    pth = tmp_path / "dequantised.pth"
    torch.save(blinkdl_from_gguf(path, c // n, n), pth)
    xs = tokens(positions, 3, positions, vocab)
    want = package_logits(load_with_rwkv(str(pth)), xs)
    # Float32 activations: the file's numbers, nothing rounded besides ("auto" rounds the
    # activations of q8_0, q4_k and q6_k layers as llama.cpp does, on x86 from AVX2).
    worst = recur_forms(model, xs, want, "float")
    print(f"{outtype.name}: max |Δ| {worst:.2e} of logits up to {np.abs(want).max():.2f}")
    # --dtype f32 widens every tensor to the same numbers.
    wide = tmp_path / "wide.recur"
    rc, err = recur_convert(path, "-o", wide, "--dtype", "f32")
    assert rc == 0, err
    assert set(dtypes_of(wide).values()) == {"f32"}
    recur_forms(wide, xs, want, "auto")


def test_refusals(tmp_path):
    layers, c, n, vocab, d_w, d_a, d_v, d_g = 2, 64, 16, 97, 16, 16, 8, 32
    sd = random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed=9)
    path = tmp_path / "q5_0.gguf"
    types = write_gguf(path, sd, Q.Q5_0, layers, c, n, d_w, d_a, d_v, d_g)
    first = next(name for name, t in types.items() if t == Q.Q5_0)
    rc, err = recur_convert(path, "-o", tmp_path / "q5_0.recur")
    assert rc == 1 and f'tensor "{first}" is Q5_0: recur-convert reads GGUF tensors of types' in err, err
    assert not os.path.exists(tmp_path / "q5_0.recur")

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
    # r, k, v, o, FFN; the head and the embedding
    assert report["layout"] == "gguf" and report["narrow_tensors"] == 6 * layers + 2, report
