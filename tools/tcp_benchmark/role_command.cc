#include "tools/tcp_benchmark/role_command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tools/tcp_benchmark/flags.h"

namespace netstack::tools::bench {
namespace {

// --stack=netstack on the topology's link, in the given GSO mode.
void AppendNetstackFlags(const Topology& topology, const MeasurementSpec& spec,
                         std::vector<std::string>& argv) {
  argv.push_back("--stack=netstack");
  if (topology.spec().kind == TopologyKind::kTap) {
    argv.push_back(absl::StrCat("--tap=", kTapB));
  } else {
    argv.push_back(absl::StrCat("--packet=", kVethB));
  }
  argv.push_back(absl::StrCat("--netns=", topology.stack_netns()));
  argv.push_back(absl::StrCat("--addr=", kStackAddr, kPrefixLen));
  argv.push_back(absl::StrCat("--mtu=", spec.mtu));
  if (spec.mode == kModeOff) argv.push_back("--gso=0");
  if (spec.mode == kModeSw) argv.push_back("--swgso");
  if (spec.mode == kModeHost) argv.push_back("--hostgso");
  argv.push_back(absl::GetFlag(FLAGS_sack) ? "--sack=true" : "--sack=false");
  if (absl::GetFlag(FLAGS_loss) > 0) {
    argv.push_back(absl::StrCat("--loss=", absl::GetFlag(FLAGS_loss)));
  }
  if (absl::GetFlag(FLAGS_duplicate) > 0) {
    argv.push_back(
        absl::StrCat("--duplicate=", absl::GetFlag(FLAGS_duplicate)));
  }
  if (absl::GetFlag(FLAGS_reorder) > 0) {
    argv.push_back(absl::StrCat("--reorder=", absl::GetFlag(FLAGS_reorder)));
  }
  if (absl::GetFlag(FLAGS_latency) > absl::ZeroDuration()) {
    argv.push_back(absl::StrCat(
        "--latency=", absl::FormatDuration(absl::GetFlag(FLAGS_latency))));
  }
  argv.push_back(absl::StrCat("--seed=", absl::GetFlag(FLAGS_seed)));
  // The driver's output is progress and the table; counters with
  // --verbose.
  if (!absl::GetFlag(FLAGS_verbose)) argv.push_back("--exit_counters=false");
  if (!absl::GetFlag(FLAGS_pcap).empty()) {
    const std::string path = absl::StrCat(
        absl::GetFlag(FLAGS_pcap), ".", spec.mode, ".", spec.mtu, ".",
        spec.netstack_is_client ? "client" : "server", ".pcap");
    std::fprintf(stderr, "tcp_benchmark: netstack's frames go to %s\n",
                 path.c_str());
    argv.push_back(absl::StrCat("--pcap=", path));
  }
}

void AppendKernelFlags(std::vector<std::string>& argv) {
  argv.push_back("--stack=kernel");
  argv.push_back(absl::StrCat("--recv_mode=", absl::GetFlag(FLAGS_recv_mode)));
  argv.push_back(absl::StrCat("--send_mode=", absl::GetFlag(FLAGS_send_mode)));
}

// Builds the command of the process in netstack's place (`ours`) or of
// the kernel peer, and says where it runs.
RoleCommand Command(const std::string& self, const Topology& topology,
                    const MeasurementSpec& spec, bool ours,
                    std::vector<std::string> role_flags) {
  RoleCommand command;
  command.argv = {self};
  command.argv.insert(command.argv.end(), role_flags.begin(), role_flags.end());
  if (ours && !spec.is_kernel()) {
    AppendNetstackFlags(topology, spec, command.argv);
    return command;  // netstack opens its link in --netns itself
  }
  AppendKernelFlags(command.argv);
  command.netns = ours ? topology.stack_netns() : topology.peer_netns();
  return command;
}

}  // namespace

RoleCommand ServerCommand(const std::string& self, const Topology& topology,
                          const MeasurementSpec& spec) {
  return Command(self, topology, spec, /*ours=*/!spec.netstack_is_client,
                 {"--role=server", absl::StrCat("--port=", kBenchPort),
                  "--one_off", "--json"});
}

RoleCommand ClientCommand(const std::string& self, const Topology& topology,
                          const MeasurementSpec& spec) {
  // The server is at netstack's address when netstack (or the baseline's
  // kernel in its place) serves, at the peer's otherwise.
  const char* server = spec.netstack_is_client ? kPeerAddr : kStackAddr;
  std::vector<std::string> flags = {
      "--role=client",
      absl::StrCat("--connect=", server, ":", kBenchPort),
      absl::StrCat("--duration=", spec.duration),
      absl::StrCat("--interval=", absl::GetFlag(FLAGS_interval)),
      absl::StrCat("--streams=", spec.streams),
      "--json"};
  if (spec.reverse) flags.push_back("--reverse");
  // Every sender runs the same congestion control, netstack's CUBIC unless
  // --cc says otherwise, so the kernel baseline is like for like (a
  // host's default may be bbr, which on a veth retransmits thousands of
  // packets per run and paces badly against batched ACKs).
  const std::string cc = absl::GetFlag(FLAGS_cc);
  flags.push_back(absl::StrCat("--cc=", cc.empty() ? "cubic" : cc));
  return Command(self, topology, spec, /*ours=*/spec.netstack_is_client,
                 std::move(flags));
}

}  // namespace netstack::tools::bench
