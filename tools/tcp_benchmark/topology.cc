#include "tools/tcp_benchmark/topology.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/tcp_benchmark/child_process.h"

namespace netstack::tools::bench {
namespace {

std::string WithPrefix(const char* addr) {
  return absl::StrCat(addr, kPrefixLen);
}

// `ip -n NS link set DEV mtu M up`
absl::Status LinkUp(const std::string& ns, const char* dev, int mtu) {
  return RunCommand(
      {"ip", "-n", ns, "link", "set", dev, "mtu", std::to_string(mtu), "up"});
}

absl::Status AddAddress(const std::string& ns, const char* dev,
                        const std::string& cidr) {
  std::vector<std::string> argv = {"ip",  "-n", ns,    "addr",
                                   "add", cidr, "dev", dev};
  // No duplicate address detection: the address is usable at once.
  if (cidr.find(':') != std::string::npos) argv.push_back("nodad");
  return RunCommand(std::move(argv));
}

}  // namespace

TopologyNames TopologyNames::ForPid(pid_t pid) {
  return {.ns_a = absl::StrCat("tcpb", pid, "a"),
          .ns_b = absl::StrCat("tcpb", pid, "b")};
}

bool NamespaceExists(const std::string& name) {
  return access(absl::StrCat("/var/run/netns/", name).c_str(), F_OK) == 0;
}

absl::StatusOr<std::unique_ptr<Topology>> Topology::Create(
    const TopologyNames& names, const TopologySpec& spec) {
  std::unique_ptr<Topology> topology(new Topology(names, spec));
  const absl::Status built = spec.kind == TopologyKind::kTap
                                 ? topology->BuildTap()
                                 : topology->BuildVeth();
  if (!built.ok()) {
    const absl::Status destroyed = topology->Destroy();
    if (!destroyed.ok()) {
      std::fprintf(stderr, "tcp_benchmark: %s\n", destroyed.ToString().c_str());
    }
    return built;
  }
  return topology;
}

Topology::~Topology() {
  const absl::Status destroyed = Destroy();
  if (!destroyed.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n", destroyed.ToString().c_str());
  }
}

const std::string& Topology::peer_netns() const {
  return spec_.kind == TopologyKind::kTap ? names_.ns_b : names_.ns_a;
}

absl::Status Topology::AddNamespace(const std::string& name) {
  if (absl::Status s = RunCommand({"ip", "netns", "add", name}); !s.ok()) {
    return s;
  }
  made_.push_back(name);
  return RunCommand({"ip", "-n", name, "link", "set", "lo", "up"});
}

absl::Status Topology::BuildVeth() {
  const std::string& a = names_.ns_a;
  const std::string& b = names_.ns_b;
  absl::Status s = AddNamespace(a);
  if (s.ok()) s = AddNamespace(b);
  if (s.ok()) {
    s = RunCommand({"ip", "link", "add", kVethA, "netns", a, "type", "veth",
                    "peer", "name", kVethB, "netns", b});
  }
  if (s.ok()) s = AddAddress(a, kVethA, WithPrefix(kPeerAddr));
  if (s.ok()) s = AddAddress(a, kVethA, kPeerAddr6);
  if (s.ok()) s = LinkUp(a, kVethA, spec_.mtu);
  if (!s.ok()) return s;
  if (spec_.kind == TopologyKind::kKernelBaseline) {
    s = AddAddress(b, kVethB, WithPrefix(kStackAddr));
    return s.ok() ? LinkUp(b, kVethB, spec_.mtu) : s;
  }
  // vB belongs to netstack: keep B's kernel silent on it (no IPv6
  // autoconfiguration, router or neighbour solicitations).
  s = RunCommand({"sysctl", "-q", "-w",
                  absl::StrCat("net.ipv6.conf.", kVethB, ".disable_ipv6=1")},
                 b);
  if (s.ok()) s = LinkUp(b, kVethB, spec_.mtu);
  // A qdisc on vB instead of noqueue: when vA's receive ring is full the
  // veth stops vB's queue, so a burst from netstack waits instead of
  // being dropped inside the kernel.
  if (s.ok()) {
    s = RunCommand({"tc", "-n", b, "qdisc", "replace", "dev", kVethB, "root",
                    "pfifo", "limit", "10000"});
  }
  if (s.ok() && !spec_.kernel_offloads) s = ReceiveWirePackets(a, b);
  return s;
}

absl::Status Topology::ReceiveWirePackets(const std::string& a,
                                          const std::string& b) {
  // No TSO/GSO on vA: A's kernel sends frames that fit netstack's
  // MTU-sized receive slots.
  absl::Status s = RunCommand(
      {"ethtool", "-K", kVethA, "tso", "off", "gso", "off", "gro", "on"}, a);
  // The receiving kernel coalesces netstack's wire packets with GRO, as
  // behind a real NIC: veth hands a frame to vA's NAPI (and so to GRO)
  // only when vB does not offer TSO, and a threaded NAPI lets GRO see
  // more than one frame per poll instead of running inside each send.
  if (s.ok()) s = RunCommand({"ethtool", "-K", kVethB, "tso", "off"}, b);
  if (s.ok()) {
    s = RunCommand({"ip", "netns", "exec", a, "sh", "-c",
                    absl::StrCat("echo 1 > /sys/class/net/", kVethA,
                                 "/threaded")});
  }
  return s;
}

absl::Status Topology::BuildTap() {
  const std::string& b = names_.ns_b;
  // A persistent TAP made here, so its kernel side can be configured
  // before netstack attaches to it (TUNSETIFF on an existing device).
  absl::Status s = AddNamespace(b);
  if (s.ok()) {
    s = RunCommand({"ip", "-n", b, "tuntap", "add", kTapB, "mode", "tap"});
  }
  if (s.ok()) s = AddAddress(b, kTapB, WithPrefix(kPeerAddr));
  if (s.ok()) s = AddAddress(b, kTapB, kPeerAddr6);
  if (s.ok()) s = LinkUp(b, kTapB, spec_.mtu);
  return s;
}

absl::Status Topology::Destroy() {
  absl::Status result;
  while (!made_.empty()) {
    const std::string ns = std::move(made_.back());
    made_.pop_back();
    if (keep_) continue;
    // Deleting the namespace deletes the links in it (the veth pair's
    // other end with it).
    absl::Status s = RunCommand({"ip", "netns", "del", ns});
    if (!s.ok() && result.ok()) result = s;
  }
  return result;
}

}  // namespace netstack::tools::bench
