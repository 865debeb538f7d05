// Element-wise and row kernels: activations, feature maps, LayerNorm, RmsNorm,
// softmax. Highway dispatch. Every function accepts y == x (in place);
// other overlaps are not allowed. No alignment is required.
#ifndef RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
#define RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_H_

#include <cstddef>
#include <cstdint>

namespace recur::impl::kernels {

// y = max(x, 0). Relu, Gelu and EluPlusOne propagate NaN.
void Relu(const float* x, float* y, size_t n);
// y = 0.5·x·(1 + erf(x/√2))   (exact GELU, PyTorch's default)
void Gelu(const float* x, float* y, size_t n);
// y = elu(x) + 1 = (x > 0 ? x + 1 : exp(x))   (docs/attention-math.md §3)
void EluPlusOne(const float* x, float* y, size_t n);
// y = 1 / (1 + exp(−x))   (the logistic sigmoid: RWKV-7's gates and decays);
// 0 below about −88, 1 above about 17, NaN propagates.
void Sigmoid(const float* x, float* y, size_t n);
// y = x / (1 + exp(−x)) = x·σ(x)   (silu or swish: Mamba2's and the short
// convolutions' activation, the gated norms' gate); −0 for finite x below
// −88 (where |x·σ(x)| < 6e-37); NaN propagates, −∞ gives NaN as x·σ(x) does.
void Silu(const float* x, float* y, size_t n);
// One position of a depthwise causal convolution, then silu (Mamba2's conv1d
// and the short convolutions of Gated DeltaNet and GLA):
//   y[c] = silu(bias[c] + Σ_{j<kernel} weight[c·kernel + j]·in[j][c])   (c < n)
// in: `kernel` rows of n inputs, oldest first (in[kernel − 1] the position
// itself); weight (n, kernel) as PyTorch's depthwise Conv1d keeps it (its
// axis of 1 dropped); bias (n), or null for none. The sum runs in j order,
// in f32 (fused multiply-adds on vector targets); vectorised for kernel 4
// (every published model's), element by element for other sizes. y must not
// overlap in, weight or bias.
void CausalConvSilu(const float* const* in, const float* weight, const float* bias, size_t kernel,
                    float* y, size_t n);
// y = exp(a·x + b)   (FAVOR+ features, docs/attention-math.md §3)
void AffineExp(const float* x, float a, float b, float* y, size_t n);
// y = a·x
void Scale(const float* x, float a, float* y, size_t n);
// y = a + b   (y may alias a or b)
void Add(const float* a, const float* b, float* y, size_t n);
// Symmetric int8 quantisation of one row: returns s = max|x| / 127 and
// writes q[i] = round(x[i] · (127 / max|x|)) (nearest, ties to even; on
// Highway's emulated targets, whose NearestInt adds 0.5 and truncates, a
// value within an ulp of a halfway point may round the other way), so that
// x ≈ s·q with |x − s·q| ≤ s/2. A row whose max|x| is below kQuantizeS8MinMax (zeros, or
// so small that 127 / max|x| overflows) gives s = 0 and q = 0. Inputs must
// be finite (a non-finite one makes s non-finite).
inline constexpr float kQuantizeS8MinMax = 127.0f / 3.40282347e+38f;
float QuantizeS8(const float* x, int8_t* q, size_t n);
// sum += x by compensated (Kahan) addition, comp holding what each float
// addition lost: y = x − comp, t = sum + y, comp = (t − sum) − y, sum = t.
// For sums over very long sequences (linear attention's S and z).
void CompensatedAdd(const float* x, float* sum, float* comp, size_t n);
// y = (x − mean) / sqrt(var + eps) · gamma + beta, biased variance over n.
// gamma, beta: (n); either may be nullptr (1 and 0).
void LayerNorm(const float* x, const float* gamma, const float* beta, float eps, float* y,
               size_t n);
// y = x / sqrt(mean(x²) + eps) · gamma (RMS norm, T5/LLaMA form); gamma
// (n) may be nullptr (1).
void RmsNorm(const float* x, const float* gamma, float eps, float* y, size_t n);
// y = softmax(x) and y = log_softmax(x), max-subtracted.
void Softmax(const float* x, float* y, size_t n);
void LogSoftmax(const float* x, float* y, size_t n);
// AFT's sums (docs/attention-math.md §4), per channel i with logit l = a·x[i] + b:
// m[i] = max(m[i], l), and then with that max
// e = exp(l − m[i]); num[i] += e·v[i]; den[i] += e.
void AffineMax(const float* x, float a, float b, float* m, size_t n);
void AffineExpAccumulate(const float* x, float a, float b, const float* m, const float* v,
                         float* num, float* den, size_t n);
// Σ x[i]·y[i], accumulated in f32.
float Dot(const float* x, const float* y, size_t n);

// Name of the Highway target dynamic dispatch picks on this machine ("AVX3_VNNI"
// for AVX3 with its AVX512-VNNI tiles: target_limit.h).
const char* SimdTargetName();

}  // namespace recur::impl::kernels

#endif  // RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
