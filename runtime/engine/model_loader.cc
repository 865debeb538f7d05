// Model loading: size prefix → identifier → Verifier → version → tensor
// table → structure (the mixers' factories build each block's mixer), each
// check with a message that names what failed.
#include "engine/model_loader.h"

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/dispatch/target_limit.h"
#include "mixers/mixer.h"
#include "model/model_file.h"
#include "recur/recur.h"

namespace recur::impl {

namespace {

Status BuildInput(const fb::InputAdapter* in, TensorResolver* tensors, Model* m) {
  if (in->sinusoid() != nullptr && m->d_model % 2 != 0) {
    return InvalidModel("input.sinusoid: sinusoidal positions need an even d_model, got %u",
                        m->d_model);
  }
  m->input_kind = in->kind();
  switch (in->kind()) {
    case fb::InputKind::Tokens:
      RECUR_RETURN_IF_ERROR(CheckWidth(in->vocab_size(), "input.vocab_size"));
      m->vocab_size = in->vocab_size();
      // Any weight type, checked as a dense weight [vocab_size, d_model]; a
      // head tied to it refers to the same tensor.
      RECUR_RETURN_IF_ERROR(tensors->GetWeight(in->embedding(), "input.embedding",
                                               in->vocab_size(), m->d_model, &m->embedding));
      break;
    case fb::InputKind::Features:
      RECUR_RETURN_IF_ERROR(CheckWidth(in->feature_width(), "input.feature_width"));
      m->feature_width = in->feature_width();
      if (in->projection() != nullptr) {
        RECUR_RETURN_IF_ERROR(tensors->GetDense(in->projection(), "input.projection", m->d_model,
                                                in->feature_width(), &m->input_projection));
      } else if (in->feature_width() != m->d_model) {
        return InvalidModel("input.feature_width is %u but there is no input projection, so it "
                            "must equal d_model (%u)", in->feature_width(), m->d_model);
      }
      break;
    default:
      return Unsupported("input kind %d is not supported by this runtime", int(in->kind()));
  }
  if (in->positions() >= 0) {
    int64_t rows = 0;
    RECUR_RETURN_IF_ERROR(tensors->GetRows(in->positions(), "input.positions", m->d_model, false,
                                           &m->positions, &rows));
    m->max_positions = static_cast<uint32_t>(rows);
    m->max_positions_source = "model's learned positions";
  }
  if (const fb::SinusoidPositions* s = in->sinusoid()) {
    if (!(s->base() > 0.0) || !std::isfinite(s->base())) {
      return InvalidModel("input.sinusoid: base is %g; it must be positive and finite", s->base());
    }
    RECUR_RETURN_IF_ERROR(
        tensors->Get(s->scale(), "input.position_scale", {1}, true, &m->position_scale));
    const uint32_t half = m->d_model / 2;
    const float* freq = nullptr;
    RECUR_RETURN_IF_ERROR(tensors->Get(s->freq(), "input.position_freq", {half}, true, &freq));
    m->sinusoid_freq.resize(half);
    for (uint32_t i = 0; i < half; ++i) {
      if (freq != nullptr && !std::isfinite(freq[i])) {
        return InvalidModel("input.position_freq[%u] is %g; the frequencies must be finite", i,
                            static_cast<double>(freq[i]));
      }
      m->sinusoid_freq[i] = freq != nullptr ? freq[i] : std::pow(s->base(), -2.0 * i / m->d_model);
    }
  }
  if (in->norm() != nullptr) {
    RECUR_RETURN_IF_ERROR(tensors->GetNorm(in->norm(), "input.norm", m->d_model, &m->input_norm));
  }
  return Status::Ok();
}

// The token shift of block `layer` (docs/attention-math.md §13); `causal`:
// whether its mixer has a recurrent form (shift −1 reads the next position).
Status BuildTokenShift(const fb::TokenShift* t, const std::string& layer, bool causal,
                       const Model& m, TokenShiftView* out) {
  *out = TokenShiftView();
  if (t == nullptr) return Status::Ok();
  const char* name = layer.c_str();
  if (m.norm_placement != fb::NormPlacement::Pre) {
    return InvalidModel(
        "%s.token_shift: token shift needs pre-norm blocks (it shifts the "
        "normalised inputs of the mixer and the FFN)",
        name);
  }
  if (t->segments() == nullptr || t->segments()->size() == 0) {
    return InvalidModel("%s.token_shift has no segments", name);
  }
  uint64_t offset = 0;
  for (uint32_t i = 0; i < t->segments()->size(); ++i) {
    const fb::ShiftSegment* s = t->segments()->Get(i);
    if (s->width() == 0) return InvalidModel("%s.token_shift: segment %u has width 0", name, i);
    if (s->shift() < -1 || s->shift() > 1) {
      return InvalidModel("%s.token_shift: segment %u shifts by %d (must be -1, 0 or 1)", name, i,
                          s->shift());
    }
    if (s->shift() == -1 && causal) {
      return InvalidModel(
          "%s.token_shift: segment %u takes the next position (shift -1), which a "
          "causal block has not seen: only encoder blocks (causal false) shift "
          "by -1",
          name, i);
    }
    if (offset + s->width() > m.d_model) {
      return InvalidModel(
          "%s.token_shift: the segments cover %llu features, more than d_model "
          "(%u)",
          name, static_cast<unsigned long long>(offset + s->width()), m.d_model);
    }
    if (s->shift() != 0) out->moved.push_back({size_t(offset), s->width(), s->shift()});
    if (s->shift() == 1 && causal) out->carried += s->width();
    offset += s->width();
  }
  out->present = true;
  out->ffn = t->ffn();
  return Status::Ok();
}

Status BuildBlock(const fb::Block* fbb, uint32_t index, TensorResolver* tensors, Model* m) {
  const std::string layer = "blocks." + std::to_string(index);
  BlockView block;
  RECUR_RETURN_IF_ERROR(tensors->GetNorm(fbb->norm1(), layer + ".norm1", m->d_model, &block.norm1));
  const fb::FeedForward* ffn = fbb->ffn();
  if (ffn->d_ff() != 0) {
    RECUR_RETURN_IF_ERROR(
        tensors->GetNorm(fbb->norm2(), layer + ".norm2", m->d_model, &block.norm2));
  } else if (fbb->norm2() != nullptr) {
    return InvalidModel(
        "%s.norm2: the block has no feed-forward (ffn.d_ff 0), so no norm2, but "
        "the file gives one",
        layer.c_str());
  }

  const MixerEntry* entry = FindMixer(fbb->mixer_type());
  if (entry == nullptr) {
    return Unsupported("%s: mixer type %d is not supported by this runtime (newer model?)",
                       layer.c_str(), int(fbb->mixer_type()));
  }
  if (entry->create == nullptr) {
    return Unsupported("%s: mixer %s is not built into this runtime (CMake RECUR_MIXERS)",
                       layer.c_str(), entry->name);
  }
  std::unique_ptr<Mixer> mixer;
  RECUR_RETURN_IF_ERROR(entry->create(fbb->mixer(), layer, m->d_model, tensors, &mixer));

  if (ffn->d_ff() == 0) {
    if (ffn->linear1() != nullptr || ffn->linear2() != nullptr) {
      return InvalidModel(
          "%s.ffn: d_ff is 0 (no feed-forward), but the file gives linear1 or "
          "linear2",
          layer.c_str());
    }
  } else {
    RECUR_RETURN_IF_ERROR(CheckWidth(ffn->d_ff(), (layer + ".ffn.d_ff").c_str()));
    if (ffn->activation() != fb::Activation::Relu && ffn->activation() != fb::Activation::Gelu &&
        ffn->activation() != fb::Activation::ReluSquared &&
        ffn->activation() != fb::Activation::Silu) {
      return Unsupported("%s.ffn: activation %d is not supported", layer.c_str(),
                         int(ffn->activation()));
    }
    block.ffn.activation = ffn->activation();
    block.ffn.glu = ffn->glu();
    const uint32_t hidden = ffn->glu() ? 2 * ffn->d_ff() : ffn->d_ff();
    if (ffn->glu())
      RECUR_RETURN_IF_ERROR(CheckWidth(hidden, (layer + ".ffn: 2·d_ff (glu)").c_str()));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(ffn->linear1(), layer + ".ffn.linear1", hidden,
                                            m->d_model, &block.ffn.linear1));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(ffn->linear2(), layer + ".ffn.linear2", m->d_model,
                                            ffn->d_ff(), &block.ffn.linear2));
    if (ffn->token_mix() >= 0 && m->norm_placement != fb::NormPlacement::Pre) {
      return InvalidModel("%s.ffn.token_mix: a token mix needs pre-norm blocks (it mixes norm2's "
                          "outputs of consecutive positions)", layer.c_str());
    }
    RECUR_RETURN_IF_ERROR(tensors->Get(ffn->token_mix(), (layer + ".ffn.token_mix").c_str(),
                                       {m->d_model}, true, &block.ffn.token_mix));
    if (block.ffn.token_mix != nullptr) block.ffn.token_mix_width = m->d_model;
  }
  if (ffn->d_ff() == 0 && ffn->token_mix() >= 0) {
    return InvalidModel("%s.ffn: d_ff is 0 (no feed-forward), but the file gives a token_mix",
                        layer.c_str());
  }

