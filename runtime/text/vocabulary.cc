#include "text/vocabulary.h"

#include <algorithm>
#include <cstring>

namespace recur::impl::text {

namespace {

// a < b in byte order (a prefix before its extensions).
bool BytesLess(const uint8_t* a, size_t na, const uint8_t* b, size_t nb) {
  const int c = std::memcmp(a, b, std::min(na, nb));
  return c != 0 ? c < 0 : na < nb;
}

// The GPT-2 pattern's character classes (recur.fbs Gpt2Bpe step 2).
enum CharClass : uint32_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

constexpr uint32_t kClassStarts[] = {
#include "text/unicode_classes.inc"
};

CharClass ClassOf(uint32_t cp) {
  const uint32_t* end = kClassStarts + sizeof(kClassStarts) / sizeof(kClassStarts[0]);
  const uint32_t* it = std::upper_bound(kClassStarts, end, cp << 2 | 3);
  return static_cast<CharClass>(it[-1] & 3);
}

// One character of the text: its bytes and class. A byte that begins no
// valid UTF-8 sequence is a character of its own, of class kOther.
struct Char {
  uint32_t cp;  // 0xffffffff for such a byte
  size_t length;
  CharClass cls;
};

Char ReadChar(const uint8_t* s, size_t n) {
  if (s[0] < 0x80) {
    const uint8_t c = s[0];
    const CharClass cls = (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? kLetter
                          : c >= '0' && c <= '9'                 ? kNumber
                          : c == ' ' || (c >= 9 && c <= 13)      ? kSpace
                                                                 : kOther;
    return {c, 1, cls};
  }
  uint32_t cp = 0;
  const size_t length = Utf8SequenceLength(s, n, &cp);
  if (length == 0) return {0xffffffffu, 1, kOther};
  return {cp, length, ClassOf(cp)};
}

// The byte length of the GPT-2 pattern's match at s[0, n) (n > 0):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t NextPiece(const uint8_t* s, size_t n) {
  if (s[0] == '\'' && n >= 2) {
    const uint8_t a = s[1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (n >= 3 && ((a == 'r' && s[2] == 'e') || (a == 'v' && s[2] == 'e') ||
                   (a == 'l' && s[2] == 'l'))) {
      return 3;
    }
  }
  const Char c0 = ReadChar(s, n);
  size_t pos = 0;
  CharClass run = c0.cls;
  if (c0.cls == kSpace && c0.cp == ' ' && n > 1) {
    const Char c1 = ReadChar(s + 1, n - 1);
    if (c1.cls != kSpace) {  // " ?" then a run of c1's class
      pos = 1;
      run = c1.cls;
    }
  }
  if (run != kSpace) {
    while (pos < n) {
      const Char c = ReadChar(s + pos, n - pos);
      if (c.cls != run) break;
      pos += c.length;
    }
    return pos;
  }
  // A run of whitespace: to the end of the text, or all of it but its last
  // character when more follows (\s+(?!\S)), or its one character (\s+).
  size_t last = 0;
  pos = c0.length;
  while (pos < n) {
    const Char c = ReadChar(s + pos, n - pos);
    if (c.cls != kSpace) return last > 0 ? last : pos;
    last = pos;
    pos += c.length;
  }
  return pos;
}

}  // namespace

Status NoVocabulary() {
  return InvalidArgument(
      "the model has no vocabulary (convert it with one: recur-convert --tokenizer, a config's "
      "\"tokenizer\", or a GGUF file's)");
}

std::string EscapeBytes(const uint8_t* bytes, size_t n, size_t limit) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (s.size() >= limit) return s + "...";
    const uint8_t c = bytes[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      s += static_cast<char>(c);
    } else {
      s += "\\x";
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
  }
  return s;
}

Status Vocabulary::Build(const fb::Tokenizer* tokenizer, uint32_t vocab_size, const uint8_t* base,
                         Vocabulary* out) {
  *out = Vocabulary();
  if (tokenizer == nullptr) return Status::Ok();
  const fb::TokenizerKind kind = tokenizer->kind();
  if (kind != fb::TokenizerKind::Rwkv && kind != fb::TokenizerKind::Gpt2Bpe) {
    out->available_ = Unsupported(
        "the model's tokenizer kind %d is not supported by this runtime "
        "(newer model?)",
        int(kind));
    return Status::Ok();
  }
  if (vocab_size == 0) {
    return InvalidModel(
        "tokenizer: the model takes feature frames, not token ids, but has a "
        "vocabulary");
  }
  const auto* tokens = tokenizer->tokens();
  if (tokens == nullptr || tokens->size() == 0) return InvalidModel("tokenizer has no tokens");
  if (tokens->size() > vocab_size) {
    return InvalidModel("tokenizer has %u tokens, more than the model's vocab_size (%u)",
                        tokens->size(), vocab_size);
  }
  const uint32_t count = tokens->size();
  const int32_t eot = tokenizer->end_of_text();
  if (eot < -1 || eot >= static_cast<int64_t>(count)) {
    return InvalidModel(
        "tokenizer: end_of_text is %d, not a token id (the vocabulary has %u "
        "tokens) or -1",
        eot, count);
  }
  Vocabulary v;
  v.available_ = Status::Ok();
  v.kind_ = kind;
  v.base_ = base;
  v.end_of_text_ = eot;
  v.spans_.resize(count);
  for (uint32_t id = 0; id < count; ++id) {
    const fb::TokenBytes* t = tokens->Get(id);
    const flatbuffers::Vector<uint8_t>* bytes = t != nullptr ? t->bytes() : nullptr;
    const uint32_t size = bytes != nullptr ? bytes->size() : 0;
    v.spans_[id] = {size != 0 ? static_cast<uint32_t>(bytes->data() - base) : 0, size};
  }
  if (kind == fb::TokenizerKind::Gpt2Bpe) {
    RECUR_RETURN_IF_ERROR(v.BuildBpe(tokenizer));
    *out = std::move(v);
    return Status::Ok();
  }
  const bool bpe_fields = (tokenizer->merges() != nullptr && tokenizer->merges()->size() != 0) ||
                          (tokenizer->added_raw() != nullptr && tokenizer->added_raw()->size() != 0) ||
                          (tokenizer->added_normalized() != nullptr &&
                           tokenizer->added_normalized()->size() != 0);
  if (bpe_fields) {
    return InvalidModel("tokenizer: kind Rwkv has merges or added tokens, which only Gpt2Bpe has");
  }
  std::vector<uint32_t> with_bytes;
  with_bytes.reserve(count);
  for (uint32_t id = 0; id < count; ++id) {
    const uint32_t size = v.spans_[id].size;
    if (static_cast<int32_t>(id) == eot) {
      if (size != 0) {
        return InvalidModel("tokenizer: token %u is end_of_text, which has no bytes, but it has %u",
                            id, size);
      }
      continue;
    }
    if (size == 0) {
      return InvalidModel("tokenizer: token %u has no bytes (only end_of_text may be empty)", id);
    }
    with_bytes.push_back(id);
  }
  RECUR_RETURN_IF_ERROR(v.Index(std::move(with_bytes), "tokens", &v.tokens_));
  *out = std::move(v);
  return Status::Ok();
}

Status Vocabulary::Index(std::vector<uint32_t> ids, const char* what, PrefixIndex* index) const {
  std::sort(ids.begin(), ids.end(), [this](uint32_t a, uint32_t b) {
    return BytesLess(Bytes(a), spans_[a].size, Bytes(b), spans_[b].size);
  });
  for (size_t i = 1; i < ids.size(); ++i) {
    const uint32_t a = ids[i - 1], b = ids[i];
    if (!BytesLess(Bytes(a), spans_[a].size, Bytes(b), spans_[b].size)) {
      const std::string bytes = EscapeBytes(Bytes(a), spans_[a].size);
      if (a == b) return InvalidModel("tokenizer: %s lists token %u twice", what, a);
      return InvalidModel("tokenizer: %s %u and %u have the same bytes \"%s\"", what,
                          std::min(a, b), std::max(a, b), bytes.c_str());
    }
  }
  // first[c]: the first sorted token whose first byte is c or more.
  size_t i = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    index->first[c] = static_cast<uint32_t>(i);
    while (i < ids.size() && Bytes(ids[i])[0] == c) ++i;
  }
  index->first[256] = static_cast<uint32_t>(ids.size());
  index->sorted = std::move(ids);
  return Status::Ok();
}

