"""Session.generate and recur.stream_text: greedy equals the argmax of step's
logits, a seed gives the same ids, the session holds what was generated, stop
texts, the penalties on ids drawn before, recur.sample and
recur.apply_penalties in a loop of steps giving generate's ids, and every
error.

Needs RECUR_TEST_MODELS (tests/python/make_models.sh); CTest's python.pytest sets it.
"""
import os

import numpy as np
import pytest

import recur
from test_tokenizer import MODELS, tokenizer, vocab_file  # noqa: F401 (fixtures)

# tokenizer: tiny_pre_tokens (32 token rows, log-softmax head) carrying a vocabulary
# of 12 tokens, 0 the end of text.


@pytest.fixture(scope="module")
def model(tokenizer):  # noqa: F811
    return tokenizer.model


def greedy_by_steps(model, prompt, n):
    """The argmax of each step's logits over the vocabulary's 12 ids, each read
    in turn, up to the end of text (read too), and the state after them."""
    with model.session() as s:
        s.prefill(np.array([prompt[:-1]], np.int32), outputs=False)
        y = s.step(np.array([prompt[-1]], np.int32))[0]
        ids = []
        for _ in range(n):
            t = int(np.argmax(y[:12]))
            y = s.step(np.array([t], np.int32))[0]  # read, end of text too
            if t == 0:
                break
            ids.append(t)
        return ids, s.save_state(0)


def test_greedy_is_the_argmax_and_the_session_holds_the_ids(model):
    prompt = recur.Tokenizer(model).encode("ho ho")
    expected, state = greedy_by_steps(model, prompt, 15)
    assert len(expected) >= 5
    with model.session() as s:
        g = s.generate("ho ho", 15, temperature=0)
        ids = list(g)
        assert ids == expected
        assert g.generated == len(ids) + (len(ids) < 15)  # an end of text is drawn, not returned
        assert s.save_state(0) == state
    with model.session() as s:
        assert list(s.generate(prompt, 15, top_k=1, seed=9)) == expected  # ids, top_k 1


def test_a_seed_gives_the_same_ids(model):
    def run(seed, **kw):
        with model.session() as s:
            return list(s.generate("hello", 40, temperature=3.0, seed=seed, **kw))

    a = run(5)
    assert len(a) > 10
    assert run(5) == a
    assert run(6) != a
    assert run(5, top_p=0.5) != a
    # A tiny top_p keeps only the most likely id: the greedy ids.
    with model.session() as s:
        tiny = list(s.generate("hello", 10, temperature=2.0, top_p=1e-6, seed=3))
    with model.session() as s:
        assert tiny == list(s.generate("hello", 10, temperature=0))
    # So does min_p 1 (no ties at the top here); min_p 0.01 keeps more.
    with model.session() as s:
        assert list(s.generate("hello", 10, temperature=2.0, min_p=1.0, seed=3)) == tiny
    assert run(5, min_p=0.01) != run(5, min_p=1.0)


def test_rng_state_advances_one_step_per_draw(model):
    # splitmix64 adds 0x9E3779B97F4A7C15 to its state per draw; greedy draws nothing.
    with model.session() as s:
        g = s.generate("hello", 6, temperature=2.0, seed=11)
        list(g)
        assert g.rng_state == (11 + g.generated * 0x9E3779B97F4A7C15) % 2**64
        g = s.generate("hello", 6, temperature=0, seed=11)
        list(g)
        assert g.rng_state == 11


def test_stop_ends_after_the_id_that_completes_it(model):
    tok = recur.Tokenizer(model)
    with model.session() as s:
        ids = list(s.generate("ho ho", 20, temperature=0))
    # The first id (from the third on) whose bytes are ASCII: stop at its text.
    at = next(i for i in range(2, len(ids)) if tok.token_bytes(ids[i]).isascii())
    stop = tok.token_bytes(ids[at]).decode()
    text = b""
    for end, i in enumerate(ids, 1):
        text += tok.token_bytes(i)
        if stop.encode() in text:
            break
    with model.session() as s:
        assert list(s.generate("ho ho", 20, temperature=0, stop=[stop, "never"])) == ids[:end]
    assert end < len(ids)
    with model.session() as s:
        assert list(s.generate("ho ho", 20, temperature=0, stop=stop)) == ids[:end]


