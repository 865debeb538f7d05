#!/usr/bin/python3
"""Export a model and write its float64 golden file.

    /usr/bin/python3 models/reference/make_golden.py --config models/configs/X.json --seed S
        --steps N --out DIR [--layout recur|fast-transformers] [--input-seed S2]
    /usr/bin/python3 models/reference/make_golden.py --weights models/zoo/M --steps N --out DIR
        [--input-seed S2]

Runs export.py's export into DIR (or, with --weights, copies a trained weights
directory there), then writes DIR/golden.bin (format: recur_ref/golden.py) for
N random inputs drawn with --input-seed (default S + 1, or 1 with --weights):
the model loaded back from DIR, run in float64.
"""

import argparse
import json
import os
import shlex
import shutil
import time

from recur_ref import checkpoint, golden

GOLDEN_FILE = "golden.bin"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_path(path: str) -> str:
    """path relative to the repository root when inside it, else absolute."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path, REPO_ROOT)
    return path if rel.startswith("..") else rel


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="recur-layout or fast-transformers builder config (JSON)")
    source.add_argument("--weights", help="a trained weights directory (weights.safetensors + config.json)")
    p.add_argument("--seed", type=int, help="torch.manual_seed for the weights (with --config)")
    p.add_argument("--steps", type=int, required=True, help="sequence length N")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--layout", choices=checkpoint.LAYOUTS, help="expected layout of --config")
    p.add_argument("--input-seed", type=int, help="seed of the random inputs (default: --seed + 1)")
    args = p.parse_args()
    if (args.seed is None) != (args.weights is not None):
        p.error("--seed goes with --config (and only there)")
    input_seed = args.input_seed if args.input_seed is not None else 1 if args.weights else args.seed + 1
    if args.steps < 1:
        p.error("--steps must be >= 1")
    start = time.perf_counter()
    with open(args.config or os.path.join(args.weights, checkpoint.CONFIG_FILE)) as f:
        config = json.load(f)
    try:
        layout = checkpoint.check_layout(config, args.layout)
        max_positions = checkpoint.recur_config(config)["max_positions"]
        if 0 < max_positions < args.steps:
            raise ValueError(f"--steps {args.steps} exceeds the model's max_positions {max_positions}")
        if args.weights:
            os.makedirs(args.out, exist_ok=True)
            for name in (checkpoint.WEIGHTS_FILE, checkpoint.CONFIG_FILE):
                shutil.copyfile(os.path.join(args.weights, name), os.path.join(args.out, name))
            source = ["--weights", repo_path(args.weights)]
        else:
            checkpoint.export(config, args.seed, args.out)
            source = ["--config", repo_path(args.config), "--seed", str(args.seed), "--layout", layout]
        model, _ = checkpoint.load(args.out)  # the golden is of exactly what was written
        inputs = golden.random_inputs(model.config, args.steps, input_seed)
        command = shlex.join(["/usr/bin/python3", "models/reference/make_golden.py", *source, "--steps",
                              str(args.steps), "--out", repo_path(args.out), "--input-seed", str(input_seed)])
        info = {"config": repo_path(args.config or os.path.join(args.weights, checkpoint.CONFIG_FILE)),
                "seed": -1 if args.seed is None else args.seed, "input_seed": input_seed,
                "steps": args.steps, "layout": layout, "command": command}
        golden.write(os.path.join(args.out, GOLDEN_FILE), golden.compute(model, inputs, info))
    except ValueError as e:
        p.error(str(e))
    origin = f"weights {args.weights}" if args.weights else f"seed {args.seed}"
    print(f"wrote {args.out}/{GOLDEN_FILE}: {args.steps} steps, {layout} layout, "
          f"{origin}, input seed {input_seed} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
