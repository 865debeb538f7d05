// GEMM backends through the C API: the session option, the error for a
// backend this build lacks, and every compiled-in backend computing what
// highway computes (step, prefill), and the weight copies each packing
// option makes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/gemm_backend.h"
#include "converter/quantize.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "recur/recur.h"
#include "test_models.h"

namespace {

using recur::impl::testing::CompiledBackends;

recur_model* LoadTestModel(const char* config, recur::impl::converter::AlignedBytes* bytes) {
  *bytes = recur::impl::testing::BuildTestModel(config, 1);
  recur_model* model = nullptr;
  if (bytes->empty()) return nullptr;
  if (recur_model_load_buffer(bytes->data(), bytes->size(), nullptr, &model) != RECUR_OK) {
    return nullptr;
  }
  return model;
}

// max |a[i] − b[i]| (a and b of equal size).
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

// Steps then prefills `batch` streams; returns every output.
std::vector<float> Run(recur_model* model, const char* backend, uint32_t batch,
                       recur_weight_packing packing = RECUR_PACKING_AUTO) {
  recur_model_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = batch;
  options.threads = std::min(2u, recur_max_threads());  // 1 in the minimal build
  options.prefill_chunk = 8;
  options.backend = backend;
  options.weight_packing = packing;
  recur_session* session = nullptr;
  REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
  const std::string summary = recur_session_backends(session);
  CAPTURE(summary);
  if (packing == RECUR_PACKING_OFF) CHECK(summary.find("weight copies") == std::string::npos);
  if (packing == RECUR_PACKING_ON) CHECK(summary.find("weight copies") != std::string::npos);
  if (backend != nullptr) {
    const std::string chosen = recur_session_backends(session);
    CHECK(chosen.find(backend) != std::string::npos);
  }
  const bool tokens = info.input_kind == RECUR_INPUT_TOKENS;
  const size_t steps = 21;  // two full chunks and a partial one
  std::vector<int32_t> ids(batch * steps);
  std::vector<float> frames(batch * steps * info.feature_width);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = info.vocab_size ? int32_t((i * 7) % info.vocab_size) : 0;
  for (size_t i = 0; i < frames.size(); ++i) frames[i] = std::sin(0.37f * float(i));
  std::vector<float> all;
  std::vector<float> out(batch * info.output_width);
  for (int t = 0; t < 3; ++t) {
    recur_input in{tokens ? ids.data() : nullptr, tokens ? nullptr : frames.data(),
                   tokens ? batch : batch * info.feature_width};
    REQUIRE(recur_session_step(session, &in, out.data()) == RECUR_OK);
    all.insert(all.end(), out.begin(), out.end());
  }
  std::vector<float> pout(batch * steps * info.output_width);
  recur_input in{tokens ? ids.data() : nullptr, tokens ? nullptr : frames.data(),
                 tokens ? ids.size() : frames.size()};
  REQUIRE(recur_session_prefill(session, steps, &in, pout.data()) == RECUR_OK);
  all.insert(all.end(), pout.begin(), pout.end());
  recur_session_free(session);
  return all;
}

}  // namespace

TEST_CASE("highway is always compiled in") {
  const std::vector<std::string> names = CompiledBackends();
  REQUIRE(!names.empty());
  CHECK(names.front() == "highway");
}

TEST_CASE("a backend this build lacks is a clear error") {
  recur::impl::converter::AlignedBytes bytes;
  recur_model* model = LoadTestModel(recur::impl::testing::kTinyTokensConfig, &bytes);
  REQUIRE(model != nullptr);
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.backend = "cublas";
  recur_session* session = nullptr;
  CHECK(recur_session_create(model, &options, &session) == RECUR_UNSUPPORTED);
  CHECK(session == nullptr);
  const std::string message = recur_last_error();
  CHECK(message.find("cublas") != std::string::npos);
  CHECK(message.find("highway") != std::string::npos);
  // "auto" and "" are the automatic choice.
  for (const char* automatic : {"auto", ""}) {
    options.backend = automatic;
    REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
    CHECK(std::string(recur_session_backends(session)).find("rows") != std::string::npos);
    recur_session_free(session);
  }
  recur_model_free(model);
}

