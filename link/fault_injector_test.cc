#include "link/fault_injector.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "link/frame_util.h"
#include "link/link_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"

namespace netstack::link {
namespace {

using ::netstack::link::testing::AdvanceTo;
using ::netstack::link::testing::FrameId;
using ::netstack::link::testing::MakePacket;
using ::netstack::link::testing::RecordingEndpoint;
using ::netstack::link::testing::RecordingReceiver;
using ::netstack::link::testing::RunUntilIdle;
using ::netstack::link::testing::TestFrame;

const Instant kT0 = absl::UnixEpoch() + absl::Seconds(1'000'000);

// One frame as it left the injector, in either direction.
struct Output {
  Instant time;
  std::vector<uint8_t> bytes;
  bool operator==(const Output&) const = default;
};

// The tolerance for a measured rate of n Bernoulli(p) trials: five binomial
// standard deviations, sqrt(p (1 - p) / n). A correct injector falls
// outside it with probability below 10^-6 for any seed (and the seeds here
// are fixed, so the tests are not flaky); a rate off by more than that is
// a bug. For p = 0.05 and n = 100,000: sigma = 0.000689, tolerance
// +-0.00345.
double Tolerance(double p, double n) { return 5 * std::sqrt(p * (1 - p) / n); }

size_t BitsDiffering(const std::vector<uint8_t>& a,
                     const std::vector<uint8_t>& b, size_t* first_byte) {
  size_t bits = 0;
  *first_byte = SIZE_MAX;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const int d = std::popcount(static_cast<unsigned>(a[i] ^ b[i]));
    if (d > 0 && *first_byte == SIZE_MAX) *first_byte = i;
    bits += d;
  }
  return bits;
}

class FaultInjectorTest : public ::testing::Test {
 protected:
  void TearDown() override {
    injector_.reset();
    EXPECT_EQ(packets_.stats().in_use, 0u);
    EXPECT_EQ(chunks_.stats().in_use, 0u);
  }

  void Create(const FaultInjectorOptions& options,
              size_t accept_per_call = std::numeric_limits<size_t>::max()) {
    injector_.reset();
    auto inner = std::make_unique<RecordingEndpoint>(chunks_, accept_per_call);
    rec_ = inner.get();
    auto injector =
        FaultInjector::Create(std::move(inner), packets_, chunks_, options);
    ASSERT_TRUE(injector.ok()) << injector.status();
    injector_ = std::move(*injector);
    injector_->Attach(&rx_);
    rx_.frames.clear();
  }

  // A frame of `len` bytes: up to 192 bytes it lives in the headers only
  // (cheap, for the statistical tests), beyond that 54 header bytes and
  // two payload views of one chunk, as TCP over IPv4 builds it.
  buffer::PacketPtr Packet(size_t len, uint32_t id,
                           buffer::ChunkRef* chunk = nullptr) {
    const std::vector<uint8_t> f = TestFrame(len, id);
    return len <= buffer::kMaxHeaderLen
               ? MakePacket(packets_, chunks_, f, len)
               : MakePacket(packets_, chunks_, f, 54, 2, chunk);
  }

  // Transmits frames 0..n-1, frame i of len(i) bytes at kT0 + i * spacing,
  // one Transmit per frame, polling every deadline that comes first; then
  // runs until idle. Returns what reached the inner endpoint.
  std::vector<Output> SendEgress(size_t n, Duration spacing,
                                 const std::function<size_t(uint32_t)>& len) {
    Instant now = kT0;
    for (uint32_t i = 0; i < n; ++i) {
      const Instant t = kT0 + spacing * i;
      now = std::max(now, AdvanceTo(*injector_, now, t));
      now = t;
      buffer::PacketChain chain;
      chain.PushBack(Packet(len(i), i));
      injector_->Transmit(chain, now);
      EXPECT_TRUE(chain.empty());
    }
    RunUntilIdle(*injector_, now);
    std::vector<Output> out;
    out.reserve(rec_->sent.size());
    for (const RecordingEndpoint::Sent& s : rec_->sent) {
      out.push_back({s.time, s.bytes});
    }
    return out;
  }

