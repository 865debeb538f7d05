// Fuzz target: model bytes → load (Verifier + semantic validation) → session
// → steps, a prefill, an encode. Any input must give a status, never a crash,
// a sanitizer report or a leak. Seeds: tests/fuzz/make_seeds.cc.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_limits.h"
#include "recur/recur.h"

namespace {

void Exercise(const recur_model* model) {
  recur_model_info info{};
  info.struct_size = sizeof(info);
  if (recur_model_get_info(model, &info) != RECUR_OK || !recur::impl::fuzz::SmallEnough(info))
    return;
  constexpr uint32_t kBatch = 2;
  constexpr size_t kSteps = 3;
  recur_session_options options = recur_session_options_default();
  options.batch = kBatch;
  options.prefill_chunk = recur::impl::fuzz::kPrefillChunk;
  options.backend = "highway";
  options.prefill_min = 1;
  options.max_context = recur::impl::fuzz::kMaxContext;
  recur_session* session = nullptr;
  if (recur_session_create(model, &options, &session) != RECUR_OK) return;
  const bool tokens = info.input_kind == RECUR_INPUT_TOKENS;
  const size_t per_element = tokens ? 1 : info.feature_width;
  std::vector<int32_t> ids(kBatch * kSteps);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = info.vocab_size ? int32_t(i % info.vocab_size) : 0;
  std::vector<float> features(kBatch * kSteps * per_element);
  for (size_t i = 0; i < features.size(); ++i) features[i] = float(i % 7) * 0.25f - 0.75f;
  std::vector<float> out(kBatch * kSteps * info.output_width + 1);
  auto input = [&](size_t elements) {
    recur_input in{};
    if (tokens) in.tokens = ids.data(); else in.features = features.data();
    in.count = kBatch * elements * per_element;
    return in;
  };
  recur_input one = input(1);
  if (recur_session_step(session, &one, out.data()) == RECUR_OK) {
    recur_input chunk = input(kSteps);
    recur_session_prefill(session, kSteps, &chunk, out.data());
    recur_session_step(session, &one, out.data());
    size_t size = 0;
    if (recur_session_state_size(session, &size) == RECUR_OK && size < (64u << 20)) {
      std::vector<unsigned char> blob(size);
      if (recur_session_state_save(session, 1, blob.data(), size) == RECUR_OK) {
        recur_session_state_load(session, 0, blob.data(), size);
      }
    }
  } else {
    recur_input all = input(kSteps);  // encoder-only models
    recur_session_encode(session, kSteps, &all, out.data());
  }
  recur_session_free(session);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // load_buffer reads weights in place with aligned loads: give it aligned bytes.
  const size_t padded = (size + 63) / 64 * 64;
  std::unique_ptr<void, decltype(&std::free)> bytes(std::aligned_alloc(64, padded ? padded : 64),
                                                    &std::free);
  if (size) std::memcpy(bytes.get(), data, size);
  recur_model* model = nullptr;
  if (recur_model_load_buffer(bytes.get(), size, nullptr, &model) == RECUR_OK) {
    Exercise(model);
    recur_model_free(model);
  }
  return 0;
}
