// SynHandler: a SYN that reaches no listener is held (no answer) until
// the handler accepts it (SYN-ACK, options negotiated from the SYN) or
// refuses it (RST, ICMP unreachable, or silence). Retransmitted SYNs of a
// held tuple never reach the handler again.
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/transport/errors.h"
#include "netstack/wire/bytes.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers

class Holder : public SynHandler {
 public:
  SynVerdict OnUnclaimedSyn(const transport::FourTuple& t, Instant) override {
    seen.push_back(t);
    return verdict;
  }
  SynVerdict verdict = SynVerdict::kHold;
  std::vector<transport::FourTuple> seen;
};

class HeldSynTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options() {
    HarnessOptions o;
    o.v6 = GetParam();
    o.tcp.max_half_open = 2;
    return o;
  }
  transport::FourTuple Tuple(const SegmentHarness& h,
                             uint16_t peer_port = SegmentHarness::kPeerPort) {
    return {h.our_address(), {h.peer_ip(), peer_port}};
  }
};

INSTANTIATE_TEST_SUITE_P(V4V6, HeldSynTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(HeldSynTest, HeldSynGetsNoAnswerAndRetransmissionsOneDecision) {
  SegmentHarness h(Options());
  Holder holder;
  h.tcp().SetSynHandler(&holder);
  h.Send(h.Syn());
  h.Poll();
  EXPECT_THAT(h.Take(), IsEmpty());
  ASSERT_EQ(holder.seen.size(), 1u);
  EXPECT_EQ(holder.seen[0], Tuple(h));
  // The guest retransmits while the host connect runs.
  h.Advance(absl::Seconds(1));
  h.Send(h.Syn());
  h.Advance(absl::Seconds(2));
  h.Send(h.Syn());
  h.Poll();
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_EQ(holder.seen.size(), 1u);
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpSynHeld), 2u);
  EXPECT_EQ(h.tcp().counters().held_syn_retransmits, 2u);
  EXPECT_EQ(h.tcp().held_syn_count(), 1u);
  h.tcp().SetSynHandler(nullptr);
}

TEST_P(HeldSynTest, AcceptHeldAnswersWithNegotiatedOptions) {
  SegmentHarness h(Options());
  Holder holder;
  h.tcp().SetSynHandler(&holder);
  PeerSynOptions o;
  o.mss = 1400;
  o.window_scale = 3;
  h.Send(h.Syn(o));
  h.Advance(absl::Milliseconds(30));
  auto s = h.tcp().AcceptHeld(Tuple(h), h.now());
  ASSERT_TRUE(s.ok()) << s.status();
  h.Poll();
  const auto out = h.Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0], Tcp(Flags(kSyn | kAck),
                          Ack(SegmentHarness::kPeerIsn + 1), WindowScale(7),
                          SackPermitted(), HasTimestamps(), ChecksumOk()));
  EXPECT_TRUE(out[0].tcp.mss.has_value());
  EXPECT_EQ((*s)->state(), TcpState::kSynReceived);
  // The guest completes the handshake and sends data.
  h.Send(h.Segment().Flags(kAck).Seq(SegmentHarness::kPeerIsn + 1)
             .Ack(out[0].tcp.seq + 1));
  EXPECT_EQ((*s)->state(), TcpState::kEstablished);
  EXPECT_NE((*s)->Events() & transport::event::kWritable, 0u);
  h.Send(h.Segment().Flags(kAck | kPsh).Seq(SegmentHarness::kPeerIsn + 1)
             .Ack(out[0].tcp.seq + 1).Data(100));
  std::vector<uint8_t> buf(200);
  auto n = (*s)->Read(buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 100u);
  // Accepted once: a second AcceptHeld finds nothing.
  EXPECT_TRUE(absl::IsNotFound(h.tcp().AcceptHeld(Tuple(h), h.now()).status()));
  EXPECT_EQ(h.tcp().held_syn_count(), 0u);
  h.tcp().SetSynHandler(nullptr);
}

