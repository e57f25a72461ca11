// A listener closed while connections still hang off it (issue 12 item
// 2). The listener owns an intrusive list of its half-open (SYN-RECEIVED)
// connections and of its accept queue, and clears both when it goes:
//   - half-open ones are dropped silently, as Linux drops its request
//     socks (inet_csk_listen_stop): no RST, no more SYN-ACKs; the peer's
//     late ACK then meets no listener and draws the RST of RFC 9293
//     3.10.7.1;
//   - accepted-but-not-Accept()ed ones are reset (as before).
// These tests ran under ASan before the fix and reported
// heap-use-after-free in Listener::RemoveHalfOpen / Ready / Forget.
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

class ListenerCloseTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    HarnessOptions o;
    o.v6 = GetParam();
    h_ = std::make_unique<SegmentHarness>(o);
    listener_ = h_->tcp().Open(h_->family());
    ASSERT_TRUE(listener_->Bind(h_->our_address()).ok());
    ASSERT_TRUE(listener_->Listen(16).ok());
  }
  // The peer's SYN; returns our SYN-ACK's ISS. peer.seq/ack are left
  // ready for the final ACK.
  uint32_t TakeSyn() {
    h().Send(h().Syn());
    auto out = h().Take();
    EXPECT_THAT(out, ElementsAre(Tcp(Flags(kSyn | kAck))));
    if (out.empty()) return 0;
    h().peer.seq += 1;
    h().peer.ack = out[0].tcp.seq + 1;
    h().peer.timestamps = true;
    h().peer.ts_recent = out[0].tcp.timestamps->tsval;
    return out[0].tcp.seq;
  }
  SegmentHarness& h() { return *h_; }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> listener_;
};

INSTANTIATE_TEST_SUITE_P(V4V6, ListenerCloseTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(ListenerCloseTest, FinalAckAfterCloseMeetsNoListener) {
  const uint32_t iss = TakeSyn();
  EXPECT_EQ(h().tcp().connection_count(), 1u);
  listener_->Close();
  h().Poll();
  EXPECT_THAT(h().Take(), IsEmpty()) << "a half-open connection goes quietly";
  EXPECT_EQ(h().tcp().connection_count(), 0u);
  EXPECT_EQ(h().tcp().counters().half_open_dropped_listener_closed, 1u);
  // The peer's ACK of our SYN-ACK: nobody listens any more.
  h().Send(h().Segment());
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kRst), Seq(iss + 1))));
  EXPECT_EQ(h().Drops(DropReason::kTcpNoListener), 1u);
  EXPECT_EQ(h().tcp().connection_count(), 0u);
}

TEST_P(ListenerCloseTest, RstAfterCloseIsHarmless) {
  TakeSyn();
  listener_.reset();  // destroying the socket closes it too
  h().Send(h().Segment().Flags(kRst));
  EXPECT_THAT(h().Take(), IsEmpty());
  EXPECT_EQ(h().tcp().counters().resets_received, 0u)
      << "no connection is left to take it";
  EXPECT_EQ(h().tcp().connection_count(), 0u);
}

TEST_P(ListenerCloseTest, NoSynAckRetransmissionAfterClose) {
  TakeSyn();
  listener_->Close();
  // Without the fix the SYN-ACK went out again, six times, and the SYN
  // timeout then reached the freed listener.
  EXPECT_FALSE(h().AdvanceUntilSent(absl::Minutes(5)));
  EXPECT_EQ(h().tcp().counters().connections_timed_out, 0u);
  EXPECT_EQ(h().tcp().connection_count(), 0u);
}

TEST_P(ListenerCloseTest, AcceptQueueIsResetOnClose) {
  const uint32_t iss = TakeSyn();
  h().Send(h().Segment());  // established, waiting for Accept
  EXPECT_THAT(h().Take(), IsEmpty());
  listener_->Close();
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(FlagsSet(kRst), Seq(iss + 1))));
  EXPECT_EQ(h().tcp().connection_count(), 0u);
  // Its late data meets no one.
  h().Send(h().Segment().Data(10));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kRst))));
}

