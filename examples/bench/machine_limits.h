// The machine's limits, measured, so benchmarks can print how far a number
// is from what the hardware allows.
#ifndef RECUR_EXAMPLES_BENCH_MACHINE_LIMITS_H_
#define RECUR_EXAMPLES_BENCH_MACHINE_LIMITS_H_

#include <cstddef>

namespace recur::bench {

// FLOP/s of one core running independent f32 FMA chains on the best SIMD
// target (2 FLOP per lane per FMA); best of several runs.
double MeasureFmaPeak();

// Bytes/s of one core summing a `bytes`-sized buffer that was just read
// (so it is as warm as weights are between steps); best of several runs.
double MeasureReadBandwidth(size_t bytes);

}  // namespace recur::bench

#endif  // RECUR_EXAMPLES_BENCH_MACHINE_LIMITS_H_
