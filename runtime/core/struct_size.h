// struct_size checks for the C API's versioned structs (recur.h): a caller
// built against an older header passes a shorter struct, which ends between
// two fields; a size that ends inside a field (half of a pointer) is refused
// rather than read.
#ifndef RECUR_CORE_STRUCT_SIZE_H_
#define RECUR_CORE_STRUCT_SIZE_H_

#include <cstddef>

namespace recur::impl {

struct FieldSpan {
  size_t offset, size;
};

// True when a struct of `struct_size` bytes would end inside one of `fields`.
template <size_t N>
constexpr bool SplitsAField(size_t struct_size, const FieldSpan (&fields)[N]) {
  for (const FieldSpan& f : fields) {
    if (struct_size > f.offset && struct_size < f.offset + f.size) return true;
  }
  return false;
}

// True when `fields` (in declaration order) cover T up to its tail padding:
// a field appended to T but not to its table fails this at compile time.
template <typename T, size_t N>
constexpr bool CoversStruct(const FieldSpan (&fields)[N]) {
  const size_t end = fields[N - 1].offset + fields[N - 1].size;
  return (end + alignof(T) - 1) / alignof(T) * alignof(T) == sizeof(T);
}

}  // namespace recur::impl

#define RECUR_FIELD_SPAN(T, field) \
  ::recur::impl::FieldSpan { offsetof(T, field), sizeof(static_cast<T*>(nullptr)->field) }

#endif  // RECUR_CORE_STRUCT_SIZE_H_
