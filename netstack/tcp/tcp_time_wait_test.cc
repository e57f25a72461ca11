// TIME_WAIT as a compact record (issue 12 items 4 and 8): which SYN may
// reopen the tuple (RFC 6191, Linux tcp_timewait_state_process), the ISN
// the new incarnation gets, and what one TIME_WAIT entry costs in memory.
// The basic TIME_WAIT behaviour (2 MSL, RFC 1337, FIN retransmission) is in
// tcp_close_test.
#include <malloc.h>

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/stack/counters.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/tcp/time_wait.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers
using stack::DropReason;

constexpr Duration kMsl = absl::Seconds(30);

class TimeWaitTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    HarnessOptions o;
    o.v6 = GetParam();
    h_ = std::make_unique<SegmentHarness>(o);
  }
  // A passive open that we close first: we hold TIME_WAIT. Leaves una_
  // at our sequence after the FIN and peer.seq after the peer's FIN.
  void EnterTimeWait(const PeerSynOptions& o = {}) {
    sock_ = h().OpenPassive(o);
    ASSERT_NE(sock_, nullptr);
    h().Take();
    una_ = h().iss() + 1;
    ASSERT_TRUE(sock_->Shutdown(false, true).ok());
    h().Poll();
    ASSERT_THAT(h().Take(), ElementsAre(Tcp(Flags(kFin | kAck), Seq(una_))));
    h().peer.ack = una_ + 1;
    last_peer_tsval_ = h().PeerTsval();
    h().Send(h().Segment().Flags(kFin | kAck));
    h().peer.seq += 1;
    ASSERT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Seq(una_ + 1),
                                            Ack(h().peer.seq))));
    ASSERT_EQ(sock_->state(), TcpState::kTimeWait);
    h().Advance(absl::Seconds(1));
  }
  SegmentHarness& h() { return *h_; }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> sock_;
  uint32_t una_ = 0;
  uint32_t last_peer_tsval_ = 0;
};

INSTANTIATE_TEST_SUITE_P(V4V6, TimeWaitTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

// Linux (tcp_timewait_state_process): a SYN reopens when PAWS does not
// reject it and either its sequence number is above RCV.NXT or its TSval
// is newer than TS.Recent. So a SYN whose TSval equals TS.Recent (a
// second connection within the same clock tick, or a peer whose clock
// stands still) is taken on its sequence number, as RFC 6191 section 2
// says too. The old code looked at the timestamp alone and refused it.
TEST_P(TimeWaitTest, SynWithEqualTsvalAndHigherSeqReopens) {
  EnterTimeWait();
  const uint32_t new_isn = h().peer.seq + 100000;
  h().Send(h().Syn().Seq(new_isn).Timestamps(last_peer_tsval_, 0));
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kSyn | kAck), Ack(new_isn + 1))));
  EXPECT_EQ(h().tcp().counters().time_wait_recycled, 1u);
}

// The same SYN with its sequence number at or below RCV.NXT may be an old
// duplicate: refused (answered with an ACK), TIME_WAIT stays.
TEST_P(TimeWaitTest, SynWithEqualTsvalAndOldSeqIsRefused) {
  EnterTimeWait();
  h().Send(h().Syn().Seq(h().peer.seq - 5).Timestamps(last_peer_tsval_, 0));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq))));
  EXPECT_EQ(sock_->state(), TcpState::kTimeWait);
  EXPECT_EQ(h().tcp().counters().time_wait_recycled, 0u);
}

// A newer TSval is enough, whatever the sequence number (Linux: "if paws
// works, it is reliable AND ... we even may relax silly seq space cutoff").
TEST_P(TimeWaitTest, SynWithNewerTsvalAndLowerSeqReopens) {
  EnterTimeWait();
  const uint32_t new_isn = h().peer.seq - 100000;
  h().Send(h().Syn().Seq(new_isn));  // TSval: the peer's clock, now newer
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kSyn | kAck), Ack(new_isn + 1))));
}

