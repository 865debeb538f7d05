#!/usr/bin/python3
"""Train the streaming spoken-digit recogniser (models/zoo/speech_digits).

    /usr/bin/python3 models/reference/train_speech.py --config models/configs/speech_digits.json \
        --corpus out/speech/corpus --work out/train/speech_digits --steps 3000 [--batch 16] [--lr 2e-3]
        [--seed 1] [--threads N] [--minutes M] [--device cpu|cuda] [--precision bf16|f32]

The corpus comes from make_speech_corpus.py. Inputs are stacked log-mel frames
(recur_ref/speech.py), normalised per dimension by the training set's mean and
standard deviation (folded into the input projection at export, so the runtime
takes raw log-mels); loss CTC over blank + 10 digits. Training inputs are augmented
(SpecAugment: 2 bands of up to 6 mel bins and 2 spans of up to 4 steps set to the mean,
drawn from the torch RNG; --no-augment turns it off). Deterministic for a given seed
and device; resumes from WORK/checkpoint.pt (recur_ref/training.py). At the end it
exports WORK/export/{weights.safetensors,config.json} and prints the held-out
speakers' digit error rate and exact-match rate (greedy decoding).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recur_ref import batched, log_mel, speech, training  # noqa: E402


def load_split(corpus: str, split: str):
    """[(inputs (T, 120) float32, digits)] of a corpus split, cached in the corpus directory."""
    cache = os.path.join(corpus, f"{split}.features.pt")
    items = speech.read_manifest(corpus, split)
    if os.path.exists(cache):
        data = torch.load(cache)
        if len(data) == len(items):
            return data
    data = [(speech.model_inputs(speech.read_wav(path)), digits) for path, digits in items]
    torch.save(data, cache + ".part")
    os.replace(cache + ".part", cache)  # never rewrite in place: a corpus copied with cp -al shares it
    return data


def pad(batch, mean, std):
    """[(inputs, digits)] → normalised inputs (B, T, 120) zero-padded at the end (a causal
    model's outputs before the padding do not see it), lengths, CTC targets."""
    lengths = torch.tensor([len(x) for x, _ in batch])
    x = torch.zeros(len(batch), int(lengths.max()), batch[0][0].shape[1])
    for b, (inputs, _) in enumerate(batch):
        x[b, :len(inputs)] = (inputs - mean) / std
    targets = [torch.tensor(speech.targets(d)) for _, d in batch]
    return x, lengths, targets


def spec_augment(x, lengths):
    """Masks of normalised inputs x (B, T, STACK·40) in place: per utterance 2 mel bands
    (the same bins in every stacked frame) and 2 time spans, set to 0 (the mean)."""
    mels = log_mel.N_MELS
    for b in range(len(x)):
        for _ in range(2):
            width, start = torch.randint(0, 7, ()).item(), torch.randint(0, mels - 6, ()).item()
            for f in range(speech.STACK):
                x[b, :, f * mels + start:f * mels + start + width] = 0
            span = torch.randint(0, 5, ()).item()
            at = torch.randint(0, max(1, int(lengths[b]) - span), ()).item()
            x[b, at:at + span] = 0
    return x


def evaluate(model, data, mean, std, batch=32):
    pairs = []
    with torch.no_grad():
        for s in range(0, len(data), batch):
            part = data[s:s + batch]
            x, lengths, _ = pad(part, mean, std)
            out = batched.forward(model, x)
            pairs += [(d, speech.greedy_decode(out[b, :lengths[b]])) for b, (_, d) in enumerate(part)]
    return speech.scores(pairs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    training.add_arguments(p, batch=16, lr=2e-3, warmup=200)
    p.add_argument("--corpus", required=True, help="make_speech_corpus.py's output directory")
    p.add_argument("--no-augment", action="store_true", help="train without SpecAugment masks")
    args = p.parse_args()
    config, model = training.build(p, args)
    if not model.causal or model.input.kind != "features" or model.input.projection is None:
        p.error("the speech recipe needs a causal model over features with an input projection")
    train, test = load_split(args.corpus, "train"), load_split(args.corpus, "test")
    frames = torch.cat([x for x, _ in train])
    mean, std = frames.mean(0), frames.std(0) + 1e-3
    per_epoch = len(train) // args.batch
    print(f"{len(train)} training utterances ({len(frames)} steps), {len(test)} test; {per_epoch} steps per epoch")

    def loss_of_step(step):
        epoch, i = divmod(step, per_epoch)
        order = np.random.default_rng([args.seed, epoch]).permutation(len(train))
        part = [train[j] for j in order[i * args.batch:(i + 1) * args.batch]]
        x, lengths, targets = pad(part, mean, std)
        if not args.no_augment:
            x = spec_augment(x, lengths)
        with training.autocast(args):
            log_probs = batched.forward(model, x.to(args.device))
        loss = F.ctc_loss(log_probs.float().transpose(0, 1), torch.cat(targets), lengths,
                          torch.tensor([len(t) for t in targets]), blank=speech.BLANK, zero_infinity=True)
        return loss, len(part)

    step, seconds = training.train(p, args, model, loss_of_step, "train CTC loss", "utterances")
    model = model.cpu().float()
    der, exact = evaluate(model, test, mean, std)
    print(f"held-out speakers: digit error rate {der:.4f}, exact match {exact:.4f} ({len(test)} utterances)")
    speech.fold_normalisation(model, mean, std)
    notes = {"recipe": "models/reference/train_speech.py " + " ".join(sys.argv[1:]), "steps": step,
             "training_seconds": round(seconds), "device": args.device, "precision": args.precision,
             "test_digit_error_rate": f"{der:.4f}", "test_exact_match": f"{exact:.4f}",
             "test_utterances": len(test)}
    training.export(os.path.join(args.work, "export"), model, config, notes)
    with open(os.path.join(args.work, "metrics.json"), "w") as f:
        json.dump(notes, f, indent=2)
    print(f"exported {args.work}/export (weights.safetensors, config.json)")


if __name__ == "__main__":
    main()
