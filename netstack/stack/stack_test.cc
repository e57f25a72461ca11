#include "netstack/stack/stack.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/test_frames.h"
#include "netstack/wire/arp.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/icmpv4.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"

namespace netstack::stack {
namespace {

using testing::Peer;

constexpr uint16_t kIpv4 = 0x0800;
constexpr uint16_t kIpv6 = 0x86dd;

class StackTest : public ::testing::Test {
 protected:
  StackTest() {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
    link_ = std::make_unique<FakeLink>(chunks_, caps);
    stack_ = std::make_unique<Stack>(StackOptions{}, chunks_, packets_);
    nic_ = *stack_->AddNic(link_.get(), "fake0");
    EXPECT_TRUE(stack_->AddAddress(nic_, *ParseIpv4Cidr("10.9.0.2/24")).ok());
    EXPECT_TRUE(stack_->AddAddress(nic_, *ParseIpv6Cidr("fd00:9::2/64")).ok());
    peer_.mac = *wire::MacAddress::Parse("02:00:00:00:00:01");
    peer_.ip4 = *wire::Ipv4Address::Parse("10.9.0.1");
    peer_.ip6 = *wire::Ipv6Address::Parse("fd00:9::1");
    our_mac_ = caps.mac;
    our_ip4_ = *wire::Ipv4Address::Parse("10.9.0.2");
    our_ip6_ = *wire::Ipv6Address::Parse("fd00:9::2");
  }
  ~StackTest() override {
    const auto& c = stack_->counters();
    // Every frame is consumed or dropped under a reason.
    EXPECT_EQ(c.rx_frames, c.rx_consumed + c.rx_dropped_frames);
    // Exactly one receive-side reason per dropped frame.
    EXPECT_EQ(c.RxDrops(), c.rx_dropped_frames);
    stack_.reset();
    link_.reset();
    EXPECT_EQ(packets_.stats().in_use, 0u);
    EXPECT_EQ(chunks_.stats().in_use, 0u);
  }

  void InjectIpv4(const std::vector<uint8_t>& l4, uint8_t proto,
                  uint16_t ident = 1, size_t mtu = 1500) {
    std::vector<std::vector<uint8_t>> frames;
    for (auto& p : testing::Ipv4Packets(peer_.ip4, our_ip4_, proto, ident, l4,
                                        mtu)) {
      frames.push_back(testing::WithEthernet(peer_.mac, our_mac_, kIpv4, p));
    }
    link_->Inject(frames, now_);
  }
  void InjectIpv6(const std::vector<uint8_t>& l4, uint8_t nh,
                  uint32_t ident = 1, size_t mtu = 1500) {
    std::vector<std::vector<uint8_t>> frames;
    for (auto& p : testing::Ipv6Packets(peer_.ip6, our_ip6_, nh, 64, ident,
                                        l4, mtu)) {
      frames.push_back(testing::WithEthernet(peer_.mac, our_mac_, kIpv6, p));
    }
    link_->Inject(frames, now_);
  }
  std::vector<std::vector<uint8_t>> TakeSent() {
    auto s = std::move(link_->sent);
    link_->sent.clear();
    return s;
  }
  uint64_t Drops(DropReason r) const { return stack_->counters().drop(r); }

