// The network namespaces and links one tcp_benchmark measurement runs on,
// built with `ip`, `sysctl` and `ethtool` and deleted again by Destroy()
// or the destructor, also after a failed step halfway through Create().
//
// Names carry the driver's PID (tcpb<pid>a, tcpb<pid>b), so concurrent
// runs do not clash; interface names (vA, vB, tB) live inside those
// namespaces and need no prefix.
//
//   packet link:     [ns A: kernel, vA 10.77.0.1/24 fd00:77::1/64]
//                        veth
//                    [ns B: vB, no address, IPv6 off; netstack on
//                     --packet vB with 10.77.0.2/24]
//   tap link:        [ns B: kernel, tB 10.77.0.1/24; netstack on --tap tB
//                     with 10.77.0.2/24]
//   kernel baseline: the veth pair of the packet link, vB 10.77.0.2/24,
//                    default offloads, the kernel on both sides.
//
// With netstack on vB, vB gets a pfifo qdisc (back-pressure from a full
// veth ring instead of drops). For GSO off and software GSO, vA sends
// without TSO/GSO (frames fit netstack's receive slots) and receives with
// GRO on a threaded NAPI, and vB offers no TSO (the condition for veth to
// pass frames through vA's GRO). Host GSO keeps the defaults: netstack's
// super-frames cross whole, and the kernel's reach netstack whole.
#ifndef TOOLS_TCP_BENCHMARK_TOPOLOGY_H_
#define TOOLS_TCP_BENCHMARK_TOPOLOGY_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace netstack::tools::bench {

enum class TopologyKind { kPacket, kTap, kKernelBaseline };

struct TopologySpec {
  TopologyKind kind = TopologyKind::kPacket;
  int mtu = 1500;
  // Packet link: leave TSO/GSO/GRO on vA (host GSO: netstack takes the
  // kernel's 64 KiB frames). Off otherwise: receive slots are MTU-sized.
  bool kernel_offloads = false;
};

// The names of one run's namespaces.
struct TopologyNames {
  std::string ns_a;  // the kernel peer's (packet link, baseline)
  std::string ns_b;  // netstack's, or the baseline's second kernel
  static TopologyNames ForPid(pid_t pid);
};

// The addresses and interface names used by every topology.
inline constexpr char kPeerAddr[] = "10.77.0.1";
inline constexpr char kStackAddr[] = "10.77.0.2";
inline constexpr char kPrefixLen[] = "/24";
inline constexpr char kPeerAddr6[] = "fd00:77::1/64";
inline constexpr char kVethA[] = "vA";
inline constexpr char kVethB[] = "vB";
inline constexpr char kTapB[] = "tB";

class Topology {
 public:
  // Builds it. On failure, deletes what was made and names the command
  // that failed.
  static absl::StatusOr<std::unique_ptr<Topology>> Create(
      const TopologyNames& names, const TopologySpec& spec);

  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  ~Topology();  // Destroy(), errors printed to stderr

  // Deletes the namespaces (with their links). Idempotent. With `keep`
  // (--keep_topology) it only forgets them.
  absl::Status Destroy();
  void set_keep(bool keep) { keep_ = keep; }

  const TopologySpec& spec() const { return spec_; }
  // The kernel peer's namespace (A, or B for the TAP link).
  const std::string& peer_netns() const;
  const std::string& stack_netns() const { return names_.ns_b; }

 private:
  Topology(TopologyNames names, TopologySpec spec)
      : names_(std::move(names)), spec_(spec) {}
  absl::Status AddNamespace(const std::string& name);
  absl::Status BuildVeth();
  // GSO off and software GSO: A's kernel sends MTU-sized frames and
  // coalesces the ones it receives (GRO on a threaded NAPI).
  absl::Status ReceiveWirePackets(const std::string& a, const std::string& b);
  absl::Status BuildTap();

  TopologyNames names_;
  TopologySpec spec_;
  std::vector<std::string> made_;  // namespaces to delete
  bool keep_ = false;
};

// Whether /var/run/netns/NAME exists (a leftover check for tests).
bool NamespaceExists(const std::string& name);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_TOPOLOGY_H_
