#!/usr/bin/python3
"""Self-tests of the mixer references (recur_ref/mixers/), float64, small sizes.

    cd models/reference && /usr/bin/python3 -m unittest -q test_mixers
    (or /usr/bin/python3 -m pytest -q test_mixers.py where pytest is installed)

Step == parallel (1e-10) for every recurrent mixer, chunk(a)+chunk(b) == whole,
independent brute-force transcriptions of the docstring math, the fast-transformers
formulas, RetNet against torchscale's retention formulas, config validation, state sizes,
N ≥ 1000 step-vs-parallel runs, and the package following runtime/mixers/mixers.inc.
"""

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import torch
import torch.nn.functional as F

from recur_ref.mixers import (MIXERS, BlockLocalAttention, ROTARY_PAIRS, Rotary, build_mixer, fast_transformers_aft_full,
                              fast_transformers_favor, feature_dim, performer_favor, poly2, random_fourier, retnet_angles,
                              retnet_rotate, rotate_pairs, state_bytes, validate_mixer)
from recur_ref.mixers import registry

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
D_MODEL = 12
TOL = 1e-10
f64 = torch.float64

CAUSAL = {
    "softmax": {"type": "softmax_attention", "heads": 2, "dk": 3, "dv": 4},
    "linear_elu": {"type": "linear_attention", "heads": 2, "dk": 3, "dv": 4, "feature_map": "elu_plus_one", "eps": 1e-6},
    "linear_relu": {"type": "linear_attention", "heads": 2, "dk": 3, "dv": 4, "feature_map": "relu", "eps": 1e-6},
    "linear_poly2": {"type": "linear_attention", "heads": 2, "dk": 3, "dv": 4, "feature_map": "poly2", "eps": 1e-6},
    "linear_favor": {"type": "linear_attention", "heads": 2, "dk": 3, "dv": 4, "feature_map": "favor",
                     "n_features": 8, "eps": 1e-6},
    "linear_favor_ft": {"type": "linear_attention", "heads": 2, "dk": 3, "dv": 4, "feature_map": "favor",
                        "n_features": 7, "favor_layout": "fast_transformers", "eps": 1e-6},
    # fast-transformers' random Fourier features: signed features (odd m: ω has m//2 columns)
    "linear_rff": {"type": "linear_attention", "heads": 2, "dk": 3, "dv": 4, "feature_map": "random_fourier",
                   "n_features": 7, "softmax_temp": 0.3, "eps": 1e-6},
    "linear_rff_smooth": {"type": "linear_attention", "heads": 2, "dk": 3, "dv": 4,
                          "feature_map": "smoothed_random_fourier", "n_features": 6, "smoothing": 0.5,
                          "eps": 1e-6},
    "window": {"type": "sliding_window", "heads": 3, "dk": 3, "dv": 4, "window": 3, "dilation": [1, 2, 3],
               "global_tokens": 2},
    "window_plain": {"type": "sliding_window", "heads": 2, "dk": 3, "dv": 4, "window": 4},
    "aft_simple": {"type": "aft_simple", "heads": 2, "dk": 3},
    "aft_local": {"type": "aft_local", "heads": 2, "dk": 3, "window": 4},
    "aft_local1": {"type": "aft_local", "heads": 2, "dk": 3, "window": 1},
    "aft_conv": {"type": "aft_conv", "heads": 2, "dk": 3, "window": 3},
    "aft_full": {"type": "aft_full", "heads": 2, "dk": 3, "max_length": 40},
    "aft_full_ft": {"type": "aft_full", "heads": 2, "dk": 3, "max_length": 40, "bias_rank": 3,
                    "bias_form": "multiply"},
    "gau": {"type": "gau", "expansion_dim": 8, "qk_dim": 4, "max_length": 40, "scale": 0.3},
    "flash": {"type": "flash", "expansion_dim": 8, "qk_dim": 4, "chunk": 5},
    "retnet": {"type": "retnet", "heads": 3, "dk": 4, "dv": 5, "decay": [0.5, 0.9, 0.999]},
    "retnet_default": {"type": "retnet", "heads": 2, "dk": 2, "dv": 3, "eps": 1e-5},   # dk 2: one frequency
    # rotary position embeddings (§12): every pair layout, full and partial dims, a base of their own
    "softmax_rotary": {"type": "softmax_attention", "heads": 2, "dk": 4, "dv": 3,
                       "rotary": {"dims": 4, "pairs": "interleaved"}},
    "linear_rotary": {"type": "linear_attention", "heads": 2, "dk": 4, "dv": 3, "feature_map": "elu_plus_one",
                      "eps": 1e-6, "rotary": {"dims": 2, "pairs": "half", "base": 100}},
    "window_rotary": {"type": "sliding_window", "heads": 2, "dk": 4, "dv": 3, "window": 3, "global_tokens": 1,
                      "rotary": {"dims": 4, "pairs": "half"}},
    "flash_rotary": {"type": "flash", "expansion_dim": 8, "qk_dim": 4, "chunk": 5,
                     "rotary": {"dims": 2, "pairs": "interleaved", "base": 10}},
    # block_local's step forms: one chunk before (the defaults), and none with padding of its own
    "block_local": {"type": "block_local", "heads": 2, "dk": 3, "dv": 4, "chunk": 4},
    "block_local_b0": {"type": "block_local", "heads": 2, "dk": 3, "dv": 4, "chunk": 5, "chunks_before": 0,
                       "pad_multiple": 10, "pad_above": 3},
    # RWKV-7's time mix, standalone (the model's first block: its own v is v₀)
    "rwkv7": {"type": "rwkv7", "heads": 2, "head_size": 3, "decay_rank": 4, "rate_rank": 3,
              "value_rank": 2, "gate_rank": 5},
    # Mamba2's SSD mixer: 4 heads of 3 channels in 2 groups, a state of 5, a 3-tap convolution
    "mamba2": {"type": "mamba2", "heads": 4, "head_dim": 3, "state_size": 5, "groups": 2, "conv_kernel": 3},
    "mamba2_default": {"type": "mamba2", "heads": 2, "head_dim": 2, "state_size": 3, "bias": True,
                       "dt_min": 0.01, "dt_max": 0.05},
    # Gated DeltaNet: two value heads per key head, short convolutions; and without both
    "gated_deltanet": {"type": "gated_deltanet", "heads": 2, "v_heads": 4, "head_k_dim": 3, "head_v_dim": 2},
    "gated_deltanet_plain": {"type": "gated_deltanet", "heads": 2, "head_k_dim": 3, "head_v_dim": 4,
                             "conv_size": 0, "gate": False, "beta_scale": 2.0},
    # GLA: grouped key/value heads with short convolutions and a clamp; and the plain form
    "gla": {"type": "gla", "heads": 4, "kv_heads": 2, "head_k_dim": 3, "head_v_dim": 2, "gate_rank": 5,
            "conv_size": 3, "clamp_min": -0.1},
    "gla_plain": {"type": "gla", "heads": 2, "head_k_dim": 3, "head_v_dim": 4, "gate": False,
                  "gate_logit_normalizer": 4},
}
NONCAUSAL = {
    "softmax": {"type": "softmax_attention", "heads": 2, "dk": 3, "dv": 4, "causal": False},
    "linear_favor": dict(CAUSAL["linear_favor"], causal=False),
    "linear_rff_smooth": dict(CAUSAL["linear_rff_smooth"], causal=False),
    "window": dict(CAUSAL["window"], causal=False),
    "aft_simple": {"type": "aft_simple", "heads": 2, "dk": 3, "causal": False},
    "aft_local": {"type": "aft_local", "heads": 2, "dk": 3, "window": 3, "causal": False},
    "aft_conv": {"type": "aft_conv", "heads": 2, "dk": 3, "window": 3, "causal": False},
    "aft_full_ft": dict(CAUSAL["aft_full_ft"], causal=False),
    "gau": dict(CAUSAL["gau"], causal=False),
    # FLASH-pytorch's GAU: scores / N, an encoder, without and with the causal mask
    "gau_length": dict(CAUSAL["gau"], causal=False, length_scale=True),
    "gau_length_masked": dict(CAUSAL["gau"], length_scale=True),
    "flash": dict(CAUSAL["flash"], causal=False),
    "linformer": {"type": "linformer", "heads": 2, "dk": 3, "dv": 4, "seq_len": 30, "proj_dim": 5},
    "linformer_kv": {"type": "linformer", "heads": 2, "dk": 3, "dv": 4, "seq_len": 30, "proj_dim": 5,
                     "sharing": "kv"},
    # chunk 16 ≥ N in the tests below: one chunk, every other position; reformer_c3: chunks of 3
    "reformer": {"type": "reformer", "heads": 2, "dk": 3, "dv": 4, "n_buckets": 4, "chunk": 16, "rounds": 2},
    "reformer_c3": {"type": "reformer", "heads": 2, "dk": 3, "dv": 4, "n_buckets": 6, "chunk": 3, "rounds": 3,
                    "causal": False},
    # form "transformers": chunk 16 ≥ N: the standard path (no hashing); _c3: 3 rounds of chunks
    # of 3 seeing one chunk back and one ahead, causal_mask, pads to a multiple of 6
    "reformer_hf": {"type": "reformer", "form": "transformers", "heads": 2, "dk": 3, "dv": 4, "n_buckets": 4,
                    "chunk": 16, "rounds": 2},
    "reformer_hf_c3": {"type": "reformer", "form": "transformers", "heads": 2, "dk": 3, "dv": 4, "n_buckets": 6,
                       "chunk": 3, "rounds": 3, "chunks_before": 1, "chunks_after": 1, "causal_mask": True,
                       "pad_multiple": 6, "pad_above": 3},
    "softmax_rotary": dict(CAUSAL["softmax_rotary"], causal=False),
    "linear_rotary": dict(CAUSAL["linear_rotary"], causal=False),
    "window_rotary": dict(CAUSAL["window_rotary"], causal=False),
    "flash_rotary": dict(CAUSAL["flash_rotary"], causal=False),
    # block_local encoders: non-causal (chunk 0 wraps onto the last chunk), and the causal mask with
    # chunks after (no step form)
    "block_local": {"type": "block_local", "heads": 2, "dk": 3, "dv": 4, "chunk": 4, "chunks_after": 1,
                    "causal": False},
    "block_local_wide": {"type": "block_local", "heads": 2, "dk": 3, "dv": 4, "chunk": 3, "chunks_before": 2,
                         "chunks_after": 1, "pad_multiple": 6, "pad_above": 2},
}


def make(cfg, seed=0):
    torch.manual_seed(seed)
    return build_mixer(cfg, D_MODEL).double()


def rand_x(b, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, D_MODEL, generator=g, dtype=f64)


def run_steps(m, x, state):
    ys = []
    for t in range(x.shape[1]):
        y, state = m.step(x[:, t], state)
        ys.append(y)
    return torch.stack(ys, 1), state


def maxdiff(a, b):
    return (a - b).abs().max().item()


def state_diff(s1, s2):
    assert s1.keys() == s2.keys()
    return max((maxdiff(s1[k].double(), s2[k].double()) if s1[k].numel() else 0.0) for k in s1)


