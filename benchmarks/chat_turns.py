#!/usr/bin/python3
"""Time to first token per turn of a scripted chat: recur-generate --chat keeping the
session's state from turn to turn, against --reread, which reads the whole conversation
again each turn from an empty state (what runtimes without a kept state do).

    /usr/bin/python3 benchmarks/chat_turns.py --vocab VOCAB.txt --out build/chat-turns \\
        --recur-convert build/release/converter/recur-convert \\
        --recur-generate build/release/tools/recur-generate \\
        [--layers 6] [--width 256] [--turns 20] [-n 16] [--threads 1]

VOCAB.txt: the RWKV World vocabulary (rwkv_vocab_v20230424.txt of the rwkv package).
Writes a random-weight BlinkDL RWKV-7 checkpoint (recur_ref/rwkv7.py's random_state_dict:
trained-like magnitudes, head size 64, the World vocabulary's 65,536 rows) of --layers
and --width, converts it with the vocabulary, and runs the same greedy chat of --turns
scripted lines twice. Random weights answer gibberish, but the work per turn is a
trained model's of the same shape: what grows with the conversation is the point.
Prints each turn's tokens read and time to first token for both, and the seconds of
each whole run.
"""
import argparse
import os
import re
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "models", "reference"))
from recur_ref.rwkv7 import published_widths, random_state_dict  # noqa: E402

LINES = [
    "Hello! Who are you?", "What can you do?", "Tell me about the sea.",
    "Why is the sky blue?", "Name three fruits.", "What is two plus two?",
    "Write a haiku about rain.", "What is a recurrent network?", "Say something funny.",
    "How do birds fly?", "What day comes after Monday?", "Translate 'cat' to French.",
    "What is the capital of Japan?", "Give me a tip for sleeping well.",
    "What is your favourite colour?", "Count from one to five.", "What is a prime number?",
    "Describe a forest at night.", "Thank you for the chat.", "Goodbye!",
]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", required=True)
    p.add_argument("--out", default="build/chat-turns")
    p.add_argument("--recur-convert", default="build/release/converter/recur-convert")
    p.add_argument("--recur-generate", default="build/release/tools/recur-generate")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("-n", type=int, default=16, help="tokens generated per turn")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if a.turns > len(LINES):
        sys.exit(f"--turns: at most {len(LINES)}")
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(a.out, f"rwkv7_L{a.layers}_C{a.width}.recur")
    if not os.path.exists(model):
        pth = os.path.join(a.out, "random.pth")
        torch.save(random_state_dict(a.layers, a.width, 64, 65536, *published_widths(a.width),
                                     seed=1), pth)
        subprocess.run([a.recur_convert, pth, "--tokenizer", a.vocab, "-o", model], check=True,
                       stdout=subprocess.DEVNULL)
        os.remove(pth)
    turns = "".join(line + "\n" for line in LINES[:a.turns]).encode()
    runs = {}
    for mode in ("kept", "reread"):
        cmd = [a.recur_generate, model, "--chat", "-n", str(a.n), "--temperature", "0",
               "--threads", str(a.threads), *(["--reread"] if mode == "reread" else [])]
        start = time.perf_counter()
        done = subprocess.run(cmd, input=turns, capture_output=True, check=True)
        seconds = time.perf_counter() - start
        per_turn = [(int(m[1]), float(m[2])) for m in re.finditer(
            r"^turn \d+: (\d+) tokens read, first token after ([0-9.]+) ms",
            done.stderr.decode(), re.M)]
        if len(per_turn) != a.turns:
            sys.exit(f"{mode}: expected {a.turns} turns in:\n{done.stderr.decode()}")
        runs[mode] = (per_turn, seconds, done.stdout)
    if runs["kept"][2] != runs["reread"][2]:
        sys.exit("the kept state and --reread answered differently")
    print(f"model: RWKV-7, {a.layers} layers, C {a.width}, random weights, World vocabulary; "
          f"-n {a.n}, --threads {a.threads}, greedy (both runs answer the same tokens)")
    print("| turn | kept state: tokens read | time to first token (ms) "
          "| --reread: tokens read | time to first token (ms) |")
    print("|---|---|---|---|---|")
    for i, ((kn, kt), (rn, rt)) in enumerate(zip(runs["kept"][0], runs["reread"][0]), 1):
        print(f"| {i} | {kn} | {kt:.1f} | {rn} | {rt:.1f} |")
    print(f"whole run: kept state {runs['kept'][1]:.2f} s, --reread {runs['reread'][1]:.2f} s")


if __name__ == "__main__":
    main()
