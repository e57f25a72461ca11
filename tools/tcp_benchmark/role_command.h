// The command lines the driver starts its roles with (the contract of
// main.cc: `tcp_benchmark --role=server|client --stack=kernel|netstack
// ...`), and where each one runs.
#ifndef TOOLS_TCP_BENCHMARK_ROLE_COMMAND_H_
#define TOOLS_TCP_BENCHMARK_ROLE_COMMAND_H_

#include <string>
#include <vector>

#include "tools/tcp_benchmark/measurement.h"
#include "tools/tcp_benchmark/topology.h"

namespace netstack::tools::bench {

inline constexpr int kBenchPort = 5201;

struct RoleCommand {
  std::vector<std::string> argv;
  std::string netns;  // where to start it (empty: netstack opens its own)
};

// The server and the client of `spec` on `topology`. The process in
// netstack's place is the client iff spec.netstack_is_client. Flags the
// user gave for the roles (--cc, --sack, faults, --pcap, --interval,
// --recv_mode/--send_mode) are passed on to the roles they concern.
RoleCommand ServerCommand(const std::string& self, const Topology& topology,
                          const MeasurementSpec& spec);
RoleCommand ClientCommand(const std::string& self, const Topology& topology,
                          const MeasurementSpec& spec);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_ROLE_COMMAND_H_
