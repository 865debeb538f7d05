// Fuzz target: state blob → recur_session_state_load → steps, on small models
// with every kind of state (KV cache, window rings, linear-attention sums,
// FLASH chunk buffers). Input byte 0: bits 0-5 pick the model, bit 6 a
// session with plain state sums (a layout without compensations), bit 7 asks
// the harness to stamp the blob with the session's fingerprint and a valid
// checksum, so that mutations reach the payload checks behind them (a blob
// is otherwise refused at the checksum, as it should be). Seeds: saved blobs
// of both kinds of session (make_seeds.cc).
#include <cstring>
#include <memory>
#include <vector>

#include "core/hash.h"
#include "recur/recur.h"
#include "state_fuzz_models.h"

namespace {

// recur_session_state_save's header (runtime/engine/state_blob.cc).
constexpr size_t kHeaderBytes = 48, kFingerprintAt = 16, kChecksumAt = 40, kPayloadBytesAt = 24;

struct Loaded {
  recur::impl::converter::AlignedBytes bytes;
  recur_model* model = nullptr;
  size_t out_width = 0;
  ~Loaded() { recur_model_free(model); }  // at exit, before LeakSanitizer looks
};

Loaded* ModelFor(size_t index) {
  static std::vector<std::unique_ptr<Loaded>> models = [] {
    std::vector<std::unique_ptr<Loaded>> all;
    for (const char* config : recur::impl::fuzz::StateFuzzConfigs()) {
      auto m = std::make_unique<Loaded>();
      m->bytes = recur::impl::testing::BuildTestModel(config, 1);
      if (m->bytes.empty() ||
          recur_model_load_buffer(m->bytes.data(), m->bytes.size(), nullptr, &m->model) != RECUR_OK) {
        std::abort();  // the harness itself is broken
      }
      recur_model_info info{};
      info.struct_size = sizeof(info);
      recur_model_get_info(m->model, &info);
      m->out_width = info.output_width;
      all.push_back(std::move(m));
    }
    return all;
  }();
  return models[index % models.size()].get();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Loaded* m = ModelFor(data[0] & 0x3f);
  const bool plain = data[0] & 0x40;
  const bool stamp = data[0] & 0x80;
  std::vector<uint8_t> blob(data + 1, data + size);
  recur_session_options options = recur_session_options_default();
  options.batch = 2;
  options.backend = "highway";
  options.max_context = recur::impl::fuzz::kStateFuzzMaxContext;
  options.state_sums = plain ? RECUR_STATE_SUMS_PLAIN : RECUR_STATE_SUMS_COMPENSATED;
  recur_session* session = nullptr;
  if (recur_session_create(m->model, &options, &session) != RECUR_OK) std::abort();
  if (stamp && blob.size() >= kHeaderBytes) {
    std::vector<uint8_t> valid(64);
    size_t valid_size = 0;
    recur_session_state_size(session, &valid_size);
    valid.resize(valid_size);
    recur_session_state_save(session, 0, valid.data(), valid.size());
    std::memcpy(blob.data() + kFingerprintAt, valid.data() + kFingerprintAt, 8);
    uint64_t payload_bytes;
    std::memcpy(&payload_bytes, blob.data() + kPayloadBytesAt, 8);
    if (payload_bytes <= blob.size() - kHeaderBytes) {
      std::memset(blob.data() + kChecksumAt, 0, 8);
      const uint64_t checksum =
          recur::impl::Fnv1a64(blob.data() + kHeaderBytes, payload_bytes,
                               recur::impl::Fnv1a64(blob.data(), kHeaderBytes));
      std::memcpy(blob.data() + kChecksumAt, &checksum, 8);
    }
  }
  if (recur_session_state_load(session, 1, blob.data(), blob.size()) == RECUR_OK) {
    std::vector<float> out(2 * m->out_width);
    const int32_t tokens[2] = {1, 2};
    const float features[2 * 5] = {0.5f, -1, 0.25f, 2, 0, 1, 1, -0.5f, 0, 0.75f};
    recur_model_info info{};
    info.struct_size = sizeof(info);
    recur_model_get_info(m->model, &info);
    recur_input in{};
    if (info.input_kind == RECUR_INPUT_TOKENS) {
      in = {tokens, nullptr, 2};
    } else {
      in = {nullptr, features, 2 * info.feature_width};
    }
    for (int t = 0; t < 3; ++t) {
      if (recur_session_step(session, &in, out.data()) != RECUR_OK) break;
    }
  }
  recur_session_free(session);
  return 0;
}
