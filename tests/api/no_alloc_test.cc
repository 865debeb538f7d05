// Stepping never allocates: every buffer is planned in session_create
// (DESIGN.md principle 3). Counts global operator new calls around steps;
// (alloc_counter.cc replaces the global allocator of this test executable.)
#include <vector>

#include <doctest/doctest.h>

#include "alloc_counter.h"

#include "recur/recur.h"
#include "test_models.h"

TEST_CASE("step, reset, save and load do not allocate") {
  for (const char* config : {recur::testing::kTinyTokensConfig, recur::testing::kTinyFeaturesConfig,
                             recur::testing::kTinySoftmaxConfig,
                             recur::testing::kTinySlidingWindowConfig,
                             recur::testing::kTinyAftConfig,
                             recur::testing::kTinyFlashConfig,
                             recur::testing::kTinyAftLocalConfig,
                             recur::testing::kTinyAftFullConfig,
                             recur::testing::kTinyGauConfig}) {
    auto bytes = recur::testing::BuildTestModel(config, 1);
    REQUIRE(!bytes.empty());
    recur_model* model = nullptr;
    REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
    recur_model_info info{};
    info.struct_size = sizeof(info);
    REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
    const uint32_t batch = 4;
    recur_session_options options{sizeof(options), batch, 1, 0, nullptr, RECUR_PACKING_AUTO, 0, 0, nullptr, 0};
    recur_session* session = nullptr;
    REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
    std::vector<int32_t> tokens(batch, 1);
    std::vector<float> frames(batch * info.feature_width, 0.25f);
    std::vector<float> out(batch * info.output_width);
    size_t blob_size = 0;
    REQUIRE(recur_session_state_size(session, &blob_size) == RECUR_OK);
    std::vector<unsigned char> blob(blob_size);
    const bool tokens_model = info.input_kind == RECUR_INPUT_TOKENS;
    recur_input in{tokens_model ? tokens.data() : nullptr, tokens_model ? nullptr : frames.data(),
                   tokens_model ? tokens.size() : frames.size()};

    const long before = recur::testing::AllocationCount();
    for (int t = 0; t < 40; ++t) REQUIRE(recur_session_step(session, &in, out.data()) == RECUR_OK);
    REQUIRE(recur_session_state_save(session, 1, blob.data(), blob.size()) == RECUR_OK);
    REQUIRE(recur_session_reset(session, -1) == RECUR_OK);
    REQUIRE(recur_session_state_load(session, 2, blob.data(), blob.size()) == RECUR_OK);
    REQUIRE(recur_session_step(session, &in, out.data()) == RECUR_OK);
    CHECK(recur::testing::AllocationCount() - before == 0);

    recur_session_free(session);
    recur_model_free(model);
  }
}
