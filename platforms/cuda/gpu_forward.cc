#include "gpu_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dense/dense.h"
#include "mixers/mixer.h"
#include "mixers/mixer_tables.h"

namespace recur::impl::gpu {

// Device memory of one Run: activations, states and key/value buffers.
struct GpuModel::Buffers {
  Device* device;
  std::vector<void*> owned;
  float* x2 = nullptr;  // a reversible model's second stream (rows, d_model)
  float *x = nullptr, *h = nullptr, *hidden = nullptr, *raw = nullptr, *q = nullptr,
        *k = nullptr, *v = nullptr, *o = nullptr, *num = nullptr, *out = nullptr;
  int32_t* tokens = nullptr;  // (n)
  float* features = nullptr;  // (n, feature_width)
  // Per block: linear attention's S and compensation (H, C, dv + 1); the
  // other mixers' keys (n, H·dk) and values (n, H·dv) of every position
  // (gated: K^quad and V; keys2: FLASH's K^lin).
  std::vector<float*> s, s_comp, keys, keys2, values;
  float* u = nullptr;  // gated: (rows, E)
  float *projected_keys = nullptr, *projected_values = nullptr;  // Linformer: (k, H·dk|dv)
  uint32_t *bucket = nullptr, *order = nullptr, *rank = nullptr, *start = nullptr;  // Reformer
  std::vector<float> host_x;  // the observer's copy

