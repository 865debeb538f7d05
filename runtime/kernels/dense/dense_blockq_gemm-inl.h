// Per-target GEMM form of DenseBlockQ8 (dense.h) for q4_k and q6_k weights
// on AVX-512 with VNNI: batches of activation rows rounded to Q8_K blocks,
// as llama.cpp rounds them, times the weights' codes in integers.
//
// Each tile of 32 output rows is unpacked, 1,024 inputs at a time, into a
// panel of bytes in which 4 inputs of 16 rows sit side by side (one vpdpbusd
// of a panel against 4 activation bytes broadcast sums 16 rows), beside its
// scales as i32 lanes per row. Per sub-block (32 inputs for q4_k, 16 for
// q6_k) the code sums are multiplied by the sub-block's integer scale and
// summed over the block in i32; q4_k's minimums Σ_j m_j·Σ_{i in j} q_x[i]
// in i32 too (vpdpwssd of m pairs and the activations' sub-block sums), and
// q6_k's offset as −32·Σ q_x per sub-block: each block's two integer terms
// are exactly ggml's. They are converted to f32 and multiplied by the
// block's scales d·d_x and −dmin·d_x per output row, in block order.
#if defined(RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_kquant-inl.h"
#include "kernels/dense/dense_ref.h"
#include "kernels/dispatch/target_limit.h"
#include "kernels/isa/isa-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

