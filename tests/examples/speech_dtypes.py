#!/usr/bin/python3
"""A speech model's digit error rate with narrow weights against its f32 file on the same
utterances: `recur-speech eval` on each, the narrow ones within --points of the f32 one.

    speech_dtypes.py --recur-speech BIN --corpus DIR --f32 M.recur --narrow int8=M8.recur int4=M4.recur
        [--points 0.5]
"""

import argparse
import re
import subprocess
import sys


def digit_error_rate(recur_speech: str, model: str, corpus: str) -> float:
    r = subprocess.run([recur_speech, "eval", model, "--corpus", corpus], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"recur-speech eval {model} failed ({r.returncode}): {r.stderr.strip()}")
    m = re.search(r"utterances \(.*\): digit error rate ([0-9.]+)", r.stdout)
    if not m:
        sys.exit(f"recur-speech eval {model}: no digit error rate in its output:\n{r.stdout}")
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recur-speech", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--f32", required=True)
    p.add_argument("--narrow", nargs="+", required=True, metavar="NAME=MODEL")
    p.add_argument("--points", type=float, default=0.5, help="largest difference, in percentage points")
    args = p.parse_args()
    base = digit_error_rate(args.recur_speech, args.f32, args.corpus)
    print(f"f32: digit error rate {100 * base:.2f}%")
    failed = False
    for item in args.narrow:
        name, _, model = item.partition("=")
        der = digit_error_rate(args.recur_speech, model, args.corpus)
        delta = 100 * (der - base)
        ok = abs(delta) <= args.points
        failed |= not ok
        print(f"{name}: digit error rate {100 * der:.2f}% ({delta:+.2f} points){'' if ok else '  FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