  explicit Buffers(Device* d) : device(d) {}
  ~Buffers() {
    for (void* p : owned) device->Free(p);
  }
  template <class T>
  Status Get(size_t count, T** out) {
    void* p = nullptr;
    RECUR_RETURN_IF_ERROR(device->Allocate(count * sizeof(T), &p));
    owned.push_back(p);
    *out = static_cast<T*>(p);
    return Status::Ok();
  }
};

GpuModel::~GpuModel() {
  for (void* p : allocations_) device_->Free(p);
}

Status GpuModel::Upload(const void* host, size_t bytes, void** out) {
  RECUR_RETURN_IF_ERROR(device_->Allocate(bytes, out));
  allocations_.push_back(*out);
  return device_->CopyToDevice(*out, host, bytes);
}

Status GpuModel::UploadFloats(const float* host, size_t n, float** out) {
  if (host == nullptr) {
    *out = nullptr;
    return Status::Ok();
  }
  void* p = nullptr;
  RECUR_RETURN_IF_ERROR(Upload(host, n * sizeof(float), &p));
  *out = static_cast<float*>(p);
  return Status::Ok();
}

// Narrow weights are decoded to f32 here, once (kernels::DecodeWeightRows:
// ref::DecodeWeight's values), so the GPU multiplies what the CPU does.
Status GpuModel::UploadDense(const DenseView& view, Dense* out) {
  out->in = view.in;
  out->out = view.out;
  const size_t count = size_t{view.in} * view.out;
  if (view.type == kernels::WeightType::kF32) {
    RECUR_RETURN_IF_ERROR(
        UploadFloats(static_cast<const float*>(view.weight), count, &out->weight));
  } else {
    std::vector<float> wide(count);
    kernels::DecodeWeightRows(view, 0, view.out, wide.data());
    RECUR_RETURN_IF_ERROR(UploadFloats(wide.data(), count, &out->weight));
  }
  return UploadFloats(view.bias, view.out, &out->bias);
}

Status GpuModel::UploadNorm(const NormView& view, Norm* out) {
  out->eps = view.eps;
  size_t gamma_floats = model_.d_model;
  switch (view.kind) {
    case fb::NormKind::LayerNorm:
      out->kind = NormKind::kLayerNorm;
      break;
    case fb::NormKind::RmsNorm:
      out->kind = NormKind::kRmsNorm;
      break;
    case fb::NormKind::ScaleNorm:
    case fb::NormKind::ScaleNormRms:
      out->kind = NormKind::kScaleNorm;
      out->scale = view.kind == fb::NormKind::ScaleNorm
                       ? 1.0f
                       : static_cast<float>(1.0 / std::sqrt(double(model_.d_model)));
      gamma_floats = 1;
      break;
    default:
      return Unsupported("the GPU path has no %s norm", fb::EnumNameNormKind(view.kind));
  }
  RECUR_RETURN_IF_ERROR(UploadFloats(view.gamma, gamma_floats, &out->gamma));
  return UploadFloats(view.beta, view.beta ? model_.d_model : 0, &out->beta);
}

Status GpuModel::UploadTensor(int32_t index, const std::string& what,
                              std::initializer_list<int64_t> shape, float** out) {
  TensorResolver tensors(model_.root, model_.segment, model_.root->data_size());
  const float* host = nullptr;
  RECUR_RETURN_IF_ERROR(tensors.Get(index, what.c_str(), shape, false, &host));
  size_t count = 1;
  for (int64_t d : shape) count *= static_cast<size_t>(d);
  return UploadFloats(host, count, out);
}

namespace {
// heads, dk and dv of the attention-style schema tables.
template <class Table, class Block>
void ReadHeads(const Table* t, Block* b) {
  b->heads = t->heads();
  b->dk = t->dk();
  b->dv = t->dv();
}
}  // namespace

Status GpuModel::LoadLinear(const fb::LinearAttention* t, const std::string& layer, Block* b) {
  const fb::FeatureMap fm = t->feature_map();
  if (fm == fb::FeatureMap::FavorStabilized || fm == fb::FeatureMap::GeneralizedRelu ||
      fm == fb::FeatureMap::RandomFourier || fm == fb::FeatureMap::SmoothedRandomFourier) {
    return Unsupported("%s: the GPU path has no %s feature map", layer.c_str(),
                       fb::EnumNameFeatureMap(fm));
  }
  if (t->eps_per_feature()) {
    return Unsupported("%s: the GPU path has no per-feature eps (eps_per_feature)", layer.c_str());
  }
  b->kind = Kind::kLinear;
  ReadHeads(t, b);
  b->causal = t->causal();
  b->eps = t->eps();
  b->poly2 = fm == fb::FeatureMap::Poly2;
  b->feature_map = fm == fb::FeatureMap::Relu ? FeatureMap::kRelu : FeatureMap::kEluPlusOne;
  b->c = b->poly2 ? b->dk * b->dk : b->dk;
  if (fm == fb::FeatureMap::Favor || fm == fb::FeatureMap::FavorHyperbolic) {
    // As LinearAttention::Create (mixers/linear_attention.cc) has checked them.
    const size_t m = t->favor_features();
    b->omega_cols = fm == fb::FeatureMap::Favor ? m : m / 2;
    b->c = fm == fb::FeatureMap::Favor ? m : 2 * b->omega_cols;
    b->favor_temp = t->softmax_temp();
    b->favor_log_m = 0.5f * std::log(static_cast<float>(m));
    RECUR_RETURN_IF_ERROR(UploadTensor(t->omega(), layer + ".mixer.feature_map.omega",
                                       {int64_t(b->dk), int64_t(b->omega_cols)}, &b->omega));
  }
  return Status::Ok();
}

// AftSimple, AftLocal (pos_bias or conv_kernel) and AftFull (pos_bias or
// u, v), as mixers/aft.cc reads them.
Status GpuModel::LoadAft(const fb::Block* table, const std::string& layer, Block* b) {
  b->kind = Kind::kAft;
  const std::string prefix = layer + ".mixer.";
  auto widths = [&](auto* t) {
    b->dk = b->dv = size_t{t->heads()} * t->dk();
    b->causal = t->causal();
  };
  if (const auto* t = table->mixer_as_AftSimple()) {
    widths(t);
    b->aft = AftKind::kSimple;
  } else if (const auto* t = table->mixer_as_AftLocal()) {
    widths(t);
    b->aft = AftKind::kLocal;
    b->window = t->window();
    TensorResolver tensors(model_.root, model_.segment, model_.root->data_size());
    std::vector<float> bias;  // (offsets, D)
    RECUR_RETURN_IF_ERROR(ReadAftLocalBias(t, layer, &tensors, &bias));
    RECUR_RETURN_IF_ERROR(UploadFloats(bias.data(), bias.size(), &b->aft_bias));
  } else if (const auto* t = table->mixer_as_AftFull()) {
    widths(t);
    b->aft = AftKind::kFull;
    b->t_max = t->max_length();
    b->aft_multiply = t->multiply();
    const int64_t T = int64_t(b->t_max);
    if (t->pos_bias() >= 0) {
      RECUR_RETURN_IF_ERROR(UploadTensor(t->pos_bias(), prefix + "pos_bias", {T, T}, &b->aft_w));
    } else {
      b->aft_rank = t->bias_rank();
      const int64_t r = int64_t(b->aft_rank);
      RECUR_RETURN_IF_ERROR(UploadTensor(t->u(), prefix + "u", {T, r}, &b->aft_u));
      RECUR_RETURN_IF_ERROR(UploadTensor(t->v(), prefix + "v", {T, r}, &b->aft_v));
    }
  }
  return Status::Ok();
}

// GAU (2 scale/offset rows, bias over max_length) and FLASH (4 rows, bias
// over the chunk), as GatedProjections (mixers/projections.h) reads them.
Status GpuModel::LoadGated(const fb::Block* table, const std::string& layer, Block* b) {
  b->kind = Kind::kGated;
  const std::string prefix = layer + ".mixer.";
  auto load = [&](auto* t, size_t rows, size_t length) {
    b->dk = t->qk_dim();
    b->dv = t->expansion_dim();
    b->scale = t->scale();
    b->causal = t->causal();
    b->qk_rows = rows;
    const int64_t s = int64_t(b->dk), offsets = b->causal ? int64_t(length) : 2 * int64_t(length) - 1;
    RECUR_RETURN_IF_ERROR(UploadTensor(t->qk_gamma(), prefix + "qk_gamma", {int64_t(rows), s},
                                       &b->gamma));
    RECUR_RETURN_IF_ERROR(UploadTensor(t->qk_beta(), prefix + "qk_beta", {int64_t(rows), s},
                                       &b->beta));
    return UploadTensor(t->rel_bias(), prefix + "rel_bias", {offsets}, &b->rel_bias);
  };
  if (const auto* t = table->mixer_as_Gau()) {
    if (t->length_scale()) {
      return Unsupported("%s: the GPU path has no length-scaled GAU (mixer.length_scale)",
                         layer.c_str());
    }
    b->t_max = t->max_length();
    return load(t, 2, b->t_max);
  }
  const auto* t = table->mixer_as_Flash();
  b->chunk = t->chunk();
  return load(t, 4, b->chunk);
}

Status GpuModel::LoadBlock(size_t layer, Block* b) {
  const BlockView& view = model_.blocks[layer];
  const fb::Block* table = model_.root->blocks()->Get(static_cast<flatbuffers::uoffset_t>(layer));
  const std::string name = "blocks." + std::to_string(layer);
  const fb::Rotary* rotary = nullptr;
  if (const auto* t = table->mixer_as_SoftmaxAttention()) rotary = t->rotary();
  if (const auto* t = table->mixer_as_LinearAttention()) rotary = t->rotary();
  if (const auto* t = table->mixer_as_SlidingWindow()) rotary = t->rotary();
  if (const auto* t = table->mixer_as_Flash()) rotary = t->rotary();
  if (rotary != nullptr) {
    return Unsupported("%s: the GPU path has no rotary position embeddings (mixer.rotary)",
                       name.c_str());
  }
  if (const auto* t = table->mixer_as_LinearAttention()) {
    RECUR_RETURN_IF_ERROR(LoadLinear(t, name, b));
  } else if (const auto* t = table->mixer_as_SoftmaxAttention()) {
    b->kind = Kind::kSoftmax;
    ReadHeads(t, b);
    b->causal = t->causal();
  } else if (const auto* t = table->mixer_as_SlidingWindow()) {
    if (t->query_global() != nullptr) {
      return Unsupported(
          "%s: the GPU path has no sliding-window global projections "
          "(query_global, key_global, value_global)",
          name.c_str());
    }
    b->kind = Kind::kSoftmax;
    ReadHeads(t, b);
    b->causal = t->causal();
    b->sliding = true;
    b->window = t->window();
    b->globals = t->global_tokens();
    std::vector<uint32_t> dilation(b->heads, 1);
    if (t->dilation() != nullptr && t->dilation()->size() == b->heads) {
      for (size_t i = 0; i < b->heads; ++i) dilation[i] = t->dilation()->Get(uint32_t(i));
    }
    void* p = nullptr;
    RECUR_RETURN_IF_ERROR(Upload(dilation.data(), dilation.size() * sizeof(uint32_t), &p));
    b->dilation = static_cast<uint32_t*>(p);
  } else if (table->mixer_as_AftSimple() || table->mixer_as_AftLocal() ||
             table->mixer_as_AftFull()) {
    RECUR_RETURN_IF_ERROR(LoadAft(table, name, b));
  } else if (const auto* t = table->mixer_as_Linformer()) {
    b->kind = Kind::kLinformer;
    ReadHeads(t, b);
    b->causal = false;
    b->proj_rows = t->proj_dim();
    b->seq_len = t->seq_len();
    TensorResolver tensors(model_.root, model_.segment, model_.root->data_size());
    LinformerProjections ef;
    RECUR_RETURN_IF_ERROR(ReadLinformerProjections(t, name, &tensors, &ef));
    const size_t count = b->proj_rows * b->seq_len;  // per head
    b->e_per_head = ef.e_per_head;
    b->f_per_head = ef.f_per_head;
    RECUR_RETURN_IF_ERROR(UploadFloats(ef.e, (ef.e_per_head ? b->heads : 1) * count, &b->lin_e));
    if (ef.f == ef.e) {
      b->lin_f = b->lin_e;
    } else {
      RECUR_RETURN_IF_ERROR(UploadFloats(ef.f, (ef.f_per_head ? b->heads : 1) * count, &b->lin_f));
    }
  } else if (table->mixer_as_Gau() || table->mixer_as_Flash()) {
    RECUR_RETURN_IF_ERROR(LoadGated(table, name, b));
  } else if (const auto* t = table->mixer_as_Reformer()) {
    if (t->form() != fb::ReformerForm::Paper) {
      return Unsupported("%s: the GPU path has no transformers-form Reformer (mixer.form)",
                         name.c_str());
    }
    b->kind = Kind::kReformer;
    ReadHeads(t, b);
    b->causal = false;
    b->buckets = t->n_buckets();
    b->chunk = t->chunk();
    b->rounds = t->rounds();
    RECUR_RETURN_IF_ERROR(UploadTensor(
        t->rotations(), name + ".mixer.rotations",
        {int64_t(b->rounds), int64_t(b->dk), int64_t(b->buckets / 2)}, &b->rotations));
  } else {
    return Unsupported("%s: the GPU path has no %s mixer", name.c_str(),
                       fb::EnumNameMixer(table->mixer_type()));
  }
  if (b->kind == Kind::kSoftmax || b->kind == Kind::kLinformer || b->kind == Kind::kReformer) {
    b->scale = 1.0f / std::sqrt(static_cast<float>(b->dk));  // as the CPU mixers
  }

  std::vector<const DenseView*> dense;
  view.mixer->CollectDense(&dense);  // QkvoProjections/GatedProjections::Collect; Reformer q, v, out
  const bool reformer = b->kind == Kind::kReformer;
  if (dense.size() != (reformer ? 3u : 4u)) {
    return Status(StatusCode::kInternal, name + ": unexpected dense layers of the mixer");
  }
  RECUR_RETURN_IF_ERROR(UploadDense(*dense[0], &b->query));
  if (!reformer) RECUR_RETURN_IF_ERROR(UploadDense(*dense[1], &b->key));
  RECUR_RETURN_IF_ERROR(UploadDense(*dense[reformer ? 1 : 2], &b->value));
  RECUR_RETURN_IF_ERROR(UploadDense(*dense[reformer ? 2 : 3], &b->out));
  RECUR_RETURN_IF_ERROR(UploadNorm(view.norm1, &b->norm1));
  RECUR_RETURN_IF_ERROR(UploadNorm(view.norm2, &b->norm2));
  RECUR_RETURN_IF_ERROR(UploadDense(view.ffn.linear1, &b->ffn1));
  RECUR_RETURN_IF_ERROR(UploadDense(view.ffn.linear2, &b->ffn2));
  b->activation =
      view.ffn.activation == fb::Activation::Gelu ? Activation::kGelu : Activation::kRelu;
  b->glu = view.ffn.glu;
  return Status::Ok();
}

Status GpuModel::Create(const Model& model, Device* device, std::unique_ptr<GpuModel>* out) {
  std::unique_ptr<GpuModel> g(new GpuModel(model, device));
  const size_t d = model.d_model;
  if (model.input_kind == fb::InputKind::Tokens) {
    // Widened to f32 on the device whatever its type in the file.
    Dense embedding;
    RECUR_RETURN_IF_ERROR(g->UploadDense(model.embedding, &embedding));
    g->embedding_ = embedding.weight;
  } else if (model.input_projection.weight != nullptr) {
    RECUR_RETURN_IF_ERROR(g->UploadDense(model.input_projection, &g->input_projection_));
  }
  RECUR_RETURN_IF_ERROR(
      g->UploadFloats(model.positions, size_t{model.max_positions} * d, &g->positions_));
  if (!model.sinusoid_freq.empty()) {
    void* freq = nullptr;
    RECUR_RETURN_IF_ERROR(
        g->Upload(model.sinusoid_freq.data(), model.sinusoid_freq.size() * sizeof(double), &freq));
    g->sinusoid_freq_ = static_cast<double*>(freq);
    RECUR_RETURN_IF_ERROR(g->UploadFloats(model.position_scale, 1, &g->position_scale_));
  }
  if (model.concat_streams) {
    return Unsupported("the GPU path has no concatenated reversible streams "
                       "(residual reversible_concat)");
  }
  g->blocks_.resize(model.blocks.size());
  for (size_t l = 0; l < model.blocks.size(); ++l) {
    if (model.blocks[l].token_shift.present) {
      return Unsupported("blocks.%zu: the GPU path has no token shift (token_shift)", l);
    }
    if (model.blocks[l].ffn.token_mix != nullptr) {
      return Unsupported("blocks.%zu: the GPU path has no FFN token mix (ffn.token_mix)", l);
    }
    if (model.blocks[l].ffn.present() &&
        model.blocks[l].ffn.activation == fb::Activation::ReluSquared) {
      return Unsupported("blocks.%zu: the GPU path has no relu_squared FFN", l);
    }
    if (model.blocks[l].ffn.present() && model.blocks[l].ffn.activation == fb::Activation::Silu) {
      return Unsupported("blocks.%zu: the GPU path has no silu FFN", l);
    }
    Block& b = g->blocks_[l];
    RECUR_RETURN_IF_ERROR(g->LoadBlock(l, &b));
    if (b.kind != Kind::kLinear) b.c = b.dk;
    g->max_qk_ = std::max(g->max_qk_, b.heads * b.dk);
    g->max_c_ = std::max(g->max_c_, b.heads * b.c);
    g->max_v_ = std::max(g->max_v_, b.heads * (b.dv + 1));
    g->max_ff_ = std::max(g->max_ff_, b.ffn1.out + (b.glu ? b.ffn2.in : 0));
    if (b.kind == Kind::kGated) g->max_e_ = std::max(g->max_e_, b.dv);
  }
  RECUR_RETURN_IF_ERROR(g->UploadNorm(model.input_norm, &g->input_norm_));
  RECUR_RETURN_IF_ERROR(g->UploadNorm(model.final_norm, &g->final_norm_));
  if (model.head.weight != nullptr) RECUR_RETURN_IF_ERROR(g->UploadDense(model.head, &g->head_));
  *out = std::move(g);
  return Status::Ok();
}

// y (rows, out) = act(x (rows, in)·Wᵀ + b), or y += x·Wᵀ + b.
Status GpuModel::Linear(const Dense& d, const float* x, size_t rows, float* y, bool accumulate,
                        Activation activation) {
  RECUR_RETURN_IF_ERROR(
      device_->Gemm(LinearLayer(rows, d.in, d.out, x, d.weight, accumulate, y)));
  if (d.bias == nullptr && activation == Activation::kNone) return Status::Ok();
  return device_->Launch(BiasActivation{d.bias, d.out, activation, y}, rows * d.out);
}

// Linear attention over rows positions: in → b.o (rows, H·dv).
Status GpuModel::LinearMixer(Buffers& b, size_t layer, const float* in, size_t rows) {
  const Block& m = blocks_[layer];
  const size_t features = rows * m.heads * m.c;
  for (auto [dense, phi] : {std::pair{&m.query, b.q}, std::pair{&m.key, b.k}}) {
    if (m.omega != nullptr) {
      RECUR_RETURN_IF_ERROR(Linear(*dense, in, rows, b.raw, false));
      RECUR_RETURN_IF_ERROR(device_->Launch(
          FavorFeatures{b.raw, m.omega, m.dk, m.omega_cols, m.c, std::sqrt(m.favor_temp),
                        m.favor_temp, m.favor_log_m, phi},
          features));
    } else if (m.poly2) {
      RECUR_RETURN_IF_ERROR(Linear(*dense, in, rows, b.raw, false));
      RECUR_RETURN_IF_ERROR(device_->Launch(Poly2Features{b.raw, m.dk, phi}, features));
    } else {
      RECUR_RETURN_IF_ERROR(Linear(*dense, in, rows, phi, false));
      RECUR_RETURN_IF_ERROR(device_->Launch(ElementwiseFeatures{m.feature_map, phi}, features));
    }
  }
  RECUR_RETURN_IF_ERROR(Linear(m.value, in, rows, b.v, false));
  RECUR_RETURN_IF_ERROR(device_->Launch(
      LinearAttentionScan{b.q, b.k, b.v, rows, m.heads, m.c, m.dv, m.causal, b.s[layer],
                          b.s_comp[layer], b.num},
      m.heads * (m.dv + 1)));
  return device_->Launch(LinearAttentionRead{b.num, m.dv, m.eps, b.o}, rows * m.heads * m.dv);
}

// GAU and FLASH (GatedProjections, mixers/projections.h): u, v = silu(x W),
// z = silu(x W_z), the scale/offset rows of z, attention, o ⊙ u → b.o.
Status GpuModel::GatedMixer(Buffers& b, size_t layer, const float* in, size_t rows, size_t p0,
                            size_t n) {
  const Block& m = blocks_[layer];
  const size_t s = m.dk, e = m.dv;
  float* kq = b.keys[layer] + p0 * s;
  float* kl = b.keys2[layer] != nullptr ? b.keys2[layer] + p0 * s : nullptr;
  RECUR_RETURN_IF_ERROR(Linear(m.query, in, rows, b.u, false, Activation::kSilu));  // u_proj
  RECUR_RETURN_IF_ERROR(
      Linear(m.key, in, rows, b.values[layer] + p0 * e, false, Activation::kSilu));  // v_proj
  RECUR_RETURN_IF_ERROR(Linear(m.value, in, rows, b.raw, false, Activation::kSilu));  // z_proj
  // Rows of gamma/beta: GAU q, k; FLASH q^quad, k^quad, q^lin, k^lin.
  float* targets[4] = {b.q, kq, b.k, kl};
  for (size_t r = 0; r < m.qk_rows; ++r) {
    RECUR_RETURN_IF_ERROR(device_->Launch(
        ScaleOffset{b.raw, m.gamma + r * s, m.beta + r * s, s, targets[r]}, rows * s));
  }
  const size_t kv = m.causal ? p0 + rows : n;
  RECUR_RETURN_IF_ERROR(device_->Launch(
      GatedAttention{b.q, b.k, b.keys[layer], b.keys2[layer], b.values[layer], p0, kv, s, e,
                     m.scale, m.rel_bias, m.causal, m.chunk, m.t_max, b.o},
      rows));
  return device_->Launch(MultiplyInPlace{b.u, b.o}, rows * e);
}

// Reformer over the whole sequence (n rows): in → b.o.
Status GpuModel::ReformerMixer(Buffers& b, size_t layer, const float* in, size_t n) {
  const Block& m = blocks_[layer];
  RECUR_RETURN_IF_ERROR(Linear(m.query, in, n, b.q, false));
  RECUR_RETURN_IF_ERROR(Linear(m.value, in, n, b.values[layer], false));
  float* keys = b.keys[layer];
  RECUR_RETURN_IF_ERROR(device_->Launch(NormalizeRows{b.q, m.dk, keys}, n * m.heads));
  const size_t tables = m.rounds * m.heads;
  RECUR_RETURN_IF_ERROR(device_->Launch(
      LshBuckets{keys, m.rotations, n, m.heads, m.dk, m.buckets / 2, b.bucket}, tables * n));
  RECUR_RETURN_IF_ERROR(
      device_->Launch(LshSort{b.bucket, n, m.buckets, b.start, b.order, b.rank}, tables));
  return device_->Launch(LshAttend{b.q, keys, b.values[layer], b.order, b.rank, n, m.heads, m.dk,
                                   m.dv, m.chunk, m.rounds, m.scale, b.o},
                         n * m.heads);
}

// The block's mixer over rows positions p0 … p0 + rows − 1 of n: in → y
// (rows, d_model); y may be in (every read of in comes first).
Status GpuModel::Mixer(Buffers& b, size_t layer, const float* in, size_t rows, size_t p0,
                       size_t n, float* y) {
  const Block& m = blocks_[layer];
  const size_t qk = m.heads * m.dk, vw = m.heads * m.dv;
  switch (m.kind) {
    case Kind::kLinear:
      RECUR_RETURN_IF_ERROR(LinearMixer(b, layer, in, rows));
      break;
    case Kind::kGated:
      RECUR_RETURN_IF_ERROR(GatedMixer(b, layer, in, rows, p0, n));
      break;
    case Kind::kReformer:
      RECUR_RETURN_IF_ERROR(ReformerMixer(b, layer, in, rows));
      break;
    case Kind::kSoftmax:
    case Kind::kAft:
    case Kind::kLinformer: {
      // Keys and values of every position so far, (n, width).
      float* keys = b.keys[layer];
      float* values = b.values[layer];
      RECUR_RETURN_IF_ERROR(Linear(m.query, in, rows, b.q, false));
      RECUR_RETURN_IF_ERROR(Linear(m.key, in, rows, keys + p0 * qk, false));
      RECUR_RETURN_IF_ERROR(Linear(m.value, in, rows, values + p0 * vw, false));
      const size_t kv = m.causal ? p0 + rows : n;
      if (m.kind == Kind::kAft) {
        RECUR_RETURN_IF_ERROR(device_->Launch(
            AftAttention{b.q, keys, values, p0, kv, m.dk, m.causal, m.aft, m.aft_bias, m.window,
                         m.aft_w, m.aft_u, m.aft_v, m.aft_rank, m.t_max, m.aft_multiply, b.o},
            rows * m.dk));
        break;
      }
      size_t attended = kv;
      if (m.kind == Kind::kLinformer) {  // keys, values projected along the sequence to k rows
        RECUR_RETURN_IF_ERROR(device_->Launch(
            SequenceProjection{m.lin_e, m.e_per_head, keys, n, m.seq_len, m.proj_rows, m.heads,
                               m.dk, b.projected_keys},
            m.proj_rows * qk));
        RECUR_RETURN_IF_ERROR(device_->Launch(
            SequenceProjection{m.lin_f, m.f_per_head, values, n, m.seq_len, m.proj_rows, m.heads,
                               m.dv, b.projected_values},
            m.proj_rows * vw));
        keys = b.projected_keys;
        values = b.projected_values;
        attended = m.proj_rows;
      }
      RECUR_RETURN_IF_ERROR(device_->Launch(
          SoftmaxAttention{b.q, keys, values, p0, attended, m.heads, m.dk, m.dv, m.scale,
                           m.causal, m.sliding, m.window, m.globals, m.dilation, b.o},
          rows * m.heads));
      break;
    }
  }
  return Linear(m.out, b.o, rows, y, false);
}

// As Session::RunBlock: pre-norm x += mixer(norm1(x)); x += ffn(norm2(x)), or
// post-norm x = norm1(x + mixer(x)); x = norm2(x + ffn(x)); without a
// feed-forward, only the first half; reversible: x1 += mixer(norm1(x2)),
// x2 += ffn(norm2(x1)).
Status GpuModel::RunBlock(Buffers& b, size_t layer, size_t rows, size_t p0, size_t n) {
  const Block& m = blocks_[layer];
  const size_t d = model_.d_model, count = rows * d;
  auto norm = [&](const Norm& nv, const float* x, float* y) {
    return device_->Launch(LayerNormRows{x, nv.gamma, nv.beta, nv.eps, d, y, nv.kind, nv.scale},
                           rows);
  };
  auto ffn = [&](const float* x, float* y) {  // y += linear2(act(linear1(x)))
    if (m.glu) {  // y += linear2(act(a) ⊙ b), the gate after linear1's rows in b.hidden
      float* gated = b.hidden + rows * m.ffn1.out;
      RECUR_RETURN_IF_ERROR(Linear(m.ffn1, x, rows, b.hidden, false));
      RECUR_RETURN_IF_ERROR(
          device_->Launch(GluRows{b.hidden, m.ffn2.in, m.activation, gated}, rows * m.ffn2.in));
      return Linear(m.ffn2, gated, rows, y, true);
    }
    RECUR_RETURN_IF_ERROR(Linear(m.ffn1, x, rows, b.hidden, false, m.activation));
    return Linear(m.ffn2, b.hidden, rows, y, true);
  };
  const bool has_ffn = m.ffn1.weight != nullptr;  // else the block ends after the mixer
  if (model_.reversible) {                        // x1 += mixer(norm1(x2)); x2 += ffn(norm2(x1))
    RECUR_RETURN_IF_ERROR(norm(m.norm1, b.x2, b.h));
    RECUR_RETURN_IF_ERROR(Mixer(b, layer, b.h, rows, p0, n, b.h));
    RECUR_RETURN_IF_ERROR(device_->Launch(AddInPlace{b.h, b.x}, count));
    RECUR_RETURN_IF_ERROR(norm(m.norm2, b.x, b.h));
    return ffn(b.h, b.x2);
  }
  if (model_.norm_placement == fb::NormPlacement::Pre) {
    RECUR_RETURN_IF_ERROR(norm(m.norm1, b.x, b.h));
    RECUR_RETURN_IF_ERROR(Mixer(b, layer, b.h, rows, p0, n, b.h));
    RECUR_RETURN_IF_ERROR(device_->Launch(AddInPlace{b.h, b.x}, count));
    if (!has_ffn) return Status::Ok();
    RECUR_RETURN_IF_ERROR(norm(m.norm2, b.x, b.h));
    return ffn(b.h, b.x);
  }
  RECUR_RETURN_IF_ERROR(Mixer(b, layer, b.x, rows, p0, n, b.h));
  RECUR_RETURN_IF_ERROR(device_->Launch(AddInPlace{b.h, b.x}, count));
  RECUR_RETURN_IF_ERROR(norm(m.norm1, b.x, b.x));
  if (!has_ffn) return Status::Ok();
  RECUR_RETURN_IF_ERROR(device_->CopyOnDevice(b.h, b.x, count * sizeof(float)));
  RECUR_RETURN_IF_ERROR(ffn(b.x, b.h));
  return norm(m.norm2, b.h, b.x);
}

// Positions p0 … p0 + rows − 1: input, blocks, head → out (rows, output_width)
// on the host.
Status GpuModel::Forward(Buffers& b, size_t rows, size_t p0, size_t n, float* out,
                         LayerObserver observer, void* user) {
  const Model& m = model_;
  const size_t d = m.d_model;
  if (m.input_kind == fb::InputKind::Tokens) {
    RECUR_RETURN_IF_ERROR(device_->Launch(GatherRows{embedding_, b.tokens + p0, d, b.x}, rows * d));
  } else if (input_projection_.weight != nullptr) {
    RECUR_RETURN_IF_ERROR(
        Linear(input_projection_, b.features + p0 * m.feature_width, rows, b.x, false));
  } else {
    RECUR_RETURN_IF_ERROR(
        device_->CopyOnDevice(b.x, b.features + p0 * d, rows * d * sizeof(float)));
  }
  if (positions_ != nullptr) {
    RECUR_RETURN_IF_ERROR(device_->Launch(AddInPlace{positions_ + p0 * d, b.x}, rows * d));
  }
  if (sinusoid_freq_ != nullptr) {
    RECUR_RETURN_IF_ERROR(device_->Launch(
        AddSinusoid{sinusoid_freq_, position_scale_, d / 2, p0, b.x}, rows * (d / 2)));
  }
  if (input_norm_.gamma != nullptr) {
    RECUR_RETURN_IF_ERROR(
        device_->Launch(LayerNormRows{b.x, input_norm_.gamma, input_norm_.beta, input_norm_.eps, d,
                                      b.x, input_norm_.kind, input_norm_.scale},
                        rows));
  }
  if (m.reversible) {  // x1 = x2 = the input
    RECUR_RETURN_IF_ERROR(device_->CopyOnDevice(b.x2, b.x, rows * d * sizeof(float)));
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    RECUR_RETURN_IF_ERROR(RunBlock(b, l, rows, p0, n));
    if (observer != nullptr) {
      const float* stream = b.x;
      if (m.reversible) {  // x1 + x2, as the CPU session passes it
        RECUR_RETURN_IF_ERROR(device_->CopyOnDevice(b.h, b.x, rows * d * sizeof(float)));
        RECUR_RETURN_IF_ERROR(device_->Launch(AddInPlace{b.x2, b.h}, rows * d));
        stream = b.h;
      }
      b.host_x.resize(rows * d);
      RECUR_RETURN_IF_ERROR(device_->CopyToHost(b.host_x.data(), stream, rows * d * sizeof(float)));
      observer(user, l, b.host_x.data(), rows);
    }
  }
  if (m.reversible) RECUR_RETURN_IF_ERROR(device_->Launch(AddInPlace{b.x2, b.x}, rows * d));
  if (final_norm_.gamma != nullptr) {
    RECUR_RETURN_IF_ERROR(
        device_->Launch(LayerNormRows{b.x, final_norm_.gamma, final_norm_.beta, final_norm_.eps, d,
                                      b.x, final_norm_.kind, final_norm_.scale},
                        rows));
  }
  const float* result = b.x;
  if (head_.weight != nullptr) {
    RECUR_RETURN_IF_ERROR(Linear(head_, b.x, rows, b.out, false));
    if (m.head_activation != fb::HeadActivation::None) {
      const bool log = m.head_activation == fb::HeadActivation::LogSoftmax;
      RECUR_RETURN_IF_ERROR(device_->Launch(RowSoftmax{head_.out, log, b.out}, rows));
    }
    result = b.out;
  }
  return device_->CopyToHost(out + p0 * m.output_width, result,
                             rows * m.output_width * sizeof(float));
}

Status GpuModel::Run(Mode mode, size_t n, const int32_t* tokens, const float* features,
                     float* out, LayerObserver observer, void* user) {
  const Model& m = model_;
  const bool token_input = m.input_kind == fb::InputKind::Tokens;
  if ((token_input ? static_cast<const void*>(tokens) : features) == nullptr || out == nullptr) {
    return InvalidArgument("GPU run: this model takes %s, and they or the output are null",
                           token_input ? "tokens" : "feature frames");
  }
  if (token_input) {
    for (size_t t = 0; t < n; ++t) {
      if (tokens[t] < 0 || uint32_t(tokens[t]) >= m.vocab_size) {
        return InvalidArgument("GPU run: token %d at position %zu is outside [0, %u)", tokens[t],
                               t, m.vocab_size);
      }
    }
  }
  if (m.positions != nullptr && n > m.max_positions) {
    return OutOfRange("GPU run: %zu positions, but the model's learned positions end at %u", n,
                      m.max_positions);
  }
  for (size_t l = 0; l < m.blocks.size(); ++l) {
    const recur::impl::Mixer& mixer = *m.blocks[l].mixer;
    // Linformer's seq_len, AFT-full's and GAU's max_length, as the session.
    if (mixer.max_sequence() != 0 && n > mixer.max_sequence()) {
      return OutOfRange("GPU run: blocks.%zu takes sequences of at most %zu positions; got %zu",
                        l, mixer.max_sequence(), n);
    }
    if (mode == Mode::kStep && !mixer.causal()) {
      return Unsupported("GPU step: blocks.%zu is non-causal (an encoder): it has no recurrent "
                         "form; run it in parallel mode", l);
    }
  }
  if (n == 0) return Status::Ok();

  Buffers b(device_);
  const size_t rows = mode == Mode::kParallel ? n : 1;
  const size_t d = m.d_model;
  RECUR_RETURN_IF_ERROR(b.Get(rows * d, &b.x));
  RECUR_RETURN_IF_ERROR(b.Get(rows * d, &b.h));
  if (m.reversible) RECUR_RETURN_IF_ERROR(b.Get(rows * d, &b.x2));
  RECUR_RETURN_IF_ERROR(b.Get(rows * max_ff_, &b.hidden));
  RECUR_RETURN_IF_ERROR(b.Get(rows * max_qk_, &b.raw));
  RECUR_RETURN_IF_ERROR(b.Get(rows * std::max(max_qk_, max_c_), &b.q));
  RECUR_RETURN_IF_ERROR(b.Get(rows * max_c_, &b.k));
  RECUR_RETURN_IF_ERROR(b.Get(rows * max_v_, &b.v));
  RECUR_RETURN_IF_ERROR(b.Get(rows * max_v_, &b.o));
  RECUR_RETURN_IF_ERROR(b.Get(rows * max_v_, &b.num));
  RECUR_RETURN_IF_ERROR(b.Get(rows * m.output_width, &b.out));
  if (token_input) {
    RECUR_RETURN_IF_ERROR(b.Get(n, &b.tokens));
    RECUR_RETURN_IF_ERROR(device_->CopyToDevice(b.tokens, tokens, n * sizeof(int32_t)));
  } else {
    RECUR_RETURN_IF_ERROR(b.Get(n * m.feature_width, &b.features));
    RECUR_RETURN_IF_ERROR(
        device_->CopyToDevice(b.features, features, n * m.feature_width * sizeof(float)));
  }
  const size_t layers = blocks_.size();
  RECUR_RETURN_IF_ERROR(b.Get(rows * max_e_, &b.u));
  b.s.assign(layers, nullptr);
  b.s_comp.assign(layers, nullptr);
  b.keys.assign(layers, nullptr);
  b.keys2.assign(layers, nullptr);
  b.values.assign(layers, nullptr);
  size_t projected = 0, lsh_tables = 0, lsh_starts = 0;
  for (size_t l = 0; l < layers; ++l) {  // Allocate zeroes: empty states
    const Block& k = blocks_[l];
    if (k.kind == Kind::kLinear) {
      const size_t floats = k.heads * k.c * (k.dv + 1);
      RECUR_RETURN_IF_ERROR(b.Get(floats, &b.s[l]));
      RECUR_RETURN_IF_ERROR(b.Get(floats, &b.s_comp[l]));
      continue;
    }
    RECUR_RETURN_IF_ERROR(b.Get(n * k.heads * k.dk, &b.keys[l]));
    RECUR_RETURN_IF_ERROR(b.Get(n * k.heads * k.dv, &b.values[l]));
    if (k.kind == Kind::kGated && k.chunk != 0) RECUR_RETURN_IF_ERROR(b.Get(n * k.dk, &b.keys2[l]));
    if (k.kind == Kind::kLinformer) {
      projected = std::max(projected, k.proj_rows * k.heads * std::max(k.dk, k.dv));
    }
    if (k.kind == Kind::kReformer) {
      lsh_tables = std::max(lsh_tables, k.rounds * k.heads * n);
      lsh_starts = std::max(lsh_starts, k.rounds * k.heads * (k.buckets + 1));
    }
  }
  RECUR_RETURN_IF_ERROR(b.Get(projected, &b.projected_keys));
  RECUR_RETURN_IF_ERROR(b.Get(projected, &b.projected_values));
  RECUR_RETURN_IF_ERROR(b.Get(lsh_tables, &b.bucket));
  RECUR_RETURN_IF_ERROR(b.Get(lsh_tables, &b.order));
  RECUR_RETURN_IF_ERROR(b.Get(lsh_tables, &b.rank));
  RECUR_RETURN_IF_ERROR(b.Get(lsh_starts, &b.start));
  if (mode == Mode::kParallel) return Forward(b, n, 0, n, out, observer, user);
  for (size_t t = 0; t < n; ++t) {
    RECUR_RETURN_IF_ERROR(Forward(b, 1, t, n, out, observer, user));
  }
  return Status::Ok();
}

}  // namespace recur::impl::gpu
