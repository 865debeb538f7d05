// The writer: file layout (size prefix, identifier, 64-byte aligned data
// segment, exact length), round trips through the runtime loader, the
// fast-transformers mapping end to end, and the file pipeline.
#include "converter/writer.h"

#include <dirent.h>
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <set>

#include "converter/convert.h"
#include "converter/mixers/sliding_window.h"
#include "converter/file_util.h"
#include "converter/mixers/linear_attention.h"
#include "converter/mixers/sliding_window.h"
#include "converter/safetensors.h"
#include "converter/sha256.h"
#include "converter_test_util.h"
#include "recur/recur.h"
#include "schema/recur_generated.h"

namespace recur::impl::converter {
namespace {

using testing::kFastTransformersConfig;
using testing::kFeaturesConfig;
using testing::kTokensConfig;

uint64_t RoundUp64(uint64_t n) { return (n + 63) / 64 * 64; }

uint64_t Elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Checks the FILE LAYOUT of recur.fbs on `bytes` and that every tensor's
// bytes equal `expected[name]`. Returns the model table.
const fb::Model* CheckLayout(const uint8_t* bytes, std::size_t size, const TensorMap& expected) {
  REQUIRE(size >= 8);
  uint32_t s = 0;
  std::memcpy(&s, bytes, 4);
  const uint64_t fb_end = 4ull + s;
  REQUIRE(fb_end <= size);
  CHECK(std::memcmp(bytes + 8, "RCUR", 4) == 0);
  flatbuffers::Verifier verifier(bytes, fb_end);
  REQUIRE(fb::VerifySizePrefixedModelBuffer(verifier));
  const fb::Model* m = fb::GetSizePrefixedModel(bytes);
  CHECK(m->format_version() == 1);  // no block uses a version-2 feature
  const uint64_t p = RoundUp64(fb_end);
  // Exactly P + data_size long; zeros between the FlatBuffer and P.
  CHECK(size == p + m->data_size());
  for (uint64_t i = fb_end; i < p; ++i) REQUIRE(bytes[i] == 0);

  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const fb::Tensor* t : *m->tensors()) {
    const std::string name = t->name()->str();
    INFO("tensor " << name);
    CHECK(t->dtype() == fb::DType::F32);
    CHECK(t->offset() % 64 == 0);
    CHECK(reinterpret_cast<uintptr_t>(bytes + p + t->offset()) % 64 == 0);
    std::vector<int64_t> shape(t->shape()->begin(), t->shape()->end());
    CHECK(t->size() == Elements(shape) * 4);
    REQUIRE(t->offset() + t->size() <= m->data_size());
    auto it = expected.find(name);
    REQUIRE(it != expected.end());
    CHECK(shape == it->second.shape);
    // Exact: f32 tensors are written verbatim (a copy).
    CHECK(std::memcmp(bytes + p + t->offset(), it->second.data.data(), t->size()) == 0);
    spans.push_back({t->offset(), t->offset() + t->size()});
  }
  CHECK(m->tensors()->size() == expected.size());
  // Tensors in order, non-overlapping, zeros in between, the last ending the segment.
  uint64_t end = 0;
  for (const auto& [b, e] : spans) {
    CHECK(b >= end);
    for (uint64_t i = end; i < b; ++i) REQUIRE(bytes[p + i] == 0);
    end = e;
  }
  CHECK(end == m->data_size());
  return m;
}

recur_model_info Info(const AlignedBytes& bytes) {
  recur_model* model = nullptr;
  recur_status st = recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model);
  REQUIRE_MESSAGE(st == RECUR_OK, recur_last_error());
  recur_model_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  recur_model_free(model);
  return info;
}

uint64_t ParameterCount(const TensorMap& t) {
  uint64_t n = 0;
  for (const auto& [name, tensor] : t) n += Elements(tensor.shape);
  return n;
}

