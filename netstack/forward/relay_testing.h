// Test-only seam of the relay: replaces the splice(2) call, so that a test
// can make splice answer what no socket on a current kernel answers. Since
// Linux 6.5 every socket type supports splice-in (the kernel copies for
// the ones without a splice_read), so the "EINVAL before any byte moved"
// fallback for the socket -> pipe side can only be reached this way. (The
// pipe -> socket side has a real trigger: an O_APPEND socket.)
#ifndef NETSTACK_FORWARD_RELAY_TESTING_H_
#define NETSTACK_FORWARD_RELAY_TESTING_H_

#include <sys/types.h>

#include <cstddef>

namespace netstack::forward::testing {

// Same contract as splice(2) without offsets: returns bytes or -1 with
// errno set.
using SpliceFunction = ssize_t (*)(int fd_in, int fd_out, size_t len,
                                   unsigned int flags);

// Installs `fn` (nullptr: the real splice) and returns the previous one.
// Not thread-safe; call it while no relay runs.
SpliceFunction SetSpliceFunctionForTesting(SpliceFunction fn);

}  // namespace netstack::forward::testing

#endif  // NETSTACK_FORWARD_RELAY_TESTING_H_
