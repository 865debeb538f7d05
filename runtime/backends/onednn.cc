// The oneDNN backend (Debian's libdnnl 2.6, OpenMP CPU runtime): f32, bf16
// and int8 weights, through the C API (no exceptions). bf16 layers run as
// bf16 × bf16 → f32 matmuls (AMX or AVX512-BF16 where the CPU has them): Run
// rounds the activations to bf16 first (round to nearest even), so they
// carry bf16 error as well as the weights (tests/parity bounds it). int8
// layers run as s8 × s8 → f32 matmuls (AVX512-VNNI or AMX int8 dot products,
// int32 sums): Run quantises each activation row to int8 with a scale of its
// own (kernels::QuantizeS8, symmetric), oneDNN applies the weights'
// per-output-channel scales, and Run multiplies each row by its scale and
// adds the bias and the accumulated output in f32; int8 runs only where oneDNN
// has VNNI dot products (without them s8 × s8 saturates or loses a bit), and
// in blocks of at most kInt8BlockRows rows. For each planned row count (int8:
// capped at the block, and the remainders of larger counts) and each
// thread's slice of output features, Prepare creates a matmul primitive
// with fixed M, lets oneDNN pick its weight layout and reorders the weights
// into it once (a packed copy: memory_bytes() counts it), and gives each
// slice a user scratchpad. Run covers `rows` with the planned sizes, largest
// first; rows smaller than every planned size go to the Highway kernel.
// Execution is synchronous (the OpenMP runtime): Run reads a matmul's output
// right after dnnl_primitive_execute returns.
// Threads: slices run on the session's pool, each primitive single-threaded
// (created and run with the OpenMP thread count at 1), so oneDNN's OpenMP
// team never competes with the pool.
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/gemm_backend.h"
#include "core/platform.h"
#include "hwy/aligned_allocator.h"
#include "kernels/dense/dense.h"
#include "kernels/elementwise/elementwise.h"

namespace recur::impl::backends {
namespace {

constexpr size_t kMinFeaturesPerSlice = 64;
// int8 layers run in blocks of at most this many rows, so that their
// quantised rows and scaled sums stay small (the model's int8 matmuls run as
// fast at 64 rows as at 1,024 on AVX512-VNNI: ~440 GOP/s).
constexpr size_t kInt8BlockRows = 64;

// dst[i] = x[i] rounded to the nearest bf16, ties to even (x finite: the
// session rejects non-finite inputs).
void RoundToBf16(const float* x, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], sizeof(u));
    dst[i] = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}

