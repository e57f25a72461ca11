// ICMP errors about datagrams we sent (RFC 1122 4.1.3.3): a connected
// socket gets port unreachable as ECONNREFUSED from its next call, once,
// and is woken with kError; an unconnected socket, a soft error and an
// error about nobody's datagram are counted and ignored.
#include <cerrno>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/udp/udp_test_fixture.h"
#include "netstack/wire/checksum.h"

namespace netstack::udp {
namespace {

using testing::Bytes;
using transport::ErrnoOf;
using transport::Family;

class UdpIcmpErrorTest : public testing::UdpFixture {
 protected:
  // The ICMP error the peer's host would send about `sent` (one of our
  // frames): type/code, then the invoking datagram (IP header + 8 bytes).
  std::vector<uint8_t> Icmp4Error(const std::vector<uint8_t>& sent,
                                  uint8_t type, uint8_t code) {
    std::vector<uint8_t> m = {type, code, 0, 0, 0, 0, 0, 0};
    const size_t ip = 14;  // Ethernet header
    m.insert(m.end(), sent.begin() + ip, sent.begin() + ip + 20 + 8);
    const uint16_t sum = wire::InternetChecksum(m);
    m[2] = static_cast<uint8_t>(sum >> 8);
    m[3] = static_cast<uint8_t>(sum);
    return m;
  }
  std::vector<uint8_t> Icmp6Error(const std::vector<uint8_t>& sent,
                                  uint8_t type, uint8_t code) {
    std::vector<uint8_t> m = {type, code, 0, 0, 0, 0, 0, 0};
    const size_t ip = 14;
    m.insert(m.end(), sent.begin() + ip, sent.begin() + ip + 40 + 8);
    wire::ChecksumAccumulator acc;
    acc.AddFolded(wire::Ipv6PseudoHeaderSum(peer_.ip6, our_ip6_, 58,
                                            static_cast<uint32_t>(m.size())));
    acc.Add(m);
    const uint16_t sum = acc.Checksum();
    m[2] = static_cast<uint8_t>(sum >> 8);
    m[3] = static_cast<uint8_t>(sum);
    return m;
  }
};

TEST_F(UdpIcmpErrorTest, PortUnreachableRefusesAConnectedSocketOnce) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Connect(Peer4(7000)).ok());
  uint32_t events = 0;
  s->set_callback([&](uint32_t ev) { events |= ev; });
  ASSERT_TRUE(s->Send(Bytes("hello"), now_).ok());
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  InjectL4(peer_.ip4, our_ip4_, Icmp4Error(sent[0], 3, 3), nullptr, 1);
  notifier_.Dispatch();
  EXPECT_NE(events & transport::event::kError, 0u);
  std::vector<uint8_t> buf(100);
  EXPECT_EQ(ErrnoOf(s->RecvFrom(buf).status()), ECONNREFUSED);
  // Reported once, as SO_ERROR: then the socket works again.
  EXPECT_EQ(ErrnoOf(s->RecvFrom(buf).status()), EAGAIN);
  EXPECT_TRUE(s->Send(Bytes("again"), now_).ok());
  EXPECT_EQ(udp_->counters().icmp_errors_reported, 1u);
  EXPECT_EQ(stack_->counters().icmp_errors_to_transport, 1u);
  EXPECT_EQ(StackDrops(stack::DropReason::kIcmpv4ErrorReceived), 0u);
}

TEST_F(UdpIcmpErrorTest, Ipv6PortUnreachableRefusesAConnectedSocket) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv6);
  ASSERT_TRUE(s->Connect(Peer6(7000)).ok());
  ASSERT_TRUE(s->Send(Bytes("hello"), now_).ok());
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  InjectL4(peer_.ip6, our_ip6_, Icmp6Error(sent[0], 1, 4), nullptr, 58);
  EXPECT_EQ(ErrnoOf(s->Send(Bytes("x"), now_)), ECONNREFUSED);
  EXPECT_EQ(udp_->counters().icmp_errors_reported, 1u);
}

TEST_F(UdpIcmpErrorTest, UnconnectedSocketsAndSoftErrorsAreIgnored) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Our4(6000)).ok());
  ASSERT_TRUE(s->SendTo(Bytes("hello"), Peer4(7000), now_).ok());
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  // Port unreachable to an unconnected socket, then host unreachable (a
  // soft error): neither becomes an error of the socket.
  InjectL4(peer_.ip4, our_ip4_, Icmp4Error(sent[0], 3, 3), nullptr, 1);
  InjectL4(peer_.ip4, our_ip4_, Icmp4Error(sent[0], 3, 1), nullptr, 1);
  std::vector<uint8_t> buf(100);
  EXPECT_EQ(ErrnoOf(s->RecvFrom(buf).status()), EAGAIN);
  EXPECT_EQ(udp_->counters().icmp_errors_ignored, 2u);
}

TEST_F(UdpIcmpErrorTest, AnErrorAboutSomeoneElsesDatagramIsDropped) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Connect(Peer4(7000)).ok());
  ASSERT_TRUE(s->Send(Bytes("hello"), now_).ok());
  auto sent = TakeSent();
  std::vector<uint8_t> forged = sent[0];
  // The quoted source is not ours (bytes 26..29 of the frame).
  forged[26 + 3] ^= 0x55;
  InjectL4(peer_.ip4, our_ip4_, Icmp4Error(forged, 3, 3), nullptr, 1);
  EXPECT_TRUE(s->Send(Bytes("x"), now_).ok());
  EXPECT_EQ(StackDrops(stack::DropReason::kIcmpv4ErrorReceived), 1u);
}

}  // namespace
}  // namespace netstack::udp
