// Small models for unit tests, built in memory with the converter's writer
// from a config JSON and seeded random weights (no Python needed).
//
// Only declarations and converter/model_description.h here: test files that
// use the public C++ wrapper (recur/recur.hpp) include this header, and the
// runtime's internal recur::Status / recur::Result (core/status.h,
// core/result.h), which the converter's API uses, must not meet the
// wrapper's classes of the same names in one file. The definitions are in
// test_models.cc (library recur_test_models).
#ifndef RECUR_TESTS_COMMON_TEST_MODELS_H_
#define RECUR_TESTS_COMMON_TEST_MODELS_H_

#include <map>
#include <string>
#include <vector>

#include "converter/model_description.h"
#include "kernels/dense/weight_types.h"

namespace recur::impl::testing {

// Pre-norm, tokens (vocab 11), 2 blocks, learned positions (64), softmax head.
inline const char* kTinyTokensConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "linear_attention", "heads": 2, "dk": 8, "dv": 8,
            "feature_map": "elu_plus_one", "eps": 1e-6},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// As kTinyTokensConfig with d_model 32 and d_ff 64: every block weight's input
// dimension is a multiple of 32, so int4 (groups of 32) takes them all.
inline const char* kTinyInt4Config = R"({
  "layout": "recur", "d_model": 32, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "linear_attention", "heads": 2, "dk": 16, "dv": 16,
            "feature_map": "elu_plus_one", "eps": 1e-6},
  "ffn": {"d_ff": 64, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "log_softmax"}})";

// Post-norm, features (width 5, projected), 1 block, no head.
inline const char* kTinyFeaturesConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 1, "norm_placement": "post",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "linear_attention", "heads": 3, "dk": 4, "dv": 4,
            "feature_map": "elu_plus_one", "eps": 1e-6},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// Softmax attention (KV cache), pre-norm tokens with 64 learned positions (so
// the default max_context is 64), 2 blocks.
inline const char* kTinySoftmaxConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "softmax_attention", "heads": 2, "dk": 8, "dv": 4},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// Softmax attention over features, post-norm, no learned positions.
inline const char* kTinySoftmaxFeaturesConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 1, "norm_placement": "post",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "softmax_attention", "heads": 3, "dk": 4, "dv": 4},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// Sliding window (window 3, dilations 1 and 2, 2 global positions), tokens.
inline const char* kTinySlidingWindowConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "sliding_window", "heads": 2, "dk": 8, "dv": 4, "window": 3,
            "dilation": [1, 2], "global_tokens": 2},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// AFT-simple over features, post-norm.
inline const char* kTinyAftConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "post",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "aft_simple", "heads": 2, "dk": 3},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// FLASH (chunk 5, so a 40-position run crosses 8 chunk boundaries), tokens.
inline const char* kTinyFlashConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "flash", "expansion_dim": 24, "qk_dim": 8, "chunk": 5},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// Linformer (encoder only), features, sequences of at most 32 positions.
inline const char* kTinyLinformerConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "linformer", "heads": 3, "dk": 4, "dv": 4, "seq_len": 32, "proj_dim": 6},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// Reformer LSH attention (encoder only): 4 buckets, chunks of 5, 2 rounds.
inline const char* kTinyReformerConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "reformer", "heads": 2, "dk": 4, "dv": 3, "n_buckets": 4, "chunk": 5,
            "rounds": 2},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// Reformer in the transformers form (Hugging Face's LSHSelfAttention): chunks
// of 5 seeing 2 back and 1 ahead, causal_mask, pads to a multiple of 10
// past 4 positions; rotations [heads 2, dk 4, rounds 2, 2]. Format version 2.
inline const char* kTinyReformerTransformersConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "reformer", "form": "transformers", "heads": 2, "dk": 4, "dv": 3,
            "n_buckets": 4, "chunk": 5, "rounds": 2, "chunks_before": 2, "chunks_after": 1,
            "causal_mask": true, "pad_multiple": 10, "pad_above": 4},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// AFT-local (window 4) over tokens, and AFT-conv (per-head kernel) over features.
inline const char* kTinyAftLocalConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "aft_local", "heads": 2, "dk": 4, "window": 4},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";
inline const char* kTinyAftConvConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "post",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "aft_conv", "heads": 3, "dk": 2, "window": 3},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// AFT-full with a factorised bias (rank 3) in the multiply form, max_length 48.
inline const char* kTinyAftFullConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "aft_full", "heads": 2, "dk": 4, "max_length": 48, "bias_rank": 3,
            "bias_form": "multiply"},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// GAU (one head, relu² with a relative bias), max_length 48.
inline const char* kTinyGauConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "post",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "gau", "expansion_dim": 16, "qk_dim": 6, "max_length": 48, "scale": 0.05},
  "ffn": {"d_ff": 20, "activation": "relu"}, "final_norm": false, "head": null})";

