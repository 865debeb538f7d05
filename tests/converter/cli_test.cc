// The recur-convert command line: convert (with and without the subcommand),
// inspect (text and JSON), verify, exit codes and one-line errors.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "converter/file_util.h"
#include "converter/quantize.h"
#include "converter/safetensors.h"
#include "converter/sha256.h"
#include "converter_test_util.h"
#include "recur/recur.h"
#include "test_models.h"
#include "schema/recur_generated.h"

#ifndef RECUR_CONVERT_EXE
#error "RECUR_CONVERT_EXE must name the recur-convert binary"
#endif

namespace recur::impl::converter {
namespace {

using testing::kFastTransformersConfig;
using testing::kTokensConfig;

struct Run {
  int code = -1;
  std::string out;
  std::string err;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Run Cli(const testing::TempDir& dir, const std::vector<std::string>& args) {
  std::string cmd = Quote(RECUR_CONVERT_EXE);
  for (const std::string& a : args) cmd += " " + Quote(a);
  cmd += " >" + Quote(dir.File("stdout.txt")) + " 2>" + Quote(dir.File("stderr.txt"));
  int status = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = testing::ReadText(dir.File("stdout.txt"));
  r.err = testing::ReadText(dir.File("stderr.txt"));
  return r;
}

// A checkpoint + config in `dir`.
void WriteInputs(const testing::TempDir& dir, const char* config, const TensorMap& tensors) {
  auto st = SerializeSafetensors(tensors);
  testing::WriteFile(dir.File("w.safetensors"), st.data(), st.size());
  testing::WriteFile(dir.File("config.json"), config);
}

std::size_t Lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST_CASE("cli: convert without a subcommand, then inspect and verify") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kTokensConfig, 1);
  WriteInputs(dir, kTokensConfig, t);
  Run r = Cli(dir, {dir.File("w.safetensors"), "--config", dir.File("config.json"), "-o",
                    dir.File("m.recur"), "--notes", "cli notes"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("wrote " + dir.File("m.recur")) == 0);

  Run i = Cli(dir, {"inspect", dir.File("m.recur")});
  INFO(i.err);
  REQUIRE(i.code == 0);
  auto st = ReadFileBytes(dir.File("w.safetensors"));
  REQUIRE(st.ok());
  for (const char* s : {"format_version:  1", "producer:           recur-convert ",
                        "notes:              test model\n                      cli notes", "d_model:         16",
                        "input:           tokens vocab_size=11 embedding=input.embedding "
                        "positions=input.positions",
                        "norm_placement:  pre",
                        "mixer:  linear_attention heads=2 dk=8 dv=4 feature_map=elu_plus_one eps=1e-06",
                        "ffn:    d_ff=32 activation=gelu", "final_norm:      layer_norm eps=1e-05",
                        "head:            dense head.weight + bias out=11 activation=log_softmax",
                        "state bytes:     ", "blocks.1.ffn.linear1.weight  [32,16]",
                        "length ok"}) {
    CHECK_MESSAGE(i.out.find(s) != std::string::npos, "missing: " << s << "\n" << i.out);
  }
  CHECK(i.out.find(Sha256Hex(st->data(), st->size())) != std::string::npos);
  CHECK(i.out.find(" NO\n") == std::string::npos);

  Run v = Cli(dir, {"verify", dir.File("m.recur")});
  CHECK(v.code == 0);
  CHECK(v.out.rfind("OK: ", 0) == 0);
  CHECK(v.err.empty());
}

// Converts `config` with random weights in `dir` (m.recur) and returns
// `inspect --json` of the result.
nlohmann::json ConvertAndInspect(const testing::TempDir& dir, const char* config) {
  WriteInputs(dir, config, testing::RandomTensors(config, 2));
  REQUIRE(Cli(dir, {"convert", dir.File("w.safetensors"), "-c", dir.File("config.json"), "-o",
                    dir.File("m.recur")})
              .code == 0);
  Run i = Cli(dir, {"inspect", "--json", dir.File("m.recur")});
  REQUIRE(i.code == 0);
  auto j = nlohmann::json::parse(i.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

TEST_CASE("cli: inspect's per-block state adds up to the runtime's, for every kind of mixer") {
  for (const char* config :
       {recur::impl::testing::kTinyTokensConfig, recur::impl::testing::kTinySoftmaxConfig,
        recur::impl::testing::kTinySlidingWindowConfig, recur::impl::testing::kTinyAftConfig,
        recur::impl::testing::kTinyFlashConfig, recur::impl::testing::kTinyLinformerConfig,
        recur::impl::testing::kTinyReformerConfig,
        recur::impl::testing::kTinyReformerTransformersConfig,
        recur::impl::testing::kTinyAftLocalConfig, recur::impl::testing::kTinyAftConvConfig,
        recur::impl::testing::kTinyAftFullConfig, recur::impl::testing::kTinyGauConfig,
        recur::impl::testing::kTinyRetNetConfig, recur::impl::testing::kTinyBlockLocalConfig,
        recur::impl::testing::kTinyRwkv7Config, recur::impl::testing::kTinyGatedDeltaNetConfig,
        recur::impl::testing::kTinyGlaConfig,
        recur::impl::testing::kTinyBlockLocalEncoderConfig,
        recur::impl::testing::kTinyMixedConfig, recur::impl::testing::kTinyRotaryConfig,
        recur::impl::testing::kTinyTokenShiftConfig,
        recur::impl::testing::kTinyTokenShiftEncoderConfig}) {
    CAPTURE(config);
    testing::TempDir dir;
    const nlohmann::json j = ConvertAndInspect(dir, config);
    REQUIRE(j["runtime"]["ok"] == true);
    uint64_t blocks = 0, blocks_plain = 0;
    for (const auto& b : j["blocks"]) {
      const auto& m = b["mixer"];
      // The token shift's carries and the FFN token mix's are the block's.
      const uint64_t shift =
          (b.contains("token_shift") ? b["token_shift"]["state_bytes"].get<uint64_t>() : 0) +
          (!b["ffn"].is_null() && b["ffn"].contains("state_bytes")
               ? b["ffn"]["state_bytes"].get<uint64_t>()
               : 0);
      blocks += m["state_bytes"].get<uint64_t>() + shift;
      blocks_plain += m.value("state_bytes_plain_sums", m["state_bytes"].get<uint64_t>()) + shift;
    }
    CHECK(blocks == j["runtime"]["state_bytes"].get<uint64_t>());
    CHECK(blocks_plain == j["runtime"]["state_bytes_plain_sums"].get<uint64_t>());
  }
}

TEST_CASE(
    "cli: inspect shows rotary position embeddings and stored angles, token shift, Reformer's "
    "form and format versions 2 and 3") {
  for (const auto& [config, lines] : std::vector<std::pair<const char*, std::vector<std::string>>>{
           {recur::impl::testing::kTinyRotaryConfig,
            {"format_version:  2",
             "mixer:  softmax_attention heads=2 dk=8 dv=4 rotary_dims=6 rotary_pairs=half "
             "rotary_base=500",
             "rotary_dims=4 rotary_pairs=interleaved rotary_base=200"}},
           {recur::impl::testing::kTinyTokenShiftConfig,
            {"format_version:  2",
             "shift:  segments=[[5,1],[3,0],[4,1]] of the mixer's input and the FFN's, 72 bytes of "
             "state per stream"}},
           {recur::impl::testing::kTinyTokenShiftEncoderConfig,
            {"shift:  segments=[[4,-1],[4,0],[3,1]] of the mixer's input and the FFN's, 0 bytes of "
             "state per stream"}},
           {recur::impl::testing::kTinyBlockLocalConfig,
            {"format_version:  2",
             "mixer:  block_local heads=2 dk=4 dv=3 chunk=5 chunks_before=1 chunks_after=0 "
             "pad_multiple=5 pad_above=5\n",
             "state:  560 bytes per stream, fixed"}},
           {recur::impl::testing::kTinyBlockLocalEncoderConfig,
            {"format_version:  2",
             "mixer:  block_local heads=3 dk=2 dv=4 chunk=4 chunks_before=1 chunks_after=1 "
             "pad_multiple=8 pad_above=2 non-causal (encoder)",
             "state:  0 bytes per stream"}},
           {recur::impl::testing::kTinyReformerTransformersConfig,
            {"format_version:  2",
             "mixer:  reformer heads=2 dk=4 dv=3 n_buckets=4 chunk=5 rounds=2 form=transformers "
             "chunks_before=2 chunks_after=1 causal_mask=true pad_multiple=10 pad_above=4 "
             "non-causal (encoder)"}},
           {recur::impl::testing::kTinyReformerConfig,
            {"format_version:  1",
             "mixer:  reformer heads=2 dk=4 dv=3 n_buckets=4 chunk=5 "
             "rounds=2 non-causal (encoder)"}},
           {R"({"layout": "recur", "d_model": 8, "n_layers": 1, "norm_placement": "pre",
               "layer_norm_eps": 1e-5,
               "input": {"kind": "features", "feature_width": 8, "projection": false},
               "max_positions": 0, "mixer": {"type": "gau", "expansion_dim": 6, "qk_dim": 4,
               "max_length": 30, "length_scale": true}, "ffn": null, "final_norm": false,
               "head": null})",
            {"format_version:  2", "length_scale (scores / N) causal_mask non-causal (encoder)",
             "state:  0 bytes per stream"}},
           {R"({"layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
               "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
               "max_positions": 0, "positions": {"type": "sinusoid", "freq": "stored"},
               "mixer": [{"type": "softmax_attention", "heads": 2, "dk": 8, "dv": 4,
                          "rotary": {"dims": 6, "pairs": "half", "theta": "stored"}},
                         {"type": "linear_attention", "heads": 2, "dk": 8, "dv": 8,
                          "feature_map": "elu_plus_one", "eps": 1e-6,
                          "rotary": {"dims": 8, "pairs": "interleaved", "table": 20}}],
               "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
               "head": {"out": 11, "activation": "softmax"}})",
            {"format_version:  3", "sinusoid=freq input.position_freq scale none",
             "mixer:  softmax_attention heads=2 dk=8 dv=4 rotary_dims=6 rotary_pairs=half "
             "rotary_theta=blocks.0.mixer.rotary.theta",
             "rotary_dims=8 rotary_pairs=interleaved rotary_table=blocks.1.mixer.rotary.table"}},
           {kTokensConfig, {"format_version:  1"}}}) {
    testing::TempDir dir;
    WriteInputs(dir, config, testing::RandomTensors(config, 2));
    REQUIRE(Cli(dir, {"convert", dir.File("w.safetensors"), "-c", dir.File("config.json"), "-o",
                      dir.File("m.recur")})
                .code == 0);
    Run i = Cli(dir, {"inspect", dir.File("m.recur")});
    REQUIRE(i.code == 0);
    for (const std::string& line : lines) {
      CHECK_MESSAGE(i.out.find(line) != std::string::npos, "missing: " << line << "\n" << i.out);
    }
    CHECK((i.out.find("shift:") != std::string::npos) ==
          (config == recur::impl::testing::kTinyTokenShiftConfig ||
           config == recur::impl::testing::kTinyTokenShiftEncoderConfig));
  }
}

