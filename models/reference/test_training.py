#!/usr/bin/python3
"""Self-tests of the training side of the reference: the batched forward equals
RecurModel's, the Fashion-MNIST reader, the image recipe's resume, and the speech and
text recipes' runs.
Last line `N passed, M failed`; exit status 1 on failure."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recur_ref import batched, checkpoint, fashion_mnist, golden, safetensors, speech, text  # noqa: E402
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


def _fake_deb(path, package, pages):
    """A .deb (ar: debian-binary, control.tar.xz, data.tar.xz) of `package` holding
    {path inside the package: text}."""
    import io
    import tarfile

    def tar_xz(files):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    members = [("debian-binary", b"2.0\n"),
               ("control.tar.xz", tar_xz({"./control": f"Package: {package}\nVersion: 1.0-test\n".encode()})),
               ("data.tar.xz", tar_xz({k: v.encode() for k, v in pages.items()}))]
    with open(path, "wb") as f:
        f.write(b"!<arch>\n")
        for name, data in members:
            f.write(f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode())
            f.write(data + (b"\n" if len(data) % 2 else b""))


def text_recipe_runs():
    """A .deb of two HTML pages → make_text_corpus.py (prose kept, code and navigation dropped,
    the same output twice); a vocabulary of 300 tokens made from it, which the rwkv package's
    TRIE_TOKENIZER reads and round-trips; 3 training steps of a small RWKV-7 token model,
    the held-out bits per byte, samples, and the export (with its vocab.txt and "tokenizer")
    loads back."""
    sentences = ["The package manager installs the software that the system needs.",
                 "A function returns a value to the code that called it, or None.",
                 "Each user has a home directory where their files are kept.",
                 "The server answers the requests of the clients on the network."]
    para = "".join(f'<div class="para">{sentences[i % 4]} It is paragraph {i}.</div>' for i in range(40))
    pages = {"./usr/share/doc/debian-handbook/html/en-US/a.html":
             f'<html><body><ul class="docnav"><li>Prev chapter and next chapter links</li></ul>{para}'
             '<pre class="screen">$ apt-get install something --with-a-long-option</pre></body></html>',
             "./usr/share/doc/debian-handbook/html/en-US/b.html":
             "<html><body>" + "".join(f"<p>{s} It is on <code>page</code> b.</p>" for s in sentences) +
             "</body></html>"}
    config = {"layout": "recur", "d_model": 32, "n_layers": 2, "norm_placement": "pre", "layer_norm_eps": 1e-5,
              "input": {"kind": "tokens", "vocab_size": 300, "norm": True}, "max_positions": 0,
              "mixer": {"type": "rwkv7", "heads": 2, "head_size": 16, "decay_rank": 8, "rate_rank": 8,
                        "value_rank": 4, "gate_rank": 8},
              "ffn": {"d_ff": 64, "activation": "relu_squared", "token_mix": True}, "final_norm": True,
              "head": {"out": 300, "activation": "none"}}
    with tempfile.TemporaryDirectory() as d:
        deb = os.path.join(d, "debian-handbook_1.0-test_all.deb")
        _fake_deb(deb, "debian-handbook", pages)
        outs = []
        for name in ("corpus", "again"):
            subprocess.run([sys.executable, os.path.join(HERE, "make_text_corpus.py"), "--deb", deb,
                            "--out", os.path.join(d, name), "--held-out-every", "4"], check=True, capture_output=True)
            outs.append([open(os.path.join(d, name, f + ".txt"), "rb").read() for f in ("train", "test")])
        assert outs[0] == outs[1]
        train, test = (t.decode().splitlines() for t in outs[0])
        assert len(train) + len(test) == 44 and len(test) == 11, (len(train), len(test))
        assert train[0] == sentences[0] + " It is paragraph 0." and test[0].endswith("paragraph 3."), train[0]
        assert "It is on page b." in outs[0][0].decode() + outs[0][1].decode()
        assert "apt-get" not in outs[0][0].decode() and "Prev chapter" not in outs[0][0].decode()
        with open(os.path.join(d, "corpus", "source.json")) as f:
            source = json.load(f)
        assert source["packages"][0]["package"] == "debian-handbook" and source["packages"][0]["pages"] == 2

        cfg = os.path.join(d, "config.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        vocab, work = os.path.join(d, "vocab.txt"), os.path.join(d, "work")
        r = subprocess.run([sys.executable, os.path.join(HERE, "train_text.py"), "--config", cfg,
                            "--corpus", os.path.join(d, "corpus"), "--vocab", vocab, "--vocab-size", "300",
                            "--work", work, "--steps", "3", "--batch", "2", "--context", "16", "--warmup", "1",
                            "--threads", "1", "--eval-context", "64", "--sample-tokens", "4"],
                           check=True, capture_output=True, text=True)
        assert "wrote" in r.stdout and "held-out: loss" in r.stdout and "bits/byte" in r.stdout, r.stdout
        assert "--- greedy\nThe system" in r.stdout, r.stdout
        with open(vocab, encoding="utf-8") as f:
            lines = f.read().splitlines()
        assert len(lines) == 299 and lines[0] == "1 '\\x00' 1" and lines[255] == "256 b'\\xff' 1", lines[:2]
        assert text.vocab_size(vocab) == 300
        tokenizer = text.load_tokenizer(vocab)
        line = sentences[0] + " \u00e9\u2019\n"
        ids = tokenizer.encode(line)
        assert tokenizer.decode(ids) == line and len(ids) < 0.7 * len(line.encode()), ids
        model, cfg_back = checkpoint.load(os.path.join(work, "export"))
        assert cfg_back["tokenizer"] == "vocab.txt" and model.head.weight.shape == (300, 32)
        with open(os.path.join(work, "export", "vocab.txt"), encoding="utf-8") as f:
            assert f.read().splitlines() == lines


def main():
    run_checks([(f.__name__, f) for f in (batched_equals_reference, batched_rejects_other_mixers,
                                         fashion_mnist_reader, image_recipe_resumes,
                                         fold_normalisation_is_exact, speech_recipe_runs, text_recipe_runs)])


if __name__ == "__main__":
    main()
