// The network backend: a guest (a sandbox's namespace, a VM) on one NIC
// of a Stack gets the host's network. The NIC is in gateway mode (see
// stack::GatewayOptions): the stack stands in for every host beyond the
// link, and each TCP flow the guest opens becomes a host socket
// (tcp_flow.h). See docs/BACKEND.md.
//
//   stack::Stack st(...);  tcp::TcpLayer tcp(st, ...);
//   auto nic = st.AddNic(&guest_link, "guest0");
//   auto be = backend::Backend::Create(backend::BackendConfig{}, st, *nic,
//                                      tcp, loop, chunks);
//   loop.AddTurnEndHook([&](Instant now) {
//     notifier.Dispatch(); (*be)->Sweep(now); tcp.Poll(now); st.Flush(now);
//   });
//
// The Backend owns the host sockets; it registers them with the event
// loop and closes each exactly once. Destroying it aborts every flow
// (RST to the guest, SO_LINGER 0 on the host).
//
// The egress policy (netstack/policy/policy.h, issue #33) judges each new
// outbound flow once, at its creation, never per packet: a TCP SYN, a new
// UDP flow, a new ping flow, each to its destination after the backend's
// own mapping (the gateway's host loopback stays under
// BackendPolicy::host_loopback and is not judged; the DNS address is the
// forwarder's). A refused flow fails at once: RST for TCP, ICMP
// destination unreachable, administratively prohibited, for UDP and
// echo. SetEgressPolicy replaces the policy and resets the open flows the
// new one denies. Port forwards into the guest are not egress.
#ifndef NETSTACK_BACKEND_BACKEND_H_
#define NETSTACK_BACKEND_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "netstack/backend/dns_forwarder.h"
#include "netstack/backend/guest_config_services.h"
#include "netstack/backend/ping_flows.h"
#include "netstack/backend/rate_limit.h"
#include "netstack/backend/udp_flows.h"
#include "netstack/base/token_bucket.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/chunk_arena.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/policy/policy.h"
#include "netstack/stack/route_table.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/address.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/wire/address.h"

namespace netstack::policy {
class FlowLog;
}  // namespace netstack::policy

namespace netstack::backend {

// Where the guest lives (slirp4netns's defaults). The DHCP, RA and DNS
// services read it: router, DNS server, lease, prefix, MTU.
struct AddressPlan {
  stack::Ipv4Cidr net4;        // 10.0.2.0/24
  wire::Ipv4Address gateway4;  // .2: the stack, and the host's loopback
  wire::Ipv4Address dns4;      // .3
  wire::Ipv4Address lease4;    // .100: the guest's only IPv4 source
  stack::Ipv6Cidr net6;        // fd00::/64: the guest takes one by SLAAC
  wire::Ipv6Address gateway6;  // ::2
  wire::Ipv6Address dns6;      // ::3
  // The gateway's link-local address (the router address of RAs): set
  // by Backend::Create from the NIC's MAC.
  wire::Ipv6Address gateway6_link_local;
  uint32_t mtu = 65520;  // advertised to the guest (DHCP option 26, RA)