  // FakeLink puts each injected frame in a chunk of its own: size the pool
  // for the flood test's 800 frames.
  buffer::ChunkPool chunks_{1024};
  buffer::PacketPool packets_{1024};
  std::unique_ptr<FakeLink> link_;
  std::unique_ptr<Stack> stack_;
  NicId nic_ = 0;
  Peer peer_;
  wire::MacAddress our_mac_;
  wire::Ipv4Address our_ip4_;
  wire::Ipv6Address our_ip6_;
  Instant now_ = absl::UnixEpoch() + absl::Seconds(1000);
};

// Parses an Ethernet+IPv4 frame we sent.
struct SentIpv4 {
  wire::EthernetRepr eth;
  wire::Ipv4Repr ip;
  std::vector<uint8_t> payload;
  bool header_checksum_ok = false;
};
SentIpv4 ParseSentIpv4(const std::vector<uint8_t>& frame) {
  SentIpv4 s;
  EXPECT_EQ(wire::EthernetRepr::Parse(wire::EthernetFrame(frame), s.eth),
            wire::WireError::kOk);
  wire::Ipv4Packet ip(std::span<const uint8_t>(frame).subspan(14));
  EXPECT_EQ(wire::Ipv4Repr::Parse(ip, s.ip), wire::WireError::kOk);
  s.header_checksum_ok = ip.HeaderChecksumValid();
  s.payload.assign(ip.Payload().begin(), ip.Payload().end());
  return s;
}

TEST_F(StackTest, AnswersArpRequestForOurAddress) {
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  wire::EthernetRepr eth;
  ASSERT_EQ(wire::EthernetRepr::Parse(wire::EthernetFrame(sent[0]), eth),
            wire::WireError::kOk);
  EXPECT_EQ(eth.dst, peer_.mac);
  wire::ArpRepr arp;
  ASSERT_EQ(wire::ArpRepr::Parse(
                wire::ArpPacket(std::span<const uint8_t>(sent[0]).subspan(14)),
                arp),
            wire::WireError::kOk);
  EXPECT_EQ(arp.operation, wire::ArpOperation::kReply);
  EXPECT_EQ(arp.sender_mac, our_mac_);
  EXPECT_EQ(arp.sender_ip, our_ip4_);
  EXPECT_EQ(arp.target_ip, peer_.ip4);
  // Not for us: ignored, counted.
  link_->Inject(testing::ArpRequest(peer_, *wire::Ipv4Address::Parse("10.9.0.77")), now_);
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(Drops(DropReason::kArpNotForUs), 1u);
}

TEST_F(StackTest, EchoReplySharesDataAndHasValidChecksums) {
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  TakeSent();
  const auto echo = testing::Icmpv4Echo(0x1234, 7, 56);
  InjectIpv4(echo, 1);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  SentIpv4 s = ParseSentIpv4(sent[0]);
  EXPECT_EQ(s.eth.dst, peer_.mac);
  EXPECT_EQ(s.ip.src, our_ip4_);
  EXPECT_EQ(s.ip.dst, peer_.ip4);
  EXPECT_TRUE(s.header_checksum_ok);
  ASSERT_EQ(s.payload.size(), echo.size());
  EXPECT_EQ(s.payload[0], 0);  // echo reply
  EXPECT_EQ(wire::InternetChecksum(s.payload), 0);
  EXPECT_TRUE(std::equal(echo.begin() + 4, echo.end(), s.payload.begin() + 4));
  EXPECT_EQ(stack_->counters().icmpv4_echo_replies_sent, 1u);
}

TEST_F(StackTest, UnresolvedReplyWaitsForArpThenGoesOut) {
  InjectIpv4(testing::Icmpv4Echo(1, 1, 8), 1);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);  // our ARP request, reply parked
  wire::EthernetRepr eth;
  ASSERT_EQ(wire::EthernetRepr::Parse(wire::EthernetFrame(sent[0]), eth),
            wire::WireError::kOk);
  EXPECT_TRUE(eth.dst.IsBroadcast());
  EXPECT_EQ(eth.ethertype, 0x0806);
  link_->Inject(testing::ArpReply(peer_, our_mac_, our_ip4_), now_);
  sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(ParseSentIpv4(sent[0]).payload[0], 0);
}

TEST_F(StackTest, ArpRetriesThenGivesUpOnTheFakeClock) {
  InjectIpv4(testing::Icmpv4Echo(1, 1, 8), 1);
  ASSERT_EQ(TakeSent().size(), 1u);
  EXPECT_EQ(stack_->NextDeadline(), now_ + absl::Seconds(1));
  stack_->Poll(now_ + absl::Milliseconds(999));
  EXPECT_TRUE(TakeSent().empty());
  stack_->Poll(now_ + absl::Seconds(1));
  EXPECT_EQ(TakeSent().size(), 1u);  // second probe
  stack_->Poll(now_ + absl::Seconds(2));
  EXPECT_EQ(TakeSent().size(), 1u);  // third probe
  EXPECT_EQ(Drops(DropReason::kNeighborUnreachable), 0u);
  stack_->Poll(now_ + absl::Seconds(3));
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(Drops(DropReason::kNeighborUnreachable), 1u);
  EXPECT_EQ(stack_->NextDeadline(), kNever);
}

// ping -s 8000 at MTU 1500: six fragments in, six fragments out.
TEST_F(StackTest, LargeEchoIsReassembledAndReplyFragmented) {
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  TakeSent();
  const auto echo = testing::Icmpv4Echo(9, 1, 8000);
  InjectIpv4(echo, 1, /*ident=*/77);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 6u);
  EXPECT_EQ(stack_->counters().ipv4_reassembled, 1u);
  std::vector<uint8_t> whole(echo.size());
  size_t bytes = 0;
  for (const auto& f : sent) {
    SentIpv4 s = ParseSentIpv4(f);
    EXPECT_TRUE(s.header_checksum_ok);
    EXPECT_LE(f.size(), 1514u);
    ASSERT_LE(s.ip.fragment_offset + s.payload.size(), whole.size());
    std::copy(s.payload.begin(), s.payload.end(),
              whole.begin() + s.ip.fragment_offset);
    bytes += s.payload.size();
  }
  EXPECT_EQ(bytes, echo.size());
  EXPECT_EQ(whole[0], 0);
  EXPECT_EQ(wire::InternetChecksum(whole), 0);
  EXPECT_TRUE(std::equal(echo.begin() + 8, echo.end(), whole.begin() + 8));
}