// RetNet retention: 3 heads with the config's own decays (one fast, one
// slow), dk 4 (two rotation frequencies), tokens with learned positions.
inline const char* kTinyRetNetConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "retnet", "heads": 3, "dk": 4, "dv": 6, "decay": [0.5, 0.9, 0.99]},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// RWKV-7: 3 blocks (the first shares its value with the others), 2 heads of
// 8, the channel mix's relu² and token mix, an input norm.
inline const char* kTinyRwkv7Config = R"({
  "layout": "recur", "d_model": 16, "n_layers": 3, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11, "norm": true},
  "max_positions": 0,
  "mixer": {"type": "rwkv7", "heads": 2, "head_size": 8, "decay_rank": 4, "rate_rank": 4,
            "value_rank": 3, "gate_rank": 5},
  "ffn": {"d_ff": 32, "activation": "relu_squared", "token_mix": true}, "final_norm": true,
  "head": {"out": 11, "activation": "none"}})";

// Mamba2: 4 heads of 3 channels in 2 groups, a state of 5, a 3-tap
// convolution, Δ clamped to [0.001, 10], biased projections; RMS norms and no
// feed-forward, as state-spaces' models.
inline const char* kTinyMamba2Config = R"({
  "layout": "recur", "d_model": 10, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "norm": {"type": "rms_norm"},
  "input": {"kind": "tokens", "vocab_size": 11}, "max_positions": 0,
  "mixer": {"type": "mamba2", "heads": 4, "head_dim": 3, "state_size": 5, "groups": 2,
            "conv_kernel": 3, "norm_eps": 1e-4, "dt_min": 0.001, "dt_max": 10, "bias": true},
  "ffn": null, "final_norm": true, "head": {"out": 11, "activation": "none"}})";

// Gated DeltaNet: 2 blocks, 1 key head of 4 and 2 value heads of 3, short
// convolutions of 3, the gated RMS norm, fla's negative eigenvalues (β in
// (0, 2)); RMSNorm blocks with a SwiGLU FFN.
inline const char* kTinyGatedDeltaNetConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "pre",
  "norm": {"type": "rms_norm"}, "layer_norm_eps": 1e-6,
  "input": {"kind": "tokens", "vocab_size": 11}, "max_positions": 0,
  "mixer": {"type": "gated_deltanet", "heads": 1, "v_heads": 2, "head_k_dim": 4,
            "head_v_dim": 3, "conv_size": 3, "norm_eps": 1e-6, "beta_scale": 2.0},
  "ffn": {"d_ff": 16, "activation": "silu", "glu": true}, "final_norm": true,
  "head": {"out": 11, "activation": "none"}})";

// GLA: 2 blocks, 4 query heads sharing 2 key/value heads (dk 3, dv 2), the
// low-rank gate of 5 with a clamp, short convolutions of 2, the gated RMS
// norm; RMSNorm blocks with a SwiGLU FFN.
inline const char* kTinyGlaConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "pre",
  "norm": {"type": "rms_norm"}, "layer_norm_eps": 1e-6,
  "input": {"kind": "tokens", "vocab_size": 11}, "max_positions": 0,
  "mixer": {"type": "gla", "heads": 4, "kv_heads": 2, "head_k_dim": 3, "head_v_dim": 2,
            "gate_rank": 5, "conv_size": 2, "norm_eps": 1e-6, "gate_logit_normalizer": 8,
            "clamp_min": -0.3},
  "ffn": {"d_ff": 16, "activation": "silu", "glu": true}, "final_norm": true,
  "head": {"out": 11, "activation": "none"}})";

// Block-local attention (Hugging Face Reformer's LocalSelfAttention): causal,
// chunks of 5 with one before, the step form (a ring of 10 positions).
inline const char* kTinyBlockLocalConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "block_local", "heads": 2, "dk": 4, "dv": 3, "chunk": 5},
  "ffn": {"d_ff": 24, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// Block-local attention as an encoder: chunks of 4, one on each side
// (cyclic), padding to a multiple of 8 above 2 positions.
inline const char* kTinyBlockLocalEncoderConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "post",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "block_local", "heads": 3, "dk": 2, "dv": 4, "chunk": 4, "chunks_after": 1,
            "causal": false, "pad_multiple": 8, "pad_above": 2},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// A mixed model: a different mixer in each of 4 blocks (the state of the
