// Dense layer kernels (batched mat-vec / small mat-mat), Highway dispatch.
#ifndef RECUR_KERNELS_DENSE_DENSE_H_
#define RECUR_KERNELS_DENSE_DENSE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/dense/weight_types.h"

namespace recur::impl::kernels {

// kI4 layout: inputs per packed block, and the quantised value of input i of
// a row (row: its in/2 bytes): block i/32, byte i%16, nibble (i%32)/16, q =
// nibble − 8.
inline constexpr size_t kI4Block = Traits(WeightType::kI4).block;
inline int I4Value(const uint8_t* row, size_t i) {
  const uint8_t byte = row[(i / kI4Block) * (kI4Block / 2) + i % (kI4Block / 2)];
  return static_cast<int>((i % kI4Block) < kI4Block / 2 ? byte & 0xF : byte >> 4) - 8;
}

// K-quant layouts (kQ4_K, kQ6_K, kQ5_K; recur.fbs): inputs per block, as ggml's
// QK_K. A row is in / kKQuantBlock blocks of Traits(type).block_bytes.
inline constexpr size_t kKQuantBlock = 256;
static_assert(Traits(WeightType::kQ4_K).block == kKQuantBlock &&
                  Traits(WeightType::kQ6_K).block == kKQuantBlock &&
                  Traits(WeightType::kQ5_K).block == kKQuantBlock,
              "K-quant blocks are ggml's QK_K");

// A dense layer's parameters, pointing into model bytes (no copy).
struct DenseWeights {
  const void* weight = nullptr;   // (out, in) row-major of `type`; PyTorch nn.Linear layout
  WeightType type = WeightType::kF32;
  const float* scales = nullptr;  // per-row scales (kPerRow types): (out); otherwise null
  const float* bias = nullptr;    // (out) or null
  uint32_t in = 0;
  uint32_t out = 0;
  // Per-group scales (kPerGroup types): (out, in / group) f16 bits, and
  // inputs per scale (a multiple of the type's block that divides in).
  const uint16_t* group_scales = nullptr;
  uint32_t group = 0;
  // The weights come from DRAM at every call (a model larger than the
  // last-level cache, its layers run one after the other): a call of one
  // row then reads the layer's rows as one stream
  // (StreamRows, dense-inl.h) from 16 KiB of weights up, where it otherwise
  // does from 1 MiB. Only the order of the sums changes. Set by the session
  // (backends::DensePlan::weights_from_memory).
  bool from_memory = false;

  // Output rows [begin, end) of this layer, as a layer of their own.
  DenseWeights Rows(size_t begin, size_t end) const;
};

// y[b, o] = (accumulate ? y[b, o] : 0) + bias[o] + Σ_i x[b, i] · w[o, i] for
// weights of any WeightType; x: (batch, in) with row stride x_stride; y:
// (batch, w.out) with row stride y_stride. As the f32 overload below.
// w[o, i] is the decoded weight: the f16/bf16 value, or scales[o]·q[o, i]
// with per-row scales (kI8; computed as scales[o]·Σ_i x·q for small
// batches), or scale[o, i/group]·q[o, i] with per-group scales (kI4:
// decoded a group at a time, see DenseI4 below), or ggml's dequantised value
// for the K-quants (DenseKQuant below). Activations and sums are f32. Narrow
// weights need only their element alignment. For
// batch > 6 (> 3 without AVX-512) narrow weights are widened, a chunk of
// rows at a time, into a per-thread f32 scratch buffer (allocated on first
// use and kept for reuse; ~64 KiB unless 8·in floats is larger, at most
// 4 MiB), so that the f32 kernels run on them; for smaller batches bf16
// uses that buffer for a permuted copy of x (batch·in floats).
void Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
           size_t y_stride, bool accumulate);