  // Like SendEgress, inbound: frame i is received by the inner endpoint at
  // kT0 + i * spacing. Returns what reached the injector's receiver.
  std::vector<Output> SendIngress(size_t n, Duration spacing,
                                  const std::function<size_t(uint32_t)>& len) {
    Instant now = kT0;
    for (uint32_t i = 0; i < n; ++i) {
      const Instant t = kT0 + spacing * i;
      now = std::max(now, AdvanceTo(*injector_, now, t));
      now = t;
      rec_->Receive(TestFrame(len(i), i), now);
    }
    RunUntilIdle(*injector_, now);
    std::vector<Output> out;
    out.reserve(rx_.frames.size());
    for (const auto& f : rx_.frames) out.push_back({f.time, f.bytes});
    return out;
  }

  buffer::ChunkPool chunks_{4096};
  buffer::PacketPool packets_{1 << 16};
  RecordingReceiver rx_;
  RecordingEndpoint* rec_ = nullptr;
  std::unique_ptr<FaultInjector> injector_;
};

size_t VariedLength(uint32_t i) { return 60 + (i * 7919u) % 1455u; }
size_t SmallLength(uint32_t i) { return 60 + i % 100; }

FaultInjectorOptions Everything(uint64_t seed) {
  FaultProfile p;
  p.loss = 0.03;
  p.duplicate = 0.03;
  p.reorder = 0.05;
  p.corrupt = 0.03;
  p.delay = absl::Milliseconds(5);
  p.jitter = absl::Milliseconds(2);
  p.rate_bps = 100'000'000;
  FaultInjectorOptions o;
  o.egress = p;
  o.ingress = p;
  o.ingress.reorder_distance = 2;
  o.seed = seed;
  return o;
}

// Same seed and input: the same frames, bytes, order and instants, in both
// directions; another seed: a different sequence.
TEST_F(FaultInjectorTest, SameSeedSameOutputDifferentSeedDifferent) {
  constexpr size_t kFrames = 10'000;
  const Duration spacing = absl::Microseconds(100);
  auto run = [&](uint64_t seed, FaultStats* egress, FaultStats* ingress) {
    Create(Everything(seed));
    std::vector<Output> out = SendEgress(kFrames, spacing, VariedLength);
    std::vector<Output> in = SendIngress(kFrames, spacing, VariedLength);
    *egress = injector_->egress_stats();
    *ingress = injector_->ingress_stats();
    out.insert(out.end(), in.begin(), in.end());
    return out;
  };
  FaultStats e1, i1, e2, i2, e3, i3;
  const std::vector<Output> first = run(42, &e1, &i1);
  const std::vector<Output> second = run(42, &e2, &i2);
  const std::vector<Output> other = run(43, &e3, &i3);

  // Every effect really ran, so the comparison covers all of them.
  for (const FaultStats* s : {&e1, &i1}) {
    EXPECT_EQ(s->packets_in, kFrames);
    EXPECT_GT(s->dropped, 0u);
    EXPECT_GT(s->duplicated, 0u);
    EXPECT_GT(s->reordered, 0u);
    EXPECT_GT(s->corrupted, 0u);
    EXPECT_GT(s->delayed, 0u);
    EXPECT_GT(s->rate_limited, 0u);
  }
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_EQ(first[i], second[i]) << "output " << i << " differs";
  }
  EXPECT_EQ(e1.dropped, e2.dropped);
  EXPECT_EQ(i1.corrupted, i2.corrupted);
  EXPECT_NE(first, other);
}

