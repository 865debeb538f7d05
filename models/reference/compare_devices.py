#!/usr/bin/python3
"""Run every config's reference model on the CPU and on another device, in float64, and compare.

    python3 models/reference/compare_devices.py [--device cuda] [--positions 48] [--tol 1e-9]
        [CONFIG.json ...]

For each config (default: every file in models/configs/) the model is built from
seed 7 (checkpoint.build_model) and run over random inputs: the parallel forward on
the CPU, then the same weights' parallel forward and, for causal models, the first 5
positions stepped one at a time, on --device. Both runs are float64, so they agree
to the rounding of two summation orders (about 1e-15 for these models' |x| ≤ 10²):
a difference past --tol means the reference computes something else on that device
(a tensor left on the CPU, a device-specific op). Needs PyTorch 2.0 or newer for a
device other than the CPU. Prints a line per config and, last, "N passed, M failed";
exit status 1 on any failure.
"""

import argparse
import glob
import json
import os
import sys

import torch

from recur_ref import checkpoint, golden

HERE = os.path.dirname(os.path.abspath(__file__))
STEPPED = 5


def compare(path: str, device: str, positions: int) -> tuple:
    """(parallel max|Δ|, stepped max|Δ| or nan for an encoder) of one config."""
    config = json.load(open(path))
    model = checkpoint.build_model(config, 7).double()
    x = golden.random_inputs(checkpoint.recur_config(config), positions, 8)
    x = x.double() if x.is_floating_point() else x.long()
    with torch.no_grad():
        ref = model(x)
        model = model.to(device)
        parallel = (model(x.to(device)).cpu() - ref).abs().max().item()
        stepped = float("nan")
        if model.causal:
            state, outs = model.init_state(), []
            for t in range(STEPPED):
                y, state, _ = model.step(x[t].to(device), state)
                outs.append(y.cpu())
            stepped = (torch.stack(outs) - ref[:STEPPED]).abs().max().item()
    return parallel, stepped


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="*", help="config files (default: models/configs/*.json)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--positions", type=int, default=48)
    p.add_argument("--tol", type=float, default=1e-9, help="largest max|Δ| that passes")
    args = p.parse_args()
    configs = args.configs or sorted(glob.glob(os.path.join(HERE, "..", "configs", "*.json")))
    try:
        torch.zeros(1, device=args.device)
    except (RuntimeError, AssertionError) as e:  # torch raises either for a missing device
        sys.exit(f"error: no device {args.device}: {e}")
    passed = failed = 0
    for path in configs:
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            parallel, stepped = compare(path, args.device, args.positions)
            ok = parallel <= args.tol and not stepped > args.tol
            result = f"parallel max|d| {parallel:.2e}, stepped {stepped:.2e}"
        except Exception as e:  # report every config, keep going
            ok, result = False, f"{type(e).__name__}: {e}"
        passed, failed = passed + ok, failed + (not ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {result}", flush=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
