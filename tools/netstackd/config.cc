// netstackd's flags and their checks (config.h).
//
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
#include "tools/netstackd/config.h"

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
#include "netstack/backend/rate_limit.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/address.h"
#include "netstack/transport/notifier.h"
#include "netstack/policy/policy.h"
#include "netstack/udp/udp_layer.h"
#include "tools/common/cli.h"
#include "netstack/runtime/link_chain.h"
#include "netstack/runtime/fd_limit.h"
#include "tools/netstackd/control_api.h"
#include "tools/netstackd/forward_api.h"
#include "link/netns_sockets.h"
#include "netstack/runtime/port_forwards.h"
#include "netstack/sandbox/sandbox.h"
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
ABSL_FLAG(std::string, vhost_user, "",
          "Serve a VM as its vhost-user-net back-end: netstackd listens on "
          "the UNIX socket PATH and QEMU connects with -chardev "
          "socket,id=vu0,path=PATH -netdev vhost-user,id=n0,chardev=vu0 "
          "(the guest's memory must be shared: -object "
          "memory-backend-memfd,share=on and -numa node,memdev=). Frames "
          "move through the guest's virtqueues; TSO and checksum offload "
          "both ways. --unix-allow-uid applies.");
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
          "and SYNs to the stack's own listeners (tcp.syns_shed); ten times "
          "as many for SYNs the egress policy refuses, each a RST "
          "(backend.policy.resets_shed). Past it a "
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
// --allow and --deny are taken off the command line before Abseil parses
// it (they repeat); these two carry the help.
ABSL_FLAG(std::vector<std::string>, allow, {},
          "--allow RULE: let the guest reach RULE, repeatable; with any "
          "allow rule everything else is denied (allowlist). RULE is "
          "[tcp:|udp:|icmp:]TARGET[:PORT[-PORT]], TARGET a DNS name "
          "(example.com exactly, *.example.com any name below it), an IPv4 "
          "address or CIDR, or an IPv6 one in brackets ([2001:db8::/32]:443). "
          "A name admits the addresses the backend's DNS answered the guest "
          "with for it, never loopback, private or link-local ones; a CIDR "
          "rule must name those (docs/POLICY.md).");
ABSL_FLAG(std::vector<std::string>, deny, {},
          "--deny RULE: never let the guest reach RULE, repeatable; RULE as "
          "for --allow. A deny beats an allow.");
ABSL_FLAG(std::string, policy, "",
          "Rules from FILE, one a line: 'allow RULE', 'deny RULE' or 'egress "
          "none'; '#' starts a comment. Added to --allow and --deny. SIGHUP "
          "(and the --forward-api op 'policy') reads it again: flows the new "
          "policy denies are reset; a file that does not parse keeps the "
          "old policy. With --policy, SIGHUP is not passed on to CMD.");
ABSL_FLAG(std::string, egress, "open",
          "open: the guest reaches what the rules allow (no rule: "
          "everything), and never the cloud metadata addresses "
          "169.254.169.254 and fd00:ec2::254 unless a rule names them. "
          "none: no outbound flow at all, DNS included; port forwards into "
          "the guest still work.");
ABSL_FLAG(std::string, flow_log, "",
          "Write one JSON object per line to FILE for each outbound flow "
          "opened, refused or closed and each DNS query denied "
          "(docs/POLICY.md has the fields). At --flow-log-max-bytes FILE "
          "becomes FILE.1 and a new FILE starts; past --flow-log-rate lines "
          "a second, lines are dropped and counted.");
ABSL_FLAG(int64_t, flow_log_max_bytes, int64_t{64} << 20,
          "The flow log's size before it is rotated (at most twice this on "
          "disk).");
ABSL_FLAG(int, flow_log_rate, 1000,
          "Flow log lines a second at most (a second's burst).");
