#include "netstack/udp/udp_test_fixture.h"

#include <algorithm>

#include "netstack/wire/checksum.h"

namespace netstack::udp::testing {

using transport::IpAddress;
using transport::SocketAddress;

std::vector<uint8_t> UdpDatagram(const SocketAddress& src,
                                 const SocketAddress& dst,
                                 std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(8 + payload.size());
  wire::UdpRepr repr{src.port, dst.port, static_cast<uint16_t>(payload.size())};
  wire::MutableUdpHeader udp(out);
  repr.Emit(udp);
  std::copy(payload.begin(), payload.end(), out.begin() + 8);
  const uint16_t pseudo =
      src.ip.is_v4()
          ? wire::Ipv4PseudoHeaderSum(src.ip.v4(), dst.ip.v4(), 17, out.size())
          : wire::Ipv6PseudoHeaderSum(src.ip.v6(), dst.ip.v6(), 17, out.size());
  udp.FillChecksum(pseudo);
  return out;
}

std::vector<uint8_t> Bytes(std::string_view text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

SentFrame ParseSent(const std::vector<uint8_t>& frame) {
  SentFrame s;
  EXPECT_EQ(wire::EthernetRepr::Parse(wire::EthernetFrame(frame), s.eth),
            wire::WireError::kOk);
  const auto ip = std::span<const uint8_t>(frame).subspan(14);
  if (s.eth.ethertype == kEtherIpv4) {
    s.is_v4 = true;
    wire::Ipv4Packet view(ip);
    EXPECT_EQ(wire::Ipv4Repr::Parse(view, s.ip4), wire::WireError::kOk);
    EXPECT_TRUE(view.HeaderChecksumValid());
    s.protocol = s.ip4.protocol;
    s.l4.assign(view.Payload().begin(), view.Payload().end());
  } else {
    EXPECT_EQ(s.eth.ethertype, kEtherIpv6);
    wire::Ipv6Packet view(ip);
    EXPECT_EQ(wire::Ipv6Repr::Parse(view, s.ip6), wire::WireError::kOk);
    s.protocol = s.ip6.next_header;
    s.l4.assign(view.Payload().begin(), view.Payload().end());
  }
  return s;
}

UdpFixture::UdpFixture(uint64_t seed, UdpLayerOptions options) {
  link::LinkCapabilities caps;
  caps.mtu = 1500;
  caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
  link_ = std::make_unique<stack::FakeLink>(chunks_, caps);
  stack_ =
      std::make_unique<stack::Stack>(stack::StackOptions{}, chunks_, packets_);
  nic_ = *stack_->AddNic(link_.get(), "fake0");
  EXPECT_TRUE(
      stack_->AddAddress(nic_, *stack::ParseIpv4Cidr("10.9.0.2/24")).ok());
  EXPECT_TRUE(
      stack_->AddAddress(nic_, *stack::ParseIpv6Cidr("fd00:9::2/64")).ok());
  peer_.mac = *wire::MacAddress::Parse("02:00:00:00:00:01");
  peer_.ip4 = *wire::Ipv4Address::Parse("10.9.0.1");
  peer_.ip6 = *wire::Ipv6Address::Parse("fd00:9::1");
  our_mac_ = caps.mac;
  our_ip4_ = *wire::Ipv4Address::Parse("10.9.0.2");
  our_ip6_ = *wire::Ipv6Address::Parse("fd00:9::2");
  udp_ = std::make_unique<UdpLayer>(*stack_, chunks_, packets_, notifier_, seed,
                                    options);
}

UdpFixture::~UdpFixture() {
  const auto& c = stack_->counters();
  EXPECT_EQ(c.rx_frames, c.rx_consumed + c.rx_dropped_frames);
  EXPECT_EQ(c.RxDrops(), c.rx_dropped_frames);
  udp_.reset();
  stack_.reset();
  link_.reset();
  // Nothing leaked: every queued view and sent packet went back.
  EXPECT_EQ(packets_.stats().in_use, 0u);
  EXPECT_EQ(chunks_.stats().in_use, 0u);
}

void UdpFixture::RecreateLayer(uint64_t seed, UdpLayerOptions options) {
  udp_.reset();
  udp_ = std::make_unique<UdpLayer>(*stack_, chunks_, packets_, notifier_, seed,
                                    options);
}

void UdpFixture::LearnPeer() {
  link_->Inject(stack::testing::ArpRequest(peer_, our_ip4_), now_);
  link_->Inject(stack::testing::Icmpv6NeighborSolicitation(peer_, our_ip6_),
                now_);
  TakeSent();
}

void UdpFixture::InjectL4(const IpAddress& src, const IpAddress& dst,
                          const std::vector<uint8_t>& l4,
                          const wire::MacAddress* dst_mac, uint8_t protocol) {
  const wire::MacAddress mac = dst_mac != nullptr ? *dst_mac : our_mac_;
  std::vector<std::vector<uint8_t>> frames;
  const uint16_t ident = next_ident_++;
  if (src.is_v4()) {
    for (auto& p :
         stack::testing::Ipv4Packets(src.v4(), dst.v4(), protocol, ident, l4,
                                     1500)) {
      frames.push_back(
          stack::testing::WithEthernet(peer_.mac, mac, kEtherIpv4, p));
    }
  } else {
    for (auto& p : stack::testing::Ipv6Packets(src.v6(), dst.v6(), protocol,
                                               64, ident, l4, 1500)) {
      frames.push_back(
          stack::testing::WithEthernet(peer_.mac, mac, kEtherIpv6, p));
    }
  }
  link_->Inject(frames, now_);
}

void UdpFixture::InjectUdp(const SocketAddress& src, const SocketAddress& dst,
                           std::span<const uint8_t> payload,
                           const wire::MacAddress* dst_mac) {
  InjectL4(src.ip, dst.ip, UdpDatagram(src, dst, payload), dst_mac);
}

std::vector<std::vector<uint8_t>> UdpFixture::TakeSent() {
  stack_->Flush(now_);
  auto sent = std::move(link_->sent);
  link_->sent.clear();
  return sent;
}

}  // namespace netstack::udp::testing
