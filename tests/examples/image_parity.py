#!/usr/bin/python3
"""recur-image eval's bits/dim vs PyTorch's (models/reference/eval_image.py) on the
first N test images; passes when they agree within --tolerance (default 1e-3).

    image_parity.py --recur-image BIN --model M.recur --model-dir DIR [--images N] [--batch B]
                    [--backend NAME] [--tolerance T]

M.recur may hold narrower weights than DIR's (recur-convert --dtype): the
reference is always DIR's f32 model, so the difference includes quantisation.
"""

import argparse
import os
import re
import subprocess
import sys

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "reference")


def bits(output: str, who: str) -> float:
    m = re.search(r"test bits/dim over \d+ images: ([0-9.]+)", output)
    if not m:
        sys.exit(f"no bits/dim in {who}'s output:\n{output}")
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recur-image", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--batch", type=int, default=8, help="images recur-image evaluates at once")
    p.add_argument("--backend", default="auto", help="recur-image --backend")
    p.add_argument("--tolerance", type=float, default=1e-3)
    args = p.parse_args()
    n = str(args.images)
    runtime = subprocess.run([args.recur_image, "eval", args.model, "--images", n, "--batch", str(args.batch),
                              "--backend", args.backend],
                             capture_output=True, text=True, check=True).stdout
    torch_out = subprocess.run([sys.executable, os.path.join(REFERENCE, "eval_image.py"), "--model-dir",
                                args.model_dir, "--images", n], capture_output=True, text=True,
                               check=True).stdout
    a, b = bits(runtime, "recur-image"), bits(torch_out, "eval_image.py")
    print(f"bits/dim over {n} test images: recur {a:.6f}, PyTorch {b:.6f}, |diff| {abs(a - b):.2e} "
          f"(tolerance {args.tolerance:g})")
    sys.exit(0 if abs(a - b) <= args.tolerance else 1)


if __name__ == "__main__":
    main()
