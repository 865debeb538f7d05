// recur C++ wrapper: header-only RAII over recur.h. Never throws on bad input
// or failed calls: fallible calls return Result<T> (a value or a status +
// message). Like any code that builds std::string and std::vector (error
// messages, saved states), it can throw std::bad_alloc when memory runs out.
//
//   auto model = recur::Model::Load("model.recur");
//   if (!model) { std::fprintf(stderr, "%s\n", model.error().c_str()); return 1; }
//   auto session = recur::Session::Create(*model, /*batch=*/1);
//   std::vector<float> out(model->info().output_width);
//   int32_t token = 0;
//   recur::Status s = session->StepTokens(&token, 1, out.data());
//
// Threading is that of the C API: a Model may be shared across threads; a
// Session is used by one thread at a time.
#ifndef RECUR_RECUR_HPP_
#define RECUR_RECUR_HPP_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "recur/recur.h"

// The runtime's own C++ lives in recur::impl (inside the static librecur);
// recur:: itself is this wrapper.
namespace recur {

// A status code and the message recur_last_error() gave for it.
class Status {
 public:
  Status() = default;
  explicit Status(recur_status code)
      : code_(code), message_(code == RECUR_OK ? "" : recur_last_error()) {}
  bool ok() const { return code_ == RECUR_OK; }
  explicit operator bool() const { return ok(); }
  recur_status code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  recur_status code_ = RECUR_OK;
  std::string message_;
};

// A T or the Status that prevented it. Check before dereferencing.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  explicit operator bool() const { return ok(); }
  const Status& status() const { return status_; }
  const std::string& error() const { return status_.message(); }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T* operator->() { return &value_; }
  const T* operator->() const { return &value_; }
  T& operator*() { return value_; }
  const T& operator*() const { return value_; }

 private:
  Status status_;
  T value_{};
};

class Model {
 public:
  Model() = default;
  Model(Model&& other) noexcept : model_(std::exchange(other.model_, nullptr)) {}
  Model& operator=(Model&& other) noexcept {
    std::swap(model_, other.model_);
    return *this;
  }
  ~Model() { recur_model_free(model_); }

  static Result<Model> Load(const std::string& path, uint32_t flags = 0) {
    recur_load_options options = recur_load_options_default();
    options.flags = flags;
    Model m;
    recur_status s = recur_model_load_file(path.c_str(), &options, &m.model_);
    if (s != RECUR_OK) return Status(s);
    return m;
  }

  // `data` must outlive the model (no copy) and be 64-byte aligned.
  static Result<Model> FromBuffer(const void* data, size_t size, uint32_t flags = 0) {
    recur_load_options options = recur_load_options_default();
    options.flags = flags;
    Model m;
    recur_status s = recur_model_load_buffer(data, size, &options, &m.model_);
    if (s != RECUR_OK) return Status(s);
    return m;
  }

  // The model's description; all zero (struct_size aside) for a Model that
  // holds no model (moved from).
  recur_model_info info() const {
    recur_model_info i{};
    i.struct_size = sizeof(i);
    if (recur_model_get_info(model_, &i) != RECUR_OK) {
      i = recur_model_info{};
      i.struct_size = sizeof(i);
    }
    return i;
  }

  const recur_model* get() const { return model_; }

 private:
  recur_model* model_ = nullptr;
};

class Session {
 public:
  Session() = default;
  Session(Session&& other) noexcept : session_(std::exchange(other.session_, nullptr)) {}
  Session& operator=(Session&& other) noexcept {
    std::swap(session_, other.session_);
    return *this;
  }
  ~Session() { recur_session_free(session_); }

  // The session keeps the model alive (recur_model_free).
  static Result<Session> Create(const Model& model, uint32_t batch = 1, uint32_t threads = 1,
                                uint32_t prefill_chunk = 0,
                                recur_weight_packing packing = RECUR_PACKING_AUTO) {
    recur_session_options options = recur_session_options_default();
    options.batch = batch;
    options.threads = threads;
    options.prefill_chunk = prefill_chunk;
    options.weight_packing = packing;
    return Create(model, options);
  }

  // Every option: start from recur_session_options_default().
  static Result<Session> Create(const Model& model, const recur_session_options& options) {
    Session s;
    recur_status st = recur_session_create(model.get(), &options, &s.session_);
    if (st != RECUR_OK) return Status(st);
    return s;
  }

  // tokens: `count` = batch ids; out: (batch, output_width).
  Status StepTokens(const int32_t* tokens, size_t count, float* out) {
    recur_input in{tokens, nullptr, count};
    return Status(recur_session_step(session_, &in, out));
  }
  // features: `count` = batch × feature_width floats; out: (batch, output_width).
  Status StepFeatures(const float* features, size_t count, float* out) {
    recur_input in{nullptr, features, count};
    return Status(recur_session_step(session_, &in, out));
  }
  // `steps` elements per stream, stream-major; out: (batch, steps,
  // output_width) or null.
  Status PrefillTokens(size_t steps, const int32_t* tokens, size_t count, float* out) {
    recur_input in{tokens, nullptr, count};
    return Status(recur_session_prefill(session_, steps, &in, out));
  }
  Status PrefillFeatures(size_t steps, const float* features, size_t count, float* out) {
    recur_input in{nullptr, features, count};
    return Status(recur_session_prefill(session_, steps, &in, out));
  }
  // Whole sequences from an empty history (the only way to run encoders).
  Status EncodeTokens(size_t steps, const int32_t* tokens, size_t count, float* out) {
    recur_input in{tokens, nullptr, count};
    return Status(recur_session_encode(session_, steps, &in, out));
  }
  Status EncodeFeatures(size_t steps, const float* features, size_t count, float* out) {
    recur_input in{nullptr, features, count};
    return Status(recur_session_encode(session_, steps, &in, out));
  }
  Status Reset(int stream = -1) { return Status(recur_session_reset(session_, stream)); }

  Result<std::vector<uint8_t>> SaveState(int stream) const {
    size_t size = 0;
    recur_status s = recur_session_state_size(session_, &size);
    if (s != RECUR_OK) return Status(s);
    std::vector<uint8_t> blob(size);
    s = recur_session_state_save(session_, stream, blob.data(), blob.size());
    if (s != RECUR_OK) return Status(s);
    return blob;
  }
  Status LoadState(int stream, const std::vector<uint8_t>& blob) {
    return Status(recur_session_state_load(session_, stream, blob.data(), blob.size()));
  }
  Result<Session> Fork() const {
    Session copy;
    recur_status s = recur_session_fork(session_, &copy.session_);
    if (s != RECUR_OK) return Status(s);
    return copy;
  }

  // recur_session_set_layer_callback.
  Status SetLayerCallback(recur_layer_callback callback, void* user) {
    return Status(recur_session_set_layer_callback(session_, callback, user));
  }

  recur_session* get() { return session_; }

 private:
  recur_session* session_ = nullptr;
};

}  // namespace recur

#endif  // RECUR_RECUR_HPP_
