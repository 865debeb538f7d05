// What the converter knows of each sequence mixer, one file per mixer.
//
// runtime/mixers/mixers.inc lists the mixers, one line each:
//   RECUR_MIXER(UnionTag, config_name, file)
// and converter/mixers/<file>.cc implements MixerConverter for every union
// tag whose line names <file>; its parameter struct is in <file>.h. A
// converter does five jobs for its mixer: parse its config keys, name its
// tensors and their shapes, write its schema table, describe a written table
// for `inspect`, and say which of its weights --dtype may narrow. The
// registry (registry.cc) expands mixers.inc and finds the converter of
// union tag T by the function `const MixerConverter& TConverter()`, which
// <file>.cc defines. docs/adding-a-mixer.md walks through a new mixer.
#ifndef RECUR_CONVERTER_MIXERS_MIXER_CONVERTER_H_
#define RECUR_CONVERTER_MIXERS_MIXER_CONVERTER_H_

#include <flatbuffers/flatbuffers.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "converter/key_reader.h"
#include "converter/model_description.h"
#include "core/status.h"
#include "schema/recur_generated.h"

namespace recur::impl::converter {

// The JSON that inspect writes and Describe fills: keys keep the order written.
using OrderedJson = nlohmann::ordered_json;

// One mixer's config object ("mixer", or one entry of a "mixer" list) and
// what its parser needs to read it with messages that name the key.
struct MixerConfig {
  const KeyReader& reader;
  const nlohmann::json& object;
  std::string where;  // "mixer" or "mixer[2]"
  std::string type;   // its "type": the mixers.inc config name or an alias

  // Refuses a key not in `keys`, listing them in the message in this order:
  //   "mixer.window" does not apply to softmax_attention (its keys: type, heads, dk, causal, dv)
  Status OnlyKeys(std::initializer_list<const char*> keys) const;
  // "heads" and "dk" (positive integers), and "dv" unless `dv` is null.
  Status Heads(uint32_t* heads, uint32_t* dk, uint32_t* dv) const;
  // The optional "causal" (absent: *causal unchanged).
  Status Causal(bool* causal) const;
  // The optional "rotary" object {"dims", "pairs", optional "base", "theta"
  // ("base" | "stored"), "table" (rows)}: dims even and at most the head's
  // q/k width (`width`, the key `width_key` names); not both stored theta
  // and a table.
  Status Rotary(uint32_t width, const char* width_key, RotaryDescription* out) const;
  // "<where>.<key>" <what>
  Status Invalid(const std::string& key, const std::string& what) const {
    return reader.Invalid(where + "." + key, what);
  }

  // KeyReader's readers for keys of this object.
  Status UInt(const char* key, uint32_t min, uint32_t* out, bool required = true) const {
    return reader.UInt(object, key, where, min, out, required);
  }
  Status PositiveFloat(const char* key, float* out, bool required = true) const {
    return reader.PositiveFloat(object, key, where, out, required);
  }
  template <std::size_t N>
  Status Choice(const char* key, const char* const (&choices)[N], std::size_t* index,
                bool required = true) const {
    return reader.Choice(object, key, where, choices, index, required);
  }
};

// Collects one block's mixer tensors for ExpectedTensors (config.cc), in
// file order, as blocks.<i>.mixer.<name> (a source layout renames them:
// converter/layouts/).
class MixerTensors {
 public:
  MixerTensors(std::string prefix, int64_t d_model, std::vector<ExpectedTensor>* out)
      : prefix_(std::move(prefix)), d_model_(d_model), out_(out) {}

  int64_t d_model() const { return d_model_; }

  // One tensor.
  void Add(const std::string& name, std::vector<int64_t> shape);
  // The rotary's stored tensors, if any: rotary.theta [dims/2], rotary.table
  // [table_rows, dims] (ExpectedTensors adds them for every mixer).
  void AddRotary(const RotaryDescription& rotary);
  // <name>.weight [rows, cols] (nn.Linear's [out, in]) and <name>.bias [rows].
  void AddDense(const std::string& name, int64_t rows, int64_t cols);
  // query [qk_width, d_model], key (unless `with_key` is false) likewise,
  // value [v_width, d_model], out [d_model, v_width], as dense layers.
  void AddAttentionProjections(int64_t qk_width, int64_t v_width, bool with_key = true);

 private:
  std::string prefix_;
  int64_t d_model_;
  std::vector<ExpectedTensor>* out_;
};

// What a mixer's table writer needs: the builder, and the tensor table's
// indices of the block's tensors.
class MixerTableWriter {
 public:
  // `prefix`: "blocks.<i>.mixer."; `index`: tensor name → tensor table index.
  MixerTableWriter(flatbuffers::FlatBufferBuilder* fbb,
                   const std::map<std::string, int32_t>* index, std::string prefix)
      : fbb_(fbb), index_(index), prefix_(std::move(prefix)) {}

  flatbuffers::FlatBufferBuilder& fbb() { return *fbb_; }
  // The table index of blocks.<i>.mixer.<name>; -1 when the model has none.
  int32_t Ref(const std::string& name) const;
  // A Dense table of <name>.weight and <name>.bias (each -1 when absent).
  flatbuffers::Offset<fb::Dense> Dense(const std::string& name);
  // A Rotary table, referring to rotary.theta and rotary.table when the
  // model has them; null (0) for dims 0.
  flatbuffers::Offset<fb::Rotary> Rotary(const RotaryDescription& rotary);

