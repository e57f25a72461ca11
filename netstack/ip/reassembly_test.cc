#include "netstack/ip/reassembly.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/ip/alloc_counter.h"
#include "netstack/wire/address.h"

namespace netstack::ip {
namespace {

using buffer::ChunkPool;
using buffer::kChunkSize;

constexpr Instant kT0 = absl::FromUnixSeconds(3600 * 1000);

// Deterministic, position-dependent bytes: a misplaced or lost byte shows.
std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct Frag {
  uint32_t offset = 0;
  uint32_t len = 0;
  bool more = false;
};

// Cuts `total` bytes into pieces of `piece` bytes (a multiple of 8), last
// one shorter, in offset order.
std::vector<Frag> Cut(uint32_t total, uint32_t piece) {
  std::vector<Frag> out;
  for (uint32_t off = 0; off < total; off += piece) {
    const uint32_t len = std::min(piece, total - off);
    out.push_back({off, len, off + len < total});
  }
  return out;
}

ReassemblyKey Key4(uint16_t id, uint32_t src = 0x0a000001,
                   uint8_t protocol = 17) {
  return ReassemblyKey::Ipv4(wire::Ipv4Address::FromU32(src),
                             wire::Ipv4Address::FromU32(0x0a000002), protocol,
                             id);
}

ReassemblyKey Key6(uint32_t id, uint8_t src_low = 1) {
  wire::Ipv6Address src = *wire::Ipv6Address::Parse("fd00:9::1");
  src.bytes[15] = src_low;
  return ReassemblyKey::Ipv6(src, *wire::Ipv6Address::Parse("fd00:9::2"), id);
}

std::span<const uint8_t> Slice(const std::vector<uint8_t>& v, const Frag& f) {
  return std::span<const uint8_t>(v).subspan(f.offset, f.len);
}

uint64_t SumDrops(const std::array<uint64_t, kDropReasonCount>& drops) {
  return std::accumulate(drops.begin(), drops.end(), uint64_t{0});
}

// Every fragment is accepted or dropped for exactly one reason, and every
// datagram started is completed, discarded for one reason, or still held.
void ExpectAccounted(const Reassembler::Stats& s) {
  EXPECT_EQ(s.fragments_received,
            s.fragments_accepted + SumDrops(s.fragment_drops));
  EXPECT_EQ(
      s.datagrams_started,
      s.datagrams_completed + SumDrops(s.datagram_drops) + s.datagrams_held);
  EXPECT_EQ(s.bytes_held, s.datagrams_held * kChunkSize);
}

// Expects `reason` to be the only fragment drop (`fragments` times) and the
// only datagram drop (`datagrams` times).
void ExpectOnlyDrops(const Reassembler::Stats& s, DropReason reason,
                     uint64_t fragments, uint64_t datagrams) {
  for (size_t i = 0; i < kDropReasonCount; ++i) {
    const auto r = static_cast<DropReason>(i);
    EXPECT_EQ(s.fragment_drops[i], r == reason ? fragments : 0)
        << "fragment drops for " << DropReasonName(r);
    EXPECT_EQ(s.datagram_drops[i], r == reason ? datagrams : 0)
        << "datagram drops for " << DropReasonName(r);
  }
  ExpectAccounted(s);
}

// Every test checks that all chunks went back to the pool once the
// reassembler and every result view are gone.
class ReassemblyTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (reassembler_ != nullptr) ExpectAccounted(reassembler_->stats());
    reassembler_.reset();
    EXPECT_EQ(chunks_.stats().in_use, 0u);
    EXPECT_EQ(chunks_.stats().free, chunks_.stats().created);
  }

  Reassembler& Make(ReassemblerOptions options = {}) {
    EXPECT_TRUE(Reassembler::ValidateOptions(options).ok());
    reassembler_ = std::make_unique<Reassembler>(chunks_, options);
    return *reassembler_;
  }

  // Adds `frags` of `data` in the given order; expects every one but the
  // last to be kIncomplete and the last to complete the datagram with
  // exactly `data`.
  void ExpectReassembles(const ReassemblyKey& key,
                         const std::vector<uint8_t>& data,
                         const std::vector<Frag>& frags, Instant now = kT0) {
    Reassembler& r = *reassembler_;
    for (size_t i = 0; i < frags.size(); ++i) {
      AddResult res = r.Add(key, frags[i].offset, frags[i].more,
                            Slice(data, frags[i]), now);
      if (i + 1 < frags.size()) {
        ASSERT_EQ(res.outcome, AddOutcome::kIncomplete)
            << "fragment " << i << ": " << DropReasonName(res.drop_reason);
        continue;
      }
      ASSERT_EQ(res.outcome, AddOutcome::kComplete)
          << DropReasonName(res.drop_reason);
      ASSERT_EQ(res.payload.size(), data.size());
      EXPECT_TRUE(std::ranges::equal(res.payload.bytes(), data));
      EXPECT_EQ(res.payload.offset(), 0u);
    }
  }

  ChunkPool chunks_{80};
  std::unique_ptr<Reassembler> reassembler_;
};

TEST_F(ReassemblyTest, InOrder65000Bytes) {
  Reassembler& r = Make();
  const auto data = Pattern(65000, 1);
  const auto frags = Cut(65000, 1480);
  ASSERT_EQ(frags.size(), 44u);
  ExpectReassembles(Key4(7), data, frags);
  const auto& s = r.stats();
  EXPECT_EQ(s.fragments_received, 44u);
  EXPECT_EQ(s.fragments_accepted, 44u);
  EXPECT_EQ(s.datagrams_completed, 1u);
  EXPECT_EQ(s.datagrams_held, 0u);
  EXPECT_EQ(s.bytes_held, 0u);
  EXPECT_EQ(s.fragment_bytes_held, 0u);
  EXPECT_EQ(s.peak_bytes_held, kChunkSize);
  ExpectOnlyDrops(s, DropReason::kTimeout, 0, 0);
}

