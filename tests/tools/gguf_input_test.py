"""The tools take a GGUF file where they take a .recur: converted on the fly
into a temporary file that is gone once the model is loaded.

    gguf_input_test.py RECUR_CONVERT RECUR_RUN RECUR_GENERATE MODEL.gguf WORK_DIR

Checks: recur-run on the GGUF writes the bytes recur-run writes on the file
recur-convert makes of it, with a note on stderr; nothing is left in TMPDIR,
after a run, a truncated GGUF (refused with the converter's message) or a
model recur-generate cannot use (refused after the conversion); a TMPDIR that
is no folder is refused by name.
"""

import os
import shutil
import subprocess
import sys

import numpy as np

convert, run, generate, gguf, work = sys.argv[1:6]
shutil.rmtree(work, ignore_errors=True)
tmp = os.path.join(work, "tmp")
os.makedirs(tmp)
env = dict(os.environ, TMPDIR=tmp)
tokens = os.path.join(work, "tokens.npy")
np.save(tokens, np.array([1, 5, 7, 9, 11, 0, 15, 3, 2, 8], dtype=np.int32))


def call(*args, fails=False, environ=env):
    p = subprocess.run([str(a) for a in args], capture_output=True, env=environ)
    err = p.stderr.decode(errors="replace")
    if (p.returncode != 0) != fails or p.returncode < 0:
        sys.exit(f"{' '.join(map(str, args))}: exit {p.returncode}, expected "
                 f"{'a failure' if fails else 'success'}:\n{err}")
    return err


def expect(text, what, where):
    if what not in text:
        sys.exit(f"{where}: expected {what!r} in:\n{text}")


def tmp_is_empty(after):
    left = os.listdir(tmp)
    if left:
        sys.exit(f"after {after}, TMPDIR holds {left}")


direct = os.path.join(work, "direct.npy")
err = call(run, gguf, "-i", tokens, "-o", direct)
expect(err, "a GGUF file, converted in", "recur-run on the GGUF file")
tmp_is_empty("recur-run on the GGUF file")
converted = os.path.join(work, "model.recur")
call(convert, gguf, "-o", converted)
through_file = os.path.join(work, "through_file.npy")
call(run, converted, "-i", tokens, "-o", through_file)
a, b = open(direct, "rb").read(), open(through_file, "rb").read()
if a != b:
    sys.exit("recur-run on the GGUF file and on its conversion wrote different outputs")
print(f"recur-run: the GGUF file and its conversion give the same {len(a)} bytes")

truncated = os.path.join(work, "truncated.gguf")
with open(gguf, "rb") as f:
    data = f.read()
with open(truncated, "wb") as f:
    f.write(data[:len(data) // 2])
err = call(run, truncated, "-i", tokens, "-o", os.path.join(work, "x.npy"), fails=True)
expect(err, "truncated.gguf", "a truncated GGUF file")
tmp_is_empty("a truncated GGUF file")
print("a truncated GGUF file: refused, " + err.strip().splitlines()[-1])

err = call(generate, gguf, "-p", "hi", "-n", "1", fails=True)
expect(err, "has no vocabulary", "recur-generate on a GGUF file without a vocabulary")
tmp_is_empty("recur-generate's refusal")
print("recur-generate: converted, then refused: " + err.strip().splitlines()[-1])

not_a_folder = os.path.join(work, "file")
open(not_a_folder, "w").close()
err = call(run, gguf, "-i", tokens, "-o", os.path.join(work, "y.npy"), fails=True,
           environ=dict(os.environ, TMPDIR=not_a_folder))
expect(err, "cannot convert " + gguf, "a TMPDIR that is a file")
print("TMPDIR a file: " + err.strip())
