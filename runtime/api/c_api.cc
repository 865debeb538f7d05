// Implements recur.h: translates Status ↔ recur_status and owns the handles.
#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "api/c_api_internal.h"
#include "core/arena.h"
#include "core/platform.h"
#include "core/struct_size.h"
#include "core/threadpool.h"
#include "engine/model_loader.h"
#include "engine/session.h"
#include "kernels/dispatch/target_limit.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "model/model.h"
#include "recur/recur.h"
#include "text/sampler.h"

#define RECUR_STRINGIFY2(x) #x
#define RECUR_STRINGIFY(x) RECUR_STRINGIFY2(x)

// Sessions share ownership of their model, so that recur_model_free before
// the last recur_session_free (calls in the wrong order) is safe: the model
// goes when its last user does.
struct recur_model {
  std::shared_ptr<const recur::impl::Model> model;
};

namespace {
// Sessions alive. The SIMD target may change only while there are none: a
// session sizes its scratch for the target it was created under.
std::atomic<long> g_live_sessions{0};
struct LiveSessionCount {
  LiveSessionCount() { ++g_live_sessions; }
  ~LiveSessionCount() { --g_live_sessions; }
  LiveSessionCount(const LiveSessionCount&) = delete;
  LiveSessionCount& operator=(const LiveSessionCount&) = delete;
};
}  // namespace

struct recur_session {
  LiveSessionCount live;
  std::shared_ptr<const recur::impl::Model> model;  // declared first: outlives `session`
  recur::impl::SessionPtr session;
  bool in_arena = false;  // this handle and the session live in the caller's arena
  std::string backends;   // recur_session_backends, filled on first call (heap sessions)
  recur_layer_callback callback = nullptr;  // recur_session_set_layer_callback
  void* callback_user = nullptr;
};

