// Tensor import and validation: missing, extra, mis-shaped, non-finite and
// integer tensors, with the exact messages.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "converter/import.h"
#include "converter/mixers/gau.h"
#include "converter/safetensors.h"
#include "converter/writer.h"
#include "converter_test_util.h"

namespace recur::impl::converter {
namespace {

using testing::kFastTransformersConfig;
using testing::kTokensConfig;

std::string ImportError(const char* config, const TensorMap& tensors, Layout layout = Layout::kAuto,
                        bool allow_extra = false) {
  auto parsed = ParseConfig(config, layout);
  REQUIRE(parsed.ok());
  ImportOptions o;
  o.allow_extra = allow_extra;
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(tensors), o);
  return r.ok() ? "(imported)" : r.message();
}

TEST_CASE("import: complete tensors import under recur names") {
  TensorMap t = testing::RandomTensors(kTokensConfig, 1);
  auto parsed = ParseConfig(kTokensConfig);
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->size() == t.size());
  for (const auto& [name, tensor] : t) {
    REQUIRE(r->count(name) == 1);
    CHECK(r->at(name).shape == tensor.shape);
    CHECK(r->at(name).data == tensor.data);
  }
}

TEST_CASE("import: a missing tensor is named with its expected shape") {
  TensorMap t = testing::RandomTensors(kTokensConfig, 1);
  t.erase("blocks.1.ffn.linear1.weight");
  CHECK(ImportError(kTokensConfig, t) ==
        "blocks.1.ffn.linear1.weight: missing tensor, expected shape [32,16]");
  t = testing::RandomTensors(kTokensConfig, 1);
  t.erase("head.bias");
  CHECK(ImportError(kTokensConfig, t) == "head.bias: missing tensor, expected shape [11]");
}

TEST_CASE("import: a missing tensor under a prefix gets a hint") {
  TensorMap t = testing::RandomTensors(kTokensConfig, 1);
  t["model.input.embedding"] = t["input.embedding"];
  t.erase("input.embedding");
  CHECK(ImportError(kTokensConfig, t) ==
        "input.embedding: missing tensor, expected shape [11,16] (the source has "
        "\"model.input.embedding\": a different layout or a name prefix?)");
}

TEST_CASE("import: an extra tensor is an error, or a warning with allow_extra") {
  TensorMap t = testing::RandomTensors(kTokensConfig, 1);
  t["blocks.0.mixer.rotary"] = Tensor{{2}, {1, 2}};
  CHECK(ImportError(kTokensConfig, t) ==
        "blocks.0.mixer.rotary: unexpected tensor, not used by this config (allow with "
        "--allow-extra)");
  auto parsed = ParseConfig(kTokensConfig);
  ImportOptions o;
  o.allow_extra = true;
  std::vector<std::string> warnings;
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t), o, &warnings);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->count("blocks.0.mixer.rotary") == 0);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "blocks.0.mixer.rotary: unused tensor ignored");
}

TEST_CASE("import: a mis-shaped tensor names its shape and the expected one") {
  TensorMap t = testing::RandomTensors(kTokensConfig, 1);
  t["blocks.1.ffn.linear1.weight"] = Tensor{{16, 32}, std::vector<float>(16 * 32, 0.0f)};
  CHECK(ImportError(kTokensConfig, t) == "blocks.1.ffn.linear1.weight: shape [16,32], expected [32,16]");
  t = testing::RandomTensors(kTokensConfig, 1);
  t["blocks.0.norm1.bias"] = Tensor{{1, 16}, std::vector<float>(16, 0.0f)};
  CHECK(ImportError(kTokensConfig, t) == "blocks.0.norm1.bias: shape [1,16], expected [16]");
  t = testing::RandomTensors(kTokensConfig, 1);
  t["input.positions"] = Tensor{{}, {1.0f}};
  CHECK(ImportError(kTokensConfig, t) == "input.positions: shape [], expected [8,16]");
}

