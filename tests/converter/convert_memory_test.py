#!/usr/bin/python3
"""converter_memory: recur-convert converts a checkpoint holding it (mapped), one
tensor's float32 values at a time and none of the output.

    convert_memory_test.py RECUR_CONVERT SOURCE_DIR WORK_DIR

A BlinkDL RWKV-7 .pth in bfloat16 (recur_ref/rwkv7.py's random_state_dict: 6 layers,
C 384, head size 64, vocabulary 16,384; 49 MB), written by a child process with torch,
is converted to float32 (a 97 MB model). The conversion's peak resident set size (the
child's ru_maxrss) must stay under the file's size, plus the largest tensor as float32
(the 25 MB embedding), plus 48 MB for the program itself (about 10 MB). A converter
that holds the model as float32, or the output, in memory needs several times the file.
benchmarks/convert_memory.py, whose measurement this uses, measures the published shapes.
Skipped (77) without torch.
"""
import os
import subprocess
import sys

SLACK = 48 << 20


def main():
    convert, src, work = sys.argv[1:4]
    sys.path.insert(0, os.path.join(src, "benchmarks"))
    from convert_memory import largest_tensor_f32, peak_rss
    python = sys.executable
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        print("skipped: no torch")
        return 77
    os.makedirs(work, exist_ok=True)
    pth, model = os.path.join(work, "rwkv7.pth"), os.path.join(work, "rwkv7.recur")
    # torch in a child: ru_maxrss counts what this process holds when it starts one.
    subprocess.run([python, "-c", """
import sys, torch
sys.path.insert(0, sys.argv[1])
from recur_ref.rwkv7 import random_state_dict
sd = random_state_dict(6, 384, 64, 16384, 64, 64, 32, 64, seed=1)
torch.save({k: v.to(torch.bfloat16) for k, v in sd.items()}, sys.argv[2])
""", os.path.join(src, "models", "reference"), pth], check=True)

    peak = peak_rss([convert, pth, "-o", model])
    largest = largest_tensor_f32(convert, model)
    source, output = os.path.getsize(pth), os.path.getsize(model)
    bound = source + largest + SLACK
    print(f"checkpoint {source / 1e6:.1f} MB, model {output / 1e6:.1f} MB, largest tensor as "
          f"float32 {largest / 1e6:.1f} MB: peak RSS {peak / 1e6:.1f} MB, bound "
          f"{bound / 1e6:.1f} MB")
    os.remove(pth)
    os.remove(model)
    return 0 if peak <= bound else 1


if __name__ == "__main__":
    sys.exit(main())