  // The plan for `net4` and `net6`: gateway host 2, DNS host 3, lease
  // host 100. InvalidArgument if a network is too small for them.
  static absl::StatusOr<AddressPlan> ForNetworks(const stack::Ipv4Cidr& net4,
                                                 const stack::Ipv6Cidr& net6,
                                                 uint32_t mtu = 65520);
  static AddressPlan Default();
};

struct BackendPolicy {
  // The gateway address (gateway4, gateway6 and its link-local) reaches
  // the host's 127.0.0.1 / ::1. Off: such a flow is refused with RST.
  bool host_loopback = false;
  // Source address of host sockets, per family (--outbound-bind).
  std::optional<wire::Ipv4Address> outbound_bind4;
  std::optional<wire::Ipv6Address> outbound_bind6;
  // Where queries to the DNS address go (--dns-upstream); empty: the
  // nameservers of `resolv_conf`.
  std::vector<transport::SocketAddress> dns_upstreams;
  std::string resolv_conf = "/etc/resolv.conf";
  // Off: no DNS forwarder at dns4/dns6 (libslirp's disable_dns; the C
  // ABI's); nothing is read from resolv_conf. The guest config services
  // still name the DNS address (a guest's own resolver may use another).
  bool dns = true;
  // Off: no DHCPv4 server (libslirp's disable_dhcp); the guest's address
  // is configured by other means. RAs and DHCPv6 stay.
  bool dhcp4 = true;
  // Off: the guest gets no IPv6 at all (slirp4netns without
  // --enable-ipv6): no RAs or DHCPv6, and the stack drops every IPv6
  // frame (drop.ipv6_disabled; the runtime sets StackOptions::ipv6).
  bool ipv6 = true;
  // What the guest may reach (--allow, --deny, --policy, --egress=none):
  // judged for each new outbound flow and by the DNS forwarder. Null:
  // policy::Policy::Open() (everything but the cloud metadata addresses).
  // Backend::SetEgressPolicy replaces it while running.
  std::shared_ptr<const policy::Policy> egress;
};

struct BackendLimits {
  // The guest's own TCP flows, connecting ones included; past it the
  // guest gets RST. Inbound flows do not count.
  uint32_t max_tcp_flows = 4096;
  // Inbound TCP flows (AdoptInboundTcp: -t through the stack) at once: a
  // share of their own, since anyone who can reach a published port opens
  // them, and they must never refuse the guest's own connections. Past it
  // the client is reset (tcp_refused_inbound_limit). netstackd:
  // --max-forward-conns, the spliced path's limit too, or fewer when the
  // fd limit is short (each flow holds the client's socket).
  uint32_t max_inbound_tcp_flows = 1024;
  // New host connections a second while the guest's link is busy
  // (--busy-syn-rate): while netstackd's reads of it hit their batch
  // limit (LinkStats::rx_batch_limit_hits grew this turn: the guest sends
  // faster than netstackd reads), at most this many, with
  // busy_connect_burst saved up; past it a guest SYN that would start one
  // is dropped silently (tcp_syns_shed; the guest retransmits it after
  // its RTO). A host connect costs this thread about 15 us and the host
  // kernel more, so a SYN flood would otherwise take the thread from the
  // established flows; a shed SYN costs about 1 us. A link that keeps up
  // has no limit (tcp_benchmark --crr makes 6,000-13,000 a second). 0: no
  // limit at all. docs/SECURITY.md, "Floods".
  uint32_t busy_connect_rate = 1000;
  uint32_t busy_connect_burst = 100;
  // Guest-to-host bytes a flow holds that the host socket has not taken;
  // while it is full the flow reads no more, and the guest's window
  // closes.
  uint32_t guest_to_host_pending = 256 << 10;
  // The guest-facing socket's send buffer: while it is full, the host
  // socket is not read.
  uint32_t host_to_guest_buffer = 1 << 20;
  // A guest that acknowledges nothing for this long loses its TCP flow
  // (guest_error; the host socket is reset): sent bytes unacked for it
  // (TCP user timeout, RFC 5482), and, on a flow with nothing in flight,
  // keepalive probes after it of idle, three of them a quarter of it
  // apart (--tcp-guest-timeout). Zero: the TCP layer's retransmission
  // limit only (about 15 minutes, as Linux's tcp_retries2), and an idle
  // flow to a vanished guest stays until the host closes it.
  Duration tcp_guest_timeout = absl::ZeroDuration();
  // The guest's UDP flows (host sockets) at once (--max-udp-flows); past
  // it the guest gets ICMP administratively prohibited. Inbound flows (-u
  // through the stack) have as many again of their own, and a full share
  // evicts its least recently active unanswered flow (udp_flows.h).
  uint32_t max_udp_flows = 1024;
  // A UDP flow with no datagram either way for this long is closed
  // (--udp-timeout).
  Duration udp_idle_timeout = absl::Seconds(180);
  // Addresses the DNS forwarder pinned for the egress policy's name rules
  // at once (policy::PinTable); past it the pin that expires first goes
  // (backend.policy.pins_evicted).
  size_t max_pins = 16384;
  // Per guest (issue #33; rate_limit.h), both off at 0. New outbound
  // flows a second (a TCP SYN, a new UDP flow, a new ping flow, to the
  // host's loopback too), with new_flow_burst saved up (--new-flow-rate):
  // past it the SYN or datagram is dropped in silence and the guest
  // resends (counted: limit_new_flows_dropped). A flow the egress policy
  // refuses is refused first and takes nothing.
  uint32_t new_flow_rate = 0;
  uint32_t new_flow_burst = 0;
  // Bytes a second the guest's own flows write to host sockets, with
  // egress_burst saved up (--egress-rate; egress_burst at least
  // EgressLimiter::kMinWrite): a TCP flow over it waits (its window
  // closes), a UDP datagram or echo request over it is dropped. Inbound
  // (forwarded) flows are not egress and are not limited.
  uint64_t egress_rate = 0;
  uint64_t egress_burst = 0;
};

struct BackendConfig {
  AddressPlan plan = AddressPlan::Default();
  BackendPolicy policy;
  BackendLimits limits;
};

// Why a TCP flow ended, or why it never started.
#define NETSTACK_TCP_FLOW_ENDS(X)                                        \
  X(kClosed, "closed")             /* both FINs relayed */              \
  X(kGuestReset, "guest_reset")    /* guest RST: abortive host close */ \
  X(kHostReset, "host_reset")      /* host ECONNRESET: RST to guest */  \
  X(kGuestError, "guest_error")    /* guest side timed out or failed */ \
  X(kHostError, "host_error")      /* another host socket error */      \
  X(kShutdown, "shutdown")         /* the backend went away */          \
  X(kConnectRefused, "connect_refused")                                 \
  X(kConnectNetUnreachable, "connect_net_unreachable")                  \
  X(kConnectHostUnreachable, "connect_host_unreachable")                \
  X(kConnectTimedOut, "connect_timed_out")                              \
  X(kConnectProhibited, "connect_prohibited")                           \
  X(kConnectFailed, "connect_failed") /* socket(), bind(), no memory */ \
  X(kPolicyReset, "policy_reset")  /* a new egress policy denies it */

enum class FlowEnd : uint8_t {
#define NETSTACK_ENUM(e, name) e,
  NETSTACK_TCP_FLOW_ENDS(NETSTACK_ENUM)
#undef NETSTACK_ENUM
      kCount
};
const char* FlowEndName(FlowEnd e);

struct BackendCounters {
  uint64_t tcp_flows_opened = 0;  // a host connect() started
  uint64_t tcp_flows_closed = 0;  // a flow ended (ends[] says why)
  uint64_t tcp_flows_established = 0;  // host connect succeeded
  uint64_t tcp_inbound_opened = 0;       // AdoptInboundTcp: guest connect started
  uint64_t tcp_inbound_established = 0;  // ... and the guest accepted
  uint64_t tcp_inbound_refused = 0;      // ... refused, failed or limited
  // ... of which the inbound share was full (max_inbound_tcp_flows).
  uint64_t tcp_refused_inbound_limit = 0;
  // SYNs refused before any host socket (RST to the guest).
  uint64_t tcp_refused_flow_limit = 0;
  uint64_t tcp_refused_host_loopback = 0;
  uint64_t tcp_refused_no_service = 0;  // the DNS address, no listener
  // An IPv6 destination that names an IPv4 one (::ffff:0:0/96), which a
  // host IPv6 socket would reach as IPv4: past the IPv4 policy (to
  // 127.0.0.1, say). The guest has IPv4 for that.
  uint64_t tcp_refused_mapped_destination = 0;
  // SYNs dropped over BackendLimits::busy_connect_rate (no RST).
  uint64_t tcp_syns_shed = 0;
  uint64_t tcp_bytes_guest_to_host = 0;
  // A flow had host-to-guest bytes to read and no chunk to read them
  // into (only the pool's receive reserve was left): it stopped reading
  // the host until the guest's acknowledgements freed chunks.
  uint64_t tcp_chunk_waits = 0;
  uint64_t tcp_bytes_host_to_guest = 0;
  uint64_t tcp_host_fds_open = 0;  // now
  std::array<uint64_t, static_cast<size_t>(FlowEnd::kCount)> tcp_ends{};
  // The egress policy: new outbound flows it refused, by the verdict's
  // reason (policy::Reason) and by protocol (TCP, UDP, ICMP echo); those
  // it allowed; and open flows a new policy denied, reset (TCP) or
  // closed (UDP, ping) by SetEgressPolicy.
  std::array<uint64_t, policy::kReasonCount> policy_refused{};
  std::array<uint64_t, 3> policy_refused_protocol{};
  uint64_t policy_allowed = 0;
  uint64_t policy_reset_on_change = 0;
  // Refused SYNs answered with no RST: the link was busy and
  // kBusyRefusalsPerConnect times busy_connect_rate a second were
  // answered already (a flood of refused connects; Backend::OnUnclaimedSyn).
  uint64_t policy_resets_shed = 0;
  // New outbound flows dropped over BackendLimits::new_flow_rate, by
  // protocol (TCP SYNs, UDP, ICMP echo).
  std::array<uint64_t, 3> limit_new_flows_dropped{};
};

class TcpFlow;

// What the inbound flows of one forward moved (AdoptInboundTcp's
// `counts`): shared, so a forward removed while its connections run
// keeps counting until they end.
struct InboundTcpCounts {
  uint64_t active = 0;
  uint64_t bytes_to_guest = 0;
  uint64_t bytes_from_guest = 0;
};

class Backend : public tcp::SynHandler {
 public:
  // Puts `nic` of `stack` in gateway mode with the plan's addresses and
  // routes and takes the TCP layer's unclaimed SYNs. The stack, the
  // layer and the loop must outlive the Backend.
  static absl::StatusOr<std::unique_ptr<Backend>> Create(
      const BackendConfig& config, stack::Stack& stack, stack::NicId nic,
      tcp::TcpLayer& tcp, eventloop::EventLoop& loop,
      buffer::ChunkPool& chunks);
  // The whole backend: the above, plus, on `udp`, the UDP flow table
  // (its unmatched handler), the ping forwarder (the stack's echo
  // handler), the DNS forwarder (dns4/dns6 port 53, UDP and TCP) and the
  // guest configuration services (DHCPv4, RA, DHCPv6; the stack's UDP
  // handler in front of `udp`). `udp` and `packets` must outlive it too.
  static absl::StatusOr<std::unique_ptr<Backend>> Create(
      const BackendConfig& config, stack::Stack& stack, stack::NicId nic,
      tcp::TcpLayer& tcp, udp::UdpLayer& udp, eventloop::EventLoop& loop,
      buffer::ChunkPool& chunks, buffer::PacketPool& packets);
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  ~Backend() override;