TEST_CASE("import: NaN and Inf name the tensor and the first bad index") {
  TensorMap t = testing::RandomTensors(kTokensConfig, 1);
  auto& q = t["blocks.0.mixer.query.weight"].data;  // [16,16]
  q[37] = std::numeric_limits<float>::quiet_NaN();
  q[40] = std::numeric_limits<float>::infinity();
  CHECK(ImportError(kTokensConfig, t) == "blocks.0.mixer.query.weight: NaN at index 37 ([2,5])");
  q[37] = 0.0f;
  CHECK(ImportError(kTokensConfig, t) == "blocks.0.mixer.query.weight: +Inf at index 40 ([2,8])");
  t = testing::RandomTensors(kTokensConfig, 1);
  t["head.bias"].data[3] = -std::numeric_limits<float>::infinity();
  CHECK(ImportError(kTokensConfig, t) == "head.bias: -Inf at index 3");
}

TEST_CASE("import: integer and F16 source tensors") {
  TensorMap t = testing::RandomTensors(kTokensConfig, 1);
  TensorViewMap views = ViewsOf(t);
  std::vector<int32_t> ints(11);
  views["head.bias"].dtype = DType::kI32;
  views["head.bias"].data = reinterpret_cast<const uint8_t*>(ints.data());
  views["head.bias"].nbytes = ints.size() * 4;
  auto parsed = ParseConfig(kTokensConfig);
  auto r = ImportTensors(parsed->desc, parsed->layout, views);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "head.bias: dtype I32 is not supported for weights (expected F32, F64, F16 or BF16)");

  std::vector<uint16_t> halves(11, 0x3c00);  // 1.0
  views["head.bias"].dtype = DType::kF16;
  views["head.bias"].data = reinterpret_cast<const uint8_t*>(halves.data());
  views["head.bias"].nbytes = halves.size() * 2;
  auto r2 = ImportTensors(parsed->desc, parsed->layout, views);
  REQUIRE_MESSAGE(r2.ok(), r2.message());
  // Exact: f16 → f32 widening is exact, and 0x3c00 is 1.0.
  CHECK(r2->at("head.bias").data == std::vector<float>(11, 1.0f));
  halves[4] = 0x7e00;  // NaN after conversion
  auto r3 = ImportTensors(parsed->desc, parsed->layout, views);
  CHECK(r3.message() == "head.bias: NaN at index 4");
}

TEST_CASE("import: fast-transformers names, messages in the source's names") {
  TensorMap t = testing::RandomTensors(kFastTransformersConfig, 2);
  CHECK(t.count("layers.0.attention.query_projection.weight") == 1);
  CHECK(t.count("norm.weight") == 1);
  auto parsed = ParseConfig(kFastTransformersConfig);
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->at("blocks.0.mixer.query.weight").data ==
        t.at("layers.0.attention.query_projection.weight").data);
  CHECK(r->at("blocks.1.ffn.linear2.bias").data == t.at("layers.1.linear2.bias").data);
  CHECK(r->at("final_norm.bias").data == t.at("norm.bias").data);

  TensorMap bad = t;
  bad["layers.1.linear1.weight"] = Tensor{{16, 16}, std::vector<float>(256, 0.0f)};
  CHECK(ImportError(kFastTransformersConfig, bad) == "layers.1.linear1.weight: shape [16,16], expected [24,16]");
  bad = t;
  bad.erase("norm.bias");
  CHECK(ImportError(kFastTransformersConfig, bad) == "norm.bias: missing tensor, expected shape [16]");
  // A fast-transformers checkpoint without its final norm, config saying there is one.
  bad = t;
  bad["encoder.norm.bias"] = bad["norm.bias"];
  bad.erase("norm.bias");
  CHECK(ImportError(kFastTransformersConfig, bad) ==
        "norm.bias: missing tensor, expected shape [16] (the source has \"encoder.norm.bias\": a "
        "different layout or a name prefix?)");
  // recur-named tensors against a fast-transformers config.
  CHECK(ImportError(kFastTransformersConfig, testing::RandomTensors(kTokensConfig, 1)) ==
        "layers.0.norm1.weight: missing tensor, expected shape [16]");
}

