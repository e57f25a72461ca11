// Segment-level tests of what a peer cannot make us do: every malformed or
// unacceptable segment is dropped under its stack::DropReason, and the
// connection carries on (a transfer continues in both directions).
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/stack/counters.h"
#include "netstack/tcp/tcp_segment_harness.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers
using stack::DropReason;

struct BadSegment {
  const char* name;
  DropReason reason;
  bool acked;  // the stack answers with an ACK (RFC 9293 / RFC 5961)
  // Turns a template data segment into the bad one.
  PeerSegment (*make)(const SegmentHarness& h);
};

const BadSegment kBad[] = {
    {"DataOffsetBelowFive", DropReason::kTcpBadDataOffset, false,
     [](const SegmentHarness& h) { return h.Segment().Data(10).DataOffset(4); }},
    {"DataOffsetPastSegment", DropReason::kTcpBadDataOffset, false,
     [](const SegmentHarness& h) {
       return h.Segment().NoTimestamps().DataOffset(15);
     }},
    {"OptionLengthBelowTwo", DropReason::kTcpBadOptions, false,
     [](const SegmentHarness& h) {
       return h.Segment().Data(10).RawOptions({2, 1, 0, 0});
     }},
    {"OptionPastHeader", DropReason::kTcpBadOptions, false,
     [](const SegmentHarness& h) {
       return h.Segment().Data(10).RawOptions({1, 1, 8, 10});
     }},
    {"WrongMssLength", DropReason::kTcpBadOptions, false,
     [](const SegmentHarness& h) {
       return h.Segment().Data(10).RawOptions({2, 3, 5, 0});
     }},
    {"SynFin", DropReason::kTcpBadFlags, false,
     [](const SegmentHarness& h) {
       return h.Segment().Flags(kSyn | kFin | kAck).Data(10);
     }},
    {"SynRst", DropReason::kTcpBadFlags, false,
     [](const SegmentHarness& h) { return h.Segment().Flags(kSyn | kRst); }},
    {"NoFlags", DropReason::kTcpBadFlags, false,
     [](const SegmentHarness& h) { return h.Segment().Flags(0).Data(10); }},
    {"FinWithoutAck", DropReason::kTcpBadFlags, false,
     [](const SegmentHarness& h) { return h.Segment().Flags(kFin); }},
    {"BadChecksum", DropReason::kTcpBadChecksum, false,
     [](const SegmentHarness& h) { return h.Segment().Data(10).BadChecksum(); }},
    {"SourcePortZero", DropReason::kTcpBadAddress, false,
     [](const SegmentHarness& h) { return h.Segment().Data(10).SrcPort(0); }},
    {"FarOutsideWindow", DropReason::kTcpOutOfWindow, true,
     [](const SegmentHarness& h) {
       PeerSegment s = h.Segment();
       s.Seq(h.peer.seq + (1u << 30)).Data(100);
       return s;
     }},
    // Entirely below RCV.NXT: a duplicate (D-SACKed), not out of window.
    {"OldDuplicate", DropReason::kTcpDuplicateData, true,
     [](const SegmentHarness& h) {
       PeerSegment s = h.Segment();
       s.Seq(h.peer.seq - 200).Data(100);
       return s;
     }},
    {"AckOfUnsentData", DropReason::kTcpAckUnsent, true,
     [](const SegmentHarness& h) {
       return h.Segment().Ack(h.snd_max() + 100000).Data(10);
     }},
    {"OldTimestamp", DropReason::kTcpPawsRejected, true,
     [](const SegmentHarness& h) {
       PeerSegment s = h.Segment();
       s.Data(10).Timestamps(h.PeerTsval() - 100000, h.peer.ts_recent);
       return s;
     }},
};

class MalformedTest
    : public ::testing::TestWithParam<std::tuple<bool, BadSegment>> {};

INSTANTIATE_TEST_SUITE_P(
    All, MalformedTest,
    ::testing::Combine(::testing::Bool(), ::testing::ValuesIn(kBad)),
    [](const auto& p) {
      return std::string(std::get<0>(p.param) ? "v6_" : "v4_") +
             std::get<1>(p.param).name;
    });

TEST_P(MalformedTest, DroppedWithReasonAndConnectionContinues) {
  const auto& [v6, bad] = GetParam();
  HarnessOptions o;
  o.v6 = v6;
  SegmentHarness h(o);
  auto s = h.OpenActive();
  const uint32_t una = h.iss() + 1;
  // Some traffic first.
  h.Advance(absl::Seconds(1));
  h.SendData(1000);
  ASSERT_TRUE(s->Write(Bytes(500)).ok());
  h.Poll();
  h.Take();
  h.SendAck(una + 500);
  h.Advance(absl::Seconds(1));
  const auto before = h.stack().counters();
  const uint64_t readable = s->readable_bytes();

  h.Send(bad.make(h));
  EXPECT_EQ(h.Drops(bad.reason), before.drop(bad.reason) + 1)
      << "drop reason " << stack::DropReasonName(bad.reason);
  EXPECT_EQ(h.stack().counters().RxDrops(), before.RxDrops() + 1)
      << "exactly one reason per dropped frame";
  EXPECT_EQ(s->readable_bytes(), readable) << "payload of a bad segment kept";
  EXPECT_EQ(s->state(), TcpState::kEstablished);
  const auto out = h.Take();
  if (bad.acked) {
    EXPECT_THAT(out, ElementsAre(Tcp(Flags(kAck), Seq(una + 500),
                                     Ack(h.peer.seq), PayloadLen(0))));
  } else {
    EXPECT_THAT(out, IsEmpty());
  }

  // The transfer continues in both directions.
  h.SendData(1000);
  EXPECT_EQ(s->readable_bytes(), readable + 1000);
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq))))
      << "quick ACK of new data";
  ASSERT_TRUE(s->Write(Bytes(700)).ok());
  h.Poll();
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Seq(una + 500), PayloadLen(700),
                                        Ack(h.peer.seq))));
  h.SendAck(una + 1200);
  EXPECT_EQ(s->Info().bytes_in_flight, 0u);
  std::vector<uint8_t> buf(8192);
  auto r = s->Read(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, readable + 1000);
  const auto& c = h.stack().counters();
  EXPECT_EQ(c.rx_frames, c.rx_consumed + c.rx_dropped_frames);
}

}  // namespace
}  // namespace netstack::tcp