TEST_F(ReassemblyTest, ReverseOrder65000Bytes) {
  Reassembler& r = Make();
  const auto data = Pattern(65000, 2);
  auto frags = Cut(65000, 1480);
  std::reverse(frags.begin(), frags.end());
  ExpectReassembles(Key4(8), data, frags);
  EXPECT_EQ(r.stats().datagrams_completed, 1u);
  EXPECT_EQ(r.stats().datagrams_held, 0u);
}

TEST_F(ReassemblyTest, RandomOrder65000Bytes) {
  Reassembler& r = Make();
  std::mt19937 rng(3);
  // Several orders and fragment sizes, including the largest payload.
  for (uint32_t round = 0; round < 20; ++round) {
    const uint32_t total = round == 0 ? 65515 : 65000;
    const uint32_t piece = 8 * (140 + round * 9);  // <= 64 fragments
    const auto data = Pattern(total, 100 + round);
    auto frags = Cut(total, piece);
    std::shuffle(frags.begin(), frags.end(), rng);
    ExpectReassembles(Key4(static_cast<uint16_t>(round)), data, frags);
  }
  EXPECT_EQ(r.stats().datagrams_completed, 20u);
  ExpectOnlyDrops(r.stats(), DropReason::kTimeout, 0, 0);
}

// `ping -s 8000` sends 8000 bytes of data after the 8-byte ICMP header: an
// 8008-byte IPv4 payload, which at MTU 1500 leaves Linux as five fragments
// of 1480 bytes and one of 608.
TEST_F(ReassemblyTest, Ping8000AtMtu1500) {
  Reassembler& r = Make();
  const auto data = Pattern(8008, 4);
  const auto frags = Cut(8008, 1480);
  ASSERT_EQ(frags.size(), 6u);
  EXPECT_EQ(frags.back().offset, 7400u);
  EXPECT_EQ(frags.back().len, 608u);
  ExpectReassembles(Key4(0x1234, 0x0a000001, 1), data, frags);
  EXPECT_EQ(r.stats().fragments_accepted, 6u);
}

TEST_F(ReassemblyTest, Ipv6RandomOrderAndLargestPayload) {
  Reassembler& r = Make();
  std::mt19937 rng(5);
  // 1232 bytes of data per fragment at IPv6's minimum MTU of 1280.
  for (uint32_t total : {65000u, 65535u, 1233u}) {
    const auto data = Pattern(total, total);
    auto frags = Cut(total, 1232);
    std::shuffle(frags.begin(), frags.end(), rng);
    ExpectReassembles(Key6(0xdeadbeef + total), data, frags);
  }
  EXPECT_EQ(r.stats().datagrams_completed, 3u);
}

TEST_F(ReassemblyTest, KeysSeparateFamiliesProtocolsAndIds) {
  Reassembler& r = Make();
  // The same 4 source/destination bytes and id, as IPv4 (two protocols)
  // and IPv6: three different datagrams. Interleave their fragments.
  ReassemblyKey v6 = Key4(9);
  v6.family = IpFamily::kIpv6;
  v6.protocol = 0;
  const ReassemblyKey keys[] = {Key4(9, 0x0a000001, 17), Key4(9, 0x0a000001, 6),
                                v6};
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 3; ++i) data.push_back(Pattern(3000, 50 + i));
  const auto frags = Cut(3000, 1000 / 8 * 8);
  for (size_t f = 0; f < frags.size(); ++f) {
    for (int i = 0; i < 3; ++i) {
      AddResult res = r.Add(keys[i], frags[f].offset, frags[f].more,
                            Slice(data[i], frags[f]), kT0);
      ASSERT_TRUE(res.accepted()) << DropReasonName(res.drop_reason);
      if (f + 1 == frags.size()) {
        ASSERT_EQ(res.outcome, AddOutcome::kComplete);
        EXPECT_TRUE(std::ranges::equal(res.payload.bytes(), data[i]));
      } else {
        EXPECT_EQ(res.outcome, AddOutcome::kIncomplete);
        EXPECT_EQ(r.stats().datagrams_held, f == 0 ? size_t(i + 1) : 3u);
      }
    }
  }
  EXPECT_EQ(r.stats().datagrams_completed, 3u);
}

// Many datagrams in progress at once, completed in random order: exercises
// the lookup table's insertion and backward-shift deletion.
TEST_F(ReassemblyTest, ManyInterleavedDatagrams) {
  ChunkPool pool(300);
  ReassemblerOptions options;
  options.memory_limit_bytes = 256 * kChunkSize;
  Reassembler r(pool, options);
  ASSERT_EQ(r.max_datagrams(), 256u);
  std::mt19937 rng(6);
  struct Pending {
    ReassemblyKey key;
    std::vector<uint8_t> data;
    std::vector<Frag> frags;
    size_t next = 0;
  };
  std::vector<Pending> pending;
  uint32_t completed = 0;
  for (uint32_t id = 0; id < 3000; ++id) {
    Pending p;
    p.key = Key4(static_cast<uint16_t>(id), 0x0a000000 + id % 7);
    p.data = Pattern(64 + id % 200, id);
    p.frags = Cut(static_cast<uint32_t>(p.data.size()), 32);
    std::shuffle(p.frags.begin(), p.frags.end(), rng);
    pending.push_back(std::move(p));
    // Feed fragments of random pending datagrams until fewer than 250
    // are open, so the table stays busy without evicting.
    while (pending.size() >= 250 || (id == 2999 && !pending.empty())) {
      const size_t i = rng() % pending.size();
      Pending& q = pending[i];
      const Frag& f = q.frags[q.next++];
      AddResult res = r.Add(q.key, f.offset, f.more, Slice(q.data, f), kT0);
      ASSERT_TRUE(res.accepted()) << DropReasonName(res.drop_reason);
      if (q.next == q.frags.size()) {
        ASSERT_EQ(res.outcome, AddOutcome::kComplete);
        ASSERT_TRUE(std::ranges::equal(res.payload.bytes(), q.data));
        ++completed;
        pending[i] = std::move(pending.back());
        pending.pop_back();
      } else {
        ASSERT_EQ(res.outcome, AddOutcome::kIncomplete);
      }
    }
  }
  EXPECT_EQ(completed, 3000u);
  EXPECT_EQ(r.stats().datagrams_completed, 3000u);
  EXPECT_EQ(r.stats().datagrams_held, 0u);
  ExpectOnlyDrops(r.stats(), DropReason::kTimeout, 0, 0);
}