class StepEqualsParallel(unittest.TestCase):
    def test_steps_equal_forward(self):
        x = rand_x(2, 23)
        for name, cfg in CAUSAL.items():
            with self.subTest(name):
                m = make(cfg)
                y = m(x)
                ys, _ = run_steps(m, x, m.initial_state(2, max_context=30))
                self.assertLessEqual(maxdiff(ys, y), TOL)
                self.assertEqual(tuple(y.shape), (2, 23, D_MODEL))

    def test_chunk_a_plus_chunk_b(self):
        x = rand_x(2, 23)
        for name, cfg in CAUSAL.items():
            with self.subTest(name):
                m = make(cfg)
                s0 = m.initial_state(2, max_context=30)
                y_all, s_all = m.prefill(x, s0)
                for a in (1, 7, 10, 15):
                    ya, sa = m.prefill(x[:, :a], s0)
                    yb, sb = m.prefill(x[:, a:], sa)
                    self.assertLessEqual(maxdiff(torch.cat([ya, yb], 1), y_all), TOL)
                    self.assertLessEqual(state_diff(sb, s_all), TOL)
                ys, s_steps = run_steps(m, x, s0)   # N steps leave the same state
                self.assertLessEqual(maxdiff(ys, y_all), TOL)
                self.assertLessEqual(state_diff(s_steps, s_all), 1e-9)

    def test_step_does_not_mutate_state(self):
        for name, cfg in CAUSAL.items():
            with self.subTest(name):
                m = make(cfg)
                s = m.initial_state(1, max_context=30)
                s, _ = m.prefill(rand_x(1, 3), s)[1], None
                before = {k: v.clone() for k, v in s.items()}
                m.step(rand_x(1, 1)[:, 0], s)
                self.assertEqual(state_diff(before, s), 0.0)   # exact: `before` is a copy of s

    def test_long_sequences(self):
        """N = 1000 (1100 for favor): step loop vs parallel form (rotary: angles of thousands of
        radians)."""
        cases = {"linear_favor": (CAUSAL["linear_favor"], 1100), "window": (CAUSAL["window"], 1000),
                 "aft_simple": (CAUSAL["aft_simple"], 1000), "flash": (CAUSAL["flash"], 1000),
                 "retnet": (CAUSAL["retnet"], 1000), "softmax_rotary": (CAUSAL["softmax_rotary"], 1000),
                 "linear_rotary": (CAUSAL["linear_rotary"], 1000), "flash_rotary": (CAUSAL["flash_rotary"], 1000),
                 "block_local": (CAUSAL["block_local"], 1000), "rwkv7": (CAUSAL["rwkv7"], 1000),
                 "mamba2": (CAUSAL["mamba2"], 1000), "gated_deltanet": (CAUSAL["gated_deltanet"], 1000),
                 "gla": (CAUSAL["gla"], 1000)}
        for name, (cfg, n) in cases.items():
            with self.subTest(name):
                m = make(cfg)
                x = rand_x(1, n, seed=5)
                ys, _ = run_steps(m, x, m.initial_state(1, max_context=n))
                ref = flash_brute(m, x) if name == "flash" else m(x)
                self.assertLessEqual(maxdiff(ys, ref), TOL)


class NoRecurrentForm(unittest.TestCase):
    def test_noncausal_forward_and_no_step(self):
        x = rand_x(2, 11)
        for name, cfg in NONCAUSAL.items():
            with self.subTest(name):
                m = make(cfg)
                self.assertEqual(tuple(m(x).shape), (2, 11, D_MODEL))
                self.assertFalse(m.has_step)
                self.assertFalse(state_bytes(cfg, D_MODEL).recurrent)
                with self.assertRaisesRegex(ValueError, "no recurrent"):
                    m.initial_state(2)
                with self.assertRaisesRegex(ValueError, "no recurrent"):
                    m.step(x[:, 0], {})

    def test_noncausal_is_not_causal(self):
        """Changing the last position changes the first output (whole-sequence mixing)."""
        for name, cfg in NONCAUSAL.items():
            if name in ("window", "window_rotary", "aft_local", "aft_conv", "flash", "flash_rotary", "reformer_c3",
                        "block_local_wide", "reformer_hf_c3", "gau_length_masked"):
                continue   # local: position 0 does not see position N−1 (reformer_c3: not in a chunk before it;
                # block_local_wide, reformer_hf_c3, gau_length_masked: masked; block_local: it does, through the wrap)
            with self.subTest(name):
                m = make(cfg)
                if name in ("gau", "gau_length"):   # relu² may zero a far pair: make the bias positive
                    with torch.no_grad():
                        m.rel_bias.fill_(1.0)
                x = rand_x(1, 9)
                x2 = x.clone()
                x2[:, -1] += 1
                self.assertGreater(maxdiff(m(x)[:, 0], m(x2)[:, 0]), 1e-6)


class Bounds(unittest.TestCase):
    def test_softmax_max_context(self):
        m = make(CAUSAL["softmax"])
        s = m.initial_state(1, max_context=4)
        x = rand_x(1, 5)
        for t in range(4):
            _, s = m.step(x[:, t], s)
        with self.assertRaisesRegex(ValueError, "exceed max_context 4"):
            m.step(x[:, 4], s)
        with self.assertRaisesRegex(ValueError, "max_context"):
            m.initial_state(1)
        with self.assertRaisesRegex(ValueError, "exceed max_context 4"):
            m.prefill(x, m.initial_state(1, max_context=4))

    def test_bounded_length_mixers(self):
        for name in ("aft_full", "gau"):
            with self.subTest(name):
                cfg = dict(CAUSAL[name], max_length=4)
                m = make(cfg)
                x = rand_x(1, 5)
                with self.assertRaisesRegex(ValueError, "exceed max_length 4"):
                    m(x)
                s = m.prefill(x[:, :4], m.initial_state(1))[1]
                with self.assertRaisesRegex(ValueError, "exceed max_length 4"):
                    m.step(x[:, 4], s)

    def test_linformer_length(self):
        m = make(NONCAUSAL["linformer"])
        with self.assertRaisesRegex(ValueError, "exceeds seq_len 30"):
            m(rand_x(1, 31))


class StateSizes(unittest.TestCase):
    def test_state_bytes_match_tensors_and_constant(self):
        for name, cfg in CAUSAL.items():
            with self.subTest(name):
                m = make(cfg)
                size = state_bytes(cfg, D_MODEL)
                self.assertEqual(size, m.state_size())
                s0 = m.initial_state(1, max_context=30)
                floats = lambda s: sum(v.numel() for k, v in s.items() if v.is_floating_point())
                bound = size.bound or 30
                self.assertEqual(4 * floats(s0), size.fixed_bytes + size.per_position_bytes * bound)
                shapes = lambda s: {k: tuple(v.shape) for k, v in s.items()}
                s5 = m.prefill(rand_x(1, 5), s0)[1]
                s25 = m.prefill(rand_x(1, 20), s5)[1]
                self.assertEqual(shapes(s0), shapes(s5))
                self.assertEqual(shapes(s5), shapes(s25))
                fixed = name not in ("softmax", "softmax_rotary", "aft_full", "aft_full_ft", "gau")
                self.assertEqual(size.grows, not fixed)

    def test_formulas(self):
        c = CAUSAL
        self.assertEqual(state_bytes(c["linear_poly2"], D_MODEL).fixed_bytes, 4 * 2 * (9 * 4 + 9))
        self.assertEqual(state_bytes(c["linear_favor_ft"], D_MODEL).fixed_bytes, 4 * 2 * (6 * 4 + 6))
        self.assertEqual(state_bytes(c["linear_rff"], D_MODEL).fixed_bytes, 4 * 2 * (6 * 4 + 6))
        self.assertEqual(state_bytes(c["linear_rff_smooth"], D_MODEL).fixed_bytes, 4 * 2 * (7 * 4 + 7))
        self.assertEqual(state_bytes(c["window"], D_MODEL).fixed_bytes, 4 * 3 * ((2 * 3 + 1) + 2) * 7)
        self.assertEqual(state_bytes(c["aft_local"], D_MODEL).fixed_bytes, 4 * 6 * (3 + 8))
        self.assertEqual(state_bytes(c["flash"], D_MODEL).fixed_bytes, 4 * (4 * 8 + 5 * (8 + 8)))
        self.assertEqual(state_bytes(c["softmax"], D_MODEL).per_position_bytes, 4 * 2 * 7)
        self.assertEqual(state_bytes(c["retnet"], D_MODEL).fixed_bytes, 4 * 3 * 4 * 5)
        self.assertEqual(state_bytes(c["mamba2"], D_MODEL).fixed_bytes, 4 * (2 * (12 + 20) + 4 * 3 * 5))
        self.assertEqual(state_bytes(c["mamba2_default"], D_MODEL).fixed_bytes, 4 * (3 * (4 + 6) + 2 * 2 * 3))
        self.assertEqual(state_bytes(c["block_local"], D_MODEL).fixed_bytes, 4 * 2 * (2 * 4) * 7)
        self.assertEqual(state_bytes(c["block_local_b0"], D_MODEL).fixed_bytes, 4 * 2 * 5 * 7)