// Each effect draws from its own stream: adding corruption and reordering
// does not change which frames are lost.
TEST_F(FaultInjectorTest, EffectsUseIndependentStreams) {
  auto lost = [&](const FaultInjectorOptions& o) {
    Create(o);
    const std::vector<Output> out =
        SendEgress(5'000, absl::Microseconds(10), SmallLength);
    std::set<uint32_t> seen;
    for (const Output& f : out) seen.insert(FrameId(f.bytes));
    std::set<uint32_t> missing;
    for (uint32_t i = 0; i < 5'000; ++i) {
      if (!seen.contains(i)) missing.insert(i);
    }
    return missing;
  };
  FaultInjectorOptions o;
  o.egress.loss = 0.1;
  const std::set<uint32_t> only_loss = lost(o);
  o.egress.reorder = 0.2;
  o.egress.duplicate = 0.2;
  o.egress.jitter = absl::Microseconds(50);
  const std::set<uint32_t> with_more = lost(o);
  EXPECT_GT(only_loss.size(), 400u);
  EXPECT_EQ(only_loss, with_more);
}

// Loss 0.05 over 100,000 frames: the measured rate is within 5 sigma, and
// the counter matches the frames that really went missing.
TEST_F(FaultInjectorTest, LossRateMatchesConfiguration) {
  constexpr double kLoss = 0.05;
  constexpr size_t kFrames = 100'000;
  FaultInjectorOptions o;
  o.egress.loss = kLoss;
  o.seed = 7;
  Create(o);
  const std::vector<Output> out =
      SendEgress(kFrames, absl::Microseconds(1), SmallLength);
  const FaultStats& s = injector_->egress_stats();
  const double measured = static_cast<double>(s.dropped) / kFrames;
  const double tolerance = Tolerance(kLoss, kFrames);
  EXPECT_NEAR(measured, kLoss, tolerance);
  std::cout << "loss: configured " << kLoss << ", measured " << measured
            << " over " << kFrames << " frames (tolerance +-" << tolerance
            << ")\n";
  EXPECT_EQ(out.size(), kFrames - s.dropped);
  EXPECT_EQ(s.packets_out, out.size());
  // What is left is in order and unchanged.
  for (size_t i = 1; i < out.size(); ++i) {
    ASSERT_LT(FrameId(out[i - 1].bytes), FrameId(out[i].bytes));
  }
  EXPECT_EQ(out[0].bytes, TestFrame(SmallLength(FrameId(out[0].bytes)),
                                    FrameId(out[0].bytes)));
}

// Duplicate 0.05 over 100,000 frames: within 5 sigma; every duplicate
// directly follows its original, byte for byte.
TEST_F(FaultInjectorTest, DuplicateRateMatchesConfiguration) {
  constexpr double kDuplicate = 0.05;
  constexpr size_t kFrames = 100'000;
  FaultInjectorOptions o;
  o.egress.duplicate = kDuplicate;
  o.seed = 8;
  Create(o);
  const std::vector<Output> out =
      SendEgress(kFrames, absl::Microseconds(1), SmallLength);
  const FaultStats& s = injector_->egress_stats();
  size_t twins = 0;
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].bytes == out[i - 1].bytes) ++twins;
  }
  EXPECT_EQ(twins, s.duplicated);
  EXPECT_EQ(out.size(), kFrames + s.duplicated);
  const double measured = static_cast<double>(s.duplicated) / kFrames;
  const double tolerance = Tolerance(kDuplicate, kFrames);
  EXPECT_NEAR(measured, kDuplicate, tolerance);
  std::cout << "duplicate: configured " << kDuplicate << ", measured "
            << measured << " over " << kFrames << " frames (tolerance +-"
            << tolerance << ")\n";
}

