// The speech front-end: 40 log-mel filterbank energies every 10 ms from 16 kHz
// audio, computed as samples arrive. The definition (and its PyTorch twin, which
// training uses) is models/reference/recur_ref/log_mel.py; the two agree within
// 1e-4 (tests/examples/speech_frontend_parity.py). FFT: kissfft.
#ifndef RECUR_EXAMPLES_SPEECH_LOG_MEL_H_
#define RECUR_EXAMPLES_SPEECH_LOG_MEL_H_

#include <cstddef>
#include <vector>

struct kiss_fftr_state;

namespace speech {

constexpr int kSampleRate = 16000;
constexpr int kWindow = 400;  // 25 ms
constexpr int kHop = 160;     // 10 ms
constexpr int kFft = 512;
constexpr int kMels = 40;

// Streaming log-mel: Push() any number of samples at a time; every frame whose
// last sample has arrived is appended to `frames` (kMels floats each). Memory is
// fixed (one window of samples), whatever the length of the stream.
class LogMel {
 public:
  LogMel();
  ~LogMel();
  LogMel(const LogMel&) = delete;
  LogMel& operator=(const LogMel&) = delete;

  // samples in [-1, 1]; returns the number of frames appended.
  size_t Push(const float* samples, size_t count, std::vector<float>* frames);
  void Reset();

 private:
  void Frame(std::vector<float>* frames);

  kiss_fftr_state* fft_;
  std::vector<float> window_;        // (kWindow,) periodic Hann
  std::vector<double> filters_;      // (kMels, kFft/2 + 1)
  std::vector<float> pending_;       // samples not yet consumed, < kWindow + kHop
  std::vector<float> buffer_;        // (kFft,) windowed, zero-padded frame
  std::vector<double> power_;        // (kFft/2 + 1,)
};

}  // namespace speech

#endif  // RECUR_EXAMPLES_SPEECH_LOG_MEL_H_
