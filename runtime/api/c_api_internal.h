// The runtime object behind a C API handle, for in-tree tools that need the
// internals (recur-parity's GPU path). Not part of the ABI.
#ifndef RECUR_API_C_API_INTERNAL_H_
#define RECUR_API_C_API_INTERNAL_H_

#include "model/model.h"
#include "recur/recur.h"

namespace recur::impl {

// The loaded model of `handle`, alive as long as the handle; null for null.
const Model* ModelOfHandle(const recur_model* handle);

}  // namespace recur::impl

#endif  // RECUR_API_C_API_INTERNAL_H_