namespace {

using recur::impl::Status;
using recur::impl::StatusCode;

static_assert(int(StatusCode::kInvalidArgument) == RECUR_INVALID_ARGUMENT);
static_assert(int(StatusCode::kInvalidModel) == RECUR_INVALID_MODEL);
static_assert(int(StatusCode::kUnsupported) == RECUR_UNSUPPORTED);
static_assert(int(StatusCode::kIoError) == RECUR_IO_ERROR);
static_assert(int(StatusCode::kOutOfMemory) == RECUR_OUT_OF_MEMORY);
static_assert(int(StatusCode::kOutOfRange) == RECUR_OUT_OF_RANGE);
static_assert(int(StatusCode::kInvalidState) == RECUR_INVALID_STATE);
static_assert(int(StatusCode::kInternal) == RECUR_INTERNAL);

thread_local std::string g_last_error;

recur_status Report(const Status& status) {
  const auto code = static_cast<recur_status>(status.code());
  if (!status.ok()) {
    try {
      g_last_error = status.message();
    } catch (...) {
      // Keep the previous message rather than fail while reporting.
    }
    recur::impl::platform::LogError(code, status.message().c_str());
  }
  return code;
}

// The fields of each versioned struct, in order (core/struct_size.h).
#define F(T, f) RECUR_FIELD_SPAN(T, f)
constexpr recur::impl::FieldSpan kLoadOptionsFields[] = {F(recur_load_options, flags)};
constexpr recur::impl::FieldSpan kModelInfoFields[] = {
    F(recur_model_info, input_kind),
    F(recur_model_info, vocab_size),
    F(recur_model_info, feature_width),
    F(recur_model_info, d_model),
    F(recur_model_info, num_layers),
    F(recur_model_info, output_width),
    F(recur_model_info, max_positions),
    F(recur_model_info, parameter_count),
    F(recur_model_info, state_bytes),
    F(recur_model_info, output_kind),
    F(recur_model_info, step_weight_bytes),
    F(recur_model_info, step_flops),
    F(recur_model_info, state_bytes_per_position),
    F(recur_model_info, max_context_bound),
    F(recur_model_info, state_bytes_plain_sums),
    F(recur_model_info, step_integer_flops),
    F(recur_model_info, recurrent)};
constexpr recur::impl::FieldSpan kSessionOptionsFields[] = {
    F(recur_session_options, batch),           F(recur_session_options, threads),
    F(recur_session_options, prefill_chunk),   F(recur_session_options, backend),
    F(recur_session_options, weight_packing),  F(recur_session_options, prefill_min),
    F(recur_session_options, max_context),     F(recur_session_options, arena),
    F(recur_session_options, arena_size),      F(recur_session_options, state_sums),
    F(recur_session_options, int8_activations)};
constexpr recur::impl::FieldSpan kSamplerOptionsFields[] = {
    F(recur_sampler_options, temperature), F(recur_sampler_options, top_k),
    F(recur_sampler_options, top_p), F(recur_sampler_options, min_p)};
constexpr recur::impl::FieldSpan kPenaltyOptionsFields[] = {
    F(recur_penalty_options, repeat), F(recur_penalty_options, presence),
    F(recur_penalty_options, frequency), F(recur_penalty_options, decay)};
#undef F
static_assert(recur::impl::CoversStruct<recur_load_options>(kLoadOptionsFields));
static_assert(recur::impl::CoversStruct<recur_model_info>(kModelInfoFields));
static_assert(recur::impl::CoversStruct<recur_session_options>(kSessionOptionsFields));
static_assert(recur::impl::CoversStruct<recur_sampler_options>(kSamplerOptionsFields));
static_assert(recur::impl::CoversStruct<recur_penalty_options>(kPenaltyOptionsFields));

// Reads options structs that start with struct_size, accepting older
// (shorter) versions and zero-filling the fields they lack; a size that is
// not a whole number of fields is refused.
template <typename T, size_t N>
Status ReadOptions(const T* in, T* out, const char* what,
                   const recur::impl::FieldSpan (&fields)[N]) {
  std::memset(out, 0, sizeof(T));
  out->struct_size = sizeof(T);
  if (in == nullptr) return Status::Ok();
  if (in->struct_size < sizeof(size_t) || in->struct_size > sizeof(T)) {
    return recur::impl::InvalidArgument("%s.struct_size is %zu; set it to sizeof(%s) = %zu", what,
                                        in->struct_size, what, sizeof(T));
  }
  if (recur::impl::SplitsAField(in->struct_size, fields)) {
    return recur::impl::InvalidArgument(
        "%s.struct_size is %zu, which ends inside a field; set it to "
        "sizeof(%s) = %zu",
        what, in->struct_size, what, sizeof(T));
  }
  std::memcpy(out, in, in->struct_size);
  return Status::Ok();
}

// recur_session_options → SessionOptions (defaults filled in). The arena
// fields stay in `opts`.
Status ReadSessionOptions(const recur_session_options* options, recur_session_options* opts,
                          recur::impl::SessionOptions* so) {
  RECUR_RETURN_IF_ERROR(ReadOptions(options, opts, "recur_session_options", kSessionOptionsFields));
  if (opts->arena == nullptr && opts->arena_size != 0) {
    return recur::impl::InvalidArgument("recur_session_options.arena_size is %zu but arena is NULL",
                                        opts->arena_size);
  }
  so->batch = opts->batch == 0 ? 1 : opts->batch;
  so->threads = opts->threads == 0 ? 1 : opts->threads;
  so->prefill_chunk = opts->prefill_chunk;
  so->backend = opts->backend;
  so->weight_packing = opts->weight_packing;
  so->prefill_min = opts->prefill_min;
  so->max_context = opts->max_context;
  so->state_sums = opts->state_sums;
  so->int8_activations = opts->int8_activations;
  return Status::Ok();
}

// Bytes of arena for the handle and the session.
Status CountArena(const recur_model* model, const recur::impl::SessionOptions& so, size_t* bytes) {
  recur::impl::Arena counter;
  counter.Allocate<recur_session>(1);
  RECUR_RETURN_IF_ERROR(recur::impl::Session::CountArena(model->model.get(), so, &counter));
  *bytes = counter.bytes();
  return Status::Ok();
}

recur_status FinishLoad(std::unique_ptr<recur::impl::Model> model, recur_model** out) {
  auto* handle = new (std::nothrow) recur_model;
  if (handle == nullptr) return Report(recur::impl::OutOfMemory("cannot allocate a model handle"));
  handle->model = std::move(model);
  *out = handle;
  return RECUR_OK;
}

recur_status FinishSession(std::shared_ptr<const recur::impl::Model> model,
                           recur::impl::SessionPtr session, recur_session** out) {
  auto* handle = new (std::nothrow) recur_session;
  if (handle == nullptr) {
    return Report(recur::impl::OutOfMemory("cannot allocate a session handle"));
  }
  handle->model = std::move(model);
  handle->session = std::move(session);
  *out = handle;
  return RECUR_OK;
}

// The C API must not let an exception escape (std::bad_alloc from the
// standard containers is the realistic one).
template <typename F>
recur_status Guard(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Report(recur::impl::OutOfMemory("out of memory"));
  } catch (...) {
    return Report(Status(StatusCode::kInternal, "unexpected internal exception"));
  }
}

}  // namespace

