// Segment-level loss-recovery tests on the fake clock: the retransmission
// timer (RFC 6298) and its backoff, giving up (max_retransmits, user
// timeout), NewReno fast retransmit (RFC 5681, RFC 6582), SACK recovery
// (RFC 6675), RACK reordering tolerance and TLP (RFC 8985).
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers


class LossTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options() {
    HarnessOptions o;
    o.v6 = GetParam();
    return o;
  }
  // Sequence number of byte `i` of the stream we send.
  static uint32_t At(const SegmentHarness& h, uint32_t i) {
    return h.iss() + 1 + i;
  }
  uint32_t Seg(const SegmentHarness& h, uint32_t k) const {
    return At(h, k * kMss);
  }
  // Payload per packet: 1448 (v4) or 1428 (v6) with timestamps, 1460 /
  // 1440 without.
  uint32_t kMss = 0;
};

INSTANTIATE_TEST_SUITE_P(V4V6, LossTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(LossTest, RtoBeforeAnyRttSampleIsOneSecondThenDoubles) {
  HarnessOptions ho = Options();
  ho.tcp.connection.max_retransmits = 4;
  SegmentHarness h(ho);
  auto s = h.OpenPassive();  // the final ACK gives no RTT sample
  ASSERT_NE(s, nullptr);
  h.Take();
  ASSERT_TRUE(s->Write(Bytes(1000)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_THAT(h.Take(), ElementsAre(Tcp(Seq(At(h, 0)), PayloadLen(1000))));
  // RFC 6298 2.1: RTO 1 s before a sample; 5.5: doubled at each expiry.
  h.AdvanceTo(t0 + absl::Seconds(15) + absl::Milliseconds(999));
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Seq(At(h, 0)), PayloadLen(1000),
                              SentAt(t0 + absl::Seconds(1))),
                          Tcp(Seq(At(h, 0)), PayloadLen(1000),
                              SentAt(t0 + absl::Seconds(3))),
                          Tcp(Seq(At(h, 0)), PayloadLen(1000),
                              SentAt(t0 + absl::Seconds(7))),
                          Tcp(Seq(At(h, 0)), PayloadLen(1000),
                              SentAt(t0 + absl::Seconds(15)))));
  EXPECT_EQ(s->state(), TcpState::kEstablished);
  EXPECT_EQ(s->Info().timeouts, 4u);
  // The fifth expiry (t0 + 31 s) gives up: ETIMEDOUT.
  h.AdvanceTo(t0 + absl::Seconds(31));
  EXPECT_EQ(s->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(s->TakeError()), ETIMEDOUT);
  EXPECT_EQ(h.tcp().counters().connections_timed_out, 1u);
}

