// config.json import: both layouts, the fast-transformers mapping, and the
// messages for missing and invalid keys.
#include "converter/config.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "converter/json_util.h"
#include "converter/mixers/aft.h"
#include "converter/mixers/block_local.h"
#include "converter/mixers/flash.h"
#include "converter/mixers/gau.h"
#include "converter/mixers/linear_attention.h"
#include "converter/mixers/reformer.h"
#include "converter/mixers/mamba2.h"
#include "converter/mixers/rwkv7.h"
#include "converter/mixers/sliding_window.h"
#include "converter/mixers/softmax_attention.h"
#include "converter/writer.h"
#include "converter_test_util.h"
#include "tolerance.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

json TokensJson() { return json::parse(testing::kTokensConfig); }

// Block `b`'s mixer parameters as mixer P's struct; a failed check when they
// are another mixer's.
template <class P>
const P& ParamsOf(const BlockDescription& b) {
  const P* params = b.mixer.As<P>();
  REQUIRE(params != nullptr);
  return *params;
}

std::string ErrorOf(const json& config, Layout layout = Layout::kAuto) {
  auto r = ParseConfig(config.dump(), layout);
  if (r.ok()) return "(parsed)";
  return r.message();
}

TEST_CASE("config: recur layout, tokens") {
  auto r = ParseConfig(testing::kTokensConfig);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->layout == Layout::kRecur);
  const ModelDescription& d = r->desc;
  CHECK(d.d_model == 16);
  CHECK(d.norm_placement == NormPlacement::kPre);
  CHECK(d.layer_norm_eps == 1e-5f);
  CHECK(d.input.kind == InputKind::kTokens);
  CHECK(d.input.vocab_size == 11);
  CHECK(d.input.max_positions == 8);
  REQUIRE(d.blocks.size() == 2);
  for (const BlockDescription& b : d.blocks) {
    CHECK(b.mixer.As<LinearAttentionParams>() != nullptr);
    CHECK(ParamsOf<LinearAttentionParams>(b).heads == 2);
    CHECK(ParamsOf<LinearAttentionParams>(b).dk == 8);
    CHECK(ParamsOf<LinearAttentionParams>(b).dv == 4);
    CHECK(ParamsOf<LinearAttentionParams>(b).feature_map == FeatureMap::kEluPlusOne);
    CHECK(ParamsOf<LinearAttentionParams>(b).eps == 1e-6f);
    CHECK(b.d_ff == 32);
    CHECK(b.activation == Activation::kGelu);
  }
  CHECK(d.final_norm);
  CHECK(d.has_head);
  CHECK(d.head.out == 11);
  CHECK(d.head.activation == HeadActivation::kLogSoftmax);
  CHECK(d.metadata.notes == "test model");
  CHECK(d.metadata.input_description == "ids");
  CHECK(d.metadata.output_description == "log-probs");
}

TEST_CASE("config: recur layout, features") {
  auto r = ParseConfig(testing::kFeaturesConfig);
  REQUIRE_MESSAGE(r.ok(), r.message());
  const ModelDescription& d = r->desc;
  CHECK(d.norm_placement == NormPlacement::kPost);
  CHECK(d.input.kind == InputKind::kFeatures);
  CHECK(d.input.feature_width == 5);
  CHECK(d.input.projection);
  CHECK(d.input.max_positions == 0);
  CHECK(d.blocks.size() == 1);
  CHECK(d.blocks[0].activation == Activation::kRelu);
  CHECK_FALSE(d.final_norm);
  CHECK_FALSE(d.has_head);
}

TEST_CASE("config: expected tensors of the recur layout") {
  auto d = testing::Describe(testing::kTokensConfig);
  auto e = ExpectedTensors(d);
  // embedding, positions, 2 × 16 block tensors, final norm 2, head 2.
  REQUIRE(e.size() == 2 + 2 * 16 + 2 + 2);
  CHECK(e[0].name == "input.embedding");
  CHECK(e[0].shape == std::vector<int64_t>{11, 16});
  CHECK(e[1].name == "input.positions");
  CHECK(e[1].shape == std::vector<int64_t>{8, 16});
  auto find = [&](const std::string& name) -> std::vector<int64_t> {
    for (const auto& t : e)
      if (t.name == name) {
        CHECK(t.source_name == name);
        return t.shape;
      }
    return {-1};
  };
  CHECK(find("blocks.1.mixer.query.weight") == std::vector<int64_t>{16, 16});
  CHECK(find("blocks.1.mixer.value.weight") == std::vector<int64_t>{8, 16});
  CHECK(find("blocks.1.mixer.value.bias") == std::vector<int64_t>{8});
  CHECK(find("blocks.1.mixer.out.weight") == std::vector<int64_t>{16, 8});
  CHECK(find("blocks.0.ffn.linear1.weight") == std::vector<int64_t>{32, 16});
  CHECK(find("blocks.0.ffn.linear2.weight") == std::vector<int64_t>{16, 32});
  CHECK(find("blocks.0.norm2.bias") == std::vector<int64_t>{16});
  CHECK(find("head.weight") == std::vector<int64_t>{11, 16});
  CHECK(find("final_norm.weight") == std::vector<int64_t>{16});

  auto f = ExpectedTensors(testing::Describe(testing::kFeaturesConfig));
  CHECK(f[0].name == "input.projection.weight");
  CHECK(f[0].shape == std::vector<int64_t>{12, 5});
  CHECK(f[1].name == "input.projection.bias");
  CHECK(f.size() == 2 + 16);
}

TEST_CASE("config: fast-transformers layout maps onto the same description") {
  auto r = ParseConfig(testing::kFastTransformersConfig);  // detected: no "layout" key
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->layout == Layout::kFastTransformers);
  const ModelDescription& d = r->desc;
  CHECK(d.d_model == 16);  // n_heads · value_dimensions
  CHECK(d.norm_placement == NormPlacement::kPost);
  CHECK(d.layer_norm_eps == 1e-5f);
  CHECK(d.input.kind == InputKind::kFeatures);
  CHECK(d.input.feature_width == 16);
  CHECK_FALSE(d.input.projection);
  CHECK(d.input.max_positions == 0);
  REQUIRE(d.blocks.size() == 2);
  CHECK(ParamsOf<LinearAttentionParams>(d.blocks[0]).heads == 2);
  CHECK(ParamsOf<LinearAttentionParams>(d.blocks[0]).dk == 4);
  CHECK(ParamsOf<LinearAttentionParams>(d.blocks[0]).dv == 8);
  CHECK(ParamsOf<LinearAttentionParams>(d.blocks[0]).eps == 1e-6f);
  CHECK(ParamsOf<LinearAttentionParams>(d.blocks[0]).feature_map == FeatureMap::kEluPlusOne);
  CHECK(d.blocks[0].d_ff == 24);
  CHECK(d.blocks[0].activation == Activation::kGelu);
  CHECK(d.final_norm);
  CHECK_FALSE(d.has_head);

  // Builder defaults: activation relu, final_normalization true.
  json j = json::parse(testing::kFastTransformersConfig);
  j.erase("activation");
  j.erase("final_normalization");
  auto r2 = ParseConfig(j.dump());
  REQUIRE(r2.ok());
  CHECK(r2->desc.blocks[0].activation == Activation::kRelu);
  CHECK(r2->desc.final_norm);
  j["final_normalization"] = false;
  auto r3 = ParseConfig(j.dump(), Layout::kFastTransformers);
  REQUIRE(r3.ok());
  CHECK_FALSE(r3->desc.final_norm);
  // An explicit "layout" key works too.
  j["layout"] = "fast-transformers";
  j["d_model"] = 99;  // not a key of this layout: refused, as the reference does
  CHECK(ErrorOf(j).rfind("config.json: \"d_model\" is not a known key (known: layout, ", 0) == 0);
  j.erase("d_model");
  auto r4 = ParseConfig(j.dump());
  REQUIRE(r4.ok());
  CHECK(r4->layout == Layout::kFastTransformers);
  CHECK(r4->desc.d_model == 16);
}

TEST_CASE("config: fast-transformers tensor names") {
  auto d = testing::Describe(testing::kFastTransformersConfig);
  auto e = ExpectedTensors(d, Layout::kFastTransformers);
  REQUIRE(e.size() == 2 * 16 + 2);
  auto source_of = [&](const std::string& name) -> std::string {
    for (const auto& t : e)
      if (t.name == name) return t.source_name;
    return "(none)";
  };
  CHECK(source_of("blocks.0.norm1.weight") == "layers.0.norm1.weight");
  CHECK(source_of("blocks.1.norm2.bias") == "layers.1.norm2.bias");
  CHECK(source_of("blocks.0.mixer.query.weight") == "layers.0.attention.query_projection.weight");
  CHECK(source_of("blocks.0.mixer.key.bias") == "layers.0.attention.key_projection.bias");
  CHECK(source_of("blocks.1.mixer.value.weight") == "layers.1.attention.value_projection.weight");
  CHECK(source_of("blocks.1.mixer.out.weight") == "layers.1.attention.out_projection.weight");
  CHECK(source_of("blocks.0.ffn.linear1.weight") == "layers.0.linear1.weight");
  CHECK(source_of("blocks.1.ffn.linear2.bias") == "layers.1.linear2.bias");
  CHECK(source_of("final_norm.weight") == "norm.weight");
  CHECK(source_of("final_norm.bias") == "norm.bias");
  for (const auto& t : e)
    if (t.name == "blocks.0.mixer.query.weight") CHECK(t.shape == std::vector<int64_t>{8, 16});
}

TEST_CASE("config: not JSON, not an object") {
  CHECK(ParseConfig("{\"d_model\": ").message().rfind("config.json: not valid JSON: ", 0) == 0);
  CHECK(ParseConfig("[]").message() == "config.json: the top level must be a JSON object");
  CHECK(ParseConfig("{", Layout::kAuto, "my.json").message().rfind("my.json: ", 0) == 0);
}

TEST_CASE("config: a key twice is refused, not resolved to the last") {
  CHECK(ParseConfig(R"({"d_model": 8, "d_model": 16})").message() ==
        "config.json: the key \"d_model\" appears twice in one object (at the top level)");
  json j = TokensJson();
  std::string text = j.dump();
  const std::string heads = "\"heads\":";
  const size_t at = text.find(heads);
  REQUIRE(at != std::string::npos);
  text.insert(at, "\"heads\": 1, ");
  CHECK(ParseConfig(text).message() ==
        "config.json: the key \"heads\" appears twice in one object");
  // The same keys in different objects (here the input and each mixer) are fine.
  CHECK(ParseConfig(j.dump()).ok());
}

TEST_CASE("config: recur layout, missing keys") {
  for (const char* key : {"d_model", "n_layers", "norm_placement", "layer_norm_eps", "input",
                          "max_positions", "mixer", "ffn", "final_norm", "head"}) {
    json j = TokensJson();
    j.erase(key);
    CHECK(ErrorOf(j) == std::string("config.json: missing key \"") + key + "\"");
  }
  json j = TokensJson();
  j["mixer"].erase("heads");
  CHECK(ErrorOf(j) == "config.json: missing key \"mixer.heads\"");
  j = TokensJson();
  j["input"].erase("vocab_size");
  CHECK(ErrorOf(j) == "config.json: missing key \"input.vocab_size\"");
  j = TokensJson();
  j["ffn"].erase("activation");
  CHECK(ErrorOf(j) == "config.json: missing key \"ffn.activation\"");
  j = TokensJson();
  j["head"].erase("out");
  CHECK(ErrorOf(j) == "config.json: missing key \"head.out\"");
  j = json::parse(testing::kFeaturesConfig);
  j["input"].erase("projection");
  CHECK(ErrorOf(j) == "config.json: missing key \"input.projection\"");
}

