// The network stack core: NICs and their addresses, the routing tables,
// the neighbour caches, and the network layer (IPv4/ARP/ICMPv4,
// IPv6/NDP/ICMPv6, fragmentation and reassembly).
//
// Time is an argument: every entry point takes `now`, NextDeadline() says
// when Poll() must run next, and nothing here reads a clock or does I/O
// except through the LinkEndpoints it was given. A production event loop
// (netstack/eventloop) and a fake-clock test drive the same code.
//
// Receive: a link delivers a batch of frames; each is parsed once, layer by
// layer, and either handled (an event counter says how) or dropped under
// exactly one DropReason. Packets produced while handling the batch are
// queued per NIC and handed to the link in one Transmit() call per NIC at
// the end of the batch (Flush), so a link can send them with one sendmmsg.
#ifndef NETSTACK_STACK_STACK_H_
#define NETSTACK_STACK_STACK_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/base/token_bucket.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/ip/fragment.h"
#include "netstack/ip/reassembly.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/stack/counters.h"
#include "netstack/stack/neighbor_cache.h"
#include "netstack/stack/route_table.h"
#include "netstack/wire/address.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ipv6.h"

namespace netstack::stack {

struct StackOptions {
  NeighborOptions neighbor;
  ip::ReassemblerOptions reassembly;
  // Packets waiting for a link that would block, per NIC.
  size_t tx_queue_limit = 4096;
  uint8_t ipv4_ttl = 64;
  uint8_t ipv6_hop_limit = 64;
  // Off: every IPv6 frame is dropped on arrival (drop.ipv6_disabled), as
  // slirp4netns without --enable-ipv6 does; nothing of IPv6 goes out.
  bool ipv6 = true;
  // ICMP/ICMPv6 errors we send: a token bucket shared by both families,
  // like Linux's icmp_msgs_per_sec / icmp_msgs_burst.
  double icmp_errors_per_second = 1000;
  double icmp_error_burst = 50;
};

// An IPv4 datagram handed to a transport: header fields and the payload
// (after reassembly, if it was fragmented).
struct Ipv4Datagram {
  NicId nic = 0;
  wire::Ipv4Repr ip;
  // The received IP header: quoted in ICMP errors.
  buffer::PayloadView header;
  buffer::PayloadView payload;
  // The frame was a link-layer broadcast/multicast: never send an ICMP
  // error about it (RFC 1122 3.2.2).
  bool link_multicast = false;
  bool checksum_verified = false;  // see link::InboundFrame
  bool checksum_partial = false;
  uint16_t udp_gso_size = 0;  // see link::InboundFrame
};

struct Ipv6Datagram {
  NicId nic = 0;
  wire::Ipv6Repr ip;
  // The received packet from the IPv6 header on (for ICMPv6 errors, which
  // quote as much of it as fits, RFC 4443 section 2.4(c)).
  buffer::PayloadView packet;
  bool link_multicast = false;  // see Ipv4Datagram
  uint8_t protocol = 0;  // after the extension headers
  buffer::PayloadView payload;
  bool checksum_verified = false;
  bool checksum_partial = false;
  uint16_t udp_gso_size = 0;  // see link::InboundFrame
};

// An ICMP or ICMPv6 error about a datagram we sent (RFC 1122 3.2.2.1,
// RFC 4443 2.4): what happened, and the invoking datagram's addresses and
// the first bytes of its transport header (ports, and TCP's sequence
// number), which say whose flow it concerns. Validated by the stack: the
// invoking datagram's source is one of our addresses and at least 8 bytes
// of its transport header are there.
enum class IcmpErrorKind : uint8_t {
  kNetUnreachable,
  kHostUnreachable,
  kProtocolUnreachable,
  kPortUnreachable,
  kAdminProhibited,
  kFragmentationNeeded,  // IPv4 code 4, or ICMPv6 Packet Too Big: `mtu`
  kTimeExceeded,
  kParameterProblem,
  kOther,
};
const char* IcmpErrorKindName(IcmpErrorKind k);

struct IcmpError {
  IcmpErrorKind kind = IcmpErrorKind::kOther;
  uint32_t mtu = 0;  // kFragmentationNeeded: the next-hop MTU (0: unknown)
  bool v6 = false;
  wire::Ipv4Address src4, dst4;  // the invoking datagram's (we sent it)
  wire::Ipv6Address src6, dst6;
  uint8_t protocol = 0;
  // The invoking datagram's transport header, at least 8 bytes (valid
  // during the OnIcmpError call only).
  std::span<const uint8_t> l4;
};

// A transport protocol (TCP, UDP) registered with Stack::SetTransport.
// The stack has verified the IP layer; the transport parses its own header
// and verifies its checksum (honouring checksum_verified/_partial).
class TransportHandler {
 public:
  virtual ~TransportHandler() = default;
  // nullopt: the datagram was consumed. A reason: the stack counts the
  // drop under it; for kUdpNoListener it also sends ICMP port unreachable.
  virtual std::optional<DropReason> Deliver(const Ipv4Datagram& d,
                                            Instant now) = 0;
  virtual std::optional<DropReason> Deliver(const Ipv6Datagram& d,
                                            Instant now) = 0;
  // An ICMP error about a datagram of this protocol that we sent.
  virtual void OnIcmpError(const IcmpError& e, Instant now) {}
  // The link's batch of frames has been delivered (before the flush): a
  // transport that held back work for the batch does it now.
  virtual void OnReceiveBatchEnd(Instant now) {}
};

// An ICMP or ICMPv6 echo request, verified (type, code, checksum), for
// an EchoHandler.
struct EchoRequest {
  bool v6 = false;
  wire::Ipv4Address src4, dst4;
  wire::Ipv6Address src6, dst6;
  uint16_t id = 0;
  uint16_t seq = 0;
  // The echo data after the 8-byte header (a view of the received or
  // reassembled chunk; the handler may keep it).
  buffer::PayloadView data;
  // IPv4 TTL / IPv6 hop limit of the request.
  uint8_t ttl = 0;
};

// Asked first about every unicast echo request (Stack::SetEchoHandler):
// a network backend takes those for destinations that are not its own
// and forwards them to host ping sockets (netstack/backend/ping_*).
class EchoHandler {
 public:
  virtual ~EchoHandler() = default;
  // True: taken (the stack sends no reply of its own). False: the stack
  // answers it as usual if the destination is ours.
  virtual bool OnEchoRequest(const EchoRequest& request, Instant now) = 0;
};

// Guest configuration (netstack/backend's router advertisements): the
// stack hands it the Router Solicitations it receives. The stack has
// verified the ICMPv6 checksum, the Code (0) and the option syntax
// (Icmpv6Repr::Parse); the hop limit and source rules of RFC 4861 6.1.1
// are the handler's to check and count.
class RouterSolicitationHandler {
 public:
  virtual ~RouterSolicitationHandler() = default;
  // nullopt: consumed. A reason: the stack counts the drop under it.
  virtual std::optional<DropReason> OnRouterSolicitation(
      const Ipv6Datagram& d, const wire::NdpRouterSolicitation& rs,
      Instant now) = 0;
};

// Where a packet to a destination goes: the source address the stack
// would pick, and the outgoing link's MTU and GSO size.
template <typename Address>
struct PathInfo {
  Address src;
  NicId nic = 0;
  uint32_t mtu = 0;           // L3 MTU of the outgoing link
  uint32_t gso_max_size = 0;  // 0: no GSO
  bool udp_gso = false;       // LinkCapabilities::udp_gso
};

// A NIC in gateway mode (netstack/backend): the stack stands in for
// every host beyond the link. It takes packets to any unicast destination
// and sends from any source, but only its own addresses (the gateway's
// and the DNS address) answer ARP, NDP and ping as the stack itself. It
// takes packets only from the guest's own sources; anything else is
// dropped as kSpoofedSource before a transport sees it.
struct GatewayOptions {
  // The guest's IPv4 address (its lease); zero: no IPv4 source but the
  // DHCP client's. 0.0.0.0 is accepted for UDP to a broadcast or to one
  // of our addresses only (a DHCP client without a lease, RFC 2131 4.1).
  wire::Ipv4Address guest4;
  // The guest's IPv6 prefix (its SLAAC addresses). Link-local sources are
  // always accepted, and :: for NDP's duplicate address detection.
  std::optional<Ipv6Cidr> guest6_prefix;
};

class Stack {
 public:
  Stack(const StackOptions& options, buffer::ChunkPool& chunks,
        buffer::PacketPool& packets);
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  ~Stack();

