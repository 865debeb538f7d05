#include "gpu_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dense/dense_ref.h"
#include "mixers/mixer.h"

namespace recur::gpu {

// Device memory of one Run: activations, states and key/value buffers.
struct GpuModel::Buffers {
  Device* device;
  std::vector<void*> owned;
  float *x = nullptr, *h = nullptr, *hidden = nullptr, *raw = nullptr, *q = nullptr,
        *k = nullptr, *v = nullptr, *o = nullptr, *num = nullptr, *out = nullptr;
  int32_t* tokens = nullptr;  // (n)
  float* features = nullptr;  // (n, feature_width)
  // Per block: linear attention's S and compensation (H, C, dv + 1); the
  // softmax family's keys (n, H, dk) and values (n, H, dv).
  std::vector<float*> s, s_comp, keys, values;
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

// Narrow weights are decoded to f32 here, once: w = the f16/bf16 value or
// scale[o]·q (kernels/dense/dense.h), so the GPU multiplies what the CPU does.
Status GpuModel::UploadDense(const DenseView& view, Dense* out) {
  out->in = view.in;
  out->out = view.out;
  const size_t count = size_t{view.in} * view.out;
  if (view.type == kernels::WeightType::kF32) {
    RECUR_RETURN_IF_ERROR(
        UploadFloats(static_cast<const float*>(view.weight), count, &out->weight));
  } else {
    std::vector<float> wide(count);
    for (size_t o = 0; o < view.out; ++o) {
      for (size_t i = 0; i < view.in; ++i) {
        wide[o * view.in + i] = static_cast<float>(kernels::ref::DecodeWeight(view, o, i));
      }
    }
    RECUR_RETURN_IF_ERROR(UploadFloats(wide.data(), count, &out->weight));
  }
  return UploadFloats(view.bias, view.out, &out->bias);
}

Status GpuModel::UploadNorm(const NormView& view, Norm* out) {
  out->eps = view.eps;
  RECUR_RETURN_IF_ERROR(UploadFloats(view.gamma, model_.d_model, &out->gamma));
  return UploadFloats(view.beta, model_.d_model, &out->beta);
}

Status GpuModel::LoadBlock(size_t layer, Block* b) {
  const BlockView& view = model_.blocks[layer];
  const fb::Block* table = model_.root->blocks()->Get(static_cast<flatbuffers::uoffset_t>(layer));
  const fb::Mixer type = table->mixer_type();
  if (const auto* t = table->mixer_as_LinearAttention()) {
    const fb::FeatureMap fm = t->feature_map();
    if (fm != fb::FeatureMap::EluPlusOne && fm != fb::FeatureMap::Relu &&
        fm != fb::FeatureMap::Poly2) {
      return Unsupported("blocks.%zu: the GPU path has no %s feature map (it has elu+1, relu and "
                         "poly2)", layer, fb::EnumNameFeatureMap(fm));
    }
    b->linear = true;
    b->poly2 = fm == fb::FeatureMap::Poly2;
    b->feature_map = fm == fb::FeatureMap::Relu ? FeatureMap::kRelu : FeatureMap::kEluPlusOne;
    b->heads = t->heads();
    b->dk = t->dk();
    b->dv = t->dv();
    b->c = b->poly2 ? b->dk * b->dk : b->dk;
    b->eps = t->eps();
    b->causal = t->causal();
  } else if (const auto* t = table->mixer_as_SoftmaxAttention()) {
    b->heads = t->heads();
    b->dk = t->dk();
    b->dv = t->dv();
    b->causal = t->causal();
  } else if (const auto* t = table->mixer_as_SlidingWindowAttention()) {
    b->heads = t->heads();
    b->dk = t->dk();
    b->dv = t->dv();
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
  } else {
    return Unsupported("blocks.%zu: the GPU path has no %s mixer (it has LinearAttention, "
                       "SoftmaxAttention and SlidingWindowAttention)", layer,
                       fb::EnumNameMixer(type));
  }
  if (!b->linear) b->scale = 1.0f / std::sqrt(static_cast<float>(b->dk));  // as the CPU mixers

  std::vector<const DenseView*> dense;
  view.mixer->CollectDense(&dense);  // QkvoProjections::Collect: query, key, value, out
  if (dense.size() != 4) {
    return Status(StatusCode::kInternal, "blocks." + std::to_string(layer) +
                                             ": expected the query, key, value and out layers");
  }
  RECUR_RETURN_IF_ERROR(UploadDense(*dense[0], &b->query));
  RECUR_RETURN_IF_ERROR(UploadDense(*dense[1], &b->key));
  RECUR_RETURN_IF_ERROR(UploadDense(*dense[2], &b->value));
  RECUR_RETURN_IF_ERROR(UploadDense(*dense[3], &b->out));
  RECUR_RETURN_IF_ERROR(UploadNorm(view.norm1, &b->norm1));
  RECUR_RETURN_IF_ERROR(UploadNorm(view.norm2, &b->norm2));
  RECUR_RETURN_IF_ERROR(UploadDense(view.ffn.linear1, &b->ffn1));
  RECUR_RETURN_IF_ERROR(UploadDense(view.ffn.linear2, &b->ffn2));
  b->activation =
      view.ffn.activation == fb::Activation::Gelu ? Activation::kGelu : Activation::kRelu;
  return Status::Ok();
}

Status GpuModel::Create(const Model& model, Device* device, std::unique_ptr<GpuModel>* out) {
  std::unique_ptr<GpuModel> g(new GpuModel(model, device));
  const size_t d = model.d_model;
  if (model.input_kind == fb::InputKind::Tokens) {
    RECUR_RETURN_IF_ERROR(g->UploadFloats(model.embedding, size_t{model.vocab_size} * d,
                                          &g->embedding_));
  } else if (model.input_projection.weight != nullptr) {
    RECUR_RETURN_IF_ERROR(g->UploadDense(model.input_projection, &g->input_projection_));
  }
  RECUR_RETURN_IF_ERROR(
      g->UploadFloats(model.positions, size_t{model.max_positions} * d, &g->positions_));
  g->blocks_.resize(model.blocks.size());
  for (size_t l = 0; l < model.blocks.size(); ++l) {
    Block& b = g->blocks_[l];
    RECUR_RETURN_IF_ERROR(g->LoadBlock(l, &b));
    g->max_qk_ = std::max(g->max_qk_, b.heads * b.dk);
    g->max_c_ = std::max(g->max_c_, b.heads * b.c);
    g->max_v_ = std::max(g->max_v_, b.heads * (b.dv + 1));
    g->max_ff_ = std::max(g->max_ff_, b.ffn1.out);
  }
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

// The block's mixer over rows positions p0 … p0 + rows − 1 of n: in → y
// (rows, d_model); y may be in (every read of in comes first).
Status GpuModel::Mixer(Buffers& b, size_t layer, const float* in, size_t rows, size_t p0,
                       size_t n, float* y) {
  const Block& m = blocks_[layer];
  const size_t qk = m.heads * m.dk, vw = m.heads * m.dv;
  if (m.linear) {
    const size_t features = rows * m.heads * m.c;
    for (auto [dense, phi] : {std::pair{&m.query, b.q}, std::pair{&m.key, b.k}}) {
      if (m.poly2) {
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
    RECUR_RETURN_IF_ERROR(
        device_->Launch(LinearAttentionRead{b.num, m.dv, m.eps, b.o}, rows * vw));
  } else {
    float* keys = b.keys[layer] + p0 * qk;
    float* values = b.values[layer] + p0 * vw;
    RECUR_RETURN_IF_ERROR(Linear(m.query, in, rows, b.q, false));
    RECUR_RETURN_IF_ERROR(Linear(m.key, in, rows, keys, false));
    RECUR_RETURN_IF_ERROR(Linear(m.value, in, rows, values, false));
    const size_t kv = m.causal ? p0 + rows : n;
    RECUR_RETURN_IF_ERROR(device_->Launch(
        SoftmaxAttention{b.q, b.keys[layer], b.values[layer], p0, kv, m.heads, m.dk, m.dv,
                         m.scale, m.causal, m.sliding, m.window, m.globals, m.dilation, b.o},
        rows * m.heads));
  }
  return Linear(m.out, b.o, rows, y, false);
}

// As Session::RunBlock: pre-norm x += mixer(norm1(x)); x += ffn(norm2(x)), or
// post-norm x = norm1(x + mixer(x)); x = norm2(x + ffn(x)).
Status GpuModel::RunBlock(Buffers& b, size_t layer, size_t rows, size_t p0, size_t n) {
  const Block& m = blocks_[layer];
  const size_t d = model_.d_model, count = rows * d;
  auto norm = [&](const Norm& nv, const float* x, float* y) {
    return device_->Launch(LayerNormRows{x, nv.gamma, nv.beta, nv.eps, d, y}, rows);
  };
  auto ffn = [&](const float* x, float* y) {  // y += linear2(act(linear1(x)))
    RECUR_RETURN_IF_ERROR(Linear(m.ffn1, x, rows, b.hidden, false, m.activation));
    return Linear(m.ffn2, b.hidden, rows, y, true);
  };
  if (model_.norm_placement == fb::NormPlacement::Pre) {
    RECUR_RETURN_IF_ERROR(norm(m.norm1, b.x, b.h));
    RECUR_RETURN_IF_ERROR(Mixer(b, layer, b.h, rows, p0, n, b.h));
    RECUR_RETURN_IF_ERROR(device_->Launch(AddInPlace{b.h, b.x}, count));
    RECUR_RETURN_IF_ERROR(norm(m.norm2, b.x, b.h));
    return ffn(b.h, b.x);
  }
  RECUR_RETURN_IF_ERROR(Mixer(b, layer, b.x, rows, p0, n, b.h));
  RECUR_RETURN_IF_ERROR(device_->Launch(AddInPlace{b.h, b.x}, count));
  RECUR_RETURN_IF_ERROR(norm(m.norm1, b.x, b.x));
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
  for (size_t l = 0; l < blocks_.size(); ++l) {
    RECUR_RETURN_IF_ERROR(RunBlock(b, l, rows, p0, n));
    if (observer != nullptr) {
      b.host_x.resize(rows * d);
      RECUR_RETURN_IF_ERROR(device_->CopyToHost(b.host_x.data(), b.x, rows * d * sizeof(float)));
      observer(user, l, b.host_x.data(), rows);
    }
  }
  if (final_norm_.gamma != nullptr) {
    RECUR_RETURN_IF_ERROR(device_->Launch(
        LayerNormRows{b.x, final_norm_.gamma, final_norm_.beta, final_norm_.eps, d, b.x}, rows));
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
  for (size_t l = 0; l < blocks_.size() && mode == Mode::kStep; ++l) {
    if (!blocks_[l].causal) {
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
  b.s.assign(layers, nullptr);
  b.s_comp.assign(layers, nullptr);
  b.keys.assign(layers, nullptr);
  b.values.assign(layers, nullptr);
  for (size_t l = 0; l < layers; ++l) {  // Allocate zeroes: empty states
    const Block& k = blocks_[l];
    if (k.linear) {
      const size_t floats = k.heads * k.c * (k.dv + 1);
      RECUR_RETURN_IF_ERROR(b.Get(floats, &b.s[l]));
      RECUR_RETURN_IF_ERROR(b.Get(floats, &b.s_comp[l]));
    } else {
      RECUR_RETURN_IF_ERROR(b.Get(n * k.heads * k.dk, &b.keys[l]));
      RECUR_RETURN_IF_ERROR(b.Get(n * k.heads * k.dv, &b.values[l]));
    }
  }
  if (mode == Mode::kParallel) return Forward(b, n, 0, n, out, observer, user);
  for (size_t t = 0; t < n; ++t) {
    RECUR_RETURN_IF_ERROR(Forward(b, 1, t, n, out, observer, user));
  }
  return Status::Ok();
}

}  // namespace recur::gpu