Status Vocabulary::BuildBpe(const fb::Tokenizer* tokenizer) {
  const uint32_t count = size();
  std::vector<uint8_t> added(count, 0);
  const flatbuffers::Vector<uint32_t>* lists[2] = {tokenizer->added_raw(),
                                                    tokenizer->added_normalized()};
  const char* names[2] = {"added_raw", "added_normalized"};
  for (int l = 0; l < 2; ++l) {
    std::vector<uint32_t> ids;
    const uint32_t n = lists[l] != nullptr ? lists[l]->size() : 0;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t id = lists[l]->Get(i);
      if (id >= count) {
        return InvalidModel("tokenizer: %s[%u] is %u, not a token id (the vocabulary has %u tokens)",
                            names[l], i, id, count);
      }
      if (spans_[id].size == 0) {
        return InvalidModel("tokenizer: %s[%u] is token %u, which has no bytes", names[l], i, id);
      }
      added[id] = 1;
      ids.push_back(id);
    }
    RECUR_RETURN_IF_ERROR(Index(std::move(ids), names[l], &added_[l]));
  }
  // The tokens that are not added: bytes unique, and the one-byte ones.
  std::vector<uint32_t> plain;
  std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
  for (uint32_t id = 0; id < count; ++id) {
    if (added[id] || spans_[id].size == 0) continue;
    plain.push_back(id);
    if (spans_[id].size == 1) byte_token_[Bytes(id)[0]] = static_cast<int32_t>(id);
  }
  PrefixIndex unique;
  RECUR_RETURN_IF_ERROR(Index(std::move(plain), "tokens", &unique));

  const auto* merges = tokenizer->merges();
  const uint32_t n = merges != nullptr ? merges->size() : 0;
  if (n == 0) return Status::Ok();
  size_t slots = 2;
  uint32_t bits = 1;
  while (slots < size_t{n} + n / 2 + 1) {
    slots *= 2;
    ++bits;
  }
  merges_.assign(slots, MergeSlot{0, 0, kEmpty, 0});
  merge_shift_ = 64 - bits;
  for (uint32_t r = 0; r < n; ++r) {
    const fb::TokenMerge* m = merges->Get(r);
    const uint32_t l = m->left(), rt = m->right(), result = m->result();
    if (l >= count || rt >= count || result >= count) {
      return InvalidModel(
          "tokenizer: merge %u (%u, %u -> %u) names a token id past the vocabulary's %u tokens", r,
          l, rt, result, count);
    }
    const uint32_t nl = spans_[l].size, nr = spans_[rt].size;
    if (nl == 0 || nr == 0 || spans_[result].size != nl + nr ||
        std::memcmp(Bytes(result), Bytes(l), nl) != 0 ||
        std::memcmp(Bytes(result) + nl, Bytes(rt), nr) != 0) {
      return InvalidModel(
          "tokenizer: merge %u makes token %u (\"%s\") of tokens %u (\"%s\") and %u (\"%s\"), "
          "whose bytes together are not its bytes",
          r, result, EscapeBytes(Bytes(result), spans_[result].size).c_str(), l,
          EscapeBytes(Bytes(l), nl).c_str(), rt, EscapeBytes(Bytes(rt), nr).c_str());
    }
    const uint64_t key = (uint64_t{l} << 32 | rt) * 0x9e3779b97f4a7c15ull;
    size_t slot = static_cast<size_t>(key >> merge_shift_);
    while (merges_[slot].rank != kEmpty) {
      if (merges_[slot].left == l && merges_[slot].right == rt) {
        return InvalidModel("tokenizer: merge %u repeats merge %u (tokens %u and %u)", r,
                            merges_[slot].rank, l, rt);
      }
      slot = (slot + 1) & (slots - 1);
    }
    merges_[slot] = {l, rt, r, result};
  }
  return Status::Ok();
}

