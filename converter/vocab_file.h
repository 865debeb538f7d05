// Vocabularies for the model file (recur.fbs Tokenizer, kind Rwkv) from the
// two places they come in:
//
// The rwkv package's text format (its rwkv_vocab_v20230424.txt, what
// TRIE_TOKENIZER reads; recur-convert --tokenizer, a recur config's
// "tokenizer"): one token a line,
//     ID LITERAL BYTE_LENGTH
// ID a decimal id, LITERAL a Python str or bytes literal ('a', "'", b'\xe4',
// '\u2002': what repr() writes), whose bytes (a str's as UTF-8) are the
// token's, and BYTE_LENGTH their count. The ids count up by one from 1 (id 0
// is then the end-of-text token, with no bytes, as in RWKV's World
// vocabulary) or from 0 (no end-of-text token). Refused, naming the line: a
// malformed literal or one Python would not read (raw, f- or u-prefixed,
// \N{...}, a surrogate), a byte length that differs, ids out of order, an
// empty or repeated token, text that is not UTF-8.
//
// llama.cpp's GGUF token text for tokenizer model "rwkv": repr(bytes)[2:-1]
// (its convert_hf_to_gguf.py), undone as its llama_unescape_rwkv_token
// does (\t, \n, \r, \xHH; a backslash before any other character stands for
// that character).
#ifndef RECUR_CONVERTER_VOCAB_FILE_H_
#define RECUR_CONVERTER_VOCAB_FILE_H_

#include <string>
#include <string_view>

#include "converter/model_description.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

// The most tokens a vocabulary may have: the model's widths' bound
// (model/model.h kMaxWidth).
inline constexpr uint32_t kMaxVocabularyTokens = 1u << 20;

// Parses the rwkv text format. Errors (InvalidArgument) start with
// "<source_name> line <n>: ".
Result<VocabularyDescription> ParseRwkvVocabulary(std::string_view text,
                                                  const std::string& source_name);
// Reads and parses a file of that format; messages name its base name.
Result<VocabularyDescription> ReadRwkvVocabularyFile(const std::string& path);

// One GGUF token text of tokenizer model "rwkv" as its bytes. InvalidArgument
// for a \x without two hex digits or a backslash at the end.
Status UnescapeGgufRwkvToken(std::string_view escaped, std::string* out);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_VOCAB_FILE_H_