// y[b, o] = (accumulate ? y[b, o] : 0) + bias[o] + Σ_i x[b, i] · w[o, i]
// for b < batch, o < out.
//   x: (batch, in), row stride x_stride floats
//   w: (out, in) row-major, PyTorch nn.Linear layout; rows contiguous
//   bias: (out) or nullptr
//   y: (batch, out), row stride y_stride floats; must not overlap x or w
// No alignment is required of any pointer. Sums are accumulated in f32.
// Thread-safe; for batch >= 32 on AVX-512 it may allocate a per-thread scratch
// buffer (kept for reuse, <= ~1 MiB unless 32·in floats is larger).
void Dense(const float* x, size_t x_stride, size_t batch, const float* w, const float* bias,
           size_t in, size_t out, float* y, size_t y_stride, bool accumulate);

// ---------------------------------------------------------------------------
// int8 weights × int8 activations (dense_i8dot-inl.h). Each activation row
// is quantised to int8 with a scale of its own (QuantizeS8: |x − s·q| ≤
// s/2), the products are summed exactly in i32 and the scales, bias and
// accumulation applied in f32:
//   y[b, o] = (accumulate ? y[b, o] : 0) + bias[o] + scales[o]·s_b·Σ_i q_w[o, i]·q_b[i]
// so the result deviates from Dense's by the activations' rounding: at most
// scales[o]·s_b/2·Σ_i |q_w[o, i]| per output (the same numerics as the
// onednn backend's int8 layers).

// How Dense runs kI8 weights and the block types DenseBlockQ8 takes (q8_0,
// the K-quants; other weight types ignore it).
enum class Int8Activations : uint8_t {
  kAuto = 0,   // kQuantized where DenseI8DotPreferred (K-quants, q8_0: DenseBlockQ8Preferred)
               // says it is faster, else kFloat
  kFloat = 1,  // f32 activations, weights widened to f32 (the Dense above)
  kQuantized = 2,  // DenseI8Dot (K-quants, q8_0: DenseBlockQ8 where DenseBlockQ8Preferred)
  // DenseBlockQ8 for the types it takes (as llama.cpp; kI8 as kQuantized,
  // other types f32).
  kBlocks = 3,
};

// Widest layer (w.in) the integer path takes: at least one quantised row
// fits its stack buffer (16 KiB); wider layers run the widening kernels.
inline constexpr size_t kDenseI8DotMaxIn = 16384;

// Whether DenseI8Dot runs an (in, out) layer on `batch` rows faster than the
// widening kernels on the SIMD target dispatched to now: true on targets with
// integer dot-product tiles (AVX-512, AVX2, SSE4, SSSE3, arm64 NEON) for
// 16 <= in <= kDenseI8DotMaxIn. Thread-safe.
bool DenseI8DotPreferred(size_t batch, size_t in, size_t out);

// The formula above for kI8 weights, x: (batch, in) f32 with row stride
// x_stride, y: (batch, w.out) with row stride y_stride (no overlap with x or
// w). Weights of another type, or wider than kDenseI8DotMaxIn, run Dense
// instead. x must be finite. No alignment is required; thread-safe. The
// quantised rows are a stack buffer of 16 KiB, or, for batches with more
// rows than that holds, up to 64 rows a pass in the widening scratch (the
// bound one, which DenseScratchNeed plans; else per-thread, allocated on
// first use as Dense's).
void DenseI8Dot(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                size_t y_stride, bool accumulate);

// As DenseI8Dot on activations already quantised: q: (batch, w.in) int8 with
// row stride q_stride, values in [-127, 127] (QuantizeS8's range; -128 gives
// an unspecified sum), q_scales: (batch). Does nothing unless w is kI8 and
// w.in <= kDenseI8DotMaxIn.
void DenseI8DotQuantized(const int8_t* q, size_t q_stride, const float* q_scales, size_t batch,
                         const DenseWeights& w, float* y, size_t y_stride, bool accumulate);

// Whether weights of `type` have integer dot-product kernels, which Dense
// below runs as Int8Activations says: kI8 (DenseI8Dot) and kI4
// (DenseI4Dot). Other types run f32 FMAs whatever it says.
constexpr bool HasIntegerDot(WeightType type) {
  return type == WeightType::kI8 || type == WeightType::kI4;
}