  // Adds a NIC on `link` (not owned; must outlive the stack) and attaches
  // the stack as its receiver. The NIC gets an IPv6 link-local address
  // derived from the link's MAC (modified EUI-64, RFC 4291 appendix A).
  absl::StatusOr<NicId> AddNic(link::LinkEndpoint* link, std::string name);
  // Adds an address and the on-link route for its prefix.
  absl::Status AddAddress(NicId nic, const Ipv4Cidr& cidr);
  absl::Status AddAddress(NicId nic, const Ipv6Cidr& cidr);
  // Puts the NIC in gateway mode (see GatewayOptions).
  absl::Status SetGateway(NicId nic, const GatewayOptions& options);
  absl::Status AddRoute(const Route<wire::Ipv4Address>& route);
  absl::Status AddRoute(const Route<wire::Ipv6Address>& route);

  // Timers: neighbour re-solicitation, reassembly expiry, retrying a
  // blocked link. Poll() runs what is due and flushes; NextDeadline() is
  // kNever when nothing is pending.
  Instant NextDeadline() const;
  void Poll(Instant now);
  // Hands every NIC's queued packets to its link.
  void Flush(Instant now);

  // Registers the handler for an IP protocol number (6 TCP, 17 UDP);
  // nullptr unregisters. Not owned; must outlive its registration.
  void SetTransport(uint8_t protocol, TransportHandler* handler);
  // The echo request hook (see EchoHandler); nullptr removes it. Not
  // owned; must outlive its registration.
  void SetEchoHandler(EchoHandler* handler) { echo_handler_ = handler; }
  std::optional<PathInfo<wire::Ipv4Address>> Path(
      const wire::Ipv4Address& dst) const;
  std::optional<PathInfo<wire::Ipv6Address>> Path(
      const wire::Ipv6Address& dst) const;
  // An address assigned to any NIC.
  bool HasAddress(const wire::Ipv4Address& a) const;
  bool HasAddress(const wire::Ipv6Address& a) const;
  // Guest configuration services (netstack/backend: DHCP, RA, DHCPv6).
  //
  // A NIC's MAC and IPv6 link-local address; nullopt for an unknown NIC.
  std::optional<wire::MacAddress> NicMac(NicId nic) const;
  // The statistics of `nic`'s link (LinkEndpoint::Stats).
  std::optional<link::LinkStats> NicLinkStats(NicId nic) const;
  // LinkStats::rx_batch_limit_hits of every NIC's link, summed: grows
  // while a link's peer sends faster than we read.
  uint64_t RxBatchLimitHits() const;
  std::optional<wire::Ipv6Address> LinkLocalAddress(NicId nic) const;
  // Makes `nic` accept datagrams to the IPv6 multicast `group` as well as
  // to all-nodes and its solicited-node groups (a router joins ff02::2, a
  // DHCPv6 server ff02::1:2). On a point-to-point link nobody snoops MLD,
  // so no report is sent.
  absl::Status JoinIpv6Multicast(NicId nic, const wire::Ipv6Address& group);
  // Off by default. On: a UDP datagram from 0.0.0.0 to 255.255.255.255 is
  // no martian (RFC 1122 3.2.1.3 allows 0.0.0.0 as a source while a host
  // configures itself: a DHCP client, RFC 2131 4.1) and goes to the UDP
  // transport. No ICMP error is ever sent to 0.0.0.0.
  void AcceptIpv4UnspecifiedSource(bool on) { accept_unspecified4_ = on; }
  void SetRouterSolicitationHandler(RouterSolicitationHandler* handler) {
    rs_handler_ = handler;
  }
  // Sends an IPv4 datagram on `nic` straight to `dst_mac`: no route, no
  // ARP, no fragmentation (dropped as kFragmentationNeeded past the MTU).
  // `ip` needs src, dst and protocol. For a server that answers a client
  // without an address yet: the limited broadcast, or the client's own
  // hardware address (RFC 2131 4.1).
  bool SendIpv4ToMac(NicId nic, wire::Ipv4Repr ip, buffer::PacketPtr packet,
                     const wire::MacAddress& dst_mac, Instant now);
  // Sends an IPv6 packet on `nic` with ip.hop_limit as given (NDP needs
  // 255) and ip.src as given (unspecified: the link-local address):
  // multicast to its group's MAC, unicast through neighbour resolution.
  // No route and no fragmentation.
  bool SendIpv6OnLink(NicId nic, wire::Ipv6Repr ip, buffer::PacketPtr packet,
                      Instant now);

