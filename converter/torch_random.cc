#include "converter/torch_random.h"

#include <cmath>
#include <random>

namespace recur::impl::converter {
namespace {

// torch's at::uniform_real_distribution on 32 (float) or 64 (double) random bits.
float UniformFloat(std::mt19937& engine) {
  return static_cast<float>(engine() & ((1u << 24) - 1)) * (1.0f / 16777216.0f);
}
double UniformDouble(std::mt19937& engine) {
  const uint64_t hi = engine(), lo = engine();
  return static_cast<double>(((hi << 32) | lo) & ((uint64_t{1} << 53) - 1)) *
         (1.0 / 9007199254740992.0);
}

// Box-Muller over 16 uniforms in place: u1 = 1 − data[j], u2 = data[j + 8].
void NormalFill16(float* data) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const auto theta = static_cast<float>(2.0 * M_PI * static_cast<double>(u2));
    data[j] = radius * std::cos(theta);
    data[j + 8] = radius * std::sin(theta);
  }
}

}  // namespace

std::vector<float> TorchRandnFloat(uint64_t seed, std::size_t count) {
  std::mt19937 engine(static_cast<uint32_t>(seed));
  std::vector<float> out(count);
  if (count >= 16) {
    for (float& v : out) v = UniformFloat(engine);
    for (std::size_t i = 0; i + 16 <= count; i += 16) NormalFill16(out.data() + i);
    if (count % 16 != 0) {
      float* last = out.data() + count - 16;
      for (int i = 0; i < 16; ++i) last[i] = UniformFloat(engine);
      NormalFill16(last);
    }
    return out;
  }
  // at::normal_distribution<double>: pairs, the second kept for the next draw.
  bool have_next = false;
  double next = 0.0;
  for (float& v : out) {
    if (have_next) {
      v = static_cast<float>(next);
      have_next = false;
      continue;
    }
    const double u1 = UniformDouble(engine), u2 = UniformDouble(engine);
    const double r = std::sqrt(-2.0 * std::log1p(-u2));
    const double theta = 2.0 * M_PI * u1;
    next = r * std::sin(theta);
    have_next = true;
    v = static_cast<float>(r * std::cos(theta));
  }
  return out;
}

}  // namespace recur::impl::converter