namespace recur::impl {
const Model* ModelOfHandle(const recur_model* handle) {
  return handle != nullptr ? handle->model.get() : nullptr;
}
}  // namespace recur::impl

extern "C" {

const char* recur_status_string(recur_status status) {
  // A C caller may pass any int; in C++ a value outside the enum's range is
  // undefined once loaded as the enum, so read the bytes as an int.
  static_assert(sizeof(recur_status) == sizeof(int), "recur_status is an int-sized enum");
  int code;
  std::memcpy(&code, &status, sizeof(code));
  switch (code) {
    case RECUR_OK: return "RECUR_OK";
    case RECUR_INVALID_ARGUMENT: return "RECUR_INVALID_ARGUMENT";
    case RECUR_INVALID_MODEL: return "RECUR_INVALID_MODEL";
    case RECUR_UNSUPPORTED: return "RECUR_UNSUPPORTED";
    case RECUR_IO_ERROR: return "RECUR_IO_ERROR";
    case RECUR_OUT_OF_MEMORY: return "RECUR_OUT_OF_MEMORY";
    case RECUR_OUT_OF_RANGE: return "RECUR_OUT_OF_RANGE";
    case RECUR_INVALID_STATE: return "RECUR_INVALID_STATE";
    case RECUR_INTERNAL: return "RECUR_INTERNAL";
  }
  return "RECUR_UNKNOWN_STATUS";
}

const char* recur_last_error(void) { return g_last_error.c_str(); }

const char* recur_version_string(void) {
  return RECUR_STRINGIFY(RECUR_VERSION_MAJOR) "." RECUR_STRINGIFY(
      RECUR_VERSION_MINOR) "." RECUR_STRINGIFY(RECUR_VERSION_PATCH);
}

const char* recur_simd_target(void) {
  // Its error is the loads' to report.
  (void)recur::impl::kernels::ApplyTargetLimitFromEnvironment();
  return recur::impl::kernels::SimdTargetName();
}

recur_status recur_set_max_simd_target(const char* name) {
  return Guard([&]() -> recur_status {
    if (long live = g_live_sessions.load(); live != 0) {
      return Report(
          recur::impl::InvalidState("%ld session(s) exist: change the SIMD target before "
                                    "creating sessions or after freeing them",
                                    live));
    }
    // Read first, so that this call wins.
    (void)recur::impl::kernels::ApplyTargetLimitFromEnvironment();
    return Report(recur::impl::kernels::SetMaxSimdTarget(name));
  });
}

recur_status recur_set_platform(const recur_platform* platform) {
  return Guard(
      [&]() -> recur_status { return Report(recur::impl::platform::SetPlatform(platform)); });
}

uint32_t recur_max_threads(void) { return recur::impl::ThreadPool::Available() ? 256 : 1; }

recur_status recur_model_load_file(const char* path, const recur_load_options* options,
                                   recur_model** out) {
  return Guard([&]() -> recur_status {
    if (out == nullptr) return Report(recur::impl::InvalidArgument("out is null"));
    *out = nullptr;
    if (path == nullptr) return Report(recur::impl::InvalidArgument("path is null"));
    recur_load_options opts;
    Status s = ReadOptions(options, &opts, "recur_load_options", kLoadOptionsFields);
    if (!s.ok()) return Report(s);
    recur::impl::platform::MappedFile file;
    s = recur::impl::platform::MapFile(path, (opts.flags & RECUR_LOAD_NO_MMAP) != 0, &file);
    if (!s.ok()) return Report(s);
    std::unique_ptr<recur::impl::Model> model;
    s = recur::impl::LoadModel(file.data, file.size,
                               recur::impl::LoadOptions{(opts.flags & RECUR_LOAD_TRUSTED) != 0},
                               &model);
    if (!s.ok()) {
      recur::impl::platform::UnmapFile(&file);
      return Report(s.WithContext(path));
    }
    model->file = file;  // the model now owns the mapping
    return FinishLoad(std::move(model), out);
  });
}

recur_status recur_model_load_buffer(const void* data, size_t size,
                                     const recur_load_options* options, recur_model** out) {
  return Guard([&]() -> recur_status {
    if (out == nullptr) return Report(recur::impl::InvalidArgument("out is null"));
    *out = nullptr;
    recur_load_options opts;
    Status s = ReadOptions(options, &opts, "recur_load_options", kLoadOptionsFields);
    if (!s.ok()) return Report(s);
    std::unique_ptr<recur::impl::Model> model;
    s = recur::impl::LoadModel(
        data, size, recur::impl::LoadOptions{(opts.flags & RECUR_LOAD_TRUSTED) != 0}, &model);
    if (!s.ok()) return Report(s);
    return FinishLoad(std::move(model), out);
  });
}

void recur_model_free(recur_model* model) { delete model; }

recur_status recur_model_get_info(const recur_model* model, recur_model_info* info) {
  return Guard([&]() -> recur_status {
    if (model == nullptr || info == nullptr) {
      return Report(recur::impl::InvalidArgument("model and info must not be null"));
    }
    recur_model_info full;
    Status s = ReadOptions(info, &full, "recur_model_info", kModelInfoFields);
    if (!s.ok()) return Report(s);
    const recur::impl::Model& m = *model->model;
    full.input_kind = m.input_kind == recur::fb::InputKind::Tokens ? RECUR_INPUT_TOKENS
                                                                    : RECUR_INPUT_FEATURES;
    full.vocab_size = m.vocab_size;
    full.feature_width = m.feature_width;
    full.d_model = m.d_model;
    full.num_layers = static_cast<uint32_t>(m.blocks.size());
    full.output_width = m.output_width;
    full.max_positions = m.max_positions;
    full.parameter_count = m.parameter_count;
    full.state_bytes = m.state_floats * sizeof(float);
    full.state_bytes_per_position = m.state_floats_per_position * sizeof(float);
    full.state_bytes_plain_sums = (m.state_floats - m.compensation_floats) * sizeof(float);
    const recur::impl::StepCost cost = recur::impl::EstimateStepCost(m);
    full.max_context_bound = static_cast<uint32_t>(recur::impl::MaxContextBound(m));
    full.step_weight_bytes = cost.weight_bytes;
    full.step_flops = cost.flops;
    full.step_integer_flops = cost.integer_flops;
    full.recurrent = 1;
    for (const recur::impl::BlockView& b : m.blocks) {
      if (!b.mixer->causal()) full.recurrent = 0;
    }
    full.output_kind = m.head_activation == recur::fb::HeadActivation::Softmax
                           ? RECUR_OUTPUT_PROBABILITIES
                       : m.head_activation == recur::fb::HeadActivation::LogSoftmax
                           ? RECUR_OUTPUT_LOG_PROBABILITIES
                           : RECUR_OUTPUT_VALUES;
    std::memcpy(info, &full, info->struct_size);
    return RECUR_OK;
  });
}

recur_status recur_session_create(const recur_model* model, const recur_session_options* options,
                                  recur_session** out) {
  return Guard([&]() -> recur_status {
    if (out == nullptr) return Report(recur::impl::InvalidArgument("out is null"));
    *out = nullptr;
    if (model == nullptr) return Report(recur::impl::InvalidArgument("model is null"));
    recur_session_options opts;
    recur::impl::SessionOptions so;
    Status s = ReadSessionOptions(options, &opts, &so);
    if (!s.ok()) return Report(s);
    if (opts.arena == nullptr) {
      recur::impl::SessionPtr session;
      s = recur::impl::Session::Create(model->model.get(), so, &session);
      if (!s.ok()) return Report(s);
      return FinishSession(model->model, std::move(session), out);
    }
    size_t needed = 0;
    s = CountArena(model, so, &needed);
    if (!s.ok()) return Report(s);
    if (opts.arena_size < needed) {
      return Report(
          recur::impl::OutOfMemory("the arena has %zu bytes; this session needs %zu "
                                   "(recur_session_arena_size)",
                                   opts.arena_size, needed));
    }
    recur::impl::Arena arena(opts.arena, opts.arena_size);
    auto* handle = new (arena.Allocate<recur_session>(1)) recur_session;
    handle->in_arena = true;
    s = recur::impl::Session::CreateInArena(model->model.get(), so, &arena, &handle->session);
    if (!s.ok()) {
      handle->~recur_session();
      return Report(s);
    }
    handle->model = model->model;
    *out = handle;
    return RECUR_OK;
  });
}

recur_status recur_session_arena_size(const recur_model* model,
                                      const recur_session_options* options, size_t* bytes) {
  return Guard([&]() -> recur_status {
    if (bytes == nullptr) return Report(recur::impl::InvalidArgument("bytes is null"));
    *bytes = 0;
    if (model == nullptr) return Report(recur::impl::InvalidArgument("model is null"));
    recur_session_options opts;
    recur::impl::SessionOptions so;
    Status s = ReadSessionOptions(options, &opts, &so);
    if (!s.ok()) return Report(s);
    return Report(CountArena(model, so, bytes));
  });
}

void recur_session_free(recur_session* session) {
  if (session == nullptr) return;
  if (session->in_arena) {
    session->~recur_session();  // the memory is the caller's
  } else {
    delete session;
  }
}

recur_status recur_session_step(recur_session* session, const recur_input* input, float* out) {
  return Guard([&]() -> recur_status {
    if (session == nullptr || input == nullptr) {
      return Report(recur::impl::InvalidArgument("session and input must not be null"));
    }
    return Report(session->session->Step(input->tokens, input->features, input->count, out));
  });
}

recur_status recur_session_prefill(recur_session* session, size_t steps, const recur_input* input,
                                   float* out) {
  return Guard([&]() -> recur_status {
    if (session == nullptr || input == nullptr) {
      return Report(recur::impl::InvalidArgument("session and input must not be null"));
    }
    return Report(
        session->session->Prefill(steps, input->tokens, input->features, input->count, out));
  });
}

recur_status recur_session_encode(recur_session* session, size_t steps, const recur_input* input,
                                  float* out) {
  return Guard([&]() -> recur_status {
    if (session == nullptr || input == nullptr) {
      return Report(recur::impl::InvalidArgument("session and input must not be null"));
    }
    return Report(
        session->session->Encode(steps, input->tokens, input->features, input->count, out));
  });
}

recur_status recur_session_reset(recur_session* session, int stream) {
  return Guard([&]() -> recur_status {
    if (session == nullptr) return Report(recur::impl::InvalidArgument("session is null"));
    return Report(session->session->Reset(stream));
  });
}

recur_status recur_session_state_size(const recur_session* session, size_t* size) {
  return Guard([&]() -> recur_status {
    if (session == nullptr || size == nullptr) {
      return Report(recur::impl::InvalidArgument("session and size must not be null"));
    }
    *size = session->session->state_blob_size();
    return RECUR_OK;
  });
}

recur_status recur_session_state_save(const recur_session* session, int stream, void* buffer,
                                      size_t size) {
  return Guard([&]() -> recur_status {
    if (session == nullptr) return Report(recur::impl::InvalidArgument("session is null"));
    return Report(session->session->SaveState(stream, buffer, size));
  });
}

recur_status recur_session_state_load(recur_session* session, int stream, const void* buffer,
                                      size_t size) {
  return Guard([&]() -> recur_status {
    if (session == nullptr) return Report(recur::impl::InvalidArgument("session is null"));
    return Report(session->session->LoadState(stream, buffer, size));
  });
}

recur_status recur_session_set_layer_callback(recur_session* session,
                                              recur_layer_callback callback, void* user) {
  return Guard([&]() -> recur_status {
    if (session == nullptr) return Report(recur::impl::InvalidArgument("session is null"));
    session->callback = callback;
    session->callback_user = user;
    if (callback == nullptr) {
      session->session->set_layer_observer(nullptr, nullptr);
      return RECUR_OK;
    }
    session->session->set_layer_observer(
        [](void* context, size_t layer, const float* x, size_t batch, size_t steps) {
          auto* s = static_cast<recur_session*>(context);
          s->callback(s->callback_user, static_cast<uint32_t>(layer), x, batch, steps,
                      s->session->model().d_model);
        },
        session);
    return RECUR_OK;
  });
}

recur_status recur_session_fork(const recur_session* session, recur_session** out) {
  return Guard([&]() -> recur_status {
    if (out == nullptr) return Report(recur::impl::InvalidArgument("out is null"));
    *out = nullptr;
    if (session == nullptr) return Report(recur::impl::InvalidArgument("session is null"));
    recur::impl::SessionPtr copy;
    Status s = session->session->Fork(&copy);
    if (!s.ok()) return Report(s);
    return FinishSession(session->model, std::move(copy), out);
  });
}

}  // extern "C"

