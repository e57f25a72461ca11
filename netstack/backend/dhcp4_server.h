// A DHCPv4 server for one guest (RFC 2131, options RFC 2132): it leases
// the plan's one guest address and gives router, DNS, MTU (26), lease
// time (51), renewal (58) and rebinding (59) times, with the gateway as
// its server id (54).
//
//   DISCOVER -> OFFER of the guest address (unless another MAC holds it)
//   REQUEST  -> ACK, or NAK for another address, a lease held by another
//               MAC, or a renewal of an address that is not ours to give.
//               A REQUEST naming another server id is that client's
//               choice of another server: nothing is sent (RFC 2131
//               4.3.2), and it is counted.
//   DECLINE, RELEASE -> the lease is freed; nothing is sent.
//   INFORM   -> ACK with the options and no lease (RFC 2131 4.3.5).
//
// Where replies go (RFC 2131 4.1): a NAK, and any reply with the
// client's broadcast bit set, to 255.255.255.255 and the Ethernet
// broadcast; a reply to a client with an address (ciaddr) to ciaddr;
// otherwise to yiaddr at the client's chaddr, without ARP (the client
// cannot answer ARP before it has the address). Stack::SendIpv4ToMac sends
// all of them. Relayed messages (giaddr set) have no place on a
// point-to-point guest link and are dropped.
//
// Every message is counted received (per type) or dropped (per reason);
// every reply sent per type. Nothing a client sends can make it crash or
// allocate: the reply is built in a pooled chunk.
#ifndef NETSTACK_BACKEND_DHCP4_SERVER_H_
#define NETSTACK_BACKEND_DHCP4_SERVER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "netstack/backend/dhcp4_message.h"
#include "netstack/backend/guest_config_plan.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/stack.h"

namespace netstack::backend {

inline constexpr uint16_t kDhcp4ServerPort = 67;
inline constexpr uint16_t kDhcp4ClientPort = 68;

// Drops after a message parsed (the parse errors have their own list).
#define NETSTACK_DHCP4_DROPS(X)                                 \
  X(not_request_op, "not_bootrequest")                          \
  X(relayed, "relayed")                                         \
  X(bad_chaddr, "bad_chaddr")                                   \
  X(server_message_type, "server_message_type")                 \
  X(request_other_server, "request_other_server")               \
  X(address_taken, "address_taken")                             \
  X(release_not_ours, "release_not_ours")                       \
  X(inform_without_ciaddr, "inform_without_ciaddr")             \
  X(send_failed, "send_failed")

struct Dhcp4Counters {
  std::array<uint64_t, kDhcp4MessageTypes> received{};
  std::array<uint64_t, kDhcp4MessageTypes> sent{};
  std::array<uint64_t, kDhcp4ParseErrorCount> parse_errors{};
#define NETSTACK_DHCP4_DROP_FIELD(f, name) uint64_t f = 0;
  NETSTACK_DHCP4_DROPS(NETSTACK_DHCP4_DROP_FIELD)
#undef NETSTACK_DHCP4_DROP_FIELD
  uint64_t leases_granted = 0;
  uint64_t leases_released = 0;
  // "dhcp4.<name> value" lines for the non-zero counters.
  std::string Format() const;
};

class Dhcp4Server {
 public:
  Dhcp4Server(stack::Stack& stack, buffer::ChunkPool& chunks,
              buffer::PacketPool& packets, stack::NicId nic,
              const GuestConfigPlan& plan);

  // A UDP datagram to port 67 whose UDP header and checksum the stack has
  // verified; `d.payload` starts at the UDP header. Always consumes it
  // (drops are counted here).
  void Deliver(const stack::Ipv4Datagram& d, Instant now);

  const Dhcp4Counters& counters() const { return counters_; }
  // The MAC holding the lease, if it is bound and not expired at `now`.
  std::optional<wire::MacAddress> LeaseHolder(Instant now) const;

 private:
  void HandleDiscover(const Dhcp4Message& m, Instant now);
  void HandleRequest(const Dhcp4Message& m, Instant now);
  void HandleInform(const Dhcp4Message& m, Instant now);
  void FreeLease(const Dhcp4Message& m);
  bool LeaseFreeFor(const wire::MacAddress& mac, Instant now) const;
  // A reply of `type` to `req` with our options; `lease`: with yiaddr and
  // the lease times.
  Dhcp4Message Reply(const Dhcp4Message& req, Dhcp4MessageType type,
                     bool lease) const;
  void Send(const Dhcp4Message& req, const Dhcp4Message& reply, Instant now);

  stack::Stack& stack_;
  buffer::ChunkPool& chunks_;
  buffer::PacketPool& packets_;
  const stack::NicId nic_;
  const GuestConfigPlan plan_;
  std::optional<wire::MacAddress> lease_mac_;
  Instant lease_expires_ = absl::InfinitePast();
  Dhcp4Counters counters_;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_DHCP4_SERVER_H_
