// Loss recovery as the review of issue #12 asked for it, on the fake
// clock:
//   - an RTO resends one packet and a TLP the last packet, never a whole
//     super-segment record (RFC 5681 3.1, RFC 8985 7.3);
//   - fast recovery sends in proportion to what is delivered (PRR, RFC
//     6937), from the first ACK on;
//   - a passive open takes its first RTT sample from the handshake;
//   - slow start doubles cwnd per RTT against a GRO receiver that ACKs
//     once per 45 packets;
//   - a spurious RTO is undone (Eifel, RFC 3522), and cwnd restarts after
//     idle (RFC 5681 4.1).
#include <algorithm>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers

uint64_t PayloadBytes(const std::vector<OutSegment>& segs) {
  uint64_t n = 0;
  for (const OutSegment& s : segs) n += s.payload.size();
  return n;
}

class RecoveryTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options(bool gso = true) const {
    HarnessOptions o;
    o.v6 = GetParam();
    if (gso) o.gso_max_size = 65535;
    return o;
  }
};

INSTANTIATE_TEST_SUITE_P(V4V6, RecoveryTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

// "At cwnd 1, 10 MSS went out": the RTO resent the whole 10-packet
// super-segment record.
TEST_P(RecoveryTest, RtoResendsOnePacketThenSlowStartClocksOutTheRest) {
  SegmentHarness h(Options());
  ConnectionOptions co;
  co.rack = false;  // no TLP: the first retransmission is the RTO's
  auto s = h.OpenActive({}, co);
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  const uint32_t una = h.iss() + 1;
  ASSERT_TRUE(s->Write(Bytes(10 * mss)).ok());
  h.Poll();
  ASSERT_THAT(h.Take(), ElementsAre(Tcp(Seq(una), PayloadLen(10 * mss))));
  ASSERT_TRUE(h.AdvanceUntilSent());
  EXPECT_EQ(s->Info().timeouts, 1u);
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(una), PayloadLen(mss))));
  // The ACK of that packet: cwnd 2, so two more packets, not the rest.
  h.SendAck(una + mss);
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(una + mss), PayloadLen(2 * mss))));
}

// A receiver may drop data it has SACKed (RFC 2018 section 8), and a
// forged SACK block may claim bytes that never arrived. When the RTO
// finds the bytes at SND.UNA marked SACKed, the SACKs were not true:
// forget them all and resend from SND.UNA (Linux: tcp_timeout_mark_lost).
// Keeping them, the RTO found nothing to resend and the connection hung
// at each backed-off RTO (tcp_conn_reorder_fuzzer found it: a forged
// SACK edge, then reordering, stalled a transfer for the whole 300 s).
TEST_P(RecoveryTest, RtoForgetsSacksWhenTheFirstBytesWereSacked) {
  SegmentHarness h(Options(/*gso=*/false));
  ConnectionOptions co;
  co.rack = false;  // no TLP: the first retransmission is the RTO's
  auto s = h.OpenActive({}, co);
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  const uint32_t una = h.iss() + 1;
  ASSERT_TRUE(s->Write(Bytes(4 * mss)).ok());
  h.Poll();
  ASSERT_EQ(PayloadBytes(h.Take()), 4u * mss);
  // A duplicate ACK whose SACK block covers everything sent.
  h.Send(h.Segment().Ack(una).Sack({Block(una, una + 4 * mss)}));
  h.Take();
  ASSERT_EQ(s->Info().sacked_bytes, 4u * mss);
  for (int rto = 1; rto <= 2; ++rto) {
    ASSERT_TRUE(h.AdvanceUntilSent()) << "RTO " << rto << " sent nothing";
    EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(una), PayloadLen(mss))))
        << "RTO " << rto;
  }
  EXPECT_EQ(s->Info().sacked_bytes, 0u);
  EXPECT_EQ(h.tcp().counters().sack_reneging, 1u);
  // The ACKs that follow clock out the rest.
  h.SendAck(una + mss);
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(una + mss), PayloadLen(mss)),
                                    Tcp(Seq(una + 2 * mss), PayloadLen(mss))));
}