TEST_CASE("every backend computes what highway computes") {
  for (const char* config :
       {recur::impl::testing::kTinyTokensConfig, recur::impl::testing::kTinyFeaturesConfig}) {
    recur::impl::converter::AlignedBytes bytes;
    recur_model* model = LoadTestModel(config, &bytes);
    REQUIRE(model != nullptr);
    for (uint32_t batch : {1u, 5u}) {
      const std::vector<float> expected = Run(model, "highway", batch);
      for (const std::string& name : CompiledBackends()) {
        CAPTURE(name);
        CAPTURE(batch);
        const std::vector<float> got = Run(model, name.c_str(), batch);
        REQUIRE(got.size() == expected.size());
        CHECK(MaxAbsDiff(got, expected) < 1e-4);
      }
      const std::vector<float> automatic = Run(model, nullptr, batch);
      REQUIRE(automatic.size() == expected.size());
      for (size_t i = 0; i < automatic.size(); ++i) {
        REQUIRE(std::fabs(automatic[i] - expected[i]) < 1e-4);
      }
    }
    recur_model_free(model);
  }
}

TEST_CASE("packed weights compute what unpacked weights compute, and say what they cost") {
  for (const char* config :
       {recur::impl::testing::kTinyTokensConfig, recur::impl::testing::kTinyFeaturesConfig}) {
    recur::impl::converter::AlignedBytes bytes;
    recur_model* model = LoadTestModel(config, &bytes);
    REQUIRE(model != nullptr);
    for (uint32_t batch : {1u, 5u}) {
      CAPTURE(batch);
      const std::vector<float> unpacked = Run(model, "highway", batch, RECUR_PACKING_OFF);
      for (recur_weight_packing packing : {RECUR_PACKING_ON, RECUR_PACKING_AUTO}) {
        CAPTURE(packing);
        const std::vector<float> packed = Run(model, "highway", batch, packing);
        REQUIRE(packed.size() == unpacked.size());
        CHECK(MaxAbsDiff(packed, unpacked) < 1e-4);
      }
      // Off also keeps the automatic choice away from backends that copy.
      Run(model, nullptr, batch, RECUR_PACKING_OFF);
    }
    recur_model_free(model);
  }
}

namespace {

// recur_session_backends of a session of `batch` streams on `model`.
std::string SessionSummary(recur_model* model, uint32_t batch, recur_weight_packing packing,
                           uint32_t int8_activations = RECUR_INT8_ACTIVATIONS_AUTO,
                           const char* backend = nullptr) {
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = batch;
  options.backend = backend;
  options.weight_packing = packing;
  options.int8_activations = int8_activations;
  recur_session* session = nullptr;
  REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
  const std::string s = recur_session_backends(session);
  recur_session_free(session);
  return s;
}

// The MB of weight copies a session's summary reports (0 without any).
double CopiesMb(const std::string& summary) {
  const size_t at = summary.find("weight copies ");
  return at == std::string::npos ? 0.0 : std::stod(summary.substr(at + 14));
}

}  // namespace

TEST_CASE("f16 and bf16 layers past 8 MiB keep panels of their own values: half the copies") {
  // 2 blocks of 4·512² + 2·512·2048 weights: 12 MB as f16.
  const char* config = R"({
    "layout": "recur", "d_model": 512, "n_layers": 2, "norm_placement": "pre",
    "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
    "max_positions": 64,
    "mixer": {"type": "linear_attention", "heads": 8, "dk": 64, "dv": 64,
              "feature_map": "elu_plus_one", "eps": 1e-6},
    "ffn": {"d_ff": 2048, "activation": "gelu"}, "final_norm": true,
    "head": {"out": 11, "activation": "softmax"}})";
  for (auto type :
       {recur::impl::converter::WeightType::kF16, recur::impl::converter::WeightType::kBF16}) {
    CAPTURE(int(type));
    const recur::impl::converter::AlignedBytes bytes =
        recur::impl::testing::BuildTestModel(config, 5, type);
    REQUIRE(!bytes.empty());
    recur_model* model = nullptr;
    REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
    // (After the load, which applies RECUR_MAX_SIMD_TARGET.)
    const bool narrow = recur::impl::kernels::DenseNarrowPanelsPreferred();
    const std::string automatic =
        SessionSummary(model, 4, RECUR_PACKING_AUTO, RECUR_INT8_ACTIVATIONS_AUTO, "highway");
    const std::string f32 =
        SessionSummary(model, 4, RECUR_PACKING_ON, RECUR_INT8_ACTIVATIONS_AUTO, "highway");
    CAPTURE(automatic);
    CAPTURE(f32);
    CHECK(CopiesMb(f32) > 24.0);  // f32 panels of every block weight
    CHECK(CopiesMb(automatic) ==
          doctest::Approx(CopiesMb(f32) * (narrow ? 0.5 : 1.0)).epsilon(0.02));
    // The same values multiplied in the same order: the same outputs, bit for bit.
    const std::vector<float> own = Run(model, "highway", 4, RECUR_PACKING_AUTO);
    const std::vector<float> widened = Run(model, "highway", 4, RECUR_PACKING_ON);
    REQUIRE(own.size() == widened.size());
    CHECK(std::memcmp(own.data(), widened.data(), own.size() * sizeof(float)) == 0);
    recur_model_free(model);
  }
}