// Dense for any WeightType with kI8 and kI4 weights run as `int8` says
// (DenseI8Dot, DenseI4Dot), and with kBlocks the types DenseBlockQ8 takes.
void Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
           size_t y_stride, bool accumulate, Int8Activations int8);

// ---------------------------------------------------------------------------
// int4 weights (kI4, dense_i4-inl.h). With f32 activations (Dense above) a
// row's weights are decoded, 512 inputs at a time, into a stack buffer and
// used against every activation row: no scratch, any batch. With quantised
// activations (DenseI4Dot) each activation row is quantised by QuantizeS8
// (scale s_b) and the products of each group are summed exactly in i32:
//   y[b, o] = (accumulate ? y[b, o] : 0) + bias[o]
//             + s_b·Σ_g scale[o, g]·Σ_{i in group g} q_w[o, i]·q_b[i]
// The sum over groups is f32, lane by lane, in an order that depends on the
// target: within (groups + lanes + 3)·ε of the exact value relative to
// s_b·Σ_g scale[o, g]·(Σ_{i in g} n[o, i]·|q_b[i]| + 8·|Σ_{i in g} q_b[i]|)
// (n = q_w + 8, the stored nibble: the x86 and arm64 tiles sum n·q_b and
// subtract 8·Σ q_b per group), plus the rounding of bias and accumulation.

// Dense (the DenseWeights overload) for kF32 weights: the f32 entry point
// above, with w.from_memory. Does nothing for other weight types.
void DenseF32(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
              size_t y_stride, bool accumulate);

// Dense (the DenseWeights overload) for kI4 weights: f32 activations, the
// weights decoded a row at a time. Does nothing for other weight types.
void DenseI4Float(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                  size_t y_stride, bool accumulate);

// Widest layer (w.in) DenseI4Dot takes (one quantised row fits its stack
// buffer); wider layers run Dense.
inline constexpr size_t kDenseI4DotMaxIn = kDenseI8DotMaxIn;

// Whether DenseI4Dot runs an (in, out) layer on `batch` rows faster than the
// f32 decode on the SIMD target dispatched to now: true on targets with
// integer dot-product tiles (AVX-512 and AVX2 with 256-bit tiles, SSE4,
// SSSE3, arm64 NEON) for in <= kDenseI4DotMaxIn. Thread-safe.
bool DenseI4DotPreferred(size_t batch, size_t in, size_t out);

// The formula above for kI4 weights; x: (batch, w.in) f32 with row stride
// x_stride (finite), y: (batch, w.out) with row stride y_stride (no overlap).
// Weights of another type, or wider than kDenseI4DotMaxIn, run Dense
// instead. No alignment is required; thread-safe; scratch as DenseI8Dot's
// (the rows' group sums beside them).
void DenseI4Dot(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                size_t y_stride, bool accumulate);

// As DenseI4Dot on activations already quantised: q (batch, w.in) int8 with
// row stride q_stride, values in [-127, 127]; q_scales (batch). Does nothing
// unless w is kI4 and w.in <= kDenseI4DotMaxIn.
void DenseI4DotQuantized(const int8_t* q, size_t q_stride, const float* q_scales, size_t batch,
                         const DenseWeights& w, float* y, size_t y_stride, bool accumulate);

// ---------------------------------------------------------------------------
// K-quant weights (kQ4_K, kQ6_K, kQ5_K; dense_kquant-inl.h), f32 activations: each
// weight is decoded exactly to ggml's dequantised value (ref::DecodeWeight)
// in registers, and multiplied and summed in f32 as Dense says. Up to
// kMaxB activation rows (6 with AVX-512, 3 otherwise) share each decoded
// vector; larger batches decode a chunk of rows at a time into the f32
// widening scratch (DenseScratchNeed) and run the f32 kernels on it, or,
// without scratch, run the small-batch path in chunks of rows.

// Dense (the DenseWeights overload) for K-quant weights; does nothing for
// other weight types. w.in must be a multiple of kKQuantBlock. Needs only
// byte alignment of the weights; thread-safe.
void DenseKQuant(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                 size_t y_stride, bool accumulate);

