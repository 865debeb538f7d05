// Model-level features of the recur layout (models/configs/README.md): norm
// kinds, blocks without a feed-forward, sinusoidal positions, GLU feed-forwards, reversible
// residual blocks. Config keys and
// their messages, the tensors each asks for, the format_version the writer gives the file, and what
// inspect reports.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/config.h"
#include "converter/inspect.h"
#include "converter/writer.h"
#include "converter_test_util.h"
#include "schema/recur_generated.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

json TokensJson() { return json::parse(testing::kTokensConfig); }

std::string ErrorOf(const json& config) {
  auto r = ParseConfig(config.dump());
  return r.ok() ? "(parsed)" : r.message();
}

ModelDescription Parsed(const json& config) {
  auto r = ParseConfig(config.dump());
  REQUIRE_MESSAGE(r.ok(), r.message());
  return r->desc;
}

// name → shape of every tensor `desc` asks for.
std::map<std::string, std::vector<int64_t>> Shapes(const ModelDescription& desc) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const ExpectedTensor& e : ExpectedTensors(desc)) out[e.name] = e.shape;
  return out;
}

// The model of `config` with random weights, built and loaded by the
// writer's self-check.
AlignedBytes Build(const json& config) {
  const ModelDescription desc = Parsed(config);
  auto bytes = BuildModel(desc, testing::RandomTensors(desc, 3));
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  return std::move(bytes).value();
}

const fb::Model* Root(const AlignedBytes& bytes) { return fb::GetSizePrefixedModel(bytes.data()); }

// `inspect` (text, or JSON parsed) of the model of `config`.
std::string InspectText(const testing::TempDir& dir, const json& config) {
  const AlignedBytes bytes = Build(config);
  const std::string path = dir.File("m.recur");
  testing::WriteFile(path, bytes.data(), bytes.size());
  std::string out;
  const Status s = InspectModelFile(path, false, &out);
  CHECK_MESSAGE(s.ok(), s.message());
  return out;
}
json InspectJson(const testing::TempDir& dir, const json& config) {
  const AlignedBytes bytes = Build(config);
  const std::string path = dir.File("m.recur");
  testing::WriteFile(path, bytes.data(), bytes.size());
  std::string out;
  const Status s = InspectModelFile(path, true, &out);
  CHECK_MESSAGE(s.ok(), s.message());
  return json::parse(out);
}

TEST_CASE(
    "norm: absent is layer_norm, each type parses, the writer writes version 1 only "
    "for layer norms") {
  CHECK(Parsed(TokensJson()).norm == NormKind::kLayerNorm);
  CHECK(FormatVersionFor(Parsed(TokensJson())) == 1);
  CHECK(Root(Build(TokensJson()))->format_version() == 1);
  const struct {
    json norm;
    NormKind kind;
  } cases[] = {{{{"type", "layer_norm"}}, NormKind::kLayerNorm},
               {{{"type", "rms_norm"}}, NormKind::kRmsNorm},
               {{{"type", "scale_norm"}, {"scale", "l2"}}, NormKind::kScaleNorm},
               {{{"type", "scale_norm"}, {"scale", "rms"}}, NormKind::kScaleNormRms}};
  for (const auto& c : cases) {
    CAPTURE(c.norm.dump());
    json config = TokensJson();
    config["norm"] = c.norm;
    const ModelDescription desc = Parsed(config);
    CHECK(desc.norm == c.kind);
    const uint32_t version = c.kind == NormKind::kLayerNorm ? 1 : 2;
    CHECK(FormatVersionFor(desc) == version);
    const AlignedBytes bytes = Build(config);
    CHECK(Root(bytes)->format_version() == version);
    CHECK(Root(bytes)->blocks()->Get(1)->norm2()->kind() ==
          (c.kind == NormKind::kLayerNorm   ? fb::NormKind::LayerNorm
           : c.kind == NormKind::kRmsNorm   ? fb::NormKind::RmsNorm
           : c.kind == NormKind::kScaleNorm ? fb::NormKind::ScaleNorm
                                            : fb::NormKind::ScaleNormRms));
  }
}