  RECUR_RETURN_IF_ERROR(
      BuildTokenShift(fbb->token_shift(), layer, mixer->causal(), *m, &block.token_shift));

  if (mixer->max_positions() != 0 &&
      (m->max_positions == 0 || mixer->max_positions() < m->max_positions)) {
    m->max_positions = static_cast<uint32_t>(mixer->max_positions());
    m->max_positions_source = "rotary table rows of " + layer;
  }
  if (const size_t width = mixer->shared_row_floats(); width != 0 && !mixer->writes_shared_rows()) {
    // The last earlier writer's rows are the ones this mixer reads.
    size_t written = 0;
    for (const BlockView& earlier : m->blocks) {
      if (earlier.mixer->writes_shared_rows()) written = earlier.mixer->shared_row_floats();
    }
    if (written == 0) {
      return InvalidModel("%s: its mixer reads rows an earlier block's mixer shares (RWKV-7's "
                          "first-layer value), but no block before it shares any",
                          layer.c_str());
    }
    if (written != width) {
      return InvalidModel("%s: its mixer reads shared rows of %zu floats, but the last block "
                          "before it that shares rows writes %zu",
                          layer.c_str(), width, written);
    }
  }
  m->state_floats += mixer->state_floats() + block.token_shift.state_floats() +
                     block.ffn.token_mix_floats();
  m->state_floats_per_position += mixer->state_floats_per_position();
  m->compensation_floats += mixer->compensation_floats();
  block.mixer = mixer.get();
  m->mixers.push_back(std::move(mixer));
  m->blocks.push_back(block);
  return Status::Ok();
}

}  // namespace