TEST_CASE("config: recur layout, invalid values") {
  auto with = [](const char* path, json value) {
    json j = TokensJson();
    json::json_pointer ptr(path);
    j[ptr] = std::move(value);
    return ErrorOf(j);
  };
  CHECK(with("/mixer/heads", 0) == "config.json: \"mixer.heads\" must be a positive integer");
  CHECK(with("/mixer/heads", -2) == "config.json: \"mixer.heads\" must be a positive integer");
  CHECK(with("/mixer/heads", 2.5) == "config.json: \"mixer.heads\" must be a positive integer");
  CHECK(with("/mixer/heads", "2") == "config.json: \"mixer.heads\" must be a positive integer");
  CHECK(with("/mixer/dk", 5000000000LL) == "config.json: \"mixer.dk\" is too large (at most 4294967295)");
  CHECK(with("/d_model", nullptr) == "config.json: \"d_model\" must be a positive integer");
  CHECK(with("/max_positions", -1) == "config.json: \"max_positions\" must be a non-negative integer");
  CHECK(with("/layer_norm_eps", 0) == "config.json: \"layer_norm_eps\" must be a positive number");
  CHECK(with("/mixer/eps", "tiny") == "config.json: \"mixer.eps\" must be a positive number");
  CHECK(with("/norm_placement", "middle") ==
        "config.json: \"norm_placement\" must be one of \"pre\", \"post\" (got \"middle\")");
  CHECK(with("/ffn/activation", "tanh") ==
        "config.json: \"ffn.activation\" must be one of \"relu\", \"gelu\", \"relu_squared\", "
        "\"silu\" (got \"tanh\")");
  // The config names in runtime/mixers/mixers.inc order, each mixer's aliases
  // after its name (aft_local's aft_conv): a new mixer's line adds its name.
  std::string types;
  for (const char* name : {
#define RECUR_MIXER(Tag, config_name, file) #config_name,
#include "mixers/mixers.inc"
#undef RECUR_MIXER
       }) {
    types += std::string(types.empty() ? "" : ", ") + "\"" + name + "\"";
    if (std::string(name) == "aft_local") types += ", \"aft_conv\"";
  }
  CHECK(types.rfind("\"linear_attention\", \"softmax_attention\", \"sliding_window\"", 0) == 0);
  CHECK(types.find("\"aft_local\", \"aft_conv\", \"aft_full\"") != std::string::npos);
  CHECK(with("/mixer/type", "softmax") ==
        "config.json: \"mixer.type\" must be one of " + types + " (got \"softmax\")");
  CHECK(with("/mixer/feature_map", "sigmoid") ==
        "config.json: \"mixer.feature_map\" must be one of \"elu_plus_one\", \"relu\", "
        "\"poly2\", \"favor\", \"favor_stabilized\", \"generalized_relu\", \"random_fourier\", "
        "\"smoothed_random_fourier\" (got \"sigmoid\")");
  CHECK(with("/input/kind", "audio") ==
        "config.json: \"input.kind\" must be one of \"tokens\", \"features\" (got \"audio\")");
  CHECK(with("/head/activation", "sigmoid") ==
        "config.json: \"head.activation\" must be one of \"none\", \"softmax\", \"log_softmax\" "
        "(got \"sigmoid\")");
  CHECK(with("/head", 3) == "config.json: \"head\" must be a JSON object or null");
  CHECK(with("/mixer", 3) == "config.json: \"mixer\" must be a JSON object or a list of them");
  CHECK(with("/final_norm", 1) == "config.json: \"final_norm\" must be true or false");
  CHECK(with("/notes", 7) == "config.json: \"notes\" must be a string");
  // Every layout of layouts.inc, in list order.
  CHECK(with("/layout", "pytorch")
            .rfind("config.json: \"layout\" must be one of \"recur\", \"fast-transformers\", "
                   "\"linformer\"",
                   0) == 0);

  json j = json::parse(testing::kFeaturesConfig);
  j["input"]["projection"] = false;
  CHECK(ErrorOf(j) ==
        "config.json: \"input.feature_width\" is 5, but without a projection it must equal "
        "d_model (12)");
  j["input"]["feature_width"] = 12;
  CHECK(ErrorOf(j) == "(parsed)");
}

TEST_CASE("config: layout requested against the config's own") {
  CHECK(ErrorOf(TokensJson(), Layout::kFastTransformers) ==
        "config.json: \"layout\" is \"recur\", but layout fast-transformers was requested");
  // Without a "layout" key the requested layout decides.
  json j = TokensJson();
  j.erase("layout");
  CHECK(ErrorOf(j, Layout::kRecur) == "(parsed)");
  CHECK(ErrorOf(j, Layout::kFastTransformers) == "config.json: missing key \"n_heads\"");
}

TEST_CASE("config: fast-transformers layout, missing and invalid keys") {
  for (const char* key : {"n_layers", "n_heads", "query_dimensions", "value_dimensions",
                          "feed_forward_dimensions"}) {
    json j = json::parse(testing::kFastTransformersConfig);
    j.erase(key);
    CHECK(ErrorOf(j, Layout::kFastTransformers) ==
          std::string("config.json: missing key \"") + key + "\"");
  }
  json j = json::parse(testing::kFastTransformersConfig);
  j["n_heads"] = 0;
  CHECK(ErrorOf(j) == "config.json: \"n_heads\" must be a positive integer");
  j = json::parse(testing::kFastTransformersConfig);
  j["activation"] = "swish";
  CHECK(ErrorOf(j) == "config.json: \"activation\" must be one of \"relu\", \"gelu\" (got \"swish\")");
  j = json::parse(testing::kFastTransformersConfig);
  j["final_normalization"] = "yes";
  CHECK(ErrorOf(j) == "config.json: \"final_normalization\" must be true or false");
  j = json::parse(testing::kFastTransformersConfig);
  j["attention_type"] = "reformer";
  CHECK(ErrorOf(j).rfind("config.json: \"attention_type\" \"reformer\" is not supported: "
                         "ReformerAttention draws its hash planes",
                         0) == 0);
  j["attention_type"] = "causal-linear";
  CHECK(ErrorOf(j) == "(parsed)");
  j["n_heads"] = 65536;
  j["value_dimensions"] = 65536;
  CHECK(ErrorOf(j) == "config.json: n_heads·value_dimensions = 4294967296 is too large");
}

TEST_CASE("config: fast-transformers aft-full maps onto the aft_full encoder") {
  json j = json::parse(testing::kFastTransformersConfig);
  j["attention_type"] = "aft-full";
  j["query_dimensions"] = j["value_dimensions"];
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const BlockDescription& b = r->desc.blocks[0];
  CHECK(b.mixer.As<AftFullParams>() != nullptr);
  CHECK(ParamsOf<AftFullParams>(b).max_length == 1024);  // the library's defaults
  CHECK(ParamsOf<AftFullParams>(b).bias_rank == 64);
  CHECK(ParamsOf<AftFullParams>(b).multiply);
  CHECK_FALSE(b.mixer.causal());
  j["max_sequence_length"] = 300;
  j["aft_parameterization"] = 5;
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  size_t found = 0;
  for (const auto& t : ExpectedTensors(r->desc, Layout::kFastTransformers)) {
    if (t.name == "blocks.1.mixer.u" || t.name == "blocks.1.mixer.v") {
      ++found;
      CHECK(t.source_name == "layers.1.attention.inner_attention." + t.name.substr(t.name.size() - 1));
      CHECK(t.shape == std::vector<int64_t>{300, 5});
    }
  }
  CHECK(found == 2);

  json bad = j;
  bad["value_dimensions"] = j["query_dimensions"].get<int>() + 1;
  CHECK(ErrorOf(bad) == "config.json: \"value_dimensions\" must equal query_dimensions for "
                        "attention_type \"aft-full\" (AFT is element-wise)");
  bad = j;
  bad["aft_parameterization"] = 0;
  CHECK(ErrorOf(bad) == "config.json: \"aft_parameterization\" must be a positive integer");
  bad = j;
  bad["max_sequence_length"] = 70000;
  CHECK(ErrorOf(bad) == "config.json: \"max_sequence_length\" must be at most 65536");
  bad = j;
  bad["feature_map"] = {{"type", "favor"}, {"n_dims", 8}};
  CHECK(ErrorOf(bad) ==
        "config.json: \"feature_map\" applies only to attention_type \"linear\" "
        "and \"causal-linear\"");
  bad = j;
  bad["attention_type"] = "linear";
  CHECK(ErrorOf(bad) ==
        "config.json: \"max_sequence_length\" applies only to attention_type \"aft-full\"");
}

