// A model's vocabulary (recur.fbs Tokenizer, of kind Rwkv or Gpt2Bpe): token
// ids ↔ bytes. Built and checked once at load, over the token bytes where the
// model file holds them (no copies: an index of offsets, ids in byte order
// and, for Gpt2Bpe, a hash table of the merges), then immutable and shared by
// every caller.
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

  // Encodes text[0, n) (Rwkv: greedy longest match; Gpt2Bpe: byte-level
  // BPE, recur.fbs TokenizerKind): writes the first min(needed, capacity)
  // ids to ids[] (may be null when capacity is 0) and sets *needed to the
  // count of the whole encoding. Allocates nothing, but for a Gpt2Bpe piece
  // longer than kInlinePiece bytes: one buffer of O(its length) for the
  // call. InvalidArgument naming the offset when no token starts with the
  // byte there (Gpt2Bpe: no token is that byte alone, or a piece is longer
  // than 2^31 − 1 bytes).
  Status Encode(const uint8_t* text, size_t n, int32_t* ids, size_t capacity, size_t* needed) const;
  Status Encode(const uint8_t* text, size_t n, std::vector<int32_t>* ids) const;

  // The bytes of ids[0, n) one after another: the first min(needed,
  // capacity) to out[] and the total to *needed. OutOfRange naming the first
  // id outside [0, size()).
  Status Decode(const int32_t* ids, size_t n, uint8_t* out, size_t capacity, size_t* needed) const;
  Status Decode(const int32_t* ids, size_t n, std::string* out) const;

  // Gpt2Bpe pieces up to this many bytes are merged in stack memory.
  static constexpr size_t kInlinePiece = 64;

 private:
  // Token ids in byte order, and where those of each first byte start:
  // sorted[first[b], first[b + 1]) begin with byte b.
  struct PrefixIndex {
    std::vector<uint32_t> sorted;
    uint32_t first[257] = {};
  };
  // A merge in the open-addressing table (rank kEmpty: a free slot).
  struct MergeSlot {
    uint32_t left, right, rank, result;
  };
  struct BpeScratch;
  static constexpr uint32_t kEmpty = 0xffffffffu;
  struct Span {
    uint32_t offset;  // from base_
    uint32_t size;
  };
  const uint8_t* Bytes(uint32_t id) const { return base_ + spans_[id].offset; }
  // Sorts `ids` (of non-empty tokens) into `index`; InvalidModel naming two
  // that have the same bytes (`what` says of which list).
  Status Index(std::vector<uint32_t> ids, const char* what, PrefixIndex* index) const;
  // The longest token of `index` that is a prefix of text[0, n) (n > 0): its
  // id and length, or length 0.
  void LongestMatch(const PrefixIndex& index, const uint8_t* text, size_t n, int32_t* id,
                    size_t* length) const;
  Status BuildBpe(const fb::Tokenizer* tokenizer);
  // The merge of the adjacent tokens (left, right), or null.
  const MergeSlot* FindMerge(uint32_t left, uint32_t right) const;
  // Gpt2Bpe encoding of text[begin, end) (recur.fbs steps 1 to 3; `pass` 0
  // splits on added_raw, 1 on added_normalized, 2 runs the pattern and BPE).
  Status EncodeBpe(const uint8_t* text, size_t begin, size_t end, int pass, BpeScratch* scratch,
                   int32_t* ids, size_t capacity, size_t* count) const;
  // BPE of the piece text[begin, end) (step 3).
  Status MergePiece(const uint8_t* text, size_t begin, size_t end, BpeScratch* scratch,
                    int32_t* ids, size_t capacity, size_t* count) const;

  Status available_ = NoVocabulary();
  fb::TokenizerKind kind_ = fb::TokenizerKind::Rwkv;
  const uint8_t* base_ = nullptr;
  std::vector<Span> spans_;  // by id
  PrefixIndex tokens_;       // Rwkv: every token with bytes
  int32_t end_of_text_ = -1;
  // Gpt2Bpe.
  PrefixIndex added_[2];           // added_raw, added_normalized
  int32_t byte_token_[256] = {};   // the token that is byte b alone, or -1
  std::vector<MergeSlot> merges_;  // open addressing, a power of two of slots
  uint32_t merge_shift_ = 64;      // 64 − log2(merges_.size())
};

// The length of the valid UTF-8 sequence (no overlongs, surrogates or code
// points past U+10FFFF) at s[0, n) (n > 0), or 0; *code_point gets its value.
size_t Utf8SequenceLength(const uint8_t* s, size_t n, uint32_t* code_point);

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
