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
  if (tokenizer->kind() != fb::TokenizerKind::Rwkv) {
    out->available_ = Unsupported(
        "the model's tokenizer kind %d is not supported by this runtime "
        "(newer model?)",
        int(tokenizer->kind()));
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
  v.base_ = base;
  v.end_of_text_ = eot;
  v.spans_.resize(count);
  v.sorted_.reserve(count);
  for (uint32_t id = 0; id < count; ++id) {
    const fb::TokenBytes* t = tokens->Get(id);
    const flatbuffers::Vector<uint8_t>* bytes = t != nullptr ? t->bytes() : nullptr;
    const uint32_t size = bytes != nullptr ? bytes->size() : 0;
    if (static_cast<int32_t>(id) == eot) {
      if (size != 0) {
        return InvalidModel("tokenizer: token %u is end_of_text, which has no bytes, but it has %u",
                            id, size);
      }
      v.spans_[id] = {0, 0};
      continue;
    }
    if (size == 0) {
      return InvalidModel("tokenizer: token %u has no bytes (only end_of_text may be empty)", id);
    }
    v.spans_[id] = {static_cast<uint32_t>(bytes->data() - base), size};
    v.sorted_.push_back(id);
  }
  std::sort(v.sorted_.begin(), v.sorted_.end(), [&v](uint32_t a, uint32_t b) {
    return BytesLess(v.Bytes(a), v.spans_[a].size, v.Bytes(b), v.spans_[b].size);
  });
  for (size_t i = 1; i < v.sorted_.size(); ++i) {
    const uint32_t a = v.sorted_[i - 1], b = v.sorted_[i];
    if (!BytesLess(v.Bytes(a), v.spans_[a].size, v.Bytes(b), v.spans_[b].size)) {
      return InvalidModel("tokenizer: tokens %u and %u have the same bytes \"%s\"", std::min(a, b),
                          std::max(a, b), EscapeBytes(v.Bytes(a), v.spans_[a].size).c_str());
    }
  }
  // first_[c]: the first sorted token whose first byte is c or more.
  size_t i = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    v.first_[c] = static_cast<uint32_t>(i);
    while (i < v.sorted_.size() && v.Bytes(v.sorted_[i])[0] == c) ++i;
  }
  v.first_[256] = static_cast<uint32_t>(v.sorted_.size());
  *out = std::move(v);
  return Status::Ok();
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

void Vocabulary::LongestMatch(const uint8_t* text, size_t n, int32_t* id, size_t* length) const {
  *id = -1;
  *length = 0;
  // The tokens of sorted_[lo, hi) all start with text[0, k).
  uint32_t lo = first_[text[0]], hi = first_[text[0] + 1];
  for (size_t k = 1; lo < hi; ++k) {
    // A token of exactly those k bytes sorts first.
    if (spans_[sorted_[lo]].size == k) {
      *id = static_cast<int32_t>(sorted_[lo]);
      *length = k;
      ++lo;
    }
    if (k == n || lo == hi) return;
    const uint8_t c = text[k];
    // The rest are longer than k: narrow to those whose byte k is c.
    const uint32_t* begin = sorted_.data() + lo;
    const uint32_t* end = sorted_.data() + hi;
    begin = std::lower_bound(begin, end, c,
                             [this, k](uint32_t t, uint8_t v) { return Bytes(t)[k] < v; });
    end = std::upper_bound(begin, end, c,
                           [this, k](uint8_t v, uint32_t t) { return v < Bytes(t)[k]; });
    lo = static_cast<uint32_t>(begin - sorted_.data());
    hi = static_cast<uint32_t>(end - sorted_.data());
  }
}

Status Vocabulary::Encode(const uint8_t* text, size_t n, int32_t* ids, size_t capacity,
                          size_t* needed) const {
  *needed = 0;
  RECUR_RETURN_IF_ERROR(available_);
  if (text == nullptr && n != 0) return InvalidArgument("text is null");
  if (ids == nullptr && capacity != 0) return InvalidArgument("ids is null");
  size_t count = 0;
  for (size_t pos = 0; pos < n;) {
    int32_t id;
    size_t length;
    LongestMatch(text + pos, n - pos, &id, &length);
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