// ---------------------------------------------------------------------------
// Block-quantised activations: quantised weights multiplied as llama.cpp's CPU
// backend multiplies them (ggml's vec_dot_type; dense_blockq-inl.h). Each
// activation row is quantised per block of inputs exactly as ggml quantises
// it, the products of a block are summed exactly in i32, and the blocks'
// scales applied in f32:
//   Q8_0 blocks of 32, for kQ8_0 and kI4 weights with groups of 32 (GGUF's
//     Q8_0 and Q4_0): amax = max |x|, d = f16(amax / 127), q = x·(127 / amax) rounded
//     to nearest even (0 where amax = 0);
//     y[o] = Σ_b scale[o, b]·d_b·Σ_{i in b} q_w[o, i]·q[i]
//   Q8_K blocks of 256, for the K-quants: m = the first x of largest |x|,
//     s = −127 / m, q = min(127, x·s rounded to nearest even), d = 1 / s
//     (all 0 where m = 0);
//     Q4_K, Q5_K: y[o] = Σ_b d_b·(f32(d_w)·Σ_j sc_j·Σ_{i in j} q_w·q[i]
//                                  − f32(dmin_w)·Σ_j m_j·Σ_{i in j} q[i])
//     Q6_K:       y[o] = Σ_b d_b·f32(d_w)·Σ_j sc_j·Σ_{i in j} (q_w − 32)·q[i]
//     (j: the block's sub-blocks of 32 inputs, 16 for Q6_K; ref::KQuantValue
//     has the codes)
// plus bias and accumulation in f32. Each block's sum is converted to f32 and
// accumulated in block order (ggml accumulates lane by lane: the two differ
// by that rounding only). For parity with llama.cpp on the same GGUF
// file (docs/layouts.md "Against llama.cpp itself").
// f16 and bf16 weights: ggml rounds each activation to the weights' type (to
// nearest, ties to even: F16C's vcvtps2ph, its GGML_FP32_TO_BF16) and sums
// the products in f32; here those rounded values run the f32-activation
// kernels, so the result is Dense's on the rounded x:
//   y[o] = Σ_i f32(w[o, i])·round(x[i])   (f32 sums in Dense's order)

// The activation blocks ggml pairs with weights of `type` stored in groups of
// `group` inputs (its vec_dot_type): kF16 and kBF16 are single values rounded.
enum class ActivationBlocks : uint8_t { kNone, kQ8_0, kQ8_K, kF16, kBF16 };
constexpr ActivationBlocks ActivationBlocksOf(WeightType type, uint32_t group) {
  if ((type == WeightType::kQ8_0 || type == WeightType::kI4) && group == kI4Block) {
    return ActivationBlocks::kQ8_0;
  }
  if (type == WeightType::kF16) return ActivationBlocks::kF16;
  if (type == WeightType::kBF16) return ActivationBlocks::kBF16;
  return IsKQuant(type) ? ActivationBlocks::kQ8_K : ActivationBlocks::kNone;
}

// Whether activations of `kind` are single rounded values (f16, bf16), which
// run the f32-activation kernels, rather than integer blocks.
constexpr bool RoundsActivations(ActivationBlocks kind) {
  return kind == ActivationBlocks::kF16 || kind == ActivationBlocks::kBF16;
}

// Widest layer (w.in) DenseBlockQ8 takes: its quantised rows live on the
// stack; wider layers run Dense.
inline constexpr size_t kDenseBlockQ8MaxIn = kDenseI8DotMaxIn;

// Whether DenseBlockQ8 runs `batch` rows of a layer of `type` faster than
// f32 activations (DenseKQuant, Dense) on the SIMD target dispatched to now:
// true for one row (a decode step) of q4_k, q6_k and q8_0 on x86 from AVX2
// (ggml's operations), and for batches of 8 rows or more of q4_k, q6_k and
// q8_0 on AVX-512 with VNNI (its integer GEMM); Int8Activations kAuto and kQuantized
// then run them on it. Thread-safe.
bool DenseBlockQ8Preferred(WeightType type, size_t batch);