TEST_CASE("cli: inspect shows a block-local encoder with the causal mask (chunks after)") {
  std::string config = recur::impl::testing::kTinyBlockLocalConfig;
  const std::string key = "\"chunk\": 5";
  config.replace(config.find(key), key.size(), key + ", \"chunks_after\": 1");
  testing::TempDir dir;
  WriteInputs(dir, config.c_str(), testing::RandomTensors(config.c_str(), 2));
  REQUIRE(Cli(dir, {"convert", dir.File("w.safetensors"), "-c", dir.File("config.json"), "-o",
                    dir.File("m.recur")})
              .code == 0);
  Run i = Cli(dir, {"inspect", dir.File("m.recur")});
  REQUIRE(i.code == 0);
  CHECK_MESSAGE(i.out.find("mixer:  block_local heads=2 dk=4 dv=3 chunk=5 chunks_before=1 "
                           "chunks_after=1 pad_multiple=5 pad_above=5 causal_mask (encoder: no "
                           "step form with chunks after or > 1 before)\n") != std::string::npos,
                i.out);
  CHECK(i.out.find("state:  0 bytes per stream") != std::string::npos);
}

TEST_CASE("cli: inspect --json") {
  testing::TempDir dir;
  nlohmann::json j = ConvertAndInspect(dir, kTokensConfig);
  CHECK(j["format_version"] == 1);
  CHECK(j["d_model"] == 16);
  CHECK(j["length_ok"] == true);
  CHECK(j["input"]["kind"] == "tokens");
  CHECK(j["blocks"].size() == 2);
  CHECK(j["blocks"][0]["mixer"]["heads"] == 2);
  CHECK(j["blocks"][0]["mixer"]["eps"] == 1e-6);
  CHECK(j["blocks"][1]["ffn"]["activation"] == "gelu");
  CHECK(j["head"]["activation"] == "log_softmax");
  CHECK(j["runtime"]["ok"] == true);
  CHECK(j["runtime"]["state_bytes"].get<uint64_t>() > 0);
  // The blocks' fixed state adds up to the runtime's, with and without compensations.
  uint64_t blocks = 0, blocks_plain = 0;
  for (const auto& b : j["blocks"]) {
    blocks += b["mixer"]["state_bytes"].get<uint64_t>();
    blocks_plain += b["mixer"]["state_bytes_plain_sums"].get<uint64_t>();
  }
  CHECK(blocks == j["runtime"]["state_bytes"].get<uint64_t>());
  CHECK(blocks_plain == j["runtime"]["state_bytes_plain_sums"].get<uint64_t>());
  CHECK(blocks_plain * 2 == blocks);
  CHECK(j["runtime"]["parameter_count"] == j["tensor_elements"]);
  CHECK(j["tensors"].size() == 38);
  for (const auto& t : j["tensors"]) {
    CHECK(t["aligned"] == true);
    CHECK(t["offset"].get<uint64_t>() % 64 == 0);
    CHECK(t["dtype"] == "f32");
  }
  CHECK(j["file_bytes"].get<uint64_t>() ==
        j["data_offset"].get<uint64_t>() + j["data_size"].get<uint64_t>());
}