// softmax block grows; the others are fixed).
inline const char* kTinyMixedConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 4, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": [{"type": "sliding_window", "heads": 2, "dk": 8, "dv": 4, "window": 4},
            {"type": "flash", "expansion_dim": 24, "qk_dim": 8, "chunk": 6},
            {"type": "softmax_attention", "heads": 2, "dk": 8, "dv": 8},
            {"type": "linear_attention", "heads": 2, "dk": 8, "dv": 8,
             "feature_map": "relu", "eps": 1e-6}],
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// Rotary position embeddings (docs/attention-math.md §12) in every mixer that
// takes them, one per block: half and interleaved pairs, partial and full
// dims, bases of their own (so that each field is stored in the file), no
// learned positions.
inline const char* kTinyRotaryConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 4, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 0,
  "mixer": [{"type": "softmax_attention", "heads": 2, "dk": 8, "dv": 4,
             "rotary": {"dims": 6, "pairs": "half", "base": 500}},
            {"type": "linear_attention", "heads": 2, "dk": 8, "dv": 8,
             "feature_map": "elu_plus_one", "eps": 1e-6,
             "rotary": {"dims": 8, "pairs": "interleaved", "base": 100}},
            {"type": "sliding_window", "heads": 2, "dk": 8, "dv": 4, "window": 4,
             "rotary": {"dims": 4, "pairs": "half", "base": 50}},
            {"type": "flash", "expansion_dim": 24, "qk_dim": 8, "chunk": 6,
             "rotary": {"dims": 4, "pairs": "interleaved", "base": 200}}],
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// Token shift (docs/attention-math.md §13) of both normalised inputs of every
// block: two shifted segments around a passed one and 4 features past them,
// over a FLASH block and a softmax one (whose state grows).
inline const char* kTinyTokenShiftConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": [{"type": "flash", "expansion_dim": 24, "qk_dim": 8, "chunk": 5},
            {"type": "softmax_attention", "heads": 2, "dk": 8, "dv": 4}],
  "token_shift": {"segments": [[5, 1], [3, 0], [4, 1]], "ffn": true},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// An encoder's token shift: from the next position, passed, from the previous.
inline const char* kTinyTokenShiftEncoderConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "softmax_attention", "heads": 3, "dk": 4, "dv": 4, "causal": false},
  "token_shift": {"segments": [[4, -1], [4, 0], [3, 1]], "ffn": true},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// The model-level options of models/configs/README.md: reversible residual
// blocks with scale norms, a GLU feed-forward, sinusoidal positions with a
// learned scale and a token shift (performer-pytorch's pieces); tokens.
inline const char* kTinyReversibleConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "norm": {"type": "scale_norm", "scale": "l2"},
  "residual": "reversible", "token_shift": {"segments": [[4, 1], [4, 0], [4, 1]], "ffn": true},
  "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 0, "positions": {"type": "sinusoid", "scale": "learned"},
  "mixer": {"type": "linear_attention", "heads": 2, "dk": 8, "dv": 8,
            "feature_map": "elu_plus_one", "eps": 1e-6},
  "ffn": {"d_ff": 24, "activation": "gelu", "glu": true}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// Post-norm blocks without a feed-forward, RMS norms, FLASH (chunk 5),
// projected features.
inline const char* kTinyNoFfnConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 2, "norm_placement": "post",
  "layer_norm_eps": 1e-5, "norm": {"type": "rms_norm"},
  "input": {"kind": "features", "feature_width": 5, "projection": true}, "max_positions": 0,
  "mixer": {"type": "flash", "expansion_dim": 16, "qk_dim": 8, "chunk": 5},
  "ffn": null, "final_norm": true, "head": null})";

// One tiny model per Mixer union member, by tag, for the tests that must
// cover every mixer (the mixer contract test fails for a member without one).
const std::map<std::string, const char*>& TinyModelPerMixer();

// Mixers with no recurrent form: their models only encode.
bool EncoderOnly(const std::string& tag);

// Every tiny model that steps: TinyModelPerMixer's but the encoder-only ones,
// plus projected features, AFT-conv, a mixed model, the rotary one, the
// token-shift one and the model-level options (kTinyReversibleConfig,
// kTinyNoFfnConfig).
std::vector<const char*> TinyStepModels();

// The backends this build compiled, as recur_backends() lists them.
std::vector<std::string> CompiledBackends();

// Every tensor the config needs under its `layout` name, N(0, 0.3²) values
// (norm weights around 1).
converter::TensorMap RandomTensors(const converter::ModelDescription& desc, unsigned seed,
                                   converter::Layout layout = converter::Layout::kRecur);

// The same for a config JSON (either layout; kAuto decides as the converter does).
converter::TensorMap RandomTensors(const char* config, unsigned seed,
                                   converter::Layout layout = converter::Layout::kAuto);

// Model bytes (64-byte aligned) for `config`; empty on failure with *error set.
converter::AlignedBytes BuildTestModel(const char* config, unsigned seed,
                                       std::string* error = nullptr);
// The same with the blocks' weight matrices stored as `dtype`.
converter::AlignedBytes BuildTestModel(const char* config, unsigned seed,
                                       kernels::WeightType dtype);

}  // namespace recur::impl::testing

#endif  // RECUR_TESTS_COMMON_TEST_MODELS_H_
