#!/usr/bin/python3
"""Step latency of recur vs the PyTorch reference, side by side in one run.

    /usr/bin/python3 benchmarks/bench_vs_torch.py --config models/configs/paper_mnist.json \
        --recur-convert build/release/converter/recur-convert \
        --recur-bench build/release/benchmarks/recur-bench [--batch 1 64] [--steps 300]

Exports the config's reference model (seed 1), converts it, then for each
batch size times (a) PyTorch eager: one recurrent step of B streams with the
reference's own modules, (b) the same step under TorchScript (torch.jit.trace),
and (c) recur-bench, all single-threaded, alternating so machine noise hits
all of them alike. Prints medians and the ratios PyTorch / recur.

PyTorch gets its best settings here: one intra-op thread (like recur),
torch.inference_mode(), Debian's OpenBLAS (libopenblas0-openmp) with the
core type of the CPU it runs on (openblas_coretype.py: SkylakeX with AVX-512,
Haswell with AVX2; set before torch loads).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openblas_coretype  # noqa: E402

openblas_coretype.set_environment()
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_module import BatchedStep, check_against_step, embed, export, load, zero_state  # noqa: E402


def time_torch(fn, x, S, z, steps, warmup=20):
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        _, S2, z2 = fn(x, S, z)
        t1 = time.perf_counter()
        if i >= warmup:
            times.append((t1 - t0) * 1e6)
    return statistics.median(times)


def recur_bench(binary, model_path, batch, steps):
    out = subprocess.run([binary, model_path, "--batch", str(batch), "--steps", str(steps),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--recur-convert", required=True)
    ap.add_argument("--recur-bench", required=True)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians of rounds")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory() as tmp:
        with open(args.config) as f:
            export(json.load(f), seed=1, out_dir=tmp)
        model_path = os.path.join(tmp, "model.recur")
        subprocess.run([args.recur_convert, os.path.join(tmp, "weights.safetensors"), "--config",
                        os.path.join(tmp, "config.json"), "-o", model_path], check=True,
                       capture_output=True)
        model, _ = load(tmp)
        model.eval()
        step = BatchedStep(model).eval()
        cfg = model.config
        print(f"config {args.config}: {sum(p.numel() for p in model.parameters()):,} parameters; "
              f"torch {torch.__version__}, 1 thread, OPENBLAS_CORETYPE="
              f"{os.environ.get('OPENBLAS_CORETYPE')}")
        rows = []
        with torch.inference_mode():
            # The batched step must be the reference's step: check one stream.
            check_against_step(model, step)
            for batch in args.batch:
                x = embed(model, batch)
                S, z = zero_state(cfg, batch)
                traced = torch.jit.trace(step, (x, S, z), check_trace=False)
                eager_t, script_t, recur_t = [], [], []
                for _ in range(args.rounds):
                    eager_t.append(time_torch(step, x, S, z, args.steps))
                    script_t.append(time_torch(traced, x, S, z, args.steps))
                    recur_t.append(recur_bench(args.recur_bench, model_path, batch,
                                               args.steps)["median_us"])
                rows.append((batch, statistics.median(eager_t), statistics.median(script_t),
                             statistics.median(recur_t)))
    print(f"{'batch':>5} {'torch eager us':>15} {'torchscript us':>15} {'recur us':>10} "
          f"{'eager/recur':>12} {'script/recur':>13}")
    for batch, e, s, r in rows:
        print(f"{batch:>5} {e:>15.1f} {s:>15.1f} {r:>10.1f} {e / r:>11.2f}x {s / r:>12.2f}x")


if __name__ == "__main__":
    main()
