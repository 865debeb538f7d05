// Mamba2's SSD mixer parameters (config type "mamba2"; docs/attention-math.md §17).
#ifndef RECUR_CONVERTER_MIXERS_MAMBA2_H_
#define RECUR_CONVERTER_MIXERS_MAMBA2_H_

#include <cstdint>
#include <limits>

#include "converter/model_description.h"

namespace recur::impl::converter {

struct Mamba2Params : MixerParamsOf<Mamba2Params> {
  uint32_t heads = 0;       // H
  uint32_t head_dim = 0;    // P
  uint32_t state_size = 0;  // N
  uint32_t groups = 1;      // G
  uint32_t conv_kernel = 4;  // K
  float norm_eps = 1e-5f;
  float dt_min = 0.0f, dt_max = std::numeric_limits<float>::infinity();
  bool bias = false;  // in_proj and out_proj have biases
  int64_t inner() const { return int64_t{heads} * head_dim; }
  // The convolution's width W = I + 2·G·N.
  int64_t conv_width() const { return inner() + 2 * int64_t{groups} * state_size; }
  // in_proj's rows: z (I), the convolution's input (W), dt (H).
  int64_t in_proj_rows() const { return inner() + conv_width() + heads; }
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_MAMBA2_H_
