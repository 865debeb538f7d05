#!/usr/bin/python3
"""Run a model in PyTorch and save its output and per-layer activations for recur-parity.

    /usr/bin/python3 models/reference/dump_activations.py --model-dir DIR --out OUT
        (--input IN.npy | --random-input N [--input-seed S])
        [--device cuda|cpu] [--dtype float32|float64] [--tf32]

DIR is a weights directory (weights.safetensors + config.json, as export.py and the
trainers write it). The model runs its parallel causal forward (the encoder form for
non-causal models) on --device, as a training run would evaluate it, and OUT receives:

    input.npy       the input it ran (a copy of IN, or the random one drawn)
    output.npy      float32 (N, output_width)
    layer_<i>.npy   float32 (N, d_model): the residual stream after block i
    meta.json       device, dtype, TF32 settings, torch version, N

Then `recur-parity MODEL.recur --input OUT/input.npy --reference OUT` compares recur's
CPU step and chunked runs with these per layer. TF32 is off unless --tf32: with it, an
Ampere-or-newer GPU computes float32 matrix products with 10-bit mantissas, and the
comparison measures that rounding (~1e-3) rather than recur's.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

from recur_ref import checkpoint, golden


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="weights directory: weights.safetensors + config.json")
    p.add_argument("--out", required=True, help="output directory")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="input .npy: token ids (N,) or frames (N, F)")
    source.add_argument("--random-input", type=int, metavar="N",
                        help="draw N random inputs as make_golden.py does")
    p.add_argument("--input-seed", type=int, default=1, help="seed of --random-input")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--tf32", action="store_true", help="allow TF32 matrix products (default: off)")
    args = p.parse_args()

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("error: --device cuda, but this PyTorch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32

    model, config = checkpoint.load(args.model_dir)
    if args.input:
        inputs = torch.from_numpy(np.load(args.input))
    else:
        inputs = golden.random_inputs(config, args.random_input, args.input_seed)
    tokens = config["input"]["kind"] == "tokens"
    if tokens and (inputs.dim() != 1 or inputs.dtype.is_floating_point):
        sys.exit(f"error: a token model takes integer ids of shape (N,), got {inputs.dtype} "
                 f"{tuple(inputs.shape)}")
    if not tokens and (inputs.dim() != 2 or inputs.shape[1] != config["input"]["feature_width"]):
        sys.exit(f"error: this model takes frames of shape (N, {config['input']['feature_width']}), "
                 f"got {tuple(inputs.shape)}")

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = model.to(device=device, dtype=dtype).eval()
    x = inputs.to(device=device, dtype=torch.long if tokens else dtype)
    with torch.no_grad():
        out, layers, _ = model(x, return_layers=True)

    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "input.npy"), inputs.numpy())
    np.save(os.path.join(args.out, "output.npy"), out.float().cpu().numpy())
    for i, h in enumerate(layers):
        np.save(os.path.join(args.out, f"layer_{i}.npy"), h.float().cpu().numpy())
    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": args.dtype,
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "torch": torch.__version__,
        "steps": int(inputs.shape[0]),
        "model_dir": os.path.abspath(args.model_dir),
    }
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(f"dump_activations: {meta['steps']} positions, {len(layers)} layers on {meta['device']} "
          f"({args.dtype}, TF32 {'on' if args.tf32 else 'off'}) -> {args.out}")


if __name__ == "__main__":
    main()