TEST_CASE("int4 layers keep row panels for steps of 1-4 streams where the CPU runs them faster") {
  const recur::impl::converter::AlignedBytes bytes = recur::impl::testing::BuildTestModel(
      recur::impl::testing::kTinyInt4Config, 3, recur::impl::converter::WeightType::kI4);
  REQUIRE(!bytes.empty());
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  const bool preferred = recur::impl::kernels::DenseI4PanelsPreferred();
  CAPTURE(preferred);
  auto summary = [&](uint32_t batch, recur_weight_packing packing, uint32_t int8) {
    return SessionSummary(model, batch, packing, int8);
  };
  for (uint32_t batch : {1u, 2u, 4u}) {
    CAPTURE(batch);
    const std::string automatic = summary(batch, RECUR_PACKING_AUTO, RECUR_INT8_ACTIVATIONS_AUTO);
    CAPTURE(automatic);
    // Below kPackedMinRows nothing else copies weights (from it the f32 head
    // is packed too, by highway or xnnpack).
    if (batch < recur::impl::backends::kPackedMinRows) {
      CHECK((automatic.find("weight copies") != std::string::npos) == preferred);
    }
    // The panels compute what the row tiles compute (both exact per group in
    // i32; f32 sums in another order).
    const std::vector<float> tiles = Run(model, "highway", batch, RECUR_PACKING_OFF);
    const std::vector<float> panels = Run(model, "highway", batch, RECUR_PACKING_AUTO);
    REQUIRE(panels.size() == tiles.size());
    CHECK(MaxAbsDiff(panels, tiles) < 1e-4);
  }
  // Off keeps the model's bytes; float activations have no use for panels.
  // (Batches past kI4PanelMaxBatch pack f32 panels of the head: the summary
  // cannot tell them apart; the kernel tests cover those batches.)
  CHECK(summary(1, RECUR_PACKING_OFF, 0).find("weight copies") == std::string::npos);
  CHECK(summary(1, RECUR_PACKING_AUTO, RECUR_INT8_ACTIVATIONS_FLOAT).find("weight copies") ==
        std::string::npos);
  recur_model_free(model);
}

// A q4_k or q6_k layer of patterned codes and scale bytes with d (and dmin)
// about 2^-10, and its view.
struct KQuantLayer {
  std::vector<uint8_t> bytes;
  recur::impl::DenseView view;
};
KQuantLayer MakeKQuantLayer(recur::impl::kernels::WeightType type, size_t in, size_t out) {
  namespace kernels = recur::impl::kernels;
  const bool q4k = type == kernels::WeightType::kQ4_K;
  const size_t block_bytes = kernels::Traits(type).block_bytes;
  KQuantLayer l;
  l.bytes.resize(kernels::WeightBytes(type, in * out));
  for (size_t i = 0; i < l.bytes.size(); ++i) l.bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t b = 0; b < l.bytes.size() / block_bytes; ++b) {
    const uint16_t half = 0x1400;
    std::memcpy(l.bytes.data() + b * block_bytes + (q4k ? 0 : block_bytes - 2), &half, 2);
    if (q4k) std::memcpy(l.bytes.data() + b * block_bytes + 2, &half, 2);
  }
  l.view.weight = l.bytes.data();
  l.view.type = type;
  l.view.in = static_cast<uint32_t>(in);
  l.view.out = static_cast<uint32_t>(out);
  return l;
}

