#!/usr/bin/python3
"""PyTorch's test-set bits/dim of a Fashion-MNIST pixel model (the number recur-image eval
must match within 1e-3).

    /usr/bin/python3 models/reference/eval_image.py --model-dir models/zoo/fashion_linear [--images N]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recur_ref import checkpoint, fashion_mnist  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="weights.safetensors + config.json")
    p.add_argument("--images", type=int, default=0, help="only the first N test images (default: all)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    args = p.parse_args()
    model, _ = checkpoint.load(args.model_dir)
    model = model.to(getattr(torch, args.dtype))
    images, _ = fashion_mnist.load("test")
    if args.images:
        images = images[:args.images]
    print(f"test bits/dim over {len(images)} images: {fashion_mnist.bits_per_dim(model, images):.6f}")


if __name__ == "__main__":
    main()
