// Fuzz target: the converter's reader of the rwkv package's vocabulary text
// format (converter/vocab_file.h) and llama.cpp's GGUF token unescaping; a
// vocabulary that parses then goes through the runtime's checks and index
// (text/vocabulary.h), encodes the input itself and decodes it back.
#include <flatbuffers/flatbuffers.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "converter/vocab_file.h"
#include "schema/recur_generated.h"
#include "text/vocabulary.h"

namespace cv = recur::impl::converter;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string unescaped;
  (void)cv::UnescapeGgufRwkvToken(text, &unescaped);
  auto vocab = cv::ParseRwkvVocabulary(text, "fuzz.txt");
  if (!vocab.ok()) return 0;

  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<recur::fb::TokenBytes>> tokens;
  for (const std::string& t : vocab->tokens) {
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> bytes = 0;
    if (!t.empty()) bytes = fbb.CreateVector(reinterpret_cast<const uint8_t*>(t.data()), t.size());
    tokens.push_back(recur::fb::CreateTokenBytes(fbb, bytes));
  }
  fbb.Finish(recur::fb::CreateTokenizer(fbb, recur::fb::TokenizerKind::Rwkv,
                                        fbb.CreateVector(tokens), vocab->end_of_text));
  const auto* tokenizer = flatbuffers::GetRoot<recur::fb::Tokenizer>(fbb.GetBufferPointer());
  recur::impl::text::Vocabulary v;
  const recur::impl::Status built = recur::impl::text::Vocabulary::Build(
      tokenizer, static_cast<uint32_t>(vocab->tokens.size()), fbb.GetBufferPointer(), &v);
  // The parser refuses what the loader would: empty and repeated tokens.
  if (!built.ok()) std::abort();
  std::vector<int32_t> ids;
  if (!v.Encode(data, size, &ids).ok()) return 0;
  std::string back;
  if (!v.Decode(ids.data(), ids.size(), &back).ok() || back != text) std::abort();
  return 0;
}