#if RECUR_ISA_AVX3
namespace blockq_gemm {

namespace x256 = isa::x256;
namespace x512 = isa::x512;

inline constexpr size_t kCols = 32;       // output rows per tile: two panels of 16
inline constexpr size_t kDepth = 1024;    // inputs per packed panel
inline constexpr size_t kBlocks = kDepth / kKQuantBlock;
inline constexpr size_t kWords = kKQuantBlock / 4;  // 4-input words per block
inline constexpr size_t kMaxBatch = 64;   // activation rows per pass over the weights
inline constexpr size_t kRows = 4;        // activation rows per kernel call
inline constexpr size_t kMinBatch = 8;    // smaller batches run the row forms
// The activation sums a block keeps: 8 (q4_k, per 32 inputs) or 16 (q6_k, per 16).
inline constexpr size_t kMaxSums = 16;

// Activation rows quantised to Q8_K for one pass: row r's codes at
// q + r·in, its block scales at d + r·blocks, its sub-block sums at
// s16 + r·blocks·16 (q6_k: −32·Σ of each 16 codes) or s32 + r·blocks·8
// (q4_k: Σ of each 32, as i16).
struct Activations {
  int8_t* q;
  float* d;
  int32_t* s16;
  int16_t* s32;
};

// Bytes of scratch `rows` activation rows of `in` inputs take.
constexpr size_t ActivationBytes(size_t rows, size_t in) {
  return rows * (in + in / kKQuantBlock * (sizeof(float) + kMaxSums * sizeof(int32_t)));
}

// Carves `rows` rows of `in` inputs out of scratch (64-byte aligned, at
// least ActivationBytes(rows, in) bytes).
inline Activations CarveActivations(void* scratch, size_t rows, size_t in) {
  auto* bytes = static_cast<uint8_t*>(scratch);
  const size_t blocks = in / kKQuantBlock;
  Activations a;
  a.s16 = reinterpret_cast<int32_t*>(bytes);  // q6_k's or, as i16, q4_k's sums
  a.s32 = reinterpret_cast<int16_t*>(bytes);
  a.d = reinterpret_cast<float*>(bytes + rows * blocks * kMaxSums * sizeof(int32_t));
  a.q = reinterpret_cast<int8_t*>(a.d + rows * blocks);
  return a;
}

// One tile's weights: codes[((kb·64 + w)·2 + p)·64 + 4i + k] is input
// 4w + k of block kb of panel p's row i; per block and sub-block j the
// scales as i32 of the 32 rows (q4_k's 6-bit sc_j, q6_k's signed ones), for
// q4_k the minimums m_{2t}, m_{2t+1} as i16 pairs, and d (q4_k: −dmin too).
struct Panel {
  alignas(64) uint8_t codes[kCols * kDepth];
  alignas(64) int32_t scales[kBlocks * kMaxSums * kCols];
  alignas(64) int32_t min_pairs[kBlocks * 4 * kCols];
  alignas(64) float d[kBlocks * kCols];
  alignas(64) float neg_dmin[kBlocks * kCols];
};

// The 16 rows of panel p (past `out`: the last row), blocks [kb0, kb0 + n).
// Q4_K: 64 inputs a chunk from 32 bytes, low nibbles first.
HWY_INLINE void PackQ4K(const uint8_t* w, size_t row_bytes, size_t out, size_t o0, size_t kb0,
                        size_t n, Panel* HWY_RESTRICT panel) {
  constexpr size_t kBytes = Traits(WeightType::kQ4_K).block_bytes;
  const x256::VecI low = x256::SetI8(0x0F);
  for (size_t p = 0; p < 2; ++p) {
    const uint8_t* rows[16];
    for (size_t i = 0; i < 16; ++i) rows[i] = w + std::min(o0 + 16 * p + i, out - 1) * row_bytes;
    for (size_t kb = 0; kb < n; ++kb) {
      for (size_t i = 0; i < 16; ++i) {
        const uint8_t* block = rows[i] + (kb0 + kb) * kBytes;
        HWY_ALIGN uint8_t sm[16];  // scales [0, 8), minimums [8, 16)
        kquant_detail::UnpackScalesQ4K(block + ref::kQ4KScales, sm);
        const size_t col = 16 * p + i;
        for (size_t j = 0; j < 8; ++j) panel->scales[(kb * kMaxSums + j) * kCols + col] = sm[j];
        for (size_t t = 0; t < 4; ++t) {
          panel->min_pairs[(kb * 4 + t) * kCols + col] =
              static_cast<int32_t>(sm[8 + 2 * t] | static_cast<uint32_t>(sm[9 + 2 * t]) << 16);
        }
        panel->d[kb * kCols + col] = kquant_detail::HalfAt(block);
        panel->neg_dmin[kb * kCols + col] = -kquant_detail::HalfAt(block + 2);
      }
      for (size_t c = 0; c < 4; ++c) {
        x512::VecI r[16];
        for (size_t i = 0; i < 16; ++i) {
          const x256::VecI b = x256::LoadU(rows[i] + (kb0 + kb) * kBytes + ref::kQ4KQs + 32 * c);
          r[i] = x512::Concat256(x256::And(b, low), x256::And(x256::ShiftRightU16<4>(b), low));
        }
        x512::Transpose16x16(r);
        for (size_t t = 0; t < 16; ++t) {
          x512::Store(panel->codes + ((kb * kWords + 16 * c + t) * 2 + p) * 64, r[t]);
        }
      }
    }
  }
}

// Q6_K: half h's inputs 32t + l (t < 4) from ql[l + 32(t & 1)] (nibble t/2)
// and qh[l] (bits 2t), as codes 0..63 (the −32 is the activations' part).
HWY_INLINE void PackQ6K(const uint8_t* w, size_t row_bytes, size_t out, size_t o0, size_t kb0,
                        size_t n, Panel* HWY_RESTRICT panel) {
  constexpr size_t kBytes = Traits(WeightType::kQ6_K).block_bytes;
  const x256::VecI low = x256::SetI8(0x0F), two = x256::SetI8(0x03);
  for (size_t p = 0; p < 2; ++p) {
    const uint8_t* rows[16];
    for (size_t i = 0; i < 16; ++i) rows[i] = w + std::min(o0 + 16 * p + i, out - 1) * row_bytes;
    for (size_t kb = 0; kb < n; ++kb) {
      for (size_t i = 0; i < 16; ++i) {
        const uint8_t* block = rows[i] + (kb0 + kb) * kBytes;
        const auto* sc = reinterpret_cast<const int8_t*>(block + ref::kQ6KScales);
        const size_t col = 16 * p + i;
        for (size_t j = 0; j < 16; ++j) panel->scales[(kb * kMaxSums + j) * kCols + col] = sc[j];
        panel->d[kb * kCols + col] = kquant_detail::HalfAt(block + ref::kQ6KD);
      }
      for (size_t c = 0; c < 4; ++c) {  // inputs 64c.. : half c / 2, t = 2(c & 1) and + 1
        const size_t h = c / 2;
        const int shift = 4 * static_cast<int>(c & 1);  // the nibble, and qh's bits 2t
        x512::VecI r[16];
        for (size_t i = 0; i < 16; ++i) {
          const uint8_t* block = rows[i] + (kb0 + kb) * kBytes;
          const x256::VecI a = x256::LoadU(block + 64 * h);
          const x256::VecI b = x256::LoadU(block + 64 * h + 32);
          const x256::VecI hb = x256::LoadU(block + ref::kQ6KQh + 32 * h);
          const x256::VecI hs = shift ? x256::ShiftRightU16<4>(hb) : hb;
          const x256::VecI as = shift ? x256::ShiftRightU16<4>(a) : a;
          const x256::VecI bs = shift ? x256::ShiftRightU16<4>(b) : b;
          const x256::VecI first = x256::Or(x256::And(as, low),
                                            x256::ShiftLeftU16<4>(x256::And(hs, two)));
          const x256::VecI second =
              x256::Or(x256::And(bs, low),
                       x256::ShiftLeftU16<4>(x256::And(x256::ShiftRightU16<2>(hs), two)));
          r[i] = x512::Concat256(first, second);
        }
        x512::Transpose16x16(r);
        for (size_t t = 0; t < 16; ++t) {
          x512::Store(panel->codes + ((kb * kWords + 16 * c + t) * 2 + p) * 64, r[t]);
        }
      }
    }
  }
}

// f[r][p] += the n packed blocks against rows xr[r] (from the panel's first
// input), their block scales dr[r] and sub-block sums; kSub inputs a
// sub-block (32: q4_k, 16: q6_k).
template <size_t kSub, size_t kR>
HWY_INLINE void Kernel(const int8_t* const* xr, const float* const* dr, const int32_t* const* s16,
                       const int16_t* const* s32, const Panel& pk, size_t n,
                       x512::VecF (*f)[2]) {
  constexpr size_t kSubs = kKQuantBlock / kSub;
  constexpr bool kQ4K = kSub == 32;
  for (size_t kb = 0; kb < n; ++kb) {
    x512::VecI blk[kR][2];
    HWY_UNROLL(4)
    for (size_t r = 0; r < kR; ++r) blk[r][0] = blk[r][1] = x512::ZeroI();
    for (size_t j = 0; j < kSubs; ++j) {
      x512::VecI a[kR][2];
      HWY_UNROLL(4)
      for (size_t r = 0; r < kR; ++r) {
        a[r][0] = a[r][1] = kQ4K ? x512::ZeroI() : x512::SetI32(s16[r][kb * kSubs + j]);
      }
      for (size_t t = 0; t < kSub / 4; ++t) {
        const size_t word = kb * kWords + j * (kSub / 4) + t;
        const x512::VecI w0 = x512::Load(pk.codes + word * 128);
        const x512::VecI w1 = x512::Load(pk.codes + word * 128 + 64);
        HWY_UNROLL(4)
        for (size_t r = 0; r < kR; ++r) {
          a[r][0] = x512::DotU8I8BroadcastAccumulate(a[r][0], w0, xr[r] + 4 * word);
          a[r][1] = x512::DotU8I8BroadcastAccumulate(a[r][1], w1, xr[r] + 4 * word);
        }
      }
      const int32_t* sc = pk.scales + (kb * kMaxSums + j) * kCols;
      const x512::VecI sc0 = x512::Load(sc), sc1 = x512::Load(sc + 16);
      HWY_UNROLL(4)
      for (size_t r = 0; r < kR; ++r) {
        blk[r][0] = x512::AddI32(blk[r][0], x512::MulLoI32(a[r][0], sc0));
        blk[r][1] = x512::AddI32(blk[r][1], x512::MulLoI32(a[r][1], sc1));
      }
    }
    const x512::VecF d0 = x512::Load(pk.d + kb * kCols), d1 = x512::Load(pk.d + kb * kCols + 16);
    HWY_UNROLL(4)
    for (size_t r = 0; r < kR; ++r) {
      const x512::VecF dx = x512::SetF32(dr[r][kb]);
      f[r][0] = x512::MulAdd(x512::ToF32(blk[r][0]), x512::Mul(d0, dx), f[r][0]);
      f[r][1] = x512::MulAdd(x512::ToF32(blk[r][1]), x512::Mul(d1, dx), f[r][1]);
    }
    if constexpr (kQ4K) {
      const x512::VecF m0 = x512::Load(pk.neg_dmin + kb * kCols);
      const x512::VecF m1 = x512::Load(pk.neg_dmin + kb * kCols + 16);
      HWY_UNROLL(4)
      for (size_t r = 0; r < kR; ++r) {
        x512::VecI mins[2] = {x512::ZeroI(), x512::ZeroI()};
        for (size_t t = 0; t < 4; ++t) {
          const int32_t* mp = pk.min_pairs + (kb * 4 + t) * kCols;
          const int16_t* sums = s32[r] + kb * 8 + 2 * t;
          mins[0] = x512::DotI16BroadcastAccumulate(mins[0], x512::Load(mp), sums);
          mins[1] = x512::DotI16BroadcastAccumulate(mins[1], x512::Load(mp + 16), sums);
        }
        const x512::VecF dx = x512::SetF32(dr[r][kb]);
        f[r][0] = x512::MulAdd(x512::ToF32(mins[0]), x512::Mul(m0, dx), f[r][0]);
        f[r][1] = x512::MulAdd(x512::ToF32(mins[1]), x512::Mul(m1, dx), f[r][1]);
      }
    }
  }
}

// The sub-block sums the kernels read, from each row's codes: q4_k Σ of
// each 32 (as i16: |Σ| ≤ 32·127), q6_k −32·Σ of each 16.
HWY_INLINE void SubBlockSums(WeightType type, const Activations& a, size_t rows, size_t in) {
  const size_t blocks = in / kKQuantBlock;
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* q = a.q + r * in;
    if (type == WeightType::kQ4_K) {
      for (size_t j = 0; j < in / 32; ++j) {
        int32_t s = 0;
        for (size_t i = 0; i < 32; ++i) s += q[32 * j + i];
        a.s32[r * blocks * 8 + j] = static_cast<int16_t>(s);
      }
    } else {
      for (size_t j = 0; j < in / 16; ++j) {
        int32_t s = 0;
        for (size_t i = 0; i < 16; ++i) s += q[16 * j + i];
        a.s16[r * blocks * 16 + j] = -32 * s;
      }
    }
  }
}

