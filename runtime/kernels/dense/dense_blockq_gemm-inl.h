// Per-target GEMM form of DenseBlockQ8 (dense.h) for q4_k, q6_k and q8_0
// weights on AVX-512 with VNNI: batches of activation rows rounded to Q8_K
// blocks (Q8_0 blocks for q8_0), as llama.cpp rounds them, times the
// weights' codes in integers.
//
// Each tile of 32 output rows is laid out, a block at a time (256 inputs for
// the K-quants, 32 for q8_0), as records (Record) in which 4 inputs of 16
// rows sit side by side (one vpdpbusd of a panel against 4 activation bytes
// broadcast sums 16 rows), beside its scales: once per layer (PackTiles,
// dense.h's block-quantised tiles) or per call, 1,024 inputs at a time. Per
// sub-block (32 inputs for q4_k, 16 for q6_k) the code sums are multiplied
// by the sub-block's integer scale and summed over the block in i32; q4_k's
// minimums Σ_j m_j·Σ_{i in j} q_x[i] in i32 too (vpdpwssd of m pairs and the
// activations' sub-block sums), q6_k's offset as −32·Σ q_x per sub-block and
// q8_0's (its codes stored + 128, unsigned) as −128·Σ q_x per block: each
// block's integer terms are exactly ggml's. They are converted to f32 and
// multiplied by the block's scales d·d_x (and −dmin·d_x) per output row, in
// block order.
#if defined(RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_BLOCKQ_GEMM_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

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
inline constexpr size_t kMaxBatch = 64;   // activation rows per pass over the weights
inline constexpr size_t kRows = 4;        // activation rows per kernel call
inline constexpr size_t kMinBatch = 8;    // smaller batches run the row forms
// A single row's kernel reads the records as one stream, its lines
// prefetched this far ahead.
inline constexpr size_t kStreamAhead = 8192;

// One block of one tile (kCols output rows × kInputs inputs) as the kernel
// reads it, for q4_k, q6_k or q8_0. Byte offsets, each a multiple of 64:
//   codes at 0: q4_k [(m·2 + p)·64 + 4i + k] holds input 8m + k of panel p's
//     row i in the low nibble and input 8m + 4 + k in the high one (m < 32);
//     q6_k [(w·2 + p)·64 + 4i + k] = input 4w + k, 0..63 (w < 64); q8_0 the
//     same with w < 8, code + 128 (0..255);
//   q4_k: kPacked: [k·kCols + col] byte k of the row's 12 bytes of 6-bit
//     scales and minimums, as the file packs them (Meta unpacks them once
//     per block, for all activation rows); kHalfD, kHalfDmin: d and dmin per
//     row as the file's f16: a q4_k record holds the block's bytes exactly;
//   q6_k: kScales: [j·kCols + col] sub-block j's signed scale; kD: f32 d per
//     row; q8_0: kD, the row's block scale as f32.
template <WeightType kType>
struct Record {
  static constexpr WeightType kWeightType = kType;
  static constexpr bool kQ4K = kType == WeightType::kQ4_K;
  static constexpr bool kQ8_0 = kType == WeightType::kQ8_0;
  static constexpr size_t kInputs = Traits(kType).block;
  static constexpr size_t kSubs = kQ4K ? 8 : kQ8_0 ? 1 : 16;  // integer-scaled sub-blocks
  static constexpr size_t kWords = kInputs / 4;               // 4-input words
  static constexpr size_t kCodes = kCols * kInputs / (kQ4K ? 2 : 1);
  static constexpr size_t kPacked = kCodes;                            // q4_k
  static constexpr size_t kHalfD = kPacked + 12 * kCols;               // q4_k
  static constexpr size_t kHalfDmin = kHalfD + 2 * kCols;              // q4_k
  static constexpr size_t kScales = kCodes;                            // q6_k
  static constexpr size_t kD = kScales + (kQ8_0 ? 0 : kSubs * kCols);  // q6_k, q8_0
  static constexpr size_t kBytes = kQ4K ? kHalfDmin + 2 * kCols : kD + kCols * sizeof(float);
  static constexpr size_t kPerChunk = kDepth / kInputs;  // records a packed panel
  // Activation sums a record's kernel reads (SubBlockSums).
  static constexpr size_t kSums = kQ4K ? 8 : kSubs;
};
using Q4KRecord = Record<WeightType::kQ4_K>;
using Q6KRecord = Record<WeightType::kQ6_K>;
using Q8_0Record = Record<WeightType::kQ8_0>;
static_assert(Q4KRecord::kBytes % 64 == 0 && Q6KRecord::kBytes % 64 == 0 &&
                  Q8_0Record::kBytes % 64 == 0,
              "records keep their vectors 64-byte aligned");