const char* recur_session_backends(const recur_session* session) {
  if (session == nullptr) return nullptr;
  if (session->in_arena) return "highway x every dense layer, unpacked (arena session)";
  auto* s = const_cast<recur_session*>(session);
  if (s->backends.empty()) {
    try {
      s->backends = s->session->dense_summary();
    } catch (...) {
      return "";
    }
  }
  return s->backends.c_str();
}

recur_status recur_model_vocabulary(const recur_model* model, uint32_t* token_count,
                                    int32_t* end_of_text) {
  return Guard([&]() -> recur_status {
    if (model == nullptr) return Report(recur::impl::InvalidArgument("model is null"));
    const recur::impl::text::Vocabulary& v = model->model->vocabulary;
    if (!v.available().ok()) return Report(v.available());
    if (token_count != nullptr) *token_count = v.size();
    if (end_of_text != nullptr) *end_of_text = v.end_of_text();
    return RECUR_OK;
  });
}

recur_status recur_tokenize(const recur_model* model, const char* text, size_t length, int32_t* ids,
                            size_t capacity, size_t* count) {
  return Guard([&]() -> recur_status {
    if (count == nullptr) return Report(recur::impl::InvalidArgument("count is null"));
    *count = 0;
    if (model == nullptr) return Report(recur::impl::InvalidArgument("model is null"));
    size_t needed = 0;
    Status s = model->model->vocabulary.Encode(reinterpret_cast<const uint8_t*>(text), length, ids,
                                               capacity, &needed);
    if (!s.ok()) return Report(s);
    *count = needed;
    if (ids != nullptr && capacity < needed) {
      return Report(recur::impl::OutOfRange("ids has room for %zu ids, and the text encodes to %zu",
                                            capacity, needed));
    }
    return RECUR_OK;
  });
}