TEST_CASE("import: a layout's transposes, shared heads and absent biases") {
  // linformer: E = proj_kᵀ, one key/value head repeated for every head (and
  // share_kv: values from to_k), q/k/v without biases.
  const char* config = R"({"layout": "linformer", "class": "Linformer", "dim": 8,
    "seq_len": 5, "depth": 1, "k": 3, "heads": 2, "one_kv_head": true, "share_kv": true})";
  TensorMap t = testing::RandomTensors(config, 4);
  const Tensor& proj_k = t.at("net.layers.0.0.fn.proj_k");
  REQUIRE(proj_k.shape == std::vector<int64_t>{5, 3});
  CHECK(t.count("net.layers.0.0.fn.to_v.weight") == 0);
  auto parsed = ParseConfig(config);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  const Tensor& e = r->at("blocks.0.mixer.E");
  REQUIRE(e.shape == std::vector<int64_t>{3, 5});
  for (int i = 0; i < 3; ++i) {
    for (int n = 0; n < 5; ++n) CHECK(e.data[i * 5 + n] == proj_k.data[n * 3 + i]);
  }
  const Tensor& to_k = t.at("net.layers.0.0.fn.to_k.weight");  // [dim_head 4, dim 8]
  REQUIRE(to_k.shape == std::vector<int64_t>{4, 8});
  for (const char* name : {"blocks.0.mixer.key.weight", "blocks.0.mixer.value.weight"}) {
    const Tensor& w = r->at(name);
    REQUIRE(w.shape == std::vector<int64_t>{8, 8});
    CHECK(std::vector<float>(w.data.begin(), w.data.begin() + 32) == to_k.data);
    CHECK(std::vector<float>(w.data.begin() + 32, w.data.end()) == to_k.data);
  }
  CHECK(r->at("blocks.0.mixer.query.bias").data == std::vector<float>(8, 0.0f));
  CHECK(r->at("blocks.0.mixer.out.bias").data == t.at("net.layers.0.0.fn.to_out.bias").data);

  // Messages name the library's tensor and its own shape.
  TensorMap bad = t;
  bad["net.layers.0.0.fn.proj_k"] = Tensor{{3, 5}, std::vector<float>(15, 0.0f)};
  CHECK(ImportError(config, bad) == "net.layers.0.0.fn.proj_k: shape [3,5], expected [5,3]");
  bad = t;
  bad.erase("net.layers.0.0.fn.to_k.weight");
  CHECK(ImportError(config, bad) ==
        "net.layers.0.0.fn.to_k.weight: missing tensor, expected shape [4,8]");
  bad = t;
  bad["net.layers.0.0.fn.to_q.bias"] = Tensor{{8}, std::vector<float>(8, 0.0f)};
  CHECK(ImportError(config, bad) ==
        "net.layers.0.0.fn.to_q.bias: unexpected tensor, not used by this config (allow with "
        "--allow-extra)");
}

TEST_CASE("import: computed tables and ignored library tensors (hf-longformer)") {
  const char* config = R"({"model_type": "longformer", "vocab_size": 9, "hidden_size": 4,
    "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 6,
    "attention_window": [2], "max_position_embeddings": 12, "pad_token_id": 1,
    "type_vocab_size": 2, "architectures": ["LongformerModel"], "hidden_dropout_prob": 0.1})";
  TensorMap t = testing::RandomTensors(config, 6);
  CHECK(t.count("pooler.dense.weight") == 1);
  CHECK(t.count("encoder.layer.0.attention.self.query_global.weight") == 1);
  auto parsed = ParseConfig(config);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  // Row p: position_embeddings[pad + 1 + p] + token_type_embeddings[0].
  const Tensor& positions = r->at("input.positions");
  REQUIRE(positions.shape == std::vector<int64_t>{10, 4});
  const Tensor& table = t.at("embeddings.position_embeddings.weight");
  const Tensor& types = t.at("embeddings.token_type_embeddings.weight");
  for (int p = 0; p < 10; ++p) {
    for (int c = 0; c < 4; ++c) {
      CHECK(positions.data[p * 4 + c] == table.data[(p + 2) * 4 + c] + types.data[c]);
    }
  }
  CHECK(r->count("pooler.dense.weight") == 0);

  TensorMap bad = t;
  bad["embeddings.token_type_embeddings.weight"] = Tensor{{4}, std::vector<float>(4, 0.0f)};
  CHECK(ImportError(config, bad) ==
        "embeddings.token_type_embeddings.weight: shape [4], expected [2,4]");
  bad = t;
  bad.erase("embeddings.position_embeddings.weight");
  CHECK(ImportError(config, bad) ==
        "embeddings.position_embeddings.weight: missing tensor, expected shape [12,4]");
  bad = t;
  bad.erase("pooler.dense.weight");  // optional
  CHECK(ImportError(config, bad) == "(imported)");
  bad = t;
  bad["embeddings.position_embeddings.weight"].data[3] = std::nanf("");
  CHECK(ImportError(config, bad) ==
        "embeddings.position_embeddings.weight: NaN at index 3 ([0,3])");
}