// A layer whose runs all take block-quantised activations (q4_k at a step of
// 8 streams and a prefill, where DenseBlockQ8 is preferred) never reads an f32
// copy, so highway keeps none, only the K-quant tiles of the GEMM (on AVX-512
// with VNNI) and no copy at all with packing off; where they do not, it packs
// an f32 copy.
TEST_CASE("highway packs no f32 copy of a layer that runs on block-quantised activations") {
  using recur::impl::kernels::WeightType;
  namespace kernels = recur::impl::kernels;
  namespace backends = recur::impl::backends;
  const size_t in = 256, out = 64;
  const KQuantLayer layer = MakeKQuantLayer(WeightType::kQ4_K, in, out);
  const recur::impl::DenseView& d = layer.view;
  std::unique_ptr<recur::impl::ThreadPool> pool;
  REQUIRE(recur::impl::ThreadPool::Create(1, &pool).ok());
  backends::DensePlan plan;
  plan.rows = {8, 512};
  plan.pool = pool.get();
  plan.pack_weights = true;
  plan.int8 = kernels::Int8Activations::kAuto;
  std::unique_ptr<backends::PreparedDense> op;
  REQUIRE(backends::HighwayBackend()->Prepare(d, plan, &op).ok());
  bool all_blocks = true;
  for (size_t rows : plan.rows) {
    all_blocks &= kernels::RunsBlockQ8(d.type, d.group, in, plan.int8, rows);
  }
  CAPTURE(all_blocks);
  const size_t tiles = kernels::DenseBlockQ8TileBytes(d);
  if (all_blocks) {
    CHECK(op->memory_bytes() == tiles);
  } else {
    CHECK(op->memory_bytes() > 0);
  }
  plan.pack_weights = false;
  std::unique_ptr<backends::PreparedDense> unpacked;
  REQUIRE(backends::HighwayBackend()->Prepare(d, plan, &unpacked).ok());
  CHECK(unpacked->memory_bytes() == 0);
  // What it computes either way: what the kernels compute on the rows (the
  // same bits unpacked or from the tiles; from an f32 copy, f32 sums in another
  // order).
  std::vector<float> x(8 * in + 16), y(8 * out), y_kernels(8 * out), y_unpacked(8 * out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * float(i));
  op->Run(x.data(), 8, y.data(), false);
  unpacked->Run(x.data(), 8, y_unpacked.data(), false);
  kernels::Dense(x.data(), in, 8, d, y_kernels.data(), out, false, plan.int8);
  CHECK(std::memcmp(y_unpacked.data(), y_kernels.data(), y.size() * sizeof(float)) == 0);
  if (all_blocks) {
    CHECK(std::memcmp(y.data(), y_kernels.data(), y.size() * sizeof(float)) == 0);
  } else {
    double largest = 0;
    for (float v : y_kernels) largest = std::max(largest, std::fabs(double{v}));
    CHECK(MaxAbsDiff(y, y_kernels) <= 1e-5 * largest);
  }
}