TEST_CASE("norm: the tensors of each kind") {
  json config = TokensJson();
  auto shapes = Shapes(Parsed(config));
  CHECK(shapes["blocks.0.norm1.weight"] == std::vector<int64_t>{16});
  CHECK(shapes["final_norm.bias"] == std::vector<int64_t>{16});
  config["norm"] = {{"type", "rms_norm"}};
  shapes = Shapes(Parsed(config));
  CHECK(shapes["blocks.1.norm2.weight"] == std::vector<int64_t>{16});
  CHECK(shapes["final_norm.weight"] == std::vector<int64_t>{16});
  CHECK(shapes.count("blocks.0.norm1.bias") == 0);
  CHECK(shapes.count("final_norm.bias") == 0);
  config["norm"] = {{"type", "scale_norm"}, {"scale", "rms"}};
  shapes = Shapes(Parsed(config));
  for (const char* name : {"blocks.0.norm1.weight", "blocks.1.norm2.weight", "final_norm.weight"}) {
    CHECK(shapes[name] == std::vector<int64_t>{1});
  }
  CHECK(shapes.count("blocks.1.norm2.bias") == 0);
}

TEST_CASE("norm: bad values are errors that name the key") {
  auto with = [](const json& norm) {
    json config = TokensJson();
    config["norm"] = norm;
    return ErrorOf(config);
  };
  CHECK(with("rms_norm") == "config.json: \"norm\" must be a JSON object");
  CHECK(with(json::object()) == "config.json: missing key \"norm.type\"");
  CHECK(with({{"type", "batch_norm"}}) ==
        "config.json: \"norm.type\" must be one of \"layer_norm\", \"rms_norm\", \"scale_norm\" "
        "(got \"batch_norm\")");
  CHECK(with({{"type", "scale_norm"}}) == "config.json: missing key \"norm.scale\"");
  CHECK(with({{"type", "scale_norm"}, {"scale", "l1"}}) ==
        "config.json: \"norm.scale\" must be one of \"l2\", \"rms\" (got \"l1\")");
  CHECK(with({{"type", "rms_norm"}, {"scale", "l2"}}) ==
        "config.json: \"norm.scale\" is not a known key (known: type)");
  CHECK(with({{"type", "layer_norm"}, {"eps", 1e-5}}) ==
        "config.json: \"norm.eps\" is not a known key (known: type)");
}

TEST_CASE("norm: inspect names each kind, in text and JSON") {
  testing::TempDir dir;
  json config = TokensJson();
  CHECK(InspectJson(dir, config)["final_norm"]["type"] == "layer_norm");
  config["norm"] = {{"type", "rms_norm"}};
  json j = InspectJson(dir, config);
  CHECK(j["format_version"] == 2);
  CHECK(j["blocks"][0]["norm1"]["type"] == "rms_norm");
  CHECK(j["blocks"][0]["norm1"]["bias"].is_null());
  CHECK(j["blocks"][0]["norm1"].count("scale") == 0);
  config["norm"] = {{"type", "scale_norm"}, {"scale", "rms"}};
  j = InspectJson(dir, config);
  CHECK(j["final_norm"]["type"] == "scale_norm");
  CHECK(j["final_norm"]["scale"] == "rms");
  CHECK(j["final_norm"]["weight"] == "final_norm.weight");
  config["norm"] = {{"type", "scale_norm"}, {"scale", "l2"}};
  const std::string text = InspectText(dir, config);
  CHECK_MESSAGE(text.find("format_version:  2") != std::string::npos, text);
  CHECK_MESSAGE(text.find("norm1:  scale_norm scale=l2 eps=1e-05") != std::string::npos, text);
  CHECK_MESSAGE(text.find("final_norm:      scale_norm scale=l2 eps=1e-05") != std::string::npos,
                text);
}