static_assert(Q4KRecord::kBytes == kQ4KTileBlockBytes && Q6KRecord::kBytes == kQ6KTileBlockBytes &&
                  Q8_0Record::kBytes == kQ8_0TileBlockBytes && kCols == kBlockQ8TileRows &&
                  kMinBatch == kBlockQ8TilesMinBatch,
              "dense.h's tile sizes");
static_assert(Q4KRecord::kBytes == kCols * Traits(WeightType::kQ4_K).block_bytes,
              "a q4_k record is its rows' blocks, byte for byte");
inline constexpr size_t kMaxPanelBytes =
    std::max({Q4KRecord::kPerChunk * Q4KRecord::kBytes, Q6KRecord::kPerChunk* Q6KRecord::kBytes,
              Q8_0Record::kPerChunk* Q8_0Record::kBytes});

// Calls f(Record<kType>()) for the GEMM's types (q4_k, q6_k, q8_0); for any
// other `type` does nothing (its callers take only those: Takes, tile bytes).
template <class F>
HWY_INLINE void WithRecord(WeightType type, const F& f) {
  if (type == WeightType::kQ4_K) {
    f(Q4KRecord());
  } else if (type == WeightType::kQ6_K) {
    f(Q6KRecord());
  } else if (type == WeightType::kQ8_0) {
    f(Q8_0Record());
  } else {
    HWY_DASSERT(false);
  }
}

// Activation rows quantised for one pass: row r's codes at q + r·in, its
// block scales at d + r·(in / the type's block), its sums at s16 + r·(in / 16)
// (q6_k: −32·Σ of each 16 codes; q8_0: −128·Σ of each 32) or s32 + r·(in /
// 32) (q4_k: Σ of each 32, as i16).
struct Activations {
  int8_t* q;
  float* d;
  int32_t* s16;
  int16_t* s32;
};

// Bytes of scratch `rows` activation rows of `in` inputs take: codes, a
// scale per 32 inputs at most, a sum per 16.
constexpr size_t ActivationBytes(size_t rows, size_t in) {
  return rows * (in + in / 32 * sizeof(float) + in / 16 * sizeof(int32_t));
}

// Carves `rows` rows of `in` inputs out of scratch (64-byte aligned, at
// least ActivationBytes(rows, in) bytes).
inline Activations CarveActivations(void* scratch, size_t rows, size_t in) {
  auto* bytes = static_cast<uint8_t*>(scratch);
  Activations a;
  a.s16 = reinterpret_cast<int32_t*>(bytes);  // q6_k's or q8_0's or, as i16, q4_k's sums
  a.s32 = reinterpret_cast<int16_t*>(bytes);
  a.d = reinterpret_cast<float*>(bytes + rows * (in / 16) * sizeof(int32_t));
  a.q = reinterpret_cast<int8_t*>(a.d + rows * (in / 32));
  return a;
}