// A TLP resent the whole last record; it must resend its last packet.
TEST_P(RecoveryTest, TailLossProbeResendsOnlyTheLastPacket) {
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  h.WriteAndAck(*s, 100, absl::Milliseconds(10));  // an RTT sample
  h.Take();
  const uint32_t start = h.iss() + 1 + 100;
  ASSERT_TRUE(s->Write(Bytes(10 * mss)).ok());
  h.Poll();
  ASSERT_EQ(PayloadBytes(h.Take()), 10u * mss);
  ASSERT_TRUE(h.AdvanceUntilSent());
  EXPECT_EQ(s->Info().tail_loss_probes, 1u);
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Seq(start + 9 * mss), PayloadLen(mss))));
}

// RFC 6937: in recovery, new data goes out in proportion to what each ACK
// delivers (about ssthresh / flight per packet), starting at once; RFC
// 6675's pipe rule sent nothing until the pipe fell below cwnd, then a
// packet per ACK.
TEST_P(RecoveryTest, PrrSendsInProportionFromTheFirstAck) {
  SegmentHarness h(Options(/*gso=*/false));
  ConnectionOptions co;
  co.initial_cwnd = 20;
  co.congestion = CongestionAlgorithm::kNewReno;  // ssthresh = flight / 2
  auto s = h.OpenActive({}, co);
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  h.WriteAndAck(*s, 100, absl::Milliseconds(10));
  h.Take();
  const uint32_t base = h.iss() + 1 + 100;
  ASSERT_TRUE(s->Write(Bytes(60 * mss)).ok());
  h.Poll();
  const std::vector<OutSegment> first = h.Take();
  const uint32_t flight = static_cast<uint32_t>(first.size());
  ASSERT_GE(flight, 20u);
  h.Advance(absl::Milliseconds(10));
  // Packet 0 is lost; packets 1.. arrive and are SACKed one ACK each.
  std::vector<size_t> sent_after;
  for (uint32_t k = 1; k < flight; ++k) {
    h.Send(h.Segment().Ack(base).Sack({Block(base + mss, base + (k + 1) * mss)}));
    sent_after.push_back(h.Take().size());
  }
  ASSERT_GE(s->Info().fast_retransmits, 1u);
  // Find the ACK that started recovery (its answer holds the
  // retransmission); over the next four ACKs PRR sends about two packets.
  size_t start = 0;
  while (start < sent_after.size() && sent_after[start] == 0) ++start;
  ASSERT_LT(start + 4, sent_after.size());
  size_t next_four = 0;
  for (size_t i = start + 1; i <= start + 4; ++i) next_four += sent_after[i];
  EXPECT_GE(next_four, 1u);
  EXPECT_LE(next_four, 3u);
  // In all, recovery sends about half of what was delivered (ssthresh is
  // half the flight), plus the retransmission, not a burst.
  size_t total = 0;
  for (size_t i = start; i < sent_after.size(); ++i) total += sent_after[i];
  const size_t delivered = sent_after.size() - start;
  EXPECT_LE(total, delivered / 2 + 3);
  EXPECT_GE(total + 2, delivered / 2);
}

// Every guest-initiated flow is a passive open: with no RTT sample from
// the handshake, srtt stayed 0 and the RTO 1 s until the first data ACK,
// and TLP and RACK were off.
TEST_P(RecoveryTest, PassiveOpenSamplesTheHandshakeRtt) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive({}, std::nullopt, absl::Milliseconds(30));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Info().rtt, absl::Milliseconds(30));
  EXPECT_LT(s->Info().rto, absl::Seconds(1));
  ASSERT_TRUE(s->Write(Bytes(1000)).ok());
  h.Poll();
  const Instant sent = h.now();
  h.Take();
  // The first retransmission is a tail-loss probe after about 2 * srtt
  // plus the delayed-ACK allowance, well before a 1 s RTO.
  ASSERT_TRUE(h.AdvanceUntilSent());
  EXPECT_EQ(s->Info().tail_loss_probes, 1u);
  EXPECT_LT(h.now() - sent, absl::Milliseconds(500));
}

