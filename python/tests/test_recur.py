"""Tests of the Python package recur against the C API's own runs (recur-run).

Needs RECUR_TEST_MODELS (a folder of NAME.recur made by
tests/python/make_models.sh) and RECUR_RUN (the recur-run program); CTest's
python.pytest sets both.
"""

import gc
import os
import re
import subprocess
import threading
import tracemalloc

import numpy as np
import pytest

import recur

MODELS = os.environ.get("RECUR_TEST_MODELS", "")
RECUR_RUN = os.environ.get("RECUR_RUN", "")
RECUR_CONVERT = os.environ.get("RECUR_CONVERT", "")
TOL = dict(rtol=1e-5, atol=1e-5)
# Chunked prefill and whole-sequence encode sum in another order than steps.
PREFILL_TOL = dict(rtol=1e-4, atol=1e-4)


def model_path(name):
    if not MODELS:
        pytest.fail("RECUR_TEST_MODELS is not set (CTest's python.pytest sets it)")
    return os.path.join(MODELS, name + ".recur")


@pytest.fixture(scope="module")
def tiny():  # tokens, vocab 32, learned positions (256), log-softmax head
    return recur.Model(model_path("tiny_pre_tokens"))


@pytest.fixture(scope="module")
def feats():  # features, 16-wide frames, no head
    return recur.Model(model_path("small_post_features"))


@pytest.fixture(scope="module")
def softmax():  # tokens, KV cache
    return recur.Model(model_path("softmax_tokens"))


@pytest.fixture(scope="module")
def encoder():  # linformer: non-causal, features
    return recur.Model(model_path("linformer_features"))


def inputs(model, batch, n, seed=0):
    rng = np.random.default_rng(seed)
    if model.input_kind == "tokens":
        return rng.integers(0, model.vocab_size, size=(batch, n), dtype=np.int32)
    return rng.standard_normal((batch, n, model.feature_width), dtype=np.float32)


def step_all(session, xs):
    return np.stack([session.step(xs[:, t]) for t in range(xs.shape[1])], axis=1)


def recur_run(model, xs, tmp_path, mode, extra=()):
    if not RECUR_RUN:
        pytest.fail("RECUR_RUN is not set (CTest's python.pytest sets it)")
    src, dst = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(src, xs)
    subprocess.run([RECUR_RUN, model.source, "-i", str(src), "-o", str(dst), "--mode", mode,
                    *extra], check=True, capture_output=True)
    return np.load(dst)


# ------------------------------------------------------------------- model


def test_info(tiny, feats, softmax, encoder):
    assert (tiny.input_kind, tiny.vocab_size, tiny.d_model, tiny.num_layers) == ("tokens", 32, 32, 2)
    assert (tiny.output_width, tiny.max_positions, tiny.output_kind) == (32, 256, "log_probabilities")
    assert tiny.recurrent and tiny.state_bytes > 0 and tiny.state_bytes_per_position == 0
    assert tiny.parameter_count > 0 and tiny.step_flops > 0
    assert feats.input_kind == "features" and feats.feature_width > 0 and feats.vocab_size == 0
    assert softmax.state_bytes_per_position > 0
    assert encoder.input_kind == "features" and not encoder.recurrent
    assert "tokens" in repr(tiny)
    assert recur.version().count(".") == 2 and recur.max_threads() >= 1
    assert recur.simd_target() and "highway" in recur.backends()


def test_model_from_bytes(tiny):
    with open(tiny.source, "rb") as f:
        data = f.read()
    m = recur.Model(data)
    assert m.source == "<%d bytes>" % len(data)
    xs = inputs(tiny, 1, 20)
    np.testing.assert_array_equal(step_all(m.session(backend="highway"), xs),
                                  step_all(tiny.session(backend="highway"), xs))
    m2 = recur.Model(bytearray(data), trusted=True)
    assert m2.d_model == tiny.d_model
    m3 = recur.Model(__import__("pathlib").Path(tiny.source), mmap=False)
    assert m3.num_layers == tiny.num_layers


GGUF = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fuzz", "gguf_seeds",
                    "rwkv7_q4_0.gguf")  # a tiny RWKV-7 as llama.cpp writes it


