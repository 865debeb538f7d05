#include "converter/mixers/mixer_converter.h"

#include <cmath>
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

Status MixerConfig::Rotary(uint32_t width, const char* width_key, RotaryDescription* out) const {
  auto it = object.find("rotary");
  if (it == object.end()) return Status::Ok();
  const std::string at = where + ".rotary";
  if (!it->is_object()) return reader.Invalid(at, "must be a JSON object");
  RECUR_RETURN_IF_ERROR(reader.OnlyKeys(*it, at, {"dims", "pairs", "base", "theta", "table"}));
  RotaryDescription r;
  RECUR_RETURN_IF_ERROR(reader.UInt(*it, "dims", at, 1, &r.dims));
  if (r.dims % 2 != 0 || r.dims > width) {
    return reader.Invalid(at + ".dims", "must be even and at most " + std::string(width_key) +
                                            " (" + std::to_string(width) + "), got " +
                                            std::to_string(r.dims));
  }
  static const char* const kPairs[] = {"interleaved", "half"};
  std::size_t pairs = 0;
  RECUR_RETURN_IF_ERROR(reader.Choice(*it, "pairs", at, kPairs, &pairs));
  r.half = pairs == 1;
  if (auto base = it->find("base"); base != it->end()) {
    if (!base->is_number() || !std::isfinite(base->get<double>()) || !(base->get<double>() > 0)) {
      return reader.Invalid(at + ".base", "must be a finite positive number");
    }
    r.base = base->get<double>();
  }
  static const char* const kTheta[] = {"base", "stored"};
  std::size_t theta = 0;
  RECUR_RETURN_IF_ERROR(reader.Choice(*it, "theta", at, kTheta, &theta, /*required=*/false));
  r.theta = theta == 1;
  RECUR_RETURN_IF_ERROR(reader.UInt(*it, "table", at, 1, &r.table_rows, /*required=*/false));
  if (r.table_rows > (1u << 31)) return reader.Invalid(at + ".table", "must be at most 2^31");
  if (r.theta && r.table_rows != 0) {
    return reader.Invalid(at + ".table",
                          "excludes \"theta\": \"stored\" (the table holds the angles)");
  }
  *out = r;
  return Status::Ok();
}

void MixerTensors::Add(const std::string& name, std::vector<int64_t> shape) {
  out_->emplace_back(prefix_ + name, std::move(shape));
}

void MixerTensors::AddRotary(const RotaryDescription& rotary) {
  if (rotary.theta) Add("rotary.theta", {rotary.dims / 2});
  if (rotary.table_rows != 0) Add("rotary.table", {rotary.table_rows, rotary.dims});
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

flatbuffers::Offset<fb::Rotary> MixerTableWriter::Rotary(const RotaryDescription& r) {
  if (r.dims == 0) return 0;
  return fb::CreateRotary(*fbb_, r.dims, r.base,
                          r.half ? fb::RotaryPairs::Half : fb::RotaryPairs::Interleaved,
                          Ref("rotary.theta"), Ref("rotary.table"));
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

void DescribeRotary(const fb::Rotary* rotary, const TensorRefs& refs,
                    nlohmann::ordered_json* mixer) {
  if (rotary == nullptr) return;
  nlohmann::ordered_json r = {
      {"dims", rotary->dims()},
      {"pairs", rotary->pairs() == fb::RotaryPairs::Half          ? "half"
                : rotary->pairs() == fb::RotaryPairs::Interleaved ? "interleaved"
                                                                  : "unknown"},
      {"base", rotary->base()}};
  if (rotary->theta() >= 0) r["theta"] = refs.Ref(rotary->theta());
  if (rotary->table() >= 0) r["table"] = refs.Ref(rotary->table());
  (*mixer)["rotary"] = r;
}

std::string InspectRotary(const nlohmann::ordered_json& mixer) {
  if (!mixer.contains("rotary")) return "";
  const nlohmann::ordered_json& r = mixer["rotary"];
  const double base = r["base"].get<double>();
  const std::string base_text = base == std::floor(base) && std::fabs(base) < 1e15
                                    ? std::to_string(static_cast<int64_t>(base))
                                    : nlohmann::json(base).dump();
  // Stored angles make the base unused: the tensor is named instead.
  auto name = [](const nlohmann::ordered_json& ref) {
    return ref.is_string() ? ref.get<std::string>() : ref.dump();
  };
  const std::string angles = r.contains("table")   ? " rotary_table=" + name(r["table"])
                             : r.contains("theta") ? " rotary_theta=" + name(r["theta"])
                                                   : " rotary_base=" + base_text;
  return " rotary_dims=" + std::to_string(r["dims"].get<uint32_t>()) +
         " rotary_pairs=" + r["pairs"].get<std::string>() + angles;
}

}  // namespace recur::impl::converter
