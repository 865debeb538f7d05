"""What the library layout tests share: save a library's model as its users
do (torch.save of the state_dict, and safetensors), convert each file with one
recur-convert command, run the converted model with the recur package and
compare it with the library's own forward.

Environment: RECUR_CONVERT, the recur-convert binary (CTest sets it).
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "models", "reference"))
from recur_ref import safetensors  # noqa: E402

import recur  # noqa: E402

# The bound every layout is held to: |recur − library| <= ATOL + RTOL·|library|.
ATOL = 1e-4
RTOL = 1e-5


def recur_convert(*args):
    """Runs recur-convert; returns (exit status, stderr)."""
    done = subprocess.run([os.environ["RECUR_CONVERT"], *map(str, args)],
                          capture_output=True, text=True)
    return done.returncode, done.stderr


# The half-precision dtypes users save state_dicts in (model.half(), model.bfloat16()).
HALF_DTYPES = [torch.float16, torch.bfloat16]


def rwkv7_carrying(vocab, shape, source, tmp):
    """A small random RWKV-7 (SHAPE: layers, C, head size, vocab rows, decay / a / v /
    gate low-rank dims) carrying the vocabulary file `vocab`, converted from `source`:
    "pth" (a BlinkDL .pth with recur-convert --tokenizer) or "gguf" (a GGUF file that
    carries it, recur_ref/gguf_rwkv7.write_gguf). Asserts the conversion warns of
    nothing (the whole vocabulary came along); returns recur.Tokenizer of the model."""
    from recur_ref.gguf_rwkv7 import write_gguf
    from recur_ref.rwkv7 import random_state_dict
    layers, c, n, rows, d_w, d_a, d_v, d_g = shape
    sd = random_state_dict(layers, c, n, rows, d_w, d_a, d_v, d_g, seed=5)
    model = tmp / "m.recur"
    if source == "pth":
        torch.save(sd, tmp / "m.pth")
        rc, err = recur_convert(tmp / "m.pth", "--tokenizer", vocab, "-o", model)
    else:
        from gguf import GGMLQuantizationType as Q
        write_gguf(tmp / "m.gguf", sd, Q.F32, layers, c, n, d_w, d_a, d_v, d_g, vocab=vocab)
        rc, err = recur_convert(tmp / "m.gguf", "-o", model)
    assert rc == 0, err
    assert err == ""
    return recur.Tokenizer(recur.Model(str(model)))


def save_and_convert(model, config, tmp_path, name, state=None):
    """Saves `model`'s state_dict (or `state`, one from saved_in) as model.pt
    and model.safetensors and the config as JSON, converts each with one
    recur-convert command, and returns the two .recur paths. Half-precision
    tensors keep their dtype in both files; the rest go to safetensors as
    float32."""
    state = model.state_dict() if state is None else state
    half = lambda v: v.dtype in HALF_DTYPES  # noqa: E731
    pt, st = tmp_path / f"{name}.pt", tmp_path / f"{name}.safetensors"
    torch.save(state, pt)
    safetensors.write(str(st), {k: (v.detach() if half(v) else v.detach().float()).contiguous()
                                for k, v in state.items()})
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    out = []
    for weights in (pt, st):
        path = tmp_path / f"{weights.name}.recur"
        rc, err = recur_convert(weights, "--config", cfg, "-o", path)
        assert rc == 0, f"recur-convert {weights.name}: {err}"
        out.append(path)
    return out


def saved_in(dtype, model, make):
    """`model`'s state_dict with every floating tensor in `dtype` (float16 or
    bfloat16), as torch.save(model.half().state_dict()) writes it, and a
    freshly made float32 model (make()) loaded with it, in eval mode:
    load_state_dict copies into the float32 tensors, so the library computes
    with the rounded values, its buffers' included. A fresh model, because
    rotary-embedding-torch caches its angle tables per length in a dict that
    load_state_dict leaves alone."""
    state = {k: v.detach().to(dtype) if v.is_floating_point() else v
             for k, v in model.state_dict().items()}
    fresh = make()
    fresh.load_state_dict(state)
    assert all(v.dtype != dtype for v in fresh.state_dict().values())
    return state, fresh.eval()


def refusal(config, tmp_path, state=None):
    """recur-convert's message for a config it must refuse."""
    cfg = tmp_path / "refused.json"
    cfg.write_text(json.dumps(config))
    weights = tmp_path / "refused.safetensors"
    safetensors.write(str(weights), state or {"unused": torch.zeros(1)})
    rc, err = recur_convert(weights, "--config", cfg, "-o", tmp_path / "refused.recur")
    assert rc == 1, f"recur-convert accepted {config}"
    return err.strip()