def test_model_from_a_gguf_file(tmp_path, monkeypatch):
    """A GGUF path loads as its conversion does, through a temporary file that is gone after;
    a truncated one raises what recur.convert raises for it, and leaves nothing either."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    direct = recur.Model(GGUF)
    assert direct.source == GGUF and os.listdir(tmp) == []
    converted = recur.Model(recur.convert(GGUF))
    xs = inputs(direct, 1, 12)
    np.testing.assert_array_equal(step_all(direct.session(), xs), step_all(converted.session(), xs))
    truncated = tmp_path / "truncated.gguf"
    data = open(GGUF, "rb").read()
    truncated.write_bytes(data[:len(data) // 2])
    with pytest.raises(recur.InvalidArgument, match="truncated.gguf.*outside"):  # as recur.convert
        recur.Model(str(truncated))
    assert os.listdir(tmp) == []


def test_session_keeps_model_alive(tiny):
    with open(tiny.source, "rb") as f:
        m = recur.Model(f.read())
    s = m.session()
    del m
    gc.collect()
    assert s.step(np.array([1], np.int32)).shape == (1, 32)


# ------------------------------------------------- parity with the C API


@pytest.mark.parametrize("name", ["tiny", "feats", "softmax"])
def test_step_and_prefill_match_recur_run(name, request, tmp_path):
    model = request.getfixturevalue(name)
    xs = inputs(model, 3, 40)
    with model.session(batch=3) as s:
        ys = step_all(s, xs)
    assert ys.shape == (3, 40, model.output_width) and ys.dtype == np.float32
    np.testing.assert_allclose(ys, recur_run(model, xs, tmp_path, "step"), **TOL)
    with model.session(batch=3, prefill_chunk=16) as s:
        yp = s.prefill(xs)
    np.testing.assert_allclose(yp, recur_run(model, xs, tmp_path, "prefill", ["--chunk", "16"]),
                               **TOL)
    np.testing.assert_allclose(yp, ys, **PREFILL_TOL)


def test_encode_matches_recur_run(encoder, tmp_path):
    xs = inputs(encoder, 2, 50)
    with encoder.session(batch=2) as s:
        y = s.encode(xs)
        assert y.shape == (2, 50, encoder.output_width)
        np.testing.assert_allclose(y, recur_run(encoder, xs, tmp_path, "encode"), **TOL)
        # Each stream's sequence on its own gives the same outputs.
        with encoder.session(batch=1) as one:
            np.testing.assert_allclose(one.encode(xs[1:2]), y[1:2], **PREFILL_TOL)


def test_step_then_prefill_continues(tiny):
    xs = inputs(tiny, 2, 60)
    with tiny.session(batch=2) as a, tiny.session(batch=2) as b:
        ya = step_all(a, xs)
        assert b.prefill(xs[:, :30], outputs=False) is None
        yb = step_all(b, xs[:, 30:])
        np.testing.assert_allclose(yb, ya[:, 30:], **PREFILL_TOL)


def test_encode_is_reset_plus_prefill_and_keeps_state(tiny):
    xs = inputs(tiny, 1, 30)
    with tiny.session() as s:
        s.step(xs[:, 0])
        saved = s.save_state(0)
        y = s.encode(xs)
        assert s.save_state(0) == saved
        s.reset()
        np.testing.assert_allclose(y, s.prefill(xs), **PREFILL_TOL)


def test_batch_streams_are_independent(feats):
    xs = inputs(feats, 3, 25)
    with feats.session(batch=3) as s:
        y3 = step_all(s, xs)
    for b in range(3):
        with feats.session(batch=1) as s1:
            np.testing.assert_allclose(step_all(s1, xs[b:b + 1]), y3[b:b + 1], **TOL)


def test_state_round_trip_and_fork(tiny):
    xs = inputs(tiny, 2, 40)
    with tiny.session(batch=2) as s:
        step_all(s, xs[:, :20])
        blobs = [s.save_state(i) for i in range(2)]
        assert all(isinstance(b, bytes) and len(b) == s.state_size for b in blobs)
        f = s.fork()
        rest = step_all(s, xs[:, 20:])
        np.testing.assert_array_equal(step_all(f, xs[:, 20:]), rest)
        f.close()
    with tiny.session(batch=2) as t:
        t.load_state(0, blobs[1])  # streams swapped
        t.load_state(1, memoryview(blobs[0]))
        swapped = step_all(t, xs[::-1, 20:])
        np.testing.assert_array_equal(swapped, rest[::-1])
        t.reset(1)
        y = t.step(xs[:, 0])
        with tiny.session() as fresh:
            np.testing.assert_array_equal(y[1:], fresh.step(xs[1:, 0]))


def test_input_conversions(tiny, feats):
    xs = inputs(tiny, 2, 10)
    with tiny.session(batch=2) as a, tiny.session(batch=2) as b:
        np.testing.assert_array_equal(a.prefill(xs), b.prefill(xs.astype(np.int64)))
        # Not contiguous: every other column of a wider array.
        wide = np.repeat(xs, 2, axis=1)[:, ::2]
        a.reset(); b.reset()
        np.testing.assert_array_equal(a.prefill(xs), b.prefill(wide))
        a.reset()
        assert a.step([1, 2]).shape == (2, 32)
    fx = inputs(feats, 1, 5)
    with feats.session() as a, feats.session() as b:
        np.testing.assert_allclose(a.prefill(fx), b.prefill(fx.astype(np.float64)), **TOL)


def test_empty_prefill(tiny):
    with tiny.session(batch=2) as s:
        y = s.prefill(np.zeros((2, 0), np.int32))
        assert y.shape == (2, 0, 32)


# ------------------------------------------------------------------ errors


def raises(cls, status, match, fn, *args):
    with pytest.raises(cls, match=match) as info:
        fn(*args)
    assert isinstance(info.value, recur.Error)
    assert info.value.status == status and info.value.message
    return info.value


def test_shape_and_dtype_errors(tiny, feats):
    with tiny.session(batch=2) as s:
        e = raises(recur.InvalidArgument, recur.Status.INVALID_ARGUMENT,
                   r"step: expected \(batch,\) token ids of shape \(2,\), got shape \(3,\)",
                   s.step, np.zeros(3, np.int32))
        assert isinstance(e, ValueError)
        raises(recur.InvalidArgument, 1, r"prefill: expected .* \(2, N\), got shape \(2,\)",
               s.prefill, np.zeros(2, np.int32))
        with pytest.raises(TypeError, match="int32 token ids, got an array of float32"):
            s.step(np.zeros(2, np.float32))
        with pytest.raises(TypeError, match="int32 token ids"):
            s.step(["a", "b"])
    with feats.session() as s:
        raises(recur.InvalidArgument, 1, r"expected \(batch, feature_width\) frames of shape "
               r"\(1, %d\), got shape \(1, 3\)" % feats.feature_width,
               s.step, np.zeros((1, 3), np.float32))
        with pytest.raises(TypeError, match="float32 frames"):
            s.step(np.zeros((1, feats.feature_width), np.complex64))
        bad = np.zeros((1, feats.feature_width), np.float32)
        bad[0, 2] = np.nan
        raises(recur.InvalidArgument, 1, ".", s.step, bad)  # the runtime's message


def test_runtime_errors(tiny, softmax, encoder, tmp_path):
    with tiny.session() as s:
        e = raises(recur.OutOfRange, recur.Status.OUT_OF_RANGE, "32", s.step,
                   np.array([32], np.int32))
        assert isinstance(e, IndexError)
        raises(recur.OutOfRange, 6, "int32", s.step, np.array([2**40]))
        raises(recur.OutOfRange, 6, ".", s.reset, 5)
        raises(recur.OutOfRange, 6, ".", s.save_state, 1)
        s.prefill(np.zeros((1, 256), np.int32), outputs=False)
        raises(recur.OutOfRange, 6, ".", s.step, np.array([0], np.int32))  # past max_positions
    with softmax.session(max_context=8) as s:
        s.prefill(np.zeros((1, 8), np.int32))
        raises(recur.OutOfRange, 6, ".", s.step, np.array([0], np.int32))
    with encoder.session() as s:
        raises(recur.Unsupported, recur.Status.UNSUPPORTED, ".", s.step,
               np.zeros((1, encoder.feature_width), np.float32))
    raises(recur.IoError, recur.Status.IO_ERROR, "no-such", recur.Model,
           str(tmp_path / "no-such.recur"))
    raises(recur.InvalidModel, recur.Status.INVALID_MODEL, ".", recur.Model, b"\0" * 1000)
    raises(recur.Unsupported, 3, "nope", tiny.session, 1, 1, 0, "nope")
    raises(recur.InvalidArgument, 1, "state_sums", tiny.session, 1, 1, 0, None, "kahan")
    raises(recur.InvalidArgument, 1, "batch", tiny.session, 0)
    with pytest.raises(TypeError):
        recur.Model(12)


def test_state_errors(tiny, softmax):
    with tiny.session() as s, softmax.session() as other:
        blob = s.save_state(0)
        raises(recur.InvalidState, recur.Status.INVALID_STATE, ".", other.load_state, 0,
               other.save_state(0)[:-1])
        raises(recur.InvalidState, 7, ".", s.load_state, 0, other.save_state(0))
        raises(recur.InvalidState, 7, ".", s.load_state, 0, blob[:-4])
        corrupt = bytearray(blob)
        corrupt[len(blob) // 2] ^= 0xFF
        raises(recur.InvalidState, 7, ".", s.load_state, 0, corrupt)
        with pytest.raises(TypeError, match="bytes-like"):
            s.load_state(0, "text")
    with tiny.session(state_sums="plain") as plain:
        raises(recur.InvalidState, 7, ".", plain.load_state, 0, blob)


def test_closed_session(tiny):
    s = tiny.session()
    with s:
        s.step(np.array([1], np.int32))
    assert s.closed
    s.close()  # idempotent
    for call, args in [(s.step, (np.array([1], np.int32),)), (s.reset, ()), (s.fork, ()),
                       (s.save_state, (0,)), (s.prefill, (np.zeros((1, 2), np.int32),))]:
        raises(recur.InvalidArgument, 1, "closed", call, *args)


# ----------------------------------------------------------------- threads


def test_sessions_on_threads(feats):
    xs = inputs(feats, 1, 200, seed=3)
    with feats.session() as s:
        expected = step_all(s, xs)
    results, errors = [None] * 4, []

    def work(i):
        try:
            with feats.session() as s:
                results[i] = step_all(s, xs)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        np.testing.assert_array_equal(r, expected)


def test_shared_session_is_serialised(tiny):
    token = np.array([5], np.int32)
    with tiny.session() as s:
        for _ in range(200):
            s.step(token)
        expected = s.save_state(0)
    with tiny.session() as shared:
        def work():
            for _ in range(50):
                shared.step(token)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Every one of the 200 steps ran, whole, one at a time.
        assert shared.save_state(0) == expected


def test_calls_release_the_gil(feats):
    """While one call runs for D seconds, this thread keeps running Python code:
    it sees the call in progress for most of D, and no gap between its clock
    readings comes near D (with the GIL held through the call, it would see
    the call end at once, or stop for all of it)."""
    clock = __import__("time").perf_counter
    n = 2000
    with feats.session() as s:
        while True:  # a prefill long enough to tell a gap from scheduling noise
            xs = inputs(feats, 1, n)
            t0 = clock()
            s.prefill(xs, outputs=False)
            d = clock() - t0
            if d >= 0.25 or n >= 1 << 20:
                break
            n *= 2
        s.reset()
        started = threading.Event()

        def work():
            started.set()
            s.prefill(xs, outputs=False)

        t = threading.Thread(target=work)
        t.start()
        started.wait()
        gap, first = 0.0, clock()
        last = first
        while t.is_alive():
            now = clock()
            gap, last = max(gap, now - last), now
        t.join()
    # This thread ran through most of the call, without a long stop.
    assert last - first > d / 2 and gap < d / 2, (last - first, gap, d)


# ------------------------------------------------------------------- leaks


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leaks_over_100k_steps(feats):
    """10^5 steps and 10^3 state round trips and errors: Python's heap grows by
    under 64 KiB (tracemalloc) and the process by under 4 MiB (RSS)."""
    x = np.zeros((1, feats.feature_width), np.float32)
    bad = np.zeros((1, 1), np.float32)

    def run(n):
        with feats.session() as s:
            for i in range(n):
                s.step(x)
                if i % 100 == 0:
                    s.load_state(0, s.save_state(0))
                    try:
                        s.step(bad)
                    except recur.InvalidArgument:
                        pass
                if i % 2000 == 1999:
                    s.reset()

    run(10_000)  # warm: first-use allocations (thread scratch, numpy caches)
    gc.collect()
    tracemalloc.start()
    rss0 = rss_bytes()
    snap0 = tracemalloc.take_snapshot()
    run(100_000)
    gc.collect()
    grown = sum(st.size_diff for st in tracemalloc.take_snapshot().compare_to(snap0, "filename"))
    tracemalloc.stop()
    rss_grown = rss_bytes() - rss0
    print("tracemalloc %+d bytes, RSS %+d bytes over 10^5 steps" % (grown, rss_grown))
    assert grown < 64 * 1024
    assert rss_grown < 4 * 1024 * 1024


# ---- recur.convert: the converter library from Python


def export_dir(name):
    return os.path.join(MODELS, name)  # make_models.sh: export.py's weights and config


@pytest.mark.parametrize("name", ["tiny_pre_tokens", "small_post_features", "linformer_features"])
def test_convert_from_files_equals_recur_convert(name):
    d = export_dir(name)
    got = recur.convert(os.path.join(d, "weights.safetensors"), os.path.join(d, "config.json"))
    with open(model_path(name), "rb") as f:
        assert got == f.read()  # the same bytes recur-convert wrote (make_models.sh)


def reference_state(name):
    """The exported model's tensors as torch tensors (recur names) and its config dict."""
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(repo, "models", "reference"))
    from recur_ref import checkpoint
    model, config = checkpoint.load(export_dir(name))
    return dict(model.state_dict()), config


