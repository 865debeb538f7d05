#!/usr/bin/python3
"""Figure-1-style comparison of the mixers (a benchmark program, not a test).

As in "Transformers are RNNs" (Katharopoulos et al. 2020, Figure 1): time and
peak memory of a forward pass over N positions, N = 512 … 65,536, for mixers
of the same width, and the latency of one decode step at position P. Each
measurement is its own `recur-bench` process, so its peak RSS belongs to that
N alone. Writes a markdown table and a PNG plot to --out.

    /usr/bin/python3 benchmarks/figure1.py --recur-convert build/release/converter/recur-convert \\
        --recur-bench build/release/benchmarks/recur-bench --out out/figure1

Models: 2 layers, d_model 128, 4 heads of 32, d_ff 256, frame input of width
128 (no learned positions, so N is not bounded by the model), no head;
weights from the reference's export with seed 1. Softmax attention, AFT-full
and GAU are quadratic in N: they stop at --quadratic-max-n (default 16,384) to
keep the run short (AFT-full and GAU take max_length 20,000 for that).
--mixers runs a subset (names as in the table's first column, comma-separated).
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

BASE = {
    "layout": "recur", "d_model": 128, "n_layers": 2, "norm_placement": "pre",
    "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 128, "projection": False},
    "max_positions": 0, "ffn": {"d_ff": 256, "activation": "gelu"}, "final_norm": True, "head": None,
}
MIXERS = {
    "softmax": {"type": "softmax_attention", "heads": 4, "dk": 32, "dv": 32},
    "linear": {"type": "linear_attention", "heads": 4, "dk": 32, "dv": 32,
               "feature_map": "elu_plus_one", "eps": 1e-6},
    "sliding window (w=64)": {"type": "sliding_window", "heads": 4, "dk": 32, "dv": 32, "window": 64},
    "aft-simple": {"type": "aft_simple", "heads": 4, "dk": 32},
    # The paper's FLASH shape at this width: E = 2·d_model, s = 64, chunk 128.
    "flash (C=128)": {"type": "flash", "expansion_dim": 256, "qk_dim": 64, "chunk": 128},
    "aft-local (s=64)": {"type": "aft_local", "heads": 4, "dk": 32, "window": 64},
    "aft-full (r=64)": {"type": "aft_full", "heads": 4, "dk": 32, "max_length": 20000, "bias_rank": 64},
    # GAU at this width: E = 2·d_model, s = 64 (the paper's shape), one head.
    "gau": {"type": "gau", "expansion_dim": 256, "qk_dim": 64, "max_length": 20000},
}
QUADRATIC = {"softmax", "aft-full (r=64)", "gau"}


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr}")
    return done.stdout


def bench(args, model, extra):
    """The JSON rows of one recur-bench process, and its peak RSS (MiB)."""
    out = run([args.recur_bench, model, "--json", "--threads", str(args.threads)] + extra)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recur-convert", required=True)
    p.add_argument("--recur-bench", required=True)
    p.add_argument("--out", default=os.path.join(ROOT, "out", "figure1"))
    p.add_argument("--lengths", default="512,1024,2048,4096,8192,16384,32768,65536")
    p.add_argument("--positions", default="1,256,1024,4096,16384")
    p.add_argument("--quadratic-max-n", type=int, default=16384)
    p.add_argument("--mixers", default=",".join(MIXERS))
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lengths = [int(n) for n in args.lengths.split(",")]
    positions = [int(n) for n in args.positions.split(",")]

    chosen = args.mixers.split(",")
    unknown = [m for m in chosen if m not in MIXERS]
    if unknown:
        sys.exit(f"unknown --mixers {unknown}; known: {list(MIXERS)}")
    models = {}
    for name in chosen:
        mixer = MIXERS[name]
        slug = name.split(" ")[0]
        d = os.path.join(args.out, slug)
        os.makedirs(d, exist_ok=True)
        config = dict(BASE, mixer=mixer, notes=f"figure1.py: {name}")
        with open(os.path.join(d, "figure1_config.json"), "w") as f:
            json.dump(config, f, indent=1)
        run(["/usr/bin/python3", os.path.join(ROOT, "models/reference/export.py"),
             "--config", os.path.join(d, "figure1_config.json"), "--seed", "1", "--out", d])
        models[name] = os.path.join(d, "model.recur")
        run([args.recur_convert, os.path.join(d, "weights.safetensors"), "--config",
             os.path.join(d, "config.json"), "-o", models[name]])

    forward = {}  # name -> {N: (ms, MiB)}
    decode = {}   # name -> {P: µs}
    for name, model in models.items():
        forward[name] = {}
        for n in lengths:
            if name in QUADRATIC and n > args.quadratic_max_n:
                continue
            rows = bench(args, model, ["--prefill", str(n), "--steps", "1", "--warmup", "0"])
            row = next(r for r in rows if r["test"] == f"prefill {n}")
            forward[name][n] = (row["median_us"] / 1e3, row["peak_rss_mib"])
            print(f"{name:24s} N={n:6d}: {forward[name][n][0]:10.1f} ms, {forward[name][n][1]:7.1f} MiB",
                  flush=True)
        rows = bench(args, model, ["--at", ",".join(map(str, positions)), "--steps", "50",
                                   "--warmup", "5"])
        decode[name] = {int(r["test"].split("@")[1]): r["median_us"] for r in rows
                        if r["test"].startswith("step @")}
        print(f"{name:24s} decode: {decode[name]}", flush=True)

    lines = ["| mixer | " + " | ".join(f"N={n}" for n in lengths) + " |",
             "|---|" + "---|" * len(lengths)]
    for name in models:
        cells = [f"{forward[name][n][0]:.1f} ms / {forward[name][n][1]:.0f} MiB" if n in forward[name]
                 else "—" for n in lengths]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| mixer | " + " | ".join(f"step @{p}" for p in positions) + " |",
              "|---|" + "---|" * len(positions)]
    for name in models:
        lines.append(f"| {name} | " + " | ".join(f"{decode[name][p]:.1f} µs" for p in positions) + " |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "figure1.md"), "w") as f:
        f.write(table)
    print(table)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing (Debian: python3-matplotlib): no PNG")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name in models:
        ns = sorted(forward[name])
        axes[0].loglog(ns, [forward[name][n][0] for n in ns], "o-", label=name)
        axes[1].loglog(ns, [forward[name][n][1] for n in ns], "o-", label=name)
        ps = sorted(decode[name])
        axes[2].loglog(ps, [decode[name][q] for q in ps], "o-", label=name)
    axes[0].set(title="forward pass (prefill), 1 thread", xlabel="sequence length N", ylabel="ms")
    axes[1].set(title="peak memory of the process", xlabel="sequence length N", ylabel="MiB")
    axes[2].set(title="one decode step at position P", xlabel="position P", ylabel="µs")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "figure1.png"), dpi=110)
    print("wrote", os.path.join(args.out, "figure1.png"))


if __name__ == "__main__":
    main()