TEST_CASE("writer: tokens model round-trips through the runtime") {
  auto desc = testing::Describe(kTokensConfig);
  TensorMap t = testing::RandomTensors(desc, 5);
  auto bytes = BuildModel(desc, t);
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  CHECK(reinterpret_cast<uintptr_t>(bytes->data()) % 64 == 0);
  const fb::Model* m = CheckLayout(bytes->data(), bytes->size(), t);
  CHECK(m->d_model() == 16);
  CHECK(m->norm_placement() == fb::NormPlacement::Pre);
  CHECK(m->input()->kind() == fb::InputKind::Tokens);
  CHECK(m->input()->vocab_size() == 11);
  CHECK(m->blocks()->size() == 2);
  const fb::LinearAttention* la = m->blocks()->Get(1)->mixer_as_LinearAttention();
  REQUIRE(la != nullptr);
  CHECK(la->heads() == 2);
  CHECK(la->dk() == 8);
  CHECK(la->dv() == 4);
  CHECK(la->eps() == 1e-6f);
  CHECK(m->tensors()->Get(static_cast<uint32_t>(la->query()->weight()))->name()->str() ==
        "blocks.1.mixer.query.weight");
  CHECK(m->tensors()->Get(static_cast<uint32_t>(la->out()->bias()))->name()->str() ==
        "blocks.1.mixer.out.bias");
  CHECK(m->blocks()->Get(0)->ffn()->activation() == fb::Activation::Gelu);
  CHECK(m->blocks()->Get(0)->norm1()->eps() == 1e-5f);
  CHECK(m->final_norm() != nullptr);
  REQUIRE(m->head() != nullptr);
  CHECK(m->head()->activation() == fb::HeadActivation::LogSoftmax);
  REQUIRE(m->metadata() != nullptr);
  CHECK(m->metadata()->producer()->str() == DefaultProducer());
  CHECK(m->metadata()->notes()->str() == "test model");
  CHECK(m->metadata()->input_description()->str() == "ids");
  CHECK(m->metadata()->output_description()->str() == "log-probs");

  recur_model_info info = Info(*bytes);
  CHECK(info.input_kind == RECUR_INPUT_TOKENS);
  CHECK(info.vocab_size == 11);
  CHECK(info.d_model == 16);
  CHECK(info.num_layers == 2);
  CHECK(info.output_width == 11);
  CHECK(info.max_positions == 8);
  CHECK(info.parameter_count == ParameterCount(t));
  // At least S (dk×dv) and z (dk) per head per layer, in f32.
  CHECK(info.state_bytes >= 2u * 2u * (8u * 4u + 8u) * 4u);
}

TEST_CASE("writer: features model round-trips through the runtime") {
  auto desc = testing::Describe(kFeaturesConfig);
  TensorMap t = testing::RandomTensors(desc, 6);
  auto bytes = BuildModel(desc, t);
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  const fb::Model* m = CheckLayout(bytes->data(), bytes->size(), t);
  CHECK(m->norm_placement() == fb::NormPlacement::Post);
  CHECK(m->input()->kind() == fb::InputKind::Features);
  CHECK(m->input()->feature_width() == 5);
  REQUIRE(m->input()->projection() != nullptr);
  CHECK(m->input()->positions() == -1);
  CHECK(m->input()->embedding() == -1);
  CHECK(m->final_norm() == nullptr);
  CHECK(m->head() == nullptr);
  CHECK(m->metadata()->notes() == nullptr);

  recur_model_info info = Info(*bytes);
  CHECK(info.input_kind == RECUR_INPUT_FEATURES);
  CHECK(info.feature_width == 5);
  CHECK(info.d_model == 12);
  CHECK(info.num_layers == 1);
  CHECK(info.output_width == 12);
  CHECK(info.max_positions == 0);
  CHECK(info.parameter_count == ParameterCount(t));
  CHECK(info.state_bytes >= 3u * (4u * 4u + 4u) * 4u);
}

TEST_CASE("writer: output is deterministic") {
  auto desc = testing::Describe(kTokensConfig);
  TensorMap t = testing::RandomTensors(desc, 7);
  auto a = BuildModel(desc, t);
  auto b = BuildModel(desc, t);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);
}

