// Unguessable keys for the runtime's TCP and UDP layers (runtime.h).
#ifndef NETSTACK_RUNTIME_STACK_RUNTIME_H_
#define NETSTACK_RUNTIME_STACK_RUNTIME_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace netstack::runtime {

// 64 random bits from the kernel (getrandom), for the TCP layer's ISN and
// SYN-cookie keys and the UDP layer's ephemeral ports, which must not be
// guessable.
absl::StatusOr<uint64_t> RandomSeed();

}  // namespace netstack::runtime

#endif  // NETSTACK_RUNTIME_STACK_RUNTIME_H_