const Vocabulary::MergeSlot* Vocabulary::FindMerge(uint32_t left, uint32_t right) const {
  if (merges_.empty()) return nullptr;
  const uint64_t key = (uint64_t{left} << 32 | right) * 0x9e3779b97f4a7c15ull;
  for (size_t slot = static_cast<size_t>(key >> merge_shift_);;
       slot = (slot + 1) & (merges_.size() - 1)) {
    const MergeSlot& m = merges_[slot];
    if (m.rank == kEmpty) return nullptr;
    if (m.left == left && m.right == right) return &m;
  }
}

Status Vocabulary::TokenBytes(int64_t id, const uint8_t** data, size_t* length) const {
  RECUR_RETURN_IF_ERROR(available_);
  if (id < 0 || id >= static_cast<int64_t>(spans_.size())) {
    return OutOfRange("token id %lld is not in the vocabulary (ids 0 to %u)",
                      static_cast<long long>(id), size() - 1);
  }
  *data = Bytes(static_cast<uint32_t>(id));
  *length = spans_[id].size;
  return Status::Ok();
}

void Vocabulary::LongestMatch(const PrefixIndex& index, const uint8_t* text, size_t n, int32_t* id,
                              size_t* length) const {
  *id = -1;
  *length = 0;
  const std::vector<uint32_t>& sorted = index.sorted;
  // The tokens of sorted[lo, hi) all start with text[0, k).
  uint32_t lo = index.first[text[0]], hi = index.first[text[0] + 1];
  for (size_t k = 1; lo < hi; ++k) {
    // A token of exactly those k bytes sorts first.
    if (spans_[sorted[lo]].size == k) {
      *id = static_cast<int32_t>(sorted[lo]);
      *length = k;
      ++lo;
    }
    if (k == n || lo == hi) return;
    const uint8_t c = text[k];
    // The rest are longer than k: narrow to those whose byte k is c.
    const uint32_t* begin = sorted.data() + lo;
    const uint32_t* end = sorted.data() + hi;
    begin = std::lower_bound(begin, end, c,
                             [this, k](uint32_t t, uint8_t v) { return Bytes(t)[k] < v; });
    end = std::upper_bound(begin, end, c,
                           [this, k](uint8_t v, uint32_t t) { return v < Bytes(t)[k]; });
    lo = static_cast<uint32_t>(begin - sorted.data());
    hi = static_cast<uint32_t>(end - sorted.data());
  }
}