ABSL_FLAG(std::string, new_flow_rate, "0",
          "New outbound flows the guest may open a second, N (TCP connects, "
          "new UDP flows, new pings; 0: no limit), with M saved up (default "
          "N). A TCP SYN past it is dropped without a RST "
          "and the guest's retransmission gets in later; a datagram that "
          "would open a UDP or ping flow is dropped. Counted "
          "(backend.limit.new_flows_dropped) and logged as refused, reason "
          "rate_limited (docs/POLICY.md).");
ABSL_FLAG(std::string, egress_rate, "0",
          "Bytes a second the guest's own flows may write to host sockets "
          "(0: no limit). RATE says bits or bytes a second: "
          "10Mbit, 500kbit, 1MB, 2MiB. A TCP flow over it waits (the "
          "guest's window closes, nothing is lost); a UDP datagram or ping "
          "over it is dropped. SIZE (256KiB, 1MB) may be saved up: by "
          "default a tenth of a second's worth, at least 64KiB. Port "
          "forwards into the guest are not limited.");

namespace netstack::tools {

using runtime::ParseForwardSpec;
using sandbox::RunAs;

absl::StatusOr<std::shared_ptr<const policy::Policy>> MakeEgressPolicy(
    const std::vector<policy::Rule>& command_line_rules, bool egress_none,
    std::string_view file_text, std::string_view file_label) {
  policy::PolicyConfig config;
  config.rules = command_line_rules;
  config.egress_none = egress_none;
  if (!file_text.empty()) {
    absl::StatusOr<policy::PolicyConfig> file =
        policy::ParsePolicyFile(file_text);
    if (!file.ok()) {
      return absl::InvalidArgumentError(
          file_label.empty()
              ? std::string(file.status().message())
              : absl::StrCat(std::string(file_label), ": ",
                             file.status().message()));
    }
    for (policy::Rule& r : file->rules) config.rules.push_back(std::move(r));
    config.egress_none = config.egress_none || file->egress_none;
  }
  absl::StatusOr<std::shared_ptr<const policy::Policy>> p =
      policy::Policy::Create(std::move(config));
  if (!p.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("egress policy: ", p.status().message()));
  }
  return *std::move(p);
}

std::string DescribeEgress(const policy::Policy& p) {
  const size_t n = p.rules().size();
  const std::string rules =
      n == 0 ? std::string() : absl::StrCat(", ", n, n == 1 ? " rule" : " rules");
  if (p.egress_none()) {
    return absl::StrCat("egress: none", rules, " (no outbound flow, DNS "
                        "included)");
  }
  // The metadata addresses are denied in every mode unless a rule names
  // them (policy.h): say which, so nobody has to guess.
  std::vector<std::string> denied, allowed;
  for (const char* a : {"169.254.169.254", "fd00:ec2::254"}) {
    const std::optional<transport::IpAddress> ip = transport::IpAddress::Parse(a);
    (ip && p.ExplicitlyAllowed(*ip, policy::kTcp) ? allowed : denied)
        .push_back(a);
  }
  std::string metadata;
  if (!denied.empty()) {
    metadata = absl::StrCat("metadata ", absl::StrJoin(denied, ", "), " denied");
  }
  if (!allowed.empty()) {
    absl::StrAppend(&metadata, metadata.empty() ? "" : "; ", "metadata ",
                    absl::StrJoin(allowed, ", "), " allowed by a rule");
  }
  return absl::StrCat("egress: ", p.allowlist() ? "allowlist" : "open", rules,
                      " (", metadata, ")");
}