#define RECUR_DNNL(call)                                                              \
  do {                                                                                \
    const dnnl_status_t dnnl_status_ = (call);                                        \
    if (dnnl_status_ != dnnl_success) {                                               \
      return Unsupported("onednn: %s failed (status %d)", #call, int(dnnl_status_)); \
    }                                                                                 \
  } while (0)

Status Engine(dnnl_engine_t* out) {
  static dnnl_engine_t engine = nullptr;
  static dnnl_status_t status = dnnl_engine_create(&engine, dnnl_cpu, 0);
  if (status != dnnl_success) return Unsupported("onednn: no CPU engine (status %d)", int(status));
  *out = engine;
  return Status::Ok();
}

// Sets this thread's OpenMP thread count for a scope.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

struct Primitive {
  size_t rows = 0;
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t src = nullptr, weights = nullptr, bias = nullptr, dst = nullptr,
                scratchpad = nullptr;
};

struct Packed {
  dnnl_memory_desc_t md;
  platform::StreamedArray<uint8_t> data;  // huge pages where the OS has them
  size_t bytes = 0;
};

struct Slice {
  size_t begin = 0, end = 0;
  dnnl_stream_t stream = nullptr;
  std::vector<Primitive> prims;  // by rows, descending
  std::vector<Packed> packed;
  hwy::AlignedFreeUniquePtr<uint8_t[]> scratchpad;
  size_t scratchpad_bytes = 0;
};

class OnednnDense final : public PreparedDense {
 public:
  ~OnednnDense() override {
    for (Slice& s : slices_) {
      for (Primitive& p : s.prims) {
        if (p.prim) dnnl_primitive_destroy(p.prim);
        for (dnnl_memory_t m : {p.src, p.weights, p.bias, p.dst, p.scratchpad}) {
          if (m) dnnl_memory_destroy(m);
        }
      }
      if (s.stream) dnnl_stream_destroy(s.stream);
    }
  }

  Status Init(const DenseView& d, const DensePlan& plan) {
    d_ = d;
    pool_ = plan.pool;
    dnnl_engine_t engine = nullptr;
    RECUR_RETURN_IF_ERROR(Engine(&engine));
    OmpThreads one(1);
    const size_t threads = pool_ == nullptr ? 1 : pool_->threads();
    std::vector<size_t> rows;
    for (size_t m : plan.rows) {
      if (!int8() || m <= kInt8BlockRows) {
        rows.push_back(m);
      } else {  // whole blocks, then the rest in one matmul
        rows.push_back(kInt8BlockRows);
        if (m % kInt8BlockRows != 0) rows.push_back(m % kInt8BlockRows);
      }
    }
    std::sort(rows.rbegin(), rows.rend());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    block_rows_ = rows.front();
    if (bf16()) {
      x_bf16_ = hwy::AllocateAligned<uint16_t>(block_rows_ * d.in);
      if (!x_bf16_) return OutOfMemory("onednn: cannot allocate bf16 activations");
    }
    if (int8()) {
      x_s8_ = hwy::AllocateAligned<int8_t>(block_rows_ * d.in);
      x_scales_ = hwy::AllocateAligned<float>(block_rows_);
      sums_ = hwy::AllocateAligned<float>(block_rows_ * d.out);
      if (!x_s8_ || !x_scales_ || !sums_) {
        return OutOfMemory("onednn: cannot allocate int8 activations");
      }
    }
    // bf16 and int8 layers stay whole: with AMX a model-sized bf16 matmul takes a few
    // µs, less than oneDNN's per-execute overhead, so splitting it over the pool made
    // the paper_mnist batch-64 step slower (2 threads: 3.7 ms split vs 2.8 ms whole).
    // int8 on AVX512-VNNI (AMD EPYC, 2 threads) is a trade: batch 1 341 µs split vs
    // 163 µs whole (the pool's hand-off costs more than a mat-vec), batch 64 3.4 ms
    // split vs 3.9 ms whole. Whole keeps batch 1 fast; for throughput, sessions of one
    // thread each use two cores better (docs/performance.md "Close to the hardware").
    const size_t n = bf16() || int8()
                         ? 1
                         : std::max<size_t>(1, std::min(threads, d.out / kMinFeaturesPerSlice));
    const size_t block = ((d.out + n - 1) / n + 15) / 16 * 16;
    for (size_t begin = 0; begin < d.out; begin += block) {
      slices_.emplace_back();
      Slice& s = slices_.back();
      s.begin = begin;
      s.end = std::min<size_t>(d.out, begin + block);
      RECUR_DNNL(dnnl_stream_create(&s.stream, engine, dnnl_stream_default_flags));
      for (size_t m : rows) {
        if (m == 0) continue;
        s.prims.emplace_back();
        RECUR_RETURN_IF_ERROR(CreatePrimitive(engine, plan.accumulate, m, &s, &s.prims.back()));
      }
      if (s.scratchpad_bytes > 0) {
        s.scratchpad = hwy::AllocateAligned<uint8_t>(s.scratchpad_bytes);
        if (!s.scratchpad) return OutOfMemory("onednn: cannot allocate a scratchpad");
      }
      for (Primitive& p : s.prims) {
        if (p.scratchpad) RECUR_DNNL(dnnl_memory_set_data_handle(p.scratchpad, s.scratchpad.get()));
      }
    }
    return Status::Ok();
  }

  size_t memory_bytes() const override {
    size_t bytes = 0;
    for (const Slice& s : slices_) {
      bytes += s.scratchpad_bytes;
      for (const Packed& p : s.packed) bytes += p.bytes;
    }
    if (x_bf16_) bytes += block_rows_ * d_.in * sizeof(uint16_t);
    if (x_s8_) bytes += block_rows_ * (d_.in + sizeof(float) * (1 + d_.out));
    return bytes;
  }

  void Run(const float* x, size_t rows, float* y, bool accumulate) override {
    // bf16 and int8 layers: blocks of the largest planned row count, each
    // rounded to bf16 or quantised once and shared by every slice.
    const size_t block = x_bf16_ || x_s8_ ? block_rows_ : rows;
    for (size_t r0 = 0; r0 < rows; r0 += block) {
      const size_t n = std::min(block, rows - r0);
      if (x_bf16_) RoundToBf16(x + r0 * d_.in, n * d_.in, x_bf16_.get());
      if (x_s8_) {
        for (size_t r = 0; r < n; ++r) {
          x_scales_[r] =
              kernels::QuantizeS8(x + (r0 + r) * d_.in, x_s8_.get() + r * d_.in, d_.in);
        }
      }
      Call call{this, x + r0 * d_.in, x_bf16_.get(), n, y + r0 * d_.out, accumulate};
      if (slices_.size() == 1) {
        call.RunSlice(0);
      } else {
        pool_->ParallelFor(slices_.size(), &Call::Task, &call);
      }
    }
  }

 private:
  bool bf16() const { return d_.type == kernels::WeightType::kBF16; }
  bool int8() const { return d_.type == kernels::WeightType::kI8; }

  Status CreatePrimitive(dnnl_engine_t engine, bool accumulate, size_t m, Slice* s,
                         Primitive* p) {
    const dnnl_dim_t K = d_.in, N = dnnl_dim_t(s->end - s->begin), M = dnnl_dim_t(m);
    dnnl_memory_desc_t src_md, wei_any, wei_user, bias_md, dst_md;
    const dnnl_dims_t src_dims = {M, K}, src_strides = {K, 1};
    const dnnl_dims_t wei_dims = {K, N}, wei_strides = {1, K};
    const dnnl_dims_t bias_dims = {1, N}, bias_strides = {N, 1};
    const dnnl_dims_t dst_dims = {M, N}, dst_strides = {dnnl_dim_t(d_.out), 1};
    const dnnl_data_type_t type = bf16() ? dnnl_bf16 : int8() ? dnnl_s8 : dnnl_f32;
    RECUR_DNNL(dnnl_memory_desc_init_by_strides(&src_md, 2, src_dims, type, src_strides));
    RECUR_DNNL(dnnl_memory_desc_init_by_tag(&wei_any, 2, wei_dims, type, dnnl_format_tag_any));
    RECUR_DNNL(dnnl_memory_desc_init_by_strides(&wei_user, 2, wei_dims, type, wei_strides));
    RECUR_DNNL(dnnl_memory_desc_init_by_strides(&bias_md, 2, bias_dims, dnnl_f32, bias_strides));
    RECUR_DNNL(dnnl_memory_desc_init_by_strides(&dst_md, 2, dst_dims, dnnl_f32, dst_strides));
    // int8: bias and accumulation are Run's, after the row scales.
    const bool with_bias = d_.bias != nullptr && !int8();
    dnnl_matmul_desc_t desc;
    RECUR_DNNL(dnnl_matmul_desc_init(&desc, &src_md, &wei_any, with_bias ? &bias_md : nullptr,
                                     &dst_md));
    dnnl_primitive_attr_t attr;
    RECUR_DNNL(dnnl_primitive_attr_create(&attr));
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (int8() && dnnl_primitive_attr_set_output_scales(attr, N, 1 << 1, d_.scales + s->begin) !=
                      dnnl_success) {
      dnnl_primitive_attr_destroy(attr);
      return Unsupported("onednn: cannot set the int8 weight scales");
    }
    dnnl_post_ops_t ops = nullptr;
    if (accumulate && !int8()) {
      dnnl_post_ops_create(&ops);
      dnnl_post_ops_append_sum(ops, 1.0f);
      dnnl_primitive_attr_set_post_ops(attr, ops);
    }
    dnnl_primitive_desc_t pd = nullptr;
    const dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, nullptr);
    if (ops) dnnl_post_ops_destroy(ops);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) {
      return Unsupported("onednn: no matmul for %lldx%lld·%lldx%lld (status %d)",
                         (long long)M, (long long)K, (long long)K, (long long)N, int(st));
    }
    struct PdGuard {
      dnnl_primitive_desc_t pd;
      ~PdGuard() { dnnl_primitive_desc_destroy(pd); }
    } guard{pd};
    const dnnl_memory_desc_t* wei_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t* pad_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->rows = m;
    RECUR_DNNL(dnnl_primitive_create(&p->prim, pd));
    // Weights: oneDNN's layout, reordered once, shared by primitives that agree.
    void* wei_data = const_cast<uint8_t*>(static_cast<const uint8_t*>(d_.weight) +
                                          s->begin * kernels::WeightRowBytes(d_.type, d_.in));
    if (!dnnl_memory_desc_equal(wei_md, &wei_user)) {
      Packed* found = nullptr;
      for (Packed& pk : s->packed) {
        if (dnnl_memory_desc_equal(&pk.md, wei_md)) found = &pk;
      }
      if (found == nullptr) {
        s->packed.emplace_back();
        Packed& pk = s->packed.back();
        pk.md = *wei_md;
        pk.bytes = dnnl_memory_desc_get_size(wei_md);
        pk.data = platform::AllocateStreamed<uint8_t>(pk.bytes);
        if (!pk.data) return OutOfMemory("onednn: cannot allocate packed weights");
        dnnl_memory_t from, to;
        RECUR_DNNL(dnnl_memory_create(&from, &wei_user, engine, wei_data));
        RECUR_DNNL(dnnl_memory_create(&to, wei_md, engine, pk.data.get()));
        dnnl_primitive_desc_t rpd;
        RECUR_DNNL(dnnl_reorder_primitive_desc_create(&rpd, &wei_user, engine, wei_md, engine,
                                                      nullptr));
        dnnl_primitive_t reorder;
        RECUR_DNNL(dnnl_primitive_create(&reorder, rpd));
        dnnl_primitive_desc_destroy(rpd);
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        RECUR_DNNL(dnnl_primitive_execute(reorder, s->stream, 2, args));
        RECUR_DNNL(dnnl_stream_wait(s->stream));
        dnnl_primitive_destroy(reorder);
        dnnl_memory_destroy(from);
        dnnl_memory_destroy(to);
        found = &pk;
      }
      wei_data = found->data.get();
    }
    RECUR_DNNL(dnnl_memory_create(&p->weights, wei_md, engine, wei_data));
    RECUR_DNNL(dnnl_memory_create(&p->src, &src_md, engine, DNNL_MEMORY_NONE));
    RECUR_DNNL(dnnl_memory_create(&p->dst, &dst_md, engine, DNNL_MEMORY_NONE));
    if (with_bias) {
      RECUR_DNNL(dnnl_memory_create(&p->bias, &bias_md, engine,
                                    const_cast<float*>(d_.bias + s->begin)));
    }
    const size_t pad = dnnl_memory_desc_get_size(pad_md);
    if (pad > 0) {
      s->scratchpad_bytes = std::max(s->scratchpad_bytes, pad);
      RECUR_DNNL(dnnl_memory_create(&p->scratchpad, pad_md, engine, DNNL_MEMORY_NONE));
    }
    return Status::Ok();
  }

  struct Call {
    // y[r, slice] = x_scales_[r]·sums_[r, slice] + bias (+ y) for r < done.
    void FinishInt8(const Slice& s, size_t done) {
      const size_t out = self->d_.out, width = s.end - s.begin;
      const float* bias = self->d_.bias;
      for (size_t r = 0; r < done; ++r) {
        float* sums = self->sums_.get() + r * out + s.begin;
        float* yr = y + r * out + s.begin;
        kernels::Scale(sums, self->x_scales_[r], sums, width);
        if (accumulate) {
          kernels::Add(sums, yr, yr, width);
        } else {
          std::memcpy(yr, sums, width * sizeof(float));
        }
        if (bias) kernels::Add(yr, bias + s.begin, yr, width);
      }
    }

    OnednnDense* self;
    const float* x;
    const uint16_t* x_bf16;  // x rounded to bf16 (bf16 layers), else null
    size_t rows;
    float* y;
    bool accumulate;
    static void Task(void* c, size_t i) { static_cast<Call*>(c)->RunSlice(i); }
    void RunSlice(size_t i) {
      Slice& s = self->slices_[i];
      const size_t in = self->d_.in, out = self->d_.out;
      OmpThreads one(1);  // restored after: the caller's OpenMP setting is its own
      // int8: the matmuls write Σ q_x·q_w·scale_w to sums_, finished below.
      int8_t* x_s8 = self->x_s8_.get();
      float* dst = x_s8 ? self->sums_.get() : y;
      size_t r0 = 0;
      for (Primitive& p : s.prims) {
        while (rows - r0 >= p.rows) {
          if (x_bf16) {
            dnnl_memory_set_data_handle(p.src, const_cast<uint16_t*>(x_bf16 + r0 * in));
          } else if (x_s8) {
            dnnl_memory_set_data_handle(p.src, x_s8 + r0 * in);
          } else {
            dnnl_memory_set_data_handle(p.src, const_cast<float*>(x + r0 * in));
          }
          dnnl_memory_set_data_handle(p.dst, dst + r0 * out + s.begin);
          dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, p.src},
                                     {DNNL_ARG_WEIGHTS, p.weights},
                                     {DNNL_ARG_DST, p.dst}};
          int n = 3;
          if (p.bias) args[n++] = {DNNL_ARG_BIAS, p.bias};
          if (p.scratchpad) args[n++] = {DNNL_ARG_SCRATCHPAD, p.scratchpad};
          dnnl_primitive_execute(p.prim, s.stream, n, args);
          r0 += p.rows;
        }
      }
      if (x_s8) FinishInt8(s, r0);
      if (r0 < rows) {
        kernels::Dense(x + r0 * in, in, rows - r0, self->d_.Rows(s.begin, s.end),
                       y + r0 * out + s.begin, out, accumulate);
      }
    }
  };

  DenseView d_;
  ThreadPool* pool_ = nullptr;
  std::vector<Slice> slices_;
  size_t block_rows_ = 0;  // largest planned row count (int8: at most kInt8BlockRows)
  hwy::AlignedFreeUniquePtr<uint16_t[]> x_bf16_;  // bf16 layers: (block_rows_, in)
  // int8 layers: quantised rows (block_rows_, in), their scales (block_rows_)
  // and the matmuls' scaled sums (block_rows_, out).
  hwy::AlignedFreeUniquePtr<int8_t[]> x_s8_;
  hwy::AlignedFreeUniquePtr<float[]> x_scales_;
  hwy::AlignedFreeUniquePtr<float[]> sums_;
};