  // Once per loop turn, after Notifier::Dispatch and before
  // TcpLayer::Poll: applies connect outcomes decided since the last turn
  // and frees ended flows.
  void Sweep(Instant now);

  const AddressPlan& plan() const { return config_.plan; }
  const BackendConfig& config() const { return config_; }
  const BackendCounters& counters() const { return counters_; }
  // "backend.name value" lines: TCP flows, and the UDP, ping, DNS and
  // guest configuration parts when they run.
  std::string FormatCounters() const;
  // The parts the full Create adds; null with the TCP-only Create.
  const UdpFlowTable* udp_flows() const { return udp_flows_.get(); }
  // For -u through the stack (UdpFlowTable::ReadInbound).
  UdpFlowTable* udp_flows() { return udp_flows_.get(); }
  const PingForwarder* ping() const { return ping_.get(); }
  const DnsForwarder* dns() const { return dns_.get(); }
  const GuestConfigServices* guest_config() const {
    return guest_config_.get();
  }
  size_t tcp_flow_count() const { return flows_.size(); }
  // Of those, the inbound ones (AdoptInboundTcp).
  size_t tcp_inbound_flow_count() const { return inbound_tcp_flows_; }
  // What the TCP flows hold between their two sockets now
  // (TcpFlow::buffered_bytes, summed; walks the flows).
  uint64_t tcp_buffered_bytes() const;