TEST_CASE("config: linear-attention feature maps (recur layout)") {
  auto mixer_with = [](json extra) {
    json j = TokensJson();
    for (auto& [k, v] : extra.items()) j["mixer"][k] = v;
    return j;
  };
  for (const auto& [name, map] : {std::pair{"relu", FeatureMap::kRelu},
                                  {"poly2", FeatureMap::kPoly2},
                                  {"elu_plus_one", FeatureMap::kEluPlusOne}}) {
    auto r = ParseConfig(mixer_with({{"feature_map", name}}).dump());
    REQUIRE_MESSAGE(r.ok(), r.message());
    CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).feature_map == map);
    for (const auto& t : ExpectedTensors(r->desc)) CHECK(t.name.find("omega") == std::string::npos);
  }
  const uint32_t dk = json::parse(testing::kTokensConfig)["mixer"]["dk"].get<uint32_t>();
  auto r = ParseConfig(mixer_with({{"feature_map", "favor"}, {"n_features", 10}}).dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& la = ParamsOf<LinearAttentionParams>(r->desc.blocks[0]);
  CHECK(la.feature_map == FeatureMap::kFavor);
  CHECK(la.favor_features == 10);
  // 1/√dk in f32: sqrt and the division round once each (γ₂ relative).
  CHECK(std::fabs(la.softmax_temp * std::sqrt(double(dk)) - 1) <=
        recur::impl::testing::Float32ChainBound(2));
  size_t omegas = 0;
  for (const auto& t : ExpectedTensors(r->desc)) {
    if (t.name == "blocks.0.mixer.feature_map.omega") {
      ++omegas;
      CHECK(t.shape == std::vector<int64_t>{dk, 10});
    }
  }
  CHECK(omegas == 1);
  r = ParseConfig(mixer_with({{"feature_map", "favor"}, {"n_features", 11},
                              {"favor_layout", "fast_transformers"}, {"softmax_temp", 0.5}})
                      .dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).feature_map == FeatureMap::kFavorHyperbolic);
  // Exact: a power of two parses to the same float.
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).softmax_temp == 0.5f);
  for (const auto& t : ExpectedTensors(r->desc)) {
    if (t.name == "blocks.0.mixer.feature_map.omega") CHECK(t.shape == std::vector<int64_t>{dk, 5});
  }

  CHECK(ErrorOf(mixer_with({{"feature_map", "favor"}})) ==
        "config.json: missing key \"mixer.n_features\"");
  CHECK(ErrorOf(mixer_with({{"feature_map", "favor"}, {"n_features", 0}})) ==
        "config.json: \"mixer.n_features\" must be a positive integer");
  CHECK(ErrorOf(mixer_with({{"feature_map", "favor"}, {"n_features", 8}, {"softmax_temp", -1}})) ==
        "config.json: \"mixer.softmax_temp\" must be a positive number");
  CHECK(ErrorOf(mixer_with({{"feature_map", "favor"}, {"n_features", 8},
                            {"favor_layout", "orf"}})) ==
        "config.json: \"mixer.favor_layout\" must be one of \"performer\", "
        "\"fast_transformers\" (got \"orf\")");
  CHECK(ErrorOf(mixer_with({{"feature_map", "favor"}, {"n_features", 1},
                            {"favor_layout", "fast_transformers"}})) ==
        "config.json: \"mixer.n_features\" must be >= 2 for the fast_transformers layout");
  CHECK(ErrorOf(mixer_with({{"feature_map", "relu"}, {"n_features", 8}})) ==
        "config.json: \"mixer.n_features\" applies only to feature_map \"favor\"");
  CHECK(ErrorOf(mixer_with({{"feature_map", "poly2"}, {"softmax_temp", 0.1}})) ==
        "config.json: \"mixer.softmax_temp\" applies only to feature_map \"favor\"");

  // performer-pytorch's kernels: ω [dk, m], their ε (defaults 1e-4 and 1e-3),
  // eps 0 allowed (their features are > 0), the softmax kernel encoder-only.
  r = ParseConfig(
      mixer_with(
          {{"feature_map", "generalized_relu"}, {"n_features", 6}, {"eps_per_feature", true}})
          .dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& g = ParamsOf<LinearAttentionParams>(r->desc.blocks[0]);
  CHECK(g.feature_map == FeatureMap::kGeneralizedRelu);
  CHECK(g.feature_eps == 1e-3f);
  CHECK(g.eps_per_feature);
  CHECK(g.OmegaColumns() == 6);
  r = ParseConfig(mixer_with({{"feature_map", "favor_stabilized"},
                              {"n_features", 6},
                              {"eps", 0},
                              {"causal", false},
                              {"feature_eps", 0.25}})
                      .dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).eps == 0.0f);
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).feature_eps == 0.25f);
  CHECK(ErrorOf(mixer_with({{"feature_map", "favor_stabilized"}, {"n_features", 6}})) ==
        "config.json: \"mixer.feature_map\" \"favor_stabilized\" is encoder-only "
        "(\"causal\": false): its key stabiliser is a maximum over the whole sequence, which a "
        "recurrent step cannot know");
  CHECK(ErrorOf(mixer_with({{"feature_map", "relu"}, {"feature_eps", 0.1}})) ==
        "config.json: \"mixer.feature_eps\" applies only to feature_map \"favor_stabilized\" or "
        "\"generalized_relu\"");
  CHECK(ErrorOf(mixer_with({{"feature_map", "favor"}, {"n_features", 6}, {"eps", 0}})) ==
        "config.json: \"mixer.eps\" must be a positive number");
  CHECK(ErrorOf(mixer_with({{"feature_map", "generalized_relu"},
                            {"n_features", 6},
                            {"favor_layout", "performer"}})) ==
        "config.json: \"mixer.favor_layout\" applies only to feature_map \"favor\"");
  CHECK(ErrorOf(mixer_with(
            {{"feature_map", "generalized_relu"}, {"n_features", 6}, {"eps_per_feature", 1}})) ==
        "config.json: \"mixer.eps_per_feature\" must be true or false");
}

TEST_CASE("config: random Fourier feature maps (recur layout)") {
  auto mixer_with = [](json extra) {
    json j = TokensJson();
    for (auto& [k, v] : extra.items()) j["mixer"][k] = v;
    return j;
  };
  auto r = ParseConfig(mixer_with({{"feature_map", "random_fourier"}, {"n_features", 7}}).dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const LinearAttentionParams rff = ParamsOf<LinearAttentionParams>(r->desc.blocks[0]);
  CHECK(rff.feature_map == FeatureMap::kRandomFourier);
  CHECK(rff.favor());
  CHECK(rff.OmegaColumns() == 3);
  CHECK(rff.softmax_temp == 1.0f / std::sqrt(static_cast<float>(rff.dk)));
  r = ParseConfig(mixer_with({{"feature_map", "smoothed_random_fourier"},
                              {"n_features", 6},
                              {"softmax_temp", 0.5},
                              {"smoothing", -0.25},
                              {"causal", false}})
                      .dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const LinearAttentionParams srff = ParamsOf<LinearAttentionParams>(r->desc.blocks[0]);
  CHECK(srff.feature_map == FeatureMap::kSmoothedRandomFourier);
  CHECK(srff.smoothing == -0.25f);
  CHECK(srff.softmax_temp == 0.5f);
  CHECK(srff.OmegaColumns() == 3);
  r = ParseConfig(mixer_with({{"feature_map", "smoothed_random_fourier"}, {"n_features", 6}}).dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).smoothing == 1.0f);

  CHECK(ErrorOf(mixer_with({{"feature_map", "random_fourier"}})) ==
        "config.json: missing key \"mixer.n_features\"");
  CHECK(ErrorOf(mixer_with({{"feature_map", "random_fourier"}, {"n_features", 1}})) ==
        "config.json: \"mixer.n_features\" must be >= 2 for feature_map \"random_fourier\" (ω "
        "has n_features / 2 columns)");
  CHECK(ErrorOf(mixer_with(
            {{"feature_map", "random_fourier"}, {"n_features", 4}, {"softmax_temp", 0}})) ==
        "config.json: \"mixer.softmax_temp\" must be a positive number");
  CHECK(ErrorOf(mixer_with({{"feature_map", "random_fourier"},
                            {"n_features", 4},
                            {"favor_layout", "fast_transformers"}})) ==
        "config.json: \"mixer.favor_layout\" applies only to feature_map \"favor\"");
  CHECK(ErrorOf(mixer_with(
            {{"feature_map", "random_fourier"}, {"n_features", 4}, {"smoothing", 1.0}})) ==
        "config.json: \"mixer.smoothing\" applies only to feature_map "
        "\"smoothed_random_fourier\"");
  CHECK(ErrorOf(mixer_with({{"feature_map", "smoothed_random_fourier"},
                            {"n_features", 4},
                            {"smoothing", "1"}})) ==
        "config.json: \"mixer.smoothing\" must be a finite number");
  CHECK(ErrorOf(mixer_with({{"feature_map", "smoothed_random_fourier"},
                            {"n_features", 4},
                            {"smoothing", 1e300}})) ==
        "config.json: \"mixer.smoothing\" must be a finite number");
  CHECK(ErrorOf(mixer_with({{"feature_map", "relu"}, {"smoothing", 1.0}})) ==
        "config.json: \"mixer.smoothing\" applies only to feature_map "
        "\"smoothed_random_fourier\"");
}

TEST_CASE("config: softmax attention (recur layout)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "softmax_attention"}, {"heads", 2}, {"dk", 8}, {"dv", 4}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[0].mixer.As<SoftmaxAttentionParams>() != nullptr);
  CHECK(r->desc.blocks[0].mixer.causal());
  size_t mixer_tensors = 0;
  for (const auto& t : ExpectedTensors(r->desc)) {
    if (t.name.rfind("blocks.0.mixer.", 0) == 0) ++mixer_tensors;
    if (t.name == "blocks.0.mixer.value.weight") CHECK(t.shape == std::vector<int64_t>{8, 16});
  }
  CHECK(mixer_tensors == 8);  // query, key, value, out: weight and bias
  j["mixer"]["causal"] = false;
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK_FALSE(r->desc.blocks[0].mixer.causal());
  j["mixer"]["eps"] = 1e-6;
  CHECK(ErrorOf(j) ==
        "config.json: \"mixer.eps\" does not apply to softmax_attention (its keys: "
        "type, heads, dk, causal, dv, rotary)");
  j["mixer"].erase("eps");
  j["mixer"].erase("dv");
  CHECK(ErrorOf(j) == "config.json: missing key \"mixer.dv\"");
}

TEST_CASE("config: sliding window and AFT-simple (recur layout)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "sliding_window"}, {"heads", 2}, {"dk", 8}, {"dv", 4}, {"window", 5},
                {"dilation", {1, 3}}, {"global_tokens", 2}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[0].mixer.As<SlidingWindowParams>() != nullptr);
  CHECK(ParamsOf<SlidingWindowParams>(r->desc.blocks[0]).window == 5);
  CHECK(ParamsOf<SlidingWindowParams>(r->desc.blocks[0]).dilation == std::vector<uint32_t>{1, 3});
  CHECK(ParamsOf<SlidingWindowParams>(r->desc.blocks[0]).global_tokens == 2);
  j["mixer"]["dilation"] = 2;
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<SlidingWindowParams>(r->desc.blocks[0]).dilation == std::vector<uint32_t>{2, 2});
  j["mixer"]["dilation"] = {1, 2, 3};
  CHECK(ErrorOf(j) == "config.json: \"mixer.dilation\" has 3 entries, expected one per head (2)");
  j["mixer"]["dilation"] = {1, 0};
  CHECK(ErrorOf(j) == "config.json: \"mixer.dilation\" entries must be integers in [1, 65536]");
  j["mixer"]["dilation"] = 1;
  j["mixer"]["window"] = 0;
  CHECK(ErrorOf(j) == "config.json: \"mixer.window\" must be a positive integer");
  j["mixer"].erase("window");
  CHECK(ErrorOf(j) == "config.json: missing key \"mixer.window\"");
  j["mixer"]["window"] = 4;
  j["mixer"]["global_tokens"] = -1;
  CHECK(ErrorOf(j) == "config.json: \"mixer.global_tokens\" must be a non-negative integer");
  j["mixer"]["global_tokens"] = 0;
  j["mixer"]["feature_map"] = "relu";
  CHECK(ErrorOf(j) ==
        "config.json: \"mixer.feature_map\" does not apply to sliding_window (its "
        "keys: type, heads, dk, causal, dv, window, dilation, global_tokens, "
        "global_projections, rotary)");
  j["mixer"].erase("feature_map");
  j["mixer"]["global_projections"] = true;
  CHECK(ErrorOf(j) ==
        "config.json: \"mixer.global_projections\" needs a non-causal mixer "
        "(\"causal\": false) with global_tokens > 0");
  j["mixer"]["causal"] = false;
  CHECK(ErrorOf(j) ==
        "config.json: \"mixer.global_projections\" needs a non-causal mixer "
        "(\"causal\": false) with global_tokens > 0");
  j["mixer"]["global_tokens"] = 1;
  CHECK(ErrorOf(j) == "(parsed)");
  j["mixer"]["global_projections"] = 1;
  CHECK(ErrorOf(j) == "config.json: \"mixer.global_projections\" must be true or false");
  j["mixer"].erase("global_projections");
  j["mixer"]["global_tokens"] = 0;
  j["mixer"]["causal"] = true;

  j["mixer"] = {{"type", "aft_simple"}, {"heads", 2}, {"dk", 8}};
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[0].mixer.As<AftSimpleParams>() != nullptr);
  for (const auto& t : ExpectedTensors(r->desc)) {
    if (t.name == "blocks.0.mixer.value.weight") CHECK(t.shape == std::vector<int64_t>{16, 16});
    if (t.name == "blocks.0.mixer.out.weight") CHECK(t.shape == std::vector<int64_t>{16, 16});
  }
  j["mixer"]["dv"] = 8;
  CHECK(ErrorOf(j) == "config.json: \"mixer.dv\" does not apply to aft_simple (its keys: type, "
                      "heads, dk, causal)");
}

