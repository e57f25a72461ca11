// Segment-level connection-end tests: FIN exchange, half-close in both
// directions, simultaneous close (CLOSING), TIME_WAIT (2 MSL, RFC 1337,
// FIN retransmissions, RFC 6191 reuse), and keepalive (RFC 1122 4.2.3.6).
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/stack/counters.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers
using stack::DropReason;

constexpr Duration kMsl = absl::Seconds(30);  // ConnectionOptions default

class CloseTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options() {
    HarnessOptions o;
    o.v6 = GetParam();
    return o;
  }
  // Establishes (active open) and leaves una_ at our next sequence.
  void Open(const HarnessOptions& o) {
    h_ = std::make_unique<SegmentHarness>(o);
    sock_ = h_->OpenActive();
    una_ = h_->iss() + 1;
  }
  // We shut down writing; the FIN goes out and the peer acks it:
  // FIN_WAIT_2.
  void CloseOurSide() {
    ASSERT_TRUE(sock_->Shutdown(false, true).ok());
    h().Poll();
    ASSERT_THAT(h().Take(), ElementsAre(Tcp(Flags(kFin | kAck), Seq(una_))));
    h().SendAck(una_ + 1);
    ASSERT_EQ(sock_->state(), TcpState::kFinWait2);
  }
  // The peer's FIN, acked: TIME_WAIT (after CloseOurSide).
  void PeerFin() {
    h().Send(h().Segment().Flags(kFin | kAck));
    h().peer.seq += 1;
    ASSERT_THAT(h().Take(),
                ElementsAre(Tcp(Flags(kAck), Seq(una_ + 1), Ack(h().peer.seq))));
  }
  SegmentHarness& h() { return *h_; }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> sock_;
  uint32_t una_ = 0;
};

INSTANTIATE_TEST_SUITE_P(V4V6, CloseTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(CloseTest, TimeWaitLastsTwoMsl) {
  Open(Options());
  CloseOurSide();
  PeerFin();
  const Instant t0 = h().now();
  EXPECT_EQ(sock_->state(), TcpState::kTimeWait);
  h().AdvanceTo(t0 + 2 * kMsl - absl::Milliseconds(1));
  EXPECT_EQ(sock_->state(), TcpState::kTimeWait);
  h().AdvanceTo(t0 + 2 * kMsl);
  EXPECT_EQ(sock_->state(), TcpState::kClosed);
  EXPECT_THAT(h().Take(), IsEmpty());
}

TEST_P(CloseTest, RstDoesNotEndTimeWait) {
  Open(Options());
  CloseOurSide();
  PeerFin();
  const Instant t0 = h().now();
  // RFC 1337: TIME_WAIT assassination is ignored, exact sequence or not.
  h().Send(h().Segment().Flags(kRst));
  h().Send(h().Segment().Flags(kRst | kAck));
  EXPECT_EQ(sock_->state(), TcpState::kTimeWait);
  EXPECT_THAT(h().Take(), IsEmpty());
  EXPECT_EQ(h().Drops(DropReason::kTcpTimeWait), 2u);
  h().AdvanceTo(t0 + 2 * kMsl);
  EXPECT_EQ(sock_->state(), TcpState::kClosed);
}

TEST_P(CloseTest, RetransmittedFinInTimeWaitIsAckedAndRestartsTimer) {
  Open(Options());
  CloseOurSide();
  PeerFin();
  const Instant t0 = h().now();
  h().AdvanceTo(t0 + absl::Seconds(10));
  // Our ACK of the FIN was lost: the peer sends its FIN again.
  h().Send(h().Segment().Seq(h().peer.seq - 1).Flags(kFin | kAck));
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Seq(una_ + 1), Ack(h().peer.seq))));
  const Instant t1 = h().now();
  h().AdvanceTo(t0 + 2 * kMsl);
  EXPECT_EQ(sock_->state(), TcpState::kTimeWait) << "2 MSL not restarted";
  h().AdvanceTo(t1 + 2 * kMsl);
  EXPECT_EQ(sock_->state(), TcpState::kClosed);
}

