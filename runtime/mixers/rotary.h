// Turning q and k by their absolute position: RetNet's rotation
// (docs/attention-math.md §11) and the rotary position embeddings the
// attention mixers take (§12). Pair i of the first 2·pairs features of each
// head turns by the angle position·θ_i, or by a stored table's sine and
// cosine of the position; the rest of the head passes.
#ifndef RECUR_MIXERS_ROTARY_H_
#define RECUR_MIXERS_ROTARY_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "mixers/mixer.h"

namespace recur::impl {

class Rotation {
 public:
  enum class Pairs {
    kInterleaved,  // pair i is dims (2i, 2i + 1)
    kHalf,         // pair i is dims (i, i + pairs)
  };

  Rotation() = default;
  Rotation(std::vector<double> theta, Pairs pairs) : theta_(std::move(theta)), pairs_(pairs) {}

  // RetNet's: θ_i = 10000^(−i/(dk/2 − 1)) (θ_0 = 1 for one pair), interleaved over all dk.
  static Rotation RetNet(size_t dk) {
    const size_t half = dk / 2;
    std::vector<double> theta(half);
    for (size_t i = 0; i < half; ++i) {
      theta[i] = half > 1 ? std::pow(10000.0, -double(i) / double(half - 1)) : 1.0;
    }
    return Rotation(std::move(theta), Pairs::kInterleaved);
  }

  // A mixer's `rotary` table (§12), null for none: over the first dims of
  // each head's `width` q/k features, θ_i = base^(−2i/dims), or θ as stored
  // (`theta`), or the stored per-position sines and cosines (`table`, which
  // bounds the positions: max_positions()). Messages name the layer, the
  // mixer (`what`) and the width's key (`width_name`: "dk").
  static Status FromTable(const fb::Rotary* t, const std::string& layer, const char* what,
                          uint32_t width, const char* width_name, TensorResolver* tensors,
                          Rotation* out) {
    *out = Rotation();
    if (t == nullptr) return Status::Ok();
    if (t->dims() < 2 || t->dims() % 2 != 0 || t->dims() > width) {
      return InvalidModel("%s: %s rotary.dims must be even and in [2, %s = %u] (got %u)",
                          layer.c_str(), what, width_name, width, t->dims());
    }
    if (!(std::isfinite(t->base()) && t->base() > 0.0)) {
      return InvalidModel("%s: %s rotary.base must be finite and > 0 (got %g)", layer.c_str(), what,
                          t->base());
    }
    if (t->pairs() != fb::RotaryPairs::Interleaved && t->pairs() != fb::RotaryPairs::Half) {
      return Unsupported("%s: %s rotary.pairs %d is not supported by this runtime", layer.c_str(),
                         what, int(t->pairs()));
    }
    if (t->theta() >= 0 && t->table() >= 0) {
      return InvalidModel("%s: %s rotary has both theta and table; it takes at most one",
                          layer.c_str(), what);
    }
    const uint32_t n = t->dims() / 2;
    const std::string name = layer + ".mixer.rotary.";
    const float* stored = nullptr;
    int64_t rows = 1;
    if (t->table() >= 0) {
      RECUR_RETURN_IF_ERROR(tensors->GetRows(t->table(), (name + "table").c_str(), t->dims(),
                                             false, &stored, &rows));
    } else {
      RECUR_RETURN_IF_ERROR(tensors->Get(t->theta(), (name + "theta").c_str(), {n}, true, &stored));
    }
    for (int64_t k = 0; stored != nullptr && k < rows * (t->table() >= 0 ? 2 * n : n); ++k) {
      if (!std::isfinite(stored[k])) {
        return InvalidModel("%s%s[%lld] is %g; it must be finite", name.c_str(),
                            t->table() >= 0 ? "table" : "theta", static_cast<long long>(k),
                            static_cast<double>(stored[k]));
      }
    }
    std::vector<double> theta(n);
    for (size_t i = 0; i < theta.size(); ++i) {
      theta[i] = t->theta() >= 0 ? double(stored[i])
                                 : std::pow(t->base(), -2.0 * double(i) / double(t->dims()));
    }
    *out = Rotation(std::move(theta),
                    t->pairs() == fb::RotaryPairs::Half ? Pairs::kHalf : Pairs::kInterleaved);
    if (t->table() >= 0) {
      out->table_ = stored;
      out->table_rows_ = static_cast<size_t>(rows);
    }
    return Status::Ok();
  }

  bool enabled() const { return !theta_.empty(); }
  // The positions a stored table covers; 0 = unbounded.
  size_t max_positions() const { return table_rows_; }

  // Matrices of (batch·steps) rows, stream-major: row r is stream r / steps at
  // position positions[r / steps] + r % steps; each row holds `heads` heads
  // of head_stride floats, turned in place. At most kMaxMatrices matrices
  // (FLASH's four): copied to the stack, as a step allocates nothing.
  struct Rows {
    float* data;
    size_t stride;  // floats from one row to the next
  };
  static constexpr size_t kMaxMatrices = 4;
  void Apply(const StepContext& ctx, size_t batch, size_t steps, size_t heads, size_t head_stride,
             std::initializer_list<Rows> matrices) const {
    if (!enabled()) return;
    Rows mats[kMaxMatrices];
    size_t count = 0;
    for (const Rows& m : matrices) {
      if (count < kMaxMatrices) mats[count++] = m;
    }
    const size_t n = theta_.size();
    const size_t second = pairs_ == Pairs::kInterleaved ? 1 : n;  // offset of a pair's partner
    const size_t step = pairs_ == Pairs::kInterleaved ? 2 : 1;    // from pair i to i + 1
    ctx.pool->ParallelRanges(batch * steps, 16, [&](size_t first, size_t last) {
      for (size_t r = first; r < last; ++r) {
        const uint64_t pos = ctx.positions[r / steps] + r % steps;
        for (size_t i = 0; i < n; ++i) {
          // In double: pos·θ reaches millions of radians, and an f32 angle
          // would be off by its ulp. A table holds row pos = [sin | cos].
          float c, s;
          if (table_ != nullptr) {
            s = table_[pos * 2 * n + i];
            c = table_[pos * 2 * n + n + i];
          } else {
            const double a = double(pos) * theta_[i];
            c = float(std::cos(a));
            s = float(std::sin(a));
          }
          for (size_t k = 0; k < count; ++k) {
            const Rows& m = mats[k];
            float* row = m.data + r * m.stride + i * step;
            for (size_t h = 0; h < heads; ++h) {
              float* x = row + h * head_stride;
              const float x0 = x[0], x1 = x[second];
              x[0] = x0 * c - x1 * s;
              x[second] = x1 * c + x0 * s;
            }
          }
        }
      }
    });
  }

 private:
  std::vector<double> theta_;  // one angle per position step, per pair
  Pairs pairs_ = Pairs::kInterleaved;
  const float* table_ = nullptr;  // (table_rows_, 2·pairs) [sin | cos] rows, or null
  size_t table_rows_ = 0;
};

}  // namespace recur::impl

#endif  // RECUR_MIXERS_ROTARY_H_
