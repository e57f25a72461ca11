#include "netstack/ip/fragment.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/ip/alloc_counter.h"
#include "netstack/ip/reassembly.h"
#include "netstack/wire/address.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"

namespace netstack::ip {
namespace {

using buffer::ChunkPool;
using buffer::ChunkRef;
using buffer::PacketBuffer;
using buffer::PacketChain;
using buffer::PacketPool;
using buffer::PacketPtr;
using buffer::PayloadView;

constexpr Instant kT0 = absl::FromUnixSeconds(3600 * 1000);
constexpr uint8_t kUdp = static_cast<uint8_t>(wire::IpProtocol::kUdp);
constexpr uint8_t kIcmp = static_cast<uint8_t>(wire::IpProtocol::kIcmp);
constexpr uint8_t kIcmpv6 = static_cast<uint8_t>(wire::IpProtocol::kIcmpv6);
constexpr uint8_t kFragmentHeader =
    static_cast<uint8_t>(wire::IpProtocol::kIpv6Frag);

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Headers then payload, as the link would send them.
std::vector<uint8_t> Flatten(const PacketBuffer& p) {
  std::vector<uint8_t> out(p.headers().data().begin(),
                           p.headers().data().end());
  for (const PayloadView& v : p.payload()) {
    out.insert(out.end(), v.bytes().begin(), v.bytes().end());
  }
  return out;
}

wire::Ipv4Repr Ipv4Header(uint8_t protocol = kUdp) {
  wire::Ipv4Repr h;
  h.src = *wire::Ipv4Address::Parse("10.9.0.1");
  h.dst = *wire::Ipv4Address::Parse("10.9.0.2");
  h.protocol = protocol;
  h.ttl = 61;
  h.dscp_ecn = 0xb8;
  h.ident = 0xc502;
  return h;
}

wire::Ipv6Repr Ipv6Header(uint8_t next_header = kUdp) {
  wire::Ipv6Repr h;
  h.src = *wire::Ipv6Address::Parse("fd00:9::1");
  h.dst = *wire::Ipv6Address::Parse("fd00:9::2");
  h.next_header = next_header;
  h.hop_limit = 63;
  h.traffic_class = 0x28;
  h.flow_label = 0xabcde;
  return h;
}

// Every test checks that all packets and chunks went back to their pools.
class FragmentTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(packets_.stats().in_use, 0u);
    EXPECT_EQ(packets_.stats().free, packets_.stats().created);
    EXPECT_EQ(chunks_.stats().in_use, 0u);
    EXPECT_EQ(chunks_.stats().free, chunks_.stats().created);
  }

  // Copies `bytes` into a fresh chunk at `at` and returns a view of them.
  PayloadView View(const std::vector<uint8_t>& bytes, uint32_t from,
                   uint32_t len, uint32_t at = 0) {
    ChunkRef c = chunks_.Allocate();
    EXPECT_TRUE(c);
    std::memcpy(c->mutable_data().data() + at, bytes.data() + from, len);
    return PayloadView(std::move(c), at, len);
  }

  // Views of `bytes` with the given sizes, all in one chunk but with a
  // gap of 3 bytes between them, so no two are adjacent in memory.
  std::vector<PayloadView> Views(const std::vector<uint8_t>& bytes,
                                 const std::vector<uint32_t>& sizes) {
    ChunkRef c = chunks_.Allocate();
    EXPECT_TRUE(c);
    // Fill the chunk first: it is written only while it has one reference.
    uint32_t from = 0, at = 0;
    for (uint32_t n : sizes) {
      std::memcpy(c->mutable_data().data() + at, bytes.data() + from, n);
      from += n;
      at += n + 3;
    }
    EXPECT_EQ(from, bytes.size());
    std::vector<PayloadView> out;
    at = 0;
    for (uint32_t n : sizes) {
      out.emplace_back(c, at, n);
      at += n + 3;
    }
    return out;
  }

