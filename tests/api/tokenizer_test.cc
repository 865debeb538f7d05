// The C API's vocabulary calls (recur.h "vocabulary"): sizes asked first,
// buffers too small, the bytes of each token, and every error with its
// status and message.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "converter/config.h"
#include "converter/writer.h"
#include "recur/recur.h"
#include "test_models.h"

namespace {

namespace cv = recur::impl::converter;

// kTinyTokensConfig (vocab_size 11) carrying `tokens` (id 0 end of text),
// or none.
cv::AlignedBytes ModelBytes(const std::vector<std::string>* tokens) {
  auto parsed = cv::ParseConfig(recur::impl::testing::kTinyTokensConfig);
  REQUIRE(parsed.ok());
  cv::ModelDescription desc = parsed.value().desc;
  if (tokens != nullptr) {
    desc.vocabulary.emplace();
    desc.vocabulary->tokens = *tokens;
    desc.vocabulary->end_of_text = 0;
  }
  auto bytes = cv::BuildModel(desc, recur::impl::testing::RandomTensors(desc, 3));
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  return std::move(bytes.value());
}

struct Model {
  explicit Model(const std::vector<std::string>* tokens) : bytes(ModelBytes(tokens)) {
    REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  }
  ~Model() { recur_model_free(model); }
  cv::AlignedBytes bytes;
  recur_model* model = nullptr;
};

const std::vector<std::string> kTokens = {"",  "h",  "e",     "l",        "o",
                                          " ", "he", "hello", "\xe4\xb8", "\xad"};

TEST_CASE("c api vocabulary: tokenize and detokenize with sizes asked first") {
  Model m(&kTokens);
  uint32_t count = 0;
  int32_t eot = 7;
  REQUIRE(recur_model_vocabulary(m.model, &count, &eot) == RECUR_OK);
  CHECK(count == 10);
  CHECK(eot == 0);
  REQUIRE(recur_model_vocabulary(m.model, nullptr, nullptr) == RECUR_OK);

  const std::string text = "hello hel\xe4\xb8\xad";
  size_t n = 99;
  REQUIRE(recur_tokenize(m.model, text.data(), text.size(), nullptr, 0, &n) == RECUR_OK);
  REQUIRE(n == 6);
  std::vector<int32_t> ids(n);
  REQUIRE(recur_tokenize(m.model, text.data(), text.size(), ids.data(), ids.size(), &n) ==
          RECUR_OK);
  CHECK(ids == std::vector<int32_t>{7, 5, 6, 3, 8, 9});

  size_t length = 0;
  REQUIRE(recur_detokenize(m.model, ids.data(), ids.size(), nullptr, 0, &length) == RECUR_OK);
  REQUIRE(length == text.size());
  std::string back(length, '\0');
  REQUIRE(recur_detokenize(m.model, ids.data(), ids.size(), back.data(), back.size(), &length) ==
          RECUR_OK);
  CHECK(back == text);

  const char* bytes = nullptr;
  REQUIRE(recur_token_bytes(m.model, 7, &bytes, &length) == RECUR_OK);
  CHECK(std::string(bytes, length) == "hello");
  REQUIRE(recur_token_bytes(m.model, 0, &bytes, &length) == RECUR_OK);
  CHECK(length == 0);
  REQUIRE(recur_tokenize(m.model, nullptr, 0, nullptr, 0, &n) == RECUR_OK);
  CHECK(n == 0);

  // Streaming: the ids one at a time, holding back unfinished UTF-8.
  std::string printed, pending;
  for (int32_t id : ids) {
    REQUIRE(recur_token_bytes(m.model, id, &bytes, &length) == RECUR_OK);
    pending.append(bytes, length);
    const size_t hold = recur_utf8_incomplete_tail(pending.data(), pending.size());
    printed += pending.substr(0, pending.size() - hold);
    pending.erase(0, pending.size() - hold);
    CHECK(hold == (id == 8 ? 2u : 0u));
  }
  CHECK(printed == text);
  CHECK(recur_utf8_incomplete_tail(nullptr, 0) == 0);
}

TEST_CASE("c api vocabulary: buffers too small get what fits and RECUR_OUT_OF_RANGE") {
  Model m(&kTokens);
  const std::string text = "hello hello";
  int32_t ids[2] = {-1, -1};
  size_t n = 0;
  CHECK(recur_tokenize(m.model, text.data(), text.size(), ids, 2, &n) == RECUR_OUT_OF_RANGE);
  CHECK(std::string(recur_last_error()) == "ids has room for 2 ids, and the text encodes to 3");
  CHECK(n == 3);
  CHECK(ids[0] == 7);
  CHECK(ids[1] == 5);
  const int32_t all[] = {7, 5, 7};
  char out[8] = {};
  size_t length = 0;
  CHECK(recur_detokenize(m.model, all, 3, out, 8, &length) == RECUR_OUT_OF_RANGE);
  CHECK(std::string(recur_last_error()) == "out has room for 8 bytes, and the tokens decode to 11");
  CHECK(length == 11);
  CHECK(std::string(out, 8) == "hello he");
}

TEST_CASE("c api vocabulary: errors name the problem") {
  Model m(&kTokens);
  size_t n = 5;
  const std::string bad = "hex";
  CHECK(recur_tokenize(m.model, bad.data(), bad.size(), nullptr, 0, &n) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()) ==
        "no token of the vocabulary starts with byte 0x78 at offset 2");
  CHECK(n == 0);
  CHECK(recur_tokenize(m.model, nullptr, 3, nullptr, 0, &n) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()) == "text is null");
  CHECK(recur_tokenize(m.model, bad.data(), 1, nullptr, 4, &n) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()) == "ids is null");
  CHECK(recur_tokenize(nullptr, bad.data(), 1, nullptr, 0, &n) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_tokenize(m.model, bad.data(), 1, nullptr, 0, nullptr) == RECUR_INVALID_ARGUMENT);

  const char* bytes = nullptr;
  size_t length = 0;
  CHECK(recur_token_bytes(m.model, 10, &bytes, &length) == RECUR_OUT_OF_RANGE);
  CHECK(std::string(recur_last_error()) == "token id 10 is not in the vocabulary (ids 0 to 9)");
  CHECK(recur_token_bytes(m.model, -1, &bytes, &length) == RECUR_OUT_OF_RANGE);
  CHECK(recur_token_bytes(m.model, 1, nullptr, &length) == RECUR_INVALID_ARGUMENT);
  const int32_t ids[] = {1, 2, 11};
  CHECK(recur_detokenize(m.model, ids, 3, nullptr, 0, &length) == RECUR_OUT_OF_RANGE);
  CHECK(std::string(recur_last_error()) ==
        "ids[2]: token id 11 is not in the vocabulary (ids 0 to 9)");
  CHECK(length == 0);
  CHECK(recur_detokenize(m.model, nullptr, 2, nullptr, 0, &length) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_detokenize(m.model, ids, 1, nullptr, 0, nullptr) == RECUR_INVALID_ARGUMENT);

  Model none(nullptr);
  uint32_t count = 0;
  CHECK(recur_model_vocabulary(none.model, &count, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).rfind("the model has no vocabulary", 0) == 0);
  CHECK(recur_tokenize(none.model, bad.data(), 1, nullptr, 0, &n) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).rfind("the model has no vocabulary", 0) == 0);
  CHECK(recur_token_bytes(none.model, 0, &bytes, &length) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_detokenize(none.model, ids, 1, nullptr, 0, &length) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_model_vocabulary(nullptr, &count, nullptr) == RECUR_INVALID_ARGUMENT);
}

}  // namespace
