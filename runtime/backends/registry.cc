#include <cstring>
#include <string>

#include "backends/gemm_backend.h"

namespace recur::impl::backends {

const std::vector<const DenseBackend*>& CompiledBackends() {
  static const std::vector<const DenseBackend*> list = {
      HighwayBackend(),
#if RECUR_HAVE_XNNPACK
      XnnpackBackend(),
#endif
#if RECUR_HAVE_ONEDNN
      OnednnBackend(),
#endif
  };
  return list;
}

const DenseBackend* FindBackend(const char* name) {
  if (name == nullptr) return nullptr;
  for (const DenseBackend* b : CompiledBackends()) {
    if (std::strcmp(b->name(), name) == 0) return b;
  }
  return nullptr;
}

std::string CompiledBackendNames() {
  std::string names;
  for (const DenseBackend* b : CompiledBackends()) {
    if (!names.empty()) names += ", ";
    names += b->name();
  }
  return names;
}

}  // namespace recur::impl::backends
