// netstackd: runs one netstack Stack on one link.
//
//   netstackd --packet veth1 --netns b --addr 10.9.0.2/24 --addr6 fd00:9::2/64
//   netstackd --tap tap0 --netns b --addr 10.9.0.2/24 --pcap /tmp/ns.pcap
//
//   netstackd --unix /run/vm0.sock --addr 10.0.2.2/24   (QEMU -netdev stream)
//
//   netstackd --packet veth1 --netns b --addr 10.9.0.2/24
//       --http-root /srv/www --http-port 80 --echo-port 7 --discard-port 9
//
// The link is opened inside --netns (the daemon itself stays in its own
// namespace). The stack has a TCP and a UDP layer; the services
// (tools/netstackd/services) listen on every address of both families.
// Counters (stack, TCP, UDP, services, faults) are printed on SIGUSR1 and
// at exit; SIGINT and SIGTERM stop it cleanly. Bad input is a clear
// message and exit status 2 (usage) or 1 (a resource could not be set up),
// with nothing left behind.
#include <unistd.h>

#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <algorithm>
#include <csignal>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "netstack/backend/backend.h"
#include "netstack/backend/dns_config.h"
#include "netstack/backend/ping_flows.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/udp_layer.h"
#include "tools/common/cli.h"
#include "netstack/runtime/link_chain.h"
#include "netstack/runtime/stack_runtime.h"
#include "netstack/runtime/fd_limit.h"
#include "tools/netstackd/control_api.h"
#include "tools/netstackd/forward_api.h"
#include "link/netns_sockets.h"
#include "tools/netstackd/least_privilege.h"
#include "netstack/runtime/port_forwards.h"
#include "tools/netstackd/rtnl.h"
#include "tools/netstackd/sandbox.h"
#include "tools/netstackd/services/discard_service.h"
#include "tools/netstackd/services/echo_service.h"
#include "tools/netstackd/services/http_server.h"
#include "tools/netstackd/services/service.h"
#include "link/fault_injector.h"
#include "link/fd_util.h"
#include "link/netns.h"
#include "link/unix_stream_endpoint.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/stack/route_table.h"
#include "netstack/stack/stack.h"

ABSL_FLAG(std::string, tap, "", "Attach to the TAP device NAME (created if needed).");
ABSL_FLAG(int, tap_queues, 16,
          "With a TAP (--tap, or the sandbox's tap0): kernel queues "
          "(IFF_MULTI_QUEUE), 1..16. The kernel steers the flows netstackd "
          "answers to the first queue, read first, and spreads new flows "
          "over all of them, so a SYN flood from the TAP's side shares the "
          "established flows' queue only 1/N. A TAP made without "
          "multi_queue gets one queue (a note at start says so).");
ABSL_FLAG(std::string, packet, "",
          "Attach to the interface IFNAME with an AF_PACKET socket (e.g. one "
          "end of a veth pair).");
ABSL_FLAG(std::string, unix, "",
          "Serve a VM over a UNIX stream socket at PATH (frames with a 4-byte "
          "big-endian length prefix, as QEMU's -netdev stream and passt). "
          "netstackd listens there; QEMU connects with "
          "-netdev stream,id=n0,server=off,addr.type=unix,addr.path=PATH. "
          "\"@name\" is an abstract socket.");
ABSL_FLAG(int, fd, -1,
          "Use this inherited fd as the link, handed over by a parent "
          "(libvirt, podman, a sandbox); --fd-type says what it is. A TAP fd "
          "must have IFF_NO_PI, and IFF_VNET_HDR unless GSO is off (--gso 0); "
          "its interface is the parent's to configure, so --mtu is required "
          "in host mode.");
ABSL_FLAG(std::string, fd_type, "",
          "With --fd: 'tap' (a TAP device) or 'stream' (a connected stream "
          "socket with QEMU's -netdev stream framing, as --unix).");
ABSL_FLAG(bool, unix_connect, false,
          "With --unix: connect to PATH instead of listening on it.");
ABSL_FLAG(int64_t, unix_allow_uid, -1,
          "With --unix: a user id, besides netstackd's own and root, whose "
          "process may be the guest's side (QEMU run as another user): it "
          "may connect, or, with --unix-connect, be the listener. Other "
          "users' peers are refused (SO_PEERCRED); a socket file is made "
          "0666 instead of 0600 so that user can connect.");
ABSL_FLAG(std::string, netns, "",
          "Open the link inside this network namespace (/var/run/netns/NAME).");
ABSL_FLAG(std::vector<std::string>, addr, {},
          "IPv4 address with prefix, e.g. 10.0.0.2/24. Repeatable (comma-separated).");
ABSL_FLAG(std::vector<std::string>, addr6, {},
          "IPv6 address with prefix, e.g. fd00::2/64. Repeatable (comma-separated).");
ABSL_FLAG(std::string, gateway, "",
          "Default gateway (IPv4 or IPv6 address; on-link).");
ABSL_FLAG(int, mtu, 0,
          "Link MTU (IP packet size); 0 = the link's own (with --backend: "
          "65520, as pasta and slirp4netns; a TAP takes at most 65520, the "
          "frame and its alignment pad filling one 64 KiB receive chunk).");
ABSL_FLAG(std::string, mac, "", "Our MAC address; default: the link's / derived.");
ABSL_FLAG(std::string, pcap, "",
          "Write every frame in and out to this pcap file, as on the wire: "
          "outgoing frames after fault injection, incoming ones before it.");
ABSL_FLAG(double, loss, 0, "Drop this fraction of frames (0.01 = 1%).");
ABSL_FLAG(double, duplicate, 0, "Duplicate this fraction of frames.");
ABSL_FLAG(double, reorder, 0, "Hold back this fraction of frames behind later ones.");
ABSL_FLAG(double, corrupt, 0, "Flip one bit in this fraction of frames.");
ABSL_FLAG(absl::Duration, delay, absl::ZeroDuration(),
          "Delay every frame by this much, e.g. 10ms.");
ABSL_FLAG(absl::Duration, jitter, absl::ZeroDuration(),
          "Vary the delay uniformly by up to this much, e.g. 2ms.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the fault injector's random choices.");
ABSL_FLAG(int, fault_queue_limit, 1000,
          "Frames the fault injector may hold (delayed or reordered) per "
          "direction; more are dropped and counted as overflow, like "
          "netem's limit. Raise it for --delay at high rates.");
ABSL_FLAG(bool, fault_ingress, false,
          "Apply the faults to received frames too (default: sent frames only).");
ABSL_FLAG(int, gso, 65535,
          "Largest TCP super-segment (IP packet bytes) with --swgso or "
          "--hostgso; 0 turns GSO off.");
ABSL_FLAG(bool, swgso, false,
          "Software GSO: TCP sends super-segments that the link layer splits "
          "into wire packets (one sendmmsg per batch on --packet).");
ABSL_FLAG(bool, hostgso, false,
          "Host GSO: super-segments go to the kernel whole with a virtio-net "
          "header and the kernel segments them (--packet or --tap). On by "
          "default with --backend --tap (--swgso or --gso 0 turn it off).");
ABSL_FLAG(std::string, http_root, "",
          "Serve the files under this directory over HTTP/1.1 (GET and HEAD, "
          "keep-alive, pipelining; no directory listings: a directory "
          "serves its index.html).");
ABSL_FLAG(int, http_port, 0,
          "TCP port of the HTTP server (with --http-root); 0 = 80.");
ABSL_FLAG(int, echo_port, 0,
          "Run echo (RFC 862) on this TCP and UDP port; 0 = off.");
ABSL_FLAG(bool, backend, false,
          "Backend mode: the link's peer is a guest (a namespace's TAP, a VM) "
          "and netstackd is its gateway to this host's network. Every TCP "
          "flow the guest opens becomes a host socket. The stack answers "
          "only as the gateway and the DNS address of --net/--net6; no "
          "--addr, --addr6 or --gateway.");
ABSL_FLAG(std::string, net, "10.0.2.0/24",
          "With --backend: the guest's IPv4 network. The gateway is host .2, "
          "the DNS address .3, the guest's (only accepted) address .100.");
ABSL_FLAG(std::string, net6, "fd00::/64",
          "With --backend: the guest's IPv6 prefix. The gateway is ::2 (and "
          "its link-local address), the DNS address ::3; the guest may use "
          "any address inside the prefix and its link-local one.");
ABSL_FLAG(bool, host_loopback, false,
          "With --backend: TCP to the gateway address reaches this host's "
          "127.0.0.1 / ::1. Off: such a flow gets RST (and a counter).");
ABSL_FLAG(std::vector<std::string>, outbound_bind, {},
          "With --backend: bind host sockets to this source address (one "
          "IPv4 and/or one IPv6; comma-separated or repeated).");
ABSL_FLAG(int, max_tcp_flows, 4096,
          "With --backend: the guest's own TCP flows at once (connecting "
          "ones included); past it the guest gets RST and "
          "backend.tcp_refused_flow_limit counts it. -t connections through "
          "the stack are not among them (--max-forward-conns).");
ABSL_FLAG(int, busy_syn_rate, 1000,
          "SYNs answered a second while the link is busy (its peer sends "
          "faster than netstackd reads: link.NIC.rx_batch_limit_hits grows), "
          "a tenth of a second of them saved up: with --backend, the guest's "
          "SYNs that would start a host connection (backend.tcp_syns_shed), "
          "and SYNs to the stack's own listeners (tcp.syns_shed). Past it a "
          "SYN is dropped without a RST (drop.tcp_syn_shed) and its sender "
          "retransmits it. It keeps a SYN flood from taking the thread from "
          "established connections. A link that keeps up has no limit. 0: "
          "no limit at all.");
ABSL_FLAG(std::vector<std::string>, dns_upstream, {},
          "With --backend: send the guest's DNS queries (to the DNS address "
          ".3 / ::3, UDP and TCP) to this server, ADDR[:PORT] (IPv6 as "
          "[ADDR]:PORT); repeated or comma-separated. Default: the "
          "nameservers of /etc/resolv.conf (127.0.0.53 works).");
