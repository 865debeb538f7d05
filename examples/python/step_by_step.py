#!/usr/bin/env python3
"""A PyTorch model in recur, from Python: export, convert, run, compare, resume, time.

    build/venv/bin/python examples/python/step_by_step.py \\
        [--config models/configs/tiny_pre_tokens.json] [--steps 200] [--out model.recur]

Trains nothing: the model is the PyTorch reference of models/reference (random
weights, seed 1) built from a recur config. Its state_dict is converted with
recur.convert (the converter library, as recur-convert runs it), then run by
recur element by element and in one prefill, both compared with the PyTorch
model in float64; the state saved halfway is resumed in a new session; last,
one step is timed. Exits 1 if recur and PyTorch disagree.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "models", "reference"))
from recur_ref import checkpoint, golden  # noqa: E402

import recur  # noqa: E402


def compare(what, got, want, tol_abs=1e-4, tol_rel=1e-5):
    """The parity rule of docs/correctness.md: max|d| <= tol_abs * max(1, max|ref|), rel(L2) <= tol_rel."""
    d = got.astype(np.float64) - want
    max_abs = float(np.abs(d).max())
    rel = float(np.linalg.norm(d) / max(np.linalg.norm(want), 1e-300))
    ok = max_abs <= tol_abs * max(1.0, float(np.abs(want).max())) and rel <= tol_rel
    print(f"{what:<28} max|d| {max_abs:.2e}  rel {rel:.2e}  {'ok' if ok else 'FAIL'}")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(REPO, "models", "configs", "tiny_pre_tokens.json"))
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out", help="also write the converted model to this file")
    args = p.parse_args()

    # 1. The PyTorch model, and its weights converted for recur.
    config = json.load(open(args.config))
    reference = checkpoint.build_model(config, 1).double().eval()
    model = recur.Model(recur.convert(reference.state_dict(), config))
    if args.out:
        recur.convert(reference.state_dict(), config, args.out)
    print(f"{os.path.basename(args.config)}: {model.num_layers} layers, {model.input_kind} in, "
          f"{model.output_width} out, {model.state_bytes} state bytes a stream")
    if not model.recurrent:
        sys.exit("this example steps a causal model; the config is an encoder")

    # 2. The same inputs through PyTorch (float64) and recur: step by step, then one prefill.
    inputs = golden.random_inputs(reference.config, args.steps, 0)
    with torch.no_grad():
        want = reference(inputs.double() if inputs.is_floating_point() else inputs).numpy()
    x = inputs.numpy().astype(np.int32 if model.input_kind == "tokens" else np.float32)
    ok = True
    with model.session() as s:
        stepped = np.concatenate([s.step(x[t:t + 1]) for t in range(args.steps)])
    ok &= compare("step by step vs PyTorch", stepped, want)
    with model.session() as s:
        prefilled = s.prefill(x[None])[0]
    ok &= compare("one prefill vs PyTorch", prefilled, want)

    # 3. Save the state halfway, resume it in another session.
    half = args.steps // 2
    with model.session() as first, model.session() as second:
        first.prefill(x[None, :half], outputs=False)
        second.load_state(0, first.save_state(0))
        resumed = second.prefill(x[None, half:])[0]
    ok &= compare("resumed after a save vs PyTorch", resumed, want[half:])

    # 4. One step's time (the runtime's, through the binding), in runs that
    # stay within the model's learned positions, reset between runs.
    with model.session() as s:
        one = x[:1]
        run = min(500, model.max_positions or 500)
        elapsed, n = 0.0, 0
        for r in range(5):
            s.reset()
            start = time.perf_counter()
            for _ in range(run):
                s.step(one)
            if r > 0:  # the first run warms up
                elapsed, n = elapsed + time.perf_counter() - start, n + run
        per_step = elapsed / n
    print(f"step: {per_step * 1e6:.1f} us ({recur.simd_target()}, 1 thread)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
