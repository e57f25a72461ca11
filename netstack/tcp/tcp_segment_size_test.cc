// How big the segments we send are, and that the connection records what
// really went out:
//   - a packet carries the MSS less the options it really has (RFC 6691):
//     SACK blocks on a data segment shrink its payload, so it still fits
//     the MTU (IPv4 sets DF; a packet past the MTU is never delivered);
//   - a super-segment that needs more payload views than a packet holds
//     sends what the views cover, and the sequence space, the scoreboard
//     and the FIN follow what was sent, not what was asked for;
//   - small views are coalesced into the send queue's tail chunk.
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/buffer/chunk.h"
#include "netstack/tcp/tcp_segment_harness.h"

namespace netstack::tcp {
namespace {

using ::testing::Each;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers

MATCHER_P(FitsMtu, mtu, "fits an MTU of " + std::to_string(mtu)) {
  *result_listener << "IP packet of " << arg.ip_packet_len << " bytes";
  return arg.ip_packet_len <= static_cast<size_t>(mtu);
}

class SegmentSizeTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options() const {
    HarnessOptions o;
    o.v6 = GetParam();
    return o;
  }
  static uint64_t PayloadBytes(const std::vector<OutSegment>& segs) {
    uint64_t n = 0;
    for (const OutSegment& s : segs) n += s.payload.size();
    return n;
  }
};

INSTANTIATE_TEST_SUITE_P(V4V6, SegmentSizeTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

// The review's IPv4 stall: while netstack held out-of-order data, every
// data segment carried a SACK block on top of timestamps, 1448 + 20 + 20
// + 12 + 12 = 1512 bytes, which IPv4 with DF drops. Over IPv6 the stack
// fragmented its own TCP segments instead.
TEST_P(SegmentSizeTest, DataWithSackBlocksStillFitsTheMtu) {
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  // The peer's data arrives with a hole: we hold one out-of-order run.
  h.Send(h.Segment().Seq(h.peer.seq + 100).Data(100));
  h.Take();
  const uint32_t una = h.iss() + 1;
  ASSERT_TRUE(s->Write(Bytes(4 * mss)).ok());
  h.Poll();
  const std::vector<OutSegment> out = h.Take();
  ASSERT_FALSE(out.empty());
  EXPECT_THAT(out, Each(FitsMtu(1500)));
  EXPECT_THAT(out, Each(Tcp(SackBlocks(::testing::SizeIs(1)))));
  EXPECT_EQ(PayloadBytes(out), 4u * mss);
  EXPECT_EQ(h.snd_max(), una + 4 * mss);
  EXPECT_THAT(h.other_frames, IsEmpty());  // no IP fragments
  EXPECT_EQ(h.Drops(stack::DropReason::kFragmentationNeeded), 0u);
}

// The same with three SACK blocks (the most a segment with timestamps
// carries): 28 bytes of options more than the MSS allowed for.
TEST_P(SegmentSizeTest, ThreeSackBlocksShrinkEveryPacketOfASuperSegment) {
  HarnessOptions o = Options();
  o.gso_max_size = 65535;
  SegmentHarness h(o);
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  ASSERT_EQ(mss, GetParam() ? 1428u : 1448u);
  for (uint32_t k = 1; k <= 3; ++k) {
    h.Send(h.Segment().Seq(h.peer.seq + 200 * k).Data(100));
  }
  h.Take();
  ASSERT_TRUE(s->Write(Bytes(8 * mss)).ok());
  h.Poll();
  const std::vector<OutSegment> out = h.Take();
  ASSERT_FALSE(out.empty());
  const uint32_t hdrs = (GetParam() ? 40 : 20) + 20;
  for (const OutSegment& seg : out) {
    ASSERT_EQ(seg.tcp.sack_count, 3);
    // The link splits a super-segment at its gso_size, so the payload
    // must be whole packets of MTU - headers - options (timestamps 12,
    // SACK 4 + 3 * 8), or a single packet's worth.
    const size_t per_packet = 1500 - hdrs - (12 + 4 + 3 * 8);
    EXPECT_TRUE(seg.payload.size() <= per_packet ||
                seg.payload.size() % per_packet == 0)
        << "payload " << seg.payload.size() << " is not whole packets of "
        << per_packet;
  }
  EXPECT_EQ(h.snd_max(), h.iss() + 1 + PayloadBytes(out));
}

// One chunk per view, so views never merge by adjacency.
std::vector<buffer::PayloadView> Views(buffer::ChunkPool& pool, size_t n,
                                       uint32_t size) {
  std::vector<buffer::PayloadView> v;
  for (size_t i = 0; i < n; ++i) {
    buffer::ChunkRef c = pool.Allocate();
    auto bytes = c->mutable_data();
    for (uint32_t j = 0; j < size; ++j) {
      bytes[j] = static_cast<uint8_t>(i * 31 + j);
    }
    v.emplace_back(std::move(c), 0, size);
  }
  return v;
}

// 40 views of 50 bytes: the wire carried 1,352 bytes while snd_max moved
// by 2,000, and the gap was resent only after a TLP and an RTO.
TEST_P(SegmentSizeTest, ManySmallViewsAllGoOutAtOnce) {
  buffer::ChunkPool pool(64);  // outlives the harness's send queues
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  for (auto& v : Views(pool, 40, 50)) ASSERT_TRUE(s->WriteView(v).ok());
  h.Poll();
  const std::vector<OutSegment> out = h.Take();
  EXPECT_EQ(PayloadBytes(out), 2000u);
  EXPECT_EQ(h.snd_max(), h.iss() + 1 + PayloadBytes(out));
  // Every byte on the wire is the byte written.
  std::vector<uint8_t> got;
  for (const OutSegment& seg : out) {
    got.insert(got.end(), seg.payload.begin(), seg.payload.end());
  }
  ASSERT_EQ(got.size(), 2000u);
  for (size_t i = 0; i < 40; ++i) {
    for (uint32_t j = 0; j < 50; ++j) {
      ASSERT_EQ(got[i * 50 + j], static_cast<uint8_t>(i * 31 + j));
    }
  }
}

// 20 views of 50 bytes, then shutdown: the FIN was never sent, yet the
// socket sat in FIN_WAIT_1.
TEST_P(SegmentSizeTest, FinFollowsTheLastOfManyViews) {
  buffer::ChunkPool pool(64);  // outlives the harness's send queues
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  for (auto& v : Views(pool, 20, 50)) ASSERT_TRUE(s->WriteView(v).ok());
  ASSERT_TRUE(s->Shutdown(false, true).ok());
  h.Poll();
  const std::vector<OutSegment> out = h.Take();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(PayloadBytes(out), 1000u);
  EXPECT_TRUE(out.back().has(kFin));
  EXPECT_EQ(h.snd_max(), h.iss() + 1 + 1000 + 1);
  h.SendAck(h.snd_max());
  EXPECT_EQ(s->state(), TcpState::kFinWait2);
}

// Views too large to coalesce, and more of them than a packet holds: a
// super-segment sends what 16 views cover, the next one the rest, and
// snd_max never runs ahead of the wire.
TEST_P(SegmentSizeTest, SuperSegmentOfMoreViewsThanAPacketHolds) {
  HarnessOptions o = Options();
  o.gso_max_size = 65535;
  buffer::ChunkPool pool(64);  // outlives the harness's send queues
  SegmentHarness h(o);
  PeerSynOptions po;
  po.window = 65535;
  auto s = h.OpenActive(po);
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  for (auto& v : Views(pool, 30, 600)) ASSERT_TRUE(s->WriteView(v).ok());
  h.Poll();
  const std::vector<OutSegment> out = h.Take();
  // 16 views (9,600 bytes) fill the first super-segment, which keeps the
  // whole packets of them; then the rest of what the initial window of 10
  // packets allows.
  ASSERT_GE(out.size(), 2u);
  EXPECT_EQ(out[0].payload.size(), 16u * 600u / mss * mss);
  EXPECT_EQ(PayloadBytes(out), 10u * mss);
  EXPECT_EQ(h.snd_max(), h.iss() + 1 + 10 * mss);
  // Contiguous: each segment starts where the one before ended.
  for (size_t i = 1; i < out.size(); ++i) {
    EXPECT_EQ(out[i].tcp.seq, out[i - 1].end());
  }
}

// Super-segments are sized like Linux's tcp_tso_autosize: about 1 ms of
// data at the pacing rate (cwnd / srtt, x2 in slow start), at least two
// packets, plus gso_max >> (min_rtt_us >> 9). On a 4 ms path with an
// initial window that is a few packets per super-segment, not one burst
// of the whole window that a single queue drop takes together (each
// direction of a lossy path then sees the same loss per frame).
TEST_P(SegmentSizeTest, SuperSegmentsOnASlowPathCarryAboutAMillisecond) {
  HarnessOptions o = Options();
  o.gso_max_size = 65535;
  SegmentHarness h(o);
  PeerSynOptions po;
  po.window = 65535;
  auto s = h.OpenPassive(po, std::nullopt, absl::Milliseconds(4));
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  // The handshake and two round trips: srtt and min_rtt are 4 ms.
  h.WriteAndAck(*s, 100, absl::Milliseconds(4));
  h.WriteAndAck(*s, 100, absl::Milliseconds(4));
  h.Take();
  const uint32_t cwnd = s->Info().cwnd;
  ASSERT_GE(cwnd, 10u);
  ASSERT_TRUE(s->Write(Bytes(cwnd * mss)).ok());
  h.Poll();
  const std::vector<OutSegment> out = h.Take();
  // 2 x cwnd x mss per 4 ms, over 1024: cwnd x mss / 2048 ... per 1 ms,
  // plus 65535 >> 7 = 511 bytes.
  const uint64_t rate = uint64_t{cwnd} * mss * 200 * 10'000 / 4000;
  const uint64_t cap = std::max<uint64_t>((rate >> 10) + (65535 >> 7),
                                          2 * mss) / mss * mss;
  ASSERT_LT(cap, uint64_t{cwnd} * mss);  // the test means something
  ASSERT_GE(out.size(), 2u);
  for (const OutSegment& seg : out) EXPECT_LE(seg.payload.size(), cap);
  EXPECT_EQ(PayloadBytes(out), uint64_t{cwnd} * mss);
}

// Under half a millisecond of min_rtt (a veth, a TAP on this host) the
// super-segments stay whole: the whole window goes out in as few as the
// GSO limit allows.
TEST_P(SegmentSizeTest, SuperSegmentsOnAFastPathStayWhole) {
  HarnessOptions o = Options();
  o.gso_max_size = 65535;
  SegmentHarness h(o);
  PeerSynOptions po;
  po.window = 65535;
  auto s = h.OpenPassive(po, std::nullopt, absl::Microseconds(100));
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  h.WriteAndAck(*s, 100, absl::Microseconds(100));
  h.WriteAndAck(*s, 100, absl::Microseconds(100));
  h.Take();
  const uint32_t cwnd = s->Info().cwnd;
  ASSERT_TRUE(s->Write(Bytes(cwnd * mss)).ok());
  h.Poll();
  const std::vector<OutSegment> out = h.Take();
  ASSERT_FALSE(out.empty());
  EXPECT_GE(out[0].payload.size(), std::min<uint64_t>(
      uint64_t{cwnd} * mss, (65535 - 80) / mss * mss));
}

}  // namespace
}  // namespace netstack::tcp