// The duplicate shares the original's payload chunk: no payload copy.
TEST_F(FaultInjectorTest, DuplicateSharesPayload) {
  FaultInjectorOptions o;
  o.egress.duplicate = 1;
  Create(o);
  buffer::ChunkRef chunk;
  buffer::PacketChain chain;
  chain.PushBack(Packet(1514, 1, &chunk));
  const uint64_t chunks_before = chunks_.stats().allocations;
  injector_->Transmit(chain, kT0);
  ASSERT_EQ(rec_->sent.size(), 2u);
  EXPECT_EQ(rec_->sent[0].bytes, TestFrame(1514, 1));
  EXPECT_EQ(rec_->sent[1].bytes, TestFrame(1514, 1));
  EXPECT_EQ(rec_->sent[0].first_chunk, chunk.get());
  EXPECT_EQ(rec_->sent[1].first_chunk, chunk.get());
  EXPECT_EQ(chunks_.stats().allocations, chunks_before);
  EXPECT_EQ(injector_->egress_stats().duplicated, 1u);
}

// Corruption flips exactly one bit, after the Ethernet header, in a copy:
// the original chunk (think: a TCP retransmit queue) is never written.
TEST_F(FaultInjectorTest, CorruptFlipsOneBitInACopyOnly) {
  FaultInjectorOptions o;
  o.egress.corrupt = 1;
  o.seed = 3;
  Create(o);
  constexpr uint32_t kFrames = 2'000;
  size_t in_headers = 0;
  size_t in_payload = 0;
  for (uint32_t i = 0; i < kFrames; ++i) {
    buffer::ChunkRef chunk;
    buffer::PacketChain chain;
    chain.PushBack(Packet(1514, i, &chunk));
    const std::vector<uint8_t> original(chunk->data().begin(),
                                        chunk->data().end());
    injector_->Transmit(chain, kT0);
    ASSERT_EQ(rec_->sent.size(), i + 1);
    size_t where = 0;
    const std::vector<uint8_t>& sent = rec_->sent[i].bytes;
    ASSERT_EQ(sent.size(), 1514u);
    ASSERT_EQ(BitsDiffering(sent, TestFrame(1514, i), &where), 1u)
        << "frame " << i;
    ASSERT_GE(where, 14u) << "the Ethernet header was corrupted";
    (where < 54 ? in_headers : in_payload)++;
    // The shared chunk is byte-for-byte what it was.
    ASSERT_TRUE(
        std::equal(original.begin(), original.end(), chunk->data().begin()))
        << "frame " << i << ": the original chunk was modified";
  }
  EXPECT_EQ(injector_->egress_stats().corrupted, kFrames);
  // Both paths ran: a flip in the packet's own headers, and in a copied
  // payload view (40 of 1500 bytes are headers past Ethernet).
  EXPECT_GT(in_headers, 20u);
  EXPECT_GT(in_payload, 1500u);
}

TEST_F(FaultInjectorTest, CorruptInboundFrameClearsChecksumVerified) {
  FaultInjectorOptions o;
  o.ingress.corrupt = 1;
  Create(o);
  for (uint32_t i = 0; i < 100; ++i) {
    const std::vector<uint8_t> bytes = TestFrame(600, i);
    std::optional<buffer::PayloadView> view = CopyToChunk(bytes, chunks_);
    ASSERT_TRUE(view.has_value());
    InboundFrame frame{*view, /*checksum_verified=*/true,
                       /*checksum_partial=*/false};
    rec_->receiver()->DeliverFrames(std::span<InboundFrame>(&frame, 1), kT0);
    ASSERT_EQ(rx_.frames.size(), i + 1);
    size_t where = 0;
    EXPECT_EQ(BitsDiffering(rx_.frames[i].bytes, bytes, &where), 1u);
    EXPECT_GE(where, 14u);
    EXPECT_FALSE(rx_.frames[i].checksum_verified);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), view->bytes().begin()));
  }
}