TEST_CASE("ffn null: no norm2 and no FFN tensors, an empty FeedForward, format_version 2") {
  json config = TokensJson();
  config["ffn"] = nullptr;
  const ModelDescription desc = Parsed(config);
  for (const BlockDescription& b : desc.blocks) CHECK(b.d_ff == 0);
  CHECK(FormatVersionFor(desc) == 2);
  const auto shapes = Shapes(desc);
  for (const auto& entry : shapes) {  // CHECK_MESSAGE's lambda cannot take a structured binding
    const std::string& name = entry.first;
    CHECK_MESSAGE(name.find(".norm2.") == std::string::npos, name);
    CHECK_MESSAGE(name.find(".ffn.") == std::string::npos, name);
  }
  CHECK(shapes.count("blocks.1.norm1.weight") == 1);
  CHECK(shapes.count("final_norm.weight") == 1);
  const AlignedBytes bytes = Build(config);
  const fb::Model* m = Root(bytes);
  CHECK(m->format_version() == 2);
  const fb::Block* block = m->blocks()->Get(0);
  CHECK(block->norm2() == nullptr);
  REQUIRE(block->ffn() != nullptr);
  CHECK(block->ffn()->d_ff() == 0);
  CHECK(block->ffn()->linear1() == nullptr);
  CHECK(block->ffn()->linear2() == nullptr);

  testing::TempDir dir;
  const json j = InspectJson(dir, config);
  CHECK(j["blocks"][1]["ffn"].is_null());
  CHECK(j["blocks"][1]["norm2"].is_null());
  const std::string text = InspectText(dir, config);
  CHECK_MESSAGE(text.find("    norm2:  none\n    ffn:    none\n") != std::string::npos, text);
}

TEST_CASE("ffn: a missing key, a non-object and bad members are errors that name the key") {
  json config = TokensJson();
  config.erase("ffn");
  CHECK(ErrorOf(config) == "config.json: missing key \"ffn\"");
  config["ffn"] = 64;
  CHECK(ErrorOf(config) == "config.json: \"ffn\" must be a JSON object");
  config["ffn"] = json::object();
  CHECK(ErrorOf(config) == "config.json: missing key \"ffn.d_ff\"");
  config["ffn"] = {{"d_ff", 0}, {"activation", "relu"}};
  CHECK(ErrorOf(config) == "config.json: \"ffn.d_ff\" must be a positive integer");
}

TEST_CASE("positions: sinusoid with a base and a learned scale, or none, format_version 2") {
  json config = TokensJson();
  CHECK_FALSE(Parsed(config).input.sinusoid);
  config["positions"] = {{"type", "sinusoid"}};
  ModelDescription desc = Parsed(config);
  CHECK(desc.input.sinusoid);
  CHECK(desc.input.sinusoid_base == 10000.0);
  CHECK_FALSE(desc.input.sinusoid_scale);
  CHECK(FormatVersionFor(desc) == 2);
  CHECK(Shapes(desc).count("input.position_scale") == 0);
  config["positions"] = {{"type", "sinusoid"}, {"base", 512.5}, {"scale", "learned"}};
  desc = Parsed(config);
  CHECK(desc.input.sinusoid_base == 512.5);
  CHECK(desc.input.sinusoid_scale);
  CHECK(Shapes(desc)["input.position_scale"] == std::vector<int64_t>{1});
  CHECK(Shapes(desc)["input.positions"] == std::vector<int64_t>{8, 16});  // learned ones too
  const AlignedBytes bytes = Build(config);
  const fb::SinusoidPositions* s = Root(bytes)->input()->sinusoid();
  REQUIRE(s != nullptr);
  CHECK(s->base() == 512.5);
  CHECK(s->scale() >= 0);
  CHECK(Root(bytes)->format_version() == 2);
  config["positions"]["scale"] = "none";
  CHECK(Root(Build(config))->input()->sinusoid()->scale() == -1);

  testing::TempDir dir;
  config["positions"]["scale"] = "learned";
  CHECK(InspectJson(dir, config)["input"]["sinusoid"] ==
        json({{"base", 512.5}, {"scale", "input.position_scale"}}));
  const std::string text = InspectText(dir, config);
  CHECK_MESSAGE(text.find("positions=input.positions sinusoid=base 512.5 scale "
                          "input.position_scale") != std::string::npos,
                text);
}

