// recur._recur: the Python binding of the C API (recur.h), nothing else.
//
// Threading: a session's calls run with the GIL released, under the session's
// own mutex (recur.h: a session is not thread-safe), so one session may be
// shared by Python threads (its calls then run one at a time) and different
// sessions step in parallel. The mutex is taken after the GIL is released:
// a thread waiting for it never holds the GIL that the running call needs to
// return. Errors: the runtime's message is read on the thread that made the
// failing call, right after it (recur_last_error is thread-local).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "converter/config.h"
#include "converter/convert.h"
#include "converter/file_util.h"
#include "converter/layouts/layout_converter.h"
#include "converter/quantize.h"
#include "converter/safetensors.h"
#include "recur/recur.h"

namespace nb = nanobind;

namespace {

// recur.Error's subclasses, indexed by recur_status; set by recur/__init__.py.
nb::object g_error_classes[RECUR_INTERNAL + 1];

[[noreturn]] void Raise(recur_status status, const std::string& message) {
  const int index = (status >= RECUR_INVALID_ARGUMENT && status <= RECUR_INTERNAL) ? int(status)
                                                                                 : RECUR_INTERNAL;
  nb::object cls = g_error_classes[index];
  if (!cls.is_valid()) throw std::runtime_error(message);  // before recur/__init__.py ran
  nb::object error = cls(message, int(status));
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw nb::python_error();
}

[[noreturn]] void RaiseInvalid(const std::string& message) {
  Raise(RECUR_INVALID_ARGUMENT, message);
}

// A call's status and, when it failed, the runtime's message (read at once,
// on the calling thread).
struct Result {
  recur_status status = RECUR_OK;
  std::string message;
  void Check() const {
    if (status != RECUR_OK) Raise(status, message);
  }
};

Result Capture(recur_status status) {
  Result r;
  r.status = status;
  if (status != RECUR_OK) r.message = recur_last_error();
  return r;
}

// bool(o), for numpy's bool_ too (nb::cast<bool> takes only True and False).
bool Truthy(nb::handle o) {
  const int truth = PyObject_IsTrue(o.ptr());
  if (truth < 0) throw nb::python_error();
  return truth != 0;
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

std::string ShapeString(const nb::ndarray<nb::ro>& a) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(a.shape(i));
  }
  return s + (a.ndim() == 1 ? ",)" : ")");
}

