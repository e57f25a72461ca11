// Segment-level ACK-policy tests: delayed ACKs (RFC 9293 3.8.6.3, RFC
// 5681 4.2), quick-ACK mode at connection start, immediate ACKs for
// out-of-order data with SACK blocks (RFC 2018), ACKs within a receive
// batch, and the advertised window (incl. a 16 MiB scaled window).
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using namespace testing;  // NOLINT: the harness and its matchers

class AckTest : public ::testing::TestWithParam<bool> {
 protected:
  // Quick ACKs off unless a test wants them: delayed ACKs from the start.
  void Open(uint32_t quick_acks = 0) {
    HarnessOptions o;
    o.v6 = GetParam();
    o.tcp.connection.quick_acks = quick_acks;
    h_ = std::make_unique<SegmentHarness>(o);
    sock_ = h_->OpenActive();
    mss_ = sock_->Info().mss;  // the peer's segments are this big too
  }
  SegmentHarness& h() { return *h_; }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> sock_;
  uint32_t mss_ = 0;
};

INSTANTIATE_TEST_SUITE_P(V4V6, AckTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(AckTest, SingleSegmentAckedAfterDelayedAckTime) {
  Open();
  const Instant t0 = h().now();
  h().SendData(mss_);
  EXPECT_THAT(h().Take(), IsEmpty());
  h().AdvanceTo(t0 + absl::Milliseconds(39));
  EXPECT_THAT(h().Take(), IsEmpty()) << "acked before the delayed-ACK time";
  h().AdvanceTo(t0 + absl::Milliseconds(100));
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq), PayloadLen(0),
                              SentAt(t0 + absl::Milliseconds(40)))));
  EXPECT_EQ(sock_->Info().delayed_acks, 1u);
}

TEST_P(AckTest, EverySecondFullSegmentAckedAtOnce) {
  Open();
  for (int i = 0; i < 3; ++i) {
    h().SendData(mss_);
    EXPECT_THAT(h().Take(), IsEmpty()) << "segment " << 2 * i;
    h().Advance(absl::Milliseconds(1));
    h().SendData(mss_);
    EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq))))
        << "segment " << 2 * i + 1;
    h().Advance(absl::Milliseconds(1));
  }
  EXPECT_EQ(sock_->Info().delayed_acks, 0u);
}

TEST_P(AckTest, QuickAcksAtConnectionStart) {
  Open(/*quick_acks=*/4);
  // The handshake ACK used one quick ACK; the next three data segments
  // are acked at once, then delayed ACKs resume.
  for (int i = 0; i < 3; ++i) {
    h().SendData(100);
    EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq))))
        << "segment " << i;
  }
  const Instant t = h().now();
  h().SendData(100);
  EXPECT_THAT(h().Take(), IsEmpty());
  h().AdvanceTo(t + absl::Milliseconds(40));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Ack(h().peer.seq),
                                          SentAt(t + absl::Milliseconds(40)))));
}

TEST_P(AckTest, OutOfOrderDataAckedAtOnceWithSackBlocks) {
  Open();
  const uint32_t base = h().peer.seq;
  // A hole at [base, base + mss): two later segments arrive.
  h().Send(h().Segment().Seq(base + mss_).Data(mss_));
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(base),
                              SackBlocks(ElementsAre(
                                  Block(base + mss_, base + 2 * mss_))))));
  h().Send(h().Segment().Seq(base + 3 * mss_).Data(mss_));
  // RFC 2018 4: the block with the newest segment first.
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(base),
                              SackBlocks(ElementsAre(
                                  Block(base + 3 * mss_, base + 4 * mss_),
                                  Block(base + mss_, base + 2 * mss_))))));
  // Filling the first hole: an immediate ACK, still reporting the rest.
  h().Send(h().Segment().Seq(base).Data(mss_));
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(base + 2 * mss_),
                              SackBlocks(ElementsAre(Block(
                                  base + 3 * mss_, base + 4 * mss_))))));
  h().Send(h().Segment().Seq(base + 2 * mss_).Data(mss_));
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(base + 4 * mss_), NoSack())));
  std::vector<uint8_t> buf(8 * mss_);
  auto r = sock_->Read(buf);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 4 * mss_);
  for (uint32_t i = 0; i < *r; ++i) {
    ASSERT_EQ(buf[i], PatternByte(base + i)) << "byte " << i;
  }
}