TEST_P(ListenerCloseTest, QueuedConnectionResetByPeerLeavesTheQueue) {
  TakeSyn();
  h().Send(h().Segment());  // in the accept queue
  h().Send(h().Segment().Flags(kRst));
  EXPECT_EQ(h().tcp().counters().resets_received, 1u);
  // Accept finds nothing, and a close afterwards touches nothing freed.
  EXPECT_TRUE(transport::IsWouldBlock(listener_->Accept().status()));
  listener_->Close();
  h().Poll();
  EXPECT_THAT(h().Take(), IsEmpty());
  EXPECT_EQ(h().tcp().connection_count(), 0u);
}

TEST_P(ListenerCloseTest, CloseWithSeveralHalfOpenAndQueued) {
  TakeSyn();
  h().Send(h().Segment());  // one in the accept queue
  for (int i = 1; i <= 2; ++i) {
    h().peer.port = SegmentHarness::kPeerPort + i;
    h().peer.seq = SegmentHarness::kPeerIsn;
    TakeSyn();
  }
  EXPECT_EQ(h().tcp().connection_count(), 3u);
  listener_->Close();
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(FlagsSet(kRst))))
      << "only the queued one is reset";
  EXPECT_EQ(h().tcp().counters().half_open_dropped_listener_closed, 2u);
  EXPECT_EQ(h().tcp().connection_count(), 0u);
  // A new listener on the port starts with empty queues.
  listener_ = h().tcp().Open(h().family());
  ASSERT_TRUE(listener_->Bind(h().our_address()).ok());
  ASSERT_TRUE(listener_->Listen(16).ok());
  h().peer.port = SegmentHarness::kPeerPort + 7;
  h().peer.seq = SegmentHarness::kPeerIsn;
  TakeSyn();
  h().Send(h().Segment());
  auto a = listener_->Accept();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->remote_address().port, SegmentHarness::kPeerPort + 7);
}

// Issue 12 item 10: a server run showed drop.tcp_bad_syn_cookie 1 and
// resets_sent 1 with syn_cookies_sent 0. A late duplicate ACK of a
// connection already closed and reaped reaches the listener, which took
// any bare ACK for a SYN-cookie ACK. The RST is right (RFC 9293 3.10.7.2:
// an ACK in LISTEN draws a reset; Linux does the same), the "bad cookie"
// was not: it is counted as a stray ACK unless cookies were in use.
TEST_P(ListenerCloseTest, LateAckAfterReapIsAStrayAckNotABadCookie) {
  const uint32_t iss = TakeSyn();
  h().Send(h().Segment());
  auto a = listener_->Accept();
  ASSERT_TRUE(a.ok());
  h().Send(h().Segment().Flags(kFin | kAck));  // the peer closes first
  h().peer.seq += 1;
  h().Take();
  a->reset();  // we close: LAST_ACK
  h().Poll();
  ASSERT_THAT(h().Take(), ElementsAre(Tcp(FlagsSet(kFin), Seq(iss + 1))));
  h().SendAck(iss + 2);
  ASSERT_EQ(h().tcp().connection_count(), 0u) << "closed and reaped";
  // The same ACK again, late (duplicated or reordered on the way).
  h().Send(h().Segment());
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kRst), Seq(iss + 2))));
  EXPECT_EQ(h().tcp().counters().syn_cookies_sent, 0u);
  EXPECT_EQ(h().tcp().counters().syn_cookies_rejected, 0u);
  EXPECT_EQ(h().Drops(DropReason::kTcpBadSynCookie), 0u);
  EXPECT_EQ(h().Drops(DropReason::kTcpStrayAck), 1u);
}

}  // namespace
}  // namespace netstack::tcp