// What the kernel reads of a block beside its codes, at these byte offsets
// from `meta` (the stride apart per block): kScales [j·kCols + col] sub-block
// j's scale (q4_k's 6-bit sc_j as u8, q6_k's as i8); q4_k: kMinPairs i32
// [t·kCols + col] = m_{2t} | m_{2t+1} << 16 (t < 4), kD f32 d and kNegDmin
// f32 −dmin per row, unpacked from a record by UnpackMeta; q6_k and q8_0:
// kD, the record's own (meta is the records).
template <WeightType kType>
struct Meta {
  static constexpr size_t kScales = Record<kType>::kScales;
  static constexpr size_t kD = Record<kType>::kD;
  static constexpr size_t kStride = Record<kType>::kBytes;
};
template <>
struct Meta<WeightType::kQ4_K> {
  static constexpr size_t kScales = 0;
  static constexpr size_t kMinPairs = kScales + 8 * kCols;
  static constexpr size_t kD = kMinPairs + 4 * kCols * sizeof(int32_t);
  static constexpr size_t kNegDmin = kD + kCols * sizeof(float);
  static constexpr size_t kStride = kNegDmin + kCols * sizeof(float);
};
using Q4KMeta = Meta<WeightType::kQ4_K>;

// The meta of n q4_k records (kb-th at records + kb·Record::kBytes) to
// dst + kb·Meta::kStride (64-byte aligned): ggml's get_scale_min_k4 on 32
// rows at once.
HWY_INLINE void UnpackMeta(const uint8_t* records, size_t n, uint8_t* HWY_RESTRICT dst) {
  using R = Q4KRecord;
  using M = Q4KMeta;
  const x256::VecI six = x256::SetI8(0x3F), low = x256::SetI8(0x0F), top = x256::SetI8(0x30);
  for (size_t kb = 0; kb < n; ++kb) {
    const uint8_t* rec = records + kb * R::kBytes;
    uint8_t* meta = dst + kb * M::kStride;
    x256::VecI s[12];
    for (size_t k = 0; k < 12; ++k) s[k] = x256::Load(rec + R::kPacked + k * kCols);
    alignas(32) uint8_t mins[8][kCols];
    for (size_t j = 0; j < 4; ++j) {
      x256::Store(meta + M::kScales + j * kCols, x256::And(s[j], six));
      x256::Store(mins[j], x256::And(s[j + 4], six));
      // Bytes' top two bits to bits 4 and 5 (the 16-bit shift's bits from
      // the neighbouring byte land in bits 6 and 7, masked off).
      const x256::VecI sc_hi = x256::And(x256::ShiftRightU16<2>(s[j]), top);
      const x256::VecI m_hi = x256::And(x256::ShiftRightU16<2>(s[j + 4]), top);
      x256::Store(meta + M::kScales + (j + 4) * kCols, x256::Or(x256::And(s[j + 8], low), sc_hi));
      x256::Store(mins[j + 4], x256::Or(x256::And(x256::ShiftRightU16<4>(s[j + 8]), low), m_hi));
    }
    auto* pairs = reinterpret_cast<int32_t*>(meta + M::kMinPairs);
    for (size_t t = 0; t < 4; ++t) {
      for (size_t h = 0; h < kCols; h += 16) {
        const x512::VecI lo = x512::LoadU8x16ToI32(mins[2 * t] + h);
        const x512::VecI hi = x512::LoadU8x16ToI32(mins[2 * t + 1] + h);
        x512::Store(pairs + t * kCols + h, x512::Or(lo, x512::ShiftLeftU32<16>(hi)));
      }
    }
    auto* d = reinterpret_cast<float*>(meta + M::kD);
    auto* neg_dmin = reinterpret_cast<float*>(meta + M::kNegDmin);
    const x512::VecF minus = x512::SetF32(-1.0f);
    for (size_t h = 0; h < kCols; h += 16) {
      x512::Store(d + h, x512::LoadF16ToF32(rec + R::kHalfD + 2 * h));
      x512::Store(neg_dmin + h, x512::Mul(minus, x512::LoadF16ToF32(rec + R::kHalfDmin + 2 * h)));
    }
  }
}

