// The vocabulary a model file carries (recur.fbs Tokenizer, text/vocabulary.h):
// greedy longest match against a brute-force reference on random
// vocabularies and texts, every token's bytes encoding to itself, round
// trips, the caller-buffer contract, and every way a hostile vocabulary is
// refused at load with a message naming it.
#include "text/vocabulary.h"

#include <doctest/doctest.h>
#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "converter/config.h"
#include "converter/writer.h"
#include "engine/model_loader.h"
#include "model/model.h"
#include "schema/recur_generated.h"
#include "test_models.h"

namespace recur::impl {
namespace {

using converter::VocabularyDescription;

// kTinyTokensConfig with `vocab` rows of embedding and head.
std::string TokensConfig(uint32_t vocab) {
  return R"({"layout": "recur", "d_model": 8, "n_layers": 1, "norm_placement": "pre",
    "layer_norm_eps": 1e-5, "max_positions": 0,
    "input": {"kind": "tokens", "vocab_size": )" +
         std::to_string(vocab) + R"(},
    "mixer": {"type": "linear_attention", "heads": 1, "dk": 8, "dv": 8,
              "feature_map": "elu_plus_one", "eps": 1e-6},
    "ffn": {"d_ff": 8, "activation": "gelu"}, "final_norm": true,
    "head": {"out": )" +
         std::to_string(vocab) + R"(, "activation": "softmax"}})";
}

// A model of `vocab` token rows carrying `v` (none when null), built without
// the writer's self-check so that hostile vocabularies reach the loader.
converter::AlignedBytes ModelWith(const VocabularyDescription* v, uint32_t vocab,
                                  const std::string& config = "") {
  auto parsed = converter::ParseConfig(config.empty() ? TokensConfig(vocab) : config);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  converter::ModelDescription desc = parsed.value().desc;
  if (v != nullptr) desc.vocabulary = *v;
  converter::BuildOptions options;
  options.self_check = false;
  auto bytes = converter::BuildModel(desc, testing::RandomTensors(desc, 1), options);
  REQUIRE(bytes.ok());
  return std::move(bytes.value());
}

struct Loaded {
  converter::AlignedBytes bytes;
  std::unique_ptr<Model> model;
  Status status;
};

Loaded Load(const VocabularyDescription* v, uint32_t vocab, const std::string& config = "") {
  Loaded l;
  l.bytes = ModelWith(v, vocab, config);
  l.status = LoadModel(l.bytes.data(), l.bytes.size(), LoadOptions{}, &l.model);
  return l;
}

// `v` loaded with `vocab` rows, which must succeed.
Loaded LoadOk(const VocabularyDescription& v, uint32_t vocab) {
  Loaded l = Load(&v, vocab);
  REQUIRE_MESSAGE(l.status.ok(), l.status.message());
  return l;
}

// Every single byte, then `extra` tokens of 2 to 6 bytes over a small
// alphabet (so that tokens overlap and extend each other), no repeats; id 0
// the end-of-text token.
VocabularyDescription RandomVocabulary(std::mt19937* rng, size_t extra,
                                       const std::string& alphabet) {
  VocabularyDescription v;
  v.tokens.emplace_back();
  v.end_of_text = 0;
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(std::string(1, static_cast<char>(b)));
    seen.insert(v.tokens.back());
  }
  std::uniform_int_distribution<size_t> length(2, 6), pick(0, alphabet.size() - 1);
  while (v.tokens.size() < 257 + extra) {
    std::string t;
    for (size_t n = length(*rng); n > 0; --n) t += alphabet[pick(*rng)];
    if (seen.insert(t).second) v.tokens.push_back(t);
  }
  std::shuffle(v.tokens.begin() + 1, v.tokens.end(), *rng);
  return v;
}

// TRIE_TOKENIZER's rule by brute force: at each position, the longest token
// that is a prefix of the rest.
std::vector<int32_t> ReferenceEncode(const VocabularyDescription& v, const std::string& text) {
  std::vector<int32_t> ids;
  for (size_t pos = 0; pos < text.size();) {
    int32_t best = -1;
    size_t best_length = 0;
    for (size_t id = 0; id < v.tokens.size(); ++id) {
      const std::string& t = v.tokens[id];
      if (!t.empty() && t.size() > best_length && text.compare(pos, t.size(), t) == 0) {
        best = static_cast<int32_t>(id);
        best_length = t.size();
      }
    }
    REQUIRE(best >= 0);
    ids.push_back(best);
    pos += best_length;
  }
  return ids;
}

const uint8_t* U8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// The ids of `text`, which must decode back to it.
std::vector<int32_t> EncodeRoundTrip(const text::Vocabulary& vocab, const std::string& text) {
  std::vector<int32_t> ids;
  REQUIRE(vocab.Encode(U8(text), text.size(), &ids).ok());
  std::string back;
  REQUIRE(vocab.Decode(ids.data(), ids.size(), &back).ok());
  CHECK(back == text);
  return ids;
}

TEST_CASE("vocabulary: greedy longest match equals the brute-force rule on random texts") {
  std::mt19937 rng(7);
  const std::string alphabet = "abc \n\xe4\xb8";
  const VocabularyDescription v = RandomVocabulary(&rng, 600, alphabet);
  const Loaded l = LoadOk(v, 1000);
  const text::Vocabulary& vocab = l.model->vocabulary;
  REQUIRE(vocab.available().ok());
  CHECK(vocab.size() == v.tokens.size());
  CHECK(vocab.end_of_text() == 0);
  std::uniform_int_distribution<size_t> length(0, 200), pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255), stray(0, 9);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (size_t n = length(rng); n > 0; --n) {
      text += stray(rng) == 0 ? static_cast<char>(byte(rng)) : alphabet[pick(rng)];
    }
    CHECK(EncodeRoundTrip(vocab, text) == ReferenceEncode(v, text));
  }
}

