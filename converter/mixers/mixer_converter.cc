#include "converter/mixers/mixer_converter.h"

#include <string>

#include "converter/json_util.h"

namespace recur::impl::converter {

Status MixerConfig::OnlyKeys(std::initializer_list<const char*> keys) const {
  for (const auto& item : object.items()) {
    bool known = false;
    for (const char* k : keys) known = known || item.key() == k;
    if (!known) {
      std::string list;
      for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
      return Invalid(item.key(), "does not apply to " + type + " (its keys: " + list + ")");
    }
  }
  return Status::Ok();
}

Status MixerConfig::Heads(uint32_t* heads, uint32_t* dk, uint32_t* dv) const {
  RECUR_RETURN_IF_ERROR(UInt("heads", 1, heads));
  RECUR_RETURN_IF_ERROR(UInt("dk", 1, dk));
  if (dv) RECUR_RETURN_IF_ERROR(UInt("dv", 1, dv));
  return Status::Ok();
}

Status MixerConfig::Causal(bool* causal) const {
  return reader.Bool(object, "causal", where, causal, /*required=*/false);
}

void MixerTensors::Add(const std::string& name, std::vector<int64_t> shape) {
  out_->emplace_back(prefix_ + name, std::move(shape));
}

void MixerTensors::AddDense(const std::string& name, int64_t rows, int64_t cols) {
  Add(name + ".weight", {rows, cols});
  Add(name + ".bias", {rows});
}

void MixerTensors::AddAttentionProjections(int64_t qk_width, int64_t v_width, bool with_key) {
  AddDense("query", qk_width, d_model_);
  if (with_key) AddDense("key", qk_width, d_model_);
  AddDense("value", v_width, d_model_);
  AddDense("out", d_model_, v_width);
}

int32_t MixerTableWriter::Ref(const std::string& name) const {
  auto it = index_->find(prefix_ + name);
  return it == index_->end() ? -1 : it->second;
}

flatbuffers::Offset<fb::Dense> MixerTableWriter::Dense(const std::string& name) {
  return fb::CreateDense(*fbb_, Ref(name + ".weight"), Ref(name + ".bias"));
}

nlohmann::ordered_json TensorRefs::Ref(int32_t index) const {
  if (index < 0) return nullptr;
  const auto* tensors = model_->tensors();
  if (static_cast<uint32_t>(index) >= tensors->size()) return "invalid #" + std::to_string(index);
  return tensors->Get(static_cast<uint32_t>(index))->name()->str();
}

nlohmann::ordered_json TensorRefs::Dense(const fb::Dense* dense) const {
  if (!dense) return nullptr;
  return {{"weight", Ref(dense->weight())}, {"bias", Ref(dense->bias())}};
}

std::string InspectFields(const nlohmann::ordered_json& mixer,
                          std::initializer_list<const char*> keys) {
  std::string text;
  for (const char* key : keys) {
    const nlohmann::ordered_json& value = mixer.at(key);
    text += std::string(" ") + key + "=";
    if (value.is_string()) {
      text += value.get<std::string>();
    } else if (value.is_number_float()) {
      text += FormatFloat(value.get<float>());
    } else {
      text += std::to_string(value.get<uint64_t>());
    }
  }
  return text;
}

std::string InspectEncoderNote(const nlohmann::ordered_json& mixer) {
  return mixer.value("causal", true) ? "" : " non-causal (encoder)";
}

}  // namespace recur::impl::converter