  // An inbound forward through the stack: `host_fd` (a connected host
  // socket, taken whatever happens) is relayed to a netstack connection
  // from `source` to `guest` that this opens. `source` need not be the
  // stack's (the real client's address, so the guest sees it); port 0
  // picks one. Counted as a TCP flow (tcp_inbound_*), in the inbound
  // share (BackendLimits::max_inbound_tcp_flows), never the guest's.
  // Errors: ResourceExhausted when that share is full; those of Connect.
  // `counts`, when given, also counts the flow's bytes and whether it is
  // running.
  absl::Status AdoptInboundTcp(
      int host_fd, const transport::SocketAddress& source,
      const transport::SocketAddress& guest,
      std::shared_ptr<InboundTcpCounts> counts = nullptr);

  // The egress policy now (never null).
  const std::shared_ptr<const policy::Policy>& egress_policy() const {
    return config_.policy.egress;
  }
  // Replaces the egress policy (null: policy::Policy::Open()) and judges
  // every open outbound flow again under it: each it now denies is reset
  // (TCP: RST to the guest, abortive close on the host) or closed (UDP,
  // ping), and counted (policy_reset_on_change); each it allows is left
  // alone. Pins stay: they are DNS facts, and admit an address only under
  // a name rule of the policy in force. Returns how many were reset.
  size_t SetEgressPolicy(std::shared_ptr<const policy::Policy> egress);
  // --flow-log: each outbound flow opened (with its verdict), refused, and
  // closed (bytes each way, duration) is recorded in `log`, which must
  // outlive the Backend or be unset first. Null: none.
  void SetFlowLog(policy::FlowLog* log) { flow_log_ = log; }
  policy::FlowLog* flow_log() const { return flow_log_; }
  // The addresses the DNS forwarder pinned for this guest (expired from
  // Sweep, at most once a second).
  policy::PinTable& pins() { return pins_; }
  const policy::PinTable& pins() const { return pins_; }
  // The egress byte rate (BackendLimits::egress_rate); null when off.
  const EgressLimiter* egress_limiter() const { return egress_limit_.get(); }

