#include "converter/writer.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "converter/config.h"
#include "converter/import.h"
#include "converter/mixers/mixer_converter.h"
#include "converter/safetensors.h"
#include "model/model_file.h"
#include "recur/recur.h"
#include "schema/recur_generated.h"

namespace recur::impl::converter {
namespace {

#define RECUR_STR2(x) #x
#define RECUR_STR(x) RECUR_STR2(x)


fb::NormPlacement ToFb(NormPlacement p) {
  return p == NormPlacement::kPre ? fb::NormPlacement::Pre : fb::NormPlacement::Post;
}
fb::Activation ToFb(Activation a) {
  switch (a) {
    case Activation::kRelu: return fb::Activation::Relu;
    case Activation::kGelu: return fb::Activation::Gelu;
    case Activation::kReluSquared: return fb::Activation::ReluSquared;
  }
  return fb::Activation::Relu;
}
fb::HeadActivation ToFb(HeadActivation a) {
  switch (a) {
    case HeadActivation::kNone: return fb::HeadActivation::None;
    case HeadActivation::kSoftmax: return fb::HeadActivation::Softmax;
    case HeadActivation::kLogSoftmax: return fb::HeadActivation::LogSoftmax;
  }
  return fb::HeadActivation::None;
}
fb::InputKind ToFb(InputKind k) {
  return k == InputKind::kTokens ? fb::InputKind::Tokens : fb::InputKind::Features;
}

fb::Residual ResidualOf(const ModelDescription& desc) {
  if (!desc.reversible) return fb::Residual::Standard;
  return desc.concat_streams ? fb::Residual::ReversibleConcat : fb::Residual::Reversible;
}

fb::NormKind ToFb(NormKind k) {
  switch (k) {
    case NormKind::kLayerNorm:
      return fb::NormKind::LayerNorm;
    case NormKind::kRmsNorm:
      return fb::NormKind::RmsNorm;
    case NormKind::kScaleNorm:
      return fb::NormKind::ScaleNorm;
    case NormKind::kScaleNormRms:
      return fb::NormKind::ScaleNormRms;
  }
  return fb::NormKind::LayerNorm;
}

struct Placed {
  const std::string* name;
  const Tensor* tensor;
  StoredTensor stored;
  uint64_t offset;
  uint64_t size;
};

Result<AlignedBytes> BuildModelImpl(const ModelDescription& desc, const TensorMap& input,
                                    const BuildOptions& options) {
  const TensorMap* tensors = &input;
  TensorMap validated;
  if (options.validate) {
    ImportOptions io;
    io.allow_extra = options.allow_extra;
    auto imported = ImportTensors(desc, Layout::kRecur, ViewsOf(input), io, nullptr);
    if (!imported.ok()) return imported.status();
    validated = std::move(imported).value();
    tensors = &validated;
  }

  // Tensors in ExpectedTensors order, each at a 64-aligned data offset.
  std::vector<Placed> placed;
  std::map<std::string, int32_t> index;
  uint64_t cursor = 0;
  for (const ExpectedTensor& e : ExpectedTensors(desc, Layout::kRecur)) {
    auto it = tensors->find(e.name);
    if (it == tensors->end()) continue;  // only without validation
    WeightType dtype = StorageDType(e.name, options.weight_dtype, options.quantize_head);
    auto override_it = options.dtype_overrides.find(e.name);
    if (override_it != options.dtype_overrides.end()) dtype = override_it->second;
    auto stored = EncodeTensor(e.name, it->second, dtype, options.group);
    if (!stored.ok()) return stored.status();
    const uint64_t offset = RoundUp(cursor, kAlignment);
    const uint64_t size = stored->bytes.size();
    index[e.name] = static_cast<int32_t>(placed.size());
    placed.push_back({&it->first, &it->second, std::move(stored).value(), offset, size});
    cursor = offset + size;
  }
  const uint64_t data_size = cursor;
  auto ref = [&](const std::string& name) -> int32_t {
    auto it = index.find(name);
    return it == index.end() ? -1 : it->second;
  };

  flatbuffers::FlatBufferBuilder fbb(4096);
  std::vector<flatbuffers::Offset<fb::Tensor>> fb_tensors;
  fb_tensors.reserve(placed.size());
  for (const Placed& p : placed) {
    flatbuffers::Offset<fb::Quantization> quant = 0;
    switch (kernels::Traits(p.stored.dtype).scales) {
      case kernels::WeightScales::kNone:
        break;
      case kernels::WeightScales::kPerRow:
        // axis is written even though 0 is its default: explicit in the file.
        fbb.ForceDefaults(true);
        quant = fb::CreateQuantizationDirect(fbb, 0, &p.stored.scales);
        fbb.ForceDefaults(false);
        break;
      case kernels::WeightScales::kPerGroup:
        quant = fb::CreateQuantizationDirect(fbb, 1, nullptr, static_cast<uint32_t>(p.stored.group),
                                             &p.stored.scales_f16);
        break;
    }
    fb_tensors.push_back(fb::CreateTensorDirect(fbb, p.name->c_str(), &p.tensor->shape,
                                                SchemaDType(p.stored.dtype), p.offset, p.size,
                                                quant));
  }
  auto tensors_vec = fbb.CreateVector(fb_tensors);

  auto dense = [&](const std::string& prefix) {
    return fb::CreateDense(fbb, ref(prefix + ".weight"), ref(prefix + ".bias"));
  };
  // The blocks' and the final norm are of the model's kind; the input norm is
  // always a layer norm.
  auto norm = [&](const std::string& prefix, NormKind kind) {
    return fb::CreateLayerNorm(fbb, ref(prefix + ".weight"), ref(prefix + ".bias"),
                               desc.layer_norm_eps, ToFb(kind));
  };

  std::vector<flatbuffers::Offset<fb::Block>> blocks;
  for (std::size_t i = 0; i < desc.blocks.size(); ++i) {
    const BlockDescription& b = desc.blocks[i];
    const std::string p = "blocks." + std::to_string(i) + ".";
    if (!b.mixer.type()) {
      return Status(StatusCode::kInvalidArgument, "blocks." + std::to_string(i) + ": no mixer");
    }
    auto norm1 = norm(p + "norm1", desc.norm);
    MixerTableWriter mixer_writer(&fbb, &index, p + "mixer.");
    auto mixer = b.mixer.type()->converter->WriteTable(b.mixer.params(), &mixer_writer);
    // Without a feed-forward: an empty FeedForward (d_ff 0) and no norm2.
    flatbuffers::Offset<fb::LayerNorm> norm2;
    flatbuffers::Offset<fb::Dense> l1, l2;
    if (b.d_ff != 0) {
      norm2 = norm(p + "norm2", desc.norm);
      l1 = dense(p + "ffn.linear1");
      l2 = dense(p + "ffn.linear2");
    }
    const int32_t token_mix = b.d_ff != 0 && b.token_mix ? ref(p + "ffn.token_mix") : -1;
    auto ffn = fb::CreateFeedForward(fbb, b.d_ff, ToFb(b.activation), l1, l2, b.glu, token_mix);
    flatbuffers::Offset<fb::TokenShift> token_shift = 0;
    if (!b.token_shift.segments.empty()) {
      std::vector<fb::ShiftSegment> segments;
      for (const auto& [width, shift] : b.token_shift.segments) segments.emplace_back(width, shift);
      token_shift = fb::CreateTokenShiftDirect(fbb, &segments, b.token_shift.ffn);
    }
    blocks.push_back(
        fb::CreateBlock(fbb, norm1, b.mixer.type()->tag, mixer, norm2, ffn, token_shift));
  }
  auto blocks_vec = fbb.CreateVector(blocks);

  flatbuffers::Offset<fb::Dense> projection = 0;
  if (desc.input.kind == InputKind::kFeatures && desc.input.projection)
    projection = dense("input.projection");
  flatbuffers::Offset<fb::LayerNorm> input_norm;
  if (desc.input.norm) input_norm = norm("input.norm", NormKind::kLayerNorm);
  auto input_adapter = fb::CreateInputAdapter(
      fbb, ToFb(desc.input.kind), desc.input.kind == InputKind::kTokens ? desc.input.vocab_size : 0,
      ref("input.embedding"),
      desc.input.kind == InputKind::kFeatures ? desc.input.feature_width : 0, projection,
      ref("input.positions"), input_norm,
      desc.input.sinusoid
          ? fb::CreateSinusoidPositions(fbb, desc.input.sinusoid_base, ref("input.position_scale"),
                                        ref("input.position_freq"))
          : 0);

  flatbuffers::Offset<fb::LayerNorm> final_norm = 0;
  if (desc.final_norm) final_norm = norm("final_norm", desc.final_norm_kind.value_or(desc.norm));
  flatbuffers::Offset<fb::OutputHead> head = 0;
  if (desc.has_head) head = fb::CreateOutputHead(fbb, dense("head"), ToFb(desc.head.activation));

  const MetadataDescription& m = desc.metadata;
  auto str = [&](const std::string& s) {
    return s.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateString(s);
  };
  auto metadata = fb::CreateMetadata(fbb, fbb.CreateString(m.producer.empty() ? DefaultProducer() : m.producer),
                                     str(m.source_hash), str(m.notes), str(m.input_description),
                                     str(m.output_description));

  auto model = fb::CreateModel(fbb, FormatVersionFor(desc), metadata, desc.d_model,
                               ToFb(desc.norm_placement), input_adapter, blocks_vec, final_norm,
                               head, tensors_vec, data_size, ResidualOf(desc));
  fb::FinishSizePrefixedModelBuffer(fbb, model);

  const uint64_t fb_size = fbb.GetSize();  // 4 + S
  const uint64_t data_start = RoundUp(fb_size, kAlignment);
  AlignedBytes bytes;
  bytes.assign(static_cast<std::size_t>(data_start + data_size), 0);  // zero padding everywhere
  std::memcpy(bytes.data(), fbb.GetBufferPointer(), fb_size);
  for (const Placed& p : placed) {
    if (p.size) std::memcpy(bytes.data() + data_start + p.offset, p.stored.bytes.data(), p.size);
  }

  if (options.self_check) {
    Status s = SelfCheck(bytes);
    if (!s.ok()) return s;
  }
  return bytes;
}

}  // namespace

const char* ConverterVersion() {
  return RECUR_STR(RECUR_VERSION_MAJOR) "." RECUR_STR(RECUR_VERSION_MINOR) "." RECUR_STR(
      RECUR_VERSION_PATCH);
}

std::string DefaultProducer() { return std::string("recur-convert ") + ConverterVersion(); }

uint32_t FormatVersionFor(const ModelDescription& desc) {
  // Version 2: parts that a version-1 runtime would ignore, and so misread.
  const bool norms = desc.norm != NormKind::kLayerNorm ||
                     desc.final_norm_kind.value_or(NormKind::kLayerNorm) != NormKind::kLayerNorm;
  uint32_t version = desc.input.norm || desc.input.sinusoid || desc.reversible || norms ? 2 : 1;
  for (const BlockDescription& b : desc.blocks) {
    if (b.d_ff == 0 || b.glu || !b.token_shift.segments.empty()) version = std::max(version, 2u);
    // Version 4: the FFN's token mix and relu², which a version-3 runtime
    // would ignore or refuse by a number.
    if (b.d_ff != 0 && (b.token_mix || b.activation == Activation::kReluSquared)) {
      version = std::max(version, 4u);
    }
    if (b.mixer.type()) {
      version = std::max(version, b.mixer.type()->converter->FormatVersion(b.mixer.params()));
      const RotaryDescription& rotary = b.mixer.params().rotary;
      if (rotary.dims != 0) version = std::max(version, 2u);
      if (rotary.theta || rotary.table_rows != 0) version = std::max(version, 3u);
    }
  }
  // Version 3: stored frequencies and rotary tables, which a version-2
  // runtime would ignore (and compute from the base instead).
  if (desc.input.sinusoid && desc.input.sinusoid_freq) version = std::max(version, 3u);
  static_assert(RECUR_FORMAT_VERSION >= 4, "the runtime reads what the writer writes");
  return version;
}

Status SelfCheck(const AlignedBytes& bytes) {
  recur_model* model = nullptr;
  recur_status st = recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model);
  if (st != RECUR_OK) {
    return Status(static_cast<StatusCode>(st),
                  std::string("self-check: the runtime rejects the model (") +
                      recur_status_string(st) + "): " + recur_last_error());
  }
  recur_model_free(model);
  return Status::Ok();
}

Result<AlignedBytes> BuildModel(const ModelDescription& desc, const TensorMap& tensors,
                                const BuildOptions& options) {
  try {
    return BuildModelImpl(desc, tensors, options);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("building the model: ") + e.what());
  }
}

Result<AlignedBytes> BuildModelFromConfig(const std::string& config_json, const TensorMap& tensors,
                                          Layout layout, const BuildOptions& options) {
  auto config = ParseConfig(config_json, layout);
  if (!config.ok()) return config.status();
  TensorMap imported_storage;
  const TensorMap* recur_named = &tensors;
  if (options.validate || config->layout != Layout::kRecur) {
    // A source layout's tensors are renamed and made (slices, transposes)
    // by the import, which also checks them; unvalidated, it lets extra
    // tensors pass.
    ImportOptions io;
    io.allow_extra = options.allow_extra || !options.validate;
    auto imported = ImportTensors(config->desc, config->layout, ViewsOf(tensors), io, nullptr);
    if (!imported.ok()) return imported.status();
    imported_storage = std::move(imported).value();
    recur_named = &imported_storage;
  }
  BuildOptions inner = options;
  inner.validate = false;  // done above
  return BuildModel(config->desc, *recur_named, inner);
}

}  // namespace recur::impl::converter
