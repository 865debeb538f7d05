#!/usr/bin/python3
"""The speech demo's pieces against PyTorch on real utterances:

1. front-end: recur-speech features (C++, kissfft) vs recur_ref/log_mel.py, max |Δ| <= 1e-4,
   same frame count (also for a file shorter than one window);
2. model: recur-run (step mode) vs the float64 reference on the same inputs (the C++
   features, stacked), max |Δ| of the log-probabilities <= 1e-4;
3. end to end: C++ front-end + runtime vs PyTorch front-end + reference: the same
   greedy transcript.

    speech_parity.py --recur-speech BIN --recur-run BIN --model M.recur --model-dir DIR --corpus DIR
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "reference"))
from recur_ref import checkpoint, log_mel, speech  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--recur-speech", "--recur-run", "--model", "--model-dir", "--corpus"):
        p.add_argument(name, required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=6)
    args = p.parse_args()
    model, _ = checkpoint.load(args.model_dir)
    model = model.double()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        short = os.path.join(tmp, "short.wav")
        speech_wav = np.zeros(399, np.float32)   # one sample short of a frame: no frames
        import wave
        with wave.open(short, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(speech_wav.astype("<i2").tobytes())
        files = [(short, None)] + speech.read_manifest(args.corpus, args.split)[:args.limit]
        for path, digits in files:
            npy = os.path.join(tmp, "f.npy")
            subprocess.run([args.recur_speech, "features", path, "-o", npy], check=True, capture_output=True)
            cpp = np.load(npy)
            ref = log_mel.log_mel(torch.from_numpy(speech.read_wav(path))).numpy()
            front = float(np.abs(cpp - ref).max()) if len(ref) else 0.0
            ok = cpp.shape == ref.shape and front <= 1e-4
            line = f"{os.path.basename(path)}: {len(ref)} frames, front-end max|d| {front:.1e}"
            if digits is not None and ok:
                inputs = speech.stack(torch.from_numpy(cpp))
                np.save(os.path.join(tmp, "in.npy"), inputs.numpy())
                subprocess.run([args.recur_run, args.model, "--input", os.path.join(tmp, "in.npy"),
                                "--output", os.path.join(tmp, "out.npy")], check=True, capture_output=True)
                runtime = torch.from_numpy(np.load(os.path.join(tmp, "out.npy")))
                with torch.no_grad():
                    same_inputs = model(inputs.double())
                    torch_end_to_end = model(speech.model_inputs(speech.read_wav(path)).double())
                diff = (runtime.double() - same_inputs).abs().max().item()
                heard, heard_torch = speech.greedy_decode(runtime), speech.greedy_decode(torch_end_to_end)
                ok = diff <= 1e-4 and heard == heard_torch
                line += f", model max|d| {diff:.1e}, transcript recur {heard!r} PyTorch {heard_torch!r} " \
                        f"(reference {digits!r})"
            print(("ok   " if ok else "FAIL ") + line)
            failures += not ok
    print(f"{len(files) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
