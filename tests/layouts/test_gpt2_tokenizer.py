"""Byte-level BPE vocabularies (recur.fbs TokenizerKind Gpt2Bpe) against Hugging
Face tokenizers: a byte-level BPE trained here (ByteLevel pre-tokenizer, BpeTrainer,
the byte alphabet, GPT-NeoX's special tokens and an added run of spaces) on the
repository's documentation and a multi-script text, saved as tokenizer.json,
carried by a small random RWKV-7 converted two ways (a BlinkDL .pth with
recur-convert --tokenizer tokenizer.json, and a GGUF file of tokenizer model "gpt2"
written as llama.cpp's converter writes the vocabulary: recur_ref/gguf_rwkv7.add_gpt2_vocab), read back with
recur.Tokenizer and held to tokenizers' Tokenizer.encode(text).ids: texts in many
scripts, digits, whitespace runs, punctuation, apostrophes, emoji, the added
tokens, random text over all of Unicode and the documentation; decode(encode(text))
== text, for bytes that are not UTF-8 too. The character classes of the GPT-2
pattern (runtime/text/unicode_classes.inc) are held to tokenizers' pre-tokenizer
for every code point."""
import glob
import os
import random
import re
import unicodedata

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from layout_harness import REPO, rwkv7_carrying

import recur

VOCAB = 3000
# The letters and numbers of Unicode 16.0 that 15.0 had not (tokenizers' against the
# table's Unicode).
NEWER = 5004
# A small RWKV-7 of VOCAB + 8 rows (rows past the vocabulary carry no token).
SHAPE = (1, 32, 16, VOCAB + 8, 8, 8, 4, 8)

MULTI_SCRIPT = """The quick brown fox jumps over the lazy dog. It's John's, they're, we've, I'm, we'll, he'd.
中文分词测试：我们今天去北京天安门广场。日本語のテキストも、カタカナも。한국어 문장입니다.
Привет, мир! Съешь же ещё этих мягких французских булок. Ελληνικά γράμματα.
مرحبا بالعالم، هذه جملة عربية للاختبار. עברית היא שפה. हिन्दी भाषा। ไทย ภาษา
naïve café résumé façade coöperate Ångström. Zürich, Kraków, Reykjavík.
digits 0123456789 3.14159 2024-01-31 1,000,000 ١٢٣ ۴۵۶ 一二三 ½ ² Ⅻ
emoji 😀👍🏽👨‍👩‍👧‍👦🇫🇷 ⚡️✨ code: def f(x):\n    return {'a': [1, 2, 3]}  # comment
"""

SAMPLES = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "It's, IT'S, it’s, 'll 'd 're 've 'm 's 't, ''', 'x, ' s, don't'",
    "中文分词测试：我们今天去北京天安门广场。日本語のテキストも、カタカナも。",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم، هذه جملة عربية للاختبار.",
    "emoji 😀👍🏽👨‍👩‍👧‍👦🇫🇷 and ⚡️✨ and ☃ alone",
    "  leading spaces,\ttabs\t\t, and    runs     of      spaces       ",
    "\n\nnew\nlines\r\n\r\nand\n\n\n\nblank ones\n",
    " \u00a0\u2003\u3000mixed\u2028white\u2029space\u0085\u000b\u000c\u001c\u200b ",
    "digits 0123456789 3.14159 2024-01-31 1,000,000 ١٢٣ 一二三 ½²Ⅻ 12ab34",
    "mixed: naïve café résumé Ελληνικά עברית हिन्दी 한국어 ไทย e\u0301 a\u0308",
    "punctuation!!! ??? ... --- *** ((()))[]{}<>@#$%^&*_+=|\\/~`\"",
    "<|endoftext|> is a special token, <|padding|>too, and <|endoftext|><|endoftext|>x",
    "added:    four spaces, and     five,",
    "",
    " ",
    "'",
    "a",
    "\t",
]


def training_text():
    files = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    return [open(f, encoding="utf-8").read() for f in files] + [MULTI_SCRIPT] * 20


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """tokenizers' byte-level BPE, and its tokenizer.json's path."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 1, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|padding|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    # GPT-NeoX's kind of added token: a run of spaces, not special, normalized.
    tok.add_tokens([AddedToken("    ", normalized=True)])
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tok.save(str(path))
    assert tok.get_vocab_size() == VOCAB
    return tok, path


@pytest.fixture(scope="module", params=["pth", "gguf"])
def tokenizer(request, trained, tmp_path_factory):
    return rwkv7_carrying(trained[1], SHAPE, request.param, tmp_path_factory.mktemp(request.param))


def test_every_token(tokenizer, trained):
    tok = trained[0]
    assert tokenizer.vocab_size == VOCAB
    assert tokenizer.end_of_text == 0
    for text, i in tok.get_vocab(with_added_tokens=False).items():
        want = bytes(bytes_to_unicode_inverse(text))
        assert tokenizer.token_bytes(i) == want, i
    assert tokenizer.token_bytes(0) == b"<|endoftext|>"
    assert tokenizer.token_bytes(VOCAB - 1) == b"    "


def bytes_to_unicode_inverse(text):
    """GPT-2's bytes_to_unicode, undone."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    inverse = {chr(c): b for b, c in zip(bs, cs)}
    return [inverse[ch] for ch in text]


