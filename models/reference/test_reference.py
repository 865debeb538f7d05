#!/usr/bin/python3
"""Self-tests of the PyTorch reference (recur_ref) and its file formats.

    /usr/bin/python3 models/reference/test_reference.py

For every config in models/configs/: the parallel forward equals the RNN step
loop and an independent quadratic-time transcription of the README math
(float64, 1e-9); float32 agrees with float64 (1e-4); export → load is exact, as are
copies and reruns of the same ops, while states reached by two paths (e.g. another shape
of the same matmul) agree to rounding (1e-12 relative); goldens hold what the model
computes. Plus the softmax-attention, sliding-window,
AFT-simple, AFT-local, AFT-conv and RetNet mixers' per-stream forms vs naive transcriptions and their batched forms, the Linformer
encoder (every sharing mode vs mixers.Linformer, layerwise tying and its export), the Reformer LSH encoder (vs
explicit loops and mixers.Reformer, the float64 hash margins of its goldens), mixed models
(a list of one mixer per block) vs a per-block composition, safetensors/golden round
trips, the fast-transformers key set, and the CLIs (export, make_golden, compare_run) end
to end. Short sequences only: the
long runs belong to the C++ parity tests. Last line: "N passed, M failed".
"""

import contextlib
import functools
import glob
import io
import json
import math
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import NamedTuple

import torch
import torch.nn.functional as F

from recur_ref import CHUNK, batched, checkpoint, golden, mixers, safetensors
from recur_ref import fast_transformers_layout as ftl
from recur_ref.mixers import (FLASH, GAU, AFTConv, AFTFull, AFTLocal, AFTSimple, LinearAttention, Linformer, Reformer,
                              RetNet, SlidingWindowAttention, SoftmaxAttention, feature_dim)
from recur_ref.model import MIXER_TYPES, Block, RecurModel, mixer_configs

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIGS = sorted(glob.glob(os.path.join(REPO_ROOT, "models", "configs", "*.json")))
SEQ_LEN = {"paper_mnist": 32, "long_pre_tokens": 300, "sliding_window_tokens": 100,  # per config; default below
           "mixed_tokens": 100, "mixed_features": 90, "linformer_features": 200, "linformer_shared": 128,
           "gau_tokens": 100, "reformer_features": 200, "reformer_tokens_encoder": 300,
           "block_local_causal": 150, "block_local_encoder": 61, "block_local_causal_wide": 48,
           "reformer_transformers_encoder": 300, "reformer_transformers_causal": 256, "reformer_transformers_short": 50}
DEFAULT_SEQ_LEN = 64
SEED = 7


AFT_LOCAL_STATE = ["den", "k_ring", "max", "num", "v_ring"]   # aft_local and aft_conv
# The golden state record names of one layer, per mixer type (sorted-name order but S, z / K, V).
STATE_NAMES = {"softmax_attention": ["K", "V"], "linear_attention": ["S", "z"],
               "sliding_window": ["k_glob", "k_ring", "v_glob", "v_ring"],
               "aft_simple": ["den", "max", "num"], "aft_local": AFT_LOCAL_STATE, "aft_conv": AFT_LOCAL_STATE,
               "aft_full": ["k", "v"], "gau": ["k", "v"], "flash": ["S", "kl_buf", "kq_buf", "v_buf"],
               "linformer": [], "reformer": [],   # encoder only: no state
               "retnet": ["S"], "block_local": ["k_ring", "v_ring"], "rwkv7": ["S", "x_prev"],
               "mamba2": ["S", "conv"],
               "gated_deltanet": ["S", "conv_k", "conv_q", "conv_v"], "gla": ["S", "conv_k", "conv_q", "conv_v"]}



def load_config(name):
    """models/configs/<name>.json."""
    with open(os.path.join(REPO_ROOT, "models", "configs", name + ".json")) as f:
        return json.load(f)


def config_with_mixer(base, drop=(), drop_none=False, **kv):
    """A copy of config `base` whose mixer has the keys kv set and those in `drop` removed
    (drop_none: also every key whose value is then None)."""
    c = json.loads(json.dumps(base))
    c["mixer"].update(kv)
    c["mixer"] = {k: v for k, v in c["mixer"].items() if k not in drop and not (drop_none and v is None)}
    return c


def expect_value_error(fn, words, what):
    """fn() raises a ValueError whose message contains `words` (a string, or a tuple of strings:
    each of them; () for any message); `what` says what went wrong if it returns instead."""
    try:
        fn()
    except ValueError as e:
        for word in (words,) if isinstance(words, str) else words:
            assert word in str(e), f"message {str(e)!r} does not name {word!r}"
    else:
        raise AssertionError(what)


def model_error(config, what=None):
    """The message of the ValueError that RecurModel(config) raises; `what` says what went wrong
    if it builds instead."""
    try:
        RecurModel(config)
    except ValueError as e:
        return str(e)
    raise AssertionError(what or f"accepted a bad mixer {config['mixer']}")


def expect_rejected(bad):
    """Every (config, word) in `bad` makes build_model raise a ValueError naming `word`."""
    for config, word in bad:
        expect_value_error(lambda: checkpoint.build_model(config, 0), word, f"accepted a bad mixer {config['mixer']}")

def max_abs(a, b):
    """max |a − b|; 0 for empty tensors (e.g. a sliding window's global slots when g = 0)."""
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def assert_close(a, b, tol, what):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    err = max_abs(a, b)
    assert err <= tol, f"{what}: max |Δ| = {err:.3g} > {tol:.1g}"


def assert_close_rel(a, b, what, rel=1e-12):
    """|a − b| ≤ rel·max|b|, for the same float64 values reached by two paths (the same
    matmul at another shape, another op order): BLAS may block or vectorise each shape
    differently, so they agree only to rounding. A length-n dot product summed in any order
    is within n·eps64·Σ|terms| (eps64 = 2⁻⁵³ ≈ 1.1e-16); with n ≤ 100 and Σ|terms| a few
    max|b|, that is ≲ 1e-13·max|b|, and rel 1e-12 still tells any two positions, slots or
    channels apart. Non-finite entries (a running max's −inf) must match exactly."""
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    assert torch.equal(fa, fb) and torch.equal(a[~fa], b[~fb]), f"{what}: non-finite entries differ"
    a, b = a[fa], b[fb]
    tol = rel * max_abs(b, torch.zeros_like(b))
    err = max_abs(a, b)
    assert err <= tol, f"{what}: max |Δ| = {err:.3g} > {tol:.3g} ({rel:.0e} of max |b|)"


def assert_same_run(a, b, tol, what):
    """a, b: (output, layers, state) of two runs over the same positions."""
    (out_a, layers_a, st_a), (out_b, layers_b, st_b) = a, b
    assert st_a.pos == st_b.pos, f"{what}: state positions {st_a.pos} != {st_b.pos}"
    assert_close(out_a, out_b, tol, f"{what}: output")
    for i, (x, y) in enumerate(zip(layers_a, layers_b)):
        assert_close(x, y, tol, f"{what}: layer {i}")
    for i, (la, lb) in enumerate(zip(st_a.layers, st_b.layers)):
        assert list(la) == list(lb), f"{what}: state {i} names {list(la)} != {list(lb)}"
        for name in la:
            assert_close(la[name], lb[name], tol, f"{what}: state {i} {name}")


def run_script(cmd):
    """cmd = [sys.executable, SCRIPT, ARGS...] as `python3 SCRIPT ARGS` runs it from the
    repository root, but in this process: the script's __main__ with sys.argv set, without
    another interpreter start and torch import. For the checks of what a script writes;
    cli_end_to_end, golden_cache_cli and compare_run_cli start real processes."""
    assert cmd[0] == sys.executable, cmd
    argv, cwd = sys.argv, os.getcwd()
    sys.argv = list(cmd[1:])
    os.chdir(REPO_ROOT)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(cmd[1], run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise AssertionError(f"{' '.join(cmd[1:])}: exit {e.code}") from e
    finally:
        sys.argv = argv
        os.chdir(cwd)


class Golden(NamedTuple):
    records: dict
    tensors: dict      # weights.safetensors as written (the config's layout)
    model: RecurModel
    config: dict


def make_golden(name, steps, *options):
    """make_golden.py --config models/configs/<name>.json --seed 7 --steps <steps> [options], run
    in this process; what it wrote, read back."""
    with tempfile.TemporaryDirectory() as tmp:
        run_script([sys.executable, os.path.join(HERE, "make_golden.py"), "--config", f"models/configs/{name}.json",
                    "--seed", "7", "--steps", str(steps), "--out", tmp, *options])
        records = golden.read(os.path.join(tmp, "golden.bin"))
        tensors, _ = safetensors.read(os.path.join(tmp, checkpoint.WEIGHTS_FILE))
        model, config = checkpoint.load(tmp)
    return Golden(records, tensors, model, config)


def make_golden_refuses(name, steps, word):
    """make_golden.py on config `name` for `steps` positions, in its own process, fails naming `word`."""
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, os.path.join(HERE, "make_golden.py"), "--config",
                            os.path.join(REPO_ROOT, f"models/configs/{name}.json"), "--seed", "7",
                            "--steps", str(steps), "--out", tmp], capture_output=True, text=True)
    assert r.returncode != 0 and word in r.stderr, r.stderr


def step_loop(model, x, state=None):
    """(output, layers, state) of model.step over every position of x."""
    state = model.init_state() if state is None else state
    outs, layers = [], []
    for x_t in x:
        out, state, lay = model.step(x_t, state)
        outs.append(out)
        layers.append(lay)
    return torch.stack(outs), [torch.stack(per) for per in zip(*layers)], state


def state_records(records, n_layers, names):
    """The names of a golden's state records, asserted to be state.{i}.{name} for every layer i
    and each of `names`, in that order."""
    got = [k for k in records if k.startswith("state.")]
    assert got == [f"state.{i}.{n}" for i in range(n_layers) for n in names], got
    return got


def mixer_inputs(model, records):
    """(i, block i, the input of its mixer) for every block of float64 `model` on a golden's
    input record, each block run in its chunked form (the caller holds no_grad)."""
    x = records["input"]
    h = model.input(x.double() if x.is_floating_point() else x, 0)
    for i, block in enumerate(model.blocks):
        yield i, block, block.norm1(h) if block.pre_norm else h
        h, _ = block(h, block.mixer.empty_state(torch.float64), CHUNK, 0)


def recurrent_matches_parallel(att, full, naive, state, P, what="", exact_state=False):
    """A mixer's per-stream recurrent form over full[P:] from `state` (P positions) is naive[P:],
    and its chunked parallel form (chunks 1, 7, CHUNK, N) the recurrent one: outputs within 1e-12,
    every state tensor too (exact_state: equal). Returns (recurrent outputs, recurrent state)."""
    x = full[P:]
    rec_y, rec_state = att.recurrent(x, state, P)
    assert_close(rec_y, naive[P:], 1e-12, f"{what}recurrent vs naive (P={P})")
    for chunk in (1, 7, CHUNK, len(x)):
        par_y, par_state = att.parallel(x, state, P, chunk)
        assert_close(par_y, rec_y, 1e-12, f"{what}parallel chunk {chunk} vs recurrent (P={P})")
        assert list(par_state) == list(rec_state)
        for name in rec_state:
            if exact_state:
                assert torch.equal(par_state[name], rec_state[name]), f"{what}chunk {chunk} state {name} (P={P})"
            else:
                assert_close(par_state[name], rec_state[name], 1e-12, f"{what}chunk {chunk} state {name} (P={P})")
    return rec_y, rec_state


def uneven_pieces(att, full, state, start):
    """A mixer's per-stream parallel form (chunk 4) over full[start:] from `state` in pieces of
    5, 1, 11, 2 and the rest, each continuing from the last: (outputs, the last state)."""
    st, ys, at = state, [], start
    for piece in (5, 1, 11, 2, len(full) - start):
        y_, st = att.parallel(full[at:at + piece], st, at, 4)
        ys.append(y_)
        at += min(piece, len(full) - at)
        if at == len(full):
            break
    return torch.cat(ys), st


def kv_cache_forms(att, full, P, naive, st_ref, widths, what):
    """The per-stream forms of a KV-cache mixer (AFTFull, GAU) over full[start:] from the empty
    state and from the cache of P positions: recurrent == naive[start:], its cache (k, v of
    `widths`) of every position == recur_ref.mixers' (st_ref: a prefill over all of full), chunked
    parallel (chunks 1, 7, CHUNK, N) == recurrent, the same cache exactly.
    Returns {start: (the state it started from, recurrent outputs, recurrent state)}."""
    runs = {}
    for start in (0, P):
        st0 = att.empty_state(torch.float64)
        if start:
            _, st0 = att.recurrent(full[:start], st0, 0)
            assert_close(st0["k"], st_ref["k"][0, :start], 1e-12, f"{what}: prefix cache k")
        x = full[start:]
        y_rec, st_rec = att.recurrent(x, st0, start)
        assert list(st_rec) == ["k", "v"]
        assert st_rec["k"].shape == (len(full), widths[0]) and st_rec["v"].shape == (len(full), widths[1])
        assert_close(y_rec, naive[start:], 1e-12, f"{what}: recurrent from {start} vs naive")
        for name in ("k", "v"):
            assert_close(st_rec[name], st_ref[name][0, :len(full)], 1e-12, f"{what}: state {name}")
        for chunk in (1, 7, CHUNK, len(x)):
            y_par, st_par = att.parallel(x, st0, start, chunk)
            assert_close(y_par, y_rec, 1e-12, f"{what}: parallel chunk {chunk} from {start}")
            for name in ("k", "v"):   # exact: both append slices of one projection of x
                assert torch.equal(st_par[name], st_rec[name]), f"{what}: chunk {chunk} state {name}"
        runs[start] = st0, y_rec, st_rec
    return runs


def stops_at_max_length(att, full, st_full, what, *more):
    """`full` fills all but the last of a KV-cache mixer's max_length positions (st_full: its
    cache): two more raise a ValueError naming max_length in recurrent, parallel and each of
    `more`; one more does not."""
    for fn in (lambda: att.recurrent(full[:2], st_full, len(full)),
               lambda: att.parallel(full[:2], st_full, len(full), 7),
               lambda: att.parallel(torch.cat([full, full[:2]]), att.empty_state(torch.float64), 0, 7), *more):
        expect_value_error(fn, "max_length", f"{what}: stepped past max_length")
    att.recurrent(full[:1], st_full, len(full))   # position T − 1 is still fine


def model_stops_at_max_length(cfg, cache_shapes):
    """A causal model of `cfg` (max_length 12): 12 positions leave layer 0 a cache of
    `cache_shapes`; a 13th, by step, whole or continued, raises a ValueError naming max_length."""
    model = checkpoint.build_model(cfg, 2).double()
    x = golden.random_inputs(cfg, 13, 4)
    with torch.no_grad():
        _, _, state = model(x[:12], return_layers=True)
        assert [tuple(t.shape) for t in state.layers[0].values()] == cache_shapes
        for fn in (lambda: model.step(x[12], state), lambda: model(x), lambda: model(x[12:], state=state)):
            expect_value_error(fn, "max_length", "stepped past max_length")


def mixed_matches_steps(mixed, classes, what):
    """The model of config `mixed` (seed 3, float64) has block i's mixer an instance of
    classes[i], and its parallel form (chunks 1, 7, 25) over 25 positions is its steps."""
    model = checkpoint.build_model(mixed, 3).double()
    assert all(isinstance(block.mixer, cls) for block, cls in zip(model.blocks, classes)), what
    parallel_matches_steps(model, golden.random_inputs(mixed, 25, 4), (1, 7, 25), what)


def parallel_matches_steps(model, x, chunks, what):
    """model(x, chunk=c) for every c in `chunks` is the step loop over x (outputs, layers and
    state within 1e-9)."""
    with torch.no_grad():
        ref = step_loop(model, x)
        for chunk in chunks:
            assert_same_run(model(x, return_layers=True, chunk=chunk), ref, 1e-9, f"{what}: chunk {chunk} vs steps")


def encoder_writes_no_state(name):
    """golden.compute on config `name` (an encoder, seed 7, 20 positions) writes no state
    records; returns the model."""
    cfg = load_config(name)
    enc = checkpoint.build_model(cfg, 7)
    recs = golden.compute(enc, golden.random_inputs(cfg, 20, 8), {"config": name})
    assert not any(n.startswith("state.") for n, _ in recs), [n for n, _ in recs]
    return enc


def norm_tensors(cfg, name, d=None):
    """{name: shape} of one norm over d (default d_model), as README's "Norms" lists them for the
    config's kind."""
    d, kind = d or cfg["d_model"], cfg.get("norm", {"type": "layer_norm"})["type"]
    if kind == "layer_norm":
        return {name + ".weight": (d,), name + ".bias": (d,)}
    return {name + ".weight": (d,) if kind == "rms_norm" else (1,)}


