#!/usr/bin/python3
"""Synthesise a spoken-digit corpus with espeak-ng.

    /usr/bin/python3 models/reference/make_speech_corpus.py --out out/speech/corpus
        [--train 4000] [--test 400] [--seed 1] [--jobs 2]

Utterances are 1..6 random digits ("three seven ...") spoken by espeak-ng's built-in
English voices (VOICES; MBROLA voices are not installed) with one of its voice
variants, a random speed (130..210 words/min) and pitch (20..80), cut into 1..3
segments joined by random gaps (50..400 ms), with 100..300 ms of silence around,
resampled to 16 kHz by sox (repeatable dither, -R) and mixed with white noise at 10..30 dB SNR.
The split is by speaker: a voice/variant combination is in the test set iff
speaker_is_held_out(voice, variant) (about 1 in 5 combinations; no test speaker
is ever heard in training). Writes DIR/{train,test}/NNNNN.wav (16-bit mono 16 kHz)
and DIR/{train,test}.tsv (file, digits, voice, variant, speed, pitch). The same
seed gives the same corpus, and utterance i depends only on (seed, split, i): a run
keeps the WAVs already in DIR, so an interrupted run resumes, and a larger corpus can
start from a hard-linked copy of a smaller one (cp -al).
"""

import argparse
import hashlib
import io
import multiprocessing
import os
import subprocess
import wave

import numpy as np

VOICES = ("en", "en-US", "en-GB-scotland", "en-GB-x-gbclan", "en-GB-x-rp", "en-GB-x-gbcwmd", "en-029")
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
RATE = 16000


def variants():
    """espeak-ng's voice variants (the names after '+' in -v voice+variant)."""
    out = subprocess.run(["espeak-ng", "--voices=variant"], capture_output=True, text=True, check=True).stdout
    names = [line.split()[4].split("/")[-1] for line in out.splitlines()[1:] if line.strip()]
    return sorted(set(names))


def speaker_is_held_out(voice: str, variant: str) -> bool:
    return hashlib.sha256(f"{voice}+{variant}".encode()).digest()[0] % 5 == 0


def synthesise(text: str, voice: str, variant: str, speed: int, pitch: int) -> np.ndarray:
    """espeak-ng → sox (16 kHz) → float32 samples in [-1, 1]."""
    speech = subprocess.run(["espeak-ng", "-v", f"{voice}+{variant}", "-s", str(speed), "-p", str(pitch),
                             "--stdout", text], capture_output=True, check=True).stdout
    resampled = subprocess.run(["sox", "-R", "-t", "wav", "-", "-r", str(RATE), "-b", "16", "-t", "wav", "-"],
                               input=speech, capture_output=True, check=True).stdout
    with wave.open(io.BytesIO(resampled)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768


def write_wav(path: str, samples: np.ndarray) -> None:
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(samples, -1, 32767 / 32768) * 32768).astype("<i2").tobytes())


def make_utterance(job):
    """One utterance from its own seeded generator: (path, digits, voice, variant, speed, pitch)."""
    path, seed, speakers = job
    rng = np.random.default_rng(seed)
    voice, variant = speakers[rng.integers(len(speakers))]
    digits = "".join(str(d) for d in rng.integers(0, 10, rng.integers(1, 7)))
    speed, pitch = int(rng.integers(130, 211)), int(rng.integers(20, 81))
    row = os.path.basename(path), digits, voice, variant, speed, pitch
    if os.path.exists(path):  # written by an earlier run: everything after this depends on the seed only
        return row
    cuts = sorted(rng.choice(np.arange(1, len(digits)), min(len(digits) - 1, rng.integers(0, 3)), replace=False)) \
        if len(digits) > 1 else []
    parts = [np.zeros(int(rng.integers(1600, 4801)), np.float32)]
    for a, b in zip([0, *cuts], [*cuts, len(digits)]):
        if a:
            parts.append(np.zeros(int(rng.integers(800, 6401)), np.float32))
        text = " ".join(WORDS[int(d)] for d in digits[a:b])
        parts.append(synthesise(text, voice, variant, speed, pitch))
    parts.append(np.zeros(int(rng.integers(1600, 4801)), np.float32))
    x = np.concatenate(parts)
    snr_db = rng.uniform(10, 30)
    signal_power = np.mean(np.concatenate(parts[1:-1]) ** 2)
    x = x + rng.standard_normal(len(x)).astype(np.float32) * np.sqrt(signal_power / 10 ** (snr_db / 10))
    write_wav(path + ".part", x)
    os.replace(path + ".part", path)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--train", type=int, default=4000)
    p.add_argument("--test", type=int, default=400)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    every = [(v, var) for v in VOICES for var in variants()]
    held_out = [s for s in every if speaker_is_held_out(*s)]
    seen = [s for s in every if not speaker_is_held_out(*s)]
    print(f"{len(every)} speakers (voice+variant): {len(seen)} for training, {len(held_out)} held out for test")
    with multiprocessing.Pool(args.jobs) as pool:
        for split, count, speakers, offset in (("train", args.train, seen, 0), ("test", args.test, held_out, 1)):
            os.makedirs(os.path.join(args.out, split), exist_ok=True)
            jobs = [(os.path.join(args.out, split, f"{i:05d}.wav"), [args.seed, offset, i], speakers)
                    for i in range(count)]
            rows = pool.map(make_utterance, jobs, chunksize=16)
            manifest = os.path.join(args.out, f"{split}.tsv")
            with open(manifest + ".part", "w") as f:  # replaced, not rewritten: DIR may hold hard links
                f.write("file\tdigits\tvoice\tvariant\tspeed\tpitch\n")
                for row in rows:
                    f.write("\t".join(str(c) for c in row) + "\n")
            os.replace(manifest + ".part", manifest)
            seconds = sum(os.path.getsize(j[0]) - 44 for j in jobs) / 2 / RATE
            print(f"{split}: {count} utterances, {seconds / 60:.1f} minutes of audio")


if __name__ == "__main__":
    main()