TEST_CASE("positions: stored frequencies, input.position_freq [d/2], format_version 3") {
  json config = TokensJson();
  config["positions"] = {{"type", "sinusoid"}, {"freq", "base"}};
  CHECK_FALSE(Parsed(config).input.sinusoid_freq);
  CHECK(Shapes(Parsed(config)).count("input.position_freq") == 0);
  config["positions"] = {{"type", "sinusoid"}, {"scale", "learned"}, {"freq", "stored"}};
  const ModelDescription desc = Parsed(config);
  CHECK(desc.input.sinusoid_freq);
  CHECK(Shapes(desc)["input.position_freq"] == std::vector<int64_t>{8});
  CHECK(FormatVersionFor(desc) == 3);
  const AlignedBytes bytes = Build(config);
  CHECK(Root(bytes)->format_version() == 3);
  CHECK(Root(bytes)->input()->sinusoid()->freq() >= 0);

  testing::TempDir dir;
  CHECK(InspectJson(dir, config)["input"]["sinusoid"] ==
        json({{"base", 10000.0}, {"scale", "input.position_scale"}, {"freq", "input.position_freq"}}));
  const std::string text = InspectText(dir, config);
  CHECK_MESSAGE(text.find("sinusoid=freq input.position_freq scale input.position_scale") !=
                    std::string::npos,
                text);
}

TEST_CASE("positions: bad values are errors that name the key") {
  auto with = [](const json& positions, uint32_t d_model = 16) {
    json config = TokensJson();
    config["positions"] = positions;
    config["d_model"] = d_model;
    return ErrorOf(config);
  };
  CHECK(with("sinusoid") == "config.json: \"positions\" must be a JSON object");
  CHECK(with({{"type", "rotary"}}) ==
        "config.json: \"positions.type\" must be one of \"sinusoid\" (got \"rotary\")");
  CHECK(with({{"base", 100}}) == "config.json: missing key \"positions.type\"");
  CHECK(with({{"type", "sinusoid"}, {"max_len", 4}}) ==
        "config.json: \"positions.max_len\" is not a known key (known: type, base, scale, freq)");
  CHECK(with({{"type", "sinusoid"}, {"freq", "learned"}}) ==
        "config.json: \"positions.freq\" must be one of \"base\", \"stored\" (got \"learned\")");
  for (const json& base : {json(0), json(-1.5), json("10000"), json(nullptr)}) {
    CHECK(with({{"type", "sinusoid"}, {"base", base}}) ==
          "config.json: \"positions.base\" must be a positive number");
  }
  CHECK(with({{"type", "sinusoid"}, {"scale", "fixed"}}) ==
        "config.json: \"positions.scale\" must be one of \"none\", \"learned\" (got \"fixed\")");
  CHECK(with({{"type", "sinusoid"}}, 15) ==
        "config.json: \"positions\" (sinusoid) needs an even d_model, got 15");
}