// Whether Dense with `int8` runs `batch` rows of a layer of `type` in groups
// of `group` with `in` inputs on DenseBlockQ8: kBlocks for every layer it
// takes, kAuto and kQuantized where DenseBlockQ8Preferred.
// Thread-safe.
bool RunsBlockQ8(WeightType type, uint32_t group, size_t in, Int8Activations int8,
                 size_t batch);

// The formula above for weights with ActivationBlocksOf(w.type, w.group) other
// than kNone and w.in <= kDenseBlockQ8MaxIn; other layers run Dense. x:
// (batch, w.in) f32 with row stride x_stride (finite); y: (batch, w.out) with
// row stride y_stride (no overlap). No alignment is required; thread-safe.
// Its buffers are on the stack (~20 KiB; ~60 KiB for the GEMM), but for the
// GEMM (batches of 8 or more q4_k, q6_k or q8_0 rows on AVX-512 with VNNI), which
// quantises up to 64 rows at a time into Dense's widening scratch: the bound
// scratch (ScopedDenseScratch, no larger than DenseScratchNeed asks for the
// layer) or the per-thread buffer; without room there it runs the row forms.
// f16 and bf16 weights: a step's single row of a layer that Dense reads as
// one stream (f16) is rounded to f16 on the stack and the rows run against
// it; other calls round up to RoundedActivationRows rows at a time into the
// rounding scratch (DenseScratchNeed with kBlocks plans it; else per-thread),
// or, without room there, one row at a time on the stack (64 KiB).
void DenseBlockQ8(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                  size_t y_stride, bool accumulate);

// DenseBlockQ8 for f16 and bf16 weights (dense_lowp.cc); other layers run
// Dense. The same contract.
void DenseRoundedActivations(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                             float* y, size_t y_stride, bool accumulate);

// ---------------------------------------------------------------------------
// Block-quantised tiles (dense_blockq_gemm-inl.h): a q4_k, q6_k or q8_0 layer
// laid out once as DenseBlockQ8's GEMM otherwise lays it out on every call:
// per tile of 32 output rows and block (256 inputs for q4_k and q6_k, 32 for
// q8_0), the codes of the 32 rows side by side, 4 inputs each (nibbles for
// q4_k, bytes for q6_k and q8_0), beside the scales (q4_k: the blocks' own
// bytes, 6-bit scales and minimums and f16 d, dmin; q6_k: the sub-block
// scales and f32 d; q8_0: f32 d): the layer's bytes for q4_k, 1.31× for q6_k,
// 1.06× for q8_0 (its codes and f16 scales), its output rows rounded up to a
// multiple of kBlockQ8TileRows.
// From tiles the GEMM also runs single q4_k rows (a step of one stream),
// reading the layer as one stream.
inline constexpr size_t kBlockQ8TileRows = 32;
// The GEMM's smallest batch (fewer rows run DenseBlockQ8's row forms).
inline constexpr size_t kBlockQ8TilesMinBatch = 8;
// Bytes of one block of one tile.
inline constexpr size_t kQ4KTileBlockBytes = 4608;
inline constexpr size_t kQ6KTileBlockBytes = 8832;
inline constexpr size_t kQ8_0TileBlockBytes = 1152;
// The types with block-quantised tiles and their GEMM (q8_0 in groups of 32,
// which its callers check), and the only ones DenseBlockQ8Preferred may
// prefer.
constexpr bool HasBlockQ8Tiles(WeightType type) {
  return type == WeightType::kQ4_K || type == WeightType::kQ6_K || type == WeightType::kQ8_0;
}
// Whether DenseBlockQ8Tiled runs `batch` rows of a `type` layer on the GEMM
// from its tiles (where DenseBlockQ8TileBytes is not 0): batches of
// kBlockQ8TilesMinBatch or more, and single q4_k rows.
inline bool DenseBlockQ8TilesRun(WeightType type, size_t batch) {
  return batch >= kBlockQ8TilesMinBatch || (type == WeightType::kQ4_K && batch == 1);
}
// Tiles of a layer with `out` output features.
inline size_t DenseBlockQ8Tiles(size_t out) {
  return (out + kBlockQ8TileRows - 1) / kBlockQ8TileRows;
}
// Bytes of w's tiles; 0 for a layer that has none: not q4_k, q6_k or q8_0 in
// groups of 32, in = 0, out = 0, in > kDenseBlockQ8MaxIn, or on a SIMD target
// (dispatched to now) without the GEMM (AVX-512 with VNNI). Thread-safe.
size_t DenseBlockQ8TileBytes(const DenseWeights& w);
// Writes w's tiles to dst (DenseBlockQ8TileBytes(w) bytes, 64-byte aligned).
// Writes nothing when DenseBlockQ8TileBytes(w) is 0. Thread-safe.
void PackDenseBlockQ8Tiles(const DenseWeights& w, uint8_t* dst);
// DenseBlockQ8 (above) for the output rows of tiles [tile_begin, tile_end)
// (rows 32·tile_begin to min(32·tile_end, w.out)), bit for bit: where the
// GEMM takes the batch (8 rows or more, its scratch as DenseBlockQ8's) it
// reads the weights from `tiles` (PackDenseBlockQ8Tiles(w)), otherwise from w
// as DenseBlockQ8 does. A single q4_k row from tiles runs the GEMM too
// (DenseBlockQ8TilesRun; its quantised row on the stack, 22 KiB): the
// GEMM's sums for that row, bit for bit what the row gets in any batch the
// GEMM takes (the row forms DenseBlockQ8 runs on one row sum in another
// order). tiles may be null (then always from w). y: (batch, w.out) with row
// stride y_stride, only those rows written. Calls on disjoint tile ranges
// may run concurrently; thread-safe.
void DenseBlockQ8Tiled(const float* x, size_t x_stride, size_t batch, const uint8_t* tiles,
                       const DenseWeights& w, size_t tile_begin, size_t tile_end, float* y,
                       size_t y_stride, bool accumulate);

