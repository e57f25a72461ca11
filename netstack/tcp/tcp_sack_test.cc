// What the receiver tells the sender about the data it holds (issue #12
// item 5): an ACK for each new out-of-order run and each filled hole, per
// GRO super-frame, and every two segments; SACK blocks that always report
// the run next to RCV.NXT and rotate the others (RFC 2018 section 4); and
// more than one pending D-SACK (RFC 2883).
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"

namespace netstack::tcp {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::SizeIs;
using namespace testing;  // NOLINT: the harness and its matchers

class SackTest : public ::testing::Test {
 protected:
  void Open(uint32_t mtu = 1500) {
    HarnessOptions o;
    o.mtu = mtu;
    o.tcp.connection.quick_acks = 0;
    h_ = std::make_unique<SegmentHarness>(o);
    sock_ = h_->OpenActive();
    mss_ = sock_->Info().mss;
    base_ = h_->peer.seq;
  }
  // The segment [base + i * mss, base + (i + 1) * mss).
  PeerSegment Seg(uint32_t i) const {
    return h_->Segment().Seq(base_ + i * mss_).Data(mss_);
  }
  wire::TcpSackBlock Run(uint32_t i) const {
    return Block(base_ + i * mss_, base_ + (i + 1) * mss_);
  }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> sock_;
  uint32_t mss_ = 0;
  uint32_t base_ = 0;
};

std::vector<wire::TcpSackBlock> BlocksOf(const OutSegment& s) {
  return {s.tcp.sack_blocks.begin(), s.tcp.sack_blocks.begin() + s.tcp.sack_count};
}

// The lossy capture's pattern: one batch makes four runs. Each gets its
// ACK, and every ACK reports the run next to the hole at RCV.NXT; with
// one ACK per batch and "newest, then highest" the lowest was never sent.
TEST_F(SackTest, EveryAckOfABatchReportsTheRunNextToTheHole) {
  Open();
  h_->SendBatch({Seg(1), Seg(3), Seg(5), Seg(7)});
  const auto out = h_->Take();
  ASSERT_THAT(out, SizeIs(4));
  for (const OutSegment& s : out) {
    EXPECT_THAT(s, Tcp(Flags(kAck), Ack(base_)));
    EXPECT_THAT(BlocksOf(s), Contains(Run(1))) << ::testing::PrintToString(s);
  }
  // The last: the newest run first (RFC 2018 4 MUST), then the lowest.
  EXPECT_THAT(out.back(),
              SackBlocks(ElementsAre(Run(7), Run(1), ::testing::_)));
}

// With more runs than blocks, successive ACKs rotate the third block
// through the others, so each run is reported again (RFC 2018 4).
TEST_F(SackTest, OtherRunsRotateAcrossAcks) {
  Open();
  for (uint32_t i : {1u, 3u, 5u, 7u, 9u, 11u}) h_->Send(Seg(i));
  h_->Take();
  std::set<uint32_t> third;
  // Duplicates of the newest run: each draws an ACK (with a D-SACK
  // first, then the newest run, the lowest, and one more).
  for (int k = 0; k < 4; ++k) {
    h_->Send(Seg(11));
    auto out = h_->Take();
    ASSERT_THAT(out, SizeIs(1));
    ASSERT_EQ(out[0].tcp.sack_count, 3) << ::testing::PrintToString(out[0]);
    EXPECT_THAT(BlocksOf(out[0])[0], ::testing::Eq(Run(11)));  // D-SACK
    // No room for more than one block beyond the D-SACK and the newest.
    third.insert(out[0].tcp.sack_blocks[2].left);
  }
  // Without D-SACKs: new data extending the newest run.
  for (uint32_t k = 12; k < 16; ++k) {
    h_->Send(Seg(k));
    auto out = h_->Take();
    for (const OutSegment& s : out) {
      ASSERT_EQ(s.tcp.sack_count, 3);
      EXPECT_EQ(s.tcp.sack_blocks[1].left, Run(1).left);  // the lowest
      third.insert(s.tcp.sack_blocks[2].left);
    }
  }
  // Runs 3, 5, 7, 9 all showed up in some ACK.
  for (uint32_t i : {3u, 5u, 7u, 9u}) {
    EXPECT_TRUE(third.count(Run(i).left)) << "run " << i << " never reported";
  }
}

// Two duplicates in one batch: each is reported in a D-SACK of its own
// (RFC 2883), not only the last one.
TEST_F(SackTest, EachDuplicateOfABatchGetsItsDsack) {
  Open();
  h_->SendBatch({Seg(0), Seg(1), Seg(2), Seg(3)});
  h_->Take();
  h_->SendBatch({Seg(0), Seg(2)});
  const auto out = h_->Take();
  std::vector<wire::TcpSackBlock> firsts;
  for (const OutSegment& s : out) {
    EXPECT_THAT(s, Tcp(Flags(kAck), Ack(base_ + 4 * mss_)));
    if (s.tcp.sack_count > 0) firsts.push_back(s.tcp.sack_blocks[0]);
  }
  EXPECT_THAT(firsts, ElementsAre(Run(0), Run(2)));
  EXPECT_EQ(h_->Drops(stack::DropReason::kTcpDuplicateData), 2u);
  EXPECT_EQ(h_->Drops(stack::DropReason::kTcpOutOfWindow), 0u);
}

// A GRO super-frame of two or more segments stands for that many: it gets
// its own ACK, even inside a batch.
TEST_F(SackTest, EachGroSuperFrameGetsItsOwnAck) {
  Open(/*mtu=*/9000);  // room for 3 x 1448-byte segments in one frame
  ASSERT_EQ(mss_, 1448u);
  std::vector<PeerSegment> batch;
  for (uint32_t i = 0; i < 3; ++i) {
    batch.push_back(h_->Segment().Seq(base_ + i * 3 * mss_).Data(3 * mss_));
  }
  h_->SendBatch(batch);
  EXPECT_THAT(h_->Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(base_ + 3 * mss_)),
                          Tcp(Flags(kAck), Ack(base_ + 6 * mss_)),
                          Tcp(Flags(kAck), Ack(base_ + 9 * mss_))));
}

// Filling part of a hole (data that joins the run above it) is reported
// at once, within the batch.
TEST_F(SackTest, PartlyFilledHoleIsAckedAtOnce) {
  Open();
  h_->Send(Seg(4));
  h_->Take();
  h_->SendBatch({Seg(3), Seg(1)});
  EXPECT_THAT(
      h_->Take(),
      ElementsAre(Tcp(Ack(base_), SackBlocks(ElementsAre(
                                      Block(base_ + 3 * mss_, base_ + 5 * mss_)))),
                  Tcp(Ack(base_), SackBlocks(ElementsAre(
                                      Run(1), Block(base_ + 3 * mss_,
                                                    base_ + 5 * mss_))))));
}

}  // namespace
}  // namespace netstack::tcp