recur_status recur_token_bytes(const recur_model* model, int32_t id, const char** bytes,
                               size_t* length) {
  return Guard([&]() -> recur_status {
    if (model == nullptr || bytes == nullptr || length == nullptr) {
      return Report(recur::impl::InvalidArgument("model, bytes and length must not be null"));
    }
    const uint8_t* data = nullptr;
    size_t size = 0;
    Status s = model->model->vocabulary.TokenBytes(id, &data, &size);
    if (!s.ok()) return Report(s);
    *bytes = reinterpret_cast<const char*>(data);
    *length = size;
    return RECUR_OK;
  });
}

recur_status recur_detokenize(const recur_model* model, const int32_t* ids, size_t n, char* out,
                              size_t capacity, size_t* length) {
  return Guard([&]() -> recur_status {
    if (length == nullptr) return Report(recur::impl::InvalidArgument("length is null"));
    *length = 0;
    if (model == nullptr) return Report(recur::impl::InvalidArgument("model is null"));
    size_t needed = 0;
    Status s =
        model->model->vocabulary.Decode(ids, n, reinterpret_cast<uint8_t*>(out), capacity, &needed);
    if (!s.ok()) return Report(s);
    *length = needed;
    if (out != nullptr && capacity < needed) {
      return Report(recur::impl::OutOfRange(
          "out has room for %zu bytes, and the tokens decode to %zu", capacity, needed));
    }
    return RECUR_OK;
  });
}

