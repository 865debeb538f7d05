#!/usr/bin/python3
"""Train a token language model on a text corpus (models/zoo/text_rwkv7).

    /usr/bin/python3 models/reference/train_text.py --config models/configs/text_rwkv7.json \
        --corpus out/text/corpus --vocab out/text/vocab.txt --work out/train/text_rwkv7 --steps 3000
        [--vocab-size 1024] [--context 256] [--batch 16] [--lr 2e-3] [--seed 1] [--threads N]
        [--minutes M] [--device cpu|cuda] [--precision bf16|f32] [--eval-context 1024]
        [--sample-tokens 120]

The corpus is make_text_corpus.py's (DIR/train.txt, DIR/test.txt). The vocabulary is a
file in the rwkv package's format (recur_ref/text.py); if --vocab does not exist it is
made from DIR/train.txt by byte-pair merges up to --vocab-size tokens (end of text
included), and the text is tokenised by the rwkv package's TRIE_TOKENIZER over it
(greedy longest match). The config's vocab_size and head width must be the vocabulary's
size. A training step takes --batch windows of --context + 1 tokens at offsets drawn
from the seed and the step (numpy's default_rng([seed, step])), each from the initial
state; loss the mean cross-entropy of the next token (printed in nats per token).
Deterministic for a given seed and device; resumes from WORK/checkpoint.pt
(recur_ref/training.py). At the end it prints the held-out loss (DIR/test.txt in
windows of --eval-context tokens, each from the initial state, every token but a
window's first predicted) in nats per token and bits per byte of the predicted tokens,
exports WORK/export/{weights.safetensors,config.json,vocab.txt} (config.json with
"tokenizer": "vocab.txt") and prints samples from a few prompts (greedy, and top-p 0.9
at temperature 0.8 with seed 1).
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recur_ref import batched, text, training  # noqa: E402

PROMPTS = ("The system", "In this chapter, we", "Python is", "The function returns")


def tokens(corpus: str, split: str, tokenizer, vocab_path: str) -> np.ndarray:
    """DIR/split.txt's tokens, cached in the corpus directory by the vocabulary's hash."""
    with open(vocab_path, "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:12]
    cache = os.path.join(corpus, f"{split}.{key}.npy")
    if os.path.exists(cache):
        return np.load(cache)
    ids = text.encode_file(tokenizer, os.path.join(corpus, split + ".txt"))
    np.save(cache + ".part.npy", ids)
    os.replace(cache + ".part.npy", cache)
    return ids


def evaluate(model, ids: np.ndarray, token_bytes: np.ndarray, context: int, device: str, batch: int = 8):
    """(nats per predicted token, bits per byte of the predicted tokens) over ids in windows
    of `context` tokens, each from the initial state (the last, shorter one too)."""
    windows = [ids[s:s + context] for s in range(0, len(ids), context)]
    windows = [w for w in windows if len(w) > 1]
    nats, count, nbytes = 0.0, 0, 0
    with torch.no_grad():
        for n in sorted({len(w) for w in windows}):
            same = [w for w in windows if len(w) == n]
            for s in range(0, len(same), batch):
                x = torch.from_numpy(np.stack(same[s:s + batch]).astype(np.int64)).to(device)
                logits = batched.forward(model, x[:, :-1]).float()
                nats += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                        reduction="sum").item()
                count += x[:, 1:].numel()
                nbytes += int(token_bytes[x[:, 1:].cpu().numpy()].sum())
    return nats / count, nats / math.log(2) / nbytes


def sample(model, tokenizer, prompt: str, n: int, temperature: float = 0.0, top_p: float = 1.0,
           seed: int = 1) -> str:
    """n tokens after `prompt` by the reference's recurrent form (RecurModel.step): greedy at
    temperature 0, else nucleus sampling (the smallest set of most likely tokens whose
    probability reaches top_p) from a torch.Generator seeded with `seed`. Token 0 (end of
    text) is never drawn."""
    gen = torch.Generator().manual_seed(seed)
    ids = tokenizer.encode(prompt)
    with torch.no_grad():
        logits, _, state = model(torch.tensor(ids), return_layers=True)
        last = logits[-1]
        out = []
        for _ in range(n):
            last = last.float().clone()
            last[text.END_OF_TEXT] = -float("inf")
            if temperature == 0:
                t = int(last.argmax())
            else:
                p = torch.softmax(last / temperature, -1)
                sp, order = p.sort(descending=True)
                keep = (sp.cumsum(0) - sp) < top_p
                sp = sp * keep
                t = int(order[torch.multinomial(sp / sp.sum(), 1, generator=gen)])
            out.append(t)
            last, state, _ = model.step(t, state)
    return prompt + tokenizer.decodeBytes(out).decode("utf-8", errors="replace")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    training.add_arguments(p, batch=16, lr=2e-3, warmup=200)
    p.add_argument("--corpus", required=True, help="make_text_corpus.py's output directory")
    p.add_argument("--vocab", required=True, help="vocabulary file (made from the corpus if it does not exist)")
    p.add_argument("--vocab-size", type=int, default=1024, help="tokens of a vocabulary made here (>= 257)")
    p.add_argument("--context", type=int, default=256, help="tokens per training window")
    p.add_argument("--eval-context", type=int, default=1024, help="tokens per held-out window")
    p.add_argument("--sample-tokens", type=int, default=120, help="tokens per printed sample (0: none)")
    args = p.parse_args()
    if not os.path.exists(args.vocab):
        if args.vocab_size < 257:
            p.error("--vocab-size must be at least 257 (end of text and the 256 bytes)")
        with open(os.path.join(args.corpus, "train.txt"), "rb") as f:
            merges = text.learn_merges(f.read(), args.vocab_size - 257)
        os.makedirs(os.path.dirname(os.path.abspath(args.vocab)), exist_ok=True)
        text.write_vocab(args.vocab, merges)
        print(f"wrote {args.vocab}: {257 + len(merges)} tokens")
    n_vocab = text.vocab_size(args.vocab)
    config, model = training.build(p, args)
    if model.input.kind != "tokens" or not model.causal or config["input"]["vocab_size"] != n_vocab \
            or config["head"] is None or config["head"]["out"] != n_vocab:
        p.error(f"the text recipe needs a causal token model with vocab_size and head.out {n_vocab} "
                f"(the size of {args.vocab})")
    try:
        tokenizer = text.load_tokenizer(args.vocab)
    except FileNotFoundError as e:
        p.error(str(e))
    train, test = (tokens(args.corpus, s, tokenizer, args.vocab) for s in ("train", "test"))
    token_bytes = np.array([len(tokenizer.idx2token.get(i, b"")) for i in range(n_vocab)])
    train_bytes = int(token_bytes[train].sum())
    print(f"vocabulary {n_vocab} tokens; train {len(train)} tokens ({train_bytes / len(train):.3f} bytes/token), "
          f"held-out {len(test)} tokens; {args.batch * args.context} tokens per step")
    if len(train) <= args.context + 1:
        p.error(f"{args.corpus}/train.txt has {len(train)} tokens, fewer than --context + 2")

    def loss_of_step(step):
        starts = np.random.default_rng([args.seed, step]).integers(0, len(train) - args.context - 1, args.batch)
        x = torch.from_numpy(np.stack([train[s:s + args.context + 1] for s in starts]).astype(np.int64))
        x = x.to(args.device)
        with training.autocast(args):
            logits = batched.forward(model, x[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, n_vocab), x[:, 1:].reshape(-1))
        return loss, args.batch * args.context

    step, seconds = training.train(p, args, model, loss_of_step, "train loss", "tokens")
    model = model.float()
    loss, bpb = evaluate(model, test, token_bytes, args.eval_context, args.device)
    print(f"held-out: loss {loss:.4f} nats/token, {bpb:.4f} bits/byte ({len(test)} tokens, "
          f"windows of {args.eval_context})")
    model = model.cpu()
    config = dict(config, tokenizer="vocab.txt")
    notes = {"recipe": "models/reference/train_text.py " + " ".join(sys.argv[1:]), "steps": step,
             "training_seconds": round(seconds), "device": args.device, "precision": args.precision,
             "vocab_size": n_vocab, "test_loss_nats_per_token": f"{loss:.4f}",
             "test_bits_per_byte": f"{bpb:.4f}", "test_tokens": len(test)}
    out_dir = os.path.join(args.work, "export")
    training.export(out_dir, model, config, notes)
    shutil.copyfile(args.vocab, os.path.join(out_dir, "vocab.txt"))
    samples = []
    if args.sample_tokens:
        for prompt in PROMPTS:
            for temperature, top_p in ((0.0, 1.0), (0.8, 0.9)):
                s = sample(model, tokenizer, prompt, args.sample_tokens, temperature, top_p, seed=1)
                how = "greedy" if temperature == 0 else f"temperature {temperature}, top-p {top_p}, seed 1"
                samples.append({"prompt": prompt, "sampling": how, "text": s})
                print(f"--- {how}\n{s}")
    with open(os.path.join(args.work, "metrics.json"), "w") as f:
        json.dump(dict(notes, samples=samples), f, indent=2)
    print(f"exported {out_dir} (weights.safetensors, config.json, vocab.txt)")


if __name__ == "__main__":
    main()
