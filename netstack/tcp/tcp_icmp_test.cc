// ICMP errors reaching TCP connections (RFC 1122 4.2.3.9, RFC 5927,
// RFC 1191 / RFC 8201), on the fake clock:
//   - while connecting, an unreachable or refused error fails the connect
//     at once (as Linux's tcp_v4_err), instead of after the SYN's
//     retransmissions time out;
//   - an error whose quoted sequence number is not in flight is ignored
//     (a blind attacker's forgery);
//   - fragmentation needed / Packet Too Big lowers the MSS and resends
//     what is in flight in packets that fit;
//   - in a synchronized state an unreachable error is soft: it is what a
//     later timeout reports instead of ETIMEDOUT.
#include <cerrno>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {
namespace {

using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers

class TcpIcmpTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options() const {
    HarnessOptions o;
    o.v6 = GetParam();
    return o;
  }
  bool v6() const { return GetParam(); }
  // Wire type/code of each error for the harness's family.
  uint8_t UnreachType() const { return v6() ? 1 : 3; }
  uint8_t HostUnreachCode() const { return v6() ? 3 : 1; }
  uint8_t PortUnreachCode() const { return v6() ? 4 : 3; }
};

INSTANTIATE_TEST_SUITE_P(V4V6, TcpIcmpTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(TcpIcmpTest, ConnectFailsAtOnceOnHostUnreachable) {
  SegmentHarness h(Options());
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  auto syn = h.Take();
  ASSERT_EQ(syn.size(), 1u);
  h.InjectFrame(h.IcmpErrorFrame(syn[0], UnreachType(), HostUnreachCode()));
  EXPECT_EQ(s->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(s->TakeError()), EHOSTUNREACH);
  EXPECT_EQ(h.tcp().counters().icmp_errors_taken, 1u);
  // No SYN retransmission follows.
  EXPECT_FALSE(h.AdvanceUntilSent(absl::Seconds(10)));
}

TEST_P(TcpIcmpTest, ConnectRefusedByPortUnreachable) {
  SegmentHarness h(Options());
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  auto syn = h.Take();
  ASSERT_EQ(syn.size(), 1u);
  h.InjectFrame(h.IcmpErrorFrame(syn[0], UnreachType(), PortUnreachCode()));
  EXPECT_EQ(transport::ErrnoOf(s->TakeError()), ECONNREFUSED);
}

TEST_P(TcpIcmpTest, AnErrorQuotingASequenceNotInFlightIsIgnored) {
  SegmentHarness h(Options());
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  auto syn = h.Take();
  ASSERT_EQ(syn.size(), 1u);
  h.InjectFrame(h.IcmpErrorFrame(syn[0], UnreachType(), PortUnreachCode(), 0,
                                 syn[0].tcp.seq + 12345));
  EXPECT_EQ(s->state(), TcpState::kSynSent);
  EXPECT_EQ(h.tcp().counters().icmp_errors_ignored, 1u);
}

TEST_P(TcpIcmpTest, PacketTooBigShrinksTheMssAndResendsWhatIsInFlight) {
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  ASSERT_NE(s, nullptr);
  const uint32_t mss = s->Info().mss;
  ASSERT_TRUE(s->Write(Bytes(4 * mss)).ok());
  h.Poll();
  auto sent = h.Take();
  ASSERT_EQ(sent.size(), 4u);
  // IPv4: type 3 code 4 with the next-hop MTU; IPv6: Packet Too Big.
  h.InjectFrame(v6() ? h.IcmpErrorFrame(sent[0], 2, 0, 1280)
                     : h.IcmpErrorFrame(sent[0], 3, 4, 1280));
  const uint32_t want = 1280 - (v6() ? 40 : 20) - 20 - 12;
  EXPECT_EQ(s->Info().mss, want);
  EXPECT_EQ(h.tcp().counters().pmtu_decreases, 1u);
  const auto resent = h.Take();
  ASSERT_FALSE(resent.empty());
  for (const OutSegment& seg : resent) {
    EXPECT_LE(seg.ip_packet_len, 1280u);
  }
  EXPECT_EQ(resent.front().tcp.seq, sent.front().tcp.seq);
  // No congestion response for it.
  EXPECT_EQ(s->Info().fast_retransmits, 0u);
  EXPECT_EQ(s->Info().timeouts, 0u);
}

TEST_P(TcpIcmpTest, ASoftErrorIsWhatATimeoutReports) {
  SegmentHarness h(Options());
  ConnectionOptions co;
  co.max_retransmits = 2;
  auto s = h.OpenActive({}, co);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Write(Bytes(100)).ok());
  h.Poll();
  auto sent = h.Take();
  ASSERT_EQ(sent.size(), 1u);
  h.InjectFrame(h.IcmpErrorFrame(sent[0], UnreachType(), HostUnreachCode()));
  // Still established: routes flap, TCP's own timers decide.
  EXPECT_EQ(s->state(), TcpState::kEstablished);
  h.Advance(absl::Seconds(120));
  EXPECT_EQ(s->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(s->TakeError()), EHOSTUNREACH);
}

}  // namespace
}  // namespace netstack::tcp
