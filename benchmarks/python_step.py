"""Per-step time of recur's Python binding at batch 1: Session.step in a loop.

    build/venv/bin/python benchmarks/python_step.py MODEL [--steps 2000] [--warmup 200]

Times each call (time.perf_counter_ns around it, which the numbers include)
and prints the median and 10th/90th percentiles in microseconds; compare with
`recur-bench MODEL --batch 1 --steps 2000` (the C call timed in C) in the same
run: the difference is the binding's overhead (docs/performance.md,
"Python binding").
"""

import argparse
import time

import numpy as np

import recur


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    args = ap.parse_args()
    model = recur.Model(args.model)
    if model.input_kind == "tokens":
        x = np.zeros(1, np.int32)
    else:
        x = np.zeros((1, model.feature_width), np.float32)
    limit = model.max_positions or (1 << 62)
    clock = time.perf_counter_ns
    times = []
    with model.session(batch=1, threads=1) as s:
        for i in range(args.warmup + args.steps):
            if i % limit == 0:
                s.reset()
            t0 = clock()
            s.step(x)
            times.append(clock() - t0)
    t = np.array(times[args.warmup:]) / 1e3
    print("python step: median %.2f us, p10 %.2f, p90 %.2f (batch 1, %d steps, %s)"
          % (np.median(t), np.percentile(t, 10), np.percentile(t, 90), args.steps,
             recur.simd_target()))

if __name__ == "__main__":
    main()