TEST_CASE("writer: a model that uses a version-2 feature is stamped 2, any other 1") {
  // A version-1 runtime ignores the fields it does not know: it must refuse
  // such a file rather than run a model without its rotary embeddings or
  // token shift.
  auto plain = testing::Describe(kTokensConfig);
  CHECK(FormatVersionFor(plain) == 1);
  auto rotary = testing::Describe(recur::impl::testing::kTinyRotaryConfig);
  CHECK(FormatVersionFor(rotary) == 2);
  auto one = plain;  // rotary in one block of two is enough
  REQUIRE(one.blocks[1].mixer.As<LinearAttentionParams>() != nullptr);
  one.blocks[1].mixer.As<LinearAttentionParams>()->rotary.dims = 2;
  CHECK(FormatVersionFor(one) == 2);
  auto shifted = testing::Describe(recur::impl::testing::kTinyTokenShiftConfig);
  CHECK(FormatVersionFor(shifted) == 2);
  auto last = plain;  // a token shift in one block
  last.blocks[1].token_shift.segments = {{8, 1}};
  CHECK(FormatVersionFor(last) == 2);
  // A mixer that is new in version 2: block-local attention, whatever its options.
  CHECK(FormatVersionFor(testing::Describe(recur::impl::testing::kTinyBlockLocalConfig)) == 2);
  CHECK(FormatVersionFor(testing::Describe(recur::impl::testing::kTinyBlockLocalEncoderConfig)) == 2);
  CHECK(RECUR_FORMAT_VERSION >= 2);
  auto bytes = BuildModel(rotary, testing::RandomTensors(rotary, 3));
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  CHECK(fb::GetSizePrefixedModel(bytes->data())->format_version() == 2);
}

TEST_CASE("writer: fast-transformers layout end to end") {
  TensorMap ft = testing::RandomTensors(kFastTransformersConfig, 8);
  auto bytes = BuildModelFromConfig(kFastTransformersConfig, ft);
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  // Stored under recur names with the fast-transformers tensors' values.
  TensorMap renamed;
  auto desc = testing::Describe(kFastTransformersConfig);
  for (const ExpectedTensor& e : ExpectedTensors(desc, Layout::kFastTransformers))
    renamed[e.name] = ft.at(e.source_name);
  const fb::Model* m = CheckLayout(bytes->data(), bytes->size(), renamed);
  CHECK(m->d_model() == 16);
  CHECK(m->norm_placement() == fb::NormPlacement::Post);
  CHECK(m->input()->kind() == fb::InputKind::Features);
  CHECK(m->input()->feature_width() == 16);
  CHECK(m->input()->projection() == nullptr);
  CHECK(m->head() == nullptr);
  REQUIRE(m->final_norm() != nullptr);
  CHECK(m->final_norm()->eps() == 1e-5f);
  const fb::LinearAttention* la = m->blocks()->Get(0)->mixer_as_LinearAttention();
  REQUIRE(la != nullptr);
  CHECK(la->dk() == 4);
  CHECK(la->dv() == 8);
  CHECK(la->eps() == 1e-6f);
  CHECK(la->feature_map() == fb::FeatureMap::EluPlusOne);
  for (const fb::Tensor* t : *m->tensors()) {
    const std::string name = t->name()->str();
    CHECK(name.rfind("layers.", 0) != 0);
    CHECK(name.find("projection") == std::string::npos);
  }

  recur_model_info info = Info(*bytes);
  CHECK(info.input_kind == RECUR_INPUT_FEATURES);
  CHECK(info.feature_width == 16);
  CHECK(info.d_model == 16);
  CHECK(info.output_width == 16);
  CHECK(info.num_layers == 2);
  CHECK(info.parameter_count == ParameterCount(ft));

  // The same weights under recur names with the equivalent recur config
  // give the same bytes, except for the metadata notes (none in either).
  const char* equivalent = R"({
    "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "post",
    "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 16, "projection": false},
    "max_positions": 0,
    "mixer": {"type": "linear_attention", "heads": 2, "dk": 4, "dv": 8,
              "feature_map": "elu_plus_one", "eps": 1e-6},
    "ffn": {"d_ff": 24, "activation": "gelu"}, "final_norm": true, "head": null})";
  auto same = BuildModelFromConfig(equivalent, renamed);
  REQUIRE_MESSAGE(same.ok(), same.message());
  CHECK(*same == *bytes);
}