// RFC 792: a datagram whose first fragment arrived but that never
// completed gets Time Exceeded (code 1) when reassembly times out; a late
// fragment does not revive it.
TEST_F(StackTest, ReassemblyTimeoutSendsTimeExceeded) {
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  TakeSent();
  auto frames = testing::Ipv4Packets(peer_.ip4, our_ip4_, 1, 99,
                                     testing::Icmpv4Echo(9, 1, 3000), 1500);
  ASSERT_EQ(frames.size(), 3u);
  link_->Inject(testing::WithEthernet(peer_.mac, our_mac_, kIpv4, frames[0]),
                now_);
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(stack_->NextDeadline(), now_ + absl::Seconds(30));
  // The rest arrives too late: the datagram expires first.
  now_ += absl::Seconds(31);
  link_->Inject(testing::WithEthernet(peer_.mac, our_mac_, kIpv4, frames[1]),
                now_);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  SentIpv4 s = ParseSentIpv4(sent[0]);
  EXPECT_EQ(s.payload[0], 11);  // time exceeded
  EXPECT_EQ(s.payload[1], 1);   // fragment reassembly time exceeded
  EXPECT_EQ(wire::InternetChecksum(s.payload), 0);
  link_->Inject(testing::WithEthernet(peer_.mac, our_mac_, kIpv4, frames[2]),
                now_);
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(stack_->counters().ipv4_reassembled, 0u);
}