TEST_P(HeldSynTest, RefuseWithResetLooksLikeAClosedPort) {
  SegmentHarness h(Options());
  Holder holder;
  h.tcp().SetSynHandler(&holder);
  h.Send(h.Syn());
  ASSERT_TRUE(h.tcp().RefuseHeld(Tuple(h), HeldSynRefusal::kReset, h.now()));
  h.Poll();
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kRst | kAck), Seq(0),
                                        Ack(SegmentHarness::kPeerIsn + 1))));
  EXPECT_FALSE(h.tcp().RefuseHeld(Tuple(h), HeldSynRefusal::kReset, h.now()));
  // A new SYN is a new decision.
  h.Send(h.Syn());
  EXPECT_EQ(holder.seen.size(), 2u);
  h.tcp().SetSynHandler(nullptr);
}

TEST_P(HeldSynTest, RefuseUnreachableSendsIcmpQuotingTheSyn) {
  SegmentHarness h(Options());
  Holder holder;
  h.tcp().SetSynHandler(&holder);
  h.Send(h.Syn());
  ASSERT_TRUE(h.tcp().RefuseHeld(Tuple(h), HeldSynRefusal::kHostUnreachable,
                                 h.now()));
  h.Poll();
  EXPECT_THAT(h.Take(), IsEmpty());
  ASSERT_EQ(h.other_frames.size(), 1u);
  const std::vector<uint8_t>& f = h.other_frames[0];
  const size_t ip_len = GetParam() ? 40 : 20;
  ASSERT_GE(f.size(), 14 + ip_len + 8 + ip_len + 8);
  const uint8_t* icmp = f.data() + 14 + ip_len;
  EXPECT_EQ(icmp[0], GetParam() ? 1 : 3);  // destination unreachable
  EXPECT_EQ(icmp[1], GetParam() ? 3 : 1);  // address / host unreachable
  const uint8_t* l4 = icmp + 8 + ip_len;
  EXPECT_EQ(wire::LoadBe16(l4), SegmentHarness::kPeerPort);
  EXPECT_EQ(wire::LoadBe16(l4 + 2), SegmentHarness::kOurPort);
  EXPECT_EQ(wire::LoadBe32(l4 + 4), SegmentHarness::kPeerIsn);
  h.tcp().SetSynHandler(nullptr);
}

TEST_P(HeldSynTest, RefuseSilentlySendsNothing) {
  SegmentHarness h(Options());
  Holder holder;
  h.tcp().SetSynHandler(&holder);
  h.Send(h.Syn());
  ASSERT_TRUE(h.tcp().RefuseHeld(Tuple(h), HeldSynRefusal::kSilent, h.now()));
  h.Poll();
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_THAT(h.other_frames, IsEmpty());
  EXPECT_EQ(h.tcp().held_syn_count(), 0u);
  h.tcp().SetSynHandler(nullptr);
}

TEST_P(HeldSynTest, HandlerThatDeclinesMeansReset) {
  SegmentHarness h(Options());
  Holder holder;
  holder.verdict = SynVerdict::kReset;
  h.tcp().SetSynHandler(&holder);
  h.Send(h.Syn());
  h.Poll();
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kRst | kAck))));
  EXPECT_EQ(h.tcp().held_syn_count(), 0u);
  h.tcp().SetSynHandler(nullptr);
}

TEST_P(HeldSynTest, ShedSynGetsNothingAndIsAskedAgain) {
  SegmentHarness h(Options());
  Holder holder;
  holder.verdict = SynVerdict::kDrop;
  h.tcp().SetSynHandler(&holder);
  h.Send(h.Syn());
  h.Poll();
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_THAT(h.other_frames, IsEmpty());
  EXPECT_EQ(h.tcp().held_syn_count(), 0u);
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpSynShed), 1u);
  // Nothing was kept: the retransmission is a new question, and this time
  // the handler holds it.
  holder.verdict = SynVerdict::kHold;
  h.Send(h.Syn());
  EXPECT_EQ(holder.seen.size(), 2u);
  EXPECT_EQ(h.tcp().held_syn_count(), 1u);
  EXPECT_EQ(h.tcp().counters().held_syn_retransmits, 0u);
  h.tcp().SetSynHandler(nullptr);
}

