// Segment-level reset tests: RST in every state (RFC 9293 3.10.7.4 with
// RFC 5961 3.2: only an exact sequence number resets, the rest of the
// window gets a challenge ACK, outside it nothing), and the resets sent for
// segments that reach no connection (RFC 9293 3.10.7.1).
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

class RstTest : public ::testing::TestWithParam<bool> {
 protected:
  void Open() {
    HarnessOptions o;
    o.v6 = GetParam();
    h_ = std::make_unique<SegmentHarness>(o);
    sock_ = h_->OpenActive();
    una_ = h_->iss() + 1;
  }
  // A RST at exactly RCV.NXT resets: no answer, ECONNRESET, CLOSED.
  void ExpectExactRstResets() {
    h().Send(h().Segment().Flags(kRst | kAck));
    EXPECT_THAT(h().Take(), IsEmpty());
    EXPECT_EQ(sock_->state(), TcpState::kClosed);
    EXPECT_EQ(h().tcp().counters().resets_received, 1u);
  }
  SegmentHarness& h() { return *h_; }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> sock_;
  uint32_t una_ = 0;
};

INSTANTIATE_TEST_SUITE_P(V4V6, RstTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(RstTest, SynReceivedResetForgetsTheConnection) {
  HarnessOptions o;
  o.v6 = GetParam();
  SegmentHarness h(o);
  auto l = h.tcp().Open(h.family());
  ASSERT_TRUE(l->Bind(h.our_address()).ok());
  ASSERT_TRUE(l->Listen(4).ok());
  h.Send(h.Syn());
  ASSERT_THAT(h.Take(), ElementsAre(Tcp(Flags(kSyn | kAck))));
  h.peer.seq += 1;
  h.Send(h.Segment().Flags(kRst));
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_TRUE(transport::IsWouldBlock(l->Accept().status()));
  // No SYN-ACK retransmissions afterwards.
  h.Advance(absl::Seconds(10));
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_EQ(h.tcp().connection_count(), 0u);
}

TEST_P(RstTest, EstablishedExactSequenceResets) {
  Open();
  ExpectExactRstResets();
  EXPECT_EQ(transport::ErrnoOf(sock_->TakeError()), ECONNRESET);
}

// Once a write took the reset, a read must not look like the peer's FIN:
// a relay (the backend) would pass a reset on as a clean end of stream.
TEST_P(RstTest, ReadAfterTheResetWasTakenIsAnErrorNotEndOfStream) {
  Open();
  ExpectExactRstResets();
  const uint8_t byte = 1;
  EXPECT_EQ(transport::ErrnoOf(sock_->Write({&byte, 1}).status()), ECONNRESET);
  uint8_t buf[16];
  auto r = sock_->Read(buf);
  ASSERT_FALSE(r.ok()) << "read returned " << *r;
  EXPECT_EQ(transport::ErrnoOf(r.status()), ECONNABORTED);
  buffer::PayloadView views[4];
  size_t n = 0;
  auto rv = sock_->ReadViews(views, 1024, &n);
  ASSERT_FALSE(rv.ok()) << "ReadViews returned " << *rv;
  EXPECT_EQ(transport::ErrnoOf(rv.status()), ECONNABORTED);
}

TEST_P(RstTest, EstablishedInWindowRstGetsChallengeAck) {
  Open();
  h().Send(h().Segment().Flags(kRst).Seq(h().peer.seq + 1000));
  // RFC 5961 3.2: <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>.
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Seq(una_),
                                          Ack(h().peer.seq), PayloadLen(0))));
  EXPECT_EQ(sock_->state(), TcpState::kEstablished);
  EXPECT_EQ(h().tcp().counters().challenge_acks, 1u);
  EXPECT_EQ(h().Drops(DropReason::kTcpChallengeAck), 1u);
  // The connection still works.
  h().SendData(10);
  EXPECT_EQ(sock_->readable_bytes(), 10u);
}

TEST_P(RstTest, EstablishedOutOfWindowRstIgnored) {
  Open();
  h().Send(h().Segment().Flags(kRst).Seq(h().peer.seq + (1u << 30)));
  h().Send(h().Segment().Flags(kRst).Seq(h().peer.seq - 10));
  EXPECT_THAT(h().Take(), IsEmpty());
  EXPECT_EQ(sock_->state(), TcpState::kEstablished);
  EXPECT_EQ(h().Drops(DropReason::kTcpOutOfWindow), 2u);
}