TEST_CASE("config: rotary position embeddings (softmax, linear, sliding window, FLASH)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "softmax_attention"}, {"heads", 2}, {"dk", 8}, {"dv", 4}};
  auto r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(r->desc.blocks[0].mixer.params().rotary.dims == 0);  // absent: no rotation
  j["mixer"]["rotary"] = {{"dims", 6}, {"pairs", "half"}};
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  for (const BlockDescription& b : r->desc.blocks) {
    const RotaryDescription& rot = b.mixer.params().rotary;
    CHECK(rot.dims == 6);
    CHECK(rot.half);
    CHECK(rot.base == 10000.0);
  }
  size_t tensors = 0;
  for (const auto& t : ExpectedTensors(r->desc)) tensors += t.name.rfind("blocks.0.mixer.", 0) == 0;
  CHECK(tensors == 8);  // no tensor of its own
  j["mixer"]["rotary"] = {{"dims", 8}, {"pairs", "interleaved"}, {"base", 500000.5}};
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(r->desc.blocks[1].mixer.params().rotary.base == 500000.5);
  CHECK_FALSE(r->desc.blocks[1].mixer.params().rotary.half);
  // Stored angles: θ [dims/2] or a [sin | cos] table [rows, dims] of each block.
  j["mixer"]["rotary"] = {{"dims", 6}, {"pairs", "half"}, {"theta", "stored"}};
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[1].mixer.params().rotary.theta);
  CHECK(FormatVersionFor(r->desc) == 3);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
  CHECK(shapes["blocks.1.mixer.rotary.theta"] == std::vector<int64_t>{3});
  CHECK(shapes.count("blocks.1.mixer.rotary.table") == 0);
  j["mixer"]["rotary"] = {{"dims", 6}, {"pairs", "interleaved"}, {"table", 40}};
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[0].mixer.params().rotary.table_rows == 40);
  CHECK(FormatVersionFor(r->desc) == 3);
  shapes.clear();
  for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
  CHECK(shapes["blocks.0.mixer.rotary.table"] == std::vector<int64_t>{40, 6});
  CHECK(shapes.count("blocks.0.mixer.rotary.theta") == 0);

  const std::pair<json, std::string> bad[] = {
      {{{"dims", 7}, {"pairs", "half"}},
       "\"mixer.rotary.dims\" must be even and at most dk (8), got 7"},
      {{{"dims", 10}, {"pairs", "half"}},
       "\"mixer.rotary.dims\" must be even and at most dk (8), got 10"},
      {{{"dims", 0}, {"pairs", "half"}}, "\"mixer.rotary.dims\" must be a positive integer"},
      {{{"dims", 2.5}, {"pairs", "half"}}, "\"mixer.rotary.dims\" must be a positive integer"},
      {{{"pairs", "half"}}, "missing key \"mixer.rotary.dims\""},
      {{{"dims", 4}}, "missing key \"mixer.rotary.pairs\""},
      {{{"dims", 4}, {"pairs", "rotate_half"}},
       "\"mixer.rotary.pairs\" must be one of \"interleaved\", \"half\" (got \"rotate_half\")"},
      {{{"dims", 4}, {"pairs", "half"}, {"base", 0}},
       "\"mixer.rotary.base\" must be a finite positive number"},
      {{{"dims", 4}, {"pairs", "half"}, {"base", -10000}},
       "\"mixer.rotary.base\" must be a finite positive number"},
      {{{"dims", 4}, {"pairs", "half"}, {"base", "10000"}},
       "\"mixer.rotary.base\" must be a finite positive number"},
      {{{"dims", 4}, {"pairs", "half"}, {"offset", 1}},
       "\"mixer.rotary.offset\" is not a known key (known: dims, pairs, base, theta, table)"},
      {{{"dims", 4}, {"pairs", "half"}, {"theta", "learned"}},
       "\"mixer.rotary.theta\" must be one of \"base\", \"stored\" (got \"learned\")"},
      {{{"dims", 4}, {"pairs", "half"}, {"table", 0}},
       "\"mixer.rotary.table\" must be a positive integer"},
      {{{"dims", 4}, {"pairs", "half"}, {"table", 16}, {"theta", "stored"}},
       "\"mixer.rotary.table\" excludes \"theta\": \"stored\" (the table holds the angles)"},
      {json::array({4, "half"}), "\"mixer.rotary\" must be a JSON object"},
  };
  for (const auto& [rotary, message] : bad) {
    const std::string given = rotary.dump();  // CAPTURE's lambda cannot take a structured binding
    CAPTURE(given);
    j["mixer"]["rotary"] = rotary;
    CHECK(ErrorOf(j) == "config.json: " + message);
  }
  // Each mixer checks dims against its own q/k width.
  const json rot = {{"dims", 10}, {"pairs", "half"}};
  j["mixer"] = {
      {"type", "flash"}, {"expansion_dim", 24}, {"qk_dim", 8}, {"chunk", 5}, {"rotary", rot}};
  CHECK(ErrorOf(j) ==
        "config.json: \"mixer.rotary.dims\" must be even and at most qk_dim (8), got 10");
  j["mixer"] = {{"type", "linear_attention"}, {"heads", 2},  {"dk", 4},      {"dv", 4},
                {"feature_map", "relu"},      {"eps", 1e-6}, {"rotary", rot}};
  CHECK(ErrorOf(j) == "config.json: \"mixer.rotary.dims\" must be even and at most dk (4), got 10");
  j["mixer"] = {{"type", "sliding_window"},
                {"heads", 2},
                {"dk", 4},
                {"dv", 4},
                {"window", 3},
                {"rotary", rot}};
  CHECK(ErrorOf(j) == "config.json: \"mixer.rotary.dims\" must be even and at most dk (4), got 10");
  // The mixers without q and k rows to turn do not take it.
  j["mixer"] = {{"type", "gau"},
                {"expansion_dim", 24},
                {"qk_dim", 8},
                {"max_length", 5},
                {"rotary", {{"dims", 2}, {"pairs", "half"}}}};
  CHECK(ErrorOf(j).find("\"mixer.rotary\" does not apply to gau") != std::string::npos);
  j["mixer"] = {{"type", "aft_simple"},
                {"heads", 2},
                {"dk", 8},
                {"rotary", {{"dims", 2}, {"pairs", "half"}}}};
  CHECK(ErrorOf(j).find("\"mixer.rotary\" does not apply to aft_simple") != std::string::npos);
}

TEST_CASE("config: token shift (recur layout, every block)") {
  json j = TokensJson();
  auto r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(r->desc.blocks[0].token_shift.segments.empty());  // absent: none
  j["token_shift"] = {{"segments", {{8, 1}, {4, 0}}}, {"ffn", true}};
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  for (const BlockDescription& b : r->desc.blocks) {
    CHECK(b.token_shift.segments == std::vector<std::pair<uint32_t, int32_t>>{{8, 1}, {4, 0}});
    CHECK(b.token_shift.ffn);
  }
  j["token_shift"] = {{"segments", {{16, 1}}}};  // ffn defaults to false
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK_FALSE(r->desc.blocks[1].token_shift.ffn);

  const std::pair<json, std::string> bad[] = {
      {json::array({8, 1}), "\"token_shift\" must be a JSON object"},
      {{{"segments", {{8, 1}}}, {"shifts", 1}},
       "\"token_shift.shifts\" is not a known key (known: segments, ffn)"},
      {{{"ffn", true}}, "missing key \"token_shift.segments\""},
      {{{"segments", json::array()}},
       "\"token_shift.segments\" must be a non-empty list of [width, shift] pairs"},
      {{{"segments", 8}},
       "\"token_shift.segments\" must be a non-empty list of [width, shift] pairs"},
      {{{"segments", {{8, 1, 0}}}},
       "\"token_shift.segments[0]\" must be a pair [width, shift] of integers"},
      {{{"segments", {{4, 0}, {8, 0.5}}}},
       "\"token_shift.segments[1]\" must be a pair [width, shift] of integers"},
      {{{"segments", {{0, 1}}}},
       "\"token_shift.segments[0]\" has width 0: must be in [1, d_model]"},
      {{{"segments", {{17, 1}}}},
       "\"token_shift.segments[0]\" has width 17: must be in [1, d_model]"},
      {{{"segments", {{8, 2}}}}, "\"token_shift.segments[0]\" shifts by 2: must be -1, 0 or 1"},
      {{{"segments", {{8, 1}, {9, 0}}}},
       "\"token_shift.segments\" cover 17 features, more than d_model (16)"},
      {{{"segments", {{8, 0}, {8, -1}}}},
       "\"token_shift.segments[1]\" takes the next position (shift -1), which a causal model has "
       "not seen: only encoders (causal false) shift by -1"},
      {{{"segments", {{8, 1}}}, {"ffn", 1}}, "\"token_shift.ffn\" must be true or false"},
  };
  for (const auto& [shift, message] : bad) {
    const std::string given = shift.dump();  // CAPTURE's lambda cannot take a structured binding
    CAPTURE(given);
    j["token_shift"] = shift;
    CHECK(ErrorOf(j) == "config.json: " + message);
  }
  // Shift -1 reads the next position: an encoder's.
  j["token_shift"] = {{"segments", {{8, 0}, {8, -1}}}};
  j["mixer"]["causal"] = false;
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[0].token_shift.segments[1].second == -1);
  j["norm_placement"] = "post";
  CHECK(ErrorOf(j) ==
        "config.json: \"token_shift\" needs norm_placement \"pre\" (it shifts the "
        "normalised inputs of the mixer and the FFN)");
}

TEST_CASE("config: FLASH (recur layout)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "flash"}, {"expansion_dim", 24}, {"qk_dim", 8}, {"chunk", 5}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& fl = ParamsOf<FlashParams>(r->desc.blocks[0]);
  CHECK(r->desc.blocks[0].mixer.As<FlashParams>() != nullptr);
  CHECK(std::fabs(fl.scale / 0.2 - 1) <= recur::impl::testing::Float32ChainBound(1));  // 1/5 in f32
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
  CHECK(shapes["blocks.0.mixer.u_proj.weight"] == std::vector<int64_t>{24, 16});
  CHECK(shapes["blocks.0.mixer.z_proj.weight"] == std::vector<int64_t>{8, 16});
  CHECK(shapes["blocks.0.mixer.out.weight"] == std::vector<int64_t>{16, 24});
  CHECK(shapes["blocks.0.mixer.qk_gamma"] == std::vector<int64_t>{4, 8});
  CHECK(shapes["blocks.0.mixer.rel_bias"] == std::vector<int64_t>{5});
  CHECK(shapes.count("blocks.0.mixer.query.weight") == 0);
  j["mixer"]["causal"] = false;
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  for (const auto& t : ExpectedTensors(r->desc)) {
    if (t.name == "blocks.0.mixer.rel_bias") CHECK(t.shape == std::vector<int64_t>{9});
  }
  for (double bad : {0.0, -0.5, 1e300}) {
    j["mixer"]["scale"] = bad;
    CHECK(ErrorOf(j) == "config.json: \"mixer.scale\" must be a finite positive number");
  }
  j["mixer"].erase("scale");
  j["mixer"]["heads"] = 2;
  CHECK(ErrorOf(j) ==
        "config.json: \"mixer.heads\" does not apply to flash (its keys: type, "
        "causal, expansion_dim, qk_dim, chunk, scale, rotary)");
  j["mixer"].erase("heads");
  j["mixer"].erase("chunk");
  CHECK(ErrorOf(j) == "config.json: missing key \"mixer.chunk\"");
}

