// Dense micro-benchmark (not a test). Prints µs per call (median and best of
// 41 timed batches after warm-up), GFLOP/s and %peak from the median, and the
// weight-streaming rate (bytes of the stored weight type and its scales).
// Rows for f32 and, at a few shapes, for f16, bf16, int8 and q8_0 weights
// (int8 and q8_0 side by side at mat-vec shapes up to 8192×8192: 64 MiB,
// past the last-level cache); then batch-1 mat-vecs of 4096 and 8192 square
// with q4_k, q6_k and q5_k beside int4, in turn (and q4_k, q6_k and int4 with
// block-quantised activations, as llama.cpp multiplies them), and int4 row
// panels streamed from DRAM beside the read probe. Buffers are 64-byte aligned.
//   dense_bench [TARGET] [batches|panels|rows]   e.g. AVX2 to pin dynamic
//   dispatch to that target; `batches`: only the K-quant batch rows; `panels`:
//   only the int4 panels from DRAM; `rows`: only mat-vecs of the types of a
//   GGUF file streamed from DRAM (RowsFromDram)
// It also measures this core's FMA peak for reference (machine_limits.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "core/platform.h"
#include "hwy/targets.h"
#include "kernels/dense/dense.h"
#include "kernels/elementwise/elementwise.h"
#include "machine_limits.h"


namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double median, best;  // seconds per call
};

// Median and best seconds per call of fn() over 41 samples.
template <class F>
Timing TimePerCall(const F& fn) {
  // Calls per sample so that a sample takes ≥ ~200 µs.
  size_t reps = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (size_t r = 0; r < reps; ++r) fn();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt > 2e-4) break;
    reps *= 2;
  }
  // Warm-up ~50 ms, then 41 samples.
  const auto warm_end = Clock::now() + std::chrono::milliseconds(50);
  while (Clock::now() < warm_end) fn();
  std::vector<double> samples;
  for (int s = 0; s < 41; ++s) {
    const auto t0 = Clock::now();
    for (size_t r = 0; r < reps; ++r) fn();
    samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples.front()};
}

// Plain -O3 loop for comparison.
void NaiveDense(const float* x, size_t batch, const float* w, const float* bias, size_t in,
                size_t out, float* y) {
  for (size_t b = 0; b < batch; ++b) {
    for (size_t o = 0; o < out; ++o) {
      float s = bias[o];
      for (size_t i = 0; i < in; ++i) s += x[b * in + i] * w[o * in + i];
      y[b * out + o] = s;
    }
  }
}

using recur::impl::kernels::WeightType;

// v in [-1, 1] as f16 / bf16 bits (truncated; tiny values flush to zero:
// good enough for timing).
uint16_t ToHalfBits(float v, WeightType t) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if (t == WeightType::kBF16) return static_cast<uint16_t>(u >> 16);
  const uint32_t sign = (u >> 16) & 0x8000;
  const int exponent = static_cast<int>((u >> 23) & 0xFF) - 127 + 15;
  if (exponent <= 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(exponent) << 10 | ((u >> 13) & 0x3FF));
}

// Random K-quant blocks of `type` (random codes and scale bytes, d and dmin
// small positive halves) or int4 nibbles with f16 group scales of 32.
void FillKQuant(std::mt19937& rng, WeightType type, uint8_t* p, size_t blocks) {
  const size_t bytes = recur::impl::kernels::Traits(type).block_bytes;
  for (size_t k = 0; k < blocks; ++k) {
    uint8_t* b = p + k * bytes;
    for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(rng());
    const uint16_t d = static_cast<uint16_t>(0x1400 | (rng() & 0x3FF));  // about 2^-10
    const size_t at = type == WeightType::kQ6_K ? 208 : 0;
    std::memcpy(b + at, &d, 2);
    if (type != WeightType::kQ6_K) std::memcpy(b + 2, &d, 2);  // dmin
  }
}