TEST_F(ReassemblyTest, CompletedPayloadIsOwnedByTheCaller) {
  Reassembler& r = Make();
  const auto data = Pattern(3000, 7);
  const auto frags = Cut(3000, 1480);
  ASSERT_TRUE(r.Add(Key4(1), 0, true, Slice(data, frags[0]), kT0).accepted());
  EXPECT_EQ(chunks_.stats().in_use, 1u);
  EXPECT_EQ(r.stats().fragment_bytes_held, 1480u);
  ASSERT_TRUE(
      r.Add(Key4(1), 1480, true, Slice(data, frags[1]), kT0).accepted());
  AddResult done = r.Add(Key4(1), 2960, false, Slice(data, frags[2]), kT0);
  ASSERT_EQ(done.outcome, AddOutcome::kComplete);
  // No longer the reassembler's: not counted, but the chunk is alive.
  EXPECT_EQ(r.stats().bytes_held, 0u);
  EXPECT_EQ(r.stats().fragment_bytes_held, 0u);
  EXPECT_EQ(chunks_.stats().in_use, 1u);
  EXPECT_EQ(done.payload.chunk()->refs(), 1u);
  done.payload = buffer::PayloadView();
  EXPECT_EQ(chunks_.stats().in_use, 0u);
}

// ---- Drop reasons, each on its own -------------------------------------

TEST_F(ReassemblyTest, EmptyFragmentIsDropped) {
  Reassembler& r = Make();
  AddResult res = r.Add(Key4(1), 0, true, {}, kT0);
  EXPECT_EQ(res.outcome, AddOutcome::kDropped);
  EXPECT_EQ(res.drop_reason, DropReason::kEmptyFragment);
  res = r.Add(Key4(1), 8, false, {}, kT0);
  EXPECT_EQ(res.drop_reason, DropReason::kEmptyFragment);
  EXPECT_EQ(r.stats().datagrams_started, 0u);
  ExpectOnlyDrops(r.stats(), DropReason::kEmptyFragment, 2, 0);
}

TEST_F(ReassemblyTest, MisalignedFragmentIsDropped) {
  Reassembler& r = Make();
  const auto data = Pattern(100, 8);
  // A non-last fragment of 100 bytes: not a multiple of 8.
  AddResult res = r.Add(Key4(1), 0, true, data, kT0);
  EXPECT_EQ(res.drop_reason, DropReason::kMisaligned);
  // An offset the wire cannot express.
  res = r.Add(Key4(1), 4, false, std::span(data).first(8), kT0);
  EXPECT_EQ(res.drop_reason, DropReason::kMisaligned);
  EXPECT_EQ(r.stats().datagrams_started, 0u);
  ExpectOnlyDrops(r.stats(), DropReason::kMisaligned, 2, 0);
  // The last fragment may have any length.
  res = r.Add(Key4(1), 0, false, data, kT0);
  EXPECT_EQ(res.outcome, AddOutcome::kComplete);
}

TEST_F(ReassemblyTest, TooBigBoundsPerFamily) {
  Reassembler& r = Make();
  const auto data = Pattern(64, 9);
  auto bytes = [&](size_t n) { return std::span(data).first(n); };
  std::vector<uint8_t> header24(24, 0x45);
  std::vector<uint8_t> header56(56, 0x60);

  // IPv4, no header given: 20 + end <= 65535, so end <= 65515.
  EXPECT_EQ(r.Add(Key4(1), 65496, false, bytes(20), kT0).drop_reason,
            DropReason::kTooBig);
  EXPECT_EQ(r.Add(Key4(1), 65512, true, bytes(8), kT0).drop_reason,
            DropReason::kTooBig);
  EXPECT_EQ(r.Add(Key4(1), 65496, false, bytes(19), kT0).outcome,
            AddOutcome::kIncomplete);
  // IPv4 with a 24-byte header: end <= 65511.
  EXPECT_EQ(r.Add(Key4(2), 65496, false, bytes(16), kT0, header24).drop_reason,
            DropReason::kTooBig);
  EXPECT_EQ(r.Add(Key4(2), 65496, false, bytes(15), kT0, header24).outcome,
            AddOutcome::kIncomplete);
  // IPv6, no header given (48 assumed): end <= 65535.
  EXPECT_EQ(r.Add(Key6(1), 65528, false, bytes(8), kT0).drop_reason,
            DropReason::kTooBig);
  EXPECT_EQ(r.Add(Key6(1), 65528, false, bytes(7), kT0).outcome,
            AddOutcome::kIncomplete);
  // IPv6 with 8 bytes of unfragmentable extension headers: end <= 65527.
  EXPECT_EQ(r.Add(Key6(2), 65520, false, bytes(8), kT0, header56).drop_reason,
            DropReason::kTooBig);
  EXPECT_EQ(r.Add(Key6(2), 65520, false, bytes(7), kT0, header56).outcome,
            AddOutcome::kIncomplete);
  // Offsets far beyond anything the wire can carry do not wrap around.
  EXPECT_EQ(r.Add(Key6(3), 0xfffffff8u, false, bytes(16), kT0).drop_reason,
            DropReason::kTooBig);
  EXPECT_EQ(r.stats().datagrams_started, 4u);
  ExpectOnlyDrops(r.stats(), DropReason::kTooBig, 6, 0);
}

