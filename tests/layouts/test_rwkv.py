"""BlinkDL RWKV-7 checkpoints (layout "rwkv") against BlinkDL's `rwkv` package:
models with the package's own tensor names and trained-like magnitudes
(test_rwkv7_reference.random_state_dict), saved as .pth in float32 and
bfloat16, each converted with one command and no config (the shapes give it),
then run by the recur package token by token, prefilled in uneven chunks, as a
batch of streams, and saved mid-way and resumed in a new session, each held to
1e-4 + 1e-5·|y| of the package's own logits (its RWKV_x070 CPU path, float32,
token by token). The reference (recur_ref/rwkv7.py, float64) is held to the
package by test_rwkv7_reference.py."""
import os
import subprocess

import numpy as np
import pytest
import torch

from layout_harness import check_forms, recur_convert, tokens
from recur_ref.rwkv7 import Rwkv7, random_state_dict
from test_rwkv7_reference import load_with_rwkv

import recur

# (layers, C, head size, vocab, decay / a / v / gate low-rank dims, positions)
CASES = [
    (2, 64, 16, 97, 16, 16, 8, 32, 40),
    (3, 128, 64, 301, 32, 32, 16, 64, 24),
    (2, 64, 32, 50, 16, 16, 8, 16, 1000),  # a long run: the state over 1,000 positions
]


def package_logits(package, xs):
    """The package's logits (B, N, V), each stream token by token."""
    out = []
    with torch.no_grad():
        for row in xs:
            state, steps = None, []
            for t in row:
                logits, state = package.forward([int(t)], state)
                steps.append(logits.double().numpy())
            out.append(np.stack(steps))
    return np.stack(out)


def convert(sd, tmp_path, name, *args):
    pth = tmp_path / f"{name}.pth"
    torch.save(sd, pth)
    model = tmp_path / f"{name}.recur"
    rc, err = recur_convert(pth, "-o", model, *args)
    assert rc == 0, f"recur-convert {pth.name}: {err}"
    return str(pth), str(model)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_rwkv_checkpoint(case, dtype, tmp_path):
    layers, c, n, vocab, d_w, d_a, d_v, d_g, positions = case
    sd = random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed=layers * 1000 + c)
    sd = {k: v.to(dtype) for k, v in sd.items()}
    pth, path = convert(sd, tmp_path, "rwkv7")
    batch = 2 if positions > 100 else 3
    xs = tokens(positions, batch, positions, vocab)
    want = package_logits(load_with_rwkv(pth), xs)
    check_forms(path, xs, want)


def test_config_from_shapes_matches_given_config(tmp_path):
    """The configuration recur-convert infers from the tensors equals the one
    given as a config with the layout's keys: the same model bytes but for the
    source hash (the same file)."""
    sd = random_state_dict(3, 64, 16, 97, 16, 16, 8, 32, seed=11)
    pth, inferred = convert(sd, tmp_path, "inferred")
    cfg = tmp_path / "config.json"
    cfg.write_text('{"layout": "rwkv", "n_layer": 3, "n_embd": 64, "head_size": 16, '
                   '"vocab_size": 97, "dim_ffn": 256, "d_decay_lora": 16, "d_aaa_lora": 16, '
                   '"d_mv_lora": 8, "d_gate_lora": 32}')
    given = tmp_path / "given.recur"
    rc, err = recur_convert(pth, "--config", cfg, "-o", given)
    assert rc == 0, err
    assert open(inferred, "rb").read() == open(given, "rb").read()


