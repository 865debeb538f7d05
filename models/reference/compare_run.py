#!/usr/bin/python3
"""Compare recur-run's outputs with the PyTorch reference on random inputs.

    /usr/bin/python3 models/reference/compare_run.py --model-dir DIR --recur-run BIN
        --model MODEL.recur [--steps N] [--input-seed S] [--abs A] [--rel R]

DIR is a weights directory written by export.py, MODEL.recur its conversion by
recur-convert. The inputs are drawn as make_golden.py draws them; the reference
is the model run in float64. Passes when max|Δ| <= A and ‖Δ‖/‖ref‖ <= R (the
defaults are tests/parity/parity_check's); exits 1 otherwise.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from recur_ref import checkpoint, golden


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="weights directory (export.py)")
    p.add_argument("--recur-run", required=True, help="path of the recur-run binary")
    p.add_argument("--model", required=True, help="the converted .recur model")
    p.add_argument("--steps", type=int, default=500, help="sequence length N")
    p.add_argument("--input-seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--abs", type=float, default=1e-4, help="max |Δ| tolerance")
    p.add_argument("--rel", type=float, default=1e-5, help="‖Δ‖/‖ref‖ tolerance")
    args = p.parse_args()

    model, _ = checkpoint.load(args.model_dir)
    inputs = golden.random_inputs(model.config, args.steps, args.input_seed)
    with torch.no_grad():
        want = model.double()(inputs).numpy()                       # (N, out_width) f64
    with tempfile.TemporaryDirectory() as tmp:
        in_path, out_path = os.path.join(tmp, "input.npy"), os.path.join(tmp, "output.npy")
        np.save(in_path, inputs.numpy())
        subprocess.run([args.recur_run, args.model, "--input", in_path, "--output", out_path], check=True)
        got = np.load(out_path).astype(np.float64)                  # (N, out_width) f32 → f64
    if got.shape != want.shape:
        sys.exit(f"recur-run wrote shape {got.shape}, the reference computes {want.shape}")
    diff = got - want
    max_abs = float(np.abs(diff).max())
    rel = float(np.linalg.norm(diff) / max(np.linalg.norm(want), np.finfo(np.float64).tiny))
    ok = max_abs <= args.abs and rel <= args.rel
    print(f"recur-run vs PyTorch (float64), {args.steps} steps: max|Δ| {max_abs:.3e} (<= {args.abs:.0e}), "
          f"‖Δ‖/‖ref‖ {rel:.3e} (<= {args.rel:.0e}), max|ref| {float(np.abs(want).max()):.3e}: "
          f"{'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