class TensorNames(unittest.TestCase):
    def test_names_and_shapes(self):
        lin = ["query.weight", "query.bias", "key.weight", "key.bias", "value.weight", "value.bias",
               "out.weight", "out.bias"]
        gau = ["u_proj.weight", "u_proj.bias", "v_proj.weight", "v_proj.bias", "z_proj.weight", "z_proj.bias",
               "out.weight", "out.bias", "qk_gamma", "qk_beta", "rel_bias"]
        expect = {
            ("softmax", True): {}, ("linear_elu", True): {},
            ("linear_favor", True): {"feature_map.omega": (3, 8)},
            ("linear_favor_ft", True): {"feature_map.omega": (3, 3)},
            ("linear_rff", True): {"feature_map.omega": (3, 3)},
            ("linear_rff_smooth", False): {"feature_map.omega": (3, 3)},
            ("aft_local", True): {"pos_bias": (4,)}, ("aft_local", False): {"pos_bias": (5,)},
            ("aft_conv", True): {"conv_kernel": (2, 3)}, ("aft_conv", False): {"conv_kernel": (2, 5)},
            ("aft_full", True): {"pos_bias": (40, 40)}, ("aft_full_ft", True): {"u": (40, 3), "v": (40, 3)},
            ("linformer", False): {"E": (2, 5, 30), "F": (2, 5, 30)}, ("linformer_kv", False): {"E": (5, 30)},
            ("retnet", True): {"gate.weight": (15, D_MODEL), "gate.bias": (15,)},   # decay: from the config
            # rotary: from the config, no tensor
            ("softmax_rotary", True): {}, ("linear_rotary", True): {}, ("window_rotary", False): {},
            ("block_local", True): {}, ("block_local_wide", False): {},
        }
        for (name, causal), extra in expect.items():
            with self.subTest(name):
                sd = make((CAUSAL if causal else NONCAUSAL)[name]).state_dict()
                self.assertEqual(set(sd), set(lin) | set(extra))
                for k, shape in extra.items():
                    self.assertEqual(tuple(sd[k].shape), shape)
        sd = make(CAUSAL["flash"]).state_dict()
        self.assertEqual(set(sd), set(gau))
        self.assertEqual(set(make(CAUSAL["flash_rotary"]).state_dict()), set(gau))
        self.assertEqual(tuple(sd["qk_gamma"].shape), (4, 4))
        self.assertEqual(tuple(sd["rel_bias"].shape), (5,))
        self.assertEqual(tuple(make(NONCAUSAL["flash"]).state_dict()["rel_bias"].shape), (9,))
        sd = make(CAUSAL["gau"]).state_dict()
        self.assertEqual(set(sd), set(gau))
        self.assertEqual(tuple(sd["qk_gamma"].shape), (2, 4))
        self.assertEqual(tuple(sd["rel_bias"].shape), (40,))
        sd = make(NONCAUSAL["reformer_c3"]).state_dict()
        self.assertEqual(set(sd), {"query.weight", "query.bias", "value.weight", "value.bias", "out.weight",
                                   "out.bias", "rotations"})   # no key: shared QK
        self.assertEqual(tuple(sd["rotations"].shape), (3, 3, 3))
        sd = make(NONCAUSAL["reformer_hf_c3"]).state_dict()   # transformers' per-head rotations
        self.assertEqual({k: tuple(v.shape) for k, v in sd.items()},
                         {"query.weight": (6, D_MODEL), "query.bias": (6,), "value.weight": (8, D_MODEL),
                          "value.bias": (8,), "out.weight": (D_MODEL, 8), "out.bias": (D_MODEL,),
                          "rotations": (2, 3, 3, 3)})
        self.assertEqual(tuple(sd["value.weight"].shape), (8, D_MODEL))
        self.assertEqual(set(MIXERS), {"softmax_attention", "linear_attention", "sliding_window", "aft_simple",
                                       "aft_local", "aft_conv", "aft_full", "gau", "flash", "linformer",
                                       "reformer", "retnet", "block_local", "rwkv7", "mamba2", "gated_deltanet",
                                       "gla"})
        # Mamba2: in_proj rows z (12), the convolution's x, B, C (12 + 2·2·5), dt (4)
        self.assertEqual({k: tuple(v.shape) for k, v in make(CAUSAL["mamba2"]).state_dict().items()},
                         {"in_proj.weight": (48, D_MODEL), "conv.weight": (32, 3), "conv.bias": (32,),
                          "dt_bias": (4,), "A": (4,), "D": (4,), "norm.weight": (12,),
                          "out_proj.weight": (D_MODEL, 12)})
        self.assertEqual({k: tuple(v.shape) for k, v in make(CAUSAL["mamba2_default"]).state_dict().items()},
                         {"in_proj.weight": (16, D_MODEL), "in_proj.bias": (16,), "conv.weight": (10, 4),
                          "conv.bias": (10,), "dt_bias": (2,), "A": (2,), "D": (2,), "norm.weight": (4,),
                          "out_proj.weight": (D_MODEL, 4), "out_proj.bias": (D_MODEL,)})
        sd = make(CAUSAL["gla"]).state_dict()
        self.assertEqual({k: tuple(v.shape) for k, v in sd.items()},
                         {"query.weight": (12, D_MODEL), "key.weight": (6, D_MODEL), "value.weight": (4, D_MODEL),
                          "gate_down.weight": (5, D_MODEL), "gate_up.weight": (6, 5), "gate_up.bias": (6,),
                          "gate.weight": (8, D_MODEL), "out.weight": (D_MODEL, 8), "query_conv": (12, 3),
                          "key_conv": (6, 3), "value_conv": (4, 3), "norm_weight": (2,)})
        sd = make(CAUSAL["gated_deltanet"]).state_dict()
        self.assertEqual({k: tuple(v.shape) for k, v in sd.items()},
                         {"query.weight": (6, D_MODEL), "key.weight": (6, D_MODEL), "value.weight": (8, D_MODEL),
                          "decay.weight": (4, D_MODEL), "beta.weight": (4, D_MODEL), "gate.weight": (8, D_MODEL),
                          "out.weight": (D_MODEL, 8), "a_log": (4,), "dt_bias": (4,), "query_conv": (6, 4),
                          "key_conv": (6, 4), "value_conv": (8, 4), "norm_weight": (2,)})
        rwkv7 = {"token_mix": (6, D_MODEL), "receptance.weight": (6, D_MODEL), "key.weight": (6, D_MODEL),
                 "value.weight": (6, D_MODEL), "out.weight": (D_MODEL, 6),
                 "decay_down.weight": (4, D_MODEL), "decay_up.weight": (6, 4), "decay_up.bias": (6,),
                 "rate_down.weight": (3, D_MODEL), "rate_up.weight": (6, 3), "rate_up.bias": (6,),
                 "gate_down.weight": (5, D_MODEL), "gate_up.weight": (6, 5), "key_norm": (6,),
                 "key_rate": (6,), "bonus": (6,), "group_norm.weight": (6,), "group_norm.bias": (6,)}
        sd = make(CAUSAL["rwkv7"]).state_dict()
        self.assertEqual({k: tuple(v.shape) for k, v in sd.items()}, rwkv7)
        torch.manual_seed(0)
        sd = MIXERS["rwkv7"](CAUSAL["rwkv7"], D_MODEL, first=False).state_dict()   # a later block
        self.assertEqual({k: tuple(v.shape) for k, v in sd.items()},
                         {**rwkv7, "value_down.weight": (2, D_MODEL), "value_up.weight": (6, 2),
                          "value_up.bias": (6,)})