// Records of the 32 rows from o0 (past `out`: the last row), blocks
// [kb0, kb0 + n), to dst (64-byte aligned). Q4_K: 64 inputs a chunk from 32
// bytes, low nibbles first.
HWY_INLINE void PackQ4K(const uint8_t* w, size_t row_bytes, size_t out, size_t o0, size_t kb0,
                        size_t n, uint8_t* HWY_RESTRICT dst) {
  using R = Q4KRecord;
  constexpr size_t kBytes = Traits(WeightType::kQ4_K).block_bytes;
  const x256::VecI low = x256::SetI8(0x0F);
  for (size_t p = 0; p < 2; ++p) {
    const uint8_t* rows[16];
    for (size_t i = 0; i < 16; ++i) rows[i] = w + std::min(o0 + 16 * p + i, out - 1) * row_bytes;
    for (size_t kb = 0; kb < n; ++kb) {
      uint8_t* rec = dst + kb * R::kBytes;
      for (size_t i = 0; i < 16; ++i) {
        const uint8_t* block = rows[i] + (kb0 + kb) * kBytes;
        const size_t col = 16 * p + i;
        for (size_t k = 0; k < 12; ++k) rec[R::kPacked + k * kCols + col] = block[ref::kQ4KScales + k];
        std::memcpy(rec + R::kHalfD + 2 * col, block, 2);
        std::memcpy(rec + R::kHalfDmin + 2 * col, block + 2, 2);
      }
      for (size_t c = 0; c < 4; ++c) {
        x512::VecI r[16];
        for (size_t i = 0; i < 16; ++i) {
          const x256::VecI b = x256::LoadU(rows[i] + (kb0 + kb) * kBytes + ref::kQ4KQs + 32 * c);
          r[i] = x512::Concat256(x256::And(b, low), x256::And(x256::ShiftRightU16<4>(b), low));
        }
        x512::Transpose16x16(r);  // r[t]: word 16c + t of the 16 rows
        for (size_t t = 0; t < 16; t += 2) {
          // Codes are < 16: the 16-bit shift moves each byte's nibble within the byte.
          const size_t m = 8 * c + t / 2;
          x512::Store(rec + (m * 2 + p) * 64, x512::Or(r[t], x512::ShiftLeftU16<4>(r[t + 1])));
        }
      }
    }
  }
}

// Q6_K: half h's inputs 32t + l (t < 4) from ql[l + 32(t & 1)] (nibble t/2)
// and qh[l] (bits 2t), as codes 0..63 (the −32 is the activations' part).
HWY_INLINE void PackQ6K(const uint8_t* w, size_t row_bytes, size_t out, size_t o0, size_t kb0,
                        size_t n, uint8_t* HWY_RESTRICT dst) {
  using R = Q6KRecord;
  constexpr size_t kBytes = Traits(WeightType::kQ6_K).block_bytes;
  const x256::VecI low = x256::SetI8(0x0F), two = x256::SetI8(0x03);
  for (size_t p = 0; p < 2; ++p) {
    const uint8_t* rows[16];
    for (size_t i = 0; i < 16; ++i) rows[i] = w + std::min(o0 + 16 * p + i, out - 1) * row_bytes;
    for (size_t kb = 0; kb < n; ++kb) {
      uint8_t* rec = dst + kb * R::kBytes;
      auto* d = reinterpret_cast<float*>(rec + R::kD);
      for (size_t i = 0; i < 16; ++i) {
        const uint8_t* block = rows[i] + (kb0 + kb) * kBytes;
        const uint8_t* sc = block + ref::kQ6KScales;
        const size_t col = 16 * p + i;
        for (size_t j = 0; j < 16; ++j) rec[R::kScales + j * kCols + col] = sc[j];
        d[col] = kquant_detail::HalfAt(block + ref::kQ6KD);
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
          x512::Store(rec + ((16 * c + t) * 2 + p) * 64, r[t]);
        }
      }
    }
  }
}

