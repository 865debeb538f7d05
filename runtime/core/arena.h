// Arena: a bump allocator over one block of memory, the form of a session's
// memory plan (docs/design.md principle 4: the caller owns memory). Without a
// block it only counts, so that one carving function both sizes a plan and
// carves it: run it on a counting arena, get a block of bytes(), run it
// again on an arena over that block.
#ifndef RECUR_CORE_ARENA_H_
#define RECUR_CORE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <limits>

namespace recur::impl {

class Arena {
 public:
  // Every allocation starts on this boundary (a cache line; Highway's
  // aligned loads need at most HWY_ALIGNMENT = 64 on x86 and Arm).
  static constexpr size_t kAlignment = 64;

  // A counting arena: Allocate returns null and only adds up sizes.
  Arena() = default;
  // Carves from [block, block + size); the block need not be aligned (the
  // start is rounded up, which bytes() allows for).
  Arena(void* block, size_t size) : counting_(false) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(block);
    const uintptr_t aligned = (start + kAlignment - 1) / kAlignment * kAlignment;
    const size_t skipped = aligned - start;
    base_ = reinterpret_cast<unsigned char*>(aligned);
    size_ = size > skipped ? size - skipped : 0;
  }

  // Room for n objects of T (uninitialised), kAlignment-aligned; null when
  // counting or when they do not fit. used() grows either way, saturating,
  // so a caller can carve everything and then check fits() once.
  template <typename T>
  T* Allocate(size_t n) {
    static_assert(alignof(T) <= kAlignment, "over-aligned type");
    constexpr size_t kMax = std::numeric_limits<size_t>::max();
    const size_t offset = Round(used_);
    if (offset == kMax || n > (kMax - offset) / sizeof(T)) {
      used_ = kMax;
      return nullptr;
    }
    used_ = offset + n * sizeof(T);
    if (counting_ || used_ > size_) return nullptr;
    return reinterpret_cast<T*>(base_ + offset);
  }

  // Bytes carved so far, alignment padding included.
  size_t used() const { return used_; }
  // Bytes a caller's (possibly unaligned) block needs for the allocations
  // made so far.
  size_t bytes() const {
    const size_t padded = Round(used_);
    return padded > std::numeric_limits<size_t>::max() - kAlignment ? padded
                                                                     : padded + kAlignment - 1;
  }
  bool counting() const { return counting_; }
  // False once an allocation did not fit (always true when counting).
  bool fits() const { return counting_ || used_ <= size_; }

 private:
  static size_t Round(size_t n) {
    return n > std::numeric_limits<size_t>::max() - (kAlignment - 1)
               ? std::numeric_limits<size_t>::max()
               : (n + kAlignment - 1) / kAlignment * kAlignment;
  }

  bool counting_ = true;
  unsigned char* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

}  // namespace recur::impl

#endif  // RECUR_CORE_ARENA_H_
