// Sessions on a caller's arena (recur_session_options.arena): from
// recur_session_create to recur_session_free nothing is allocated on the
// heap (alloc_counter.cc counts malloc and operator new), nothing is written
// outside the arena's planned bytes, and the outputs are a heap session's.
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "alloc_counter.h"
#include "core/arena.h"
#include "converter/config.h"
#include "converter/writer.h"
#include "recur/recur.h"
#include "test_models.h"

namespace {

using recur::impl::converter::WeightType;

bool ErrorContains(const std::string& needle) {
  return std::string(recur_last_error()).find(needle) != std::string::npos;
}

recur::impl::converter::AlignedBytes Build(const char* config, WeightType dtype) {
  auto parsed = recur::impl::converter::ParseConfig(config);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  recur::impl::converter::BuildOptions options;
  options.weight_dtype = dtype;
  auto bytes = recur::impl::converter::BuildModel(
      parsed.value().desc, recur::impl::testing::RandomTensors(parsed.value().desc, 3), options);
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  return std::move(bytes.value());
}

recur_session_options Options(uint32_t batch) {
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = batch;
  options.threads = 1;
  options.prefill_chunk = 16;  // batch × 16 rows: the dense kernels' panels and widened chunks
  options.backend = "highway";
  options.weight_packing = RECUR_PACKING_OFF;
  // An arena session runs int8 layers on f32 activations (recur.h): so does
  // the heap session it is compared with, bit for bit.
  options.int8_activations = RECUR_INT8_ACTIVATIONS_FLOAT;
  return options;
}

// Every buffer a run needs, allocated before counting starts.
struct Run {
  Run(const recur_model_info& info, uint32_t batch, size_t steps, size_t blob)
      : tokens(batch * steps), frames(batch * steps * info.feature_width),
        prefill_out(batch * steps * info.output_width), step_out(14 * batch * info.output_width),
        state(blob), tokens_model(info.input_kind == RECUR_INPUT_TOKENS) {
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 3) % 11);
    for (size_t i = 0; i < frames.size(); ++i) frames[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  }
  recur_input Input(size_t values_per_stream, uint32_t batch) const {
    return tokens_model ? recur_input{tokens.data(), nullptr, values_per_stream * batch}
                        : recur_input{nullptr, frames.data(), values_per_stream * batch};
  }
  std::vector<int32_t> tokens;
  std::vector<float> frames, prefill_out, step_out;
  std::vector<unsigned char> state;
  bool tokens_model;
};

// prefill 34, 10 steps, save stream 1, reset all, load it into stream 2,
// 4 more steps: the calls a device app makes. Returns the first failure
// (no doctest macros: they allocate).
recur_status Exercise(recur_session* s, const recur_model_info& info, uint32_t batch, Run* run) {
  const size_t steps = 34, width = run->tokens_model ? 1 : info.feature_width;
  const recur_input prompt = run->Input(steps * width, batch);
  recur_status status = recur_session_prefill(s, steps, &prompt, run->prefill_out.data());
  const size_t out_row = batch * info.output_width;
  for (size_t t = 0; t < 14 && status == RECUR_OK; ++t) {
    if (t == 10) {
      status = recur_session_state_save(s, 1, run->state.data(), run->state.size());
      if (status == RECUR_OK) status = recur_session_reset(s, -1);
      if (status == RECUR_OK) {
        status = recur_session_state_load(s, 2, run->state.data(), run->state.size());
      }
      if (status != RECUR_OK) break;
    }
    const recur_input in = run->Input(width, batch);
    status = recur_session_step(s, &in, run->step_out.data() + t * out_row);
  }
  return status;
}

}  // namespace

