// netstackd's configuration: the flags (config.cc) parsed and checked
// into one Config, which the daemon (daemon.cc) turns into the runtime's
// options and the sandbox's.
#ifndef TOOLS_NETSTACKD_CONFIG_H_
#define TOOLS_NETSTACKD_CONFIG_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "link/fault_injector.h"
#include "link/fd_util.h"
#include "netstack/backend/backend.h"
#include "netstack/policy/policy.h"
#include "netstack/policy/policy_file.h"
#include "netstack/runtime/forward_spec.h"
#include "netstack/runtime/port_forwards.h"
#include "netstack/stack/route_table.h"
#include "netstack/wire/address.h"
#include "netstack/sandbox/sandbox.h"

namespace netstack::tools {

using runtime::ForwardPath;
using runtime::ForwardRule;

// --policy FILE (netstack/policy/policy_file.h).
using PolicyFileRef = policy::PolicyFile;

// The egress policy's sources (--allow, --deny, --egress=none and
// --policy FILE's text) as one policy: the command line's rules first,
// then the file's. A rule or file that does not parse is InvalidArgument
// naming it ("--policy FILE: line 3: ..."); `file_label` names the file's
// text in that message.
absl::StatusOr<std::shared_ptr<const policy::Policy>> MakeEgressPolicy(
    const std::vector<policy::Rule>& command_line_rules, bool egress_none,
    std::string_view file_text, std::string_view file_label);

// "egress: open (metadata 169.254.169.254, fd00:ec2::254 denied)" or
// "egress: allowlist, 12 rules (...)" or "egress: none (...)", for the
// start line and the log line of a policy replaced.
std::string DescribeEgress(const policy::Policy& p);

struct Config {
  std::vector<stack::Ipv4Cidr> addrs;
  std::vector<stack::Ipv6Cidr> addrs6;
  std::optional<wire::Ipv4Address> gateway4;
  std::optional<wire::Ipv6Address> gateway6;
  std::optional<wire::MacAddress> mac;
  link::FaultProfile faults;
  bool any_fault = false;
  // Software/host GSO up to this IP packet size; 0: no GSO.
  uint32_t swgso = 0;
  uint32_t hostgso = 0;
  std::string http_root;
  uint16_t http_port = 0;  // 0: no HTTP server
  uint16_t echo_port = 0;
  uint16_t discard_port = 0;
  // --fd N: the inherited link fd, a TAP or a stream socket.
  int fd = -1;
  bool fd_is_tap = false;
  // --backend
  std::optional<backend::BackendConfig> backend;
  // The guest's namespace when netstackd makes or joins it.
  enum class Guest { kNone, kRun, kNetnsPid, kNetnsPath };
  Guest guest = Guest::kNone;
  std::vector<std::string> command;  // kRun: CMD and its arguments
  std::string netns_path;            // kNetnsPath: a name or a path
  std::string guest_ifname = "tap0";
  bool dns_config = true;
  sandbox::RunAs runas;  // --runas (root only)
  int ready_fd = -1;
  int exit_fd = -1;
  bool quiet = false;  // kRun without --verbose
  // -t and -u: each spec as given, with its rules.
  struct Forward {
    std::string flag;  // "-t" or "-u"
    std::string spec;
    std::vector<ForwardRule> rules;
  };
  std::vector<Forward> forwards;
  ForwardPath forward_path = ForwardPath::kAuto;
  uint64_t max_forward_conns = 1024;     // --max-forward-conns
  uint64_t max_conns_per_forward = 512;  // --max-conns-per-forward
  std::string forward_api;               // --forward-api PATH
  std::string control;                   // --control PATH (host mode)
  // --reassembly-timeout; 0: each family's default.
  absl::Duration reassembly_timeout = absl::ZeroDuration();
  bool sandbox = true;       // --sandbox
  bool sandbox_log = false;  // --sandbox=log
  std::string sandbox_test;  // --sandbox-test

  // The link (when the guest is not a namespace netstackd makes or joins).
  std::string tap;           // --tap
  uint32_t tap_queues = 16;  // --tap-queues
  std::string packet;        // --packet
  std::string link_netns;    // --netns, where --tap or --packet is opened
  std::string unix_path;     // --unix
  bool unix_connect = false;
  std::optional<uid_t> unix_allow_uid;  // also for --vhost-user
  std::string vhost_user_path;          // --vhost-user
  uint32_t mtu = 0;  // --mtu; 0: the link's (the backend's plan: its own)
  std::string pcap;
  std::optional<link::FaultInjectorOptions> fault_options;  // any_fault
  uint32_t busy_syn_rate = 1000;
  // The guest's namespaces, given.
  pid_t netns_pid = 0;  // --netns-pid
  std::string userns;   // --userns PATH, or /proc/PID/ns/user (--userns-pid)

  // Set by slirp4netns's command line (slirp4netns_mode.cc), which has no
  // netstackd flags for them.
  // Off: the guest's interface is the caller's to configure (slirp4netns
  // without -c: rootlesskit sets it up itself).
  bool configure_guest = true;
  // Off: the guest's interface gets IPv4 alone, and IPv6 comes by SLAAC
  // from the backend's RAs (slirp4netns's -c).
  bool guest_static_ipv6 = true;
  std::optional<wire::MacAddress> guest_mac;  // --macaddress, with -c
  std::string slirp4netns_api;                // -a/--api-socket PATH
  // Any event on --exit-fd stops netstackd, data included (slirp4netns's
  // -e); otherwise only its end (EOF) does.
  bool exit_on_any_event = false;

  // The egress policy (issue #33; netstack/policy/policy.h), in backend
  // mode only.
  std::vector<policy::Rule> policy_rules;  // --allow, --deny, in order
  bool egress_none = false;                // --egress=none
  std::shared_ptr<const PolicyFileRef> policy_file;  // --policy FILE
  // All of them together; null when none was given (the backend's
  // default, policy::Policy::Open()).
  std::shared_ptr<const policy::Policy> egress;
  std::string flow_log;  // --flow-log FILE
  uint64_t flow_log_max_bytes = 64ull << 20;
  uint32_t flow_log_rate = 1000;
};

// What main() takes off the command line before Abseil parses the flags.
struct CommandLine {
  bool have_command = false;              // a "--" was given
  std::vector<std::string> command;       // what follows it
  std::vector<std::string> tcp_forwards;  // -t SPEC, in order
  std::vector<std::string> udp_forwards;  // -u SPEC, in order
  bool gso_given = false;                 // --gso was on the command line
  // --allow RULE and --deny RULE, in order (they repeat, like -t).
  struct PolicyRule {
    bool allow = true;
    std::string rule;
  };
  std::vector<PolicyRule> policy_rules;
};

// The flags (config.cc) as a Config. InvalidArgument says what is wrong,
// for a message and exit status 2.
absl::StatusOr<Config> ParseConfig(const CommandLine& cl);

// The lines after "running on": what a user would otherwise have to
// reconstruct from the flags (addresses, services, the backend's plan).
std::string StartSummary(const Config& c);

// Frames of `mtu` bytes in TCP's largest receive window, at least the
// kernel's default of 1000: the TAP's queue, where the guest's frames wait.
uint32_t BackendTapQueueLen(uint32_t mtu);

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_CONFIG_H_