// The working memory of one piece's merges: its symbols, a linked list over
// the piece's bytes, and a min-heap of candidate merges (at most 3 per byte:
// one per adjacent pair at the start, two per merge done).
struct Vocabulary::BpeScratch {
  struct Symbol {
    int32_t id;  // -1: merged into the symbol before it
    int32_t prev, next;
  };
  struct Candidate {
    uint32_t rank, pos, result;
    // std::push_heap keeps the greatest first: the lowest rank, then position.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  Symbol inline_symbols[kInlinePiece];
  Candidate inline_heap[3 * kInlinePiece];
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;

  // Room for a piece of n bytes.
  void Reserve(size_t n, Symbol** s, Candidate** h) {
    if (n <= kInlinePiece) {
      *s = inline_symbols;
      *h = inline_heap;
      return;
    }
    if (symbols.size() < n) {
      symbols.resize(n);
      heap.resize(3 * n);
    }
    *s = symbols.data();
    *h = heap.data();
  }
};

Status Vocabulary::MergePiece(const uint8_t* text, size_t begin, size_t end, BpeScratch* scratch,
                              int32_t* ids, size_t capacity, size_t* count) const {
  const size_t n = end - begin;
  if (n > 0x7fffffff) {
    return InvalidArgument(
        "the text has a piece (a word, a run of spaces) of %zu bytes at offset %zu, past the "
        "2^31 - 1 byte-level BPE reads",
        n, begin);
  }
  BpeScratch::Symbol* sym;
  BpeScratch::Candidate* heap;
  scratch->Reserve(n, &sym, &heap);
  size_t heap_size = 0;
  auto push = [&](uint32_t pos) {
    const MergeSlot* m = FindMerge(static_cast<uint32_t>(sym[pos].id),
                                   static_cast<uint32_t>(sym[sym[pos].next].id));
    if (m == nullptr) return;
    heap[heap_size++] = {m->rank, pos, m->result};
    std::push_heap(heap, heap + heap_size);
  };
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = byte_token_[text[begin + i]];
    if (id < 0) {
      return InvalidArgument("no token of the vocabulary is byte 0x%02x alone (offset %zu)",
                             text[begin + i], begin + i);
    }
    sym[i] = {id, static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  }
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<uint32_t>(i));
  // Hugging Face tokenizers' Word::merge_all: the best candidate, skipped
  // when its pair has changed since it was pushed.
  while (heap_size > 0) {
    std::pop_heap(heap, heap + heap_size);
    const BpeScratch::Candidate top = heap[--heap_size];
    BpeScratch::Symbol& s = sym[top.pos];
    if (s.id < 0 || s.next < 0) continue;
    const MergeSlot* now =
        FindMerge(static_cast<uint32_t>(s.id), static_cast<uint32_t>(sym[s.next].id));
    if (now == nullptr || now->result != top.result) continue;
    const int32_t right = s.next;
    s.id = static_cast<int32_t>(top.result);
    s.next = sym[right].next;
    sym[right].id = -1;
    if (s.next >= 0) sym[s.next].prev = static_cast<int32_t>(top.pos);
    if (s.prev >= 0) push(static_cast<uint32_t>(s.prev));
    if (s.next >= 0) push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    if (*count < capacity) ids[*count] = sym[i].id;
    ++*count;
  }
  return Status::Ok();
}