TEST_CASE("cli: fast-transformers layout (detected and explicit)") {
  testing::TempDir dir;
  WriteInputs(dir, kFastTransformersConfig, testing::RandomTensors(kFastTransformersConfig, 3));
  Run r = Cli(dir, {"convert", dir.File("w.safetensors"), "--config", dir.File("config.json"),
                    "--layout", "fast-transformers", "-o", dir.File("m.recur")});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("fast-transformers layout") != std::string::npos);
  Run i = Cli(dir, {"inspect", dir.File("m.recur")});
  REQUIRE(i.code == 0);
  CHECK(i.out.find("input:           features feature_width=16 projection=none") != std::string::npos);
  CHECK(i.out.find("norm_placement:  post") != std::string::npos);
  CHECK(i.out.find("head:            none") != std::string::npos);
  CHECK(i.out.find("layers.") == std::string::npos);

  // The recur layout asked for a fast-transformers config: an error.
  Run bad = Cli(dir, {dir.File("w.safetensors"), "--config", dir.File("config.json"), "--layout",
                      "recur", "-o", dir.File("m2.recur")});
  CHECK(bad.code == 1);
  CHECK(bad.err == "error: config.json: missing key \"d_model\"\n");
}

TEST_CASE("cli: errors exit 1 with one line on stderr") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kTokensConfig, 4);
  t["blocks.1.ffn.linear1.weight"] = Tensor{{16, 32}, std::vector<float>(512, 0.0f)};
  WriteInputs(dir, kTokensConfig, t);
  Run r = Cli(dir, {dir.File("w.safetensors"), "--config", dir.File("config.json"), "-o",
                    dir.File("m.recur")});
  CHECK(r.code == 1);
  CHECK(r.err == "error: blocks.1.ffn.linear1.weight: shape [16,32], expected [32,16]\n");
  CHECK(r.out.empty());

  t = testing::RandomTensors(kTokensConfig, 4);
  t["blocks.0.mixer.value.bias"].data[2] = std::numeric_limits<float>::quiet_NaN();
  WriteInputs(dir, kTokensConfig, t);
  r = Cli(dir, {dir.File("w.safetensors"), "--config", dir.File("config.json"), "-o",
                dir.File("m.recur")});
  CHECK(r.code == 1);
  CHECK(r.err == "error: blocks.0.mixer.value.bias: NaN at index 2\n");

  // Missing input files, a bad option value, a missing required option.
  r = Cli(dir, {dir.File("nope.safetensors"), "--config", dir.File("config.json"), "-o",
                dir.File("m.recur")});
  CHECK(r.code == 1);
  CHECK(r.err.find("nope.safetensors: cannot open") != std::string::npos);
  CHECK(Lines(r.err) == 1);
  r = Cli(dir, {dir.File("w.safetensors"), "--config", dir.File("config.json"), "--layout", "keras",
                "-o", dir.File("m.recur")});
  CHECK(r.code == 1);
  CHECK(r.err.rfind("error: ", 0) == 0);
  CHECK(Lines(r.err) == 1);
  r = Cli(dir, {dir.File("w.safetensors"), "--config", dir.File("config.json")});
  CHECK(r.code == 1);
  CHECK(r.err.find("--output") != std::string::npos);
  CHECK(Lines(r.err) == 1);

  // inspect / verify of something that is not a model.
  testing::WriteFile(dir.File("junk.recur"), "definitely not a model file");
  r = Cli(dir, {"inspect", dir.File("junk.recur")});
  CHECK(r.code == 1);
  CHECK(r.err.find("not a recur model") != std::string::npos);
  r = Cli(dir, {"verify", dir.File("junk.recur")});
  CHECK(r.code == 1);
  CHECK(r.err.rfind("error: " + dir.File("junk.recur") + ": ", 0) == 0);
  CHECK(Lines(r.err) == 1);
  r = Cli(dir, {"verify", dir.File("missing.recur")});
  CHECK(r.code == 1);

  // An output that is one of the inputs is refused, and the input survives.
  t = testing::RandomTensors(kTokensConfig, 4);
  WriteInputs(dir, kTokensConfig, t);
  const std::string weights = dir.File("w.safetensors");
  const auto before = ReadFileBytes(weights);
  REQUIRE(before.ok());
  for (const std::string& output : {weights, dir.File("config.json"), dir.File("./w.safetensors")}) {
    r = Cli(dir, {weights, "--config", dir.File("config.json"), "-o", output});
    CHECK(r.code == 1);
    CHECK(r.err.find("refusing to overwrite it") != std::string::npos);
  }
  const auto after = ReadFileBytes(weights);
  REQUIRE(after.ok());
  CHECK(*after == *before);
  // An output folder that does not exist is named, not the temporary file.
  r = Cli(dir, {weights, "--config", dir.File("config.json"), "-o", dir.File("nodir/m.recur")});
  CHECK(r.code == 1);
  CHECK(r.err == "error: " + dir.File("nodir/m.recur") + ": cannot create: No such file or directory\n");
}

