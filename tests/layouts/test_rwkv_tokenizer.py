"""The vocabulary a model carries against BlinkDL's `rwkv` package: its World
vocabulary (rwkv_vocab_v20230424.txt, found beside the package's tokenizer),
carried by a small random RWKV-7 converted two ways (a BlinkDL .pth with
recur-convert --tokenizer, and a GGUF file written as llama.cpp's converter
writes the vocabulary: recur_ref/gguf_rwkv7.add_rwkv_world_vocab), read back
with recur.Tokenizer and held to the package's TRIE_TOKENIZER: every token's
bytes, every token encoding to itself, the ids of texts in many scripts, of
random bytes and of the repository's documentation, and decode(encode(text))
== text."""
import glob
import os
import random

import pytest
from rwkv import rwkv_tokenizer

from layout_harness import REPO, rwkv7_carrying

import recur

WORLD = os.path.join(os.path.dirname(rwkv_tokenizer.__file__), "rwkv_vocab_v20230424.txt")

# A small RWKV-7 of the World vocabulary's 65,536 rows: (layers, C, head size, vocab,
# decay / a / v / gate low-rank dims).
SHAPE = (1, 32, 16, 65536, 8, 8, 4, 8)

SAMPLES = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "中文分词测试：我们今天去北京天安门广场。日本語のテキストも、カタカナも。",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم، هذه جملة عربية للاختبار.",
    "emoji 😀👍🏽👨‍👩‍👧‍👦🇫🇷 and ⚡️✨",
    "  leading spaces,\ttabs\t\t, and    runs     of      spaces       ",
    "\n\nnew\nlines\r\n\r\nand\n\n\n\nblank ones\n",
    "digits 0123456789 3.14159 2024-01-31 1,000,000 ١٢٣ 一二三",
    "mixed: naïve café résumé Ελληνικά עברית हिन्दी 한국어 ไทย",
    "code: def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "<s> is plain text here, as are [PAD65530] and \\x00 and \\n",
    "",
]


@pytest.fixture(scope="module")
def trie():
    return rwkv_tokenizer.TRIE_TOKENIZER(WORLD)


@pytest.fixture(scope="module", params=["pth", "gguf"])
def tokenizer(request, tmp_path_factory):
    return rwkv7_carrying(WORLD, SHAPE, request.param, tmp_path_factory.mktemp(request.param))


def test_every_token(tokenizer, trie):
    assert tokenizer.vocab_size == 65530  # "<s>" and ids 1 to 65529
    assert tokenizer.end_of_text == 0
    assert tokenizer.token_bytes(0) == b""
    assert sorted(trie.idx2token) == list(range(1, 65530))
    for i, want in trie.idx2token.items():
        assert tokenizer.token_bytes(i) == want, i
        assert tokenizer.encode(want) == [i], i


def test_texts_in_many_scripts(tokenizer, trie):
    for text in SAMPLES:
        ids = tokenizer.encode(text)
        assert ids == trie.encode(text), text
        assert tokenizer.decode(ids) == text
        assert tokenizer.encode(text.encode("utf-8")) == ids


def test_random_bytes(tokenizer, trie):
    rng = random.Random(3)
    for _ in range(200):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        ids = tokenizer.encode(data)
        assert ids == trie.encodeBytes(data)
        assert tokenizer.decode_bytes(ids) == data


def test_documentation_corpus(tokenizer, trie):
    files = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    files += [os.path.join(REPO, "README.md")]
    text = "".join(open(f, encoding="utf-8").read() for f in files)
    assert len(text) > 100_000
    ids = tokenizer.encode(text)
    assert ids == trie.encode(text)
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8")) / 2  # real merging, not byte by byte


def test_decode_cuts_and_errors(tokenizer):
    ids = tokenizer.encode("中")
    assert tokenizer.decode_bytes(ids) == "中".encode("utf-8")
    cut = [i for i in range(1, 65530) if tokenizer.token_bytes(i) == b"\xe4"]
    assert cut, "the World vocabulary has single-byte tokens for every byte"
    with pytest.raises(UnicodeDecodeError):
        tokenizer.decode(cut)
    assert tokenizer.decode(cut, errors="replace") == "\ufffd"
    with pytest.raises(recur.OutOfRange, match=r"ids\[1\]: token id 65530 is not in the vocabulary"):
        tokenizer.decode([1, 65530])
    with pytest.raises(recur.OutOfRange, match="token id -1 is not in the vocabulary"):
        tokenizer.token_bytes(-1)