// Within one receive batch: an ACK every second full segment, and one for
// each new out-of-order run (issue #12 item 5; it used to be one ACK per
// batch, whatever the batch held). They still leave in one burst.
TEST_P(AckTest, AckEverySecondSegmentAndEachNewRunWithinABatch) {
  Open(/*quick_acks=*/16);
  std::vector<PeerSegment> batch;
  const uint32_t start = h().peer.seq;
  for (int i = 0; i < 6; ++i) {
    batch.push_back(h().Segment().Data(mss_));
    h().peer.seq += mss_;
  }
  h().SendBatch(batch);
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(start + 2 * mss_)),
                          Tcp(Flags(kAck), Ack(start + 4 * mss_)),
                          Tcp(Flags(kAck), Ack(start + 6 * mss_))));
  // Out of order inside one batch: the new run is reported at once, then
  // every second segment that extends it.
  const uint32_t base = h().peer.seq;
  batch.clear();
  for (int i = 1; i < 5; ++i) {
    batch.push_back(h().Segment().Seq(base + i * mss_).Data(mss_));
  }
  h().SendBatch(batch);
  EXPECT_THAT(
      h().Take(),
      ElementsAre(
          Tcp(Flags(kAck), Ack(base),
              SackBlocks(ElementsAre(Block(base + mss_, base + 2 * mss_)))),
          Tcp(Flags(kAck), Ack(base),
              SackBlocks(ElementsAre(Block(base + mss_, base + 4 * mss_)))),
          Tcp(Flags(kAck), Ack(base),
              SackBlocks(ElementsAre(Block(base + mss_, base + 5 * mss_))))));
}

TEST_P(AckTest, DelayedAckCarriedByData) {
  Open();
  h().SendData(100);
  ASSERT_THAT(h().Take(), IsEmpty());
  // Data we send in the meantime carries the ACK; no separate ACK later.
  ASSERT_TRUE(sock_->Write(Bytes(50)).ok());
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Ack(h().peer.seq), PayloadLen(50))));
  h().Advance(absl::Milliseconds(100));
  EXPECT_THAT(h().Take(), IsEmpty());
}

TEST_P(AckTest, WindowShrinksAsDataWaitsAndReopensOnRead) {
  Open();
  const uint32_t shift = sock_->Info().rcv_wscale;  // 7
  const uint32_t buf = 256u << 10;
  auto field = [&](uint32_t wnd) {  // rounded up: the edge never retreats
    return static_cast<uint16_t>((wnd + (1u << shift) - 1) >> shift);
  };
  h().SendData(mss_);
  h().SendData(mss_);
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Ack(h().peer.seq), Window(field(buf - 2 * mss_)))));
  // Unread data keeps the window down (the right edge announced before
  // never moves left, so the field may round up by one unit).
  h().SendData(mss_);
  h().SendData(mss_);
  auto out = h().Take();
  ASSERT_THAT(out, ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq))));
  EXPECT_GE(out[0].tcp.window, field(buf - 4 * mss_));
  EXPECT_LE(out[0].tcp.window, field(buf - 4 * mss_) + 1);
  // Reading it all frees 4 MSS: a window update goes out at once.
  std::vector<uint8_t> buf_out(8 * mss_);
  ASSERT_TRUE(sock_->Read(buf_out).ok());
  h().Poll();
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq),
                                          Window(buf >> shift))));
}