  // Parses every packet of an IPv4 chain (header checksum included), feeds
  // it to a Reassembler and returns the reassembled payload; also returns
  // the parsed headers.
  std::optional<std::vector<uint8_t>> ReassembleIpv4(
      const PacketChain& chain,
      std::vector<wire::Ipv4Repr>* headers = nullptr) {
    Reassembler r(chunks_, ReassemblerOptions{});
    std::optional<std::vector<uint8_t>> out;
    size_t i = 0;
    for (const PacketBuffer& p : chain) {
      SCOPED_TRACE(i++);
      const std::vector<uint8_t> bytes = Flatten(p);
      wire::Ipv4Packet packet(bytes);
      wire::Ipv4Repr repr;
      EXPECT_EQ(wire::Ipv4Repr::Parse(packet, repr), wire::WireError::kOk);
      EXPECT_TRUE(packet.HeaderChecksumValid());
      EXPECT_EQ(packet.TotalLength(), bytes.size());
      if (headers != nullptr) headers->push_back(repr);
      AddResult res = r.Add(
          ReassemblyKey::Ipv4(repr.src, repr.dst, repr.protocol, repr.ident),
          repr.fragment_offset, repr.more_fragments, packet.Payload(), kT0,
          packet.Header());
      EXPECT_TRUE(res.accepted()) << DropReasonName(res.drop_reason);
      if (res.outcome == AddOutcome::kComplete) {
        EXPECT_FALSE(out.has_value());
        out.emplace(res.payload.bytes().begin(), res.payload.bytes().end());
      }
    }
    return out;
  }

  // The same for IPv6: each packet must carry a Fragment header, found
  // with WalkIpv6ExtensionHeaders.
  std::optional<std::vector<uint8_t>> ReassembleIpv6(
      const PacketChain& chain,
      std::vector<wire::Ipv6FragmentRepr>* fragments = nullptr) {
    Reassembler r(chunks_, ReassemblerOptions{});
    std::optional<std::vector<uint8_t>> out;
    size_t i = 0;
    for (const PacketBuffer& p : chain) {
      SCOPED_TRACE(i++);
      const std::vector<uint8_t> bytes = Flatten(p);
      wire::Ipv6Packet packet(bytes);
      wire::Ipv6Repr repr;
      EXPECT_EQ(wire::Ipv6Repr::Parse(packet, repr), wire::WireError::kOk);
      EXPECT_EQ(packet.TotalLen(), bytes.size());
      EXPECT_EQ(repr.next_header, kFragmentHeader);
      wire::Ipv6ExtensionInfo info;
      EXPECT_EQ(wire::WalkIpv6ExtensionHeaders(packet.Payload(),
                                               repr.next_header, info),
                wire::WireError::kOk);
      if (!info.fragment.has_value()) {
        ADD_FAILURE() << "no Fragment header";
        continue;
      }
      EXPECT_EQ(info.fragment->header_offset, 0u);
      if (fragments != nullptr) fragments->push_back(info.fragment->header);
      const wire::Ipv6FragmentRepr& f = info.fragment->header;
      const size_t data_at = wire::Ipv6Packet::kHeaderLen + 8;
      AddResult res =
          r.Add(ReassemblyKey::Ipv6(repr.src, repr.dst, f.identification),
                f.offset, f.more_fragments, std::span(bytes).subspan(data_at),
                kT0, std::span(bytes).first(data_at));
      EXPECT_TRUE(res.accepted()) << DropReasonName(res.drop_reason);
      if (res.outcome == AddOutcome::kComplete) {
        EXPECT_FALSE(out.has_value());
        out.emplace(res.payload.bytes().begin(), res.payload.bytes().end());
      }
    }
    return out;
  }

  ChunkPool chunks_{16};
  PacketPool packets_{256};
};