TEST_CASE("writer: the runtime's self-check catches what validation was told to skip") {
  auto desc = testing::Describe(kTokensConfig);
  TensorMap t = testing::RandomTensors(desc, 9);
  t.erase("blocks.0.mixer.key.weight");
  BuildOptions o;
  o.validate = false;
  auto r = BuildModel(desc, t, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().rfind("self-check: the runtime rejects the model (RECUR_INVALID_MODEL): ", 0) == 0);
  // Without the self-check the broken bytes come back (for loader tests).
  o.self_check = false;
  auto broken = BuildModel(desc, t, o);
  REQUIRE_MESSAGE(broken.ok(), broken.message());
  CHECK_FALSE(SelfCheck(*broken).ok());
}

TEST_CASE(
    "writer: global projections and an input norm need format 2; the runtime refuses global "
    "projections on a causal mixer") {
  const char* config = R"({"layout": "recur", "d_model": 8, "n_layers": 1,
    "norm_placement": "pre", "layer_norm_eps": 1e-5,
    "input": {"kind": "features", "feature_width": 8, "projection": false}, "max_positions": 0,
    "mixer": {"type": "sliding_window", "heads": 2, "dk": 4, "dv": 4, "window": 3,
              "global_tokens": 1, "causal": false, "global_projections": true},
    "ffn": {"d_ff": 8, "activation": "relu"}, "final_norm": false, "head": null})";
  auto desc = testing::Describe(config);
  TensorMap t = testing::RandomTensors(desc, 5);
  auto bytes = BuildModel(desc, t);
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  CHECK(fb::GetSizePrefixedModel(bytes->data())->format_version() == 2);

  // An input norm needs version 2 too (a version-1 runtime would skip it).
  auto plain = desc;
  plain.blocks[0].mixer.As<SlidingWindowParams>()->global_projections = false;
  auto v1 = BuildModel(plain, testing::RandomTensors(plain, 5));
  REQUIRE_MESSAGE(v1.ok(), v1.message());
  CHECK(fb::GetSizePrefixedModel(v1->data())->format_version() == 1);
  plain.input.norm = true;
  auto v2 = BuildModel(plain, testing::RandomTensors(plain, 5));
  REQUIRE_MESSAGE(v2.ok(), v2.message());
  CHECK(fb::GetSizePrefixedModel(v2->data())->format_version() == 2);
  CHECK(fb::GetSizePrefixedModel(v2->data())->input()->norm() != nullptr);

  // A description the config would refuse: the runtime refuses the file too.
  auto causal = desc;
  causal.blocks[0].mixer.As<SlidingWindowParams>()->causal = true;
  BuildOptions o;
  o.validate = false;
  auto r = BuildModel(causal, t, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("blocks.0: sliding window global projections need all of query_global, "
                         "key_global and value_global, a non-causal mixer and global_tokens > 0") !=
        std::string::npos);
  auto no_globals = desc;
  no_globals.blocks[0].mixer.As<SlidingWindowParams>()->global_tokens = 0;
  r = BuildModel(no_globals, t, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("global projections need") != std::string::npos);
}

