// Internal to the stack: a NIC's state, and address helpers.
#ifndef NETSTACK_STACK_NIC_H_
#define NETSTACK_STACK_NIC_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/stack/route_table.h"
#include "netstack/stack/stack.h"

namespace netstack::stack {

struct Stack::Nic {
  NicId id = 0;
  std::string name;
  link::LinkEndpoint* link = nullptr;
  link::LinkCapabilities caps;
  std::vector<Ipv4Cidr> ipv4;
  std::vector<Ipv6Cidr> ipv6;  // [0] is the link-local address
  std::vector<wire::Ipv6Address> ipv6_groups;  // JoinIpv6Multicast
  buffer::PacketChain tx;      // frames for the next Flush
  std::optional<GatewayOptions> gateway;
  std::unique_ptr<NicReceiver> receiver;
};

class Stack::NicReceiver : public link::LinkReceiver {
 public:
  NicReceiver(Stack& stack, Nic& nic) : stack_(stack), nic_(nic) {}
  void DeliverFrames(std::span<link::InboundFrame> frames,
                     Instant now) override {
    stack_.DeliverFrames(nic_, frames, now);
  }

 private:
  Stack& stack_;
  Nic& nic_;
};

// Wire packets `p` leaves as: ceil(payload / GSO size) for a GSO
// super-segment, else one.
inline size_t GsoPackets(const buffer::PacketBuffer& p) {
  if (!p.is_gso() || p.gso().size == 0) return 1;
  const size_t n = (p.payload_size() + p.gso().size - 1) / p.gso().size;
  return n == 0 ? 1 : n;
}

// A GSO super-segment whose IP packet (`ip_len` bytes) the link takes
// whole: it is not fragmented but split by the link into wire packets.
inline bool FitsGso(const buffer::PacketBuffer& p, size_t ip_len,
                    const link::LinkCapabilities& caps) {
  return p.is_gso() && p.gso().size > 0 && caps.gso_max_size > 0 &&
         ip_len <= caps.gso_max_size && ip_len <= 65535;
}

// fe80::/64 with a modified EUI-64 interface identifier (RFC 4291
// appendix A): the MAC with the universal/local bit flipped and ff:fe in
// the middle.
inline wire::Ipv6Address LinkLocalFromMac(const wire::MacAddress& mac) {
  wire::Ipv6Address a;
  a.bytes[0] = 0xfe;
  a.bytes[1] = 0x80;
  a.bytes[8] = mac.bytes[0] ^ 0x02;
  a.bytes[9] = mac.bytes[1];
  a.bytes[10] = mac.bytes[2];
  a.bytes[11] = 0xff;
  a.bytes[12] = 0xfe;
  a.bytes[13] = mac.bytes[3];
  a.bytes[14] = mac.bytes[4];
  a.bytes[15] = mac.bytes[5];
  return a;
}

// ff02::1:ffXX:XXXX (RFC 4291 section 2.7.1).
inline wire::Ipv6Address SolicitedNodeMulticast(const wire::Ipv6Address& a) {
  wire::Ipv6Address m;
  m.bytes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff,
             a.bytes[13], a.bytes[14], a.bytes[15]};
  return m;
}

// 33:33 followed by the low 32 bits (RFC 2464 section 7).
inline wire::MacAddress Ipv6MulticastMac(const wire::Ipv6Address& a) {
  wire::MacAddress m;
  m.bytes = {0x33, 0x33, a.bytes[12], a.bytes[13], a.bytes[14], a.bytes[15]};
  return m;
}

// 01:00:5e followed by the low 23 bits (RFC 1112 section 6.4).
inline wire::MacAddress Ipv4MulticastMac(const wire::Ipv4Address& a) {
  wire::MacAddress m;
  m.bytes = {0x01, 0x00, 0x5e, static_cast<uint8_t>(a.bytes[1] & 0x7f),
             a.bytes[2], a.bytes[3]};
  return m;
}

}  // namespace netstack::stack

#endif  // NETSTACK_STACK_NIC_H_
