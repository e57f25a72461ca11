// The guest configuration services driven through a real Stack on a fake
// link with crafted frames: what a polite client gets, and what a hostile
// one does not.
#include <cstdint>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/backend/dhcp4_message.h"
#include "netstack/backend/guest_config_services.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/udp.h"

namespace netstack::backend {
namespace {

using stack::testing::Ipv4Packets;
using stack::testing::Ipv6Packets;
using stack::testing::WithEthernet;
using T = Dhcp4MessageType;

wire::Ipv4Address A4(uint32_t v) { return wire::Ipv4Address::FromU32(v); }
wire::Ipv6Address A6(const char* s) { return *wire::Ipv6Address::Parse(s); }
wire::MacAddress Mac(uint8_t last) {
  wire::MacAddress m;
  m.bytes = {0x02, 0xaa, 0, 0, 0, last};
  return m;
}

const wire::Ipv4Address kGateway = A4(0x0a000202);
const wire::Ipv4Address kGuest = A4(0x0a000264);
const wire::Ipv4Address kBroadcast = A4(0xffffffff);
const wire::MacAddress kOurMac = [] {
  wire::MacAddress m;
  m.bytes = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
  return m;
}();

std::vector<uint8_t> Udp4(const wire::Ipv4Address& src,
                          const wire::Ipv4Address& dst, uint16_t sport,
                          uint16_t dport, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> d(8 + body.size());
  wire::UdpRepr u{sport, dport, static_cast<uint16_t>(body.size())};
  u.Emit(wire::MutableUdpHeader(std::span(d)));
  std::copy(body.begin(), body.end(), d.begin() + 8);
  wire::MutableUdpHeader(std::span(d)).FillChecksum(
      wire::Ipv4PseudoHeaderSum(src, dst, 17, static_cast<uint32_t>(d.size())));
  return d;
}

std::vector<uint8_t> Udp6(const wire::Ipv6Address& src,
                          const wire::Ipv6Address& dst, uint16_t sport,
                          uint16_t dport, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> d(8 + body.size());
  wire::UdpRepr u{sport, dport, static_cast<uint16_t>(body.size())};
  u.Emit(wire::MutableUdpHeader(std::span(d)));
  std::copy(body.begin(), body.end(), d.begin() + 8);
  wire::MutableUdpHeader(std::span(d)).FillChecksum(
      wire::Ipv6PseudoHeaderSum(src, dst, 17, static_cast<uint32_t>(d.size())));
  return d;
}

Dhcp4Message Client(T type, const wire::MacAddress& mac, uint32_t xid = 1) {
  Dhcp4Message m;
  m.op = 1;
  m.xid = xid;
  m.chaddr = mac;
  m.type = type;
  return m;
}

std::vector<uint8_t> Encode(const Dhcp4Message& m) {
  std::vector<uint8_t> b(m.BufferLen());
  m.Emit(b);
  return b;
}

// What we sent, parsed.
struct Sent4 {
  wire::EthernetRepr eth;
  wire::Ipv4Repr ip;
  uint16_t sport = 0, dport = 0;
  bool udp_checksum_ok = false;
  Dhcp4Message dhcp;
  Dhcp4ParseError parsed = Dhcp4ParseError::kTruncated;
};

class GuestConfigTest : public ::testing::Test {
 protected:
  GuestConfigTest()
      : chunks_(256),
        packets_(256),
        link_(chunks_, link::LinkCapabilities{.mtu = 1500, .mac = kOurMac}),
        stack_(stack::StackOptions{}, chunks_, packets_) {
    nic_ = *stack_.AddNic(&link_, "tap0");
    EXPECT_TRUE(stack_.AddAddress(nic_, stack::Ipv4Cidr{kGateway, 24}).ok());
    EXPECT_TRUE(
        stack_.AddAddress(nic_, stack::Ipv6Cidr{A6("fd00::2"), 64}).ok());
    plan_.mtu = 9000;
  }

  void Start() {
    services_.emplace(stack_, chunks_, packets_, nic_, plan_);
    ASSERT_TRUE(services_->Start(now_, nullptr).ok());
    // Discard the first unsolicited RA.
    services_->Poll(now_);
    Take();
  }

  std::vector<std::vector<uint8_t>> Take() {
    stack_.Flush(now_);
    auto out = std::move(link_.sent);
    link_.sent.clear();
    return out;
  }