TEST_CASE("import: a folded projection and a scaled query (fast-transformers)") {
  const char* config = R"({"n_layers": 1, "n_heads": 2, "query_dimensions": 2,
    "value_dimensions": 4, "feed_forward_dimensions": 8, "attention_type": "linear",
    "feature_map": {"type": "generalized_random", "n_dims": 3, "softmax_temp": 4.0}})";
  TensorMap t = testing::RandomTensors(config, 5);
  const Tensor& omega = t.at("layers.0.attention.inner_attention.feature_map.omega");
  REQUIRE(omega.shape == std::vector<int64_t>{2, 3});
  auto parsed = ParseConfig(config);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  // key.weight [heads·3, 8]: head h's rows are 2·ωᵀ W_h (√softmax_temp = 2).
  const Tensor& w = t.at("layers.0.attention.key_projection.weight");  // [2·2, 8]
  const Tensor& k = r->at("blocks.0.mixer.key.weight");
  REQUIRE(k.shape == std::vector<int64_t>{6, 8});
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 3; ++j) {
      for (int c = 0; c < 8; ++c) {
        const double want = 2.0 * (double(omega.data[0 * 3 + j]) * w.data[(h * 2 + 0) * 8 + c] +
                                   double(omega.data[1 * 3 + j]) * w.data[(h * 2 + 1) * 8 + c]);
        CHECK(k.data[(h * 3 + j) * 8 + c] == doctest::Approx(want).epsilon(1e-6));
      }
    }
  }
  const Tensor& b = t.at("layers.0.attention.query_projection.bias");  // [4]
  const Tensor& q = r->at("blocks.0.mixer.query.bias");
  REQUIRE(q.shape == std::vector<int64_t>{6});
  CHECK(q.data[4] == doctest::Approx(2.0 * (double(omega.data[1]) * b.data[2] +
                                            double(omega.data[4]) * b.data[3]))
                         .epsilon(1e-6));
  CHECK(r->at("blocks.0.mixer.value.weight").data ==
        t.at("layers.0.attention.value_projection.weight").data);

  // ω is named as the library names it.
  TensorMap bad = t;
  bad.erase("layers.0.attention.inner_attention.feature_map.omega");
  CHECK(ImportError(config, bad) ==
        "layers.0.attention.inner_attention.feature_map.omega: missing tensor, expected shape "
        "[2,3]");
  bad = t;
  bad["layers.0.attention.inner_attention.feature_map.omega"].data[5] = NAN;
  CHECK(ImportError(config, bad) ==
        "layers.0.attention.inner_attention.feature_map.omega: NaN at index 5 ([1,2])");

  // softmax_temp of full attention: the query projection times softmax_temp·√dk.
  const char* full = R"({"n_layers": 1, "n_heads": 2, "query_dimensions": 4,
    "value_dimensions": 4, "feed_forward_dimensions": 8, "softmax_temp": 0.75})";
  t = testing::RandomTensors(full, 6);
  parsed = ParseConfig(full);
  REQUIRE(parsed.ok());
  r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  const Tensor& qw = t.at("layers.0.attention.query_projection.weight");
  for (std::size_t i = 0; i < qw.data.size(); ++i) {
    CHECK(r->at("blocks.0.mixer.query.weight").data[i] == float(double(qw.data[i]) * 1.5f));
  }
  CHECK(r->at("blocks.0.mixer.key.weight").data ==
        t.at("layers.0.attention.key_projection.weight").data);
}

