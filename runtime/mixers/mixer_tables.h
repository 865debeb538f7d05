// Parameters a mixer derives from its schema table, in one place: the CPU
// mixers (aft.cc, linformer.cc) build themselves with these, and the GPU
// parity path (platforms/cuda/gpu_forward.cc) reads the same tables through
// them, so both run the model the file describes in the same way.
#ifndef RECUR_MIXERS_MIXER_TABLES_H_
#define RECUR_MIXERS_MIXER_TABLES_H_

#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace recur::impl {

// AFT-local / AFT-conv (docs/attention-math.md §4): the position bias w expanded
// to (offsets, D = heads·dk), offset o = t − p (causal; offsets = window) or
// t − p + window − 1 (encoder; offsets = 2·window − 1). From pos_bias
// [offsets] (aft_local: shared by every channel) or conv_kernel [heads,
// offsets] (aft_conv: one kernel per head). The caller has checked that
// exactly one of them is set. `layer` names the block in messages.
Status ReadAftLocalBias(const fb::AftLocal* t, const std::string& layer, TensorResolver* tensors,
                        std::vector<float>* bias);

// Linformer's E and F (docs/attention-math.md §7): each per head [heads,
// proj_dim, seq_len] or shared [proj_dim, seq_len], told apart by rank
// (*_per_head says which); F absent (key = value sharing): F = E.
struct LinformerProjections {
  const float* e = nullptr;
  const float* f = nullptr;
  bool e_per_head = false, f_per_head = false;
};
Status ReadLinformerProjections(const fb::Linformer* t, const std::string& layer,
                                TensorResolver* tensors, LinformerProjections* out);

}  // namespace recur::impl

#endif  // RECUR_MIXERS_MIXER_TABLES_H_