namespace {


constexpr int kBackendDefaultMtu = 65520;


absl::Status Usage(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}


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

// Which guest namespace, if any: -- CMD makes one, --netns-pid joins a
// process's, --netns without a link flag joins a named one.
absl::Status ParseGuestKind(const CommandLine& cl, bool other_link,
                            Config& c) {
  const std::string netns = absl::GetFlag(FLAGS_netns);
  const int netns_pid = absl::GetFlag(FLAGS_netns_pid);
  if (cl.have_command) {
    if (cl.command.empty()) {
      return Usage("\"--\" must be followed by the command to run "
                   "(netstackd [FLAGS] -- CMD [ARGS...])");
    }
    if (netns_pid != 0 || !netns.empty()) {
      return Usage("-- CMD makes its own network namespace; --netns and "
                   "--netns-pid attach to one that exists");
    }
    c.guest = Config::Guest::kRun;
    c.command = cl.command;
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
  return absl::OkStatus();
}

// --userns and --userns-pid: the user namespace to enter before a guest
// namespace netstackd attaches to.
absl::Status ParseUserns(const Config& c) {
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
  return absl::OkStatus();
}

// --ready-fd and --exit-fd, our parent's handles on our lifetime.
absl::Status ParseLifetimeFds(Config& c) {
  if (auto s = InheritedFd("ready-fd", absl::GetFlag(FLAGS_ready_fd));
      !s.ok()) {
    return s;
  }
  if (auto s = InheritedFd("exit-fd", absl::GetFlag(FLAGS_exit_fd)); !s.ok()) {
    return s;
  }
  c.ready_fd = absl::GetFlag(FLAGS_ready_fd);
  c.exit_fd = absl::GetFlag(FLAGS_exit_fd);
  return absl::OkStatus();
}

// The TAP netstackd makes in a guest namespace, and for -- CMD what CMD
// sees (resolv.conf, the start lines, who it runs as).
absl::Status ParseOwnTap(bool other_link, Config& c) {
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

// -- CMD, --netns-pid, or --netns without a link: netstackd makes the TAP
// in the guest's namespace and configures it.
absl::Status ParseGuest(const CommandLine& cl, Config& c) {
  const bool other_link = !absl::GetFlag(FLAGS_packet).empty() ||
                          !absl::GetFlag(FLAGS_unix).empty() ||
                          !absl::GetFlag(FLAGS_vhost_user).empty() ||
                          absl::GetFlag(FLAGS_fd) != -1;
  if (absl::Status s = ParseGuestKind(cl, other_link, c); !s.ok()) return s;
  if (absl::Status s = ParseUserns(c); !s.ok()) return s;
  if (absl::GetFlag(FLAGS_no_dns_config) && c.guest != Config::Guest::kRun) {
    return Usage("--no-dns-config goes with -- CMD");
  }
  if (absl::Status s = ParseLifetimeFds(c); !s.ok()) return s;
  if (c.guest == Config::Guest::kNone) return absl::OkStatus();
  return ParseOwnTap(other_link, c);
}

// The flags the daemon reads as they are (checked above, where at all).
void FillLink(Config& c) {
  c.tap = absl::GetFlag(FLAGS_tap);
  c.tap_queues = static_cast<uint32_t>(absl::GetFlag(FLAGS_tap_queues));
  c.packet = absl::GetFlag(FLAGS_packet);
  c.link_netns = absl::GetFlag(FLAGS_netns);
  c.unix_path = absl::GetFlag(FLAGS_unix);
  c.unix_connect = absl::GetFlag(FLAGS_unix_connect);
  c.vhost_user_path = absl::GetFlag(FLAGS_vhost_user);
  if (absl::GetFlag(FLAGS_unix_allow_uid) >= 0) {
    c.unix_allow_uid = static_cast<uid_t>(absl::GetFlag(FLAGS_unix_allow_uid));
  }
  c.mtu = static_cast<uint32_t>(absl::GetFlag(FLAGS_mtu));
  c.pcap = absl::GetFlag(FLAGS_pcap);
  if (c.any_fault) {
    link::FaultInjectorOptions fo;
    fo.egress = c.faults;
    fo.seed = absl::GetFlag(FLAGS_seed);
    fo.queue_limit =
        static_cast<size_t>(absl::GetFlag(FLAGS_fault_queue_limit));
    if (absl::GetFlag(FLAGS_fault_ingress)) fo.ingress = c.faults;
    c.fault_options = fo;
  }
  c.busy_syn_rate = static_cast<uint32_t>(absl::GetFlag(FLAGS_busy_syn_rate));
  c.netns_pid = absl::GetFlag(FLAGS_netns_pid);
  c.userns = absl::GetFlag(FLAGS_userns);
  if (c.userns.empty() && absl::GetFlag(FLAGS_userns_pid) != 0) {
    c.userns =
        absl::StrCat("/proc/", absl::GetFlag(FLAGS_userns_pid), "/ns/user");
  }
}

// The link: exactly one of --tap, --packet, --unix, --vhost-user or --fd
// (or a TAP of our own in the guest's namespace), and the flags that go
// with each.
absl::Status ParseLink(bool own_tap, Config& c) {
  const int links = !absl::GetFlag(FLAGS_tap).empty() +
                    !absl::GetFlag(FLAGS_packet).empty() +
                    !absl::GetFlag(FLAGS_unix).empty() +
                    !absl::GetFlag(FLAGS_vhost_user).empty() +
                    (absl::GetFlag(FLAGS_fd) != -1);
  if (links != 1 && !own_tap) {
    return Usage("exactly one of --tap, --packet, --unix, --vhost-user or "
                 "--fd is required "
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
      uid != -1 && ((absl::GetFlag(FLAGS_unix).empty() &&
                     absl::GetFlag(FLAGS_vhost_user).empty()) ||
                    uid < 0 || uid >= int64_t{0xffffffff})) {
    return Usage("--unix-allow-uid UID needs --unix PATH (or --vhost-user "
                 "PATH) and a user id");
  }
  if (!absl::GetFlag(FLAGS_vhost_user).empty() &&
      !absl::GetFlag(FLAGS_netns).empty()) {
    return Usage("--netns does not apply to --vhost-user (a UNIX socket has "
                 "no network namespace)");
  }
  if (!absl::GetFlag(FLAGS_unix).empty() && !absl::GetFlag(FLAGS_netns).empty()) {
    return Usage("--netns does not apply to --unix (a UNIX socket has no "
                 "network namespace)");
  }
  return absl::OkStatus();
}

// Host mode's own addresses (--addr, --addr6).
absl::Status ParseAddresses(Config& c) {
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
  return absl::OkStatus();
}

// The backend's address plan: --net, --net6 and the MTU, in place of host
// mode's addresses.
absl::StatusOr<backend::AddressPlan> ParseAddressPlan(const Config& c) {
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
  return *plan;
}

// The backend's policy for host sockets: loopback and the source address.
absl::Status ParseOutboundPolicy(backend::BackendPolicy& policy) {
  policy.host_loopback = absl::GetFlag(FLAGS_host_loopback);
  for (const std::string& a : absl::GetFlag(FLAGS_outbound_bind)) {
    if (auto v4 = wire::Ipv4Address::Parse(a)) {
      if (policy.outbound_bind4) return Usage("--outbound-bind: two IPv4 addresses");
      policy.outbound_bind4 = v4;
    } else if (auto v6 = wire::Ipv6Address::Parse(a)) {
      if (policy.outbound_bind6) return Usage("--outbound-bind: two IPv6 addresses");
      policy.outbound_bind6 = v6;
    } else {
      return Usage(absl::StrCat("--outbound-bind: '", a, "' is not an IP address"));
    }
  }
  return absl::OkStatus();
}

// The backend's limits: flows at once, the busy link's SYN rate, timeouts.
absl::Status ParseBackendLimits(backend::BackendLimits& limits) {
  const int max_flows = absl::GetFlag(FLAGS_max_tcp_flows);
  if (max_flows < 1 || max_flows > 1000000) {
    return Usage(absl::StrCat("--max-tcp-flows ", max_flows,
                              " out of range [1, 1000000]"));
  }
  limits.max_tcp_flows = static_cast<uint32_t>(max_flows);
  limits.busy_connect_rate =
      static_cast<uint32_t>(absl::GetFlag(FLAGS_busy_syn_rate));
  limits.busy_connect_burst =
      std::max<uint32_t>(1, limits.busy_connect_rate / 10);
  const int max_udp = absl::GetFlag(FLAGS_max_udp_flows);
  if (max_udp < 1 || max_udp > 1000000) {
    return Usage(absl::StrCat("--max-udp-flows ", max_udp,
                              " out of range [1, 1000000]"));
  }
  limits.max_udp_flows = static_cast<uint32_t>(max_udp);
  const absl::Duration udp_timeout = absl::GetFlag(FLAGS_udp_timeout);
  if (udp_timeout < absl::Seconds(1)) {
    return Usage(absl::StrCat("--udp-timeout ",
                              absl::FormatDuration(udp_timeout),
                              " is below 1s"));
  }
  limits.udp_idle_timeout = udp_timeout;
  const absl::Duration guest_timeout = absl::GetFlag(FLAGS_tcp_guest_timeout);
  if (guest_timeout != absl::ZeroDuration() &&
      guest_timeout < absl::Seconds(1)) {
    return Usage(absl::StrCat("--tcp-guest-timeout ",
                              absl::FormatDuration(guest_timeout),
                              " is below 1s (0 turns it off)"));
  }
  limits.tcp_guest_timeout = guest_timeout;
  // The per-guest limits (netstack/backend/rate_limit.h).
  absl::StatusOr<backend::NewFlowRate> flows =
      backend::ParseNewFlowRate(absl::GetFlag(FLAGS_new_flow_rate));
  if (!flows.ok()) {
    return Usage(absl::StrCat("--new-flow-rate ", flows.status().message()));
  }
  limits.new_flow_rate = flows->per_second;
  limits.new_flow_burst = flows->burst;
  absl::StatusOr<backend::EgressRate> bytes =
      backend::ParseEgressRate(absl::GetFlag(FLAGS_egress_rate));
  if (!bytes.ok()) {
    return Usage(absl::StrCat("--egress-rate ", bytes.status().message()));
  }
  limits.egress_rate = bytes->bytes_per_second;
  limits.egress_burst = bytes->burst;
  return absl::OkStatus();
}

// The backend's DNS upstreams (--dns-upstream; none: resolv.conf's).
absl::Status ParseDnsUpstreams(backend::BackendPolicy& policy) {
  for (const std::string& u : absl::GetFlag(FLAGS_dns_upstream)) {
    auto up = backend::ParseDnsUpstream(u);
    if (!up.ok()) {
      return Usage(absl::StrCat("--dns-upstream: ", up.status().message()));
    }
    policy.dns_upstreams.push_back(*up);
  }
  return absl::OkStatus();
}

// -t and -u, the forward API, the forwards' path and their limits.
absl::Status ParseForwards(const CommandLine& cl, bool own_tap, Config& c) {
  for (const auto& [flag, udp, list] :
       {std::tuple{"-t", false, &cl.tcp_forwards},
        std::tuple{"-u", true, &cl.udp_forwards}}) {
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
  return absl::OkStatus();
}

// --allow, --deny, --egress, --policy and --flow-log: the egress policy
// (netstack/policy/policy.h) and its log.
absl::Status ParseEgress(const CommandLine& cl, Config& c) {
  for (const CommandLine::PolicyRule& r : cl.policy_rules) {
    absl::StatusOr<policy::Rule> rule = policy::ParseRule(r.rule, r.allow);
    if (!rule.ok()) {
      return Usage(absl::StrCat(r.allow ? "--allow " : "--deny ", r.rule,
                                ": ", rule.status().message()));
    }
    c.policy_rules.push_back(*std::move(rule));
  }
  const std::string egress = absl::GetFlag(FLAGS_egress);
  if (egress != "open" && egress != "none") {
    return Usage(absl::StrCat("--egress '", egress, "': want open or none"));
  }
  c.egress_none = egress == "none";
  std::string file_text;
  if (const std::string path = absl::GetFlag(FLAGS_policy); !path.empty()) {
    absl::StatusOr<std::shared_ptr<const PolicyFileRef>> ref =
        PolicyFileRef::Open(path);
    absl::StatusOr<std::string> text =
        ref.ok() ? (*ref)->Read() : absl::StatusOr<std::string>(ref.status());
    if (!text.ok()) {
      return Usage(absl::StrCat("--policy ", path, ": ",
                                text.status().message()));
    }
    c.policy_file = *std::move(ref);
    file_text = *std::move(text);
  }
  if (!c.policy_rules.empty() || c.egress_none || c.policy_file) {
    absl::StatusOr<std::shared_ptr<const policy::Policy>> p = MakeEgressPolicy(
        c.policy_rules, c.egress_none, file_text,
        c.policy_file ? absl::StrCat("--policy ", c.policy_file->path())
                      : std::string("--policy"));
    if (!p.ok()) return Usage(std::string(p.status().message()));
    c.egress = *std::move(p);
  }
  c.flow_log = absl::GetFlag(FLAGS_flow_log);
  const int64_t max_bytes = absl::GetFlag(FLAGS_flow_log_max_bytes);
  if (max_bytes < 4096) {
    return Usage(absl::StrCat("--flow-log-max-bytes ", max_bytes,
                              " is below 4096"));
  }
  c.flow_log_max_bytes = static_cast<uint64_t>(max_bytes);
  const int rate = absl::GetFlag(FLAGS_flow_log_rate);
  if (rate < 1 || rate > 1000000) {
    return Usage(absl::StrCat("--flow-log-rate ", rate,
                              " out of range [1, 1000000]"));
  }
  c.flow_log_rate = static_cast<uint32_t>(rate);
  return absl::OkStatus();
}

// --backend (or a guest namespace, which implies it): the address plan,
// the policy and limits, then the forwards.
absl::Status ParseBackend(const CommandLine& cl, bool own_tap, Config& c) {
  absl::StatusOr<backend::AddressPlan> plan = ParseAddressPlan(c);
  if (!plan.ok()) return plan.status();
  backend::BackendConfig b;
  b.plan = *plan;
  if (absl::Status s = ParseOutboundPolicy(b.policy); !s.ok()) return s;
  if (absl::Status s = ParseBackendLimits(b.limits); !s.ok()) return s;
  if (absl::Status s = ParseDnsUpstreams(b.policy); !s.ok()) return s;
  if (absl::Status s = ParseEgress(cl, c); !s.ok()) return s;
  b.policy.egress = c.egress;  // null: the backend's Policy::Open()
  c.backend = b;
  return ParseForwards(cl, own_tap, c);
}

// Host mode: the stack's own addresses and --control; none of the
// backend's flags.
absl::Status ParseHostMode(const CommandLine& cl, Config& c) {
  if (!cl.tcp_forwards.empty() || !cl.udp_forwards.empty() ||
      !absl::GetFlag(FLAGS_forward_api).empty()) {
    return Usage("-t, -u and --forward-api forward to a guest: they need "
                 "--backend (or -- CMD)");
  }
  c.control = absl::GetFlag(FLAGS_control);
  if (absl::GetFlag(FLAGS_host_loopback) ||
      !absl::GetFlag(FLAGS_outbound_bind).empty() ||
      !absl::GetFlag(FLAGS_dns_upstream).empty()) {
    return Usage(
        "--host-loopback, --outbound-bind and --dns-upstream need --backend");
  }
  if (!cl.policy_rules.empty() || !absl::GetFlag(FLAGS_policy).empty() ||
      absl::GetFlag(FLAGS_egress) != "open" ||
      !absl::GetFlag(FLAGS_flow_log).empty()) {
    return Usage("--allow, --deny, --policy, --egress and --flow-log judge "
                 "a guest's flows: they need --backend (or -- CMD)");
  }
  if (absl::GetFlag(FLAGS_new_flow_rate) != "0" ||
      absl::GetFlag(FLAGS_egress_rate) != "0") {
    return Usage("--new-flow-rate and --egress-rate limit a guest's flows: "
                 "they need --backend (or -- CMD)");
  }
  if (c.addrs.empty() && c.addrs6.empty()) {
    return Usage("at least one --addr or --addr6 is required (or --backend)");
  }
  return absl::OkStatus();
}

// The link's details in either mode: the gateway, MTU, TAP queues, the
// busy link's SYN rate and our MAC.
absl::Status ParseLinkDetails(Config& c) {
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
  return absl::OkStatus();
}

// The fault injector's flags (--loss ... --fault_queue_limit).
absl::Status ParseFaults(Config& c) {
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
    if (!(v >= 0 && v <= 1)) {
      return Usage(absl::StrCat("--", name, " ", v,
                                " is not a fraction in [0, 1] (0.01 = 1%)"));
    }
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
  return absl::OkStatus();
}

// GSO: --gso sizes the super-segments of --swgso or --hostgso, and a
// guest's TAP in backend mode gets host GSO by default.
absl::Status ParseGso(const CommandLine& cl, bool own_tap, Config& c) {
  const int gso = absl::GetFlag(FLAGS_gso);
  if (gso < 0 || gso > 65535) {
    return Usage(absl::StrCat("--gso ", gso, " out of range [0, 65535]"));
  }
  if (absl::GetFlag(FLAGS_swgso) && absl::GetFlag(FLAGS_hostgso)) {
    return Usage("--swgso and --hostgso exclude each other");
  }
  const bool tap_link = !absl::GetFlag(FLAGS_tap).empty() ||
                        (c.fd >= 0 && c.fd_is_tap) || own_tap;
  if (cl.gso_given &&
      !absl::GetFlag(FLAGS_swgso) && !absl::GetFlag(FLAGS_hostgso) &&
      !(c.backend && tap_link)) {
    // It sizes the super-segments of a GSO mode; alone it would do
    // nothing, silently.
    return Usage(absl::StrCat("--gso ", gso,
                              " needs --swgso or --hostgso (or --backend on "
                              "a TAP, where host GSO is the default)"));
  }
  const bool stream_link = !absl::GetFlag(FLAGS_unix).empty() ||
                           !absl::GetFlag(FLAGS_vhost_user).empty() ||
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
  return absl::OkStatus();
}

// --sandbox and --sandbox-test: netstackd's own confinement after setup.
absl::Status ParseSandbox(Config& c) {
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
  return absl::OkStatus();
}

absl::Status ParseReassemblyTimeout(Config& c) {
  c.reassembly_timeout = absl::GetFlag(FLAGS_reassembly_timeout);
  if (c.reassembly_timeout != absl::ZeroDuration() &&
      (c.reassembly_timeout < absl::Seconds(1) ||
       c.reassembly_timeout > absl::Seconds(120))) {
    return Usage(absl::StrCat("--reassembly-timeout ",
                              absl::FormatDuration(c.reassembly_timeout),
                              " out of range [1s, 2m] (0: the defaults)"));
  }
  return absl::OkStatus();
}

// A service's port flag into *out. 0 is "off" for echo and discard, "the
// default" for HTTP.
absl::Status ParsePort(const char* name, int v, uint16_t* out) {
  if (v < 0 || v > 65535) {
    return Usage(absl::StrCat("--", name, " ", v, " out of range [1, 65535]"));
  }
  *out = static_cast<uint16_t>(v);
  return absl::OkStatus();
}

// The stack's own services (host mode's demos and tests).
absl::Status ParseServices(Config& c) {
  c.http_root = absl::GetFlag(FLAGS_http_root);
  if (auto s = ParsePort("http-port", absl::GetFlag(FLAGS_http_port),
                         &c.http_port);
      !s.ok()) {
    return s;
  }
  if (c.http_root.empty() && c.http_port != 0) {
    return Usage("--http-port needs --http-root DIR");
  }
  if (!c.http_root.empty() && c.http_port == 0) c.http_port = 80;
  if (auto s = ParsePort("echo-port", absl::GetFlag(FLAGS_echo_port),
                         &c.echo_port);
      !s.ok()) {
    return s;
  }
  return ParsePort("discard-port", absl::GetFlag(FLAGS_discard_port),
                   &c.discard_port);
}

}  // namespace

// By topic, in the order the checks have always run (the first error is
// the one reported, and tests compare it).
absl::StatusOr<Config> ParseConfig(const CommandLine& cl) {
  Config c;
  if (absl::Status s = ParseGuest(cl, c); !s.ok()) return s;
  const bool own_tap = c.guest != Config::Guest::kNone;
  if (absl::Status s = ParseLink(own_tap, c); !s.ok()) return s;
  if (absl::Status s = ParseAddresses(c); !s.ok()) return s;
  if (absl::GetFlag(FLAGS_backend) || own_tap) {
    if (absl::Status s = ParseBackend(cl, own_tap, c); !s.ok()) return s;
  } else if (absl::Status s = ParseHostMode(cl, c); !s.ok()) {
    return s;
  }
  if (absl::Status s = ParseLinkDetails(c); !s.ok()) return s;
  if (absl::Status s = ParseFaults(c); !s.ok()) return s;
  if (absl::Status s = ParseGso(cl, own_tap, c); !s.ok()) return s;
  if (absl::Status s = ParseSandbox(c); !s.ok()) return s;
  if (absl::Status s = ParseReassemblyTimeout(c); !s.ok()) return s;
  if (absl::Status s = ParseServices(c); !s.ok()) return s;
  FillLink(c);
  return c;
}

std::string StartSummary(const Config& c) {
  const uint32_t swgso = c.swgso, hostgso = c.hostgso;
  std::string out;
  if (c.backend) {
    const backend::AddressPlan& p = c.backend->plan;
    const backend::BackendPolicy& policy = c.backend->policy;
    const std::string dns4 =
        policy.dns ? absl::StrCat(", DNS ", p.dns4.ToString()) : ", no DNS";
    const std::string dns6 =
        policy.dns ? absl::StrCat(", DNS ", p.dns6.ToString()) : ", no DNS";
    const std::string v6 =
        policy.ipv6
            ? absl::StrCat(stack::ToString(p.net6), " (gateway ",
                           p.gateway6.ToString(), dns6, ")")
            : std::string("no IPv6");
    absl::StrAppend(&out, "netstackd: backend: ", stack::ToString(p.net4),
                    " (gateway ", p.gateway4.ToString(), dns4, ", lease ",
                    p.lease4.ToString(), "), ", v6, ", MTU ", p.mtu, "\n");
    absl::StrAppend(
        &out, "netstackd: ",
        DescribeEgress(c.egress ? *c.egress : *policy::Policy::Open()),
        c.policy_file ? absl::StrCat(", --policy ", c.policy_file->path())
                      : std::string(),
        c.flow_log.empty() ? std::string()
                           : absl::StrCat(", flow log ", c.flow_log),
        "\n");
    const backend::BackendLimits& l = c.backend->limits;
    if (l.new_flow_rate != 0 || l.egress_rate != 0) {
      absl::StrAppend(
          &out, "netstackd: limits: new flows ",
          l.new_flow_rate != 0
              ? absl::StrCat(l.new_flow_rate, "/s (burst ", l.new_flow_burst,
                             ")")
              : std::string("unlimited"),
          ", egress ",
          l.egress_rate != 0
              ? backend::FormatEgressRate({l.egress_rate, l.egress_burst})
              : std::string("unlimited"),
          "\n");
    }
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

uint32_t BackendTapQueueLen(uint32_t mtu) {
  const uint32_t window = tcp::ConnectionOptions{}.max_receive_buffer;
  const uint32_t frame = mtu + 14;
  return std::max<uint32_t>(1000, (window + frame - 1) / frame);
}

}  // namespace netstack::tools