TEST_CASE("ffn glu: linear1 [2·d_ff, d_model], the flag in the file, format_version 2") {
  json config = TokensJson();
  CHECK_FALSE(Parsed(config).blocks[0].glu);
  config["ffn"]["glu"] = false;
  CHECK(FormatVersionFor(Parsed(config)) == 1);
  CHECK(Root(Build(config))->format_version() == 1);
  config["ffn"]["glu"] = true;
  const ModelDescription desc = Parsed(config);
  for (const BlockDescription& b : desc.blocks) CHECK(b.glu);
  CHECK(FormatVersionFor(desc) == 2);
  auto shapes = Shapes(desc);
  CHECK(shapes["blocks.1.ffn.linear1.weight"] == std::vector<int64_t>{64, 16});
  CHECK(shapes["blocks.1.ffn.linear1.bias"] == std::vector<int64_t>{64});
  CHECK(shapes["blocks.1.ffn.linear2.weight"] == std::vector<int64_t>{16, 32});
  const AlignedBytes bytes = Build(config);
  CHECK(Root(bytes)->blocks()->Get(0)->ffn()->glu());
  CHECK(Root(bytes)->blocks()->Get(0)->ffn()->d_ff() == 32);
  testing::TempDir dir;
  CHECK(InspectJson(dir, config)["blocks"][0]["ffn"]["glu"] == true);
  const std::string text = InspectText(dir, config);
  CHECK_MESSAGE(text.find("ffn:    d_ff=32 activation=gelu glu\n") != std::string::npos, text);
  config["ffn"]["glu"] = "yes";
  CHECK(ErrorOf(config) == "config.json: \"ffn.glu\" must be true or false");
  config["ffn"].erase("glu");
  config["ffn"]["gated"] = true;
  CHECK(ErrorOf(config) ==
        "config.json: \"ffn.gated\" is not a known key (known: d_ff, activation, glu, token_mix)");
}

TEST_CASE("residual: standard (the default) or reversible, pre-norm with a feed-forward only") {
  json config = TokensJson();
  CHECK_FALSE(Parsed(config).reversible);
  config["residual"] = "standard";
  CHECK_FALSE(Parsed(config).reversible);
  CHECK(Root(Build(config))->residual() == fb::Residual::Standard);
  CHECK(Root(Build(config))->format_version() == 1);
  config["residual"] = "reversible";
  const ModelDescription desc = Parsed(config);
  CHECK(desc.reversible);
  CHECK(FormatVersionFor(desc) == 2);
  CHECK(Shapes(desc) == Shapes(Parsed(TokensJson())));  // the same tensors
  const AlignedBytes bytes = Build(config);
  CHECK(Root(bytes)->residual() == fb::Residual::Reversible);
  CHECK(Root(bytes)->format_version() == 2);
  testing::TempDir dir;
  CHECK(InspectJson(dir, config)["residual"] == "reversible");
  CHECK(InspectJson(dir, TokensJson())["residual"] == "standard");
  const std::string text = InspectText(dir, config);
  CHECK_MESSAGE(text.find("residual:        reversible (two streams, x1 + x2 after the last "
                          "block)") != std::string::npos,
                text);

  config["residual"] = "revnet";
  CHECK(ErrorOf(config) ==
        "config.json: \"residual\" must be one of \"standard\", "
        "\"reversible\", \"reversible_concat\" (got \"revnet\")");
  config["residual"] = "reversible";
  config["norm_placement"] = "post";
  CHECK(ErrorOf(config) ==
        "config.json: \"residual\" \"reversible\" needs norm_placement \"pre\": its blocks add "
        "mixer(norm1(x2)) to x1 and ffn(norm2(y1)) to x2, a pre-norm pairing with no post-norm "
        "form");
  config["norm_placement"] = "pre";
  config["ffn"] = nullptr;
  CHECK(ErrorOf(config) ==
        "config.json: \"residual\" \"reversible\" needs a feed-forward "
        "(\"ffn\" is null): y2 = x2 + ffn(norm2(y1))");
}