// ---------------------------------------------------------------------------
// int4 row panels, for small batches (dense_i4_panels-inl.h): a re-laid-out copy of
// a kI4 layer with groups of 32 in which the bytes of 16 output rows sit side
// by side, 4 inputs each, so one integer dot product sums 16 rows with no
// horizontal sums. The copy takes 0.5625 bytes per weight (nibbles and f16
// scales), its output rows rounded up to a multiple of kI4PanelRows. The
// result is DenseI4DotQuantized's formula, within the same bound.
inline constexpr size_t kI4PanelRows = 16;
// Activation rows a panel kernel runs side by side (larger batches run in
// chunks of this many).
inline constexpr size_t kI4PanelMaxBatch = 4;
// Panels of a layer with `out` output features.
inline size_t DenseI4Panels(size_t out) { return (out + kI4PanelRows - 1) / kI4PanelRows; }
// Bytes of one panel of a layer with `in` inputs: per block of 32 inputs, 16
// rows' nibbles (256 bytes) and, after all blocks, 16 f16 scales a block.
inline size_t DenseI4PanelStride(size_t in) {
  return in / kI4Block * kI4PanelRows * (kI4Block / 2 + 2);
}
// Bytes of w's panel copy; 0 for a layer that has none (not kI4, a group
// other than 32, in = 0, out = 0 or in > kDenseI4DotMaxIn).
size_t DenseI4PanelBytes(const DenseWeights& w);
// Writes w's panels to dst (DenseI4PanelBytes(w) bytes; any alignment, 64
// bytes is fastest). Writes nothing when DenseI4PanelBytes(w) is 0.
void PackDenseI4Panels(const DenseWeights& w, uint8_t* dst);
// Whether DenseI4PanelsQuantized runs batches of up to kI4PanelMaxBatch
// rows faster than DenseI4Dot on the SIMD target dispatched to now: true on
// x86-64 from AVX2 (vpdpbusd with AVX512-VNNI, maddubs otherwise); elsewhere
// it runs a scalar loop. Thread-safe.
bool DenseI4PanelsPreferred();
// y[b, o] = (accumulate ? y[b, o] : 0) + bias[o] + q_scales[b]·Σ_g scale[o, g]
// ·Σ_{i in g} q_w[o, i]·q[b, i] for b < batch and the rows o < w.out of panels
// [panel_begin, panel_end), reading the weights from `panels`
// (PackDenseI4Panels(w)); w gives the shape, scales' group and bias.
// q: (batch, w.in) int8 in [-127, 127] with row stride q_stride; y: (batch,
// w.out) with row stride y_stride, must not overlap q or panels. Does nothing
// when DenseI4PanelBytes(w) is 0. Calls on disjoint panel ranges may run
// concurrently; does not allocate.
void DenseI4PanelsQuantized(const int8_t* q, size_t q_stride, const float* q_scales,
                            size_t batch, const uint8_t* panels, const DenseWeights& w,
                            size_t panel_begin, size_t panel_end, float* y, size_t y_stride,
                            bool accumulate);