TEST_CASE("writer: BuildModelFromConfig reports config errors") {
  auto r = BuildModelFromConfig("{\"layout\": \"recur\"}", {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "config.json: missing key \"d_model\"");
}

// The names in `folder`.
std::set<std::string> Names(const std::string& folder) {
  std::set<std::string> names;
  if (DIR* d = opendir(folder.c_str())) {
    while (dirent* e = readdir(d)) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

// Writes `tensors` and `config` into `dir` (w.safetensors, config.json): the
// options that convert them into dir/m.recur.
ConvertOptions Inputs(const testing::TempDir& dir, const TensorMap& tensors, const char* config) {
  const auto st = SerializeSafetensors(tensors);
  testing::WriteFile(dir.File("w.safetensors"), st.data(), st.size());
  testing::WriteFile(dir.File("config.json"), config);
  ConvertOptions o;
  o.weights_path = dir.File("w.safetensors");
  o.config_path = dir.File("config.json");
  o.output_path = dir.File("m.recur");
  return o;
}

TEST_CASE("convert: files in, aligned file out, metadata from config and flags") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kTokensConfig, 10);
  ConvertOptions o = Inputs(dir, t, kTokensConfig);
  o.notes = "from the test";
  ConvertReport report;
  Status s = ConvertFiles(o, &report);
  REQUIRE_MESSAGE(s.ok(), s.message());
  CHECK(report.layout == Layout::kRecur);
  CHECK(report.tensors == t.size());
  CHECK(report.warnings.empty());
  const auto st = ReadFileBytes(o.weights_path);
  REQUIRE(st.ok());
  CHECK(report.source_hash == Sha256Hex(st->data(), st->size()));

  auto bytes = ReadFileAligned(o.output_path);
  REQUIRE(bytes.ok());
  CHECK(bytes->size() == report.file_bytes);
  const fb::Model* m = CheckLayout(bytes->data(), bytes->size(), t);
  CHECK(m->metadata()->producer()->str() == std::string("recur-convert ") + recur_version_string());
  CHECK(m->metadata()->source_hash()->str() == report.source_hash);
  CHECK(m->metadata()->source_hash()->size() == 64);
  CHECK(m->metadata()->notes()->str() == "test model\nfrom the test");
  CHECK(m->metadata()->input_description()->str() == "ids");

  // The file loads (mapped) with the runtime.
  recur_model* model = nullptr;
  REQUIRE_MESSAGE(recur_model_load_file(o.output_path.c_str(), nullptr, &model) == RECUR_OK,
                  recur_last_error());
  recur_model_free(model);

  // No temporaries left behind.
  CHECK(Names(dir.path()) ==
        std::set<std::string>{".", "..", "w.safetensors", "config.json", "m.recur"});
}

TEST_CASE("convert: the file, written tensor by tensor, holds BuildModel's bytes") {
  testing::TempDir dir;
  const TensorMap t = testing::RandomTensors(kTokensConfig, 13);
  ConvertOptions o = Inputs(dir, t, kTokensConfig);
  for (WeightType dtype : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kI8}) {
    for (bool head : {false, true}) {
      CAPTURE(WeightTypeName(dtype));
      CAPTURE(head);
      o.dtype = dtype;
      o.quantize_head = head;
      ConvertReport report;
      Status s = ConvertFiles(o, &report);
      REQUIRE_MESSAGE(s.ok(), s.message());
      auto file = ReadFileAligned(o.output_path);
      REQUIRE(file.ok());
      CHECK(file->size() == report.file_bytes);

      ModelDescription desc = testing::Describe(kTokensConfig);
      desc.metadata.source_hash = report.source_hash;
      BuildOptions bo;
      bo.weight_dtype = dtype;
      bo.quantize_head = head;
      auto bytes = BuildModel(desc, t, bo);
      REQUIRE_MESSAGE(bytes.ok(), bytes.message());
      CHECK(*file == *bytes);
    }
  }
}

TEST_CASE("convert: an output that cannot be written is reported after the tensors' errors") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kTokensConfig, 14);
  ConvertOptions o = Inputs(dir, t, kTokensConfig);
  o.output_path = dir.File("no/such/folder/m.recur");
  Status s = ConvertFiles(o, nullptr);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("no/such/folder/m.recur: cannot create: ") != std::string::npos);

  t["head.weight"].data[3] = std::numeric_limits<float>::quiet_NaN();
  o.weights_path = Inputs(dir, t, kTokensConfig).weights_path;
  s = ConvertFiles(o, nullptr);
  CHECK(s.message() == "head.weight: NaN at index 3 ([0,3])");
}

