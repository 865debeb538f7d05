#!/usr/bin/python3
"""Compare recur-run's outputs with the PyTorch reference on random inputs.

    /usr/bin/python3 models/reference/compare_run.py --model-dir DIR --recur-run BIN
        --model MODEL.recur [--steps N] [--input-seed S] [--abs A] [--rel R]
        [--batch B] [--mode step|prefill|encode] [--chunk C] [--split K]

DIR is a weights directory written by export.py, MODEL.recur its conversion by
recur-convert. The inputs are drawn as make_golden.py draws them (stream b of a
batch with seed S + b); the reference is the model run in float64, stream by
stream. --batch runs B streams in one recur-run call ((B, N) inputs); --mode
and --chunk are passed on; --split K runs the first K elements, writes the
states (--state-out), and runs the rest from them (--state-in). Passes when
max|Δ| <= A and ‖Δ‖/‖ref‖ <= R (the defaults are tests/parity/parity_check's);
exits 1 otherwise.
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
    p.add_argument("--batch", type=int, default=0, help="streams in one call (0: one, unbatched)")
    p.add_argument("--mode", choices=("step", "prefill", "encode"), help="recur-run --mode")
    p.add_argument("--chunk", type=int, help="recur-run --chunk")
    p.add_argument("--split", type=int, help="run K elements, then the rest from the saved states")
    args = p.parse_args()

    model, _ = checkpoint.load(args.model_dir)
    streams = max(args.batch, 1)
    inputs = [golden.random_inputs(model.config, args.steps, args.input_seed + b) for b in range(streams)]
    with torch.no_grad():
        want = np.stack([model.double()(x).numpy() for x in inputs])  # (B, N, out_width) f64
    if not args.batch:
        want = want[0]
    options = (["--mode", args.mode] if args.mode else []) + \
              (["--chunk", str(args.chunk)] if args.chunk is not None else [])
    with tempfile.TemporaryDirectory() as tmp:
        def run(x, out_path, *extra):
            in_path = os.path.join(tmp, "input.npy")
            np.save(in_path, x)
            subprocess.run([args.recur_run, args.model, "--input", in_path, "--output", out_path,
                            *options, *extra], check=True)
            return np.load(out_path).astype(np.float64)              # f32 → f64
        x = np.stack([i.numpy() for i in inputs]) if args.batch else inputs[0].numpy()
        if args.split is None:
            got = run(x, os.path.join(tmp, "output.npy"))
        else:
            k, state = args.split, os.path.join(tmp, "state.bin")
            first = run(x[:, :k] if args.batch else x[:k], os.path.join(tmp, "first.npy"), "--state-out", state)
            rest = run(x[:, k:] if args.batch else x[k:], os.path.join(tmp, "rest.npy"), "--state-in", state)
            got = np.concatenate([first, rest], axis=1 if args.batch else 0)
    if got.shape != want.shape:
        sys.exit(f"recur-run wrote shape {got.shape}, the reference computes {want.shape}")
    diff = got - want
    max_abs = float(np.abs(diff).max())
    rel = float(np.linalg.norm(diff) / max(np.linalg.norm(want), np.finfo(np.float64).tiny))
    ok = max_abs <= args.abs and rel <= args.rel
    print(f"recur-run vs PyTorch (float64), {streams} x {args.steps} steps: max|Δ| {max_abs:.3e} (<= {args.abs:.0e}), "
          f"‖Δ‖/‖ref‖ {rel:.3e} (<= {args.rel:.0e}), max|ref| {float(np.abs(want).max()):.3e}: "
          f"{'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