def test_convert_from_arrays_and_a_config_dict(tiny):
    state, config = reference_state("tiny_pre_tokens")
    converted = recur.Model(recur.convert(state, config))
    xs = inputs(tiny, 2, 40)
    with converted.session(batch=2) as a, tiny.session(batch=2) as b:
        np.testing.assert_array_equal(a.prefill(xs), b.prefill(xs))  # the same f32 weights
    as_numpy = recur.Model(recur.convert({k: v.numpy() for k, v in state.items()}, config))
    with as_numpy.session(batch=2) as a, tiny.session(batch=2) as b:
        np.testing.assert_array_equal(a.prefill(xs), b.prefill(xs))


def test_convert_writes_a_file_and_reports(tmp_path):
    d = export_dir("tiny_pre_tokens")
    out = tmp_path / "tiny_int8.recur"
    report = recur.convert(os.path.join(d, "weights.safetensors"), os.path.join(d, "config.json"),
                           out, dtype="int8")
    assert report["layout"] == "recur" and report["narrow_tensors"] > 0
    assert report["file_bytes"] == out.stat().st_size and report["warnings"] == []
    assert recur.Model(out).output_width == 32


def test_layouts_are_the_converters():
    if not RECUR_CONVERT:
        pytest.fail("RECUR_CONVERT is not set (CTest's python.pytest sets it)")
    help_text = subprocess.run([RECUR_CONVERT, "convert", "--help"], check=True,
                               capture_output=True, text=True).stdout
    listed = re.search(r"Naming and config layout of the source \(([^;]*);", " ".join(help_text.split()))
    assert listed, help_text
    assert recur.layouts() == tuple(listed.group(1).split(", "))
    assert recur.layouts()[0] == "auto" and len(recur.layouts()) >= 8


def test_dtypes_are_the_converters():
    assert recur.dtypes() == ("f32", "f16", "bf16", "int8", "int4", "q8_0", "q4_k", "q6_k",
                              "q5_k")


def test_convert_errors_name_the_problem(tmp_path):
    state, config = reference_state("tiny_pre_tokens")
    with pytest.raises(recur.InvalidArgument, match='dtype must be .* got "int3"'):
        recur.convert(state, config, dtype="int3")
    with pytest.raises(recur.InvalidArgument, match='layout must be .* got "keras"'):
        recur.convert(state, config, layout="keras")
    missing = dict(state)
    del missing["input.embedding"]
    with pytest.raises(recur.InvalidArgument, match="input.embedding: missing tensor"):
        recur.convert(missing, config)
    with pytest.raises(recur.InvalidArgument, match="d_model"):
        recur.convert(state, {**config, "d_model": 0})
    with pytest.raises(recur.IoError, match="cannot open"):
        recur.convert(str(tmp_path / "none.safetensors"), config)
    with pytest.raises(recur.IoError, match="cannot create"):
        recur.convert(state, config, tmp_path / "no" / "dir" / "m.recur")
