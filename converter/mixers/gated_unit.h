// What FLASH (flash.cc) and GAU (gau.cc) share: the gated attention unit's
// config keys and tensors. One head: u = act(x U) and v = act(x V)
// (expansion_dim wide), z = act(x Z) (qk_dim wide) scaled and shifted into
// queries and keys (qk_gamma, qk_beta rows), a relative position bias over
// `length` offsets (FLASH: its chunk; GAU: max_length), and out.
#ifndef RECUR_CONVERTER_MIXERS_GATED_UNIT_H_
#define RECUR_CONVERTER_MIXERS_GATED_UNIT_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {

struct GatedUnitShape {
  uint32_t expansion_dim = 0;
  uint32_t qk_dim = 0;
  uint32_t length = 0;  // FLASH: chunk; GAU: max_length
  float scale = 0.0f;   // default 1/length
  bool causal = true;
};

// The keys type, causal, expansion_dim, qk_dim, `length_key` and scale;
// `extra_key` (if not null) is one more key the caller reads.
inline Status ParseGatedUnit(const MixerConfig& c, const char* length_key, GatedUnitShape* out,
                             const char* extra_key = nullptr) {
  if (extra_key != nullptr) {
    RECUR_RETURN_IF_ERROR(
        c.OnlyKeys({"type", "causal", "expansion_dim", "qk_dim", length_key, "scale", extra_key}));
  } else {
    RECUR_RETURN_IF_ERROR(
        c.OnlyKeys({"type", "causal", "expansion_dim", "qk_dim", length_key, "scale"}));
  }
  RECUR_RETURN_IF_ERROR(c.UInt("expansion_dim", 1, &out->expansion_dim));
  RECUR_RETURN_IF_ERROR(c.UInt("qk_dim", 1, &out->qk_dim));
  RECUR_RETURN_IF_ERROR(c.UInt(length_key, 1, &out->length));
  if (out->length > 65536) return c.Invalid(length_key, "must be at most 65536");
  out->scale = 1.0f / static_cast<float>(out->length);
  if (auto sc = c.object.find("scale"); sc != c.object.end()) {
    // > 0 as in the reference (validate_mixer, recur_ref/mixers/registry.py); checked after narrowing to float.
    if (!sc->is_number() || !(sc->get<float>() > 0.0f) || !std::isfinite(sc->get<float>())) {
      return c.Invalid("scale", "must be a finite positive number");
    }
    out->scale = sc->get<float>();
  }
  return c.Causal(&out->causal);
}

// u_proj, v_proj [e, d_model], z_proj [s, d_model], out [d_model, e],
// qk_gamma and qk_beta [qk_rows, s], rel_bias [length] (causal) or
// [2·length − 1].
inline void AddGatedUnitTensors(uint32_t expansion_dim, uint32_t qk_dim, int64_t qk_rows,
                                uint32_t length, bool causal, MixerTensors* out) {
  const int64_t e = expansion_dim, s = qk_dim, dm = out->d_model();
  out->AddDense("u_proj", e, dm);
  out->AddDense("v_proj", e, dm);
  out->AddDense("z_proj", s, dm);
  out->AddDense("out", dm, e);
  out->Add("qk_gamma", {qk_rows, s});
  out->Add("qk_beta", {qk_rows, s});
  out->Add("rel_bias", {causal ? int64_t{length} : 2 * int64_t{length} - 1});
}

// The dense layers --dtype narrows.
inline std::vector<std::string> GatedUnitQuantizableWeights() {
  return {"u_proj", "v_proj", "z_proj", "out"};
}

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_GATED_UNIT_H_
