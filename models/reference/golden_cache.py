#!/usr/bin/python3
"""Reuse a golden made earlier from the same inputs, or make it once.

    /usr/bin/python3 models/reference/golden_cache.py CACHE -- MAKE_GOLDEN_ARGS... --out DIR

MAKE_GOLDEN_ARGS are make_golden.py's. The key is a hash of those arguments
(less --out), the bytes of the config file or weights directory they name, the
reference's sources (make_golden.py, every .py under recur_ref/ and the list of
mixers runtime/mixers/mixers.inc, which recur_ref/mixers/ follows) and the
versions of PyTorch and numpy. A golden is a deterministic function of exactly these (fixed seeds,
float64), so CACHE/KEY holds the files a fresh run would write; its recorded
command names the temporary folder it was made in. On a miss, make_golden.py writes
into CACHE/KEY (through a temporary folder, renamed when complete, so that a
run stopped halfway leaves no entry); then the files are copied to DIR.

The build's test presets share one CACHE, so the suite's several builds make
each golden once (docs/testing.md, "CI time"). Without this script every run
makes its goldens anew, as make_golden.py alone does.
"""

import glob
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIXERS_INC = "runtime/mixers/mixers.inc"


def portable(arg: str) -> str:
    """A path inside the source tree as relative to it, so that a clone in
    another folder finds the same keys in a cache shared on the machine."""
    if os.path.isabs(arg) and os.path.commonpath([ROOT, os.path.abspath(arg)]) == ROOT:
        return os.path.relpath(arg, ROOT)
    return arg


def file_digest(h, path: str, name: str) -> None:
    h.update(name.encode() + b"\0")
    with open(path, "rb") as f:
        h.update(hashlib.sha256(f.read()).digest())


def key_of(args: list) -> str:
    h = hashlib.sha256()
    h.update("\0".join(portable(a) for a in args).encode() + b"\0\0")
    for name in ("torch", "numpy"):
        h.update(f"{name} {importlib.metadata.version(name)}\0".encode())
    sources = sorted(glob.glob(os.path.join(HERE, "recur_ref", "**", "*.py"), recursive=True))
    for path in [os.path.join(HERE, "make_golden.py")] + sources:
        file_digest(h, path, os.path.relpath(path, HERE))
    # The list of mixers, which says which mixer modules the reference loads.
    file_digest(h, os.path.join(ROOT, MIXERS_INC), MIXERS_INC)
    for flag in ("--config", "--weights"):
        if flag in args:
            source = args[args.index(flag) + 1]
            files = [source] if flag == "--config" else sorted(glob.glob(os.path.join(source, "*")))
            for path in files:
                if os.path.isfile(path):
                    file_digest(h, path, portable(path))
    return h.hexdigest()[:32]


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--" or "--out" not in sys.argv[3:-1]:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    cache, args = sys.argv[1], sys.argv[3:]
    i = args.index("--out")
    out, rest = args[i + 1], args[:i] + args[i + 2:]
    os.makedirs(cache, exist_ok=True)
    entry = os.path.join(cache, key_of(rest))
    if os.path.isdir(entry):
        print(f"golden_cache: {entry} (made earlier)")
    else:
        tmp = f"{entry}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        made = subprocess.run([sys.executable, os.path.join(HERE, "make_golden.py"), *rest, "--out", tmp])
        if made.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            sys.exit(made.returncode)
        try:
            os.rename(tmp, entry)
        except OSError:  # another run made it meanwhile: the same files
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"golden_cache: {entry} (made now)")
    shutil.copytree(entry, out, dirs_exist_ok=True)


if __name__ == "__main__":
    main()