TEST_F(ReassemblyTest, ConflictingEndsDiscardTheDatagram) {
  Reassembler& r = Make();
  const auto data = Pattern(2000, 10);
  auto at = [&](uint32_t off, uint32_t len) {
    return std::span(data).subspan(off, len);
  };
  // A second last fragment with a different end.
  ASSERT_TRUE(r.Add(Key4(1), 1000, false, at(1000, 100), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(1), 1000, false, at(1000, 108), kT0).drop_reason,
            DropReason::kConflictingEnd);
  EXPECT_EQ(r.stats().datagrams_held, 0u);
  // A non-last fragment with data beyond the known end.
  ASSERT_TRUE(r.Add(Key4(3), 800, false, at(800, 100), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(3), 0, true, at(0, 904), kT0).drop_reason,
            DropReason::kConflictingEnd);
  // A last fragment ending before data already received.
  ASSERT_TRUE(r.Add(Key4(4), 800, true, at(800, 200), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(4), 0, false, at(0, 500), kT0).drop_reason,
            DropReason::kConflictingEnd);
  // A last fragment ending exactly where a non-last one ended: that one
  // said more data follows.
  ASSERT_TRUE(r.Add(Key4(5), 800, true, at(800, 200), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(5), 992, false, at(992, 8), kT0).drop_reason,
            DropReason::kConflictingEnd);
  // Same range as that non-last fragment, flagged last.
  ASSERT_TRUE(r.Add(Key4(6), 800, true, at(800, 200), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(6), 800, false, at(800, 200), kT0).drop_reason,
            DropReason::kConflictingEnd);
  EXPECT_EQ(r.stats().datagrams_held, 0u);
  ExpectOnlyDrops(r.stats(), DropReason::kConflictingEnd, 5, 5);
  // Nothing was remembered: a clean retransmission of datagram 1 works.
  ExpectReassembles(Key4(1), data, Cut(2000, 1000));
}

TEST_F(ReassemblyTest, OverlapsDiscardTheWholeDatagram) {
  Reassembler& r = Make();
  const auto data = Pattern(4000, 11);
  auto at = [&](uint32_t off, uint32_t len) {
    return std::span(data).subspan(off, len);
  };
  struct Case {
    Frag first;
    Frag second;
  };
  const Case cases[] = {
      {{0, 1000, true}, {992, 16, true}},     // tail overlap
      {{1000, 1000, true}, {992, 16, true}},  // head overlap
      {{0, 2000, true}, {800, 400, true}},    // contained
      {{800, 400, true}, {0, 2000, true}},    // containing
      {{0, 1000, true}, {0, 2000, true}},     // same start, longer
      {{0, 2000, true}, {0, 1000, true}},     // same start, shorter
      {{1000, 1000, true}, {0, 2000, true}},  // same end
  };
  uint16_t id = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(id);
    ASSERT_EQ(r.Add(Key4(id), c.first.offset, c.first.more,
                    at(c.first.offset, c.first.len), kT0)
                  .outcome,
              AddOutcome::kIncomplete);
    EXPECT_EQ(r.Add(Key4(id), c.second.offset, c.second.more,
                    at(c.second.offset, c.second.len), kT0)
                  .drop_reason,
              DropReason::kOverlap);
    EXPECT_EQ(r.stats().datagrams_held, 0u);
    ++id;
  }
  // The same range with different bytes conflicts too.
  std::vector<uint8_t> other(at(0, 1000).begin(), at(0, 1000).end());
  other[500] ^= 1;
  ASSERT_TRUE(r.Add(Key4(id), 0, true, at(0, 1000), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(id), 0, true, other, kT0).drop_reason,
            DropReason::kOverlap);
  ExpectOnlyDrops(r.stats(), DropReason::kOverlap, 8, 8);
}

TEST_F(ReassemblyTest, ExactDuplicateIsDroppedAndTheDatagramKept) {
  Reassembler& r = Make();
  const auto data = Pattern(3000, 12);
  const auto frags = Cut(3000, 1480);
  ASSERT_TRUE(r.Add(Key4(1), 0, true, Slice(data, frags[0]), kT0).accepted());
  ASSERT_TRUE(
      r.Add(Key4(1), 2960, false, Slice(data, frags[2]), kT0).accepted());
  // Both again, as the network may duplicate them.
  AddResult dup = r.Add(Key4(1), 0, true, Slice(data, frags[0]), kT0);
  EXPECT_EQ(dup.outcome, AddOutcome::kDropped);
  EXPECT_EQ(dup.drop_reason, DropReason::kDuplicate);
  EXPECT_EQ(r.Add(Key4(1), 2960, false, Slice(data, frags[2]), kT0).drop_reason,
            DropReason::kDuplicate);
  EXPECT_EQ(r.stats().datagrams_held, 1u);
  ExpectOnlyDrops(r.stats(), DropReason::kDuplicate, 2, 0);
  AddResult done = r.Add(Key4(1), 1480, true, Slice(data, frags[1]), kT0);
  ASSERT_EQ(done.outcome, AddOutcome::kComplete);
  EXPECT_TRUE(std::ranges::equal(done.payload.bytes(), data));
}

