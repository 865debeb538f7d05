// State blobs: one stream's recurrent state, with a header that ties it to
// its model and a checksum that catches corruption.
#include <cstring>

#include "core/hash.h"
#include "engine/session.h"
#include "mixers/mixer.h"

namespace recur::impl {
namespace {

constexpr char kStateMagic[8] = {'R', 'C', 'U', 'R', 'S', 'T', 'A', 'T'};
constexpr uint32_t kStateVersion = 1;

struct StateHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t model_fingerprint;
  uint64_t payload_bytes;  // state floats × 4
  uint64_t position;       // elements the stream has consumed
  uint64_t checksum;       // FNV-1a of the header (checksum = 0) and payload
};
static_assert(sizeof(StateHeader) == 48, "state header layout is part of the blob format");

uint64_t Checksum(const StateHeader& header, const void* payload) {
  StateHeader h = header;
  h.checksum = 0;
  return Fnv1a64(payload, header.payload_bytes, Fnv1a64(&h, sizeof(h)));
}

}  // namespace

// A blob saved with plain sums lacks the compensations (Mixer::
// compensation_floats): its fingerprint is the model's, hashed once more, so
// that neither kind of session reads the other's layout. Where no mixer has
// compensations the two layouts are one, and so is the fingerprint. Blobs of
// compensated sessions keep the model's fingerprint (the format before plain
// sums existed).
uint64_t Session::state_fingerprint(bool compensated_sums) const {
  bool has_compensations = false;
  for (const BlockView& b : model_->blocks) {
    has_compensations = has_compensations || b.mixer->compensation_floats() != 0;
  }
  if (compensated_sums || !has_compensations) return model_->fingerprint();
  constexpr char kPlainSums[] = "recur state: plain sums";
  return Fnv1a64(kPlainSums, sizeof(kPlainSums) - 1, model_->fingerprint());
}

size_t Session::state_blob_size() const {
  return sizeof(StateHeader) + state_floats() * sizeof(float);
}

Status Session::SaveState(int stream, void* buffer, size_t size) const {
  if (stream < 0 || stream >= static_cast<int>(batch_)) {
    return OutOfRange("stream %d is out of range [0, %zu)", stream, batch_);
  }
  if (buffer == nullptr) return InvalidArgument("state buffer is null");
  if (size < state_blob_size()) {
    return InvalidArgument("state buffer has %zu bytes, needs %zu", size, state_blob_size());
  }
  StateHeader h{};
  std::memcpy(h.magic, kStateMagic, sizeof(kStateMagic));
  h.version = kStateVersion;
  h.header_bytes = sizeof(StateHeader);
  h.model_fingerprint = state_fingerprint(compensated_sums_);
  h.payload_bytes = state_floats() * sizeof(float);
  h.position = positions_[size_t(stream)];
  const float* state = stream_state(size_t(stream));
  h.checksum = Checksum(h, state);
  auto* out = static_cast<unsigned char*>(buffer);
  std::memcpy(out, &h, sizeof(h));
  std::memcpy(out + sizeof(h), state, h.payload_bytes);
  return Status::Ok();
}

constexpr uint64_t kMaxStatePosition = uint64_t{1} << 62;

Status Session::LoadState(int stream, const void* buffer, size_t size) {
  if (stream < 0 || stream >= static_cast<int>(batch_)) {
    return OutOfRange("stream %d is out of range [0, %zu)", stream, batch_);
  }
  if (buffer == nullptr) return InvalidArgument("state buffer is null");
  StateHeader h;
  if (size < sizeof(h)) return InvalidState("state blob is truncated (%zu bytes)", size);
  std::memcpy(&h, buffer, sizeof(h));
  if (std::memcmp(h.magic, kStateMagic, sizeof(kStateMagic)) != 0) {
    return InvalidState("not a recur state blob (bad magic)");
  }
  if (h.version != kStateVersion || h.header_bytes != sizeof(StateHeader)) {
    return InvalidState("state blob version %u is not supported (expected %u)", h.version,
                        kStateVersion);
  }
  if (h.model_fingerprint != state_fingerprint(compensated_sums_)) {
    if (h.model_fingerprint == state_fingerprint(!compensated_sums_)) {
      return InvalidState("state blob was saved by a session with %s state sums; this session "
                          "keeps %s sums (state_sums must match)",
                          compensated_sums_ ? "plain" : "compensated",
                          compensated_sums_ ? "compensated" : "plain");
    }
    return InvalidState("state blob belongs to another model (fingerprint %016llx, this "
                        "session's %016llx)", static_cast<unsigned long long>(h.model_fingerprint),
                        static_cast<unsigned long long>(state_fingerprint(compensated_sums_)));
  }
  if (h.payload_bytes != state_floats() * sizeof(float)) {
    // Same model: only a KV cache's size (max_context) can differ.
    return InvalidState("state blob holds %llu bytes of state, this session %zu%s",
                        static_cast<unsigned long long>(h.payload_bytes),
                        state_floats() * sizeof(float),
                        grows_ ? ": it was saved by a session with another max_context" : "");
  }
  if (size != sizeof(h) + h.payload_bytes) {
    return InvalidState("state blob is %zu bytes, expected %zu (pass the blob's exact length, "
                        "recur_session_state_size)", size, state_blob_size());
  }
  const auto* payload = static_cast<const unsigned char*>(buffer) + sizeof(h);
  if (Checksum(h, payload) != h.checksum) {
    return InvalidState("state blob checksum mismatch (corrupted)");
  }
  // No stream gets near 2^62 positions; mixers may compute p + window and
  // the like (a forged 2^64 − 1 would wrap AFT-local's window to nothing and
  // read far out of bounds).
  if (h.position > kMaxStatePosition) {
    return InvalidState("state blob position %llu is past any stream's length (2^62)",
                        static_cast<unsigned long long>(h.position));
  }
  if (model_->max_positions != 0 && h.position > model_->max_positions) {
    return InvalidState("state blob position %llu exceeds the model's %u positions",
                        static_cast<unsigned long long>(h.position), model_->max_positions);
  }
  // A KV cache holds max_context positions; a blob claiming more would make
  // the next step write past it (found by fuzz_state_load).
  if (grows_ && h.position > max_context_) {
    return InvalidState("state blob position %llu exceeds the session's max_context of %zu",
                        static_cast<unsigned long long>(h.position), max_context_);
  }
  std::memcpy(state_ + size_t(stream) * state_stride_, payload, h.payload_bytes);
  positions_[size_t(stream)] = h.position;
  return Status::Ok();
}

}  // namespace recur::impl