TEST_CASE("file_util: files mapped, and written in place atomically") {
  testing::TempDir dir;
  testing::WriteFile(dir.File("a"), "hello");
  testing::WriteFile(dir.File("empty"), "");
  auto a = MapFile(dir.File("a"));
  REQUIRE(a.ok());
  CHECK(std::string(reinterpret_cast<const char*>(a->data()), a->size()) == "hello");
  FileBytes moved = std::move(*a);
  CHECK(std::string(reinterpret_cast<const char*>(moved.data()), moved.size()) == "hello");
  auto empty = MapFile(dir.File("empty"));
  REQUIRE(empty.ok());
  CHECK(empty->size() == 0);
  auto missing = MapFile(dir.File("nope"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("nope: cannot open: No such file or directory") != std::string::npos);
  CHECK(MapFile(dir.path()).message() == dir.path() + ": not a regular file");

  {  // Not committed: the temporary goes, the old file stays.
    auto f = AtomicFile::Create(dir.File("a"));
    REQUIRE(f.ok());
    REQUIRE(f->WriteAt(0, "xyz", 3).ok());
    CHECK(Names(dir.path()).size() == 5);  // . .. a empty a.tmp.PID
  }
  CHECK(Names(dir.path()) == std::set<std::string>{".", "..", "a", "empty"});
  CHECK(testing::ReadText(dir.File("a")) == "hello");

  auto f = AtomicFile::Create(dir.File("a"));
  REQUIRE(f.ok());
  REQUIRE(f->Resize(8).ok());  // zeros where nothing is written
  REQUIRE(f->WriteAt(5, "end", 3).ok());
  REQUIRE(f->WriteAt(0, "st", 2).ok());
  auto written = f->Map();
  REQUIRE(written.ok());
  CHECK(std::string(reinterpret_cast<const char*>(written->data()), written->size()) ==
        std::string("st\0\0\0end", 8));
  REQUIRE(f->Commit().ok());
  CHECK(testing::ReadText(dir.File("a")) == std::string("st\0\0\0end", 8));
  CHECK(Names(dir.path()) == std::set<std::string>{".", "..", "a", "empty"});
}

TEST_CASE("convert: a failed conversion leaves an existing output alone") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kTokensConfig, 11);
  t.erase("head.weight");
  ConvertOptions o = Inputs(dir, t, kTokensConfig);
  testing::WriteFile(dir.File("m.recur"), "old");
  Status s = ConvertFiles(o, nullptr);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() == "head.weight: missing tensor, expected shape [11,16]");
  CHECK(testing::ReadText(dir.File("m.recur")) == "old");
}

TEST_CASE("convert: a fast-transformers checkpoint with an extra buffer") {
  testing::TempDir dir;
  TensorMap t = testing::RandomTensors(kFastTransformersConfig, 12);
  t["layers.0.attention.inner_attention.feature_map.omega"] = Tensor{{2}, {0, 0}};
  ConvertOptions o = Inputs(dir, t, kFastTransformersConfig);
  Status s = ConvertFiles(o, nullptr);
  CHECK(s.message() ==
        "layers.0.attention.inner_attention.feature_map.omega: unexpected tensor, not used by this "
        "config (allow with --allow-extra)");
  o.allow_extra = true;
  ConvertReport report;
  s = ConvertFiles(o, &report);
  REQUIRE_MESSAGE(s.ok(), s.message());
  CHECK(report.layout == Layout::kFastTransformers);
  REQUIRE(report.warnings.size() == 1);
  CHECK(report.warnings[0] ==
        "layers.0.attention.inner_attention.feature_map.omega: unused tensor ignored");
}

}  // namespace
}  // namespace recur::impl::converter