TEST_F(ReassemblyTest, TooManyFragmentsDiscardsTheDatagram) {
  ReassemblerOptions options;
  options.max_fragments = 4;
  Reassembler& r = Make(options);
  const auto data = Pattern(80, 13);
  const auto frags = Cut(80, 16);  // 5 fragments
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(r.Add(Key4(1), frags[i].offset, frags[i].more,
                    Slice(data, frags[i]), kT0)
                  .outcome,
              AddOutcome::kIncomplete);
  }
  // A duplicate is still recognized as such at the limit.
  EXPECT_EQ(r.Add(Key4(1), 0, true, Slice(data, frags[0]), kT0).drop_reason,
            DropReason::kDuplicate);
  EXPECT_EQ(r.Add(Key4(1), frags[4].offset, false, Slice(data, frags[4]), kT0)
                .drop_reason,
            DropReason::kTooManyFragments);
  EXPECT_EQ(r.stats().datagrams_held, 0u);
  EXPECT_EQ(r.stats().fragment_drop(DropReason::kTooManyFragments), 1u);
  EXPECT_EQ(r.stats().datagram_drop(DropReason::kTooManyFragments), 1u);
  EXPECT_EQ(r.stats().fragment_drop(DropReason::kDuplicate), 1u);
  // Exactly max_fragments fragments complete a datagram.
  ExpectReassembles(Key4(2), Pattern(64, 14), Cut(64, 16));
}

TEST_F(ReassemblyTest, MemoryLimitEvictsTheLeastRecentlyActive) {
  ReassemblerOptions options;
  options.memory_limit_bytes = 2 * kChunkSize + kChunkSize / 2;
  Reassembler& r = Make(options);
  ASSERT_EQ(r.max_datagrams(), 2u);
  const auto data = Pattern(2000, 15);
  auto first = [&](uint16_t id, Instant t) {
    return r.Add(Key4(id), 0, true, std::span(data).first(1000), t);
  };
  ASSERT_TRUE(first(1, kT0).accepted());
  ASSERT_TRUE(first(2, kT0 + absl::Seconds(1)).accepted());
  // Datagram 1 is older but just received a fragment: 2 goes first.
  ASSERT_TRUE(r.Add(Key4(1), 1000, true, std::span(data).subspan(1000, 496),
                    kT0 + absl::Seconds(2))
                  .accepted());
  ASSERT_TRUE(first(3, kT0 + absl::Seconds(3)).accepted());
  EXPECT_EQ(r.stats().datagrams_held, 2u);
  EXPECT_EQ(r.stats().bytes_held, 2 * kChunkSize);
  EXPECT_EQ(r.stats().peak_bytes_held, 2 * kChunkSize);
  ExpectOnlyDrops(r.stats(), DropReason::kMemoryLimit, 0, 1);
  // 1 survived and completes; 2 is gone (its last fragment starts anew).
  AddResult done =
      r.Add(Key4(1), 1496, false, std::span(data).subspan(1496), kT0);
  ASSERT_EQ(done.outcome, AddOutcome::kComplete);
  EXPECT_TRUE(std::ranges::equal(done.payload.bytes(), data));
  EXPECT_EQ(
      r.Add(Key4(2), 1000, false, std::span(data).subspan(1000), kT0).outcome,
      AddOutcome::kIncomplete);
  EXPECT_LE(chunks_.stats().in_use, 3u);  // 2 held + `done`
}

TEST_F(ReassemblyTest, MemoryLimitRefusesWhenEvictionIsOff) {
  ReassemblerOptions options;
  options.memory_limit_bytes = 2 * kChunkSize;
  options.evict_when_full = false;
  Reassembler& r = Make(options);
  const auto data = Pattern(1000, 16);
  ASSERT_TRUE(
      r.Add(Key4(1), 0, true, std::span(data).first(8), kT0).accepted());
  ASSERT_TRUE(
      r.Add(Key4(2), 0, true, std::span(data).first(8), kT0).accepted());
  AddResult res = r.Add(Key4(3), 0, true, std::span(data).first(8), kT0);
  EXPECT_EQ(res.drop_reason, DropReason::kMemoryLimit);
  // Fragments of datagrams in progress are still taken.
  EXPECT_EQ(
      r.Add(Key4(1), 8, false, std::span(data).subspan(8, 8), kT0).outcome,
      AddOutcome::kComplete);
  EXPECT_EQ(r.stats().peak_bytes_held, 2 * kChunkSize);
  ExpectOnlyDrops(r.stats(), DropReason::kMemoryLimit, 1, 0);
}

TEST_F(ReassemblyTest, NoChunkWhenThePoolIsExhausted) {
  ChunkPool tiny(1);
  {
    Reassembler r(tiny, ReassemblerOptions{});
    const auto data = Pattern(16, 17);
    buffer::ChunkRef hog = tiny.Allocate();
    ASSERT_TRUE(hog);
    AddResult res = r.Add(Key4(1), 0, true, std::span(data).first(8), kT0);
    EXPECT_EQ(res.drop_reason, DropReason::kNoChunk);
    EXPECT_EQ(r.stats().datagrams_started, 0u);
    ExpectOnlyDrops(r.stats(), DropReason::kNoChunk, 1, 0);
    hog.Reset();
    EXPECT_EQ(r.Add(Key4(1), 0, false, data, kT0).outcome,
              AddOutcome::kComplete);
  }
  EXPECT_EQ(tiny.stats().in_use, 0u);
}

