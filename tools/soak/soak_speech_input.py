#!/usr/bin/python3
"""An input stream for recur-soak on the speech model: the first N utterances of a
corpus split (make_speech_corpus.py), joined into one recording, as the model's
stacked log-mel inputs (T, 120) float32.

    /usr/bin/python3 tools/soak/soak_speech_input.py --corpus out/speech/corpus10k --split test \
        --utterances 40 --out out/soak/speech_input.npy
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models", "reference"))
from recur_ref import speech  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--utterances", type=int, default=40)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    items = speech.read_manifest(args.corpus, args.split)[:args.utterances]
    if not items:
        p.error(f"{args.corpus}/{args.split} has no utterances")
    audio = np.concatenate([speech.read_wav(path) for path, _ in items])
    inputs = speech.model_inputs(audio).numpy().astype(np.float32)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    np.save(args.out, inputs)
    print(f"{args.out}: {inputs.shape[0]} steps ({len(audio) / 16000:.1f} s of audio from "
          f"{len(items)} utterances), {inputs.shape[1]} values each")


if __name__ == "__main__":
    main()