TEST_CASE("config: GAU (recur layout)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "gau"}, {"expansion_dim", 24}, {"qk_dim", 8}, {"max_length", 40}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& g = ParamsOf<GauParams>(r->desc.blocks[0]);
  CHECK(r->desc.blocks[0].mixer.As<GauParams>() != nullptr);
  CHECK(g.max_length == 40);
  // Default 1/T in f32.
  CHECK(std::fabs(g.scale * 40.0 - 1) <= recur::impl::testing::Float32ChainBound(1));
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
  CHECK(shapes["blocks.0.mixer.v_proj.weight"] == std::vector<int64_t>{24, 16});
  CHECK(shapes["blocks.0.mixer.z_proj.weight"] == std::vector<int64_t>{8, 16});
  CHECK(shapes["blocks.0.mixer.qk_beta"] == std::vector<int64_t>{2, 8});
  CHECK(shapes["blocks.0.mixer.rel_bias"] == std::vector<int64_t>{40});
  j["mixer"]["causal"] = false;
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  for (const auto& t : ExpectedTensors(r->desc)) {
    if (t.name == "blocks.0.mixer.rel_bias") CHECK(t.shape == std::vector<int64_t>{79});
  }
  CHECK(FormatVersionFor(r->desc) == 1);
  // length_scale: an encoder whatever causal says; causal is then its mask (rel_bias [T]).
  for (const bool mask : {true, false}) {
    CAPTURE(mask);
    j["mixer"]["causal"] = mask;
    j["mixer"]["length_scale"] = true;
    r = ParseConfig(j.dump());
    REQUIRE_MESSAGE(r.ok(), r.message());
    const auto& l = ParamsOf<GauParams>(r->desc.blocks[0]);
    CHECK(l.length_scale);
    CHECK(l.mask == mask);
    CHECK_FALSE(l.causal);
    CHECK(FormatVersionFor(r->desc) == 2);
    for (const auto& t : ExpectedTensors(r->desc)) {
      if (t.name == "blocks.0.mixer.rel_bias") {
        CHECK(t.shape == std::vector<int64_t>{mask ? 40 : 79});
      }
    }
  }
  j["mixer"]["length_scale"] = 1;
  CHECK(ErrorOf(j) == "config.json: \"mixer.length_scale\" must be true or false");
  j["mixer"].erase("length_scale");
  j["mixer"]["causal"] = false;
  j["mixer"]["chunk"] = 4;
  CHECK(ErrorOf(j) == "config.json: \"mixer.chunk\" does not apply to gau (its keys: type, "
                      "causal, expansion_dim, qk_dim, max_length, scale, length_scale)");
  j["mixer"].erase("chunk");
  j["mixer"]["max_length"] = 70000;
  CHECK(ErrorOf(j) == "config.json: \"mixer.max_length\" must be at most 65536");
  j["mixer"].erase("max_length");
  CHECK(ErrorOf(j) == "config.json: missing key \"mixer.max_length\"");
}

TEST_CASE("config: Reformer (recur layout, encoder only)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "reformer"}, {"heads", 2}, {"dk", 8}, {"dv", 4},
                {"n_buckets", 6}, {"chunk", 4}, {"rounds", 3}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& rf = ParamsOf<ReformerParams>(r->desc.blocks[0]);
  CHECK(r->desc.blocks[0].mixer.As<ReformerParams>() != nullptr);
  CHECK_FALSE(rf.causal);
  CHECK(rf.n_buckets == 6);
  CHECK(rf.rounds == 3);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
  CHECK(shapes["blocks.0.mixer.query.weight"] == std::vector<int64_t>{16, 16});
  CHECK(shapes["blocks.0.mixer.value.weight"] == std::vector<int64_t>{8, 16});
  CHECK(shapes["blocks.0.mixer.rotations"] == std::vector<int64_t>{3, 8, 3});
  CHECK(shapes.count("blocks.0.mixer.key.weight") == 0);  // shared QK
  j["mixer"]["causal"] = true;
  CHECK(ErrorOf(j) == "config.json: \"mixer.causal\" must be false: reformer sorts the whole "
                      "sequence by hash and has no recurrent form");
  j["mixer"].erase("causal");
  j["mixer"]["n_buckets"] = 5;
  CHECK(ErrorOf(j) == "config.json: \"mixer.n_buckets\" must be even and at most 65536");
  j["mixer"]["n_buckets"] = 4;
  j["mixer"]["rounds"] = 0;
  CHECK(ErrorOf(j) == "config.json: \"mixer.rounds\" must be a positive integer");
}

TEST_CASE("config: Reformer's transformers form (keys, defaults, per-head rotations, messages)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "reformer"},
                {"form", "transformers"},
                {"heads", 2},
                {"dk", 8},
                {"dv", 8},
                {"n_buckets", 6},
                {"chunk", 4},
                {"rounds", 3}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  {
    const auto& rf = ParamsOf<ReformerParams>(r->desc.blocks[0]);
    CHECK(rf.transformers);
    CHECK(rf.chunks_before == 1);
    CHECK(rf.chunks_after == 0);
    CHECK_FALSE(rf.causal_mask);
    CHECK_FALSE(rf.causal);
    CHECK(rf.pad_multiple == 4);  // transformers pads to the chunk length
    CHECK(rf.pad_above == 4);
  }
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
  CHECK(shapes["blocks.0.mixer.rotations"] == std::vector<int64_t>{2, 8, 3, 3});
  CHECK(shapes.count("blocks.0.mixer.key.weight") == 0);
  CHECK(FormatVersionFor(r->desc) == 2);

  j["mixer"]["chunks_before"] = 2;
  j["mixer"]["chunks_after"] = 1;
  j["mixer"]["causal_mask"] = true;
  j["mixer"]["pad_multiple"] = 12;
  j["mixer"]["pad_above"] = 0;
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  {
    const auto& rf = ParamsOf<ReformerParams>(r->desc.blocks[0]);
    CHECK(rf.chunks_before == 2);
    CHECK(rf.chunks_after == 1);
    CHECK(rf.causal_mask);
    CHECK_FALSE(rf.causal);  // still an encoder
    CHECK(rf.pad_multiple == 12);
    CHECK(rf.pad_above == 0);
  }

  for (const auto& [key, value, message] : std::vector<std::tuple<std::string, json, std::string>>{
           {"form", "hf", "\"mixer.form\" must be one of \"paper\", \"transformers\" (got \"hf\")"},
           {"form", 1, "\"mixer.form\" must be one of \"paper\", \"transformers\""},
           {"pad_multiple", 6,
            "\"mixer.pad_multiple\" must be a multiple of chunk (4) and at "
            "most 65536"},
           {"pad_multiple", 0, "\"mixer.pad_multiple\" must be a positive integer"},
           {"pad_multiple", 65540,
            "\"mixer.pad_multiple\" must be a multiple of chunk (4) and at "
            "most 65536"},
           {"pad_above", 5, "\"mixer.pad_above\" must be at most chunk (4)"},
           {"pad_above", -1, "\"mixer.pad_above\" must be a non-negative integer"},
           {"chunks_after", 62,
            "\"mixer.chunks_after\" with chunks_before makes a window of "
            "more than 64 chunks (chunks_before + chunks_after + 1)"},
           {"chunks_before", "1", "\"mixer.chunks_before\" must be a non-negative integer"},
           {"causal_mask", 1, "\"mixer.causal_mask\" must be true or false"},
           {"causal", true,
            "\"mixer.causal\" must be false: reformer sorts the whole sequence "
            "by hash and has no recurrent form"}}) {
    json bad = j;
    bad["mixer"][key] = value;
    const std::string want = "config.json: " + message;
    const std::string got = ErrorOf(bad);
    const std::string which = key;  // clang: no structured binding inside CHECK_MESSAGE
    CHECK_MESSAGE(got == want, which);
  }
  // The paper form takes none of the transformers-only keys.
  for (const char* key :
       {"chunks_before", "chunks_after", "causal_mask", "pad_multiple", "pad_above"}) {
    json bad = TokensJson();
    bad["mixer"] = {{"type", "reformer"}, {"heads", 2}, {"dk", 8},    {"dv", 8},
                    {"n_buckets", 6},     {"chunk", 4}, {"rounds", 3}};
    bad["mixer"][key] = j["mixer"][key];
    const std::string got = ErrorOf(bad);
    CHECK_MESSAGE(got == std::string("config.json: \"mixer.") + key +
                             "\" applies only to \"form\": \"transformers\"",
                  key);
    bad["mixer"]["form"] = "paper";
    CHECK(ErrorOf(bad) == got);
  }
}

TEST_CASE("config: RetNet (recur layout, causal only)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "retnet"}, {"heads", 3}, {"dk", 4}, {"dv", 6}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[0].mixer.causal());
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<std::string> names;
  for (const auto& t : ExpectedTensors(r->desc)) {
    shapes[t.name] = t.shape;
    if (t.name.rfind("blocks.0.mixer.", 0) == 0) names.push_back(t.name.substr(15));
  }
  CHECK(names == std::vector<std::string>{"query.weight", "query.bias", "key.weight", "key.bias",
                                          "value.weight", "value.bias", "gate.weight",
                                          "gate.bias", "out.weight", "out.bias"});
  CHECK(shapes["blocks.0.mixer.key.weight"] == std::vector<int64_t>{12, 16});
  CHECK(shapes["blocks.0.mixer.gate.weight"] == std::vector<int64_t>{18, 16});
  CHECK(shapes["blocks.0.mixer.out.weight"] == std::vector<int64_t>{16, 18});
  j["mixer"]["decay"] = {0.5, 0.9, 0.999};
  j["mixer"]["eps"] = 1e-5;
  CHECK(ParseConfig(j.dump()).ok());
  j["mixer"]["dk"] = 5;
  CHECK(ErrorOf(j) == "config.json: \"mixer.dk\" must be even (the rotation turns pairs of dims)");
  j["mixer"]["dk"] = 4;
  j["mixer"]["causal"] = true;
  CHECK(ErrorOf(j) == "config.json: \"mixer.causal\" does not apply to retnet (its keys: type, "
                      "heads, dk, dv, decay, eps)");
  j["mixer"].erase("causal");
  for (const json& bad : {json{0.5, 0.9}, json(0.9), json{0.5, 0.9, 1.0}, json{0.5, 0.0, 0.9},
                          json{0.5, 0.999999999, 0.9}, json{0.5, "0.9", 0.9}, json{0.5, 1e300, 0.9},
                          json{0.5, true, 0.9}}) {
    CAPTURE(bad.dump());
    j["mixer"]["decay"] = bad;
    const std::string error = ErrorOf(j);
    CHECK(error.find("config.json: \"mixer.decay\" ") == 0);
  }
  j["mixer"]["decay"] = {0.5, 0.9, 0.999};
  j["mixer"]["eps"] = 0;
  CHECK(ErrorOf(j) == "config.json: \"mixer.eps\" must be a positive number");
  j["mixer"].erase("eps");
  j["mixer"].erase("decay");
  j["mixer"]["heads"] = 21;
  CHECK(ErrorOf(j) == "config.json: \"mixer.decay\" is required with more than 20 heads (the "
                      "default 1 - 2^(-5-h) rounds to 1 in float32)");
  j["mixer"]["heads"] = 20;
  CHECK(ParseConfig(j.dump()).ok());
}

