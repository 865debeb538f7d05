"""recur beside llama.cpp on the same RWKV-7 and Mamba2 GGUF files: decode, prefill and 8 streams.

    benchmarks/llama-cpp-setup.sh                      # once: llama.cpp and the gguf package
    build/llama-cpp/venv/bin/python benchmarks/llama_cpp_bench.py --out build/llama-cpp-bench \\
        --recur-convert build/release/converter/recur-convert \\
        --recur-bench build/release/benchmarks/recur-bench \\
        [--llama build/llama-cpp] [--arch rwkv7 mamba2] [--shapes 0.1B 0.4B 1.5B 130M 370M 1.3B]
        [--types F16 Q8_0 Q4_0 Q4_K_M]
        [--threads 1 2] [--rounds 2] [--recur-int8-activations auto|blocks]
        [--parity --recur-run build/release/tools/recur-run
        [--recur-generate build/release/tools/recur-generate --world-vocab VOCAB
         --bpe-tokenizer tokenizer.json]]

For each architecture (--arch, default rwkv7) and shape it writes a random-weight GGUF at
F16 the way llama.cpp's converter writes one (recur_ref/gguf_rwkv7.py: RWKV-7, vocabulary
65,536; recur_ref/gguf_mamba2.py: Mamba2 at state-spaces' shapes, vocabulary 50,288; both
with tokenizer model "none"), makes
the other types with llama-quantize, and converts each file with recur-convert (a type
recur has no exact form for is refused by recur-convert, and its recur cells print the
refusal). Then, per thread count and type, alternating llama.cpp and recur in every
round: llama-bench's tg128 and pp512, llama-batched-bench with 8 sequences of 128
generated tokens, and recur-bench's batch-1 decode, prefill 512 and batch-8 decode (on
recur's default numerics, or with --recur-int8-activations blocks on llama.cpp's). It
prints each pair's tokens/s, recur/llama.cpp, and %bound: the bytes a token reads (the
file's tensors but the embedding, of which a token reads one row) against the DRAM read
bandwidth recur-bench measures with that many threads reading at once. Before each program's run its file's pages
are dropped from the page cache (posix_fadvise DONTNEED), so both read their model as a
freshly started deployment does: pages cached since a file was written sit in small
folios, which recur's mapping, asking for huge pages, reads ~10% slower (RWKV-7 0.1B F16
on AMD Zen 4: 78% of the bound against 85-90%). --parity first checks, per type, that
recur's greedy continuation of a prompt equals llama.cpp's for 64 tokens and prints the
largest logit difference (llama_peer.py drives llama.cpp); with --recur-generate and
--world-vocab it also writes a file carrying the RWKV World vocabulary and checks that
recur's token ids of a text sample of several scripts equal llama.cpp's, and that
recur-generate's greedy 64 tokens after it equal llama.cpp's; with --bpe-tokenizer the
same for a file carrying that byte-level BPE (tokenizer model "gpt2", pre-tokenizer
"gpt-2"). --parity also converts llama.cpp's GPT-2 and GPT-NeoX vocabulary test files
(models/ggml-vocab-{gpt-2,mpt}.gguf) and checks recur's ids of their texts against the ids
Hugging Face tokenizers gave (their .out files).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "models", "reference"))
sys.path.insert(0, HERE)

from recur_ref import gguf_mamba2  # noqa: E402
from recur_ref.gguf_rwkv7 import add_vocab, write_gguf, write_random_gguf  # noqa: E402
from recur_ref.rwkv7 import PUBLISHED_SHAPES as RWKV7_SHAPES  # noqa: E402
from recur_ref.rwkv7 import favour_continuation, random_state_dict  # noqa: E402

# Per architecture (--arch): its name in the output, its published shapes and the writer
# of a random F16 file at one of them.
ARCHS = {"rwkv7": ("RWKV-7", RWKV7_SHAPES, write_random_gguf),
         "mamba2": ("Mamba2", gguf_mamba2.PUBLISHED_SHAPES, gguf_mamba2.write_random_gguf)}

QUANTS = {"F16": None, "Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_K_M": "Q4_K_M"}
# The prompt's length for --parity; 64 tokens are generated after it.
PROMPT = 24
# Small models for --parity: (layers, C, vocabulary, low-rank widths). Head size 64, as in
# every published RWKV-7: llama.cpp's CPU WKV-7 kernel reads a head in steps of
# GGML_F32_STEP floats (64 with AVX-512), so it computes wrong numbers for smaller heads.
# K-quants need rows of a multiple of 256 (llama-quantize falls back to other types below).
PARITY_MODELS = {"2x128": (2, 128, 1000, (32, 32, 32, 64), ["F32", "F16", "Q8_0", "Q4_0"]),
                 "4x256": (4, 256, 4096, (32, 32, 32, 64), ["F32", "F16", "Q8_0", "Q4_0", "Q4_K_M"])}
# Mamba2 for --parity --arch mamba2: (layers, d_model, vocabulary, heads of 64, d_state, groups).
MAMBA2_PARITY_MODELS = {"mamba2-2x256": (2, 256, 1000, 8, 64, 1, ["F32", "F16", "Q8_0", "Q4_0"]),
                        "mamba2-4x256": (4, 256, 4096, 8, 128, 2,
                                         ["F32", "F16", "Q8_0", "Q4_0", "Q4_K_M"])}


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def files_for(args, arch, shape):
    """{type: (gguf, recur model or the converter's refusal)} for one shape."""
    base = os.path.join(args.out, f"{arch}-{shape}-F16.gguf")
    path = {t: base if QUANTS[t] is None else os.path.join(args.out, f"{arch}-{shape}-{t}.gguf")
            for t in args.types}
    # The F16 file is written only when a type needs it (it may be deleted once
    # the quantised files are made: 3 GB at 1.5B).
    if not os.path.exists(base) and not all(os.path.exists(p) for p in path.values()):
        ARCHS[arch][2](base, shape)
        print(f"wrote {base}", flush=True)
    out = {}
    for t in args.types:
        gguf_path = path[t]
        if not os.path.exists(gguf_path):
            run([os.path.join(args.llama, "bin", "llama-quantize"), base, gguf_path, QUANTS[t]])
        model = gguf_path[:-5] + ".recur"
        if not os.path.exists(model):
            r = subprocess.run([args.recur_convert, gguf_path, "-o", model], capture_output=True, text=True)
            if r.returncode != 0:
                model = "refused: " + (r.stderr.strip().splitlines() or ["?"])[-1]
        out[t] = (gguf_path, model)
    return out


def token_bytes(gguf_path):
    """Bytes a decoded token reads: every tensor but token_embd, of which it reads one row,
    unless the file has no output.weight: then the head is token_embd, read whole."""
    import gguf
    reader = gguf.GGUFReader(gguf_path)
    tied = not any(t.name == "output.weight" for t in reader.tensors)
    total = 0
    for t in reader.tensors:
        whole = t.name != "token_embd.weight" or tied
        total += int(t.n_bytes) if whole else int(t.n_bytes) // int(t.shape[-1])
    return total


def drop_page_cache(path):
    """Drops `path`'s clean, unmapped pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def llama_cells(args, gguf_path, threads):
    drop_page_cache(gguf_path)
    r = run([os.path.join(args.llama, "bin", "llama-bench"), "-m", gguf_path, "-t", str(threads),
             "-p", "512", "-n", "128", "-r", "2", "-o", "json"])
    rows = json.loads(r.stdout)
    cells = {}
    for row in rows:
        key = "prefill" if row["n_prompt"] > 0 else "decode"
        cells[key] = row["avg_ts"]
    r = run([os.path.join(args.llama, "bin", "llama-batched-bench"), "-m", gguf_path, "-t", str(threads),
             "-tb", str(threads), "-c", "4096", "-npp", "16", "-ntg", "128", "-npl", "8",
             "--output-format", "jsonl"])
    for line in r.stdout.splitlines() + r.stderr.splitlines():
        if line.startswith("{"):
            cells["8 streams"] = json.loads(line)["speed_tg"]
    return cells


def recur_cells(args, model, threads):
    drop_page_cache(model)
    r = run([args.recur_bench, model, "-b", "1", "8", "-t", str(threads), "-n", "64", "-w", "8",
             "-p", "512", "--int8-activations", args.recur_int8_activations, "--json"])
    cells, machine = {}, {}
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        machine = row
        if row["test"].startswith("prefill"):
            cells["prefill"] = row["rate"]
        elif row["test"].startswith("decode") or row["test"].startswith("step"):
            cells["decode" if row["batch"] == 1 else "8 streams"] = row["rate"]
    return cells, machine


def parity_files(args, name):
    """({type: (gguf, recur model or refusal)}, prompt) of a small random model: F32 and F16
    as llama.cpp's converter writes them (--outtype), Q8_0 likewise, Q4_0 and Q4_K_M by
    llama-quantize from the F32 file. An RWKV-7's head favours a random continuation of the
    prompt (recur_ref/rwkv7.py's favour_continuation), so that its top logits stand apart
    as a trained model's do: a random head's top two lie within ~1e-3 of the largest logit
    somewhere in 64 tokens, closer than quantised files' logits agree between runtimes."""
    import gguf
    import numpy as np
    models = MAMBA2_PARITY_MODELS if name in MAMBA2_PARITY_MODELS else PARITY_MODELS
    text = [int(x) for x in np.random.default_rng(7).integers(1, models[name][2], PROMPT + 64)]
    if name in MAMBA2_PARITY_MODELS:
        layers, c, vocab, heads, state, groups, types = MAMBA2_PARITY_MODELS[name]
        tensors = gguf_mamba2.random_tensors(c, layers, vocab, heads=heads, state=state,
                                             groups=groups, seed=layers)
        write = lambda path, qtype: gguf_mamba2.write_gguf(  # noqa: E731
            path, tensors, hidden=c, layers=layers, heads=heads, head_dim=64, state=state,
            groups=groups, kernel=4, vocab=vocab, outtype=qtype)
    else:
        layers, c, vocab, widths, types = PARITY_MODELS[name]
        sd = random_state_dict(layers, c, 64, vocab, *widths, seed=layers)
        sd, gap = favour_continuation(sd, text, PROMPT)
        print(f"  parity {name}: the head favours a continuation; top-two gap >= {gap:.3f} of "
              f"the largest |logit| (reference)", flush=True)
        write = lambda path, qtype: write_gguf(path, sd, qtype, layers, c, 64, *widths)  # noqa: E731
    out = {}
    for t in types:
        path = os.path.join(args.out, f"parity-{name}-{t}.gguf")
        if t in ("F32", "F16", "Q8_0"):
            write(path, getattr(gguf.GGMLQuantizationType, t))
        else:
            run([os.path.join(args.llama, "bin", "llama-quantize"), out["F32"][0], path, t])
        model = path[:-5] + ".recur"
        r = subprocess.run([args.recur_convert, path, "-o", model], capture_output=True, text=True)
        out[t] = (path, model if r.returncode == 0 else "refused: " + (r.stderr.strip().splitlines() or ["?"])[-1])
    return out, text[:PROMPT]


def parity(args, peer, files, prompt, label):
    """Per type: llama.cpp's greedy 64 tokens after the prompt (None: random ids), then both
    runtimes' logits over the prompt and those tokens (recur-run, stepped): recur continues
    greedily the same way iff its argmax after every position equals llama.cpp's next
    token. Prints the smallest gap between llama.cpp's top two logits over those 64
    positions beside the largest difference. Returns the failures."""
    import numpy as np
    failures = 0
    for t, (gguf_path, model) in files.items():
        if model.startswith("refused"):
            print(f"  parity {label} {t}: recur {model}  FAIL", flush=True)
            failures += 1
            continue
        with peer(gguf_path, threads=2) as m:
            if prompt is None:
                prompt = [int(x) for x in np.random.default_rng(7).integers(1, m.vocab, PROMPT)]
            ids = m.greedy(prompt, 64)
            want = m.logits(prompt + ids)
        top2 = np.sort(want[len(prompt) - 1:-1], axis=1)[:, -2:]
        gap = float((top2[:, 1] - top2[:, 0]).min() / np.abs(want).max())
        tokens = os.path.join(args.out, "parity-tokens.npy")
        logits = os.path.join(args.out, "parity-logits.npy")
        np.save(tokens, np.array(prompt + ids, np.int32))
        # Every type but F32 as llama.cpp multiplies it (--int8-activations blocks: F16's
        # activations rounded to f16, the quantised types' to its blocks), and recur's
        # default numerics beside.
        for mode in ["blocks", "auto"] if t != "F32" else ["auto"]:
            run([args.recur_run, model, "-i", tokens, "-o", logits, "--mode", "step", "-t", "2",
                 "--int8-activations", mode])
            got = np.load(logits)
            per_position = np.abs(got - want).max(axis=1) / np.abs(want).max()
            rel = float(per_position.max())
            # Positions whose logits agree to 1e-6 before the first that does not.
            close = int(np.argmax(per_position > 1e-6)) if rel > 1e-6 else len(per_position)
            same = sum(int(np.argmax(got[len(prompt) - 1 + i])) == ids[i] for i in range(64))
            # F32 and F16: the logits within 1e-3 of the largest; every type, as llama.cpp
            # multiplies: the same 64 tokens. recur's own numerics on quantised types: shown.
            ok = same == 64 and (rel <= 1e-3 or t not in ("F32", "F16"))
            checked = mode == "blocks" or t in ("F32", "F16")
            failures += checked and not ok
            print(f"  parity {label} {t} ({mode}): largest logit difference {rel:.2e} of the "
                  f"largest |logit|, the first {close} positions within 1e-6; greedy 64 tokens: "
                  f"{same}/64 equal (llama.cpp's top-two gap >= {gap:.1e})"
                  f"{'  FAIL' if checked and not ok else ''}", flush=True)
    return failures


# Text for the tokenizer check: several scripts, emoji, whitespace runs, digits.
TOKENIZER_SAMPLE = ("The quick brown fox, 1234567 times.\n\n   Tabs\tand  double  spaces\r\n"
                    "Ünïcödé: naïve café. Привет, мир! 你好，世界。こんにちは 안녕하세요 "
                    "مرحبا بالعالم שלום 🙂🚀👩‍💻 \u00a0end\n")


def vocabulary_rows(vocab):
    """The embedding rows for a vocabulary file: the World vocabulary's 65,536, or a
    tokenizer.json's ids rounded up to a multiple of 64."""
    if vocab.endswith(".gguf"):
        import gguf
        n = len(gguf.GGUFReader(vocab).fields["tokenizer.ggml.tokens"].contents())
        return (n + 63) // 64 * 64
    if not vocab.endswith(".json"):
        return 65536
    with open(vocab, encoding="utf-8") as f:
        spec = json.load(f)
    ids = list(spec["model"]["vocab"].values()) + [a["id"] for a in spec["added_tokens"]]
    return (max(ids) + 64) // 64 * 64


def tokenizer_parity(args, peer, vocab, label, arch="rwkv7"):
    """On an F32 file carrying `vocab` (--world-vocab: the RWKV World vocabulary,
    tokenizer model "rwkv"; --bpe-tokenizer: a byte-level BPE's tokenizer.json,
    tokenizer model "gpt2"): llama.cpp's and recur's token ids of TOKENIZER_SAMPLE, and
    recur-generate's greedy 64 tokens after it (up to an end-of-text token) against
    llama.cpp's. Returns the failures."""
    import gguf
    layers, c, rows = 2, 128, vocabulary_rows(vocab)
    path = os.path.join(args.out, f"tokenizer-{label}-{arch}-F32.gguf")
    if arch == "mamba2":
        tensors = gguf_mamba2.random_tensors(c, layers, rows, heads=4, state=16, seed=5)
        gguf_mamba2.write_gguf(path, tensors, hidden=c, layers=layers, heads=4, head_dim=64,
                               state=16, groups=1, kernel=4, vocab=rows,
                               tokenizer=lambda w: add_vocab(w, vocab, rows))
    else:
        sd = random_state_dict(layers, c, 64, rows, 32, 32, 32, 64, seed=5)
        write_gguf(path, sd, gguf.GGMLQuantizationType.F32, layers, c, 64, 32, 32, 32, 64,
                   vocab=vocab)
    model = path[:-5] + ".recur"
    run([args.recur_convert, path, "-o", model])
    text = TOKENIZER_SAMPLE.encode()
    with peer(path, threads=2) as m:
        want = m.tokenize(text)
        greedy = m.greedy(want, 64)
        greedy_text = b"".join(m.token_bytes(t) for t in greedy)
    import recur
    tokenizer = recur.Tokenizer(recur.Model(model))
    got = tokenizer.encode(text)
    r = run([args.recur_generate, model, "--prompt", TOKENIZER_SAMPLE, "-n", "64",
             "--temperature", "0", "--print-ids", "--threads", "2"])
    generated = [int(t) for t in r.stdout.split()]
    # recur-generate ends at the end-of-text token (printing its id); llama.cpp goes on.
    if tokenizer.end_of_text in greedy:
        greedy = greedy[:greedy.index(tokenizer.end_of_text) + 1]
    same_ids = got == want
    same_text = generated == greedy
    print(f"  tokenizer {label}: {len(want)} tokens of a {len(text)}-byte sample, recur's ids "
          f"{'equal' if same_ids else 'DIFFER: FAIL'}; recur-generate's greedy {len(greedy)} tokens "
          f"{'equal' if same_text else 'DIFFER: FAIL'} ({greedy_text[:40]!r}...)", flush=True)
    return (not same_ids) + (not same_text)


def llama_vocab_tests(args):
    """llama.cpp's byte-level BPE test files (its models/ggml-vocab-{gpt-2,mpt}.gguf: GPT-2's
    and GPT-NeoX's vocabularies, MPT's being GPT-NeoX's, with .inp texts and .out ids that
    its convert_hf_to_gguf_update.py wrote with Hugging Face tokenizers): each vocabulary in
    a small RWKV-7 file, converted, and recur's ids of every text against the .out ids.
    Returns the failures."""
    import gguf
    failures = 0
    for name in ("gpt-2", "mpt"):
        vocab = os.path.join(args.llama_vocabs, f"ggml-vocab-{name}.gguf")
        reader = gguf.GGUFReader(vocab)
        rows = len(reader.fields["tokenizer.ggml.tokens"].contents())
        sd = random_state_dict(1, 32, 16, rows, 8, 8, 4, 8, seed=1)
        path = os.path.join(args.out, f"vocab-{name}-F32.gguf")
        write_gguf(path, sd, gguf.GGMLQuantizationType.F32, 1, 32, 16, 8, 8, 4, 8, vocab=vocab)
        model = path[:-5] + ".recur"
        run([args.recur_convert, path, "-o", model])
        import recur
        tokenizer = recur.Tokenizer(recur.Model(model))
        with open(vocab + ".inp", encoding="utf-8") as f:
            texts = f.read().split("\n__ggml_vocab_test__\n")
        with open(vocab + ".out", encoding="utf-8") as f:
            outs = f.read().split("\n")
        same = sum(tokenizer.encode(t) == [int(x) for x in o.split()] for t, o in zip(texts, outs))
        ok = same == len(texts)
        failures += not ok
        print(f"  vocabulary {name} ({rows} tokens): recur's ids of {same}/{len(texts)} texts equal "
              f"tokenizers'{'' if ok else '  FAIL'}", flush=True)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--llama", default=os.path.join(REPO, "build", "llama-cpp"))
    ap.add_argument("--recur-convert", required=True)
    ap.add_argument("--recur-bench", required=True)
    ap.add_argument("--recur-run", help="for --parity")
    ap.add_argument("--arch", nargs="+", default=["rwkv7"], choices=list(ARCHS))
    ap.add_argument("--shapes", nargs="*", default=None,
                    choices=sorted({s for _, shapes, _ in ARCHS.values() for s in shapes}),
                    help="of the architectures' published shapes (default: all of them)")
    ap.add_argument("--types", nargs="+", default=list(QUANTS), choices=list(QUANTS))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--recur-int8-activations", default="auto", choices=["auto", "blocks"],
                    help="recur-bench's --int8-activations: its default numerics, or llama.cpp's "
                    "(blocks: f16 layers on activations rounded to f16 too)")
    ap.add_argument("--parity", action="store_true")
    ap.add_argument("--recur-generate", help="for --parity's tokenizer check")
    ap.add_argument("--world-vocab", help="for --parity's tokenizer check: the rwkv package's "
                    "rwkv_vocab_v20230424.txt")
    ap.add_argument("--bpe-tokenizer", help="for --parity's tokenizer check: a Hugging Face "
                    "tokenizer.json of a byte-level BPE (GPT-2's, GPT-NeoX's, or one trained "
                    "with tokenizers' ByteLevel and BpeTrainer)")
    ap.add_argument("--llama-vocabs", help="for --parity: llama.cpp's models/ folder with "
                    "ggml-vocab-*.gguf and their .inp/.out tests (default: the source that "
                    "llama-cpp-setup.sh unpacks beside --llama)")
    args = ap.parse_args()
    if args.llama_vocabs is None:
        args.llama_vocabs = os.path.join(args.llama, "llama_cpp_python-0.3.36", "vendor",
                                         "llama.cpp", "models")
    os.makedirs(args.out, exist_ok=True)
    print(f"CPU: {cpu_name()}; {os.cpu_count()} logical CPUs", flush=True)
    peer = None
    if args.parity:
        if not args.recur_run:
            ap.error("--parity needs --recur-run")
        import llama_peer
        peer = llama_peer.load(args.llama)
    failures = 0
    if peer:
        small = [n for n in PARITY_MODELS if "rwkv7" in args.arch]
        small += [n for n in MAMBA2_PARITY_MODELS if "mamba2" in args.arch]
        for name in small:
            failures += parity(args, peer, *parity_files(args, name), name)
        if args.recur_generate and args.world_vocab:
            failures += tokenizer_parity(args, peer, args.world_vocab, "rwkv")
        if args.recur_generate and args.bpe_tokenizer:
            failures += tokenizer_parity(args, peer, args.bpe_tokenizer, "gpt2")
        if os.path.isdir(args.llama_vocabs):
            failures += llama_vocab_tests(args)
        if args.recur_generate and "mamba2" in args.arch and os.path.isdir(args.llama_vocabs):
            # GPT-NeoX's vocabulary (MPT's is GPT-NeoX's), as the Mamba2 checkpoints carry it.
            neox = os.path.join(args.llama_vocabs, "ggml-vocab-mpt.gguf")
            failures += tokenizer_parity(args, peer, neox, "gpt-neox", arch="mamba2")
    runs = [(arch, shape) for arch in args.arch for shape in ARCHS[arch][1]
            if args.shapes is None or shape in args.shapes]
    for arch, shape in runs:
        files = files_for(args, arch, shape)
        if peer:
            failures += parity(args, peer, files, None, shape)
        for threads in args.threads:
            for t, (gguf_path, model) in files.items():
                llama, ours, machine = [], [], {}
                for _ in range(args.rounds):
                    llama.append(llama_cells(args, gguf_path, threads))
                    if not model.startswith("refused"):
                        cells, machine = recur_cells(args, model, threads)
                        ours.append(cells)
                nbytes = token_bytes(gguf_path)
                # What the threads read together (older recur-bench: one core's, times threads).
                bw = machine.get("bandwidth_threads_gbs", machine.get("bandwidth_gbs", 0) * threads) * 1e9
                print(f"\n== {ARCHS[arch][0]} {shape} {t}, {threads} thread(s); {nbytes / 1e6:.0f} MB a token"
                      f"; recur's activations {args.recur_int8_activations}"
                      + (f"; SIMD {machine['simd_target']}, {machine['bandwidth_gbs']:.1f} GB/s per core"
                         + (f", {bw / 1e9:.1f} for {threads} at once" if threads > 1 else "")
                         if machine else ""), flush=True)
                print(f"{'':10} {'llama.cpp':>10} {'recur':>10} {'ratio':>7} {'%bound llama':>13} {'%bound recur':>13}")
                for cell in ("decode", "prefill", "8 streams"):
                    a = statistics.median(c[cell] for c in llama if cell in c) if llama else float("nan")
                    if ours:
                        b = statistics.median(c[cell] for c in ours if cell in c)
                        bound = (lambda rate, per: f"{100 * rate * nbytes / bw / per:12.0f}%") if bw else None
                        per = 8 if cell == "8 streams" else 1
                        extra = (f" {bound(a, per)} {bound(b, per)}" if bound and cell != "prefill" else "")
                        print(f"{cell:10} {a:10.1f} {b:10.1f} {b / a:6.2f}x{extra}")
                    else:
                        print(f"{cell:10} {a:10.1f} {'-':>10}   ({model})")
    if failures:
        sys.exit(f"{failures} parity check(s) failed")


if __name__ == "__main__":
    main()
