// One tcp_benchmark measurement: a fresh topology, a server role, then a
// client role, the client's JSON result and the CPU time of the process
// in netstack's place (wait4 rusage), and the topology deleted again.
//
// Contract with the roles (main.cc): the server prints a line containing
// "listening" (iperf3's "Server listening on 5201"; on stderr with --json)
// once its listening socket is ready, serves one test (--one_off) and
// exits 0; the client prints interval lines on
// stderr and one JSON object on stdout (client_result.h), and exits 0.
#ifndef TOOLS_TCP_BENCHMARK_MEASUREMENT_H_
#define TOOLS_TCP_BENCHMARK_MEASUREMENT_H_

#include <string>
#include <vector>

#include "tools/tcp_benchmark/client_result.h"
#include "tools/tcp_benchmark/topology.h"

namespace netstack::tools::bench {

// What the server role prints on stderr when it is ready for the client.
inline constexpr char kListeningMarker[] = "listening";

// The GSO modes of netstack, and the kernel-to-kernel baseline.
inline constexpr char kModeOff[] = "off";    // --gso=0
inline constexpr char kModeSw[] = "sw";      // --swgso
inline constexpr char kModeHost[] = "host";  // --hostgso
inline constexpr char kModeKernel[] = "kernel";

struct MeasurementSpec {
  std::string mode;  // one of the kMode* names
  int mtu = 1500;
  std::string link = "packet";  // "packet" or "tap"; the baseline: veth
  // netstack is the client (else the server); the baseline's client runs
  // in netstack's place (ns B).
  bool netstack_is_client = true;
  bool reverse = false;  // the server sends
  double duration = 10;
  int streams = 1;

  bool is_kernel() const { return mode == kModeKernel; }
  // Whether the process in netstack's place sends the data.
  bool netstack_sends() const { return netstack_is_client != reverse; }
  // "== netstack sender, sw GSO, MTU 1500, packet link =="
  std::string Title() const;
};

struct Measurement {
  MeasurementSpec spec;
  std::string error;  // empty: it worked
  ClientResult client;
  double netstack_cpu_seconds = 0;  // of the process in netstack's place

  bool ok() const { return error.empty(); }
  // CPU seconds per 10^9 bytes moved; 0 when nothing moved.
  double CpuSecondsPerGb() const;
};

// Runs it; never returns without having deleted its topology (unless
// `keep_topology`). Measurement::error says what failed and includes the
// stderr tail of the role that failed.
Measurement RunMeasurement(const std::string& self, const TopologyNames& names,
                           const MeasurementSpec& spec, bool keep_topology);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_MEASUREMENT_H_