  void InjectDhcp4(const Dhcp4Message& m, wire::Ipv4Address src = {},
                   wire::Ipv4Address dst = A4(0xffffffff),
                   wire::MacAddress dst_mac = wire::MacAddress::Broadcast()) {
    InjectRaw4(Encode(m), m.chaddr, src, dst, dst_mac);
  }
  void InjectRaw4(const std::vector<uint8_t>& body,
                  const wire::MacAddress& from, wire::Ipv4Address src = {},
                  wire::Ipv4Address dst = A4(0xffffffff),
                  wire::MacAddress dst_mac = wire::MacAddress::Broadcast(),
                  uint16_t dport = 67) {
    auto l4 = Udp4(src, dst, 68, dport, body);
    for (auto& ip : Ipv4Packets(src, dst, 17, 1, l4, 1500)) {
      link_.Inject(WithEthernet(from, dst_mac, 0x0800, ip), now_);
    }
  }

  static Sent4 Parse4(const std::vector<uint8_t>& f) {
    Sent4 s;
    const wire::EthernetFrame eth(f);
    EXPECT_EQ(wire::EthernetRepr::Parse(eth, s.eth), wire::WireError::kOk);
    std::span<const uint8_t> ipb = std::span(f).subspan(14);
    const wire::Ipv4Packet ip(ipb);
    EXPECT_EQ(wire::Ipv4Repr::Parse(ip, s.ip), wire::WireError::kOk);
    EXPECT_TRUE(ip.HeaderChecksumValid());
    auto l4 = ipb.subspan(ip.HeaderLen(), s.ip.payload_len);
    const wire::UdpHeader udp(l4);
    s.sport = udp.SrcPort();
    s.dport = udp.DstPort();
    s.udp_checksum_ok = udp.ChecksumValid(
        wire::Ipv4PseudoHeaderSum(s.ip.src, s.ip.dst, 17, udp.Length()),
        wire::UdpZeroChecksum::kReject);
    s.parsed = Dhcp4Message::Parse(udp.Payload(), s.dhcp);
    return s;
  }

  // The one DHCP reply we sent since the last Take.
  Sent4 OneReply() {
    auto sent = Take();
    EXPECT_EQ(sent.size(), 1u);
    if (sent.size() != 1) return Sent4{};
    Sent4 s = Parse4(sent[0]);
    EXPECT_EQ(s.parsed, Dhcp4ParseError::kOk);
    EXPECT_TRUE(s.udp_checksum_ok);
    EXPECT_EQ(s.sport, 67);
    EXPECT_EQ(s.dport, 68);
    EXPECT_EQ(s.ip.src, kGateway);
    EXPECT_EQ(s.eth.src, kOurMac);
    EXPECT_EQ(s.dhcp.op, 2);
    return s;
  }

  const Dhcp4Counters& c4() const { return services_->dhcp4().counters(); }

