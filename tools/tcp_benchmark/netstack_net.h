// bench::Net on a netstack runtime (netstack/runtime/runtime.h): the
// link from --packet/--tap (with --netns, --addr, --addr6, --mtu, GSO and
// fault flags), the stack, its TCP layer and the event loop that drives
// them.
#ifndef TOOLS_TCP_BENCHMARK_NETSTACK_NET_H_
#define TOOLS_TCP_BENCHMARK_NETSTACK_NET_H_

#include <memory>

#include "absl/status/statusor.h"
#include "tools/tcp_benchmark/bench_net.h"

namespace netstack::tools::bench {

// Builds the stack from the flags in flags.h. Errors name the flag at
// fault (InvalidArgument) or the resource that could not be set up.
absl::StatusOr<std::unique_ptr<Net>> CreateNetstackNetFromFlags();

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_NETSTACK_NET_H_
