// Writes the small random models recur-generate's tests run, RWKV-7 blocks
// over a vocabulary of every byte plus a few words (id 0 end of text):
//   make_text_models OUT_DIR  →  OUT_DIR/{text,text_other,text_wide,no_vocab}.recur
// text_other: other weights of the same shape; text_wide: a wider model;
// no_vocab: text's config without a vocabulary.
#include <cstdio>
#include <string>
#include <vector>

#include "converter/config.h"
#include "converter/file_util.h"
#include "converter/writer.h"
#include "test_models.h"

namespace {

namespace cv = recur::impl::converter;

std::string Config(int d_model) {
  const std::string d = std::to_string(d_model), heads = std::to_string(d_model / 8);
  return R"({"layout": "recur", "d_model": )" + d +
         R"(, "n_layers": 2, "norm_placement": "pre", "layer_norm_eps": 1e-5,
  "input": {"kind": "tokens", "vocab_size": 272, "norm": true}, "max_positions": 0,
  "mixer": {"type": "rwkv7", "heads": )" +
         heads + R"(, "head_size": 8, "decay_rank": 4, "rate_rank": 4, "value_rank": 3,
            "gate_rank": 5},
  "ffn": {"d_ff": 64, "activation": "relu_squared", "token_mix": true}, "final_norm": true,
  "head": {"out": 272, "activation": "none"}})";
}

bool Write(const std::string& path, int d_model, unsigned seed, bool vocabulary) {
  auto parsed = cv::ParseConfig(Config(d_model));
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().message().c_str());
    return false;
  }
  cv::ModelDescription desc = parsed.value().desc;
  if (vocabulary) {
    std::vector<std::string> tokens = {""};
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
    for (const char* word : {"\n\n", "User", "Assistant", ": ", " the", " a", "hello", " world",
                             "\xe4\xb8\xad", "\xe6\x96\x87", "\xe4\xb8", "ing", ". ", "!!"}) {
      tokens.push_back(word);
    }
    desc.vocabulary.emplace();
    desc.vocabulary->tokens = tokens;
    desc.vocabulary->end_of_text = 0;
  }
  auto bytes = cv::BuildModel(desc, recur::impl::testing::RandomTensors(desc, seed));
  if (!bytes.ok()) {
    std::fprintf(stderr, "%s\n", bytes.status().message().c_str());
    return false;
  }
  const auto s = cv::WriteFileAtomic(path, bytes.value().data(), bytes.value().size());
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return s.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_text_models OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const bool ok =
      Write(dir + "/text.recur", 16, 1, true) && Write(dir + "/text_other.recur", 16, 2, true) &&
      Write(dir + "/text_wide.recur", 32, 1, true) && Write(dir + "/no_vocab.recur", 16, 1, false);
  return ok ? 0 : 1;
}
