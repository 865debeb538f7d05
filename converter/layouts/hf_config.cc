#include "converter/layouts/hf_config.h"

#include <string>

namespace recur::impl::converter {
namespace {

const char* const kPretrainedConfigKeys[] = {
    "_attn_implementation_autoset",
    "_name_or_path",
    "bad_words_ids",
    "begin_suppress_tokens",
    "bos_token_id",
    "chunk_size_feed_forward",
    "cross_attention_hidden_size",
    "decoder_start_token_id",
    "diversity_penalty",
    "do_sample",
    "early_stopping",
    "encoder_no_repeat_ngram_size",
    "eos_token_id",
    "exponential_decay_length_penalty",
    "finetuning_task",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "hidden_dropout_prob",
    "id2label",
    "initializer_range",
    "is_encoder_decoder",
    "label2id",
    "length_penalty",
    "max_length",
    "min_length",
    "model_type",
    "no_repeat_ngram_size",
    "num_beam_groups",
    "num_beams",
    "num_return_sequences",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "prefix",
    "problem_type",
    "remove_invalid_values",
    "repetition_penalty",
    "return_dict",
    "return_dict_in_generate",
    "sep_token_id",
    "suppress_tokens",
    "task_specific_params",
    "temperature",
    "tf_legacy_loss",
    "tie_encoder_decoder",
    "tie_word_embeddings",
    "tokenizer_class",
    "top_k",
    "top_p",
    "torch_dtype",
    "torchscript",
    "transformers_version",
    "typical_p",
    "use_bfloat16",
};

bool In(const std::string& key, std::initializer_list<const char*> list) {
  for (const char* k : list) {
    if (key == k) return true;
  }
  return false;
}

}  // namespace

Status CheckTransformersKeys(const KeyReader& r, const nlohmann::json& root,
                             std::initializer_list<const char*> model_keys,
                             std::initializer_list<const char*> ignored_keys,
                             const char* config_class) {
  for (const auto& item : root.items()) {
    bool known = In(item.key(), model_keys) || In(item.key(), ignored_keys);
    for (const char* k : kPretrainedConfigKeys) known = known || item.key() == k;
    if (!known) {
      return r.Invalid(item.key(), std::string("is not a ") + config_class +
                                       " key this converter knows (a newer transformers "
                                       "option, or a typo)");
    }
  }
  return Status::Ok();
}

std::string RenamedSource(const std::string& layer, const std::string& rest,
                          std::initializer_list<std::pair<const char*, const char*>> names) {
  for (const auto& [recur, hf] : names) {
    const std::string prefix = recur;
    if (rest.compare(0, prefix.size(), prefix) == 0) return layer + hf + rest.substr(prefix.size());
  }
  return layer + rest;
}

}  // namespace recur::impl::converter