// Q8_0: codes from the row's bytes (scales from w.group_scales), + 128;
// two records (64 inputs) a transpose.
HWY_INLINE void PackQ8_0(const DenseWeights& w, size_t o0, size_t kb0, size_t n,
                         uint8_t* HWY_RESTRICT dst) {
  using R = Q8_0Record;
  const size_t in = w.in, blocks = in / R::kInputs;
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  const x512::VecI flip = x512::SetI8(-128);
  for (size_t p = 0; p < 2; ++p) {
    size_t rows[16];
    for (size_t i = 0; i < 16; ++i) rows[i] = std::min<size_t>(o0 + 16 * p + i, w.out - 1);
    for (size_t kb = 0; kb < n; kb += 2) {
      const size_t pair = std::min<size_t>(2, n - kb);
      const x512::Mask64 bytes = x512::MaskFromBits(pair == 2 ? ~uint64_t{0} : 0xFFFFFFFFu);
      x512::VecI r[16];
      for (size_t i = 0; i < 16; ++i) {
        const uint8_t* codes = wb + rows[i] * in + (kb0 + kb) * R::kInputs;
        r[i] = x512::Xor(x512::LoadMaskedI8(bytes, codes), flip);
      }
      x512::Transpose16x16(r);  // r[t]: word t of the 16 rows' two records
      for (size_t e = 0; e < pair; ++e) {
        uint8_t* rec = dst + (kb + e) * R::kBytes;
        for (size_t t = 0; t < R::kWords; ++t) {
          x512::Store(rec + (t * 2 + p) * 64, r[R::kWords * e + t]);
        }
        auto* d = reinterpret_cast<float*>(rec + R::kD);
        for (size_t i = 0; i < 16; ++i) {
          d[16 * p + i] = x256::HalfToF32(w.group_scales + rows[i] * blocks + kb0 + kb + e);
        }
      }
    }
  }
}