// Under Int8Activations::kBlocks f16 and bf16 layers multiply activations
// rounded to their type, as llama.cpp does (kernels::DenseBlockQ8), on every
// path highway runs: the model's bytes for a step, and the packed panels (f32
// or the layer's own values) for batches.
TEST_CASE("highway rounds the activations of f16 and bf16 layers under kBlocks, packed or not") {
  namespace kernels = recur::impl::kernels;
  namespace backends = recur::impl::backends;
  const size_t in = 256, out = 96;
  std::unique_ptr<recur::impl::ThreadPool> pool;
  REQUIRE(recur::impl::ThreadPool::Create(std::min(2u, recur_max_threads()), &pool)
              .ok());  // 1 in the minimal build
  std::vector<float> x(64 * in + 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * float(i));
  for (kernels::WeightType type : {kernels::WeightType::kF16, kernels::WeightType::kBF16}) {
    CAPTURE(int(type));
    std::vector<uint16_t> bits(in * out);
    for (size_t i = 0; i < bits.size(); ++i) {
      const float v = std::cos(0.37f * float(i));
      uint32_t u;
      std::memcpy(&u, &v, sizeof(u));
      bits[i] = type == kernels::WeightType::kF16 ? kernels::ref::F32ToF16Bits(v)
                                                  : static_cast<uint16_t>(u >> 16);
    }
    recur::impl::DenseView d;
    d.weight = bits.data();
    d.type = type;
    d.in = static_cast<uint32_t>(in);
    d.out = static_cast<uint32_t>(out);
    for (int packing = 0; packing < 3; ++packing) {  // off, f32 panels, the layer's own values
      CAPTURE(packing);
      backends::DensePlan plan;
      plan.rows = {1, 8, 64};
      plan.pool = pool.get();
      plan.pack_weights = packing != 0;
      plan.narrow_panels = packing == 2;
      plan.int8 = kernels::Int8Activations::kBlocks;
      std::unique_ptr<backends::PreparedDense> op;
      REQUIRE(backends::HighwayBackend()->Prepare(d, plan, &op).ok());
      CHECK((op->memory_bytes() > 0) == (packing != 0));
      for (size_t rows : plan.rows) {
        CAPTURE(rows);
        std::vector<float> y(rows * out), rounded(rows * out), plain(rows * out);
        op->Run(x.data(), rows, y.data(), false);
        kernels::DenseBlockQ8(x.data(), in, rows, d, rounded.data(), out, false);
        kernels::Dense(x.data(), in, rows, d, plain.data(), out, false);
        double largest = 0;
        for (float v : rounded) largest = std::max(largest, std::fabs(double{v}));
        // The same rounded values; f32 sums in the panels' order.
        CHECK(MaxAbsDiff(y, rounded) <= 1e-5 * largest);
        // Rounding x moves the outputs by far more than the order of sums does.
        CHECK(MaxAbsDiff(y, plain) > 1e-4 * largest);
      }
    }
  }
}

// A session of one stream (a step's single rows first in the plan) lays a q4_k
// layer out as K-quant tiles where their GEMM runs single rows (AVX-512 with
// VNNI), and its steps read them; q6_k keeps the model's bytes (its tiles are
// larger than the layer), as does packing off.
TEST_CASE("highway lays q4_k tiles out for the steps of one stream") {
  using recur::impl::kernels::WeightType;
  namespace kernels = recur::impl::kernels;
  namespace backends = recur::impl::backends;
  const size_t in = 512, out = 96;
  std::unique_ptr<recur::impl::ThreadPool> pool;
  REQUIRE(recur::impl::ThreadPool::Create(1, &pool).ok());
  for (WeightType type : {WeightType::kQ4_K, WeightType::kQ6_K}) {
    CAPTURE(kernels::WeightTypeName(type));
    const KQuantLayer layer = MakeKQuantLayer(type, in, out);
    const recur::impl::DenseView& d = layer.view;
    backends::DensePlan plan;
    plan.rows = {1, 64};
    plan.pool = pool.get();
    plan.pack_for_steps = true;
    plan.int8 = kernels::Int8Activations::kAuto;
    std::unique_ptr<backends::PreparedDense> op;
    REQUIRE(backends::HighwayBackend()->Prepare(d, plan, &op).ok());
    const size_t tile_bytes = kernels::DenseBlockQ8TileBytes(d);
    const bool tiled = type == WeightType::kQ4_K && tile_bytes > 0;
    CHECK(op->memory_bytes() == (tiled ? tile_bytes : 0));
    if (tiled) CHECK(tile_bytes == kernels::WeightBytes(type, in * out));  // the layer's bytes
    std::vector<float> x(in + 16), y(out), want(out);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * float(i));
    op->Run(x.data(), 1, y.data(), false);
    std::vector<uint8_t> tiles(std::max<size_t>(tile_bytes, 1) + 64);
    uint8_t* aligned = tiles.data() + (64 - reinterpret_cast<uintptr_t>(tiles.data()) % 64) % 64;
    // From the tiles, their GEMM; else what the kernels run on the model's bytes
    // (block-quantised rows where preferred, f32 activations elsewhere).
    if (tiled) {
      kernels::PackDenseBlockQ8Tiles(d, aligned);
      kernels::DenseBlockQ8Tiled(x.data(), in, 1, aligned, d, 0, kernels::DenseBlockQ8Tiles(out),
                                 want.data(), out, false);
    } else {
      kernels::Dense(x.data(), in, 1, d, want.data(), out, false, plan.int8);
    }
    CHECK(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)) == 0);
    plan.pack_for_steps = false;
    REQUIRE(backends::HighwayBackend()->Prepare(d, plan, &op).ok());
    CHECK(op->memory_bytes() == 0);
  }
}