// ---------------------------------------------------------------------------
// Rows decoded to f32 (dense_decode.cc): a token's row of an embedding table
// stored in any weight type, one row per lookup instead of a widened copy of
// the whole table.

// dst[r·w.in + i] = static_cast<float>(ref::DecodeWeight(w, begin + r, i))
// for r < rows, i < w.in: the values the Dense kernels multiply (int8: the
// f32 product scale·q; the other types' values are exact in f32), bit for
// bit but for the sign of a zero (q6_k gives +0 where the spec's d·scale·0
// is −0, as its Dense kernels do).
// Writes exactly rows·w.in floats; begin + rows <= w.out; w.bias is not
// read. No alignment is required; does not allocate; thread-safe.
void DecodeWeightRows(const DenseWeights& w, size_t begin, size_t rows, float* dst);

// ---------------------------------------------------------------------------
// Scratch. For larger batches Dense packs x into panels or widens narrow
// weights into per-thread buffers that grow on first use (above). A caller
// whose memory is all planned (a session on the caller's arena) binds
// scratch of its own instead: while a binding is in place, Dense on that
// thread never allocates; a call that needs more than is bound takes its
// no-scratch path (row tiles, weights widened in registers), which is
// slower and rounds differently but is as exact.

// Scratch regions in floats, 64-byte aligned: `widen` for widened weights or
// bf16-permuted x, `panel` for packed x, `rounded` for activation rows
// rounded to f16 or bf16 values (Int8Activations::kBlocks on f16 and bf16
// layers). As a need (DenseScratchNeed) the pointers are null.
struct DenseScratch {
  float* widen = nullptr;
  size_t widen_floats = 0;
  float* panel = nullptr;
  size_t panel_floats = 0;
  float* rounded = nullptr;
  size_t rounded_floats = 0;
};

// What a Dense call of `batch` rows on an (in, out) layer of `type` with
// `int8` (Dense's last argument; with kBlocks also DensePacked's rounding)
// asks for on the SIMD target it dispatches to now. Larger batches never
// need less.
DenseScratch DenseScratchNeed(size_t batch, size_t in, size_t out, WeightType type,
                              Int8Activations int8 = Int8Activations::kFloat);

// Activation rows rounded per pass (DenseBlockQ8 on f16 and bf16 weights,
// DensePacked with a rounding): about 2 MiB of them, at least 12 (the packed
// GEMM's tallest tile), at most `batch`.
inline size_t RoundedActivationRows(size_t batch, size_t in) {
  const size_t fit = (size_t{2} << 20) / (sizeof(float) * (in == 0 ? 1 : in));
  return std::min(batch, fit > 12 ? fit : size_t{12});
}

// Binds `scratch` (owned by the caller, which keeps it alive) for Dense
// calls on the calling thread until destroyed, then restores the previous
// binding. Null binds nothing. Worker threads of a pool are not affected.
class ScopedDenseScratch {
 public:
  explicit ScopedDenseScratch(const DenseScratch* scratch);
  ~ScopedDenseScratch();
  ScopedDenseScratch(const ScopedDenseScratch&) = delete;
  ScopedDenseScratch& operator=(const ScopedDenseScratch&) = delete;

