// Counts global operator new calls in a test binary (testonly), so tests
// can prove that a warmed-up path does not touch the heap, as
// netstack/buffer/buffer_test.cc does.
#ifndef NETSTACK_IP_ALLOC_COUNTER_H_
#define NETSTACK_IP_ALLOC_COUNTER_H_

#include <cstdint>

namespace netstack::ip::testing {

// operator new calls (all forms) since the program started.
uint64_t HeapAllocations();

}  // namespace netstack::ip::testing

#endif  // NETSTACK_IP_ALLOC_COUNTER_H_