TEST_F(ReassemblyTest, TimeoutWithExactDeadlines) {
  ReassemblerOptions options;
  options.ipv4_timeout = absl::Seconds(30);
  options.ipv6_timeout = absl::Seconds(60);
  Reassembler& r = Make(options);
  EXPECT_EQ(r.NextDeadline(), kNever);
  const auto data = Pattern(3000, 18);
  std::vector<uint8_t> header(20);
  for (size_t i = 0; i < header.size(); ++i)
    header[i] = static_cast<uint8_t>(i);

  // IPv4: first fragment at t0 (with its header), a later one at t0+20s
  // does not extend the deadline (RFC 8200: from the first arrival).
  ASSERT_TRUE(r.Add(Key4(1), 0, true, std::span(data).first(1480), kT0, header)
                  .accepted());
  EXPECT_EQ(r.NextDeadline(), kT0 + absl::Seconds(30));
  // IPv6 at t0+10s, without its first fragment.
  ASSERT_TRUE(r.Add(Key6(1), 1232, true, std::span(data).subspan(1232, 1232),
                    kT0 + absl::Seconds(10))
                  .accepted());
  ASSERT_TRUE(r.Add(Key4(1), 2960, false, std::span(data).subspan(2960),
                    kT0 + absl::Seconds(20))
                  .accepted());
  EXPECT_EQ(r.NextDeadline(), kT0 + absl::Seconds(30));

  std::vector<ExpiredDatagram> seen;
  std::vector<std::vector<uint8_t>> seen_header, seen_data;
  auto collect = [&](const ExpiredDatagram& e) {
    seen.push_back(e);
    seen_header.emplace_back(e.first_header.begin(), e.first_header.end());
    seen_data.emplace_back(e.first_data.begin(), e.first_data.end());
  };
  EXPECT_EQ(r.Poll(kT0 + absl::Seconds(30) - absl::Nanoseconds(1), collect),
            0u);
  EXPECT_EQ(r.stats().datagrams_held, 2u);
  EXPECT_EQ(r.Poll(kT0 + absl::Seconds(30), collect), 1u);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].key, Key4(1));
  EXPECT_TRUE(seen[0].first_fragment_received);
  EXPECT_EQ(seen_header[0], header);
  EXPECT_TRUE(std::ranges::equal(seen_data[0], std::span(data).first(1480)));
  EXPECT_EQ(r.NextDeadline(), kT0 + absl::Seconds(70));
  ExpectOnlyDrops(r.stats(), DropReason::kTimeout, 0, 1);

  EXPECT_EQ(r.Poll(kT0 + absl::Seconds(70) - absl::Nanoseconds(1), collect),
            0u);
  EXPECT_EQ(r.Poll(kT0 + absl::Seconds(70), collect), 1u);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].key, Key6(1));
  EXPECT_FALSE(seen[1].first_fragment_received);
  EXPECT_TRUE(seen_header[1].empty());
  EXPECT_TRUE(seen_data[1].empty());
  EXPECT_EQ(r.NextDeadline(), kNever);
  EXPECT_EQ(r.stats().datagrams_held, 0u);
  EXPECT_EQ(r.stats().bytes_held, 0u);
  ExpectOnlyDrops(r.stats(), DropReason::kTimeout, 0, 2);
  EXPECT_EQ(chunks_.stats().in_use, 0u);
}

TEST_F(ReassemblyTest, PollExpiresOldestFirstAcrossFamilies) {
  ReassemblerOptions options;
  options.ipv4_timeout = absl::Seconds(30);
  options.ipv6_timeout = absl::Seconds(5);
  Reassembler& r = Make(options);
  const auto data = Pattern(8, 19);
  // Deadlines: v4#1 t0+30, v6 t0+6, v4#2 t0+32.
  ASSERT_TRUE(r.Add(Key4(1), 8, false, data, kT0).accepted());
  ASSERT_TRUE(
      r.Add(Key6(1), 8, false, data, kT0 + absl::Seconds(1)).accepted());
  ASSERT_TRUE(
      r.Add(Key4(2), 8, false, data, kT0 + absl::Seconds(2)).accepted());
  EXPECT_EQ(r.NextDeadline(), kT0 + absl::Seconds(6));
  std::vector<ReassemblyKey> order;
  EXPECT_EQ(r.Poll(kT0 + absl::Hours(1),
                   [&](const ExpiredDatagram& e) { order.push_back(e.key); }),
            3u);
  EXPECT_EQ(order, (std::vector<ReassemblyKey>{Key6(1), Key4(1), Key4(2)}));
}

// ---- Attacks -----------------------------------------------------------

// Teardrop (1997) and its relatives send overlapping fragments whose
// lengths made old stacks compute a negative copy size; the tiny-fragment
// overlap attack (RFC 1858 section 3.2) rewrites a TCP header already
// checked by a filter. Each must discard the datagram, never deliver
// mixed data, and never crash.
TEST_F(ReassemblyTest, TeardropStyleOverlapsAreRejected) {
  Reassembler& r = Make();
  const auto good = Pattern(64, 20);
  auto bad = good;
  for (uint8_t& b : bad) b ^= 0xff;
  auto from = [](const std::vector<uint8_t>& v, uint32_t off, uint32_t len) {
    return std::span(v).subspan(off, len);
  };
  // Teardrop: [0,36) with MF... must be a multiple of 8: [0,40) then a last
  // fragment [24,28) inside it.
  ASSERT_TRUE(r.Add(Key4(1), 0, true, from(good, 0, 40), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(1), 24, false, from(bad, 24, 4), kT0).drop_reason,
            DropReason::kConflictingEnd);
  // Bonk/newtear: a non-last fragment inside the first.
  ASSERT_TRUE(r.Add(Key4(2), 0, true, from(good, 0, 40), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(2), 24, true, from(bad, 24, 8), kT0).drop_reason,
            DropReason::kOverlap);
  // RFC 1858 overlap: [0,16) is checked, then [8,64) rewrites bytes 8..15.
  ASSERT_TRUE(r.Add(Key4(3), 0, true, from(good, 0, 16), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(3), 8, false, from(bad, 8, 56), kT0).drop_reason,
            DropReason::kOverlap);
  // Overlap arriving after the last fragment set the end.
  ASSERT_TRUE(r.Add(Key4(4), 48, false, from(good, 48, 16), kT0).accepted());
  ASSERT_TRUE(r.Add(Key4(4), 0, true, from(good, 0, 24), kT0).accepted());
  EXPECT_EQ(r.Add(Key4(4), 16, true, from(bad, 16, 32), kT0).drop_reason,
            DropReason::kOverlap);
  EXPECT_EQ(r.stats().datagrams_held, 0u);
  EXPECT_EQ(r.stats().datagrams_completed, 0u);
  EXPECT_EQ(r.stats().fragment_drop(DropReason::kOverlap), 3u);
  EXPECT_EQ(r.stats().datagram_drop(DropReason::kOverlap), 3u);
  EXPECT_EQ(r.stats().datagram_drop(DropReason::kConflictingEnd), 1u);
  // Whatever arrives next starts a new datagram: the rejected fragment's
  // bytes 8..15 are not in it.
  EXPECT_EQ(r.Add(Key4(3), 16, false, from(bad, 16, 48), kT0).outcome,
            AddOutcome::kIncomplete);
  AddResult res = r.Add(Key4(3), 0, true, from(good, 0, 16), kT0);
  ASSERT_EQ(res.outcome, AddOutcome::kComplete);
  std::vector<uint8_t> expected(good.begin(), good.begin() + 16);
  expected.insert(expected.end(), bad.begin() + 16, bad.end());
  EXPECT_TRUE(std::ranges::equal(res.payload.bytes(), expected));
}