TEST_F(FragmentTest, Ipv4_65000BytesAtMtu1500) {
  const auto data = Pattern(65000, 1);
  const PayloadView view = View(data, 0, 65000, 64);
  PacketChain chain;
  ASSERT_EQ(FragmentIpv4(Ipv4Header(), {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kOk);
  ASSERT_EQ(chain.size(), 44u);  // 43 * 1480 + 1360
  EXPECT_EQ(chain.TotalBytes(), 65000u + 44 * 20);
  size_t i = 0;
  for (PacketBuffer& p : chain) {
    SCOPED_TRACE(i);
    EXPECT_LE(p.size(), 1500u);
    EXPECT_EQ(p.headers().size(), 20u);
    // The payload is the caller's bytes, not a copy.
    ASSERT_EQ(p.payload().size(), 1u);
    EXPECT_EQ(p.payload()[0].chunk().get(), view.chunk().get());
    EXPECT_EQ(p.payload()[0].bytes().data(), view.bytes().data() + i * 1480);
    // Room for the link's headers is left.
    EXPECT_EQ(p.headers().headroom(), buffer::kMaxHeaderLen - 20);
    ++i;
  }
  std::vector<wire::Ipv4Repr> headers;
  auto out = ReassembleIpv4(chain, &headers);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
  ASSERT_EQ(headers.size(), 44u);
  for (size_t k = 0; k < headers.size(); ++k) {
    SCOPED_TRACE(k);
    const wire::Ipv4Repr& h = headers[k];
    EXPECT_EQ(h.fragment_offset, k * 1480);
    EXPECT_EQ(h.more_fragments, k < 43);
    EXPECT_EQ(h.payload_len, k < 43 ? 1480u : 1360u);
    EXPECT_FALSE(h.dont_fragment);
    EXPECT_EQ(h.ident, 0xc502);
    EXPECT_EQ(h.protocol, kUdp);
    EXPECT_EQ(h.ttl, 61);
    EXPECT_EQ(h.dscp_ecn, 0xb8);
    EXPECT_EQ(h.src, Ipv4Header().src);
    EXPECT_EQ(h.dst, Ipv4Header().dst);
  }
}

// What Linux 6.18 put on a veth with MTU 1500 for `ping -s 8000` (captured
// with dumpcap between two network namespaces): an 8008-byte ICMP message
// in six IPv4 fragments, Total Length 1500 x5 then 628, offsets 0, 185,
// 370, 555, 740, 925 (8-byte units), MF on all but the last; over IPv6,
// Payload Length 1456 x5 then 776 (8 + 1448 / 768 bytes of data), offsets
// 0, 181, 362, 543, 724, 905. Ours must match.
TEST_F(FragmentTest, Ping8000LikeLinux) {
  const auto data = Pattern(8008, 2);
  const PayloadView view = View(data, 0, 8008);

  PacketChain v4;
  ASSERT_EQ(FragmentIpv4(Ipv4Header(kIcmp), {&view, 1}, 1500, packets_, v4),
            FragmentStatus::kOk);
  std::vector<wire::Ipv4Repr> headers;
  auto out = ReassembleIpv4(v4, &headers);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
  std::vector<size_t> total, units;
  std::vector<bool> mf;
  for (const wire::Ipv4Repr& h : headers) {
    total.push_back(h.TotalLen());
    units.push_back(h.fragment_offset / 8);
    mf.push_back(h.more_fragments);
  }
  EXPECT_EQ(total, (std::vector<size_t>{1500, 1500, 1500, 1500, 1500, 628}));
  EXPECT_EQ(units, (std::vector<size_t>{0, 185, 370, 555, 740, 925}));
  EXPECT_EQ(mf, (std::vector<bool>{true, true, true, true, true, false}));

  PacketChain v6;
  ASSERT_EQ(FragmentIpv6(Ipv6Header(kIcmpv6), 0xf774e7b3, {&view, 1}, 1500,
                         packets_, v6),
            FragmentStatus::kOk);
  std::vector<size_t> plen;
  for (const PacketBuffer& p : v6) plen.push_back(p.size() - 40);
  EXPECT_EQ(plen, (std::vector<size_t>{1456, 1456, 1456, 1456, 1456, 776}));
  std::vector<wire::Ipv6FragmentRepr> frags;
  out = ReassembleIpv6(v6, &frags);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
  units.clear();
  mf.clear();
  for (const wire::Ipv6FragmentRepr& f : frags) {
    units.push_back(f.offset / 8);
    mf.push_back(f.more_fragments);
    EXPECT_EQ(f.identification, 0xf774e7b3u);
    EXPECT_EQ(f.next_header, kIcmpv6);
  }
  EXPECT_EQ(units, (std::vector<size_t>{0, 181, 362, 543, 724, 905}));
  EXPECT_EQ(mf, (std::vector<bool>{true, true, true, true, true, false}));
}

TEST_F(FragmentTest, PayloadSpreadOverSeveralChunks) {
  const auto data = Pattern(64333, 3);
  // Three chunks, odd boundaries: fragments straddle them.
  const PayloadView views[] = {View(data, 0, 1000, 100),
                               View(data, 1000, 33333, 0),
                               View(data, 34333, 30000, 7)};
  PacketChain chain;
  ASSERT_EQ(FragmentIpv4(Ipv4Header(), views, 1500, packets_, chain),
            FragmentStatus::kOk);
  for (const PacketBuffer& p : chain) {
    for (const PayloadView& v : p.payload()) {
      EXPECT_TRUE(v.chunk().get() == views[0].chunk().get() ||
                  v.chunk().get() == views[1].chunk().get() ||
                  v.chunk().get() == views[2].chunk().get());
    }
  }
  // The first fragment crosses the first views' boundary: two views.
  EXPECT_EQ(chain.front().payload().size(), 2u);
  EXPECT_EQ(std::next(chain.begin())->payload().size(), 1u);
  auto out = ReassembleIpv4(chain);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);

  PacketChain v6;
  ASSERT_EQ(FragmentIpv6(Ipv6Header(), 7, views, 1280, packets_, v6),
            FragmentStatus::kOk);
  EXPECT_EQ(v6.size(), (64333 + 1231) / 1232);
  out = ReassembleIpv6(v6);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
}

TEST_F(FragmentTest, ManySmallViewsRespectTheViewLimit) {
  std::vector<uint32_t> sizes;
  uint32_t total = 0;
  for (uint32_t i = 0; i < 100; ++i) {
    sizes.push_back(30 + i % 7);
    total += sizes.back();
  }
  const auto data = Pattern(total, 4);
  const auto views = Views(data, sizes);
  PacketChain chain;
  ASSERT_EQ(FragmentIpv4(Ipv4Header(), views, 1500, packets_, chain),
            FragmentStatus::kOk);
  EXPECT_GT(chain.size(), 6u);  // would be 3 without the limit
  size_t i = 0;
  for (const PacketBuffer& p : chain) {
    SCOPED_TRACE(i++);
    EXPECT_LE(p.payload().size(), PacketBuffer::kMaxPayloadViews);
    if (i < chain.size()) {
      EXPECT_EQ(p.payload_size() % 8, 0u);
    }
  }
  auto out = ReassembleIpv4(chain);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);

  PacketChain v6;
  ASSERT_EQ(FragmentIpv6(Ipv6Header(), 8, views, 1500, packets_, v6),
            FragmentStatus::kOk);
  for (const PacketBuffer& p : v6) {
    EXPECT_LE(p.payload().size(), PacketBuffer::kMaxPayloadViews);
  }
  out = ReassembleIpv6(v6);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
}