def assert_close(got, want, what):
    """Holds got to the layout bound around want; returns max |Δ|."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, library {want.shape}"
    err = np.abs(got - want)
    over = err > ATOL + RTOL * np.abs(want)
    if over.any():
        i = np.unravel_index(np.argmax(err - (ATOL + RTOL * np.abs(want))), err.shape)
        raise AssertionError(f"{what}: {int(over.sum())} of {err.size} values past "
                             f"{ATOL} + {RTOL}·|x|; worst at {i}: recur {got[i]!r}, "
                             f"library {want[i]!r}")
    return float(err.max())


def library_forward(model, xs):
    """The library's eval() forward in float64 on xs (B, N) token ids or
    (B, N, F) frames."""
    model = model.double().eval()
    with torch.no_grad():
        x = torch.as_tensor(xs)
        x = x.long() if x.dtype in (torch.int32, torch.int64) else x.double()
        return model(x).numpy()


def encode(path, xs):
    with recur.Model(str(path)).session(batch=xs.shape[0]) as s:
        return s.encode(xs)


def step_by_step(path, xs):
    with recur.Model(str(path)).session(batch=xs.shape[0]) as s:
        return np.stack([s.step(xs[:, t]) for t in range(xs.shape[1])], axis=1)


def prefill_in_chunks(path, xs, chunks):
    """Prefill over consecutive chunks of the given lengths (their sum: N)."""
    out, t = [], 0
    with recur.Model(str(path)).session(batch=xs.shape[0]) as s:
        for n in chunks:
            out.append(s.prefill(xs[:, t:t + n]))
            t += n
    assert t == xs.shape[1]
    return np.concatenate(out, axis=1)


def check_modes(paths, xs, want, name, causal, first_chunks):
    """Each converted file stepped one position at a time and prefilled in
    chunks (first_chunks, then the rest), when causal; else encoded. Returns
    the largest |Δ| against want."""
    worst, n = 0.0, xs.shape[1]
    chunks = [*first_chunks, n - sum(first_chunks)]
    for path in paths:
        if causal:
            worst = max(worst, assert_close(step_by_step(path, xs), want, f"{name} {path.name} step"))
            worst = max(worst, assert_close(prefill_in_chunks(path, xs, chunks), want,
                                            f"{name} {path.name} prefill"))
        else:
            worst = max(worst, assert_close(encode(path, xs), want, f"{name} {path.name}"))
    return worst


def perturb_norms(model, seed):
    """Moves every LayerNorm off its identity initialisation, so that a norm
    mapped to the wrong place shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm) and m.elementwise_affine:
                m.weight.add_(0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.add_(0.2 * torch.randn(m.bias.shape, generator=g))


def tokens(seed, batch, n, vocab):
    return np.random.default_rng(seed).integers(0, vocab, (batch, n)).astype(np.int32)


def frames(seed, batch, n, width):
    return np.random.default_rng(seed).standard_normal((batch, n, width)).astype(np.float32)


def check_forms(path, xs, want):
    """The converted model at `path` on token ids xs (B, N) against the logits `want`
    (B, N, V): stepped token by token, prefilled in uneven chunks, saved mid-way and resumed
    in another session, and as a batch of one. Returns the largest |Δ|."""
    batch, positions = xs.shape
    model = recur.Model(str(path))

    with model.session(batch=batch) as s:  # token by token
        got = np.stack([s.step(xs[:, t]) for t in range(positions)], axis=1)
    worst = assert_close(got, want, "step")

    cuts = [1, 7, positions // 3, positions - 8 - positions // 3]  # uneven prefill chunks
    with model.session(batch=batch) as s:
        parts, t = [], 0
        for k in cuts + [positions - sum(cuts)]:
            parts.append(s.prefill(xs[:, t:t + k]))
            t += k
    worst = max(worst, assert_close(np.concatenate(parts, axis=1), want, "prefill in chunks"))

    half = positions // 2  # saved mid-way, resumed in another session
    with model.session(batch=batch) as s:
        first = s.prefill(xs[:, :half])
        blobs = [s.save_state(b) for b in range(batch)]
    with model.session(batch=batch) as s:
        for b, blob in enumerate(blobs):
            s.load_state(b, blob)
        rest = np.stack([s.step(xs[:, t]) for t in range(half, positions)], axis=1)
    worst = max(worst, assert_close(np.concatenate([first, rest], axis=1), want, "saved and resumed"))

    with model.session(batch=1) as s:  # a batch of one equals the batch's stream 0
        worst = max(worst, assert_close(s.prefill(xs[:1]), want[:1], "one stream"))
    print(f"{path}: max |Δ| {worst:.2e} of logits up to {np.abs(want).max():.2f}")
    return worst