def test_stream_text_holds_back_cut_characters(model):
    tok = recur.Tokenizer(model)
    assert list(recur.stream_text(tok, [7, 8, 9, 5])) == ["hello", "中", " "]
    assert list(recur.stream_text(tok, [7, 8])) == ["hello", "\ufffd"]
    with model.session() as s:
        ids = list(s.generate("hello", 30, temperature=2.0, seed=2))
    assert "".join(recur.stream_text(tok, ids)) == tok.decode(ids, errors="replace")


def penalized_greedy_by_steps(model, prompt, n, repeat, presence, frequency, decay, last_n):
    """greedy_by_steps with recur.h's penalties over the last `last_n` ids drawn
    (0: all), computed here in float64 from each step's logits."""
    with model.session() as s:
        s.prefill(np.array([prompt[:-1]], np.int32), outputs=False)
        y = s.step(np.array([prompt[-1]], np.int32))[0]
        drawn = []
        for _ in range(n):
            z = y[:12].astype(np.float64)
            recent = drawn[-last_n:] if last_n else drawn
            for t in set(recent):
                c = sum(decay ** (len(recent) - 1 - i) for i, r in enumerate(recent) if r == t)
                z[t] = z[t] / repeat if z[t] > 0 else z[t] * repeat
                z[t] -= frequency * c + presence
            t = int(np.argmax(z.astype(np.float32)))
            drawn.append(t)
            y = s.step(np.array([t], np.int32))[0]
            if t == 0:
                break
        return [t for t in drawn if t != 0]


def test_penalties_as_recur_h_says(model):
    prompt = recur.Tokenizer(model).encode("ho ho")
    plain, _ = greedy_by_steps(model, prompt, 20)
    for kw in [dict(repeat=1.3, presence=0.5, frequency=0.4, decay=0.9, last_n=0),
               dict(repeat=1.0, presence=2.0, frequency=0.0, decay=1.0, last_n=3)]:
        expected = penalized_greedy_by_steps(model, prompt, 20, **kw)
        assert expected != plain  # the penalties change the draws
        with model.session() as s:
            got = list(s.generate("ho ho", 20, temperature=0, repeat_penalty=kw["repeat"],
                                  presence_penalty=kw["presence"],
                                  frequency_penalty=kw["frequency"],
                                  penalty_decay=kw["decay"], penalty_last_n=kw["last_n"]))
        assert got == expected, kw


def test_sample_and_apply_penalties_by_steps_give_generate_ids(model):
    prompt = recur.Tokenizer(model).encode("ho ho")
    options = dict(temperature=1.5, top_k=0, top_p=0.9, min_p=0.05)
    for repeat, presence in [(1.0, 0.0), (1.4, 0.3)]:
        # The first seed whose generation is 5 ids or more (the end of text may come early).
        for seed in range(1, 100):
            with model.session() as s:
                g = s.generate("ho ho", 20, seed=seed, repeat_penalty=repeat,
                               presence_penalty=presence, **options)
                ids = list(g)
                if len(ids) >= 5:
                    break
        assert len(ids) >= 5
        with model.session() as s:
            s.prefill(np.array([prompt[:-1]], np.int32), outputs=False)
            y = s.step(np.array([prompt[-1]], np.int32))[0]
            rng, drawn = seed, []
            for _ in range(20):
                logits = recur.apply_penalties(y[:12], drawn, repeat_penalty=repeat,
                                               presence_penalty=presence)
                t, rng = recur.sample(logits, rng_state=rng, **options)
                drawn.append(t)
                y = s.step(np.array([t], np.int32))[0]
                if t == 0:
                    break
        assert [t for t in drawn if t != 0] == ids
        assert g.rng_state == rng