TEST_F(StackTest, MalformedFramesAreDroppedWithReasons) {
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  TakeSent();
  auto frames = testing::Ipv4Packets(peer_.ip4, our_ip4_, 1, 1,
                                     testing::Icmpv4Echo(1, 1, 8), 1500);
  auto bad_csum = frames[0];
  bad_csum[10] ^= 0xff;
  link_->Inject(testing::WithEthernet(peer_.mac, our_mac_, kIpv4, bad_csum), now_);
  EXPECT_EQ(Drops(DropReason::kIpv4BadChecksum), 1u);
  auto bad_ihl = frames[0];
  bad_ihl[0] = 0x44;
  link_->Inject(testing::WithEthernet(peer_.mac, our_mac_, kIpv4, bad_ihl), now_);
  EXPECT_EQ(Drops(DropReason::kIpv4Malformed), 1u);
  link_->Inject(testing::WithEthernet(
                    peer_.mac, *wire::MacAddress::Parse("02:00:00:00:00:99"),
                    kIpv4, frames[0]),
                now_);
  EXPECT_EQ(Drops(DropReason::kNotOurMac), 1u);
  link_->Inject(std::vector<uint8_t>(10, 0), now_);
  EXPECT_EQ(Drops(DropReason::kEthernetMalformed), 1u);
  auto bad_icmp = testing::Icmpv4Echo(1, 1, 8);
  bad_icmp[9] ^= 1;
  InjectIpv4(bad_icmp, 1);
  EXPECT_EQ(Drops(DropReason::kIcmpv4BadChecksum), 1u);
  EXPECT_TRUE(TakeSent().empty());
  // And the stack still answers a good ping.
  InjectIpv4(testing::Icmpv4Echo(1, 2, 8), 1);
  EXPECT_EQ(TakeSent().size(), 1u);
}

TEST_F(StackTest, UdpToClosedPortGetsPortUnreachable) {
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  TakeSent();
  std::vector<uint8_t> udp = {0x30, 0x39, 0x00, 0x35, 0x00, 0x0c,
                              0x00, 0x00, 'a',  'b',  'c',  'd'};
  InjectIpv4(udp, 17);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  SentIpv4 s = ParseSentIpv4(sent[0]);
  ASSERT_GE(s.payload.size(), 8u + 20u + 8u);
  EXPECT_EQ(s.payload[0], 3);
  EXPECT_EQ(s.payload[1], 3);
  EXPECT_EQ(wire::InternetChecksum(s.payload), 0);
  EXPECT_EQ(Drops(DropReason::kUdpNoListener), 1u);
}

// RFC 1122 3.3.6: a unicast datagram in a link-layer broadcast is dropped,
// and never answered (no smurf-style amplification).
TEST_F(StackTest, UnicastIpInLinkBroadcastIsDroppedSilently) {
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  TakeSent();
  auto pkt = testing::Ipv4Packets(peer_.ip4, our_ip4_, 1, 1,
                                  testing::Icmpv4Echo(1, 1, 8), 1500)[0];
  link_->Inject(testing::WithEthernet(peer_.mac, wire::MacAddress::Broadcast(),
                                      kIpv4, pkt),
                now_);
  std::vector<uint8_t> udp = {0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0, 0};
  auto upkt = testing::Ipv4Packets(peer_.ip4, our_ip4_, 17, 2, udp, 1500)[0];
  link_->Inject(testing::WithEthernet(peer_.mac, wire::MacAddress::Broadcast(),
                                      kIpv4, upkt),
                now_);
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(Drops(DropReason::kIpv4LinkBroadcast), 2u);
}

TEST_F(StackTest, MartianSourcesAreDropped) {
  for (const char* src : {"0.0.0.0", "127.0.0.1", "10.9.0.2", "240.0.0.1",
                          "10.9.0.255"}) {
    auto pkt = testing::Ipv4Packets(*wire::Ipv4Address::Parse(src), our_ip4_,
                                    1, 1, testing::Icmpv4Echo(1, 1, 8),
                                    1500)[0];
    link_->Inject(testing::WithEthernet(peer_.mac, our_mac_, kIpv4, pkt), now_);
  }
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(Drops(DropReason::kIpv4BadSource), 5u);
}

TEST_F(StackTest, ArpClaimingOurAddressIsAConflict) {
  Peer liar = peer_;
  liar.ip4 = our_ip4_;
  link_->Inject(testing::ArpRequest(liar, peer_.ip4), now_);
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(Drops(DropReason::kArpAddressConflict), 1u);
}