  // tcp::SynHandler
  tcp::SynVerdict OnUnclaimedSyn(const transport::FourTuple& tuple,
                                 Instant now) override;

 private:
  friend class TcpFlow;
  Backend(const BackendConfig& config, stack::Stack& stack, stack::NicId nic,
          tcp::TcpLayer& tcp, eventloop::EventLoop& loop,
          buffer::ChunkPool& chunks);
  // Where a guest's flow to `dst` goes on the host; nullopt: refused
  // (counted).
  std::optional<transport::SocketAddress> HostDestination(
      const transport::SocketAddress& dst);
  // Judges a new outbound flow from `guest` to `dst` (the host's address,
  // after HostDestination): counts the verdict and records it in the flow
  // log (opened or refused; opened only with `log_opened`, else the
  // caller calls LogVerdict once the flow really opens).
  policy::Verdict JudgeEgress(policy::Protocol protocol,
                              const transport::SocketAddress& guest,
                              const transport::SocketAddress& dst, Instant now,
                              bool log_opened = true);
  void LogVerdict(policy::Protocol protocol,
                  const transport::SocketAddress& guest,
                  const transport::SocketAddress& dst,
                  const policy::Verdict& v, Instant now);
  // An outbound flow JudgeEgress allowed has ended: the flow log's record.
  void LogClosed(policy::Protocol protocol,
                 const transport::SocketAddress& guest,
                 const transport::SocketAddress& dst, uint64_t bytes_out,
                 uint64_t bytes_in, Instant opened);
  // The DNS forwarder answered a query NXDOMAIN for the policy: the flow
  // log's record.
  void LogDnsDenied(const DnsDenial& d);
  // Whether the policy now in force denies an open flow to `dst`.
  bool DeniedNow(policy::Protocol protocol, const transport::SocketAddress& dst,
                 Instant now) const;
  // Takes a token of BackendLimits::new_flow_rate for a new outbound flow;
  // false (counted) when there is none. Only called with the limit on.
  bool TakeNewFlow(policy::Protocol protocol, Instant now);
  // Whether the guest's link read hit its batch limit since the last Sweep.
  bool LinkBusy() const;
  // A flow has something for Sweep to do.
  void MarkForSweep(const transport::FourTuple& t) { sweep_.push_back(t); }
  // A flow waits for room in host_arena_; Sweep resumes it when there is.
  void WaitForChunk(const transport::FourTuple& t) {
    chunk_waiters_.push_back(t);
  }

