#include "backends/dense_runner.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "backends/dense_op.h"
#include "core/platform.h"
#include "hwy/aligned_allocator.h"

namespace recur::impl {
namespace {

using backends::DenseBackend;
using backends::DensePlan;
using backends::PreparedDense;

constexpr size_t kMaxTimedRows = 512;

// What a timing depends on (weights' values do not matter).
using ShapeKey =
    std::tuple<uint32_t, uint32_t, int, bool, bool, size_t, size_t, bool, bool, bool, int, bool>;
//             in        out       type bias  acc   rows    threads pack  narrow steps int8 memory

ShapeKey KeyOf(const DenseView& d, bool accumulate, size_t rows, size_t threads,
               const DensePlan& plan) {
  return {d.in,
          d.out,
          int(d.type),
          d.bias != nullptr,
          accumulate,
          rows,
          threads,
          plan.pack_weights,
          plan.narrow_panels,
          plan.pack_for_steps,
          int(plan.int8),
          plan.weights_from_memory};
}

// Process-wide: sessions of the same shapes (forks, parity runs, benchmarks)
// reuse the measurements.
std::mutex g_choice_mutex;
std::map<ShapeKey, const DenseBackend*>& ChoiceCache() {
  static auto* cache = new std::map<ShapeKey, const DenseBackend*>;
  return *cache;
}

// Seconds per call of `op` over `rows` rows: the best of a few runs after a
// warm one; fewer runs for slow shapes.
double TimeOp(PreparedDense* op, const float* x, size_t rows, float* y, bool accumulate) {
  op->Run(x, rows, y, accumulate);
  double best = 1e30, total = 0;
  for (int i = 0; i < 5 && (i < 2 || total < 2e-3); ++i) {
    const uint64_t t0 = platform::NowNs();
    op->Run(x, rows, y, accumulate);
    const double s = double(platform::NowNs() - t0) * 1e-9;
    best = std::min(best, s);
    total += s;
  }
  return best;
}

}  // namespace

void RunDense(const DenseView& d, const float* x, size_t rows, float* y, bool accumulate,
              ThreadPool* pool, const DenseRunner* runner) {
  if (runner != nullptr) {
    runner->Run(d, x, rows, y, accumulate);
  } else {
    RunDense(d, x, rows, y, accumulate, pool);
  }
}

Status DenseRunner::Create(const std::vector<DenseLayerUse>& layers, const char* forced,
                           DensePlan options, std::unique_ptr<DenseRunner>* out) {
  out->reset();
  const DenseBackend* highway = backends::HighwayBackend();
  const DenseBackend* only = nullptr;
  if (forced != nullptr && forced[0] != '\0' && std::strcmp(forced, "auto") != 0) {
    only = backends::FindBackend(forced);
    if (only == nullptr) {
      return Unsupported("backend \"%s\" is not compiled into this build (it has: %s)", forced,
                         backends::CompiledBackendNames().c_str());
    }
  }
  std::vector<size_t>& rows = options.rows;
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  rows.erase(std::remove(rows.begin(), rows.end(), size_t{0}), rows.end());
  if (rows.empty()) rows.push_back(1);
  std::unique_ptr<DenseRunner> r(new DenseRunner);
  r->pool_ = options.pool;
  r->int8_ = options.int8;
  r->from_memory_ = options.weights_from_memory;
  r->rows_ = rows;
  const size_t threads = options.pool->threads();

  // Layers with the same shape share one measurement.
  std::map<ShapeKey, std::vector<const DenseLayerUse*>> groups;
  for (const DenseLayerUse& use : layers) {
    if (use.view == nullptr || use.view->weight == nullptr) continue;
    if (r->layers_.count(use.view)) continue;
    r->layers_[use.view];
    r->order_.push_back(use.view);
    groups[KeyOf(*use.view, use.accumulate, 0, threads, options)].push_back(&use);
  }
  hwy::AlignedFreeUniquePtr<float[]> x, y;
  size_t x_floats = 0, y_floats = 0;
  for (auto& [key, members] : groups) {
    const DenseView& first = *members.front()->view;
    const bool accumulate = members.front()->accumulate;
    DensePlan plan = options;
    plan.accumulate = accumulate;
    // The backend for each planned row count.
    std::vector<const DenseBackend*> pick(rows.size(), highway);
    std::map<const DenseBackend*, std::unique_ptr<PreparedDense>> first_ops;
    if (only != nullptr) {
      if (only->Supports(first)) std::fill(pick.begin(), pick.end(), only);
    } else {
      std::vector<size_t> todo;
      {
        std::lock_guard<std::mutex> lock(g_choice_mutex);
        for (size_t i = 0; i < rows.size(); ++i) {
          auto it = ChoiceCache().find(KeyOf(first, accumulate, rows[i], threads, plan));
          if (it != ChoiceCache().end()) {
            pick[i] = it->second;
          } else {
            todo.push_back(i);
          }
        }
      }
      if (!todo.empty()) {
        const size_t max_rows = std::min(rows[todo.back()], kMaxTimedRows);
        if (max_rows * first.in + 16 > x_floats) {
          x_floats = max_rows * first.in + 16;
          x = hwy::AllocateAligned<float>(x_floats);
          if (!x) return OutOfMemory("cannot allocate backend timing inputs");
          for (size_t i = 0; i < x_floats; ++i) x[i] = float(i % 17) * 0.0625f - 0.5f;
        }
        if (max_rows * first.out > y_floats) {
          y_floats = max_rows * first.out;
          y = hwy::AllocateAligned<float>(y_floats);
          if (!y) return OutOfMemory("cannot allocate backend timing outputs");
        }
        std::memset(y.get(), 0, y_floats * sizeof(float));
        std::vector<double> best(rows.size(), 1e30);
        for (const DenseBackend* b : backends::CompiledBackends()) {
          if (!b->Supports(first) || b->allocates_in_run()) continue;
          if (!options.pack_weights && b->always_copies_weights()) continue;
          std::unique_ptr<PreparedDense> op;
          if (!b->Prepare(first, plan, &op).ok()) continue;  // e.g. no XNNPACK for this CPU
          for (size_t i : todo) {
            // Large counts are timed on kMaxTimedRows rows: per-row cost has
            // settled by then, and selection stays fast.
            const size_t n = std::min(rows[i], kMaxTimedRows);
            const double s = TimeOp(op.get(), x.get(), n, y.get(), accumulate);
            if (s < best[i]) {
              best[i] = s;
              pick[i] = b;
            }
          }
          first_ops[b] = std::move(op);
        }
        std::lock_guard<std::mutex> lock(g_choice_mutex);
        for (size_t i : todo) {
          ChoiceCache()[KeyOf(first, accumulate, rows[i], threads, plan)] = pick[i];
        }
      }
    }
    // Prepare each member once per backend it got.
    for (const DenseLayerUse* use : members) {
      Layer& layer = r->layers_[use->view];
      // picked backend -> (op, the backend that actually prepared it)
      std::map<const DenseBackend*, std::pair<PreparedDense*, const DenseBackend*>> ops;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (!ops.count(pick[i])) {
          const DenseBackend* b = pick[i];
          std::unique_ptr<PreparedDense> op;
          auto it = first_ops.find(b);
          if (use == members.front() && it != first_ops.end()) {
            op = std::move(it->second);
          } else {
            Status s = b->Prepare(*use->view, plan, &op);
            if (!s.ok() && b != highway) {
              b = highway;  // keep the session working on the portable path
              s = highway->Prepare(*use->view, plan, &op);
            }
            RECUR_RETURN_IF_ERROR(s);
          }
          ops[pick[i]] = {op.get(), b};
          layer.owned.push_back(std::move(op));
        }
        layer.choices.push_back({rows[i], ops[pick[i]].first, ops[pick[i]].second});
      }
    }
  }
  for (const DenseView* v : r->order_) {
    const std::vector<Choice>& choices = r->layers_.at(v).choices;
    r->index_.push_back({v, choices.data(), choices.size()});
  }
  std::sort(r->index_.begin(), r->index_.end(),
            [](const IndexEntry& a, const IndexEntry& b) { return a.view < b.view; });
  *out = std::move(r);
  return Status::Ok();
}

