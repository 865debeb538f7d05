"""The speech front-end: 40 log-mel filterbank energies every 10 ms.

The C++ twin is examples/speech/log_mel.cc; the two agree within 1e-4
(tests/examples/speech_frontend_parity.py). Definition, for 16 kHz samples x:

  frame t        x[160·t : 160·t + 400] (25 ms every 10 ms; only whole frames, so a
                 stream of n samples has (n − 400) // 160 + 1 frames, and frame t is
                 known as soon as its last sample arrives)
  window         periodic Hann, w[i] = 0.5 − 0.5·cos(2πi / 400)
  spectrum       |rfft(w·frame, 512)|²  (bins k = 0..256 at k·16000/512 Hz)
  mel filters    40 triangles with HTK mel(f) = 2595·log10(1 + f/700), corners
                 equally spaced in mel from 0 Hz to 8000 Hz, weight of bin k in
                 filter m = max(0, min((f_k − f_m−1)/(f_m − f_m−1), (f_m+1 − f_k)/(f_m+1 − f_m)))
  output         log(filters · spectrum + 1e-6)
"""

import math

import torch
from torch import Tensor

SAMPLE_RATE = 16000
WINDOW = 400      # 25 ms
HOP = 160         # 10 ms
N_FFT = 512
N_MELS = 40
FLOOR = 1e-6


def _mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def _hz(m):
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def mel_filters(dtype=torch.float64) -> Tensor:
    """(N_MELS, N_FFT // 2 + 1) triangular filter weights."""
    top = _mel(SAMPLE_RATE / 2)
    corners = [_hz(top * i / (N_MELS + 1)) for i in range(N_MELS + 2)]
    freqs = torch.arange(N_FFT // 2 + 1, dtype=torch.float64) * SAMPLE_RATE / N_FFT
    rows = []
    for m in range(1, N_MELS + 1):
        lo, mid, hi = corners[m - 1], corners[m], corners[m + 1]
        rows.append(torch.clamp(torch.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), min=0))
    return torch.stack(rows).to(dtype)


def frame_count(samples: int) -> int:
    return 0 if samples < WINDOW else (samples - WINDOW) // HOP + 1


def log_mel(x: Tensor) -> Tensor:
    """x (n,) samples in [-1, 1] → (frame_count(n), N_MELS) float32, computed in float64."""
    x = x.to(torch.float64)
    n = frame_count(len(x))
    if n == 0:
        return torch.zeros(0, N_MELS)
    frames = x.unfold(0, WINDOW, HOP)[:n]                                          # (T, 400)
    window = 0.5 - 0.5 * torch.cos(2 * math.pi * torch.arange(WINDOW, dtype=torch.float64) / WINDOW)
    power = torch.fft.rfft(frames * window, N_FFT).abs() ** 2                       # (T, 257)
    return torch.log(power @ mel_filters().T + FLOOR).float()