// Corrupt rate over 100,000 frames within 5 sigma.
TEST_F(FaultInjectorTest, CorruptRateMatchesConfiguration) {
  constexpr double kCorrupt = 0.02;
  constexpr size_t kFrames = 100'000;
  FaultInjectorOptions o;
  o.egress.corrupt = kCorrupt;
  o.seed = 11;
  Create(o);
  const std::vector<Output> out =
      SendEgress(kFrames, absl::Microseconds(1), SmallLength);
  ASSERT_EQ(out.size(), kFrames);
  size_t damaged = 0;
  for (const Output& f : out) {
    // The id is in the bytes corruption may hit, so find it by length and
    // position instead: frames leave in order.
    const uint32_t id = static_cast<uint32_t>(&f - out.data());
    size_t where;
    const size_t bits =
        BitsDiffering(f.bytes, TestFrame(SmallLength(id), id), &where);
    ASSERT_LE(bits, 1u);
    damaged += bits;
  }
  EXPECT_EQ(damaged, injector_->egress_stats().corrupted);
  const double measured = static_cast<double>(damaged) / kFrames;
  EXPECT_NEAR(measured, kCorrupt, Tolerance(kCorrupt, kFrames));
  std::cout << "corrupt: configured " << kCorrupt << ", measured " << measured
            << " (tolerance +-" << Tolerance(kCorrupt, kFrames) << ")\n";
}

// Reorder 0.05, distance 1, over 100,000 frames: the rate is within 5
// sigma, and every held frame comes out exactly one place late.
TEST_F(FaultInjectorTest, ReorderRateAndDistance) {
  constexpr double kReorder = 0.05;
  constexpr size_t kFrames = 100'000;
  FaultInjectorOptions o;
  o.egress.reorder = kReorder;
  o.seed = 12;
  Create(o);
  const std::vector<Output> out =
      SendEgress(kFrames, absl::Microseconds(1), SmallLength);
  ASSERT_EQ(out.size(), kFrames);
  size_t late = 0;
  for (size_t pos = 0; pos < out.size(); ++pos) {
    const uint32_t id = FrameId(out[pos].bytes);
    if (pos > id) {
      ASSERT_EQ(pos - id, 1u) << "frame " << id;
      ++late;
    }
  }
  EXPECT_EQ(late, injector_->egress_stats().reordered);
  const double measured = static_cast<double>(late) / kFrames;
  EXPECT_NEAR(measured, kReorder, Tolerance(kReorder, kFrames));
  std::cout << "reorder: configured " << kReorder << ", measured " << measured
            << " (tolerance +-" << Tolerance(kReorder, kFrames) << ")\n";
}