TEST_P(LossTest, RtoFollowsMeasuredRttAndAckRestartsTimer) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  // A 50 ms sample: RTO = max(200 ms, 50 + 4 * 25) = 200 ms.
  h.WriteAndAck(*s, 100, absl::Milliseconds(50));
  ASSERT_THAT(h.Take(), IsEmpty());
  ASSERT_TRUE(s->Write(Bytes(3 * kMss)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_EQ(h.Take().size(), 3u);
  // The first segment is acked 100 ms later: the timer restarts from
  // there (RFC 6298 5.3) for what is still outstanding.
  h.Advance(absl::Milliseconds(100));
  h.SendAck(At(h, 100 + kMss));
  const Instant t1 = h.now();
  h.AdvanceTo(t1 + absl::Seconds(1));
  const auto out = h.Take();
  ASSERT_FALSE(out.empty());
  // With SACK and RACK on, a tail loss probe may come first (RFC 8985);
  // either way the first retransmission is of the oldest outstanding or
  // newest segment and arrives before the RTO from the ACK.
  EXPECT_THAT(out.front(), Tcp(FlagsSet(kAck)));
  EXPECT_LE(out.front().at, t1 + absl::Milliseconds(200));
  // The PTO armed with the burst (2 * SRTT = 100 ms) may fire exactly at
  // the ACK's arrival time.
  EXPECT_GE(out.front().at, t0 + absl::Milliseconds(100));
}

TEST_P(LossTest, TimerRestartedAfterPartialAckWithoutSack) {
  HarnessOptions ho = Options();
  SegmentHarness h(ho);
  PeerSynOptions p;
  p.sack = false;  // no RACK/TLP: only the RTO can recover the tail
  auto s = h.OpenPassive(p);
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  ASSERT_TRUE(s->Write(Bytes(3 * kMss)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_EQ(h.Take().size(), 3u);
  // The first two arrive; the third is lost.
  h.Advance(absl::Milliseconds(100));
  h.SendAck(Seg(h, 2));
  const Instant t1 = h.now();
  // RFC 6298 5.3: the ACK of new data restarts the timer; the third
  // segment is retransmitted one RTO after that ACK.
  ASSERT_TRUE(h.AdvanceUntilSent(absl::Seconds(120)))
      << "no retransmission at all after a partial ACK";
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(Seg(h, 2)), PayloadLen(kMss))));
  EXPECT_GT(h.now(), t0);
  EXPECT_LE(h.now(), t1 + absl::Seconds(1));
}

TEST_P(LossTest, MaxRetransmitsAbortsWithTimedOut) {
  HarnessOptions ho = Options();
  ho.tcp.connection.max_retransmits = 2;
  SegmentHarness h(ho);
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  ASSERT_TRUE(s->Write(Bytes(10)).ok());
  h.Poll();
  const Instant t0 = h.now();
  h.Take();
  h.AdvanceTo(t0 + absl::Seconds(7));
  const auto out = h.Take();
  // Retransmissions at 1 s and 3 s; the third expiry (7 s) aborts.
  ASSERT_GE(out.size(), 2u);
  EXPECT_THAT(out[0], Tcp(PayloadLen(10), SentAt(t0 + absl::Seconds(1))));
  EXPECT_THAT(out[1], Tcp(PayloadLen(10), SentAt(t0 + absl::Seconds(3))));
  EXPECT_EQ(s->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(s->TakeError()), ETIMEDOUT);
}

TEST_P(LossTest, UserTimeoutAbortsOnTime) {
  HarnessOptions ho = Options();
  ho.tcp.connection.user_timeout = absl::Seconds(5);
  SegmentHarness h(ho);
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  ASSERT_TRUE(s->Write(Bytes(10)).ok());
  h.Poll();
  const Instant t0 = h.now();
  h.Take();
  // RFC 5482: data unacknowledged for the user timeout aborts the
  // connection; Linux clamps the RTO so that this happens on time, not at
  // the next backoff expiry (here t0 + 7 s).
  h.AdvanceTo(t0 + absl::Seconds(5));
  EXPECT_EQ(s->state(), TcpState::kClosed);
  h.AdvanceTo(t0 + absl::Seconds(8));
  EXPECT_EQ(s->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(s->TakeError()), ETIMEDOUT);
}