class Validation(unittest.TestCase):
    def test_rejects(self):
        base = CAUSAL
        bad = [
            ({"type": "nope", "heads": 1}, "unknown mixer.type"),
            (dict(base["linear_elu"], feature_map="tanh"), "unknown mixer.feature_map 'tanh'"),
            (dict(base["linear_elu"], eps=0), "mixer.eps must be > 0"),
            ({k: v for k, v in base["linear_favor"].items() if k != "n_features"}, "n_features is required"),
            (dict(base["linear_favor"], favor_layout="x"), "unknown mixer.favor_layout"),
            (dict(base["linear_elu"], n_features=4), "only valid with feature_map 'favor'"),
            (dict(base["linear_favor"], softmax_temp=-1.0), "softmax_temp must be > 0"),
            (dict(base["linear_rff"], n_features=1), "n_features must be an integer >= 2"),
            (dict(base["linear_rff"], softmax_temp=0), "softmax_temp must be > 0"),
            (dict(base["linear_rff"], favor_layout="fast_transformers"), "favor_layout applies only"),
            (dict(base["linear_rff"], smoothing=0.5), "smoothing must be a finite number and applies only"),
            (dict(base["linear_rff_smooth"], smoothing=float("inf")), "smoothing must be a finite number"),
            (dict(base["linear_elu"], smoothing=1.0), "smoothing must be a finite number and applies only"),
            (dict(base["linear_elu"], heads=0), "mixer.heads must be a positive integer"),
            (dict(base["linear_elu"], dk=2.5), "mixer.dk must be a positive integer"),
            (dict(base["linear_elu"], causal="yes"), "mixer.causal must be true or false"),
            (dict(base["linear_elu"], colour=1), "unknown keys \\['colour'\\]"),
            ({"type": "softmax_attention", "heads": 2, "dk": 3}, "missing keys \\['dv'\\]"),
            (dict(base["window"], window=0), "mixer.window must be a positive integer"),
            (dict(base["window"], dilation=[1, 2]), "mixer.dilation has 2 entries, expected heads = 3"),
            (dict(base["window"], dilation=[1, 0, 2]), "dilation entries must be positive"),
            (dict(base["window"], dilation=0), "mixer.dilation must be a positive integer"),
            (dict(base["window"], global_tokens=-1), "global_tokens must be an integer >= 0"),
            (dict(base["aft_local"], window=-2), "mixer.window must be a positive integer"),
            ({"type": "aft_conv", "heads": 2, "dk": 3}, "missing keys \\['window'\\]"),
            (dict(base["aft_full"], max_length=0), "max_length must be a positive integer"),
            (dict(base["aft_full"], bias_rank=0), "bias_rank must be a positive integer or null"),
            (dict(base["aft_full"], bias_form="mul"), "unknown mixer.bias_form"),
            (dict(base["flash"], chunk=0), "mixer.chunk must be a positive integer"),
            (dict(base["gau"], scale=0.0), "mixer.scale must be > 0"),
            (dict(base["gau"], length_scale=1), "mixer.length_scale must be true or false"),
            (dict(NONCAUSAL["linformer"], causal=True), "linformer is encoder-only"),
            (dict(NONCAUSAL["linformer"], sharing="all"), "unknown mixer.sharing"),
            (dict(NONCAUSAL["linformer"], proj_dim=0), "proj_dim must be a positive integer"),
            (dict(NONCAUSAL["reformer"], causal=True), "reformer has no causal/recurrent form"),
            (dict(NONCAUSAL["reformer"], n_buckets=5), "mixer.n_buckets must be an even integer >= 2"),
            (dict(NONCAUSAL["reformer"], n_buckets=0), "mixer.n_buckets must be an even integer >= 2"),
            (dict(NONCAUSAL["reformer"], chunk=0), "mixer.chunk must be a positive integer"),
            (dict(NONCAUSAL["reformer"], rounds=1.0), "mixer.rounds must be a positive integer"),
            ({k: v for k, v in NONCAUSAL["reformer"].items() if k != "rounds"}, "missing keys \\['rounds'\\]"),
            (dict(NONCAUSAL["reformer"], seq_len=30), "unknown keys \\['seq_len'\\]"),
            (dict(NONCAUSAL["reformer"], form="hf"), "unknown mixer.form 'hf'"),
            (dict(NONCAUSAL["reformer"], chunks_before=1), "keys \\['chunks_before'\\] apply only to mixer.form"),
            (dict(NONCAUSAL["reformer"], pad_above=0), "keys \\['pad_above'\\] apply only to mixer.form"),
            (dict(NONCAUSAL["reformer_hf"], pad_multiple=24), "mixer.pad_multiple must be a positive multiple"),
            (dict(NONCAUSAL["reformer_hf"], pad_multiple=0), "mixer.pad_multiple must be a positive multiple"),
            (dict(NONCAUSAL["reformer_hf"], pad_above=17), "mixer.pad_above must be an integer in \\[0, mixer.chunk"),
            (dict(NONCAUSAL["reformer_hf"], chunks_before=-1), "mixer.chunks_before must be an integer >= 0"),
            (dict(NONCAUSAL["reformer_hf"], chunks_after=1.0), "mixer.chunks_after must be an integer >= 0"),
            (dict(NONCAUSAL["reformer_hf"], chunks_before=40, chunks_after=24), "must be at most 64, got 65"),
            (dict(NONCAUSAL["reformer_hf"], causal_mask=1), "mixer.causal_mask must be true or false"),
            (dict(NONCAUSAL["reformer_hf"], causal=True), "reformer has no causal/recurrent form"),
            (dict(base["retnet"], dk=5), "mixer.dk must be even"),
            (dict(base["retnet"], decay=[0.5, 0.9]), "mixer.decay must be a list of one number per head"),
            (dict(base["retnet"], decay=0.9), "mixer.decay must be a list"),
            (dict(base["retnet"], decay=[0.5, 1.0, 0.9]), "mixer.decay entries must be in \\(0, 1\\)"),
            (dict(base["retnet"], decay=[0.5, 0.0, 0.9]), "mixer.decay entries must be in \\(0, 1\\)"),
            (dict(base["retnet"], decay=[0.5, 0.999999999, 0.9]), "as float32"),   # rounds to 1
            (dict(base["retnet"], decay=[0.5, "0.9", 0.9]), "mixer.decay entries"),
            (dict(base["retnet"], decay=[0.5, True, 0.9]), "mixer.decay entries"),
            (dict(base["retnet"], decay=[0.5, 10 ** 400, 0.9]), "mixer.decay entries"),
            (dict(base["retnet"], decay=[0.5, float("nan"), 0.9]), "mixer.decay entries"),
            (dict(base["retnet"], eps=0), "mixer.eps must be > 0"),
            (dict(base["retnet"], causal=True), "unknown keys \\['causal'\\]"),   # no encoder form
            (dict(base["retnet_default"], heads=21), "mixer.decay is required with more than 20 heads"),
            (dict(base["softmax_rotary"], rotary={"dims": 3, "pairs": "half"}),
             "mixer.rotary.dims must be even and at most dk \\(4\\), got 3"),
            (dict(base["softmax_rotary"], rotary={"dims": 6, "pairs": "half"}), "at most dk \\(4\\), got 6"),
            (dict(base["softmax_rotary"], rotary={"dims": 0, "pairs": "half"}), "mixer.rotary.dims must be even"),
            (dict(base["softmax_rotary"], rotary={"dims": 2.0, "pairs": "half"}), "mixer.rotary.dims must be even"),
            (dict(base["flash_rotary"], rotary={"dims": 6, "pairs": "half"}), "at most qk_dim \\(4\\), got 6"),
            (dict(base["softmax_rotary"], rotary={"dims": 4}), "mixer.rotary: missing keys \\['pairs'\\]"),
            (dict(base["softmax_rotary"], rotary={"dims": 4, "pairs": "rotate_half"}),
             "unknown mixer.rotary.pairs 'rotate_half'"),
            (dict(base["softmax_rotary"], rotary={"dims": 4, "pairs": "half", "base": 0}), "mixer.rotary.base must be"),
            (dict(base["softmax_rotary"], rotary={"dims": 4, "pairs": "half", "base": float("inf")}),
             "mixer.rotary.base must be"),
            (dict(base["softmax_rotary"], rotary={"dims": 4, "pairs": "half", "offset": 1}),
             "mixer.rotary: unknown keys \\['offset'\\]"),
            (dict(base["softmax_rotary"], rotary=[4, "half"]), "mixer.rotary must be a dict"),
            (dict(base["softmax_rotary"], rotary={"dims": 4, "pairs": "half", "theta": "learned"}),
             "unknown mixer.rotary.theta 'learned'"),
            (dict(base["softmax_rotary"], rotary={"dims": 4, "pairs": "half", "table": 0}),
             "mixer.rotary.table must be a positive integer"),
            (dict(base["softmax_rotary"], rotary={"dims": 4, "pairs": "half", "table": 8, "theta": "stored"}),
             "mixer.rotary.table excludes"),
            (dict(base["aft_simple"], rotary={"dims": 2, "pairs": "half"}), "unknown keys \\['rotary'\\]"),
            (dict(base["gau"], rotary={"dims": 2, "pairs": "half"}), "unknown keys \\['rotary'\\]"),
            (dict(base["retnet"], rotary={"dims": 2, "pairs": "half"}), "unknown keys \\['rotary'\\]"),
            (dict(base["block_local"], chunk=0), "mixer.chunk must be a positive integer"),
            (dict(base["block_local"], chunks_before=-1), "mixer.chunks_before must be an integer >= 0"),
            (dict(base["block_local"], chunks_after=1.0), "mixer.chunks_after must be an integer >= 0"),
            (dict(base["block_local"], pad_multiple=6), "mixer.pad_multiple must be a positive multiple of chunk"),
            (dict(base["block_local"], pad_multiple=0), "mixer.pad_multiple must be a positive multiple of chunk"),
            (dict(base["block_local"], pad_above=5), "mixer.pad_above must be an integer in \\[0, chunk \\(4\\)\\]"),
            (dict(base["block_local"], rotary={"dims": 2, "pairs": "half"}), "unknown keys \\['rotary'\\]"),
            ({"type": "block_local", "heads": 2, "dk": 3, "dv": 4}, "missing keys \\['chunk'\\]"),
            (dict(base["rwkv7"], head_size=0), "mixer.head_size must be a positive integer"),
            (dict(base["rwkv7"], gate_rank=1.5), "mixer.gate_rank must be a positive integer"),
            (dict(base["rwkv7"], group_norm_eps=0), "mixer.group_norm_eps must be > 0"),
            (dict(base["rwkv7"], decay_scale=-1), "mixer.decay_scale must be > 0"),
            (dict(base["rwkv7"], causal=True), "unknown keys \\['causal'\\]"),   # no encoder form
            ({k: v for k, v in base["rwkv7"].items() if k != "value_rank"}, "missing keys \\['value_rank'\\]"),
            (dict(base["mamba2"], groups=3), "mixer.groups \\(3\\) must divide mixer.heads \\(4\\)"),
            (dict(base["mamba2"], conv_kernel=0), "mixer.conv_kernel must be a positive integer"),
            (dict(base["mamba2"], state_size=2.5), "mixer.state_size must be a positive integer"),
            (dict(base["mamba2"], norm_eps=0), "mixer.norm_eps must be > 0"),
            (dict(base["mamba2"], dt_min=-1), "mixer.dt_min must be a number >= 0"),
            (dict(base["mamba2"], dt_min=0.5, dt_max=0.1), "mixer.dt_min must be below mixer.dt_max"),
            (dict(base["mamba2"], bias=1), "mixer.bias must be true or false"),
            (dict(base["mamba2"], causal=True), "unknown keys \\['causal'\\]"),   # no encoder form
        ]
        for cfg, msg in bad:
            with self.subTest(msg):
                with self.assertRaisesRegex(ValueError, msg):
                    validate_mixer(cfg, D_MODEL)
                with self.assertRaisesRegex(ValueError, msg):
                    build_mixer(cfg, D_MODEL)
        with self.assertRaisesRegex(ValueError, "d_model must be a positive integer"):
            validate_mixer(base["softmax"], 0)
        for cfg in list(CAUSAL.values()) + list(NONCAUSAL.values()):
            validate_mixer(cfg, D_MODEL)
        validate_mixer(dict(CAUSAL["retnet_default"], heads=20), D_MODEL)   # the last default decay < 1
        validate_mixer(dict(CAUSAL["retnet_default"], heads=21, decay=[0.9] * 21), D_MODEL)


# ----------------------------------------------------------------------------------------
# Independent transcriptions (loops over positions, straight from the docstrings)
# ----------------------------------------------------------------------------------------

def rope_brute(x, t, cfg):
    """x (..., dk) at position t turned per the README's rotary (§12), pair by pair in Python
    floats: pair i < r/2 is dims (2i, 2i+1) (interleaved) or (i, i + r/2) (half), angle
    t·base^(−2i/r); the dims past r pass."""
    r, base = cfg["dims"], cfg.get("base", 10000)
    out = x.clone()
    for i in range(r // 2):
        a, b = (2 * i, 2 * i + 1) if cfg["pairs"] == "interleaved" else (i, i + r // 2)
        c, s = math.cos(t * base ** (-2 * i / r)), math.sin(t * base ** (-2 * i / r))
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., b] * c + x[..., a] * s
    return out


def rope_rows(x, cfg, axis=-2):
    """x with the rows along `axis` at positions 0, 1, .. turned by rope_brute (cfg None: x)."""
    if cfg is None:
        return x
    x = x.movedim(axis, 0)
    return torch.stack([rope_brute(x[t], t, cfg) for t in range(len(x))]).movedim(0, axis)


def flash_brute(m, x):
    """FLASH per the docstring, position by position (causal or not), with the rotary of the
    four query/key rows when the config has one."""
    B, N, _ = x.shape
    u = F.silu(m.u_proj(x))
    v = F.silu(m.v_proj(x))
    z = F.silu(m.z_proj(x))
    qq, kq, ql, kl = (rope_rows(m.qk_gamma[r] * z + m.qk_beta[r], m.cfg.get("rotary")) for r in range(4))
    C = m.C
    out = torch.zeros(B, N, m.E, dtype=x.dtype)
    for t in range(N):
        g = t // C
        chunk = range(g * C, min(N, (g + 1) * C))
        quad = 0
        for p in chunk:
            if m.causal and p > t:
                continue
            b = m.rel_bias[t - p] if m.causal else m.rel_bias[t - p + C - 1]
            a = F.relu(m.scale * (qq[:, t] * kq[:, p]).sum(-1) + b) ** 2
            quad = quad + a[:, None] * v[:, p]
        if m.causal:
            S = sum((kl[:, p, :, None] * v[:, p, None, :] for p in range(g * C)), torch.zeros(B, m.s, m.E, dtype=x.dtype))
            lin = m.scale * torch.einsum("bs,bse->be", ql[:, t], S)
        else:
            S = sum(kl[:, p, :, None] * v[:, p, None, :] for p in range(N))
            lin = torch.einsum("bs,bse->be", ql[:, t], S) / N
        out[:, t] = u[:, t] * (quad + lin)
    return m.out(out)


def mamba2_brute(m, x):
    """Mamba2 by scalar loops (mamba_ssm's Mamba2.step, grouped): x (B, N, d) → (B, N, d)."""
    H, P, N, G, K = m.heads, m.p, m.n, m.groups, m.k
    I, W = m.inner, m.w
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        S = torch.zeros(H, P, N, dtype=x.dtype)
        us = []
        for t in range(x.shape[1]):
            proj = m.in_proj(x[b, t])
            z, u, dt = proj[:I], proj[I:I + W], proj[I + W:]
            us.append(u)
            conv = torch.zeros(W, dtype=x.dtype)
            for c in range(W):
                acc = m.conv.bias[c]
                for k in range(K):
                    s = t - K + 1 + k
                    if s >= 0:
                        acc = acc + m.conv.weight[c, k] * us[s][c]
                conv[c] = acc * torch.sigmoid(acc)
            xs, B, C = conv[:I], conv[I:I + G * N], conv[I + G * N:]
            y = torch.zeros(I, dtype=x.dtype)
            for h in range(H):
                g = h // (H // G)
                delta = min(max(math.log1p(math.exp(float(dt[h] + m.dt_bias[h]))), m.dt_min), m.dt_max)
                a = math.exp(delta * float(m.A[h]))
                for i in range(P):
                    xi = xs[h * P + i]
                    acc = 0.0
                    for j in range(N):
                        S[h, i, j] = a * S[h, i, j] + delta * xi * B[g * N + j]
                        acc = acc + S[h, i, j] * C[g * N + j]
                    y[h * P + i] = acc + m.D[h] * xi
            y = y * z * torch.sigmoid(z)
            gw = I // G
            for g in range(G):
                part = y[g * gw:(g + 1) * gw]
                y[g * gw:(g + 1) * gw] = part / torch.sqrt((part * part).mean() + m.eps)
            out[b, t] = m.out_proj(y * m.norm.weight)
    return out


def retnet_brute(m, x):
    """RetNet per the docstring, position by position, with the rotation written out pair by
    pair in Python floats: o_n = Σ_{j≤n} γ^{n−j} (q̃_n·k̃_j) v_j per head, RMS-normed, gated."""
    B, N, _ = x.shape
    H, dk, dv = m.heads, m.dk, m.dv
    q = m.query(x).view(B, N, H, dk)
    k = m.key(x).view(B, N, H, dk) / math.sqrt(dk)
    v = m.value(x).view(B, N, H, dv)
    half = dk // 2
    theta = [10000.0 ** (-i / (half - 1)) if half > 1 else 1.0 for i in range(half)]

    def rot(t, n):   # t (B, H, dk) at position n
        r = t.clone()
        for i in range(half):
            c, s = math.cos(n * theta[i]), math.sin(n * theta[i])
            r[..., 2 * i] = t[..., 2 * i] * c - t[..., 2 * i + 1] * s
            r[..., 2 * i + 1] = t[..., 2 * i + 1] * c + t[..., 2 * i] * s
        return r

    qr = [rot(q[:, n], n) for n in range(N)]
    kr = [rot(k[:, n], n) for n in range(N)]
    o = torch.zeros(B, N, H, dv, dtype=x.dtype)
    for n in range(N):
        for j in range(n + 1):
            w = (qr[n] * kr[j]).sum(-1) * m.decay ** (n - j)      # (B, H)
            o[:, n] += w[..., None] * v[:, j]
    o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + m.eps)
    return m.out(F.silu(m.gate(x)) * o.reshape(B, N, H * dv))


