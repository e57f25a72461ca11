#include "tools/tcp_benchmark/measurement.h"

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tools/tcp_benchmark/child_process.h"
#include "tools/tcp_benchmark/flags.h"
#include "tools/tcp_benchmark/interrupt.h"
#include "tools/tcp_benchmark/role_command.h"

namespace netstack::tools::bench {
namespace {

constexpr absl::Duration kListenTimeout = absl::Seconds(15);
// After the client is done, the one-off server has this long to exit.
constexpr absl::Duration kServerExitTimeout = absl::Seconds(10);

std::string RoleFailure(const char* role, const ChildProcess& child,
                        const std::string& what) {
  return absl::StrCat(role, " ", what, "\n  command: ", child.CommandLine(),
                      "\n  stderr tail:\n", child.StderrTail());
}

absl::StatusOr<ChildProcess> StartRole(const RoleCommand& command,
                                       bool echo_stderr,
                                       bool keep_stderr = false) {
  return ChildProcess::Start({.argv = command.argv,
                              .netns = command.netns,
                              .echo_stderr = echo_stderr,
                              .keep_stderr = keep_stderr});
}

// Pumps the server's output until it says it listens. Error: what went
// wrong, with its stderr tail.
std::string AwaitListening(ChildProcess& server) {
  const absl::Time deadline = absl::Now() + kListenTimeout;
  while (!server.stderr_contains(kListeningMarker) &&
         server.stdout_text().find(kListeningMarker) == std::string::npos) {
    if (Interrupted()) return "interrupted";
    if (server.TryReap()) {
      return RoleFailure(
          "server", server,
          absl::StrCat(server.exit().Describe(), " before it listened"));
    }
    if (absl::Now() > deadline) {
      return RoleFailure(
          "server", server,
          absl::StrCat("printed no \"", kListeningMarker, "\" line within ",
                       absl::FormatDuration(kListenTimeout)));
    }
    PumpOutput({&server}, absl::Milliseconds(50));
  }
  return "";
}

// Runs the client to its end and lets the server finish; fills `m`.
void RunPair(ChildProcess& server, ChildProcess& client, Measurement& m) {
  const absl::Duration client_timeout =
      absl::Seconds(m.spec.duration) + absl::Seconds(30);
  const ChildExit client_exit = WaitChild(client, {&server}, client_timeout);
  // The client is done; a one-off server exits by itself. Past the
  // timeout WaitChild terminates it (its CPU time still counts).
  const ChildExit server_exit = WaitChild(server, {}, kServerExitTimeout);
  ChildProcess& ours = m.spec.netstack_is_client ? client : server;
  m.netstack_cpu_seconds = ours.exit().cpu_seconds;
  if (Interrupted()) {
    m.error = "interrupted";
  } else if (!client_exit.Succeeded()) {
    m.error = RoleFailure("client", client, client_exit.Describe());
  } else if (!server_exit.Succeeded()) {
    m.error = RoleFailure("server", server, server_exit.Describe());
  }
  if (!m.ok()) return;
  absl::StatusOr<ClientResult> result = ParseClientResult(client.stdout_text());
  if (!result.ok()) {
    m.error = RoleFailure("client", client, result.status().ToString());
    return;
  }
  m.client = *result;
  if (m.client.bytes == 0)
    m.error = RoleFailure("client", client, "moved 0 bytes");
}

TopologySpec TopologyFor(const MeasurementSpec& spec) {
  TopologySpec topology;
  topology.mtu = spec.mtu;
  if (spec.is_kernel()) {
    topology.kind = TopologyKind::kKernelBaseline;
    topology.kernel_offloads = true;
  } else {
    topology.kind =
        spec.link == "tap" ? TopologyKind::kTap : TopologyKind::kPacket;
    topology.kernel_offloads = spec.mode == kModeHost;
  }
  return topology;
}

}  // namespace

std::string MeasurementSpec::Title() const {
  const char* role = netstack_sends() ? "sender" : "receiver";
  if (is_kernel()) {
    return absl::StrCat("== kernel -> kernel baseline, MTU ", mtu, ", veth ==");
  }
  return absl::StrCat("== netstack ", role, ", ", mode, " GSO, MTU ", mtu, ", ",
                      link, " link ==");
}

double Measurement::CpuSecondsPerGb() const {
  if (client.bytes == 0) return 0;
  return netstack_cpu_seconds / (static_cast<double>(client.bytes) / 1e9);
}

Measurement RunMeasurement(const std::string& self, const TopologyNames& names,
                           const MeasurementSpec& spec, bool keep_topology) {
  Measurement m;
  m.spec = spec;
  absl::StatusOr<std::unique_ptr<Topology>> topology =
      Topology::Create(names, TopologyFor(spec));
  if (!topology.ok()) {
    m.error = absl::StrCat("topology: ", topology.status().message());
    return m;
  }
  (*topology)->set_keep(keep_topology);
  if (Interrupted()) {  // a signal during Create(): nothing to stop yet
    m.error = "interrupted";
    return m;
  }
  // The client's stderr (its interval lines and, for netstack, its
  // counters) is shown as it comes; the server's only with --verbose,
  // after the run, so that a netstack receiver's counters explain its
  // row too.
  const bool verbose = absl::GetFlag(FLAGS_verbose);
  absl::StatusOr<ChildProcess> server =
      StartRole(ServerCommand(self, **topology, spec), /*echo_stderr=*/false,
                /*keep_stderr=*/verbose);
  if (!server.ok()) {
    m.error = absl::StrCat("server: ", server.status().message());
    return m;
  }
  m.error = AwaitListening(*server);
  if (!m.ok()) return m;
  absl::StatusOr<ChildProcess> client =
      StartRole(ClientCommand(self, **topology, spec), /*echo_stderr=*/true);
  if (!client.ok()) {
    m.error = absl::StrCat("client: ", client.status().message());
    return m;
  }
  RunPair(*server, *client, m);
  if (verbose) {
    std::fprintf(stderr, "-- the server's stderr (%s):\n%s",
                 spec.netstack_is_client ? "the kernel" : "netstack",
                 server->stderr_text().c_str());
  }
  return m;
}

}  // namespace netstack::tools::bench