TEST_CASE("vocabulary: every token's bytes encode to that token alone and decode back") {
  std::mt19937 rng(11);
  const VocabularyDescription v = RandomVocabulary(&rng, 2000, "xyz0123 ");
  const Loaded l = LoadOk(v, 4096);
  const text::Vocabulary& vocab = l.model->vocabulary;
  for (size_t id = 1; id < v.tokens.size(); ++id) {
    std::vector<int32_t> ids;
    REQUIRE(vocab.Encode(U8(v.tokens[id]), v.tokens[id].size(), &ids).ok());
    REQUIRE(ids == std::vector<int32_t>{static_cast<int32_t>(id)});
    const uint8_t* bytes = nullptr;
    size_t size = 0;
    REQUIRE(vocab.TokenBytes(static_cast<int64_t>(id), &bytes, &size).ok());
    CHECK(std::string(reinterpret_cast<const char*>(bytes), size) == v.tokens[id]);
  }
  // End of text: no bytes; encoding never gives it.
  const uint8_t* bytes = nullptr;
  size_t size = 7;
  REQUIRE(vocab.TokenBytes(0, &bytes, &size).ok());
  CHECK(size == 0);
}

TEST_CASE("vocabulary: caller buffers get what fits and the size of the whole") {
  VocabularyDescription v;
  v.tokens = {"", "a", "b", "ab", "abc"};
  v.end_of_text = 0;
  const Loaded l = LoadOk(v, 8);
  const text::Vocabulary& vocab = l.model->vocabulary;
  const std::string text = "abcabab";  // abc, ab, ab
  size_t needed = 0;
  REQUIRE(vocab.Encode(U8(text), text.size(), nullptr, 0, &needed).ok());
  CHECK(needed == 3);
  int32_t ids[2] = {-1, -1};
  REQUIRE(vocab.Encode(U8(text), text.size(), ids, 2, &needed).ok());
  CHECK(needed == 3);
  CHECK(ids[0] == 4);
  CHECK(ids[1] == 3);
  const int32_t all[] = {4, 0, 3, 1};
  uint8_t out[4] = {};
  REQUIRE(vocab.Decode(all, 4, out, 4, &needed).ok());
  CHECK(needed == 6);  // "abc" + "" + "ab" + "a"
  CHECK(std::string(reinterpret_cast<char*>(out), 4) == "abca");
  REQUIRE(vocab.Encode(nullptr, 0, nullptr, 0, &needed).ok());
  CHECK(needed == 0);
}

