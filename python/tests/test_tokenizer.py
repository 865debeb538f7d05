"""recur.Tokenizer: the vocabulary a model carries (recur.convert's tokenizer,
a config's "tokenizer"), and each of its errors. tests/layouts/test_rwkv_tokenizer.py
holds it to the rwkv package on the whole World vocabulary.

Needs RECUR_TEST_MODELS (tests/python/make_models.sh); CTest's python.pytest sets it.
"""
import json
import os
import threading

import pytest

import recur

MODELS = os.environ.get("RECUR_TEST_MODELS", "")

# tiny_pre_tokens has 32 token rows: id 0 end of text, then these.
VOCAB = "\n".join([
    "1 'h' 1", "2 'e' 1", "3 'l' 1", "4 'o' 1", "5 ' ' 1", "6 'he' 2", "7 'hello' 5",
    "8 b'\\xe4\\xb8' 2", "9 b'\\xad' 1", "10 '\\n' 1", "11 '\\u4e2d' 3", "",
])


def export_dir(name):
    if not MODELS:
        pytest.fail("RECUR_TEST_MODELS is not set (CTest's python.pytest sets it)")
    return os.path.join(MODELS, name)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text(VOCAB, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    d = export_dir("tiny_pre_tokens")
    data = recur.convert(os.path.join(d, "weights.safetensors"), os.path.join(d, "config.json"),
                         tokenizer=vocab_file)
    return recur.Tokenizer(recur.Model(data))


def test_encode_decode(tokenizer):
    assert tokenizer.vocab_size == 12 and len(tokenizer) == 12
    assert tokenizer.end_of_text == 0
    assert tokenizer.encode("hello hel") == [7, 5, 6, 3]
    assert tokenizer.encode(b"hello\n") == [7, 10]
    assert tokenizer.encode(bytearray(b"he")) == [6]
    assert tokenizer.encode(memoryview(b"oh")) == [4, 1]
    assert tokenizer.encode("") == []
    # "中" is one token; its bytes split another way are two.
    assert tokenizer.encode("中") == [11]
    assert tokenizer.decode([8, 9]) == "中"
    assert tokenizer.decode([7, 5, 6, 3]) == "hello hel"
    assert tokenizer.decode((7,)) == "hello"
    assert tokenizer.decode_bytes([8]) == b"\xe4\xb8"
    assert tokenizer.token_bytes(7) == b"hello"
    assert tokenizer.token_bytes(0) == b""
    assert tokenizer.decode([0, 7, 0]) == "hello"  # end of text has no bytes
    assert repr(tokenizer) == "<recur.Tokenizer of 12 tokens>"
    assert tokenizer.model.vocab_size == 32


def test_cut_characters_and_errors_argument(tokenizer):
    with pytest.raises(UnicodeDecodeError):
        tokenizer.decode([8])
    assert tokenizer.decode([8], errors="replace") == "\ufffd"
    assert tokenizer.decode([7, 8], errors="ignore") == "hello"


def test_errors_name_the_problem(tokenizer):
    with pytest.raises(recur.InvalidArgument,
                       match="no token of the vocabulary starts with byte 0x78 at offset 2"):
        tokenizer.encode("hex")
    with pytest.raises(recur.OutOfRange, match=r"ids\[1\]: token id 12 is not in the vocabulary"):
        tokenizer.decode([1, 12])
    with pytest.raises(recur.OutOfRange, match=r"token id -1 is not in the vocabulary \(ids 0 to 11\)"):
        tokenizer.decode_bytes([-1])
    with pytest.raises(recur.OutOfRange, match=r"ids\[0\]: token id 4294967296 is not"):
        tokenizer.decode([2**32])
    with pytest.raises(recur.OutOfRange, match="token id 99 is not in the vocabulary"):
        tokenizer.token_bytes(99)
    with pytest.raises(TypeError):
        tokenizer.encode(7)
    with pytest.raises(TypeError):
        tokenizer.decode("hello")
    with pytest.raises(UnicodeEncodeError):
        tokenizer.encode("\ud800")  # a lone surrogate has no UTF-8


def test_model_without_vocabulary():
    d = export_dir("tiny_pre_tokens")
    model = recur.Model(recur.convert(os.path.join(d, "weights.safetensors"),
                                      os.path.join(d, "config.json")))
    with pytest.raises(recur.InvalidArgument, match="the model has no vocabulary"):
        recur.Tokenizer(model)


def test_config_key_and_refusals(tmp_path, vocab_file):
    d = export_dir("tiny_pre_tokens")
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    # A config file's "tokenizer" is relative to its folder.
    (tmp_path / "vocab.txt").write_text(VOCAB, encoding="utf-8")
    with open(tmp_path / "config.json", "w") as f:
        json.dump({**config, "tokenizer": "vocab.txt"}, f)
    t = recur.Tokenizer(recur.Model(recur.convert(os.path.join(d, "weights.safetensors"),
                                                  tmp_path / "config.json")))
    assert t.encode("hello") == [7]
    # A config dict's, to the working directory.
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        data = recur.convert(os.path.join(d, "weights.safetensors"),
                             {**config, "tokenizer": "vocab.txt"})
    finally:
        os.chdir(cwd)
    assert recur.Tokenizer(recur.Model(data)).encode("oh") == [4, 1]
    bad = tmp_path / "bad.txt"
    bad.write_text("1 'a' 1\n2 'a' 1\n", encoding="utf-8")
    with pytest.raises(recur.InvalidArgument, match='bad.txt line 2: the token "a" is also on line 1'):
        recur.convert(os.path.join(d, "weights.safetensors"), config, tokenizer=bad)
    big = tmp_path / "big.txt"
    big.write_text("".join(f"{i} '{chr(0x4e00 + i)}' 3\n" for i in range(1, 40)), encoding="utf-8")
    with pytest.raises(recur.InvalidArgument, match=r"big.txt has 40 tokens .* vocab_size \(32\)"):
        recur.convert(os.path.join(d, "weights.safetensors"), config, tokenizer=big)


def test_threads_share_one_tokenizer(tokenizer):
    text = "hello hel\n" * 2000
    want = tokenizer.encode(text)
    results = [None] * 4

    def work(k):
        results[k] = tokenizer.decode(tokenizer.encode(text)) == text and \
            tokenizer.encode(text) == want

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4
