"""The spoken-digit task: corpus files, model inputs, CTC decoding and scores.

Model input: the log-mel frames of recur_ref/log_mel.py stacked STACK at a time without
overlap (frame rows 3i, 3i+1, 3i+2 side by side: 120 floats every 30 ms; a trailing
partial group is dropped). Output: log-probabilities of blank (0) and digits 0..9 (1..10).
"""

import csv
import os
import wave
from typing import List, Tuple

import numpy as np
import torch
from torch import Tensor

from . import log_mel

STACK = 3
BLANK = 0


def read_wav(path: str) -> np.ndarray:
    """16-bit mono 16 kHz WAV → float32 samples (int16 / 32768, as libsndfile reads them)."""
    with wave.open(path) as w:
        if w.getframerate() != log_mel.SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise ValueError(f"{path}: expected 16-bit mono {log_mel.SAMPLE_RATE} Hz")
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768


def read_manifest(corpus: str, split: str) -> List[Tuple[str, str]]:
    """[(wav path, digits)] of corpus/{split}.tsv (make_speech_corpus.py)."""
    with open(os.path.join(corpus, f"{split}.tsv")) as f:
        return [(os.path.join(corpus, split, row["file"]), row["digits"]) for row in csv.DictReader(f, delimiter="\t")]


def stack(frames: Tensor) -> Tensor:
    """(T, 40) log-mel frames → (T // STACK, 40·STACK) model inputs."""
    n = len(frames) // STACK
    return frames[:n * STACK].reshape(n, STACK * frames.shape[1])


def model_inputs(samples: np.ndarray) -> Tensor:
    return stack(log_mel.log_mel(torch.from_numpy(samples)))


def targets(digits: str) -> List[int]:
    return [int(d) + 1 for d in digits]


def greedy_decode(log_probs: Tensor) -> str:
    """(T, 11) → digits: the best class per step, repeats merged, blanks dropped."""
    best = log_probs.argmax(-1).tolist()
    out, prev = [], BLANK
    for c in best:
        if c != prev and c != BLANK:
            out.append(str(c - 1))
        prev = c
    return "".join(out)


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def scores(pairs) -> Tuple[float, float]:
    """(digit error rate, exact-match rate) of [(reference, hypothesis)]."""
    errors = sum(edit_distance(r, h) for r, h in pairs)
    return errors / max(1, sum(len(r) for r, _ in pairs)), sum(r == h for r, h in pairs) / max(1, len(pairs))


def fold_normalisation(model, mean: Tensor, std: Tensor) -> None:
    """Make the model take raw inputs x where it was trained on (x − mean) / std: the
    input projection becomes W' = W / std (per input column), b' = b − W'·mean."""
    proj = model.input.projection
    with torch.no_grad():
        proj.weight.div_(std.to(proj.weight.dtype))
        proj.bias.sub_(proj.weight @ mean.to(proj.weight.dtype))