// NewReno (no SACK): RFC 5681 3.2 and RFC 6582.
TEST_P(LossTest, FastRetransmitOnThirdDupAckThenPartialAck) {
  SegmentHarness h(Options());
  PeerSynOptions p;
  p.sack = false;
  auto s = h.OpenPassive(p);
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  ASSERT_FALSE(s->Info().sack);
  ASSERT_TRUE(s->Write(Bytes(10 * kMss)).ok());
  h.Poll();
  const auto burst = h.Take();
  ASSERT_EQ(burst.size(), 10u);  // the initial window
  // Segments 1 and 4 are lost. The ACK of segment 0, then duplicates.
  h.Advance(absl::Milliseconds(10));
  h.SendAck(Seg(h, 1));
  EXPECT_THAT(h.Take(), IsEmpty());
  h.Send(h.Segment());  // dup 1
  EXPECT_THAT(h.Take(), IsEmpty());
  h.Send(h.Segment());  // dup 2
  EXPECT_THAT(h.Take(), IsEmpty()) << "retransmitted before the 3rd dup ACK";
  h.Send(h.Segment());  // dup 3
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Seq(Seg(h, 1)), PayloadLen(kMss))));
  EXPECT_EQ(s->Info().fast_retransmits, 1u);
  // More duplicates (segments 5..9 arriving) send nothing new: there is
  // no new data and the window deflated.
  h.Send(h.Segment());
  h.Send(h.Segment());
  EXPECT_THAT(h.Take(), IsEmpty());
  // The retransmission fills the first hole: a partial ACK up to the
  // second hole (RFC 6582 3.2 step 3) retransmits segment 4 at once.
  h.Advance(absl::Milliseconds(10));
  h.SendAck(Seg(h, 4));
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Seq(Seg(h, 4)), PayloadLen(kMss))));
  // The full ACK ends recovery; nothing else is resent.
  h.Advance(absl::Milliseconds(10));
  h.SendAck(Seg(h, 10));
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_EQ(s->Info().retransmits, 2u);
  EXPECT_EQ(s->Info().timeouts, 0u);
}

TEST_P(LossTest, SackRecoveryRetransmitsExactlyTheHolesLowestFirst) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  ASSERT_TRUE(s->Info().sack);
  ASSERT_TRUE(s->Write(Bytes(10 * kMss)).ok());
  h.Poll();
  ASSERT_EQ(h.Take().size(), 10u);
  h.Advance(absl::Milliseconds(10));
  // Segments 1, 3 and 5 are lost; the peer reports three SACK blocks
  // (as many as fit next to timestamps), the newest first.
  h.peer.ack = Seg(h, 1);
  h.Send(h.Segment().Sack({Block(Seg(h, 6), Seg(h, 10)),
                           Block(Seg(h, 4), Seg(h, 5)),
                           Block(Seg(h, 2), Seg(h, 3))}));
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Seq(Seg(h, 1)), PayloadLen(kMss)),
                          Tcp(Seq(Seg(h, 3)), PayloadLen(kMss)),
                          Tcp(Seq(Seg(h, 5)), PayloadLen(kMss))));
  // Repeating the SACK information resends nothing.
  h.Send(h.Segment().Sack({Block(Seg(h, 6), Seg(h, 10)),
                           Block(Seg(h, 4), Seg(h, 5)),
                           Block(Seg(h, 2), Seg(h, 3))}));
  EXPECT_THAT(h.Take(), IsEmpty());
  h.Advance(absl::Milliseconds(10));
  h.SendAck(Seg(h, 10));
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_EQ(s->Info().retransmits, 3u);
  EXPECT_EQ(s->Info().timeouts, 0u);
}

