// Stepping and prefilling never allocate, whichever GEMM backend runs the
// dense layers (every buffer and primitive is made in session_create) --
// except oneDNN, whose execute allocates (reported, not checked), which is
// why the automatic choice leaves it out.
// (alloc_counter.cc replaces the global allocator of this test executable.)
#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "alloc_counter.h"

#include "recur/recur.h"
#include "test_models.h"

TEST_CASE("step and prefill do not allocate on any backend but onednn") {
  std::vector<std::string> names = recur::impl::testing::CompiledBackends();
  auto bytes = recur::impl::testing::BuildTestModel(recur::impl::testing::kTinyFeaturesConfig, 1);
  REQUIRE(!bytes.empty());
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  recur_model_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  names.push_back("auto");
  for (const std::string& name : names) {
    CAPTURE(name);
    for (uint32_t threads : {1u, std::min(2u, recur_max_threads())}) {
      const uint32_t batch = 4, steps = 13;
      recur_session_options options{};
      options.struct_size = sizeof(options);
      options.batch = batch;
      options.threads = threads;
      options.prefill_chunk = 4;
      options.backend = name.c_str();
      recur_session* session = nullptr;
      REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
      std::vector<float> frames(batch * steps * info.feature_width, 0.25f);
      std::vector<float> out(batch * steps * info.output_width);
      recur_input one{nullptr, frames.data(), batch * size_t{info.feature_width}};
      recur_input many{nullptr, frames.data(), frames.size()};
      // Warm: first calls may set up per-thread state in the libraries.
      REQUIRE(recur_session_step(session, &one, out.data()) == RECUR_OK);
      REQUIRE(recur_session_prefill(session, steps, &many, out.data()) == RECUR_OK);
      const long before = recur::impl::testing::AllocationCount();
      for (int t = 0; t < 20; ++t) REQUIRE(recur_session_step(session, &one, out.data()) == RECUR_OK);
      REQUIRE(recur_session_prefill(session, steps, &many, out.data()) == RECUR_OK);
      const long allocations = recur::impl::testing::AllocationCount() - before;
      if (name == "onednn") {
        // oneDNN's execute builds its argument map on the heap each call;
        // that is why the automatic choice never picks it (gemm_backend.h).
        MESSAGE("onednn: " << allocations << " allocations");
      } else {
        CHECK(allocations == 0);
      }
      recur_session_free(session);
    }
  }
  recur_model_free(model);
}
