// PyTorch's CPU random normals, for tensors a library draws from a fixed seed
// at every forward instead of storing them (Hugging Face Reformer's LSH
// rotations: torch.manual_seed(hash_seed); torch.randn(shape)).
#ifndef RECUR_CONVERTER_TORCH_RANDOM_H_
#define RECUR_CONVERTER_TORCH_RANDOM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace recur::impl::converter {

// What `torch.manual_seed(seed); torch.randn(count)` returns in float32 on a
// CPU: torch's Mersenne Twister (std::mt19937 seeded with the seed's low 32
// bits), then for count >= 16 its Box-Muller fill of 16 values at a time
// from 24-bit uniforms (the last 16 redrawn when count is not a multiple of
// 16), for count < 16 one double normal per element from 53-bit uniforms.
// Computed with the C library's float log, sin and cos, as torch's baseline
// kernel does; torch's AVX2 kernel uses polynomial approximations of its own
// that differ in the last bits (docs/layouts.md, Hugging Face Reformer).
std::vector<float> TorchRandnFloat(uint64_t seed, std::size_t count);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_TORCH_RANDOM_H_