// f[r][p] += the n records (blocks) and their metas against rows xr[r]
// (from the records' first input), their block scales dr[r] and sums
// (s16: q6_k's and q8_0's, s32: q4_k's).
template <WeightType kType, size_t kR>
HWY_INLINE void Kernel(const int8_t* const* xr, const float* const* dr, const int32_t* const* s16,
                       const int16_t* const* s32, const uint8_t* records, const uint8_t* metas,
                       size_t n, x512::VecF (*f)[2]) {
  using R = Record<kType>;
  using M = Meta<kType>;
  constexpr bool kQ4K = R::kQ4K;
  constexpr size_t kSub = R::kInputs / R::kSubs;  // inputs a sub-block
  const x512::VecI low = x512::SetI8(0x0F);
  for (size_t kb = 0; kb < n; ++kb) {
    const uint8_t* rec = records + kb * R::kBytes;
    const uint8_t* meta = metas + kb * M::kStride;
    if constexpr (kR == 1) {
      for (size_t i = R::kCodes; i < R::kBytes; i += 64) isa::PrefetchOnce(rec + kStreamAhead + i);
    }
    x512::VecI blk[kR][2];
    HWY_UNROLL(4)
    for (size_t r = 0; r < kR; ++r) blk[r][0] = blk[r][1] = x512::ZeroI();
    for (size_t j = 0; j < R::kSubs; ++j) {
      x512::VecI a[kR][2];
      HWY_UNROLL(4)
      for (size_t r = 0; r < kR; ++r) {
        a[r][0] = a[r][1] = kQ4K ? x512::ZeroI() : x512::SetI32(s16[r][kb * R::kSubs + j]);
      }
      for (size_t t = 0; t < kSub / 4; t += 2) {  // two words of 4 inputs at a time
        const size_t word = j * (kSub / 4) + t;   // within the block
        x512::VecI wv[2][2];                      // [word, word + 1][panel]
        if constexpr (kR == 1) {
          for (size_t p = 0; p < (kQ4K ? 2 : 4); ++p) {
            isa::PrefetchOnce(rec + kStreamAhead + (kQ4K ? word : 2 * word) * 64 + 64 * p);
          }
        }
        for (size_t p = 0; p < 2; ++p) {
          if constexpr (kQ4K) {
            const x512::VecI v = x512::Load(rec + (word + p) * 64);  // pair word / 2, panel p
            wv[0][p] = x512::And(v, low);
            wv[1][p] = x512::And(x512::ShiftRightU16<4>(v), low);
          } else {
            wv[0][p] = x512::Load(rec + (word * 2 + p) * 64);
            wv[1][p] = x512::Load(rec + ((word + 1) * 2 + p) * 64);
          }
        }
        for (size_t e = 0; e < 2; ++e) {
          const size_t x_at = 4 * (kb * R::kWords + word + e);
          HWY_UNROLL(4)
          for (size_t r = 0; r < kR; ++r) {
            a[r][0] = x512::DotU8I8BroadcastAccumulate(a[r][0], wv[e][0], xr[r] + x_at);
            a[r][1] = x512::DotU8I8BroadcastAccumulate(a[r][1], wv[e][1], xr[r] + x_at);
          }
        }
      }
      if constexpr (R::kQ8_0) {  // one sub-block, no integer scale
        HWY_UNROLL(4)
        for (size_t r = 0; r < kR; ++r) {
          blk[r][0] = a[r][0];
          blk[r][1] = a[r][1];
        }
        continue;
      }
      const uint8_t* sc = meta + M::kScales + j * kCols;
      x512::VecI sc0, sc1;
      if constexpr (kQ4K) {
        sc0 = x512::LoadU8x16ToI32(sc);
        sc1 = x512::LoadU8x16ToI32(sc + 16);
      } else {
        sc0 = x512::LoadI8x16ToI32(reinterpret_cast<const int8_t*>(sc));
        sc1 = x512::LoadI8x16ToI32(reinterpret_cast<const int8_t*>(sc + 16));
      }
      HWY_UNROLL(4)
      for (size_t r = 0; r < kR; ++r) {
        blk[r][0] = x512::AddI32(blk[r][0], x512::MulLoI32(a[r][0], sc0));
        blk[r][1] = x512::AddI32(blk[r][1], x512::MulLoI32(a[r][1], sc1));
      }
    }
    const auto* d = reinterpret_cast<const float*>(meta + M::kD);
    const x512::VecF d0 = x512::Load(d), d1 = x512::Load(d + 16);
    HWY_UNROLL(4)
    for (size_t r = 0; r < kR; ++r) {
      const x512::VecF dx = x512::SetF32(dr[r][kb]);
      f[r][0] = x512::MulAdd(x512::ToF32(blk[r][0]), x512::Mul(d0, dx), f[r][0]);
      f[r][1] = x512::MulAdd(x512::ToF32(blk[r][1]), x512::Mul(d1, dx), f[r][1]);
    }
    if constexpr (kQ4K) {
      const auto* neg_dmin = reinterpret_cast<const float*>(meta + M::kNegDmin);
      const auto* min_pairs = reinterpret_cast<const int32_t*>(meta + M::kMinPairs);
      const x512::VecF m0 = x512::Load(neg_dmin), m1 = x512::Load(neg_dmin + 16);
      HWY_UNROLL(4)
      for (size_t r = 0; r < kR; ++r) {
        x512::VecI mins[2] = {x512::ZeroI(), x512::ZeroI()};
        for (size_t t = 0; t < 4; ++t) {
          const int32_t* mp = min_pairs + t * kCols;
          const int16_t* sums = s32[r] + kb * 8 + 2 * t;
          mins[0] = x512::DotI16BroadcastAccumulate(mins[0], x512::LoadU(mp), sums);
          mins[1] = x512::DotI16BroadcastAccumulate(mins[1], x512::LoadU(mp + 16), sums);
        }
        const x512::VecF dx = x512::SetF32(dr[r][kb]);
        f[r][0] = x512::MulAdd(x512::ToF32(mins[0]), x512::Mul(m0, dx), f[r][0]);
        f[r][1] = x512::MulAdd(x512::ToF32(mins[1]), x512::Mul(m1, dx), f[r][1]);
      }
    }
  }
}