// A GRO receiver ACKs once per 64 KiB frame (~45 packets). With RFC 3465's
// L = 2 limit cwnd grew by two per ACK, ~4% per RTT; counting what each
// ACK covers doubles it per RTT (Linux tcp_slow_start).
TEST_P(RecoveryTest, SlowStartDoublesPerRttAgainstAGroReceiver) {
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  ASSERT_TRUE(s->Write(Bytes(4 << 20)).ok());
  h.Poll();
  const Duration rtt = absl::Milliseconds(10);
  uint32_t acked = h.iss() + 1;
  std::vector<uint32_t> cwnd_per_rtt = {s->Info().cwnd};
  for (int round = 0; round < 4; ++round) {
    const std::vector<OutSegment> flight = h.Take();
    ASSERT_FALSE(flight.empty());
    h.Advance(rtt);
    // One ACK per 45 packets received, as a GRO receiver sends them.
    const uint32_t end = flight.back().end();
    while (acked != end) {
      acked = std::min<uint32_t>(acked + 45 * mss, end);
      h.SendAck(acked);
    }
    cwnd_per_rtt.push_back(s->Info().cwnd);
  }
  EXPECT_THAT(cwnd_per_rtt, ElementsAre(10u, 20u, 40u, 80u, 160u));
}

// An RTO whose original arrives after all (the ACK echoes the original's
// TSval, older than the retransmission's): undo cwnd and ssthresh.
TEST_P(RecoveryTest, SpuriousRtoIsUndoneByTimestamps) {
  SegmentHarness h(Options());
  ConnectionOptions co;
  co.rack = false;
  auto s = h.OpenActive({}, co);
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  h.WriteAndAck(*s, 100, absl::Milliseconds(10));
  h.Take();
  const uint32_t cwnd = s->Info().cwnd;
  const uint32_t ssthresh = s->Info().ssthresh;
  ASSERT_TRUE(s->Write(Bytes(4 * mss)).ok());
  h.Poll();
  const std::vector<OutSegment> orig = h.Take();
  ASSERT_EQ(orig.size(), 1u);
  ASSERT_TRUE(orig[0].tcp.timestamps.has_value());
  const uint32_t orig_tsval = orig[0].tcp.timestamps->tsval;
  h.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(h.AdvanceUntilSent());  // the RTO
  ASSERT_EQ(s->Info().timeouts, 1u);
  ASSERT_EQ(s->Info().cwnd, 1u);
  h.Take();
  // The original was only delayed: its ACK echoes its own TSval.
  h.Send(h.Segment()
             .Ack(orig[0].end())
             .Timestamps(h.PeerTsval(), orig_tsval));
  EXPECT_EQ(s->Info().cwnd, cwnd);
  EXPECT_EQ(s->Info().ssthresh, ssthresh);
}

// RFC 5681 4.1: after an idle period longer than the RTO the window
// restarts from the initial window; a full cwnd burst went out instead.
TEST_P(RecoveryTest, CwndRestartsAfterIdle) {
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  for (int i = 0; i < 4; ++i) {
    h.WriteAndAck(*s, 40 * mss, absl::Milliseconds(10));
  }
  h.Take();
  ASSERT_GE(s->Info().cwnd, 40u);
  h.Advance(absl::Seconds(5));
  ASSERT_TRUE(s->Write(Bytes(40 * mss)).ok());
  h.Poll();
  EXPECT_LE(PayloadBytes(h.Take()), 10u * mss);
}

}  // namespace
}  // namespace netstack::tcp