size_t recur_utf8_incomplete_tail(const char* bytes, size_t length) {
  if (bytes == nullptr) return 0;
  return recur::impl::text::Utf8IncompleteTail(reinterpret_cast<const uint8_t*>(bytes), length);
}

recur_status recur_sample(const float* logits, size_t n, const recur_sampler_options* options,
                          uint64_t* rng_state, int32_t* token) {
  return Guard([&]() -> recur_status {
    if (logits == nullptr || rng_state == nullptr || token == nullptr) {
      return Report(recur::impl::InvalidArgument("logits, rng_state and token must not be null"));
    }
    recur_sampler_options o;
    Status s = ReadOptions(options, &o, "recur_sampler_options", kSamplerOptionsFields);
    if (!s.ok()) return Report(s);
    recur::impl::text::SamplerOptions so;
    so.temperature = o.temperature;
    so.top_k = o.top_k;
    so.top_p = o.top_p == 0 ? 1.0 : double(o.top_p);
    so.min_p = o.min_p;
    return Report(recur::impl::text::Sample(logits, n, so, rng_state, token));
  });
}

recur_status recur_apply_penalties(float* logits, size_t n, const int32_t* recent, size_t count,
                                   const recur_penalty_options* options) {
  return Guard([&]() -> recur_status {
    if (logits == nullptr || (recent == nullptr && count > 0)) {
      return Report(recur::impl::InvalidArgument(
          "logits must not be null, nor recent when count is %zu", count));
    }
    recur_penalty_options o;
    Status s = ReadOptions(options, &o, "recur_penalty_options", kPenaltyOptionsFields);
    if (!s.ok()) return Report(s);
    recur::impl::text::PenaltyOptions po;
    po.repeat = o.repeat == 0 ? 1.0 : double(o.repeat);
    po.presence = o.presence;
    po.frequency = o.frequency;
    po.decay = o.decay == 0 ? 1.0 : double(o.decay);
    return Report(recur::impl::text::ApplyPenalties(logits, n, recent, count, po));
  });
}

const char* recur_backends(void) {
  static const std::string names = recur::impl::backends::CompiledBackendNames();
  return names.c_str();
}
