#include "gpu_runs.h"

#include "api/c_api_internal.h"
#include "gpu_forward.h"

namespace tools {

struct GpuRuns::Impl {
  const recur::impl::Model* model = nullptr;
  std::unique_ptr<recur::impl::gpu::Device> device;
  std::unique_ptr<recur::impl::gpu::GpuModel> gpu;
};

GpuRuns::GpuRuns(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuRuns::~GpuRuns() = default;

std::unique_ptr<GpuRuns> GpuRuns::Open(const recur_model* handle, bool cuda, bool* unavailable,
                                       std::string* error) {
  auto impl = std::make_unique<Impl>();
  impl->model = recur::impl::ModelOfHandle(handle);
  *unavailable = false;
  if (impl->model == nullptr) {
    *error = "no model";
    return nullptr;
  }
  if (cuda) {
    const recur::impl::Status s = recur::impl::gpu::CreateCudaDevice(0, &impl->device);
    if (!s.ok()) {
      *unavailable = true;
      *error = s.message();
      return nullptr;
    }
  } else {
    impl->device = recur::impl::gpu::CreateHostDevice();
  }
  const recur::impl::Status s =
      recur::impl::gpu::GpuModel::Create(*impl->model, impl->device.get(), &impl->gpu);
  if (!s.ok()) {
    *error = s.message();
    return nullptr;
  }
  return std::unique_ptr<GpuRuns>(new GpuRuns(std::move(impl)));
}

std::string GpuRuns::device_name() const { return impl_->device->name(); }

namespace {
struct Collector {
  std::vector<std::vector<float>>* layers;
  size_t d_model;
  static void Observe(void* user, size_t layer, const float* x, size_t rows) {
    auto* c = static_cast<Collector*>(user);
    (*c->layers)[layer].insert((*c->layers)[layer].end(), x, x + rows * c->d_model);
  }
};
}  // namespace

bool GpuRuns::Run(bool step, size_t n, const int32_t* tokens, const float* features,
                  std::vector<std::vector<float>>* layers, std::vector<float>* output,
                  std::string* error) {
  const recur::impl::Model& m = *impl_->model;
  layers->assign(m.blocks.size(), {});
  output->assign(n * m.output_width, 0.0f);
  Collector collector{layers, m.d_model};
  const recur::impl::gpu::Mode mode =
      step ? recur::impl::gpu::Mode::kStep : recur::impl::gpu::Mode::kParallel;
  const recur::impl::Status s =
      impl_->gpu->Run(mode, n, tokens, features, output->data(), &Collector::Observe, &collector);
  if (!s.ok()) *error = s.message();
  return s.ok();
}

}  // namespace tools
