#include "converter/writer.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "converter/config.h"
#include "converter/file_util.h"
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
    case Activation::kSilu: return fb::Activation::Silu;
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

// A tensor's place in the file, decided before it is encoded.
struct Placed {
  const std::string* name;
  const std::vector<int64_t>* shape;
  WeightType dtype;
  int group;           // int4
  uint64_t offset;     // in the data segment
  EncodedSize size;
  uint64_t scales_at;  // types with scales: where they lie, in bytes before the FlatBuffer's end
  std::size_t feed;    // its index in the TensorFeed
};

// The FlatBuffer of `desc`, its tensor table `placed`: a quantised tensor's
// scales are zeros, with their place noted in `placed`, for the writer to
// fill in once it has encoded the tensor (the FlatBuffer's layout depends on
// how many scales there are, not on their values).
Status BuildFlatBuffer(const ModelDescription& desc, const std::map<std::string, int32_t>& index,
                       uint64_t data_size, std::vector<Placed>* placed,
                       flatbuffers::FlatBufferBuilder* builder) {
  flatbuffers::FlatBufferBuilder& fbb = *builder;
  auto ref = [&](const std::string& name) -> int32_t {
    auto it = index.find(name);
    return it == index.end() ? -1 : it->second;
  };
  // Room for `n` scales of type T, zeros for now.
  auto scales = [&](std::size_t n, auto* type, Placed* p) {
    decltype(type) at = nullptr;
    auto vector = fbb.CreateUninitializedVector(n, &at);
    if (n) std::memset(at, 0, n * sizeof(*at));
    p->scales_at = static_cast<uint64_t>(fbb.GetCurrentBufferPointer() + fbb.GetSize() -
                                         reinterpret_cast<uint8_t*>(at));
    return vector;
  };

  std::vector<flatbuffers::Offset<fb::Tensor>> fb_tensors;
  fb_tensors.reserve(placed->size());
  for (Placed& p : *placed) {
    flatbuffers::Offset<fb::Quantization> quant = 0;
    switch (kernels::Traits(p.dtype).scales) {
      case kernels::WeightScales::kNone:
        break;
      case kernels::WeightScales::kPerRow: {
        auto row_scales = scales(p.size.scales, static_cast<float*>(nullptr), &p);
        // axis is written even though 0 is its default: explicit in the file.
        fbb.ForceDefaults(true);
        quant = fb::CreateQuantization(fbb, 0, row_scales);
        fbb.ForceDefaults(false);
        break;
      }
      case kernels::WeightScales::kPerGroup: {
        auto group_scales = scales(p.size.scales, static_cast<uint16_t*>(nullptr), &p);
        quant = fb::CreateQuantization(fbb, 1, 0, p.size.group, group_scales);
        break;
      }
      case kernels::WeightScales::kInBlock:
        break;  // the scales are in the tensor's blocks
    }
    fb_tensors.push_back(fb::CreateTensorDirect(fbb, p.name->c_str(), p.shape,
                                                SchemaDType(p.dtype), p.offset, p.size.bytes,
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

  flatbuffers::Offset<fb::Tokenizer> tokenizer = 0;
  if (desc.vocabulary) {
    std::vector<flatbuffers::Offset<fb::TokenBytes>> tokens;
    tokens.reserve(desc.vocabulary->tokens.size());
    for (const std::string& t : desc.vocabulary->tokens) {
      flatbuffers::Offset<flatbuffers::Vector<uint8_t>> bytes = 0;
      if (!t.empty())
        bytes = fbb.CreateVector(reinterpret_cast<const uint8_t*>(t.data()), t.size());
      tokens.push_back(fb::CreateTokenBytes(fbb, bytes));
    }
    const VocabularyDescription& v = *desc.vocabulary;
    flatbuffers::Offset<flatbuffers::Vector<const fb::TokenMerge*>> merges = 0;
    flatbuffers::Offset<flatbuffers::Vector<uint32_t>> added_raw = 0, added_normalized = 0;
    if (v.kind == VocabularyKind::kGpt2Bpe) {
      std::vector<fb::TokenMerge> m;
      m.reserve(v.merges.size());
      for (const TokenMergeDescription& d : v.merges) m.emplace_back(d.left, d.right, d.result);
      merges = fbb.CreateVectorOfStructs(m);
      added_raw = fbb.CreateVector(v.added_raw);
      added_normalized = fbb.CreateVector(v.added_normalized);
    }
    tokenizer = fb::CreateTokenizer(
        fbb, v.kind == VocabularyKind::kGpt2Bpe ? fb::TokenizerKind::Gpt2Bpe : fb::TokenizerKind::Rwkv,
        fbb.CreateVector(tokens), v.end_of_text, merges, added_raw, added_normalized);
  }

  auto model = fb::CreateModel(fbb, FormatVersionFor(desc), metadata, desc.d_model,
                               ToFb(desc.norm_placement), input_adapter, blocks_vec, final_norm,
                               head, tensors_vec, data_size, ResidualOf(desc), tokenizer);
  fb::FinishSizePrefixedModelBuffer(fbb, model);
  return Status::Ok();
}

// Where WriteModel puts the file's bytes.
class ModelSink {
 public:
  virtual ~ModelSink() = default;
  // First, once: the file's size. Bytes never written are zeros.
  virtual Status Allocate(uint64_t size) = 0;
  virtual Status Write(uint64_t offset, const void* data, std::size_t size) = 0;
};

// The file in 64-byte aligned memory.
class MemorySink : public ModelSink {
 public:
  Status Allocate(uint64_t size) override {
    bytes.assign(static_cast<std::size_t>(size), 0);
    return Status::Ok();
  }
  Status Write(uint64_t offset, const void* data, std::size_t size) override {
    if (size) std::memcpy(bytes.data() + offset, data, size);
    return Status::Ok();
  }
  AlignedBytes bytes;
};

// The file written in place of `path` (an AtomicFile, created on Allocate).
class FileSink : public ModelSink {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)) {}
  Status Allocate(uint64_t size) override {
    auto file = AtomicFile::Create(path_);
    if (!file.ok()) return file.status();
    file_.emplace(std::move(file).value());
    return file_->Resize(size);
  }
  Status Write(uint64_t offset, const void* data, std::size_t size) override {
    return file_->WriteAt(offset, data, size);
  }
  AtomicFile& file() { return *file_; }

 private:
  std::string path_;
  std::optional<AtomicFile> file_;
};

// The tensors of a TensorMap that `desc` names (recur layout), passed on
// unchecked, whatever their shapes and sizes: BuildOptions::validate off.
class UncheckedTensors : public TensorFeed {
 public:
  UncheckedTensors(const ModelDescription& desc, const TensorMap& tensors) {
    for (const ExpectedTensor& e : ExpectedTensors(desc, Layout::kRecur)) {
      auto it = tensors.find(e.name);
      if (it != tensors.end()) present_.push_back(&*it);  // absent: a -1 reference
    }
  }
  std::size_t count() const override { return present_.size(); }
  const std::string& name(std::size_t i) const override { return present_[i]->first; }
  const std::vector<int64_t>& shape(std::size_t i) const override {
    return present_[i]->second.shape;
  }
  uint64_t elements(std::size_t i) const override { return present_[i]->second.data.size(); }
  Status Get(std::size_t i, std::vector<float>* values) override {
    *values = present_[i]->second.data;
    return Status::Ok();
  }

 private:
  std::vector<const TensorMap::value_type*> present_;
};

// Writes the model to `sink` tensor by tensor: places every tensor (each at a
// 64-aligned data offset, its encoded size known from its shape), builds the
// FlatBuffer, then gets, encodes and writes one tensor at a time, and the
// FlatBuffer with the tensors' scales last. Errors come in the order of the
// checks, whatever the tensor: the feed's (each tensor's, then unused ones),
// then encoding, then the description's, then the sink's (after its first
// error nothing more is written, but every tensor is still checked). The
// file's size on success.
Result<uint64_t> WriteModel(const ModelDescription& desc, TensorFeed* feed,
                            const BuildOptions& options, ModelSink* sink) {
  std::vector<Placed> placed;
  std::map<std::string, int32_t> index;
  uint64_t cursor = 0;
  for (std::size_t i = 0; i < feed->count(); ++i) {
    const std::string& name = feed->name(i);
    TensorStorage storage = StorageOf(*feed, i, options);
    auto override_it = options.dtype_overrides.find(name);
    if (override_it != options.dtype_overrides.end()) storage = {override_it->second, options.group};
    const EncodedSize size =
        EncodedSizeOf(feed->shape(i), feed->elements(i), storage.dtype, storage.group);
    // The same values as an earlier tensor (a tied head), stored alike: one
    // tensor, referred to from both places.
    if (const std::size_t first = feed->same_as(i); first < i) {
      const auto it = index.find(feed->name(first));
      if (it != index.end()) {
        const Placed& f = placed[static_cast<std::size_t>(it->second)];
        if (f.dtype == storage.dtype && f.size.bytes == size.bytes &&
            f.size.scales == size.scales && f.size.group == size.group) {
          index[name] = it->second;
          continue;
        }
      }
    }
    const uint64_t offset = RoundUp(cursor, kAlignment);
    index[name] = static_cast<int32_t>(placed.size());
    placed.push_back({&name, &feed->shape(i), storage.dtype, storage.group, offset, size, 0, i});
    cursor = offset + size.bytes;
  }
  const uint64_t data_size = cursor;

  flatbuffers::FlatBufferBuilder fbb(4096);
  const Status described = BuildFlatBuffer(desc, index, data_size, &placed, &fbb);
  uint64_t data_start = 0;
  Status written;  // the sink's first error
  if (described.ok()) {
    data_start = RoundUp(fbb.GetSize(), kAlignment);  // P = round_up(4 + S, 64)
    written = sink->Allocate(data_start + data_size);
  }
  auto write = [&](const Placed& p, const void* data) {
    if (described.ok() && written.ok()) {
      written = sink->Write(data_start + p.offset, data, static_cast<std::size_t>(p.size.bytes));
    }
  };

  Status encoded;  // the first encoding error; later tensors are only checked
  for (std::size_t i = 0; i < placed.size(); ++i) {
    const Placed& p = placed[i];
    // int4, q8_0 and the K-quants as the source stores them: taken over, not
    // quantised again.
    const TensorFeed::SourceStorage source = feed->source_storage(p.feed);
    Result<StoredTensor> stored = StoredTensor();
    const bool taken_over =
        source.dtype == p.dtype &&
        ((p.dtype == WeightType::kI4 && source.group == p.group) ||
         p.dtype == WeightType::kQ8_0 || kernels::IsKQuant(p.dtype));
    if (taken_over) {
      StoredTensor as_stored;
      RECUR_RETURN_IF_ERROR(feed->GetStored(p.feed, &as_stored));
      if (!encoded.ok()) continue;
      stored = std::move(as_stored);
    } else {
      std::vector<float> values;
      RECUR_RETURN_IF_ERROR(feed->Get(p.feed, &values));
      if (!encoded.ok()) continue;
      if (p.dtype == WeightType::kF32 && values.size() * sizeof(float) == p.size.bytes) {
        write(p, values.data());  // stored as it is: no second copy
        continue;
      }
      stored = EncodeTensor(*p.name, Tensor{*p.shape, std::move(values)}, p.dtype, p.group);
    }
    if (!stored.ok()) {
      encoded = stored.status();
      continue;
    }
    const std::size_t scales = stored->scales.size() + stored->scales_f16.size();
    const auto group = static_cast<uint32_t>(stored->group);
    if (stored->bytes.size() != p.size.bytes || scales != p.size.scales || group != p.size.group) {
      encoded = Status(StatusCode::kInternal,
                       *p.name + ": encoded as " + std::to_string(stored->bytes.size()) +
                           " bytes and " + std::to_string(scales) + " scales in groups of " +
                           std::to_string(group) + ", placed as " + std::to_string(p.size.bytes) +
                           " and " + std::to_string(p.size.scales) + " in groups of " +
                           std::to_string(p.size.group));
      continue;
    }
    if (described.ok() && scales) {
      uint8_t* at = fbb.GetBufferPointer() + fbb.GetSize() - p.scales_at;
      if (!stored->scales.empty()) {
        std::memcpy(at, stored->scales.data(), stored->scales.size() * sizeof(float));
      } else {
        std::memcpy(at, stored->scales_f16.data(), stored->scales_f16.size() * sizeof(uint16_t));
      }
    }
    write(p, stored->bytes.data());
  }
  RECUR_RETURN_IF_ERROR(feed->Finish());
  RECUR_RETURN_IF_ERROR(encoded);
  RECUR_RETURN_IF_ERROR(described);
  if (written.ok()) written = sink->Write(0, fbb.GetBufferPointer(), fbb.GetSize());
  RECUR_RETURN_IF_ERROR(written);
  return data_start + data_size;
}

// The model in memory, loaded by the runtime with options.self_check.
Result<AlignedBytes> BuildInMemory(const ModelDescription& desc, TensorFeed* feed,
                                   const BuildOptions& options) {
  MemorySink sink;
  auto size = WriteModel(desc, feed, options, &sink);
  if (!size.ok()) return size.status();
  if (options.self_check) RECUR_RETURN_IF_ERROR(SelfCheck(sink.bytes));
  return std::move(sink.bytes);
}

Result<AlignedBytes> BuildModelImpl(const ModelDescription& desc, const TensorMap& input,
                                    const BuildOptions& options) {
  if (options.validate) {
    const TensorViewMap views = ViewsOf(input);
    ImportOptions io;
    io.allow_extra = options.allow_extra;
    TensorImport feed(desc, Layout::kRecur, views, io);
    return BuildInMemory(desc, &feed, options);
  }
  UncheckedTensors feed(desc, input);
  return BuildInMemory(desc, &feed, options);
}

}  // namespace

