// The machine's limits, measured, so benchmarks can print how far a number
// is from what the hardware allows.
#ifndef RECUR_BENCHMARKS_MACHINE_LIMITS_H_
#define RECUR_BENCHMARKS_MACHINE_LIMITS_H_

#include <cstddef>

namespace bench {

// FLOP/s of one core running independent f32 FMA chains on the best SIMD
// target (2 FLOP per lane per FMA); best of several runs.
double MeasureFmaPeak();

// Multiply-adds × 2 per second of one core running independent chains of an
// s8 × s8 dot-product step the SIMD target dispatched to now has, the
// fastest of: vpdpbusd where `vnni` (AVX3_VNNI); sign, maddubs, madd and add
// on 512 and on 256 (or 128) bits (x86); vmull/vmlal and vpadal, or sdot
// (arm64). 0 on targets without integer tiles in the int8 kernels
// (dense_i8dot-inl.h: their int8 layers run as f32). Best of several runs.
double MeasureInt8DotPeak(bool vnni);

// Bytes/s of one core summing a `bytes`-sized buffer that was just read
// (so it is as warm as weights are between steps); best of several runs.
// With `threads` > 1, that many threads at once, each summing its own
// buffer of bytes / threads: their bytes over the slowest one's time, best of
// several rounds that start together (what the memory gives them together,
// which on many machines is far less than `threads` times one core's).
double MeasureReadBandwidth(size_t bytes, unsigned threads = 1);

}  // namespace bench

#endif  // RECUR_BENCHMARKS_MACHINE_LIMITS_H_
