#!/usr/bin/python3
"""Train a pixel-by-pixel Fashion-MNIST model (models/zoo/fashion_*).

    /usr/bin/python3 models/reference/train_image.py --config models/configs/image_linear.json \
        --work out/train/fashion_linear --steps 3000 [--batch 16] [--lr 2e-3] [--seed 1]
        [--threads N] [--minutes M] [--device cpu|cuda] [--precision bf16|f32]

Inputs are the start token then pixels 0..782 (recur_ref/fashion_mnist.py), targets
pixels 0..783, loss the mean cross-entropy of the 256-way head (printed in bits/dim).
--precision bf16 (the default) runs the forward under torch.autocast (bfloat16 matrix
products, float32 weights and optimizer): twice as fast on a CPU with AVX512-BF16/AMX.
Evaluation and export are float32.
Deterministic for a given seed and device: the data order comes from the seed, and
a run resumes from WORK/checkpoint.pt (written every --checkpoint-every steps) with
the same order. --minutes stops early (after a checkpoint) at a wall-clock budget.
At the end it exports WORK/export/{weights.safetensors,config.json} for recur-convert
and prints the test-set bits/dim of the first --eval-images test images.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recur_ref import batched, fashion_mnist, training  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    training.add_arguments(p, batch=16, lr=2e-3, warmup=200)
    p.add_argument("--eval-images", type=int, default=10000)
    args = p.parse_args()
    config, model = training.build(p, args)
    train, _ = fashion_mnist.load("train")
    test, _ = fashion_mnist.load("test")
    per_epoch = len(train) // args.batch
    print(f"{len(train)} training images, {per_epoch} steps per epoch")

    def loss_of_step(step):
        epoch, i = divmod(step, per_epoch)
        order = np.random.default_rng([args.seed, epoch]).permutation(len(train))
        images = train[order[i * args.batch:(i + 1) * args.batch]]
        x = torch.from_numpy(fashion_mnist.model_inputs(images)).to(args.device)
        y = torch.from_numpy(images.astype(np.int64)).to(args.device)
        with training.autocast(args):
            logits = batched.forward(model, x)
        return F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1)), len(images)

    step, seconds = training.train(p, args, model, loss_of_step, "train bits/dim", "images", 1 / math.log(2))
    bpd = fashion_mnist.bits_per_dim(model, test[:args.eval_images], 50, args.device)
    print(f"test bits/dim over {min(args.eval_images, len(test))} images: {bpd:.4f}")
    notes = {"recipe": "models/reference/train_image.py " + " ".join(sys.argv[1:]), "steps": step,
             "training_seconds": round(seconds), "device": args.device, "precision": args.precision,
             "test_bits_per_dim": f"{bpd:.4f}", "eval_images": min(args.eval_images, len(test))}
    training.export(os.path.join(args.work, "export"), model.cpu().float(), config, notes)
    with open(os.path.join(args.work, "metrics.json"), "w") as f:
        json.dump(notes, f, indent=2)
    print(f"exported {args.work}/export (weights.safetensors, config.json)")


if __name__ == "__main__":
    main()