// RFC 1812 4.3.2.8 / RFC 4443 2.4(f): errors are rate limited (burst 50,
// then 1000 per second).
TEST_F(StackTest, IcmpErrorsAreRateLimited) {
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  TakeSent();
  std::vector<uint8_t> udp = {0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0, 0};
  for (int i = 0; i < 200; ++i) InjectIpv4(udp, 17, static_cast<uint16_t>(i));
  EXPECT_EQ(TakeSent().size(), 50u);
  EXPECT_EQ(Drops(DropReason::kIcmpRateLimited), 150u);
  EXPECT_EQ(Drops(DropReason::kUdpNoListener), 200u);
  now_ += absl::Milliseconds(10);  // 10 more tokens
  for (int i = 0; i < 20; ++i) InjectIpv4(udp, 17, static_cast<uint16_t>(i));
  EXPECT_EQ(TakeSent().size(), 10u);
}

// Pings from many spoofed on-link sources cannot pin the pools: the
// packets waiting for resolution are bounded, and a real peer still gets
// its answers.
TEST_F(StackTest, NeighborFloodIsBounded) {
  for (int i = 0; i < 200; ++i) {
    auto src = wire::Ipv4Address::FromU32(0x0a090000 + 10 + i);
    for (int j = 0; j < 4; ++j) {
      auto pkt = testing::Ipv4Packets(src, our_ip4_, 1, 1,
                                      testing::Icmpv4Echo(1, j, 8), 1500)[0];
      link_->Inject(testing::WithEthernet(peer_.mac, our_mac_, kIpv4, pkt),
                    now_);
    }
  }
  EXPECT_EQ(stack_->counters().rx_frames, 800u);
  // At most max_incomplete (64) neighbours x queue_limit, and at most
  // max_pending_total (256) packets in all, wait; the rest are dropped.
  EXPECT_LE(packets_.stats().in_use, 256u);
  EXPECT_GT(Drops(DropReason::kNeighborQueueFull), 0u)
      << stack_->FormatCounters();
  TakeSent();
  link_->Inject(testing::ArpRequest(peer_, our_ip4_), now_);
  TakeSent();
  InjectIpv4(testing::Icmpv4Echo(1, 99, 8), 1);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(ParseSentIpv4(sent[0]).payload[0], 0);
}

TEST_F(StackTest, NeighborSolicitationGetsAdvertisement) {
  link_->Inject(testing::Icmpv6NeighborSolicitation(peer_, our_ip6_), now_);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  wire::Ipv6Packet ip(std::span<const uint8_t>(sent[0]).subspan(14));
  wire::Ipv6Repr repr;
  ASSERT_EQ(wire::Ipv6Repr::Parse(ip, repr), wire::WireError::kOk);
  EXPECT_EQ(repr.dst, peer_.ip6);
  EXPECT_EQ(repr.hop_limit, 255);
  wire::Icmpv6Packet icmp(ip.Payload());
  EXPECT_TRUE(icmp.ChecksumValid(repr.src, repr.dst));
  wire::Icmpv6Repr na;
  ASSERT_EQ(wire::Icmpv6Repr::Parse(icmp, na), wire::WireError::kOk);
  const auto* adv = std::get_if<wire::NdpNeighborAdvertisement>(&na.message);
  ASSERT_NE(adv, nullptr);
  EXPECT_TRUE(adv->solicited);
  EXPECT_EQ(adv->target, our_ip6_);
  EXPECT_EQ(adv->options.target_link_layer, our_mac_);
}

