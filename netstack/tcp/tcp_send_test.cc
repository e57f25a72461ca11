// Segment-level sender tests: Nagle (RFC 896 / RFC 9293 3.7.4),
// TCP_NODELAY, TCP_CORK, zero-window probing (RFC 9293 3.8.6.1) and
// filling a 16 MiB scaled peer window.
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using namespace testing;  // NOLINT: the harness and its matchers

class SendTest : public ::testing::TestWithParam<bool> {
 protected:
  void Open(const ConnectionOptions& co = {}) {
    HarnessOptions o;
    o.v6 = GetParam();
    o.tcp.connection = co;
    h_ = std::make_unique<SegmentHarness>(o);
    sock_ = h_->OpenActive();
    mss_ = sock_->Info().mss;
    una_ = h_->iss() + 1;
  }
  std::vector<OutSegment> Write(size_t n) {
    auto w = sock_->Write(Bytes(n));
    EXPECT_TRUE(w.ok() && *w == n);
    h_->Poll();
    return h_->Take();
  }
  SegmentHarness& h() { return *h_; }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> sock_;
  uint32_t mss_ = 0;
  uint32_t una_ = 0;
};

INSTANTIATE_TEST_SUITE_P(V4V6, SendTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(SendTest, NagleHoldsSmallWritesWhileDataIsUnacked) {
  Open();
  EXPECT_THAT(Write(100), ElementsAre(Tcp(Seq(una_), PayloadLen(100))));
  // Unacked data: small writes wait (RFC 9293 3.7.4).
  EXPECT_THAT(Write(100), IsEmpty());
  EXPECT_THAT(Write(100), IsEmpty());
  h().Advance(absl::Milliseconds(10));
  // The ACK releases them as one segment.
  h().SendAck(una_ + 100);
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Seq(una_ + 100), PayloadLen(200))));
  // A full segment is never held.
  EXPECT_THAT(Write(mss_), ElementsAre(Tcp(Seq(una_ + 300),
                                           PayloadLen(mss_))));
}

TEST_P(SendTest, NoDelaySendsSmallWritesAtOnce) {
  ConnectionOptions co;
  co.nodelay = true;
  Open(co);
  EXPECT_THAT(Write(100), ElementsAre(Tcp(Seq(una_), PayloadLen(100))));
  EXPECT_THAT(Write(100), ElementsAre(Tcp(Seq(una_ + 100), PayloadLen(100))));
  EXPECT_THAT(Write(1), ElementsAre(Tcp(Seq(una_ + 200), PayloadLen(1))));
}

TEST_P(SendTest, SetNoDelayReleasesHeldData) {
  Open();
  ASSERT_THAT(Write(100), SizeIs(1));
  ASSERT_THAT(Write(100), IsEmpty());
  sock_->SetNoDelay(true);
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Seq(una_ + 100), PayloadLen(100))));
}

TEST_P(SendTest, CorkHoldsUntilFullSegment) {
  Open();
  sock_->SetCork(true);
  EXPECT_THAT(Write(100), IsEmpty()) << "corked, nothing in flight";
  EXPECT_THAT(Write(mss_ - 200), IsEmpty());
  // A full segment's worth is there: it goes; the 200-byte rest waits,
  // even once everything sent is acked.
  EXPECT_THAT(Write(300), ElementsAre(Tcp(Seq(una_), PayloadLen(mss_))));
  h().SendAck(una_ + mss_);
  EXPECT_THAT(h().Take(), IsEmpty());
  // Uncorking pushes it.
  sock_->SetCork(false);
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Seq(una_ + mss_), PayloadLen(200))));
}