class Model {
 public:
  // A path (str or os.PathLike) is mapped by the runtime; bytes-like data is
  // copied into 64-byte aligned memory that this object owns, since the
  // runtime reads the weights in place for the model's whole life.
  Model(nb::handle source, bool mmap, bool trusted) {
    recur_load_options options = recur_load_options_default();
    if (!mmap) options.flags |= RECUR_LOAD_NO_MMAP;
    if (trusted) options.flags |= RECUR_LOAD_TRUSTED;
    Result r;
    if (PyUnicode_Check(source.ptr()) || PyObject_HasAttrString(source.ptr(), "__fspath__")) {
      nb::object fs = nb::module_::import_("os").attr("fsdecode")(source);
      std::string path = nb::cast<std::string>(fs);
      if (path.find('\0') != std::string::npos) RaiseInvalid("model path holds a NUL character");
      {
        nb::gil_scoped_release release;
        if (recur::impl::converter::IsGgufFile(path)) {
          // Converted as recur-convert would, into a temporary file mapped and removed.
          recur::impl::converter::ConvertReport report;
          double seconds = 0;
          const recur::impl::Status converted = recur::impl::converter::ConvertThroughTemporary(
              path,
              [&](const std::string& recur_path) {
                r = Capture(recur_model_load_file(recur_path.c_str(), &options, &model_));
                return recur::impl::Status::Ok();  // r carries the load's status
              },
              &report, &seconds);
          if (!converted.ok())
            r = {static_cast<recur_status>(converted.code()), converted.message()};
        } else {
          r = Capture(recur_model_load_file(path.c_str(), &options, &model_));
        }
      }
      source_ = path;
    } else if (PyObject_CheckBuffer(source.ptr())) {
      Py_buffer view;
      if (PyObject_GetBuffer(source.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
      const size_t size = size_t(view.len);
      const size_t rounded = (size + 63) / 64 * 64;
      bytes_.reset(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
      if (!bytes_) {
        PyBuffer_Release(&view);
        Raise(RECUR_OUT_OF_MEMORY, "model bytes: cannot allocate " + std::to_string(size) + " bytes");
      }
      if (size) std::memcpy(bytes_.get(), view.buf, size);
      PyBuffer_Release(&view);
      {
        nb::gil_scoped_release release;
        r = Capture(recur_model_load_buffer(bytes_.get(), size, &options, &model_));
      }
      source_ = "<" + std::to_string(size) + " bytes>";
    } else {
      throw nb::type_error(("Model() takes a path (str or os.PathLike) or bytes-like model data, "
                            "not " + nb::cast<std::string>(source.type().attr("__name__")))
                               .c_str());
    }
    r.Check();
    info_.struct_size = sizeof(info_);
    r = Capture(recur_model_get_info(model_, &info_));
    if (r.status != RECUR_OK) {
      recur_model_free(model_);  // the destructor does not run for a constructor that throws
      model_ = nullptr;
      r.Check();
    }
  }
  ~Model() { recur_model_free(model_); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const recur_model* get() const { return model_; }
  const recur_model_info& info() const { return info_; }
  const std::string& source() const { return source_; }

 private:
  recur_model* model_ = nullptr;
  std::unique_ptr<void, AlignedFree> bytes_;  // buffer-loaded models: outlives model_
  recur_model_info info_{};
  std::string source_;
};

// The vocabulary a model carries (recur.h "vocabulary"): text in, ids out,
// and back. Keeps its Model alive; the calls read the immutable model only,
// so they need no lock, and the long ones release the GIL.
class Tokenizer {
 public:
  explicit Tokenizer(nb::object model_object)
      : model_object_(std::move(model_object)), model_(nb::cast<Model*>(model_object_)) {
    Capture(recur_model_vocabulary(model_->get(), &size_, &end_of_text_)).Check();
  }

  uint32_t size() const { return size_; }
  nb::object end_of_text() const { return end_of_text_ < 0 ? nb::none() : nb::int_(end_of_text_); }

  nb::list Encode(nb::handle text) const {
    std::string bytes;
    if (PyUnicode_Check(text.ptr())) {
      Py_ssize_t n = 0;
      const char* utf8 = PyUnicode_AsUTF8AndSize(text.ptr(), &n);  // fails on lone surrogates
      if (utf8 == nullptr) throw nb::python_error();
      bytes.assign(utf8, size_t(n));
    } else if (PyObject_CheckBuffer(text.ptr())) {
      Py_buffer view;
      if (PyObject_GetBuffer(text.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
      bytes.assign(static_cast<const char*>(view.buf), size_t(view.len));
      PyBuffer_Release(&view);
    } else {
      throw nb::type_error(("encode() takes str or bytes-like text, not " +
                            nb::cast<std::string>(text.type().attr("__name__")))
                               .c_str());
    }
    std::vector<int32_t> ids;
    Result r;
    {
      nb::gil_scoped_release release;
      size_t count = 0;
      r = Capture(recur_tokenize(model_->get(), bytes.data(), bytes.size(), nullptr, 0, &count));
      if (r.status == RECUR_OK) {
        ids.resize(count);
        r = Capture(recur_tokenize(model_->get(), bytes.data(), bytes.size(), ids.data(),
                                   ids.size(), &count));
      }
    }
    r.Check();
    nb::list out;
    for (int32_t id : ids) out.append(id);
    return out;
  }

  nb::bytes DecodeBytes(nb::handle ids_object) const {
    const std::vector<int32_t> ids = Ids(ids_object);
    std::string bytes;
    Result r;
    {
      nb::gil_scoped_release release;
      size_t length = 0;
      r = Capture(recur_detokenize(model_->get(), ids.data(), ids.size(), nullptr, 0, &length));
      if (r.status == RECUR_OK) {
        bytes.resize(length);
        r = Capture(recur_detokenize(model_->get(), ids.data(), ids.size(), bytes.data(),
                                     bytes.size(), &length));
      }
    }
    r.Check();
    return nb::bytes(bytes.data(), bytes.size());
  }

  nb::str Decode(nb::handle ids, const std::string& errors) const {
    nb::bytes bytes = DecodeBytes(ids);
    PyObject* text = PyUnicode_DecodeUTF8(bytes.c_str(), Py_ssize_t(bytes.size()), errors.c_str());
    if (text == nullptr) throw nb::python_error();
    return nb::steal<nb::str>(text);
  }

  nb::bytes TokenBytes(int64_t id) const {
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
      Raise(RECUR_OUT_OF_RANGE, "token id " + std::to_string(id) + " is not in the vocabulary");
    }
    const char* bytes = nullptr;
    size_t length = 0;
    Capture(recur_token_bytes(model_->get(), int32_t(id), &bytes, &length)).Check();
    return nb::bytes(bytes, length);
  }

  const nb::object& model() const { return model_object_; }

  // A sequence of ints (a list, a tuple, a 1-D integer array) as int32 ids.
  static std::vector<int32_t> Ids(nb::handle ids_object) {
    if (PyUnicode_Check(ids_object.ptr()) || PyBytes_Check(ids_object.ptr())) {
      throw nb::type_error("decode() takes a sequence of token ids, not text");
    }
    std::vector<int32_t> ids;
    for (nb::handle item : nb::iter(ids_object)) {
      PyObject* index = PyNumber_Index(item.ptr());
      if (index == nullptr) throw nb::python_error();
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
      Py_DECREF(index);
      if (v == -1 && PyErr_Occurred()) throw nb::python_error();
      if (overflow != 0 || v < std::numeric_limits<int32_t>::min() ||
          v > std::numeric_limits<int32_t>::max()) {
        Raise(RECUR_OUT_OF_RANGE, "ids[" + std::to_string(ids.size()) + "]: token id " +
                                      nb::cast<std::string>(nb::str(item)) +
                                      " is not in the vocabulary");
      }
      ids.push_back(int32_t(v));
    }
    return ids;
  }

 private:
  nb::object model_object_;
  Model* model_;
  uint32_t size_ = 0;
  int32_t end_of_text_ = -1;
};

using FloatArray = nb::ndarray<nb::numpy, float>;

// A new C-contiguous float32 array of `count` values (zeroed only if empty).
FloatArray NewFloats(std::initializer_list<size_t> shape, size_t count, float** data) {
  float* p = new (std::nothrow) float[count == 0 ? 1 : count];
  if (!p) {
    Raise(RECUR_OUT_OF_MEMORY, "cannot allocate the output: " + std::to_string(count) + " floats");
  }
  nb::capsule owner(p, [](void* q) noexcept { delete[] static_cast<float*>(q); });
  *data = p;
  return FloatArray(p, shape, owner);
}

class Session {
 public:
  Session(nb::object model_object, recur_session* session, uint32_t batch)
      : model_object_(std::move(model_object)),
        model_(nb::cast<Model*>(model_object_)),
        session_(session),
        batch_(batch) {
    const recur_model_info& info = model_->info();
    tokens_ = info.input_kind == RECUR_INPUT_TOKENS;
    feature_width_ = info.feature_width;
    width_ = info.output_width;
  }
  ~Session() { recur_session_free(session_); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  static Session* Create(nb::object model_object, uint32_t batch, uint32_t threads,
                         uint32_t max_context, nb::object backend, const std::string& state_sums,
                         uint32_t prefill_chunk, const std::string& weight_packing,
                         const std::string& int8_activations) {
    Model* model = nb::cast<Model*>(model_object);
    recur_session_options options = recur_session_options_default();
    if (batch == 0) RaiseInvalid("batch must be at least 1");
    options.batch = batch;
    options.threads = threads;
    options.max_context = max_context;
    options.prefill_chunk = prefill_chunk;
    std::string backend_name;
    if (!backend.is_none()) {
      if (!nb::isinstance<nb::str>(backend)) throw nb::type_error("backend must be a str or None");
      backend_name = nb::cast<std::string>(backend);
      options.backend = backend_name.c_str();
    }
    if (state_sums == "compensated") {
      options.state_sums = RECUR_STATE_SUMS_COMPENSATED;
    } else if (state_sums == "plain") {
      options.state_sums = RECUR_STATE_SUMS_PLAIN;
    } else {
      RaiseInvalid("state_sums must be 'compensated' or 'plain', not '" + state_sums + "'");
    }
    if (weight_packing == "auto") {
      options.weight_packing = RECUR_PACKING_AUTO;
    } else if (weight_packing == "off") {
      options.weight_packing = RECUR_PACKING_OFF;
    } else if (weight_packing == "on") {
      options.weight_packing = RECUR_PACKING_ON;
    } else {
      RaiseInvalid("weight_packing must be 'auto', 'off' or 'on', not '" + weight_packing + "'");
    }
    if (int8_activations == "auto") {
      options.int8_activations = RECUR_INT8_ACTIVATIONS_AUTO;
    } else if (int8_activations == "float") {
      options.int8_activations = RECUR_INT8_ACTIVATIONS_FLOAT;
    } else if (int8_activations == "quantized") {
      options.int8_activations = RECUR_INT8_ACTIVATIONS_QUANTIZED;
    } else if (int8_activations == "blocks") {
      options.int8_activations = RECUR_INT8_ACTIVATIONS_BLOCKS;
    } else {
      RaiseInvalid("int8_activations must be 'auto', 'float', 'quantized' or 'blocks', not '" +
                   int8_activations + "'");
    }
    recur_session* session = nullptr;
    Result r;
    {
      nb::gil_scoped_release release;
      r = Capture(recur_session_create(model->get(), &options, &session));
    }
    r.Check();
    return new Session(std::move(model_object), session, batch);
  }

  uint32_t batch() const { return batch_; }

  FloatArray Step(nb::handle x) {
    nb::ndarray<nb::ro> a = Input(x, "step");
    const size_t b = batch_;
    CheckShape(a, "step", b, 0);
    float* out;
    FloatArray result = NewFloats({b, size_t(width_)}, b * width_, &out);
    recur_input input = MakeInput(a);
    Run([&] { return recur_session_step(session_, &input, out); });
    return result;
  }

  nb::object Prefill(nb::handle xs, bool outputs) {
    nb::ndarray<nb::ro> a = Input(xs, "prefill");
    const size_t b = batch_;
    CheckShape(a, "prefill", b, 1);
    const size_t n = a.shape(1);
    recur_input input = MakeInput(a);
    if (!outputs) {
      Run([&] { return recur_session_prefill(session_, n, &input, nullptr); });
      return nb::none();
    }
    float* out;
    FloatArray result = NewFloats({b, n, size_t(width_)}, OutputCount(b, n), &out);
    Run([&] { return recur_session_prefill(session_, n, &input, out); });
    return nb::cast(result);
  }

  FloatArray Encode(nb::handle xs) {
    nb::ndarray<nb::ro> a = Input(xs, "encode");
    const size_t b = batch_;
    CheckShape(a, "encode", b, 1);
    const size_t n = a.shape(1);
    recur_input input = MakeInput(a);
    float* out;
    FloatArray result = NewFloats({b, n, size_t(width_)}, OutputCount(b, n), &out);
    Run([&] { return recur_session_encode(session_, n, &input, out); });
    return result;
  }

  void Reset(int stream) {
    Run([&] { return recur_session_reset(session_, stream); });
  }

  size_t StateSize() {
    size_t size = 0;
    Run([&] { return recur_session_state_size(session_, &size); });
    return size;
  }

  nb::bytes SaveState(int stream) {
    std::string blob;
    Run([&] {
      size_t size = 0;
      recur_status s = recur_session_state_size(session_, &size);
      if (s != RECUR_OK) return s;
      try {
        blob.resize(size);
      } catch (const std::bad_alloc&) {
        return RECUR_OUT_OF_MEMORY;  // the message below says so
      }
      return recur_session_state_save(session_, stream, blob.data(), blob.size());
    });
    return nb::bytes(blob.data(), blob.size());
  }

  void LoadState(int stream, nb::handle blob) {
    Py_buffer view;
    if (PyObject_GetBuffer(blob.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      throw nb::type_error("load_state: the state must be bytes-like (bytes from save_state)");
    }
    std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release(&view, PyBuffer_Release);
    Run([&] { return recur_session_state_load(session_, stream, view.buf, size_t(view.len)); });
  }

  Session* Fork() {
    recur_session* copy = nullptr;
    Run([&] { return recur_session_fork(session_, &copy); });
    return new Session(model_object_, copy, batch_);
  }

  std::string Backends() {
    std::string s;
    Run([&] {
      const char* b = recur_session_backends(session_);
      s = b ? b : "";
      return RECUR_OK;
    });
    return s;
  }

  void Close() {
    recur_session* session;
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      session = session_;
      session_ = nullptr;
    }
    recur_session_free(session);
  }

  bool closed() {
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    return session_ == nullptr;
  }

  nb::object model() const { return model_object_; }
  bool takes_tokens() const { return tokens_; }
  uint32_t output_width() const { return width_; }

  // Runs call(session) as every call runs: the GIL released, the lock held.
  template <typename F>
  void With(F&& call) {
    Run([&] { return call(session_); });
  }

 private:

  // Runs `call` on the session with the GIL released and the mutex held;
  // raises the runtime's error, or InvalidArgument if the session is closed.
  template <typename F>
  void Run(F&& call) {
    Result r;
    bool closed = false;
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      if (!session_) {
        closed = true;
      } else {
        r = Capture(call());
      }
    }
    if (closed) RaiseInvalid("the session is closed");
    r.Check();
  }

  // `x` as a C-contiguous array of the model's input dtype: as it is when it
  // already is one, else converted by numpy (a copy).
  nb::ndarray<nb::ro> Input(nb::handle x, const char* call) {
    nb::ndarray<nb::ro> a;
    const nb::dlpack::dtype want = tokens_ ? nb::dtype<int32_t>() : nb::dtype<float>();
    if (nb::try_cast(x, a, false) && a.dtype() == want && IsCContiguous(a) &&
        a.device_type() == nb::device::cpu::value) {
      return a;
    }
    nb::module_ np = nb::module_::import_("numpy");
    nb::object arr = np.attr("asarray")(x);
    const std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("kind"));
    const std::string dtype_name = nb::cast<std::string>(arr.attr("dtype").attr("name"));
    if (tokens_) {
      if (kind != "i" && kind != "u") {
        throw nb::type_error((std::string(call) + ": this model takes int32 token ids, got an "
                              "array of " + dtype_name).c_str());
      }
      // Ids beyond int32 would wrap in the conversion: out of the vocabulary either way.
      const bool too_big =
          Truthy(np.attr("any")(np.attr("less")(arr, std::numeric_limits<int32_t>::min()))) ||
          Truthy(np.attr("any")(np.attr("greater")(arr, std::numeric_limits<int32_t>::max())));
      if (too_big) {
        Raise(RECUR_OUT_OF_RANGE, std::string(call) + ": a token id does not fit int32 (vocabulary: " +
                                      std::to_string(model_->info().vocab_size) + ")");
      }
      arr = np.attr("ascontiguousarray")(arr, np.attr("int32"));
    } else {
      if (kind != "f" && kind != "i" && kind != "u") {
        throw nb::type_error((std::string(call) + ": this model takes float32 frames, got an "
                              "array of " + dtype_name).c_str());
      }
      arr = np.attr("ascontiguousarray")(arr, np.attr("float32"));
    }
    if (!nb::try_cast(arr, a, false)) {
      throw nb::type_error((std::string(call) + ": the input is not an array").c_str());
    }
    return a;
  }

  static bool IsCContiguous(const nb::ndarray<nb::ro>& a) {
    int64_t expected = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
      if (a.shape(i) != 1 && a.stride(i) != expected) return false;
      expected *= int64_t(a.shape(i));
    }
    return true;
  }

  // step: (B,) tokens or (B, F) frames; prefill/encode: (B, N) or (B, N, F).
  void CheckShape(const nb::ndarray<nb::ro>& a, const char* call, size_t batch,
                  int time_dims) const {
    const size_t ndim = size_t(1 + time_dims + (tokens_ ? 0 : 1));
    std::string want = time_dims ? (tokens_ ? "(batch, steps) token ids"
                                            : "(batch, steps, feature_width) frames")
                                 : (tokens_ ? "(batch,) token ids" : "(batch, feature_width) frames");
    bool ok = a.ndim() == ndim && a.shape(0) == batch;
    if (ok && !tokens_) ok = a.shape(ndim - 1) == feature_width_;
    if (!ok) {
      std::string expected = "(" + std::to_string(batch);
      if (time_dims) expected += ", N";
      if (!tokens_) expected += ", " + std::to_string(feature_width_);
      if (ndim == 1) expected += ",";
      expected += ")";
      RaiseInvalid(std::string(call) + ": expected " + want + " of shape " + expected +
                   ", got shape " + ShapeString(a));
    }
  }

  size_t OutputCount(size_t b, size_t n) const {
    const size_t w = width_ == 0 ? 1 : width_;
    if (n != 0 && b > std::numeric_limits<size_t>::max() / n / w) {
      RaiseInvalid("the output of batch x steps x output_width is too large to address");
    }
    return b * n * width_;
  }

  recur_input MakeInput(const nb::ndarray<nb::ro>& a) const {
    recur_input input{};
    input.count = a.size();
    if (tokens_) {
      input.tokens = static_cast<const int32_t*>(a.data());
    } else {
      input.features = static_cast<const float*>(a.data());
    }
    return input;
  }

  nb::object model_object_;  // keeps the Model (and its bytes) alive
  Model* model_;
  recur_session* session_;  // null once closed; guarded by mutex_
  uint32_t batch_;
  std::mutex mutex_;
  bool tokens_ = true;
  uint32_t feature_width_ = 0, width_ = 0;
};

// Session.generate's iterator: reads the prompt when made, then draws a
// token per next() and reads it into the session before returning it.
class Generation {
 public:
  Generation(nb::object session_object, nb::handle prompt, size_t n, float temperature,
             uint32_t top_k, float top_p, float min_p, uint64_t seed, nb::handle stop,
             const recur_penalty_options& penalties, size_t penalty_last_n)
      : session_object_(std::move(session_object)),
        session_(nb::cast<Session*>(session_object_)),
        n_(n),
        penalty_last_n_(penalty_last_n),
        rng_(seed),
        penalties_(penalties) {
    Model* model = nb::cast<Model*>(session_->model());
    if (session_->batch() != 1) RaiseInvalid("generate: the session must have batch 1");
    if (!session_->takes_tokens()) RaiseInvalid("generate: the model takes feature frames");
    options_ = recur_sampler_options_default();
    options_.temperature = temperature;
    options_.top_k = top_k;
    options_.top_p = top_p;
    options_.min_p = min_p;
    if (!(top_p > 0))
      RaiseInvalid("generate: top_p is " + std::to_string(top_p) + "; it must be in (0, 1]");
    const float zero = 0;
    uint64_t rng = 0;
    int32_t token = 0;
    Capture(recur_sample(&zero, 1, &options_, &rng, &token)).Check();  // the options' checks
    if (!(penalties.repeat > 0) || !(penalties.decay > 0)) {  // 0 would read as the default
      RaiseInvalid("generate: repeat_penalty and penalty_decay must be > 0");
    }
    float one_logit = 0;
    Capture(recur_apply_penalties(&one_logit, 1, nullptr, 0, &penalties_)).Check();
    const bool vocabulary =
        recur_model_vocabulary(model->get(), &vocab_, &end_of_text_) == RECUR_OK;
    logits_.resize(session_->output_width());
    drawable_ = vocabulary ? std::min<size_t>(vocab_, logits_.size()) : logits_.size();
    probabilities_ = model->info().output_kind == RECUR_OUTPUT_PROBABILITIES;
    model_ = model->get();

    if (!stop.is_none()) {
      if (nb::isinstance<nb::str>(stop)) {
        stops_.push_back(nb::cast<std::string>(stop));
      } else {
        for (nb::handle s : nb::iter(stop)) {
          if (!nb::isinstance<nb::str>(s)) throw nb::type_error("generate: stop takes str texts");
          stops_.push_back(nb::cast<std::string>(s));
        }
      }
      for (const std::string& s : stops_) {
        if (s.empty()) RaiseInvalid("generate: a stop text is empty");
      }
      if (!stops_.empty() && !vocabulary) {
        Capture(recur_model_vocabulary(model->get(), nullptr, nullptr)).Check();
      }
    }
    std::vector<int32_t> ids;
    if (nb::isinstance<nb::str>(prompt) || PyObject_CheckBuffer(prompt.ptr())) {
      Tokenizer tokenizer(session_->model());
      for (nb::handle id : tokenizer.Encode(prompt)) ids.push_back(nb::cast<int32_t>(id));
    } else {
      ids = Tokenizer::Ids(prompt);
    }
    if (ids.empty()) {
      RaiseInvalid(
          "generate: the prompt is empty; the first token is drawn from the logits of "
          "its last token");
    }
    session_->With([&](recur_session* s) {
      recur_input in{ids.data(), nullptr, ids.size() - 1};
      recur_status st = recur_session_prefill(s, ids.size() - 1, &in, nullptr);
      if (st != RECUR_OK) return st;
      in = recur_input{&ids.back(), nullptr, 1};
      return recur_session_step(s, &in, logits_.data());
    });
  }

  int32_t Next() {
    if (done_ || made_ >= n_) throw nb::stop_iteration();
    if (probabilities_) {
      for (size_t i = 0; i < drawable_; ++i) logits_[i] = std::log(logits_[i]);
    }
    int32_t token = -1;
    session_->With([&](recur_session* s) {
      const size_t recent =
          penalty_last_n_ == 0 ? drawn_.size() : std::min(penalty_last_n_, drawn_.size());
      recur_status st = recur_apply_penalties(
          logits_.data(), drawable_, drawn_.data() + drawn_.size() - recent, recent, &penalties_);
      if (st != RECUR_OK) return st;
      st = recur_sample(logits_.data(), drawable_, &options_, &rng_, &token);
      if (st != RECUR_OK) return st;
      drawn_.push_back(token);
      recur_input in{&token, nullptr, 1};
      return recur_session_step(s, &in, logits_.data());
    });
    ++made_;
    if (token == end_of_text_) {
      done_ = true;
      throw nb::stop_iteration();
    }
    if (!stops_.empty()) {
      const char* bytes = nullptr;
      size_t length = 0;
      Capture(recur_token_bytes(model_, token, &bytes, &length)).Check();
      const size_t before = text_.size();
      text_.append(bytes, length);
      for (const std::string& stop : stops_) {
        const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
        if (text_.find(stop, from) != std::string::npos) done_ = true;
      }
    }
    return token;
  }

  size_t generated() const { return made_; }
  uint64_t rng_state() const { return rng_; }

 private:
  nb::object session_object_;  // keeps the Session alive
  Session* session_;
  const recur_model* model_ = nullptr;
  size_t n_, made_ = 0, drawable_ = 0, penalty_last_n_;
  uint64_t rng_;
  recur_sampler_options options_{};
  recur_penalty_options penalties_;
  std::vector<int32_t> drawn_;
  uint32_t vocab_ = 0;
  int32_t end_of_text_ = -1;
  bool probabilities_ = false, done_ = false;
  std::vector<float> logits_;
  std::vector<std::string> stops_;
  std::string text_;
};

const char* InputKindName(recur_input_kind k) {
  return k == RECUR_INPUT_TOKENS ? "tokens" : "features";
}

const char* OutputKindName(recur_output_kind k) {
  switch (k) {
    case RECUR_OUTPUT_PROBABILITIES: return "probabilities";
    case RECUR_OUTPUT_LOG_PROBABILITIES: return "log_probabilities";
    default: return "values";
  }
}

// recur.convert's engine: the converter library's whole pipeline
// (converter/convert.h), from files to a file, with the GIL released.
nb::dict ConvertFiles(const std::string& weights, const std::string& config,
                      const std::string& output, const std::string& dtype,
                      const std::string& layout, int group, const std::string& state_dict_key,
                      bool quantize_head, bool allow_extra, const std::string& tokenizer) {
  namespace cv = recur::impl::converter;
  cv::ConvertOptions options;
  options.tokenizer_path = tokenizer;
  options.weights_path = weights;
  options.config_path = config;
  options.output_path = output;
  options.state_dict_key = state_dict_key;
  options.group = group;
  options.quantize_head = quantize_head;
  options.allow_extra = allow_extra;
  if (!dtype.empty()) {  // empty: None, the default
    recur::impl::kernels::WeightType type;
    if (!cv::ParseWeightType(dtype, &type)) {
      RaiseInvalid("dtype must be " + recur::impl::kernels::WeightTypeNames() + ", got \"" +
                   dtype + "\"");
    }
    options.dtype = type;
  }
  if (!cv::ParseLayout(layout, &options.layout)) {
    std::string names;
    for (const std::string& name : cv::LayoutNames()) names += (names.empty() ? "" : ", ") + name;
    RaiseInvalid("layout must be one of " + names + ", got \"" + layout + "\"");
  }
  cv::ConvertReport report;
  recur::impl::Status status;
  {
    nb::gil_scoped_release release;
    status = cv::ConvertFiles(options, &report);
  }
  if (!status.ok()) Raise(static_cast<recur_status>(status.code()), status.message());
  nb::dict out;
  out["layout"] = std::string(cv::LayoutName(report.layout));
  out["tensors"] = report.tensors;
  out["file_bytes"] = report.file_bytes;
  out["narrow_tensors"] = report.narrow_tensors;
  out["source_hash"] = report.source_hash;
  nb::list warnings;
  for (const std::string& w : report.warnings) warnings.append(w);
  out["warnings"] = warnings;
  return out;
}

// recur.convert's writer for weights given as arrays: a safetensors file of
// float32 tensors (the converter reads every weight as f32).
void WriteSafetensors(const std::string& path, nb::dict tensors) {
  namespace cv = recur::impl::converter;
  cv::TensorMap map;
  for (auto [key, value] : tensors) {
    const std::string name = nb::cast<std::string>(key);
    const auto array = nb::cast<nb::ndarray<const float, nb::c_contig, nb::device::cpu>>(value);
    cv::Tensor& t = map[name];
    for (size_t d = 0; d < array.ndim(); ++d) t.shape.push_back(int64_t(array.shape(d)));
    t.data.assign(array.data(), array.data() + array.size());
  }
  const std::vector<uint8_t> bytes = cv::SerializeSafetensors(map);
  const recur::impl::Status s = cv::WriteFileAtomic(path, bytes.data(), bytes.size());
  if (!s.ok()) Raise(static_cast<recur_status>(s.code()), s.message());
}

}  // namespace

NB_MODULE(_recur, m) {
  m.doc() = "The binding of recur's C API (recur.h). Import the package recur, not this module.";

  m.def("_set_error_classes", [](nb::dict classes) {
    for (auto [key, value] : classes) {
      const int status = nb::cast<int>(key);
      if (status < RECUR_INVALID_ARGUMENT || status > RECUR_INTERNAL) {
        throw nb::value_error("status out of range");
      }
      g_error_classes[status] = nb::borrow(value);
    }
  });
  // The classes are Python objects: drop them before the interpreter ends.
  nb::module_::import_("atexit").attr("register")(nb::cpp_function([]() {
    for (nb::object& o : g_error_classes) o.reset();
  }));

  m.def("version", [] { return std::string(recur_version_string()); },
        "The library's version, \"MAJOR.MINOR.PATCH\".");
  m.def("simd_target", [] { return std::string(recur_simd_target()); },
        "The SIMD target the kernels dispatch to (\"AVX3_VNNI\", \"AVX3\", \"AVX2\", \"NEON\", "
        "...): the best this build has for this CPU, under the cap of the environment variable "
        "RECUR_MAX_SIMD_TARGET.");
  m.def("backends", [] { return std::string(recur_backends()); },
        "The GEMM backends compiled into this library, e.g. \"highway, xnnpack, onednn\".");
  m.def("max_threads", [] { return recur_max_threads(); },
        "The most intra-op threads a session of this build may use (256 with a thread pool, 1 "
        "without one).");
  m.def("layouts", [] {
    nb::list names;
    for (const std::string& name : recur::impl::converter::LayoutNames()) names.append(name);
    return nb::tuple(names);
  }, "The source layouts recur.convert and recur-convert read: \"auto\" (the config's \"layout\", "
     "else detected), then each library's, as recur-convert --help lists them.");
  m.def(
      "dtypes",
      [] {
        nb::list names;
        for (recur::impl::kernels::WeightType type : recur::impl::kernels::kWeightTypes) {
          names.append(recur::impl::kernels::WeightTypeName(type));
        }
        return nb::tuple(names);
      },
      "The weight types recur.convert's dtype takes (\"f32\", \"bf16\", \"int8\", ...), as "
      "recur-convert --help lists them.");
  m.def("_convert_files", &ConvertFiles, nb::arg("weights"), nb::arg("config"), nb::arg("output"),
        nb::arg("dtype"), nb::arg("layout"), nb::arg("group"), nb::arg("state_dict_key"),
        nb::arg("quantize_head"), nb::arg("allow_extra"), nb::arg("tokenizer"),
        "recur.convert's engine (converter/convert.h); use recur.convert.");
  m.def("_write_safetensors", &WriteSafetensors, nb::arg("path"), nb::arg("tensors"),
        "recur.convert's writer of array weights; use recur.convert.");
  m.def(
      "_sample",
      [](nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> logits,
         float temperature, uint32_t top_k, float top_p, float min_p, uint64_t rng_state) {
        if (!(top_p > 0)) {  // 0 would read as the default
          RaiseInvalid("sample: top_p is " + std::to_string(top_p) + "; it must be in (0, 1]");
        }
        recur_sampler_options o = recur_sampler_options_default();
        o.temperature = temperature;
        o.top_k = top_k;
        o.top_p = top_p;
        o.min_p = min_p;
        int32_t token = 0;
        Result r;
        {
          nb::gil_scoped_release unlocked;
          r = Capture(recur_sample(logits.data(), logits.shape(0), &o, &rng_state, &token));
        }
        r.Check();
        return nb::make_tuple(token, rng_state);
      },
      nb::arg("logits"), nb::arg("temperature"), nb::arg("top_k"), nb::arg("top_p"),
      nb::arg("min_p"), nb::arg("rng_state"), "recur.sample's engine (recur_sample).");
  m.def(
      "_apply_penalties",
      [](nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu> logits,
         nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> recent,
         float repeat, float presence, float frequency, float decay) {
        if (!(repeat > 0) || !(decay > 0)) {  // 0 would read as the default
          RaiseInvalid("apply_penalties: repeat_penalty and penalty_decay must be > 0");
        }
        recur_penalty_options o = recur_penalty_options_default();
        o.repeat = repeat;
        o.presence = presence;
        o.frequency = frequency;
        o.decay = decay;
        Capture(recur_apply_penalties(logits.data(), logits.shape(0), recent.data(),
                                      recent.shape(0), &o))
            .Check();
      },
      nb::arg("logits"), nb::arg("recent"), nb::arg("repeat"), nb::arg("presence"),
      nb::arg("frequency"), nb::arg("decay"),
      "recur.apply_penalties's engine (recur_apply_penalties), in place.");
  m.def("status_string", [](int status) {
    return std::string(recur_status_string(static_cast<recur_status>(status)));
  }, nb::arg("status"), "The name of a status code (\"RECUR_INVALID_MODEL\").");

  nb::class_<Model>(
      m, "Model",
      "An immutable, loaded model (recur_model). Thread-safe: any number of sessions on any "
      "number of threads may share one.\n\n"
      "Model(source, *, mmap=True, trusted=False): source is a path (str or os.PathLike) to a "
      ".recur file, mapped read-only and used in place (the file must not change while it is "
      "mapped); or to a llama.cpp GGUF file, converted as recur.convert would into a temporary "
      "file (under TMPDIR) that is mapped and removed (converting once with recur.convert "
      "saves that at every load); or bytes-like model data, copied once into aligned memory "
      "the Model owns. "
      "mmap=False reads the file into memory instead of mapping it. trusted=True skips the "
      "FlatBuffers verifier (semantic checks still run): only for bytes verified beforehand.\n\n"
      "Raises IoError (the file cannot be opened, mapped or read; no temporary folder for a "
      "GGUF file), InvalidModel (the bytes fail verification or validation; the message names "
      "the failing check), Unsupported (a newer format version), and for a GGUF file what "
      "recur.convert raises for it.")
      .def(nb::init<nb::handle, bool, bool>(), nb::arg("source"), nb::kw_only(),
           nb::arg("mmap") = true, nb::arg("trusted") = false)
      .def_prop_ro(
          "input_kind", [](Model& m) { return InputKindName(m.info().input_kind); },
          "'tokens' (int32 token ids) or 'features' (float32 frames).")
      .def_prop_ro(
          "vocab_size", [](Model& m) { return m.info().vocab_size; },
          "Token models: ids are in [0, vocab_size).")
      .def_prop_ro(
          "feature_width", [](Model& m) { return m.info().feature_width; },
          "Feature models: floats per frame.")
      .def_prop_ro("d_model", [](Model& m) { return m.info().d_model; })
      .def_prop_ro("num_layers", [](Model& m) { return m.info().num_layers; })
      .def_prop_ro(
          "output_width", [](Model& m) { return m.info().output_width; },
          "Floats per stream per step.")
      .def_prop_ro(
          "max_positions", [](Model& m) { return m.info().max_positions; },
          "Steps per stream (learned positions, rotary tables); 0 = unbounded.")
      .def_prop_ro("parameter_count", [](Model& m) { return m.info().parameter_count; })
      .def_prop_ro(
          "state_bytes", [](Model& m) { return m.info().state_bytes; },
          "Recurrent state per stream in bytes, with compensated sums, besides the part "
          "that grows with the sequence (state_bytes_per_position).")
      .def_prop_ro(
          "state_bytes_plain_sums", [](Model& m) { return m.info().state_bytes_plain_sums; },
          "state_bytes for a session with state_sums='plain'.")
      .def_prop_ro(
          "state_bytes_per_position", [](Model& m) { return m.info().state_bytes_per_position; },
          "KV-cache bytes per position per stream (softmax attention); 0 when the state "
          "is fixed. A session holds state_bytes + this x its max_context per stream.")
      .def_prop_ro(
          "max_context_bound", [](Model& m) { return m.info().max_context_bound; },
          "The most positions a stream can hold because a mixer's parameters end there; "
          "0 = no such bound.")
      .def_prop_ro(
          "output_kind", [](Model& m) { return OutputKindName(m.info().output_kind); },
          "'values' (logits, or the d_model stream without a head), 'probabilities' "
          "(softmax head) or 'log_probabilities' (log-softmax head).")
      .def_prop_ro(
          "recurrent", [](Model& m) { return m.info().recurrent != 0; },
          "True: every block has a recurrent form, so step and prefill run. False: some "
          "block is non-causal (an encoder), and the model runs whole sequences with "
          "Session.encode only.")
      .def_prop_ro(
          "step_weight_bytes", [](Model& m) { return m.info().step_weight_bytes; },
          "Dense-layer weight bytes one step streams.")
      .def_prop_ro(
          "step_flops", [](Model& m) { return m.info().step_flops; },
          "Dense-layer FLOPs of one step of one stream.")
      .def_prop_ro(
          "source", [](Model& m) { return m.source(); },
          "The path the model was loaded from, or '<N bytes>'.")
      .def("__repr__",
           [](Model& m) {
             const recur_model_info& i = m.info();
             return "<recur.Model " + m.source() + ": " + InputKindName(i.input_kind) +
                    ", d_model " + std::to_string(i.d_model) + ", " + std::to_string(i.num_layers) +
                    " layers, " + "output_width " + std::to_string(i.output_width) + ">";
           })
      .def("session", &Session::Create, nb::arg("batch") = 1, nb::arg("threads") = 1,
           nb::arg("max_context") = 0, nb::arg("backend") = nb::none(),
           nb::arg("state_sums") = "compensated", nb::arg("prefill_chunk") = 0,
           nb::arg("weight_packing") = "auto", nb::arg("int8_activations") = "auto",
           "A new Session of `batch` independent streams, all in the initial state "
           "(recur_session_create). Its memory is allocated here; step, prefill and the state "
           "calls allocate nothing more in the runtime (the returned arrays are new).\n\n"
           "threads: intra-op threads (1: the calling thread only; at most max_threads()). "
           "max_context: for models whose state grows with the sequence (softmax attention), "
           "the positions a stream may hold; 0 = the model's max_positions, else 4096, capped "
           "at max_context_bound. backend: None/'auto' (fastest per layer, measured now), "
           "'highway', 'xnnpack' or 'onednn'. state_sums: 'compensated' (Kahan sums, the "
           "default) or 'plain' (half the linear-attention state, error growing with the "
           "sequence). prefill_chunk: positions per prefill chunk, 0 = the default. "
           "weight_packing: 'auto', 'off' or 'on'. int8_activations: 'auto', 'float' or "
           "'quantized'.\n\n"
           "Raises InvalidArgument, Unsupported (e.g. a backend this build lacks), OutOfMemory.");

  nb::class_<Tokenizer>(
      m, "Tokenizer",
      "The vocabulary a model carries: text to token ids and back (recur.h \"vocabulary\"). "
      "Encoding is RWKV's greedy longest match over the text's bytes (BlinkDL's "
      "TRIE_TOKENIZER, llama.cpp's \"rwkv\" tokenizer) or byte-level BPE (GPT-2, GPT-NeoX: "
      "Hugging Face tokenizers' encode(text).ids), as the vocabulary's kind says; decoding "
      "concatenates the tokens' bytes, and a token may hold part of a UTF-8 character. "
      "Thread-safe; keeps its model alive.\n\n"
      "Tokenizer(model) raises InvalidArgument when the model has no vocabulary (convert it "
      "with recur-convert --tokenizer, a config's \"tokenizer\", or a GGUF file that has "
      "one), Unsupported for a kind of vocabulary this runtime does not know.")
      .def(nb::init<nb::object>(), nb::arg("model"))
      .def_prop_ro("vocab_size", &Tokenizer::size,
                   "Tokens of the vocabulary: ids 0 to vocab_size - 1 (at most the model's "
                   "vocab_size, the embedding's rows).")
      .def_prop_ro("end_of_text", &Tokenizer::end_of_text,
                   "The id of the end-of-text token, or None. RWKV's has no bytes and encode "
                   "never gives it; a byte-level BPE's (\"<|endoftext|>\") is given where the "
                   "text holds it.")
      .def_prop_ro("model", &Tokenizer::model)
      .def("encode", &Tokenizer::Encode, nb::arg("text"),
           "Token ids of `text`: str (encoded as UTF-8) or bytes-like. Raises InvalidArgument "
           "naming the offset of a byte no token starts with.")
      .def("decode", &Tokenizer::Decode, nb::arg("ids"), nb::arg("errors") = "strict",
           "The text of a sequence of ids, their bytes decoded as UTF-8 with `errors` as "
           "bytes.decode takes them ('strict' raises UnicodeDecodeError on a cut character; "
           "'replace', 'ignore', ...). Raises OutOfRange naming an id not in the vocabulary.")
      .def("decode_bytes", &Tokenizer::DecodeBytes, nb::arg("ids"),
           "The bytes of a sequence of ids, one token's after another. Raises OutOfRange naming "
           "an id not in the vocabulary.")
      .def("token_bytes", &Tokenizer::TokenBytes, nb::arg("id"),
           "Token `id`'s bytes (b'' for the end-of-text token). Raises OutOfRange for an id not "
           "in the vocabulary.")
      .def("__len__", &Tokenizer::size)
      .def("__repr__", [](const Tokenizer& t) {
        return "<recur.Tokenizer of " + std::to_string(t.size()) + " tokens>";
      });

  nb::class_<Session>(
      m, "Session",
      "B independent streams of one model, each with a fixed-size recurrent state "
      "(recur_session); made by Model.session().\n\n"
      "Threading: the runtime's session is not thread-safe, so every call takes the session's "
      "lock: Python threads may share a session (their calls run one at a time); give each "
      "thread its own session (or fork()) to run them in parallel. Calls release the GIL while "
      "the runtime computes.\n\n"
      "Inputs are numpy arrays (or anything numpy.asarray takes): int32 token ids or float32 "
      "frames, as the model's input_kind says. A C-contiguous array of that dtype is read in "
      "place; other integer (tokens) or numeric (frames) arrays are converted (a copy); other "
      "dtypes raise TypeError, wrong shapes InvalidArgument (a ValueError). On any error the "
      "session is left unchanged. A closed session raises InvalidArgument.")
      .def_prop_ro("batch", &Session::batch, "Streams stepped together.")
      .def_prop_ro("model", &Session::model, "The Model this session runs.")
      .def_prop_ro("closed", &Session::closed)
      .def_prop_ro("state_size", &Session::StateSize,
                   "Bytes of one stream's saved state (header + payload).")
      .def_prop_ro("backends", &Session::Backends,
                   "Which GEMM backend runs the dense layers, per planned row count, and the "
                   "bytes of weight copies held, e.g. 'rows 64: highway x33; weight copies 0 B'.")
      .def("step", &Session::Step, nb::arg("x"),
           "Advances every stream by one element in RNN mode (constant time and memory per "
           "element): x is (batch,) int32 token ids or (batch, feature_width) float32 frames. "
           "Returns a new (batch, output_width) float32 array.\n\n"
           "Raises InvalidArgument (wrong shape, non-finite features: NaN/Inf inputs are "
           "rejected, never propagated), OutOfRange (a token id outside the vocabulary, a stream "
           "past max_positions or max_context), Unsupported (an encoder model: use encode).")
      .def("prefill", &Session::Prefill, nb::arg("xs"), nb::arg("outputs") = true,
           "Feeds `steps` elements to every stream at once in chunked-parallel mode (a prompt, "
           "a whole utterance): xs is (batch, steps) token ids or (batch, steps, feature_width) "
           "frames. Returns the (batch, steps, output_width) outputs, or None with "
           "outputs=False (only the state is wanted). Leaves the state that `steps` calls of "
           "step leave, to floating-point tolerance. Errors as step.")
      .def("encode", &Session::Encode, nb::arg("xs"),
           "Runs every stream's whole sequence at once from an empty history and returns the "
           "(batch, steps, output_width) outputs; the streams' states are neither used nor "
           "changed. How encoder (non-recurrent) models run; for causal models it equals a "
           "reset followed by a prefill. Allocates working memory for batch x steps positions "
           "on each call. At most 2^24 positions per call (OutOfRange); errors otherwise as "
           "prefill.")
      .def("reset", &Session::Reset, nb::arg("stream") = -1,
           "Returns `stream` (or every stream, for -1) to the initial state. Raises OutOfRange.")
      .def("save_state", &Session::SaveState, nb::arg("stream"),
           "The state of `stream` as bytes (state_size of them), naming the model it belongs to "
           "and carrying a checksum. Raises OutOfRange for a bad stream.")
      .def("load_state", &Session::LoadState, nb::arg("stream"), nb::arg("state"),
           "Replaces the state of `stream` with bytes from save_state. A state from another "
           "model, from a session with another max_context or other state_sums, truncated or "
           "corrupted, raises InvalidState and leaves the session unchanged.")
      .def("fork", &Session::Fork,
           "An independent copy of this session, states included (recur_session_fork).")
      .def("close", &Session::Close,
           "Frees the session's memory now; later calls raise InvalidArgument. Idempotent.")
      .def(
          "generate",
          [](nb::handle self, nb::handle prompt, size_t n, float temperature, uint32_t top_k,
             float top_p, uint64_t seed, nb::handle stop, float repeat_penalty,
             float presence_penalty, float frequency_penalty, float penalty_decay,
             size_t penalty_last_n, float min_p) {
            recur_penalty_options penalties = recur_penalty_options_default();
            penalties.repeat = repeat_penalty;
            penalties.presence = presence_penalty;
            penalties.frequency = frequency_penalty;
            penalties.decay = penalty_decay;
            return new Generation(nb::borrow(self), prompt, n, temperature, top_k, top_p, min_p,
                                  seed, stop, penalties, penalty_last_n);
          },
          nb::arg("prompt"), nb::arg("n"), nb::arg("temperature") = 1.0f, nb::arg("top_k") = 0,
          nb::arg("top_p") = 1.0f, nb::arg("seed") = 0, nb::arg("stop") = nb::none(),
          nb::arg("repeat_penalty") = 1.0f, nb::arg("presence_penalty") = 0.0f,
          nb::arg("frequency_penalty") = 0.0f, nb::arg("penalty_decay") = 1.0f,
          nb::arg("penalty_last_n") = 0, nb::arg("min_p") = 0.0f,
          "Reads `prompt` (text, encoded with the model's vocabulary, or a sequence of token "
          "ids; at least one token) and returns an iterator over up to `n` generated token ids "
          "(a Generation). Each id is drawn with recur_sample from the logits of the token "
          "before (temperature 0 or top_k 1: greedy; top_k 0: all tokens; top_p in (0, 1]; "
          "min_p in [0, 1], 0: all tokens; "
          "`seed` starts the random generator, so a seed gives the same ids on every "
          "platform), after recur_apply_penalties over the last `penalty_last_n` ids this "
          "generation has drawn (0: all of them; repeat_penalty 1, presence_penalty 0 and "
          "frequency_penalty 0 change nothing; penalty_decay in (0, 1] weighs an earlier "
          "draw by penalty_decay to the power of the draws after it), and read into the "
          "session before it is returned: at any point the "
          "session's state holds the prompt and every id returned. Generation ends after n "
          "ids, at the model's end-of-text token (read, not returned), or after the id whose "
          "bytes complete one of `stop` (a str or a list of str; returned). Batch-1 token "
          "sessions only. recur.stream_text turns the ids into text as they come.\n\n"
          "Raises InvalidArgument (an empty prompt, bad sampling or penalty options, a stop "
          "text with a "
          "model without vocabulary), and the errors of step and prefill.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Session& s, nb::args) { s.Close(); });

  nb::class_<Generation>(m, "Generation",
                         "The iterator Session.generate returns: token ids, drawn and read "
                         "into the session one per next().")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", &Generation::Next)
      .def_prop_ro("generated", &Generation::generated, "Ids drawn so far.")
      .def_prop_ro("rng_state", &Generation::rng_state,
                   "The random generator's state now (splitmix64): a later generate with this "
                   "as its seed continues the same random sequence.");
}
