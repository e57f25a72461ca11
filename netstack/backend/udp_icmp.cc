#include "netstack/backend/udp_icmp.h"

#include <array>
#include <cstring>

#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"

namespace netstack::backend {
namespace {

constexpr uint8_t kIcmp = 1;
constexpr uint8_t kUdp = 17;
constexpr uint8_t kIcmpv6 = 58;

struct Codes {
  uint8_t type;
  uint8_t code;
};

Codes V4Codes(Unreachable w) {
  switch (w) {
    case Unreachable::kPort: return {3, 3};
    case Unreachable::kHost: return {3, 1};
    case Unreachable::kNet: return {3, 0};
    case Unreachable::kAdminProhibited: return {3, 13};
  }
  return {3, 3};
}

Codes V6Codes(Unreachable w) {
  switch (w) {
    case Unreachable::kPort: return {1, 4};
    case Unreachable::kHost: return {1, 3};
    case Unreachable::kNet: return {1, 0};
    case Unreachable::kAdminProhibited: return {1, 1};
  }
  return {1, 4};
}

void EmitUdpQuote(uint8_t* p, const transport::SocketAddress& guest,
                  const transport::SocketAddress& peer, uint16_t udp_len) {
  wire::StoreBe16(p, guest.port);
  wire::StoreBe16(p + 2, peer.port);
  wire::StoreBe16(p + 4, udp_len);
  wire::StoreBe16(p + 6, 0);  // no checksum: the quote is not the datagram
}

}  // namespace

bool SendUdpUnreachable(stack::Stack& stack, buffer::PacketPool& packets,
                        Unreachable what, const transport::SocketAddress& guest,
                        const transport::SocketAddress& peer,
                        uint16_t udp_len, Instant now) {
  if (guest.ip.is_v4() != peer.ip.is_v4()) return false;
  if (!stack.TakeIcmpErrorToken(now)) return false;
  buffer::PacketPtr packet = packets.Allocate();
  if (packet == nullptr) {
    stack.CountDrop(stack::DropReason::kNoBuffer);
    return false;
  }
  if (guest.ip.is_v4()) {
    // ICMP header (8) + the invoking IPv4 header (20) + UDP header (8).
    constexpr size_t kLen = 8 + 20 + 8;
    auto hdr = packet->headers().Prepend(kLen);
    if (!hdr) return false;
    uint8_t* p = hdr->data();
    std::memset(p, 0, kLen);
    const Codes c = V4Codes(what);
    p[0] = c.type;
    p[1] = c.code;
    uint8_t* q = p + 8;
    q[0] = 0x45;
    wire::StoreBe16(q + 2, static_cast<uint16_t>(20 + udp_len));
    q[8] = 64;  // TTL
    q[9] = kUdp;
    std::memcpy(q + 12, guest.ip.v4().bytes.data(), 4);
    std::memcpy(q + 16, peer.ip.v4().bytes.data(), 4);
    wire::StoreBe16(q + 10, wire::InternetChecksum(std::span(q, 20)));
    EmitUdpQuote(q + 20, guest, peer, udp_len);
    wire::StoreBe16(p + 2, wire::InternetChecksum(std::span(p, kLen)));
    wire::Ipv4Repr ip;
    ip.src = peer.ip.v4();
    ip.dst = guest.ip.v4();
    ip.protocol = kIcmp;
    return stack.SendIpv4(ip, std::move(packet), now);
  }
  // ICMPv6 header (8) + the invoking IPv6 header (40) + UDP header (8).
  constexpr size_t kLen = 8 + 40 + 8;
  auto hdr = packet->headers().Prepend(kLen);
  if (!hdr) return false;
  uint8_t* p = hdr->data();
  std::memset(p, 0, kLen);
  const Codes c = V6Codes(what);
  p[0] = c.type;
  p[1] = c.code;
  uint8_t* q = p + 8;
  q[0] = 0x60;
  wire::StoreBe16(q + 4, udp_len);
  q[6] = kUdp;
  q[7] = 64;
  std::memcpy(q + 8, guest.ip.v6().bytes.data(), 16);
  std::memcpy(q + 24, peer.ip.v6().bytes.data(), 16);
  EmitUdpQuote(q + 40, guest, peer, udp_len);
  wire::ChecksumAccumulator sum;
  sum.AddFolded(
      wire::Ipv6PseudoHeaderSum(peer.ip.v6(), guest.ip.v6(), kIcmpv6, kLen));
  sum.Add(std::span<const uint8_t>(p, kLen));
  wire::StoreBe16(p + 2, sum.Checksum());
  wire::Ipv6Repr ip;
  ip.src = peer.ip.v6();
  ip.dst = guest.ip.v6();
  ip.next_header = kIcmpv6;
  return stack.SendIpv6(ip, std::move(packet), now);
}

}  // namespace netstack::backend