def expected_tensors(cfg):
    """{name: shape} from the table in models/configs/README.md."""
    d, ffn, inp = cfg["d_model"], cfg["ffn"] and cfg["ffn"]["d_ff"], cfg["input"]
    t = {}
    if inp["kind"] == "tokens":
        t["input.embedding"] = (inp["vocab_size"], d)
    elif inp["projection"]:
        t.update({"input.projection.weight": (d, inp["feature_width"]), "input.projection.bias": (d,)})
    if cfg["max_positions"] > 0:
        t["input.positions"] = (cfg["max_positions"], d)
    if cfg.get("positions", {}).get("scale", "none") == "learned":
        t["input.position_scale"] = (1,)
    if cfg.get("positions", {}).get("freq", "base") == "stored":
        t["input.position_freq"] = (d // 2,)
    if inp.get("norm"):
        t.update({"input.norm.weight": (d,), "input.norm.bias": (d,)})
    for i, m in enumerate(mixer_configs(cfg)):   # block i's own mixer (a list: a mixed model)
        b = f"blocks.{i}."
        if m["type"] not in ("gau", "flash", "rwkv7", "mamba2", "gated_deltanet", "gla"):
            qk = m["heads"] * m["dk"]
            vv = qk if m["type"].startswith("aft_") else m["heads"] * m["dv"]   # AFT: D = heads·dk throughout
        for name in ("norm1", "norm2") if ffn else ("norm1",):   # "ffn": null: no norm2 either
            t.update(norm_tensors(cfg, b + name))
        if m["type"] in ("gau", "flash"):   # README: GAU's rows Q, K and T = max_length; FLASH's 4 rows and C
            E, s = m["expansion_dim"], m["qk_dim"]
            rows, C = (2, m["max_length"]) if m["type"] == "gau" else (4, m["chunk"])
            mix = [("mixer.u_proj", (E, d)), ("mixer.v_proj", (E, d)), ("mixer.z_proj", (s, d)), ("mixer.out", (d, E))]
            t.update({b + "mixer.qk_gamma": (rows, s), b + "mixer.qk_beta": (rows, s),
                      b + "mixer.rel_bias": (C if m.get("causal", True) else 2 * C - 1,)})
        elif m["type"] == "reformer":   # README: shared QK (no key), the hash rotations
            mix = [("mixer.query", (qk, d)), ("mixer.value", (vv, d)), ("mixer.out", (d, vv))]
            t[b + "mixer.rotations"] = (m["rounds"], m["dk"], m["n_buckets"] // 2) \
                if m.get("form", "paper") == "paper" else (m["heads"], m["dk"], m["rounds"], m["n_buckets"] // 2)
        elif m["type"] == "rwkv7":      # README "RWKV-7": weights without biases, the low-rank paths
            A, first = m["heads"] * m["head_size"], all(e["type"] != "rwkv7" for e in mixer_configs(cfg)[:i])
            mix = []
            t.update({b + "mixer.token_mix": (6, d), b + "mixer.out.weight": (d, A)})
            t.update({b + f"mixer.{p}.weight": (A, d) for p in ("receptance", "key", "value")})
            for path, key, bias in (("decay", "decay_rank", True), ("rate", "rate_rank", True),
                                    ("value", "value_rank", True), ("gate", "gate_rank", False)):
                if path == "value" and first:
                    continue
                t.update({b + f"mixer.{path}_down.weight": (m[key], d), b + f"mixer.{path}_up.weight": (A, m[key])})
                if bias:
                    t[b + f"mixer.{path}_up.bias"] = (A,)
            t.update({b + f"mixer.{p}": (A,) for p in ("key_norm", "key_rate", "bonus", "group_norm.weight",
                                                          "group_norm.bias")})
        elif m["type"] == "mamba2":     # README "Mamba2": the fused in_proj, the convolution, per-head vectors
            I = m["heads"] * m["head_dim"]
            W = I + 2 * m.get("groups", 1) * m["state_size"]
            bias = m.get("bias", False)
            mix = []
            t[b + "mixer.in_proj.weight"] = (I + W + m["heads"], d)
            t.update({b + "mixer.conv.weight": (W, m.get("conv_kernel", 4)), b + "mixer.conv.bias": (W,)})
            t.update({b + f"mixer.{p}": (m["heads"],) for p in ("dt_bias", "A", "D")})
            t.update({b + "mixer.norm.weight": (I,), b + "mixer.out_proj.weight": (d, I)})
            if bias:
                t.update({b + "mixer.in_proj.bias": (I + W + m["heads"],), b + "mixer.out_proj.bias": (d,)})
        elif m["type"] in ("gated_deltanet", "gla"):   # README: weights without biases but gate_up's
            mix = []
            H, dk_, dv_, K = m["heads"], m["head_k_dim"], m["head_v_dim"], m.get("conv_size", 4 if m["type"] ==
                                                                                  "gated_deltanet" else 0)
            if m["type"] == "gated_deltanet":
                HV = m.get("v_heads", H)
                Q, C, U, O = H * dk_, H * dk_, HV * dv_, HV * dv_
                t.update({b + "mixer.decay.weight": (HV, d), b + "mixer.beta.weight": (HV, d),
                          b + "mixer.a_log": (HV,), b + "mixer.dt_bias": (HV,)})
            else:
                KV, R = m.get("kv_heads", H), m.get("gate_rank", 16)
                Q, C, U, O = H * dk_, KV * dk_, KV * dv_, H * dv_
                t.update({b + "mixer.gate_down.weight": (R, d), b + "mixer.gate_up.weight": (C, R),
                          b + "mixer.gate_up.bias": (C,)})
            t.update({b + "mixer.query.weight": (Q, d), b + "mixer.key.weight": (C, d),
                      b + "mixer.value.weight": (U, d), b + "mixer.out.weight": (d, O),
                      b + "mixer.norm_weight": (dv_,)})
            if m.get("gate", True):
                t[b + "mixer.gate.weight"] = (O, d)
            if K:
                t.update({b + "mixer.query_conv": (Q, K), b + "mixer.key_conv": (C, K),
                          b + "mixer.value_conv": (U, K)})
        elif m["type"] == "retnet":     # README: the gate beside query, key, value and out; no decay tensor
            mix = [("mixer.query", (qk, d)), ("mixer.key", (qk, d)), ("mixer.value", (vv, d)),
                   ("mixer.gate", (vv, d)), ("mixer.out", (d, vv))]
        elif m.get("global_projections"):   # README: Longformer's global query, key and value
            mix = [("mixer.query", (qk, d)), ("mixer.key", (qk, d)), ("mixer.value", (vv, d)), ("mixer.out", (d, vv)),
                   ("mixer.query_global", (qk, d)), ("mixer.key_global", (qk, d)),
                   ("mixer.value_global", (vv, d))]
        else:
            mix = [("mixer.query", (qk, d)), ("mixer.key", (qk, d)), ("mixer.value", (vv, d)), ("mixer.out", (d, vv))]
        glu = 2 if cfg["ffn"] and cfg["ffn"].get("glu") else 1   # README "GLU feed-forward": linear1 [2·d_ff, d]
        for name, (o, n) in mix + ([("ffn.linear1", (glu * ffn, d)), ("ffn.linear2", (d, ffn))] if ffn else []):
            t.update({b + name + ".weight": (o, n), b + name + ".bias": (o,)})
        if ffn and cfg["ffn"].get("token_mix"):   # README "FFN token mix"
            t[b + "ffn.token_mix"] = (d,)
        if m["type"] in ("aft_local", "aft_conv"):   # README: the window bias
            nb = m["window"] if m.get("causal", True) else 2 * m["window"] - 1
            t[b + ("mixer.pos_bias" if m["type"] == "aft_local" else "mixer.conv_kernel")] = \
                (nb,) if m["type"] == "aft_local" else (m["heads"], nb)
        if m["type"] == "aft_full":   # README: the pairwise bias, full or w = u vᵀ
            T, r = m["max_length"], m.get("bias_rank")
            t.update({b + "mixer.pos_bias": (T, T)} if r is None else {b + "mixer.u": (T, r), b + "mixer.v": (T, r)})
        if m["type"] == "linformer":   # README: E/F per sharing (layerwise: a copy per block)
            kn = (m["proj_dim"], m["seq_len"])
            sharing = m.get("sharing", "none")
            t[b + "mixer.E"] = (m["heads"], *kn) if sharing == "none" else kn
            if sharing in ("none", "headwise"):
                t[b + "mixer.F"] = t[b + "mixer.E"]
        if m.get("feature_map") in ("favor", "favor_stabilized", "generalized_relu"):
            mm = m["n_features"]
            t[b + "mixer.feature_map.omega"] = (m["dk"], mm if m.get("favor_layout", "performer") == "performer"
                                                else mm // 2)
        if m.get("feature_map") in ("random_fourier", "smoothed_random_fourier"):   # README: ω [dk, m//2]
            t[b + "mixer.feature_map.omega"] = (m["dk"], m["n_features"] // 2)
        r = m.get("rotary", {})   # README "Rotary position embeddings": stored angles
        if r.get("theta") == "stored":
            t[b + "mixer.rotary.theta"] = (r["dims"] // 2,)
        if "table" in r:
            t[b + "mixer.rotary.table"] = (r["table"], r["dims"])
    stream = 2 * d if cfg.get("residual") == "reversible_concat" else d   # what the final norm and head take
    if cfg["final_norm"]:
        t.update(norm_tensors(cfg, "final_norm", stream))
    if cfg["head"]:
        t.update({"head.weight": (cfg["head"]["out"], stream), "head.bias": (cfg["head"]["out"],)})
    return t


def expected_ft_keys(ft):
    """The fast-transformers key set, as README's "fast-transformers layout" lists it."""
    keys = set()
    for i in range(ft["n_layers"]):
        for p in ("weight", "bias"):
            keys |= {f"layers.{i}.attention.{n}_projection.{p}" for n in ("query", "key", "value", "out")}
            keys |= {f"layers.{i}.{n}.{p}" for n in ("linear1", "linear2", "norm1", "norm2")}
        if "feature_map" in ft:
            keys.add(f"layers.{i}.attention.inner_attention.feature_map.omega")
        if ft.get("attention_type") == "aft-full":
            keys |= {f"layers.{i}.attention.inner_attention.{n}" for n in ("u", "v")}
    if ft.get("final_normalization", True):
        keys |= {"norm.weight", "norm.bias"}
    return keys


def naive_forward(cfg, w, x):
    """The README math transcribed directly, independent of recur_ref.model:
    functional ops on the named tensors `w`, and attention as the explicit
    quadratic sum V'_i = Σ_{j≤i} sim_ij v_j / (Σ_{j≤i} sim_ij + eps). A mixed model
    ("mixer" a list): block i uses entry i (m, heads, dk, dv are rebound per block below;
    the nested functions read them when called)."""
    d, n = cfg["d_model"], len(x)

    def lin(h, name):
        return F.linear(h, w[name + ".weight"], w.get(name + ".bias"))

    def norm(h, name):   # README "Norms": the config's kind, eps = layer_norm_eps, over h's width
        kind, eps, d = cfg.get("norm", {"type": "layer_norm"}), cfg["layer_norm_eps"], h.shape[-1]
        if kind["type"] == "rms_norm":
            return h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps) * w[name + ".weight"]
        if kind["type"] == "scale_norm":
            c = 1.0 if kind["scale"] == "l2" else 1 / math.sqrt(d)
            length = torch.sqrt((h * h).sum(-1, keepdim=True)) * c
            return w[name + ".weight"] * h / torch.where(length > eps, length, torch.full_like(length, eps))
        return F.layer_norm(h, (d,), w[name + ".weight"], w[name + ".bias"], eps)

    def phi(t, b, keys=False):  # (n, H, dk) → (n, H, C), each feature map written out from the README
        fm = m["feature_map"]
        if fm == "elu_plus_one":
            return torch.where(t > 0, t + 1, torch.exp(t))
        if fm == "relu":
            return t.clamp(min=0)
        if fm == "poly2":
            return torch.stack([t[..., a] * t[..., c] for a in range(dk) for c in range(dk)], -1)
        omega, mm = w[b + "mixer.feature_map.omega"], m["n_features"]
        xt = t * math.sqrt(m.get("softmax_temp", 1 / math.sqrt(dk)))
        half = (xt * xt).sum(-1, keepdim=True) / 2
        u = torch.einsum("nhd,dj->nhj", xt, omega)
        if fm == "generalized_relu":
            return u.clamp(min=0) + m.get("feature_eps", 1e-3)
        if fm in ("random_fourier", "smoothed_random_fourier"):   # README: [cos u, sin u]·√(2/m) (, s)
            feats = [torch.cos(u) * math.sqrt(2 / mm), torch.sin(u) * math.sqrt(2 / mm)]
            if fm == "smoothed_random_fourier":
                feats.append(torch.full_like(u[..., :1], m.get("smoothing", 1.0)))
            return torch.cat(feats, -1)
        if fm == "favor_stabilized":   # README: a query's own max over j; the keys' max over all n and j, per head
            top = u.amax(dim=(0, 2), keepdim=True) if keys else u.amax(dim=-1, keepdim=True)
            return (torch.exp(u - half - top) + m.get("feature_eps", 1e-4)) / math.sqrt(mm)
        if m.get("favor_layout", "performer") == "performer":
            return torch.exp(u - half) / math.sqrt(mm)
        off = half + 0.5 * math.log(mm)
        return torch.cat([torch.exp(u - off), torch.exp(-u - off)], -1)

    def rope(t, blk):  # (n, [H,] width) rows at positions 0..n−1 of block prefix blk → turned per the
        r = m.get("rotary")   # README's rotary, pair by pair: θ from the base or stored, or a stored table
        if r is None:
            return t
        dims, base, out = r["dims"], r.get("base", 10000), t.clone()
        for i in range(dims // 2):
            a, b = (2 * i, 2 * i + 1) if r["pairs"] == "interleaved" else (i, i + dims // 2)
            theta = float(w[blk + "mixer.rotary.theta"][i]) if r.get("theta") == "stored" else base ** (-2 * i / dims)
            ang = torch.arange(n, dtype=torch.float64) * theta
            c, s = (f(ang) for f in (torch.cos, torch.sin))
            if "table" in r:   # row t = [sin | cos]
                s, c = w[blk + "mixer.rotary.table"][:n, i], w[blk + "mixer.rotary.table"][:n, dims // 2 + i]
            c, s = (v.to(t.dtype).view(n, *([1] * (t.dim() - 2))) for v in (c, s))
            out[..., a] = t[..., a] * c - t[..., b] * s
            out[..., b] = t[..., b] * c + t[..., a] * s
        return out

    def act(t):
        if cfg["ffn"]["activation"] == "relu":
            return t.clamp(min=0)
        if cfg["ffn"]["activation"] == "relu_squared":
            return t.clamp(min=0) ** 2
        if cfg["ffn"]["activation"] == "silu":
            return t / (1 + torch.exp(-t))
        return 0.5 * t * (1 + torch.erf(t / math.sqrt(2)))

    def ffn_of(h, b):   # linear2(act(linear1(h))); GLU: the first d_ff columns gated by the second
        if cfg["ffn"].get("token_mix"):   # README: h + (h₋₁ − h) ⊙ token_mix, zeros before position 0
            mu = w[b + "ffn.token_mix"]
            h = torch.stack([h[t] + ((h[t - 1] if t else 0.0 * h[0]) - h[t]) * mu for t in range(n)])
        u = lin(h, b + "ffn.linear1")
        if cfg["ffn"].get("glu"):
            d_ff = cfg["ffn"]["d_ff"]
            return lin(act(u[:, :d_ff]) * u[:, d_ff:], b + "ffn.linear2")
        return lin(act(u), b + "ffn.linear2")

    def softmax_mixer(h, b):  # the full (n, n) score matrix per head, masked, softmax over j
        q = rope(lin(h, b + "mixer.query").view(n, heads, dk), b)
        k = rope(lin(h, b + "mixer.key").view(n, heads, dk), b)
        v = lin(h, b + "mixer.value").view(n, heads, dv)
        s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(dk)                  # (H, n, n)
        if m.get("causal", True):
            s = s + torch.full((n, n), -math.inf, dtype=h.dtype).triu(1)       # j > i: -inf
        e = torch.exp(s - s.max(-1, keepdim=True).values)
        o = torch.einsum("hij,jhm->ihm", e / e.sum(-1, keepdim=True), v)        # (n, H, dv)
        return lin(o.reshape(n, heads * dv), b + "mixer.out")

    def sliding_mixer(h, b):
        q = rope(lin(h, b + "mixer.query").view(n, heads, dk), b)
        k = rope(lin(h, b + "mixer.key").view(n, heads, dk), b)
        v = lin(h, b + "mixer.value").view(n, heads, dv)
        o = naive_sliding(m, q, k, v)
        if m.get("global_projections"):   # README: global query t < g over every position, own projections
            qg = lin(h, b + "mixer.query_global").view(n, heads, dk)
            kg = lin(h, b + "mixer.key_global").view(n, heads, dk)
            vg = lin(h, b + "mixer.value_global").view(n, heads, dv)
            for t in range(min(m["global_tokens"], n)):
                for hh in range(heads):
                    s = kg[:, hh] @ qg[t, hh] / math.sqrt(dk)
                    e = torch.exp(s - s.max())
                    o[t, hh] = (e / e.sum()) @ vg[:, hh]
        return lin(o.reshape(n, heads * dv), b + "mixer.out")

    def aft_mixer(h, b):
        q, k, v = (lin(h, b + f"mixer.{name}") for name in ("query", "key", "value"))
        return lin(naive_aft(q, k, v, m.get("causal", True)), b + "mixer.out")

    def aft_local_mixer(h, b):
        q, k, v = (lin(h, b + f"mixer.{name}") for name in ("query", "key", "value"))
        W = w[b + "mixer.pos_bias"] if m["type"] == "aft_local" else w[b + "mixer.conv_kernel"]
        return lin(naive_aft_local(m, W, q, k, v), b + "mixer.out")

    def aft_full_mixer(h, b):
        q, k, v = (lin(h, b + f"mixer.{name}") for name in ("query", "key", "value"))
        W = w[b + "mixer.pos_bias"] if m.get("bias_rank") is None else w[b + "mixer.u"] @ w[b + "mixer.v"].t()
        return lin(naive_aft_full(m, W, q, k, v), b + "mixer.out")

    def gau_mixer(h, b):
        u, v, z = (F.silu(lin(h, b + f"mixer.{name}_proj")) for name in ("u", "v", "z"))
        g, be = w[b + "mixer.qk_gamma"], w[b + "mixer.qk_beta"]
        q, k = (g[r] * z + be[r] for r in range(2))
        return lin(u * naive_gau(m, q, k, v, w[b + "mixer.rel_bias"]), b + "mixer.out")

    def flash_mixer(h, b):
        u, v, z = (F.silu(lin(h, b + f"mixer.{name}_proj")) for name in ("u", "v", "z"))
        g, be = w[b + "mixer.qk_gamma"], w[b + "mixer.qk_beta"]
        qq, kq, ql, kl = (rope(g[r] * z + be[r], b) for r in range(4))
        return lin(u * naive_flash(m, qq, kq, ql, kl, v, w[b + "mixer.rel_bias"]), b + "mixer.out")

    def linformer_mixer(h, b):   # explicit sums over the first n columns of E, F per head
        q = lin(h, b + "mixer.query").view(n, heads, dk)
        k = lin(h, b + "mixer.key").view(n, heads, dk)
        v = lin(h, b + "mixer.value").view(n, heads, dv)
        return lin(naive_linformer(m, w[b + "mixer.E"], w.get(b + "mixer.F"), q, k, v).reshape(n, heads * dv),
                   b + "mixer.out")

    def reformer_mixer(h, b):   # explicit loops over rounds, heads, sorted chunks and candidates
        q = lin(h, b + "mixer.query").view(n, heads, dk)
        v = lin(h, b + "mixer.value").view(n, heads, dv)
        attend = naive_reformer if m.get("form", "paper") == "paper" else naive_reformer_transformers
        return lin(attend(m, w[b + "mixer.rotations"], q, v).reshape(n, heads * dv), b + "mixer.out")

    def block_local_mixer(h, b):   # README: per query, its key slots (padding, cyclic chunks), −1e9 masks
        q = lin(h, b + "mixer.query").view(n, heads, dk)
        k = lin(h, b + "mixer.key").view(n, heads, dk)
        v = lin(h, b + "mixer.value").view(n, heads, dv)
        return lin(naive_block_local(m, q, k, v).reshape(n, heads * dv), b + "mixer.out")

    def retnet_mixer(h, b):   # explicit decayed sums over the rotated q·k, then the RMS norm and the gate
        q = lin(h, b + "mixer.query").view(n, heads, dk)
        k = lin(h, b + "mixer.key").view(n, heads, dk) / math.sqrt(dk)
        v = lin(h, b + "mixer.value").view(n, heads, dv)
        o = naive_retnet(m, q, k, v)
        o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + m.get("eps", 1e-6))
        return lin(F.silu(lin(h, b + "mixer.gate")) * o.reshape(n, heads * dv), b + "mixer.out")

    def linear_mixer(h, b):
        q = phi(rope(lin(h, b + "mixer.query").view(n, heads, dk), b), b)
        k = phi(rope(lin(h, b + "mixer.key").view(n, heads, dk), b), b, keys=True)
        v = lin(h, b + "mixer.value").view(n, heads, dv)
        o = torch.zeros(n, heads, dv, dtype=h.dtype)
        for i in range(n):
            seen = n if not m.get("causal", True) else i + 1                    # encoder: all
            sim = (q[i] * k[:seen]).sum(-1)                                     # (seen, H)
            eps = m["eps"] * q[i].sum(-1) if m.get("eps_per_feature") else m["eps"]   # README: φ(q)·(z + eps)
            o[i] = (sim[:, :, None] * v[:seen]).sum(0) / (sim.sum(0) + eps)[:, None]
        return lin(o.reshape(n, heads * dv), b + "mixer.out")

    shared = {}   # RWKV-7: the first block's v, for the later blocks' value residual

    def rwkv7_mixer(h, b):   # README "RWKV-7": position by position, head by head, from the named tensors
        H, N = m["heads"], m["head_size"]
        scale = float(torch.tensor(m.get("decay_scale", 0.606531), dtype=torch.float32))
        eps = float(torch.tensor(m.get("group_norm_eps", 64e-5), dtype=torch.float32))
        mw = lambda name, t, bias=True: F.linear(t, w[b + "mixer." + name + ".weight"],  # noqa: E731
                                                 w.get(b + "mixer." + name + ".bias") if bias else None)
        S = torch.zeros(H, N, N, dtype=h.dtype)
        outs, vs = [], []
        for t in range(n):
            prev = h[t - 1] if t else torch.zeros_like(h[0])
            xr, xw, xk, xv, xa, xg = (h[t] + (prev - h[t]) * w[b + "mixer.token_mix"][c] for c in range(6))
            r, k, v = mw("receptance", xr), mw("key", xk), mw("value", xv)
            dec = torch.exp(-scale / (1 + torch.exp(-mw("decay_up", torch.tanh(mw("decay_down", xw))))))
            a = 1 / (1 + torch.exp(-mw("rate_up", mw("rate_down", xa))))
            g = mw("gate_up", 1 / (1 + torch.exp(-mw("gate_down", xg))))
            if b + "mixer.value_up.weight" in w:
                nu = 1 / (1 + torch.exp(-mw("value_up", mw("value_down", xv))))
                v = v + (shared["v"][t] - v) * nu
            vs.append(v)
            y = torch.zeros(H * N, dtype=h.dtype)
            for hh in range(H):
                sl = slice(hh * N, (hh + 1) * N)
                kk = k[sl] * w[b + "mixer.key_norm"][sl]
                kk = kk / max(float(torch.sqrt((kk * kk).sum())), 1e-12)
                kh = k[sl] * (1 + (a[sl] - 1) * w[b + "mixer.key_rate"][sl])
                Sa = S[hh] @ (-kk)
                # S[i, j] = S[i, j]·w[j] + Sa[i]·kk[j]·a[j] + v[i]·kh[j], every (i, j) at once
                S[hh] = S[hh] * dec[sl][None, :] + Sa[:, None] * kk[None, :] * a[sl][None, :] + \
                    v[sl][:, None] * kh[None, :]
                o = S[hh] @ r[sl]
                mean, var = o.mean(), ((o - o.mean()) ** 2).mean()
                o = (o - mean) / torch.sqrt(var + eps) * w[b + "mixer.group_norm.weight"][sl] + \
                    w[b + "mixer.group_norm.bias"][sl]
                y[sl] = o + (r[sl] * kh * w[b + "mixer.bonus"][sl]).sum() * v[sl]
            outs.append(mw("out", y * g))
        if b + "mixer.value_up.weight" not in w:
            shared["v"] = vs
        return torch.stack(outs)

    def mamba2_mixer(h, b):   # README "Mamba2": position by position, head by head, from the named tensors
        H, P, N, G, K = m["heads"], m["head_dim"], m["state_size"], m.get("groups", 1), m.get("conv_kernel", 4)
        I, W = H * P, H * P + 2 * m.get("groups", 1) * m["state_size"]
        f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
        eps, lo, hi = f32(m.get("norm_eps", 1e-5)), f32(m.get("dt_min", 0.0)), f32(m.get("dt_max", math.inf))
        mw = lambda name, t: F.linear(t, w[b + "mixer." + name + ".weight"], w.get(b + "mixer." + name + ".bias"))  # noqa: E731
        cw, cb = w[b + "mixer.conv.weight"], w[b + "mixer.conv.bias"]
        S = torch.zeros(H, P, N, dtype=h.dtype)
        proj = mw("in_proj", h)
        outs = []
        for t in range(n):
            u = sum(cw[:, k] * proj[t - K + 1 + k, I:I + W] for k in range(K) if t - K + 1 + k >= 0) + cb
            u = u * torch.sigmoid(u)
            xs, B, C = u[:I], u[I:I + G * N], u[I + G * N:]
            y = torch.zeros(I, dtype=h.dtype)
            for hh in range(H):
                g, sl = hh // (H // G), slice(hh * P, (hh + 1) * P)
                delta = min(max(float(F.softplus(proj[t, I + W + hh] + w[b + "mixer.dt_bias"][hh])), lo), hi)
                S[hh] = math.exp(delta * float(w[b + "mixer.A"][hh])) * S[hh] + \
                    delta * torch.outer(xs[sl], B[g * N:(g + 1) * N])
                y[sl] = S[hh] @ C[g * N:(g + 1) * N] + w[b + "mixer.D"][hh] * xs[sl]
            y = (y * F.silu(proj[t, :I])).view(G, I // G)
            y = (y / torch.sqrt((y * y).mean(-1, keepdim=True) + eps)).reshape(I) * w[b + "mixer.norm.weight"]
            outs.append(mw("out_proj", y))
        return torch.stack(outs)

    def conv_silu(u, b, name, K):   # README: column K−1 the current position's, zeros before 0
        if K == 0:
            return u
        wc, out = w[b + "mixer." + name], torch.zeros_like(u)
        for t in range(n):
            for j in range(K):
                if t - (K - 1) + j >= 0:
                    out[t] += wc[:, j] * u[t - (K - 1) + j]
        return out / (1 + torch.exp(-out))

    def gated_norm(o, g, b, eps):   # o (dv,) / √(mean(o²) + eps) ⊙ norm_weight, times silu(g)
        o = o / math.sqrt(float((o * o).mean()) + eps) * w[b + "mixer.norm_weight"]
        return o if g is None else o * g / (1 + torch.exp(-g))

    def gated_deltanet_mixer(h, b):   # README "Gated DeltaNet": S (dk, dv) as the paper writes it
        H, HV, dk_, dv_ = m["heads"], m.get("v_heads", m["heads"]), m["head_k_dim"], m["head_v_dim"]
        K, f32 = m.get("conv_size", 4), lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
        eps, bs = f32(m.get("norm_eps", 1e-5)), f32(m.get("beta_scale", 1.0))
        silu = lambda u: u / (1 + torch.exp(-u))  # noqa: E731
        q, k, v = (lin(h, b + "mixer." + p) for p in ("query", "key", "value"))
        if K:
            q, k, v = (conv_silu(u, b, p + "_conv", K) for u, p in ((q, "query"), (k, "key"), (v, "value")))
        else:
            q, k, v = silu(q), silu(k), silu(v)
        beta, a = lin(h, b + "mixer.beta"), lin(h, b + "mixer.decay")
        g = lin(h, b + "mixer.gate") if b + "mixer.gate.weight" in w else None
        S = torch.zeros(HV, dk_, dv_, dtype=h.dtype)
        outs = []
        for t in range(n):
            y = torch.zeros(HV * dv_, dtype=h.dtype)
            for j in range(HV):
                kh = j * H // HV
                qj, kj = q[t, kh * dk_:(kh + 1) * dk_], k[t, kh * dk_:(kh + 1) * dk_]
                qj = qj / math.sqrt(float((qj * qj).sum()) + 1e-6) / math.sqrt(dk_)
                kj = kj / math.sqrt(float((kj * kj).sum()) + 1e-6)
                vj = v[t, j * dv_:(j + 1) * dv_]
                z = float(a[t, j] + w[b + "mixer.dt_bias"][j])
                gg = -math.exp(float(w[b + "mixer.a_log"][j])) * (z if z > 20 else math.log1p(math.exp(z)))
                bj = bs / (1 + math.exp(-float(beta[t, j])))
                S[j] = S[j] * math.exp(gg)
                S[j] = S[j] + torch.outer(kj, bj * (vj - S[j].T @ kj))
                y[j * dv_:(j + 1) * dv_] = gated_norm(S[j].T @ qj, None if g is None else g[t, j * dv_:(j + 1) * dv_],
                                                      b, eps)
            outs.append(y)
        return lin(torch.stack(outs), b + "mixer.out")

    def gla_mixer(h, b):   # README "GLA": S (dk, dv) per query head, as fla's naive recurrence keeps it
        H, KV, dk_, dv_ = m["heads"], m.get("kv_heads", m["heads"]), m["head_k_dim"], m["head_v_dim"]
        K, f32 = m.get("conv_size", 0), lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
        eps, norm = f32(m.get("norm_eps", 1e-5)), f32(m.get("gate_logit_normalizer", 16))
        q, k, v = (conv_silu(lin(h, b + "mixer." + p), b, p + "_conv", K) for p in ("query", "key", "value"))
        gk = lin(lin(h, b + "mixer.gate_down"), b + "mixer.gate_up")
        alpha = -torch.log1p(torch.exp(-gk)) / norm      # logsigmoid
        if "clamp_min" in m:
            alpha = alpha.clamp(min=f32(m["clamp_min"]))
        g = lin(h, b + "mixer.gate") if b + "mixer.gate.weight" in w else None
        S = torch.zeros(H, dk_, dv_, dtype=h.dtype)
        outs = []
        for t in range(n):
            y = torch.zeros(H * dv_, dtype=h.dtype)
            for hh in range(H):
                e = hh * KV // H
                ks, vs = slice(e * dk_, (e + 1) * dk_), slice(e * dv_, (e + 1) * dv_)
                S[hh] = S[hh] * torch.exp(alpha[t, ks])[:, None] + torch.outer(k[t, ks], v[t, vs])
                o = S[hh].T @ (q[t, hh * dk_:(hh + 1) * dk_] / math.sqrt(dk_))
                y[hh * dv_:(hh + 1) * dv_] = gated_norm(o, None if g is None else g[t, hh * dv_:(hh + 1) * dv_],
                                                        b, eps)
            outs.append(y)
        return lin(torch.stack(outs), b + "mixer.out")

    per_type = {"gated_deltanet": gated_deltanet_mixer, "gla": gla_mixer, "rwkv7": rwkv7_mixer, "mamba2": mamba2_mixer, "block_local": block_local_mixer, "retnet": retnet_mixer, "linformer": linformer_mixer, "reformer": reformer_mixer, "gau": gau_mixer,
                "flash": flash_mixer, "softmax_attention": softmax_mixer, "sliding_window": sliding_mixer,
                "aft_simple": aft_mixer, "aft_local": aft_local_mixer, "aft_conv": aft_local_mixer,
                "aft_full": aft_full_mixer, "linear_attention": linear_mixer}

    def mixer(h, b):
        return per_type[m["type"]](h, b)

    def shift(h):  # the README's token shift over positions 0..n−1: zeros past either end
        ts = cfg.get("token_shift")
        if ts is None:
            return h
        out, o = h.clone(), 0
        for width, by in ts["segments"]:
            for t in range(n):
                src = t - by
                out[t, o:o + width] = h[src, o:o + width] if 0 <= src < n else 0.0
            o += width
        return out

    def shift_ffn(h):
        return shift(h) if cfg.get("token_shift", {}).get("ffn", False) else h

    inp = cfg["input"]
    if inp["kind"] == "tokens":
        h = w["input.embedding"][x.long()]
    else:
        x = x.double()
        h = lin(x, "input.projection") if inp["projection"] else x
    if cfg["max_positions"] > 0:
        h = h + w["input.positions"][:n]
    if "positions" in cfg:   # README "Sinusoidal positions", element by element with math.sin/cos
        base, half = cfg["positions"].get("base", 10000), d // 2
        f = [float(w["input.position_freq"][i]) if cfg["positions"].get("freq") == "stored"
             else base ** (-2 * i / d) for i in range(half)]
        pe = torch.tensor([[math.sin(t * f[i]) for i in range(half)] +
                           [math.cos(t * f[i]) for i in range(half)] for t in range(n)],
                          dtype=torch.float64)
        h = h + pe * w.get("input.position_scale", 1.0)
    if inp.get("norm"):   # always a layer norm, whatever the blocks' kind
        h = F.layer_norm(h, (d,), w["input.norm.weight"], w["input.norm.bias"], cfg["layer_norm_eps"])
    x2 = h   # README "Reversible residual": the second stream
    for i, m in enumerate(mixer_configs(cfg)):
        heads, dk, dv = m.get("heads"), m.get("dk"), m.get("dv")
        b = f"blocks.{i}."
        if cfg.get("residual", "").startswith("reversible"):   # y1 = x1 + Mixer(norm1(x2)); y2 = x2 + FFN(norm2(y1))
            h = h + mixer(shift(norm(x2, b + "norm1")), b)
            x2 = x2 + ffn_of(shift_ffn(norm(h, b + "norm2")), b)
        elif cfg["norm_placement"] == "pre":
            h = h + mixer(shift(norm(h, b + "norm1")), b)
            if cfg["ffn"]:   # null: the block ends here
                h = h + ffn_of(shift_ffn(norm(h, b + "norm2")), b)
        else:
            h = norm(h + mixer(h, b), b + "norm1")
            if cfg["ffn"]:
                h = norm(h + ffn_of(h, b), b + "norm2")
    if cfg.get("residual") == "reversible":
        h = h + x2
    elif cfg.get("residual") == "reversible_concat":
        h = torch.cat([h, x2], -1)
    if cfg["final_norm"]:
        h = norm(h, "final_norm")
    if cfg["head"]:
        h = lin(h, "head")
        e = torch.exp(h - h.max(-1, keepdim=True).values)
        if cfg["head"]["activation"] == "softmax":
            h = e / e.sum(-1, keepdim=True)
        elif cfg["head"]["activation"] == "log_softmax":
            h = h - h.max(-1, keepdim=True).values - torch.log(e.sum(-1, keepdim=True))
    return h


def naive_block_local(m, q, k, v):
    """Block-local attention as the README writes it: q, k (T, H, dk), v (T, H, dv) → (T, H, dv).
    n = T padded to a multiple of pad_multiple when T > pad_above; n ≤ chunk: every slot, else the
    slots of chunks (i//c + o) mod (n/c), o = −chunks_before..chunks_after, repeats kept; pads and
    (causal) later keys score −1e9."""
    T, H, dk = q.shape
    c, bef, aft = m["chunk"], m.get("chunks_before", 1), m.get("chunks_after", 0)
    pm, pa = m.get("pad_multiple", c), m.get("pad_above", c)
    n = (T + pm - 1) // pm * pm if T > pa else T
    o = torch.zeros(T, H, v.shape[-1], dtype=q.dtype)
    for i in range(T):
        slots = list(range(n)) if n <= c else \
            [((i // c + off) % (n // c)) * c + r for off in range(-bef, aft + 1) for r in range(c)]
        j = torch.tensor(slots)
        real = j < T
        jj = torch.where(real, j, torch.zeros_like(j))
        s = (k[jj] * q[i]).sum(-1) / math.sqrt(dk)                             # (slots, H)
        masked = ~real | ((j > i) if m.get("causal", True) else torch.zeros_like(real))
        s = torch.where(masked[:, None], torch.full_like(s, -1e9), s)
        e = torch.exp(s - s.max(0).values)
        p = e / e.sum(0)
        o[i] = (p[real][:, :, None] * v[j[real]]).sum(0)
    return o


def sliding_sets(m, n):
    """The allowed key positions of every (head, query) of a sliding_window mixer config
    over positions 0..n−1, written out from the README with Python sets."""
    w, g, heads = m["window"], m.get("global_tokens", 0), m["heads"]
    dil = m.get("dilation", 1)
    dil = dil if isinstance(dil, list) else [dil] * heads
    sets = {}
    for h in range(heads):
        d = dil[h]
        for t in range(n):
            if m.get("causal", True):
                a = {t - j * d for j in range(w) if t - j * d >= 0} | {p for p in range(g) if p <= t}
            else:
                a = {t + j * d for j in range(-(w // 2), w // 2 + 1) if 0 <= t + j * d < n} | set(range(min(g, n)))
                if t < g:
                    a |= set(range(n))
            sets[h, t] = sorted(a)
    return sets


def naive_sliding(m, q, k, v):
    """q, k (n, H, dk), v (n, H, dv) at positions 0..n−1 → o (n, H, dv): per (head, query)
    an explicit softmax over the allowed set (sliding_sets)."""
    n, heads, dk = q.shape
    o = torch.zeros(n, heads, v.shape[-1], dtype=q.dtype)
    for (h, t), a in sliding_sets(m, n).items():
        s = k[a, h] @ q[t, h] / math.sqrt(dk)
        e = torch.exp(s - s.max())
        o[t, h] = (e / e.sum()) @ v[a, h]
    return o


def naive_flash(m, qq, kq, ql, kl, v, rel_bias):
    """FLASH's quad + lin (n, E) at positions 0..n−1 as explicit sums over positions (the
    README's formulas): groups g = t // C; causal: quad over p ≤ t in t's group with
    rel_bias[t − p], lin = scale·Q^lin_t·Σ_{p in earlier groups} K^lin_p V_pᵀ; non-causal:
    quad over t's whole group with rel_bias[t − p + C − 1], lin = Q^lin_t·Σ_all K^lin_p V_pᵀ / n."""
    n, C = len(v), m["chunk"]
    scale, causal = m.get("scale", 1.0 / C), m.get("causal", True)
    o = torch.zeros_like(v)
    for t in range(n):
        g = t // C
        for p in range(g * C, min(n, (g + 1) * C) if not causal else t + 1):
            bias = rel_bias[t - p] if causal else rel_bias[t - p + C - 1]
            o[t] += torch.relu(scale * (qq[t] @ kq[p]) + bias) ** 2 * v[p]
        seen = range(g * C) if causal else range(n)
        for p in seen:
            o[t] += (scale if causal else 1.0 / n) * (ql[t] @ kl[p]) * v[p]
    return o


def naive_gau(m, q, k, v, rel_bias):
    """GAU's Σ_p A_{t,p} V_p (n, E) at positions 0..n−1 as explicit sums (the README's
    formula): A_{t,p} = relu(scale·Q_t·K_p + rel_bias[t − p])² over p ≤ t (causal) or
    relu(scale·Q_t·K_p + rel_bias[t − p + T − 1])² over all p; scale defaults to 1/T.
    length_scale: the relu's argument divided by n (the sequence's length)."""
    T = m["max_length"]
    scale, causal = m.get("scale", 1.0 / T), m.get("causal", True)
    div = len(v) if m.get("length_scale", False) else 1
    o = torch.zeros_like(v)
    for t in range(len(v)):
        for p in range(t + 1 if causal else len(v)):
            bias = rel_bias[t - p] if causal else rel_bias[t - p + T - 1]
            o[t] += torch.relu((scale * (q[t] @ k[p]) + bias) / div) ** 2 * v[p]
    return o


def naive_linformer(m, E, Fm, q, k, v):
    """Linformer as explicit sums: q, k (n, H, dk), v (n, H, dv) → o (n, H, dv). Per head h:
    K'_r = Σ_{j<n} E_h[r, j] k_j, V'_r = Σ_{j<n} F_h[r, j] v_j (E_h = E[h] with sharing 'none',
    else E; F = E for 'kv' and 'layerwise'), o_t = Σ_r softmax_r(q_t·K'_r/√dk) V'_r."""
    n, heads, dk = q.shape
    Fm = E if Fm is None else Fm
    o = torch.zeros(n, heads, v.shape[-1], dtype=q.dtype)
    for h in range(heads):
        Eh, Fh = (P[h] if P.dim() == 3 else P for P in (E, Fm))
        K2 = sum(Eh[:, j, None] * k[j, h] for j in range(n))                  # (k, dk)
        V2 = sum(Fh[:, j, None] * v[j, h] for j in range(n))                  # (k, dv)
        for t in range(n):
            s = K2 @ q[t, h] / math.sqrt(dk)
            e = torch.exp(s - s.max())
            o[t, h] = (e / e.sum()) @ V2
    return o


def naive_reformer(m, rotations, q, v):
    """Reformer LSH attention as explicit loops (the README's formula): q (n, H, dk), v (n, H, dv)
    at positions 0..n−1, rotations (r, dk, nb/2) → o (n, H, dv). Per head h and round i: K_j =
    Q_j/‖Q_j‖, P = K_j·rotations[i], bucket_j = the first index of the largest of [P, −P];
    positions sorted by (bucket, position); the query in sorted slot s (chunk g = s // c) takes
    the positions of chunks g − 1 (if g ≥ 1) and g, minus itself unless it is alone, and
    o_j += softmax(Q_j·K_p/√dk) V_p / r."""
    n, heads, dk = q.shape
    c, r = m["chunk"], m["rounds"]
    o = torch.zeros(n, heads, v.shape[-1], dtype=q.dtype)
    for h in range(heads):
        k = [q[j, h] / math.sqrt(float(q[j, h] @ q[j, h])) for j in range(n)]
        for i in range(r):
            bucket = []
            for j in range(n):
                p = [float(k[j] @ rotations[i][:, a]) for a in range(rotations.shape[2])]
                vals = p + [-x for x in p]
                bucket.append(max(range(len(vals)), key=lambda a: (vals[a], -a)))   # ties: lowest index
            order = sorted(range(n), key=lambda j: (bucket[j], j))
            for s, j in enumerate(order):
                g = s // c
                cand = [order[t] for t in range(max(g - 1, 0) * c, min((g + 1) * c, n))]
                if len(cand) > 1:
                    cand.remove(j)
                sc = torch.stack([q[j, h] @ k[p] / math.sqrt(dk) for p in cand])
                e = torch.exp(sc - sc.max())
                o[j, h] += sum(e[a] / e.sum() * v[p, h] for a, p in enumerate(cand)) / r
    return o


def naive_reformer_transformers(m, rotations, q, v):
    """Reformer's transformers form as explicit loops (the README's formula): q (T, H, dk), v (T, H,
    dv) at positions 0..T−1, rotations (H, dk, r, nb/2) → o (T, H, dv). n = T rounded up to a
    multiple of pad_multiple when T > pad_above (slots ≥ T are pads); K_j = Q_j / sqrt(mean Q_j² +
    1e−6) / √dk; score(i, p) = Q_i·K_p, −1e9 for a pad p or (causal_mask) p > i, then −1e5 for p == i.
    n ≤ c: one softmax over the n slots. Else per round ρ: bucket of the raw Q (pads: nb), positions
    sorted by (bucket, position); the rounds' lists joined; chunk g of c slots sees chunks g + d,
    d = −b..a, modulo the chunk count (d = 0 when |d| ≥ it); per slot o, lse; y = Σ_ρ o·softmax_ρ(lse)."""
    T, heads, dk = q.shape
    c, r, nb = m["chunk"], m["rounds"], m["n_buckets"]
    cb, ca, causal = m.get("chunks_before", 1), m.get("chunks_after", 0), m.get("causal_mask", False)
    pm, pa = m.get("pad_multiple", c), m.get("pad_above", c)
    n = T + (pm - T % pm) if T > pa and T % pm else T
    o = torch.zeros(T, heads, v.shape[-1], dtype=q.dtype)
    for h in range(heads):
        k = [q[j, h] / math.sqrt(float(q[j, h] @ q[j, h]) / dk + 1e-6) / math.sqrt(dk) for j in range(T)]

        def attend(i, keys):   # → (o, lse) of query i over the key positions `keys`
            sc = []
            for p in keys:
                s = -1e9 if p >= T or (causal and p > i) else float(q[i, h] @ k[p])
                sc.append(-1e5 if p == i else s)
            top = max(sc)
            e = [math.exp(s - top) for s in sc]
            out = sum(e[a] / sum(e) * v[p, h] for a, p in enumerate(keys) if p < T)
            if not isinstance(out, torch.Tensor):   # every key a pad: impossible (the query itself is one)
                raise AssertionError("no real key")
            return out, top + math.log(sum(e))

        if n <= c:
            for i in range(T):
                o[i, h] = attend(i, list(range(n)))[0]
            continue
        slots = []
        for rho in range(r):
            bucket = []
            for j in range(n):
                if j >= T:
                    bucket.append(nb)
                    continue
                p = [float(q[j, h] @ rotations[h, :, rho, a]) for a in range(nb // 2)]
                vals = p + [-x for x in p]
                bucket.append(max(range(nb), key=lambda a: (vals[a], -a)))   # ties: lowest index
            slots += sorted(range(n), key=lambda j: (bucket[j], j))
        G = len(slots) // c
        outs = {}
        for s, i in enumerate(slots):
            if i >= T:
                continue
            g = s // c
            keys = []
            for d in range(-cb, ca + 1):
                gg = (g + (d if abs(d) < G else 0)) % G
                keys += slots[gg * c:(gg + 1) * c]
            outs.setdefault(i, []).append(attend(i, keys))
        for i, per_round in outs.items():
            assert len(per_round) == r
            top = max(l for _, l in per_round)
            z = sum(math.exp(l - top) for _, l in per_round)
            o[i, h] = sum(oo * math.exp(l - top) / z for oo, l in per_round)
    return o


def naive_retnet_decays(m):
    """The README's decays of a retnet mixer config: its "decay" list or 1 − 2^(−5−h), in float32."""
    return [float(torch.tensor(g, dtype=torch.float32))
            for g in m.get("decay", [1 - 2.0 ** (-5 - h) for h in range(m["heads"])])]


def naive_retnet(m, q, k, v, pos=0):
    """RetNet retention as explicit sums (the README's formulas): q, k (n, H, dk) (k already
    scaled by 1/√dk), v (n, H, dv) at positions pos..pos+n−1 → o (n, H, dv) before the norm.
    Pair i of q_t, k_t turns by t·θ_i, θ_i = 10000^(−i/(dk/2 − 1)) (1 when dk = 2), written
    out with math.cos/sin; o_t = Σ_{p≤t} γ_h^{t−p} (q̃_t·k̃_p) v_p."""
    n, heads, dk = q.shape
    half = dk // 2
    theta = [10000.0 ** (-i / (half - 1)) if half > 1 else 1.0 for i in range(half)]

    def rot(x):
        r = x.clone()
        for t in range(n):
            for i in range(half):
                c, s = math.cos((pos + t) * theta[i]), math.sin((pos + t) * theta[i])
                r[t, :, 2 * i] = x[t, :, 2 * i] * c - x[t, :, 2 * i + 1] * s
                r[t, :, 2 * i + 1] = x[t, :, 2 * i + 1] * c + x[t, :, 2 * i] * s
        return r

    qr, kr = rot(q), rot(k)
    gamma = torch.tensor(naive_retnet_decays(m), dtype=q.dtype)
    o = torch.zeros(n, heads, v.shape[-1], dtype=q.dtype)
    for t in range(n):
        w = (qr[t] * kr[:t + 1]).sum(-1) * gamma ** torch.arange(t, -1, -1, dtype=q.dtype)[:, None]   # (t+1, H)
        o[t] = (w[:, :, None] * v[:t + 1]).sum(0)
    return o


def naive_aft(q, k, v, causal):
    """AFT-simple as explicit sums: y_t = σ(q_t)·Σ_p e^{k_p − c} v_p / Σ_p e^{k_p − c} over p ≤ t
    (causal) or all p; c = the column max of k (cancels)."""
    e = torch.exp(k - k.max(0).values)
    y = torch.zeros_like(q)
    for t in range(len(q)):
        seen = t + 1 if causal else len(q)
        y[t] = torch.sigmoid(q[t]) * (e[:seen] * v[:seen]).sum(0) / e[:seen].sum(0)
    return y


def naive_aft_local(m, W, q, k, v):
    """AFT-local / AFT-conv as explicit sums (the README's formulas): q, k, v (n, D) at
    positions 0..n−1 → y (n, D). Channel c, query t, key p (p ≤ t causal, all p otherwise):
    w = W[t − p] (causal, t − p < s) or W[t − p + s − 1] (non-causal, |t − p| < s), else 0;
    W = pos_bias (every channel) or conv_kernel[c // dk]; y_t = σ(q_t)·Σ e^{k_p+w} v_p / Σ e^{k_p+w}."""
    n, D = q.shape
    s, dk, causal = m["window"], m["dk"], m.get("causal", True)
    Wd = torch.stack([W if W.dim() == 1 else W[c // dk] for c in range(D)], 1)     # (offsets, D)
    zero = torch.zeros(D, dtype=q.dtype)
    y = torch.zeros_like(q)
    for t in range(n):
        ps = range(t + 1) if causal else range(n)
        lg = torch.stack([k[p] + (Wd[t - p + (0 if causal else s - 1)] if abs(t - p) < s else zero) for p in ps])
        e = torch.exp(lg - lg.max(0).values)
        y[t] = torch.sigmoid(q[t]) * (e * v[:len(ps)]).sum(0) / e.sum(0)
    return y


def naive_aft_full(m, W, q, k, v):
    """AFT-full as explicit sums (the README's formula): q, k, v (n, D) at positions 0..n−1,
    W (T, T) the bias matrix → y (n, D); ℓ = k_p + W[t, p] ("add") or k_p·W[t, p] ("multiply")
    over p ≤ t (causal) or all p; y_t = σ(q_t)·Σ e^{ℓ} v_p / Σ e^{ℓ}."""
    causal, mult = m.get("causal", True), m.get("bias_form", "add") == "multiply"
    y = torch.zeros_like(q)
    for t in range(len(q)):
        ps = t + 1 if causal else len(q)
        lg = torch.stack([k[p] * W[t, p] if mult else k[p] + W[t, p] for p in range(ps)])
        e = torch.exp(lg - lg.max(0).values)
        y[t] = torch.sigmoid(q[t]) * (e * v[:ps]).sum(0) / e.sum(0)
    return y


# ---------------------------------------------------------------- per config


def config_checks(path):
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path) as f:
        file_config = json.load(f)
    layout = checkpoint.layout_of(file_config)
    cfg = checkpoint.recur_config(file_config)
    n = min(SEQ_LEN.get(name, DEFAULT_SEQ_LEN), cfg["max_positions"] or math.inf)
    model = checkpoint.build_model(file_config, SEED)
    model64 = checkpoint.build_model(file_config, SEED).double()
    x = golden.random_inputs(cfg, n, SEED + 1)

    def tensor_names():
        got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        assert got == expected_tensors(cfg), f"state_dict {got} != README {expected_tensors(cfg)}"
        assert all(v.dtype == torch.float32 for v in model.state_dict().values())

    def notes():
        assert isinstance(file_config.get("notes"), str) and file_config["notes"], "config has no notes"

    def encoder_has_no_step_form():
        with torch.no_grad():
            expect_value_error(lambda: model64.step(x[0], model64.init_state()), "no recurrent form",
                               "a non-causal model stepped")
            # Every position sees the future: changing the last input moves the first output (a block_local
            # encoder or a length-scaled GAU with the causal mask: only the last).
            y = x.clone()
            y[-1] = (y[-1] + 1) % cfg["input"]["vocab_size"] if cfg["input"]["kind"] == "tokens" else y[-1] + 1
            masked = any(m["type"] in ("block_local", "gau") and m.get("causal", True) for m in mixer_configs(cfg))
            if masked:
                assert max_abs(model64(x)[:-1], model64(y)[:-1]) == 0, "a causally masked encoder saw the future"
                assert max_abs(model64(x)[-1], model64(y)[-1]) > 1e-6, "the last output ignores its input"
                return
            if all(m.get("causal_mask") for m in mixer_configs(cfg)):   # a masked encoder: position 0 sees itself
                assert max_abs(model64(x)[0], model64(y)[0]) < 1e-12, "causal_mask: position 0 saw a later one"
                assert max_abs(model64(x)[-1], model64(y)[-1]) > 1e-6, "the last output ignores its input"
                return
            assert max_abs(model64(x)[0], model64(y)[0]) > 1e-6, "encoder output ignores later positions"

    def parallel_equals_steps():
        parallel_matches_steps(model64, x, (1, 7, CHUNK, n), name)

    def matches_naive_math():
        w = {k: v for k, v in model64.state_dict().items()}
        with torch.no_grad():
            assert_close(model64(x), naive_forward(cfg, w, x), 1e-9, "model vs naive")

    def prefill_then_continue():
        k = n // 3
        with torch.no_grad():
            full = model64(x, return_layers=True)
            _, head_layers, state = model64(x[:k], return_layers=True)
            rest = model64(x[k:], state=state, return_layers=True)
            assert_same_run(rest, (full[0][k:], [h[k:] for h in full[1]], full[2]), 1e-9, "prefill + parallel")
            steps = step_loop(model64, x[k:], state)
            assert_same_run(steps, (full[0][k:], [h[k:] for h in full[1]], full[2]), 1e-9, "prefill + steps")

    def float32_agrees():
        with torch.no_grad():
            out32, layers32, st32 = model(x, return_layers=True)
            out64, layers64, st64 = model64(x, return_layers=True)
        assert out32.dtype == torch.float32 and out64.dtype == torch.float64
        # Same weights and inputs, so only float32 rounding differs: per layer, reductions over d, d_ff and N
        # terms, whose roundings add up like a random walk: ≈ L·√(d + d_ff + N)·eps32·max|h|, at most
        # 8·√1312·6e-8·4 ≈ 7e-5 (paper_mnist, the largest config; eps32 = 2⁻²⁴) → 1e-4.
        assert_close(out32, out64, 1e-4, "output f32 vs f64")
        for i in range(cfg["n_layers"]):
            assert_close(layers32[i], layers64[i], 1e-4, f"layer {i} f32 vs f64")
            for what in st64.layers[i]:
                a, b = st32.layers[i][what], st64.layers[i][what]
                scale = max(1.0, max_abs(b, torch.zeros_like(b)))  # S and z grow with N
                assert_close(a / scale, b / scale, 1e-4, f"state {i} {what} f32 vs f64 (relative)")

    def export_load_roundtrip():
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint.export(file_config, SEED, tmp)
            with open(os.path.join(tmp, checkpoint.CONFIG_FILE)) as f:
                assert json.load(f) == file_config, "config.json differs from the config"
            loaded, _ = checkpoint.load(tmp)
        # Exact: the file holds the tensors' bytes, so the loaded model runs the same ops on the same values.
        for k, v in model.state_dict().items():
            assert torch.equal(loaded.state_dict()[k], v), f"{k} changed in export → load"
        with torch.no_grad():
            assert torch.equal(loaded(x), model(x)), "loaded model computes something else"

    def golden_holds_model():
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "g.bin")
            records = golden.compute(model, x, {"config": name})
            golden.write(path, records)
            back = golden.read(path)
        ts = cfg.get("token_shift")
        shift_names = ([] if ts is None else ["shift.mixer", "shift.ffn"] if ts.get("ffn") else ["shift.mixer"])
        shift_names += ["shift.ffn_mix"] if cfg["ffn"] and cfg["ffn"].get("token_mix") else []
        per_layer = [STATE_NAMES[m["type"]] + shift_names for m in mixer_configs(cfg)]   # each layer its own mixer's
        states = [f"state.{i}.{s}" for i, names in enumerate(per_layer) for s in names] if model.causal else []
        assert list(back) == ["meta", "input", "output"] + [f"layer.{i}" for i in range(cfg["n_layers"])] + \
            states, f"records {list(back)}"
        assert model.dtype == torch.float32, "golden.compute changed the model"
        with torch.no_grad():
            out, layers, state = model64(x, return_layers=True)
        # Exact: golden.compute runs this same forward (same weights, input, shapes) and the file holds its bytes.
        assert torch.equal(back["input"], x)
        assert back["input"].dtype == (torch.int32 if cfg["input"]["kind"] == "tokens" else torch.float32)
        assert torch.equal(back["output"], out) and back["output"].dtype == torch.float64
        for i in range(cfg["n_layers"]):
            assert torch.equal(back[f"layer.{i}"], layers[i])
            if model.causal:
                assert list(state.layers[i]) == per_layer[i], f"layer {i} state {list(state.layers[i])}"
                for s in per_layer[i]:
                    assert torch.equal(back[f"state.{i}.{s}"], state.layers[i][s]), f"state.{i}.{s}"
        m = golden.meta(back)
        assert m["golden_version"] == golden.GOLDEN_VERSION and m["config"] == name, m

    if model.causal:
        checks = [tensor_names, notes, parallel_equals_steps, matches_naive_math, prefill_then_continue,
                  float32_agrees, export_load_roundtrip, golden_holds_model]
    else:
        checks = [tensor_names, notes, encoder_has_no_step_form, matches_naive_math, float32_agrees,
                  export_load_roundtrip, golden_holds_model]
    if layout == "fast-transformers":
        def ft_layout():
            assert cfg["d_model"] == file_config["n_heads"] * file_config["value_dimensions"]
            assert cfg["norm_placement"] == "post" and cfg["head"] is None and cfg["max_positions"] == 0
            assert cfg["input"] == {"kind": "features", "feature_width": cfg["d_model"], "projection": False}
            with tempfile.TemporaryDirectory() as tmp:
                checkpoint.export(file_config, SEED, tmp)
                tensors, _ = safetensors.read(os.path.join(tmp, checkpoint.WEIGHTS_FILE))
                loaded, _ = checkpoint.load(tmp)
            assert set(tensors) == expected_ft_keys(file_config), f"keys {sorted(tensors)}"
            # Exact: renamed copies of the same tensors, and the same forward on them.
            assert torch.equal(tensors["layers.0.attention.query_projection.weight"],
                               model.state_dict()["blocks.0.mixer.query.weight"])
            if "feature_map" in file_config:
                assert torch.equal(tensors["layers.0.attention.inner_attention.feature_map.omega"],
                                   model.state_dict()["blocks.0.mixer.feature_map.omega"])
            with torch.no_grad():
                assert torch.equal(loaded(x), model(x)), "fast-transformers export computes something else"
        checks.append(ft_layout)
    return [(f"{name}: {fn.__name__} (N={n})", fn) for fn in checks]


# ---------------------------------------------------------------- formats


def safetensors_roundtrip():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(3, 5, generator=g, dtype=torch.float64)
    tensors = {f"t.{name}": base > 0 if dt == torch.bool else base.to(dt) for name, dt in safetensors.DTYPES.items()}
    tensors["t.scalar"] = torch.tensor(1.5)
    tensors["t.empty"] = torch.zeros(0, 4)
    tensors["a.special"] = torch.tensor([math.inf, -math.inf, math.nan, -0.0, 1e-45])  # bits, not values
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "w.safetensors")
        safetensors.write(path, tensors, {"k": "v"})
        back, meta = safetensors.read(path)
        with open(path, "rb") as f:
            blob = f.read()
    assert meta == {"k": "v"}
    assert list(back) == sorted(tensors), "not written in sorted-name order"
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape, k
        assert safetensors.tensor_bytes(back[k]) == safetensors.tensor_bytes(t), f"{k} bits differ"
    n = int.from_bytes(blob[:8], "little")
    assert n % 8 == 0 and blob[8 + n - 1:8 + n] in (b" ", b"}"), "header not padded to 8"
    header = json.loads(blob[8:8 + n])
    assert header["t.F32"]["dtype"] == "F32" and header["t.F32"]["shape"] == [3, 5]


def safetensors_rejects_bad_files():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "w.safetensors")
        safetensors.write(path, {"a": torch.ones(4), "b": torch.ones(2, 2)})
        with open(path, "rb") as f:
            blob = f.read()
        for bad in (blob[:-1], blob + b"\0", blob[:4]):
            with open(path, "wb") as f:
                f.write(bad)
            expect_value_error(lambda: safetensors.read(path), (), f"accepted a {len(bad)}-byte file of {len(blob)}")


def golden_roundtrip():
    records = [("meta", torch.frombuffer(bytearray(b'{"x": 1}'), dtype=torch.uint8)),
               ("f32", torch.randn(2, 3)), ("f64", torch.randn(4, dtype=torch.float64)),
               ("i32", torch.arange(5, dtype=torch.int32)), ("scalar", torch.tensor(2.5, dtype=torch.float64)),
               ("empty", torch.zeros(0, 3)), ("ünïcode", torch.ones(1, 1, 1, dtype=torch.float64))]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.bin")
        golden.write(path, records)
        back = golden.read(path)
        with open(path, "rb") as f:
            blob = f.read()
        assert blob[:8] == b"RCURGOLD" and blob[8:16] == (1).to_bytes(4, "little") + (7).to_bytes(4, "little")
        with open(path, "wb") as f:
            f.write(blob[:-1])
        expect_value_error(lambda: golden.read(path), (), "accepted a truncated golden")
    assert list(back) == [name for name, _ in records]
    for name, t in records:   # exact: the file holds the tensors' bytes
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name
    assert golden.meta(back) == {"x": 1}


def model_rejects_bad_input():
    model = checkpoint.build_model(load_config("tiny_pre_tokens"), 0)
    for x, state in ((torch.tensor([0, 32]), None), (torch.tensor([-1]), None),
                     (torch.tensor([1]), model.init_state()._replace(pos=256))):
        expect_value_error(lambda: model(x, state=state), (), f"accepted {x} at position {state.pos if state else 0}")
    bad = load_config("tiny_pre_tokens")
    bad["mixer"]["heds"] = bad["mixer"].pop("heads")
    ft = load_config("ft_small")
    for config in (bad, {k: v for k, v in ft.items() if k != "n_heads"}, {**ft, "attention_type": "full"}):
        expect_value_error(lambda: checkpoint.build_model(config, 0), (), f"accepted a bad config {config}")
    assert checkpoint.layout_of({**ft, "layout": "fast-transformers"}) == "fast-transformers"


def reference_follows_its_device():
    """The tensors the forward makes (positions, masks, empty states) follow the model's
    device; "meta" stands in for a GPU here. PyTorch before 2.0 has no default-device
    context: there the reference refuses any device but the CPU, naming the version."""
    model = checkpoint.build_model(load_config("flash_tokens"), 0)
    model = model.to("meta")
    if hasattr(torch.device, "__enter__"):
        state = model.init_state()
        assert all(t.device.type == "meta" for layer in state.layers for t in layer.values())
        return
    try:
        model.init_state()
    except RuntimeError as e:
        assert "needs PyTorch 2.0 or newer" in str(e) and "meta" in str(e), e
    else:
        raise AssertionError("a meta-device model made its state with PyTorch " + torch.__version__)


def cli_end_to_end():
    """make_golden.py (which runs the export) on the fast-transformers config;
    the command recorded in meta regenerates the same bytes; a --layout that
    disagrees with the config fails."""
    config = "models/configs/ft_small.json"
    with tempfile.TemporaryDirectory() as tmp:
        run = [sys.executable, os.path.join(HERE, "make_golden.py"), "--config", config, "--seed", "3",
               "--steps", "20", "--out", tmp, "--layout", "fast-transformers"]
        subprocess.run(run, cwd=REPO_ROOT, check=True, capture_output=True)
        with open(os.path.join(tmp, "golden.bin"), "rb") as f:
            first = f.read()
        meta = golden.meta(golden.read(os.path.join(tmp, "golden.bin")))
        assert meta["steps"] == 20 and meta["layout"] == "fast-transformers" and meta["input_seed"] == 4, meta
        assert meta["reference_version"] >= 1 and meta["config"] == config, meta
        os.remove(os.path.join(tmp, "golden.bin"))
        subprocess.run(meta["command"], shell=True, cwd=REPO_ROOT, check=True, capture_output=True)
        with open(os.path.join(tmp, "golden.bin"), "rb") as f:
            assert f.read() == first, "meta.command does not regenerate the golden bit for bit"
        assert set(os.listdir(tmp)) == {"golden.bin", "weights.safetensors", "config.json"}
        wrong = [sys.executable, os.path.join(HERE, "export.py"), "--config", config, "--seed", "3",
                 "--out", tmp, "--layout", "recur"]
        assert subprocess.run(wrong, cwd=REPO_ROOT, capture_output=True).returncode != 0, "--layout mismatch accepted"


FAKE_RECUR_RUN = f"""#!{sys.executable}
# Stands in for recur-run: MODEL --input IN.npy --output OUT.npy, where MODEL
# holds the path of a weights directory, run by the f32 reference.
import sys
import numpy as np
import torch
sys.path.insert(0, {HERE!r})
from recur_ref import checkpoint
model, _ = checkpoint.load(open(sys.argv[1]).read())
with torch.no_grad():
    np.save(sys.argv[5], model(torch.from_numpy(np.load(sys.argv[3]))).numpy())
"""


def golden_cache_cli():
    """golden_cache.py makes a golden once per set of inputs: a second run with the same
    arguments and files copies the first one's files; another config is another entry."""
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "tiny.json")
        shutil.copyfile(os.path.join(REPO_ROOT, "models/configs/tiny_pre_tokens.json"), config)
        def run(out):
            cmd = [sys.executable, os.path.join(HERE, "golden_cache.py"), os.path.join(tmp, "cache"), "--",
                   "--config", config, "--seed", "7", "--steps", "5", "--out", os.path.join(tmp, out)]
            r = subprocess.run(cmd, capture_output=True, text=True, check=True)
            return r.stdout, open(os.path.join(tmp, out, "golden.bin"), "rb").read()
        first, second = run("a"), run("b")
        assert "(made now)" in first[0] and "(made earlier)" in second[0], (first[0], second[0])
        assert first[1] == second[1]  # exact: a copy of the same file
        with open(config) as f:
            cfg = json.load(f)
        cfg["layer_norm_eps"] = 1e-6
        with open(config, "w") as f:
            json.dump(cfg, f)
        assert "(made now)" in run("c")[0]
        assert len(os.listdir(os.path.join(tmp, "cache"))) == 2


def compare_run_cli():
    """compare_run.py's plumbing, with a stand-in for recur-run: passes within
    the default tolerances, fails (exit 1) at an impossible one."""
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint.export(load_config("tiny_pre_tokens"), 1, tmp)
        fake, model = os.path.join(tmp, "fake-recur-run"), os.path.join(tmp, "model.recur")
        with open(fake, "w") as f:
            f.write(FAKE_RECUR_RUN)
        os.chmod(fake, 0o755)
        with open(model, "w") as f:
            f.write(tmp)
        run = [sys.executable, os.path.join(HERE, "compare_run.py"), "--model-dir", tmp, "--recur-run", fake,
               "--model", model, "--steps", "100"]
        result = subprocess.run(run, capture_output=True, text=True)
        assert result.returncode == 0 and "PASS" in result.stdout, result.stdout + result.stderr
        result = subprocess.run(run + ["--abs", "1e-12"], capture_output=True, text=True)
        assert result.returncode == 1 and "FAIL" in result.stdout, result.stdout + result.stderr


# ---------------------------------------------------------------- feature maps

# (name, mixer keys beyond type/heads/dk/dv/eps): every feature map the model supports.
FEATURE_MAP_CASES = [
    ("elu_plus_one", {"feature_map": "elu_plus_one"}),
    ("relu", {"feature_map": "relu"}),
    ("poly2", {"feature_map": "poly2"}),
    ("favor_performer", {"feature_map": "favor", "n_features": 12}),
    ("favor_performer_temp", {"feature_map": "favor", "n_features": 7, "favor_layout": "performer",
                              "softmax_temp": 0.3}),
    ("favor_fast_transformers", {"feature_map": "favor", "n_features": 12, "favor_layout": "fast_transformers"}),
    ("favor_fast_transformers_odd", {"feature_map": "favor", "n_features": 9, "favor_layout": "fast_transformers",
                                     "softmax_temp": 0.5}),
    ("random_fourier", {"feature_map": "random_fourier", "n_features": 9, "softmax_temp": 0.2}),
    ("smoothed_random_fourier", {"feature_map": "smoothed_random_fourier", "n_features": 8, "smoothing": 0.7}),
]
FM_D_MODEL, FM_HEADS, FM_DK, FM_DV, FM_N = 12, 2, 4, 3, 23


def _fm_mixer_cfg(extra, causal=True):
    return {"type": "linear_attention", "heads": FM_HEADS, "dk": FM_DK, "dv": FM_DV, "eps": 1e-6,
            "causal": causal, **extra}


def _fm_attention(extra, causal=True, seed=0):
    torch.manual_seed(seed)
    return LinearAttention(_fm_mixer_cfg(extra, causal), FM_D_MODEL).double()


def feature_map_checks():
    """Per feature map, on LinearAttention alone (float64): the widths C; the
    RNN, chunked-parallel (any chunk) and non-causal forms agree; φ and the
    whole causal/non-causal mixer equal recur_ref.mixers' LinearAttention
    with the same weights and ω."""
    out = []
    for name, extra in FEATURE_MAP_CASES:
        def check(extra=extra):
            cfg = _fm_mixer_cfg(extra)
            C = {"elu_plus_one": FM_DK, "relu": FM_DK, "poly2": FM_DK * FM_DK}.get(extra["feature_map"])
            fourier = extra["feature_map"] in ("random_fourier", "smoothed_random_fourier")
            if C is None:
                mm = extra["n_features"]
                C = mm if extra.get("favor_layout", "performer") == "performer" else 2 * (mm // 2)
                if fourier:   # [cos u, sin u] (, the smoothing)
                    C = 2 * (mm // 2) + (extra["feature_map"] == "smoothed_random_fourier")
            att = _fm_attention(extra)
            assert att.C == C == feature_dim(cfg), (att.C, C)
            names = {k: tuple(v.shape) for k, v in att.state_dict().items()}
            if extra["feature_map"] == "favor" or fourier:
                cols = extra["n_features"] if extra.get("favor_layout", "performer") == "performer" \
                    and not fourier else extra["n_features"] // 2
                assert names["feature_map.omega"] == (FM_DK, cols), names
                assert att.state_dict()["feature_map.omega"].abs().sum() > 0, "omega not initialised"
            else:
                assert "feature_map.omega" not in names, names
            g = torch.Generator().manual_seed(1)
            x = torch.randn(FM_N, FM_D_MODEL, generator=g, dtype=torch.float64)
            S0 = torch.rand(FM_HEADS, C, FM_DV, generator=g, dtype=torch.float64)
            z0 = torch.rand(FM_HEADS, C, generator=g, dtype=torch.float64)
            with torch.no_grad():
                # φ: positive (except relu/poly2's zeros/signs where allowed) and equal to recur_ref.mixers'.
                ref = mixers.LinearAttention(cfg, FM_D_MODEL).double()
                ref.load_state_dict(att.state_dict(), strict=True)
                t = torch.randn(5, FM_HEADS, FM_DK, generator=g, dtype=torch.float64)
                # Exact: both call the same function with the same arguments on the same tensor.
                assert torch.equal(att.phi(t), ref.phi(t)), "phi differs from mixers.LinearAttention.phi"
                assert att.phi(t).shape == (5, FM_HEADS, C)
                # Causal forms, from zero and from a non-zero state.
                for S, z in ((torch.zeros_like(S0), torch.zeros_like(z0)), (S0, z0)):
                    rec = att.recurrent(x, S, z)
                    for chunk in (1, 4, CHUNK, FM_N):
                        par = att.parallel(x, S, z, chunk)
                        for a, b, what in zip(par, rec, ("output", "S", "z")):
                            assert_close(a, b, 1e-10, f"parallel chunk {chunk} vs recurrent: {what}")
                    # The last position of a causal run sees what the non-causal form sees.
                    nc = att.noncausal(x, S, z)
                    assert_close(nc[0][-1], rec[0][-1], 1e-10, "noncausal vs recurrent at the last position")
                    assert_close(nc[1], rec[1], 1e-10, "noncausal vs recurrent: S")
                    assert_close(nc[2], rec[2], 1e-10, "noncausal vs recurrent: z")
                assert rec[1].shape == (FM_HEADS, C, FM_DV) and rec[2].shape == (FM_HEADS, C)
                # The whole mixer vs recur_ref.mixers (batch 1): causal prefill and the encoder form.
                ref_y, ref_state = ref.prefill(x[None], ref.initial_state(1))
                y, S, z = att.parallel(x, torch.zeros_like(S0), torch.zeros_like(z0), CHUNK)
                assert_close(y, ref_y[0], 1e-10, "causal output vs mixers.LinearAttention")
                assert_close(S, ref_state["S"][0], 1e-10, "S vs mixers.LinearAttention")
                assert_close(z, ref_state["z"][0], 1e-10, "z vs mixers.LinearAttention")
                enc = _fm_attention(extra, causal=False)
                ref_enc = mixers.LinearAttention(_fm_mixer_cfg(extra, causal=False), FM_D_MODEL).double()
                ref_enc.load_state_dict(enc.state_dict(), strict=True)
                y, _, _ = enc.noncausal(x, torch.zeros_like(S0), torch.zeros_like(z0))
                assert_close(y, ref_enc(x[None])[0], 1e-10, "non-causal output vs mixers.LinearAttention")
        out.append((f"feature map {name}: forms agree, phi == recur_ref.mixers", check))
    return out


def favor_omega_is_seeded():
    """ω comes from mixers.orthogonal_random_matrix_ via the global seed: same
    seed, same ω (export deterministic per --seed); another seed, another ω."""
    cfg = load_config("linear_favor_tokens")
    a, b, c = (checkpoint.build_model(cfg, s).state_dict() for s in (7, 7, 8))
    name = "blocks.0.mixer.feature_map.omega"
    assert torch.equal(a[name], b[name]) and not torch.equal(a[name], c[name])   # exact: the same seeded draws
    assert not torch.equal(a[name], a["blocks.1.mixer.feature_map.omega"]), "layers share one omega"
    torch.manual_seed(7)
    w = mixers.orthogonal_random_matrix_(torch.zeros(16, 48))
    assert w.shape == a[name].shape and a[name].dtype == torch.float32


def favor_config_validation():
    """Bad feature-map keys are ValueErrors naming the key."""
    base = load_config("tiny_pre_tokens")
    favor = {"feature_map": "favor", "n_features": 8}

    with_mixer = functools.partial(config_with_mixer, base, drop_none=True)

    bad = [  # (config, a word the message must contain)
        (with_mixer(n_features=8), "n_features"),
        (with_mixer(feature_map="relu", favor_layout="performer"), "favor_layout"),
        (with_mixer(feature_map="poly2", softmax_temp=0.5), "softmax_temp"),
        (with_mixer(feature_map="favor"), "n_features"),
        (with_mixer(**favor, favor_layout="orthogonal"), "favor_layout"),
        (with_mixer(**favor, softmax_temp=0), "softmax_temp"),
        (with_mixer(**favor, softmax_temp=-1.0), "softmax_temp"),
        (with_mixer(feature_map="favor", n_features=0), "n_features"),
        (with_mixer(feature_map="favor", n_features=1, favor_layout="fast_transformers"), "n_features"),
        (with_mixer(feature_map="favor", n_features=8.0), "n_features"),
        (with_mixer(feature_map="softmax"), "feature_map"),
        (with_mixer(**favor, n_dims=8), "mixer"),
    ]
    expect_rejected(bad)
    for ok in (with_mixer(feature_map="relu"), with_mixer(feature_map="poly2"), with_mixer(**favor),
               with_mixer(**favor, favor_layout="fast_transformers", softmax_temp=0.25)):
        checkpoint.build_model(ok, 0)
    ft = load_config("ft_favor")
    fm = ft["feature_map"]
    bad_ft = [
        ({**fm, "stabilize": True}, "stabilize"),
        ({**fm, "stabilize": 0}, "stabilize"),
        ({**fm, "type": "elu"}, "type"),
        ({k: v for k, v in fm.items() if k != "n_dims"}, "n_dims"),
        ({**fm, "n_dims": 1}, "n_dims"),
        ({**fm, "softmax_temp": 0}, "softmax_temp"),
        ({**fm, "orthogonal": True}, "orthogonal"),
        ("favor", "feature_map"),
        (None, "feature_map"),
    ]
    for fm_bad, word in bad_ft:
        expect_value_error(lambda: checkpoint.build_model({**ft, "feature_map": fm_bad}, 0), word,
                           f"accepted a bad fast-transformers feature_map {fm_bad}")


def ft_favor_mapping():
    """ft_favor.json → the recur mixer of the contract; tensor renames round trip."""
    ft = load_config("ft_favor")
    cfg = checkpoint.recur_config(ft)
    assert cfg["mixer"] == {"type": "linear_attention", "heads": 4, "dk": 16, "dv": 16, "feature_map": "favor",
                            "eps": 1e-6, "causal": True, "n_features": 32, "favor_layout": "fast_transformers"}, cfg
    for t, want in ((None, None), (0.125, 0.125)):
        m = checkpoint.recur_config({**ft, "feature_map": {**ft["feature_map"], "softmax_temp": t}})["mixer"]
        assert m.get("softmax_temp") == want, m
    plain = {k: v for k, v in ft.items() if k != "feature_map"}
    assert checkpoint.recur_config(plain)["mixer"]["feature_map"] == "elu_plus_one"
    assert checkpoint.recur_config({**ft, "attention_type": "linear"})["mixer"]["causal"] is False
    model = checkpoint.build_model(ft, SEED)
    sd = model.state_dict()
    assert sd["blocks.1.mixer.feature_map.omega"].shape == (16, 16)
    assert model.init_state().S[0].shape == (4, 32, 16) and model.init_state().z[0].shape == (4, 32)
    named = ftl.to_fast_transformers(sd)
    assert set(named) == expected_ft_keys(ft), sorted(named)
    assert torch.equal(named["layers.1.attention.inner_attention.feature_map.omega"],   # exact: renames only
                       sd["blocks.1.mixer.feature_map.omega"])
    back = ftl.from_fast_transformers(named)
    assert list(back) == list(sd) and all(torch.equal(back[k], sd[k]) for k in sd), "renames do not round trip"
    # The model's φ is the library's Favor with n_dims = 32, stabilize = False (exact: the same call).
    x = torch.randn(5, 16)
    omega = sd["blocks.0.mixer.feature_map.omega"]
    assert torch.equal(model.blocks[0].mixer.phi(x), mixers.fast_transformers_favor(x, omega, 32, None, False))


def new_configs_golden_cli():
    """make_golden.py on a favor config of each layout (state records at their
    (H, C, dv) / (H, C) shapes) and export.py on the favor encoder (the same
    weights, ω included, as build_model with that seed). The other new configs
    go through golden.compute in config_checks."""
    cases = [("linear_favor_tokens", [], (2, 48, 16)), ("ft_favor", ["--layout", "fast-transformers"], (4, 32, 16))]
    for name, layout, S_shape in cases:
        records, tensors, _, _ = make_golden(name, 30, *layout)
        assert any(k.endswith("feature_map.omega") for k in tensors), name
        assert records["state.0.S"].shape == S_shape and records["state.1.z"].shape == S_shape[:2], name
    config = "models/configs/linear_favor_encoder.json"
    with tempfile.TemporaryDirectory() as tmp:
        run = [sys.executable, os.path.join(HERE, "export.py"), "--config", config, "--seed", "7", "--out", tmp]
        run_script(run)
        tensors, _ = safetensors.read(os.path.join(tmp, checkpoint.WEIGHTS_FILE))
    want = checkpoint.build_model(json.load(open(os.path.join(REPO_ROOT, config))), 7).state_dict()
    # Exact: the same seeded init, and the file holds its bytes.
    assert set(tensors) == set(want) and all(torch.equal(tensors[k], want[k]) for k in want), \
        "export.py is not build_model with --seed"


# ---------------------------------------------------------------- softmax attention

SM_D_MODEL, SM_HEADS, SM_DK, SM_DV, SM_N, SM_P = 12, 3, 4, 5, 70, 9   # N > CHUNK: several chunks


def _sm_cfg(causal=True):
    return {"type": "softmax_attention", "heads": SM_HEADS, "dk": SM_DK, "dv": SM_DV, "causal": causal}


def _sm_naive(att, x, K0, V0, causal):
    """The full-matrix form: scores over the P cached keys and all N new ones,
    (H, N, P + N), masked j > P + i when causal, softmax over j, then out."""
    q = F.linear(x, att.query.weight, att.query.bias).view(len(x), SM_HEADS, SM_DK)
    k = F.linear(x, att.key.weight, att.key.bias).view(len(x), SM_HEADS, SM_DK).transpose(0, 1)
    v = F.linear(x, att.value.weight, att.value.bias).view(len(x), SM_HEADS, SM_DV).transpose(0, 1)
    K, V = torch.cat([K0, k], 1), torch.cat([V0, v], 1)
    P = K0.shape[1]
    s = torch.einsum("ihd,hjd->hij", q, K) / math.sqrt(SM_DK)                    # (H, N, P + N)
    if causal:
        j, i = torch.arange(P + len(x))[None, :], torch.arange(len(x))[:, None] + P
        s = s.masked_fill(j > i, -math.inf)
    o = torch.einsum("hij,hjm->ihm", torch.softmax(s, -1), V).reshape(len(x), -1)
    return F.linear(o, att.out.weight, att.out.bias), K, V


def softmax_attention_forms():
    """SoftmaxAttention's per-stream forms (float64): recurrent == chunked parallel
    (chunks 1, 7, CHUNK, N) == the naive full matrix, from an empty and from a
    non-empty KV cache; the non-causal form vs naive; the KV cache's shapes and
    contents; and all of it vs mixers.SoftmaxAttention with the same weights."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(SM_N, SM_D_MODEL, generator=g, dtype=torch.float64)
    prefix = torch.randn(SM_P, SM_D_MODEL, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    att = SoftmaxAttention(_sm_cfg(), SM_D_MODEL).double()
    names = {k: tuple(v.shape) for k, v in att.state_dict().items()}
    qk, vv = SM_HEADS * SM_DK, SM_HEADS * SM_DV
    assert names == {"query.weight": (qk, SM_D_MODEL), "query.bias": (qk,), "key.weight": (qk, SM_D_MODEL),
                     "key.bias": (qk,), "value.weight": (vv, SM_D_MODEL), "value.bias": (vv,),
                     "out.weight": (SM_D_MODEL, vv), "out.bias": (SM_D_MODEL,)}, names
    ref = mixers.SoftmaxAttention(_sm_cfg(), SM_D_MODEL).double()
    ref.load_state_dict(att.state_dict(), strict=True)
    with torch.no_grad():
        empty = att.empty_state(torch.float64)
        assert empty["K"].shape == (SM_HEADS, 0, SM_DK) and empty["V"].shape == (SM_HEADS, 0, SM_DV)
        _, filled = att.recurrent(prefix, empty)                  # a non-empty cache: SM_P positions
        for state in (empty, filled):
            P = state["K"].shape[1]
            rec_y, rec_state = att.recurrent(x, state)
            assert list(rec_state) == ["K", "V"]
            assert rec_state["K"].shape == (SM_HEADS, P + SM_N, SM_DK)
            assert rec_state["V"].shape == (SM_HEADS, P + SM_N, SM_DV)
            naive_y, K, V = _sm_naive(att, x, state["K"], state["V"], causal=True)
            assert_close(rec_y, naive_y, 1e-12, f"recurrent vs naive (P={P})")
            # Exact: every form appends slices of one key/value F.linear over all of x, as _sm_naive does.
            assert torch.equal(rec_state["K"], K) and torch.equal(rec_state["V"], V), "cache is not [old; k], [old; v]"
            for chunk in (1, 7, CHUNK, SM_N):
                par_y, par_state = att.parallel(x, state, chunk)
                assert_close(par_y, rec_y, 1e-12, f"parallel chunk {chunk} vs recurrent (P={P})")
                assert torch.equal(par_state["K"], K) and torch.equal(par_state["V"], V)
            # recur_ref.mixers' batched form with a fixed max_context cache holding the same P positions.
            ref_state = ref.initial_state(1, max_context=P + SM_N + 5)
            ref_state["k"][0, :, :P], ref_state["v"][0, :, :P] = state["K"], state["V"]
            ref_state["pos"] = torch.tensor(P)
            ref_y, ref_state = ref.prefill(x[None], ref_state)
            assert_close(rec_y, ref_y[0], 1e-12, f"recurrent vs mixers.SoftmaxAttention prefill (P={P})")
            # recur_ref.mixers projects the batched (1, N, d) input: another path, equal to rounding.
            assert_close_rel(ref_state["k"][0, :, :P + SM_N], K, f"mixers cache k (P={P})")
            assert_close_rel(ref_state["v"][0, :, :P + SM_N], V, f"mixers cache v (P={P})")
            # The last position of a causal run sees what the non-causal form sees.
            nc_y, nc_state = att.noncausal(x, state)
            assert_close(nc_y[-1], rec_y[-1], 1e-12, f"noncausal vs recurrent at the last position (P={P})")
        assert_close(att.recurrent(x, empty)[0], ref(x[None])[0], 1e-12, "causal vs mixers.SoftmaxAttention.forward")
        # Non-causal mixer: naive, and recur_ref.mixers' encoder form.
        torch.manual_seed(1)
        enc = SoftmaxAttention(_sm_cfg(causal=False), SM_D_MODEL).double()
        assert not enc.causal
        ref_enc = mixers.SoftmaxAttention(_sm_cfg(causal=False), SM_D_MODEL).double()
        ref_enc.load_state_dict(enc.state_dict(), strict=True)
        y, _ = enc.noncausal(x, enc.empty_state(torch.float64))
        assert_close(y, _sm_naive(enc, x, empty["K"], empty["V"], causal=False)[0], 1e-12, "noncausal vs naive")
        assert_close(y, ref_enc(x[None])[0], 1e-12, "noncausal vs mixers.SoftmaxAttention")
        # Every output of the encoder depends on the last position; a causal first output does not.
        x2 = x.clone()
        x2[-1] += 1
        assert max_abs(enc.noncausal(x2, empty)[0][0], y[0]) > 1e-6, "encoder ignores later positions"
        # Exact: the same ops on the same shapes; row 0 reads only inputs that did not change.
        assert torch.equal(att.parallel(x2, empty, CHUNK)[0][0], att.parallel(x, empty, CHUNK)[0][0])


def softmax_config_validation():
    """softmax_attention mixer keys: type, heads, dk, dv, optional causal; a
    ValueError naming the key otherwise (eps and feature_map are linear-only)."""
    base = load_config("softmax_tokens")

    with_mixer = functools.partial(config_with_mixer, base, drop_none=True)

    bad = [  # (config, a word the message must contain)
        (with_mixer(eps=1e-6), "eps"),
        (with_mixer(feature_map="elu_plus_one"), "feature_map"),
        (with_mixer(n_features=8), "n_features"),
        (with_mixer(window=4), "window"),
        (with_mixer(dv=None), "dv"),
        (with_mixer(heads=None), "heads"),
        (with_mixer(heads=0), "heads"),
        (with_mixer(dk=2.0), "dk"),
        (with_mixer(dv=True), "dv"),
        (with_mixer(causal="yes"), "causal"),
        (with_mixer(causal=1), "causal"),
        (with_mixer(type="softmax"), "type"),
        (with_mixer(type="mega"), "type"),       # not a mixer type (the model runs every recur_ref.mixers type)
    ]
    expect_rejected(bad)
    for ok in (with_mixer(causal=True), with_mixer(causal=False), with_mixer(dk=3, dv=5)):
        model = checkpoint.build_model(ok, 0)
        assert model.causal == ok["mixer"].get("causal", True)
    assert checkpoint.build_model(base, 0).init_state().layers[1]["V"].shape == (2, 0, 16)


def softmax_golden_cli():
    """make_golden.py on softmax_tokens: state.{i}.K (H, N, dk) then state.{i}.V
    (H, N, dv), in sorted-name order, and K/V are really the keys and values of
    every position (layer 0's recomputed from the input record); the
    non-causal softmax encoder writes no state records."""
    steps = 40
    records, _, model, config = make_golden("softmax_tokens", steps)
    m = config["mixer"]
    names = state_records(records, config["n_layers"], "KV")
    for i in range(config["n_layers"]):
        layer = sorted(k for k in names if k.startswith(f"state.{i}."))
        assert layer == [f"state.{i}.K", f"state.{i}.V"], layer          # what the C++ checker concatenates
        assert records[f"state.{i}.K"].shape == (m["heads"], steps, m["dk"])
        assert records[f"state.{i}.V"].shape == (m["heads"], steps, m["dv"])
        assert records[f"state.{i}.K"].dtype == records[f"state.{i}.V"].dtype == torch.float64
    model64 = model.double()
    with torch.no_grad():   # pre-norm: layer 0's mixer sees norm1(embedding + positions)
        x = model64.input(records["input"], 0)
        h = model64.blocks[0].norm1(x)
        k = model64.blocks[0].mixer.key(h).view(steps, m["heads"], m["dk"]).transpose(0, 1)
        v = model64.blocks[0].mixer.value(h).view(steps, m["heads"], m["dv"]).transpose(0, 1)
    assert_close(records["state.0.K"], k, 1e-12, "state.0.K vs keys")
    assert_close(records["state.0.V"], v, 1e-12, "state.0.V vs values")
    encoder_writes_no_state("softmax_encoder")


# ---------------------------------------------------------------- sliding window, AFT-simple

SW_D_MODEL, SW_N = 12, 70
SW_CASES = [  # mixer keys beyond type; R = (w − 1)·max(d) + 1
    {"heads": 3, "dk": 4, "dv": 5, "window": 4, "dilation": [1, 3, 2], "global_tokens": 2},   # R 10
    {"heads": 2, "dk": 4, "dv": 3, "window": 1},                                              # R 1, g 0
    {"heads": 2, "dk": 4, "dv": 3, "window": 5, "dilation": 2, "global_tokens": 5},            # R 9
    {"heads": 2, "dk": 3, "dv": 4, "window": 6, "global_tokens": 0},                           # even w, R 6
]


def _sw_qkv(att, x):
    n = len(x)
    return (F.linear(x, att.query.weight, att.query.bias).view(n, att.heads, att.dk),
            F.linear(x, att.key.weight, att.key.bias).view(n, att.heads, att.dk),
            F.linear(x, att.value.weight, att.value.bias).view(n, att.heads, att.dv))


def sliding_window_forms():
    """SlidingWindowAttention's per-stream forms (float64), per case: recurrent == chunked
    parallel (chunks 1, 7, CHUNK, N; exact same state) == the naive set-by-set softmax, from
    an empty state and after P = 1 and 13 positions (continuing at absolute positions);
    the state's ring/glob contents and zero slots; mixers.SlidingWindowAttention's prefill
    (output and state) and forward; the non-causal form vs naive and recur_ref.mixers."""
    g = torch.Generator().manual_seed(5)
    for case in SW_CASES:
        cfg = {"type": "sliding_window", **case}
        torch.manual_seed(0)
        att = SlidingWindowAttention(cfg, SW_D_MODEL).double()
        R, gl, H = att.R, case.get("global_tokens", 0), case["heads"]
        ref = mixers.SlidingWindowAttention(cfg, SW_D_MODEL).double()
        ref.load_state_dict(att.state_dict(), strict=True)
        assert R == ref.R == (case["window"] - 1) * max(att.dil) + 1
        full = torch.randn(13 + SW_N, SW_D_MODEL, generator=g, dtype=torch.float64)
        with torch.no_grad():
            q, k, v = _sw_qkv(att, full)
            naive = F.linear(naive_sliding(cfg, q, k, v).reshape(len(full), -1), att.out.weight, att.out.bias)
            empty = att.empty_state(torch.float64)
            assert list(empty) == ["k_glob", "k_ring", "v_glob", "v_ring"]
            assert empty["k_glob"].shape == (H, gl, case["dk"]) and empty["v_ring"].shape == (H, R, case["dv"])
            for P in (0, 1, 13):
                _, state = att.recurrent(full[:P], empty, 0) if P else (None, empty)
                x = full[P:]
                # Exact states: both forms write slices of the same projections of x into the slots.
                rec_y, rec_state = recurrent_matches_parallel(att, full, naive, state, P, f"{case}: ", exact_state=True)
                # The state after P + N positions holds exactly the keys/values the README says.
                end = len(full)
                for p in range(max(0, end - R), end):
                    assert_close(rec_state["k_ring"][:, p % R], k[p], 1e-12, f"k_ring slot of {p}")
                    assert_close(rec_state["v_ring"][:, p % R], v[p], 1e-12, f"v_ring slot of {p}")
                for p in range(gl):
                    assert_close(rec_state["k_glob"][:, p], k[p], 1e-12, f"k_glob slot {p}")
                    assert_close(rec_state["v_glob"][:, p], v[p], 1e-12, f"v_glob slot {p}")
                # recur_ref.mixers with the same state (batch 1).
                ref_state = {s: t[None].clone() for s, t in state.items()}
                ref_state["pos"] = torch.tensor(P)
                ref_y, ref_state = ref.prefill(x[None], ref_state)
                assert_close(rec_y, ref_y[0], 1e-12, f"{case}: recurrent vs mixers prefill (P={P})")
                assert int(ref_state["pos"]) == end
                for s in rec_state:   # recur_ref.mixers projects one (1, d) row per step: equal to rounding
                    assert_close_rel(ref_state[s][0], rec_state[s], f"{case}: state {s} vs mixers (P={P})")
            assert_close(ref(full[None])[0], naive, 1e-12, f"{case}: mixers forward vs naive")
            # A short run: the slots never written stay 0 (here R > 3 positions).
            _, short = att.parallel(full[:3], empty, 0, CHUNK)
            for s, t in short.items():
                written = set(range(min(3, R))) if "ring" in s else set(range(min(3, gl)))
                for slot in range(t.shape[1]):
                    assert (slot in written) == bool(t[:, slot].abs().sum() > 0), f"{s} slot {slot}"
            # Non-causal: naive and recur_ref.mixers.
            enc_cfg = {**cfg, "causal": False}
            torch.manual_seed(1)
            enc = SlidingWindowAttention(enc_cfg, SW_D_MODEL).double()
            ref_enc = mixers.SlidingWindowAttention(enc_cfg, SW_D_MODEL).double()
            ref_enc.load_state_dict(enc.state_dict(), strict=True)
            y, _ = enc.noncausal(full, enc.empty_state(torch.float64))
            q, k, v = _sw_qkv(enc, full)
            want = F.linear(naive_sliding(enc_cfg, q, k, v).reshape(len(full), -1), enc.out.weight, enc.out.bias)
            assert_close(y, want, 1e-12, f"{case}: noncausal vs naive")
            assert_close(y, ref_enc(full[None])[0], 1e-12, f"{case}: noncausal vs recur_ref.mixers")
    # The sets themselves on a hand-checked example: w 3, dilation 2, g 1.
    sets = sliding_sets({"heads": 1, "window": 3, "dilation": 2, "global_tokens": 1}, 8)
    assert sets[0, 7] == [0, 3, 5, 7] and sets[0, 2] == [0, 2] and sets[0, 0] == [0], sets
    sets = sliding_sets({"heads": 1, "window": 3, "dilation": 2, "global_tokens": 1, "causal": False}, 8)
    assert sets[0, 4] == [0, 2, 4, 6] and sets[0, 7] == [0, 5, 7] and sets[0, 0] == list(range(8)), sets


AFT_D_MODEL, AFT_HEADS, AFT_DK, AFT_N = 12, 2, 3, 70


def _aft_cfg(causal=True):
    return {"type": "aft_simple", "heads": AFT_HEADS, "dk": AFT_DK, "causal": causal}


def _aft_qkv(att, x):
    return (F.linear(x, att.query.weight, att.query.bias), F.linear(x, att.key.weight, att.key.bias),
            F.linear(x, att.value.weight, att.value.bias))


def aft_simple_forms():
    """AFTSimple's per-stream forms (float64): recurrent == chunked parallel (chunks 1, 7,
    CHUNK, N) == explicit sums, from the empty state (max −inf) and after P = 9 positions;
    the state (num, den relative to the running max) vs its definition and vs
    mixers.AFTSimple's prefill; keys spanning ±1,000 (exp would overflow) stay finite and
    agree with recur_ref.mixers' log-space forward; the non-causal form vs naive and recur_ref.mixers."""
    D = AFT_HEADS * AFT_DK
    g = torch.Generator().manual_seed(6)
    torch.manual_seed(0)
    att = AFTSimple(_aft_cfg(), AFT_D_MODEL).double()
    names = {k: tuple(v.shape) for k, v in att.state_dict().items()}
    assert names == {"query.weight": (D, AFT_D_MODEL), "query.bias": (D,), "key.weight": (D, AFT_D_MODEL),
                     "key.bias": (D,), "value.weight": (D, AFT_D_MODEL), "value.bias": (D,),
                     "out.weight": (AFT_D_MODEL, D), "out.bias": (AFT_D_MODEL,)}, names
    ref = mixers.AFTSimple(_aft_cfg(), AFT_D_MODEL).double()
    ref.load_state_dict(att.state_dict(), strict=True)
    P = 9
    full = torch.randn(P + AFT_N, AFT_D_MODEL, generator=g, dtype=torch.float64)
    with torch.no_grad():
        q, k, v = _aft_qkv(att, full)
        naive = F.linear(naive_aft(q, k, v, True), att.out.weight, att.out.bias)
        empty = att.empty_state(torch.float64)
        assert list(empty) == ["den", "max", "num"] and all(t.shape == (D,) for t in empty.values())
        assert torch.all(empty["max"] == -math.inf) and not empty["num"].any() and not empty["den"].any()
        _, filled = att.recurrent(full[:P], empty)
        for start, state in ((0, empty), (P, filled)):
            x = full[start:]
            rec_y, rec_state = att.recurrent(x, state)
            assert_close(rec_y, naive[start:], 1e-12, f"recurrent vs naive (P={start})")
            for chunk in (1, 7, CHUNK, len(x)):
                par_y, par_state = att.parallel(x, state, chunk)
                assert_close(par_y, rec_y, 1e-12, f"parallel chunk {chunk} vs recurrent (P={start})")
                assert list(par_state) == ["den", "max", "num"]
                # Exact: a max of the same keys (one projection of x) in any order does not round.
                assert torch.equal(par_state["max"], rec_state["max"])
                for s in ("den", "num"):
                    assert_close(par_state[s] / rec_state["den"], rec_state[s] / rec_state["den"], 1e-12,
                                 f"chunk {chunk} state {s}")
            ref_state = {s: t[None].clone() for s, t in state.items()}
            ref_y, ref_state = ref.prefill(x[None], ref_state)
            assert_close(rec_y, ref_y[0], 1e-12, f"recurrent vs mixers.AFTSimple prefill (P={start})")
            for s in rec_state:
                assert_close(rec_state[s], ref_state[s][0], 1e-9, f"state {s} vs mixers.AFTSimple")
            nc_y, nc_state = att.noncausal(x, state)
            assert_close(nc_y[-1], rec_y[-1], 1e-12, "noncausal vs recurrent at the last position")
        # The state after all positions is its definition.
        mx = k.max(0).values   # keys of all P + N rows at once; the state's came in 9 then N rows
        assert_close_rel(rec_state["max"], mx, "max")
        assert_close(rec_state["den"], torch.exp(k - mx).sum(0), 1e-10, "den")
        assert_close(rec_state["num"], (torch.exp(k - mx) * v).sum(0), 1e-10, "num")
        assert_close(ref(full[None])[0], naive, 1e-12, "mixers.AFTSimple forward vs naive")
        # Keys spanning ±1,000: no overflow, same as recur_ref.mixers' logcumsumexp form.
        big = AFTSimple(_aft_cfg(), AFT_D_MODEL).double()
        big.load_state_dict(att.state_dict())
        big.key.weight.mul_(1000.0)
        ref_big = mixers.AFTSimple(_aft_cfg(), AFT_D_MODEL).double()
        ref_big.load_state_dict(big.state_dict())
        assert float(big.key(full).abs().max()) > 750                 # exp(750) overflows float64
        rec_y, _ = big.recurrent(full, big.empty_state(torch.float64))
        assert torch.isfinite(rec_y).all()
        for chunk in (1, 7, CHUNK):
            assert_close(big.parallel(full, big.empty_state(torch.float64), chunk)[0], rec_y, 1e-9, "big keys")
        assert_close(ref_big(full[None])[0], rec_y, 1e-9, "big keys vs mixers.AFTSimple")
        # Non-causal.
        torch.manual_seed(1)
        enc = AFTSimple(_aft_cfg(causal=False), AFT_D_MODEL).double()
        ref_enc = mixers.AFTSimple(_aft_cfg(causal=False), AFT_D_MODEL).double()
        ref_enc.load_state_dict(enc.state_dict(), strict=True)
        y, _ = enc.noncausal(full, enc.empty_state(torch.float64))
        q, k, v = _aft_qkv(enc, full)
        assert_close(y, F.linear(naive_aft(q, k, v, False), enc.out.weight, enc.out.bias), 1e-12, "noncausal vs naive")
        assert_close(y, ref_enc(full[None])[0], 1e-12, "noncausal vs mixers.AFTSimple")


def new_mixer_config_validation():
    """sliding_window and aft_simple keys: bad ones are ValueErrors naming the key."""
    sw = load_config("sliding_window_tokens")
    aft = load_config("aft_simple_tokens")

    with_mixer = functools.partial(config_with_mixer, drop_none=True)

    bad = [  # (config, a word the message must contain)
        (with_mixer(sw, window=None), "window"),
        (with_mixer(sw, window=0), "window"),
        (with_mixer(sw, window=2.0), "window"),
        (with_mixer(sw, dilation=0), "dilation"),
        (with_mixer(sw, dilation=[1]), "dilation"),
        (with_mixer(sw, dilation=[1, 0]), "dilation"),
        (with_mixer(sw, dilation=[1, 2.0]), "dilation"),
        (with_mixer(sw, dilation="1"), "dilation"),
        (with_mixer(sw, global_tokens=-1), "global_tokens"),
        (with_mixer(sw, global_tokens=1.5), "global_tokens"),
        (with_mixer(sw, dv=None), "dv"),
        (with_mixer(sw, eps=1e-6), "eps"),
        (with_mixer(sw, causal="no"), "causal"),
        (with_mixer(aft, dv=16), "dv"),
        (with_mixer(aft, window=4), "window"),
        (with_mixer(aft, dk=0), "dk"),
        (with_mixer(aft, heads=None), "heads"),
        (with_mixer(aft, causal=0), "causal"),
    ]
    expect_rejected(bad)
    for ok in (with_mixer(sw, dilation=None, global_tokens=None), with_mixer(sw, dilation=4, causal=False),
               with_mixer(sw, window=1, global_tokens=0), with_mixer(aft, causal=False)):
        checkpoint.build_model(ok, 0)
    st = checkpoint.build_model(sw, 0).init_state()
    assert [tuple(t.shape) for t in st.layers[0].values()] == [(2, 2, 16), (2, 46, 16), (2, 2, 16), (2, 46, 16)]
    st = checkpoint.build_model(aft, 0).init_state()
    assert list(st.layers[1]) == ["den", "max", "num"] and st.layers[1]["max"].shape == (32,)


def new_mixer_golden_cli():
    """make_golden.py on sliding_window_tokens and aft_simple_tokens: the state records
    (sorted-name order, shapes of the contract, no pos), with layer 0's contents recomputed
    from the input record; global_tokens 0 writes (H, 0, ·) glob records; the non-causal
    sliding-window encoder writes no state records."""
    cases = {"sliding_window_tokens": (60, ["k_glob", "k_ring", "v_glob", "v_ring"]),
             "aft_simple_tokens": (30, ["den", "max", "num"])}
    for name, (steps, state_names) in cases.items():
        records, _, model, config = make_golden(name, steps)
        m = config["mixer"]
        names = state_records(records, config["n_layers"], state_names)
        assert names == sorted(names)
        assert all(records[k].dtype == torch.float64 for k in names)
        model64 = model.double()
        with torch.no_grad():
            h = model64.blocks[0].norm1(model64.input(records["input"], 0))
            mix = model64.blocks[0].mixer
            k, v = mix.key(h), mix.value(h)
        if m["type"] == "sliding_window":
            H, R, gl = m["heads"], mix.R, m["global_tokens"]
            assert R == 46
            k, v = k.view(steps, H, m["dk"]), v.view(steps, H, m["dv"])
            assert records["state.0.k_ring"].shape == (H, R, m["dk"]) and records["state.1.v_ring"].shape == (H, R, m["dv"])
            assert records["state.0.k_glob"].shape == (H, gl, m["dk"]) and records["state.1.v_glob"].shape == (H, gl, m["dv"])
            for p in range(steps - R, steps):
                assert_close(records["state.0.k_ring"][:, p % R], k[p], 1e-12, f"k_ring slot of {p}")
                assert_close(records["state.0.v_ring"][:, p % R], v[p], 1e-12, f"v_ring slot of {p}")
            assert_close(records["state.0.k_glob"], k[:gl].transpose(0, 1), 1e-12, "k_glob")
            assert_close(records["state.0.v_glob"], v[:gl].transpose(0, 1), 1e-12, "v_glob")
        else:
            D = m["heads"] * m["dk"]
            assert all(records[k_].shape == (D,) for k_ in names)
            mx = k.max(0).values   # exact: the model's own modules on the same rows, and a max does not round
            assert torch.equal(records["state.0.max"], mx)
            assert_close(records["state.0.den"], torch.exp(k - mx).sum(0), 1e-10, "den")
            assert_close(records["state.0.num"], (torch.exp(k - mx) * v).sum(0), 1e-10, "num")
    sw = load_config("sliding_window_tokens")
    sw["mixer"]["global_tokens"] = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.bin")
        golden.write(path, golden.compute(checkpoint.build_model(sw, 7), golden.random_inputs(sw, 20, 8), {}))
        back = golden.read(path)
    assert back["state.0.k_glob"].shape == (2, 0, 16) and back["state.1.v_glob"].shape == (2, 0, 16)
    assert back["state.0.k_ring"].shape == (2, 46, 16)
    encoder_writes_no_state("sliding_window_encoder")


AFT_LOCAL_CLASSES = {"aft_local": (AFTLocal, mixers.AFTLocal), "aft_conv": (AFTConv, mixers.AFTConv)}


def _aftl_cfg(typ, window, causal=True):
    return {"type": typ, "heads": AFT_HEADS, "dk": AFT_DK, "window": window, "causal": causal}


def aft_local_forms():
    """AFTLocal / AFTConv's per-stream forms (float64), windows 1 and 5: the tensors (same
    init as recur_ref.mixers' from the same seed); recurrent == chunked parallel (chunks 1, 7,
    CHUNK, N) == explicit sums == mixers.AFTLocal/AFTConv's prefill (same weights via
    load_state_dict), from the empty state and after P = 9 positions, states included; the
    final state vs its definition (num/den/max over p ≤ T − s, rings); keys spanning ±1,000
    stay finite; the non-causal form vs naive and recur_ref.mixers."""
    D = AFT_HEADS * AFT_DK
    g = torch.Generator().manual_seed(16)
    P = 9
    full = torch.randn(P + AFT_N, AFT_D_MODEL, generator=g, dtype=torch.float64)
    T = len(full)
    for typ, (cls, ref_cls) in AFT_LOCAL_CLASSES.items():
        for s in (1, 5):
            cfg = _aftl_cfg(typ, s)
            torch.manual_seed(0)
            att = cls(cfg, AFT_D_MODEL)
            torch.manual_seed(0)
            ref = ref_cls(cfg, AFT_D_MODEL)
            names = {k: tuple(v.shape) for k, v in att.state_dict().items()}
            bias = {"pos_bias": (s,)} if typ == "aft_local" else {"conv_kernel": (AFT_HEADS, s)}
            assert names == {"query.weight": (D, AFT_D_MODEL), "query.bias": (D,), "key.weight": (D, AFT_D_MODEL),
                             "key.bias": (D,), "value.weight": (D, AFT_D_MODEL), "value.bias": (D,),
                             "out.weight": (AFT_D_MODEL, D), "out.bias": (AFT_D_MODEL,), **bias}, names
            # Exact: the same draws from the same seed.
            assert all(torch.equal(v, ref.state_dict()[k]) for k, v in att.state_dict().items()), "init differs"
            att, ref = att.double(), ref.double()
            torch.manual_seed(5)   # a different draw than recur_ref.mixers' init, to be sure load_state_dict carries it
            with torch.no_grad():
                for prm in att.parameters():
                    prm.add_(0.1 * torch.randn_like(prm))
            ref.load_state_dict(att.state_dict(), strict=True)
            W = att.pos_bias if typ == "aft_local" else att.conv_kernel
            what = f"{typ} s={s}"
            with torch.no_grad():
                q, k, v = _aft_qkv(att, full)
                naive = F.linear(naive_aft_local(cfg, W, q, k, v), att.out.weight, att.out.bias)
                empty = att.empty_state(torch.float64)
                assert list(empty) == AFT_LOCAL_STATE
                assert [tuple(t.shape) for t in empty.values()] == [(D,), (s, D), (D,), (D,), (s, D)]
                assert torch.all(empty["max"] == -math.inf)
                assert not any(empty[n].any() for n in ("den", "k_ring", "num", "v_ring"))
                _, filled = att.recurrent(full[:P], empty, 0)
                for start, state in ((0, empty), (P, filled)):
                    x = full[start:]
                    rec_y, rec_state = att.recurrent(x, state, start)
                    assert_close(rec_y, naive[start:], 1e-12, f"{what}: recurrent vs naive (P={start})")
                    for chunk in (1, 7, CHUNK, len(x)):
                        par_y, par_state = att.parallel(x, state, start, chunk)
                        assert_close(par_y, rec_y, 1e-12, f"{what}: parallel chunk {chunk} vs recurrent (P={start})")
                        assert list(par_state) == AFT_LOCAL_STATE
                        for n in ("max", "k_ring", "v_ring"):   # exact: copies and a max of one projection of x
                            assert torch.equal(par_state[n], rec_state[n]), f"{what}: chunk {chunk} state {n}"
                        for n in ("den", "num"):
                            assert_close(par_state[n] / rec_state["den"], rec_state[n] / rec_state["den"], 1e-12,
                                         f"{what}: chunk {chunk} state {n}")
                    ref_state = {n: t[None].clone() for n, t in state.items()}
                    ref_state["pos"] = torch.tensor(start)
                    ref_y, ref_state = ref.prefill(x[None], ref_state)
                    assert_close(rec_y, ref_y[0], 1e-12, f"{what}: recurrent vs {ref_cls.__name__} prefill (P={start})")
                    assert int(ref_state["pos"]) == T
                    # recur_ref.mixers projects one (1, d) row per step: equal to rounding, the max included.
                    for n in rec_state:
                        assert_close(rec_state[n], ref_state[n][0], 1e-12, f"{what}: state {n} vs {ref_cls.__name__}")
                # The state after all T positions is its definition: folded p ≤ T − s, ring slot p mod s = p.
                folded = T - s + 1
                mx = k[:folded].max(0).values   # keys of all T rows at once; the state's came in 9 then N rows
                assert_close_rel(rec_state["max"], mx, f"{what}: max")
                assert_close(rec_state["den"], torch.exp(k[:folded] - mx).sum(0), 1e-10, f"{what}: den")
                assert_close(rec_state["num"], (torch.exp(k[:folded] - mx) * v[:folded]).sum(0), 1e-10, f"{what}: num")
                for p in range(T - s, T):
                    assert_close_rel(rec_state["k_ring"][p % s], k[p], f"{what}: k_ring slot of {p}")
                    assert_close_rel(rec_state["v_ring"][p % s], v[p], f"{what}: v_ring slot of {p}")
                assert_close(ref(full[None])[0], naive, 1e-12, f"{what}: {ref_cls.__name__} forward vs naive")
                # Fewer positions than the window: nothing folded yet (max −inf), unwritten slots 0.
                _, short = att.recurrent(full[:s - 1], empty, 0) if s > 1 else (None, empty)
                assert torch.all(short["max"] == -math.inf) and not short["num"].any()
                assert not short["k_ring"][s - 1:].any()
                # Keys spanning ±1,000: no overflow.
                big = cls(cfg, AFT_D_MODEL).double()
                big.load_state_dict(att.state_dict())
                big.key.weight.mul_(1000.0)
                ref_big = ref_cls(cfg, AFT_D_MODEL).double()
                ref_big.load_state_dict(big.state_dict())
                assert float(big.key(full).abs().max()) > 750
                rec_y, _ = big.recurrent(full, big.empty_state(torch.float64), 0)
                assert torch.isfinite(rec_y).all()
                for chunk in (1, 7, CHUNK):
                    assert_close(big.parallel(full, big.empty_state(torch.float64), 0, chunk)[0], rec_y, 1e-9,
                                 f"{what}: big keys chunk {chunk}")
                assert_close(ref_big(full[None])[0], rec_y, 1e-9, f"{what}: big keys vs {ref_cls.__name__}")
                # Non-causal.
                enc_cfg = _aftl_cfg(typ, s, causal=False)
                torch.manual_seed(1)
                enc = cls(enc_cfg, AFT_D_MODEL).double()
                assert tuple((enc.pos_bias if typ == "aft_local" else enc.conv_kernel).shape) == \
                    ((2 * s - 1,) if typ == "aft_local" else (AFT_HEADS, 2 * s - 1))
                ref_enc = ref_cls(enc_cfg, AFT_D_MODEL).double()
                ref_enc.load_state_dict(enc.state_dict(), strict=True)
                y, _ = enc.noncausal(full, enc.empty_state(torch.float64))
                q, k, v = _aft_qkv(enc, full)
                We = enc.pos_bias if typ == "aft_local" else enc.conv_kernel
                assert_close(y, F.linear(naive_aft_local(enc_cfg, We, q, k, v), enc.out.weight, enc.out.bias), 1e-12,
                             f"{what}: noncausal vs naive")
                assert_close(y, ref_enc(full[None])[0], 1e-12, f"{what}: noncausal vs {ref_cls.__name__}")
                expect_value_error(lambda: enc.noncausal(full, {}, pos=3), "whole utterance",
                                   "non-causal form ran from position 3")


def aft_local_config_validation():
    """aft_local / aft_conv keys (mixers.validate_mixer): bad ones are ValueErrors naming
    the key, also inside a mixed model's list; window 1 and causal false build; the state
    shapes of init_state; a mixed [aft_local, aft_conv] model's parallel form == its steps."""
    loc = load_config("aft_local_tokens")
    conv = load_config("aft_conv_features")

    with_mixer = functools.partial(config_with_mixer, drop_none=True)

    mixed = json.loads(json.dumps(loc))
    mixed["mixer"] = [dict(loc["mixer"]), dict(loc["mixer"], type="aft_conv", window=0)]
    bad = [
        (with_mixer(loc, window=None), "window"),
        (with_mixer(loc, window=0), "window"),
        (with_mixer(loc, window=2.0), "window"),
        (with_mixer(loc, window=True), "window"),
        (with_mixer(loc, dv=16), "dv"),
        (with_mixer(loc, dilation=1), "dilation"),
        (with_mixer(loc, dk=0), "dk"),
        (with_mixer(loc, heads=None), "heads"),
        (with_mixer(loc, causal="no"), "causal"),
        (with_mixer(conv, window=-1), "window"),
        (with_mixer(conv, window=None), "window"),
        (with_mixer(conv, max_length=8), "max_length"),
        (with_mixer(conv, heads=1.5), "heads"),
        (mixed, "mixer[1] (aft_conv): mixer.window"),
    ]
    expect_rejected(bad)
    for ok in (with_mixer(loc, causal=False), with_mixer(loc, window=1), with_mixer(conv, causal=False),
               with_mixer(conv, window=1)):
        checkpoint.build_model(ok, 0)
    st = checkpoint.build_model(loc, 0).init_state()
    assert list(st.layers[1]) == AFT_LOCAL_STATE
    assert [tuple(t.shape) for t in st.layers[1].values()] == [(32,), (8, 32), (32,), (32,), (8, 32)]
    st = checkpoint.build_model(conv, 0).init_state()
    assert [tuple(t.shape) for t in st.layers[0].values()] == [(24,), (5, 24), (24,), (24,), (5, 24)]
    mixed["mixer"][1]["window"] = 3
    mixed_matches_steps(mixed, (AFTLocal, AFTConv), "mixed aft")


def aft_local_golden_cli():
    """make_golden.py on aft_local_tokens and aft_conv_features: the state records
    den, k_ring, max, num, v_ring per layer (sorted, f64, (D,) / (s, D), no pos) with layer
    0's contents recomputed from the input record (folded sums over p ≤ N − s, ring slot
    p mod s = position p); the aft_local encoder writes no state records."""
    for name, steps in (("aft_local_tokens", 30), ("aft_conv_features", 23)):
        records, tensors, model, config = make_golden(name, steps)
        m = config["mixer"]
        D, s = m["heads"] * m["dk"], m["window"]
        names = state_records(records, config["n_layers"], AFT_LOCAL_STATE)
        assert names == sorted(names)
        assert all(records[k].dtype == torch.float64 for k in names)
        for i in range(config["n_layers"]):
            shapes = [tuple(records[f"state.{i}.{n}"].shape) for n in AFT_LOCAL_STATE]
            assert shapes == [(D,), (s, D), (D,), (D,), (s, D)], shapes
            bias = f"blocks.{i}.mixer." + ("pos_bias" if m["type"] == "aft_local" else "conv_kernel")
            assert tuple(tensors[bias].shape) == ((s,) if m["type"] == "aft_local" else (m["heads"], s))
        model64 = model.double()
        with torch.no_grad():
            inp = records["input"]
            h = model64.input(inp.double() if inp.is_floating_point() else inp, 0)
            if config["norm_placement"] == "pre":
                h = model64.blocks[0].norm1(h)
            mix = model64.blocks[0].mixer
            k, v = mix.key(h), mix.value(h)
        folded = steps - s + 1
        mx = k[:folded].max(0).values   # exact: the model's own modules on the same rows, and a max does not round
        assert torch.equal(records["state.0.max"], mx)
        assert_close(records["state.0.den"], torch.exp(k[:folded] - mx).sum(0), 1e-10, f"{name}: den")
        assert_close(records["state.0.num"], (torch.exp(k[:folded] - mx) * v[:folded]).sum(0), 1e-10, f"{name}: num")
        for p in range(steps - s, steps):
            assert_close(records["state.0.k_ring"][p % s], k[p], 1e-12, f"{name}: k_ring slot of {p}")
            assert_close(records["state.0.v_ring"][p % s], v[p], 1e-12, f"{name}: v_ring slot of {p}")
    enc = encoder_writes_no_state("aft_local_encoder")
    assert tuple(enc.state_dict()["blocks.0.mixer.pos_bias"].shape) == (7,)


FLASH_D_MODEL, FLASH_E, FLASH_S, FLASH_C, FLASH_N = 10, 12, 5, 6, 40


def _flash_cfg(causal=True, **kv):
    return {"type": "flash", "expansion_dim": FLASH_E, "qk_dim": FLASH_S, "chunk": FLASH_C, "causal": causal, **kv}


def _flash_parts(att, x):
    u, v, z = (F.silu(F.linear(x, p.weight, p.bias)) for p in (att.u_proj, att.v_proj, att.z_proj))
    qq, kq, ql, kl = (att.qk_gamma[r] * z + att.qk_beta[r] for r in range(4))
    return u, v, qq, kq, ql, kl


def flash_forms():
    """FLASH's per-stream forms (float64): same tensors and seeded init as mixers.FLASH;
    recurrent == chunked parallel (chunks 1, 7, CHUNK, N) == explicit sums == mixers.FLASH's
    prefill (outputs and state), from the empty state and after P positions (P = C: at a group
    boundary, P = 9, 3: mid-group), also split into uneven pieces; the buffers hold slot
    p mod C of the last write (stale slots from the previous group); a non-default scale; the
    non-causal form vs naive and mixers.FLASH's forward."""
    g = torch.Generator().manual_seed(6)
    full = torch.randn(9 + FLASH_N, FLASH_D_MODEL, generator=g, dtype=torch.float64)
    for cfg in (_flash_cfg(), _flash_cfg(scale=0.37)):
        torch.manual_seed(0)
        att = FLASH(cfg, FLASH_D_MODEL).double()
        torch.manual_seed(0)
        ref = mixers.FLASH(cfg, FLASH_D_MODEL).double()
        got = {k: tuple(v.shape) for k, v in att.state_dict().items()}
        E, s, C, d = FLASH_E, FLASH_S, FLASH_C, FLASH_D_MODEL
        assert got == {"u_proj.weight": (E, d), "u_proj.bias": (E,), "v_proj.weight": (E, d), "v_proj.bias": (E,),
                       "z_proj.weight": (s, d), "z_proj.bias": (s,), "out.weight": (d, E), "out.bias": (d,),
                       "qk_gamma": (4, s), "qk_beta": (4, s), "rel_bias": (C,)}, got
        for k, v in ref.state_dict().items():      # the same init from the same seed: exact
            assert torch.equal(v, att.state_dict()[k]), f"init of {k} differs from mixers.FLASH"
        ref.load_state_dict(att.state_dict(), strict=True)
        with torch.no_grad():
            u, v, qq, kq, ql, kl = _flash_parts(att, full)
            naive = F.linear(u * naive_flash(cfg, qq, kq, ql, kl, v, att.rel_bias), att.out.weight, att.out.bias)
            empty = att.empty_state(torch.float64)
            assert list(empty) == ["S", "kl_buf", "kq_buf", "v_buf"] and not any(t.any() for t in empty.values())
            assert [tuple(t.shape) for t in empty.values()] == [(s, E), (C, s), (C, s), (C, E)]
            for P in (0, 3, C, 9):
                state = empty if P == 0 else att.recurrent(full[:P], empty, 0)[1]
                x = full[P:]
                rec_y, rec_state = recurrent_matches_parallel(att, full, naive, state, P)
                # Uneven pieces (each continuing from the last) give the same outputs and state.
                ys, st = uneven_pieces(att, full, state, P)
                assert_close(ys, rec_y, 1e-12, f"uneven pieces (P={P})")
                for name in rec_state:
                    assert_close(st[name], rec_state[name], 1e-12, f"uneven pieces state {name}")
                ref_state = {k: t[None].clone() for k, t in state.items()}
                ref_state["pos"] = torch.tensor(P)
                ref_y, ref_state = ref.prefill(x[None], ref_state)
                assert_close(rec_y, ref_y[0], 1e-12, f"recurrent vs mixers.FLASH prefill (P={P})")
                for name in rec_state:
                    assert_close(rec_state[name], ref_state[name][0], 1e-12, f"state {name} vs mixers.FLASH")
            # The final state is its definition: S over completed groups, slot p mod C of the last write.
            n = len(full)
            done = (n // C) * C
            assert_close(rec_state["S"], kl[:done].T @ v[:done], 1e-12, "S")
            for j in range(C):   # kq, kl, v project all rows at once; the state's came in 9 then N rows
                p = max(q for q in range(n) if q % C == j)
                assert_close_rel(rec_state["kq_buf"][j], kq[p], f"kq slot {j}")
                assert_close_rel(rec_state["kl_buf"][j], kl[p], f"kl slot {j}")
                assert_close_rel(rec_state["v_buf"][j], v[p], f"v slot {j}")
            assert n % C != 0 and max(q for q in range(n) if q % C == C - 1) < done   # some slots are stale
            assert_close(ref(full[None])[0], naive, 1e-12, "mixers.FLASH forward vs naive")
        # Non-causal.
        torch.manual_seed(1)
        enc_cfg = {**cfg, "causal": False}
        enc = FLASH(enc_cfg, FLASH_D_MODEL).double()
        assert enc.rel_bias.shape == (2 * C - 1,)
        ref_enc = mixers.FLASH(enc_cfg, FLASH_D_MODEL).double()
        ref_enc.load_state_dict(enc.state_dict(), strict=True)
        with torch.no_grad():
            for n in (len(full), C, 1):
                x = full[:n]
                y, st = enc.noncausal(x, enc.empty_state(torch.float64))
                u, v, qq, kq, ql, kl = _flash_parts(enc, x)
                want = F.linear(u * naive_flash(enc_cfg, qq, kq, ql, kl, v, enc.rel_bias), enc.out.weight, enc.out.bias)
                assert_close(y, want, 1e-12, f"noncausal vs naive (N={n})")
                assert_close(y, ref_enc(x[None])[0], 1e-12, f"noncausal vs mixers.FLASH (N={n})")
        expect_value_error(lambda: enc.noncausal(full, enc.empty_state(torch.float64), pos=3), (),
                           "non-causal flash accepted pos 3")


def flash_config_validation():
    """flash keys: bad ones are ValueErrors naming the key; the state's names and shapes."""
    fl = load_config("flash_tokens")

    with_mixer = functools.partial(config_with_mixer, fl, drop_none=True)

    bad = [(with_mixer(chunk=None), "chunk"), (with_mixer(chunk=0), "chunk"), (with_mixer(chunk=4.0), "chunk"),
           (with_mixer(expansion_dim=None), "expansion_dim"), (with_mixer(expansion_dim=0), "expansion_dim"),
           (with_mixer(qk_dim=None), "qk_dim"), (with_mixer(qk_dim=-2), "qk_dim"),
           (with_mixer(scale=0), "scale"), (with_mixer(scale=-1.0), "scale"), (with_mixer(scale="x"), "scale"),
           (with_mixer(causal="yes"), "causal"), (with_mixer(heads=2), "heads"), (with_mixer(max_length=8), "max_length")]
    expect_rejected(bad)
    for ok in (with_mixer(scale=0.5), with_mixer(causal=False), with_mixer(chunk=1)):
        checkpoint.build_model(ok, 0)
    st = checkpoint.build_model(fl, 0).init_state()
    assert list(st.layers[1]) == ["S", "kl_buf", "kq_buf", "v_buf"]
    assert [tuple(t.shape) for t in st.layers[0].values()] == [(16, 64), (16, 16), (16, 16), (16, 64)]


def flash_golden_cli():
    """make_golden.py on flash_tokens and flash_features: the state records (sorted names,
    the contract's shapes, no pos), layer 0's buffers and S recomputed from the input record;
    the non-causal flash encoder writes no state records."""
    for name, steps in (("flash_tokens", 40), ("flash_features", 30)):
        records, _, model, config = make_golden(name, steps)
        m = config["mixer"]
        E, s, C = m["expansion_dim"], m["qk_dim"], m["chunk"]
        names = state_records(records, config["n_layers"], ("S", "kl_buf", "kq_buf", "v_buf"))
        assert names == sorted(names) and all(records[k].dtype == torch.float64 for k in names)
        for i in range(config["n_layers"]):
            shapes = [tuple(records[f"state.{i}.{n}"].shape) for n in ("S", "kl_buf", "kq_buf", "v_buf")]
            assert shapes == [(s, E), (C, s), (C, s), (C, E)], shapes
        model64 = model.double()
        with torch.no_grad():
            x = records["input"]
            h = model64.input(x.double() if x.is_floating_point() else x, 0)
            h = model64.blocks[0].norm1(h) if config["norm_placement"] == "pre" else h
            u, v, qq, kq, ql, kl = _flash_parts(model64.blocks[0].mixer, h)
        done = (steps // C) * C
        assert steps % C != 0
        assert_close(records["state.0.S"], kl[:done].T @ v[:done], 1e-12, "S")
        for p in range(max(0, steps - C), steps):
            assert_close(records["state.0.kq_buf"][p % C], kq[p], 1e-12, f"kq slot of {p}")
            assert_close(records["state.0.kl_buf"][p % C], kl[p], 1e-12, f"kl slot of {p}")
            assert_close(records["state.0.v_buf"][p % C], v[p], 1e-12, f"v slot of {p}")
    encoder_writes_no_state("flash_encoder")


# ---------------------------------------------------------------- retnet

RN_D_MODEL, RN_N = 10, 41


def _rn_cfg(**kv):
    return {"type": "retnet", "heads": 3, "dk": 4, "dv": 5, "decay": [0.5, 0.9, 0.999], **kv}


def _rn_parts(att, x, pos=0):
    """q, k (k/√dk), v (N, H, ·) of a RetNet mixer, unrotated, written out from the README."""
    n = len(x)
    q = F.linear(x, att.query.weight, att.query.bias).view(n, att.heads, att.dk)
    k = F.linear(x, att.key.weight, att.key.bias).view(n, att.heads, att.dk) / math.sqrt(att.dk)
    v = F.linear(x, att.value.weight, att.value.bias).view(n, att.heads, att.dv)
    return q, k, v


def retnet_forms():
    """RetNet's per-stream forms (float64): the tensors (query, key, value, gate, out; the decays
    come from the config, float32-rounded, not from the weights); recurrent == chunked parallel
    (chunks 1, 7, CHUNK, N) == explicit sums, from the empty state and after P positions (the
    rotation continues at P), also in uneven pieces; == the batched prefill; the state is its
    definition S = Σ_p γ^{N−1−p} k̃_pᵀ v_p; a 2-dim head (one frequency) and the default decays."""
    g = torch.Generator().manual_seed(12)
    full = torch.randn(RN_N, RN_D_MODEL, generator=g, dtype=torch.float64)
    for cfg in (_rn_cfg(), {"type": "retnet", "heads": 2, "dk": 2, "dv": 3, "eps": 1e-4}):
        torch.manual_seed(0)
        att = RetNet(cfg, RN_D_MODEL)
        H, dk, dv, d = cfg["heads"], cfg["dk"], cfg["dv"], RN_D_MODEL
        got = {k: tuple(v.shape) for k, v in att.state_dict().items()}
        assert got == {"query.weight": (H * dk, d), "query.bias": (H * dk,), "key.weight": (H * dk, d),
                       "key.bias": (H * dk,), "value.weight": (H * dv, d), "value.bias": (H * dv,),
                       "gate.weight": (H * dv, d), "gate.bias": (H * dv,), "out.weight": (d, H * dv),
                       "out.bias": (d,)}, got
        assert att.decay.dtype == torch.float32 and att.decay.tolist() == naive_retnet_decays(cfg)
        att = att.double()
        assert att.decay.dtype == torch.float64 and att.decay.tolist() == naive_retnet_decays(cfg)   # exact
        if "decay" in cfg:
            assert att.decay[1].item() != 0.9, "0.9 is not a float32: the decay must be its float32 value"
        else:
            assert att.decay.tolist() == [1 - 2.0 ** -5, 1 - 2.0 ** -6]
        with torch.no_grad():
            q, k, v = _rn_parts(att, full)
            o = naive_retnet(cfg, q, k, v)
            o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + cfg.get("eps", 1e-6))
            naive = F.linear(F.silu(F.linear(full, att.gate.weight, att.gate.bias)) * o.reshape(RN_N, -1),
                             att.out.weight, att.out.bias)
            empty = att.empty_state(torch.float64)
            assert list(empty) == ["S"] and tuple(empty["S"].shape) == (H, dk, dv) and not empty["S"].any()
            for P in (0, 3, 17):
                state = empty if P == 0 else att.recurrent(full[:P], empty, 0)[1]
                x = full[P:]
                rec_y, rec_state = recurrent_matches_parallel(att, full, naive, state, P)
                ys, st = uneven_pieces(att, full, state, P)
                assert_close(ys, rec_y, 1e-12, f"uneven pieces (P={P})")
                assert_close(st["S"], rec_state["S"], 1e-12, f"uneven pieces state (P={P})")
                ref_y, ref_state = att.prefill(x[None], {"S": state["S"][None].clone(), "pos": torch.tensor(P)})
                assert_close(ref_y[0], rec_y, 1e-12, f"batched prefill (P={P})")
                assert_close(ref_state["S"][0], rec_state["S"], 1e-12, "batched prefill state")
                assert int(ref_state["pos"]) == len(full)
            # The final state is its definition, with the rotation of each key's own position.
            c, s = mixers.retnet_angles(dk, 0, RN_N, torch.float64)
            kr = mixers.retnet_rotate(k, c, s)
            w = att.decay[None, :] ** torch.arange(RN_N - 1, -1, -1, dtype=torch.float64)[:, None]   # (N, H)
            assert_close(rec_state["S"], torch.einsum("ph,phc,phm->hcm", w, kr, v), 1e-12, "S")


def retnet_config_validation():
    """retnet keys (mixers.validate_mixer) inside a model: bad ones are ValueErrors naming the
    key, also in a mixed model's list; no causal key; a mixed [retnet, flash] model's parallel
    form == its steps; [retnet, linformer] is the mixed-causality error."""
    tok = load_config("retnet_tokens")
    feat = load_config("retnet_features")

    with_mixer = config_with_mixer

    mixed = json.loads(json.dumps(tok))
    mixed["mixer"] = [dict(tok["mixer"]), dict(tok["mixer"], dk=7)]
    bad = [(with_mixer(tok, dk=7), "dk"), (with_mixer(tok, drop=("dk",)), "dk"), (with_mixer(tok, dv=0), "dv"),
           (with_mixer(tok, heads=0), "heads"), (with_mixer(tok, decay=[0.9]), "decay"),
           (with_mixer(feat, decay=[0.5, 0.9, 1]), "decay"), (with_mixer(feat, decay=[0.5, 0.9, -0.1]), "decay"),
           (with_mixer(feat, decay=None), "decay"), (with_mixer(feat, eps=0), "eps"),
           (with_mixer(feat, eps=-1e-6), "eps"), (with_mixer(tok, causal=True), "causal"),
           (with_mixer(tok, causal=False), "causal"), (with_mixer(tok, window=4), "window"),
           (with_mixer(tok, feature_map="relu"), "feature_map"),
           (mixed, "mixer[1] (retnet): mixer.dk must be even")]
    expect_rejected(bad)
    for ok in (with_mixer(tok, eps=1e-3), with_mixer(feat, drop=("decay", "eps")), with_mixer(tok, dk=2),
               with_mixer(tok, decay=[0.1, 0.2, 0.3, 0.999999])):
        checkpoint.build_model(ok, 0)
    st = checkpoint.build_model(feat, 0).init_state()
    assert [list(layer) for layer in st.layers] == [["S"]] * 3
    assert [tuple(layer["S"].shape) for layer in st.layers] == [(3, 6, 8)] * 3
    mixed["mixer"][1] = {"type": "flash", "expansion_dim": 32, "qk_dim": 8, "chunk": 5}
    mixed_matches_steps(mixed, (RetNet, FLASH), "mixed retnet")
    mixed["mixer"][1] = {"type": "linformer", "heads": 2, "dk": 4, "dv": 4, "seq_len": 64, "proj_dim": 8}
    expect_rejected([(mixed, "mixer[1]: causal false differs from mixer[0] (causal true)")])


def token_shift_forms():
    """TokenShift (§13) equals the libraries' own shifts, transcribed: FLASH-pytorch's
    shift_tokens (chunk(2), the first chunk padded one position down) and performer-pytorch's
    PreShiftTokens (⌊d/len(shifts)⌋ features per shift, F.pad by each amount, the rest passed),
    causal (0, 1) and non-causal (−1, 0, 1), for odd and even d; pieces with carries == whole."""
    from recur_ref.model import TokenShift
    g = torch.Generator().manual_seed(11)
    for d in (31, 32, 33):
        x = torch.randn(9, d, generator=g, dtype=torch.float64)
        x_shift, x_pass = x.chunk(2, dim=-1)
        flash = torch.cat((F.pad(x_shift, (0, 0, 1, -1), value=0.0), x_pass), -1)
        assert torch.equal(TokenShift({"segments": [[(d + 1) // 2, 1]]})(x, None)[0], flash), d
        for shifts in ((0, 1), (-1, 0, 1)):
            per = d // len(shifts)
            split = x.split(per, dim=-1)
            moved = [t if a == 0 else F.pad(t, (0, 0, a, -a), value=0.0) for t, a in zip(split, shifts)]
            performer = torch.cat((*moved, *split[len(shifts):]), -1)
            ours = TokenShift({"segments": [[per, a] for a in shifts]})(x, None)[0]
            assert torch.equal(ours, performer), (d, shifts)
        # Causal pieces, each from the carry the one before left, give the whole.
        ts = TokenShift({"segments": [[5, 1], [3, 0], [7, 1]], "ffn": True})
        assert ts.carried == 12
        whole, last = ts(x, torch.zeros(12, dtype=torch.float64))
        assert torch.equal(whole, ts(x, None)[0])
        carry, outs = torch.zeros(12, dtype=torch.float64), []
        for a, b in ((0, 1), (1, 4), (4, 9)):
            y, carry = ts(x[a:b], carry)
            outs.append(y)
        assert torch.equal(torch.cat(outs), whole) and torch.equal(carry, last)
        assert torch.equal(last, torch.cat([x[-1, :5], x[-1, 8:15]]))


def token_shift_config_validation():
    """The top-level "token_shift" key: bad values are ValueErrors naming it; the carries are
    state after the mixer's (causal only); a token-shifted model's parallel form == its steps."""
    tok = load_config("flash_shift_tokens")
    enc = load_config("softmax_shift_encoder")

    def with_shift(base, **kv):
        c = json.loads(json.dumps(base))
        c["token_shift"] = {k: v for k, v in kv.items() if v is not None}
        return c

    post = with_shift(tok, segments=[[16, 1]])
    post["norm_placement"] = "post"
    bad = [(with_shift(tok, segments=[]), "token_shift.segments must be a non-empty list"),
           (with_shift(tok), "token_shift must be a dict with the key segments"),
           (with_shift(tok, segments=[[16, 1]], shifts=[1]), "token_shift must be a dict"),
           (with_shift(tok, segments=[[16, 1, 0]]), "token_shift.segments\\[0\\] must be a pair"),
           (with_shift(tok, segments=[[16, True]]), "token_shift.segments\\[0\\] must be a pair"),
           (with_shift(tok, segments=[[0, 1]]), "token_shift.segments\\[0\\] has width 0"),
           (with_shift(tok, segments=[[4, 0], [8, 2]]), "token_shift.segments\\[1\\] shifts by 2"),
           (with_shift(tok, segments=[[16, 1], [16, 0]]), "token_shift.segments cover 32 features, more than d_model"),
           (with_shift(tok, segments=[[16, -1]]), "token_shift.segments\\[0\\] takes the next position"),
           (with_shift(tok, segments=[[16, 1]], ffn=1), "token_shift.ffn must be true or false"),
           (post, "token_shift needs norm_placement 'pre'")]
    for config, words in bad:
        msg = model_error(config, f"accepted token_shift {config.get('token_shift')}")
        assert re.search(words, msg), f"{msg!r} lacks {words!r}"
    st = checkpoint.build_model(with_shift(tok, segments=[[5, 1], [4, 0], [6, 1]], ffn=True), 0).init_state()
    assert list(st.layers[0]) == ["S", "kl_buf", "kq_buf", "v_buf", "shift.mixer", "shift.ffn"]
    assert tuple(st.layers[0]["shift.ffn"].shape) == (11,)
    # An encoder carries nothing: it sees whole utterances.
    assert all(not set(layer) & {"shift.mixer", "shift.ffn"} for layer in checkpoint.build_model(enc, 0).init_state().layers)
    model = checkpoint.build_model(with_shift(tok, segments=[[3, 0], [9, 1], [2, 0]], ffn=True), 1).double()
    x = golden.random_inputs(checkpoint.recur_config(tok), 40, 2)
    parallel_matches_steps(model, x, (1, 7, 40), "token shift")


def retnet_golden_cli():
    """make_golden.py on retnet_tokens (1,200 positions, the parity length) and retnet_features
    (300): one state record S per layer, (H, dk, dv) f64, and layer 0's S recomputed from the
    input record as Σ_p γ^{N−1−p} k̃_pᵀ v_p; outputs finite and not degenerate."""
    for name, steps in (("retnet_tokens", 1200), ("retnet_features", 300)):
        records, _, model, config = make_golden(name, steps)
        m = config["mixer"]
        names = state_records(records, config["n_layers"], ["S"])
        assert all(tuple(records[k].shape) == (m["heads"], m["dk"], m["dv"]) and records[k].dtype == torch.float64
                   for k in names)
        o = records["output"]
        assert torch.isfinite(o).all() and float(o.std(0).mean()) > 0.1, f"{name}: degenerate output"
        model64 = model.double()
        with torch.no_grad():
            x = records["input"]
            h = model64.input(x.double() if x.is_floating_point() else x, 0)
            att = model64.blocks[0]
            h = att.norm1(h) if config["norm_placement"] == "pre" else h
            q, k, v = _rn_parts(att.mixer, h)
            c, s = mixers.retnet_angles(m["dk"], 0, steps, torch.float64)
            kr = mixers.retnet_rotate(k, c, s)
            w = att.mixer.decay[None, :] ** torch.arange(steps - 1, -1, -1, dtype=torch.float64)[:, None]
        assert_close_rel(records["state.0.S"], torch.einsum("ph,phc,phm->hcm", w, kr, v), "state.0.S")


# ---------------------------------------------------------------- mixed models


def mixed_model_forms():
    """mixed_tokens / mixed_features ("mixer" a list, block i using entry i): parallel (chunks 1,
    7, 64, N) == steps, and both == a per-block composition: input adapter, then for each block i
    a Block of the single-mixer config {"mixer": entry i} holding block i's weights, run alone on
    the previous block's output from its own init state, then final norm and head. Each layer's
    state is that single-mixer block's (names, shapes, values)."""
    for name, n in (("mixed_tokens", 150), ("mixed_features", 100)):
        cfg = load_config(name)
        entries = mixer_configs(cfg)
        assert isinstance(cfg["mixer"], list) and len(entries) == cfg["n_layers"]
        assert len({m["type"] for m in entries}) >= 3, "a mixed config mixes at least 3 mixer types"
        model = checkpoint.build_model(cfg, SEED).double()
        x = golden.random_inputs(cfg, n, SEED + 1)
        with torch.no_grad():
            ref = step_loop(model, x)
            for chunk in (1, 7, CHUNK, n):
                assert_same_run(model(x, return_layers=True, chunk=chunk), ref, 1e-9, f"{name}: chunk {chunk} vs steps")
            for chunk in (None, 7, n):   # None: the RNN form
                h = model.input(x.double() if x.is_floating_point() else x, 0)
                layers, states = [], []
                for i, m in enumerate(entries):
                    single = {**cfg, "mixer": m}
                    block = Block(single, m).double()
                    assert type(block.mixer) is type(model.blocks[i].mixer), f"{name}: block {i} mixer class"
                    block.load_state_dict(model.blocks[i].state_dict(), strict=True)
                    s0 = RecurModel(single).double().init_state().layers[i]
                    assert list(s0) == STATE_NAMES[m["type"]] == list(model.init_state().layers[i])
                    h, st = block(h, s0, chunk, 0)
                    layers.append(h)
                    states.append(st)
                out = model.final_norm(h) if model.final_norm is not None else h
                out = model.head(out) if model.head is not None else out
                if cfg["head"] and cfg["head"]["activation"] == "log_softmax":
                    out = torch.log_softmax(out, -1)
                assert_same_run((out, layers, type(ref[2])(n, states)), ref, 1e-9, f"{name}: composition ({chunk})")


def mixed_config_validation():
    """The list form: a wrong length names both lengths; a bad entry is a ValueError naming the
    block, its type and the key; blocks must agree on causality; a one-dict "mixer" keeps its
    messages; the list's entries are validated exactly as one dict is."""
    base = load_config("mixed_tokens")

    def with_entry(i, **kv):
        c = json.loads(json.dumps(base))
        c["mixer"][i].update(kv)
        c["mixer"][i] = {k: v for k, v in c["mixer"][i].items() if v is not None}
        return c

    short = {**base, "mixer": base["mixer"][:3]}
    e = model_error(short)
    assert e == "recur config: mixer is a list of 3 entries, expected one per block (n_layers = 4)", e
    e = model_error({**base, "n_layers": 3})
    assert "4 entries" in e and "n_layers = 3" in e, e
    assert "0 entries" in model_error({**base, "mixer": []})
    bad = [(with_entry(1, window=0), "recur config: mixer[1] (sliding_window): mixer.window must be a positive integer"),
           (with_entry(1, dilation=[1, 2, 3]), "recur config: mixer[1] (sliding_window): mixer.dilation has 3 entries"),
           (with_entry(3, chunk=None), "recur config: mixer[3] (flash): missing keys ['chunk']"),
           (with_entry(3, heads=2), "recur config: mixer[3] (flash): unknown keys ['heads']"),
           (with_entry(2, eps=0), "recur config: mixer[2] (linear_attention): mixer.eps must be > 0"),
           (with_entry(2, feature_map="tanh"), "recur config: mixer[2] (linear_attention): mixer.feature_map must be"),
           (with_entry(2, n_features=8), "recur config: mixer[2] (linear_attention): keys ['n_features'] are only"),
           (with_entry(0, type="mega"), "recur config: mixer[0] (mega): mixer.type must be one of"),
           (with_entry(0, causal="yes"), "recur config: mixer[0] (sliding_window): mixer.causal must be true or false"),
           ({**base, "mixer": base["mixer"][:2] + [None] + base["mixer"][3:]}, "recur config: mixer[2]: mixer.type must"),
           ({**base, "mixer": base["mixer"][:1] + [{"heads": 2}] + base["mixer"][2:]}, "recur config: mixer[1]: mixer.type")]
    for config, start in bad:
        e = model_error(config)
        assert e.startswith(start), f"message {e!r} does not start with {start!r}"
    # Causality: all causal or all non-causal.
    e = model_error(with_entry(2, causal=False))
    assert e == ("recur config: mixer[2]: causal false differs from mixer[0] (causal true): all blocks must be "
                 "causal, or all non-causal"), e
    e = model_error(with_entry(0, causal=False))
    assert e.startswith("recur config: mixer[1]: causal true differs from mixer[0] (causal false)"), e
    enc = json.loads(json.dumps(base))
    for m in enc["mixer"]:
        m["causal"] = False
    model = RecurModel(enc)
    assert not model.causal and [type(b.mixer).__name__ for b in model.blocks] == \
        ["SlidingWindowAttention", "SlidingWindowAttention", "LinearAttention", "FLASH"]
    ok = with_entry(2, causal=True)   # explicit true agrees with the default
    assert RecurModel(ok).causal
    # The one-dict form keeps its messages (no block index).
    single = {**base, "mixer": {**base["mixer"][1], "window": 0}}
    e = model_error(single)
    assert e.startswith("recur config: mixer (sliding_window): mixer.window must be"), e
    assert model_error({**base, "mixer": "sliding_window"}).startswith("recur config: mixer.type must be one of")
    # One list entry per block == the same dict repeated: same weights (same RNG order), same outputs.
    feat = load_config("mixed_features")
    uniform = {**feat, "mixer": feat["mixer"][1]}
    listed = {**feat, "mixer": [feat["mixer"][1]] * feat["n_layers"]}
    a, b = checkpoint.build_model(uniform, 3), checkpoint.build_model(listed, 3)
    assert list(a.state_dict()) == list(b.state_dict())
    assert all(torch.equal(t, b.state_dict()[k]) for k, t in a.state_dict().items())   # exact: the same draws


def mixed_golden_cli():
    """make_golden.py on both mixed configs: each layer's state records are its own mixer's
    (names in the per-layer order, shapes), with no pos record; the golden equals the model."""
    shapes = {"mixed_tokens": [[(2, 1, 16), (2, 8, 16), (2, 1, 16), (2, 8, 16)],
                               [(2, 1, 16), (2, 15, 16), (2, 1, 16), (2, 15, 16)],
                               [(2, 16, 16), (2, 16)],
                               [(16, 64), (16, 16), (16, 16), (16, 64)]],
              "mixed_features": [[(24,), (24,), (24,)], [(2, 33, 12), (2, 33, 12)], [(3, 8, 8), (3, 8)]]}
    for name, steps in (("mixed_tokens", 40), ("mixed_features", 33)):
        records, tensors, model, config = make_golden(name, steps)
        assert config == load_config(name)
        assert set(tensors) == set(expected_tensors(config))
        entries = mixer_configs(config)
        want = [f"state.{i}.{s}" for i, m in enumerate(entries) for s in STATE_NAMES[m["type"]]]
        assert list(records) == ["meta", "input", "output"] + [f"layer.{i}" for i in range(len(entries))] + want, \
            list(records)
        got = [[tuple(records[f"state.{i}.{s}"].shape) for s in STATE_NAMES[m["type"]]] for i, m in enumerate(entries)]
        assert got == shapes[name], got
        with torch.no_grad():
            out, layers, state = model.double()(records["input"], return_layers=True)
        # Exact: make_golden ran this same forward on the same weights and input; the file holds its bytes.
        assert torch.equal(records["output"], out)
        for i, m in enumerate(entries):
            for s in STATE_NAMES[m["type"]]:
                assert torch.equal(records[f"state.{i}.{s}"], state.layers[i][s]), f"state.{i}.{s}"


# ---------------------------------------------------------------- linformer

LF_D_MODEL = 12


def _lf_cfg(sharing, n=20, k=6, **kv):
    return {"type": "linformer", "heads": 2, "dk": 5, "dv": 4, "seq_len": n, "proj_dim": k, "sharing": sharing, **kv}


def linformer_forms():
    """Linformer's per-stream forms (float64), every sharing mode: the tensors of the contract,
    the same seeded init as mixers.Linformer; noncausal == mixers.Linformer's forward with the
    same weights == explicit sums, for N < seq_len (first N columns) and N == seq_len; N >
    seq_len raises naming seq_len; parallel / recurrent raise "no recurrent form"; no state."""
    g = torch.Generator().manual_seed(11)
    n, k, d = 20, 6, LF_D_MODEL
    full = torch.randn(n + 1, d, generator=g, dtype=torch.float64)
    shapes = {"none": {"E": (2, k, n), "F": (2, k, n)}, "headwise": {"E": (k, n), "F": (k, n)},
              "kv": {"E": (k, n)}, "layerwise": {"E": (k, n)}}
    for sharing in mixers.LINFORMER_SHARING:
        cfg = _lf_cfg(sharing)
        for c in (cfg, {**cfg, "causal": False}):
            torch.manual_seed(0)
            att = Linformer(c, d).double()
            torch.manual_seed(0)
            ref = mixers.Linformer(c, d).double()
            got = {name: tuple(t.shape) for name, t in att.state_dict().items()}
            want = {"query.weight": (10, d), "query.bias": (10,), "key.weight": (10, d), "key.bias": (10,),
                    "value.weight": (8, d), "value.bias": (8,), "out.weight": (d, 8), "out.bias": (d,),
                    **shapes[sharing]}
            assert got == want, f"{sharing}: {got}"
            for name, t in ref.state_dict().items():   # the same init from the same seed
                assert torch.equal(t, att.state_dict()[name]), f"{sharing}: init of {name} differs from mixers.Linformer"
            assert not att.causal and att.empty_state(torch.float64) == {}
            with torch.no_grad():
                for N in (n, 13, 1):
                    x = full[:N]
                    y, st = att.noncausal(x, {})
                    assert st == {}
                    assert_close(y, ref(x[None])[0], 1e-12, f"{sharing}: noncausal vs mixers.Linformer (N={N})")
                    q, kk, v = (F.linear(x, p.weight, p.bias).view(N, 2, -1) for p in (att.query, att.key, att.value))
                    E = att.E[..., :N]
                    Fm = att.F[..., :N] if hasattr(att, "F") else None
                    want_y = F.linear(naive_linformer(c, E, Fm, q, kk, v).reshape(N, -1), att.out.weight, att.out.bias)
                    assert_close(y, want_y, 1e-12, f"{sharing}: noncausal vs explicit sums (N={N})")
                for call in (lambda: att.noncausal(full, {}), lambda: ref(full[None])):
                    expect_value_error(call, ("seq_len", str(n)), f"{sharing}: accepted N = {n + 1} > seq_len {n}")
                for call in (lambda: att.parallel(full[:4], {}, chunk=2), lambda: att.recurrent(full[:4], {}),
                             lambda: att.parallel(full[:4], {}, 0, 2)):
                    expect_value_error(call, "no recurrent form", f"{sharing}: a linformer ran a causal form")
                expect_value_error(lambda: att.noncausal(full[:4], {}, pos=3), (), "linformer accepted pos 3")
    # Inside a model: a whole utterance longer than seq_len is a ValueError naming seq_len; no step.
    cfg = load_config("linformer_shared")
    model = checkpoint.build_model(cfg, 0).double()
    x = golden.random_inputs(cfg, 129, 1)
    with torch.no_grad():
        for call in (lambda: model(x), lambda: model(x, chunk=1)):
            expect_value_error(call, "seq_len 128", "model accepted 129 > seq_len 128 positions")
        expect_value_error(lambda: model.step(x[0], model.init_state()), "no recurrent form",
                           "a linformer model stepped")
        assert model.init_state().layers == [{}, {}, {}] and not model.causal


def linformer_config_validation():
    """linformer keys: bad ones are ValueErrors naming the key; causal defaults to false (true is
    rejected); mixing with causal blocks is the mixed-causality error; layerwise blocks must agree
    on seq_len and proj_dim."""
    base = load_config("linformer_features")

    with_mixer = functools.partial(config_with_mixer, base, drop_none=True)

    bad = [(with_mixer(causal=True), "causal"), (with_mixer(causal="no"), "causal"),
           (with_mixer(sharing="all"), "sharing"), (with_mixer(sharing=None, causal=None, seq_len=None), "seq_len"),
           (with_mixer(seq_len=0), "seq_len"), (with_mixer(seq_len=2.5), "seq_len"),
           (with_mixer(proj_dim=0), "proj_dim"), (with_mixer(proj_dim=None), "proj_dim"),
           (with_mixer(heads=0), "heads"), (with_mixer(dv=None), "dv"), (with_mixer(window=4), "window"),
           (with_mixer(eps=1e-6), "eps")]
    expect_rejected(bad)
    e = model_error(with_mixer(causal=True))
    assert e == "recur config: mixer (linformer): linformer is encoder-only: mixer.causal must be false", e
    for ok in (with_mixer(causal=None), with_mixer(sharing=None), with_mixer(sharing="kv"),
               with_mixer(sharing="headwise"), with_mixer(sharing="layerwise", proj_dim=1)):
        model = checkpoint.build_model(ok, 0)
        assert not model.causal
    # Mixed models: linformer (non-causal by default) next to causal blocks is the causality error.
    soft = {"type": "softmax_attention", "heads": 2, "dk": 8, "dv": 8}
    lf = dict(base["mixer"])
    del lf["causal"]
    for mixer, msg in (([lf, soft], "recur config: mixer[1]: causal true differs from mixer[0] (causal false)"),
                       ([soft, lf], "recur config: mixer[1]: causal false differs from mixer[0] (causal true)")):
        e = model_error({**base, "mixer": mixer}, "accepted a linformer block next to a causal one")
        assert e.startswith(msg), e
    model = RecurModel({**base, "mixer": [lf, {**soft, "causal": False}]})
    assert not model.causal and [type(b.mixer).__name__ for b in model.blocks] == ["Linformer", "SoftmaxAttention"]
    e = model_error({**base, "mixer": [lf, {**soft, "type": "linformer"}]}, "accepted a linformer without seq_len")
    assert e.startswith("recur config: mixer[1] (linformer): missing keys ['proj_dim', 'seq_len']"), e
    lw = {**lf, "sharing": "layerwise"}
    expect_value_error(lambda: RecurModel({**base, "mixer": [lw, {**lw, "proj_dim": 16}]}),
                       ("mixer[1] (linformer)", "layerwise"),
                       "accepted layerwise blocks with different proj_dim")


def linformer_layerwise_shared():
    """sharing 'layerwise': every layerwise block holds the one Parameter (block 0's), also after
    .double() and deepcopy; a gradient reaches it from every block; the export writes
    blocks.{i}.mixer.E for each block, identical; loading copies that differ is a ValueError.
    A mixed list (layerwise, none, layerwise) ties blocks 0 and 2 only."""
    import copy
    cfg = load_config("linformer_shared")
    model = checkpoint.build_model(cfg, SEED)
    Es = [b.mixer.E for b in model.blocks]
    assert all(E is Es[0] for E in Es) and not any(hasattr(b.mixer, "F") for b in model.blocks)
    assert sum(1 for name, _ in model.named_parameters() if name.endswith("mixer.E")) == 1
    for m in (copy.deepcopy(model).double(), checkpoint.build_model(cfg, SEED).double()):
        assert all(b.mixer.E is m.blocks[0].mixer.E for b in m.blocks) and m.blocks[0].mixer.E.dtype == torch.float64
    # The gradient of the shared E is the sum of each block's contribution.
    x = golden.random_inputs(cfg, 50, 3)
    model.zero_grad()
    model(x).sum().backward()
    total = Es[0].grad.clone()
    per_block, terms = torch.zeros_like(total), torch.zeros_like(total)
    for i in range(len(model.blocks)):
        other = checkpoint.build_model(cfg, SEED)
        for j, b in enumerate(other.blocks):   # untie: only block i's E gets a gradient
            if j != i:
                b.mixer.E = torch.nn.Parameter(b.mixer.E.detach().clone(), requires_grad=False)
        other(x).sum().backward()
        per_block += other.blocks[i].mixer.E.grad
        terms += other.blocks[i].mixer.E.grad.abs()
    # float32: both add the same 2·L parts (E serves keys and values in each of the L blocks) in other
    # orders: ≤ 2·(2·L)·eps32·Σ|parts| (eps32 = 2⁻²⁴ ≈ 6e-8); Σ_i |block i's gradient| stands in for it.
    L = len(model.blocks)
    assert_close(total, per_block, 4 * L * 2.0 ** -24 * float(terms.max()), "shared E gradient")
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint.export(cfg, SEED, tmp)
        tensors, _ = safetensors.read(os.path.join(tmp, checkpoint.WEIGHTS_FILE))
        names = [f"blocks.{i}.mixer.E" for i in range(cfg["n_layers"])]
        assert [k for k in tensors if k.endswith(".E") or k.endswith(".F")] == names
        # Exact: copies of one parameter, and the loaded model runs the same ops on the same values.
        assert all(torch.equal(tensors[k], tensors[names[0]]) for k in names)
        assert torch.equal(tensors[names[0]], Es[0].detach())
        loaded, _ = checkpoint.load(tmp)
        assert all(b.mixer.E is loaded.blocks[0].mixer.E for b in loaded.blocks)
        with torch.no_grad():
            assert torch.equal(loaded(x), model(x))
        tensors["blocks.2.mixer.E"] = tensors["blocks.2.mixer.E"] + 1
        safetensors.write(os.path.join(tmp, checkpoint.WEIGHTS_FILE), tensors)
        expect_value_error(lambda: checkpoint.load(tmp), "blocks.2.mixer.E", "loaded differing copies of a layerwise E")
    lw = cfg["mixer"]
    mixed = {**cfg, "mixer": [lw, {**lw, "sharing": "none"}, lw]}
    m = checkpoint.build_model(mixed, 0)
    assert m.blocks[2].mixer.E is m.blocks[0].mixer.E and m.blocks[1].mixer.E is not m.blocks[0].mixer.E
    assert tuple(m.blocks[1].mixer.E.shape) == (2, 16, 128) and hasattr(m.blocks[1].mixer, "F")


def linformer_golden_cli():
    """make_golden.py on linformer_features (200 positions < seq_len 256) and linformer_shared
    (128 = seq_len): no state records, the golden equals the model loaded back, the weights
    are the README's tensors."""
    for name, steps in (("linformer_features", 200), ("linformer_shared", 128)):
        records, tensors, model, config = make_golden(name, steps)
        assert {k: tuple(v.shape) for k, v in tensors.items()} == expected_tensors(config)
        assert list(records) == ["meta", "input", "output"] + [f"layer.{i}" for i in range(config["n_layers"])]
        assert records["input"].shape == (steps, config["input"]["feature_width"])
        with torch.no_grad():
            out, layers, _ = model.double()(records["input"], return_layers=True)
        # Exact: make_golden ran this same forward on the same weights and input; the file holds its bytes.
        assert torch.equal(records["output"], out)
        for i, h in enumerate(layers):
            assert torch.equal(records[f"layer.{i}"], h)


# ---------------------------------------------------------------- aft_full


def _aftf_cfg(T, rank=None, form="add", causal=True):
    c = {"type": "aft_full", "heads": AFT_HEADS, "dk": AFT_DK, "max_length": T, "bias_form": form, "causal": causal}
    return c if rank is None else {**c, "bias_rank": rank}


def aft_full_forms():
    """AFTFull's per-stream forms (float64), bias full / rank 3 × add / multiply: tensors and
    init as mixers.AFTFull's; recurrent == chunked parallel (chunks 1, 7, CHUNK, N) ==
    explicit sums == mixers.AFTFull's prefill (same weights via load_state_dict), from the
    empty state and after P = 9 positions, the KV cache (P + N, D) included; the non-causal
    form vs naive and mixers.AFTFull; (multiply, rank r, non-causal) vs the transcribed
    fast-transformers AFTFullAttention; positions past max_length raise ValueError."""
    D = AFT_HEADS * AFT_DK
    g = torch.Generator().manual_seed(21)
    P = 9
    T = P + AFT_N + 1
    full = torch.randn(P + AFT_N, AFT_D_MODEL, generator=g, dtype=torch.float64)
    for rank in (None, 3):
        for form in ("add", "multiply"):
            what = f"aft_full rank={rank} {form}"
            cfg = _aftf_cfg(T, rank, form)
            torch.manual_seed(0)
            att = AFTFull(cfg, AFT_D_MODEL)
            torch.manual_seed(0)
            ref = mixers.AFTFull(cfg, AFT_D_MODEL)
            names = {k: tuple(v.shape) for k, v in att.state_dict().items()}
            bias = {"pos_bias": (T, T)} if rank is None else {"u": (T, rank), "v": (T, rank)}
            assert names == {"query.weight": (D, AFT_D_MODEL), "query.bias": (D,), "key.weight": (D, AFT_D_MODEL),
                             "key.bias": (D,), "value.weight": (D, AFT_D_MODEL), "value.bias": (D,),
                             "out.weight": (AFT_D_MODEL, D), "out.bias": (AFT_D_MODEL,), **bias}, names
            # Exact: the same draws from the same seed.
            assert all(torch.equal(v, ref.state_dict()[k]) for k, v in att.state_dict().items()), "init differs"
            att, ref = att.double(), ref.double()
            torch.manual_seed(5)
            with torch.no_grad():
                for prm in att.parameters():
                    prm.add_(0.1 * torch.randn_like(prm))
            ref.load_state_dict(att.state_dict(), strict=True)
            W = att.pos_bias if rank is None else att.u @ att.v.t()
            with torch.no_grad():
                q, k, v = (lin.forward(full) for lin in (att.query, att.key, att.value))
                naive = F.linear(naive_aft_full(cfg, W, q, k, v), att.out.weight, att.out.bias)
                y_ref, st_ref = ref.prefill(full[None], ref.initial_state(1))
                assert_close(y_ref[0], naive, 1e-12, f"{what}: mixers.AFTFull vs naive")
                kv_cache_forms(att, full, P, naive, st_ref, (D, D), what)
                # past max_length: parallel, recurrent (and recur_ref.mixers) raise naming max_length
                _, st_full = att.recurrent(full, att.empty_state(torch.float64), 0)
                stops_at_max_length(att, full, st_full, what)
            # the non-causal (encoder) form
            enc_cfg = _aftf_cfg(T, rank, form, causal=False)
            torch.manual_seed(1)
            enc = AFTFull(enc_cfg, AFT_D_MODEL).double()
            assert enc.empty_state(torch.float64) == {}
            eref = mixers.AFTFull(enc_cfg, AFT_D_MODEL).double()
            eref.load_state_dict(enc.state_dict(), strict=True)
            We = enc.pos_bias if rank is None else enc.u @ enc.v.t()
            with torch.no_grad():
                y, st = enc.noncausal(full, {})
                assert st == {}
                q, k, v = (lin.forward(full) for lin in (enc.query, enc.key, enc.value))
                assert_close(y, F.linear(naive_aft_full(enc_cfg, We, q, k, v), enc.out.weight, enc.out.bias), 1e-12,
                             f"{what}: encoder vs naive")
                assert_close(y, eref(full[None])[0], 1e-12, f"{what}: encoder vs mixers.AFTFull")
                if rank is not None and form == "multiply":   # fast-transformers' AFTFullAttention
                    H, E = AFT_HEADS, AFT_DK
                    lib = mixers.fast_transformers_aft_full(enc.query(full).view(1, -1, H, E),
                                                            enc.key(full).view(1, -1, H, E),
                                                            enc.value(full).view(1, -1, H, E), enc.u, enc.v)
                    assert_close(y, enc.out(lib.reshape(len(full), H * E)), 1e-12, f"{what}: vs fast-transformers")
                expect_value_error(lambda: enc.noncausal(torch.cat([full, full[:2]]), {}), "max_length",
                                   f"{what}: encoder ran past max_length")
                expect_value_error(lambda: enc.noncausal(full[:3], {}, pos=2), "position 0",
                                   f"{what}: encoder ran from a later position")


def aft_full_config_validation():
    """aft_full keys (mixers.validate_mixer): bad ones are ValueErrors naming the key, also
    inside a mixed model's list; causal false / rank / multiply build; init_state's empty
    KV cache; a model stepping past max_length raises naming max_length; a mixed
    [aft_full, aft_local] model's parallel form == its steps."""
    tok = load_config("aft_full_tokens")
    feat = load_config("aft_full_features")

    with_mixer = config_with_mixer

    mixed = json.loads(json.dumps(tok))
    mixed["mixer"] = [dict(tok["mixer"]), dict(tok["mixer"], bias_form="mul")]
    bad = [
        (with_mixer(tok, drop=("max_length",)), "max_length"),
        (with_mixer(tok, max_length=0), "max_length"),
        (with_mixer(tok, max_length=8.0), "max_length"),
        (with_mixer(tok, max_length=True), "max_length"),
        (with_mixer(tok, bias_rank=0), "bias_rank"),
        (with_mixer(tok, bias_rank=2.5), "bias_rank"),
        (with_mixer(tok, bias_rank=True), "bias_rank"),
        (with_mixer(tok, bias_form="mul"), "bias_form"),
        (with_mixer(tok, bias_form=None), "bias_form"),
        (with_mixer(tok, window=4), "window"),
        (with_mixer(tok, dv=16), "dv"),
        (with_mixer(tok, dk=0), "dk"),
        (with_mixer(tok, drop=("heads",)), "heads"),
        (with_mixer(feat, causal="yes"), "causal"),
        (mixed, "mixer[1] (aft_full): unknown mixer.bias_form"),
    ]
    expect_rejected(bad)
    for ok in (with_mixer(tok, causal=False), with_mixer(tok, drop=("bias_rank", "bias_form"), max_length=8),
               with_mixer(feat, bias_rank=None), with_mixer(feat, bias_form="add"), with_mixer(feat, causal=False)):
        checkpoint.build_model(ok, 0)
    st = checkpoint.build_model(tok, 0).init_state()
    assert list(st.layers[1]) == ["k", "v"] and [tuple(t.shape) for t in st.layers[1].values()] == [(0, 32), (0, 32)]
    model_stops_at_max_length(with_mixer(feat, max_length=12), [(12, 16), (12, 16)])
    mixed["mixer"][1] = {"type": "aft_local", "heads": 2, "dk": 16, "window": 4}
    mixed_matches_steps(mixed, (AFTFull, AFTLocal), "mixed aft_full")


def aft_full_ft_mapping():
    """ft_aft_full.json → the recur mixer of the contract (multiply, rank = aft_parameterization,
    max_length = max_sequence_length, causal false; the library's defaults 1024 / 64 when
    absent); bad configs are ValueErrors; u / v renames round trip and the model is the
    library's AFTFullAttention."""
    ft = load_config("ft_aft_full")
    cfg = checkpoint.recur_config(ft)
    assert cfg["mixer"] == {"type": "aft_full", "heads": 2, "dk": 8, "max_length": 256, "bias_rank": 8,
                            "bias_form": "multiply", "causal": False}, cfg["mixer"]
    assert cfg["d_model"] == 16 and cfg["norm_placement"] == "post"
    plain = {k: v for k, v in ft.items() if k not in ("max_sequence_length", "aft_parameterization")}
    m = checkpoint.recur_config(plain)["mixer"]
    assert (m["max_length"], m["bias_rank"]) == (1024, 64), m
    for bad, word in (({**ft, "value_dimensions": 4}, "value_dimensions"),
                      ({**ft, "max_sequence_length": 0}, "max_sequence_length"),
                      ({**ft, "aft_parameterization": 2.0}, "aft_parameterization"),
                      ({**ft, "attention_type": "linear"}, "aft-full"),
                      ({**ft, "attention_type": "causal-aft-full"}, "attention_type"),
                      ({**ft, "feature_map": {"type": "favor", "n_dims": 8}}, "feature_map")):
        expect_value_error(lambda: checkpoint.recur_config(bad), word, f"accepted {bad}")
    model = checkpoint.build_model(ft, SEED)
    sd = model.state_dict()
    assert sd["blocks.1.mixer.u"].shape == (256, 8) and sd["blocks.1.mixer.v"].shape == (256, 8)
    assert model.init_state().layers == [{}, {}] and not model.causal
    named = ftl.to_fast_transformers(sd)
    assert set(named) == expected_ft_keys(ft), sorted(named)
    for i in range(2):   # exact: renames only
        for n in ("u", "v"):
            assert torch.equal(named[f"layers.{i}.attention.inner_attention.{n}"], sd[f"blocks.{i}.mixer.{n}"])
    back = ftl.from_fast_transformers(named)
    assert list(back) == list(sd) and all(torch.equal(back[k], sd[k]) for k in sd), "renames do not round trip"
    full_bias = checkpoint.build_model(checkpoint.recur_config(ft) | {
        "mixer": dict(cfg["mixer"], bias_rank=None)}, 0).state_dict()
    expect_value_error(lambda: ftl.to_fast_transformers(full_bias), "pos_bias",
                       "a full pos_bias got a fast-transformers name")
    att = model.blocks[0].mixer.double()
    x = torch.randn(40, 16, dtype=torch.float64)
    with torch.no_grad():
        lib = mixers.fast_transformers_aft_full(att.query(x).view(1, 40, 2, 8), att.key(x).view(1, 40, 2, 8),
                                                att.value(x).view(1, 40, 2, 8), att.u, att.v)
        assert_close(att.noncausal(x, {})[0], att.out(lib.reshape(40, 16)), 1e-12, "ft aft-full vs library")


def aft_full_golden_cli():
    """make_golden.py on aft_full_tokens (1,000 positions), aft_full_features (300) and
    ft_aft_full (200, fast-transformers layout): the state records k, v per layer are the
    (N, D) KV cache (the keys / values of every position); the encoder writes none; more
    positions than max_length are refused."""
    runs = (("aft_full_tokens", 1000, "recur"), ("aft_full_features", 300, "recur"),
            ("ft_aft_full", 200, "fast-transformers"))
    for name, steps, layout in runs:
        recs, _, model, cfg = make_golden(name, steps, "--layout", layout)
        rc = checkpoint.recur_config(cfg)
        D = rc["mixer"]["heads"] * rc["mixer"]["dk"]
        state_records(recs, rc["n_layers"], ["k", "v"] if model.causal else [])
        if not model.causal:
            continue
        with torch.no_grad():
            for i, block, hin in mixer_inputs(model.double(), recs):
                assert recs[f"state.{i}.k"].shape == (steps, D) and recs[f"state.{i}.k"].dtype == torch.float64
                # Exact: the model's own modules on the same rows, in the order of its forward (chunk CHUNK).
                assert torch.equal(recs[f"state.{i}.k"], block.mixer.key(hin)), f"{name}: state.{i}.k"
                assert torch.equal(recs[f"state.{i}.v"], block.mixer.value(hin)), f"{name}: state.{i}.v"
    make_golden_refuses("aft_full_features", 401, "max_length")


# ---------------------------------------------------------------- gau

GAU_D_MODEL, GAU_E, GAU_S, GAU_N, GAU_P = 10, 12, 5, 70, 9   # N > CHUNK: several chunks


def _gau_cfg(T, causal=True, **kv):
    return {"type": "gau", "expansion_dim": GAU_E, "qk_dim": GAU_S, "max_length": T, "causal": causal, **kv}


def _gau_parts(att, x):
    """U, V, Q, K of a GAU mixer written out from the README (not its _proj)."""
    u, v, z = (F.silu(F.linear(x, p.weight, p.bias)) for p in (att.u_proj, att.v_proj, att.z_proj))
    q, k = (att.qk_gamma[r] * z + att.qk_beta[r] for r in range(2))
    return u, v, q, k


def gau_forms():
    """GAU's per-stream forms (float64), default scale 1/T and scale 0.37: tensors and init as
    mixers.GAU's; recurrent == chunked parallel (chunks 1, 7, CHUNK, N) == explicit sums ==
    mixers.GAU's prefill (same weights via load_state_dict), from the empty state and after
    P = 9 positions, the KV cache (k (P + N, s), v (P + N, E)) included; uneven pieces; the
    non-causal form vs naive and mixers.GAU's forward; positions past max_length raise
    ValueError naming max_length (T − 1 is still fine)."""
    g = torch.Generator().manual_seed(22)
    P, E, s, d = GAU_P, GAU_E, GAU_S, GAU_D_MODEL
    T = P + GAU_N + 1
    full = torch.randn(P + GAU_N, d, generator=g, dtype=torch.float64)
    for extra in ({}, {"scale": 0.37}):
        what = f"gau {extra or 'default scale'}"
        cfg = _gau_cfg(T, **extra)
        torch.manual_seed(0)
        att = GAU(cfg, d)
        torch.manual_seed(0)
        ref = mixers.GAU(cfg, d)
        names = {k: tuple(v.shape) for k, v in att.state_dict().items()}
        assert names == {"u_proj.weight": (E, d), "u_proj.bias": (E,), "v_proj.weight": (E, d), "v_proj.bias": (E,),
                         "z_proj.weight": (s, d), "z_proj.bias": (s,), "qk_gamma": (2, s), "qk_beta": (2, s),
                         "out.weight": (d, E), "out.bias": (d,), "rel_bias": (T,)}, names
        assert list(att.state_dict()) == list(ref.state_dict()), "tensor order differs from mixers.GAU"
        # Exact: the same draws from the same seed.
        assert all(torch.equal(v, ref.state_dict()[k]) for k, v in att.state_dict().items()), "init differs"
        assert att.scale == extra.get("scale", 1.0 / T)
        att, ref = att.double(), ref.double()
        with torch.no_grad():   # a positive bias shift: relu² keeps most pairs (and the Q·K term matters)
            att.rel_bias.add_(0.2)
        ref.load_state_dict(att.state_dict(), strict=True)
        with torch.no_grad():
            u, v, q, k = _gau_parts(att, full)
            naive = F.linear(u * naive_gau(cfg, q, k, v, att.rel_bias), att.out.weight, att.out.bias)
            y_ref, st_ref = ref.prefill(full[None], ref.initial_state(1))
            assert_close(y_ref[0], naive, 1e-12, f"{what}: mixers.GAU vs naive")
            assert_close(ref(full[None])[0], naive, 1e-12, f"{what}: mixers.GAU forward vs naive")
            empty = att.empty_state(torch.float64)
            assert list(empty) == ["k", "v"] and [tuple(t.shape) for t in empty.values()] == [(0, s), (0, E)]
            for start, (st0, y_rec, st_rec) in kv_cache_forms(att, full, P, naive, st_ref, (s, E), what).items():
                assert_close(st_rec["k"], k, 1e-12, f"{what}: state k = the K rows")
                assert_close(st_rec["v"], v, 1e-12, f"{what}: state v = the V rows")
                ys, st = uneven_pieces(att, full, st0, start)   # uneven pieces, each continuing from the last
                assert_close(ys, y_rec, 1e-12, f"{what}: uneven pieces from {start}")
                for name in ("k", "v"):   # each piece projects its own rows: equal to rounding
                    assert_close_rel(st[name], st_rec[name], f"{what}: uneven pieces state {name}")
            # a cache that does not match the position is refused
            expect_value_error(lambda: att.recurrent(full[:1], st_rec, len(full) - 1), "positions",
                               f"{what}: accepted a cache of the wrong length")
            # past max_length: parallel, recurrent (and recur_ref.mixers) raise naming max_length
            stops_at_max_length(att, full, st_rec, what,
                                lambda: ref.prefill(full[None, :2], {**{n: st_ref[n] for n in ("k", "v")},
                                                                    "pos": torch.tensor(len(full))}))
        # the non-causal (encoder) form
        enc_cfg = _gau_cfg(T, causal=False, **extra)
        torch.manual_seed(1)
        enc = GAU(enc_cfg, d).double()
        assert enc.rel_bias.shape == (2 * T - 1,) and enc.empty_state(torch.float64) == {}
        eref = mixers.GAU(enc_cfg, d).double()
        eref.load_state_dict(enc.state_dict(), strict=True)
        with torch.no_grad():
            enc.rel_bias.add_(0.2)
            eref.rel_bias.copy_(enc.rel_bias)
            for n in (len(full), T, 1):
                x = full[:n] if n <= len(full) else torch.cat([full, full[:n - len(full)]])
                y, st = enc.noncausal(x, {})
                assert st == {}
                u, v, q, k = _gau_parts(enc, x)
                assert_close(y, F.linear(u * naive_gau(enc_cfg, q, k, v, enc.rel_bias), enc.out.weight, enc.out.bias),
                             1e-12, f"{what}: encoder vs naive (N={n})")
                assert_close(y, eref(x[None])[0], 1e-12, f"{what}: encoder vs mixers.GAU (N={n})")
            x2 = full.clone()
            x2[-1] += 1
            assert max_abs(enc.noncausal(x2, {})[0][0], enc.noncausal(full, {})[0][0]) > 1e-6, \
                f"{what}: encoder ignores later positions"
            for fn, word in ((lambda: enc.noncausal(torch.cat([full, full[:2]]), {}), "max_length"),
                             (lambda: eref(torch.cat([full, full[:2]])[None]), "max_length"),
                             (lambda: enc.noncausal(full[:3], {}, pos=2), "position 0")):
                expect_value_error(fn, word, f"{what}: encoder accepted a bad call ({word})")
        gau_length_scale_forms(T, full, extra, what)


def gau_length_scale_forms(T, full, extra, what):
    """length_scale (FLASH-pytorch's GAU), with and without the causal mask: an encoder
    (no state, no step form: parallel, recurrent and prefill raise naming the step form) equal
    to the explicit sums / n and to the batched forward for several n; with the mask,
    position t reads no later key yet depends on n (the division)."""
    d = full.shape[1]
    for mask in (False, True):
        cfg = _gau_cfg(T, causal=mask, length_scale=True, **extra)
        name = f"{what} length_scale causal={mask}"
        assert not mixers.is_causal(cfg) and not mixers.state_bytes(cfg, d).recurrent, name
        torch.manual_seed(2)
        enc = GAU(cfg, d).double()
        assert not enc.has_step and enc.empty_state(torch.float64) == {}, name
        assert enc.rel_bias.shape == ((T,) if mask else (2 * T - 1,)), name
        with torch.no_grad():
            enc.rel_bias.add_(0.2)
            for n in (len(full), 40, 1):
                x = full[:n]
                y, st = enc.noncausal(x, {})
                assert st == {}
                u, v, q, k = _gau_parts(enc, x)
                naive = F.linear(u * naive_gau(cfg, q, k, v, enc.rel_bias), enc.out.weight, enc.out.bias)
                assert_close(y, naive, 1e-12, f"{name}: encoder vs naive (N={n})")
                assert_close(enc(x[None])[0], naive, 1e-12, f"{name}: forward vs naive (N={n})")
            short = enc.noncausal(full[:40], {})[0]
            long = enc.noncausal(full, {})[0]
            assert max_abs(short[:10], long[:10]) > 1e-6, f"{name}: the output ignores n"
            if mask:   # a later key changes nothing but n: same n, earlier rows equal
                x2 = full.clone()
                x2[-1] += 1
                assert_close(enc.noncausal(x2, {})[0][:-1], long[:-1], 1e-12, f"{name}: mask")
            for fn in (lambda: enc.parallel(full[:3], {}, 0, CHUNK), lambda: enc.recurrent(full[:3], {}, 0),
                       lambda: enc.prefill(full[None, :3], {"k": None, "v": None, "pos": torch.tensor(0)})):
                expect_value_error(fn, ("no recurrent (step) form", "length_scale"), f"{name}: a step form ran")


def gau_config_validation():
    """gau keys (mixers.validate_mixer): bad ones are ValueErrors naming the key, also inside
    a mixed model's list; causal false / scale / no scale build; init_state's empty KV cache
    (k (0, s), v (0, E)); a model stepping past max_length raises naming max_length (so does an
    encoder utterance longer than max_length); a mixed [gau, flash] model's parallel form ==
    its steps; the model runs every recur_ref.mixers type."""
    assert set(MIXER_TYPES) == set(mixers.MIXERS), sorted(set(mixers.MIXERS) ^ set(MIXER_TYPES))
    tok = load_config("gau_tokens")
    feat = load_config("gau_features")
    enc = load_config("gau_encoder")

    with_mixer = config_with_mixer

    mixed = json.loads(json.dumps(tok))
    mixed["mixer"] = [dict(tok["mixer"]), dict(tok["mixer"], max_length=0)]
    bad = [
        (with_mixer(tok, drop=("max_length",)), "max_length"),
        (with_mixer(tok, max_length=0), "max_length"),
        (with_mixer(tok, max_length=8.0), "max_length"),
        (with_mixer(tok, max_length=True), "max_length"),
        (with_mixer(tok, max_length=None), "max_length"),
        (with_mixer(tok, drop=("expansion_dim",)), "expansion_dim"),
        (with_mixer(tok, expansion_dim=0), "expansion_dim"),
        (with_mixer(tok, expansion_dim=2.5), "expansion_dim"),
        (with_mixer(tok, drop=("qk_dim",)), "qk_dim"),
        (with_mixer(tok, qk_dim=-2), "qk_dim"),
        (with_mixer(tok, qk_dim=True), "qk_dim"),
        (with_mixer(feat, scale=0), "scale"),
        (with_mixer(feat, scale=-1.0), "scale"),
        (with_mixer(feat, scale="x"), "scale"),
        (with_mixer(feat, scale=None), "scale"),
        (with_mixer(feat, scale=float("inf")), "scale"),
        (with_mixer(feat, causal="yes"), "causal"),
        (with_mixer(enc, causal=0), "causal"),
        (with_mixer(tok, chunk=16), "chunk"),          # flash's key
        (with_mixer(tok, heads=2), "heads"),
        (with_mixer(tok, bias_rank=4), "bias_rank"),   # aft_full's key
        (mixed, "mixer[1] (gau): mixer.max_length must be a positive integer"),
    ]
    expect_rejected(bad)
    for ok in (with_mixer(tok, causal=False), with_mixer(tok, scale=0.5), with_mixer(tok, scale=1),
               with_mixer(feat, drop=("scale", "causal")), with_mixer(feat, causal=False), with_mixer(enc, causal=True),
               with_mixer(enc, max_length=1)):
        checkpoint.build_model(ok, 0)
    st = checkpoint.build_model(tok, 0).init_state()
    assert [list(layer) for layer in st.layers] == [["k", "v"], ["k", "v"]]
    assert [tuple(t.shape) for t in st.layers[1].values()] == [(0, 16), (0, 64)]
    assert checkpoint.build_model(enc, 0).init_state().layers == [{}, {}]
    assert checkpoint.build_model(tok, 0).blocks[0].mixer.scale == 1 / 1024
    model_stops_at_max_length(with_mixer(feat, max_length=12), [(12, 8), (12, 48)])
    small_enc = with_mixer(enc, max_length=12)
    model = checkpoint.build_model(small_enc, 2).double()
    x = golden.random_inputs(small_enc, 13, 4)
    with torch.no_grad():
        model(x[:12])
        expect_value_error(lambda: model(x), "max_length", "an encoder ran past max_length")
    mixed["mixer"][1] = {"type": "flash", "expansion_dim": 32, "qk_dim": 8, "chunk": 5}
    mixed_matches_steps(mixed, (GAU, FLASH), "mixed gau")


def gau_golden_cli():
    """make_golden.py on gau_tokens (1,000 positions), gau_features (300) and gau_encoder
    (200): the state records k, v per layer are the KV cache ((N, s) K rows, (N, E) V rows of
    every position, recomputed here from each layer's input); the encoder writes none; more
    positions than max_length are refused (causal and encoder); outputs are finite."""
    runs = (("gau_tokens", 1000), ("gau_features", 300), ("gau_encoder", 200))
    for name, steps in runs:
        recs, _, model, cfg = make_golden(name, steps)
        assert torch.isfinite(recs["output"]).all(), name
        m = cfg["mixer"]
        state_records(recs, cfg["n_layers"], ["k", "v"] if model.causal else [])
        if not model.causal:
            continue
        with torch.no_grad():
            for i, block, hin in mixer_inputs(model.double(), recs):
                _, v, _, k = _gau_parts(block.mixer, hin)
                for n, want, shape in (("k", k, (steps, m["qk_dim"])), ("v", v, (steps, m["expansion_dim"]))):
                    rec = recs[f"state.{i}.{n}"]
                    assert rec.shape == shape and rec.dtype == torch.float64, f"{name}: state.{i}.{n} {rec.shape}"
                    assert_close(rec, want, 1e-12, f"{name}: state.{i}.{n}")
    for name, steps in (("gau_features", 401), ("gau_encoder", 257)):
        make_golden_refuses(name, steps, "max_length")


# ---------------------------------------------------------------- reformer

RF_D_MODEL = 12
RF_MIN_GAP = 2e-5   # the smallest float64 margin of a golden's hash decisions: the runtime hashes in f32,
                    # which moves [P, −P] by ≤ 8e-7 on the paper-form configs (measured), 25× less, and by
                    # ≤ 1.3e-6 on the transformers-form ones (raw Q, not unit keys: 16× less)


def _rf_cfg(nb=4, c=5, r=2, **kv):
    return {"type": "reformer", "heads": 2, "dk": 4, "dv": 3, "n_buckets": nb, "chunk": c, "rounds": r, **kv}


def _rf_parts(att, x):
    """Q (N, H, dk), V (N, H, dv) of a Reformer mixer written out from the README."""
    n = len(x)
    q = F.linear(x, att.query.weight, att.query.bias).view(n, att.heads, att.dk)
    v = F.linear(x, att.value.weight, att.value.bias).view(n, att.heads, att.dv)
    return q, v


def reformer_forms():
    """Reformer's per-stream forms (float64): the tensors of the contract (query, value, out,
    the buffer rotations; no key), the same seeded init as mixers.Reformer; noncausal ==
    explicit loops (naive_reformer) == mixers.Reformer's forward, for N a multiple of c, N not
    a multiple, N < c, N = 1, chunk 1 (slot 0 alone: it attends to itself) and several rounds
    and bucket counts; positions sharing a bucket really are batched together (several buckets
    in use); parallel / recurrent raise "no recurrent form"; pos ≠ 0 is refused; no state."""
    g = torch.Generator().manual_seed(31)
    d = RF_D_MODEL
    full = torch.randn(41, d, generator=g, dtype=torch.float64)
    for nb, c, r in ((4, 5, 2), (2, 8, 1), (8, 3, 3), (6, 1, 2), (4, 16, 2)):
        cfg = _rf_cfg(nb, c, r)
        what = f"reformer nb {nb} c {c} r {r}"
        for cc in (cfg, {**cfg, "causal": False}):
            torch.manual_seed(0)
            att = Reformer(cc, d)
            torch.manual_seed(0)
            ref = mixers.Reformer(cc, d)
            got = {name: tuple(t.shape) for name, t in att.state_dict().items()}
            assert got == {"query.weight": (8, d), "query.bias": (8,), "value.weight": (6, d), "value.bias": (6,),
                           "out.weight": (d, 6), "out.bias": (d,), "rotations": (r, 4, nb // 2)}, f"{what}: {got}"
            assert list(att.state_dict()) == list(ref.state_dict()), "tensor order differs from mixers.Reformer"
            # Exact: the same draws from the same seed.
            assert all(torch.equal(v, ref.state_dict()[k]) for k, v in att.state_dict().items()), "init differs"
            assert "rotations" not in dict(att.named_parameters()), "rotations is a buffer, not trained"
            assert not att.causal and att.empty_state(torch.float64) == {}
        att, ref = att.double(), ref.double()
        assert att.rotations.dtype == torch.float64
        with torch.no_grad():
            for n in (41, 4 * c, 2 * c + 1, c - 1, 2, 1):
                if n < 1 or n > len(full):
                    continue
                x = full[:n]
                y, st = att.noncausal(x, {})
                assert st == {}
                q, v = _rf_parts(att, x)
                want = F.linear(naive_reformer(cfg, att.rotations, q, v).reshape(n, -1), att.out.weight, att.out.bias)
                assert_close(y, want, 1e-12, f"{what}: noncausal vs explicit loops (N={n})")
                assert_close(y, ref(x[None])[0], 1e-12, f"{what}: noncausal vs mixers.Reformer (N={n})")
            x2 = torch.stack([full[:23], full[5:28]])   # mixers.Reformer is batched: each stream on its own
            yb = ref(x2)
            for b in range(2):
                assert_close(yb[b], att.noncausal(x2[b], {})[0], 1e-12, f"{what}: batch row {b}")
            buckets = att.hashes(full).argmax(-1)              # (r, H, N)
            assert all(len(set(bk.tolist())) > 1 for bk in buckets.flatten(0, 1)), f"{what}: one bucket only"
            for call in (lambda: att.parallel(full[:4], {}, chunk=2), lambda: att.recurrent(full[:4], {}),
                         lambda: att.parallel(full[:4], {}, 0, 2)):
                expect_value_error(call, "no recurrent form", f"{what}: a reformer ran a causal form")
            expect_value_error(lambda: att.noncausal(full[:4], {}, pos=3), "position 0", "reformer accepted pos 3")
    # The hash: the first maximum of [P, −P] (ties → the lowest index), P = K·rotations with K = Q/‖Q‖.
    att = Reformer(_rf_cfg(4, 5, 1), d).double()
    with torch.no_grad():
        att.rotations.zero_()
        att.rotations[0, 0, 1] = 1.0                       # P = (0, K_0): bucket 1 if K_0 > 0, else 3; 0 never
        hx = att.hashes(full)
        q, _ = _rf_parts(att, full)
        k0 = (q / q.norm(dim=-1, keepdim=True))[..., 0].T  # (H, N)
        # Exact: integer buckets, from signs no rounding can flip while every |K_0| is far above it.
        assert float(k0.abs().min()) > 1e-9
        assert torch.equal(hx.argmax(-1)[0], torch.where(k0 > 0, 1, 3)), "hash argmax"
        att.rotations.zero_()                              # all P = 0: every value ties → bucket 0
        assert int(att.hashes(full).argmax(-1).max()) == 0
        y, _ = att.noncausal(full[:17], {})                # one bucket: chunks of the positions in order
        q, v = _rf_parts(att, full[:17])
        assert_close(y, F.linear(naive_reformer(_rf_cfg(4, 5, 1), att.rotations, q, v).reshape(17, -1),
                                 att.out.weight, att.out.bias), 1e-12, "all in bucket 0")
    # Inside a model: no step, no state; an encoder sees the whole utterance.
    cfg = load_config("reformer_features")
    model = checkpoint.build_model(cfg, 0).double()
    x = golden.random_inputs(cfg, 50, 1)
    with torch.no_grad():
        expect_value_error(lambda: model.step(x[0], model.init_state()), "no recurrent form",
                           "a reformer model stepped")
        assert model.init_state().layers == [{}, {}] and not model.causal
        # Exact: an encoder runs the same ops whatever the chunk.
        assert torch.equal(model(x, chunk=1), model(x)), "the encoder form ignores chunk"


def reformer_config_validation():
    """reformer keys (mixers.validate_mixer): bad ones are ValueErrors naming the key, also inside
    a mixed model's list; causal defaults to false and true is rejected ("reformer has no
    causal/recurrent form"); n_buckets must be even and ≥ 2; mixing with causal blocks is the
    mixed-causality error; a non-causal mixed [reformer, linformer] model == its blocks one by one."""
    assert set(MIXER_TYPES) == set(mixers.MIXERS), sorted(set(mixers.MIXERS) ^ set(MIXER_TYPES))
    base = load_config("reformer_features")
    tok = load_config("reformer_tokens_encoder")

    with_mixer = functools.partial(config_with_mixer, base)

    mixed = json.loads(json.dumps(base))
    mixed["mixer"] = [dict(base["mixer"]), dict(base["mixer"], n_buckets=3)]
    bad = [(with_mixer(causal=True), "causal"), (with_mixer(causal="no"), "causal"), (with_mixer(causal=0), "causal"),
           (with_mixer(tok, causal=True), "reformer has no causal/recurrent form"),
           (with_mixer(drop=("n_buckets",)), "n_buckets"), (with_mixer(n_buckets=3), "n_buckets"),
           (with_mixer(n_buckets=0), "n_buckets"), (with_mixer(n_buckets=1), "n_buckets"),
           (with_mixer(n_buckets=-2), "n_buckets"), (with_mixer(n_buckets=4.0), "n_buckets"),
           (with_mixer(n_buckets=True), "n_buckets"), (with_mixer(n_buckets=None), "n_buckets"),
           (with_mixer(drop=("chunk",)), "chunk"), (with_mixer(chunk=0), "chunk"), (with_mixer(chunk=2.5), "chunk"),
           (with_mixer(chunk=True), "chunk"), (with_mixer(drop=("rounds",)), "rounds"),
           (with_mixer(rounds=0), "rounds"), (with_mixer(rounds="2"), "rounds"), (with_mixer(rounds=None), "rounds"),
           (with_mixer(drop=("heads",)), "heads"), (with_mixer(heads=0), "heads"), (with_mixer(dk=1.5), "dk"),
           (with_mixer(drop=("dv",)), "dv"), (with_mixer(dv=0), "dv"),
           (with_mixer(window=4), "window"), (with_mixer(seq_len=256), "seq_len"),   # other mixers' keys
           (with_mixer(max_length=256), "max_length"), (with_mixer(key=True), "key"),
           (mixed, "mixer[1] (reformer): mixer.n_buckets must be an even integer >= 2")]
    expect_rejected(bad)
    e = model_error(with_mixer(causal=True))
    assert e == "recur config: mixer (reformer): reformer has no causal/recurrent form: mixer.causal must be false", e
    hf = dict(form="transformers")
    expect_rejected([(with_mixer(form="hf"), "unknown mixer.form 'hf'"),
                     (with_mixer(chunks_after=1), "apply only to mixer.form 'transformers'"),
                     (with_mixer(causal_mask=True), "apply only to mixer.form 'transformers'"),
                     (with_mixer(**hf, pad_multiple=12), "mixer.pad_multiple must be a positive multiple"),
                     (with_mixer(**hf, pad_above=9), "mixer.pad_above"),
                     (with_mixer(**hf, chunks_before=63, chunks_after=1), "at most 64"),
                     (with_mixer(**hf, causal_mask="yes"), "mixer.causal_mask"),
                     (with_mixer(**hf, causal=True), "reformer has no causal/recurrent form")])
    for ok in (with_mixer(drop=("causal",)), with_mixer(n_buckets=2), with_mixer(chunk=1), with_mixer(rounds=1),
               with_mixer(tok, causal=False), with_mixer(n_buckets=64, chunk=1000, rounds=5)):
        model = checkpoint.build_model(ok, 0)
        assert not model.causal and model.init_state().layers == [{}] * ok["n_layers"]
    # Mixed models: reformer (non-causal by default) next to causal blocks is the causality error.
    soft = {"type": "softmax_attention", "heads": 2, "dk": 4, "dv": 4}
    rf = dict(tok["mixer"])
    for mixer, msg in (([rf, soft], "recur config: mixer[1]: causal true differs from mixer[0] (causal false)"),
                       ([soft, rf], "recur config: mixer[1]: causal false differs from mixer[0] (causal true)")):
        e = model_error({**tok, "mixer": mixer}, "accepted a reformer block next to a causal one")
        assert e.startswith(msg), e
    lf = {"type": "linformer", "heads": 2, "dk": 4, "dv": 4, "seq_len": 64, "proj_dim": 8}
    mixed = {**tok, "mixer": [rf, lf]}
    model = checkpoint.build_model(mixed, 3).double()
    assert not model.causal and [type(b.mixer).__name__ for b in model.blocks] == ["Reformer", "Linformer"]
    assert set(k for k in model.state_dict() if ".mixer." in k) == \
        {k for k in expected_tensors(mixed) if ".mixer." in k}
    x = golden.random_inputs(mixed, 40, 4)
    with torch.no_grad():
        out, layers, _ = model(x, return_layers=True)
        h = model.input(x, 0)
        for i, block in enumerate(model.blocks):
            h, _ = block(h, {}, CHUNK, 0)
            assert_close(layers[i], h, 1e-12, f"mixed reformer/linformer block {i}")
        assert_close(out, naive_forward(mixed, dict(model.state_dict()), x), 1e-9, "mixed reformer/linformer vs naive")


def reformer_hash_gaps(model, records, cfg):
    """Per layer, the smallest float64 margin between the largest and the second-largest of
    [P, −P] over every position, head and round of a golden's input (each layer's mixer input
    recomputed from the model)."""
    gaps = []
    with torch.no_grad():
        for _, block, h in mixer_inputs(model, records):
            top = block.mixer.hashes(h).topk(2, -1).values
            gaps.append(float((top[..., 0] - top[..., 1]).min()))
    return gaps


def reformer_golden_cli():
    """make_golden.py on reformer_features (1,000 positions) and reformer_tokens_encoder (300): no
    state records, the golden equals the model loaded back, the weights are the README's
    tensors, the outputs are finite and not degenerate (spread over positions > 0.1, most rows
    distinct: equal tokens next to each other may share a row), and every
    hash decision of the golden's input has a float64 margin ≥ RF_MIN_GAP (so an f32 runtime
    hashes every position into the same bucket)."""
    for name, steps in (("reformer_features", 1000), ("reformer_tokens_encoder", 300),
                        ("reformer_transformers_encoder", 300), ("reformer_transformers_causal", 256),
                        ("reformer_transformers_short", 50)):
        records, tensors, model, config = make_golden(name, steps)
        assert {k: tuple(v.shape) for k, v in tensors.items()} == expected_tensors(config)
        assert list(records) == ["meta", "input", "output"] + [f"layer.{i}" for i in range(config["n_layers"])]
        assert len(records["input"]) == steps
        model = model.double()
        with torch.no_grad():
            out, layers, _ = model(records["input"], return_layers=True)
        # Exact: make_golden ran this same forward on the same weights and input; the file holds its bytes.
        assert torch.equal(records["output"], out)
        for i, h in enumerate(layers):
            assert torch.equal(records[f"layer.{i}"], h)
        o = records["output"]
        assert torch.isfinite(o).all(), name
        assert float(o.std(0).mean()) > 0.1 and len(torch.unique(o.round(decimals=6), dim=0)) > steps // 2, \
            f"{name}: degenerate output"
        if name == "reformer_transformers_short":   # one chunk: no hashing
            assert all(b.mixer.padded_length(steps) <= b.mixer.chunk for b in model.blocks)
            continue
        gaps = reformer_hash_gaps(model, records, config)
        assert min(gaps) >= RF_MIN_GAP, f"{name}: a hash margin {min(gaps):.3g} < {RF_MIN_GAP} (per layer {gaps})"


def reformer_transformers_forms():
    """Reformer's transformers form (float64): the per-stream form == explicit loops
    (naive_reformer_transformers) == the batched form, for lengths that pad and that do not,
    the standard path (n ≤ chunk, with and without pads), chunks_before / chunks_after beyond the
    chunk count, causal_mask, one round and several, dk ≠ dv; the rotations are per head
    (H, dk, r, nb/2), a buffer; positions share buckets (several in use); the batched rows are
    independent streams; no state, no recurrent form."""
    g = torch.Generator().manual_seed(37)
    d = RF_D_MODEL
    full = torch.randn(45, d, generator=g, dtype=torch.float64)
    cases = ((4, 5, 2, {}), (2, 8, 1, {"chunks_before": 0, "chunks_after": 1}),
             (8, 3, 3, {"chunks_before": 2, "chunks_after": 1, "causal_mask": True}),
             (6, 4, 2, {"pad_multiple": 8, "pad_above": 2}),
             (4, 2, 2, {"chunks_before": 5, "chunks_after": 3}),   # offsets beyond a short sequence's chunks
             (4, 16, 2, {"causal_mask": True, "pad_above": 8}))     # n ≤ 16: the standard path
    for nb, c, r, extra in cases:
        cfg = {**_rf_cfg(nb, c, r), "form": "transformers", **extra}
        what = f"reformer transformers nb {nb} c {c} r {r} {extra}"
        torch.manual_seed(0)
        att = Reformer(cfg, d).double()
        got = {name: tuple(t.shape) for name, t in att.state_dict().items()}
        assert got["rotations"] == (2, 4, r, nb // 2), f"{what}: {got}"
        assert "rotations" not in dict(att.named_parameters()) and att.empty_state(torch.float64) == {}
        with torch.no_grad():
            for n in (45, 4 * c, 2 * c + 1, c, c - 1, 2, 1):
                if n < 1 or n > len(full):
                    continue
                x = full[:n]
                y, _ = att.noncausal(x, {})
                q, v = _rf_parts(att, x)
                want = F.linear(naive_reformer_transformers(cfg, att.rotations, q, v).reshape(n, -1),
                                att.out.weight, att.out.bias)
                assert_close(y, want, 1e-12, f"{what}: noncausal vs explicit loops (N={n})")
                assert_close(y, att(x[None])[0], 1e-12, f"{what}: noncausal vs batched (N={n})")
            x2 = torch.stack([full[:23], full[5:28]])
            yb = att(x2)
            for b in range(2):
                assert_close(yb[b], att.noncausal(x2[b], {})[0], 1e-12, f"{what}: batch row {b}")
            buckets = att.hashes(full).argmax(-1)              # (r, H, N)
            assert all(len(set(bk.tolist())) > 1 for bk in buckets.flatten(0, 1)), f"{what}: one bucket only"
            expect_value_error(lambda: att.recurrent(full[:4], {}), "no recurrent form", f"{what}: stepped")
    # padded_length: pads only past pad_above, up to a multiple of pad_multiple.
    att = Reformer({**_rf_cfg(4, 4, 1), "form": "transformers", "pad_multiple": 8, "pad_above": 3}, d)
    assert [att.padded_length(n) for n in (1, 3, 4, 8, 9, 16, 17)] == [1, 3, 8, 8, 16, 16, 24]
    # The loops and the form are both ours: tests/layouts/test_hf_reformer_attention.py holds the
    # form to transformers' own LSHSelfAttention (1e-10 in float64).


# ---------------------------------------------------------------- model-level features

def norm_forms():
    """RMSNorm and ScaleNorm (l2 and rms) against their README formulas and the libraries'
    own forms (performer-pytorch PreScaleNorm: x / clamp(‖x‖, eps) · g; FLASH-pytorch
    ScaleNorm: x / clamp(‖x‖·d^(−1/2), eps) · g); a zero row stays zero (the eps clamp)."""
    from recur_ref.model import RMSNorm, ScaleNorm
    torch.manual_seed(3)
    d, eps = 12, 1e-5
    x = torch.randn(7, d, dtype=torch.float64)
    x[3] = 0
    rms = RMSNorm(d, eps).double()
    with torch.no_grad():
        rms.weight.copy_(1 + 0.1 * torch.randn(d))
        want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * rms.weight
        assert_close(rms(x), want, 1e-15, "rms_norm")
        for scale, c in (("l2", 1.0), ("rms", d ** -0.5)):
            sn = ScaleNorm(d, eps, scale).double()
            sn.weight.fill_(1.3)
            library = x / (torch.norm(x, dim=-1, keepdim=True) * c).clamp(min=eps) * sn.weight
            assert_close(sn(x), library, 1e-15, f"scale_norm {scale}")
            assert sn.weight.shape == (1,) and torch.equal(sn(x)[3], torch.zeros(d))
            y = sn(x)
            assert_close(torch.norm(y[0]) * c, torch.tensor(1.3, dtype=torch.float64), 1e-12, f"{scale} length")


def norm_config_validation():
    """"norm": a bad type, a missing or bad scale, an extra key or a non-object is a ValueError
    naming the key; absent is layer_norm (every config before it: the same model)."""
    base = load_config("rms_norm_tokens")
    bad = [({**base, "norm": {"type": "batch_norm"}}, "norm.type"),
           ({**base, "norm": "rms_norm"}, "norm.type"),
           ({**base, "norm": None}, "norm.type"),
           ({**base, "norm": {"type": "scale_norm"}}, "norm (scale_norm) must have exactly the keys"),
           ({**base, "norm": {"type": "scale_norm", "scale": "l1"}}, "norm.scale"),
           ({**base, "norm": {"type": "rms_norm", "scale": "l2"}}, "norm (rms_norm) must have exactly the keys"),
           ({**base, "norm": {"type": "layer_norm", "eps": 1e-5}}, "norm (layer_norm)")]
    for config, word in bad:
        expect_value_error(lambda: RecurModel(config), word, f"accepted norm {config['norm']}")
    plain = {k: v for k, v in base.items() if k != "norm"}
    explicit = {**plain, "norm": {"type": "layer_norm"}}
    names = {k: tuple(v.shape) for k, v in checkpoint.build_model(plain, 1).state_dict().items()}
    assert names == {k: tuple(v.shape) for k, v in checkpoint.build_model(explicit, 1).state_dict().items()}
    assert names["final_norm.bias"] == (32,)


def no_ffn_blocks():
    """"ffn": null: blocks with neither norm2 nor FFN (state_dict and modules), pre-norm
    x + Mixer(norm1(x)) and post-norm norm1(x + Mixer(x)) per block; a bad "ffn" is still a
    ValueError naming it."""
    for name in ("no_ffn_tokens", "no_ffn_post_features"):
        cfg = load_config(name)
        model = checkpoint.build_model(cfg, 2).double()
        assert all(b.ffn is None and b.norm2 is None for b in model.blocks)
        assert not any(".ffn." in k or ".norm2." in k for k in model.state_dict()), name
        x = golden.random_inputs(cfg, 20, 3)
        with torch.no_grad():
            _, layers, _ = model(x, return_layers=True)
            h = model.input(x.double() if x.is_floating_point() else x, 0)
            for i, block in enumerate(model.blocks):
                if block.pre_norm:
                    h = h + block.mixer.parallel(block.norm1(h), block.mixer.empty_state(torch.float64), 0, 7)[0]
                else:
                    a, _ = block._mix(h, block.mixer.empty_state(torch.float64), 7, 0)
                    h = block.norm1(h + a)
                assert_close(layers[i], h, 1e-12, f"{name} block {i}")
    base = load_config("no_ffn_tokens")
    for bad, word in (({**base, "ffn": {}}, "ffn must have the keys"),
                      ({**base, "ffn": {"d_ff": 0, "activation": "relu"}}, "ffn.d_ff"),
                      ({**base, "ffn": 64}, "ffn must have the keys")):
        expect_value_error(lambda: RecurModel(bad), word, f"accepted ffn {bad['ffn']}")


def sinusoid_positions():
    """model.sinusoid against math.sin/cos element by element, also at positions 10⁶ and
    2³⁰ + 7 (float64 angles; a float32 angle there is off by whole radians); the libraries'
    [sin | cos] layout (inv_freq = 1/base^(arange(0, d, 2)/d), emb = cat(sin, cos)); the
    input adapter adds it at the stream position pos (times the learned scale), in float32
    models too; a bad "positions" is a ValueError naming the key."""
    from recur_ref.model import sinusoid
    d = 6
    for pos in (0, 999, 10 ** 6, 2 ** 30 + 7):
        pe = sinusoid(pos, 3, d, 10000)
        for r in range(3):
            for i in range(d // 2):
                a = (pos + r) * 10000 ** (-2 * i / d)
                assert abs(pe[r, i] - math.sin(a)) <= 1e-15 and abs(pe[r, d // 2 + i] - math.cos(a)) <= 1e-15
    inv_freq = 1.0 / (500 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))     # the libraries' own form
    t = torch.arange(40, 45, dtype=torch.float64)
    library = torch.cat([torch.outer(t, inv_freq).sin(), torch.outer(t, inv_freq).cos()], -1)
    assert_close(sinusoid(40, 5, 8, 500), library, 1e-12, "library layout")
    assert torch.equal(sinusoid(0, 1, 2, 10000), torch.tensor([[0.0, 1.0]], dtype=torch.float64))

    cfg = load_config("sinusoid_tokens")
    model = checkpoint.build_model(cfg, 4).double()
    x = golden.random_inputs(cfg, 5, 1)
    with torch.no_grad():
        g = float(model.input.position_scale)
        assert g != 1.0
        for pos in (0, 10 ** 6):
            want = model.input.embedding[x.long()] + g * sinusoid(pos, 5, cfg["d_model"], 10000)
            assert_close(model.input(x, pos), want, 1e-15, f"input at {pos}")
        f32 = checkpoint.build_model(cfg, 4)
        assert_close(f32.input(x, 10 ** 6).double(), model.input(x, 10 ** 6), 1e-6, "float32 input at 10^6")
        # "freq": "stored": the frequencies are the tensor input.position_freq, whatever it holds.
        stored = RecurModel({**cfg, "positions": {**cfg["positions"], "freq": "stored"}}).double()
        assert stored.input.position_freq.shape == (cfg["d_model"] // 2,)
        assert "input.position_freq" in stored.state_dict()
        stored.input.position_freq.copy_(torch.linspace(0.5, 0.01, cfg["d_model"] // 2))
        for pos in (0, 10 ** 6):
            t = torch.arange(pos, pos + 5, dtype=torch.float64)
            a = torch.outer(t, stored.input.position_freq)
            want = stored.input.embedding[x.long()] + stored.input.position_scale * torch.cat([a.sin(), a.cos()], -1)
            assert_close(stored.input(x, pos), want, 1e-15, f"stored freq input at {pos}")
    bad = [({**cfg, "positions": {"type": "rotary"}}, "positions.type"),
           ({**cfg, "positions": "sinusoid"}, "positions.type"),
           ({**cfg, "positions": {"type": "sinusoid", "base": 0}}, "positions.base"),
           ({**cfg, "positions": {"type": "sinusoid", "base": "10000"}}, "positions.base"),
           ({**cfg, "positions": {"type": "sinusoid", "base": math.inf}}, "positions.base"),
           ({**cfg, "positions": {"type": "sinusoid", "scale": "fixed"}}, "positions.scale"),
           ({**cfg, "positions": {"type": "sinusoid", "max_len": 4}}, "positions has unknown keys ['max_len']"),
           ({**cfg, "positions": {"type": "sinusoid", "freq": "learned"}}, "positions.freq"),
           ({**cfg, "d_model": 33, "mixer": {**cfg["mixer"], "dk": 16}}, "even d_model, got 33")]
    for config, word in bad:
        expect_value_error(lambda: RecurModel(config), word, f"accepted positions {config['positions']}")


def glu_feed_forward():
    """A GLU FeedForward is performer-pytorch's FeedForward(glu=True) (`x, v = w1(x).chunk(2, -1);
    act(x) * v`, then w2) on the same weights, with relu and gelu; "glu" must be a bool."""
    from recur_ref.model import FeedForward
    torch.manual_seed(5)
    x = torch.randn(9, 12, dtype=torch.float64)
    for act, fn in (("relu", F.relu), ("gelu", F.gelu)):
        ffn = FeedForward(12, 7, act, glu=True).double()
        assert ffn.linear1.weight.shape == (14, 12) and ffn.linear2.weight.shape == (12, 7)
        with torch.no_grad():
            h, v = ffn.linear1(x).chunk(2, dim=-1)
            assert_close(ffn(x), ffn.linear2(fn(h) * v), 1e-15, f"glu {act}")
    base = load_config("glu_tokens")
    for glu in ("yes", 1, None):
        bad = {**base, "ffn": {**base["ffn"], "glu": glu}}
        expect_value_error(lambda: RecurModel(bad), "ffn.glu", f"accepted glu {glu!r}")
    expect_value_error(lambda: RecurModel({**base, "ffn": {**base["ffn"], "gated": True}}), "ffn must have the keys",
                       "accepted an unknown ffn key")
    plain = {**base, "ffn": {"d_ff": 48, "activation": "gelu", "glu": False}}
    assert checkpoint.build_model(plain, 1).blocks[0].ffn.linear1.weight.shape == (48, 32)


def reversible_blocks():
    """residual "reversible": each golden layer is x1 + x2 of performer-pytorch's ReversibleSequence
    written out (x = cat([x, x]); per block y1 = x1 + f(x2), y2 = x2 + g(y1); out = the chunks'
    sum), parallel, step and prefill forms agree (config_checks), and post-norm, no FFN or an
    unknown residual are ValueErrors that say why."""
    cfg = load_config("reversible_encoder")
    model = checkpoint.build_model(cfg, 6).double()
    x = golden.random_inputs(cfg, 30, 2)
    with torch.no_grad():
        out, layers, _ = model(x, return_layers=True)
        h = model.input(x.double(), 0)
        both = torch.cat([h, h], -1)
        for i, block in enumerate(model.blocks):
            x1, x2 = both.chunk(2, -1)
            y1 = x1 + block.mixer.noncausal(block.norm1(x2), block.mixer.empty_state(torch.float64))[0]
            y2 = x2 + block.ffn(block.norm2(y1))
            both = torch.cat([y1, y2], -1)
            assert_close(layers[i], torch.stack(both.chunk(2, -1)).sum(0), 1e-12, f"block {i}")
        assert_close(out, torch.softmax(model.head(torch.stack(both.chunk(2, -1)).sum(0)), -1), 1e-12, "output")
    bad = [({**cfg, "residual": "reversible", "norm_placement": "post"}, "needs norm_placement 'pre'"),
           ({**cfg, "ffn": None}, "needs a feed-forward"),
           ({**cfg, "residual": "revnet"}, "residual must be one of ['standard', 'reversible', 'reversible_concat']"),
           ({**cfg, "residual": "reversible_concat", "norm_placement": "post"},
            "residual 'reversible_concat' needs norm_placement 'pre'"),
           ({**cfg, "residual": None}, "residual must be one of")]
    for config, word in bad:
        expect_value_error(lambda: RecurModel(config), word, f"accepted {config['residual']} {config['norm_placement']}")
    # reversible_concat: the same blocks; [x1 | x2] (2·d_model) through the final norm and head.
    concat_cfg = {**cfg, "residual": "reversible_concat", "final_norm": True}
    concat = checkpoint.build_model(concat_cfg, 6).double()
    d = cfg["d_model"]
    assert concat.head.weight.shape == (cfg["head"]["out"], 2 * d) and concat.final_norm.weight.shape == (2 * d,)
    with torch.no_grad():
        out, layers, _ = concat(x, return_layers=True)
        both = torch.cat([concat.input(x.double(), 0)] * 2, -1)
        for i, block in enumerate(concat.blocks):
            x1, x2 = both.chunk(2, -1)
            y1 = x1 + block.mixer.noncausal(block.norm1(x2), block.mixer.empty_state(torch.float64))[0]
            both = torch.cat([y1, x2 + block.ffn(block.norm2(y1))], -1)
            assert_close(layers[i], torch.stack(both.chunk(2, -1)).sum(0), 1e-12, f"concat block {i}")
        assert_close(out, torch.softmax(concat.head(concat.final_norm(both)), -1), 1e-12, "concat output")
        assert_close(batched.forward(concat, x[None])[0], out, 1e-12, "concat batched")
    standard = checkpoint.build_model({**cfg, "residual": "standard"}, 6)
    assert not standard.reversible and set(standard.state_dict()) == set(model.state_dict())
    # With a token shift of norm1(x2) and norm2(y1), carried between calls.
    shifted = {**load_config("reversible_tokens"), "token_shift": {"segments": [[6, 1], [4, 0], [6, 1]], "ffn": True}}
    model = checkpoint.build_model(shifted, 6).double()
    x = golden.random_inputs(shifted, 24, 2)
    parallel_matches_steps(model, x, (1, 7, 24), "reversible with token shift")
    with torch.no_grad():
        assert_close(model(x), naive_forward(shifted, dict(model.state_dict()), x), 1e-9, "shifted vs naive")


def main():
    checks = [(f.__name__, f) for f in (safetensors_roundtrip, safetensors_rejects_bad_files, golden_roundtrip,
                                        model_rejects_bad_input, reference_follows_its_device, cli_end_to_end, golden_cache_cli, compare_run_cli,
                                        favor_omega_is_seeded, favor_config_validation, ft_favor_mapping,
                                        new_configs_golden_cli, softmax_attention_forms,
                                        softmax_config_validation, softmax_golden_cli, sliding_window_forms,
                                        aft_simple_forms, new_mixer_config_validation, new_mixer_golden_cli,
                                        aft_local_forms, aft_local_config_validation, aft_local_golden_cli,
                                        flash_forms, flash_config_validation, flash_golden_cli,
                                        mixed_model_forms, mixed_config_validation, mixed_golden_cli,
                                        linformer_forms, linformer_config_validation, linformer_layerwise_shared,
                                        linformer_golden_cli, aft_full_forms, aft_full_config_validation,
                                        aft_full_ft_mapping, aft_full_golden_cli, gau_forms,
                                        gau_config_validation, gau_golden_cli, reformer_forms, reformer_transformers_forms,
                                        reformer_config_validation, reformer_golden_cli, retnet_forms,
                                        retnet_config_validation, retnet_golden_cli, token_shift_forms,
                                        token_shift_config_validation, norm_forms,
                                        norm_config_validation, no_ffn_blocks, sinusoid_positions,
                                        glu_feed_forward, reversible_blocks)]
    checks += feature_map_checks()
    assert CONFIGS, "no configs found"
    for path in CONFIGS:
        checks += config_checks(path)
    run_checks(checks)


def run_checks(checks):
    """Runs every (name, fn), reporting each failure and going on; the last line is
    `N passed, M failed`, and the exit status 1 on any failure."""
    passed = failed = 0
    for name, fn in checks:
        start = time.perf_counter()
        try:
            fn()
        except Exception:  # report every failure, keep going
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        else:
            passed += 1
            print(f"ok   {name} ({time.perf_counter() - start:.2f} s)", flush=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