TEST_F(StackTest, WithIpv6OffEveryIpv6FrameIsDroppedUnanswered) {
  // slirp4netns without --enable-ipv6: no neighbor advertisement, no
  // echo reply, each frame counted.
  StackOptions o;
  o.ipv6 = false;
  stack_ = std::make_unique<Stack>(o, chunks_, packets_);
  nic_ = *stack_->AddNic(link_.get(), "fake0");
  ASSERT_TRUE(stack_->AddAddress(nic_, *ParseIpv6Cidr("fd00:9::2/64")).ok());
  link_->Inject(testing::Icmpv6NeighborSolicitation(peer_, our_ip6_), now_);
  InjectIpv6(testing::Icmpv6Echo(peer_.ip6, our_ip6_, 5, 1, 56), 58, 1);
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(stack_->counters().drop(DropReason::kIpv6Disabled), 2u);
  EXPECT_EQ(stack_->counters().icmpv6_echo_replies_sent, 0u);
}

TEST_F(StackTest, Ipv6EchoSmallAndFragmented) {
  link_->Inject(testing::Icmpv6NeighborSolicitation(peer_, our_ip6_), now_);
  TakeSent();
  for (size_t size : {56u, 8000u}) {
    const auto echo = testing::Icmpv6Echo(peer_.ip6, our_ip6_, 5, 1, size);
    InjectIpv6(echo, 58, /*ident=*/static_cast<uint32_t>(size));
    auto sent = TakeSent();
    ASSERT_EQ(sent.size(), size > 1400 ? 6u : 1u) << size;
    std::vector<uint8_t> whole(echo.size());
    size_t bytes = 0;
    for (const auto& f : sent) {
      wire::Ipv6Packet ip(std::span<const uint8_t>(f).subspan(14));
      wire::Ipv6Repr repr;
      ASSERT_EQ(wire::Ipv6Repr::Parse(ip, repr), wire::WireError::kOk);
      EXPECT_EQ(repr.dst, peer_.ip6);
      wire::Ipv6ExtensionInfo ext;
      ASSERT_EQ(wire::WalkIpv6ExtensionHeaders(ip.Payload(), repr.next_header,
                                               ext),
                wire::WireError::kOk);
      const size_t off = ext.fragment ? ext.fragment->header.offset : 0;
      auto data = ip.Payload().subspan(ext.upper_offset);
      ASSERT_LE(off + data.size(), whole.size());
      std::copy(data.begin(), data.end(), whole.begin() + off);
      bytes += data.size();
    }
    ASSERT_EQ(bytes, echo.size());
    EXPECT_EQ(whole[0], 129);
    wire::Icmpv6Packet reply(whole);
    EXPECT_TRUE(reply.ChecksumValid(our_ip6_, peer_.ip6));
    EXPECT_TRUE(std::equal(echo.begin() + 8, echo.end(), whole.begin() + 8));
  }
  EXPECT_EQ(stack_->counters().icmpv6_echo_replies_sent, 2u);
  EXPECT_EQ(stack_->counters().ipv6_reassembled, 1u);
}

// RFC 4861 7.2.3: an NS for someone else's target teaches nothing (it
// would let anyone redirect our traffic); a multicast SLLAO is invalid.
TEST_F(StackTest, NdpPoisoningIsRefused) {
  Peer attacker = peer_;
  attacker.mac = *wire::MacAddress::Parse("02:00:00:00:00:66");
  link_->Inject(testing::Icmpv6NeighborSolicitation(
                    attacker, *wire::Ipv6Address::Parse("fd00:9::99"),
                    &our_ip6_, &our_mac_),
                now_);
  EXPECT_EQ(Drops(DropReason::kNdpNotForUs), 1u);
  EXPECT_TRUE(TakeSent().empty());
  Peer bcast = peer_;
  bcast.mac = wire::MacAddress::Broadcast();
  // (A multicast Ethernet source is refused even before NDP.)
  link_->Inject(testing::Icmpv6NeighborSolicitation(bcast, our_ip6_), now_);
  EXPECT_EQ(Drops(DropReason::kEthernetBadSource), 1u);
  // The echo reply to peer_.ip6 must still need a resolution of its own.
  InjectIpv6(testing::Icmpv6Echo(peer_.ip6, our_ip6_, 5, 1, 16), 58);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0][0], 0x33);  // a solicitation, not a reply to the attacker
}