// RACK (RFC 8985): a segment overtaken by less than the reordering window
// is not retransmitted.
TEST_P(LossTest, RackToleratesReorderingWithinWindow) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  // min RTT 40 ms: the reordering window is min_rtt / 4 = 10 ms.
  h.WriteAndAck(*s, 100, absl::Milliseconds(40));
  ASSERT_TRUE(s->Write(Bytes(4 * kMss)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_EQ(h.Take().size(), 4u);
  // Segment 1 (byte 100 + kMss) is overtaken by segment 2.
  const uint32_t s1 = At(h, 100 + kMss);
  const uint32_t s2 = At(h, 100 + 2 * kMss);
  h.AdvanceTo(t0 + absl::Milliseconds(40));
  h.peer.ack = s1;
  h.Send(h.Segment().Sack({Block(s2, s2 + kMss)}));
  EXPECT_THAT(h.Take(), IsEmpty()) << "retransmitted on the first SACK";
  // 5 ms later (< 10 ms window) segment 1 arrives after all.
  h.AdvanceTo(t0 + absl::Milliseconds(45));
  EXPECT_THAT(h.Take(), IsEmpty());
  h.SendAck(At(h, 100 + 4 * kMss));
  h.AdvanceTo(t0 + absl::Seconds(2));
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_EQ(s->Info().retransmits, 0u);
}

TEST_P(LossTest, RackRetransmitsWhenReorderingWindowExpires) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  h.WriteAndAck(*s, 100, absl::Milliseconds(40));
  ASSERT_TRUE(s->Write(Bytes(4 * kMss)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_EQ(h.Take().size(), 4u);
  const uint32_t s1 = At(h, 100 + kMss);
  const uint32_t s2 = At(h, 100 + 2 * kMss);
  h.AdvanceTo(t0 + absl::Milliseconds(40));
  h.SendAck(s1);
  h.Send(h.Segment().Sack({Block(s2, s2 + kMss)}));
  EXPECT_THAT(h.Take(), IsEmpty());
  // Segment 1 is lost: RACK marks it when RTT + reo_wnd (40 + 10 ms) has
  // passed since it was sent, and resends it then.
  h.AdvanceTo(t0 + absl::Milliseconds(100));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(s1), PayloadLen(kMss),
                                        SentAt(t0 + absl::Milliseconds(50)))));
}

TEST_P(LossTest, RackWithoutReorderingRetransmitsAtDupThresh) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  h.WriteAndAck(*s, 100, absl::Milliseconds(40));
  ASSERT_TRUE(s->Write(Bytes(6 * kMss)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_EQ(h.Take().size(), 6u);
  const uint32_t s0 = At(h, 100);
  // No reordering seen yet: three segments SACKed above a hole make it
  // lost at once (RFC 8985 6.2 step 4: reo_wnd 0; RFC 6675 DupThresh).
  h.AdvanceTo(t0 + absl::Milliseconds(40));
  h.peer.ack = s0;
  h.Send(h.Segment().Sack({Block(s0 + kMss, s0 + 4 * kMss)}));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(s0), PayloadLen(kMss),
                                        SentAt(t0 + absl::Milliseconds(40)))));
}

TEST_P(LossTest, RackOnceReorderingSeenWaitsBeyondDupThresh) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  h.WriteAndAck(*s, 100, absl::Milliseconds(40));
  // Round 1: segment 1 overtaken by segment 2, then delivered: the
  // network reorders.
  ASSERT_TRUE(s->Write(Bytes(3 * kMss)).ok());
  h.Poll();
  ASSERT_EQ(h.Take().size(), 3u);
  h.Advance(absl::Milliseconds(40));
  const uint32_t r1 = At(h, 100 + kMss);
  h.peer.ack = r1;
  h.Send(h.Segment().Sack({Block(r1 + kMss, r1 + 2 * kMss)}));
  h.Advance(absl::Milliseconds(2));
  h.SendAck(At(h, 100 + 3 * kMss));
  ASSERT_THAT(h.Take(), IsEmpty());
  // Round 2: a hole with three segments SACKed above it. Now that
  // reordering was seen, RACK waits RTT + reo_wnd instead of DupThresh.
  ASSERT_TRUE(s->Write(Bytes(6 * kMss)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_EQ(h.Take().size(), 6u);
  const uint32_t q0 = At(h, 100 + 3 * kMss);
  h.AdvanceTo(t0 + absl::Milliseconds(40));
  h.peer.ack = q0;
  h.Send(h.Segment().Sack({Block(q0 + kMss, q0 + 4 * kMss)}));
  EXPECT_THAT(h.Take(), IsEmpty())
      << "retransmitted at DupThresh although reordering was seen";
  // Delivered 5 ms later: never retransmitted.
  h.AdvanceTo(t0 + absl::Milliseconds(45));
  h.SendAck(q0 + 6 * kMss);
  h.AdvanceTo(t0 + absl::Seconds(2));
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_EQ(s->Info().retransmits, 0u);
}

TEST_P(LossTest, TailLossProbeAfterTwoSrtt) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  // SRTT 40 ms.
  h.WriteAndAck(*s, 100, absl::Milliseconds(40));
  ASSERT_TRUE(s->Write(Bytes(4 * kMss)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_EQ(h.Take().size(), 4u);
  // RFC 8985 7.2: PTO = 2 * SRTT (more than one segment in flight); the
  // probe resends the last segment (no new data to send).
  const uint32_t last = At(h, 100 + 3 * kMss);
  h.AdvanceTo(t0 + absl::Milliseconds(80) - absl::Microseconds(1));
  EXPECT_THAT(h.Take(), IsEmpty());
  h.AdvanceTo(t0 + absl::Milliseconds(80));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(last), PayloadLen(kMss),
                                        SentAt(t0 + absl::Milliseconds(80)))));
  EXPECT_EQ(s->Info().tail_loss_probes, 1u);
}