TEST_CASE("import: FLASH-pytorch's T5 buckets, split projections and reordered rows") {
  // Causal groups of 120: offsets 0..119 of the T5 table (exact below 16, then
  // logarithmic: 16-18 → 16, 19-20 → 17, ..., 99-112 → 30, 113 and up → 31).
  const char* config = R"({"layout": "flash-pytorch", "class": "FLASHTransformer", "dim": 8,
    "num_tokens": 5, "depth": 1, "group_size": 120, "query_key_dim": 4, "causal": true})";
  TensorMap t = testing::RandomTensors(config, 7);
  auto parsed = ParseConfig(config);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  const std::vector<float>& table =
      t.at("layers.0.rel_pos_bias.relative_attention_bias.weight").data;
  const std::vector<float>& bias = r->at("blocks.0.mixer.rel_bias").data;
  REQUIRE(bias.size() == 120);
  const std::pair<int, int> offsets[] = {{0, 0},    {15, 15},  {16, 16}, {18, 16},
                                         {19, 17},  {20, 17},  {98, 29}, {99, 30},
                                         {112, 30}, {113, 31}, {119, 31}};
  for (const auto& [offset, bucket] : offsets) {
    CHECK(bias[offset] == doctest::Approx(2.0 * table[bucket]));  // √query_key_dim = 2
  }
  // to_hidden's rows: values first, then the gate.
  const Tensor& hidden = t.at("layers.0.to_hidden.0.weight");  // [2·16, 8]
  CHECK(std::vector<float>(hidden.data.begin(), hidden.data.begin() + 128) ==
        r->at("blocks.0.mixer.v_proj.weight").data);
  CHECK(std::vector<float>(hidden.data.begin() + 128, hidden.data.end()) ==
        r->at("blocks.0.mixer.u_proj.weight").data);
  // OffsetScale rows quad_q, lin_q, quad_k, lin_k → Q^quad, K^quad, Q^lin, K^lin.
  const std::vector<float>& gamma = t.at("layers.0.qk_offset_scale.gamma").data;
  const std::vector<float>& rows = r->at("blocks.0.mixer.qk_gamma").data;
  const int from[4] = {0, 2, 1, 3};
  for (int row = 0; row < 4; ++row) {
    for (int c = 0; c < 4; ++c) CHECK(rows[row * 4 + c] == gamma[from[row] * 4 + c]);
  }

  // Bidirectional: offset j − 119 for j in [0, 239); later keys (t − p < 0) from bucket 16 on.
  const char* encoder = R"({"layout": "flash-pytorch", "class": "FLASHTransformer", "dim": 8,
    "num_tokens": 5, "depth": 1, "group_size": 120, "query_key_dim": 4})";
  t = testing::RandomTensors(encoder, 8);
  parsed = ParseConfig(encoder);
  REQUIRE(parsed.ok());
  r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  const std::vector<float>& both =
      t.at("layers.0.rel_pos_bias.relative_attention_bias.weight").data;
  const std::vector<float>& b2 = r->at("blocks.0.mixer.rel_bias").data;
  REQUIRE(b2.size() == 239);
  const std::pair<int, int> bidirectional[] = {{0, 0},  {7, 7},   {8, 8},   {11, 8},
                                               {12, 9}, {91, 15}, {-1, 17}, {-8, 24}};
  for (const auto& [offset, bucket] : bidirectional) {
    CHECK(b2[offset + 119] == doctest::Approx(2.0 * both[bucket]));
  }
}

TEST_CASE("import: the libraries' stored angles are read as stored, not recomputed") {
  // FLASH-pytorch: the positions' inv_freq and each layer's rotary freqs (one
  // RotaryEmbedding, saved under every layer).
  const char* flash = R"({"layout": "flash-pytorch", "class": "FLASHTransformer", "dim": 8,
    "num_tokens": 5, "depth": 2, "group_size": 4, "query_key_dim": 6, "causal": true})";
  TensorMap t = testing::RandomTensors(flash, 9);
  CHECK(t.at("abs_pos_emb.inv_freq").shape == std::vector<int64_t>{4});
  CHECK(t.at("layers.1.rotary_pos_emb.freqs").shape == std::vector<int64_t>{3});
  auto parsed = ParseConfig(flash);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->at("input.position_freq").data == t.at("abs_pos_emb.inv_freq").data);
  for (const char* i : {"0", "1"}) {
    CHECK(r->at(std::string("blocks.") + i + ".mixer.rotary.theta").data ==
          t.at(std::string("layers.") + i + ".rotary_pos_emb.freqs").data);
  }
  t.erase("abs_pos_emb.inv_freq");
  auto missing = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("abs_pos_emb.inv_freq") != std::string::npos);

  // performer-pytorch: PerformerLM's layer_pos_emb, a [sin | cos] table of
  // max_seq_len rows over dim_head that turns every layer's q and k.
  const char* performer = R"({"layout": "performer", "class": "PerformerLM", "num_tokens": 7,
    "max_seq_len": 12, "dim": 8, "depth": 2, "heads": 2, "dim_head": 4})";
  t = testing::RandomTensors(performer, 10);
  CHECK(t.at("layer_pos_emb.emb").shape == std::vector<int64_t>{12, 4});
  parsed = ParseConfig(performer);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  CHECK(parsed->desc.blocks[1].mixer.params().rotary.table_rows == 12);
  r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  for (const char* name : {"blocks.0.mixer.rotary.table", "blocks.1.mixer.rotary.table"}) {
    CHECK(r->at(name).shape == std::vector<int64_t>{12, 4});
    CHECK(r->at(name).data == t.at("layer_pos_emb.emb").data);
  }
}