TEST_P(CloseTest, NewerSynReusesTimeWaitTuple) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();  // the harness keeps the listener
  ASSERT_NE(s, nullptr);
  h.Take();
  const uint32_t una = h.iss() + 1;
  // We close first and so hold TIME_WAIT.
  ASSERT_TRUE(s->Shutdown(false, true).ok());
  h.Poll();
  ASSERT_THAT(h.Take(), ElementsAre(Tcp(Flags(kFin | kAck), Seq(una))));
  h.peer.ack = una + 1;
  h.Send(h.Segment().Flags(kFin | kAck));
  h.peer.seq += 1;
  ASSERT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq))));
  ASSERT_EQ(s->state(), TcpState::kTimeWait);
  h.Advance(absl::Seconds(1));
  // An old SYN (older timestamp) does not reuse it: it gets an ACK.
  PeerSynOptions p;
  h.Send(h.Syn(p).Seq(h.peer.seq + 1000).Timestamps(1, 0));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq))));
  EXPECT_EQ(s->state(), TcpState::kTimeWait);
  // RFC 6191: a SYN with a newer timestamp (and sequence) reuses the tuple.
  const uint32_t new_isn = h.peer.seq + 100000;
  h.Send(h.Syn(p).Seq(new_isn));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kSyn | kAck), Ack(new_isn + 1))));
  EXPECT_EQ(h.tcp().counters().time_wait_recycled, 1u);
  // Complete the new handshake: a fresh connection to accept.
  h.Send(h.Segment().Seq(new_isn + 1).Ack(h.snd_max()));
  auto a = h.listener()->Accept();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->state(), TcpState::kEstablished);
}

TEST_P(CloseTest, SimultaneousCloseGoesThroughClosing) {
  Open(Options());
  ASSERT_TRUE(sock_->Shutdown(false, true).ok());
  h().Poll();
  ASSERT_THAT(h().Take(), ElementsAre(Tcp(Flags(kFin | kAck), Seq(una_))));
  EXPECT_EQ(sock_->state(), TcpState::kFinWait1);
  // The peer's FIN crosses ours: it does not ack our FIN.
  h().Send(h().Segment().Flags(kFin | kAck));
  h().peer.seq += 1;
  EXPECT_EQ(sock_->state(), TcpState::kClosing);
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Seq(una_ + 1), Ack(h().peer.seq))));
  // Its ACK of our FIN: TIME_WAIT.
  h().SendAck(una_ + 1);
  EXPECT_EQ(sock_->state(), TcpState::kTimeWait);
  EXPECT_THAT(h().Take(), IsEmpty());
  h().Advance(2 * kMsl);
  EXPECT_EQ(sock_->state(), TcpState::kClosed);
}

TEST_P(CloseTest, PeerHalfCloseWeKeepSending) {
  Open(Options());
  h().SendData(300);
  ASSERT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq))));
  h().Send(h().Segment().Flags(kFin | kAck));
  h().peer.seq += 1;
  EXPECT_EQ(sock_->state(), TcpState::kCloseWait);
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq))));
  std::vector<uint8_t> buf(1000);
  auto r = sock_->Read(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 300u);
  r = sock_->Read(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u) << "no end of stream after the FIN";
  // We still send, and the peer still acks.
  auto w = sock_->Write(Bytes(500));
  ASSERT_TRUE(w.ok());
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Seq(una_), PayloadLen(500),
                                          Ack(h().peer.seq))));
  h().SendAck(una_ + 500);
  // Our FIN: LAST_ACK, then CLOSED when it is acked.
  ASSERT_TRUE(sock_->Shutdown(false, true).ok());
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kFin | kAck), Seq(una_ + 500))));
  EXPECT_EQ(sock_->state(), TcpState::kLastAck);
  h().SendAck(una_ + 501);
  EXPECT_EQ(sock_->state(), TcpState::kClosed);
  EXPECT_THAT(h().Take(), IsEmpty());
}