TEST_CASE("cli: verify finds NaN that the runtime loader accepts, and truncation") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kTokensConfig, 5);
  WriteInputs(dir, kTokensConfig, t);
  REQUIRE(Cli(dir, {dir.File("w.safetensors"), "-c", dir.File("config.json"), "-o",
                    dir.File("m.recur")})
              .code == 0);
  auto bytes = ReadFileAligned(dir.File("m.recur"));
  REQUIRE(bytes.ok());
  // Poke a NaN into head.weight[1,3] in the data segment.
  uint32_t s = 0;
  std::memcpy(&s, bytes->data(), 4);
  const uint64_t p = (4ull + s + 63) / 64 * 64;
  const fb::Model* m = fb::GetSizePrefixedModel(bytes->data());
  uint64_t offset = 0;
  for (const fb::Tensor* tensor : *m->tensors())
    if (tensor->name()->str() == "head.weight") offset = tensor->offset();
  REQUIRE(offset > 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  AlignedBytes poked = *bytes;
  std::memcpy(poked.data() + p + offset + (1 * 16 + 3) * 4, &nan, 4);
  testing::WriteFile(dir.File("nan.recur"), poked.data(), poked.size());
  Run r = Cli(dir, {"verify", dir.File("nan.recur")});
  CHECK(r.code == 1);
  CHECK(r.err == "error: " + dir.File("nan.recur") + ": head.weight: NaN at index 19 ([1,3])\n");

  // Truncated by one byte: the runtime refuses it; inspect still prints the structure.
  testing::WriteFile(dir.File("cut.recur"), bytes->data(), bytes->size() - 1);
  r = Cli(dir, {"verify", dir.File("cut.recur")});
  CHECK(r.code == 1);
  CHECK(Lines(r.err) == 1);
  r = Cli(dir, {"inspect", dir.File("cut.recur")});
  CHECK(r.code == 1);
  CHECK(r.out.find("length WRONG") != std::string::npos);
  CHECK(r.err.rfind("error: ", 0) == 0);
}