TEST_P(SendTest, ZeroWindowProbesBackOffAndWindowOpeningResumes) {
  Open();
  // An RTT sample of 10 ms: RTO = 200 ms (the minimum).
  EXPECT_THAT(Write(1000), SizeIs(1));
  h().Advance(absl::Milliseconds(10));
  // The peer acks and closes its window.
  h().peer.window = 0;
  h().SendAck(una_ + 1000);
  ASSERT_THAT(h().Take(), IsEmpty());
  EXPECT_THAT(Write(3000), IsEmpty()) << "sent into a zero window";
  const Instant t0 = h().now();
  // Probes: SEG.SEQ = SND.UNA - 1, no data; exponential backoff.
  h().AdvanceTo(t0 + absl::Milliseconds(1400));
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Seq(una_ + 999), PayloadLen(0),
                              SentAt(t0 + absl::Milliseconds(200))),
                          Tcp(Seq(una_ + 999), PayloadLen(0),
                              SentAt(t0 + absl::Milliseconds(600))),
                          Tcp(Seq(una_ + 999), PayloadLen(0),
                              SentAt(t0 + absl::Milliseconds(1400)))));
  // The peer answers the probe, still zero: the connection stays up.
  h().Send(h().Segment());
  EXPECT_THAT(h().Take(), IsEmpty());
  EXPECT_EQ(sock_->state(), TcpState::kEstablished);
  EXPECT_GE(sock_->Info().zero_window_probes, 3u);
  // The window opens (100 << 7 = 12800 bytes): the data goes at once,
  // the small tail too (Minshall's Nagle: no small segment is unacked).
  h().peer.window = 100;
  h().Send(h().Segment());
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Seq(una_ + 1000), PayloadLen(mss_)),
                          Tcp(Seq(una_ + 1000 + mss_), PayloadLen(mss_)),
                          Tcp(Seq(una_ + 1000 + 2 * mss_),
                              PayloadLen(3000 - 2 * mss_))));
}

TEST_P(SendTest, SmallWindowWithNothingInFlightIsFilledAfterAnRto) {
  // Less window than a segment and than half the largest the peer
  // offered, nothing in flight: sender SWS avoidance waits for a wider
  // window. If the peer's window update was lost (a Linux guest acks a
  // 64 KiB segment with 1 KiB of window and updates to 64 KiB 0.2 ms
  // later; the update was dropped), no ACK will come: the override
  // timeout (RFC 9293 3.8.6.2.1; Linux's probe timer, tcp_write_wakeup)
  // sends what fits after an RTO. Without it the backend's faults test
  // stalled for good after one segment.
  Open();
  EXPECT_THAT(Write(1000), SizeIs(1));
  h().Advance(absl::Milliseconds(10));  // RTO = 200 ms
  h().peer.window = 4;                  // 4 << 7 = 512 bytes
  h().SendAck(una_ + 1000);
  EXPECT_THAT(Write(3000), IsEmpty()) << "less than a segment fits";
  const Instant t0 = h().now();
  h().AdvanceTo(t0 + absl::Milliseconds(300));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Seq(una_ + 1000), PayloadLen(512),
                                          SentAt(t0 + absl::Milliseconds(200)))));
  // Its ACK opens the window: the rest goes at once.
  h().peer.window = 100;
  h().SendAck(una_ + 1512);
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Seq(una_ + 1512), PayloadLen(mss_)),
                          Tcp(Seq(una_ + 1512 + mss_),
                              PayloadLen(2488 - mss_))));
  EXPECT_EQ(sock_->Info().zero_window_probes, 0u);
}

