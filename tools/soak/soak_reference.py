#!/usr/bin/python3
"""Drift of a recur-soak run from a float64 PyTorch run of the same stream.

    build/release/tools/recur-soak MODEL.recur --input IN.npy --steps 1000000 --out SOAK_DIR
    /usr/bin/python3 tools/soak/soak_reference.py --weights WEIGHTS_DIR --input IN.npy --soak SOAK_DIR

WEIGHTS_DIR is the converter's input the model was made from (weights.safetensors +
config.json, e.g. models/zoo/speech_digits). The reference runs the stream in float64
in its chunked form, carrying the state from chunk to chunk (RecurModel.forward with
state), cycling through IN.npy as recur-soak does, and compares the outputs recur-soak
saved before each checkpoint (SOAK_DIR/outputs_<step>.npy). It prints, per checkpoint,
max |recur − float64| and that over max |float64|; drift is how the first grows from
the first checkpoint to the last. Only models whose state is fixed (no softmax KV
cache, no learned positions) make sense here.
"""
import argparse
import os
import re
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models", "reference"))
from recur_ref import checkpoint  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", required=True, help="weights.safetensors + config.json directory")
    p.add_argument("--input", required=True, help="the .npy recur-soak cycled through")
    p.add_argument("--soak", required=True, help="recur-soak's --out directory")
    p.add_argument("--chunk", type=int, default=8192, help="positions per reference call")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-abs", type=float, default=0,
                   help="exit with status 1 if max |Δ| at any checkpoint exceeds this (0: report only)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    saved = {}
    for name in os.listdir(args.soak):
        m = re.fullmatch(r"outputs_(\d+)\.npy", name)
        if m:
            saved[int(m.group(1))] = np.load(os.path.join(args.soak, name))
    if not saved:
        p.error(f"{args.soak} holds no outputs_<step>.npy (run recur-soak with --out)")
    model, _ = checkpoint.load(args.weights)
    model = model.double()
    inputs = torch.from_numpy(np.load(args.input))
    inputs = inputs.double() if inputs.is_floating_point() else inputs.long()
    n = len(inputs)
    steps = max(saved)
    print(f"float64 reference over {steps} steps ({n}-element input, cycled), chunks of {args.chunk}",
          flush=True)

    rows = []
    state = None
    window = max(len(o) for o in saved.values())
    tail = None  # the previous chunk's last `window` outputs: a window may straddle chunks
    start = time.time()
    with torch.no_grad():
        for begin in range(0, steps, args.chunk):
            end = min(steps, begin + args.chunk)
            x = inputs[torch.arange(begin, end) % n]
            out, _, state = model(x, state, return_layers=True)
            first = begin
            if tail is not None:
                out, first = torch.cat([tail, out]), begin - len(tail)
            for step, recur_out in saved.items():
                if begin < step <= end:
                    ref = out[step - len(recur_out) - first:step - first].numpy()
                    err = float(np.abs(recur_out - ref).max())
                    rows.append((step, err, err / float(np.abs(ref).max()),
                                 float(np.mean(recur_out.argmax(-1) == ref.argmax(-1)))))
            tail = out[-window:]
    rows.sort()
    print(f"({time.time() - start:.0f} s)")
    print(f"{'steps':>10} {'max |Δ|':>12} {'relative':>12} {'same argmax':>12}")
    for step, err, rel, same in rows:
        print(f"{step:>10} {err:>12.3e} {rel:>12.3e} {same:>12.3f}")
    print(f"drift: max |Δ| {rows[0][1]:.3e} after {rows[0][0]} steps, {rows[-1][1]:.3e} after "
          f"{rows[-1][0]} steps ({rows[-1][1] / max(rows[0][1], 1e-30):.1f}×)")
    worst = max(err for _, err, _, _ in rows)
    if args.max_abs and worst > args.max_abs:
        print(f"FAILED: max |Δ| {worst:.3e} exceeds --max-abs {args.max_abs:g}")
        sys.exit(1)


if __name__ == "__main__":
    main()