TEST_CASE("config: Mamba2 (recur layout): tensors, defaults and bad keys") {
  json j = TokensJson();
  j["mixer"] = {{"type", "mamba2"}, {"heads", 4}, {"head_dim", 3}, {"state_size", 5},
                {"groups", 2}, {"conv_kernel", 3}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& p = ParamsOf<Mamba2Params>(r->desc.blocks[0]);
  CHECK(p.norm_eps == 1e-5f);
  CHECK(p.dt_min == 0.0f);
  CHECK(std::isinf(p.dt_max));
  CHECK_FALSE(p.bias);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : ExpectedTensors(r->desc)) {
    if (t.name.rfind("blocks.0.mixer.", 0) == 0) shapes[t.name.substr(15)] = t.shape;
  }
  // in_proj: z (12), x, B, C (12 + 2·2·5), dt (4); W = 32.
  CHECK(shapes == std::map<std::string, std::vector<int64_t>>{
                      {"in_proj.weight", {48, 16}}, {"conv.weight", {32, 3}}, {"conv.bias", {32}},
                      {"dt_bias", {4}}, {"A", {4}}, {"D", {4}}, {"norm.weight", {12}},
                      {"out_proj.weight", {16, 12}}});
  j["mixer"]["bias"] = true;
  j["mixer"]["dt_min"] = 0.01;
  j["mixer"]["dt_max"] = 2;
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(ParamsOf<Mamba2Params>(r->desc.blocks[0]).dt_max == 2.0f);
  size_t biases = 0;
  for (const auto& t : ExpectedTensors(r->desc)) {
    biases += t.name == "blocks.0.mixer.in_proj.bias" || t.name == "blocks.0.mixer.out_proj.bias";
  }
  CHECK(biases == 2);
  const std::pair<json, std::string> bad[] = {
      {{{"groups", 3}}, "\"mixer.groups\" (3) must divide heads (4)"},
      {{{"conv_kernel", 257}}, "\"mixer.conv_kernel\" must be at most 256"},
      {{{"conv_kernel", 0}}, "\"mixer.conv_kernel\""},
      {{{"dt_min", 3}}, "\"mixer.dt_min\" must be below dt_max"},
      {{{"dt_min", -1}}, "\"mixer.dt_min\" must be a number in [0.0, "},
      {{{"norm_eps", 0}}, "\"mixer.norm_eps\" must be a positive number"},
      {{{"bias", 1}}, "\"mixer.bias\" must be true or false"},
      {{{"causal", true}}, "\"mixer.causal\" does not apply to mamba2"}};
  for (const auto& item : bad) {
    // Not a structured binding: C++17 lambdas (CAPTURE) cannot capture those (clang).
    const json& change = item.first;
    const std::string& message = item.second;
    CAPTURE(change.dump());
    json c = j;
    c["mixer"].update(change);
    CHECK(ErrorOf(c).find("config.json: " + message) == 0);
  }
  j["mixer"].erase("state_size");
  CHECK(ErrorOf(j).find("\"mixer.state_size\"") != std::string::npos);
}

TEST_CASE("config: Python's Infinity and NaN outside strings read as strings, inside unchanged") {
  CHECK(QuotePythonConstants("[0.0, Infinity, -Infinity, NaN]") ==
        "[0.0, \"Infinity\", \"-Infinity\", \"NaN\"]");
  CHECK(QuotePythonConstants("{\"a\": \"Infinity \\\" NaN\"}") == "{\"a\": \"Infinity \\\" NaN\"}");
  json j = TokensJson();
  j["notes"] = "Infinity and NaN";
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.metadata.notes == "Infinity and NaN");
  // A number key given Infinity is refused by name, not misread.
  j["layer_norm_eps"] = 0.5;
  std::string text = j.dump();
  text.replace(text.find("0.5"), 3, "Infinity");
  auto bad = ParseConfig(text);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message() == "config.json: \"layer_norm_eps\" must be a positive number");
}

TEST_CASE("config: block-local attention (recur layout): defaults, the step form and bad keys") {
  json j = TokensJson();
  j["mixer"] = {{"type", "block_local"}, {"heads", 2}, {"dk", 4}, {"dv", 6}, {"chunk", 8}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto* p = r->desc.blocks[0].mixer.As<BlockLocalParams>();
  REQUIRE(p != nullptr);
  CHECK(p->chunks_before == 1);
  CHECK(p->chunks_after == 0);
  CHECK(p->pad_multiple == 8);
  CHECK(p->pad_above == 8);
  CHECK(p->mask);
  CHECK(r->desc.blocks[0].mixer.causal());  // causal, one chunk before: the step form
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<std::string> names;
  for (const auto& t : ExpectedTensors(r->desc)) {
    shapes[t.name] = t.shape;
    if (t.name.rfind("blocks.0.mixer.", 0) == 0) names.push_back(t.name.substr(15));
  }
  CHECK(names == std::vector<std::string>{"query.weight", "query.bias", "key.weight", "key.bias",
                                          "value.weight", "value.bias", "out.weight", "out.bias"});
  CHECK(shapes["blocks.0.mixer.key.weight"] == std::vector<int64_t>{8, 16});
  CHECK(shapes["blocks.0.mixer.out.weight"] == std::vector<int64_t>{16, 12});
  // Without the step form: an encoder, whatever the mask.
  for (const json& extra : {json{{"chunks_after", 1}}, json{{"chunks_before", 2}},
                            json{{"causal", false}}}) {
    CAPTURE(extra.dump());
    json k = j;
    k["mixer"].update(extra);
    auto e = ParseConfig(k.dump());
    REQUIRE_MESSAGE(e.ok(), e.message());
    CHECK(!e->desc.blocks[0].mixer.causal());
  }
  j["mixer"]["chunks_before"] = 0;
  j["mixer"]["pad_multiple"] = 24;
  j["mixer"]["pad_above"] = 0;
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[0].mixer.causal());
  CHECK(r->desc.blocks[0].mixer.As<BlockLocalParams>()->pad_multiple == 24);
  CHECK(r->desc.blocks[0].mixer.As<BlockLocalParams>()->pad_above == 0);
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"chunk", 0}}, "\"mixer.chunk\" must be a positive integer"},
      {{{"chunk", 65537}}, "\"mixer.chunk\" must be at most 65536"},
      {{{"chunks_before", -1}}, "\"mixer.chunks_before\" must be a non-negative integer"},
      {{{"chunks_after", 257}}, "\"mixer.chunks_after\" must be at most 256"},
      {{{"pad_multiple", 12}}, "\"mixer.pad_multiple\" must be a multiple of chunk (8) up to 16777216"},
      {{{"pad_multiple", 0}}, "\"mixer.pad_multiple\" must be a positive integer"},
      {{{"pad_above", 9}}, "\"mixer.pad_above\" must be at most chunk (8)"},
      {{{"causal", 1}}, "\"mixer.causal\" must be true or false"},
      {{{"window", 3}}, "\"mixer.window\" does not apply to block_local (its keys: type, heads, dk, "
                        "causal, dv, chunk, chunks_before, chunks_after, pad_multiple, pad_above)"},
  };
  for (const auto& entry : bad) {
    const std::string what = entry.second;
    CAPTURE(what);
    json k = j;
    k["mixer"].update(entry.first);
    CHECK(ErrorOf(k) == "config.json: " + what);
  }
  j["mixer"].erase("chunk");
  CHECK(ErrorOf(j) == "config.json: missing key \"mixer.chunk\"");
}

TEST_CASE("config: a mixer per block (mixed models)") {
  json j = TokensJson();
  const int n = j["n_layers"].get<int>();
  REQUIRE(n == 2);
  json window = {{"type", "sliding_window"}, {"heads", 2}, {"dk", 8}, {"dv", 4}, {"window", 3}};
  json linear = j["mixer"];
  j["mixer"] = json::array({window, linear});
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->desc.blocks[0].mixer.As<SlidingWindowParams>() != nullptr);
  CHECK(r->desc.blocks[1].mixer.As<LinearAttentionParams>() != nullptr);
  CHECK(r->desc.blocks[1].d_ff == r->desc.blocks[0].d_ff);
  size_t keys = 0;
  for (const auto& t : ExpectedTensors(r->desc)) keys += t.name == "blocks.1.mixer.key.weight";
  CHECK(keys == 1);

  j["mixer"] = json::array({window});
  CHECK(ErrorOf(j) == "config.json: \"mixer\" has 1 entries, expected one per block (n_layers = 2)");
  json bad = window;
  bad["window"] = 0;
  j["mixer"] = json::array({linear, bad});
  CHECK(ErrorOf(j) == "config.json: \"mixer[1].window\" must be a positive integer");
  json encoder = window;
  encoder["causal"] = false;
  j["mixer"] = json::array({window, encoder});
  CHECK(ErrorOf(j) == "config.json: \"mixer[1].causal\" differs from mixer[0]: a model's blocks "
                      "are all causal or all non-causal");
  j["mixer"] = json::array({window, 7});
  CHECK(ErrorOf(j) == "config.json: \"mixer[1]\" must be a JSON object");
}

TEST_CASE("config: linformer (encoder only, E/F sharing)") {
  json j = TokensJson();
  j["mixer"] = {{"type", "linformer"}, {"heads", 2}, {"dk", 8}, {"dv", 4}, {"seq_len", 50},
                {"proj_dim", 6}};
  for (const auto& [sharing, e_shape, has_f] :
       {std::tuple{"none", std::vector<int64_t>{2, 6, 50}, true},
        {"headwise", std::vector<int64_t>{6, 50}, true},
        {"kv", std::vector<int64_t>{6, 50}, false},
        {"layerwise", std::vector<int64_t>{6, 50}, false}}) {
    const char* sharing_name = sharing;  // C++17 lambdas (CAPTURE) cannot capture a binding
    CAPTURE(sharing_name);
    j["mixer"]["sharing"] = sharing;
    auto r = ParseConfig(j.dump());
    REQUIRE_MESSAGE(r.ok(), r.message());
    CHECK_FALSE(r->desc.blocks[0].mixer.causal());
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
    CHECK(shapes["blocks.1.mixer.E"] == e_shape);
    CHECK(shapes.count("blocks.1.mixer.F") == (has_f ? 1u : 0u));
  }
  j["mixer"]["causal"] = true;
  CHECK(ErrorOf(j) == "config.json: \"mixer.causal\" must be false: linformer mixes the whole "
                      "sequence and has no recurrent form");
  j["mixer"].erase("causal");
  j["mixer"]["sharing"] = "all";
  CHECK(ErrorOf(j) == "config.json: \"mixer.sharing\" must be one of \"none\", \"headwise\", "
                      "\"kv\", \"layerwise\" (got \"all\")");
  j["mixer"]["sharing"] = "kv";
  j["mixer"]["proj_dim"] = 0;
  CHECK(ErrorOf(j) == "config.json: \"mixer.proj_dim\" must be a positive integer");
}