TEST_P(SendTest, UnansweredZeroWindowProbesGiveUp) {
  // A peer that closed its window and then went silent (a guest whose
  // reader stalled, then died) must not pin the connection forever:
  // like Linux (tcp_probe_timer: tcp_retries2 probes without an answer),
  // max_retransmits unanswered probes abort it.
  ConnectionOptions co;
  co.max_retransmits = 3;
  Open(co);
  EXPECT_THAT(Write(1000), SizeIs(1));
  h().Advance(absl::Milliseconds(10));
  h().peer.window = 0;
  h().SendAck(una_ + 1000);
  EXPECT_THAT(Write(3000), IsEmpty());
  const Instant t0 = h().now();
  // Probes at 200, 600, 1400 ms; one answer resets the count.
  h().AdvanceTo(t0 + absl::Milliseconds(1400));
  h().Take();
  h().Send(h().Segment());
  EXPECT_EQ(sock_->state(), TcpState::kEstablished);
  // Then silence: three more probes, and the next expiry gives up.
  h().AdvanceTo(t0 + absl::Seconds(300));
  EXPECT_EQ(sock_->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(sock_->TakeError()), ETIMEDOUT);
}

// Issue #34 (rr-under-load): one Poll sends what a bulk connection and an
// interactive one both have. The interactive one's single small segment
// goes first, though the bulk one was marked first: the link writes
// packets in the order Poll makes them, so it would otherwise wait behind
// all of the bulk connection's segments.
TEST_P(SendTest, SmallOutputGoesBeforeABulkConnectionsSegments) {
  Open();
  const uint16_t bulk_port = h().peer.remote_port;
  auto rr = h().OpenActive();
  const uint16_t rr_port = h().peer.remote_port;
  ASSERT_NE(rr_port, bulk_port);
  const uint32_t rr_una = h().iss() + 1;
  auto w = sock_->Write(Bytes(20 * mss_));  // marked first
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(*w, 20 * mss_);
  w = rr->Write(Bytes(1));
  ASSERT_TRUE(w.ok());
  h().Poll();
  const std::vector<OutSegment> out = h().Take();
  // The bulk connection sends its initial window (10 segments), after.
  ASSERT_EQ(out.size(), 11u);
  EXPECT_EQ(out[0].tcp.src_port, rr_port);
  EXPECT_THAT(out[0], Tcp(Seq(rr_una), PayloadLen(1)));
  for (size_t i = 1; i < out.size(); ++i) {
    EXPECT_EQ(out[i].tcp.src_port, bulk_port) << "segment " << i;
    EXPECT_THAT(out[i], Tcp(Seq(una_ + (i - 1) * mss_), PayloadLen(mss_)));
  }
}

// As a sender: a peer's 16 MiB window (shift 9, field 32768) is filled
// when cwnd allows.
TEST(SendWindowTest, FillsSixteenMebibytePeerWindow) {
  HarnessOptions o;
  o.mtu = 32820;  // 32768 bytes of payload per packet with timestamps
  o.tcp.connection.initial_cwnd = 1024;
  o.tcp.connection.send_buffer = 32u << 20;
  SegmentHarness h(o);
  PeerSynOptions p;
  p.mss = 32780;
  p.window_scale = 9;
  auto s = h.OpenActive(p);
  ASSERT_EQ(s->Info().snd_wscale, 9);
  ASSERT_EQ(s->Info().mss, 32768u);
  h.peer.window = 32768;
  h.Send(h.Segment());  // the window, now scaled: 16 MiB
  ASSERT_EQ(s->Info().snd_wnd, 16u << 20);
  const std::vector<uint8_t> data = Bytes(20u << 20);
  auto w = s->Write(data);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(*w, 20u << 20);
  h.Poll();
  const auto out = h.Take();
  ASSERT_EQ(out.size(), 512u);
  EXPECT_THAT(out, Each(Tcp(PayloadLen(32768), FlagsSet(kAck))));
  EXPECT_EQ(h.snd_max() - (h.iss() + 1), 16u << 20);
  EXPECT_EQ(s->Info().bytes_in_flight, 16u << 20);
  // Acking half of it lets the remaining 4 MiB out.
  h.SendAck(h.iss() + 1 + (8u << 20));
  const auto more = h.Take();
  EXPECT_EQ(more.size(), 128u);
  EXPECT_EQ(h.snd_max() - (h.iss() + 1), 20u << 20);
}

}  // namespace
}  // namespace netstack::tcp
