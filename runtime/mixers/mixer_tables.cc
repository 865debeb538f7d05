// Schema readers shared by the CPU mixers and the GPU path (mixer_tables.h).
#include "mixers/mixer_tables.h"

#include <algorithm>
#include <string>

namespace recur::impl {

Status ReadAftLocalBias(const fb::AftLocal* t, const std::string& layer, TensorResolver* tensors,
                        std::vector<float>* bias) {
  const size_t D = size_t{t->heads()} * t->dk(), s = t->window();
  const size_t offsets = t->causal() ? s : 2 * s - 1;
  bias->assign(offsets * D, 0.0f);  // (offsets, D)
  const std::string prefix = layer + ".mixer.";
  const float* table = nullptr;
  if (t->pos_bias() >= 0) {
    RECUR_RETURN_IF_ERROR(tensors->Get(t->pos_bias(), (prefix + "pos_bias").c_str(),
                                       {int64_t(offsets)}, false, &table));
    for (size_t o = 0; o < offsets; ++o) {
      std::fill(bias->begin() + o * D, bias->begin() + (o + 1) * D, table[o]);
    }
    return Status::Ok();
  }
  RECUR_RETURN_IF_ERROR(tensors->Get(t->conv_kernel(), (prefix + "conv_kernel").c_str(),
                                     {int64_t(t->heads()), int64_t(offsets)}, false, &table));
  for (size_t o = 0; o < offsets; ++o) {
    for (size_t c = 0; c < D; ++c) (*bias)[o * D + c] = table[(c / t->dk()) * offsets + o];
  }
  return Status::Ok();
}

Status ReadLinformerProjections(const fb::Linformer* t, const std::string& layer,
                                TensorResolver* tensors, LinformerProjections* out) {
  const int64_t heads = t->heads(), k = t->proj_dim(), n = t->seq_len();
  auto read = [&](int32_t index, const std::string& what, const float** p, bool* per_head) {
    *per_head = tensors->Get(index, what.c_str(), {heads, k, n}, false, p).ok();
    if (*per_head) return Status::Ok();
    const Status shared = tensors->Get(index, what.c_str(), {k, n}, false, p);
    if (shared.ok() || index < 0) return shared;
    return Status(shared.code(), shared.message() + " (shared) or [" + std::to_string(heads) +
                                     "," + std::to_string(k) + "," + std::to_string(n) +
                                     "] (per head)");
  };
  const std::string prefix = layer + ".mixer.";
  RECUR_RETURN_IF_ERROR(read(t->e(), prefix + "E", &out->e, &out->e_per_head));
  if (t->f() < 0) {
    out->f = out->e;
    out->f_per_head = out->e_per_head;
    return Status::Ok();
  }
  return read(t->f(), prefix + "F", &out->f, &out->f_per_head);
}

}  // namespace recur::impl