def test_texts_in_many_scripts(tokenizer, trained):
    tok = trained[0]
    for text in SAMPLES + MULTI_SCRIPT.split("\n"):
        ids = tokenizer.encode(text)
        assert ids == tok.encode(text).ids, text
        assert tokenizer.decode(ids) == text
        assert tokenizer.encode(text.encode("utf-8")) == ids


def random_text(rng, n):
    """Random text over all of Unicode, weighted towards what the pattern tells
    apart: ASCII, apostrophes and contractions, whitespace of every kind, letters,
    digits and marks of other scripts, unassigned and private-use code points."""
    pools = [
        "abcXYZ019 '\t\n\r.,!?-_sStTmMdD",
        "\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\u0085\u000b\u000c\u001c\u200b",
        "éßøÆĳŉǅΣωЖжաא٣۵߀ߊ०১๓༢ကᏣᐁḀἀⅫ〇ぁ㐀가ｶ𝐀𝟘𐍈𠀀",
        "\u0301\u0308\u0903\u20dd\ufe0f\u200d\U0001f600\U0001f3fd\U0001f1eb",
    ]
    out = []
    for _ in range(n):
        k = rng.randrange(6)
        if k < 4:
            out.append(rng.choice(pools[k]))
        else:
            cp = rng.randrange(0x110000)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0x20
            out.append(chr(cp))
    return "".join(out)


def test_random_text(tokenizer, trained):
    tok = trained[0]
    rng = random.Random(7)
    texts = [random_text(rng, rng.randrange(1, 200)) for _ in range(300)]
    for text, want in zip(texts, tok.encode_batch(texts)):
        ids = tokenizer.encode(text)
        assert ids == want.ids, repr(text)
        assert tokenizer.decode(ids) == text


def test_documentation_corpus(tokenizer, trained):
    tok = trained[0]
    files = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    files += [os.path.join(REPO, "README.md")]
    text = "".join(open(f, encoding="utf-8").read() for f in files)
    assert len(text) > 100_000
    ids = tokenizer.encode(text)
    assert ids == tok.encode(text).ids
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8")) / 2  # real merging, not byte by byte


def test_bytes_that_are_not_utf8(tokenizer):
    """tokenizers takes str only; recur takes any bytes, a byte that begins no UTF-8
    sequence being a character of none of the pattern's classes, and gives them back."""
    rng = random.Random(3)
    for _ in range(200):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        assert tokenizer.decode_bytes(tokenizer.encode(data)) == data
    assert tokenizer.encode(b"a\xffb") == [tokenizer.encode("a")[0]] + tokenizer.encode(b"\xff") + \
        tokenizer.encode("b")


def load_classes():
    """runtime/text/unicode_classes.inc: a class per code point (0 none, 1 letter,
    2 number, 3 whitespace)."""
    path = os.path.join(REPO, "runtime", "text", "unicode_classes.inc")
    entries = [int(x, 16) for x in re.findall(r"0x([0-9a-f]+)u", open(path).read())]
    cls = bytearray(0x110000)
    for k, e in enumerate(entries):
        end = entries[k + 1] >> 2 if k + 1 < len(entries) else 0x110000
        cls[e >> 2:end] = bytes([e & 3]) * (end - (e >> 2))
    return cls


def test_character_classes_match_tokenizers():
    """For every code point c but the surrogates, tokenizers' ByteLevel
    pre-tokenizer splits "\\na" + c inside (between a and c) exactly when c is not a
    letter, "\\n1" + c when c is not a number, "\\n!" + c when c is a letter, a
    number or whitespace: the classes the table gives. The table is of Unicode 15.0,
    tokenizers' (Oniguruma's) of 16.0, so the letters and numbers 16.0 added are of
    no class in the table: those are let through where Python's unicodedata (Unicode
    14.0) has no character, and counted."""
    cls = load_classes()
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    wrong, newer = [], set()
    for start in range(0, 0x110000, 0x8000):
        cps = [c for c in range(start, start + 0x8000) if not 0xD800 <= c <= 0xDFFF]
        for lead, is_class in (("a", lambda k: k == 1), ("1", lambda k: k == 2),
                               ("!", lambda k: k == 0)):
            text = "".join("\n" + lead + chr(c) for c in cps)
            starts = {s for _, (s, _) in pre.pre_tokenize_str(text)}
            for k, c in enumerate(cps):
                joined = 3 * k + 2 not in starts
                if joined == is_class(cls[c]):
                    continue
                if cls[c] == 0 and unicodedata.category(chr(c)) == "Cn":
                    newer.add(c)
                else:
                    wrong.append((hex(c), lead, cls[c]))
    assert not wrong[:20], f"{len(wrong)} code points: {wrong[:20]}"
    assert len(newer) == NEWER, sorted(newer)[:20]


def test_decode_cuts_and_errors(tokenizer):
    ids = tokenizer.encode("😀")
    assert tokenizer.decode_bytes(ids) == "😀".encode("utf-8")
    with pytest.raises(recur.OutOfRange, match=r"ids\[1\]: token id 3000 is not in the vocabulary"):
        tokenizer.decode([1, 3000])