// A SYN with no timestamp option escapes PAWS: its sequence number alone
// decides (a client whose stack does not send timestamps, or one behind a
// middlebox that strips them).
TEST_P(TimeWaitTest, SynWithoutTimestampAndHigherSeqReopens) {
  EnterTimeWait();
  PeerSynOptions p;
  p.timestamps = false;
  const uint32_t new_isn = h().peer.seq + 1;
  h().Send(h().Syn(p).Seq(new_isn));
  EXPECT_THAT(h().Take(),
              ElementsAre(Tcp(Flags(kSyn | kAck), Ack(new_isn + 1))));
}

// An older TSval is what PAWS rejects, in Linux as here, even with a
// higher sequence number: the SYN is answered with an ACK and TIME_WAIT
// stays (Linux lets the client's answering RST end TIME_WAIT only with
// tcp_rfc1337=0; we keep RFC 1337). The ACK is rate-limited.
TEST_P(TimeWaitTest, SynWithOlderTsvalIsRefusedByPaws) {
  EnterTimeWait();
  h().Send(h().Syn().Seq(h().peer.seq + 100000).Timestamps(1, 0));
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kAck), Ack(h().peer.seq))));
  h().Send(h().Syn().Seq(h().peer.seq + 100000).Timestamps(1, 0));
  EXPECT_THAT(h().Take(), IsEmpty()) << "one ACK per 500 ms";
  EXPECT_EQ(sock_->state(), TcpState::kTimeWait);
  EXPECT_EQ(h().Drops(DropReason::kTcpPawsRejected), 2u);
}

// RFC 1122 4.2.2.13: the new incarnation's ISN must be above every
// sequence number the old one used. Linux takes snd_nxt + 65535 + 2.
TEST_P(TimeWaitTest, ReopenedConnectionIsnIsAboveOldSequenceSpace) {
  EnterTimeWait();
  const uint32_t new_isn = h().peer.seq + 100000;
  h().Send(h().Syn().Seq(new_isn));
  auto out = h().Take();
  ASSERT_THAT(out, ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_EQ(out[0].tcp.seq, una_ + 1 + 65535 + 2);
}

// A bare in-window ACK (the peer's own TIME_WAIT ACK crossing ours) is
// taken silently and neither answered nor restarts 2 MSL.
TEST_P(TimeWaitTest, BareAckIsIgnored) {
  EnterTimeWait();
  const Instant entered = h().now() - absl::Seconds(1);
  h().Send(h().Segment());
  EXPECT_THAT(h().Take(), IsEmpty());
  h().AdvanceTo(entered + 2 * kMsl);
  EXPECT_EQ(sock_->state(), TcpState::kClosed);
}

// Bytes one TIME_WAIT entry holds: the heap in use (mallinfo2) with N
// orphaned connections in TIME_WAIT, less the heap once they expired.
// Before the compact record each one kept its whole Connection.
TEST_P(TimeWaitTest, BytesPerTimeWaitEntry) {
  constexpr int kN = 500;
  auto open_and_close = [&](int i) {
    h().peer.port = static_cast<uint16_t>(20000 + i);
    h().peer.seq = SegmentHarness::kPeerIsn;
    auto s = h().OpenPassive();
    ASSERT_NE(s, nullptr);
    const uint32_t una = h().iss() + 1;
    s.reset();  // close: our FIN
    h().Poll();
    h().peer.ack = una + 1;
    h().Send(h().Segment().Flags(kFin | kAck));
    h().peer.seq += 1;
    h().Take();
  };
  open_and_close(-1);  // warm up the tables
  h().AdvanceTo(h().now() + 2 * kMsl);
  h().Take();
  const size_t before = mallinfo2().uordblks;
  for (int i = 0; i < kN; ++i) open_and_close(i);
  ASSERT_EQ(h().tcp().connection_count(), static_cast<size_t>(kN));
  const size_t with_tw = mallinfo2().uordblks;
  h().AdvanceTo(h().now() + 2 * kMsl);
  EXPECT_EQ(h().tcp().connection_count(), 0u);
  const double per_entry =
      (static_cast<double>(with_tw) - static_cast<double>(before)) / kN;
  std::printf(
      "TIME_WAIT: %.0f heap bytes per entry (%d entries), "
      "sizeof(TimeWaitEntry) %zu\n",
      per_entry, kN, sizeof(TimeWaitEntry));
  RecordProperty("bytes_per_time_wait", static_cast<int>(per_entry));
  EXPECT_LT(per_entry, 512);
}

}  // namespace
}  // namespace netstack::tcp