// y rows [0, rows) of dense.h's formula for a q4_k or q6_k layer from the
// quantised rows `a` (SubBlockSums done).
HWY_NOINLINE void Gemm(size_t rows, const Activations& a, const DenseWeights& w, float* y,
                       size_t y_stride, bool accumulate) {
  const bool q4k = w.type == WeightType::kQ4_K;
  const size_t in = w.in, out = w.out, blocks = in / kKQuantBlock;
  const size_t row_bytes = WeightRowBytes(w.type, in);
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  Panel panel;  // 42 KiB
  alignas(64) float part[kMaxBatch][kCols];
  for (size_t o0 = 0; o0 < out; o0 += kCols) {
    const size_t cols = std::min(kCols, out - o0);
    x512::Mask16 mask[2];
    x512::VecF bias[2];
    for (size_t p = 0; p < 2; ++p) {
      const size_t n = cols > 16 * p ? std::min<size_t>(16, cols - 16 * p) : 0;
      mask[p] = static_cast<x512::Mask16>((1u << n) - 1);
      bias[p] = w.bias ? x512::LoadMasked(mask[p], w.bias + o0 + 16 * p) : x512::ZeroF();
    }
    for (size_t kb0 = 0; kb0 < blocks; kb0 += kBlocks) {
      const size_t n = std::min(kBlocks, blocks - kb0);
      const bool last = kb0 + n >= blocks;
      if (q4k) {
        PackQ4K(wb, row_bytes, out, o0, kb0, n, &panel);
      } else {
        PackQ6K(wb, row_bytes, out, o0, kb0, n, &panel);
      }
      for (size_t r0 = 0; r0 < rows; r0 += kRows) {
        const size_t nr = std::min(kRows, rows - r0);
        const int8_t* xr[kRows];
        const float* dr[kRows];
        const int32_t* s16[kRows];
        const int16_t* s32[kRows];
        x512::VecF f[kRows][2];
        for (size_t r = 0; r < kRows; ++r) {
          const size_t b = r0 + std::min(r, nr - 1);  // rows past nr repeat the last
          xr[r] = a.q + b * in + kb0 * kKQuantBlock;
          dr[r] = a.d + b * blocks + kb0;
          s16[r] = a.s16 + b * blocks * 16 + kb0 * 16;
          s32[r] = a.s32 + b * blocks * 8 + kb0 * 8;
          for (size_t p = 0; p < 2; ++p) {
            f[r][p] = kb0 == 0 ? x512::ZeroF() : x512::Load(part[b] + 16 * p);
          }
        }
        if (q4k) {
          Kernel<32, kRows>(xr, dr, s16, s32, panel, n, f);
        } else {
          Kernel<16, kRows>(xr, dr, s16, s32, panel, n, f);
        }
        for (size_t r = 0; r < nr; ++r) {
          const size_t b = r0 + r;
          for (size_t p = 0; p < 2; ++p) {
            if (!last) {
              x512::Store(part[b] + 16 * p, f[r][p]);
              continue;
            }
            if (mask[p] == 0) continue;
            float* yp = y + b * y_stride + o0 + 16 * p;
            x512::VecF v = f[r][p];
            if (w.bias) v = x512::Add(v, bias[p]);
            if (accumulate) v = x512::Add(x512::LoadMasked(mask[p], yp), v);
            x512::StoreMasked(yp, mask[p], v);
          }
        }
      }
    }
  }
}

