// Fuzz target: the converter's readers of the rwkv package's vocabulary text
// format and of a Hugging Face tokenizer.json (converter/vocab_file.h), and
// llama.cpp's GGUF token unescaping; a vocabulary that parses then goes
// through the runtime's checks and index (text/vocabulary.h; a byte-level
// BPE's merges may still be refused there), encodes the input itself and
// decodes it back.
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
  std::vector<std::string> warnings;
  auto vocab = cv::ParseRwkvVocabulary(text, "fuzz.txt");
  if (!vocab.ok()) vocab = cv::ParseHfTokenizer(text, "fuzz.json", &warnings);
  if (!vocab.ok()) return 0;
  const bool bpe = vocab->kind == cv::VocabularyKind::kGpt2Bpe;

  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<recur::fb::TokenBytes>> tokens;
  for (const std::string& t : vocab->tokens) {
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> bytes = 0;
    if (!t.empty()) bytes = fbb.CreateVector(reinterpret_cast<const uint8_t*>(t.data()), t.size());
    tokens.push_back(recur::fb::CreateTokenBytes(fbb, bytes));
  }
  std::vector<recur::fb::TokenMerge> merges;
  for (const cv::TokenMergeDescription& m : vocab->merges) merges.emplace_back(m.left, m.right, m.result);
  fbb.Finish(recur::fb::CreateTokenizer(
      fbb, bpe ? recur::fb::TokenizerKind::Gpt2Bpe : recur::fb::TokenizerKind::Rwkv,
      fbb.CreateVector(tokens), vocab->end_of_text, fbb.CreateVectorOfStructs(merges),
      fbb.CreateVector(vocab->added_raw), fbb.CreateVector(vocab->added_normalized)));
  const auto* tokenizer = flatbuffers::GetRoot<recur::fb::Tokenizer>(fbb.GetBufferPointer());
  recur::impl::text::Vocabulary v;
  const recur::impl::Status built = recur::impl::text::Vocabulary::Build(
      tokenizer, static_cast<uint32_t>(vocab->tokens.size()), fbb.GetBufferPointer(), &v);
  // The rwkv parser refuses what the loader would: empty and repeated tokens.
  if (!built.ok()) {
    if (!bpe) std::abort();
    return 0;
  }
  std::vector<int32_t> ids;
  if (!v.Encode(data, size, &ids).ok()) return 0;
  std::string back;
  if (!v.Decode(ids.data(), ids.size(), &back).ok() || back != text) std::abort();
  return 0;
}