TEST_CASE("config: AFT-local and AFT-conv") {
  json j = TokensJson();
  j["mixer"] = {{"type", "aft_local"}, {"heads", 2}, {"dk", 4}, {"window", 5}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
  CHECK(shapes["blocks.0.mixer.pos_bias"] == std::vector<int64_t>{5});
  CHECK(shapes["blocks.0.mixer.value.weight"] == std::vector<int64_t>{8, 16});
  j["mixer"]["type"] = "aft_conv";
  j["mixer"]["causal"] = false;
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  shapes.clear();
  for (const auto& t : ExpectedTensors(r->desc)) shapes[t.name] = t.shape;
  CHECK(shapes["blocks.1.mixer.conv_kernel"] == std::vector<int64_t>{2, 9});
  CHECK(shapes.count("blocks.1.mixer.pos_bias") == 0);
  j["mixer"].erase("window");
  CHECK(ErrorOf(j) == "config.json: missing key \"mixer.window\"");
  j["mixer"]["window"] = 3;
  j["mixer"]["dv"] = 4;
  CHECK(ErrorOf(j) == "config.json: \"mixer.dv\" does not apply to aft_conv (its keys: type, "
                      "heads, dk, causal, window)");
}

TEST_CASE("config: fast-transformers Favor feature map") {
  json j = json::parse(testing::kFastTransformersConfig);
  j["feature_map"] = {{"type", "favor"}, {"n_dims", 6}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& la = ParamsOf<LinearAttentionParams>(r->desc.blocks[1]);
  CHECK(la.feature_map == FeatureMap::kFavorHyperbolic);
  CHECK(la.favor_features == 6);
  CHECK(std::fabs(la.softmax_temp * std::sqrt(double(la.dk)) - 1) <=
        recur::impl::testing::Float32ChainBound(2));  // 1/√dk in f32: two roundings
  std::string source;
  for (const auto& t : ExpectedTensors(r->desc, Layout::kFastTransformers)) {
    if (t.name == "blocks.1.mixer.feature_map.omega") {
      source = t.source_name;
      CHECK(t.shape == std::vector<int64_t>{la.dk, 3});
    }
  }
  CHECK(source == "layers.1.attention.inner_attention.feature_map.omega");
  j["feature_map"]["softmax_temp"] = nullptr;  // the library's default
  CHECK(ErrorOf(j) == "(parsed)");
  j["feature_map"]["softmax_temp"] = 0.25;
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  // Exact: a power of two parses to the same float.
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).softmax_temp == 0.25f);

  j["feature_map"]["stabilize"] = true;
  CHECK(ErrorOf(j) ==
        "config.json: \"feature_map.stabilize\" must be false: the stabilised Favor subtracts a "
        "maximum over the whole sequence, which has no recurrent form");
  j["feature_map"]["stabilize"] = false;
  j["feature_map"]["redraw"] = 100;  // when ω is drawn: the converted model keeps the stored one
  j["feature_map"]["deterministic_eval"] = true;
  j["feature_map"]["orthogonal"] = false;
  CHECK(ErrorOf(j) == "(parsed)");
  j["feature_map"]["seed"] = 1;
  CHECK(ErrorOf(j).rfind("config.json: \"feature_map.seed\" is not a known key", 0) == 0);
  j["feature_map"] = {{"type", "favor"}};  // n_dims None: query_dimensions
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).favor_features == 4);
  j["feature_map"] = {{"type", "generalized_random_features"}, {"n_dims", 6}};
  CHECK(ErrorOf(j) ==
        "config.json: \"feature_map.type\" must be one of \"elu\", \"activation\", "
        "\"favor\", \"generalized_random\", \"random_fourier\", "
        "\"smoothed_random_fourier\" (got \"generalized_random_features\")");
  j["feature_map"] = "favor";
  CHECK(ErrorOf(j) == "config.json: \"feature_map\" must be a JSON object");
}

TEST_CASE("config: fast-transformers random Fourier feature maps") {
  json j = json::parse(testing::kFastTransformersConfig);  // query_dimensions 4
  j["feature_map"] = {{"type", "random_fourier"}, {"n_dims", 7}, {"deterministic_eval", true}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const LinearAttentionParams la = ParamsOf<LinearAttentionParams>(r->desc.blocks[1]);
  CHECK(la.feature_map == FeatureMap::kRandomFourier);
  CHECK(la.favor_features == 7);
  CHECK(la.softmax_temp == 0.5f);  // 1/√4
  std::string source;
  for (const auto& t : ExpectedTensors(r->desc, Layout::kFastTransformers)) {
    if (t.name == "blocks.1.mixer.feature_map.omega") {
      source = t.source_name;
      CHECK(t.shape == std::vector<int64_t>{4, 3});
    }
  }
  CHECK(source == "layers.1.attention.inner_attention.feature_map.omega");
  j["feature_map"] = {{"type", "random_fourier"}, {"n_dims", nullptr}, {"softmax_temp", 0.25}};
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).favor_features == 4);
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).softmax_temp == 0.25f);

  // The smoothed map's RandomFourierFeatures gets n_dims − 1 (None: query_dimensions − 1).
  j["feature_map"] = {{"type", "smoothed_random_fourier"}, {"n_dims", 9}, {"smoothing", 0.5}};
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const LinearAttentionParams s = ParamsOf<LinearAttentionParams>(r->desc.blocks[0]);
  CHECK(s.feature_map == FeatureMap::kSmoothedRandomFourier);
  CHECK(s.favor_features == 8);
  CHECK(s.OmegaColumns() == 4);
  CHECK(s.smoothing == 0.5f);
  j["feature_map"] = {{"type", "smoothed_random_fourier"}};
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).favor_features == 3);
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).smoothing == 1.0f);
  j["feature_map"] = {{"type", "smoothed_random_fourier"}, {"n_dims", 1}};  // `0 or 4`
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).favor_features == 4);

  j["feature_map"] = {{"type", "smoothed_random_fourier"}, {"n_dims", 2}};
  CHECK(ErrorOf(j) ==
        "config.json: \"feature_map.n_dims\" leaves SmoothedRandomFourierFeatures no random "
        "features (its ω has (n_dims − 1) // 2 columns)");
  j["feature_map"] = {{"type", "random_fourier"}, {"n_dims", 1}};
  CHECK(ErrorOf(j) ==
        "config.json: \"feature_map.n_dims\" leaves RandomFourierFeatures no random features "
        "(its ω has n_dims // 2 columns)");
  j["feature_map"] = {{"type", "smoothed_random_fourier"}, {"smoothing", nullptr}};
  CHECK(ErrorOf(j) == "config.json: \"feature_map.smoothing\" must be a finite number");
  j["feature_map"] = {{"type", "random_fourier"}, {"smoothing", 1.0}};
  CHECK(ErrorOf(j).rfind("config.json: \"feature_map.smoothing\" is not a known key", 0) == 0);
  j["feature_map"] = {{"type", "random_fourier"}, {"redraw", 0}};
  CHECK(ErrorOf(j) == "config.json: \"feature_map.redraw\" must be a positive integer");
  j["query_dimensions"] = 2;
  j["feature_map"] = {{"type", "smoothed_random_fourier"}};
  CHECK(ErrorOf(j) ==
        "config.json: \"query_dimensions\" leaves SmoothedRandomFourierFeatures no random "
        "features (its ω has (n_dims − 1) // 2 columns)");
}

TEST_CASE("config: fast-transformers attention types, builders and masks") {
  json j = json::parse(testing::kFastTransformersConfig);
  j.erase("attention_type");  // the builder's default: "full"
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& full = ParamsOf<SoftmaxAttentionParams>(r->desc.blocks[0]);
  CHECK(full.heads == 2);
  CHECK(full.dk == 4);
  CHECK(full.dv == 8);
  CHECK_FALSE(full.causal);  // TransformerEncoder's forward without a mask: FullMask
  j["attn_mask"] = "triangular";
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<SoftmaxAttentionParams>(r->desc.blocks[1]).causal);
  j.erase("attn_mask");
  j["builder"] = "RecurrentEncoderBuilder";
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<SoftmaxAttentionParams>(r->desc.blocks[1]).causal);
  // A RecurrentEncoder's "linear" is RecurrentLinearAttention: causal.
  j["attention_type"] = "linear";
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).causal);
  j["builder"] = "TransformerEncoderBuilder";
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK_FALSE(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).causal);

  // local: [i − ⌊c/2⌋, i + ⌈c/2⌉) in the library; causal: the ⌊c/2⌋ + 1 up to i.
  j["attention_type"] = "local";
  j["local_context"] = 9;
  r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& sw = ParamsOf<SlidingWindowParams>(r->desc.blocks[0]);
  CHECK(sw.window == 9);
  CHECK(sw.dilation.empty());
  CHECK(sw.global_tokens == 0);
  CHECK_FALSE(sw.causal);
  j["local_context"] = 8;
  CHECK(ErrorOf(j).rfind("config.json: \"local_context\" must be odd without a causal mask", 0) ==
        0);
  j["attn_mask"] = "triangular";
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<SlidingWindowParams>(r->desc.blocks[0]).window == 5);
  CHECK(ParamsOf<SlidingWindowParams>(r->desc.blocks[0]).causal);
  j["local_context"] = 65537;
  CHECK(ErrorOf(j) == "config.json: \"local_context\" must be at most 65536");
  j["builder"] = "RecurrentEncoderBuilder";
  j.erase("attn_mask");
  CHECK(ErrorOf(j) ==
        "config.json: \"attention_type\" \"local\" is not a recurrent attention: "
        "the library's RecurrentAttentionRegistry has only \"full\", \"linear\" and "
        "\"causal-linear\"");
}

TEST_CASE("config: fast-transformers softmax_temp scales the query projection") {
  json j = json::parse(testing::kFastTransformersConfig);
  j["attention_type"] = "full";
  auto scales = [](const json& config) {
    std::map<std::string, float> out;
    auto r = ParseConfig(config.dump());
    REQUIRE_MESSAGE(r.ok(), r.message());
    for (const auto& t : ExpectedTensors(r->desc, Layout::kFastTransformers)) {
      if (t.transform != SourceTransform::kComputed) continue;
      // The factor: the computed tensor of a source of ones.
      REQUIRE(t.inputs.size() == 1);
      std::size_t count = 1;
      for (int64_t d : t.inputs[0].shape) count *= static_cast<std::size_t>(d);
      out[t.name] = t.compute({std::vector<float>(count, 1.0f)})[0];
    }
    return out;
  };
  CHECK(scales(j).empty());
  j["softmax_temp"] = 0.0;  // `softmax_temp or 1/sqrt(E)`: the default
  CHECK(scales(j).empty());
  j["softmax_temp"] = 0.25;  // ·√dk (dk 4): the mixer divides by √dk
  auto s = scales(j);
  REQUIRE(s.size() == 4);
  for (const char* name : {"blocks.0.mixer.query.weight", "blocks.1.mixer.query.bias"}) {
    CHECK(s.at(name) == 0.5f);
  }
  j["softmax_temp"] = nullptr;
  CHECK(scales(j).empty());
}