 private:
  flatbuffers::FlatBufferBuilder* fbb_;
  const std::map<std::string, int32_t>* index_;
  std::string prefix_;
};

// inspect's view of a model's tensor references.
class TensorRefs {
 public:
  explicit TensorRefs(const fb::Model* model) : model_(model) {}
  uint32_t d_model() const { return model_->d_model(); }
  // The tensor's name; null for -1, "invalid #i" beyond the table.
  nlohmann::ordered_json Ref(int32_t index) const;
  // {"weight": name, "bias": name}; null for an absent Dense.
  nlohmann::ordered_json Dense(const fb::Dense* dense) const;

 private:
  const fb::Model* model_;
};

// inspect's text for a mixer's JSON: " key=value" for each of `keys`
// (integers, strings as they are, floats in their shortest form).
std::string InspectFields(const nlohmann::ordered_json& mixer,
                          std::initializer_list<const char*> keys);
// " non-causal (encoder)" for a mixer with "causal": false, else "".
std::string InspectEncoderNote(const nlohmann::ordered_json& mixer);
// inspect: "rotary": {"dims", "pairs", "base", and "theta" or "table" (the
// tensor's name) when stored} into `mixer` when `rotary` is set (absent: no
// key); and its text, " rotary_dims=.. rotary_pairs=.. rotary_base=.." (or
// rotary_theta=<tensor>, rotary_table=<tensor> in place of the base), or "".
void DescribeRotary(const fb::Rotary* rotary, const TensorRefs& refs,
                    nlohmann::ordered_json* mixer);
std::string InspectRotary(const nlohmann::ordered_json& mixer);

// The converter of one or more union tags of mixers.inc (one object per
// tag). Every function gets the parameters its own Parse made.
class MixerConverter {
 public:
  virtual ~MixerConverter() = default;

  // Config "type" names besides the mixers.inc one that select this
  // converter, each with a meaning of its own that Parse reads from
  // MixerConfig::type (AftLocal: "aft_conv", a kernel per head).
  virtual std::vector<std::string> ConfigAliases() const { return {}; }

  // Reads the mixer's keys ("type" is read) into its parameter struct.
  virtual Status Parse(const MixerConfig& config, std::unique_ptr<MixerParams>* out) const = 0;

  // Fits parameters that one config gives several blocks to a block's place:
  // `first` when no earlier block has this mixer (RWKV-7: the first block
  // has no value residual, its v is the later blocks' v₀). Default: as given.
  virtual void Place(MixerParams* params, bool first) const {
    (void)params;
    (void)first;
  }

  // Appends the mixer's tensors, in file order.
  virtual void AddTensors(const MixerParams& params, MixerTensors* out) const = 0;

  // Writes the mixer's schema table; the result is the block's union value.
  virtual flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                               MixerTableWriter* writer) const = 0;

  // inspect: adds the mixer's parameters, its state per stream ("state_bytes",
  // "state_grows_with_length", and "state_bytes_per_position" or
  // "state_bytes_plain_sums" where they apply) and its tensor references to
  // `out`, which holds "type" (the config name; an alias may replace it).
  // `table` is the block's union value, of this converter's tag.
  virtual void Describe(const void* table, const TensorRefs& refs,
                        nlohmann::ordered_json* out) const = 0;
  // inspect's text: what follows the type on the "mixer:" line, from the
  // JSON Describe made (" heads=2 dk=8 ...").
  virtual std::string DescribeText(const nlohmann::ordered_json& mixer) const = 0;

  // The oldest model format_version that holds these parameters (a field an
  // older runtime would ignore needs a newer version, so that it refuses the
  // file instead of misreading it).
  virtual uint32_t FormatVersion(const MixerParams& params) const {
    (void)params;
    return 1;
  }

  // The weights --dtype stores narrow, as names under blocks.<i>.mixer.
  // without ".weight": the dense layers every step streams. Anything else
  // (biases, position tables) stays f32.
  virtual std::vector<std::string> QuantizableWeights() const {
    return {"query", "key", "value", "out"};
  }

  // Dense layers that --dtype leaves f32 (small ones: RWKV-7's low-rank
  // matrices, which llama.cpp's quantiser leaves f32 too) but that keep the
  // narrow type a source file gives them (a GGUF's Q8_0), as names like
  // QuantizableWeights'.
  virtual std::vector<std::string> SourceTypedWeights() const { return {}; }
};

// A mixers.inc line as the converter sees it.
struct MixerType {
  fb::Mixer tag;
  const char* config_name;  // the config's "type" and inspect's
  const MixerConverter* converter;
};

// The type of union tag `tag`; null for NONE and tags beyond the list.
const MixerType* FindMixerType(fb::Mixer tag);
// The type that config "type" `name` selects (mixers.inc names and aliases);
// null when none does.
const MixerType* FindMixerTypeByConfigName(const std::string& name);
// Every config "type" name in list order, each mixer's aliases after its name.
const std::vector<std::string>& MixerConfigNames();
// Every mixer's QuantizableWeights(), without repeats.
const std::vector<std::string>& AllQuantizableMixerWeights();
// Every mixer's SourceTypedWeights(), without repeats.
const std::vector<std::string>& AllSourceTypedMixerWeights();

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_MIXER_CONVERTER_H_
