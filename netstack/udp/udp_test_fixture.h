// A stack on a fake link with a UdpLayer, plus the peer's side: frames
// the peer sends (UDP over IPv4/IPv6 with valid checksums) and parsers of
// what we sent. Shared by the UDP tests.
#ifndef NETSTACK_UDP_UDP_TEST_FIXTURE_H_
#define NETSTACK_UDP_UDP_TEST_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"
#include "netstack/transport/address.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/udp.h"

namespace netstack::udp::testing {

inline constexpr uint16_t kEtherIpv4 = 0x0800;
inline constexpr uint16_t kEtherIpv6 = 0x86dd;

// The UDP datagram (header + payload) with a valid checksum.
std::vector<uint8_t> UdpDatagram(const transport::SocketAddress& src,
                                 const transport::SocketAddress& dst,
                                 std::span<const uint8_t> payload);
std::vector<uint8_t> Bytes(std::string_view text);

// A frame we sent, parsed down to the transport.
struct SentFrame {
  wire::EthernetRepr eth;
  bool is_v4 = false;
  wire::Ipv4Repr ip4;
  wire::Ipv6Repr ip6;
  uint8_t protocol = 0;
  // The IP payload (for IPv4 fragments: this fragment's part).
  std::vector<uint8_t> l4;
};
SentFrame ParseSent(const std::vector<uint8_t>& frame);

class UdpFixture : public ::testing::Test {
 protected:
  explicit UdpFixture(uint64_t seed = 42, UdpLayerOptions options = {});
  ~UdpFixture() override;

  // Teaches the stack the peer's MAC for IPv4 (an ARP request from it)
  // and IPv6 (a neighbour solicitation), and discards our answers.
  void LearnPeer();
  // Sends `payload` from the peer (src) to `dst` over IPv4 or IPv6 (by
  // the addresses' family), fragmented to the MTU if needed. `dst_mac`
  // defaults to ours.
  void InjectUdp(const transport::SocketAddress& src,
                 const transport::SocketAddress& dst,
                 std::span<const uint8_t> payload,
                 const wire::MacAddress* dst_mac = nullptr);
  // Same with a prepared UDP datagram (header included) as the IP payload
  // (or, with `protocol`, any other IP payload: an ICMP error...).
  void InjectL4(const transport::IpAddress& src,
                const transport::IpAddress& dst, const std::vector<uint8_t>& l4,
                const wire::MacAddress* dst_mac = nullptr,
                uint8_t protocol = 17);
  // Flushes the stack and returns what the link got since the last call.
  std::vector<std::vector<uint8_t>> TakeSent();
  uint64_t StackDrops(stack::DropReason r) const {
    return stack_->counters().drop(r);
  }
  // Replaces the layer (all sockets must be closed).
  void RecreateLayer(uint64_t seed, UdpLayerOptions options = {});

  transport::SocketAddress Peer4(uint16_t port) const {
    return {peer_.ip4, port};
  }
  transport::SocketAddress Peer6(uint16_t port) const {
    return {peer_.ip6, port};
  }
  transport::SocketAddress Our4(uint16_t port) const {
    return {our_ip4_, port};
  }
  transport::SocketAddress Our6(uint16_t port) const {
    return {our_ip6_, port};
  }
  static transport::SocketAddress Any4(uint16_t port) {
    return {wire::Ipv4Address(), port};
  }
  static transport::SocketAddress Any6(uint16_t port) {
    return {wire::Ipv6Address(), port};
  }

  buffer::ChunkPool chunks_{1024};
  buffer::PacketPool packets_{1024};
  std::unique_ptr<stack::FakeLink> link_;
  std::unique_ptr<stack::Stack> stack_;
  transport::Notifier notifier_;
  std::unique_ptr<UdpLayer> udp_;
  stack::NicId nic_ = 0;
  stack::testing::Peer peer_;
  wire::MacAddress our_mac_;
  wire::Ipv4Address our_ip4_;
  wire::Ipv6Address our_ip6_;
  uint16_t next_ident_ = 1;
  Instant now_ = absl::UnixEpoch() + absl::Seconds(1000);
};

}  // namespace netstack::udp::testing

#endif  // NETSTACK_UDP_UDP_TEST_FIXTURE_H_