// A layer of random weights of `type` (f16 in [-1, 1]; int4 and q8_0: random
// codes in groups of 32 with f16 scales; K-quants: FillKQuant), owning its bytes; total: the bytes a call streams.
struct RandomWeights {
  hwy::AlignedFreeUniquePtr<uint8_t[]> bytes;
  hwy::AlignedFreeUniquePtr<uint16_t[]> scales;
  size_t total = 0;
  recur::impl::kernels::DenseWeights w;
};

RandomWeights MakeRandomWeights(std::mt19937& rng, WeightType type, size_t in, size_t out) {
  namespace k = recur::impl::kernels;
  RandomWeights r;
  const size_t wbytes = k::WeightBytes(type, in * out);
  r.bytes = hwy::AllocateAligned<uint8_t>(wbytes);
  r.total = wbytes;
  r.w.type = type;
  r.w.in = static_cast<uint32_t>(in);
  r.w.out = static_cast<uint32_t>(out);
  if (type == WeightType::kF16) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (size_t i = 0; i < in * out; ++i) {
      const uint16_t h = ToHalfBits(dist(rng), type);
      std::memcpy(r.bytes.get() + 2 * i, &h, 2);
    }
  } else if (type == WeightType::kI4 || type == WeightType::kQ8_0) {
    for (size_t i = 0; i < wbytes; ++i) r.bytes[i] = static_cast<uint8_t>(rng());
    const size_t groups = out * in / 32;
    r.scales = hwy::AllocateAligned<uint16_t>(groups);
    for (size_t g = 0; g < groups; ++g) r.scales[g] = static_cast<uint16_t>(0x1400 | (rng() & 0x3FF));
    r.w.group_scales = r.scales.get();
    r.w.group = 32;
    r.total += groups * 2;
  } else {
    FillKQuant(rng, type, r.bytes.get(), in * out / 256);
  }
  r.w.weight = r.bytes.get();
  return r;
}

bool batches_only = false;  // the last argument "batches": KQuantBatches alone
bool panels_only = false;   // the last argument "panels": I4PanelsFromDram alone
bool rows_only = false;     // the last argument "rows": RowsFromDram alone

// Batches through the K-quants and q8_0 (a prefill's and 8 streams' shapes of
// a 0.1B RWKV-7, and a 1.5B's FFN output), f32 activations beside activations
// rounded to Q8_K blocks (Q8_0 for q8_0), and int4 with quantised
// activations: GFLOP/s, in turn, 3 rounds.
void KQuantBatches() {
  namespace k = recur::impl::kernels;
  std::printf("\nbatches, K-quants and q8_0 f32 beside blocks, %d rounds in turn:\n", 3);
  std::printf("%-16s %-12s %9s %9s %8s\n", "batch x in->out", "w", "us/call", "(best)", "GFLOP/s");
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t shapes[][3] = {{8, 768, 3072}, {64, 768, 3072}, {64, 3072, 768}, {512, 768, 768},
                              {64, 8192, 2048}};
  for (const auto& s : shapes) {
    const size_t batch = s[0], in = s[1], out = s[2];
    auto x = hwy::AllocateAligned<float>(batch * in);
    auto y = hwy::AllocateAligned<float>(batch * out);
    for (size_t i = 0; i < batch * in; ++i) x[i] = dist(rng);
    struct Entry {
      const char* name;
      k::Int8Activations int8;
      RandomWeights r;
    };
    Entry entries[] = {{"q4_k", k::Int8Activations::kFloat, MakeRandomWeights(rng, WeightType::kQ4_K, in, out)},
                       {"q4_k blocks", k::Int8Activations::kBlocks, MakeRandomWeights(rng, WeightType::kQ4_K, in, out)},
                       {"q6_k", k::Int8Activations::kFloat, MakeRandomWeights(rng, WeightType::kQ6_K, in, out)},
                       {"q6_k blocks", k::Int8Activations::kBlocks, MakeRandomWeights(rng, WeightType::kQ6_K, in, out)},
                       {"q8_0", k::Int8Activations::kFloat, MakeRandomWeights(rng, WeightType::kQ8_0, in, out)},
                       {"q8_0 blocks", k::Int8Activations::kBlocks, MakeRandomWeights(rng, WeightType::kQ8_0, in, out)},
                       {"int4 dot", k::Int8Activations::kQuantized, MakeRandomWeights(rng, WeightType::kI4, in, out)}};
    char name[64];
    std::snprintf(name, sizeof(name), "%zux%zu->%zu", batch, in, out);
    for (int round = 0; round < 3; ++round) {
      for (Entry& e : entries) {
        const Timing t =
            TimePerCall([&] { k::Dense(x.get(), in, batch, e.r.w, y.get(), out, false, e.int8); });
        std::printf("%-16s %-12s %9.1f %9.1f %8.1f\n", name, e.name, t.median * 1e6, t.best * 1e6,
                    2.0 * double(batch * in * out) / t.median * 1e-9);
      }
    }
  }
}

