// Time in the protocol core is a value passed in, never read from a clock
// (docs/ARCHITECTURE.md, "Time and I/O"). Instants are absl::Time so that
// tests can start a fake clock anywhere (absl::UnixEpoch() + offsets) and
// durations parse from flags ("10ms"). "No deadline" is kNever.
#ifndef NETSTACK_BASE_TIME_H_
#define NETSTACK_BASE_TIME_H_

#include "absl/time/time.h"

namespace netstack {

using Instant = absl::Time;
using Duration = absl::Duration;

inline constexpr Instant kNever = absl::InfiniteFuture();

}  // namespace netstack

#endif  // NETSTACK_BASE_TIME_H_