void DenseRunner::Run(const DenseView& d, const float* x, size_t rows, float* y,
                      bool accumulate) const {
  const auto it = std::lower_bound(
      index_.begin(), index_.end(), &d,
                       [](const IndexEntry& e, const DenseView* v) { return e.view < v; });
  if (it == index_.end() || it->view != &d || it->count == 0) {
    RunDense(d, x, rows, y, accumulate, pool_, int8_);
    return;
  }
  const Choice* c = it->choices + it->count - 1;
  for (const Choice* choice = it->choices; choice != c; ++choice) {
    if (choice->rows >= rows) {
      c = choice;
      break;
    }
  }
  c->op->Run(x, rows, y, accumulate);
}

std::string DenseRunner::Summary() const {
  std::string text;
  for (size_t i = 0; i < rows_.size(); ++i) {
    std::vector<std::pair<const DenseBackend*, size_t>> counts;
    for (const DenseView* v : order_) {
      const Layer& layer = layers_.at(v);
      const DenseBackend* b = layer.choices[i].backend;
      auto it = std::find_if(counts.begin(), counts.end(),
                             [&](const auto& p) { return p.first == b; });
      if (it == counts.end()) {
        counts.push_back({b, 1});
      } else {
        ++it->second;
      }
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%srows %zu:", i ? "; " : "", rows_[i]);
    text += buf;
    for (const auto& [b, n] : counts) {
      std::snprintf(buf, sizeof(buf), " %s x%zu", b->name(), n);
      text += buf;
    }
  }
  if (const size_t bytes = memory_bytes(); bytes > 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "; weight copies %.1f MB", double(bytes) * 1e-6);
    text += buf;
  }
  if (from_memory_) text += "; weights from memory";
  return text;
}

size_t DenseRunner::memory_bytes() const {
  size_t bytes = 0;
  for (const auto& [view, layer] : layers_) {
    for (const auto& op : layer.owned) bytes += op->memory_bytes();
  }
  return bytes;
}

}  // namespace recur::impl