TEST_CASE("vocabulary: text no token starts with, and ids outside it, are refused by name") {
  VocabularyDescription v;
  v.tokens = {"", "a", "bc"};
  v.end_of_text = 0;
  const Loaded l = LoadOk(v, 5);
  const text::Vocabulary& vocab = l.model->vocabulary;
  std::vector<int32_t> ids;
  Status s = vocab.Encode(U8(std::string("aab")), 3, &ids);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "no token of the vocabulary starts with byte 0x62 at offset 2");
  s = vocab.Encode(U8(std::string("a\xff")), 2, &ids);
  CHECK(s.message() == "no token of the vocabulary starts with byte 0xff at offset 1");
  std::string out;
  const int32_t bad[] = {1, 3};  // 3: a row of the embedding (vocab_size 5) with no bytes
  s = vocab.Decode(bad, 2, &out);
  CHECK(s.code() == StatusCode::kOutOfRange);
  CHECK(s.message() == "ids[1]: token id 3 is not in the vocabulary (ids 0 to 2)");
  const int32_t negative[] = {-1};
  CHECK(vocab.Decode(negative, 1, &out).code() == StatusCode::kOutOfRange);
}

TEST_CASE("vocabulary: a model without one says so on every call") {
  Loaded l = Load(nullptr, 11);
  REQUIRE(l.status.ok());
  const text::Vocabulary& vocab = l.model->vocabulary;
  CHECK(vocab.available().code() == StatusCode::kInvalidArgument);
  CHECK(vocab.available().message().find("the model has no vocabulary") == 0);
  std::vector<int32_t> ids;
  CHECK(vocab.Encode(U8(std::string("a")), 1, &ids).message() == vocab.available().message());
  const uint8_t* bytes;
  size_t size;
  CHECK(vocab.TokenBytes(0, &bytes, &size).code() == StatusCode::kInvalidArgument);
  CHECK(vocab.size() == 0);
}

// The loader's message for a model carrying `v` (vocab_size rows).
std::string Refusal(const VocabularyDescription& v, uint32_t vocab_size) {
  Loaded l = Load(&v, vocab_size);
  CHECK(l.status.code() == StatusCode::kInvalidModel);
  return l.status.message();
}

TEST_CASE("vocabulary: hostile vocabularies are refused at load, naming the problem") {
  VocabularyDescription v;
  v.tokens = {"", "a", "b", "a"};
  v.end_of_text = 0;
  CHECK(Refusal(v, 8) == "tokenizer: tokens 1 and 3 have the same bytes \"a\"");
  v.tokens = {"", "a", "", "b"};
  CHECK(Refusal(v, 8) == "tokenizer: token 2 has no bytes (only end_of_text may be empty)");
  v.tokens = {"<s>", "a"};
  CHECK(Refusal(v, 8) == "tokenizer: token 0 is end_of_text, which has no bytes, but it has 3");
  v.tokens = {"", "a"};
  v.end_of_text = 2;
  CHECK(Refusal(v, 8) ==
        "tokenizer: end_of_text is 2, not a token id (the vocabulary has 2 tokens) or -1");
  v.end_of_text = -2;
  CHECK(Refusal(v, 8).find("end_of_text is -2") != std::string::npos);
  v.tokens = {"a", "b", "c", "d", "e"};
  v.end_of_text = -1;
  CHECK(Refusal(v, 4) == "tokenizer has 5 tokens, more than the model's vocab_size (4)");
  v.tokens.clear();
  CHECK(Refusal(v, 4) == "tokenizer has no tokens");
  // A model of feature frames has no use for one.
  v.tokens = {"a"};
  Loaded l = Load(&v, 0, testing::kTinyFeaturesConfig);
  CHECK(l.status.code() == StatusCode::kInvalidModel);
  CHECK(l.status.message() ==
        "tokenizer: the model takes feature frames, not token ids, but has a vocabulary");
  // A 100-byte token in the message is cut short.
  v.tokens = {std::string(100, 'q'), std::string(100, 'q')};
  CHECK(Refusal(v, 4).find("\"qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq...\"") != std::string::npos);
}