def test_sample_and_apply_penalties_as_recur_h_says():
    # Greedy: the argmax, the rng state untouched.
    assert recur.sample([0.5, 2.0, 2.0, -1.0], temperature=0, rng_state=9) == (1, 9)
    # One draw advances splitmix64's state by its constant; a single token is drawn.
    assert recur.sample([1.5], rng_state=0) == (0, 0x9E3779B97F4A7C15)
    # The penalties in float64, rounded once (recur.h), the input left as it was.
    rng = np.random.default_rng(3)
    logits = rng.normal(size=16).astype(np.float32)
    before = logits.copy()
    recent = [3, 5, 3, 9, 3]
    got = recur.apply_penalties(logits, recent, repeat_penalty=1.25, presence_penalty=0.25,
                                frequency_penalty=0.5, penalty_decay=0.75)
    want = logits.astype(np.float64)
    for t in set(recent):
        c = sum(0.75 ** (len(recent) - 1 - i) for i, r in enumerate(recent) if r == t)
        want[t] = want[t] / 1.25 if want[t] > 0 else want[t] * 1.25
        want[t] -= 0.5 * c + 0.25
    assert got.dtype == np.float32
    assert np.array_equal(got, want.astype(np.float32))
    assert np.array_equal(logits, before)
    with pytest.raises(recur.InvalidArgument, match="one row"):
        recur.sample(np.zeros((2, 3)))
    with pytest.raises(recur.InvalidArgument, match=r"top_p is 0.0+; it must be in \(0, 1\]"):
        recur.sample([1.0, 2.0], top_p=0)
    with pytest.raises(recur.InvalidArgument, match=r"min_p is 2; it must be in \[0, 1\]"):
        recur.sample([1.0, 2.0], min_p=2)
    with pytest.raises(recur.InvalidArgument, match="logit 1 is NaN"):
        recur.sample([1.0, float("nan")])
    with pytest.raises(recur.InvalidArgument, match=r"recent token 1 is 4; it must be in \[0, 2\)"):
        recur.apply_penalties([1.0, 2.0], [1, 4])
    with pytest.raises(recur.InvalidArgument, match="int32 token ids"):
        recur.apply_penalties([1.0, 2.0], [0.5])
    with pytest.raises(recur.InvalidArgument, match="repeat_penalty and penalty_decay"):
        recur.apply_penalties([1.0, 2.0], [1], repeat_penalty=0)


def test_errors(model):
    with model.session() as s:
        with pytest.raises(recur.InvalidArgument, match="the prompt is empty"):
            s.generate("", 5)
        with pytest.raises(recur.InvalidArgument, match="the prompt is empty"):
            s.generate([], 5)
        with pytest.raises(recur.InvalidArgument, match="temperature is -1"):
            s.generate("hello", 5, temperature=-1)
        with pytest.raises(recur.InvalidArgument, match=r"top_p is 0.0+; it must be in \(0, 1\]"):
            s.generate("hello", 5, top_p=0)
        with pytest.raises(recur.InvalidArgument, match=r"top_p is 1.5"):
            s.generate("hello", 5, top_p=1.5)
        with pytest.raises(recur.InvalidArgument, match=r"min_p is 2; it must be in \[0, 1\]"):
            s.generate("hello", 5, min_p=2)
        with pytest.raises(recur.InvalidArgument, match="repeat_penalty and penalty_decay"):
            s.generate("hello", 5, repeat_penalty=0)
        with pytest.raises(recur.InvalidArgument, match=r"penalty decay is 1.5"):
            s.generate("hello", 5, penalty_decay=1.5)
        with pytest.raises(recur.InvalidArgument, match="presence penalty is nan"):
            s.generate("hello", 5, presence_penalty=float("nan"))
        with pytest.raises(recur.InvalidArgument, match="a stop text is empty"):
            s.generate("hello", 5, stop="")
        with pytest.raises(TypeError):
            s.generate("hello", 5, stop=[3])
        with pytest.raises(recur.OutOfRange):
            list(s.generate([40], 5))
    with model.session(batch=2) as s:
        with pytest.raises(recur.InvalidArgument, match="batch 1"):
            s.generate("hello", 5)
    s = model.session()
    g = s.generate("hello", 5)
    s.close()
    with pytest.raises(recur.InvalidArgument, match="the session is closed"):
        next(g)


def test_a_model_without_vocabulary_takes_ids():
    plain = recur.Model(os.path.join(MODELS, "tiny_pre_tokens.recur"))
    with plain.session() as s:
        ids = list(s.generate([1, 2, 3], 8, temperature=1.0, seed=1))
        assert len(ids) == 8 and all(0 <= i < 32 for i in ids)
        with pytest.raises(recur.InvalidArgument, match="no vocabulary"):
            s.generate("hello", 5)
        with pytest.raises(recur.InvalidArgument, match="no vocabulary"):
            s.generate([1], 5, stop="x")