TEST_CASE("a session on an arena allocates nothing from create to free and equals a heap one") {
  const std::vector<const char*> configs = recur::impl::testing::TinyStepModels();
  for (const char* config : configs) {
    for (WeightType dtype : {WeightType::kF32, WeightType::kBF16, WeightType::kI8}) {
      INFO(std::string(config).substr(0, 200));
      INFO(recur::impl::converter::WeightTypeName(dtype));
      const auto bytes = Build(config, dtype);
      recur_model* model = nullptr;
      REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
      recur_model_info info{};
      info.struct_size = sizeof(info);
      REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
      const uint32_t batch = 4;
      recur_session_options options = Options(batch);

      const long heap_before = recur::impl::testing::HeapAllocationCount();
      recur_session* heap = nullptr;
      REQUIRE(recur_session_create(model, &options, &heap) == RECUR_OK);
      CHECK(recur::impl::testing::HeapAllocationCount() > heap_before);  // the counter sees malloc
      size_t blob = 0;
      REQUIRE(recur_session_state_size(heap, &blob) == RECUR_OK);
      Run want(info, batch, 34, blob), got(info, batch, 34, blob);
      REQUIRE_MESSAGE(Exercise(heap, info, batch, &want) == RECUR_OK, recur_last_error());
      recur_session_free(heap);

      size_t need = 0;
      REQUIRE(recur_session_arena_size(model, &options, &need) == RECUR_OK);
      // The arena starts 1 byte past an alignment boundary and is followed by
      // guard bytes that must stay as they are.
      const size_t guard = 256;
      std::vector<unsigned char> memory(1 + need + guard + 64, 0xA5);
      unsigned char* arena = memory.data() + (64 - reinterpret_cast<uintptr_t>(memory.data()) % 64) + 1;
      options.arena = arena;
      options.arena_size = need;

      // On a thread of its own: the kernels' per-thread buffers that the
      // heap session grew on this thread must not hide an allocation.
      long allocations = -1;
      recur_status created = RECUR_INTERNAL, ran = RECUR_INTERNAL;
      std::thread([&] {
        const long before = recur::impl::testing::HeapAllocationCount();
        recur_session* session = nullptr;
        created = recur_session_create(model, &options, &session);
        if (created == RECUR_OK) ran = Exercise(session, info, batch, &got);
        recur_session_free(session);
        allocations = recur::impl::testing::HeapAllocationCount() - before;
      }).join();
      REQUIRE(created == RECUR_OK);
      REQUIRE(ran == RECUR_OK);
      CHECK(allocations == 0);

      size_t touched = 0;
      for (size_t i = 0; i < guard; ++i) touched += arena[need + i] != 0xA5;
      CHECK(touched == 0);
      CHECK(std::memcmp(want.prefill_out.data(), got.prefill_out.data(),
                        want.prefill_out.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(want.step_out.data(), got.step_out.data(),
                        want.step_out.size() * sizeof(float)) == 0);
      recur_model_free(model);
    }
  }
}

TEST_CASE("arena sessions: too small, unsupported options, encode and fork are refused") {
  const auto bytes = Build(recur::impl::testing::kTinyTokensConfig, WeightType::kF32);
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  recur_session_options options = Options(2);
  size_t need = 0;
  REQUIRE(recur_session_arena_size(model, &options, &need) == RECUR_OK);
  std::vector<unsigned char> arena(need, 0x5A);
  recur_session* s = nullptr;

  options.arena = arena.data();
  options.arena_size = need - 1;
  CHECK(recur_session_create(model, &options, &s) == RECUR_OUT_OF_MEMORY);
  CHECK(ErrorContains("the arena has " + std::to_string(need - 1) + " bytes; this session needs " +
                      std::to_string(need)));
  CHECK(s == nullptr);
  size_t touched = 0;
  for (unsigned char c : arena) touched += c != 0x5A;
  CHECK(touched == 0);  // a refused create leaves the caller's memory alone

  options.arena_size = need;
  options.threads = 2;
  CHECK(recur_session_create(model, &options, &s) == RECUR_UNSUPPORTED);
  CHECK(ErrorContains("threads must be 1, got 2"));
  CHECK(recur_session_arena_size(model, &options, &need) == RECUR_UNSUPPORTED);
  options.threads = 1;
  options.backend = "xnnpack";
  CHECK(recur_session_create(model, &options, &s) == RECUR_UNSUPPORTED);
  CHECK(ErrorContains("backend \"xnnpack\""));
  options.backend = nullptr;
  options.weight_packing = RECUR_PACKING_ON;
  CHECK(recur_session_create(model, &options, &s) == RECUR_UNSUPPORTED);
  CHECK(ErrorContains("pack"));
  options.weight_packing = RECUR_PACKING_AUTO;  // auto: an arena session does not pack
  // Plain sums: a smaller arena (the compensations are not carved), exactly enough.
  size_t comp_need = 0, plain_need = 0;
  REQUIRE(recur_session_arena_size(model, &options, &comp_need) == RECUR_OK);
  options.state_sums = RECUR_STATE_SUMS_PLAIN;
  REQUIRE(recur_session_arena_size(model, &options, &plain_need) == RECUR_OK);
  CHECK(plain_need < comp_need);
  options.arena_size = plain_need;
  REQUIRE(recur_session_create(model, &options, &s) == RECUR_OK);
  recur_session_free(s);
  options.arena_size = plain_need - 1;
  CHECK(recur_session_create(model, &options, &s) == RECUR_OUT_OF_MEMORY);
  options.state_sums = RECUR_STATE_SUMS_COMPENSATED;
  options.arena = nullptr;
  options.arena_size = 5;
  CHECK(recur_session_create(model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("arena_size is 5 but arena is NULL"));
  CHECK(s == nullptr);

  CHECK(recur_session_arena_size(nullptr, &options, &need) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_arena_size(model, &options, nullptr) == RECUR_INVALID_ARGUMENT);
  options.arena_size = 0;
  REQUIRE(recur_session_arena_size(model, nullptr, &need) == RECUR_OK);  // default options
  CHECK(need > 0);
  REQUIRE(recur_session_arena_size(model, &options, &need) == RECUR_OK);
  arena.assign(need, 0);
  options.arena = arena.data();
  options.arena_size = need;
  REQUIRE(recur_session_create(model, &options, &s) == RECUR_OK);
  CHECK(std::string(recur_session_backends(s)).find("arena") != std::string::npos);
  std::vector<int32_t> tokens(2 * 3, 1);
  std::vector<float> out(2 * 3 * 11);
  const recur_input in{tokens.data(), nullptr, tokens.size()};
  CHECK(recur_session_encode(s, 3, &in, out.data()) == RECUR_UNSUPPORTED);
  CHECK(ErrorContains("encode: a session on an arena"));
  recur_session* copy = nullptr;
  CHECK(recur_session_fork(s, &copy) == RECUR_UNSUPPORTED);
  CHECK(ErrorContains("fork: a session on an arena"));
  CHECK(copy == nullptr);
  // Two sessions on one arena's halves: each stays in its own part.
  recur_session_free(s);
  std::vector<unsigned char> two(2 * need);
  recur_session *a = nullptr, *b = nullptr;
  options.arena = two.data();
  REQUIRE(recur_session_create(model, &options, &a) == RECUR_OK);
  options.arena = two.data() + need;
  REQUIRE(recur_session_create(model, &options, &b) == RECUR_OK);
  const recur_input one{tokens.data(), nullptr, 2};
  REQUIRE(recur_session_step(a, &one, out.data()) == RECUR_OK);
  REQUIRE(recur_session_step(b, &one, out.data() + 22) == RECUR_OK);
  CHECK(std::memcmp(out.data(), out.data() + 22, 22 * sizeof(float)) == 0);
  recur_session_free(a);
  recur_session_free(b);
  recur_model_free(model);
}

TEST_CASE("Arena: counting, alignment of an unaligned block, exhaustion, overflow") {
  recur::impl::Arena counter;
  CHECK(counter.Allocate<float>(3) == nullptr);  // counting
  CHECK(counter.Allocate<double>(1) == nullptr);
  CHECK(counter.used() == 64 + 8);
  CHECK(counter.bytes() == 128 + 63);
  alignas(64) unsigned char block[256];
  recur::impl::Arena arena(block + 5, 200);  // aligned start: block + 64, 141 bytes left
  float* a = arena.Allocate<float>(3);
  double* b = arena.Allocate<double>(1);
  CHECK(reinterpret_cast<uintptr_t>(a) == reinterpret_cast<uintptr_t>(block + 64));
  CHECK(reinterpret_cast<uintptr_t>(b) == reinterpret_cast<uintptr_t>(block + 128));
  CHECK(arena.fits());
  CHECK(arena.Allocate<unsigned char>(14) == nullptr);  // 64 + 64 + 14 > 141
  CHECK(!arena.fits());
  recur::impl::Arena tiny(block + 1, 10);  // less than the alignment padding
  CHECK(tiny.Allocate<unsigned char>(1) == nullptr);
  recur::impl::Arena huge;
  huge.Allocate<unsigned char>(1);
  CHECK(huge.Allocate<double>(SIZE_MAX / 4) == nullptr);
  CHECK(huge.used() == SIZE_MAX);  // saturated: no block is big enough
  CHECK(huge.bytes() >= SIZE_MAX - 64);
}
