// The minimal platform (platforms/minimal, RECUR_PLATFORM=minimal): no file
// system, no clock. This executable compiles platforms/minimal/platform.cc
// itself, so its recur::impl::platform::Default* functions are the minimal ones: the
// linker takes an archive member only for symbols still undefined, and the
// posix member of librecur.a defines nothing else.
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include "recur/recur.h"
#include "test_models.h"

TEST_CASE("minimal platform: no file system, models from memory, no clock") {
  recur_model* model = nullptr;
  CHECK(recur_model_load_file("model.recur", nullptr, &model) == RECUR_IO_ERROR);
  CHECK(std::string(recur_last_error()).find("this build has no file system") != std::string::npos);
  CHECK(model == nullptr);

  const auto bytes =
      recur::impl::testing::BuildTestModel(recur::impl::testing::kTinyTokensConfig, 5);
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = 8;  // the automatic backend choice runs with a clock that reads 0
  recur_session* session = nullptr;
  REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
  std::vector<int32_t> tokens(8, 1);
  std::vector<float> out(8 * 50);
  recur_input in{tokens.data(), nullptr, tokens.size()};
  recur_model_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  out.resize(8 * size_t{info.output_width});
  CHECK(recur_session_step(session, &in, out.data()) == RECUR_OK);
  recur_session_free(session);
  recur_model_free(model);
}