Status LoadModel(const void* data, size_t size, const LoadOptions& options,
                 std::unique_ptr<Model>* out) {
  out->reset();
  // Every session runs a loaded model: the first load fixes the dispatch cap.
  RECUR_RETURN_IF_ERROR(kernels::ApplyTargetLimitFromEnvironment());
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (data == nullptr) return InvalidArgument("model data is null");
  if (reinterpret_cast<uintptr_t>(data) % kSegmentAlignment != 0) {
    return InvalidArgument("model bytes must be 64-byte aligned (use aligned_alloc(64, ...) or "
                           "recur_model_load_file)");
  }
  ModelFile file;
  RECUR_RETURN_IF_ERROR(ParseModelFile(bytes, size, !options.trusted, &file));
  const uint64_t segment_start = file.segment_start;
  auto m = std::make_unique<Model>();
  m->root = file.root;
  const fb::Model* root = m->root;
  if (root->format_version() > RECUR_FORMAT_VERSION) {
    return Unsupported("model format version %u is newer than this runtime reads (%d); upgrade "
                       "recur", root->format_version(), RECUR_FORMAT_VERSION);
  }
  if (root->format_version() == 0) return InvalidModel("model format_version is missing");
  if (segment_start > size || root->data_size() != size - segment_start) {
    return InvalidModel("file is %zu bytes, expected %llu (metadata + %llu bytes of weights): "
                        "truncated or padded", size,
                        static_cast<unsigned long long>(segment_start + root->data_size()),
                        static_cast<unsigned long long>(root->data_size()));
  }
  // The Verifier checks offsets only; required fields must also be present
  // when it was skipped, so check what the code below dereferences.
  if (root->input() == nullptr || root->blocks() == nullptr || root->tensors() == nullptr) {
    return InvalidModel("model lacks input, blocks or tensors");
  }
  for (const fb::Tensor* t : *root->tensors()) {
    if (t->name() == nullptr || t->shape() == nullptr) return InvalidModel("tensor without name or shape");
  }
  for (const fb::Block* b : *root->blocks()) {
    if (b->mixer() == nullptr || b->ffn() == nullptr) return InvalidModel("block without mixer or ffn");
  }
  m->bytes = bytes;
  m->size = size;
  m->segment = bytes + segment_start;

  TensorResolver tensors(root, m->segment, root->data_size());
  RECUR_RETURN_IF_ERROR(tensors.CheckTensorTable());
  RECUR_RETURN_IF_ERROR(CheckWidth(root->d_model(), "d_model"));
  m->d_model = root->d_model();
  if (root->norm_placement() != fb::NormPlacement::Pre &&
      root->norm_placement() != fb::NormPlacement::Post) {
    return Unsupported("norm placement %d is not supported", int(root->norm_placement()));
  }
  m->norm_placement = root->norm_placement();
  if (root->residual() != fb::Residual::Standard && root->residual() != fb::Residual::Reversible &&
      root->residual() != fb::Residual::ReversibleConcat) {
    return Unsupported("residual kind %d is not supported by this runtime (newer model?)",
                       int(root->residual()));
  }
  m->reversible = root->residual() != fb::Residual::Standard;
  m->concat_streams = root->residual() == fb::Residual::ReversibleConcat;
  if (m->reversible && m->norm_placement != fb::NormPlacement::Pre) {
    return InvalidModel(
        "a reversible model must be pre-norm: its blocks add mixer(norm1(x2)) "
        "to x1 and ffn(norm2(y1)) to x2");
  }
  RECUR_RETURN_IF_ERROR(BuildInput(root->input(), &tensors, m.get()));
  RECUR_RETURN_IF_ERROR(
      text::Vocabulary::Build(root->tokenizer(), m->vocab_size, bytes, &m->vocabulary));
  if (root->blocks()->size() == 0) return InvalidModel("model has no blocks");
  for (uint32_t i = 0; i < root->blocks()->size(); ++i) {
    RECUR_RETURN_IF_ERROR(BuildBlock(root->blocks()->Get(i), i, &tensors, m.get()));
    if (m->reversible && !m->blocks.back().ffn.present()) {
      return InvalidModel(
          "blocks.%u: a reversible model's blocks need a feed-forward "
          "(y2 = x2 + ffn(norm2(y1))), but ffn.d_ff is 0",
          i);
    }
  }
  if (root->final_norm() != nullptr) {
    RECUR_RETURN_IF_ERROR(tensors.GetNorm(root->final_norm(), "final_norm", m->stream_width(),
                                          &m->final_norm));
  }
  m->output_width = m->stream_width();
  if (root->head() != nullptr) {
    const fb::Dense* dense = root->head()->dense();
    const fb::Tensor* w = dense && dense->weight() >= 0 &&
                                  uint32_t(dense->weight()) < root->tensors()->size()
                              ? root->tensors()->Get(uint32_t(dense->weight())) : nullptr;
    if (w == nullptr || w->shape()->size() != 2 || w->shape()->Get(0) <= 0 ||
        w->shape()->Get(0) > kMaxWidth) {
      return InvalidModel("head.weight must be an [output_width, %u] tensor", m->stream_width());
    }
    const uint32_t width = static_cast<uint32_t>(w->shape()->Get(0));
    RECUR_RETURN_IF_ERROR(tensors.GetDense(dense, "head", width, m->stream_width(), &m->head));
    const auto act = root->head()->activation();
    if (act != fb::HeadActivation::None && act != fb::HeadActivation::Softmax &&
        act != fb::HeadActivation::LogSoftmax) {
      return Unsupported("head activation %d is not supported", int(act));
    }
    m->head_activation = act;
    m->output_width = width;
  }
  m->parameter_count = tensors.parameter_count();
  if (m->input_projection.weight != nullptr) m->dense_layers.push_back({&m->input_projection, false});
  std::vector<const DenseView*> mixer_layers;
  for (const BlockView& b : m->blocks) {
    mixer_layers.clear();
    b.mixer->CollectDense(&mixer_layers);
    for (const DenseView* d : mixer_layers) m->dense_layers.push_back({d, false});
    if (!b.ffn.present()) continue;
    m->dense_layers.push_back({&b.ffn.linear1, false});
    m->dense_layers.push_back({&b.ffn.linear2, true});
  }
  if (m->head.weight != nullptr) m->dense_layers.push_back({&m->head, false});
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace recur::impl