  // Sends ICMP/ICMPv6 destination unreachable (net, host or
  // administratively prohibited) to `src` about a datagram it sent to
  // `dst`, quoting its header rebuilt from the addresses, `protocol` and
  // `l4_head` (the first bytes of its transport header, at most 8 used).
  // For a gateway that refuses a flow after the datagram itself is gone.
  // Rate limited like every error we send; false if nothing was sent.
  bool SendDestUnreachable(const wire::Ipv4Address& src,
                           const wire::Ipv4Address& dst, uint8_t protocol,
                           std::span<const uint8_t> l4_head,
                           IcmpErrorKind kind, Instant now);
  bool SendDestUnreachable(const wire::Ipv6Address& src,
                           const wire::Ipv6Address& dst, uint8_t protocol,
                           std::span<const uint8_t> l4_head,
                           IcmpErrorKind kind, Instant now);
  // Counts a drop decided outside the stack (a transport's transmit side).
  void CountDrop(DropReason reason) { Drop(reason); }

  const StackCounters& counters() const { return counters_; }
  const ip::Reassembler::Stats& reassembly_stats() const {
    return reassembler_.stats();
  }
  std::string FormatCounters() const;

  // Sends an IPv4 datagram whose transport header and payload are already
  // in `packet` (headers prepended, payload views). Fills the IPv4 header
  // from `ip` (src/dst/protocol required; ttl, ident and length are set
  // here: TTL from StackOptions, a fresh identification, the length),
  // fragments if needed and allowed, resolves the next hop. Returns false if the packet was dropped (counted).
  bool SendIpv4(wire::Ipv4Repr ip, buffer::PacketPtr packet, Instant now);
  bool SendIpv6(wire::Ipv6Repr ip, buffer::PacketPtr packet, Instant now);
  // Takes one token of the ICMP error budget (StackOptions
  // icmp_errors_per_second and icmp_error_burst); false: rate limited,
  // counted as kIcmpRateLimited. The stack's own errors take one; so must
  // every error a user builds and sends with SendIpv4/SendIpv6 (the
  // backend's UDP unreachables), or a guest's spray is answered packet
  // for packet.
  bool TakeIcmpErrorToken(Instant now);