  Instant now_ = absl::FromUnixSeconds(1000);
  buffer::ChunkPool chunks_;
  buffer::PacketPool packets_;
  stack::FakeLink link_;
  stack::Stack stack_;
  stack::NicId nic_ = 0;
  GuestConfigPlan plan_;
  std::optional<GuestConfigServices> services_;
};

TEST_F(GuestConfigTest, WithoutServicesTheUnspecifiedSourceStaysMartian) {
  // The stack change is opt-in: a plain host still drops 0.0.0.0.
  InjectDhcp4(Client(T::kDiscover, Mac(1)));
  EXPECT_EQ(stack_.counters().drop(stack::DropReason::kIpv4BadSource), 1u);
  EXPECT_TRUE(Take().empty());
}

TEST_F(GuestConfigTest, DiscoverGetsOfferUnicastToChaddr) {
  Start();
  InjectDhcp4(Client(T::kDiscover, Mac(1), 0x1234));
  Sent4 s = OneReply();
  EXPECT_EQ(s.dhcp.type, T::kOffer);
  EXPECT_EQ(s.dhcp.xid, 0x1234u);
  EXPECT_EQ(s.dhcp.yiaddr, kGuest);
  EXPECT_EQ(s.dhcp.chaddr, Mac(1));
  // No broadcast bit: to yiaddr at chaddr, without ARP (RFC 2131 4.1).
  EXPECT_EQ(s.ip.dst, kGuest);
  EXPECT_EQ(s.eth.dst, Mac(1));
  EXPECT_EQ(s.dhcp.server_id, kGateway);
  EXPECT_EQ(s.dhcp.router, kGateway);
  EXPECT_EQ(s.dhcp.dns, A4(0x0a000203));
  EXPECT_EQ(s.dhcp.subnet_mask, A4(0xffffff00));
  EXPECT_EQ(s.dhcp.mtu, 9000);
  EXPECT_EQ(s.dhcp.lease_time, 86400u);
  EXPECT_EQ(s.dhcp.renewal_time, 43200u);
  EXPECT_EQ(s.dhcp.rebinding_time, 75600u);
  EXPECT_EQ(c4().received[1], 1u);
  EXPECT_EQ(c4().sent[2], 1u);
  EXPECT_FALSE(services_->dhcp4().LeaseHolder(now_));  // an offer binds nothing
}

TEST_F(GuestConfigTest, WithDhcp4OffADiscoverIsDroppedUnanswered) {
  // libslirp's disable_dhcp (a guest configured by hand, or by another
  // DHCP server on its link): RAs and DHCPv6 stay, DHCPv4 says nothing.
  plan_.dhcp4 = false;
  Start();
  InjectDhcp4(Client(T::kDiscover, Mac(1), 0x1234));
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(c4().received[1], 0u);
  EXPECT_EQ(stack_.counters().drop(stack::DropReason::kIpv4BadSource), 1u);
}

TEST_F(GuestConfigTest, BroadcastFlagGetsBroadcastReply) {
  Start();
  Dhcp4Message m = Client(T::kDiscover, Mac(1));
  m.flags = Dhcp4Message::kBroadcastFlag;
  InjectDhcp4(m);
  Sent4 s = OneReply();
  EXPECT_EQ(s.ip.dst, kBroadcast);
  EXPECT_TRUE(s.eth.dst.IsBroadcast());
}

TEST_F(GuestConfigTest, MtuAbove16BitsIsClampedAndTinyMtuLeftOut) {
  plan_.mtu = 70000;
  Start();
  InjectDhcp4(Client(T::kDiscover, Mac(1)));
  EXPECT_EQ(OneReply().dhcp.mtu, 65535);
  services_.reset();
  plan_.mtu = 500;
  Start();
  InjectDhcp4(Client(T::kDiscover, Mac(1)));
  EXPECT_FALSE(OneReply().dhcp.mtu);
}

TEST_F(GuestConfigTest, RequestSelectingGetsAckAndBindsLease) {
  Start();
  Dhcp4Message r = Client(T::kRequest, Mac(1), 9);
  r.server_id = kGateway;
  r.requested_ip = kGuest;
  InjectDhcp4(r);
  Sent4 s = OneReply();
  EXPECT_EQ(s.dhcp.type, T::kAck);
  EXPECT_EQ(s.dhcp.yiaddr, kGuest);
  EXPECT_EQ(s.dhcp.lease_time, 86400u);
  EXPECT_EQ(s.eth.dst, Mac(1));
  EXPECT_EQ(services_->dhcp4().LeaseHolder(now_), Mac(1));
  EXPECT_FALSE(services_->dhcp4().LeaseHolder(now_ + absl::Hours(25)));

  // Another client is offered nothing and NAKed on request.
  InjectDhcp4(Client(T::kDiscover, Mac(2)));
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(c4().address_taken, 1u);
  Dhcp4Message other = r;
  other.chaddr = Mac(2);
  InjectDhcp4(other);
  EXPECT_EQ(OneReply().dhcp.type, T::kNak);

  // Renewal (RENEWING: ciaddr, unicast to us) gets an ACK to ciaddr.
  Dhcp4Message renew = Client(T::kRequest, Mac(1), 10);
  renew.ciaddr = kGuest;
  InjectDhcp4(renew, kGuest, kGateway, kOurMac);
  Sent4 a = OneReply();
  EXPECT_EQ(a.dhcp.type, T::kAck);
  EXPECT_EQ(a.ip.dst, kGuest);
  EXPECT_EQ(a.dhcp.ciaddr, kGuest);

  // RELEASE frees it: the other client gets an offer now.
  Dhcp4Message rel = Client(T::kRelease, Mac(1));
  rel.ciaddr = kGuest;
  rel.server_id = kGateway;
  InjectDhcp4(rel, kGuest, kGateway, kOurMac);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(c4().leases_released, 1u);
  InjectDhcp4(Client(T::kDiscover, Mac(2)));
  EXPECT_EQ(OneReply().dhcp.type, T::kOffer);
}

TEST_F(GuestConfigTest, WrongAddressIsNakedByBroadcast) {
  Start();
  Dhcp4Message r = Client(T::kRequest, Mac(1));
  r.requested_ip = A4(0x0a000205);  // INIT-REBOOT with an address not ours
  InjectDhcp4(r);
  Sent4 s = OneReply();
  EXPECT_EQ(s.dhcp.type, T::kNak);
  EXPECT_EQ(s.ip.dst, kBroadcast);  // RFC 2131 4.3.2
  EXPECT_TRUE(s.eth.dst.IsBroadcast());
  EXPECT_FALSE(s.dhcp.lease_time);
  EXPECT_TRUE(s.dhcp.yiaddr.IsZero());
  EXPECT_FALSE(services_->dhcp4().LeaseHolder(now_));

  Dhcp4Message renew = Client(T::kRequest, Mac(1));
  renew.ciaddr = A4(0x0a000207);
  InjectDhcp4(renew, A4(0x0a000207), kGateway, kOurMac);
  EXPECT_EQ(OneReply().dhcp.type, T::kNak);
}

TEST_F(GuestConfigTest, RequestForAnotherServerIsSilent) {
  Start();
  Dhcp4Message r = Client(T::kRequest, Mac(1));
  r.server_id = A4(0x0a000201);
  r.requested_ip = kGuest;
  InjectDhcp4(r);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(c4().request_other_server, 1u);
  EXPECT_FALSE(services_->dhcp4().LeaseHolder(now_));
}

TEST_F(GuestConfigTest, InformGetsOptionsWithoutLease) {
  Start();
  Dhcp4Message m = Client(T::kInform, Mac(1));
  m.ciaddr = A4(0x0a000232);
  InjectDhcp4(m, m.ciaddr, kGateway, kOurMac);
  Sent4 s = OneReply();
  EXPECT_EQ(s.dhcp.type, T::kAck);
  EXPECT_TRUE(s.dhcp.yiaddr.IsZero());
  EXPECT_FALSE(s.dhcp.lease_time);
  EXPECT_FALSE(s.dhcp.renewal_time);
  EXPECT_EQ(s.dhcp.router, kGateway);
  EXPECT_EQ(s.ip.dst, A4(0x0a000232));
  EXPECT_FALSE(services_->dhcp4().LeaseHolder(now_));
}

TEST_F(GuestConfigTest, HostileDhcpIsDroppedAndCounted) {
  Start();
  auto good = Encode(Client(T::kDiscover, Mac(1)));
  auto bad_magic = good;
  bad_magic[236] = 0;
  InjectRaw4(bad_magic, Mac(1));
  InjectRaw4(std::vector<uint8_t>(good.begin(), good.begin() + 100), Mac(1));
  auto overrun = std::vector<uint8_t>(good.begin(), good.begin() + 240);
  overrun.insert(overrun.end(), {53, 1, 1, 61, 250, 1});
  InjectRaw4(overrun, Mac(1));
  auto no_type = std::vector<uint8_t>(good.begin(), good.begin() + 240);
  no_type.push_back(255);
  InjectRaw4(no_type, Mac(1));
  auto hlen = good;
  hlen[2] = 0;
  InjectRaw4(hlen, Mac(1));
  auto htype = good;
  htype[1] = 0;
  InjectRaw4(htype, Mac(1));
  Dhcp4Message reply_op = Client(T::kDiscover, Mac(1));
  reply_op.op = 2;
  InjectDhcp4(reply_op);
  Dhcp4Message offer = Client(T::kOffer, Mac(1));  // a rogue server's
  InjectDhcp4(offer);
  Dhcp4Message relayed = Client(T::kDiscover, Mac(1));
  relayed.giaddr = A4(0x0a000201);
  InjectDhcp4(relayed);
  Dhcp4Message bcast_chaddr = Client(T::kDiscover, wire::MacAddress::Broadcast());
  InjectRaw4(Encode(bcast_chaddr), Mac(1));
  Dhcp4Message inform = Client(T::kInform, Mac(1));  // no ciaddr
  InjectDhcp4(inform);

  EXPECT_TRUE(Take().empty());
  using E = Dhcp4ParseError;
  auto pe = [&](E e) { return c4().parse_errors[static_cast<size_t>(e)]; };
  EXPECT_EQ(pe(E::kBadMagicCookie), 1u);
  EXPECT_EQ(pe(E::kTruncated), 1u);
  EXPECT_EQ(pe(E::kOptionOverrun), 1u);
  EXPECT_EQ(pe(E::kMissingMessageType), 1u);
  EXPECT_EQ(pe(E::kBadHlen), 1u);
  EXPECT_EQ(pe(E::kBadHtype), 1u);
  EXPECT_EQ(c4().not_request_op, 1u);
  EXPECT_EQ(c4().server_message_type, 1u);
  EXPECT_EQ(c4().relayed, 1u);
  EXPECT_EQ(c4().bad_chaddr, 1u);
  EXPECT_EQ(c4().inform_without_ciaddr, 1u);
  const std::string text = services_->FormatCounters();
  EXPECT_NE(text.find("dhcp4.drop.bad_magic_cookie 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("dhcp4.drop.option_overrun 1\n"), std::string::npos);
}

TEST_F(GuestConfigTest, OtherUdpFromUnspecifiedSourceIsRefused) {
  Start();
  InjectRaw4({1, 2, 3}, Mac(1), {}, kBroadcast, wire::MacAddress::Broadcast(),
             /*dport=*/53);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(stack_.counters().drop(stack::DropReason::kIpv4BadSource), 1u);
}

// --- Router advertisements ------------------------------------------------

struct SentRa {
  wire::Ipv6Repr ip;
  wire::EthernetRepr eth;
  wire::NdpRouterAdvertisement ra;
  bool checksum_ok = false;
  std::vector<uint8_t> icmp;
};

SentRa ParseRa(const std::vector<uint8_t>& f) {
  SentRa s;
  EXPECT_EQ(wire::EthernetRepr::Parse(wire::EthernetFrame(f), s.eth),
            wire::WireError::kOk);
  auto ipb = std::span(f).subspan(14);
  EXPECT_EQ(wire::Ipv6Repr::Parse(wire::Ipv6Packet(ipb), s.ip),
            wire::WireError::kOk);
  auto icmp = ipb.subspan(40, s.ip.payload_len);
  s.icmp.assign(icmp.begin(), icmp.end());
  const wire::Icmpv6Packet p(icmp);
  s.checksum_ok = p.ChecksumValid(s.ip.src, s.ip.dst);
  wire::Icmpv6Repr r;
  EXPECT_EQ(wire::Icmpv6Repr::Parse(p, r), wire::WireError::kOk);
  if (auto* ra = std::get_if<wire::NdpRouterAdvertisement>(&r.message)) {
    s.ra = *ra;
  } else {
    ADD_FAILURE() << "not an RA";
  }
  return s;
}

std::vector<uint8_t> RouterSolicitation(const wire::Ipv6Address& src,
                                        const wire::MacAddress& mac,
                                        bool sllao, uint8_t hop_limit,
                                        bool break_checksum = false) {
  wire::Icmpv6Repr r;
  wire::NdpRouterSolicitation rs;
  if (sllao) rs.options.source_link_layer = mac;
  r.message = rs;
  std::vector<uint8_t> icmp(r.BufferLen());
  r.Emit(wire::MutableIcmpv6Packet(std::span(icmp)));
  const wire::Ipv6Address dst = A6("ff02::2");
  wire::MutableIcmpv6Packet(std::span(icmp)).FillChecksum(src, dst);
  if (break_checksum) icmp[2] ^= 1;
  auto ip = Ipv6Packets(src, dst, 58, hop_limit, 1, icmp, 1500)[0];
  wire::MacAddress mcast;
  mcast.bytes = {0x33, 0x33, 0, 0, 0, 2};
  return WithEthernet(mac, mcast, 0x86dd, ip);
}

TEST_F(GuestConfigTest, UnsolicitedRaCarriesPrefixMtuRdnssAndSllao) {
  services_.emplace(stack_, chunks_, packets_, nic_, plan_);
  ASSERT_TRUE(services_->Start(now_, nullptr).ok());
  EXPECT_EQ(services_->NextDeadline(), now_);
  services_->Poll(now_);
  auto sent = Take();
  ASSERT_EQ(sent.size(), 1u);
  SentRa s = ParseRa(sent[0]);
  EXPECT_TRUE(s.checksum_ok);
  EXPECT_EQ(s.ip.hop_limit, 255);
  EXPECT_TRUE(s.ip.src.IsLinkLocal());
  EXPECT_EQ(s.ip.src, *stack_.LinkLocalAddress(nic_));
  EXPECT_EQ(s.ip.dst, A6("ff02::1"));
  EXPECT_EQ(s.eth.dst.bytes[0], 0x33);
  EXPECT_EQ(s.ra.router_lifetime, 1800);
  EXPECT_TRUE(s.ra.other_config);
  EXPECT_FALSE(s.ra.managed);
  EXPECT_EQ(s.ra.options.source_link_layer, kOurMac);
  EXPECT_EQ(s.ra.options.mtu, 9000u);
  ASSERT_EQ(s.ra.options.prefixes.size(), 1u);
  const auto& pi = s.ra.options.prefixes[0];
  EXPECT_EQ(pi.prefix, A6("fd00::"));
  EXPECT_EQ(pi.prefix_length, 64);
  EXPECT_TRUE(pi.on_link);
  EXPECT_TRUE(pi.autonomous);
  EXPECT_EQ(pi.valid_lifetime, 86400u);
  EXPECT_EQ(pi.preferred_lifetime, 14400u);
  // RDNSS (RFC 8106): the last 24 bytes.
  ASSERT_GE(s.icmp.size(), 24u);
  const uint8_t* o = s.icmp.data() + s.icmp.size() - 24;
  EXPECT_EQ(o[0], 25);
  EXPECT_EQ(o[1], 3);
  EXPECT_EQ(wire::LoadBe32(o + 4), 600u);
  EXPECT_EQ(wire::Ipv6Address::FromBytes(o + 8), A6("fd00::3"));
  // Three initial RAs at most 16 s apart, then the plan's interval.
  EXPECT_EQ(services_->NextDeadline(), now_ + absl::Seconds(16));
  Instant t = now_;
  for (int i = 0; i < 3; ++i) {
    t = services_->NextDeadline();
    services_->Poll(t);
  }
  EXPECT_EQ(services_->NextDeadline(), t + absl::Seconds(200));
  EXPECT_EQ(services_->ra().counters().ra_sent_unsolicited, 4u);
}

TEST_F(GuestConfigTest, WithIpv6OffNoRaAndASolicitationIsUnanswered) {
  // slirp4netns without --enable-ipv6: the guest must not configure an
  // IPv6 address or route from us.
  plan_.ipv6 = false;
  services_.emplace(stack_, chunks_, packets_, nic_, plan_);
  ASSERT_TRUE(services_->Start(now_, nullptr).ok());
  EXPECT_EQ(services_->NextDeadline(), kNever);
  services_->Poll(now_);
  link_.Inject(RouterSolicitation(A6("fe80::aa:ff:fe00:1"), Mac(1), true, 255),
               now_);
  now_ += absl::Seconds(20);
  services_->Poll(now_);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(services_->ra().counters().ra_sent_unsolicited, 0u);
  EXPECT_EQ(services_->ra().counters().rs_received, 0u);
}

TEST_F(GuestConfigTest, SolicitationBringsRaForwardButRateLimited) {
  Start();  // sent one at now_
  const wire::Ipv6Address ll = A6("fe80::aa:ff:fe00:1");
  now_ += absl::Seconds(1);
  link_.Inject(RouterSolicitation(ll, Mac(1), true, 255), now_);
  EXPECT_EQ(services_->ra().counters().rs_received, 1u);
  // MIN_DELAY_BETWEEN_RAS after the last one, not at once.
  EXPECT_EQ(services_->NextDeadline(), now_ + absl::Seconds(2));
  services_->Poll(now_);
  EXPECT_TRUE(Take().empty());
  now_ += absl::Seconds(2);
  services_->Poll(now_);
  auto sent = Take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(ParseRa(sent[0]).checksum_ok);
  EXPECT_EQ(services_->ra().counters().ra_sent_solicited, 1u);
  // Long after (the periodic RAs run meanwhile): an RS is answered at once.
  now_ += absl::Seconds(100);
  while (services_->NextDeadline() <= now_) services_->Poll(services_->NextDeadline());
  ASSERT_GT(services_->NextDeadline(), now_);
  link_.Inject(RouterSolicitation(A6("::"), Mac(1), false, 255), now_);
  EXPECT_EQ(services_->NextDeadline(), now_);
}

TEST_F(GuestConfigTest, InvalidSolicitationsAreDroppedAndCounted) {
  Start();
  const Instant next = services_->NextDeadline();
  now_ += absl::Seconds(10);
  const wire::Ipv6Address ll = A6("fe80::aa:ff:fe00:1");
  link_.Inject(RouterSolicitation(ll, Mac(1), true, 64), now_);    // hop limit
  link_.Inject(RouterSolicitation(A6("::"), Mac(1), true, 255), now_);  // :: + SLLAO
  link_.Inject(RouterSolicitation(ll, Mac(1), true, 255, true), now_);  // checksum
  EXPECT_EQ(services_->ra().counters().rs_bad_hop_limit, 1u);
  EXPECT_EQ(services_->ra().counters().rs_unspecified_with_sllao, 1u);
  EXPECT_EQ(services_->ra().counters().rs_received, 0u);
  EXPECT_EQ(stack_.counters().drop(stack::DropReason::kNdpInvalid), 2u);
  EXPECT_EQ(stack_.counters().drop(stack::DropReason::kIcmpv6BadChecksum), 1u);
  EXPECT_EQ(services_->NextDeadline(), next);  // nothing brought forward
  EXPECT_TRUE(Take().empty());
}

// --- DHCPv6 ---------------------------------------------------------------

std::vector<uint8_t> InfoRequest(std::vector<uint8_t> extra_options,
                                 uint8_t type = 11) {
  std::vector<uint8_t> m = {type, 0xab, 0xcd, 0xef};
  // Client id: DUID-LL of 02:aa:00:00:00:01.
  const std::vector<uint8_t> cid = {0, 1, 0, 10, 0, 3, 0, 1, 2, 0xaa, 0, 0, 0, 1};
  m.insert(m.end(), cid.begin(), cid.end());
  m.insert(m.end(), extra_options.begin(), extra_options.end());
  return m;
}

class Dhcp6Test : public GuestConfigTest {
 protected:
  void InjectDhcp6(const std::vector<uint8_t>& body,
                   const char* dst = "ff02::1:2") {
    const wire::Ipv6Address src = A6("fe80::aa:ff:fe00:1");
    const wire::Ipv6Address d = A6(dst);
    auto ip = Ipv6Packets(src, d, 17, 1, 1, Udp6(src, d, 546, 547, body),
                          1500)[0];
    wire::MacAddress mcast;
    mcast.bytes = {0x33, 0x33, d.bytes[12], d.bytes[13], d.bytes[14],
                   d.bytes[15]};
    link_.Inject(WithEthernet(Mac(1), mcast, 0x86dd, ip), now_);
  }
  const Dhcp6Counters& c6() const { return services_->dhcp6().counters(); }
};

TEST_F(Dhcp6Test, InformationRequestGetsDnsAndServerId) {
  Start();
  // Teach the stack the client's MAC, as its NS would.
  InjectDhcp6(InfoRequest({0, 6, 0, 2, 0, 23}));  // ORO: DNS
  auto sent = Take();
  // The reply waits for neighbour resolution: an NS, then we answer it.
  std::vector<uint8_t> reply;
  for (const auto& f : sent) {
    if (f.size() > 14 + 40 + 8 && f[14 + 6] == 17) reply = f;
  }
  if (reply.empty()) {
    // Resolve fe80::aa:ff:fe00:1 by an NA.
    wire::Icmpv6Repr r;
    wire::NdpNeighborAdvertisement na;
    na.solicited = true;
    na.override_flag = true;
    na.target = A6("fe80::aa:ff:fe00:1");
    na.options.target_link_layer = Mac(1);
    r.message = na;
    std::vector<uint8_t> icmp(r.BufferLen());
    r.Emit(wire::MutableIcmpv6Packet(std::span(icmp)));
    const auto ours = *stack_.LinkLocalAddress(nic_);
    wire::MutableIcmpv6Packet(std::span(icmp)).FillChecksum(na.target, ours);
    auto ip = Ipv6Packets(na.target, ours, 58, 255, 1, icmp, 1500)[0];
    link_.Inject(WithEthernet(Mac(1), kOurMac, 0x86dd, ip), now_);
    for (const auto& f : Take()) {
      if (f.size() > 14 + 40 + 8 && f[14 + 6] == 17) reply = f;
    }
  }
  ASSERT_FALSE(reply.empty());
  wire::Ipv6Repr ip;
  auto ipb = std::span<const uint8_t>(reply).subspan(14);
  ASSERT_EQ(wire::Ipv6Repr::Parse(wire::Ipv6Packet(ipb), ip),
            wire::WireError::kOk);
  EXPECT_EQ(ip.dst, A6("fe80::aa:ff:fe00:1"));
  EXPECT_TRUE(ip.src.IsLinkLocal());
  const wire::UdpHeader udp(ipb.subspan(40, ip.payload_len));
  EXPECT_EQ(udp.SrcPort(), 547);
  EXPECT_EQ(udp.DstPort(), 546);
  EXPECT_TRUE(udp.ChecksumValid(
      wire::Ipv6PseudoHeaderSum(ip.src, ip.dst, 17, udp.Length()),
      wire::UdpZeroChecksum::kReject));
  auto m = udp.Payload();
  ASSERT_GE(m.size(), 4u);
  EXPECT_EQ(m[0], 7);  // REPLY
  EXPECT_EQ(m[1], 0xab);
  EXPECT_EQ(m[3], 0xef);
  bool server_id = false, client_id = false, dns = false;
  for (size_t pos = 4; pos + 4 <= m.size();) {
    const uint16_t code = wire::LoadBe16(&m[pos]);
    const uint16_t len = wire::LoadBe16(&m[pos + 2]);
    ASSERT_LE(pos + 4 + len, m.size());
    auto v = m.subspan(pos + 4, len);
    if (code == 2) {
      server_id = std::ranges::equal(v, services_->dhcp6().duid());
    }
    if (code == 1) client_id = len == 10 && v[9] == 1;
    if (code == 23) {
      dns = len == 16 && wire::Ipv6Address::FromBytes(v.data()) == A6("fd00::3");
    }
    pos += 4 + len;
  }
  EXPECT_TRUE(server_id);
  EXPECT_TRUE(client_id);
  EXPECT_TRUE(dns);
  EXPECT_EQ(c6().information_requests, 1u);
  EXPECT_EQ(c6().replies_sent, 1u);
}

TEST_F(Dhcp6Test, HostileDhcp6IsDroppedAndCounted) {
  Start();
  InjectDhcp6({11, 1});                                    // truncated
  InjectDhcp6(InfoRequest({0, 23, 0, 200, 1}));           // overrun
  InjectDhcp6(InfoRequest({0, 23}));                      // half a header
  InjectDhcp6(InfoRequest({}, /*SOLICIT*/ 1));            // stateful
  InjectDhcp6(InfoRequest({0, 2, 0, 2, 9, 9}));           // not our server id
  InjectDhcp6(InfoRequest({0, 3, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  std::vector<uint8_t> long_cid = {11, 1, 2, 3, 0, 1, 0, 200};
  long_cid.resize(long_cid.size() + 200, 7);
  InjectDhcp6(long_cid);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(c6().truncated, 1u);
  EXPECT_EQ(c6().option_overrun, 2u);
  EXPECT_EQ(c6().unsupported_type, 1u);
  EXPECT_EQ(c6().server_id_mismatch, 1u);
  EXPECT_EQ(c6().has_ia, 1u);
  EXPECT_EQ(c6().client_id_too_long, 1u);
  EXPECT_EQ(c6().information_requests, 0u);
  EXPECT_NE(services_->FormatCounters().find("dhcp6.drop.has_ia 1\n"),
            std::string::npos);
}

TEST_F(Dhcp6Test, WithoutServicesDhcpMulticastIsNotForUs) {
  InjectDhcp6(InfoRequest({}));
  EXPECT_EQ(
      stack_.counters().drop(stack::DropReason::kIpv6MulticastNotJoined), 1u);
}

}  // namespace
}  // namespace netstack::backend
