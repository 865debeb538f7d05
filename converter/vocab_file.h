// Vocabularies for the model file (recur.fbs Tokenizer). Kind Rwkv, from the
// two places it comes in:
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
//
// Byte-level BPE vocabularies (recur.fbs TokenizerKind Gpt2Bpe) come from a
// Hugging Face tokenizer.json (recur-convert --tokenizer tokenizer.json) or a
// GGUF file of tokenizer model "gpt2" (layouts/gguf.cc). Both write the
// tokens in the byte-level alphabet (GPT-2's bytes_to_unicode: byte b is the
// character b for the printable ones, '!' to '~', U+00A1 to U+00AC and U+00AE
// to U+00FF, and U+0100 + n for the n-th of the rest in byte order), which
// ByteLevelToBytes undoes, and the merges as pairs of token texts.
#ifndef RECUR_CONVERTER_VOCAB_FILE_H_
#define RECUR_CONVERTER_VOCAB_FILE_H_

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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

// One GGUF token text of tokenizer model "rwkv" as its bytes. InvalidArgument
// for a \x without two hex digits or a backslash at the end.
Status UnescapeGgufRwkvToken(std::string_view escaped, std::string* out);

// A token text in the byte-level alphabet as its bytes. InvalidArgument for
// text that is not UTF-8 or a character outside the alphabet (named).
Status ByteLevelToBytes(std::string_view text, std::string* out);

// Appends the merge of the tokens whose texts are `left` and `right` to
// vocab->merges, its result the token of text left + right; `id_of` maps
// token texts (byte-level, as the source writes them) to ids.
// InvalidArgument naming a text that is no token.
Status AppendBpeMerge(std::string_view left, std::string_view right,
                      const std::unordered_map<std::string, uint32_t>& id_of,
                      VocabularyDescription* vocab);

// InvalidArgument naming the first merge of vocab->merges whose pair an
// earlier one has (`source` starts the message).
Status CheckBpeMerges(const VocabularyDescription& vocab, const std::string& source);

// Reads a Hugging Face tokenizer.json of a byte-level BPE (model BPE,
// pre-tokenizer ByteLevel, or a Sequence of the GPT-2 pattern's Split and
// ByteLevel, decoder ByteLevel) as a Gpt2Bpe vocabulary. Its added tokens
// keep their ids and their text's bytes; end_of_text is the added token
// "<|endoftext|>", if there is one. Refused with InvalidArgument naming the
// key: another model, pre-tokenizer, normalizer or decoder,
// add_prefix_space, byte_fallback, ignore_merges, dropout, subword affixes,
// added tokens that strip or match single words, ids past
// kMaxVocabularyTokens, tokens outside the byte-level alphabet, merges of
// texts that are no tokens. What recur does not compute but takes: an NFC
// normalizer (recur encodes the text as it is, as llama.cpp does) and a
// post-processor that adds tokens (recur encodes the text alone), each
// with a line in *warnings.
Result<VocabularyDescription> ParseHfTokenizer(std::string_view json_text,
                                               const std::string& source_name,
                                               std::vector<std::string>* warnings);

// --tokenizer's file: a tokenizer.json (a name ending in .json) or the rwkv
// text format; messages name its base name.
Result<VocabularyDescription> ReadVocabularyFile(const std::string& path,
                                                 std::vector<std::string>* warnings);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_VOCAB_FILE_H_
