// Stepping and prefilling do not allocate once warm (docs/design.md principle 3):
// every session buffer is planned in session_create. The one exception, as
// recur.h says: on the heap, the dense kernels' per-thread scratch grows the
// first time a thread runs a larger layer shape, so each case warms up with
// one call of every shape, then counts every heap allocation (malloc family
// and operator new) over many calls. Sessions on an arena allocate nothing
// at all, warm-up included (arena_test.cc).
// (alloc_counter.cc replaces the global allocator of this test executable.)
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "alloc_counter.h"
#include "converter/quantize.h"

#include "recur/recur.h"
#include "test_models.h"

namespace {

using recur::impl::converter::WeightType;

// d_model 64, d_ff 128: wide enough for every highway dense path (row
// tiles, packed tiles, panels with their packed-x scratch, widened narrow
// weights), which the tiny models of test_models.h partly skip.
const char* kWideConfig = R"({
  "layout": "recur", "d_model": 64, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 50}, "max_positions": 0,
  "mixer": {"type": "linear_attention", "heads": 4, "dk": 16, "dv": 16,
            "feature_map": "elu_plus_one", "eps": 1e-6},
  "ffn": {"d_ff": 128, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 50, "activation": "none"}})";

struct Case {
  const char* config;
  WeightType dtype = WeightType::kF32;
  uint32_t batch = 4;
  recur_weight_packing packing = RECUR_PACKING_AUTO;
  const char* backend = nullptr;  // automatic
  size_t steps = 9;               // prefill positions, in chunks of `chunk`
  uint32_t chunk = 4;
};

// Heap allocations of warm steps, prefills and state calls (the test runs
// on a fresh thread, so no earlier test case has warmed its scratch).
long WarmAllocations(const Case& c) {
  auto bytes = recur::impl::testing::BuildTestModel(c.config, 1, c.dtype);
  REQUIRE(!bytes.empty());
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  recur_model_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  const size_t steps = c.steps;
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = c.batch;
  options.prefill_chunk = c.chunk;  // whole chunks and a partial one
  options.prefill_min = 1;
  options.weight_packing = c.packing;
  options.backend = c.backend;
  recur_session* session = nullptr;
  REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
  const bool tokens_model = info.input_kind == RECUR_INPUT_TOKENS;
  std::vector<int32_t> tokens(c.batch * steps, 1);
  std::vector<float> frames(c.batch * steps * info.feature_width, 0.25f);
  std::vector<float> out(c.batch * steps * info.output_width);
  auto input = [&](size_t n) {
    return tokens_model ? recur_input{tokens.data(), nullptr, c.batch * n}
                        : recur_input{nullptr, frames.data(), c.batch * n * info.feature_width};
  };
  const recur_input one = input(1), many = input(steps);
  size_t blob_size = 0;
  REQUIRE(recur_session_state_size(session, &blob_size) == RECUR_OK);
  std::vector<unsigned char> blob(blob_size);

  REQUIRE(recur_session_step(session, &one, out.data()) == RECUR_OK);  // warm-up
  REQUIRE(recur_session_prefill(session, steps, &many, out.data()) == RECUR_OK);
  REQUIRE(recur_session_reset(session, -1) == RECUR_OK);
  const long before = recur::impl::testing::HeapAllocationCount();
  for (int t = 0; t < 20; ++t) REQUIRE(recur_session_step(session, &one, out.data()) == RECUR_OK);
  REQUIRE(recur_session_prefill(session, steps, &many, out.data()) == RECUR_OK);
  REQUIRE(recur_session_state_save(session, int(c.batch) - 1, blob.data(), blob.size()) ==
          RECUR_OK);
  REQUIRE(recur_session_reset(session, -1) == RECUR_OK);
  REQUIRE(recur_session_state_load(session, 0, blob.data(), blob.size()) == RECUR_OK);
  REQUIRE(recur_session_step(session, &one, out.data()) == RECUR_OK);
  const long allocations = recur::impl::testing::HeapAllocationCount() - before;
  recur_session_free(session);
  recur_model_free(model);
  return allocations;
}

}  // namespace

TEST_CASE("warm step, prefill, reset, save and load do not allocate") {
  std::vector<Case> cases;
  for (const char* config : recur::impl::testing::TinyStepModels()) {
    cases.push_back({config});
  }
  // The highway paths on the wide model: batch 1 (mat-vec rows), 64 streams
  // packed and unpacked (unpacked, 64 rows take the panels), prefills of
  // 64-position chunks (1,024-row chunks at batch 64: 20 positions of 16
  // keep the emulated arm64 run short), and narrow weights (widened into
  // scratch).
  auto wide = [&](WeightType dtype, uint32_t batch, recur_weight_packing packing) {
    const bool many = batch >= 64;
    cases.push_back({kWideConfig, dtype, batch, packing, "highway", many ? 20u : 70u,
                     many ? 16u : 64u});
  };
  for (uint32_t batch : {1u, 64u}) {
    for (recur_weight_packing packing : {RECUR_PACKING_OFF, RECUR_PACKING_ON}) {
      wide(WeightType::kF32, batch, packing);
    }
  }
  for (WeightType dtype : {WeightType::kF16, WeightType::kBF16, WeightType::kI8}) {
    for (uint32_t batch : {1u, 4u, 64u}) wide(dtype, batch, RECUR_PACKING_AUTO);
  }
  for (const Case& c : cases) {
    CAPTURE(std::string(c.config).substr(0, 240));
    CAPTURE(std::string(recur::impl::converter::WeightTypeName(c.dtype)));
    CAPTURE(c.batch);
    CAPTURE(int(c.packing));
    CAPTURE(c.steps);
    long allocations = -1;
    std::exception_ptr failure;  // a REQUIRE in the thread, rethrown here
    std::thread fresh([&] {
      try {
        allocations = WarmAllocations(c);
      } catch (...) {
        failure = std::current_exception();
      }
    });
    fresh.join();
    if (failure) std::rethrow_exception(failure);
    CHECK(allocations == 0);
  }
}
