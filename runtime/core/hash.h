// Non-cryptographic 64-bit hashing for fingerprints and checksums.
#ifndef RECUR_CORE_HASH_H_
#define RECUR_CORE_HASH_H_

#include <cstddef>
#include <cstdint>

namespace recur::impl {

// FNV-1a over `size` bytes, continuing from `seed` (pass the previous result
// to hash discontiguous ranges as one).
uint64_t Fnv1a64(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ull);

// A faster FNV-1a variant that mixes 8 bytes at a time, for fingerprinting
// megabytes of weights. Not compatible with Fnv1a64.
uint64_t Fnv1a64Words(const void* data, size_t size);

}  // namespace recur::impl

#endif  // RECUR_CORE_HASH_H_