TEST_CASE("residual reversible_concat: the final norm and head take [x1 | x2], 2·d_model wide") {
  json config = TokensJson();
  config["residual"] = "reversible_concat";
  const ModelDescription desc = Parsed(config);
  CHECK(desc.reversible);
  CHECK(desc.concat_streams);
  CHECK(FormatVersionFor(desc) == 2);
  auto shapes = Shapes(desc), plain = Shapes(Parsed(TokensJson()));
  const int64_t d = desc.d_model;
  REQUIRE(shapes.count("final_norm.weight") == 1);
  CHECK(shapes["final_norm.weight"] == std::vector<int64_t>{2 * d});
  CHECK(shapes["head.weight"] == std::vector<int64_t>{plain["head.weight"][0], 2 * d});
  for (const char* name : {"final_norm.weight", "final_norm.bias", "head.weight"}) {
    shapes.erase(name);
    plain.erase(name);
  }
  CHECK(shapes == plain);  // every block tensor as a standard model's
  const AlignedBytes bytes = Build(config);
  CHECK(Root(bytes)->residual() == fb::Residual::ReversibleConcat);
  testing::TempDir dir;
  CHECK(InspectJson(dir, config)["residual"] == "reversible_concat");
  const std::string text = InspectText(dir, config);
  CHECK_MESSAGE(text.find("residual:        reversible_concat (two streams, [x1 | x2] after the "
                          "last block)") != std::string::npos,
                text);
  config["norm_placement"] = "post";
  CHECK(ErrorOf(config) ==
        "config.json: \"residual\" \"reversible\" needs norm_placement \"pre\": its blocks add "
        "mixer(norm1(x2)) to x1 and ffn(norm2(y1)) to x2, a pre-norm pairing with no post-norm "
        "form");
}

TEST_CASE("random Fourier feature maps: ω [dk, m/2], the smoothing in the file, format_version 2") {
  json config = TokensJson();  // heads 2, dk 8
  config["mixer"]["feature_map"] = "smoothed_random_fourier";
  config["mixer"]["n_features"] = 7;
  config["mixer"]["smoothing"] = 0.5;
  const ModelDescription desc = Parsed(config);
  CHECK(FormatVersionFor(desc) == 2);
  CHECK(Shapes(desc)["blocks.0.mixer.feature_map.omega"] == std::vector<int64_t>{8, 3});
  const AlignedBytes bytes = Build(config);
  CHECK(Root(bytes)->format_version() == 2);
  const fb::LinearAttention* la = Root(bytes)->blocks()->Get(1)->mixer_as_LinearAttention();
  REQUIRE(la != nullptr);
  CHECK(la->feature_map() == fb::FeatureMap::SmoothedRandomFourier);
  CHECK(la->smoothing() == 0.5f);
  CHECK(la->favor_features() == 7);
  testing::TempDir dir;
  const json mixer = InspectJson(dir, config)["blocks"][0]["mixer"];
  CHECK(mixer["feature_map"] == "smoothed_random_fourier");
  CHECK(mixer["smoothing"] == 0.5);
  CHECK(mixer["favor_features"] == 7);
  // S (H, C, dv) and z (H, C), C = 2·3 + 1, and their compensations.
  CHECK(mixer["state_bytes"] == 2 * 4 * 2 * (7 * 4 + 7));
  const std::string text = InspectText(dir, config);
  CHECK_MESSAGE(text.find("feature_map=smoothed_random_fourier m=7") != std::string::npos, text);
  CHECK_MESSAGE(text.find("smoothing=0.5") != std::string::npos, text);

  config["mixer"]["feature_map"] = "random_fourier";
  config["mixer"].erase("smoothing");
  const json plain = InspectJson(dir, config)["blocks"][0]["mixer"];
  CHECK(plain["feature_map"] == "random_fourier");
  CHECK_FALSE(plain.contains("smoothing"));
  CHECK(plain["state_bytes"] == 2 * 4 * 2 * (6 * 4 + 6));
  CHECK(Root(Build(config))->format_version() == 2);
}

}  // namespace
}  // namespace recur::impl::converter