// A Tokenizer table alone, as Vocabulary::Build reads one.
struct TokenizerBuffer {
  flatbuffers::FlatBufferBuilder fbb;
  const fb::Tokenizer* Make(fb::TokenizerKind kind, const std::vector<std::string>& tokens,
                            int32_t end_of_text) {
    std::vector<flatbuffers::Offset<fb::TokenBytes>> offsets;
    for (const std::string& t : tokens) {
      offsets.push_back(fb::CreateTokenBytes(fbb, fbb.CreateVector(U8(t), t.size())));
    }
    fbb.Finish(fb::CreateTokenizer(fbb, kind, fbb.CreateVector(offsets), end_of_text));
    return flatbuffers::GetRoot<fb::Tokenizer>(fbb.GetBufferPointer());
  }
};

TEST_CASE("vocabulary: a tokenizer kind this runtime does not know loads as no vocabulary") {
  TokenizerBuffer b;
  const fb::Tokenizer* t = b.Make(static_cast<fb::TokenizerKind>(9), {"a", "b"}, -1);
  text::Vocabulary vocab;
  REQUIRE(text::Vocabulary::Build(t, 10, b.fbb.GetBufferPointer(), &vocab).ok());
  CHECK(vocab.available().code() == StatusCode::kUnsupported);
  CHECK(vocab.available().message() ==
        "the model's tokenizer kind 9 is not supported by this runtime (newer model?)");
  std::vector<int32_t> ids;
  CHECK(vocab.Encode(U8(std::string("a")), 1, &ids).code() == StatusCode::kUnsupported);

  TokenizerBuffer known;
  t = known.Make(fb::TokenizerKind::Rwkv, {"a", "b"}, -1);
  REQUIRE(text::Vocabulary::Build(t, 10, known.fbb.GetBufferPointer(), &vocab).ok());
  REQUIRE(vocab.Encode(U8(std::string("ba")), 2, &ids).ok());
  CHECK(ids == std::vector<int32_t>{1, 0});
}

// A byte-level BPE over an ASCII alphabet: every byte a token, then `merges`
// random merges of tokens made so far into tokens not made before (ids in
// the order made); added_raw "<|endoftext|>" (end_of_text) and
// added_normalized "    ".
VocabularyDescription RandomBpe(std::mt19937* rng, size_t merges, const std::string& alphabet) {
  VocabularyDescription v;
  v.kind = converter::VocabularyKind::kGpt2Bpe;
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(std::string(1, static_cast<char>(b)));
    seen.insert(v.tokens.back());
  }
  std::vector<uint32_t> usable;
  for (char c : alphabet) usable.push_back(static_cast<uint8_t>(c));
  while (v.merges.size() < merges) {
    std::uniform_int_distribution<size_t> pick(0, usable.size() - 1);
    const uint32_t l = usable[pick(*rng)], r = usable[pick(*rng)];
    const std::string t = v.tokens[l] + v.tokens[r];
    if (t.size() > 8 || !seen.insert(t).second) continue;
    v.tokens.push_back(t);
    const auto id = static_cast<uint32_t>(v.tokens.size() - 1);
    v.merges.push_back({l, r, id});
    usable.push_back(id);
  }
  v.tokens.push_back("<|endoftext|>");
  v.end_of_text = static_cast<int32_t>(v.tokens.size() - 1);
  v.added_raw = {static_cast<uint32_t>(v.end_of_text)};
  v.tokens.push_back("    ");
  v.added_normalized = {static_cast<uint32_t>(v.tokens.size() - 1)};
  return v;
}

// recur.fbs Gpt2Bpe by brute force, for ASCII text: the added tokens by
// search, the GPT-2 pattern by std::regex (ECMAScript: leftmost alternative,
// backtracking, lookahead; \p{L} and \p{N} are [A-Za-z] and [0-9] in ASCII),
// and per piece the lowest-rank, then leftmost, pair merged one at a time.
std::vector<int32_t> ReferenceBpe(const VocabularyDescription& v, const std::string& text,
                                  int pass = 0) {
  std::vector<int32_t> ids;
  if (pass < 2) {
    const uint32_t added = pass == 0 ? v.added_raw[0] : v.added_normalized[0];
    const std::string& t = v.tokens[added];
    size_t gap = 0;
    for (size_t pos = text.find(t); pos != std::string::npos; pos = text.find(t, gap)) {
      for (int32_t id : ReferenceBpe(v, text.substr(gap, pos - gap), pass + 1)) ids.push_back(id);
      ids.push_back(static_cast<int32_t>(added));
      gap = pos + t.size();
    }
    for (int32_t id : ReferenceBpe(v, text.substr(gap), pass + 1)) ids.push_back(id);
    return ids;
  }
  static const std::regex pattern(
      "'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\\sA-Za-z0-9]+|\\s+(?!\\S)|\\s+");
  size_t covered = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    REQUIRE(static_cast<size_t>(it->position()) == covered);  // the pattern matches everywhere
    covered += it->length();
    std::vector<int32_t> symbols;
    for (char c : it->str()) symbols.push_back(static_cast<uint8_t>(c));
    while (true) {
      size_t best = symbols.size(), best_rank = v.merges.size();
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        for (size_t r = 0; r < best_rank; ++r) {
          if (v.merges[r].left == static_cast<uint32_t>(symbols[i]) &&
              v.merges[r].right == static_cast<uint32_t>(symbols[i + 1])) {
            best = i;
            best_rank = r;
            break;
          }
        }
      }
      if (best == symbols.size()) break;
      symbols[best] = static_cast<int32_t>(v.merges[best_rank].result);
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }
  REQUIRE(covered == text.size());
  return ids;
}