 private:
  struct Nic;
  class NicReceiver;

  // Receive path, one function per layer.
  void DeliverFrames(Nic& nic, std::span<link::InboundFrame> frames,
                     Instant now);
  void HandleFrame(Nic& nic, const link::InboundFrame& frame, Instant now);
  void HandleArp(Nic& nic, std::span<const uint8_t> bytes, Instant now);
  void HandleIpv4(Nic& nic, const link::InboundFrame& frame,
                  buffer::PayloadView packet, bool link_multicast,
                  Instant now);
  void DeliverIpv4(Ipv4Datagram& d, Instant now);
  void HandleIcmpv4(Ipv4Datagram& d, Instant now);
  void HandleIpv6(Nic& nic, const link::InboundFrame& frame,
                  buffer::PayloadView packet, bool link_multicast,
                  Instant now);
  void DeliverIpv6(Ipv6Datagram& d, Instant now);
  void HandleIcmpv6(Ipv6Datagram& d, Instant now);

  // Transmit path.
  void SendArp(Nic& nic, uint16_t op, const wire::MacAddress& dst_mac,
               const wire::Ipv4Address& sender_ip,
               const wire::MacAddress& target_mac,
               const wire::Ipv4Address& target_ip, Instant now);
  void SendNeighborSolicitation(Nic& nic, const wire::Ipv6Address& target,
                                Instant now);
  void SendIcmpv4Error(const Ipv4Datagram& offending, uint8_t type,
                       uint8_t code, uint16_t mtu, Instant now);
  // `multicast_ok`: the error may answer a packet sent to a multicast
  // address (RFC 4443 2.4(e.3): Packet Too Big, and Parameter Problem
  // code 2 for an option whose action bits are 10).
  void SendIcmpv6Error(const Ipv6Datagram& offending, uint8_t type,
                       uint8_t code, uint32_t mtu, Instant now,
                       bool multicast_ok = false);
  // Expires timed-out datagrams; called from Poll and before a fragment is
  // added, so a late fragment never joins a datagram past its deadline.
  void ExpireReassembly(Instant now);
  void SendReassemblyTimeExceeded(const ip::ExpiredDatagram& e, Instant now);
  // Hands an ICMP error to the transport it concerns (icmp_error.cc).
  // `invoking` starts at the invoking datagram's IP header. False (and
  // nothing delivered) if it is not about a datagram of ours.
  bool DeliverIcmpError(IcmpError e, std::span<const uint8_t> invoking,
                        Instant now);
  // Adds the Ethernet header and queues the packet on the NIC. A packet
  // whose checksum is left to the link (PartialChecksum) has it completed
  // here unless the NIC's link offloads it, so no route or link change
  // can send it half done.
  void QueueFrame(Nic& nic, buffer::PacketPtr packet,
                  const wire::MacAddress& dst, uint16_t ethertype);
  // Resolves `next_hop` on `nic` and queues, or parks the packet in the
  // neighbour cache and solicits.
  void ResolveAndQueue4(Nic& nic, const wire::Ipv4Address& next_hop,
                        buffer::PacketPtr packet, Instant now);
  void ResolveAndQueue6(Nic& nic, const wire::Ipv6Address& next_hop,
                        buffer::PacketPtr packet, Instant now);
  // The packet's headers (moved into a fresh chunk) followed by its
  // payload views; 0 if no chunk is available. A partial checksum is
  // completed first: fragments leave without the mark.
  size_t ToPayloadViews(
      buffer::PacketBuffer& packet,
      std::array<buffer::PayloadView,
                 buffer::PacketBuffer::kMaxPayloadViews + 1>& out);
  void Drop(DropReason reason) {
    ++counters_.drops[static_cast<size_t>(reason)];
    if (IsReceiveDrop(reason)) ++rx_drops_;
  }
  void DropChain(buffer::PacketChain chain, DropReason reason);

