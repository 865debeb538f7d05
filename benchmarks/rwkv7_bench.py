#!/usr/bin/python3
"""recur on RWKV-7 at the published sizes: random-weight BlinkDL checkpoints, converted
with one command each, timed by recur-bench.

    /usr/bin/python3 benchmarks/rwkv7_bench.py --shape 0.1B --out build/rwkv7-bench \\
        --recur-convert build/release/converter/recur-convert \\
        --recur-bench build/release/benchmarks/recur-bench \\
        [--dtypes f32 f16 int8 int4] [--threads 1 2] [--steps 64] [--prefill 512]

Writes the shape's BlinkDL .pth in bfloat16, as BlinkDL ships them (recur_ref/rwkv7.py's
random_state_dict: the package's names, trained-like magnitudes), converts it once per
dtype (int8 and int4 narrow the blocks' r, k, v, o and channel-mix matrices and the head;
the low-rank paths, mixes, norms and the embedding stay f32), and runs recur-bench on
each file: batch-1 decode steps and one prefill of --prefill tokens, per thread count,
with recur-bench's %bound (the weight bytes a step reads against the DRAM bandwidth it
measures). The dtypes are alternated within each thread count, so that machine noise
hits them alike. The shapes (layers, C; head size 64, vocabulary 65,536, FFN 4C, the
low-rank widths from RWKV-LM's trainer) are the published models': 0.1B (12, 768),
0.4B (24, 1024), 1.5B (24, 2048). Memory: the float32 state dict while the checkpoint is
written; a conversion maps the checkpoint and holds one tensor as float32 at a time
(benchmarks/convert_memory.py measures it).
"""
import argparse
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "models", "reference"))
from recur_ref.rwkv7 import PUBLISHED_SHAPES, published_widths, random_state_dict  # noqa: E402

SHAPES = PUBLISHED_SHAPES


def write_checkpoint(shape, path):
    layers, c = SHAPES[shape]
    sd = random_state_dict(layers, c, 64, 65536, *published_widths(c), seed=1)
    torch.save({k: v.to(torch.bfloat16) for k, v in sd.items()}, path)
    return sum(v.numel() for v in sd.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True, help="folder for the checkpoint and the models")
    ap.add_argument("--recur-convert", required=True)
    ap.add_argument("--recur-bench", required=True)
    ap.add_argument("--dtypes", nargs="+", default=["f32", "f16", "int8", "int4"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=512)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pth = os.path.join(args.out, f"rwkv7-{args.shape}.pth")
    if not os.path.exists(pth):
        params = write_checkpoint(args.shape, pth)
        print(f"wrote {pth}: {params / 1e6:.1f} M parameters (bf16)", flush=True)
    models = {}
    for dtype in args.dtypes:
        model = os.path.join(args.out, f"rwkv7-{args.shape}-{dtype}.recur")
        if not os.path.exists(model):
            narrow = ["--dtype", dtype] + (["--quantize-head"] if dtype in ("int8", "int4") else [])
            subprocess.run([args.recur_convert, pth, "-o", model, *narrow], check=True)
        models[dtype] = model
    for threads in args.threads:
        for dtype, model in models.items():
            print(f"\n== RWKV-7 {args.shape} {dtype}, {threads} thread(s)", flush=True)
            subprocess.run([args.recur_bench, model, "-b", "1", "-t", str(threads), "-n",
                            str(args.steps), "-w", "8", "-p", str(args.prefill)], check=True)


if __name__ == "__main__":
    main()
