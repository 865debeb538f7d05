#!/usr/bin/python3
"""Self-tests of the training side of the reference: the batched forward equals
RecurModel's, the Fashion-MNIST reader, and the image recipe's resume.
Last line `N passed, M failed`; exit status 1 on failure."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recur_ref import batched, checkpoint, fashion_mnist, golden, safetensors, speech  # noqa: E402
from test_reference import run_checks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "configs")


def _config(name):
    with open(os.path.join(CONFIGS, name + ".json")) as f:
        return json.load(f)


def batched_equals_reference():
    """Three sequences of 150 positions (> batched.CHUNK: state carried across chunks),
    float64: batched.forward == RecurModel.forward per sequence."""
    for name in ("tiny_pre_tokens", "small_post_features", "softmax_tokens", "softmax_encoder",
                 "linear_favor_encoder", "linear_relu_tokens", "image_linear", "image_softmax",
                 "sliding_window_tokens", "sliding_window_encoder", "speech_digits",
                 "softmax_rotary_tokens", "linear_rotary_features", "sliding_window_rotary_tokens",
                 "linear_shift_tokens", "softmax_shift_encoder",
                 # model-level options: norm kinds, no FFN, sinusoidal positions, GLU, reversible
                 "rms_norm_tokens", "scale_norm_features", "no_ffn_post_features", "sinusoid_tokens",
                 "sinusoid_encoder", "glu_tokens", "glu_encoder", "reversible_tokens", "reversible_encoder",
                 # RWKV-7: the first block's value shared with the later ones, the FFN's token mix
                 "rwkv7_tokens", "rwkv7_features"):
        config = _config(name)
        model = checkpoint.build_model(config, 3).double()
        cfg = checkpoint.recur_config(config)
        n = min(150, cfg["max_positions"] or 150)
        xs = [golden.random_inputs(cfg, n, s) for s in (1, 2, 3)]
        with torch.no_grad():
            got = batched.forward(model, torch.stack(xs))
            for b, x in enumerate(xs):
                want = model(x)
                err = (got[b] - want).abs().max().item()
                assert err < 1e-10, f"{name}: sequence {b} differs by {err}"


def batched_rejects_other_mixers():
    model = checkpoint.build_model(_config("aft_simple_tokens"), 0)
    try:
        batched.forward(model, torch.zeros(1, 4, dtype=torch.long))
    except ValueError as e:
        assert "block 0" in str(e) and "AFTSimple" in str(e), str(e)
    else:
        raise AssertionError("aft_simple accepted")


def fashion_mnist_reader():
    images, labels = fashion_mnist.load("test")
    assert images.shape == (10000, 784) and images.dtype == np.uint8 and labels.shape == (10000,)
    assert labels.max() == 9 and 0 < images.mean() < 255
    x = fashion_mnist.model_inputs(images[:2])
    assert (x[:, 0] == fashion_mnist.START_TOKEN).all() and (x[:, 1:] == images[:2, :-1]).all()
    with tempfile.TemporaryDirectory() as d:   # a truncated file is refused with its size
        import gzip
        with open(os.path.join(fashion_mnist.DIR, "t10k-labels-idx1-ubyte.gz"), "rb") as f:
            raw = gzip.decompress(f.read())
        for prefix in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
            with gzip.open(os.path.join(d, prefix), "wb") as f:
                f.write(raw[:100])
        try:
            fashion_mnist.load("test", d)
        except ValueError as e:
            assert "not an unsigned-byte IDX file" in str(e) or "bytes of data" in str(e), str(e)
        else:
            raise AssertionError("truncated IDX accepted")


def image_recipe_resumes():
    """2 steps, interrupted, then 2 more == 4 steps in one run (same weights, bit for bit),
    and the export loads back as the trained model; --init starts a new run from a checkpoint."""
    script = os.path.join(HERE, "train_image.py")
    common = [sys.executable, script, "--config", os.path.join(CONFIGS, "image_linear.json"), "--steps", "4",
              "--batch", "2", "--warmup", "2", "--eval-images", "4", "--threads", "1"]
    with tempfile.TemporaryDirectory() as d:
        one, two = os.path.join(d, "one"), os.path.join(d, "two")
        subprocess.run(common + ["--work", one], check=True, capture_output=True)
        r = subprocess.run(common + ["--work", two, "--stop-after", "2"], check=True, capture_output=True,
                           text=True)
        assert "stopping at step 2" in r.stdout, r.stdout
        r = subprocess.run(common + ["--work", two], check=True, capture_output=True, text=True)
        assert "resumed from" in r.stdout and "at step 2" in r.stdout, r.stdout
        a, meta = safetensors.read(os.path.join(one, "export", "weights.safetensors"))
        b, _ = safetensors.read(os.path.join(two, "export", "weights.safetensors"))
        assert a.keys() == b.keys()
        for k in a:   # exact: the same steps on the same batches, one thread, so the same ops in the same order
            assert torch.equal(a[k], b[k]), f"{k} differs after resume"
        assert meta["steps"] == "4" and "train_image.py" in meta["recipe"], meta
        r = subprocess.run(common[:-2] + ["--threads", "1", "--work", two, "--batch", "3"], capture_output=True,
                           text=True)
        assert r.returncode != 0 and "batch=2" in r.stderr, r.stderr   # a checkpoint of another run is refused

        # --init: a new run starts from those weights (0 steps: the export is the checkpoint's model),
        # and refuses a checkpoint of another config.
        init = os.path.join(one, "checkpoint.pt")
        three = os.path.join(d, "three")
        r = subprocess.run(common[:4] + ["--steps", "0", "--work", three, "--init", init] + common[6:],
                           check=True, capture_output=True, text=True)
        assert "initialised from" in r.stdout and "(step 4," in r.stdout, r.stdout
        c, _ = safetensors.read(os.path.join(three, "export", "weights.safetensors"))
        for k in a:   # exact: 0 steps export the checkpoint's tensors
            assert torch.equal(a[k], c[k]), f"{k}: --init did not start from the checkpoint"
        r = subprocess.run([sys.executable, script, "--config", os.path.join(CONFIGS, "image_softmax.json"),
                            "--steps", "1", "--work", os.path.join(d, "four"), "--init", init] + common[6:],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "another model config" in r.stderr, r.stderr


def fold_normalisation_is_exact():
    """A model fed (x − mean) / std == the model with the normalisation folded in, fed x."""
    model = checkpoint.build_model(_config("speech_digits"), 4).double()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 120, generator=g, dtype=torch.float64) * 3 - 2
    mean, std = torch.randn(120, generator=g, dtype=torch.float64), torch.rand(120, generator=g) + 0.5
    with torch.no_grad():
        want = model((x - mean) / std)
        speech.fold_normalisation(model, mean, std.double())
        got = model(x)
    assert (got - want).abs().max().item() < 1e-10


def speech_recipe_runs():
    """Corpus of 6 + 2 utterances, 3 training steps per speech config, export, and the exported
    model loads back."""
    with tempfile.TemporaryDirectory() as d:
        corpus, work = os.path.join(d, "corpus"), os.path.join(d, "work")
        subprocess.run([sys.executable, os.path.join(HERE, "make_speech_corpus.py"), "--out", corpus, "--train",
                        "6", "--test", "2", "--jobs", "1"], check=True, capture_output=True)
        for split, n in (("train", 6), ("test", 2)):
            rows = speech.read_manifest(corpus, split)
            assert len(rows) == n and all(os.path.exists(path) and digits.isdigit() for path, digits in rows), rows
        # Both shipped speech configs; RWKV-7's trains through the chunked recurrence under bf16 autocast.
        for name in ("speech_digits", "speech_digits_rwkv7"):
            out = os.path.join(work, name)
            r = subprocess.run([sys.executable, os.path.join(HERE, "train_speech.py"), "--config",
                                os.path.join(CONFIGS, f"{name}.json"), "--corpus", corpus, "--work", out,
                                "--steps", "3", "--batch", "2", "--warmup", "1", "--threads", "1"],
                               check=True, capture_output=True, text=True)
            assert "held-out speakers: digit error rate" in r.stdout, r.stdout
            model, _ = checkpoint.load(os.path.join(out, "export"))
            assert model.input.projection.weight.shape == (128, 120)


def main():
    run_checks([(f.__name__, f) for f in (batched_equals_reference, batched_rejects_other_mixers,
                                         fashion_mnist_reader, image_recipe_resumes,
                                         fold_normalisation_is_exact, speech_recipe_runs)])


if __name__ == "__main__":
    main()