TEST_F(ReassemblyTest, FloodOfRandomFragmentsStaysWithinTheMemoryLimit) {
  constexpr size_t kSlots = 16;
  constexpr size_t kLimit = kSlots * kChunkSize;  // 1 MiB
  ChunkPool pool(kSlots + 4);
  ReassemblerOptions options;
  options.memory_limit_bytes = kLimit;
  Reassembler r(pool, options);
  std::mt19937 rng(21);
  const auto junk = Pattern(65536, 22);
  const auto legit = Pattern(8008, 23);
  const auto legit_frags = Cut(8008, 1480);

  constexpr uint64_t kFragments = 100000;
  uint64_t sent = 0;
  uint64_t legit_sent = 0, legit_completed = 0;
  size_t max_bytes_held = 0;
  size_t max_chunks_in_use = 0;
  Instant now = kT0;
  // Recently sent fragments, to send again (exact duplicates) or to aim
  // new fragments at datagrams that exist (overlaps, conflicting ends).
  struct Sent {
    ReassemblyKey key;
    Frag frag;
  };
  std::vector<Sent> recent;
  auto random_fragment = [&]() {
    // Random source/id space: most fragments start new datagrams.
    const bool v6 = rng() % 2 == 0;
    const uint32_t src = rng() % 64;
    const uint32_t id = rng() % 64;
    Sent x;
    x.key = v6 ? Key6(id, static_cast<uint8_t>(src))
               : Key4(static_cast<uint16_t>(id), 0xc0a80000 + src, 17);
    const uint32_t pick = rng() % 100;
    if (pick < 5 && !recent.empty()) {
      x = recent[rng() % recent.size()];  // an exact duplicate
    } else {
      if (pick < 20 && !recent.empty())
        x.key = recent[rng() % recent.size()].key;
      Frag& f = x.frag;
      f.offset = (rng() % 8192) * 8;
      if (pick >= 97) f.offset += rng() % 8;  // misaligned offset
      f.more = rng() % 4 != 0;
      f.len = rng() % 1500;
      if (f.more && pick < 95) f.len &= ~7u;  // mostly well formed
      if (f.offset + f.len > 65536) f.len = 65536 - f.offset;
      if (recent.size() < 64) {
        recent.push_back(x);
      } else {
        recent[rng() % 64] = x;
      }
    }
    AddResult res =
        r.Add(x.key, x.frag.offset, x.frag.more,
              std::span(junk).subspan(x.frag.offset, x.frag.len), now);
    (void)res;  // completed payloads are dropped here, returning the chunk
  };

  for (uint64_t i = 0; sent < kFragments; ++i) {
    if (i % 1000 == 0 && sent + legit_frags.size() * 4 <= kFragments) {
      // A legitimate ping, its fragments separated by 3 flood fragments
      // each: recently active, so LRU eviction spares it.
      const ReassemblyKey key =
          Key4(static_cast<uint16_t>(i / 1000), 0x0b000001, 1);
      ++legit_sent;
      for (const Frag& f : legit_frags) {
        for (int k = 0; k < 3; ++k, ++sent) random_fragment();
        AddResult res = r.Add(key, f.offset, f.more, Slice(legit, f), now);
        ++sent;
        ASSERT_TRUE(res.accepted()) << DropReasonName(res.drop_reason);
        if (res.outcome == AddOutcome::kComplete) {
          ++legit_completed;
          ASSERT_TRUE(std::ranges::equal(res.payload.bytes(), legit));
        }
      }
    } else {
      random_fragment();
      ++sent;
    }
    max_bytes_held = std::max(max_bytes_held, r.stats().bytes_held);
    max_chunks_in_use = std::max(max_chunks_in_use, pool.stats().in_use);
    now += absl::Milliseconds(1);
    // Now and then the flood pauses for longer than both timeouts.
    const bool pause = i % 10000 == 9999;
    if (pause) now += absl::Seconds(61);
    if (pause || i % 100 == 0) r.Poll(now);
  }

  const auto& s = r.stats();
  EXPECT_EQ(s.fragments_received, kFragments);
  EXPECT_EQ(s.fragments_accepted + SumDrops(s.fragment_drops), kFragments);
  ExpectAccounted(s);
  EXPECT_LE(max_bytes_held, kLimit);
  EXPECT_LE(s.peak_bytes_held, kLimit);
  EXPECT_EQ(s.peak_bytes_held, kLimit);  // the flood did fill it
  // Chunks in use: the held datagrams only (completed ones were dropped).
  EXPECT_LE(max_chunks_in_use, kSlots);
  EXPECT_EQ(pool.stats().in_use, s.datagrams_held);
  EXPECT_EQ(pool.stats().exhausted, 0u);
  EXPECT_LE(pool.stats().created, kSlots);
  EXPECT_EQ(legit_completed, legit_sent);
  EXPECT_GT(legit_sent, 50u);
  // The flood exercised the interesting paths.
  for (DropReason reason :
       {DropReason::kMisaligned, DropReason::kTooBig, DropReason::kOverlap,
        DropReason::kConflictingEnd, DropReason::kEmptyFragment,
        DropReason::kDuplicate}) {
    EXPECT_GT(s.fragment_drop(reason), 0u) << DropReasonName(reason);
  }
  EXPECT_GT(s.datagram_drop(DropReason::kMemoryLimit), 1000u);
  // Each pause expires every datagram then held: 16 slots, 9 pauses.
  EXPECT_GE(s.datagram_drop(DropReason::kTimeout), 9 * kSlots);
  std::printf(
      "flood: %llu fragments, accepted %llu, started %llu datagrams, "
      "completed %llu, evicted %llu, timed out %llu; peak bytes held %zu "
      "(limit %zu), peak chunks in use %zu\n",
      static_cast<unsigned long long>(kFragments),
      static_cast<unsigned long long>(s.fragments_accepted),
      static_cast<unsigned long long>(s.datagrams_started),
      static_cast<unsigned long long>(s.datagrams_completed),
      static_cast<unsigned long long>(
          s.datagram_drop(DropReason::kMemoryLimit)),
      static_cast<unsigned long long>(s.datagram_drop(DropReason::kTimeout)),
      s.peak_bytes_held, kLimit, max_chunks_in_use);
  for (size_t i = 0; i < kDropReasonCount; ++i) {
    std::printf("  %-20s fragments %8llu datagrams %8llu\n",
                std::string(DropReasonName(static_cast<DropReason>(i))).c_str(),
                static_cast<unsigned long long>(s.fragment_drops[i]),
                static_cast<unsigned long long>(s.datagram_drops[i]));
  }
}