Status Vocabulary::EncodeBpe(const uint8_t* text, size_t begin, size_t end, int pass,
                             BpeScratch* scratch, int32_t* ids, size_t capacity,
                             size_t* count) const {
  if (pass == 2) {
    for (size_t pos = begin; pos < end;) {
      const size_t length = NextPiece(text + pos, end - pos);
      RECUR_RETURN_IF_ERROR(MergePiece(text, pos, pos + length, scratch, ids, capacity, count));
      pos += length;
    }
    return Status::Ok();
  }
  const PrefixIndex& index = added_[pass];
  size_t gap = begin;
  for (size_t pos = begin; pos < end;) {
    int32_t id = -1;
    size_t length = 0;
    if (index.first[text[pos]] != index.first[text[pos] + 1]) {
      LongestMatch(index, text + pos, end - pos, &id, &length);
    }
    if (length == 0) {
      ++pos;
      continue;
    }
    RECUR_RETURN_IF_ERROR(EncodeBpe(text, gap, pos, pass + 1, scratch, ids, capacity, count));
    if (*count < capacity) ids[*count] = id;
    ++*count;
    pos += length;
    gap = pos;
  }
  return EncodeBpe(text, gap, end, pass + 1, scratch, ids, capacity, count);
}

Status Vocabulary::Encode(const uint8_t* text, size_t n, int32_t* ids, size_t capacity,
                          size_t* needed) const {
  *needed = 0;
  RECUR_RETURN_IF_ERROR(available_);
  if (text == nullptr && n != 0) return InvalidArgument("text is null");
  if (ids == nullptr && capacity != 0) return InvalidArgument("ids is null");
  size_t count = 0;
  if (kind_ == fb::TokenizerKind::Gpt2Bpe) {
    BpeScratch scratch;
    RECUR_RETURN_IF_ERROR(EncodeBpe(text, 0, n, 0, &scratch, ids, capacity, &count));
    *needed = count;
    return Status::Ok();
  }
  for (size_t pos = 0; pos < n;) {
    int32_t id;
    size_t length;
    LongestMatch(tokens_, text + pos, n - pos, &id, &length);
    if (length == 0) {
      return InvalidArgument("no token of the vocabulary starts with byte 0x%02x at offset %zu",
                             text[pos], pos);
    }
    if (count < capacity) ids[count] = id;
    ++count;
    pos += length;
  }
  *needed = count;
  return Status::Ok();
}

