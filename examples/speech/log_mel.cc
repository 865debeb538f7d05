#include "log_mel.h"

#include <kiss_fftr.h>

#include <algorithm>
#include <cmath>

namespace speech {
namespace {

double Mel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double Hz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

}  // namespace

LogMel::LogMel()
    : fft_(kiss_fftr_alloc(kFft, 0, nullptr, nullptr)),
      window_(kWindow),
      filters_(static_cast<size_t>(kMels) * (kFft / 2 + 1)),
      buffer_(kFft, 0.0f),
      power_(kFft / 2 + 1) {
  const double pi = std::acos(-1.0);
  for (int i = 0; i < kWindow; ++i)
    window_[i] = static_cast<float>(0.5 - 0.5 * std::cos(2 * pi * i / kWindow));
  const double top = Mel(kSampleRate / 2.0);
  std::vector<double> corner(kMels + 2);
  for (int i = 0; i < kMels + 2; ++i) corner[i] = Hz(top * i / (kMels + 1));
  for (int m = 1; m <= kMels; ++m)
    for (int k = 0; k <= kFft / 2; ++k) {
      const double f = static_cast<double>(k) * kSampleRate / kFft;
      const double up = (f - corner[m - 1]) / (corner[m] - corner[m - 1]);
      const double down = (corner[m + 1] - f) / (corner[m + 1] - corner[m]);
      filters_[static_cast<size_t>(m - 1) * (kFft / 2 + 1) + k] = std::max(0.0, std::min(up, down));
    }
  pending_.reserve(kWindow + kHop);
}

LogMel::~LogMel() { kiss_fftr_free(fft_); }

void LogMel::Reset() { pending_.clear(); }

size_t LogMel::Push(const float* samples, size_t count, std::vector<float>* frames) {
  size_t made = 0;
  while (count > 0) {
    const size_t take = std::min(count, static_cast<size_t>(kWindow) - pending_.size());
    pending_.insert(pending_.end(), samples, samples + take);
    samples += take;
    count -= take;
    if (pending_.size() == static_cast<size_t>(kWindow)) {
      Frame(frames);
      ++made;
      pending_.erase(pending_.begin(), pending_.begin() + kHop);
    }
  }
  return made;
}

void LogMel::Frame(std::vector<float>* frames) {
  for (int i = 0; i < kWindow; ++i) buffer_[i] = pending_[i] * window_[i];
  kiss_fft_cpx spectrum[kFft / 2 + 1];
  kiss_fftr(fft_, buffer_.data(), spectrum);
  for (int k = 0; k <= kFft / 2; ++k)
    power_[k] = double{spectrum[k].r} * spectrum[k].r + double{spectrum[k].i} * spectrum[k].i;
  for (int m = 0; m < kMels; ++m) {
    const double* w = &filters_[static_cast<size_t>(m) * (kFft / 2 + 1)];
    double energy = 0;
    for (int k = 0; k <= kFft / 2; ++k) energy += w[k] * power_[k];
    frames->push_back(static_cast<float>(std::log(energy + 1e-6)));
  }
}

}  // namespace speech
