// Host -> guest port forwards (-t, -u, --forward-api): listeners on this
// host, and for each connection one of two paths.
//
//   spliced (the guest is a namespace: -- CMD, --netns-pid, --netns):
//     host client --TCP--> our listener  ==splice relay==  our socket in
//     the guest's namespace --TCP--> guest's 127.0.0.1 / ::1 : guest port
//     The payload moves between the two kernel sockets through pipes
//     (netstack/forward's Relay) and never enters user memory or the
//     userspace TCP. The guest sees the connection come from its own
//     loopback (as with pasta), so a server bound to 127.0.0.1 is
//     reachable too.
//
//   through the stack (a VM guest, or --forward-path=stack):
//     host client --TCP--> our listener  ==backend flow==  netstack TCP
//     from the client's own IPv4 address (the gateway's when the client is
//     on loopback, on IPv6 or on a UNIX socket) to the guest's IPv4 lease
//     : guest port. The guest sees an IPv4 client's real address on this
//     path; the spliced path shows it its own loopback.
//
//   UDP (-u): each client address gets a socket toward the guest (made in
//     the guest's namespace, connected to its loopback of the client's
//     family), and the replies go back from the listener's socket to that
//     client. A client flow idle for the backend's UDP timeout
//     (--udp-timeout) closes, one the guest never answered after 30 s
//     (conntrack's UNREPLIED). At most --max-udp-flows client flows in
//     all (every -u shares them); a new client in a full table evicts the
//     least recently active unanswered flow, else the least recently
//     active one, counted: ports that send and are never answered (one
//     host has 64 Ki of them) cannot lock real clients out.
//     Datagrams move in batches (recvmmsg/sendmmsg) through one buffer
//     the forwards share, allocated with the first UDP forward.
//     Through the stack (a VM guest, or --forward-path=stack) a client's
//     flow lives in the backend's UDP flow table, in reverse
//     (UdpFlowTable::ReadInbound): same limit and idle timeout as the
//     guest's own flows; datagrams go to the guest's IPv4 lease from the
//     client's IPv4 address (off the host's loopback) or the gateway.
//
// Spliced connections are bounded, in each forward and in all together
// (Options::max_conns_per_forward, max_conns): each holds two sockets and,
// while data moves, two pipes, and anyone who can reach a published port
// can open them. A client past either limit is accepted and reset at once
// (forward.N.refused_limit) rather than left in the backlog. netstackd
// sizes max_conns so that its fd limit holds them beside the guest's own
// flows (fd_limit.h). Through the stack a connection is a backend TCP
// flow in the backend's inbound share (BackendLimits::
// max_inbound_tcp_flows: netstackd gives it max_conns), never the guest's
// own; max_conns_per_forward applies there too.
//
// Removing a forward closes its listeners; connections it accepted run to
// their end.
#ifndef NETSTACK_RUNTIME_PORT_FORWARDS_H_
#define NETSTACK_RUNTIME_PORT_FORWARDS_H_

#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "link/netns_sockets.h"
#include "netstack/backend/backend.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/forward/relay.h"
#include "netstack/runtime/forward_spec.h"
#include "netstack/transport/address.h"

namespace netstack::runtime {

enum class ForwardPath { kAuto, kSplice, kStack };

struct ForwardCounters {
  uint64_t accepted = 0;  // connections (UDP: client flows) taken
  uint64_t failed = 0;    // the guest side refused or failed
  uint64_t active = 0;    // running now (spliced; the stack's flows
                          // are the backend's tcp_flows_open)
  uint64_t bytes_to_guest = 0;
  uint64_t bytes_from_guest = 0;
  uint64_t spliced_bytes = 0;  // of both, moved through pipes
  uint64_t accept_errors = 0;  // accept() failed (EMFILE, ENFILE, ENOBUFS,
                               // ...): the client waits in the backlog
  uint64_t refused_limit = 0;  // reset at once, a connection limit
                               // reached (through the stack: also the
                               // backend's inbound share)
  // UDP: datagrams relayed, and those dropped: the client-flow limit
  // (refused), a send that failed (the socket's buffer full, the guest's
  // port closed: ECONNREFUSED), or the guest side's socket not made.
  uint64_t datagrams_to_guest = 0;
  uint64_t datagrams_from_guest = 0;
  uint64_t udp_refused_limit = 0;
  uint64_t udp_dropped = 0;
  uint64_t udp_expired = 0;  // client flows closed after the idle timeout
  // Of those, flows the guest never answered, closed after the shorter
  // unreplied timeout (Options::udp_unreplied_timeout).
  uint64_t udp_expired_unreplied = 0;
  // Client flows closed to make room for a new client in a full table:
  // one the guest never answered (the least recently active), else, when
  // every flow is answered, the least recently active one.
  uint64_t udp_evicted_unreplied = 0;
  uint64_t udp_evicted_replied = 0;
};

struct ForwardInfo {
  uint64_t id = 0;
  std::string spec;  // as given
  bool udp = false;
  std::string path;  // "splice" or "stack"
  size_t listeners = 0;
  ForwardCounters counters;  // finished connections and the running ones
};

class PortForwards {
 public:
  struct Options {
    eventloop::EventLoop* loop = nullptr;
    backend::Backend* backend = nullptr;
    // The guest's network namespace; -1: the guest is a VM (stack only).
    int guest_netns_fd = -1;
    ForwardPath path = ForwardPath::kAuto;
    forward::RelayMode relay_mode = forward::RelayMode::kSplice;
    // Spliced connections open at once, in all forwards together and in
    // each one (netstackd: --max-forward-conns, or fewer when its fd limit
    // is short, and --max-conns-per-forward).
    size_t max_conns = 1024;
    size_t max_conns_per_forward = 512;
    // -u client flows on the socket path, in all forwards together, and
    // how long one lives idle (through the stack the backend's UDP table
    // holds them, udp_flows.h). Unset: the backend's --max-udp-flows and
    // --udp-timeout (1024 and 180 s without a backend).
    std::optional<size_t> max_udp_flows;
    std::optional<Duration> udp_idle_timeout;
    // A client flow the guest has not answered closes after this (at most
    // the idle timeout), as Linux's conntrack gives up an UNREPLIED UDP
    // entry (nf_conntrack_udp_timeout, 30 s).
    Duration udp_unreplied_timeout = absl::Seconds(30);
  };
  explicit PortForwards(const Options& options);
  PortForwards(const PortForwards&) = delete;
  PortForwards& operator=(const PortForwards&) = delete;
  // Closes the listeners and ends every connection (abortively).
  ~PortForwards();