TEST_P(HeldSynTest, HeldSynsAreCapped) {
  SegmentHarness h(Options());  // max_half_open = 2
  Holder holder;
  h.tcp().SetSynHandler(&holder);
  for (uint16_t port : {40001, 40002, 40003}) h.Send(h.Syn().SrcPort(port));
  EXPECT_EQ(holder.seen.size(), 2u);
  EXPECT_EQ(h.tcp().held_syn_count(), 2u);
  EXPECT_EQ(h.tcp().counters().held_syn_limit_drops, 1u);
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpHalfOpenLimit), 1u);
  h.tcp().SetSynHandler(nullptr);
}

// Gateway mode: no listener, so a connection the guest opened was held
// and accepted; the host side closed first, so we hold TIME_WAIT. The
// guest keeps none and may reuse its port at once (a client bound to a
// fixed port, or a fast client once its ephemeral range wraps). Brings the
// tuple to TIME_WAIT, leaves the old socket in `old` (declared after `h`,
// so it goes first) and returns our ISS of that connection.
class HeldSynTimeWaitTest : public HeldSynTest {
 protected:
  uint32_t EnterTimeWait(SegmentHarness& h, Holder& holder,
                         std::unique_ptr<TcpSocket>& old) {
    h.tcp().SetSynHandler(&holder);
    h.Send(h.Syn());
    auto s = h.tcp().AcceptHeld(Tuple(h), h.now());
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return 0;
    h.Poll();
    auto out = h.Take();
    EXPECT_EQ(out.size(), 1u);
    if (out.size() != 1) return 0;
    const uint32_t iss = out[0].tcp.seq;
    h.peer.seq += 1;
    h.peer.ack = iss + 1;
    h.peer.timestamps = true;
    h.Send(h.Segment());
    EXPECT_EQ((*s)->state(), TcpState::kEstablished);
    // The host server closes first (HTTP/1.0, Connection: close).
    EXPECT_TRUE((*s)->Shutdown(false, true).ok());
    h.Poll();
    EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kFin | kAck), Seq(iss + 1))));
    h.peer.ack = iss + 2;
    fin_tsval_ = h.PeerTsval();
    h.Send(h.Segment().Flags(kFin | kAck));
    h.peer.seq += 1;
    EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Seq(iss + 2),
                                          Ack(h.peer.seq))));
    EXPECT_EQ((*s)->state(), TcpState::kTimeWait);
    old = std::move(*s);
    h.Advance(absl::Seconds(1));
    return iss;
  }
  uint32_t fin_tsval_ = 0;  // TS.Recent in TIME_WAIT
};