TEST_P(LossTest, TailLossProbeWhenOnlyTheLastAckIsMissing) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  kMss = s->Info().mss;
  h.Take();
  h.WriteAndAck(*s, 100, absl::Milliseconds(40));
  ASSERT_TRUE(s->Write(Bytes(4 * kMss)).ok());
  h.Poll();
  const Instant t0 = h.now();
  ASSERT_EQ(h.Take().size(), 4u);
  // Three of four acked at t0 + 40 ms; the last one's ACK never comes.
  h.AdvanceTo(t0 + absl::Milliseconds(40));
  h.SendAck(At(h, 100 + 3 * kMss));
  const Instant t1 = h.now();
  EXPECT_THAT(h.Take(), IsEmpty());
  // One segment in flight: PTO = 2 * SRTT + max ACK delay (200 ms).
  ASSERT_TRUE(h.AdvanceUntilSent(absl::Seconds(5)))
      << "nothing (no TLP and no RTO) after the last ACK went missing";
  const auto out = h.Take();
  EXPECT_THAT(out, ElementsAre(Tcp(Seq(At(h, 100 + 3 * kMss)),
                                   PayloadLen(kMss))));
  EXPECT_LE(h.now(), t1 + absl::Milliseconds(80 + 200));
  EXPECT_EQ(s->Info().tail_loss_probes, 1u);
}

}  // namespace
}  // namespace netstack::tcp

namespace netstack::tcp {
namespace {

using namespace testing;  // NOLINT: the harness and its matchers

// RFC 8985 7.2: a D-SACK (our retransmission was spurious) marks
// reordering and widens the reordering window, once per round trip.
TEST(DsackSenderTest, DsackWidensTheReorderingWindowOncePerRound) {
  HarnessOptions o;
  SegmentHarness h(o);
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  h.Take();
  h.WriteAndAck(*s, 100, absl::Milliseconds(20));
  const uint32_t una = h.peer.ack;
  ASSERT_TRUE(s->Write(std::vector<uint8_t>(4 * mss, 7)).ok());
  h.Poll();
  h.Take();
  EXPECT_EQ(s->Info().reorder_window_mult, 1u);
  // An ACK for the first segment with a D-SACK for data already acked.
  h.Send(h.Segment().Ack(una + mss).Sack({{una - 100, una}}));
  EXPECT_EQ(s->Info().dsacks_received, 1u);
  EXPECT_EQ(s->Info().reorder_window_mult, 2u);
  // A second D-SACK in the same round trip does not widen it again.
  h.Send(h.Segment().Ack(una + 2 * mss).Sack({{una - 100, una}}));
  EXPECT_EQ(s->Info().dsacks_received, 2u);
  EXPECT_EQ(s->Info().reorder_window_mult, 2u);
}

}  // namespace
}  // namespace netstack::tcp