TEST_CASE("vocabulary: byte-level BPE equals the brute-force rule on random texts") {
  std::mt19937 rng(5);
  const std::string alphabet = "ab1 '.\n\t";
  const VocabularyDescription v = RandomBpe(&rng, 300, alphabet);
  const Loaded l = LoadOk(v, 1024);
  const text::Vocabulary& vocab = l.model->vocabulary;
  CHECK(vocab.end_of_text() == static_cast<int32_t>(v.tokens.size()) - 2);
  const std::vector<std::string> words = {"<|endoftext|>", "    ", "'s", "'re", "'ll", "sre"};
  std::uniform_int_distribution<size_t> length(0, 120), pick(0, alphabet.size() - 1),
      word(0, words.size() - 1);
  std::uniform_int_distribution<int> kind(0, 9);
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    // Long runs too: pieces past kInlinePiece bytes take the heap path.
    const size_t n = trial % 10 == 0 ? 3 * text::Vocabulary::kInlinePiece : length(rng);
    while (text.size() < n) {
      const int k = kind(rng);
      text += k == 0 ? words[word(rng)] : trial % 10 == 0 ? std::string(1, 'a')
                                                          : std::string(1, alphabet[pick(rng)]);
    }
    const std::vector<int32_t> ids = EncodeRoundTrip(vocab, text);
    CHECK(ids == ReferenceBpe(v, text));
    size_t needed = 0;
    std::vector<int32_t> some(ids.size() / 2 + 1, -7);
    REQUIRE(vocab.Encode(U8(text), text.size(), some.data(), some.size() - 1, &needed).ok());
    CHECK(needed == ids.size());
    CHECK(std::equal(some.begin(), some.end() - 1, ids.begin()));
    CHECK(some.back() == -7);
  }
}

TEST_CASE("vocabulary: byte-level BPE reads any bytes and gives them back") {
  std::mt19937 rng(9);
  const VocabularyDescription v = RandomBpe(&rng, 100, "ab \xc3\xa9\xe4\xb8\xad");
  const Loaded l = LoadOk(v, 1024);
  const text::Vocabulary& vocab = l.model->vocabulary;
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int n = trial % 50; n > 0; --n) text += static_cast<char>(byte(rng));
    EncodeRoundTrip(vocab, text);
  }
  // A letter run through invalid bytes: "é" (c3 a9) is a letter, a lone c3 is not.
  std::vector<int32_t> ids;
  REQUIRE(vocab.Encode(U8(std::string("a\xc3\xa9\xc3z")), 5, &ids).ok());
  CHECK(ids.back() == 'z');
}

