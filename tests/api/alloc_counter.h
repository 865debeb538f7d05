// Counts allocations, for tests that check a code path does not allocate.
// Linking alloc_counter.cc replaces the global operator new of the whole
// test executable and counts every malloc-family call: by replacing malloc
// (forwarding to glibc's __libc_* functions), or under a sanitizer, whose
// allocator cannot be replaced, through its allocation hook.
#ifndef RECUR_TESTS_API_ALLOC_COUNTER_H_
#define RECUR_TESTS_API_ALLOC_COUNTER_H_

namespace recur::impl::testing {

// Calls of the global operator new.
long AllocationCount();
// Heap allocations of any kind: malloc, calloc, realloc, aligned ones (and
// operator new, which allocates with malloc).
long HeapAllocationCount();

}  // namespace recur::impl::testing

#endif  // RECUR_TESTS_API_ALLOC_COUNTER_H_