TEST_F(FragmentTest, EmptyViewsAreSkipped) {
  const auto data = Pattern(3000, 5);
  const auto views = Views(data, {0, 1000, 0, 0, 2000, 0});
  PacketChain chain;
  ASSERT_EQ(FragmentIpv4(Ipv4Header(), views, 1500, packets_, chain),
            FragmentStatus::kOk);
  EXPECT_EQ(chain.size(), 3u);
  auto out = ReassembleIpv4(chain);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
}

TEST_F(FragmentTest, FitsInOnePacket) {
  const auto data = Pattern(1480, 6);
  const PayloadView view = View(data, 0, 1480);
  PacketChain chain;
  wire::Ipv4Repr h = Ipv4Header();
  h.dont_fragment = true;  // allowed: nothing to fragment
  ASSERT_EQ(FragmentIpv4(h, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kOk);
  ASSERT_EQ(chain.size(), 1u);
  const auto bytes = Flatten(chain.front());
  wire::Ipv4Repr parsed;
  ASSERT_EQ(wire::Ipv4Repr::Parse(wire::Ipv4Packet(bytes), parsed),
            wire::WireError::kOk);
  EXPECT_TRUE(wire::Ipv4Packet(bytes).HeaderChecksumValid());
  EXPECT_FALSE(wire::Ipv4Packet(bytes).IsFragment());
  EXPECT_TRUE(parsed.dont_fragment);
  EXPECT_EQ(parsed.payload_len, 1480u);

  // IPv6: no Fragment header when it fits.
  PacketChain v6;
  const PayloadView v6_view = view.Subview(0, 1460);
  ASSERT_EQ(FragmentIpv6(Ipv6Header(), 9, {&v6_view, 1}, 1500, packets_, v6),
            FragmentStatus::kOk);
  ASSERT_EQ(v6.size(), 1u);
  const auto b6 = Flatten(v6.front());
  wire::Ipv6Repr r6;
  ASSERT_EQ(wire::Ipv6Repr::Parse(wire::Ipv6Packet(b6), r6),
            wire::WireError::kOk);
  EXPECT_EQ(r6.next_header, kUdp);
  EXPECT_EQ(r6.payload_len, 1460u);
  EXPECT_EQ(r6.flow_label, 0xabcdeu);
  EXPECT_EQ(b6.size(), 1500u);
}

TEST_F(FragmentTest, DontFragmentFailsCleanly) {
  const auto data = Pattern(2000, 7);
  const PayloadView view = View(data, 0, 2000);
  PacketChain chain;
  PacketPtr existing = packets_.Allocate();
  ASSERT_NE(existing, nullptr);
  chain.PushBack(std::move(existing));
  wire::Ipv4Repr h = Ipv4Header();
  h.dont_fragment = true;
  EXPECT_EQ(FragmentIpv4(h, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kDontFragment);
  EXPECT_EQ(chain.size(), 1u);
  EXPECT_EQ(packets_.stats().in_use, 1u);
  EXPECT_EQ(view.chunk()->refs(), 1u);
}

TEST_F(FragmentTest, DontFragmentWithTooManyViews) {
  const auto data = Pattern(200, 8);
  const auto views = Views(data, std::vector<uint32_t>(20, 10));
  wire::Ipv4Repr h = Ipv4Header();
  h.dont_fragment = true;
  PacketChain chain;
  // 220 bytes fit the MTU, but not in one packet's 16 views.
  EXPECT_EQ(FragmentIpv4(h, views, 1500, packets_, chain),
            FragmentStatus::kTooManyViews);
  EXPECT_TRUE(chain.empty());
  // Without DF: 16 views (160 bytes), then the other 4.
  h.dont_fragment = false;
  ASSERT_EQ(FragmentIpv4(h, views, 1500, packets_, chain), FragmentStatus::kOk);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain.front().payload_size(), 160u);
  EXPECT_EQ(chain.back().payload_size(), 40u);
  auto out = ReassembleIpv4(chain);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
}

TEST_F(FragmentTest, PoolExhaustionFailsCleanly) {
  const auto data = Pattern(65000, 9);
  const PayloadView view = View(data, 0, 65000);
  PacketPool tiny(5);
  {
    PacketChain chain;
    EXPECT_EQ(FragmentIpv4(Ipv4Header(), {&view, 1}, 1500, tiny, chain),
              FragmentStatus::kNoPacket);
    EXPECT_TRUE(chain.empty());
    EXPECT_EQ(FragmentIpv6(Ipv6Header(), 1, {&view, 1}, 1500, tiny, chain),
              FragmentStatus::kNoPacket);
    EXPECT_TRUE(chain.empty());
    EXPECT_EQ(tiny.stats().in_use, 0u);
    EXPECT_EQ(tiny.stats().exhausted, 2u);
    // Every sub-view taken for the fragments built so far is gone again.
    EXPECT_EQ(view.chunk()->refs(), 1u);
  }
}

TEST_F(FragmentTest, MtuTooSmall) {
  const auto data = Pattern(100, 10);
  const PayloadView view = View(data, 0, 100);
  PacketChain chain;
  EXPECT_EQ(FragmentIpv4(Ipv4Header(), {&view, 1}, 27, packets_, chain),
            FragmentStatus::kMtuTooSmall);
  EXPECT_EQ(FragmentIpv6(Ipv6Header(), 1, {&view, 1}, 55, packets_, chain),
            FragmentStatus::kMtuTooSmall);
  EXPECT_TRUE(chain.empty());
  // One unit of data per fragment is the least that works.
  ASSERT_EQ(FragmentIpv4(Ipv4Header(), {&view, 1}, 28, packets_, chain),
            FragmentStatus::kOk);
  EXPECT_EQ(chain.size(), 13u);
  auto out = ReassembleIpv4(chain);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
  PacketChain v6;
  ASSERT_EQ(FragmentIpv6(Ipv6Header(), 1, {&view, 1}, 56, packets_, v6),
            FragmentStatus::kOk);
  EXPECT_EQ(v6.size(), 13u);
  out = ReassembleIpv6(v6);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
}

TEST_F(FragmentTest, LargestDatagramsAndTooBig) {
  const auto data = Pattern(65536, 11);
  PacketChain chain;
  // IPv4: 20 + 65515 = 65535 is the largest.
  PayloadView view = View(data, 0, 65516);
  EXPECT_EQ(FragmentIpv4(Ipv4Header(), {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kTooBig);
  view.Truncate(65515);
  ASSERT_EQ(FragmentIpv4(Ipv4Header(), {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kOk);
  auto out = ReassembleIpv4(chain);
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(std::ranges::equal(*out, view.bytes()));
  chain.Clear();
  // With 4 bytes of options, 4 fewer.
  wire::Ipv4Repr h = Ipv4Header();
  const uint8_t router_alert[] = {148, 4, 0, 0};
  ASSERT_TRUE(h.options.Assign(router_alert));
  view.Truncate(65511);
  EXPECT_EQ(FragmentIpv4(h, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kOk);
  chain.Clear();
  view = View(data, 0, 65512);
  EXPECT_EQ(FragmentIpv4(h, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kTooBig);
  // IPv6: Payload Length 65535.
  view = View(data, 0, 65536);
  EXPECT_EQ(FragmentIpv6(Ipv6Header(), 1, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kTooBig);
  view.Truncate(65535);
  ASSERT_EQ(FragmentIpv6(Ipv6Header(), 1, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kOk);
  out = ReassembleIpv6(chain);
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(std::ranges::equal(*out, view.bytes()));
}

TEST_F(FragmentTest, BadOptions) {
  const auto data = Pattern(3000, 12);
  const PayloadView view = View(data, 0, 3000);
  wire::Ipv4Repr h = Ipv4Header();
  const uint8_t bad[] = {7, 1, 0, 0};  // Record Route with length 1
  ASSERT_TRUE(h.options.Assign(bad));
  PacketChain chain;
  EXPECT_EQ(FragmentIpv4(h, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kBadOptions);
  EXPECT_TRUE(chain.empty());
}

// RFC 791 section 3.1: only options with the copied flag go into every
// fragment; the others stay in the first.
TEST_F(FragmentTest, OnlyCopiedOptionsFollowTheFirstFragment) {
  const auto data = Pattern(5000, 13);
  const PayloadView view = View(data, 0, 5000);
  wire::Ipv4Repr h = Ipv4Header();
  const uint8_t options[] = {
      7,   7, 4, 0,  0, 0, 0,  // Record Route (not copied)
      1,                       // NOP (not copied)
      131, 7, 4, 10, 0, 0, 9,  // Loose Source Route (copied)
  };
  ASSERT_TRUE(h.options.Assign(options));
  ASSERT_EQ(h.HeaderLen(), 36u);
  PacketChain chain;
  ASSERT_EQ(FragmentIpv4(h, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kOk);
  std::vector<wire::Ipv4Repr> headers;
  auto out = ReassembleIpv4(chain, &headers);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
  // 1464 = (1500 - 36) & ~7, then 1472 = (1500 - 28) & ~7.
  ASSERT_EQ(headers.size(), 4u);
  EXPECT_EQ(headers[0].payload_len, 1464u);
  EXPECT_EQ(headers[1].payload_len, 1472u);
  EXPECT_EQ(headers[1].fragment_offset, 1464u);
  const uint8_t first_area[] = {7,   7, 4, 0,  0, 0, 0, 1,
                                131, 7, 4, 10, 0, 0, 9, 0};
  const uint8_t rest_area[] = {131, 7, 4, 10, 0, 0, 9, 0};
  EXPECT_TRUE(std::ranges::equal(headers[0].options.span(), first_area));
  for (size_t i = 1; i < headers.size(); ++i) {
    EXPECT_TRUE(std::ranges::equal(headers[i].options.span(), rest_area)) << i;
    EXPECT_EQ(headers[i].HeaderLen(), 28u);
  }
}

// RFC 791 allows a fragment to be fragmented again: offsets continue from
// the original's, and MF stays set on the last piece if it was set.
TEST_F(FragmentTest, RefragmentingAFragment) {
  const auto data = Pattern(1480, 14);
  const PayloadView view = View(data, 0, 1480);
  for (bool more : {true, false}) {
    SCOPED_TRACE(more);
    wire::Ipv4Repr h = Ipv4Header();
    h.fragment_offset = 2960;
    h.more_fragments = more;
    PacketChain chain;
    ASSERT_EQ(FragmentIpv4(h, {&view, 1}, 576, packets_, chain),
              FragmentStatus::kOk);
    std::vector<uint16_t> offsets;
    std::vector<bool> mf;
    for (const PacketBuffer& p : chain) {
      const auto bytes = Flatten(p);
      wire::Ipv4Repr r;
      ASSERT_EQ(wire::Ipv4Repr::Parse(wire::Ipv4Packet(bytes), r),
                wire::WireError::kOk);
      EXPECT_TRUE(wire::Ipv4Packet(bytes).HeaderChecksumValid());
      offsets.push_back(r.fragment_offset);
      mf.push_back(r.more_fragments);
    }
    // (576 - 20) & ~7 = 552.
    EXPECT_EQ(offsets, (std::vector<uint16_t>{2960, 3512, 4064}));
    EXPECT_EQ(mf, (std::vector<bool>{true, true, more}));
  }
}

TEST_F(FragmentTest, Ipv6_65000BytesAtMtu1500) {
  const auto data = Pattern(65000, 15);
  const PayloadView view = View(data, 0, 65000);
  PacketChain chain;
  ASSERT_EQ(
      FragmentIpv6(Ipv6Header(), 0x12345678, {&view, 1}, 1500, packets_, chain),
      FragmentStatus::kOk);
  ASSERT_EQ(chain.size(), 45u);  // 44 * 1448 + 1288
  size_t i = 0;
  for (const PacketBuffer& p : chain) {
    SCOPED_TRACE(i);
    EXPECT_LE(p.size(), 1500u);
    EXPECT_EQ(p.headers().size(), 48u);
    EXPECT_EQ(p.payload()[0].bytes().data(), view.bytes().data() + i * 1448);
    const auto bytes = Flatten(p);
    wire::Ipv6Repr r;
    ASSERT_EQ(wire::Ipv6Repr::Parse(wire::Ipv6Packet(bytes), r),
              wire::WireError::kOk);
    EXPECT_EQ(r.src, Ipv6Header().src);
    EXPECT_EQ(r.dst, Ipv6Header().dst);
    EXPECT_EQ(r.hop_limit, 63);
    EXPECT_EQ(r.traffic_class, 0x28);
    EXPECT_EQ(r.flow_label, 0xabcdeu);
    EXPECT_EQ(r.payload_len, 8 + (i < 44 ? 1448u : 1288u));
    ++i;
  }
  std::vector<wire::Ipv6FragmentRepr> frags;
  auto out = ReassembleIpv6(chain, &frags);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
  ASSERT_EQ(frags.size(), 45u);
  for (size_t k = 0; k < frags.size(); ++k) {
    EXPECT_EQ(frags[k].offset, k * 1448) << k;
    EXPECT_EQ(frags[k].more_fragments, k < 44) << k;
    EXPECT_EQ(frags[k].identification, 0x12345678u);
    EXPECT_EQ(frags[k].next_header, kUdp);
  }
}

TEST_F(FragmentTest, ReversedAndShuffledDeliveryStillReassembles) {
  const auto data = Pattern(30000, 16);
  const PayloadView view = View(data, 0, 30000);
  PacketChain chain;
  ASSERT_EQ(FragmentIpv4(Ipv4Header(), {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kOk);
  std::vector<PacketPtr> packets;
  while (!chain.empty()) packets.push_back(chain.PopFront());
  std::mt19937 rng(17);
  std::shuffle(packets.begin(), packets.end(), rng);
  for (PacketPtr& p : packets) chain.PushBack(std::move(p));
  auto out = ReassembleIpv4(chain);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, data);
}

TEST_F(FragmentTest, LinkHeadersCanStillBePrepended) {
  const auto data = Pattern(4000, 18);
  const PayloadView view = View(data, 0, 4000);
  PacketChain chain;
  ASSERT_EQ(FragmentIpv6(Ipv6Header(), 1, {&view, 1}, 1500, packets_, chain),
            FragmentStatus::kOk);
  for (PacketBuffer& p : chain) {
    // virtio-net 12 + Ethernet 14 + 802.1Q 4.
    EXPECT_TRUE(p.headers().Prepend(30).has_value());
    EXPECT_EQ(p.headers().size(), 78u);
  }
}

TEST_F(FragmentTest, NoHeapAllocationAfterWarmUp) {
  const auto data = Pattern(65000, 19);
  const PayloadView view = View(data, 0, 65000);
  const wire::Ipv4Repr h4 = Ipv4Header();
  const wire::Ipv6Repr h6 = Ipv6Header();
  size_t packets = 0;
  auto round = [&]() {
    PacketChain chain;
    if (FragmentIpv4(h4, {&view, 1}, 1500, packets_, chain) ==
            FragmentStatus::kOk &&
        FragmentIpv6(h6, 1, {&view, 1}, 1280, packets_, chain) ==
            FragmentStatus::kOk) {
      packets = chain.size();
    }
  };
  round();  // warm-up: the packet pool creates its buffers
  const uint64_t before = testing::HeapAllocations();
  for (int i = 0; i < 20; ++i) round();
  EXPECT_EQ(testing::HeapAllocations() - before, 0u);
  EXPECT_EQ(packets, 44u + 53u);
}

TEST(FragmentStatusTest, EveryStatusHasADistinctName) {
  std::vector<std::string_view> names;
  for (int i = 0; i <= static_cast<int>(FragmentStatus::kNoHeadroom); ++i) {
    names.push_back(FragmentStatusName(static_cast<FragmentStatus>(i)));
    EXPECT_NE(names.back(), "unknown");
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
}

}  // namespace
}  // namespace netstack::ip