TEST_P(CloseTest, OurHalfClosePeerKeepsSending) {
  Open(Options());
  CloseOurSide();
  // FIN_WAIT_2: the peer's data is still accepted and acked.
  for (int i = 0; i < 4; ++i) h().SendData(1000);
  h().Advance(absl::Milliseconds(100));
  const auto out = h().Take();
  ASSERT_FALSE(out.empty());
  EXPECT_THAT(out.back(), Tcp(Flags(kAck), Ack(h().peer.seq), Seq(una_ + 1)));
  EXPECT_EQ(sock_->readable_bytes(), 4000u);
  // Writing after SHUT_WR fails.
  EXPECT_FALSE(sock_->Write(Bytes(10)).ok());
  PeerFin();
  EXPECT_EQ(sock_->state(), TcpState::kTimeWait);
}

TEST_P(CloseTest, FinAfterDataIsSentWithTheLastSegment) {
  Open(Options());
  ASSERT_TRUE(sock_->Write(Bytes(100)).ok());
  ASSERT_TRUE(sock_->Shutdown(false, true).ok());
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kFin | kAck | kPsh), Seq(una_),
                                          PayloadLen(100))));
}

class KeepaliveTest : public CloseTest {
 protected:
  // Keepalive on: probes after 10 s idle, every 2 s, three of them.
  HarnessOptions KeepaliveOptions() {
    HarnessOptions o = Options();
    o.tcp.connection.keepalive = true;
    o.tcp.connection.keepalive_idle = absl::Seconds(10);
    o.tcp.connection.keepalive_interval = absl::Seconds(2);
    o.tcp.connection.keepalive_probes = 3;
    return o;
  }
};
INSTANTIATE_TEST_SUITE_P(V4V6, KeepaliveTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(KeepaliveTest, ProbesAfterIdleThenAbort) {
  const HarnessOptions o = KeepaliveOptions();
  Open(o);
  const Instant t0 = h().now();
  h().AdvanceTo(t0 + absl::Seconds(15));
  // SEG.SEQ = SND.NXT - 1, no data (RFC 1122 4.2.3.6).
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Seq(una_ - 1), PayloadLen(0),
                              Ack(h().peer.seq), SentAt(t0 + absl::Seconds(10))),
                          Tcp(Flags(kAck), Seq(una_ - 1),
                              SentAt(t0 + absl::Seconds(12))),
                          Tcp(Flags(kAck), Seq(una_ - 1),
                              SentAt(t0 + absl::Seconds(14)))));
  EXPECT_EQ(sock_->state(), TcpState::kEstablished);
  // No answer to three probes: the connection is dropped.
  h().AdvanceTo(t0 + absl::Seconds(16));
  EXPECT_EQ(sock_->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(sock_->TakeError()), ETIMEDOUT);
}

TEST_P(KeepaliveTest, AnswerResetsProbing) {
  const HarnessOptions o = KeepaliveOptions();
  Open(o);
  const Instant t0 = h().now();
  h().AdvanceTo(t0 + absl::Seconds(10));
  ASSERT_THAT(h().Take(), ElementsAre(Tcp(Seq(una_ - 1))));
  // The peer answers the probe (an ACK of SND.UNA).
  h().Advance(absl::Seconds(1));
  h().Send(h().Segment());
  const Instant t1 = h().now();
  // Idle starts over from the answer: the next probe at t1 + 10 s.
  h().AdvanceTo(t1 + absl::Seconds(10) - absl::Milliseconds(1));
  EXPECT_THAT(h().Take(), IsEmpty());
  h().AdvanceTo(t1 + absl::Seconds(10));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Seq(una_ - 1),
                                          SentAt(t1 + absl::Seconds(10)))));
  EXPECT_EQ(sock_->state(), TcpState::kEstablished);
}