// The sums the kernels read, from each row's codes: q4_k Σ of each 32 (as
// i16: |Σ| ≤ 32·127), q6_k −32·Σ of each 16, q8_0 −128·Σ of each 32.
HWY_INLINE void SubBlockSums(WeightType type, const Activations& a, size_t rows, size_t in) {
  // out[j] = factor·Σ_{i<n} q[n·j + i], j < in / n.
  const auto sums = [in](const int8_t* q, size_t n, int32_t factor, auto* out) {
    for (size_t j = 0; j < in / n; ++j) {
      int32_t s = 0;
      for (size_t i = 0; i < n; ++i) s += q[n * j + i];
      out[j] = static_cast<std::remove_pointer_t<decltype(out)>>(factor * s);
    }
  };
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* q = a.q + r * in;
    if (type == WeightType::kQ4_K) {
      sums(q, 32, 1, a.s32 + r * (in / 32));
    } else if (type == WeightType::kQ6_K) {
      sums(q, 16, -32, a.s16 + r * (in / 16));
    } else {
      sums(q, 32, -128, a.s16 + r * (in / 32));
    }
  }
}

// Records of the 32 rows from o0 (past `out`: the last row), blocks
// [kb0, kb0 + n), to dst (64-byte aligned).
template <WeightType kType>
HWY_INLINE void Pack(const DenseWeights& w, size_t o0, size_t kb0, size_t n, uint8_t* dst) {
  const size_t row_bytes = WeightRowBytes(w.type, w.in);
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  if constexpr (kType == WeightType::kQ4_K) {
    PackQ4K(wb, row_bytes, w.out, o0, kb0, n, dst);
  } else if constexpr (kType == WeightType::kQ6_K) {
    PackQ6K(wb, row_bytes, w.out, o0, kb0, n, dst);
  } else {
    PackQ8_0(w, o0, kb0, n, dst);
  }
}