  // Opens the listeners of `rules` (one spec, e.g. a range) as one forward;
  // if one fails, none stay open. Errors name the spec and the address:
  // `-t 8080: listen on 0.0.0.0:8080: Address already in use`.
  absl::StatusOr<uint64_t> Add(const std::string& spec,
                               const std::vector<ForwardRule>& rules);
  absl::Status Remove(uint64_t id);
  std::vector<ForwardInfo> List() const;
  // Once netstackd's root has moved (least_privilege.h), a unix: forward
  // could not bind its path: Add refuses one with a message that says so.
  void FilesystemDetached() { filesystem_detached_ = true; }
  // The guest-socket thread of the spliced forwards, if there is one: the
  // privileges are dropped there too (least_privilege.h).
  link::NetnsSockets* guest_sockets() { return guest_sockets_.get(); }
  // "forward.N.name value" lines, and totals.
  std::string FormatCounters() const;

 private:
  struct Forward;
  class Listener;
  class SpliceConnect;
  class UdpListener;
  struct UdpBatch;
  struct UdpFlow;
  class UdpClientFlows;
  friend class Listener;
  friend class SpliceConnect;
  friend class UdpListener;

  bool spliced() const;
  // -u through sockets in the guest's namespace (else the stack).
  bool udp_via_socket() const;
  // Add's steps: whether the forward can be added at all; the UDP client
  // table of the spliced path, made with the first -u; one listener.
  absl::Status CanAdd(const std::string& spec,
                      const std::vector<ForwardRule>& rules) const;
  void EnsureUdpClientFlows();
  absl::Status Listen(Forward& f, const ForwardRule& rule, int family,
                      const sockaddr_storage& ss, socklen_t len,
                      const std::string& label);
  void OnAccept(Forward& f, const ForwardRule& rule, int fd,
                const transport::SocketAddress& client);
  void StartSplice(Forward& f, const ForwardRule& rule, int fd, int family);
  void StartRelay(uint64_t forward_id, int client_fd, int guest_fd);
  void RelayDone(forward::Relay& relay, uint64_t forward_id);
  // A spliced connection of forward `forward_id` (which may be removed by
  // now) ended; `failed`: before its relay ran.
  void SpliceEnded(uint64_t forward_id, bool failed);
  ForwardCounters* CountersOf(uint64_t id);

  Options options_;
  // The guest-side sockets of the spliced path (and of -u's socket path),
  // made by one thread that entered the guest's namespace when this was
  // built; null through the stack. guest_sockets_error_ says why it could
  // not be made (Add returns it).
  std::unique_ptr<link::NetnsSockets> guest_sockets_;
  absl::Status guest_sockets_error_;
  uint64_t next_id_ = 1;
  bool filesystem_detached_ = false;
  // -u's client flows on the socket path, of every forward: made with the
  // first UDP forward; outlives the forwards, whose listeners close their
  // flows.
  std::unique_ptr<UdpClientFlows> udp_client_flows_;
  std::map<uint64_t, std::unique_ptr<Forward>> forwards_;
  forward::PipePool pipes_;
  struct RelayEntry {
    std::unique_ptr<forward::Relay> relay;
    uint64_t forward_id;
  };
  absl::flat_hash_map<forward::Relay*, RelayEntry> relays_;
  absl::flat_hash_map<SpliceConnect*, std::unique_ptr<SpliceConnect>>
      connecting_;
  // The datagram buffers of every UDP forward (they run one at a time).
  std::unique_ptr<UdpBatch> udp_batch_;
  // Spliced connections open (connecting or relaying), of every forward,
  // removed ones' too.
  size_t spliced_conns_ = 0;
  // Totals of forwards already removed stay in their connections' counts
  // until those end; then they are dropped.
};

}  // namespace netstack::runtime

#endif  // NETSTACK_RUNTIME_PORT_FORWARDS_H_