// Batch-1 mat-vecs at language-model sizes, the K-quants beside int4 (f32
// activations, as the K-quants run, and quantised activations, the int4
// default where integer dot products are faster), run in turn round after
// round so that the machine's state changes alike for all: µs per call and
// the stored weight bytes (int4: nibbles and f16 scales) per second.
void KQuantBesideInt4() {
  using recur::impl::kernels::DenseWeights;
  namespace k = recur::impl::kernels;
  std::printf("\nmat-vec, K-quants beside int4 (groups of 32), %d rounds in turn:\n", 3);
  std::printf("%-16s %-12s %9s %9s %8s\n", "batch x in->out", "w", "us/call", "(best)", "w GB/s");
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t n : {4096, 8192}) {
    const size_t in = n, out = n;
    auto x = hwy::AllocateAligned<float>(in);
    auto y = hwy::AllocateAligned<float>(out);
    for (size_t i = 0; i < in; ++i) x[i] = dist(rng);
    struct Entry {
      const char* name;
      WeightType type;
      k::Int8Activations int8;
      RandomWeights r;
    };
    Entry entries[] = {{"q4_k", WeightType::kQ4_K, k::Int8Activations::kFloat, {}},
                       {"int4", WeightType::kI4, k::Int8Activations::kFloat, {}},
                       {"int4 dot", WeightType::kI4, k::Int8Activations::kQuantized, {}},
                       {"q6_k", WeightType::kQ6_K, k::Int8Activations::kFloat, {}},
                       {"q5_k", WeightType::kQ5_K, k::Int8Activations::kFloat, {}},
                       {"q4_k blocks", WeightType::kQ4_K, k::Int8Activations::kBlocks, {}},
                       {"q6_k blocks", WeightType::kQ6_K, k::Int8Activations::kBlocks, {}},
                       {"int4 blocks", WeightType::kI4, k::Int8Activations::kBlocks, {}}};
    for (Entry& e : entries) e.r = MakeRandomWeights(rng, e.type, in, out);
    char name[64];
    std::snprintf(name, sizeof(name), "1x%zu->%zu", in, out);
    for (int round = 0; round < 3; ++round) {
      for (Entry& e : entries) {
        const Timing t =
            TimePerCall([&] { k::Dense(x.get(), in, 1, e.r.w, y.get(), out, false, e.int8); });
        std::printf("%-16s %-12s %9.1f %9.1f %8.1f\n", name, e.name, t.median * 1e6, t.best * 1e6,
                    double(e.r.total) / t.median * 1e-9);
      }
    }
  }
}