// y rows [0, rows) of dense.h's formula for a layer of kType from the
// quantised rows `a` (SubBlockSums done), output rows of tiles [tile_begin,
// tile_end) (kCols rows each), their records from `packed` (PackTiles) or,
// where that is null, packed here a panel (kPerChunk records) at a time.
template <WeightType kType>
HWY_NOINLINE void Gemm(size_t rows, const Activations& a, const DenseWeights& w,
                       const uint8_t* packed, size_t tile_begin, size_t tile_end, float* y,
                       size_t y_stride, bool accumulate) {
  using R = Record<kType>;
  const size_t in = w.in, out = w.out, blocks = in / R::kInputs;
  alignas(64) uint8_t panel[kMaxPanelBytes];  // 36 KiB; unused with `packed`
  alignas(64) uint8_t q4k_metas[Q4KRecord::kPerChunk * Q4KMeta::kStride];
  alignas(64) float part[kMaxBatch][kCols];
  for (size_t tile = tile_begin; tile < tile_end; ++tile) {
    const size_t o0 = tile * kCols, cols = std::min(kCols, out - o0);
    x512::Mask16 mask[2];
    x512::VecF bias[2];
    for (size_t p = 0; p < 2; ++p) {
      const size_t n = cols > 16 * p ? std::min<size_t>(16, cols - 16 * p) : 0;
      mask[p] = static_cast<x512::Mask16>((1u << n) - 1);
      bias[p] = w.bias ? x512::LoadMasked(mask[p], w.bias + o0 + 16 * p) : x512::ZeroF();
    }
    // A single row from the tiles reads them as one stream: each record's
    // scales unpacked just before its codes (a whole chunk's at once would
    // wait on lines the prefetch has not reached).
    const size_t chunk = packed != nullptr && rows == 1 ? 1 : R::kPerChunk;
    for (size_t kb0 = 0; kb0 < blocks; kb0 += chunk) {
      const size_t n = std::min(chunk, blocks - kb0);
      const bool last = kb0 + n >= blocks;
      const uint8_t* records = panel;
      if (packed != nullptr) {
        records = packed + (tile * blocks + kb0) * R::kBytes;
      } else {
        Pack<kType>(w, o0, kb0, n, panel);
      }
      const uint8_t* metas = records;
      if constexpr (R::kQ4K) {
        UnpackMeta(records, n, q4k_metas);
        metas = q4k_metas;
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
          xr[r] = a.q + b * in + kb0 * R::kInputs;
          dr[r] = a.d + b * blocks + kb0;
          s16[r] = a.s16 + (b * blocks + kb0) * R::kSums;
          s32[r] = a.s32 + (b * blocks + kb0) * R::kSums;
          for (size_t p = 0; p < 2; ++p) {
            f[r][p] = kb0 == 0 ? x512::ZeroF() : x512::Load(part[b] + 16 * p);
          }
        }
        if (nr == 1) {  // a step of one stream, or a batch's last row
          Kernel<kType, 1>(xr, dr, s16, s32, records, metas, n, f);
        } else {
          Kernel<kType, kRows>(xr, dr, s16, s32, records, metas, n, f);
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

// Tiles of a layer with `out` output rows.
HWY_INLINE size_t Tiles(size_t out) { return (out + kCols - 1) / kCols; }

// Writes every tile's records of w to dst (64-byte aligned,
// DenseBlockQ8TileBytes(w) bytes): tile t's block kb at (t·blocks + kb)·
// Record::kBytes.
HWY_INLINE void PackTiles(const DenseWeights& w, uint8_t* dst) {
  WithRecord(w.type, [&](auto record) {
    using R = decltype(record);
    const size_t blocks = w.in / R::kInputs;
    for (size_t tile = 0; tile < Tiles(w.out); ++tile) {
      Pack<R::kWeightType>(w, tile * kCols, 0, blocks, dst + tile * blocks * R::kBytes);
    }
  });
}

// Whether Run takes `batch` rows of a layer of `type` (given the scratch),
// its records laid out once where `tiled`: batches of kMinBatch or more,
// and with tiles a q4_k layer's single rows too (a step of one stream: its
// records hold the layer's bytes exactly, read as one stream; q6_k's take
// 1.31× the bytes, q8_0's 1.06×, and their single rows keep the row forms).
HWY_INLINE bool Takes(WeightType type, size_t batch, bool tiled) {
  return HasBlockQ8Tiles(type) && Avx512VnniEnabled() &&
         (tiled ? DenseBlockQ8TilesRun(type, batch) : batch >= kMinBatch);
}

// DenseBlockQ8 on the GEMM, passes of up to kMaxBatch rows quantised by
// `quantize` (x, codes, block scales) into the widening scratch
// (dense_lowp-inl.h: no more than Dense's f32 path on this layer would take,
// which a session plans for; a single row on the stack); false, having done
// nothing, where Takes is false or the scratch is not there. Output rows of
// tiles [tile_begin, tile_end) only, their records from `packed`
// (PackTiles) unless it is null.
template <class Quantize>
HWY_INLINE bool Run(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                    float* y, size_t y_stride, bool accumulate, const Quantize& quantize,
                    const uint8_t* packed, size_t tile_begin, size_t tile_end) {
  if (!Takes(w.type, batch, packed != nullptr) || w.in == 0 || w.out == 0) return false;
  const size_t in = w.in, blocks = in / Traits(w.type).block;
  const auto gemm = [&](size_t rows, const Activations& a, float* y0) {
    SubBlockSums(w.type, a, rows, in);
    WithRecord(w.type, [&](auto record) {
      Gemm<decltype(record)::kWeightType>(rows, a, w, packed, tile_begin, tile_end, y0, y_stride,
                                          accumulate);
    });
  };
  if (batch == 1) {
    alignas(64) uint8_t one[ActivationBytes(1, kDenseBlockQ8MaxIn)];  // 22 KiB
    const Activations a = CarveActivations(one, 1, in);
    quantize(x, a.q, a.d);
    gemm(1, a, y);
    return true;
  }
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
    gemm(nb, a, y + b0 * y_stride);
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