  // Guest configuration (guest_config.cc).
  bool IsUnspecifiedSourceBroadcast(const wire::Ipv4Repr& ip) const;
  void HandleRouterSolicitation(Nic& nic, Ipv6Datagram& d,
                                const wire::NdpRouterSolicitation& rs,
                                Instant now);

  // Address helpers.
  Nic* FindNic(NicId id);
  const Nic* FindNic(NicId id) const;
  bool IsOurIpv4(const Nic& nic, const wire::Ipv4Address& a) const;
  bool IsIpv4BroadcastFor(const Nic& nic, const wire::Ipv4Address& a) const;
  bool AcceptsIpv6(const Nic& nic, const wire::Ipv6Address& a) const;
  bool IsOurIpv6(const Nic& nic, const wire::Ipv6Address& a) const;
  // Gateway mode: a source the guest may use / a destination we stand
  // in for.
  bool GatewaySourceOk(const Nic& nic, const wire::Ipv4Repr& ip) const;
  bool GatewaySourceOk(const Nic& nic, const wire::Ipv6Address& src) const;
  bool GatewayForwards(const Nic& nic, const wire::Ipv4Address& dst) const;
  bool GatewayForwards(const Nic& nic, const wire::Ipv6Address& dst) const;
  // The invoking datagram of an ICMP error came from us: one of our
  // addresses, or in gateway mode any address but the guest's.
  bool SentByUs(const wire::Ipv4Address& a) const;
  bool SentByUs(const wire::Ipv6Address& a) const;
  std::optional<wire::Ipv4Address> SourceFor(const Nic& nic,
                                             const wire::Ipv4Address& dst) const;
  std::optional<wire::Ipv6Address> SourceFor(const Nic& nic,
                                             const wire::Ipv6Address& dst) const;

  StackOptions options_;
  buffer::ChunkPool& chunks_;
  buffer::PacketPool& packets_;
  std::vector<std::unique_ptr<Nic>> nics_;
  RouteTable<wire::Ipv4Address> routes4_;
  RouteTable<wire::Ipv6Address> routes6_;
  NeighborCache<wire::Ipv4Address> arp_;
  NeighborCache<wire::Ipv6Address> ndp_;
  ip::Reassembler reassembler_;
  StackCounters counters_;
  TransportHandler* tcp_ = nullptr;
  TransportHandler* udp_ = nullptr;
  EchoHandler* echo_handler_ = nullptr;
  uint16_t next_ipv4_ident_ = 1;
  uint32_t next_ipv6_frag_ident_ = 1;
  Instant retry_tx_at_ = kNever;
  uint64_t rx_drops_ = 0;  // running sum of the receive-side drops
  // Guest configuration (guest_config.cc): DHCP clients send from 0.0.0.0.
  bool accept_unspecified4_ = false;
  RouterSolicitationHandler* rs_handler_ = nullptr;
  // ICMP errors (RFC 1812 4.3.2.8, RFC 4443 2.4(f)).
  TokenBucket icmp_errors_;
};

}  // namespace netstack::stack

#endif  // NETSTACK_STACK_STACK_H_