 private:
  const DenseScratch* previous_;
  bool bound_;
};

// The calling thread's binding, or null (for the kernels).
const DenseScratch* BoundDenseScratch();

// ---------------------------------------------------------------------------
// Packed weights, for many rows at once (batched decode, prefill): the layer
// is re-laid out once into panels of kDensePanelWidth output features so a
// register tile of rows × 32 outputs needs no horizontal sums. The layout is
// the same on every SIMD target (dense_packed-inl.h).

inline constexpr size_t kDensePanelWidth = 32;

// Panels of a layer with `out` output features.
inline size_t DensePanels(size_t out) { return (out + kDensePanelWidth - 1) / kDensePanelWidth; }

// Floats of the packed form of an (out, in) layer.
inline size_t DensePackedFloats(size_t in, size_t out) {
  return DensePanels(out) * in * kDensePanelWidth;
}

// Element types of packed panels: f32 (kF32) for weights of any type; for f16
// and bf16 weights also their own type (the same numbers in half the bytes,
// widened in registers as the GEMM loads them).
inline bool PanelsMayKeepType(WeightType type) {
  return type == WeightType::kF16 || type == WeightType::kBF16;
}

// Bytes of the packed form of an (out, in) layer in panels of panel_type
// (kF32, or a type PanelsMayKeepType names).
inline size_t DensePackedBytes(size_t in, size_t out, WeightType panel_type) {
  return DensePackedFloats(in, out) * Traits(panel_type).block_bytes;
}

// Whether panels of f16 or bf16 values run the packed GEMM at least as fast
// as f32 panels on the SIMD target dispatched to now, counting that they
// read half the bytes: true where f16 widens in one instruction (x86 from
// AVX2, arm64 NEON). Thread-safe.
bool DenseNarrowPanelsPreferred();

// Writes w's packed form to `packed`, DensePackedBytes(w.in, w.out,
// panel_type) bytes, 64-byte aligned: decoded f32 values (int8 scales folded
// in) for panel_type kF32, any WeightType; w's stored values for panel_type
// == w.type where PanelsMayKeepType(w.type). Other pairs are a caller error.
void PackDense(const DenseWeights& w, WeightType panel_type, void* packed);
inline void PackDense(const DenseWeights& w, float* packed) {
  PackDense(w, WeightType::kF32, packed);
}

// y[r, o] = (accumulate ? y[r, o] : 0) + bias[o] + Σ_i x[r, i] · w[o, i] for
// r < rows and o in panels [panel_begin, panel_end) (o < out), w given by its
// packed form (PackDense with panel_type). x: (rows, in), row stride
// x_stride; y: (rows, out) row stride y_stride, must not overlap x. bias:
// (out) or null. The result does not depend on panel_type (the same values,
// the same order of sums). Calls on disjoint panel ranges may run
// concurrently. With `rounding` kF16 or kBF16 (in <= kDenseBlockQ8MaxIn)
// each x value is first rounded as DenseBlockQ8 rounds it, a chunk of rows at
// a time into the rounding scratch (the bound one, which DenseScratchNeed
// with kBlocks plans; else per-thread, allocated on first use) or, without
// room there, one row at a time on the stack (64 KiB); otherwise does not
// allocate.
void DensePacked(const float* x, size_t x_stride, size_t rows, const void* packed,
                 WeightType panel_type, const float* bias, size_t in, size_t out,
                 size_t panel_begin, size_t panel_end, float* y, size_t y_stride, bool accumulate,
                 ActivationBlocks rounding = ActivationBlocks::kNone);
inline void DensePacked(const float* x, size_t x_stride, size_t rows, const float* packed,
                        const float* bias, size_t in, size_t out, size_t panel_begin,
                        size_t panel_end, float* y, size_t y_stride, bool accumulate) {
  DensePacked(x, x_stride, rows, packed, WeightType::kF32, bias, in, out, panel_begin, panel_end, y,
              y_stride, accumulate);
}

}  // namespace recur::impl::kernels

#endif  // RECUR_KERNELS_DENSE_DENSE_H_