// With reorder_distance 3 a held frame comes out behind exactly the next
// three frames. A held frame that fewer frames overtake within the hold
// limit leaves at its deadline behind just those (in order if none did).
TEST_F(FaultInjectorTest, ReorderDistanceAndHoldLimit) {
  FaultInjectorOptions o;
  o.egress.reorder = 0.3;
  o.egress.reorder_distance = 3;
  o.egress.reorder_hold_limit = absl::Milliseconds(2);
  o.seed = 5;
  // Displacement of each late frame -> how many.
  auto lateness = [&](Duration spacing, size_t frames) {
    Create(o);
    const std::vector<Output> out = SendEgress(frames, spacing, SmallLength);
    EXPECT_EQ(out.size(), frames);
    std::map<size_t, size_t> late;
    for (size_t pos = 0; pos < out.size(); ++pos) {
      const uint32_t id = FrameId(out[pos].bytes);
      if (pos > id) ++late[pos - id];
    }
    size_t total = 0;
    for (const auto& [distance, count] : late) total += count;
    EXPECT_EQ(total, injector_->egress_stats().reordered);
    return late;
  };
  // Every 3 ms: nothing arrives within the 2 ms limit, all stays in order.
  EXPECT_TRUE(lateness(absl::Milliseconds(3), 300).empty());
  // Every 100 us: three successors come well within the limit. Only a
  // hold among the last frames can end short of three.
  std::map<size_t, size_t> late = lateness(absl::Microseconds(100), 2'000);
  EXPECT_GT(late[3], 400u);
  EXPECT_LE(late[1] + late[2], 3u);
  EXPECT_EQ(late.size(), late.count(1) + late.count(2) + late.count(3));
  // Every 1 ms: the successor at +1 ms passes; the one at +2 ms arrives
  // after the Poll at the held frame's deadline; never three.
  late = lateness(absl::Milliseconds(1), 2'000);
  EXPECT_EQ(late.count(3), 0u);
  EXPECT_GT(late[1], 300u);
}

// Delay 10 ms +- 3 ms: every frame leaves within [7 ms, 13 ms] of its
// arrival, the whole range is used, and the order is kept.
TEST_F(FaultInjectorTest, DelayWithJitterStaysInBounds) {
  const Duration kDelay = absl::Milliseconds(10);
  const Duration kJitter = absl::Milliseconds(3);
  FaultInjectorOptions o;
  o.egress.delay = kDelay;
  o.egress.jitter = kJitter;
  o.seed = 9;
  for (const Duration spacing :
       {absl::Milliseconds(1), absl::Milliseconds(10)}) {
    Create(o);
    constexpr size_t kFrames = 10'000;
    const std::vector<Output> out = SendEgress(kFrames, spacing, SmallLength);
    ASSERT_EQ(out.size(), kFrames);
    Duration lo = absl::InfiniteDuration();
    Duration hi = -absl::InfiniteDuration();
    Duration sum;
    for (size_t i = 0; i < kFrames; ++i) {
      ASSERT_EQ(FrameId(out[i].bytes), i) << "jitter reordered";
      const Duration d = out[i].time - (kT0 + spacing * i);
      ASSERT_GE(d, kDelay - kJitter) << "frame " << i;
      ASSERT_LE(d, kDelay + kJitter) << "frame " << i;
      lo = std::min(lo, d);
      hi = std::max(hi, d);
      sum += d;
    }
    EXPECT_LT(lo, kDelay - kJitter + absl::Microseconds(100));
    EXPECT_GT(hi, kDelay + kJitter - absl::Microseconds(100));
    EXPECT_EQ(injector_->egress_stats().delayed, kFrames);
    if (spacing > 2 * kJitter) {
      // No frame waits for its predecessor, so the jitter is the uniform
      // draw itself: mean 10 ms, sigma 3 ms / sqrt(3) = 1.73 ms, so the
      // mean of 10,000 has sigma 17.3 us; 5 sigma is 87 us.
      EXPECT_NEAR(absl::ToDoubleMicroseconds(sum / kFrames),
                  absl::ToDoubleMicroseconds(kDelay), 87);
    }
  }
}

// 10 Mbit/s with frames offered at twice that: they leave one serialization
// time (1 ms for 1250 bytes) apart, and the throughput is the rate.
TEST_F(FaultInjectorTest, RateLimitThroughput) {
  constexpr uint64_t kRate = 10'000'000;
  constexpr size_t kFrames = 5'000;
  constexpr size_t kLen = 1250;
  FaultInjectorOptions o;
  o.egress.rate_bps = kRate;
  o.queue_limit = kFrames;
  Create(o);
  const std::vector<Output> out = SendEgress(kFrames, absl::Microseconds(500),
                                             [](uint32_t) { return kLen; });
  ASSERT_EQ(out.size(), kFrames);
  for (size_t i = 1; i < out.size(); ++i) {
    ASSERT_EQ(out[i].time - out[i - 1].time, absl::Milliseconds(1)) << i;
  }
  const double seconds = absl::ToDoubleSeconds(out.back().time - kT0);
  const double bps = kFrames * kLen * 8 / seconds;
  // The schedule is exact (Duration keeps quarter nanoseconds), so 0.1%
  // only allows for the first frame's own serialization time.
  EXPECT_NEAR(bps, kRate, kRate * 0.001);
  std::cout << "rate: configured " << kRate << " bit/s, measured " << bps
            << " bit/s\n";
  EXPECT_EQ(injector_->egress_stats().rate_limited, kFrames - 1);
  EXPECT_EQ(injector_->egress_stats().overflow, 0u);
}

// A burst into a rate-limited link with a small queue: the queue limit
// tail-drops, and what gets through still leaves at the rate.
TEST_F(FaultInjectorTest, RateLimitQueueOverflowTailDrops) {
  FaultInjectorOptions o;
  o.egress.rate_bps = 1'000'000;
  o.queue_limit = 100;
  Create(o);
  buffer::PacketChain chain;
  for (uint32_t i = 0; i < 1000; ++i) chain.PushBack(Packet(125, i));
  EXPECT_EQ(injector_->Transmit(chain, kT0), 100u);
  EXPECT_TRUE(chain.empty());
  EXPECT_EQ(injector_->egress_stats().overflow, 900u);
  const Instant end = RunUntilIdle(*injector_, kT0);
  ASSERT_EQ(rec_->sent.size(), 100u);
  EXPECT_EQ(FrameId(rec_->sent[99].bytes), 99u);
  EXPECT_EQ(end - kT0, absl::Milliseconds(100));  // 100 x 1000 bits at 1 Mbit/s
}

// Inbound frames with a delay reach the receiver only from Poll, with
// their flags.
TEST_F(FaultInjectorTest, IngressDelayDeliversFromPoll) {
  FaultInjectorOptions o;
  o.ingress.delay = absl::Milliseconds(5);
  Create(o);
  rec_->Receive(TestFrame(100, 1), kT0, false, /*checksum_partial=*/true);
  rec_->Receive(TestFrame(100, 2), kT0 + absl::Milliseconds(1), true, false);
  EXPECT_TRUE(rx_.frames.empty());
  EXPECT_EQ(injector_->NextDeadline(), kT0 + absl::Milliseconds(5));
  injector_->Poll(kT0 + absl::Milliseconds(5));
  ASSERT_EQ(rx_.frames.size(), 1u);
  EXPECT_EQ(rx_.frames[0].time, kT0 + absl::Milliseconds(5));
  EXPECT_TRUE(rx_.frames[0].checksum_partial);
  EXPECT_EQ(rec_->polls, 1u);
  injector_->Poll(kT0 + absl::Milliseconds(6));
  ASSERT_EQ(rx_.frames.size(), 2u);
  EXPECT_TRUE(rx_.frames[1].checksum_verified);
  EXPECT_EQ(rx_.frames[1].bytes, TestFrame(100, 2));
  EXPECT_EQ(injector_->NextDeadline(), kNever);
  // Egress is untouched.
  buffer::PacketChain chain;
  chain.PushBack(Packet(100, 3));
  injector_->Transmit(chain, kT0);
  EXPECT_EQ(rec_->sent.size(), 1u);
}

TEST_F(FaultInjectorTest, IngressLossRate) {
  constexpr double kLoss = 0.1;
  constexpr size_t kFrames = 50'000;
  FaultInjectorOptions o;
  o.ingress.loss = kLoss;
  o.seed = 21;
  Create(o);
  const std::vector<Output> in =
      SendIngress(kFrames, absl::Microseconds(1), SmallLength);
  const FaultStats& s = injector_->ingress_stats();
  EXPECT_EQ(in.size(), kFrames - s.dropped);
  EXPECT_NEAR(static_cast<double>(s.dropped) / kFrames, kLoss,
              Tolerance(kLoss, kFrames));
  EXPECT_EQ(injector_->egress_stats().packets_in, 0u);
}

// The inner endpoint takes one packet per call: the injector keeps the
// rest, retries from Poll, and pushes back on the caller meanwhile.
TEST_F(FaultInjectorTest, InnerBackpressure) {
  FaultInjectorOptions o;
  o.egress.delay = absl::Milliseconds(1);
  Create(o, /*accept_per_call=*/1);
  buffer::PacketChain chain;
  for (uint32_t i = 0; i < 10; ++i) chain.PushBack(Packet(100, i));
  EXPECT_EQ(injector_->Transmit(chain, kT0), 10u);
  const Instant t1 = kT0 + absl::Milliseconds(1);
  injector_->Poll(t1);
  EXPECT_EQ(rec_->sent.size(), 1u);
  EXPECT_EQ(injector_->NextDeadline(), t1 + absl::Milliseconds(1));
  // While the inner endpoint pushes back, the caller keeps its packets.
  buffer::PacketChain more;
  more.PushBack(Packet(100, 10));
  EXPECT_EQ(injector_->Transmit(more, t1), 0u);
  EXPECT_EQ(more.size(), 1u);
  EXPECT_EQ(rec_->sent.size(), 2u);  // but the retry happened
  RunUntilIdle(*injector_, t1);
  EXPECT_EQ(rec_->sent.size(), 10u);
  rec_->set_accept_per_call(100);
  injector_->Transmit(more, t1 + absl::Seconds(1));
  RunUntilIdle(*injector_, t1 + absl::Seconds(1));
  ASSERT_EQ(rec_->sent.size(), 11u);
  for (uint32_t i = 0; i < 11; ++i) EXPECT_EQ(FrameId(rec_->sent[i].bytes), i);
}

// Without faults, packets and frames pass straight through.
TEST_F(FaultInjectorTest, NoFaultsPassThrough) {
  Create(FaultInjectorOptions{});
  buffer::PacketChain chain;
  chain.PushBack(Packet(1514, 1));
  EXPECT_EQ(injector_->Transmit(chain, kT0), 1u);
  EXPECT_EQ(rec_->transmit_calls, 1u);
  EXPECT_EQ(rec_->sent.size(), 1u);
  rec_->Receive(TestFrame(60, 2), kT0);
  ASSERT_EQ(rx_.frames.size(), 1u);
  EXPECT_EQ(injector_->NextDeadline(), kNever);
  EXPECT_EQ(injector_->egress_stats().packets_in, 0u);
  EXPECT_EQ(injector_->Stats().tx_frames, 1u);  // the inner endpoint's
  EXPECT_EQ(injector_->Name(),
            "faults(egress: none, ingress: none) -> recording");
}

TEST_F(FaultInjectorTest, NameListsEffects) {
  FaultInjectorOptions o;
  o.egress.loss = 0.05;
  o.egress.delay = absl::Milliseconds(10);
  o.ingress.rate_bps = 1000;
  Create(o);
  EXPECT_EQ(injector_->Name(),
            "faults(egress: loss=0.05 delay=10ms, ingress: rate=1000bit/s) "
            "-> recording");
}

TEST_F(FaultInjectorTest, RejectsBadOptions) {
  auto create = [&](const FaultInjectorOptions& o) {
    return FaultInjector::Create(std::make_unique<RecordingEndpoint>(chunks_),
                                 packets_, chunks_, o)
        .status();
  };
  auto expect_error = [&](const FaultInjectorOptions& o,
                          const std::string& field) {
    const absl::Status s = create(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s;
  };
  FaultInjectorOptions o;
  o.egress.loss = 1.5;
  expect_error(o, "egress.loss");
  o = {};
  o.ingress.corrupt = std::nan("");
  expect_error(o, "ingress.corrupt");
  o = {};
  o.egress.duplicate = -0.1;
  expect_error(o, "egress.duplicate");
  o = {};
  o.egress.delay = -absl::Milliseconds(1);
  expect_error(o, "egress.delay");
  o = {};
  o.ingress.jitter = absl::Hours(25);
  expect_error(o, "ingress.jitter");
  o = {};
  o.egress.reorder_distance = 0;
  expect_error(o, "egress.reorder_distance");
  o = {};
  o.queue_limit = 0;
  expect_error(o, "queue_limit");
  o = {};
  o.egress.loss = 1;  // the edges are fine
  o.ingress.loss = 0;
  EXPECT_TRUE(create(o).ok());
  EXPECT_EQ(
      FaultInjector::Create(nullptr, packets_, chunks_, {}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace netstack::link