TEST_CASE("cli: --dtype and --quantize-head, inspect shows dtypes and bytes by dtype") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kTokensConfig, 6);
  WriteInputs(dir, kTokensConfig, t);
  const std::vector<std::string> base = {dir.File("w.safetensors"), "-c", dir.File("config.json")};
  auto convert = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.push_back("-o");
    args.push_back(dir.File(out));
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(dir, args);
  };
  Run r = convert("f32.recur", {});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("weight matrices") == std::string::npos);
  r = convert("bf16.recur", {"--dtype", "bf16"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  // 2 blocks × (query, key, value, out, linear1, linear2).
  CHECK(r.out.find(", 12 weight matrices bf16,") != std::string::npos);
  r = convert("int8.recur", {"--dtype", "int8", "--quantize-head"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find(", 13 weight matrices int8,") != std::string::npos);

  Run i = Cli(dir, {"inspect", dir.File("bf16.recur")});
  REQUIRE(i.code == 0);
  for (const char* s : {"blocks.1.ffn.linear1.weight  [32,16]  bf16", "blocks.1.ffn.linear1.bias    [32]     f32",
                        "input.embedding              [11,16]  f32", "head.weight                  [11,16]  f32",
                        "weight bytes:    f32 "}) {
    CHECK_MESSAGE(i.out.find(s) != std::string::npos, "missing: " << s << "\n" << i.out);
  }
  // Totals: 12 bf16 matrices of 2 bytes per element, the rest f32.
  uint64_t bf16_bytes = 0, f32_bytes = 0;
  for (const auto& [name, tensor] : t) {
    const bool narrow = StorageDType(name, WeightType::kBF16, false) == WeightType::kBF16;
    (narrow ? bf16_bytes : f32_bytes) += tensor.data.size() * (narrow ? 2 : 4);
  }
  CHECK(i.out.find("weight bytes:    f32 " + std::to_string(f32_bytes) + " (26 tensors), bf16 " +
                   std::to_string(bf16_bytes) + " (12 tensors); total " +
                   std::to_string(f32_bytes + bf16_bytes) + "\n") != std::string::npos);

  i = Cli(dir, {"inspect", "--json", dir.File("int8.recur")});
  REQUIRE(i.code == 0);
  auto j = nlohmann::json::parse(i.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  CHECK(j["bytes_by_dtype"]["int8"]["tensors"] == 13);
  CHECK(j["bytes_by_dtype"]["f32"]["tensors"] == 25);
  for (const auto& tensor : j["tensors"]) {
    const std::string name = tensor["name"];
    const bool narrow = StorageDType(name, WeightType::kI8, true) == WeightType::kI8;
    CHECK(tensor["dtype"] == (narrow ? "int8" : "f32"));
    CHECK(tensor["aligned"] == true);
    CHECK(tensor.contains("quant") == narrow);
    if (narrow) {
      CHECK(tensor["quant"]["axis"] == 0);
      CHECK(tensor["quant"]["scales"] == tensor["shape"][0]);
    }
  }
  Run v = Cli(dir, {"verify", dir.File("int8.recur")});
  CHECK(v.code == 0);
  CHECK(v.out.rfind("OK: ", 0) == 0);
  v = Cli(dir, {"verify", dir.File("bf16.recur")});
  CHECK(v.code == 0);

  const uint64_t f32_size = ReadFileBytes(dir.File("f32.recur"))->size();
  CHECK(ReadFileBytes(dir.File("bf16.recur"))->size() < f32_size);
  CHECK(ReadFileBytes(dir.File("int8.recur"))->size() < ReadFileBytes(dir.File("bf16.recur"))->size());

  // Errors: an unknown dtype; an f16 overflow names the tensor.
  r = convert("x.recur", {"--dtype", "fp8"});
  CHECK(r.code == 1);
  CHECK(r.err.find("--dtype") != std::string::npos);
  CHECK(Lines(r.err) == 1);
  t["blocks.0.mixer.out.weight"].data[5] = 1e5f;
  WriteInputs(dir, kTokensConfig, t);
  r = convert("x.recur", {"--dtype", "f16"});
  CHECK(r.code == 1);
  CHECK(r.err == "error: blocks.0.mixer.out.weight: value 100000 at index 5 ([0,5]) is beyond the "
                 "f16 range (max 65504); convert with --dtype bf16 or f32\n");
  CHECK(convert("x.recur", {"--dtype", "bf16"}).code == 0);
}

TEST_CASE("cli: --tokenizer puts a vocabulary in the model, and inspect shows it") {
  testing::TempDir dir;
  WriteInputs(dir, kTokensConfig, testing::RandomTensors(kTokensConfig, 1));
  testing::WriteFile(dir.File("vocab.txt"), "1 'a' 1\n2 'b' 1\n3 'ab' 2\n");
  Run r = Cli(dir, {dir.File("w.safetensors"), "-c", dir.File("config.json"), "-o",
                    dir.File("m.recur"), "--tokenizer", dir.File("vocab.txt")});
  INFO(r.err);
  REQUIRE(r.code == 0);
  Run i = Cli(dir, {"inspect", dir.File("m.recur")});
  CHECK(i.out.find("tokenizer:       rwkv, 4 tokens of 4 bytes, end_of_text 0\n") !=
        std::string::npos);
  Run j = Cli(dir, {"inspect", "--json", dir.File("m.recur")});
  const auto json = nlohmann::json::parse(j.out, nullptr, false);
  REQUIRE_FALSE(json.is_discarded());
  CHECK(json["tokenizer"] ==
        nlohmann::json({{"kind", "rwkv"}, {"tokens", 4}, {"end_of_text", 0}, {"token_bytes", 4}}));
  REQUIRE(Cli(dir, {dir.File("w.safetensors"), "-c", dir.File("config.json"), "-o",
                    dir.File("plain.recur")})
              .code == 0);
  CHECK(Cli(dir, {"inspect", dir.File("plain.recur")}).out.find("tokenizer:       none\n") !=
        std::string::npos);
  testing::WriteFile(dir.File("bad.txt"), "1 'a' 2\n");
  r = Cli(dir, {dir.File("w.safetensors"), "-c", dir.File("config.json"), "-o",
                dir.File("bad.recur"), "--tokenizer", dir.File("bad.txt")});
  CHECK(r.code == 1);
  CHECK(r.err == "error: bad.txt line 1: the token has 1 bytes, but the line says 2\n");
}

TEST_CASE("cli: help and version exit 0") {
  testing::TempDir dir;
  Run h = Cli(dir, {"--help"});
  CHECK(h.code == 0);
  CHECK(h.out.find("inspect") != std::string::npos);
  Run v = Cli(dir, {"--version"});
  CHECK(v.code == 0);
  CHECK(v.out.find("recur-convert ") == 0);
  Run c = Cli(dir, {"convert", "--help"});
  CHECK(c.code == 0);
  CHECK(c.out.find("--allow-extra") != std::string::npos);
  CHECK(c.out.find("--dtype") != std::string::npos);
  CHECK(c.out.find("--quantize-head") != std::string::npos);
  CHECK(c.out.find("stay f32") != std::string::npos);
  Run none = Cli(dir, {});
  CHECK(none.code == 1);
}


TEST_CASE("cli: inspect and the runtime loader refuse a broken container with one message") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kTokensConfig, 6);
  WriteInputs(dir, kTokensConfig, t);
  REQUIRE(Cli(dir, {dir.File("w.safetensors"), "-c", dir.File("config.json"), "-o",
                    dir.File("m.recur")})
              .code == 0);
  auto good = ReadFileAligned(dir.File("m.recur"));
  REQUIRE(good.ok());
  uint32_t s = 0;
  std::memcpy(&s, good->data(), 4);
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back({"short", std::vector<uint8_t>(good->data(), good->data() + 11),
                   "file too small (11 bytes) to be a recur model"});
  std::vector<uint8_t> id(good->data(), good->data() + good->size());
  std::memcpy(id.data() + 8, "RCU\x01", 4);
  cases.push_back({"identifier", id,
                   "not a recur model: file identifier is not \"RCUR\" (found \"RCU?\")"});
  cases.push_back({"metadata", std::vector<uint8_t>(good->data(), good->data() + s),
                   "truncated: the header announces"});
  std::vector<uint8_t> corrupt(good->data(), good->data() + good->size());
  const uint32_t root = 0xfffffff0u;  // the root table offset, far past the end
  std::memcpy(corrupt.data() + 4, &root, 4);
  cases.push_back({"verifier", corrupt, "metadata failed FlatBuffers verification"});
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = dir.File(std::string(c.name) + ".recur");
    testing::WriteFile(path, c.bytes.data(), c.bytes.size());
    const Run r = Cli(dir, {"inspect", path});
    CHECK(r.code == 1);
    CHECK(r.err.rfind("error: " + path + ": " + c.message, 0) == 0);
    recur_model* model = nullptr;
    CHECK(recur_model_load_file(path.c_str(), nullptr, &model) == RECUR_INVALID_MODEL);
    CHECK(model == nullptr);
    CHECK(std::string(recur_last_error()).find(c.message) != std::string::npos);
  }
}

}  // namespace
}  // namespace recur::impl::converter