def test_refusals(tmp_path):
    sd = random_state_dict(2, 64, 16, 97, 16, 16, 8, 32, seed=3)
    bad = dict(sd)
    bad["blocks.0.att.r_k"] = torch.zeros(64)  # not [H, N]
    torch.save(bad, tmp_path / "bad.pth")
    rc, err = recur_convert(tmp_path / "bad.pth", "-o", tmp_path / "bad.recur")
    assert rc == 1 and "blocks.0.att.r_k: shape [64], expected 2-D" in err, err

    other = {"emb.weight": torch.zeros(4, 8), "blocks.0.ffn.key.weight": torch.zeros(8, 8)}
    torch.save(other, tmp_path / "other.pth")
    rc, err = recur_convert(tmp_path / "other.pth", "-o", tmp_path / "other.recur")
    assert rc == 1 and "no layout recognises the checkpoint's tensors" in err, err

    missing = {k: v for k, v in sd.items() if k != "blocks.1.att.a2"}
    torch.save(missing, tmp_path / "missing.pth")
    rc, err = recur_convert(tmp_path / "missing.pth", "-o", tmp_path / "missing.recur")
    assert rc == 1 and "blocks.1.att.a2" in err and "missing" in err, err
    assert not os.path.exists(tmp_path / "missing.recur")


def test_python_convert_needs_no_config(tmp_path):
    """recur.convert(checkpoint) without a config makes the bytes recur-convert writes; a
    dict of arrays has no file to infer from and is refused by name."""
    sd = random_state_dict(2, 64, 16, 97, 16, 16, 8, 32, seed=5)
    pth, path = convert(sd, tmp_path, "py")
    assert recur.convert(pth) == open(path, "rb").read()
    with pytest.raises(recur.InvalidArgument, match="no layout recognises"):
        recur.convert({"w": np.zeros(3, np.float32)})


def test_published_0_1b_shape(tmp_path):
    """The published 0.1B shape (12 layers, C 768, heads of 64, vocabulary 65,536, FFN 3,072,
    low-rank widths 64/64/32/128), bf16 as BlinkDL ships it, converted with one command, run
    by recur-run (the native build's SIMD kernels; the Python package of the tests is built
    for one scalar target) stepped and prefilled, two streams of 12 tokens. At this width the
    first positions are ill-conditioned (a head's group norm divides y = S r, which starts
    as v (k·r) with k·r near zero for some heads, by √(var + eps)), so float32 paths differ
    by more than 1e-4 there: the package's own token-by-token form is 3e-4 from float64. So
    recur and the package are both compared with the reference's float64 forward of the
    same weights, and at each position recur must be within 1e-4 + 1e-5·max|y| of it or
    no farther than the package's float32 forward is."""
    sd = random_state_dict(12, 768, 64, 65536, 64, 64, 32, 128, seed=1)
    sd = {k: v.to(torch.bfloat16) for k, v in sd.items()}
    pth, path = convert(sd, tmp_path, "rwkv7-0.1B")
    xs = tokens(12, 2, 12, 65536)
    reference = Rwkv7(sd)
    del sd
    want = np.stack([reference.forward([int(t) for t in row])[0].numpy() for row in xs])
    del reference
    per_position = lambda got: np.abs(got - want).max(axis=(0, 2))  # noqa: E731
    package = per_position(package_logits(load_with_rwkv(pth), xs))
    bound = np.maximum(1e-4 + 1e-5 * np.abs(want).max(axis=(0, 2)), package)
    np.save(tmp_path / "tokens.npy", xs)
    for mode in ("step", "prefill"):
        out = tmp_path / f"{mode}.npy"
        done = subprocess.run([os.environ["RECUR_RUN"], path, "--input", str(tmp_path / "tokens.npy"),
                               "--output", str(out), "--mode", mode,
                               *(["--chunk", "5"] if mode == "prefill" else [])],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        err = per_position(np.load(out))
        print(f"0.1B {mode}: max |Δ| per position against float64: recur "
              f"{' '.join(f'{e:.1e}' for e in err)}; the package's float32 "
              f"{' '.join(f'{e:.1e}' for e in package)} (logits up to {np.abs(want).max():.2f})")
        assert (err <= bound).all(), f"0.1B {mode}: past the bound at positions {np.nonzero(err > bound)[0]}"