TensorStorage StorageOf(const TensorFeed& feed, std::size_t i, const BuildOptions& options) {
  const std::string& name = feed.name(i);
  if (options.keep_source_types) {
    const TensorFeed::SourceStorage source = feed.source_storage(i);
    if (KeepsSourceType(name)) return {source.dtype, source.group};
    return {WeightType::kF32, 0};
  }
  return {StorageDType(name, options.weight_dtype, options.quantize_head), options.group};
}

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
    if (b.d_ff != 0 && b.activation == Activation::kSilu) version = std::max(version, 5u);
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
  static_assert(RECUR_FORMAT_VERSION >= 5, "the runtime reads what the writer writes");
  return version;
}

Status SelfCheck(const void* data, std::size_t size) {
  recur_model* model = nullptr;
  recur_status st = recur_model_load_buffer(data, size, nullptr, &model);
  if (st != RECUR_OK) {
    return Status(static_cast<StatusCode>(st),
                  std::string("self-check: the runtime rejects the model (") +
                      recur_status_string(st) + "): " + recur_last_error());
  }
  recur_model_free(model);
  return Status::Ok();
}

Status SelfCheck(const AlignedBytes& bytes) { return SelfCheck(bytes.data(), bytes.size()); }

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
  if (!options.validate && config->layout == Layout::kRecur) {
    return BuildModel(config->desc, tensors, options);
  }
  try {
    // A source layout's tensors are renamed and made (slices, transposes)
    // by the import, which also checks them; unvalidated, it lets extra
    // tensors pass.
    const TensorViewMap views = ViewsOf(tensors);
    ImportOptions io;
    io.allow_extra = options.allow_extra || !options.validate;
    TensorImport feed(config->desc, config->layout, views, io);
    return BuildInMemory(config->desc, &feed, options);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("building the model: ") + e.what());
  }
}

Result<uint64_t> WriteModelFile(const std::string& path, const ModelDescription& desc,
                                TensorFeed* tensors, const BuildOptions& options) {
  try {
    FileSink sink(path);
    auto size = WriteModel(desc, tensors, options, &sink);
    if (!size.ok()) return size.status();
    if (options.self_check) {
      auto written = sink.file().Map();
      if (!written.ok()) return written.status();
      RECUR_RETURN_IF_ERROR(SelfCheck(written->data(), written->size()));
    }
    RECUR_RETURN_IF_ERROR(sink.file().Commit());
    return size;
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("building the model: ") + e.what());
  }
}

}  // namespace recur::impl::converter