TEST_P(RstTest, EstablishedSynGetsChallengeAck) {
  Open();
  // RFC 5961 4.2: a SYN in a synchronized state, any sequence number.
  h().Send(h().Syn().Seq(h().peer.seq + 5));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Seq(una_),
                                          Ack(h().peer.seq))));
  EXPECT_EQ(sock_->state(), TcpState::kEstablished);
}

TEST_P(RstTest, FinWait1) {
  Open();
  ASSERT_TRUE(sock_->Shutdown(false, true).ok());
  h().Poll();
  ASSERT_THAT(h().Take(), ElementsAre(Tcp(FlagsSet(kFin))));
  ASSERT_EQ(sock_->state(), TcpState::kFinWait1);
  ExpectExactRstResets();
}

TEST_P(RstTest, FinWait2) {
  Open();
  ASSERT_TRUE(sock_->Shutdown(false, true).ok());
  h().Poll();
  h().Take();
  h().SendAck(una_ + 1);
  ASSERT_EQ(sock_->state(), TcpState::kFinWait2);
  // In window, not exact: challenge ACK; exact: reset.
  h().Send(h().Segment().Flags(kRst).Seq(h().peer.seq + 10));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Seq(una_ + 1))));
  ExpectExactRstResets();
}

TEST_P(RstTest, CloseWait) {
  Open();
  h().Send(h().Segment().Flags(kFin | kAck));
  h().peer.seq += 1;
  h().Take();
  ASSERT_EQ(sock_->state(), TcpState::kCloseWait);
  ExpectExactRstResets();
}

TEST_P(RstTest, Closing) {
  Open();
  ASSERT_TRUE(sock_->Shutdown(false, true).ok());
  h().Poll();
  h().Take();
  h().Send(h().Segment().Flags(kFin | kAck));
  h().peer.seq += 1;
  h().Take();
  ASSERT_EQ(sock_->state(), TcpState::kClosing);
  ExpectExactRstResets();
}

TEST_P(RstTest, LastAck) {
  Open();
  h().Send(h().Segment().Flags(kFin | kAck));
  h().peer.seq += 1;
  ASSERT_TRUE(sock_->Shutdown(false, true).ok());
  h().Poll();
  h().Take();
  ASSERT_EQ(sock_->state(), TcpState::kLastAck);
  ExpectExactRstResets();
}

TEST_P(RstTest, AbortSendsRst) {
  Open();
  h().SendData(10);  // unread data: Close() aborts (RFC 2525 2.17)
  h().Take();
  sock_->Close();
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kRst | kAck), Seq(una_),
                                          Ack(h().peer.seq))));
}

TEST_P(RstTest, ClosedPortSynGetsRstAck) {
  HarnessOptions o;
  o.v6 = GetParam();
  SegmentHarness h(o);
  // RFC 9293 3.10.7.1, no ACK bit: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><RST,ACK>.
  h.Send(h.Syn());
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kRst | kAck), Seq(0),
                                        Ack(SegmentHarness::kPeerIsn + 1),
                                        ChecksumOk())));
  // With data (and FIN): SEG.LEN counts them.
  h.Send(h.Segment().Flags(kSyn).Seq(100).Data(20));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kRst | kAck), Seq(0),
                                        Ack(100 + 1 + 20))));
  EXPECT_EQ(h.Drops(DropReason::kTcpNoListener), 2u);
}

TEST_P(RstTest, ClosedPortAckGetsRstFromItsAck) {
  HarnessOptions o;
  o.v6 = GetParam();
  SegmentHarness h(o);
  // ACK bit on: <SEQ=SEG.ACK><CTL=RST>.
  h.Send(h.Segment().Ack(123456).Data(10));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kRst), Seq(123456))));
  // A RST is never answered.
  h.Send(h.Segment().Flags(kRst | kAck).Ack(5));
  EXPECT_THAT(h.Take(), IsEmpty());
}

}  // namespace
}  // namespace netstack::tcp