TEST_CASE("vocabulary: hostile byte-level BPE vocabularies are refused at load, naming the problem") {
  VocabularyDescription base;
  base.kind = converter::VocabularyKind::kGpt2Bpe;
  base.tokens = {"a", "b", "ab", "<eot>", "", "c"};
  base.merges = {{0, 1, 2}};
  base.added_raw = {3};
  base.end_of_text = 3;
  {
    Loaded l = Load(&base, 8);
    REQUIRE_MESSAGE(l.status.ok(), l.status.message());
    std::vector<int32_t> ids;
    REQUIRE(l.model->vocabulary.Encode(U8(std::string("ab<eot>c")), 8, &ids).ok());
    CHECK(ids == std::vector<int32_t>{2, 3, 5});
    const Status s = l.model->vocabulary.Encode(U8(std::string("abd")), 3, &ids);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message() == "no token of the vocabulary is byte 0x64 alone (offset 2)");
  }
  VocabularyDescription v = base;
  v.merges = {{0, 1, 2}, {0, 1, 2}};
  CHECK(Refusal(v, 8) == "tokenizer: merge 1 repeats merge 0 (tokens 0 and 1)");
  v.merges = {{0, 9, 2}};
  CHECK(Refusal(v, 16) ==
        "tokenizer: merge 0 (0, 9 -> 2) names a token id past the vocabulary's 6 tokens");
  v.merges = {{1, 0, 2}};
  CHECK(Refusal(v, 8) == "tokenizer: merge 0 makes token 2 (\"ab\") of tokens 1 (\"b\") and 0 "
                         "(\"a\"), whose bytes together are not its bytes");
  v.merges = {{0, 4, 0}};
  CHECK(Refusal(v, 8).find("whose bytes together are not its bytes") != std::string::npos);
  v = base;
  v.tokens[5] = "a";
  CHECK(Refusal(v, 8) == "tokenizer: tokens 0 and 5 have the same bytes \"a\"");
  v = base;
  v.added_raw = {3, 3};
  CHECK(Refusal(v, 8) == "tokenizer: added_raw lists token 3 twice");
  v.added_raw = {4};
  CHECK(Refusal(v, 8) == "tokenizer: added_raw[0] is token 4, which has no bytes");
  v.added_raw = {3};
  v.added_normalized = {7};
  CHECK(Refusal(v, 8) ==
        "tokenizer: added_normalized[0] is 7, not a token id (the vocabulary has 6 tokens)");
  // An added token may have a plain token's bytes (GPT-NeoX's runs of spaces).
  v.added_normalized = {};
  v.tokens[4] = "a";
  v.added_normalized = {4};
  Loaded ok = Load(&v, 8);
  CHECK_MESSAGE(ok.status.ok(), ok.status.message());
  // The Rwkv kind has no merges or added tokens (the writer writes none).
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::TokenBytes>> tokens;
  for (const char* t : {"a", "b", "ab"}) {
    tokens.push_back(fb::CreateTokenBytes(fbb, fbb.CreateVector(U8(t), std::strlen(t))));
  }
  const std::vector<fb::TokenMerge> merges = {fb::TokenMerge(0, 1, 2)};
  fbb.Finish(fb::CreateTokenizer(fbb, fb::TokenizerKind::Rwkv, fbb.CreateVector(tokens), -1,
                                 fbb.CreateVectorOfStructs(merges)));
  text::Vocabulary vocab;
  const Status s = text::Vocabulary::Build(flatbuffers::GetRoot<fb::Tokenizer>(fbb.GetBufferPointer()),
                                           8, fbb.GetBufferPointer(), &vocab);
  CHECK(s.message() == "tokenizer: kind Rwkv has merges or added tokens, which only Gpt2Bpe has");
}

TEST_CASE("vocabulary: the incomplete UTF-8 tail of decoded bytes") {
  auto tail = [](const std::string& s) { return text::Utf8IncompleteTail(U8(s), s.size()); };
  CHECK(tail("") == 0);
  CHECK(tail("abc") == 0);
  CHECK(tail("a\xe4") == 1);  // 中 = e4 b8 ad
  CHECK(tail("a\xe4\xb8") == 2);
  CHECK(tail("a\xe4\xb8\xad") == 0);
  CHECK(tail("\xf0\x9f\x98") == 3);  // 😀 = f0 9f 98 80
  CHECK(tail("\xf0\x9f\x98\x80") == 0);
  CHECK(tail("\xc3") == 1);   // é = c3 a9
  CHECK(tail("x\x80") == 0);  // a stray continuation byte: not waiting for more
  CHECK(tail("\xff") == 0);
  CHECK(tail("\xe0\x80") == 0);  // an overlong start never completes
  CHECK(tail("\xed\xa0") == 0);  // a surrogate never completes
  CHECK(tail("\xf4\x90") == 0);  // past U+10FFFF
}

}  // namespace
}  // namespace recur::impl
