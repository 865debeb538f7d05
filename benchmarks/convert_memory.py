#!/usr/bin/python3
"""recur-convert's peak memory on a BlinkDL RWKV-7 checkpoint at a published size.

    /usr/bin/python3 benchmarks/convert_memory.py --shape 0.1B --out build/rwkv7-bench \\
        --recur-convert build/release/converter/recur-convert [ANOTHER_RECUR_CONVERT ...] \\
        [--dtypes f32 bf16 int8 int4]

Writes the shape's .pth in bfloat16 as benchmarks/rwkv7_bench.py does (kept in --out and
reused), converts it once per dtype with each recur-convert given (an older build too, for
a before/after comparison) as rwkv7_bench.py converts it (int8 and int4 with
--quantize-head), and prints each conversion's peak resident set size against the
checkpoint's size, the output's size and the largest tensor's size as float32. The
converter maps the checkpoint, holds one tensor's float32 values and encoding at a time and
writes each tensor straight into the output's temporary file, so its peak is about the
checkpoint plus the largest tensor as float32 (0.1B: the 65,536 x 768 embedding and head,
201 MB each).

The peak is the child's ru_maxrss (os.wait4), which also counts what the calling process
held when it started the child; this script leaves torch (which writes the checkpoint) to
a child of its own, so that its own ~10 MB is the floor. Not part of CI: a 0.1B conversion
maps 0.4 GB and takes seconds per dtype.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = ("0.1B", "0.4B", "1.5B")  # rwkv7_bench.SHAPES


def mb(n):
    return f"{n / 1e6:,.1f}"


def peak_rss(args):
    """Runs args; its peak resident set size in bytes (Linux: ru_maxrss is in KiB). Also
    tests/converter/convert_memory_test.py's."""
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit status {child.returncode}")
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def largest_tensor_f32(recur_convert, model):
    """The most elements any tensor of `model` has, as float32 bytes."""
    info = json.loads(subprocess.run([recur_convert, "inspect", model, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    largest = 0
    for t in info["tensors"]:
        n = 1
        for d in t["shape"]:
            n *= d
        largest = max(largest, n)
    return 4 * largest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=SHAPES, required=True)
    ap.add_argument("--out", required=True, help="folder for the checkpoint and the models")
    ap.add_argument("--recur-convert", nargs="+", required=True,
                    help="one or more recur-convert programs, each measured")
    ap.add_argument("--dtypes", nargs="+", default=["f32", "bf16", "int8", "int4"])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pth = os.path.join(args.out, f"rwkv7-{args.shape}.pth")
    if not os.path.exists(pth):
        subprocess.run([sys.executable, "-c",
                        "import sys; sys.path.insert(0, sys.argv[1]); import rwkv7_bench; "
                        "rwkv7_bench.write_checkpoint(sys.argv[2], sys.argv[3])",
                        HERE, args.shape, pth], check=True)
    source = os.path.getsize(pth)
    rows = []
    largest = None
    for program in args.recur_convert:
        for dtype in args.dtypes:
            model = os.path.join(args.out, f"rwkv7-{args.shape}-{dtype}.memory.recur")
            narrow = ["--dtype", dtype] + (["--quantize-head"] if dtype in ("int8", "int4") else [])
            peak = peak_rss([program, pth, "-o", model, *narrow])
            if largest is None:
                largest = largest_tensor_f32(program, model)
            rows.append((program, dtype, os.path.getsize(model), peak))
            os.remove(model)
    print(f"checkpoint {pth}: {mb(source)} MB; largest tensor as float32: {mb(largest)} MB")
    print(f"{'dtype':6} {'output MB':>10} {'peak RSS MB':>12} {'peak/checkpoint':>16} "
          f"{'peak - checkpoint - largest f32, MB':>36}  program")
    for program, dtype, output, peak in rows:
        print(f"{dtype:6} {mb(output):>10} {mb(peak):>12} {peak / source:>16.2f} "
              f"{mb(peak - source - largest):>36}  {program}")


if __name__ == "__main__":
    main()
