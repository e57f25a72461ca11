// PAWS (RFC 7323 section 5) in synchronized states, with Linux's
// tolerances:
//   - a segment one tick older than TS.Recent passes (TCP_PAWS_WINDOW): a
//     Linux sender stamps data at its pacing time and pure ACKs at the
//     current time, so its ACKs can look a tick older than its data;
//   - a reordered duplicate ACK passes (tcp_disordered_ack);
//   - TS.Recent is taken only from a segment whose ACK is acceptable, so a
//     forged in-window segment with a far-future TSval cannot make PAWS
//     reject every genuine segment after it.
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using namespace testing;  // NOLINT: the harness and its matchers

class PawsTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options() const {
    HarnessOptions o;
    o.v6 = GetParam();
    return o;
  }
};

INSTANTIATE_TEST_SUITE_P(V4V6, PawsTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(PawsTest, AnAckOneTickOlderThanTheDataBeforeItIsTaken) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  const uint32_t ts = h.PeerTsval();
  // The peer's data, stamped at its pacing time (a tick ahead)...
  h.Send(h.Segment().Data(100).Timestamps(ts + 1, h.peer.ts_recent));
  h.peer.seq += 100;
  h.Take();
  // ...and then its ACK of our data, stamped at the current time.
  ASSERT_TRUE(s->Write(Bytes(500)).ok());
  h.Poll();
  h.Take();
  const uint32_t una = h.iss() + 1;
  const uint64_t acked = s->Info().bytes_acked;
  h.Send(h.Segment().Ack(una + 500).Timestamps(ts, h.peer.ts_recent));
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpPawsRejected), 0u);
  EXPECT_EQ(s->Info().bytes_acked - acked, 500u);
}

TEST_P(PawsTest, AReorderedDuplicateAckIsTaken) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Write(Bytes(3000)).ok());
  h.Poll();
  h.Take();
  const uint32_t una = h.iss() + 1;
  const uint32_t ts = h.PeerTsval();
  // Two duplicate ACKs, delivered out of order: the older one (five
  // ticks behind, within an RTO) comes second.
  h.Send(h.Segment().Ack(una).Timestamps(ts + 5, h.peer.ts_recent));
  h.Send(h.Segment().Ack(una).Timestamps(ts, h.peer.ts_recent));
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpPawsRejected), 0u);
  EXPECT_EQ(s->Info().dup_acks_received, 2u);
}

TEST_P(PawsTest, AnOldDataSegmentIsStillRejected) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  const uint32_t ts = h.PeerTsval();
  h.Send(h.Segment().Data(100).Timestamps(ts + 100, h.peer.ts_recent));
  h.peer.seq += 100;
  // Data 100 ticks older than TS.Recent: a wrapped old duplicate (RFC
  // 7323 5.3), dropped.
  h.Send(h.Segment().Data(100).Timestamps(ts, h.peer.ts_recent));
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpPawsRejected), 1u);
  EXPECT_EQ(s->Info().bytes_received, 100u);
}

TEST_P(PawsTest, AForgedFutureTsvalWithABadAckDoesNotLockThePeerOut) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  const uint32_t ts = h.PeerTsval();
  // In window, but it acknowledges data we never sent: dropped, and its
  // TSval must not become TS.Recent.
  h.Send(h.Segment()
             .Ack(h.iss() + 1 + 100000)
             .Data(10)
             .Timestamps(ts + (1u << 30), h.peer.ts_recent));
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpAckUnsent), 1u);
  h.Take();
  // The genuine peer goes on with its own clock.
  h.Send(h.Segment().Data(100).Timestamps(ts + 1, h.peer.ts_recent));
  EXPECT_EQ(h.Drops(stack::DropReason::kTcpPawsRejected), 0u);
  EXPECT_EQ(s->Info().bytes_received, 100u);
}

}  // namespace
}  // namespace netstack::tcp
