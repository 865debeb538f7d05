// Fuzz target: the converter's readers of the rwkv package's vocabulary text
// format and of a Hugging Face tokenizer.json (converter/vocab_file.h), and
// llama.cpp's GGUF token unescaping; a vocabulary that parses then goes
// through the runtime's checks and index (text/vocabulary.h; a byte-level
// BPE's merges may still be refused there), encodes the input itself and
// decodes it back. Every input is also encoded with a fixed byte-level BPE
// (every byte a token, merges, added tokens) and decoded back.
#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "converter/vocab_file.h"
#include "schema/recur_generated.h"
#include "text/vocabulary.h"

namespace cv = recur::impl::converter;

namespace {

// A vocabulary's Tokenizer table and the runtime's index over it.
struct Built {
  flatbuffers::FlatBufferBuilder fbb;
  recur::impl::text::Vocabulary vocabulary;
  recur::impl::Status status;
};

void Build(const cv::VocabularyDescription& v, Built* out) {
  flatbuffers::FlatBufferBuilder& fbb = out->fbb;
  std::vector<flatbuffers::Offset<recur::fb::TokenBytes>> tokens;
  for (const std::string& t : v.tokens) {
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> bytes = 0;
    if (!t.empty()) bytes = fbb.CreateVector(reinterpret_cast<const uint8_t*>(t.data()), t.size());
    tokens.push_back(recur::fb::CreateTokenBytes(fbb, bytes));
  }
  std::vector<recur::fb::TokenMerge> merges;
  for (const cv::TokenMergeDescription& m : v.merges) merges.emplace_back(m.left, m.right, m.result);
  const bool bpe = v.kind == cv::VocabularyKind::kGpt2Bpe;
  fbb.Finish(recur::fb::CreateTokenizer(
      fbb, bpe ? recur::fb::TokenizerKind::Gpt2Bpe : recur::fb::TokenizerKind::Rwkv,
      fbb.CreateVector(tokens), v.end_of_text, fbb.CreateVectorOfStructs(merges),
      fbb.CreateVector(v.added_raw), fbb.CreateVector(v.added_normalized)));
  const auto* tokenizer = flatbuffers::GetRoot<recur::fb::Tokenizer>(fbb.GetBufferPointer());
  out->status = recur::impl::text::Vocabulary::Build(
      tokenizer, static_cast<uint32_t>(v.tokens.size()), fbb.GetBufferPointer(), &out->vocabulary);
}

// A fixed byte-level BPE that every input is encoded with too: every byte,
// merges over letters, digits, spaces, an apostrophe and two-byte letters
// (each pair of tokens made so far, in a fixed order), two added tokens.
const Built& FixedBpe() {
  static const Built* built = [] {
    cv::VocabularyDescription v;
    v.kind = cv::VocabularyKind::kGpt2Bpe;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, static_cast<char>(b)));
    const std::string alphabet[] = {"a", "b", "1", " ", "'", "s", "\xc3\xa9", "\n"};
    std::vector<uint32_t> made;
    for (const std::string& a : alphabet) {
      if (a.size() == 1) {
        made.push_back(static_cast<uint8_t>(a[0]));
      } else {  // a two-byte letter: its bytes merged first
        v.tokens.push_back(a);
        v.merges.push_back({static_cast<uint8_t>(a[0]), static_cast<uint8_t>(a[1]),
                            static_cast<uint32_t>(v.tokens.size() - 1)});
        made.push_back(static_cast<uint32_t>(v.tokens.size() - 1));
      }
    }
    for (size_t i = 0; i < made.size() && v.merges.size() < 200; ++i) {
      for (size_t j = 0; j <= i && v.merges.size() < 200; ++j) {
        const std::string t = v.tokens[made[i]] + v.tokens[made[j]];
        if (t.size() > 6 || std::find(v.tokens.begin(), v.tokens.end(), t) != v.tokens.end()) continue;
        v.tokens.push_back(t);
        v.merges.push_back({made[i], made[j], static_cast<uint32_t>(v.tokens.size() - 1)});
        made.push_back(static_cast<uint32_t>(v.tokens.size() - 1));
      }
    }
    v.tokens.push_back("<|endoftext|>");
    v.added_raw = {static_cast<uint32_t>(v.tokens.size() - 1)};
    v.end_of_text = static_cast<int32_t>(v.tokens.size() - 1);
    v.tokens.push_back("  ");
    v.added_normalized = {static_cast<uint32_t>(v.tokens.size() - 1)};
    auto* b = new Built;
    Build(v, b);
    if (!b->status.ok()) std::abort();
    return b;
  }();
  return *built;
}

// Encodes `data` and decodes it back: the same bytes, or abort.
void RoundTrip(const recur::impl::text::Vocabulary& v, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids;
  if (!v.Encode(data, size, &ids).ok()) return;
  std::string back;
  if (!v.Decode(ids.data(), ids.size(), &back).ok() ||
      back != std::string_view(reinterpret_cast<const char*>(data), size)) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Built& fixed = FixedBpe();
  std::vector<int32_t> ids;
  // Every byte is a token of the fixed BPE: any input encodes.
  if (!fixed.vocabulary.Encode(data, size, &ids).ok()) std::abort();
  RoundTrip(fixed.vocabulary, data, size);

  std::string unescaped;
  (void)cv::UnescapeGgufRwkvToken(text, &unescaped);
  std::vector<std::string> warnings;
  auto vocab = cv::ParseRwkvVocabulary(text, "fuzz.txt");
  if (!vocab.ok()) vocab = cv::ParseHfTokenizer(text, "fuzz.json", &warnings);
  if (!vocab.ok()) return 0;
  Built built;
  Build(*vocab, &built);
  // The rwkv parser refuses what the loader would: empty and repeated tokens.
  if (!built.status.ok()) {
    if (vocab->kind == cv::VocabularyKind::kRwkv) std::abort();
    return 0;
  }
  RoundTrip(built.vocabulary, data, size);
  return 0;
}