Status Vocabulary::Encode(const uint8_t* text, size_t n, std::vector<int32_t>* ids) const {
  size_t needed = 0;
  ids->clear();
  RECUR_RETURN_IF_ERROR(Encode(text, n, nullptr, 0, &needed));
  ids->resize(needed);
  return Encode(text, n, ids->data(), ids->size(), &needed);
}

Status Vocabulary::Decode(const int32_t* ids, size_t n, uint8_t* out, size_t capacity,
                          size_t* needed) const {
  *needed = 0;
  RECUR_RETURN_IF_ERROR(available_);
  if (ids == nullptr && n != 0) return InvalidArgument("ids is null");
  if (out == nullptr && capacity != 0) return InvalidArgument("out is null");
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* bytes;
    size_t size;
    Status s = TokenBytes(ids[i], &bytes, &size);
    if (!s.ok()) return s.WithContext("ids[" + std::to_string(i) + "]");
    if (total < capacity) std::memcpy(out + total, bytes, std::min(size, capacity - total));
    total += size;
  }
  *needed = total;
  return Status::Ok();
}

Status Vocabulary::Decode(const int32_t* ids, size_t n, std::string* out) const {
  size_t needed = 0;
  out->clear();
  RECUR_RETURN_IF_ERROR(Decode(ids, n, nullptr, 0, &needed));
  out->resize(needed);
  return Decode(ids, n, reinterpret_cast<uint8_t*>(out->data()), out->size(), &needed);
}

size_t Utf8SequenceLength(const uint8_t* s, size_t n, uint32_t* code_point) {
  const uint8_t c = s[0];
  if (c < 0x80) {
    *code_point = c;
    return 1;
  }
  size_t length;
  uint8_t low = 0x80, high = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    length = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    length = 3;
    if (c == 0xe0) low = 0xa0;
    if (c == 0xed) high = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    length = 4;
    if (c == 0xf0) low = 0x90;
    if (c == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (n < length || s[1] < low || s[1] > high) return 0;
  uint32_t cp = c & (0x7f >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  *code_point = cp;
  return length;
}

size_t Utf8IncompleteTail(const uint8_t* s, size_t n) {
  // The last lead byte among the final four, and the sequence length it starts.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const uint8_t c = s[n - back];
    if ((c & 0xc0) == 0x80) continue;  // a continuation byte
    size_t length;
    if (c >= 0xc2 && c <= 0xdf) {
      length = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      length = 3;
    } else if (c >= 0xf0 && c <= 0xf4) {
      length = 4;
    } else {
      return 0;  // ASCII, or a byte that starts no sequence
    }
    if (back >= length) return 0;  // complete (or too long: not ours to hold back)
    // The second byte's range for the leads that narrow it (no overlongs,
    // surrogates or code points past U+10FFFF).
    if (back >= 2) {
      const uint8_t d = s[n - back + 1];
      const uint8_t low = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
      const uint8_t high = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
      if (d < low || d > high) return 0;
    }
    return back;
  }
  return 0;
}

}  // namespace recur::impl::text
