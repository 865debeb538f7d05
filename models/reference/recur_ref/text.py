"""Text for the language-model recipe (train_text.py): a byte-level vocabulary in the
rwkv package's vocabulary format, made from a training text by merging its most frequent
adjacent pairs (byte-pair encoding), and the rwkv package's greedy longest-match
tokenizer (TRIE_TOKENIZER, rwkv/rwkv_tokenizer.py) over it.

The vocabulary file has one line per token, `id repr(token) byte_length`, ids from 1:
ids 1..256 are the single bytes 0..255 (so any text encodes), then the merged tokens in
the order they were made; id 0 is the end-of-text token and has no line. A token is
written as a Python str literal when its bytes are UTF-8, else as a bytes literal, as
in the rwkv package's own rwkv_vocab_v20230424.txt.
"""

import collections
import glob
import importlib.util
import os
import re
from typing import Dict, List, Tuple

import numpy as np

END_OF_TEXT = 0

# The pieces merges stay within: a word with its leading space (an apostrophe inside a
# word, ASCII or U+2019, is part of it), one digit, a run of other non-space bytes with
# its leading space, a run of white space. No merged token holds a newline (a piece
# with one is white space only, and merges within white space are left out), so the
# tokens of a text are the tokens of its lines.
PIECE = re.compile(rb" ?[A-Za-z]+(?:(?:'|\xe2\x80\x99)[A-Za-z]+)*| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+")


def pieces(text: bytes) -> collections.Counter:
    return collections.Counter(PIECE.findall(text))


def learn_merges(text: bytes, n_merges: int) -> List[bytes]:
    """The first n_merges tokens byte-pair encoding makes from `text`: each time the most
    frequent adjacent pair within pieces (ties: the smaller pair of byte strings) becomes a
    token. Deterministic."""
    counts = [(p, c) for p, c in sorted(pieces(text).items()) if not p.isspace()]
    words = [[bytes([b]) for b in p] for p, _ in counts]
    freq = [c for _, c in counts]
    pair_count: Dict[Tuple[bytes, bytes], int] = collections.Counter()
    where: Dict[Tuple[bytes, bytes], set] = collections.defaultdict(set)
    for i, w in enumerate(words):
        for pair in zip(w, w[1:]):
            pair_count[pair] += freq[i]
            where[pair].add(i)
    merges = []
    while len(merges) < n_merges and pair_count:
        best = max(pair_count.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pair_count[best] < 2:
            break
        token = best[0] + best[1]
        merges.append(token)
        for i in sorted(where.pop(best)):
            w = words[i]
            for pair in zip(w, w[1:]):
                pair_count[pair] -= freq[i]
                if pair_count[pair] <= 0:
                    del pair_count[pair]
            merged, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    merged.append(token)
                    j += 2
                else:
                    merged.append(w[j])
                    j += 1
            words[i] = merged
            for pair in zip(merged, merged[1:]):
                pair_count[pair] += freq[i]
                where[pair].add(i)
        pair_count.pop(best, None)
    return merges


def vocab_lines(merges: List[bytes]) -> List[str]:
    """The vocabulary file's lines: the 256 bytes (ids 1..256), then the merges."""
    lines = []
    for i, token in enumerate([bytes([b]) for b in range(256)] + list(merges)):
        try:
            shown = repr(token.decode("utf-8"))
        except UnicodeDecodeError:
            shown = repr(token)
        lines.append(f"{i + 1} {shown} {len(token)}\n")
    return lines


def write_vocab(path: str, merges: List[bytes]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(vocab_lines(merges))


def vocab_size(path: str) -> int:
    """The token count of a vocabulary file, end of text (id 0) included: the model's width."""
    with open(path, encoding="utf-8") as f:
        return 1 + max(int(line.split(" ", 1)[0]) for line in f if line.strip())


def tokenizer_source() -> str:
    """The path of the rwkv package's rwkv_tokenizer.py: the installed package's (the tests'
    virtual environment, build/venv, has it: tests/layouts/requirements.txt), else
    $RECUR_RWKV_TOKENIZER. FileNotFoundError if neither is there."""
    spec = importlib.util.find_spec("rwkv")
    if spec is not None and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            if os.path.exists(os.path.join(d, "rwkv_tokenizer.py")):
                return os.path.join(d, "rwkv_tokenizer.py")
    env = os.environ.get("RECUR_RWKV_TOKENIZER", "")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError(f"RECUR_RWKV_TOKENIZER={env} does not exist")
        return env
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    found = sorted(glob.glob(os.path.join(repo, "build", "venv", "lib", "python3*", "site-packages", "rwkv",
                                          "rwkv_tokenizer.py")))
    if found:
        return found[-1]
    raise FileNotFoundError("the rwkv package's rwkv_tokenizer.py: install rwkv (scripts/python-env.sh puts it "
                            "in build/venv) or set RECUR_RWKV_TOKENIZER to the file")


def load_tokenizer(vocab_path: str):
    """The rwkv package's TRIE_TOKENIZER over the vocabulary file (the module is loaded from
    its file alone, so the package's model code and its imports are not needed)."""
    spec = importlib.util.spec_from_file_location("rwkv_tokenizer", tokenizer_source())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TRIE_TOKENIZER(vocab_path)


def encode_file(tokenizer, path: str) -> np.ndarray:
    """A text file's tokens (int16 when they fit), line by line (no token spans a newline)."""
    out = []
    with open(path, "rb") as f:
        for line in f:
            out += tokenizer.encodeBytes(line)
    return np.asarray(out, dtype=np.int16 if max(out, default=0) < 2 ** 15 else np.int32)