  BackendConfig config_;
  stack::Stack& stack_;
  stack::NicId nic_;
  tcp::TcpLayer& tcp_;
  eventloop::EventLoop& loop_;
  // Host-to-guest bytes are received into these chunks: the flows share
  // one arena, so a flow with a short reply in flight does not pin a
  // 64 KiB chunk of its own (chunk_arena.h).
  buffer::ChunkPool& chunks_;
  buffer::ChunkArena host_arena_{chunks_};
  BackendCounters counters_;
  // Host connects while the link is busy (BackendLimits::
  // busy_connect_rate); the link's rx_batch_limit_hits at the last Sweep.
  TokenBucket busy_connects_;
  // RSTs for refused SYNs while the link is busy: a RST costs this thread
  // a TAP write (about 2 us, and the guest kernel's work in that write),
  // a host connect about 15 us, so the budget is ten times larger.
  static constexpr uint32_t kBusyRefusalsPerConnect = 10;
  TokenBucket busy_refusals_;
  uint64_t limit_hits_at_sweep_ = 0;
  absl::flat_hash_map<transport::FourTuple, std::unique_ptr<TcpFlow>> flows_;
  // Of flows_, those AdoptInboundTcp made; the rest are the guest's.
  size_t inbound_tcp_flows_ = 0;
  // Flows with work for Sweep, by tuple (a flow freed meanwhile is not
  // touched); two vectors swapped, so no allocation per turn.
  std::vector<transport::FourTuple> sweep_;
  std::vector<transport::FourTuple> sweep_batch_;
  // Flows waiting for host_arena_ to have room, oldest first.
  std::vector<transport::FourTuple> chunk_waiters_;
  std::vector<transport::FourTuple> chunk_waiters_batch_;
  // The full backend's other parts (see the second Create). Destroyed
  // first, the guest configuration services before the rest: they hand
  // the stack's UDP handler back to the UDP layer.
  std::unique_ptr<UdpFlowTable> udp_flows_;
  std::unique_ptr<PingForwarder> ping_;
  std::unique_ptr<DnsForwarder> dns_;
  std::unique_ptr<GuestConfigServices> guest_config_;
  std::unique_ptr<eventloop::PollerRef<GuestConfigServices>>
      guest_config_poller_;
  // The egress policy's pins (DNS answers) and flow log; the policy is
  // config_.policy.egress.
  policy::PinTable pins_;
  Instant next_pin_expiry_ = absl::InfinitePast();
  policy::FlowLog* flow_log_ = nullptr;
  // The per-guest limits (BackendLimits::new_flow_rate, egress_rate): a
  // bucket asked only when new_flow_rate is set, and a limiter that
  // exists only when egress_rate is (its timer resumes TCP flows by
  // tuple; the UDP table and the ping forwarder hold its address, and go
  // first).
  RateBucket new_flows_;
  std::unique_ptr<EgressLimiter> egress_limit_;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_BACKEND_H_