def torchscale_retention(qr, kr, v, decay, eps):
    """torchscale's parallel retention (MultiScaleRetention.parallel_forward with the mask of
    RetNetRelPos, then group_norm = RMSNorm(head_dim, eps) without weight), transcribed:
    qr, kr (H, N, dk) already rotated and scaled, v (H, N, dv), decay (H,) → (N, H, dv)."""
    n = qr.shape[1]
    idx = torch.arange(n, dtype=qr.dtype)
    e = idx[:, None] - idx[None, :]
    mask = torch.where(e >= 0, torch.exp(e.clamp(min=0) * torch.log(decay)[:, None, None]), 0.0 * e)
    mask = mask / mask.sum(-1, keepdim=True).sqrt()                            # decay-mask row scaling
    qk = (qr @ kr.transpose(-1, -2)) * mask
    qk = qk / qk.sum(-1, keepdim=True).abs().clamp(min=1)                       # |q·k| row-sum scaling
    o = (qk @ v).transpose(0, 1)                                               # (N, H, dv)
    return o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps)


def block_local_brute(m, x):
    """BlockLocalAttention's docstring math with loops over streams, heads and queries: x (B, N, d)."""
    cfg = m.cfg
    H, dk, dv, c = cfg["heads"], cfg["dk"], cfg["dv"], cfg["chunk"]
    b, a = cfg.get("chunks_before", 1), cfg.get("chunks_after", 0)
    pm, pa, mask = cfg.get("pad_multiple", c), cfg.get("pad_above", c), cfg.get("causal", True)
    B, T, _ = x.shape
    lin = lambda layer, h: h @ layer.weight.t() + layer.bias
    q, k, v = (lin(layer, x) for layer in (m.query, m.key, m.value))
    n = T if T <= pa or T % pm == 0 else (T // pm + 1) * pm
    o = torch.zeros(B, T, H * dv, dtype=x.dtype)
    for s in range(B):
        for h in range(H):
            for i in range(T):
                if n <= c:
                    slots = list(range(n))
                else:
                    g, M = i // c, n // c
                    slots = [((g + off) % M) * c + r for off in range(-b, a + 1) for r in range(c)]
                scores = [float(q[s, i, h * dk:(h + 1) * dk] @ k[s, j, h * dk:(h + 1) * dk]) / math.sqrt(dk)
                          if j < T and not (mask and j > i) else -1e9 for j in slots]
                top = max(scores)
                e = [math.exp(z - top) for z in scores]
                for j, w in zip(slots, e):
                    if j < T:
                        o[s, i, h * dv:(h + 1) * dv] += w / sum(e) * v[s, j, h * dv:(h + 1) * dv]
    return lin(m.out, o)


class Independent(unittest.TestCase):
    def test_block_local_bruteforce(self):
        """Every block_local case against the loops, at lengths below, at and above the chunk,
        padded and not: the step forms, the cyclic encoders, the causal mask with chunks after."""
        for name, cfg in [(f"causal {k}", v) for k, v in CAUSAL.items() if k.startswith("block_local")] + \
                         [(f"encoder {k}", v) for k, v in NONCAUSAL.items() if k.startswith("block_local")]:
            m = make(cfg)
            for n in (1, 3, 4, 5, 9, 12, 14, 23):
                with self.subTest(name, n=n):
                    x = rand_x(2, n, seed=n)
                    self.assertLessEqual(maxdiff(m(x), block_local_brute(m, x)), TOL)

    def test_block_local_wrap_and_repeats_by_hand(self):
        """With q = 0 every unmasked score is 0, so y_0 is the plain mean of the values at
        query 0's key slots (one value per head and position: v = 1, 10, 100, ...)."""
        def y0(T, **kv):
            cfg = {"type": "block_local", "heads": 1, "dk": 1, "dv": 1, **kv}
            m = BlockLocalAttention(cfg, D_MODEL).double()
            q = torch.zeros(1, T, 1, dtype=f64)
            v = torch.tensor([10.0 ** t for t in range(T)], dtype=f64).view(1, T, 1)
            return float(m.full(q, torch.randn(1, T, 1, dtype=f64), v)[0, 0, 0])
        # 4 positions, chunks of 2, one before and one after: chunk 0 looks at chunks 1, 0, 1,
        # so positions 2 and 3 count twice: (2·100 + 2·1000 + 1 + 10) / 6.
        self.assertAlmostEqual(y0(4, chunk=2, chunks_after=1, causal=False), 2211 / 6, places=9)
        # 6 positions, chunks of 2, one before: chunk 0 wraps onto chunk 2 (positions 4, 5).
        self.assertAlmostEqual(y0(6, chunk=2, causal=False), (1 + 10 + 1e4 + 1e5) / 4, places=6)
        # 5 positions padded to 6: slot 5 is a pad (−1e9), so the wrapped chunk adds position 4 only.
        self.assertAlmostEqual(y0(5, chunk=2, causal=False), (1 + 10 + 1e4) / 3, places=6)
        # Causal: query 0 sees only itself, the wrap being later positions (masked).
        self.assertAlmostEqual(y0(6, chunk=2, chunks_after=1), 1.0, places=12)
        # n ≤ chunk: standard attention over every slot (no chunks): 3 positions, chunk 4, no pad (3 ≤ 4).
        self.assertAlmostEqual(y0(3, chunk=4, causal=False), 111 / 3, places=9)

    def test_block_local_step_form_ignores_the_length(self):
        """Causal with chunks_before ≤ 1 and no chunk after: query t's output is the same whatever
        the sequence length (padding and the wrap change nothing), so the full form's prefix is the
        shorter sequence's full form."""
        for name in ("block_local", "block_local_b0"):
            m = make(CAUSAL[name])
            x = rand_x(1, 23)
            full = m(x)
            for n in (1, 4, 5, 9, 11, 17):
                with self.subTest(name, n=n):
                    self.assertLessEqual(maxdiff(m(x[:, :n]), full[:, :n]), TOL)
    def test_rwkv7_against_blinkdl_transcription(self):
        """The mixer against recur_ref/rwkv7.py's time mix (BlinkDL's RWKV_x070, held to the
        `rwkv` package by tests/layouts/test_rwkv7_reference.py) with the mixer's weights under
        BlinkDL's names: a first block, then a later block mixing in the first's v."""
        import recur_ref.rwkv7 as blinkdl
        Blinkdl = blinkdl.Rwkv7
        cfg = CAUSAL["rwkv7"]
        torch.manual_seed(3)
        first = MIXERS["rwkv7"](cfg, D_MODEL, first=True).double()
        later = MIXERS["rwkv7"](cfg, D_MODEL, first=False).double()
        z = {"emb.weight": torch.zeros(1, D_MODEL)}
        for i, m in enumerate((first, later)):
            p = f"blocks.{i}.att."
            for c, name in enumerate(("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")):
                z[p + name] = m.token_mix[c].detach()
            for ours, theirs in (("receptance", "receptance"), ("key", "key"), ("value", "value"),
                                 ("out", "output")):
                z[p + theirs + ".weight"] = getattr(m, ours).weight.detach()
            paths = [("decay", "w"), ("rate", "a"), ("gate", "g")] + ([("value", "v")] if i else [])
            for path, letter in paths:
                z[p + letter + "1"] = getattr(m, path + "_down").weight.detach().T
                z[p + letter + "2"] = getattr(m, path + "_up").weight.detach().T
                if getattr(m, path + "_up").bias is not None:
                    z[p + letter + "0"] = getattr(m, path + "_up").bias.detach()
            z[p + "k_k"], z[p + "k_a"] = m.key_norm.detach(), m.key_rate.detach()
            z[p + "r_k"] = m.bonus.detach().view(2, 3)
            z[p + "ln_x.weight"], z[p + "ln_x.bias"] = m.group_norm.weight.detach(), m.group_norm.bias.detach()
        ref = Blinkdl(z)
        # The mixer takes its constants as the model file stores them, in float32.
        patches = (mock.patch.object(blinkdl, "DECAY_SCALE", first.decay_scale),
                   mock.patch.object(blinkdl, "GROUP_NORM_EPS", first.eps))
        x, y = rand_x(1, 17)[0], rand_x(1, 17, seed=2)[0]
        shared = {}
        got_first, _ = first.parallel(x, first.empty_state(f64), chunk=5, shared=shared)
        got_later, _ = later.parallel(y, later.empty_state(f64), chunk=5, shared=shared)
        zc = torch.zeros(D_MODEL, dtype=f64)
        s0, s1 = torch.zeros(2, 3, 3, dtype=f64), torch.zeros(2, 3, 3, dtype=f64)
        p0, p1, want_first, want_later = zc, zc, [], []
        for t in range(17):
            with patches[0], patches[1]:
                o0, s0, v_first = ref._time_mix(0, x[t], p0, None, s0)
                o1, s1, _ = ref._time_mix(1, y[t], p1, v_first, s1)
            p0, p1 = x[t], y[t]
            want_first.append(o0)
            want_later.append(o1)
        self.assertLessEqual(maxdiff(got_first, torch.stack(want_first)), TOL)
        self.assertLessEqual(maxdiff(got_later, torch.stack(want_later)), TOL)

    def test_mamba2_bruteforce(self):
        """The mixer against explicit loops over positions, channels, heads and state entries of
        mamba_ssm's Mamba2 step (§17): head h reads group h // (H/G); the gated norm per group."""
        for name in ("mamba2", "mamba2_default"):
            with self.subTest(name):
                m = make(CAUSAL[name])
                x = rand_x(2, 11)
                self.assertLessEqual(maxdiff(m(x), mamba2_brute(m, x)), TOL)

    def test_retnet_bruteforce(self):
        for name in ("retnet", "retnet_default"):
            with self.subTest(name):
                m = make(CAUSAL[name])
                x = rand_x(2, 13)
                self.assertLessEqual(maxdiff(m(x), retnet_brute(m, x)), TOL)

    def test_retnet_rotation_is_relative(self):
        """q̃_i·k̃_j depends on i − j only; torchscale's angle table and theta_shift (rotate_every_two)
        turn the pairs the same way."""
        g = torch.Generator().manual_seed(6)
        dk = 8
        q, k = torch.randn(1, 1, dk, generator=g, dtype=f64), torch.randn(1, 1, dk, generator=g, dtype=f64)
        def dot(i, j):
            ci, si = retnet_angles(dk, i, 1, f64)
            cj, sj = retnet_angles(dk, j, 1, f64)
            return float((retnet_rotate(q, ci, si) * retnet_rotate(k, cj, sj)).sum())
        for i, j, shift in ((5, 2, 1000), (7, 7, 123), (40, 0, 3)):
            self.assertAlmostEqual(dot(i, j), dot(i + shift, j + shift), delta=1e-12)
        self.assertGreater(abs(dot(5, 2) - dot(5, 3)), 1e-3)
        # torchscale: angle = 1/10000^linspace(0, 1, dk/2) repeated per pair; x·cos + rotate_every_two(x)·sin
        angle = (1.0 / 10000 ** torch.linspace(0, 1, dk // 2, dtype=f64)).repeat_interleave(2)
        x = torch.randn(1, 3, 1, dk, generator=g, dtype=f64)
        pos = torch.arange(3, dtype=f64)[:, None] * angle
        rot2 = torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
        lib = x * torch.cos(pos)[:, None] + rot2 * torch.sin(pos)[:, None]
        c, s = retnet_angles(dk, 0, 3, f64)
        self.assertLessEqual(maxdiff(retnet_rotate(x[0], c, s), lib[0]), 1e-15)

    def test_retnet_matches_torchscale_normalisations(self):
        """torchscale scales each row of the decay mask by 1/√Σ_j γ^{i−j} and each row of
        q̃k̃ᵀ ⊙ mask by 1/max(1, |Σ_j ·|): positive scalars per (position, head), which the
        per-head RMS norm removes up to its eps. With a negligible eps both give the same ô."""
        cfg = dict(CAUSAL["retnet"], eps=1e-30)
        m = make(cfg)
        x = rand_x(1, 17)
        q, k, v = m._qkv(x[0], 0)                                                   # (N, H, ·)
        o, _ = m._chunks(q, k, v, m.empty_state(f64)["S"], 5)
        ours = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + cfg["eps"])
        lib = torchscale_retention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), m.decay, cfg["eps"])
        self.assertLessEqual(maxdiff(ours, lib), 1e-12)
        self.assertGreater(maxdiff(o, lib), 1e-3)    # the scalings do change o itself

    def test_flash_bruteforce(self):
        for name, causal in (("flash", True), ("flash", False), ("flash_rotary", True), ("flash_rotary", False)):
            with self.subTest(name, causal=causal):
                m = make(CAUSAL[name] if causal else NONCAUSAL[name])
                x = rand_x(2, 13)
                self.assertLessEqual(maxdiff(m(x), flash_brute(m, x)), TOL)

    def test_window_bruteforce(self):
        for name, causal in (("window", True), ("window", False), ("window_rotary", True), ("window_rotary", False)):
            cfg = dict(CAUSAL[name], causal=causal)
            with self.subTest(name, causal=causal):
                m = make(cfg)
                x = rand_x(1, 17)
                N, H, dk, dv = 17, cfg["heads"], cfg["dk"], cfg["dv"]
                q = rope_rows(m.query(x).view(N, H, dk), cfg.get("rotary"), 0)
                k = rope_rows(m.key(x).view(N, H, dk), cfg.get("rotary"), 0)
                v = m.value(x).view(N, H, dv)
                o = torch.zeros(N, H, dv, dtype=f64)
                for h, d in enumerate(cfg.get("dilation", [1] * H)):
                    for t in range(N):
                        if causal:
                            ps = {t - j * d for j in range(cfg["window"]) if t - j * d >= 0}
                            ps |= {p for p in range(cfg["global_tokens"]) if p <= t}
                        else:
                            w2 = cfg["window"] // 2
                            ps = {t + j * d for j in range(-w2, w2 + 1) if 0 <= t + j * d < N}
                            ps |= set(range(min(cfg["global_tokens"], N)))
                            if t < cfg["global_tokens"]:
                                ps = set(range(N))
                        ps = sorted(ps)
                        s = torch.stack([q[t, h] @ k[p, h] for p in ps]) / math.sqrt(dk)
                        o[t, h] = torch.softmax(s, 0) @ v[ps, h]
                self.assertLessEqual(maxdiff(m(x)[0], m.out(o.reshape(N, -1))), TOL)

    def test_aft_bruteforce(self):
        """AFT local/conv/full/simple: Y_t = σ(q_t) Σ exp(k_p + w) v_p / Σ exp(k_p + w)."""
        for name in ("aft_local", "aft_conv", "aft_full", "aft_simple"):
            for causal in (True, False):
                cfg = dict(CAUSAL[name], causal=causal)
                with self.subTest(name, causal=causal):
                    m = make(cfg)
                    x = rand_x(1, 11)
                    q, k, v = torch.sigmoid(m.query(x)[0]), m.key(x)[0], m.value(x)[0]
                    N, Dm = 11, m.D
                    y = torch.zeros(N, Dm, dtype=f64)
                    s = cfg.get("window")
                    for t in range(N):
                        num = den = 0
                        for p in range(N):
                            if causal and p > t:
                                continue
                            if name == "aft_full":
                                w = m.pos_bias[t, p].expand(Dm)
                            elif name == "aft_simple" or abs(t - p) >= s:
                                w = torch.zeros(Dm, dtype=f64)
                            else:
                                i = t - p if causal else t - p + s - 1
                                w = (m.pos_bias[i].expand(Dm) if name == "aft_local"
                                     else m.conv_kernel[:, i].repeat_interleave(3))
                            e = torch.exp(k[p] + w)
                            num, den = num + e * v[p], den + e
                        y[t] = q[t] * num / den
                    self.assertLessEqual(maxdiff(m(x)[0], m.out(y)), TOL)

    def test_aft_stable_with_large_keys(self):
        for name in ("aft_simple", "aft_local", "aft_full"):
            with self.subTest(name):
                m = make(CAUSAL[name])
                with torch.no_grad():
                    m.key.weight.mul_(1000.0)     # keys of size ~1e3: exp overflows without rescaling
                x = rand_x(1, 20)
                self.assertGreater(m.key(x).abs().max().item(), 750)
                ys, _ = run_steps(m, x, m.initial_state(1))
                self.assertTrue(torch.isfinite(ys).all())
                self.assertLessEqual(maxdiff(ys, m(x)), 1e-9)

    def test_softmax_and_gau_bruteforce(self):
        m = make(CAUSAL["softmax"])
        x = rand_x(1, 9)
        mha_q = m.query(x).view(9, 2, 3)
        mha_k = m.key(x).view(9, 2, 3)
        mha_v = m.value(x).view(9, 2, 4)
        o = torch.zeros(9, 2, 4, dtype=f64)
        for t in range(9):
            for h in range(2):
                s = torch.stack([mha_q[t, h] @ mha_k[p, h] / math.sqrt(3) for p in range(t + 1)])
                o[t, h] = torch.softmax(s, 0) @ mha_v[:t + 1, h]
        self.assertLessEqual(maxdiff(m(x)[0], m.out(o.reshape(9, -1))), TOL)
        g = make(CAUSAL["gau"])
        u, v, z = F.silu(g.u_proj(x))[0], F.silu(g.v_proj(x))[0], F.silu(g.z_proj(x))[0]
        q, k = g.qk_gamma[0] * z + g.qk_beta[0], g.qk_gamma[1] * z + g.qk_beta[1]
        o = torch.stack([u[t] * sum(F.relu(0.3 * q[t] @ k[p] + g.rel_bias[t - p]) ** 2 * v[p] for p in range(t + 1))
                         for t in range(9)])
        self.assertLessEqual(maxdiff(g(x)[0], g.out(o)), TOL)

    def test_rotary_softmax_and_linear_bruteforce(self):
        """softmax_attention and linear_attention with q, k turned by rope_brute, per position."""
        for name, causal in (("softmax_rotary", True), ("softmax_rotary", False), ("linear_rotary", True),
                             ("linear_rotary", False)):
            cfg = dict(CAUSAL[name], causal=causal)
            with self.subTest(name, causal=causal):
                m = make(cfg)
                N, H, dk, dv = 11, cfg["heads"], cfg["dk"], cfg["dv"]
                x = rand_x(1, N)
                q = rope_rows(m.query(x).view(N, H, dk), cfg["rotary"], 0)
                k = rope_rows(m.key(x).view(N, H, dk), cfg["rotary"], 0)
                v = m.value(x).view(N, H, dv)
                o = torch.zeros(N, H, dv, dtype=f64)
                for t in range(N):
                    ps = range(t + 1) if causal else range(N)
                    for h in range(H):
                        if name.startswith("softmax"):
                            w = torch.softmax(torch.stack([q[t, h] @ k[p, h] / math.sqrt(dk) for p in ps]), 0)
                        else:
                            sim = torch.stack([(F.elu(q[t, h]) + 1) @ (F.elu(k[p, h]) + 1) for p in ps])
                            w = sim / (sim.sum() + cfg["eps"])
                        o[t, h] = sum(w[i] * v[p, h] for i, p in enumerate(ps))
                self.assertLessEqual(maxdiff(m(x)[0], m.out(o.reshape(N, -1))), TOL)

    def test_rotary_is_relative(self):
        """With every dim turned, q̃_t·k̃_p depends on t − p only; partial dims pass unturned."""
        g = torch.Generator().manual_seed(8)
        q, k = torch.randn(6, generator=g, dtype=f64), torch.randn(6, generator=g, dtype=f64)
        for pairs in ROTARY_PAIRS:
            with self.subTest(pairs):
                rot = Rotary({"dims": 6, "pairs": pairs})
                dot = lambda t, p: float(rot(q[None], t)[0] @ rot(k[None], p)[0])
                for t, p, shift in ((5, 2, 1000), (7, 7, 123), (40, 0, 3)):
                    self.assertAlmostEqual(dot(t, p), dot(t + shift, p + shift), delta=1e-12)
                self.assertGreater(abs(dot(5, 2) - dot(5, 3)), 1e-3)
                part = Rotary({"dims": 4, "pairs": pairs, "base": 50})(q[None].expand(3, 6), 7)
                self.assertTrue(torch.equal(part[:, 4:], q[None, 4:].expand(3, 2)))
                for t in range(3):
                    self.assertLessEqual(maxdiff(part[t], rope_brute(q, 7 + t, {"dims": 4, "pairs": pairs, "base": 50})),
                                         1e-15)

    def test_rotary_stored_angles(self):
        """A stored θ (rotary.theta) turns pair i by t·θ_i, and a stored table (rotary.table)
        by its row t's (cos, sin) = (row[r/2 + i], row[i]), whatever values they hold (rounded
        sines and cosines no θ reproduces); both start at the base's angles, are in state_dict
        and refuse nothing but positions past the table."""
        g = torch.Generator().manual_seed(10)
        x = torch.randn(5, 6, generator=g, dtype=f64)
        for pairs in ROTARY_PAIRS:
            with self.subTest(pairs):
                plain = Rotary({"dims": 4, "pairs": pairs})
                theta = Rotary({"dims": 4, "pairs": pairs, "theta": "stored"})
                table = Rotary({"dims": 4, "pairs": pairs, "table": 9})
                self.assertEqual(sorted(theta.state_dict()), ["theta"])
                self.assertEqual(sorted(table.state_dict()), ["table"])
                self.assertEqual(list(plain.state_dict()), [])
                self.assertLessEqual(maxdiff(theta(x, 3), plain(x, 3)), 1e-5)   # float32 θ
                self.assertLessEqual(maxdiff(table(x, 3), plain(x, 3)), 1e-5)   # float32 table
                with torch.no_grad():
                    theta.theta.copy_(torch.tensor([0.3, 0.07]))
                    table.table.copy_(torch.randn(9, 4, generator=g))
                want = Rotary({"dims": 4, "pairs": pairs, "base": 1})
                want.theta = theta.theta.double()
                self.assertLessEqual(maxdiff(theta(x, 3), want(x, 3)), 1e-15)
                rows = table.table.double()[3:8]
                got = rotate_pairs(x, rows[:, 2:], rows[:, :2], pairs)
                self.assertLessEqual(maxdiff(table(x, 3), got), 1e-15)
                with self.assertRaisesRegex(ValueError, "exceed the rotary table's 9 rows"):
                    table(x, 5)

    def test_rotary_matches_libraries(self):
        """The public libraries' rotations, transcribed, equal the two pair layouts:
        performer-pytorch (FixedPositionalEmbedding, apply_rotary_pos_emb, rotate_every_two) and
        rotary-embedding-torch (RotaryEmbedding.rotate_queries_or_keys, which FLASH-pytorch uses;
        its first `dim` features) interleaved; GPT-NeoX / Hugging Face (rotate_half over the first
        rotary_ndims features, the rest passed) half."""
        g = torch.Generator().manual_seed(9)
        n, dk, r = 7, 8, 6
        x = torch.randn(n, dk, generator=g, dtype=f64)
        t = torch.arange(n, dtype=f64)

        # performer-pytorch: sinusoid = [sin, cos] of t·inv_freq over the whole head (dim_head)
        inv = 1.0 / (10000 ** (torch.arange(0, dk, 2, dtype=f64) / dk))
        sinu = torch.einsum("i,j->ij", t, inv)
        sin, cos = (a.repeat_interleave(2, -1) for a in (torch.sin(sinu), torch.cos(sinu)))
        every_two = torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
        performer = x * cos + every_two * sin
        self.assertLessEqual(maxdiff(Rotary({"dims": dk, "pairs": "interleaved"})(x, 0), performer), 1e-12)

        # rotary-embedding-torch: freqs = t ⊗ 1/theta^(arange(0, dim, 2)/dim), each repeated for its pair
        theta = 500.0
        freqs = torch.einsum("i,j->ij", t, 1.0 / (theta ** (torch.arange(0, r, 2, dtype=f64)[:r // 2] / r)))
        freqs = freqs.repeat_interleave(2, -1)
        mid = x[..., :r]
        half_rot = torch.stack((-mid[..., 1::2], mid[..., 0::2]), -1).flatten(-2)
        ret = torch.cat([mid * freqs.cos() + half_rot * freqs.sin(), x[..., r:]], -1)
        self.assertLessEqual(maxdiff(Rotary({"dims": r, "pairs": "interleaved", "base": theta})(x, 0), ret), 1e-12)

        # Hugging Face (GPT-NeoX partial rotary): emb = cat(freqs, freqs); rotate_half = cat(−x2, x1)
        freqs = torch.einsum("i,j->ij", t + 3, 1.0 / (10000 ** (torch.arange(0, r, 2, dtype=f64) / r)))
        emb = torch.cat([freqs, freqs], -1)
        rot, rest = x[..., :r], x[..., r:]
        rotate_half = torch.cat([-rot[..., r // 2:], rot[..., :r // 2]], -1)
        hf = torch.cat([rot * emb.cos() + rotate_half * emb.sin(), rest], -1)
        self.assertLessEqual(maxdiff(Rotary({"dims": r, "pairs": "half"})(x, 3), hf), 1e-12)

    def test_linformer(self):
        for name in ("linformer", "linformer_kv"):
            with self.subTest(name):
                m = make(NONCAUSAL[name])
                x = rand_x(1, 7)
                q = m.query(x).view(7, 2, 3)
                k = m.key(x).view(7, 2, 3)
                v = m.value(x).view(7, 2, 4)
                o = torch.zeros(7, 2, 4, dtype=f64)
                for h in range(2):
                    E = (m.E[h] if m.E.dim() == 3 else m.E)[:, :7]
                    Fm = getattr(m, "F", m.E)
                    Fm = (Fm[h] if Fm.dim() == 3 else Fm)[:, :7]
                    o[:, h] = torch.softmax(q[:, h] @ (E @ k[:, h]).T / math.sqrt(3), -1) @ (Fm @ v[:, h])
                self.assertLessEqual(maxdiff(m(x)[0], m.out(o.reshape(7, -1))), TOL)

    def test_reformer_transformers_by_hand(self):
        """Form "transformers" on 4 positions, chunk 2, 2 rounds, 2 buckets, worked out by hand.
        Round 0 hashes by the sign of q_x (rotation (1, 0)), round 1 by q_y ((0, 1)); bucket 0 =
        positive. Round 0 sorts [0, 2, 1, 3], round 1 [0, 1, 2, 3]: the slots [0 2 | 1 3 | 0 1 | 2 3].
        Chunk 0 looks back cyclically at chunk 3 (round 1's last): position 0's keys there are
        [2, 3, 0, 2] (itself −1e5, 2 twice), in chunk 2 [1, 3, 0, 1]; the logsumexp weights of
        the rounds add the two softmaxes' numerators: y_0 = Σ_{p=1..3} e^{s_0p} v_p / Σ e^{s_0p}
        (each numerator counted twice, as is each denominator). Position 2: keys [2, 3, 0, 2] in
        round 0 and [0, 1, 2, 3] in round 1: y_2 = (2e^{s20} v0 + e^{s21} v1 + 2e^{s23} v3) / (…)."""
        cfg = {"type": "reformer", "form": "transformers", "heads": 1, "dk": 2, "dv": 3, "n_buckets": 2,
               "chunk": 2, "rounds": 2, "pad_multiple": 2, "pad_above": 2}
        m = make(cfg)
        with torch.no_grad():
            m.rotations.copy_(torch.tensor([[[[1.0], [0.0]], [[0.0], [1.0]]]]))   # (H, dk, r, nb/2)
        q = torch.tensor([[1.0, 0.5], [-0.5, 1.5], [2.0, -1.0], [-1.0, -0.3]], dtype=f64)
        v = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 1.0]], dtype=f64)
        y = m._transformers(q[None, None], v[None, None])[0, 0]
        k = q / torch.sqrt((q * q).mean(-1, keepdim=True) + 1e-6) / math.sqrt(2)

        def mix(i, counts):
            w = torch.tensor([c * math.exp(float(q[i] @ k[p])) for p, c in counts.items()], dtype=f64)
            return (w[:, None] * v[list(counts)]).sum(0) / w.sum()

        self.assertLessEqual(maxdiff(y[0], mix(0, {1: 1, 2: 1, 3: 1})), 1e-12)
        self.assertLessEqual(maxdiff(y[2], mix(2, {0: 2, 1: 1, 3: 2})), 1e-12)
        # One round (round 0 alone: slots [0 2 | 1 3], chunk 0 looks back at chunk 1): position 0's
        # keys [1, 3, 0, 2]: a plain softmax over 1, 2, 3.
        m1 = make(dict(cfg, rounds=1))
        with torch.no_grad():
            m1.rotations.copy_(torch.tensor([[[[1.0]], [[0.0]]]]))
        y1 = m1._transformers(q[None, None], v[None, None])[0, 0]
        self.assertLessEqual(maxdiff(y1[0], mix(0, {1: 1, 2: 1, 3: 1})), 1e-12)
        self.assertLessEqual(maxdiff(y1[3], mix(3, {0: 1, 1: 1, 2: 1})), 1e-12)   # chunk 1: keys [0, 2, 1, 3]
        # The standard path (n ≤ chunk): 3 positions, chunk 4; causal_mask: position 0 sees only
        # itself (−1e5 beats −1e9), position 2 positions 0 and 1.
        ms = make(dict(cfg, chunk=4, pad_multiple=4, pad_above=4, causal_mask=True))
        ys = ms._transformers(q[None, None, :3], v[None, None, :3])[0, 0]
        self.assertLessEqual(maxdiff(ys[0], v[0]), 1e-12)
        self.assertLessEqual(maxdiff(ys[2], mix(2, {0: 1, 1: 1})), 1e-12)
        # Padding: 3 positions > pad_above 2 → 4 slots; the pad (bucket nb, last) is never attended.
        mp = make(dict(cfg, rounds=1))
        with torch.no_grad():
            mp.rotations.copy_(torch.tensor([[[[1.0]], [[0.0]]]]))
        yp = mp._transformers(q[None, None, :3], v[None, None, :3])[0, 0]   # slots [0 2 | 1 pad]
        self.assertEqual(mp.padded_length(3), 4)
        self.assertLessEqual(maxdiff(yp[1], mix(1, {0: 1, 2: 1})), 1e-12)   # keys [0, 2, 1, pad]
        self.assertLessEqual(maxdiff(yp[0], mix(0, {1: 1, 2: 1})), 1e-12)   # keys [1, pad, 0, 2]

    def test_reformer(self):
        """LSH attention per the docstring, position by position: hash, sort by (bucket,
        position), chunk, look one chunk back, drop self unless alone, average the rounds."""
        for name, n in (("reformer", 9), ("reformer_c3", 14), ("reformer_c3", 2), ("reformer_c3", 1)):
            with self.subTest(f"{name} N={n}"):
                m = make(NONCAUSAL[name])
                c, r, H = m.chunk, m.rounds, m.heads
                x = rand_x(2, n)
                q = m.query(x).view(2, n, H, 3)
                v = m.value(x).view(2, n, H, 4)
                o = torch.zeros(2, n, H, 4, dtype=f64)
                for b in range(2):
                    for h in range(H):
                        k = [q[b, j, h] / q[b, j, h].norm() for j in range(n)]
                        for i in range(r):
                            p = [k[j] @ m.rotations[i] for j in range(n)]
                            bucket = [int(torch.cat([pj, -pj]).argmax()) for pj in p]
                            order = sorted(range(n), key=lambda j: (bucket[j], j))
                            for s, j in enumerate(order):
                                cand = order[max(s // c - 1, 0) * c:(s // c + 1) * c]
                                cand = [t for t in cand if t != j] or [j]
                                w = torch.softmax(torch.stack([q[b, j, h] @ k[t] for t in cand]) / math.sqrt(3), 0)
                                o[b, j, h] += sum(w[a] * v[b, t, h] for a, t in enumerate(cand)) / r
                self.assertLessEqual(maxdiff(m(x), m.out(o.reshape(2, n, -1))), TOL)


class FeatureMaps(unittest.TestCase):
    def test_fast_transformers_favor_formula(self):
        """fast_transformers_favor vs a scalar re-implementation of the library's formula."""
        g = torch.Generator().manual_seed(3)
        x = torch.randn(2, 5, 3, 4, generator=g, dtype=f64)   # (N, L, H, query_dimensions)
        omega = torch.randn(4, 3, generator=g, dtype=f64)     # (query_dimensions, n_dims//2)
        for n_dims, temp, stab in ((6, None, False), (7, 0.3, False), (6, None, True)):
            phi = fast_transformers_favor(x, omega, n_dims, temp, stab)
            self.assertEqual(tuple(phi.shape), (2, 5, 3, 6))
            t = 1 / math.sqrt(4) if temp is None else temp
            for idx in [(0, 0, 0), (1, 4, 2), (0, 2, 1)]:
                xs = [float(c) * math.sqrt(t) for c in x[idx]]
                nrm = sum(c * c for c in xs)
                off = nrm / 2 + 0.5 * math.log(n_dims)
                if stab:
                    n0, _, h = idx
                    off += max(sum((float(c) * math.sqrt(t)) ** 2 for c in x[n0, l, h]) for l in range(5))
                # float64 sums of ≤ 5 terms (each ≲ 5) in another order: |Δφ| ≲ φ·8·eps64·5 < 1e-14, φ ≤ 1.2
                for j in range(3):
                    uj = sum(xs[a] * float(omega[a, j]) for a in range(4))
                    self.assertAlmostEqual(float(phi[idx][j]), math.exp(uj - off), delta=1e-14)
                    self.assertAlmostEqual(float(phi[idx][3 + j]), math.exp(-uj - off), delta=1e-14)

    def test_mixer_uses_library_map(self):
        m = make(CAUSAL["linear_favor_ft"])
        x = rand_x(1, 4)
        qh = m.query(x).view(1, 4, 2, 3)
        self.assertEqual(feature_dim(CAUSAL["linear_favor_ft"]), 6)
        # exact: phi makes this very call (n_dims = n_features, the same temperature 1/√dk)
        self.assertLessEqual(maxdiff(m.phi(qh), fast_transformers_favor(qh, m.feature_map.omega, 7)), 0)

    def test_favor_estimates_softmax_kernel(self):
        """Both FAVOR+ variants: φ(q)·φ(k) ≈ exp(qᵀk/√d) with many orthogonal features."""
        from recur_ref.mixers import orthogonal_random_matrix_
        torch.manual_seed(0)
        d, m = 4, 20000
        q = torch.randn(d, dtype=f64) * 0.5
        k = torch.randn(d, dtype=f64) * 0.5
        exact = math.exp(float(q @ k) / math.sqrt(d))
        om = orthogonal_random_matrix_(torch.zeros(d, m, dtype=f64))
        est = float(performer_favor(q, om, 1 / math.sqrt(d)) @ performer_favor(k, om, 1 / math.sqrt(d)))
        self.assertLess(abs(est / exact - 1), 0.05)
        om2 = om[:, : m // 2]
        est2 = float(fast_transformers_favor(q, om2, m) @ fast_transformers_favor(k, om2, m))
        self.assertLess(abs(est2 / exact - 1), 0.05)

    def test_random_fourier_formula(self):
        """random_fourier vs a scalar transcription of RandomFourierFeatures.forward and
        SmoothedRandomFourierFeatures.forward."""
        g = torch.Generator().manual_seed(5)
        x = torch.randn(2, 5, 3, 4, generator=g, dtype=f64)
        omega = torch.randn(4, 3, generator=g, dtype=f64)
        for n_dims, temp, smoothing in ((6, 0.5, None), (7, 0.3, None), (7, 0.25, 1.0), (6, 2.0, -0.4)):
            phi = random_fourier(x, omega, n_dims, temp, smoothing)
            self.assertEqual(tuple(phi.shape), (2, 5, 3, 6 if smoothing is None else 7))
            for idx in [(0, 0, 0), (1, 4, 2), (0, 2, 1)]:
                xs = [float(c) * math.sqrt(temp) for c in x[idx]]
                for j in range(3):
                    uj = sum(xs[a] * float(omega[a, j]) for a in range(4))
                    scale = math.sqrt(2 / n_dims)
                    self.assertAlmostEqual(float(phi[idx][j]), math.cos(uj) * scale, delta=1e-14)
                    self.assertAlmostEqual(float(phi[idx][3 + j]), math.sin(uj) * scale, delta=1e-14)
                if smoothing is not None:
                    self.assertEqual(float(phi[idx][6]), smoothing)

    def test_random_fourier_estimates_rbf_kernel(self):
        """φ(q)·φ(k) ≈ exp(−t‖q − k‖²/2) (+ smoothing²) with many Gaussian features."""
        torch.manual_seed(0)
        d, m, t = 4, 40000, 0.5
        q = torch.randn(d, dtype=f64) * 0.7
        k = torch.randn(d, dtype=f64) * 0.7
        exact = math.exp(-t * float(((q - k) ** 2).sum()) / 2)
        om = torch.randn(d, m // 2, dtype=f64)
        est = float(random_fourier(q, om, m, t) @ random_fourier(k, om, m, t))
        self.assertLess(abs(est - exact), 0.02)
        est_s = float(random_fourier(q, om, m, t, 0.5) @ random_fourier(k, om, m, t, 0.5))
        self.assertAlmostEqual(est_s, est + 0.25, delta=1e-12)

    def test_mixer_uses_random_fourier(self):
        for name, n_dims, temp, smoothing in (("linear_rff", 7, 0.3, None),
                                              ("linear_rff_smooth", 6, 1 / math.sqrt(3), 0.5)):
            m = make(CAUSAL[name])
            qh = m.query(rand_x(1, 4)).view(1, 4, 2, 3)
            self.assertEqual(feature_dim(CAUSAL[name]), 6 if smoothing is None else 7)
            want = random_fourier(qh, m.feature_map.omega, n_dims, temp, smoothing)
            self.assertLessEqual(maxdiff(m.phi(qh), want), 0)

    def test_poly2(self):
        g = torch.Generator().manual_seed(4)
        q, k = torch.randn(5, generator=g, dtype=f64), torch.randn(5, generator=g, dtype=f64)
        self.assertAlmostEqual(float(poly2(q) @ poly2(k)), float(q @ k) ** 2, delta=1e-12)

    def test_aft_full_matches_fast_transformers(self):
        """Non-causal aft_full with bias_rank + multiply == the library's AFTFullAttention."""
        m = make(NONCAUSAL["aft_full_ft"])
        x = rand_x(2, 9)
        q = m.query(x).view(2, 9, 2, 3)
        k = m.key(x).view(2, 9, 2, 3)
        v = m.value(x).view(2, 9, 2, 3)
        lib = fast_transformers_aft_full(q, k, v, m.u, m.v).reshape(2, 9, 6)
        self.assertLessEqual(maxdiff(m(x), m.out(lib)), TOL)


class MixerList(unittest.TestCase):
    """recur_ref.mixers follows runtime/mixers/mixers.inc: a module per file stem, a class per
    config name; a listed mixer the reference lacks fails when validated or built, not at import."""

    def test_every_listed_mixer_has_its_module_and_class(self):
        listed = registry.read_mixers_inc()
        self.assertGreater(len(listed), 0)
        for entry in listed:
            self.assertEqual(MIXERS[entry.config_name].__module__, f"recur_ref.mixers.{entry.file}", entry)
        self.assertEqual(registry.MISSING, {})
        # Names beyond the list come from a listed stem's module (aft_conv from aft.py).
        stems = {entry.file for entry in listed}
        for name, cls in MIXERS.items():
            self.assertIn(cls.__module__.rsplit(".", 1)[1], stems, name)

    def test_malformed_list(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "mixers.inc")
            with open(path, "w") as f:
                f.write("// comment\nRECUR_MIXER(Softmax, softmax_attention, softmax_attention)\nRECUR_MIXER(Foo, foo)\n")
            with self.assertRaisesRegex(ImportError, re.escape(f"{path}:3: ") + ".*not RECUR_MIXER"):
                registry.read_mixers_inc(path)
            with self.assertRaisesRegex(ImportError, "cannot read the list of mixers .*mixers.inc"):
                registry.read_mixers_inc(os.path.join(tmp, "absent.inc"))

    def run_copy(self, mixers_inc, script):
        """Run `script` (Python, after `import recur_ref.mixers as m`) on a copy of the reference
        whose tree holds runtime/mixers/mixers.inc = mixers_inc (None: no list); → (rc, output)."""
        with tempfile.TemporaryDirectory() as tmp:
            ref = os.path.join(tmp, "models", "reference")
            shutil.copytree(os.path.join(HERE, "recur_ref"), os.path.join(ref, "recur_ref"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copytree(os.path.join(REPO_ROOT, "models", "configs"), os.path.join(tmp, "models", "configs"))
            if mixers_inc is not None:
                os.makedirs(os.path.join(tmp, "runtime", "mixers"))
                with open(os.path.join(tmp, "runtime", "mixers", "mixers.inc"), "w") as f:
                    f.write(mixers_inc)
            env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=ref)
            r = subprocess.run([sys.executable, "-c", "import recur_ref.mixers as m\n" + script], cwd=tmp, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            return r.returncode, r.stdout

    def test_listed_mixer_without_module(self):
        with open(os.path.join(REPO_ROOT, "runtime", "mixers", "mixers.inc")) as f:
            inc = f.read()
        inc += "RECUR_MIXER(NewMixer, new_mixer, new_mixer)\nRECUR_MIXER(AftNew, aft_new, aft)\n"
        script = """
import json
from recur_ref import model
assert "new_mixer" not in m.MIXERS and "softmax_attention" in m.MIXERS
cfg = {"type": "new_mixer", "heads": 2}
config = json.load(open("models/configs/tiny_pre_tokens.json"))
config["mixer"] = cfg
for name, call in (("validate_mixer", lambda: m.validate_mixer(cfg, 8)), ("build_mixer", lambda: m.build_mixer(cfg, 8)),
                   ("state_bytes", lambda: m.state_bytes(cfg, 8)), ("model.validate", lambda: model.validate(config)),
                   ("aft_new", lambda: m.build_mixer({"type": "aft_new"}, 8))):
    try:
        call()
    except m.MixerNotInReference as e:
        print(name, "->", e)
    else:
        print(name, "ran")
"""
        rc, out = self.run_copy(inc, script)
        self.assertEqual(rc, 0, out)
        for name in ("validate_mixer", "build_mixer", "state_bytes", "model.validate"):
            self.assertIn(f"{name} -> mixer new_mixer: runtime/mixers/mixers.inc lists it with file new_mixer, but the "
                          "reference has no module models/reference/recur_ref/mixers/new_mixer.py", out)
        self.assertIn("aft_new -> mixer aft_new: runtime/mixers/mixers.inc lists it with file aft, but "
                      "models/reference/recur_ref/mixers/aft.py has no class for it", out)

    def test_no_list(self):
        rc, out = self.run_copy(None, "")
        self.assertNotEqual(rc, 0)
        self.assertIn("cannot read the list of mixers", out)
        self.assertIn(os.path.join("runtime", "mixers", "mixers.inc"), out)


if __name__ == "__main__":
    unittest.main()