TEST_CASE("import: FLASH-pytorch's GAU, its own names and the T5 bias times the square root of dim") {
  // Causal, max_length 60: offsets 0..59; √dim = 3.
  const char* config = R"({"layout": "flash-pytorch", "class": "GAU", "dim": 9,
    "query_key_dim": 4, "expansion_factor": 1.5, "causal": true, "max_length": 60,
    "norm_type": "scalenorm"})";
  auto parsed = ParseConfig(config);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  CHECK(parsed->desc.blocks.size() == 1);
  CHECK(parsed->desc.blocks[0].d_ff == 0);
  CHECK_FALSE(parsed->desc.has_head);
  CHECK_FALSE(parsed->desc.final_norm);
  const GauParams* gau = parsed->desc.blocks[0].mixer.As<GauParams>();
  REQUIRE(gau != nullptr);
  const GauParams& g = *gau;
  CHECK(g.length_scale);
  CHECK(g.mask);
  CHECK_FALSE(g.causal);
  CHECK(g.expansion_dim == 13);  // int(1.5 · 9)
  CHECK(g.scale == 1.0f);
  TensorMap t = testing::RandomTensors(config, 8);
  CHECK(t.count("norm.g") == 1);
  CHECK(t.count("to_out.0.weight") == 1);
  CHECK(t.count("offsetscale.gamma") == 1);
  auto r = ImportTensors(parsed->desc, parsed->layout, ViewsOf(t));
  REQUIRE_MESSAGE(r.ok(), r.message());
  const std::vector<float>& table = t.at("rel_pos_bias.relative_attention_bias.weight").data;
  const std::vector<float>& bias = r->at("blocks.0.mixer.rel_bias").data;
  REQUIRE(bias.size() == 60);
  const std::pair<int, int> causal[] = {{0, 0}, {15, 15}, {16, 16}, {59, 26}};
  for (const auto& [offset, bucket] : causal) {
    const int o = offset, k = bucket;
    CAPTURE(o);
    CHECK(bias[o] == doctest::Approx(3.0 * table[k]));
  }
  // OffsetScale's rows are recur's Q, K as they are; to_hidden split v | gate.
  CHECK(r->at("blocks.0.mixer.qk_gamma").data == t.at("offsetscale.gamma").data);
  const std::vector<float>& hidden = t.at("to_hidden.0.bias").data;
  CHECK(r->at("blocks.0.mixer.v_proj.bias").data ==
        std::vector<float>(hidden.begin(), hidden.begin() + 13));
  CHECK(r->at("blocks.0.mixer.u_proj.bias").data ==
        std::vector<float>(hidden.begin() + 13, hidden.end()));
}

TEST_CASE("import: BuildModel validates recur-named tensors the same way") {
  auto desc = testing::Describe(kTokensConfig);
  TensorMap t = testing::RandomTensors(desc, 3);
  t["blocks.1.ffn.linear1.weight"].shape = {16, 32};
  auto r = BuildModel(desc, t);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "blocks.1.ffn.linear1.weight: shape [16,32], expected [32,16]");
  t = testing::RandomTensors(desc, 3);
  t["extra"] = Tensor{{1}, {0}};
  CHECK(BuildModel(desc, t).message() ==
        "extra: unexpected tensor, not used by this config (allow with --allow-extra)");
  BuildOptions o;
  o.allow_extra = true;
  CHECK(BuildModel(desc, t, o).ok());
}

}  // namespace
}  // namespace recur::impl::converter