// Batch-1 int4 row panels streamed from DRAM as a decode step streams them:
// `layers` copies of a layer, together four times the last-level cache, run
// one after the other, in small pages (hwy::AllocateAligned) and in the
// session's weight-copy memory (platform::AllocateStreamed: huge pages where
// the OS gives them), beside the read probe recur-bench divides by, in turn,
// 3 rounds: GB/s of stored bytes (nibbles and scales) and the ratio.
void I4PanelsFromDram() {
  namespace k = recur::impl::kernels;
  namespace platform = recur::impl::platform;
  if (!k::DenseI4PanelsPreferred()) return;
  std::printf("\nint4 panels, batch 1, layers streamed from DRAM, 3 rounds in turn:\n");
  std::printf("%-16s %-8s %7s %9s %9s %9s %7s\n", "in->out", "memory", "layers", "us/layer",
              "GB/s", "probe", "ratio");
  std::mt19937 rng(5);
  const size_t shapes[][2] = {{2048, 8192}, {8192, 2048}, {768, 3072}};
  for (const auto& s : shapes) {
    const size_t in = s[0], out = s[1];
    RandomWeights r = MakeRandomWeights(rng, WeightType::kI4, in, out);
    const size_t bytes = k::DenseI4PanelBytes(r.w);
    const size_t layers = std::max<size_t>(2, (size_t{128} << 20) / bytes);
    std::vector<hwy::AlignedFreeUniquePtr<uint8_t[]>> small;
    std::vector<platform::StreamedArray<uint8_t>> streamed;
    for (size_t l = 0; l < layers; ++l) {
      small.push_back(hwy::AllocateAligned<uint8_t>(bytes));
      streamed.push_back(platform::AllocateStreamed<uint8_t>(bytes));
      k::PackDenseI4Panels(r.w, small.back().get());
      k::PackDenseI4Panels(r.w, streamed.back().get());
    }
    auto q = hwy::AllocateAligned<int8_t>(in);
    for (size_t i = 0; i < in; ++i) q[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    auto y = hwy::AllocateAligned<float>(out);
    const float qs = 1.0f / 127;
    const size_t np = k::DenseI4Panels(out);
    char name[64];
    std::snprintf(name, sizeof(name), "%zu->%zu", in, out);
    for (int round = 0; round < 3; ++round) {
      for (const bool huge : {false, true}) {
        const Timing t = TimePerCall([&] {
          for (size_t l = 0; l < layers; ++l) {
            const uint8_t* panels = huge ? streamed[l].get() : small[l].get();
            k::DenseI4PanelsQuantized(q.get(), in, &qs, 1, panels, r.w, 0, np, y.get(), out,
                                      false);
          }
        });
        const double rate = double(bytes * layers) / t.median;
        const double probe = bench::MeasureReadBandwidth(bytes * layers);
        std::printf("%-16s %-8s %7zu %9.1f %9.1f %9.1f %6.0f%%\n", name,
                    huge ? "streamed" : "small", layers, t.median / double(layers) * 1e6,
                    rate * 1e-9, probe * 1e-9, 100.0 * rate / probe);
      }
    }
  }
}

// Batch-1 mat-vecs streamed from DRAM as a decode step streams its layers:
// `layers` copies of a layer (weights and scales in the session's weight-copy
// memory, platform::AllocateStreamed: huge pages where the OS gives them),
// together four times the last-level cache, run one after the other, beside
// the read probe recur-bench divides by, in turn, 3 rounds: GB/s of stored
// bytes (weights and scales) and the ratio. The shapes of the RWKV-7 0.4B and
// 1.5B layers and of the 0.1B and 1.5B heads (65,536 outputs: q6_k in
// llama.cpp's Q4_0 and Q4_K_M files); the types of the llama.cpp comparison,
// each as a step of one stream runs it by default (q8_0 on blocks as
// llama.cpp multiplies it where that is the default, q4_k from the
// block-quantised tiles a session of one stream lays out, where it does,
// q6_k's row forms), q8_0 on f32 activations, and q4_k's row forms on the
// model's bytes.
void RowsFromDram() {
  namespace k = recur::impl::kernels;
  namespace platform = recur::impl::platform;
  std::printf("\nmat-vec, batch 1, layers streamed from DRAM, 3 rounds in turn:\n");
  std::printf("%-16s %-12s %7s %9s %9s %9s %7s\n", "in->out", "w", "layers", "us/layer", "GB/s",
              "probe", "ratio");
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t shapes[][2] = {{1024, 1024}, {1024, 4096}, {4096, 1024}, {2048, 8192},
                              {8192, 2048}, {768, 65536}, {2048, 65536}};
  struct Entry {
    const char* name;
    WeightType type;
    k::Int8Activations int8;
    bool tiles;  // from block-quantised tiles (DenseBlockQ8Tiled)
  };
  const Entry entries[] = {{"f16", WeightType::kF16, k::Int8Activations::kAuto, false},
                           {"q8_0 float", WeightType::kQ8_0, k::Int8Activations::kFloat, false},
                           {"q8_0 blocks", WeightType::kQ8_0, k::Int8Activations::kBlocks, false},
                           {"q4_k rows", WeightType::kQ4_K, k::Int8Activations::kAuto, false},
                           {"q4_k tiles", WeightType::kQ4_K, k::Int8Activations::kBlocks, true},
                           {"q6_k rows", WeightType::kQ6_K, k::Int8Activations::kAuto, false}};
  for (const auto& s : shapes) {
    const size_t in = s[0], out = s[1];
    auto x = hwy::AllocateAligned<float>(in);
    auto y = hwy::AllocateAligned<float>(out);
    for (size_t i = 0; i < in; ++i) x[i] = dist(rng);
    char name[64];
    std::snprintf(name, sizeof(name), "%zu->%zu", in, out);
    struct Layers {
      std::vector<platform::StreamedArray<uint8_t>> bytes;
      std::vector<platform::StreamedArray<uint16_t>> scales;
      std::vector<k::DenseWeights> w;
      size_t total = 0;
    };
    std::vector<Layers> all;
    for (const Entry& e : entries) {
      const RandomWeights r = MakeRandomWeights(rng, e.type, in, out);
      const size_t tile_bytes = e.tiles ? k::DenseBlockQ8TileBytes(r.w) : 0;
      if (e.tiles && tile_bytes == 0) {
        all.emplace_back();  // no tiles on this CPU
        continue;
      }
      const size_t wbytes = e.tiles ? tile_bytes : k::WeightBytes(e.type, in * out);
      const size_t groups = r.scales ? in * out / 32 : 0;
      Layers l;
      const size_t count = std::max<size_t>(2, (size_t{128} << 20) / r.total);
      for (size_t c = 0; c < count; ++c) {
        l.bytes.push_back(platform::AllocateStreamed<uint8_t>(wbytes));
        if (e.tiles) {
          k::PackDenseBlockQ8Tiles(r.w, l.bytes.back().get());
        } else {
          std::memcpy(l.bytes.back().get(), r.bytes.get(), wbytes);
        }
        k::DenseWeights w = r.w;
        w.weight = l.bytes.back().get();
        if (groups != 0) {
          l.scales.push_back(platform::AllocateStreamed<uint16_t>(groups));
          std::memcpy(l.scales.back().get(), r.scales.get(), groups * 2);
          w.group_scales = l.scales.back().get();
        }
        l.w.push_back(w);
      }
      l.total = r.total * count;
      all.push_back(std::move(l));
    }
    for (int round = 0; round < 3; ++round) {
      for (size_t j = 0; j < all.size(); ++j) {
        const Layers& l = all[j];
        if (l.w.empty()) continue;
        const size_t tiles = k::DenseBlockQ8Tiles(out);
        const Timing t = TimePerCall([&] {
          for (size_t c = 0; c < l.w.size(); ++c) {
            if (entries[j].tiles) {
              k::DenseBlockQ8Tiled(x.get(), in, 1, l.bytes[c].get(), l.w[c], 0, tiles, y.get(), out,
                                   false);
            } else {
              k::Dense(x.get(), in, 1, l.w[c], y.get(), out, false, entries[j].int8);
            }
          }
        });
        const double rate = double(l.total) / t.median;
        const double probe = bench::MeasureReadBandwidth(l.total);
        std::printf("%-16s %-12s %7zu %9.1f %9.1f %9.1f %6.0f%%\n", name, entries[j].name,
                    l.w.size(), t.median / double(l.w.size()) * 1e6, rate * 1e-9, probe * 1e-9,
                    100.0 * rate / probe);
      }
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[argc - 1], "batches") == 0) {
    --argc;
    batches_only = true;
  } else if (argc > 1 && std::strcmp(argv[argc - 1], "panels") == 0) {
    --argc;
    panels_only = true;
  } else if (argc > 1 && std::strcmp(argv[argc - 1], "rows") == 0) {
    --argc;
    rows_only = true;
  }
  if (argc > 1) {
    int64_t pick = 0;
    for (int64_t bits = hwy::SupportedTargets() & HWY_TARGETS; bits != 0; bits &= bits - 1) {
      const int64_t t = bits & -bits;
      if (std::strcmp(hwy::TargetName(t), argv[1]) == 0) pick = t;
    }
    if (pick == 0) {
      std::fprintf(stderr, "target %s not compiled or not supported\n", argv[1]);
      return 1;
    }
    hwy::SetSupportedTargetsForTest(pick);
  }
  std::printf("dispatch target: %s\n", recur::impl::kernels::SimdTargetName());
  if (batches_only) {
    KQuantBatches();
    return 0;
  }
  if (panels_only) {
    I4PanelsFromDram();
    return 0;
  }
  if (rows_only) {
    RowsFromDram();
    return 0;
  }
  // The same measurement recur-bench prints, on the dispatch target above.
  const double peak = bench::MeasureFmaPeak();
  std::printf("measured FMA peak (1 core, best of 20): %.1f GFLOP/s\n", peak * 1e-9);

  struct Shape {
    size_t batch, in, out;
    WeightType type;
  };
  constexpr WeightType kF32 = WeightType::kF32, kF16 = WeightType::kF16,
                       kBF16 = WeightType::kBF16, kI8 = WeightType::kI8,
                       kQ8 = WeightType::kQ8_0;
  const Shape shapes[] = {
      {1, 256, 256, kF32},     {1, 256, 1024, kF32},    {1, 1024, 256, kF32},
      {64, 256, 256, kF32},    {64, 256, 1024, kF32},   {64, 1024, 256, kF32},
      {1, 2048, 3072, kF32},   {8, 2048, 3072, kF32},   {4, 256, 1024, kF32},
      {8, 256, 1024, kF32},    {16, 256, 1024, kF32},   {256, 256, 1024, kF32},
      {1024, 1024, 256, kF32},
      {1, 256, 1024, kF16},    {1, 256, 1024, kBF16},   {1, 256, 1024, kI8},
      {1, 2048, 3072, kF16},   {1, 2048, 3072, kBF16},  {1, 2048, 3072, kI8},
      {64, 256, 1024, kF16},   {64, 256, 1024, kBF16},  {64, 256, 1024, kI8},
      {1, 256, 1024, kQ8},     {64, 256, 1024, kQ8},    {64, 2048, 2048, kI8},
      {64, 2048, 2048, kQ8},   {1, 2048, 2048, kI8},    {1, 2048, 2048, kQ8},
      {1, 4096, 4096, kI8},    {1, 4096, 4096, kQ8},    {1, 8192, 8192, kI8},
      {1, 8192, 8192, kQ8}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("%-16s %5s %9s %9s %9s %7s %8s\n", "batch x in->out", "w", "us/call", "(best)",
              "GFLOP/s", "%peak", "w GB/s");
  for (const Shape& s : shapes) {
    const size_t groups = s.out * s.in / 32;  // q8_0's scales
    const size_t wbytes = recur::impl::kernels::WeightBytes(s.type, s.out * s.in) +
                          (s.type == kI8 ? 4 * s.out : s.type == kQ8 ? 2 * groups : 0);
    auto x = hwy::AllocateAligned<float>(s.batch * s.in);
    auto w = hwy::AllocateAligned<float>(s.out * s.in);
    auto wn = hwy::AllocateAligned<uint8_t>(wbytes);
    auto scales = hwy::AllocateAligned<float>(s.out);
    auto group_scales = hwy::AllocateAligned<uint16_t>(groups);
    for (size_t i = 0; i < groups; ++i) group_scales[i] = ToHalfBits(1.0f / 127, WeightType::kF16);
    auto bias = hwy::AllocateAligned<float>(s.out);
    auto y = hwy::AllocateAligned<float>(s.batch * s.out);
    for (size_t i = 0; i < s.batch * s.in; ++i) x[i] = dist(rng);
    for (size_t i = 0; i < s.out * s.in; ++i) w[i] = dist(rng);
    for (size_t i = 0; i < s.out; ++i) bias[i] = dist(rng);
    for (size_t i = 0; i < s.out; ++i) scales[i] = 1.0f / 127;
    for (size_t i = 0; i < s.out * s.in; ++i) {
      if (s.type == kI8 || s.type == kQ8) {
        wn[i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(w[i] * 127)));
      } else if (s.type != kF32) {
        const uint16_t h = ToHalfBits(w[i], s.type);
        std::memcpy(wn.get() + 2 * i, &h, 2);
      }
    }
    recur::impl::kernels::DenseWeights dw;
    dw.weight = s.type == kF32 ? static_cast<const void*>(w.get()) : wn.get();
    dw.type = s.type;
    dw.scales = s.type == kI8 ? scales.get() : nullptr;
    if (s.type == kQ8) {
      dw.group_scales = group_scales.get();
      dw.group = 32;
    }
    dw.bias = bias.get();
    dw.in = static_cast<uint32_t>(s.in);
    dw.out = static_cast<uint32_t>(s.out);
    const Timing tm = TimePerCall(
        [&] { recur::impl::kernels::Dense(x.get(), s.in, s.batch, dw, y.get(), s.out, false); });
    const double t = tm.median;
    const double flops = 2.0 * s.batch * s.in * s.out;
    char name[64];
    std::snprintf(name, sizeof(name), "%zux%zu->%zu", s.batch, s.in, s.out);
    std::printf("%-16s %5s %9.2f %9.2f %9.1f %6.0f%% %8.1f\n", name,
                recur::impl::kernels::WeightTypeName(s.type), t * 1e6, tm.best * 1e6,
                flops / t * 1e-9, peak > 0 ? 100.0 * flops / t / peak : 0.0,
                double(wbytes) / t * 1e-9);
    if (s.type == kQ8 && s.batch == 1) {  // activations rounded to Q8_0 blocks, as llama.cpp's
      const Timing tb = TimePerCall([&] {
        recur::impl::kernels::Dense(x.get(), s.in, s.batch, dw, y.get(), s.out, false,
                                    recur::impl::kernels::Int8Activations::kBlocks);
      });
      std::printf("%-16s %5s %9.2f %9.2f %9.1f %6.0f%% %8.1f (blocks)\n", name,
                  recur::impl::kernels::WeightTypeName(s.type), tb.median * 1e6, tb.best * 1e6,
                  flops / tb.median * 1e-9, peak > 0 ? 100.0 * flops / tb.median / peak : 0.0,
                  double(wbytes) / tb.median * 1e-9);
    }
    if (s.batch >= 4) {  // the packed-weight GEMM on the same data (packing not timed)
      auto packed =
          hwy::AllocateAligned<float>(recur::impl::kernels::DensePackedFloats(s.in, s.out));
      recur::impl::kernels::PackDense(dw, packed.get());
      const size_t panels = recur::impl::kernels::DensePanels(s.out);
      const Timing tp = TimePerCall([&] {
        recur::impl::kernels::DensePacked(x.get(), s.in, s.batch, packed.get(), bias.get(), s.in,
                                          s.out, 0, panels, y.get(), s.out, false);
      });
      std::printf("%-16s %5s %9.2f %9.2f %9.1f %6.0f%%          (packed f32)\n", name,
                  recur::impl::kernels::WeightTypeName(s.type), tp.median * 1e6, tp.best * 1e6,
                  flops / tp.median * 1e-9, peak > 0 ? 100.0 * flops / tp.median / peak : 0.0);
    }
    if (s.batch == 1 && s.in == 256 && s.out == 256) {
      const Timing tn = TimePerCall(
          [&] { NaiveDense(x.get(), s.batch, w.get(), bias.get(), s.in, s.out, y.get()); });
      std::printf("%-16s %5s %9.2f %9.2f %9.1f   (naive -O3 loop)\n", name, "f32",
                  tn.median * 1e6, tn.best * 1e6, flops / tn.median * 1e-9);
    }
  }
  KQuantBesideInt4();
  KQuantBatches();
  I4PanelsFromDram();
  hwy::SetSupportedTargetsForTest(0);
  return 0;
}