ABSL_FLAG(absl::Duration, udp_timeout, absl::Seconds(180),
          "With --backend: a UDP flow idle this long (no datagram either "
          "way) is closed, and its host socket with it.");
ABSL_FLAG(absl::Duration, tcp_guest_timeout, absl::ZeroDuration(),
          "With --backend: a guest that acknowledges nothing for this long "
          "loses its TCP flow (RST to the host socket, "
          "backend.tcp_end.guest_error): data unacked that long, or an idle "
          "flow's keepalive probes unanswered. 0 = the retransmission limit "
          "only (about 15 minutes; an idle flow stays).");
ABSL_FLAG(absl::Duration, reassembly_timeout, absl::ZeroDuration(),
          "How long a fragmented datagram may wait for its missing "
          "fragments before it is dropped (reassembly.datagram_drop.timeout; "
          "an ICMP time exceeded goes back when the first fragment came). "
          "0 = 30s for IPv4 (Linux's net.ipv4.ipfrag_time) and 60s for "
          "IPv6 (RFC 8200); a shorter one frees a fragment storm's memory "
          "sooner. 1s to 2m.");
ABSL_FLAG(int, max_udp_flows, 1024,
          "With --backend: UDP flows at once; past it the guest gets ICMP "
          "port unreachable and backend.udp.refused.limit counts it.");
ABSL_FLAG(int, discard_port, 0,
          "Run discard (RFC 863) on this TCP and UDP port; 0 = off.");
ABSL_FLAG(bool, no_dns_config, false,
          "With -- CMD: leave CMD's /etc/resolv.conf alone (by default CMD "
          "sees one naming the DNS address, bind-mounted in a mount "
          "namespace of its own).");
ABSL_FLAG(int, netns_pid, 0,
          "Backend for the network namespace of process PID (as "
          "slirp4netns): a TAP (--tap NAME, default tap0) is made there and "
          "configured with the plan's addresses and default routes; "
          "netstackd quits when PID exits.");
ABSL_FLAG(std::string, runas, "",
          "With -- CMD as root: who CMD's root is outside its user "
          "namespace, UID[:GID] or LOGIN[:GROUP] (default nobody, 65534). "
          "0 keeps root's uid for CMD, which the kernel's uid checks "
          "(/proc/sys, device nodes, root's files) take for root: give it "
          "only to a CMD you trust. Without root CMD runs as you.");
ABSL_FLAG(int, userns_pid, 0,
          "With --netns-pid or --netns: enter the user namespace of this "
          "process first (rootless; when netstackd is not root and this is "
          "not given, --netns-pid enters PID's).");
ABSL_FLAG(std::string, userns, "",
          "With --netns-pid or --netns: enter the user namespace at this "
          "path first (e.g. /proc/PID/ns/user).");
ABSL_FLAG(int, ready_fd, -1,
          "Write one byte to this fd once the guest's network is up (and "
          "CMD started), then close it.");
ABSL_FLAG(int, exit_fd, -1,
          "Quit when this fd is closed at its other end (reads EOF).");
// -t/-u are taken off the command line before Abseil parses it (they
// repeat, and Abseil keeps only the last value); these two carry the help.
ABSL_FLAG(std::vector<std::string>, tcp_forward, {},
          "-t, --tcp-forward SPEC: forward a host TCP port to the guest, "
          "repeatable. SPEC is [BIND_ADDR/]HOST_PORT[-END][:GUEST_PORT[-END]] "
          "(pasta's shape; no BIND_ADDR: every address of both families; a "
          "range maps port by port, at most 1024 ports), or "
          "unix:PATH:GUEST_PORT for a UNIX stream socket on the host. With a "
          "namespace guest the connection is spliced to the guest's loopback; "
          "with a VM (or --forward-path=stack) it goes through the stack to "
          "the guest's IPv4 lease.");
ABSL_FLAG(std::vector<std::string>, udp_forward, {},
          "-u, --udp-forward SPEC: forward a host UDP port to the guest, "
          "repeatable; SPEC as for -t (no unix:). With a namespace guest "
          "each client address gets a socket to the guest's loopback; with a "
          "VM (or --forward-path=stack) a flow in the backend's UDP table to "
          "the guest's IPv4 lease. Either closes after --udp-timeout idle; "
          "at most --max-udp-flows of them.");
ABSL_FLAG(std::string, forward_path, "auto",
          "How -t and -u forwards reach the guest: auto (splice, or a socket "
          "for -u, where the guest is a namespace; else the stack), splice, "
          "or stack.");
ABSL_FLAG(int, max_forward_conns, 1024,
          "Spliced -t connections (a namespace guest's) open at once, all "
          "forwards together. Each holds 6 fds (its two sockets and, while "
          "data moves, two pipes), budgeted in the fd limit; when that limit "
          "cannot hold them beside the guest's own flows, fewer (the start "
          "line says how many). Past it, or past --max-conns-per-forward, a "
          "new client is reset at once (forward.N.refused_limit). Through "
          "the stack (a VM, or --forward-path=stack) a connection is a "
          "backend TCP flow holding 1 fd, in a share of its own beside the "
          "guest's --max-tcp-flows (backend.tcp_refused_inbound_limit).");
ABSL_FLAG(int, max_conns_per_forward, 512,
          "-t connections open at once on one forward (one -t spec, or one "
          "added through --forward-api), spliced or through the stack, so "
          "that clients of one published port cannot take every slot of "
          "--max-forward-conns.");
ABSL_FLAG(std::string, forward_api, "",
          "With --backend: a UNIX socket (mode 0600) at PATH for a JSON-lines "
          "API that adds, lists and removes forwards and reads the counters "
          "while netstackd runs (docs/SANDBOX.md); removed at exit.");
ABSL_FLAG(std::string, control, "",
          "Host mode: drive the stack's own TCP and UDP sockets through a "
          "UNIX socket at PATH (one JSON object per line: socket, bind, "
          "listen, accept, connect, send, recv, shutdown, close, setsockopt, "
          "info; tools/netstackd/control_api.h). For the conformance suite "
          "(tests/conformance).");
ABSL_FLAG(std::string, sandbox, "on",
          "on: once set up, drop every capability but those still used, set "
          "no_new_privs and allow only the system calls the loop makes "
          "(seccomp; docs/SECURITY.md); a forbidden call stops netstackd "
          "with status 159. log: the same, but a call outside the list is "
          "allowed and logged by the kernel (dmesg). off: none of that.");
ABSL_FLAG(std::string, sandbox_test, "",
          "Test only: once the sandbox is on, attempt a call the filter must "
          "stop: 'execve' (execve /bin/true) or 'kill' (kill(1, 0), not "
          "CMD).");
ABSL_FLAG(bool, verbose, false,
          "With -- CMD: print the start lines and the counters at exit "
          "(otherwise netstackd is silent but for errors).");