INSTANTIATE_TEST_SUITE_P(V4V6, HeldSynTimeWaitTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

// A SYN that TIME_WAIT accepts (RFC 6191; Linux's TCP_TW_SYN) goes to the
// SynHandler as a listener's would go to the listener: held, not ACKed,
// and its SYN-ACK carries an ISS above the old connection's sequence
// space. Before, only a listener could take it: the gateway answered a
// bare ACK and the guest's connect hung until 2 MSL ran out.
TEST_P(HeldSynTimeWaitTest, NewerSynReachesTheHandlerAndReopens) {
  SegmentHarness h(Options());
  Holder holder;
  std::unique_ptr<TcpSocket> old;
  const uint32_t iss = EnterTimeWait(h, holder, old);
  ASSERT_EQ(holder.seen.size(), 1u);
  const uint32_t new_isn = h.peer.seq + 100000;
  h.Send(h.Syn().Seq(new_isn));  // TSval: the peer's clock, now newer
  h.Poll();
  EXPECT_THAT(h.Take(), IsEmpty()) << "held, not answered";
  ASSERT_EQ(holder.seen.size(), 2u);
  EXPECT_EQ(holder.seen[1], Tuple(h));
  EXPECT_EQ(h.tcp().held_syn_count(), 1u);
  EXPECT_EQ(h.tcp().counters().time_wait_recycled, 1u);
  // A retransmission while the host connect runs: absorbed as any held
  // SYN's, not an ACK from TIME_WAIT.
  h.Advance(absl::Seconds(1));
  h.Send(h.Syn().Seq(new_isn));
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_EQ(holder.seen.size(), 2u);
  EXPECT_EQ(h.tcp().counters().held_syn_retransmits, 1u);
  auto s = h.tcp().AcceptHeld(Tuple(h), h.now());
  ASSERT_TRUE(s.ok()) << s.status();
  h.Poll();
  auto out = h.Take();
  ASSERT_THAT(out, ElementsAre(Tcp(Flags(kSyn | kAck), Ack(new_isn + 1))));
  // RFC 1122 4.2.2.13: above the old SND.NXT (iss + 2 after our FIN), as
  // Linux's snd_nxt + 65535 + 2.
  EXPECT_EQ(out[0].tcp.seq, iss + 2 + 65535 + 2);
  h.tcp().SetSynHandler(nullptr);
}

// A SYN that TIME_WAIT does not accept is answered as before: an ACK
// (rate-limited), TIME_WAIT stays, and the handler is never asked.
TEST_P(HeldSynTimeWaitTest, SynTimeWaitRefusesIsAckedAndNotHeld) {
  SegmentHarness h(Options());
  Holder holder;
  std::unique_ptr<TcpSocket> old;
  EnterTimeWait(h, holder, old);
  // Sequence number at or below RCV.NXT, TSval equal to TS.Recent: may be
  // an old duplicate.
  h.Send(h.Syn().Seq(h.peer.seq - 5).Timestamps(fin_tsval_, 0));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq))));
  // An older TSval: PAWS rejects it whatever its sequence number.
  h.Advance(absl::Seconds(1));
  h.Send(h.Syn().Seq(h.peer.seq + 100000).Timestamps(1, 0));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq))));
  EXPECT_EQ(holder.seen.size(), 1u);
  EXPECT_EQ(h.tcp().held_syn_count(), 0u);
  EXPECT_EQ(h.tcp().counters().time_wait_recycled, 0u);
  EXPECT_EQ(old->state(), TcpState::kTimeWait);
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpTimeWait), 1u);
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpPawsRejected), 1u);
  h.tcp().SetSynHandler(nullptr);
}

// A handler that sheds the SYN (or answers it with a reset) leaves
// TIME_WAIT in place: the guest's retransmission is asked about again and,
// when held, still gets the ISS above the old sequence space.
TEST_P(HeldSynTimeWaitTest, ShedSynKeepsTimeWaitForTheRetransmission) {
  SegmentHarness h(Options());
  Holder holder;
  std::unique_ptr<TcpSocket> old;
  const uint32_t iss = EnterTimeWait(h, holder, old);
  const uint32_t new_isn = h.peer.seq + 100000;
  holder.verdict = SynVerdict::kDrop;
  h.Send(h.Syn().Seq(new_isn));
  EXPECT_THAT(h.Take(), IsEmpty());
  EXPECT_EQ(holder.seen.size(), 2u);
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpSynShed), 1u);
  EXPECT_EQ(h.tcp().counters().time_wait_recycled, 0u);
  EXPECT_EQ(old->state(), TcpState::kTimeWait);
  holder.verdict = SynVerdict::kHold;
  h.Advance(absl::Seconds(1));
  h.Send(h.Syn().Seq(new_isn));
  EXPECT_EQ(holder.seen.size(), 3u);
  EXPECT_EQ(h.tcp().counters().time_wait_recycled, 1u);
  auto s = h.tcp().AcceptHeld(Tuple(h), h.now());
  ASSERT_TRUE(s.ok()) << s.status();
  h.Poll();
  auto out = h.Take();
  ASSERT_THAT(out, ElementsAre(Tcp(Flags(kSyn | kAck), Ack(new_isn + 1))));
  EXPECT_EQ(out[0].tcp.seq, iss + 2 + 65535 + 2);
  h.tcp().SetSynHandler(nullptr);
}

}  // namespace
}  // namespace netstack::tcp