// A 16 MiB receive buffer: the SYN carries shift 9 (16 MiB >> 9 = 32768),
// and the stack takes 16 MiB in flight from the peer.
TEST(AckWindowTest, SixteenMebibyteReceiveWindow) {
  HarnessOptions o;
  // Segments of 32 KiB (MTU 32820 = 20 + 20 + 12 + 32768): 512 of them.
  o.mtu = 32820;
  o.tcp.connection.receive_buffer = 16u << 20;
  o.tcp.connection.max_receive_buffer = 16u << 20;
  SegmentHarness h(o);
  PeerSynOptions p;
  p.mss = 32780;
  auto s = h.OpenActive(p);
  EXPECT_THAT(h.last_syn(), Tcp(Flags(kSyn), WindowScale(9), Window(65535),
                                HasMss(32780)));
  ASSERT_EQ(s->Info().rcv_wscale, 9);
  constexpr uint32_t kSeg = 32768;
  const uint32_t start = h.peer.seq;
  // The peer fills the whole window: 512 segments in batches of 64.
  for (int b = 0; b < 8; ++b) {
    std::vector<PeerSegment> batch;
    for (int i = 0; i < 64; ++i) {
      batch.push_back(h.Segment().Data(kSeg));
      h.peer.seq += kSeg;
    }
    h.SendBatch(batch);
  }
  EXPECT_EQ(s->readable_bytes(), 16u << 20);
  EXPECT_EQ(h.peer.seq - start, 16u << 20);
  auto out = h.Take();
  ASSERT_FALSE(out.empty());
  // The last ACK covers everything and closes the window.
  EXPECT_THAT(out.back(), Tcp(Flags(kAck), Ack(h.peer.seq), Window(0)));
  // Windows announced along the way are scaled by 9 (the first ACK
  // follows the second segment: an ACK every two full segments).
  EXPECT_THAT(out.front(),
              Tcp(Window(((16u << 20) - 2 * kSeg) >> 9)));
  // One byte more is outside the window: dropped, ACKed.
  h.Send(h.Segment().Data(1));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq),
                                        Window(0))));
  EXPECT_EQ(s->readable_bytes(), 16u << 20);
  // The application reads it all: the window reopens to 16 MiB.
  std::vector<uint8_t> buf(1 << 20);
  size_t total = 0;
  bool ok = true;
  while (total < (16u << 20)) {
    auto r = s->Read(buf);
    ASSERT_TRUE(r.ok());
    for (size_t i = 0; i < *r; i += 4099) {
      ok &= buf[i] == PatternByte(start + static_cast<uint32_t>(total + i));
    }
    total += *r;
  }
  EXPECT_TRUE(ok) << "payload corrupted";
  h.Poll();
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq),
                                        Window(32768))));
}

}  // namespace
}  // namespace netstack::tcp

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using namespace testing;  // NOLINT: the harness and its matchers

// RFC 2883: a segment we already have is reported in a D-SACK block,
// first in the next ACK, and only once.
TEST(DsackTest, DuplicateSegmentIsReportedOnceAsDsack) {
  HarnessOptions o;
  o.tcp.connection.quick_acks = 0;  // one ACK per two segments
  SegmentHarness h(o);
  auto sock = h.OpenActive();
  ASSERT_NE(sock, nullptr);
  const uint32_t mss = sock->Info().mss;
  const uint32_t base = h.peer.seq;
  h.Send(h.Segment().Seq(base).Data(mss));
  h.Send(h.Segment().Seq(base + mss).Data(mss));
  h.Take();  // the ACK(s) for the in-order data
  // The first segment again (a spurious retransmission).
  h.Send(h.Segment().Seq(base).Data(mss));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(base + 2 * mss),
                                        SackBlocks(ElementsAre(
                                            Block(base, base + mss))))));
  // The next ACK carries no D-SACK.
  h.Send(h.Segment().Seq(base + 2 * mss).Data(mss));
  h.Send(h.Segment().Seq(base + 3 * mss).Data(mss));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(base + 4 * mss),
                                        NoSack())));
}

}  // namespace
}  // namespace netstack::tcp

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using namespace testing;  // NOLINT: the harness and its matchers

// A FIN that arrives on data beyond a hole is kept with that data and
// taken when the hole fills: the ACK then covers the FIN.
TEST(OutOfOrderFinTest, FinOnDataBeyondAHoleIsTakenWhenTheHoleFills) {
  HarnessOptions o;
  SegmentHarness h(o);
  auto sock = h.OpenActive();
  ASSERT_NE(sock, nullptr);
  const uint32_t mss = sock->Info().mss;
  const uint32_t base = h.peer.seq;
  h.Send(h.Segment().Seq(base + mss).Data(mss).Flags(kAck | kFin | kPsh));
  h.Take();
  EXPECT_EQ(sock->state(), TcpState::kEstablished);
  h.Send(h.Segment().Seq(base).Data(mss));
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(base + 2 * mss + 1), NoSack())));
  EXPECT_EQ(sock->state(), TcpState::kCloseWait);
}

}  // namespace
}  // namespace netstack::tcp