TEST_F(ReassemblyTest, NoHeapAllocationPerFragmentAfterWarmUp) {
  Reassembler& r = Make();
  const auto data = Pattern(65000, 24);
  auto frags = Cut(65000, 1480);
  std::mt19937 rng(25);
  std::shuffle(frags.begin(), frags.end(), rng);
  const ReassemblyKey keys[] = {Key4(0), Key4(1), Key4(2), Key4(3)};
  const ReassemblyKey dup_key = Key4(9);
  const ReassemblyKey stale_key = Key6(9);
  uint64_t completed = 0;
  auto round = [&]() {
    // Four datagrams interleaved, one duplicate, two expiring.
    for (const Frag& f : frags) {
      for (const ReassemblyKey& key : keys) {
        AddResult res = r.Add(key, f.offset, f.more, Slice(data, f), kT0);
        if (res.outcome == AddOutcome::kComplete) ++completed;
      }
    }
    (void)r.Add(dup_key, 0, true, Slice(data, frags[0]), kT0);
    (void)r.Add(dup_key, 0, true, Slice(data, frags[0]), kT0);
    (void)r.Add(stale_key, frags[0].offset, frags[0].more,
                Slice(data, frags[0]), kT0);
    r.Poll(kT0 + absl::Minutes(5), [](const ExpiredDatagram&) {});
  };
  // Warm-up: the pool creates its chunks on first use.
  round();
  ASSERT_EQ(completed, 4u);
  const uint64_t before = testing::HeapAllocations();
  for (int i = 0; i < 20; ++i) round();
  const uint64_t allocations = testing::HeapAllocations() - before;
  EXPECT_EQ(completed, 84u);
  EXPECT_EQ(r.stats().fragment_drop(DropReason::kDuplicate), 21u);
  EXPECT_EQ(r.stats().datagram_drop(DropReason::kTimeout), 42u);
  EXPECT_EQ(allocations, 0u);
}

TEST(ReassemblerOptionsTest, Validation) {
  ReassemblerOptions ok;
  EXPECT_TRUE(Reassembler::ValidateOptions(ok).ok());
  ReassemblerOptions o = ok;
  o.memory_limit_bytes = kChunkSize - 1;
  EXPECT_FALSE(Reassembler::ValidateOptions(o).ok());
  o = ok;
  o.ipv6_timeout = absl::ZeroDuration();
  EXPECT_FALSE(Reassembler::ValidateOptions(o).ok());
  o = ok;
  o.max_fragments = 0;
  EXPECT_FALSE(Reassembler::ValidateOptions(o).ok());
  o.max_fragments = Reassembler::kMaxFragmentsCapacity + 1;
  EXPECT_FALSE(Reassembler::ValidateOptions(o).ok());
  o.max_fragments = Reassembler::kMaxFragmentsCapacity;
  EXPECT_TRUE(Reassembler::ValidateOptions(o).ok());
  ChunkPool pool(1);
  Reassembler r(pool, ok);
  EXPECT_EQ(r.max_datagrams(), 64u);  // 4 MiB / 64 KiB
}

TEST(DropReasonTest, EveryReasonHasADistinctName) {
  std::vector<std::string_view> names;
  for (size_t i = 0; i < kDropReasonCount; ++i) {
    names.push_back(DropReasonName(static_cast<DropReason>(i)));
    EXPECT_NE(names.back(), "unknown");
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
}

}  // namespace
}  // namespace netstack::ip
