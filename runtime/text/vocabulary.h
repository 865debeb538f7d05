// A model's vocabulary (recur.fbs Tokenizer): token ids ↔ bytes. Built and
// checked once at load, over the token bytes where the model file holds
// them (no copies: an index of offsets and one of the ids in byte order),
// then immutable and shared by every caller.
#ifndef RECUR_TEXT_VOCABULARY_H_
#define RECUR_TEXT_VOCABULARY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "schema/recur_generated.h"

namespace recur::impl::text {

// The error of a model without a vocabulary (InvalidArgument).
Status NoVocabulary();

class Vocabulary {
 public:
  // Reads `tokenizer` (null: the model has none) of a model whose inputs are
  // token ids in [0, vocab_size) (0: feature inputs, which take no
  // vocabulary). `base` is the start of the model bytes, which hold the
  // token bytes and must outlive the vocabulary. InvalidModel naming the
  // problem (an empty or repeated token, a count past vocab_size, ...); a
  // kind this runtime does not know is not an error: the vocabulary is then
  // absent and its calls say so (Unsupported).
  static Status Build(const fb::Tokenizer* tokenizer, uint32_t vocab_size, const uint8_t* base,
                      Vocabulary* out);

  // Ok when the model has a vocabulary, else the error every call below
  // returns (InvalidArgument "the model has no vocabulary ...", or
  // Unsupported for a kind this runtime does not know).
  const Status& available() const { return available_; }
  // Tokens with ids (0 when absent).
  uint32_t size() const { return static_cast<uint32_t>(spans_.size()); }
  int32_t end_of_text() const { return end_of_text_; }

  // Token `id`'s bytes (none for end_of_text). OutOfRange for an id outside
  // [0, size()).
  Status TokenBytes(int64_t id, const uint8_t** data, size_t* length) const;

  // Greedy longest match of text[0, n): writes the first min(needed,
  // capacity) ids to ids[] (may be null when capacity is 0) and sets *needed
  // to the count of the whole encoding. Allocates nothing. InvalidArgument
  // naming the offset when no token starts with the byte there.
  Status Encode(const uint8_t* text, size_t n, int32_t* ids, size_t capacity, size_t* needed) const;
  Status Encode(const uint8_t* text, size_t n, std::vector<int32_t>* ids) const;

  // The bytes of ids[0, n) one after another: the first min(needed,
  // capacity) to out[] and the total to *needed. OutOfRange naming the first
  // id outside [0, size()).
  Status Decode(const int32_t* ids, size_t n, uint8_t* out, size_t capacity, size_t* needed) const;
  Status Decode(const int32_t* ids, size_t n, std::string* out) const;

 private:
  struct Span {
    uint32_t offset;  // from base_
    uint32_t size;
  };
  const uint8_t* Bytes(uint32_t id) const { return base_ + spans_[id].offset; }
  // The longest token that is a prefix of text[0, n) (n > 0): its id and
  // length, or length 0.
  void LongestMatch(const uint8_t* text, size_t n, int32_t* id, size_t* length) const;

  Status available_ = NoVocabulary();
  const uint8_t* base_ = nullptr;
  std::vector<Span> spans_;       // by id
  std::vector<uint32_t> sorted_;  // the ids with bytes, in byte order
  uint32_t first_[257] = {};      // sorted_[first_[b], first_[b + 1]): tokens starting with b
  int32_t end_of_text_ = -1;
};

// The bytes at the end of s[0, n) that begin a UTF-8 sequence the text does
// not finish yet (0 to 3): what a caller printing decoded tokens as they come
// holds back until the next token's bytes. 0 when the end is complete or not
// UTF-8 at all (those bytes will not become valid by waiting).
size_t Utf8IncompleteTail(const uint8_t* s, size_t n);

// `bytes` for messages: printable ASCII as is, anything else as \xHH, at
// most about `limit` characters ("..." after).
std::string EscapeBytes(const uint8_t* bytes, size_t n, size_t limit = 40);

}  // namespace recur::impl::text

#endif  // RECUR_TEXT_VOCABULARY_H_