namespace netstack::tools {

using runtime::DecorateLink;
using runtime::FdBudget;
using runtime::FdLimits;
using runtime::ForwardPath;
using runtime::ForwardRule;
using runtime::HostLinkOptions;
using runtime::LinkDecorators;
using runtime::OpenHostLink;
using runtime::ParseForwardSpec;
using runtime::PortForwards;
using runtime::RaiseFdLimit;
using runtime::TransportPoller;
using runtime::SplicedConnsThatFit;
using runtime::StackConnsThatFit;
using runtime::RandomSeed;

namespace {

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
  RunAs runas;  // --runas (root only)
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
  std::string forward_api;  // --forward-api PATH
  std::string control;      // --control PATH (host mode)
  // --reassembly-timeout; 0: each family's default.
  absl::Duration reassembly_timeout = absl::ZeroDuration();
  bool sandbox = true;        // --sandbox
  bool sandbox_log = false;   // --sandbox=log
  std::string sandbox_test;   // --sandbox-test
};

// CMD, the arguments after "--" (split off before the flags are parsed).
std::vector<std::string> command_line;
bool have_command = false;
// -t and -u specs, in order (taken off argv before the flags are parsed).
std::vector<std::string> tcp_forwards;
std::vector<std::string> udp_forwards;

constexpr int kBackendDefaultMtu = 65520;

// Frames of `mtu` bytes in TCP's largest receive window, at least the
// kernel's default of 1000.
uint32_t BackendTapQueueLen(uint32_t mtu) {
  const uint32_t window = tcp::ConnectionOptions{}.max_receive_buffer;
  const uint32_t frame = mtu + 14;
  return std::max<uint32_t>(1000, (window + frame - 1) / frame);
}

absl::Status Usage(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// Whether --gso was on the command line (this Abseil's flag reflection
// keeps IsSpecifiedOnCommandLine private).
bool gso_given = false;

// An fd handed over by our parent (--ready-fd, --exit-fd): open, and not
// passed on to CMD.
absl::Status InheritedFd(const char* flag, int fd) {
  if (fd == -1) return absl::OkStatus();
  if (fd < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    return Usage(absl::StrCat("--", flag, " ", fd,
                              " is not open in this process"));
  }
  return absl::OkStatus();
}

// --runas UID[:GID] | LOGIN[:GROUP]. A UID alone takes its passwd entry's
// group when it has one, else the same number.
absl::StatusOr<RunAs> ParseRunAs(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string user = text.substr(0, colon);
  const std::string group =
      colon == std::string::npos ? "" : text.substr(colon + 1);
  RunAs r;
  uint32_t n = 0;
  const struct passwd* pw = nullptr;
  if (absl::SimpleAtoi(user, &n)) {
    r.uid = n;
    pw = getpwuid(n);
    r.gid = pw != nullptr ? pw->pw_gid : n;
  } else if ((pw = getpwnam(user.c_str())) != nullptr) {
    r.uid = pw->pw_uid;
    r.gid = pw->pw_gid;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--runas ", text, ": no user '", user, "'"));
  }
  if (colon != std::string::npos) {
    const struct group* gr = nullptr;
    if (absl::SimpleAtoi(group, &n)) {
      r.gid = n;
    } else if ((gr = getgrnam(group.c_str())) != nullptr) {
      r.gid = gr->gr_gid;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--runas ", text, ": no group '", group, "'"));
    }
  }
  if (r.uid == static_cast<uid_t>(-1) || r.gid == static_cast<gid_t>(-1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--runas ", text, ": not a valid id"));
  }
  return r;
}

// -- CMD, --netns-pid, or --netns without a link: netstackd makes the TAP
// in the guest's namespace and configures it.
absl::Status ParseGuest(Config& c) {
  const bool other_link = !absl::GetFlag(FLAGS_packet).empty() ||
                          !absl::GetFlag(FLAGS_unix).empty() ||
                          absl::GetFlag(FLAGS_fd) != -1;
  const std::string netns = absl::GetFlag(FLAGS_netns);
  const int netns_pid = absl::GetFlag(FLAGS_netns_pid);
  if (have_command) {
    if (command_line.empty()) {
      return Usage("\"--\" must be followed by the command to run "
                   "(netstackd [FLAGS] -- CMD [ARGS...])");
    }
    if (netns_pid != 0 || !netns.empty()) {
      return Usage("-- CMD makes its own network namespace; --netns and "
                   "--netns-pid attach to one that exists");
    }
    c.guest = Config::Guest::kRun;
    c.command = command_line;
  } else if (netns_pid != 0) {
    if (netns_pid < 1) {
      return Usage(absl::StrCat("--netns-pid ", netns_pid,
                                " is not a process id"));
    }
    if (!netns.empty()) {
      return Usage("--netns and --netns-pid exclude each other");
    }
    c.guest = Config::Guest::kNetnsPid;
  } else if (!netns.empty() && absl::GetFlag(FLAGS_tap).empty() &&
             !other_link) {
    c.guest = Config::Guest::kNetnsPath;
    c.netns_path = netns;
  }
  const bool attach = c.guest == Config::Guest::kNetnsPid ||
                      c.guest == Config::Guest::kNetnsPath;
  if ((absl::GetFlag(FLAGS_userns_pid) != 0 ||
       !absl::GetFlag(FLAGS_userns).empty()) && !attach) {
    return Usage("--userns and --userns-pid go with --netns-pid or --netns");
  }
  if (absl::GetFlag(FLAGS_userns_pid) != 0 &&
      !absl::GetFlag(FLAGS_userns).empty()) {
    return Usage("--userns and --userns-pid exclude each other");
  }
  if (absl::GetFlag(FLAGS_userns_pid) < 0) {
    return Usage(absl::StrCat("--userns-pid ", absl::GetFlag(FLAGS_userns_pid),
                              " is not a process id"));
  }
  if (absl::GetFlag(FLAGS_no_dns_config) && c.guest != Config::Guest::kRun) {
    return Usage("--no-dns-config goes with -- CMD");
  }
  if (auto s = InheritedFd("ready-fd", absl::GetFlag(FLAGS_ready_fd));
      !s.ok()) {
    return s;
  }
  if (auto s = InheritedFd("exit-fd", absl::GetFlag(FLAGS_exit_fd)); !s.ok()) {
    return s;
  }
  c.ready_fd = absl::GetFlag(FLAGS_ready_fd);
  c.exit_fd = absl::GetFlag(FLAGS_exit_fd);
  if (c.guest == Config::Guest::kNone) return absl::OkStatus();
  if (other_link) {
    return Usage("-- CMD, --netns-pid and --netns (without --tap) make their "
                 "own TAP in the guest's namespace: no --packet, --unix or "
                 "--fd");
  }
  if (!absl::GetFlag(FLAGS_tap).empty()) {
    c.guest_ifname = absl::GetFlag(FLAGS_tap);
  }
  if (c.guest_ifname.size() > 15) {
    return Usage(absl::StrCat("--tap: interface name '", c.guest_ifname,
                              "' is longer than 15 bytes"));
  }
  c.dns_config = !absl::GetFlag(FLAGS_no_dns_config);
  c.quiet = c.guest == Config::Guest::kRun && !absl::GetFlag(FLAGS_verbose);
  if (const std::string r = absl::GetFlag(FLAGS_runas); !r.empty()) {
    if (c.guest != Config::Guest::kRun) {
      return Usage("--runas is for -- CMD");
    }
    if (geteuid() != 0) {
      return Usage("--runas needs root (without root, CMD runs as you)");
    }
    absl::StatusOr<RunAs> runas = ParseRunAs(r);
    if (!runas.ok()) return Usage(std::string(runas.status().message()));
    c.runas = *runas;
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ParseConfig() {
  Config c;
  if (absl::Status s = ParseGuest(c); !s.ok()) return s;
  const bool own_tap = c.guest != Config::Guest::kNone;
  const int links = !absl::GetFlag(FLAGS_tap).empty() +
                    !absl::GetFlag(FLAGS_packet).empty() +
                    !absl::GetFlag(FLAGS_unix).empty() +
                    (absl::GetFlag(FLAGS_fd) != -1);
  if (links != 1 && !own_tap) {
    return Usage("exactly one of --tap, --packet, --unix or --fd is required "
                 "(or -- CMD, --netns-pid PID or --netns NS alone)");
  }
  const std::string fd_type = absl::GetFlag(FLAGS_fd_type);
  if (absl::GetFlag(FLAGS_fd) != -1) {
    if (absl::GetFlag(FLAGS_fd) < 0) {
      return Usage(absl::StrCat("--fd ", absl::GetFlag(FLAGS_fd),
                                " is not a file descriptor"));
    }
    if (fd_type != "tap" && fd_type != "stream") {
      return Usage(absl::StrCat("--fd needs --fd-type tap or stream (got '",
                                fd_type, "')"));
    }
    if (!absl::GetFlag(FLAGS_netns).empty()) {
      return Usage("--netns does not apply to --fd (the fd is already open "
                   "where its parent made it)");
    }
    if (fcntl(absl::GetFlag(FLAGS_fd), F_GETFD) < 0) {
      return Usage(absl::StrCat("--fd ", absl::GetFlag(FLAGS_fd),
                                " is not open in this process"));
    }
    c.fd = absl::GetFlag(FLAGS_fd);
    c.fd_is_tap = fd_type == "tap";
  } else if (!fd_type.empty()) {
    return Usage("--fd-type needs --fd N");
  }
  if (absl::GetFlag(FLAGS_unix_connect) && absl::GetFlag(FLAGS_unix).empty()) {
    return Usage("--unix_connect needs --unix PATH");
  }
  if (const int64_t uid = absl::GetFlag(FLAGS_unix_allow_uid);
      uid != -1 && (absl::GetFlag(FLAGS_unix).empty() || uid < 0 ||
                    uid >= int64_t{0xffffffff})) {
    return Usage("--unix-allow-uid UID needs --unix PATH and a user id");
  }
  if (!absl::GetFlag(FLAGS_unix).empty() && !absl::GetFlag(FLAGS_netns).empty()) {
    return Usage("--netns does not apply to --unix (a UNIX socket has no "
                 "network namespace)");
  }
  for (const std::string& a : absl::GetFlag(FLAGS_addr)) {
    auto cidr = stack::ParseIpv4Cidr(a);
    if (!cidr) return Usage(absl::StrCat("--addr: bad IPv4 CIDR '", a, "' (want e.g. 10.0.0.2/24)"));
    c.addrs.push_back(*cidr);
  }
  for (const std::string& a : absl::GetFlag(FLAGS_addr6)) {
    auto cidr = stack::ParseIpv6Cidr(a);
    if (!cidr) return Usage(absl::StrCat("--addr6: bad IPv6 CIDR '", a, "' (want e.g. fd00::2/64)"));
    c.addrs6.push_back(*cidr);
  }
  if (absl::GetFlag(FLAGS_backend) || own_tap) {
    if (!c.addrs.empty() || !c.addrs6.empty() ||
        !absl::GetFlag(FLAGS_gateway).empty()) {
      return Usage("--backend takes its addresses from --net and --net6; "
                   "no --addr, --addr6 or --gateway");
    }
    auto net4 = stack::ParseIpv4Cidr(absl::GetFlag(FLAGS_net));
    if (!net4) {
      return Usage(absl::StrCat("--net: bad IPv4 CIDR '",
                                absl::GetFlag(FLAGS_net), "'"));
    }
    auto net6 = stack::ParseIpv6Cidr(absl::GetFlag(FLAGS_net6));
    if (!net6) {
      return Usage(absl::StrCat("--net6: bad IPv6 prefix '",
                                absl::GetFlag(FLAGS_net6), "'"));
    }
    // 65520, as slirp4netns and pasta: the largest frame a TAP's 64 KiB
    // receive chunk takes after its 2-byte alignment pad.
    const int mtu = absl::GetFlag(FLAGS_mtu) == 0 ? kBackendDefaultMtu
                                                  : absl::GetFlag(FLAGS_mtu);
    auto plan = backend::AddressPlan::ForNetworks(*net4, *net6,
                                                  static_cast<uint32_t>(mtu));
    if (!plan.ok()) return Usage(std::string(plan.status().message()));
    backend::BackendConfig b;
    b.plan = *plan;
    b.policy.host_loopback = absl::GetFlag(FLAGS_host_loopback);
    for (const std::string& a : absl::GetFlag(FLAGS_outbound_bind)) {
      if (auto v4 = wire::Ipv4Address::Parse(a)) {
        if (b.policy.outbound_bind4) return Usage("--outbound-bind: two IPv4 addresses");
        b.policy.outbound_bind4 = v4;
      } else if (auto v6 = wire::Ipv6Address::Parse(a)) {
        if (b.policy.outbound_bind6) return Usage("--outbound-bind: two IPv6 addresses");
        b.policy.outbound_bind6 = v6;
      } else {
        return Usage(absl::StrCat("--outbound-bind: '", a, "' is not an IP address"));
      }
    }
    const int max_flows = absl::GetFlag(FLAGS_max_tcp_flows);
    if (max_flows < 1 || max_flows > 1000000) {
      return Usage(absl::StrCat("--max-tcp-flows ", max_flows,
                                " out of range [1, 1000000]"));
    }
    b.limits.max_tcp_flows = static_cast<uint32_t>(max_flows);
    b.limits.busy_connect_rate =
        static_cast<uint32_t>(absl::GetFlag(FLAGS_busy_syn_rate));
    b.limits.busy_connect_burst =
        std::max<uint32_t>(1, b.limits.busy_connect_rate / 10);
    const int max_udp = absl::GetFlag(FLAGS_max_udp_flows);
    if (max_udp < 1 || max_udp > 1000000) {
      return Usage(absl::StrCat("--max-udp-flows ", max_udp,
                                " out of range [1, 1000000]"));
    }
    b.limits.max_udp_flows = static_cast<uint32_t>(max_udp);
    const absl::Duration udp_timeout = absl::GetFlag(FLAGS_udp_timeout);
    if (udp_timeout < absl::Seconds(1)) {
      return Usage(absl::StrCat("--udp-timeout ",
                                absl::FormatDuration(udp_timeout),
                                " is below 1s"));
    }
    b.limits.udp_idle_timeout = udp_timeout;
    const absl::Duration guest_timeout = absl::GetFlag(FLAGS_tcp_guest_timeout);
    if (guest_timeout != absl::ZeroDuration() &&
        guest_timeout < absl::Seconds(1)) {
      return Usage(absl::StrCat("--tcp-guest-timeout ",
                                absl::FormatDuration(guest_timeout),
                                " is below 1s (0 turns it off)"));
    }
    b.limits.tcp_guest_timeout = guest_timeout;
    for (const std::string& u : absl::GetFlag(FLAGS_dns_upstream)) {
      auto up = backend::ParseDnsUpstream(u);
      if (!up.ok()) {
        return Usage(absl::StrCat("--dns-upstream: ", up.status().message()));
      }
      b.policy.dns_upstreams.push_back(*up);
    }
    c.backend = b;
    for (const auto& [flag, udp, list] :
         {std::tuple{"-t", false, &tcp_forwards},
          std::tuple{"-u", true, &udp_forwards}}) {
      for (const std::string& spec : *list) {
        auto rules = ParseForwardSpec(udp, spec);
        if (!rules.ok()) {
          return Usage(absl::StrCat(flag, " ", spec, ": ",
                                    rules.status().message()));
        }
        c.forwards.push_back({flag, spec, *std::move(rules)});
      }
    }
    c.forward_api = absl::GetFlag(FLAGS_forward_api);
    if (!absl::GetFlag(FLAGS_control).empty()) {
      return Usage("--control drives the stack's own sockets: host mode only "
                   "(not with --backend)");
    }
    const std::string path = absl::GetFlag(FLAGS_forward_path);
    if (path == "auto") {
      c.forward_path = ForwardPath::kAuto;
    } else if (path == "splice") {
      c.forward_path = ForwardPath::kSplice;
    } else if (path == "stack") {
      c.forward_path = ForwardPath::kStack;
    } else {
      return Usage(absl::StrCat("--forward-path '", path,
                                "': want auto, splice or stack"));
    }
    for (const auto& [name, flag, out] :
         {std::tuple{"--max-forward-conns", &FLAGS_max_forward_conns,
                     &c.max_forward_conns},
          std::tuple{"--max-conns-per-forward", &FLAGS_max_conns_per_forward,
                     &c.max_conns_per_forward}}) {
      const int v = absl::GetFlag(*flag);
      if (v < 1 || v > 1000000) {
        return Usage(
            absl::StrCat(name, " ", v, " out of range [1, 1000000]"));
      }
      *out = static_cast<uint64_t>(v);
    }
    if (c.forward_path == ForwardPath::kSplice && !own_tap) {
      return Usage("--forward-path=splice needs a namespace guest (-- CMD, "
                   "--netns-pid or --netns): a VM's connections go through "
                   "the stack");
    }
  } else if (!tcp_forwards.empty() || !udp_forwards.empty() ||
             !absl::GetFlag(FLAGS_forward_api).empty()) {
    return Usage("-t, -u and --forward-api forward to a guest: they need "
                 "--backend (or -- CMD)");
  } else {
    c.control = absl::GetFlag(FLAGS_control);
    if (absl::GetFlag(FLAGS_host_loopback) ||
        !absl::GetFlag(FLAGS_outbound_bind).empty() ||
        !absl::GetFlag(FLAGS_dns_upstream).empty()) {
      return Usage(
          "--host-loopback, --outbound-bind and --dns-upstream need --backend");
    }
    if (c.addrs.empty() && c.addrs6.empty()) {
      return Usage("at least one --addr or --addr6 is required (or --backend)");
    }
  }
  const std::string gw = absl::GetFlag(FLAGS_gateway);
  if (!gw.empty()) {
    if (auto v4 = wire::Ipv4Address::Parse(gw)) {
      c.gateway4 = v4;
    } else if (auto v6 = wire::Ipv6Address::Parse(gw)) {
      c.gateway6 = v6;
    } else {
      return Usage(absl::StrCat("--gateway: '", gw, "' is not an IP address"));
    }
  }
  const int mtu = absl::GetFlag(FLAGS_mtu);
  if (mtu != 0 && (mtu < 1280 || mtu > 65535)) {
    return Usage(absl::StrCat("--mtu ", mtu, " out of range [1280, 65535]"));
  }
  if (const int q = absl::GetFlag(FLAGS_tap_queues); q < 1 || q > 16) {
    return Usage(absl::StrCat("--tap-queues ", q, " out of range [1, 16]"));
  }
  if (const int r = absl::GetFlag(FLAGS_busy_syn_rate);
      r < 0 || r > 10000000) {
    return Usage(absl::StrCat("--busy-syn-rate ", r,
                              " out of range [0, 10000000]"));
  }
  const std::string mac = absl::GetFlag(FLAGS_mac);
  if (!mac.empty()) {
    c.mac = wire::MacAddress::Parse(mac);
    if (!c.mac || c.mac->IsMulticast()) {
      return Usage(absl::StrCat("--mac: '", mac, "' is not a unicast MAC"));
    }
  }
  auto fraction = [&](const char* name, double v) -> absl::Status {
    if (!(v >= 0 && v <= 1)) {
      return Usage(absl::StrCat("--", name, " ", v,
                                " is not a fraction in [0, 1] (0.01 = 1%)"));
    }
    return absl::OkStatus();
  };
  c.faults.loss = absl::GetFlag(FLAGS_loss);
  c.faults.duplicate = absl::GetFlag(FLAGS_duplicate);
  c.faults.reorder = absl::GetFlag(FLAGS_reorder);
  c.faults.corrupt = absl::GetFlag(FLAGS_corrupt);
  c.faults.delay = absl::GetFlag(FLAGS_delay);
  c.faults.jitter = absl::GetFlag(FLAGS_jitter);
  for (auto [name, v] : {std::pair{"loss", c.faults.loss},
                         std::pair{"duplicate", c.faults.duplicate},
                         std::pair{"reorder", c.faults.reorder},
                         std::pair{"corrupt", c.faults.corrupt}}) {
    if (auto s = fraction(name, v); !s.ok()) return s;
  }
  if (c.faults.delay < absl::ZeroDuration() ||
      c.faults.jitter < absl::ZeroDuration()) {
    return Usage("--delay and --jitter must not be negative");
  }
  if (c.faults.jitter > c.faults.delay) {
    return Usage("--jitter must not exceed --delay");
  }
  c.any_fault = c.faults.Active();
  const int queue_limit = absl::GetFlag(FLAGS_fault_queue_limit);
  if (queue_limit < 1 || queue_limit > 1000000) {
    return Usage(absl::StrCat("--fault_queue_limit ", queue_limit,
                              " out of range [1, 1000000]"));
  }

  const int gso = absl::GetFlag(FLAGS_gso);
  if (gso < 0 || gso > 65535) {
    return Usage(absl::StrCat("--gso ", gso, " out of range [0, 65535]"));
  }
  if (absl::GetFlag(FLAGS_swgso) && absl::GetFlag(FLAGS_hostgso)) {
    return Usage("--swgso and --hostgso exclude each other");
  }
  const bool tap_link = !absl::GetFlag(FLAGS_tap).empty() ||
                        (c.fd >= 0 && c.fd_is_tap) || own_tap;
  if (gso_given &&
      !absl::GetFlag(FLAGS_swgso) && !absl::GetFlag(FLAGS_hostgso) &&
      !(c.backend && tap_link)) {
    // It sizes the super-segments of a GSO mode; alone it would do
    // nothing, silently.
    return Usage(absl::StrCat("--gso ", gso,
                              " needs --swgso or --hostgso (or --backend on "
                              "a TAP, where host GSO is the default)"));
  }
  const bool stream_link = !absl::GetFlag(FLAGS_unix).empty() ||
                           (c.fd >= 0 && !c.fd_is_tap);
  if (absl::GetFlag(FLAGS_hostgso) && stream_link) {
    return Usage("--hostgso needs --packet or --tap (a stream socket has no "
                 "kernel to segment)");
  }
  if (absl::GetFlag(FLAGS_swgso)) c.swgso = static_cast<uint32_t>(gso);
  if (absl::GetFlag(FLAGS_hostgso)) c.hostgso = static_cast<uint32_t>(gso);
  // A guest's TAP gets host GSO unless told otherwise: the guest kernel's
  // TSO frames arrive whole and our super-segments reach it whole, so a
  // guest at MTU 1500 moves 64 KiB at a time. --swgso or --gso 0 opt out.
  if (c.backend && tap_link && !absl::GetFlag(FLAGS_swgso) && gso > 0) {
    c.hostgso = static_cast<uint32_t>(gso);
  }

  // Services. 0 is "off" for echo and discard, "the default" for HTTP.
  auto port = [&](const char* name, int v, uint16_t* out) -> absl::Status {
    if (v < 0 || v > 65535) {
      return Usage(
          absl::StrCat("--", name, " ", v, " out of range [1, 65535]"));
    }
    *out = static_cast<uint16_t>(v);
    return absl::OkStatus();
  };
  const std::string sandbox = absl::GetFlag(FLAGS_sandbox);
  if (sandbox != "on" && sandbox != "off" && sandbox != "log") {
    return Usage(
        absl::StrCat("--sandbox '", sandbox, "': want on, off or log"));
  }
  c.sandbox = sandbox != "off";
  c.sandbox_log = sandbox == "log";
  c.sandbox_test = absl::GetFlag(FLAGS_sandbox_test);
  if (!c.sandbox_test.empty() && c.sandbox_test != "execve" &&
      c.sandbox_test != "kill") {
    return Usage(absl::StrCat("--sandbox-test '", c.sandbox_test,
                              "': want execve or kill"));
  }
  c.reassembly_timeout = absl::GetFlag(FLAGS_reassembly_timeout);
  if (c.reassembly_timeout != absl::ZeroDuration() &&
      (c.reassembly_timeout < absl::Seconds(1) ||
       c.reassembly_timeout > absl::Seconds(120))) {
    return Usage(absl::StrCat("--reassembly-timeout ",
                              absl::FormatDuration(c.reassembly_timeout),
                              " out of range [1s, 2m] (0: the defaults)"));
  }
  c.http_root = absl::GetFlag(FLAGS_http_root);
  if (auto s = port("http-port", absl::GetFlag(FLAGS_http_port), &c.http_port);
      !s.ok()) {
    return s;
  }
  if (c.http_root.empty() && c.http_port != 0) {
    return Usage("--http-port needs --http-root DIR");
  }
  if (!c.http_root.empty() && c.http_port == 0) c.http_port = 80;
  if (auto s = port("echo-port", absl::GetFlag(FLAGS_echo_port), &c.echo_port);
      !s.ok()) {
    return s;
  }
  if (auto s = port("discard-port", absl::GetFlag(FLAGS_discard_port),
                    &c.discard_port);
      !s.ok()) {
    return s;
  }
  return c;
}

// The lines after "running on": what a user would otherwise have to
// reconstruct from the flags (addresses, services, the backend's plan).
std::string StartSummary(const Config& c) {
  const uint32_t swgso = c.swgso, hostgso = c.hostgso;
  std::string out;
  if (c.backend) {
    const backend::AddressPlan& p = c.backend->plan;
    absl::StrAppend(&out, "netstackd: backend: ", stack::ToString(p.net4),
                    " (gateway ", p.gateway4.ToString(), ", DNS ",
                    p.dns4.ToString(), ", lease ", p.lease4.ToString(), "), ",
                    stack::ToString(p.net6), " (gateway ",
                    p.gateway6.ToString(), ", DNS ", p.dns6.ToString(),
                    "), MTU ", p.mtu, "\n");
  } else {
    std::vector<std::string> addrs;
    for (const auto& a : c.addrs) addrs.push_back(stack::ToString(a));
    for (const auto& a : c.addrs6) addrs.push_back(stack::ToString(a));
    absl::StrAppend(&out, "netstackd: addresses: ",
                    addrs.empty() ? "none" : absl::StrJoin(addrs, " "), "\n");
    std::vector<std::string> services;
    if (c.http_port != 0) {
      services.push_back(absl::StrCat("http tcp/", c.http_port, " (",
                                      c.http_root, ")"));
    }
    if (c.echo_port != 0) {
      services.push_back(absl::StrCat("echo tcp+udp/", c.echo_port));
    }
    if (c.discard_port != 0) {
      services.push_back(absl::StrCat("discard tcp+udp/", c.discard_port));
    }
    absl::StrAppend(&out, "netstackd: services: ",
                    services.empty() ? "none (ping only)"
                                     : absl::StrJoin(services, ", "),
                    "\n");
  }
  absl::StrAppend(&out, "netstackd: GSO: ",
                  hostgso   ? absl::StrCat("host, ", hostgso, " bytes")
                  : swgso   ? absl::StrCat("software, ", swgso, " bytes")
                            : std::string("off"),
                  "\n");
  return out;
}

// Calls the outermost endpoint when the base link's fd is readable.
class LinkHandler : public eventloop::Handler {
 public:
  explicit LinkHandler(link::LinkEndpoint& link) : link_(link) {}
  void OnReadable(Instant now) override { link_.OnReadable(now); }

 private:
  link::LinkEndpoint& link_;
};

// A Handler that calls `fn` when its fd is readable (or hung up).
class OnReadableFn : public eventloop::Handler {
 public:
  explicit OnReadableFn(absl::AnyInvocable<void(Instant)> fn)
      : fn_(std::move(fn)) {}
  void OnReadable(Instant now) override { fn_(now); }

 private:
  absl::AnyInvocable<void(Instant)> fn_;
};

// Marks every fd above stderr close-on-exec (close_range, Linux 5.11; a
// loop over /proc/self/fd before that).
void CloseInheritedOnExec() {
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return;
  const int own = dirfd(d);
  while (struct dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd > 2 && fd != own) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  closedir(d);
}

int Run(const Config& c) {
  // Spliced -t connections at once: --max-forward-conns, or what the fd
  // limit holds beside the guest's own flows.
  uint64_t max_forward_conns = c.max_forward_conns;
  // -t connections through the stack at once: the backend's inbound TCP
  // share, the same flag, one fd each (0 when -t is spliced: none come).
  uint64_t max_inbound_tcp_flows = c.max_forward_conns;
  if (c.backend) {
    // One host fd per flow: the limit must cover the flow limits.
    FdBudget budget;
    budget.tcp_flows = c.backend->limits.max_tcp_flows;
    budget.udp_flows = c.backend->limits.max_udp_flows;
    budget.ping_flows = backend::PingOptions{}.max_flows;
    budget.dns_queries = backend::DnsForwarderOptions{}.max_pending;
    bool udp_forwards = false;
    bool tcp_rules = false;
    for (const Config::Forward& f : c.forwards) {
      for (const ForwardRule& r : f.rules) {
        // One listener, or two without BIND_ADDR (both families).
        budget.forwards += r.bind || !r.unix_path.empty() ? 1 : 2;
        udp_forwards |= r.udp;
        tcp_rules |= !r.udp;
      }
    }
    // A -u added later through --forward-api has as many client flows.
    if (udp_forwards || !c.forward_api.empty()) {
      budget.forwards += c.backend->limits.max_udp_flows;
    }
    // A namespace guest's -t connections are spliced (the forward API may
    // add some later), 6 fds each; a VM's go through the stack, 1 each.
    if (tcp_rules || !c.forward_api.empty()) {
      if (c.guest != Config::Guest::kNone &&
          c.forward_path != ForwardPath::kStack) {
        budget.spliced_conns = c.max_forward_conns;
      } else {
        budget.stack_conns = c.max_forward_conns;
      }
    }
    FdLimits limits;
    const std::string line = RaiseFdLimit(budget, &limits);
    max_forward_conns = SplicedConnsThatFit(budget, limits.soft);
    max_inbound_tcp_flows = StackConnsThatFit(budget, limits.soft);
    if (!c.quiet || absl::StrContains(line, "warning")) {
      std::fputs(line.c_str(), stderr);
    }
  }
  // The guest's namespace, when we make or join it. Before any thread: a
  // user namespace needs a single-threaded process.
  link::UniqueFd guest_netns;
  link::UniqueFd watched_pid;  // --netns-pid: quit when it exits
  std::string watched_path;    // --netns: quit when it is gone
  struct stat watched_stat {};
  link::DirEntryRef watched_entry;  // watched_path
  link::UniqueFd guest_userns;  // -- CMD's user namespace
  {
    // No process of the guest's may read or write our memory (issue #30,
    // sandbox.h): from before anything of the guest's runs or is joined.
    // Except that, when not root, -- CMD's start writes our own uid_map
    // first, which a non-dumpable process may not; no guest exists then.
    const bool maps_itself = c.guest == Config::Guest::kRun &&
                             geteuid() != 0 &&
                             absl::GetFlag(FLAGS_userns).empty() &&
                             absl::GetFlag(FLAGS_userns_pid) == 0;
    absl::Status s = maps_itself ? absl::OkStatus() : HideFromGuest();
    if (s.ok() && !absl::GetFlag(FLAGS_userns).empty()) {
      s = JoinUserns(absl::GetFlag(FLAGS_userns));
    } else if (s.ok() && absl::GetFlag(FLAGS_userns_pid) != 0) {
      s = JoinUserns(
          absl::StrCat("/proc/", absl::GetFlag(FLAGS_userns_pid), "/ns/user"));
    }
    absl::StatusOr<link::UniqueFd> ns = link::UniqueFd();
    if (!s.ok()) {
      ns = s;
    } else if (c.guest == Config::Guest::kRun) {
      bool made_userns = false;
      absl::StatusOr<GuestNamespaces> made =
          MakeGuestNamespaces(&made_userns, c.runas);
      if (!made.ok()) {
        ns = made.status();
      } else if (absl::Status h = HideFromGuest(); !h.ok()) {
        ns = h;
      } else {
        guest_userns = std::move(made->userns);
        ns = std::move(made->netns);
      }
    } else if (c.guest == Config::Guest::kNetnsPid) {
      const bool join = geteuid() != 0 && absl::GetFlag(FLAGS_userns).empty() &&
                        absl::GetFlag(FLAGS_userns_pid) == 0;
      ns = OpenNetnsOfPid(absl::GetFlag(FLAGS_netns_pid), join, &watched_pid);
      if (!ns.ok()) {
        ns = absl::Status(ns.status().code(),
                          absl::StrCat("--netns-pid ",
                                       absl::GetFlag(FLAGS_netns_pid), ": ",
                                       ns.status().message()));
      }
    } else if (c.guest == Config::Guest::kNetnsPath) {
      ns = OpenNetnsPath(c.netns_path, &watched_path);
      if (ns.ok() && fstat(ns->get(), &watched_stat) != 0) {
        ns = link::ErrnoStatus(errno, absl::StrCat("stat ", watched_path));
      }
      // Watched by its directory: the check still works once the
      // filesystem is detached (least_privilege.h).
      if (ns.ok()) {
        auto entry = link::DirEntryRef::Of(watched_path);
        if (entry.ok()) {
          watched_entry = *std::move(entry);
        } else {
          ns = entry.status();
        }
      }
    }
    if (!ns.ok()) {
      std::fprintf(stderr, "netstackd: %s\n",
                   std::string(ns.status().message()).c_str());
      return 1;
    }
    guest_netns = std::move(*ns);
  }
  // 64 MiB of payload chunks at most, an eighth of them kept for receiving
  // (chunk.h: queued data never takes the chunks its acks need).
  buffer::ChunkPool chunks(1024);
  buffer::PacketPool packets(16384);
  std::unique_ptr<link::LinkEndpoint> host;
  // --unix / a stream --fd: its peers and disconnects, for the counters
  // (owned by `host`, or by the link chain around it).
  const link::UnixStreamEndpoint* stream = nullptr;
  if (!absl::GetFlag(FLAGS_unix).empty() || (c.fd >= 0 && !c.fd_is_tap)) {
    link::UnixStreamOptions o;
    o.path = absl::GetFlag(FLAGS_unix);
    o.mode = absl::GetFlag(FLAGS_unix_connect)
                 ? link::UnixStreamOptions::Mode::kConnect
                 : link::UnixStreamOptions::Mode::kListen;
    if (absl::GetFlag(FLAGS_unix_allow_uid) >= 0) {
      o.allow_uid = static_cast<uid_t>(absl::GetFlag(FLAGS_unix_allow_uid));
    }
    o.mac = c.mac;
    if (absl::GetFlag(FLAGS_mtu) != 0) o.mtu = absl::GetFlag(FLAGS_mtu);
    if (c.backend) o.mtu = c.backend->plan.mtu;
    auto us = c.fd >= 0
                  ? link::UnixStreamEndpoint::FromConnectedFd(c.fd, o, chunks)
                  : link::UnixStreamEndpoint::Open(o, chunks);
    if (!us.ok()) {
      std::fprintf(stderr, "netstackd: %s\n", std::string(us.status().message()).c_str());
      return 1;
    }
    stream = us->get();
    host = std::move(*us);
  } else {
    HostLinkOptions o;
    o.tap_name = absl::GetFlag(FLAGS_tap);
    if (guest_netns.valid()) {
      o.tap_name = c.guest_ifname;
      o.tap_netns_fd = guest_netns.get();
    }
    o.tap_fd = c.fd;
    o.tap_queues = static_cast<uint32_t>(absl::GetFlag(FLAGS_tap_queues));
    if (o.tap_name.empty() && c.fd < 0) {
      o.packet_interface = absl::GetFlag(FLAGS_packet);
    }
    o.netns = absl::GetFlag(FLAGS_netns);
    o.mac = c.mac;
    o.mtu = c.backend ? c.backend->plan.mtu
                      : static_cast<uint32_t>(absl::GetFlag(FLAGS_mtu));
    o.host_gso_max_size = c.hostgso;
    if (c.backend && !o.tap_name.empty() && !guest_netns.valid()) {
      // The guest's frames wait in the TAP's queue until we read them:
      // room for a full receive window of MTU-sized frames, so a burst the
      // window allows is not dropped there.
      o.tap_tx_queue_len = BackendTapQueueLen(c.backend->plan.mtu);
    }
    std::vector<std::string> notes;
    auto opened = OpenHostLink(o, chunks, &notes);
    if (!opened.ok()) {
      std::fprintf(stderr, "netstackd: %s\n",
                   std::string(opened.status().message()).c_str());
      return 1;
    }
    if (!c.quiet) {
      for (const std::string& n : notes) {
        std::fprintf(stderr, "netstackd: note: %s\n", n.c_str());
      }
    }
    host = *std::move(opened);
  }
  if (guest_netns.valid()) {
    // The guest's side: lo and the TAP up, the plan's addresses (the
    // DHCP lease's, and host ::100 of the IPv6 prefix), default routes.
    const backend::AddressPlan& p = c.backend->plan;
    GuestInterface g;
    g.name = c.guest_ifname;
    g.mtu = p.mtu;
    // Room for a full receive window of MTU-sized frames: the guest's
    // frames wait in the TAP's queue until we read them.
    g.tx_queue_len = BackendTapQueueLen(p.mtu);
    g.addr4 = stack::Ipv4Cidr{p.lease4, p.net4.prefix_len};
    g.gateway4 = p.gateway4;
    g.addr6 = stack::Ipv6Cidr{p.net6.address, p.net6.prefix_len};
    g.addr6.address.bytes[14] = 0x01;
    g.addr6.address.bytes[15] = 0x00;
    g.gateway6 = p.gateway6;
    absl::Status s = link::RunInNetnsFd(
        guest_netns.get(), [&] { return ConfigureGuestInterface(g); });
    if (!s.ok()) {
      std::fprintf(stderr, "netstackd: guest interface: %s\n",
                   std::string(s.message()).c_str());
      return 1;
    }
  }
  LinkDecorators decorators;
  decorators.pcap = absl::GetFlag(FLAGS_pcap);
  if (c.any_fault) {
    link::FaultInjectorOptions fo;
    fo.egress = c.faults;
    fo.seed = absl::GetFlag(FLAGS_seed);
    fo.queue_limit =
        static_cast<size_t>(absl::GetFlag(FLAGS_fault_queue_limit));
    if (absl::GetFlag(FLAGS_fault_ingress)) fo.ingress = c.faults;
    decorators.faults = fo;
  }
  decorators.software_gso_max_size = c.swgso;
  auto chain = DecorateLink(std::move(host), decorators, chunks, packets);
  if (!chain.ok()) {
    std::fprintf(stderr, "netstackd: %s\n",
                 std::string(chain.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<link::LinkEndpoint> link = std::move(chain->outer);
  link::FaultInjector* const faults = chain->faults;
  const int read_fd = chain->read_fd;

  stack::StackOptions stack_options;
  if (c.reassembly_timeout != absl::ZeroDuration()) {
    stack_options.reassembly.ipv4_timeout = c.reassembly_timeout;
    stack_options.reassembly.ipv6_timeout = c.reassembly_timeout;
  }
  stack::Stack st(stack_options, chunks, packets);
  const std::string nic_name = c.fd >= 0 ? absl::StrCat("fd", c.fd)
                               : !absl::GetFlag(FLAGS_tap).empty()
                                   ? absl::GetFlag(FLAGS_tap)
                               : !absl::GetFlag(FLAGS_packet).empty()
                                   ? absl::GetFlag(FLAGS_packet)
                                   : "unix0";
  auto nic = st.AddNic(link.get(), nic_name);
  if (!nic.ok()) {
    std::fprintf(stderr, "netstackd: %s\n", std::string(nic.status().message()).c_str());
    return 1;
  }
  for (const auto& a : c.addrs) {
    if (auto s = st.AddAddress(*nic, a); !s.ok()) {
      std::fprintf(stderr, "netstackd: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  for (const auto& a : c.addrs6) {
    if (auto s = st.AddAddress(*nic, a); !s.ok()) {
      std::fprintf(stderr, "netstackd: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (c.gateway4) {
    (void)st.AddRoute(stack::Route<wire::Ipv4Address>{
        stack::Ipv4Cidr{wire::Ipv4Address(), 0}, c.gateway4, *nic});
  }
  if (c.gateway6) {
    (void)st.AddRoute(stack::Route<wire::Ipv6Address>{
        stack::Ipv6Cidr{wire::Ipv6Address(), 0}, c.gateway6, *nic});
  }

  absl::StatusOr<uint64_t> tcp_seed = RandomSeed();
  absl::StatusOr<uint64_t> udp_seed = RandomSeed();
  if (!tcp_seed.ok() || !udp_seed.ok()) {
    const absl::Status& bad =
        tcp_seed.ok() ? udp_seed.status() : tcp_seed.status();
    std::fprintf(stderr, "netstackd: %s\n", std::string(bad.message()).c_str());
    return 1;
  }
  transport::Notifier notifier;
  tcp::TcpLayerOptions tcp_options;
  tcp_options.seed = *tcp_seed;
  tcp_options.busy_syn_rate =
      static_cast<uint32_t>(absl::GetFlag(FLAGS_busy_syn_rate));
  tcp_options.busy_syn_burst =
      std::max<uint32_t>(1, tcp_options.busy_syn_rate / 10);
  // Both layers register themselves with the stack.
  tcp::TcpLayer tcp(st, chunks, packets, notifier, tcp_options);
  udp::UdpLayer udp(st, chunks, packets, notifier, *udp_seed);

  auto loop_or = eventloop::EventLoop::Create();
  if (!loop_or.ok()) {
    std::fprintf(stderr, "netstackd: %s\n", std::string(loop_or.status().message()).c_str());
    return 1;
  }
  eventloop::EventLoop& loop = **loop_or;
  // Backend mode: the NIC becomes the guest's gateway.
  std::unique_ptr<backend::Backend> gateway;
  if (c.backend) {
    backend::BackendConfig bc = *c.backend;
    bc.limits.max_inbound_tcp_flows =
        static_cast<uint32_t>(max_inbound_tcp_flows);
    auto b = backend::Backend::Create(bc, st, *nic, tcp, udp, loop, chunks,
                                      packets);
    if (!b.ok()) {
      std::fprintf(stderr, "netstackd: %s\n",
                   std::string(b.status().message()).c_str());
      return 1;
    }
    gateway = std::move(*b);
  }
  LinkHandler handler(*link);
  if (auto s = loop.Add(read_fd, eventloop::EventLoop::kReadable, &handler);
      !s.ok()) {
    std::fprintf(stderr, "netstackd: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  eventloop::PollerRef<stack::Stack> stack_poller(&st);
  eventloop::PollerRef<link::LinkEndpoint> link_poller(link.get());
  TransportPoller transport_poller(tcp, notifier);
  loop.AddPoller(&stack_poller);
  loop.AddPoller(&link_poller);
  loop.AddPoller(&transport_poller);

  // The services come after the layers and the loop, so they are
  // destroyed first: their sockets belong to the layers and their timers
  // to the loop's wheel.
  ServiceContext ctx;
  ctx.tcp = &tcp;
  ctx.udp = &udp;
  ctx.timers = &loop.timers();
  ctx.now = loop.Now();
  std::vector<std::unique_ptr<Service>> services;
  auto service_failed = [](const char* flag, const absl::Status& s) {
    std::fprintf(stderr, "netstackd: %s: %s\n", flag,
                 std::string(s.message()).c_str());
    return 1;
  };
  if (!c.http_root.empty()) {
    HttpServerOptions o;
    o.root = c.http_root;
    o.port = c.http_port;
    auto http = HttpServer::Start(ctx, o);
    if (!http.ok()) {
      // EADDRINUSE is the port's fault; anything else, the root's.
      return service_failed(absl::IsAlreadyExists(http.status())
                                ? "--http-port"
                                : "--http-root",
                            http.status());
    }
    services.push_back(std::move(*http));
  }
  if (c.echo_port != 0) {
    auto echo = EchoService::Start(ctx, c.echo_port);
    if (!echo.ok()) return service_failed("--echo-port", echo.status());
    services.push_back(std::move(*echo));
  }
  if (c.discard_port != 0) {
    auto discard = DiscardService::Start(ctx, c.discard_port);
    if (!discard.ok()) {
      return service_failed("--discard-port", discard.status());
    }
    services.push_back(std::move(*discard));
  }

  // One turn's transport work, after the link's batch and the timers:
  // run the readiness callbacks (the services), free what they finished,
  // then let TCP send what they and the batch made pending (its Poll ends
  // with Stack::Flush; the second Flush covers UDP when TCP had nothing).
  loop.AddTurnEndHook([&](Instant now) {
    ctx.now = now;
    notifier.Dispatch();
    for (auto& s : services) s->Sweep();
    if (gateway) gateway->Sweep(now);
    tcp.Poll(now);
    st.Flush(now);
  });

  // Host -> guest forwards (-t, -u); destroyed before the backend.
  std::unique_ptr<PortForwards> forwards;
  // The forward API (--forward-api); destroyed before the forwards.
  std::unique_ptr<ForwardApi> forward_api;
  // The control socket (--control); destroyed before the layers.
  std::unique_ptr<ControlApi> control;
  auto counter_text = [&]() {
    std::string text = st.FormatCounters();
    absl::StrAppend(&text, tcp.FormatCounters());
    if (!text.empty() && text.back() != '\n') text.push_back('\n');
    absl::StrAppend(&text, udp.counters().Format());
    if (gateway) absl::StrAppend(&text, gateway->FormatCounters());
    if (forwards) absl::StrAppend(&text, forwards->FormatCounters());
    for (const auto& s : services) {
      absl::StrAppend(&text, s->FormatCounters(), s->FormatConnections());
    }
    if (faults != nullptr) {
      for (auto [dir, f] : {std::pair{"egress", &faults->egress_stats()},
                            std::pair{"ingress", &faults->ingress_stats()}}) {
        absl::StrAppend(&text, "fault.", dir, ".in ", f->packets_in, "\n",
                        "fault.", dir, ".out ", f->packets_out, "\n",
                        "fault.", dir, ".dropped ", f->dropped, "\n",
                        "fault.", dir, ".duplicated ", f->duplicated, "\n",
                        "fault.", dir, ".reordered ", f->reordered, "\n",
                        "fault.", dir, ".corrupted ", f->corrupted, "\n",
                        "fault.", dir, ".delayed ", f->delayed, "\n",
                        "fault.", dir, ".overflow ", f->overflow, "\n");
      }
    }
    if (forward_api) absl::StrAppend(&text, forward_api->FormatCounters());
    if (control) absl::StrAppend(&text, control->FormatCounters());
    if (stream != nullptr) {
      const link::UnixStreamStats& u = stream->stream_stats();
      absl::StrAppend(&text, "link.stream.connections ", u.connections,
                      "\nlink.stream.rejected_peers ", u.rejected_peers,
                      "\nlink.stream.refused_peers ", u.refused_peers,
                      "\nlink.stream.disconnect_peer_closed ",
                      u.disconnect_peer_closed,
                      "\nlink.stream.disconnect_io_error ",
                      u.disconnect_io_error,
                      "\nlink.stream.disconnect_bad_length ",
                      u.disconnect_bad_length, "\n");
    }
    return text;
  };
  auto print_counters = [&](const char* why) {
    std::fprintf(stderr, "netstackd: counters (%s):\n%s", why,
                 counter_text().c_str());
    std::fflush(stderr);
  };
  // CMD, once it runs: SIGINT, SIGTERM and SIGHUP go on to it, and we
  // stop when it exits.
  std::optional<SandboxCommand> command;
  int exit_status = 0;
  std::vector<int> signals = {SIGINT, SIGTERM, SIGUSR1};
  // SIGWINCH: the terminal's new size, for CMD's pty.
  if (c.guest == Config::Guest::kRun) {
    signals.push_back(SIGHUP);
    signals.push_back(SIGWINCH);
  }
  if (auto s = loop.HandleSignals(
          signals,
          [&](int signo, Instant) {
            if (signo == SIGUSR1) {
              print_counters("SIGUSR1");
            } else if (command) {
              command->Signal(signo);
            } else {
              loop.Stop();
            }
          });
      !s.ok()) {
    std::fprintf(stderr, "netstackd: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (!c.quiet) {
    std::fprintf(stderr, "netstackd: running on %s (nic %u), pid %d\n%s",
                 link->Name().c_str(), *nic, static_cast<int>(getpid()),
                 StartSummary(c).c_str());
    std::fflush(stderr);
  }
  // Readable when what we watch is gone: CMD, the --netns-pid process, the
  // --exit-fd's other end.
  OnReadableFn watch_command([&](Instant) {
    if (command && command->Reap(&exit_status)) {
      (void)loop.Remove(command->pidfd());
      loop.Stop();
    }
  });
  OnReadableFn watch_pid([&](Instant) {
    (void)loop.Remove(watched_pid.get());
    loop.Stop();
  });
  OnReadableFn watch_exit_fd([&](Instant) {
    char byte;
    const ssize_t n = read(c.exit_fd, &byte, 1);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      (void)loop.Remove(c.exit_fd);
      loop.Stop();
    }
  });
  // --netns PATH: checked once a second (`ip netns del` unmounts it).
  eventloop::Timer netns_check;
  netns_check.set_callback([&](Instant now) {
    struct stat now_stat;
    if (watched_entry.Stat(&now_stat) != 0 ||
        now_stat.st_dev != watched_stat.st_dev ||
        now_stat.st_ino != watched_stat.st_ino) {
      std::fprintf(stderr, "netstackd: %s is gone; quitting\n",
                   watched_path.c_str());
      loop.Stop();
      return;
    }
    loop.timers().Schedule(netns_check, now + absl::Seconds(1));
  });
  auto watch = [&](int fd, eventloop::Handler* h) -> bool {
    if (auto s = loop.Add(fd, eventloop::EventLoop::kReadable, h); !s.ok()) {
      std::fprintf(stderr, "netstackd: %s\n", std::string(s.message()).c_str());
      return false;
    }
    return true;
  };
  if (watched_pid.valid() && !watch(watched_pid.get(), &watch_pid)) return 1;
  if (c.exit_fd >= 0 && !watch(c.exit_fd, &watch_exit_fd)) return 1;
  if (!watched_path.empty()) {
    loop.timers().Schedule(netns_check, loop.Now() + absl::Seconds(1));
  }
  if (gateway) {
    PortForwards::Options fo;
    fo.loop = &loop;
    fo.backend = gateway.get();
    fo.guest_netns_fd = guest_netns.get();
    fo.path = c.forward_path;
    fo.max_conns = max_forward_conns;
    fo.max_conns_per_forward = c.max_conns_per_forward;
    forwards = std::make_unique<PortForwards>(fo);
    for (const Config::Forward& f : c.forwards) {
      auto added = forwards->Add(f.spec, f.rules);
      if (!added.ok()) {
        std::fprintf(stderr, "netstackd: %s %s\n", f.flag.c_str(),
                     std::string(added.status().message()).c_str());
        return 1;
      }
    }
    if (!c.forward_api.empty()) {
      auto api = ForwardApi::Create(loop, *forwards, counter_text,
                                    c.forward_api);
      if (!api.ok()) {
        std::fprintf(stderr, "netstackd: %s\n",
                     std::string(api.status().message()).c_str());
        return 1;
      }
      forward_api = *std::move(api);
    }
  }
  if (!c.control.empty()) {
    auto api = ControlApi::Create(loop, tcp, udp, counter_text, c.control);
    if (!api.ok()) {
      std::fprintf(stderr, "netstackd: %s\n",
                   std::string(api.status().message()).c_str());
      return 1;
    }
    control = *std::move(api);
  }
  if (c.guest == Config::Guest::kRun) {
    SandboxCommand::Options o;
    o.argv = c.command;
    o.netns_fd = guest_netns.get();
    o.userns_fd = guest_userns.get();
    // CMD is the caller's uid (or --runas's) and may write the API
    // socket's directory: covered in CMD's mount namespace, the socket can
    // be neither reached nor removed nor replaced from there
    // (docs/SECURITY.md says what that leaves).
    if (forward_api) {
      std::string path = c.forward_api;
      if (path[0] != '/') {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof(cwd)) == nullptr) {
          std::fprintf(stderr, "netstackd: getcwd: %s\n",
                       std::strerror(errno));
          return 1;
        }
        path = absl::StrCat(cwd, "/", path);
      }
      o.cover.push_back(std::move(path));
    }
    if (c.dns_config) {
      const backend::AddressPlan& p = c.backend->plan;
      o.resolv_conf = absl::StrCat("# netstackd: the guest's DNS address\n",
                                   "nameserver ", p.dns4.ToString(), "\n",
                                   "nameserver ", p.dns6.ToString(), "\n");
    }
    absl::StatusOr<SandboxCommand> started = SandboxCommand::Start(o);
    if (!started.ok()) {
      std::fprintf(stderr, "netstackd: %s\n",
                   std::string(started.status().message()).c_str());
      return absl::IsNotFound(started.status()) ? 127 : 126;
    }
    command.emplace(std::move(*started));
    if (!c.quiet) {
      for (const std::string& note : command->notes()) {
        std::fprintf(stderr, "netstackd: %s\n", note.c_str());
      }
    }
    if (!watch(command->pidfd(), &watch_command)) return 1;
  }
  // The forward API is the operator's: CMD runs as our user and sees our
  // files, so it is refused by PID namespace; so is a --netns-pid guest
  // whose namespace is below ours (forward_api.h).
  if (forward_api && (command || watched_pid.valid())) {
    const pid_t guest = command ? command->pid()
                                : absl::GetFlag(FLAGS_netns_pid);
    if (absl::Status s = forward_api->RefuseClientsBelow(
            guest, command ? "CMD's" : "the --netns-pid process's");
        !s.ok()) {
      std::fprintf(stderr, "netstackd: --forward-api: %s%s\n",
                   std::string(s.message()).c_str(),
                   command ? "" : ": its processes are not told apart");
      if (command) return 1;
    }
  }
  if (c.sandbox) {
    LeastPrivilegeOptions lp;
    lp.keep_net_bind_service = !c.forward_api.empty();
    lp.serve_files = !c.http_root.empty();
    lp.log_only = c.sandbox_log;
    if (command) lp.cmd_pid = command->pid();
    if (forward_api) lp.proc_dir_fd = forward_api->proc_dir_fd();
    if (link::NetnsSockets* other = forwards ? forwards->guest_sockets()
                                             : nullptr) {
      lp.on_other_threads = [other](absl::FunctionRef<absl::Status()> step) {
        return other->RunOnWorker(step);
      };
    }
    if (absl::Status s = DropPrivileges(lp); !s.ok()) {
      std::fprintf(stderr, "netstackd: --sandbox: %s (--sandbox=off runs "
                   "without it)\n", std::string(s.message()).c_str());
      return 1;
    }
    if (forwards && lp.detach_filesystem) forwards->FilesystemDetached();
    // What --netns PATH looks like from here on: once the mount namespace
    // is detached, the name no longer leads into the namespace's own
    // mount (the nsfs inode fstat gave) but to the file under it. Either
    // goes away with `ip netns del`, which unmounts and unlinks it.
    if (watched_entry.valid() && watched_entry.Stat(&watched_stat) != 0) {
      std::fprintf(stderr, "netstackd: %s is gone; quitting\n",
                   watched_path.c_str());
      return 0;
    }
  }
  if (!c.sandbox_test.empty()) AttemptForbiddenCall(c.sandbox_test);
  if (c.ready_fd >= 0) {
    const char ready = '1';
    if (write(c.ready_fd, &ready, 1) != 1) {
      std::fprintf(stderr, "netstackd: --ready-fd %d: %s\n", c.ready_fd,
                   std::strerror(errno));
    }
    close(c.ready_fd);
  }
  const absl::Status run = loop.Run();
  if (netns_check.scheduled()) loop.timers().Cancel(netns_check);
  if (!c.quiet) print_counters("exit");
  if (!run.ok()) {
    std::fprintf(stderr, "netstackd: %s\n", std::string(run.message()).c_str());
    return 1;
  }
  return exit_status;
}

}  // namespace
}  // namespace netstack::tools

int main(int argc, char** argv) {
  // No fd this process inherited goes on to CMD (the caller's sockets of
  // the host's network namespace among them): each is close-on-exec from
  // here. netstackd itself keeps what its flags name (--fd, --ready-fd,
  // --exit-fd).
  netstack::tools::CloseInheritedOnExec();
  absl::SetProgramUsageMessage(
      "Runs a netstack userspace TCP/IP stack on one link.\n"
      "usage: netstackd (--tap NAME | --packet IFNAME | --unix PATH | --fd N "
      "--fd-type tap|stream) [--netns NS] "
      "--addr CIDR [--addr6 CIDR] [--gateway IP] [--mtu N] [--pcap FILE] "
      "[--loss F --duplicate F --reorder F --corrupt F --delay D --jitter D "
      "--seed N --fault_queue_limit N --fault_ingress] "
      "[--swgso | --hostgso] [--gso N] "
      "[--http-root DIR [--http-port N]] [--echo-port N] [--discard-port N]\n"
      "       netstackd [BACKEND FLAGS] [--no-dns-config] [--verbose] -- CMD "
      "[ARGS...]\n"
      "       netstackd [BACKEND FLAGS] (--netns-pid PID | --netns NS|PATH) "
      "[--userns-pid PID | --userns PATH] [--tap NAME]\n"
      "       netstackd --backend (--tap NAME --netns NS | --unix PATH | "
      "--fd N --fd-type tap|stream) "
      "[--net CIDR] [--net6 PREFIX] [--mtu N] [--host-loopback] "
      "[--outbound-bind IP] [--max-tcp-flows N] [--max-udp-flows N] "
      "[--udp-timeout D] [--tcp-guest-timeout D] "
      "[--dns-upstream ADDR[:PORT]]... [--swgso | --gso N] [--pcap FILE]\n"
      "It answers ARP, NDP and ping (IPv4 and IPv6, with fragmentation and "
      "reassembly) and runs TCP and UDP; the services (HTTP static files, "
      "echo, discard) listen on every address of both families. With "
      "--backend it is instead a guest's gateway: the guest (10.0.2.100 by "
      "DHCP and SLAAC in fd00::/64 by default) reaches this host's network "
      "through it; each TCP and UDP flow and ping becomes a host socket, "
      "and DNS to 10.0.2.3 / fd00::3 goes to --dns-upstream. With -- CMD it "
      "runs CMD in a new network namespace and a user namespace of its own "
      "(root there is the caller, with no capability outside them) whose "
      "only way out is the backend: tap0 there gets 10.0.2.100/24 and fd00::100/64 with "
      "default routes, CMD sees a resolv.conf naming the DNS address, "
      "SIGINT/SIGTERM/SIGHUP go on to CMD, and netstackd exits with CMD's "
      "status (128+N if signal N killed it; 127 if CMD cannot be found). "
      "CMD runs as pid 2 of a new PID namespace (with its own /proc) under "
      "an init of netstackd's: when CMD exits, whatever it left running "
      "is killed. CMD has a session of its own: a pty of its own when "
      "netstackd runs in the foreground of a terminal, else no "
      "controlling terminal. "
      "--netns-pid and --netns do the same for a namespace that exists. "
      "Flag names "
      "take '-' or '_' (--http-root or --http_root). Counters (stack, TCP, "
      "UDP, services, faults) go to stderr on SIGUSR1 and at exit; SIGINT or "
      "SIGTERM stop it. Exit status: 0 after a clean stop, 1 if the link or "
      "a resource (the HTTP root, a port already in use) could not be set "
      "up, 2 for bad flags.");
  netstack::tools::HelpListsFlagsUnder("tools/netstackd/");
  // "-- CMD [ARGS...]": everything after the first "--" is CMD's.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--") continue;
    netstack::tools::have_command = true;
    netstack::tools::command_line.assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  // -t/--tcp-forward and -u/--udp-forward, each "FLAG SPEC" or "FLAG=SPEC".
  {
    int out = 1;
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      std::vector<std::string>* to = nullptr;
      std::string_view rest;
      for (auto [name, list] :
           {std::pair{std::string_view("-t"), &netstack::tools::tcp_forwards},
            std::pair{std::string_view("--tcp-forward"),
                      &netstack::tools::tcp_forwards},
            std::pair{std::string_view("--tcp_forward"),
                      &netstack::tools::tcp_forwards},
            std::pair{std::string_view("-u"), &netstack::tools::udp_forwards},
            std::pair{std::string_view("--udp-forward"),
                      &netstack::tools::udp_forwards},
            std::pair{std::string_view("--udp_forward"),
                      &netstack::tools::udp_forwards}}) {
        if (a == name) {
          to = list;
        } else if (a.size() > name.size() && a.starts_with(name) &&
                   a[name.size()] == '=') {
          to = list;
          rest = a.substr(name.size() + 1);
        }
      }
      if (to == nullptr) {
        argv[out++] = argv[i];
        continue;
      }
      if (rest.empty()) {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "netstackd: %.*s needs a SPEC (see --help)\n",
                       static_cast<int>(a.size()), a.data());
          return 2;
        }
        rest = argv[++i];
      }
      to->emplace_back(rest);
    }
    argc = out;
  }
  netstack::tools::DashesToUnderscores(argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "--gso" || a == "-gso" || a.starts_with("--gso=") ||
        a.starts_with("-gso=")) {
      netstack::tools::gso_given = true;
    }
  }
  netstack::tools::ParseCommandLineOrExit("netstackd", argc, argv);
  auto config = netstack::tools::ParseConfig();
  if (!config.ok()) {
    std::fprintf(stderr, "netstackd: %s (see --help)\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  return netstack::tools::Run(*config);
}