// Whether Run takes `batch` rows of a layer of `type` (given the scratch).
HWY_INLINE bool Takes(WeightType type, size_t batch) {
  return (type == WeightType::kQ4_K || type == WeightType::kQ6_K) && batch >= kMinBatch &&
         Avx512VnniEnabled();
}

// DenseBlockQ8 on the GEMM, passes of up to kMaxBatch rows quantised into
// the widening scratch (dense_lowp-inl.h: no more than Dense's f32 path on
// this layer would take, which a session plans for); false, having done
// nothing, where Takes is false or the scratch is not there.
template <class Quantize>
HWY_INLINE bool Run(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                    float* y, size_t y_stride, bool accumulate, const Quantize& quantize) {
  if (!Takes(w.type, batch) || w.in == 0 || w.out == 0) return false;
  const size_t in = w.in, blocks = in / kKQuantBlock;
  const hwy::HWY_NAMESPACE::ScalableTag<float> df;
  const size_t planned = dense_detail::WidenedScratchNeed(df, batch, in, w.out).widen_floats;
  const size_t wanted = ActivationBytes(std::min(batch, kMaxBatch), in) / sizeof(float) + 1;
  const size_t floats = std::min(planned, wanted);
  const size_t rows = std::min(kMaxBatch, floats * sizeof(float) / ActivationBytes(1, in));
  if (rows < kRows) return false;
  float* scratch = dense_detail::WidenScratch(floats);
  if (scratch == nullptr) return false;
  for (size_t b0 = 0; b0 < batch; b0 += rows) {
    const size_t nb = std::min(rows, batch - b0);
    const Activations a = CarveActivations(scratch, nb, in);
    for (size_t r = 0; r < nb; ++r) quantize(x + (b0 + r) * x_stride, a.q + r * in, a.d + r * blocks);
    SubBlockSums(w.type, a, nb, in);
    Gemm(nb, a, w, y + b0 * y_stride, y_stride, accumulate);
  }
  return true;
}

}  // namespace blockq_gemm
#endif  // RECUR_ISA_AVX3

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_ toggle
