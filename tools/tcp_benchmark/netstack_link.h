// The link under tcp_benchmark's netstack role, built from the flags:
// --packet IFNAME or --tap NAME (in --netns), then the decorators from the
// stack outwards: software GSO (--swgso), the fault injector (--loss,
// --duplicate, --reorder, --latency; both directions) and the pcap sniffer
// (--pcap), as in netstackd: the pcap shows the wire after the faults, and
// the GSO splitter sits right under the stack so that the faults and the
// pcap see wire packets. With --hostgso the base endpoint
// writes super-segments whole with a virtio-net header instead.
// The runtime (netstack/runtime/runtime.h) opens and wires it; this file
// only turns the flags into its options and formats the link's counters.
#ifndef TOOLS_TCP_BENCHMARK_NETSTACK_LINK_H_
#define TOOLS_TCP_BENCHMARK_NETSTACK_LINK_H_

#include <string>

#include "absl/status/statusor.h"
#include "netstack/runtime/runtime.h"

namespace netstack::tools::bench {

enum class GsoMode { kOff, kSoftware, kHost };

// "off", "sw", "host".
const char* GsoModeName(GsoMode mode);

// Validates the link flags and --addr/--addr6 and sets `options`' host
// link, decorators, NIC name and addresses. Errors name the flag
// (InvalidArgument).
absl::StatusOr<GsoMode> LinkOptionsFromFlags(runtime::RuntimeOptions& options);

// Link, GSO and fault counters of `rt`'s link as "name value" lines.
std::string FormatLinkCounters(runtime::Runtime& rt, GsoMode mode);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_NETSTACK_LINK_H_