// RFC 8200 4.2: an unrecognized option's two high bits say what to do.
// 01: discard silently; 10: discard and send Parameter Problem code 2
// pointing at the option type, whatever the destination; 11: the same,
// but only when the destination is not multicast (RFC 4443 2.4(e.3) lets
// code 2 go to a multicast packet's source only for 10).
TEST_F(StackTest, Ipv6UnknownOptionActionBits) {
  link_->Inject(testing::Icmpv6NeighborSolicitation(peer_, our_ip6_), now_);
  TakeSent();
  const wire::Ipv6Address all_nodes = *wire::Ipv6Address::Parse("ff02::1");
  const wire::MacAddress all_nodes_mac =
      *wire::MacAddress::Parse("33:33:00:00:00:01");
  struct Case {
    uint8_t type;
    bool multicast;
    bool answered;
  };
  const Case cases[] = {
      {0x5e, false, false}, {0x5e, true, false}, {0x9e, false, true},
      {0x9e, true, true},   {0xde, false, true}, {0xde, true, false},
  };
  uint64_t drops = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "option type 0x" << std::hex
                                    << int{c.type} << (c.multicast
                                                           ? " to ff02::1"
                                                           : " to unicast"));
    // Destination Options (8 bytes: UDP next, one 4-byte option), then a
    // UDP header and data the stack never gets to.
    std::vector<uint8_t> body = {17, 0, c.type, 4, 0, 0, 0, 0};
    body.resize(body.size() + 12, 0x55);
    const wire::Ipv6Address& dst = c.multicast ? all_nodes : our_ip6_;
    for (auto& p : testing::Ipv6Packets(peer_.ip6, dst, /*dstopts*/ 60, 64, 1,
                                        body, 1500)) {
      link_->Inject({testing::WithEthernet(
                        peer_.mac, c.multicast ? all_nodes_mac : our_mac_,
                        kIpv6, p)},
                    now_);
    }
    EXPECT_EQ(Drops(DropReason::kIpv6UnrecognizedOption), ++drops);
    auto sent = TakeSent();
    if (!c.answered) {
      EXPECT_TRUE(sent.empty());
    } else {
      ASSERT_EQ(sent.size(), 1u);
      wire::Ipv6Packet ip(std::span<const uint8_t>(sent[0]).subspan(14));
      wire::Ipv6Repr repr;
      ASSERT_EQ(wire::Ipv6Repr::Parse(ip, repr), wire::WireError::kOk);
      EXPECT_EQ(repr.dst, peer_.ip6);
      EXPECT_EQ(repr.src, our_ip6_);
      wire::Icmpv6Packet icmp(ip.Payload());
      EXPECT_TRUE(icmp.ChecksumValid(repr.src, repr.dst));
      wire::Icmpv6Repr msg;
      ASSERT_EQ(wire::Icmpv6Repr::Parse(icmp, msg), wire::WireError::kOk);
      const auto* pp = std::get_if<wire::Icmpv6ParameterProblem>(&msg.message);
      ASSERT_NE(pp, nullptr);
      EXPECT_EQ(pp->code, 2);  // unrecognized IPv6 option
      EXPECT_EQ(pp->pointer, 42u);  // 40-byte header + 2: the option type
    }
    now_ += absl::Seconds(1);  // past the ICMP error rate limit
  }
}

TEST_F(StackTest, Ipv6ReplyToUnknownNeighborSolicitsFirst) {
  InjectIpv6(testing::Icmpv6Echo(peer_.ip6, our_ip6_, 5, 1, 16), 58);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0][0], 0x33);  // to the solicited-node multicast MAC
  EXPECT_EQ(stack_->counters().ndp_ns_sent, 1u);
}

}  // namespace
}  // namespace netstack::stack