// Whether oneDNN's int8 dot products here are VNNI's (AVX512-VNNI, AMX or
// AVX-VNNI): exact int32 sums of s8 × s8 products.
bool HasVnni() {
  const unsigned isa = dnnl_get_effective_cpu_isa();
  auto has = [isa](unsigned bits) { return (isa & bits) == bits; };
  return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni);
}

class Onednn final : public DenseBackend {
 public:
  const char* name() const override { return "onednn"; }
  bool always_copies_weights() const override { return true; }
  bool allocates_in_run() const override { return true; }
  bool Supports(const DenseView& d) const override {
    return (d.type == kernels::WeightType::kF32 || d.type == kernels::WeightType::kBF16 ||
            (d.type == kernels::WeightType::kI8 && HasVnni())) &&
           d.in > 0 && d.out > 0;
  }
  Status Prepare(const DenseView& d, const DensePlan& plan,
                 std::unique_ptr<PreparedDense>* out) const override {
    if (!Supports(d)) {
      return Unsupported("onednn: only f32, bf16 and (with VNNI) int8 weights");
    }
    auto op = std::make_unique<OnednnDense>();
    RECUR_RETURN_IF_ERROR(op->Init(d, plan));
    *out = std::move(op);
    return Status::Ok();
  }
};

}  // namespace

const DenseBackend* OnednnBackend() {
  static const Onednn backend;
  return &backend;
}

}  // namespace recur::impl::backends