TEST_P(KeepaliveTest, DataResetsIdleTimer) {
  const HarnessOptions o = KeepaliveOptions();
  Open(o);
  const Instant t0 = h().now();
  h().AdvanceTo(t0 + absl::Seconds(8));
  h().SendData(10);
  h().AdvanceTo(t0 + absl::Seconds(17));
  // Only the delayed ACK of the data; no probe before t0 + 18 s.
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(PayloadLen(0), Ack(h().peer.seq),
                                          Seq(una_))));
  h().AdvanceTo(t0 + absl::Seconds(18));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Seq(una_ - 1))));
}

// Our half-close (SHUT_WR) with keepalive on: FIN_WAIT_2 shares the
// keepalive timer with the orphan timeout, and a socket still attached
// must get keepalive probes there, not the orphan's RST. (It got the RST:
// netstackd --tcp-guest-timeout ended every flow whose host closed its
// side first one idle time later, while the guest still sent; found by
// tcp_flows_fuzzer.)
TEST_P(KeepaliveTest, HalfClosedSocketIsProbedNotReset) {
  const HarnessOptions o = KeepaliveOptions();
  Open(o);
  CloseOurSide();  // FIN sent and acked: FIN_WAIT_2, still attached
  ASSERT_EQ(sock_->state(), TcpState::kFinWait2);
  const Instant t0 = h().now();
  h().AdvanceTo(t0 + absl::Seconds(10));
  // A probe (SND.NXT - 1 is our FIN's sequence), not an RST.
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Seq(una_),
                                          PayloadLen(0))));
  EXPECT_EQ(sock_->state(), TcpState::kFinWait2);
  // The peer answers and goes on sending: the connection stays.
  h().Send(h().Segment());
  h().AdvanceTo(t0 + absl::Seconds(15));
  h().SendData(100);
  h().AdvanceTo(t0 + absl::Seconds(20));
  EXPECT_EQ(sock_->state(), TcpState::kFinWait2);
  std::vector<uint8_t> buf(200);
  auto r = sock_->Read(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 100u);
  // Once the application closes it, it is an orphan: the FIN_WAIT_2
  // timeout applies (2 MSL here) and ends it with an RST.
  sock_->Close();
  (void)h().Take();
  h().Advance(2 * o.tcp.connection.msl + absl::Seconds(1));
  const auto out = h().Take();
  ASSERT_FALSE(out.empty());
  EXPECT_THAT(out.back(), Tcp(Flags(kRst | kAck)));
}

}  // namespace
}  // namespace netstack::tcp

namespace netstack::tcp {
namespace {

// What an embedder waits for before exiting: unacknowledged data, then an
// unacknowledged FIN, count as pending output; FIN_WAIT_2 and TIME_WAIT
// do not.
TEST_P(CloseTest, PendingOutputUntilDataAndFinAreAcked) {
  Open(Options());
  EXPECT_EQ(h().tcp().ConnectionsWithPendingOutput(), 0u);
  const uint8_t data[100] = {};
  ASSERT_TRUE(sock_->Write(data).ok());
  h().Poll();
  (void)h().Take();
  EXPECT_EQ(h().tcp().ConnectionsWithPendingOutput(), 1u);
  h().SendAck(una_ + 100);
  una_ += 100;
  EXPECT_EQ(h().tcp().ConnectionsWithPendingOutput(), 0u);
  ASSERT_TRUE(sock_->Shutdown(false, true).ok());
  h().Poll();
  (void)h().Take();
  EXPECT_EQ(sock_->state(), TcpState::kFinWait1);
  EXPECT_EQ(h().tcp().ConnectionsWithPendingOutput(), 1u);
  h().SendAck(una_ + 1);
  EXPECT_EQ(sock_->state(), TcpState::kFinWait2);
  EXPECT_EQ(h().tcp().ConnectionsWithPendingOutput(), 0u);
}

}  // namespace
}  // namespace netstack::tcp
