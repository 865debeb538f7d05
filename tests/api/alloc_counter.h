// Counts calls of the global operator new, for tests that check a code path
// does not allocate. Linking alloc_counter.cc replaces the global allocator
// of the whole test executable.
#ifndef RECUR_TESTS_API_ALLOC_COUNTER_H_
#define RECUR_TESTS_API_ALLOC_COUNTER_H_

namespace recur::testing {

long AllocationCount();

}  // namespace recur::testing

#endif  // RECUR_TESTS_API_ALLOC_COUNTER_H_