TEST_CASE("config: fast-transformers generalized random features fold ω into q and k") {
  json j = json::parse(testing::kFastTransformersConfig);
  j["attention_type"] = "linear";
  j["feature_map"] = {{"type", "generalized_random"}, {"n_dims", 6}, {"softmax_temp", 0.25}};
  auto r = ParseConfig(j.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const auto& la = ParamsOf<LinearAttentionParams>(r->desc.blocks[1]);
  CHECK(la.feature_map == FeatureMap::kRelu);
  CHECK(la.dk == 6);
  CHECK(la.dv == 8);
  int folded = 0;
  for (const auto& t : ExpectedTensors(r->desc, Layout::kFastTransformers)) {
    if (t.transform != SourceTransform::kComputed) continue;
    ++folded;
    REQUIRE(t.inputs.size() == 2);
    CHECK(t.inputs[1].name ==
          t.inputs[0].name.substr(0, 9) + "attention.inner_attention.feature_map.omega");
    CHECK(t.inputs[1].shape == std::vector<int64_t>{4, 6});
    CHECK(t.shape[0] == 12);
    CHECK(t.inputs[0].shape[0] == 8);
    CHECK(
        (t.name.find(".query.") != std::string::npos || t.name.find(".key.") != std::string::npos));
  }
  CHECK(folded == 8);                // query and key, weight and bias, two layers
  j["feature_map"].erase("n_dims");  // n_dims None: query_dimensions
  r = ParseConfig(j.dump());
  REQUIRE(r.ok());
  CHECK(ParamsOf<LinearAttentionParams>(r->desc.blocks[0]).dk == 4);
}

TEST_CASE("config: reading a file names it by its base name") {
  testing::TempDir dir;
  testing::WriteFile(dir.File("cfg.json"), "{\"d_model\": 0}");
  auto r = ReadConfigFile(dir.File("cfg.json"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "cfg.json: \"d_model\" must be a positive integer");
  auto missing = ReadConfigFile(dir.File("nope.json"));
  CHECK(missing.message().find("nope.json: cannot open") != std::string::npos);
}

}  // namespace
TEST_CASE("config: unknown keys at every level are refused by name (a typo must not change the model)") {
  {
    json j = TokensJson();
    j["mixer"]["casual"] = false;  // linear attention
    CHECK(ErrorOf(j).rfind("config.json: \"mixer.casual\" does not apply to linear_attention (its "
                           "keys: type, heads, dk, causal, dv, feature_map, ", 0) == 0);
  }
  {
    json j = TokensJson();
    j["dropout"] = 0.1;
    CHECK(ErrorOf(j).rfind("config.json: \"dropout\" is not a known key (known: layout, notes, ", 0) ==
          0);
  }
  {
    json j = TokensJson();
    j["ffn"]["activaton"] = "gelu";
    CHECK(ErrorOf(j) ==
          "config.json: \"ffn.activaton\" is not a known key (known: d_ff, activation, glu, token_mix)");
  }
  {
    json j = TokensJson();
    j["input"]["feature_width"] = 4;  // a token model
    CHECK(
        ErrorOf(j) ==
        "config.json: \"input.feature_width\" is not a known key (known: kind, vocab_size, norm)");
    j["input"].erase("feature_width");
    j["input"]["norm"] = 1;
    CHECK(ErrorOf(j) == "config.json: \"input.norm\" must be true or false");
    j["input"]["norm"] = true;
    auto r = ParseConfig(j.dump());
    REQUIRE_MESSAGE(r.ok(), r.message());
    std::vector<std::string> names;
    for (const auto& t : ExpectedTensors(r->desc)) names.push_back(t.name);
    CHECK(std::count(names.begin(), names.end(), "input.norm.weight") == 1);
    CHECK(std::count(names.begin(), names.end(), "input.norm.bias") == 1);
  }
  {
    json j = TokensJson();
    j["head"]["bias"] = true;
    CHECK(ErrorOf(j) == "config.json: \"head.bias\" is not a known key (known: out, activation)");
  }
  {
    json j = json::parse(testing::kFastTransformersConfig);
    j["attention-type"] = "linear";  // the builder's key is attention_type
    CHECK(ErrorOf(j, Layout::kFastTransformers)
              .rfind("config.json: \"attention-type\" is not a known key", 0) == 0);
  }
  {
    json j = TokensJson();
    j["n_layers"] = 4294967295u;
    CHECK(ErrorOf(j) == "config.json: \"n_layers\" must be at most 4096");
  }
}

TEST_CASE("config: a library's model class names its layout, and a config no layout recognises is refused by name") {
  // Configs with the constructor's keyword arguments and "class" but no "layout".
  const std::pair<const char*, Layout> by_class[] = {
      {R"({"class": "PerformerLM", "num_tokens": 7, "max_seq_len": 32, "dim": 8, "depth": 1,
          "heads": 2})",
       Layout::kPerformer},
      {R"({"class": "Linformer", "dim": 8, "seq_len": 16, "depth": 1, "k": 4, "heads": 2})",
       Layout::kLinformer},
      {R"({"class": "FLASHTransformer", "dim": 8, "num_tokens": 5, "depth": 1,
          "group_size": 16, "query_key_dim": 4, "causal": true})",
       Layout::kFlashPytorch},
      {R"({"class": "GAU", "dim": 8, "max_length": 32})", Layout::kFlashPytorch}};
  for (const auto& config_layout : by_class) {  // no structured binding: INFO captures it
    const std::string config = config_layout.first;
    auto r = ParseConfig(config);
    INFO(config);
    REQUIRE_MESSAGE(r.ok(), r.message());
    CHECK(r->layout == config_layout.second);
  }

  // No "layout", no class a layout knows and none of recur's keys.
  const std::string expected =
      "config.json: no \"layout\" key, and no layout recognises this config (it has none of "
      "recur's own keys, and no library's model class or keys); add \"layout\": one of "
      "\"recur\", \"fast-transformers\", \"linformer\", ";
  for (const char* config : {R"({"class": "Reformer", "dim": 8, "depth": 1})",
                             R"({"dim": 8, "depth": 1, "heads": 2})", "{}"}) {
    CHECK(ParseConfig(config).message().rfind(expected, 0) == 0);
  }
  // A config with recur's keys keeps the message of the key it lacks.
  json j = json::parse(testing::kTokensConfig);
  j.erase("d_model");
  CHECK(ErrorOf(j) == "config.json: missing key \"d_model\"");
}

}  // namespace recur::impl::converter

namespace recur::impl::converter {
namespace {

// A BlinkDL RWKV-7 checkpoint's names and shapes (the .pth of RWKV-LM's
// trainer; no data): what the shape inference reads.
TensorViewMap BlinkdlShapes(int64_t layers, int64_t c, int64_t n, int64_t vocab, int64_t d_w,
                            int64_t d_a, int64_t d_v, int64_t d_g) {
  TensorViewMap views;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    TensorView v;
    v.dtype = DType::kBF16;
    v.shape = std::move(shape);
    views[name] = v;
  };
  add("emb.weight", {vocab, c});
  add("blocks.0.ln0.weight", {c});
  add("blocks.0.ln0.bias", {c});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    const std::string att = b + "att.", ffn = b + "ffn.";
    for (const char* ln : {"ln1", "ln2"}) {
      add(b + ln + ".weight", {c});
      add(b + ln + ".bias", {c});
    }
    for (const char* mix : {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w0", "a0", "v0", "k_k",
                            "k_a"}) {
      add(att + mix, {1, 1, c});
    }
    for (const auto& [l, d] : {std::pair{"w", d_w}, {"a", d_a}, {"v", d_v}, {"g", d_g}}) {
      add(att + l + "1", {c, d});
      add(att + l + "2", {d, c});
    }
    add(att + "r_k", {c / n, n});
    for (const char* m : {"receptance", "key", "value", "output"}) add(att + m + ".weight", {c, c});
    add(att + "ln_x.weight", {c});
    add(att + "ln_x.bias", {c});
    add(ffn + "x_k", {1, 1, c});
    add(ffn + "key.weight", {4 * c, c});
    add(ffn + "value.weight", {c, 4 * c});
  }
  add("ln_out.weight", {c});
  add("ln_out.bias", {c});
  add("head.weight", {vocab, c});
  return views;
}

// RWKV-LM's trainer sizes the low-rank paths from C (its "suggestion"):
// max(32, round(f(C)/32)·32), f = 1.8√C (decay, a), 1.3√C (v), 0.6·C^0.8 (gate).
int64_t LoraWidth(double f) { return std::max<int64_t>(32, int64_t(std::lround(f / 32)) * 32); }

TEST_CASE("rwkv: every published RWKV-7 shape's configuration from its names and shapes") {
  // (layers, C) of the published 0.1B, 0.4B, 1.5B, 2.9B, 7.2B and 13.3B models; head size 64,
  // vocabulary 65,536, FFN 4C.
  for (const auto& shape : {std::pair<int64_t, int64_t>{12, 768}, {24, 1024}, {24, 2048},
                            {32, 2560}, {32, 4096}, {61, 4096}}) {
    // Plain locals: clang 14's lambdas (doctest's CAPTURE) cannot capture structured bindings.
    const int64_t layers = shape.first, c = shape.second;
    CAPTURE(layers);
    CAPTURE(c);
    const double root = std::sqrt(double(c));
    const int64_t d_w = LoraWidth(1.8 * root), d_v = LoraWidth(1.3 * root),
                  d_g = LoraWidth(0.6 * std::pow(double(c), 0.8));
    const TensorViewMap views = BlinkdlShapes(layers, c, 64, 65536, d_w, d_w, d_v, d_g);
    auto config = ConfigFromTensors(views, Layout::kAuto, "rwkv7.pth");
    REQUIRE_MESSAGE(config.ok(), config.message());
    CHECK(config->layout == Layout::kRwkv);
    const ModelDescription& d = config->desc;
    CHECK(d.d_model == c);
    REQUIRE(d.blocks.size() == size_t(layers));
    CHECK(d.input.vocab_size == 65536);
    CHECK(d.input.norm);
    CHECK(d.head.out == 65536);
    for (size_t i = 0; i < d.blocks.size(); ++i) {
      const auto* p = d.blocks[i].mixer.As<Rwkv7Params>();
      REQUIRE(p != nullptr);
      CHECK(p->heads == c / 64);
      CHECK(p->head_size == 64);
      CHECK(p->decay_rank == d_w);
      CHECK(p->rate_rank == d_w);
      CHECK(p->gate_rank == d_g);
      CHECK(p->value_rank == (i == 0 ? 0 : d_v));  // the first block provides v₀
      CHECK(d.blocks[i].d_ff == 4 * c);
      CHECK(d.blocks[i].activation == Activation::kReluSquared);
      CHECK(d.blocks[i].token_mix);
    }
    // Every tensor of the model comes from a tensor of the checkpoint with its shape, and
    // every tensor of the checkpoint is used (or is layer 0's unused value residual).
    std::map<std::string, int> used;
    for (const ExpectedTensor& t : ExpectedTensors(d, Layout::kRwkv)) {
      if (t.transform == SourceTransform::kZeros) continue;
      std::vector<std::pair<std::string, std::vector<int64_t>>> sources;
      if (t.transform == SourceTransform::kComputed) {
        for (const auto& in : t.inputs) sources.emplace_back(in.name, in.shape);
      } else {
        sources.emplace_back(t.source_name, t.SourceShape());
      }
      for (const auto& source : sources) {
        const std::string& name = source.first;
        CAPTURE(name);
        REQUIRE(views.count(name) == 1);
        if (t.transform != SourceTransform::kIgnored) CHECK(views.at(name).shape == source.second);
        ++used[name];
      }
    }
    for (const auto& entry : views) {
      const std::string& name = entry.first;
      CAPTURE(name);
      CHECK(used.count(name) == 1);
    }
  }
}

TEST_CASE("rwkv: a checkpoint no layout recognises asks for a config, and bad shapes are named") {
  TensorViewMap views = BlinkdlShapes(2, 64, 16, 97, 32, 32, 32, 32);
  views["blocks.0.att.r_k"].shape = {64};
  auto bad = ConfigFromTensors(views, Layout::kAuto, "rwkv7.pth");
  REQUIRE(!bad.ok());
  CHECK(bad.message() == "rwkv7.pth: blocks.0.att.r_k: shape [64], expected 2-D");
  views.erase("blocks.0.att.w1");
  auto none = ConfigFromTensors(views, Layout::kAuto, "model.pt");
  REQUIRE(!none.ok());
  CHECK(none.message().rfind("model.pt: no config given (--config), and no layout recognises", 0) ==
        0);
}

}  // namespace
}  // namespace recur::impl::converter
