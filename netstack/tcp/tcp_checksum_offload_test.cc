// Checksum offload of single TCP segments (issue #34): to a link that
// completes partial checksums the stack sends only the pseudo-header sum
// (the TAP asks the kernel with NEEDS_CSUM); to any other link the
// segment leaves with its full, correct checksum.
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/tcp.h"

namespace netstack::tcp {
namespace {

using testing::Bytes;
using testing::HarnessOptions;
using testing::OutSegment;
using testing::SegmentHarness;

constexpr uint8_t kTcpProto = 6;

struct Sent {
  uint16_t field = 0;   // the checksum field as sent
  uint16_t pseudo = 0;  // the pseudo-header sum for its TCP length
  bool valid = false;   // the full checksum verifies
  size_t payload = 0;
};

// Writes `n` bytes and lets them out, reading the raw frames off the link
// before the harness parses them.
std::vector<Sent> WriteAndCapture(SegmentHarness& h, TcpSocket& s, size_t n) {
  EXPECT_TRUE(s.Write(Bytes(n)).ok());
  h.notifier().Dispatch();
  h.stack().Poll(h.now());
  h.tcp().Poll(h.now());
  h.stack().Flush(h.now());
  std::vector<Sent> out;
  for (const std::vector<uint8_t>& f : h.link().sent) {
    const std::span<const uint8_t> ip =
        std::span<const uint8_t>(f).subspan(wire::EthernetFrame::kHeaderLen);
    std::span<const uint8_t> l4;
    uint16_t pseudo = 0;
    if (h.v6()) {
      const wire::Ipv6Packet p(ip);
      l4 = p.Payload();
      pseudo = wire::Ipv6PseudoHeaderSum(p.Source(), p.Destination(), kTcpProto,
                                         static_cast<uint32_t>(l4.size()));
    } else {
      const wire::Ipv4Packet p(ip);
      l4 = p.Payload();
      pseudo = wire::Ipv4PseudoHeaderSum(p.Source(), p.Destination(), kTcpProto,
                                         static_cast<uint32_t>(l4.size()));
    }
    const wire::TcpHeader t(l4);
    out.push_back(Sent{t.Checksum(), pseudo,
                       t.ChecksumValid(pseudo),
                       t.Payload().size()});
  }
  h.Take();
  return out;
}

class TcpChecksumOffloadTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options(bool offload) const {
    HarnessOptions o;
    o.v6 = GetParam();
    o.tx_checksum_offload = offload;
    return o;
  }
};

TEST_P(TcpChecksumOffloadTest, OffloadingLinkGetsThePseudoHeaderSum) {
  SegmentHarness h(Options(true));
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  const std::vector<Sent> sent = WriteAndCapture(h, *s, 1000);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].payload, 1000u);
  EXPECT_EQ(sent[0].field, sent[0].pseudo);
  EXPECT_FALSE(sent[0].valid);
}

TEST_P(TcpChecksumOffloadTest, OtherLinkGetsTheFullChecksum) {
  SegmentHarness h(Options(false));
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  // Three segments: 1448 (1428 over IPv6), the same, and the rest.
  const std::vector<Sent> sent = WriteAndCapture(h, *s, 3001);
  ASSERT_EQ(sent.size(), 3u);
  size_t total = 0;
  for (const Sent& x : sent) {
    EXPECT_TRUE(x.valid) << "field " << x.field << " pseudo " << x.pseudo;
    total += x.payload;
  }
  EXPECT_EQ(total, 3001u);
}

// The handshake and pure ACKs too: every segment of a connection over a
// link without offload verifies, the ones over an offloading link do not
// (their checksum is the kernel's to finish).
TEST_P(TcpChecksumOffloadTest, ControlSegmentsFollowTheLink) {
  for (const bool offload : {false, true}) {
    SegmentHarness h(Options(offload));
    auto s = h.OpenActive();
    ASSERT_NE(s, nullptr);
    h.SendData(500);  // the stack answers with an ACK
    const std::vector<OutSegment> out = h.Take();
    ASSERT_FALSE(out.empty()) << offload;
    for (const OutSegment& seg : out) {
      EXPECT_EQ(seg.checksum_ok, !offload) << offload;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ipv4AndIpv6, TcpChecksumOffloadTest,
                         ::testing::Bool());

}  // namespace
}  // namespace netstack::tcp
