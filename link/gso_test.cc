// Software GSO: the splitter (link/gso.h) over every payload length that
// matters, and the GsoEndpoint decorator on a recording endpoint.
#include "link/gso.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "link/frame_util.h"
#include "link/gso_endpoint.h"
#include "link/gso_test_util.h"
#include "link/link_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/tcp.h"

// Heap allocations made by this process, to show that a split touches only
// the pools. Replacing the global operator new is allowed by the standard
// ([replacement.functions]); ASan still sees every block through malloc.
namespace {
std::atomic<uint64_t> g_heap_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  std::abort();  // built with -fno-exceptions: no bad_alloc to throw
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return operator new(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return operator new(n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace netstack::link {
namespace {

using ::netstack::link::testing::MakeSuperSegment;
using ::netstack::link::testing::RecordingEndpoint;
using ::netstack::link::testing::RecordingReceiver;
using ::netstack::link::testing::SpreadPayload;
using ::netstack::link::testing::SuperSegmentSpec;
namespace tcp_flag = ::netstack::wire::tcp_flag;

constexpr uint8_t kTcp = static_cast<uint8_t>(wire::IpProtocol::kTcp);
const Instant kT0 = absl::UnixEpoch() + absl::Seconds(1'000'000);

// A fixed pseudo-random payload; tests send prefixes of it.
const std::vector<uint8_t>& PayloadBytes() {
  static const std::vector<uint8_t>* bytes = [] {
    auto* v = new std::vector<uint8_t>(2 * buffer::kChunkSize);
    uint32_t x = 2463534242u;
    for (uint8_t& b : *v) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      b = static_cast<uint8_t>(x);
    }
    return v;
  }();
  return *bytes;
}

// Checks that `out` is the split of a super-segment made from `spec` with
// `payload`: count, every header field, both checksums, the payload, and
// that every view lies in one of `chunks`. Stops at the first mismatch.
::testing::AssertionResult CheckSplit(const SuperSegmentSpec& spec,
                                      std::span<const uint8_t> payload,
                                      const buffer::PacketChain& out,
                                      const std::set<const buffer::Chunk*>&
                                          chunks) {
  const size_t mss = spec.mss;
  const size_t want = payload.empty() ? 1 : (payload.size() + mss - 1) / mss;
  if (out.size() != want) {
    return ::testing::AssertionFailure()
           << out.size() << " packets, want " << want;
  }
  size_t i = 0;
  for (const buffer::PacketBuffer& p : out) {
    const auto fail = [&] {
      return ::testing::AssertionFailure() << "packet " << i << " of " << want
                                           << ": ";
    };
    if (p.is_gso()) return fail() << "still marked GSO";
    for (const buffer::PayloadView& v : p.payload()) {
      if (chunks.count(v.chunk().get()) == 0) {
        return fail() << "payload view outside the super-segment's chunks";
      }
    }
    const std::vector<uint8_t> bytes = PacketBytes(p);
    const size_t from = i * mss;
    const size_t len = std::min(mss, payload.size() - from);

    wire::EthernetRepr eth;
    const wire::EthernetFrame frame(bytes);
    if (wire::EthernetRepr::Parse(frame, eth) != wire::WireError::kOk) {
      return fail() << "bad Ethernet header";
    }
    if (eth.src != spec.src_mac || eth.dst != spec.dst_mac ||
        eth.vlan.has_value() != spec.vlan) {
      return fail() << "Ethernet addresses or tag changed";
    }
    const size_t tcp_len = spec.tcp_header_len() + len;
    std::span<const uint8_t> segment;
    uint16_t pseudo = 0;
    if (spec.v6) {
      const wire::Ipv6Packet ip(frame.Payload());
      if (eth.ethertype != 0x86dd || ip.Check() != wire::WireError::kOk ||
          ip.NextHeader() != kTcp || ip.PayloadLength() != tcp_len ||
          ip.TotalLen() != frame.Payload().size()) {
        return fail() << "bad IPv6 header, payload length "
                      << ip.PayloadLength() << " want " << tcp_len;
      }
      segment = ip.Payload();
      pseudo = wire::Ipv6PseudoHeaderSum(ip.Source(), ip.Destination(), kTcp,
                                         static_cast<uint32_t>(tcp_len));
    } else {
      const wire::Ipv4Packet ip(frame.Payload());
      if (eth.ethertype != 0x0800 || ip.Check() != wire::WireError::kOk ||
          ip.Protocol() != kTcp || ip.TotalLength() != 20 + tcp_len ||
          ip.TotalLength() != frame.Payload().size() || !ip.DontFragment() ||
          ip.IsFragment() || ip.Source() != spec.src4 ||
          ip.Destination() != spec.dst4) {
        return fail() << "bad IPv4 header, total length " << ip.TotalLength()
                      << " want " << 20 + tcp_len;
      }
      if (ip.Ident() != static_cast<uint16_t>(spec.ident + i)) {
        return fail() << "IPv4 id " << ip.Ident();
      }
      if (!ip.HeaderChecksumValid()) return fail() << "bad IPv4 checksum";
      segment = ip.Payload();
      pseudo = wire::Ipv4PseudoHeaderSum(ip.Source(), ip.Destination(), kTcp,
                                         static_cast<uint32_t>(tcp_len));
    }
    const wire::TcpHeader tcp(segment);
    wire::TcpRepr repr;
    if (wire::TcpRepr::Parse(tcp, repr) != wire::WireError::kOk ||
        tcp.HeaderLen() != spec.tcp_header_len()) {
      return fail() << "bad TCP header";
    }
    if (repr.src_port != spec.src_port || repr.dst_port != spec.dst_port ||
        repr.ack != spec.ack || repr.timestamps.has_value() != spec.timestamps) {
      return fail() << "TCP ports, ack or options changed";
    }
    if (repr.seq != static_cast<uint32_t>(spec.seq + from)) {
      return fail() << "seq " << repr.seq;
    }
    uint8_t flags = spec.flags;
    if (i + 1 != want) flags &= ~(tcp_flag::kPsh | tcp_flag::kFin);
    if (i != 0) flags &= ~tcp_flag::kCwr;
    if (tcp.Flags() != flags) {
      return fail() << "flags " << int{tcp.Flags()} << " want " << int{flags};
    }
    if (!tcp.ChecksumValid(pseudo)) return fail() << "bad TCP checksum";
    if (!std::equal(tcp.Payload().begin(), tcp.Payload().end(),
                    payload.begin() + from, payload.begin() + from + len) ||
        tcp.Payload().size() != len) {
      return fail() << "payload differs";
    }
    ++i;
  }
  return ::testing::AssertionSuccess();
}

class GsoSplitTest : public ::testing::Test {
 protected:
  // Builds a super-segment of `len` payload bytes spread over chunks and
  // views, splits it, and checks the result.
  ::testing::AssertionResult SplitAndCheck(const SuperSegmentSpec& spec,
                                           size_t len) {
    const std::span<const uint8_t> payload =
        std::span(PayloadBytes()).first(len);
    std::vector<buffer::ChunkRef> refs;
    // Odd start offsets, some close enough to the chunk's end that the
    // payload continues in a second chunk.
    const uint32_t first_offset =
        static_cast<uint32_t>(len * 7919 % buffer::kChunkSize) | 1;
    const std::vector<buffer::PayloadView> views =
        SpreadPayload(chunks_, payload, first_offset, 1 + len % 13, &refs);
    std::set<const buffer::Chunk*> chunk_set;
    for (const auto& r : refs) chunk_set.insert(r.get());
    buffer::PacketPtr super = MakeSuperSegment(packets_, spec, views);
    if (super == nullptr) return ::testing::AssertionFailure() << "no packet";
    buffer::PacketChain out;
    const GsoSplitStatus s = SplitGso(std::move(super), packets_, out);
    if (s != GsoSplitStatus::kSplit) {
      return ::testing::AssertionFailure() << GsoSplitStatusName(s);
    }
    return CheckSplit(spec, payload, out, chunk_set)
           << " (" << (spec.v6 ? "IPv6" : "IPv4") << ", mss " << spec.mss
           << (spec.timestamps ? ", timestamps" : "") << ", payload " << len
           << ")";
  }

  // Every combination of family, options and MSS the sweeps cover.
  static std::vector<SuperSegmentSpec> Specs() {
    std::vector<SuperSegmentSpec> specs;
    for (const bool v6 : {false, true}) {
      for (const bool ts : {false, true}) {
        for (const uint16_t mss : {1460, 1448, 536}) {
          SuperSegmentSpec s;
          s.v6 = v6;
          s.timestamps = ts;
          s.mss = mss;
          specs.push_back(s);
        }
      }
    }
    return specs;
  }

  buffer::ChunkPool chunks_{64};
  buffer::PacketPool packets_{512};
};

TEST_F(GsoSplitTest, EveryPayloadLengthUpTo3000) {
  for (const SuperSegmentSpec& spec : Specs()) {
    for (size_t len = 1; len <= 3000; ++len) {
      ASSERT_TRUE(SplitAndCheck(spec, len));
    }
  }
}

TEST_F(GsoSplitTest, LargePayloadsStrideAndMssBoundaries) {
  size_t splits = 0;
  for (const SuperSegmentSpec& spec : Specs()) {
    const size_t max = spec.max_payload();
    std::set<size_t> lens;
    for (size_t len = 3001; len <= max; len += 773) lens.insert(len);
    for (size_t k = 1; k * spec.mss <= max + 1; ++k) {
      for (const size_t len : {k * spec.mss - 1, k * spec.mss,
                               k * spec.mss + 1}) {
        if (len <= max) lens.insert(len);
      }
    }
    lens.insert(max);
    for (const size_t len : lens) {
      ASSERT_TRUE(SplitAndCheck(spec, len));
      ++splits;
    }
  }
  std::printf("large super-segments split and checked: %zu\n", splits);
}

TEST_F(GsoSplitTest, VlanTaggedCwrFinAndOddMss) {
  SuperSegmentSpec spec;
  spec.vlan = true;
  spec.timestamps = true;
  spec.mss = 537;
  spec.flags = tcp_flag::kAck | tcp_flag::kPsh | tcp_flag::kFin |
               tcp_flag::kCwr | tcp_flag::kEce;
  for (const size_t len : {1, 536, 537, 538, 5000, 40000}) {
    ASSERT_TRUE(SplitAndCheck(spec, len));
    spec.v6 = !spec.v6;
    ASSERT_TRUE(SplitAndCheck(spec, len));
  }
}

TEST_F(GsoSplitTest, SinglePacketAndEmptySuperSegmentsGetFullChecksums) {
  for (const bool v6 : {false, true}) {
    SuperSegmentSpec spec;
    spec.v6 = v6;
    spec.flags = tcp_flag::kAck | tcp_flag::kFin;
    ASSERT_TRUE(SplitAndCheck(spec, spec.mss));
    ASSERT_TRUE(SplitAndCheck(spec, 0));
  }
}

// The largest payload is 65535 - IP - TCP header for IPv4 (65535 - TCP
// header for IPv6): 65535 payload bytes cannot have IP lengths that cover
// them, so such a packet breaks the contract and is refused.
TEST_F(GsoSplitTest, PayloadBeyondTheIpLengthFieldIsRefused) {
  for (const bool v6 : {false, true}) {
    SuperSegmentSpec spec;
    spec.v6 = v6;
    const std::vector<buffer::PayloadView> views =
        SpreadPayload(chunks_, std::span(PayloadBytes()).first(65535), 3, 4);
    buffer::PacketChain out;
    EXPECT_EQ(SplitGso(MakeSuperSegment(packets_, spec, views), packets_, out),
              GsoSplitStatus::kMalformed);
    EXPECT_TRUE(out.empty());
  }
}

TEST_F(GsoSplitTest, PayloadIsSharedNotCopiedAndOnlyPoolsAllocate) {
  SuperSegmentSpec spec;
  spec.timestamps = true;
  spec.mss = 1448;
  const size_t len = spec.max_payload();  // 65483
  std::vector<buffer::ChunkRef> refs;
  const std::vector<buffer::PayloadView> views = SpreadPayload(
      chunks_, std::span(PayloadBytes()).first(len), 40001, 9, &refs);
  ASSERT_EQ(refs.size(), 2u);  // the payload straddles two chunks
  buffer::PacketPtr super = MakeSuperSegment(packets_, spec, views);
  ASSERT_NE(super, nullptr);
  const size_t want = (len + spec.mss - 1) / spec.mss;  // 46
  packets_.Reserve(packets_.stats().in_use + want);
  const buffer::ChunkPool::Stats chunks_before = chunks_.stats();
  const buffer::PacketPool::Stats packets_before = packets_.stats();

  {
    // The counter sees the heap (so the zero below means something).
    const uint64_t probe_before = g_heap_allocations.load();
    auto probe = std::make_unique<int>(1);
    ASSERT_EQ(g_heap_allocations.load() - probe_before, 1u);
  }
  buffer::PacketChain out;
  const uint64_t heap_before = g_heap_allocations.load();
  const GsoSplitStatus s = SplitGso(std::move(super), packets_, out);
  const uint64_t heap_after = g_heap_allocations.load();

  ASSERT_EQ(s, GsoSplitStatus::kSplit);
  ASSERT_EQ(out.size(), want);
  EXPECT_EQ(heap_after - heap_before, 0u) << "the split touched the heap";
  // No chunk was allocated: every payload byte stayed where it was.
  EXPECT_EQ(chunks_.stats().allocations, chunks_before.allocations);
  EXPECT_EQ(chunks_.stats().in_use, chunks_before.in_use);
  // One pooled packet per wire packet; the super-segment went back.
  EXPECT_EQ(packets_.stats().allocations - packets_before.allocations, want);
  EXPECT_EQ(packets_.stats().created, packets_before.created);
  EXPECT_EQ(packets_.stats().in_use, packets_before.in_use + want - 1);
  // Each chunk is referenced by `refs`, by the test's `views`, and by the
  // split's views, and by nothing else: the views share the chunks.
  std::map<const buffer::Chunk*, uint32_t> split_views;
  for (const buffer::PacketBuffer& p : out) {
    for (const buffer::PayloadView& v : p.payload()) {
      ++split_views[v.chunk().get()];
    }
  }
  std::map<const buffer::Chunk*, uint32_t> test_views;
  for (const buffer::PayloadView& v : views) ++test_views[v.chunk().get()];
  ASSERT_EQ(split_views.size(), 2u);
  for (const buffer::ChunkRef& r : refs) {
    EXPECT_EQ(r->refs(), 1 + test_views[r.get()] + split_views[r.get()]);
  }
  std::set<const buffer::Chunk*> chunk_set{refs[0].get(), refs[1].get()};
  EXPECT_TRUE(CheckSplit(spec, std::span(PayloadBytes()).first(len), out,
                         chunk_set));
  std::printf("64 KiB split: %zu packets, %u+%u views, 0 chunks allocated\n",
              out.size(), split_views[refs[0].get()],
              split_views[refs[1].get()]);
}

TEST_F(GsoSplitTest, NonGsoPacketPassesThroughUntouched) {
  const std::vector<uint8_t> frame = testing::TestFrame(200, 7);
  buffer::PacketPtr p = testing::MakePacket(packets_, chunks_, frame, 54, 3);
  const buffer::PacketBuffer* raw = p.get();
  buffer::PacketChain out;
  EXPECT_EQ(SplitGso(std::move(p), packets_, out), GsoSplitStatus::kNotGso);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(&out.front(), raw);
  EXPECT_EQ(PacketBytes(out.front()), frame);
}

// Each case corrupts one thing in a good super-segment's headers.
struct Mutation {
  const char* name;
  bool v6;
  std::function<void(buffer::PacketBuffer&)> apply;
  GsoSplitStatus want;
};

TEST_F(GsoSplitTest, MalformedSuperSegmentsAreRefusedAndCounted) {
  // Offsets into the headers of an untagged frame.
  constexpr size_t kIp = 14;
  constexpr size_t kTcp4 = 34;
  constexpr size_t kTcp6 = 54;
  const auto byte = [](size_t at, uint8_t value) {
    return [=](buffer::PacketBuffer& p) {
      p.headers().mutable_data()[at] = value;
    };
  };
  const std::vector<Mutation> cases = {
      {"IPv4 EtherType on a v6 super-segment", true,
       [](buffer::PacketBuffer& p) {
         p.headers().mutable_data()[12] = 0x08;
         p.headers().mutable_data()[13] = 0x00;
       },
       GsoSplitStatus::kMalformed},
      {"two VLAN tags", false,
       [](buffer::PacketBuffer& p) {
         // 802.1ad outer tag, then 802.1Q where the EtherType should be.
         auto room = p.headers().Prepend(4);
         uint8_t* h = room->data();
         std::memmove(h, h + 4, 12);
         const uint8_t tags[] = {0x88, 0xa8, 0x00, 0x05, 0x81, 0x00};
         std::memcpy(h + 12, tags, sizeof(tags));
       },
       GsoSplitStatus::kMalformed},
      {"ARP EtherType", false, byte(13, 0x06), GsoSplitStatus::kMalformed},
      {"IPv4 version 5", false, byte(kIp, 0x55), GsoSplitStatus::kMalformed},
      {"IPv4 options (IHL 6)", false, byte(kIp, 0x46),
       GsoSplitStatus::kMalformed},
      {"IPv4 More Fragments", false, byte(kIp + 6, 0x60),
       GsoSplitStatus::kMalformed},
      {"IPv4 carrying UDP", false, byte(kIp + 9, 17),
       GsoSplitStatus::kMalformed},
      {"IPv4 total length one short", false,
       [](buffer::PacketBuffer& p) { --p.headers().mutable_data()[kIp + 3]; },
       GsoSplitStatus::kMalformed},
      {"IPv6 Hop-by-Hop header", true, byte(kIp + 6, 0),
       GsoSplitStatus::kMalformed},
      {"IPv6 payload length one long", true,
       [](buffer::PacketBuffer& p) { ++p.headers().mutable_data()[kIp + 5]; },
       GsoSplitStatus::kMalformed},
      {"TCP data offset past the headers", false, byte(kTcp4 + 12, 0xf0),
       GsoSplitStatus::kMalformed},
      {"TCP data offset 4", true, byte(kTcp6 + 12, 0x40),
       GsoSplitStatus::kMalformed},
      {"TCP option with length 0", false,
       [](buffer::PacketBuffer& p) {
         p.headers().mutable_data()[kTcp4 + 22] = 8;  // timestamps kind
         p.headers().mutable_data()[kTcp4 + 23] = 0;  // ... length 0
       },
       GsoSplitStatus::kMalformed},
      {"SYN", false, byte(kTcp4 + 13, tcp_flag::kSyn | tcp_flag::kAck),
       GsoSplitStatus::kMalformed},
      {"RST", true, byte(kTcp6 + 13, tcp_flag::kRst),
       GsoSplitStatus::kMalformed},
      {"headers cut inside Ethernet",
       false,
       [](buffer::PacketBuffer& p) {
         p.headers().Reset();
         (void)p.headers().Prepend(13);
       },
       GsoSplitStatus::kMalformed},
      {"headers cut inside IPv6", true,
       [](buffer::PacketBuffer& p) {
         p.headers().Reset();
         auto room = p.headers().Prepend(30);
         (*room)[12] = 0x86;
         (*room)[13] = 0xdd;
       },
       GsoSplitStatus::kMalformed},
      {"GSO size 0", false, [](buffer::PacketBuffer& p) { p.gso().size = 0; },
       GsoSplitStatus::kBadGsoSize},
  };
  GsoStats stats;
  for (const Mutation& m : cases) {
    SCOPED_TRACE(m.name);
    SuperSegmentSpec spec;
    spec.v6 = m.v6;
    spec.timestamps = true;
    const std::vector<buffer::PayloadView> views =
        SpreadPayload(chunks_, std::span(PayloadBytes()).first(5000), 1, 3);
    buffer::PacketPtr super = MakeSuperSegment(packets_, spec, views);
    ASSERT_NE(super, nullptr);
    m.apply(*super);
    const size_t in_use = packets_.stats().in_use;
    buffer::PacketChain out;
    const GsoSplitStatus s = SplitGso(std::move(super), packets_, out);
    stats.Count(s, out.size());
    EXPECT_EQ(s, m.want) << GsoSplitStatusName(s);
    EXPECT_TRUE(out.empty());
    // Dropped: the super-segment went back to its pool.
    EXPECT_EQ(packets_.stats().in_use, in_use - 1);
  }
  EXPECT_EQ(stats.malformed, cases.size() - 1);
  EXPECT_EQ(stats.bad_gso_size, 1u);
  EXPECT_EQ(stats.failures(), cases.size());
  EXPECT_EQ(stats.super_segments, 0u);
}

TEST_F(GsoSplitTest, WirePacketLargerThanTheMtuIsRefused) {
  SuperSegmentSpec spec;
  spec.mss = 1461;  // 20 + 20 + 1461 = 1501 bytes of IP
  const std::vector<buffer::PayloadView> views =
      SpreadPayload(chunks_, std::span(PayloadBytes()).first(3000), 1, 2);
  buffer::PacketChain out;
  EXPECT_EQ(SplitGso(MakeSuperSegment(packets_, spec, views), packets_, out,
                     1500),
            GsoSplitStatus::kBadGsoSize);
  spec.mss = 1460;
  EXPECT_EQ(SplitGso(MakeSuperSegment(packets_, spec, views), packets_, out,
                     1500),
            GsoSplitStatus::kSplit);
  EXPECT_EQ(out.size(), 3u);
}

TEST_F(GsoSplitTest, PoolExhaustedPartWayLeavesOutUntouched) {
  buffer::PacketPool small(10);
  SuperSegmentSpec spec;
  const std::vector<buffer::PayloadView> views =
      SpreadPayload(chunks_, std::span(PayloadBytes()).first(20000), 5, 3);
  buffer::PacketChain out;
  out.PushBack(small.Allocate());  // something queued before
  // 1 queued + 1 super-segment + 8 free: 14 wire packets do not fit.
  EXPECT_EQ(SplitGso(MakeSuperSegment(small, spec, views), small, out),
            GsoSplitStatus::kNoBuffer);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(small.stats().in_use, 1u);
  EXPECT_GT(small.stats().exhausted, 0u);
}

// --- GsoEndpoint on a recording endpoint.

class GsoEndpointTest : public ::testing::Test {
 protected:
  void Create(size_t accept_per_call = SIZE_MAX) {
    auto inner = std::make_unique<RecordingEndpoint>(chunks_, accept_per_call);
    rec_ = inner.get();
    auto ep = GsoEndpoint::Create(std::move(inner), packets_);
    ASSERT_TRUE(ep.ok()) << ep.status();
    ep_ = std::move(*ep);
  }
  // A super-segment of `len` bytes whose seq starts at `seq`.
  buffer::PacketPtr Super(size_t len, uint32_t seq) {
    SuperSegmentSpec spec;
    spec.seq = seq;
    spec.ident = static_cast<uint16_t>(seq);
    const std::vector<buffer::PayloadView> views =
        SpreadPayload(chunks_, std::span(PayloadBytes()).first(len), 1, 3);
    return MakeSuperSegment(packets_, spec, views);
  }
  buffer::PacketPtr Plain(uint32_t id) {
    return testing::MakePacket(packets_, chunks_, testing::TestFrame(100, id),
                               30);
  }
  // The TCP seq of a recorded IPv4 frame, or the TestFrame id + 1'000'000.
  static uint32_t Tag(const std::vector<uint8_t>& frame) {
    const wire::EthernetFrame eth(frame);
    if (eth.Type() != 0x0800) return 1'000'000 + testing::FrameId(frame);
    const wire::Ipv4Packet ip(eth.Payload());
    return wire::TcpHeader(ip.Payload()).SeqNumber();
  }
  std::vector<uint32_t> SentTags() const {
    std::vector<uint32_t> tags;
    for (const auto& s : rec_->sent) tags.push_back(Tag(s.bytes));
    return tags;
  }

  buffer::ChunkPool chunks_{64};
  buffer::PacketPool packets_{512};
  RecordingEndpoint* rec_ = nullptr;
  std::unique_ptr<GsoEndpoint> ep_;
};

TEST_F(GsoEndpointTest, CreateValidatesTheOptions) {
  buffer::PacketPool pool(1);
  EXPECT_EQ(GsoEndpoint::Create(nullptr, pool).status().code(),
            absl::StatusCode::kInvalidArgument);
  GsoEndpointOptions o;
  o.gso_max_size = 65536;
  auto too_big = GsoEndpoint::Create(
      std::make_unique<RecordingEndpoint>(chunks_), pool, o);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("65536 exceeds 65535"),
            std::string::npos)
      << too_big.status();
  o.gso_max_size = 1500;
  auto too_small = GsoEndpoint::Create(
      std::make_unique<RecordingEndpoint>(chunks_), pool, o);
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("above the link MTU 1500"),
            std::string::npos)
      << too_small.status();
  o.gso_max_size = 1501;
  EXPECT_TRUE(GsoEndpoint::Create(std::make_unique<RecordingEndpoint>(chunks_),
                                  pool, o)
                  .ok());
}

TEST_F(GsoEndpointTest, ReportsGsoAndForwardsTheRest) {
  Create();
  const LinkCapabilities caps = ep_->Capabilities();
  EXPECT_EQ(caps.gso_max_size, 65535u);
  EXPECT_EQ(caps.mtu, 1500u);
  EXPECT_EQ(caps.mac, rec_->Capabilities().mac);
  EXPECT_EQ(ep_->Name(), "gso(sw 65535) -> recording");
  EXPECT_EQ(ep_->ReadFd(), -1);
  EXPECT_EQ(ep_->NextDeadline(), kNever);
  ep_->Poll(kT0);
  EXPECT_EQ(rec_->polls, 1u);
  RecordingReceiver rx;
  ep_->Attach(&rx);
  rec_->Receive(testing::TestFrame(64, 9), kT0);
  ASSERT_EQ(rx.frames.size(), 1u);
  EXPECT_EQ(testing::FrameId(rx.frames[0].bytes), 9u);
  EXPECT_EQ(ep_->Stats().rx_frames, 1u);
}

TEST_F(GsoEndpointTest, SplitsInOrderIntoOneInnerTransmit) {
  Create();
  buffer::PacketChain chain;
  chain.PushBack(Plain(1));
  chain.PushBack(Super(5 * 1460, 100'000));  // 5 packets
  chain.PushBack(Plain(2));
  chain.PushBack(Super(2 * 1460 + 1, 200'000));  // 3 packets
  chain.PushBack(Plain(3));
  const std::vector<uint8_t> plain2 = testing::TestFrame(100, 2);
  EXPECT_EQ(ep_->Transmit(chain, kT0), 11u);
  EXPECT_TRUE(chain.empty());
  EXPECT_EQ(rec_->transmit_calls, 1u);
  const std::vector<uint32_t> want = {
      1'000'001, 100'000, 101'460, 102'920, 104'380, 105'840, 1'000'002,
      200'000,   201'460, 202'920, 1'000'003};
  EXPECT_EQ(SentTags(), want);
  EXPECT_EQ(rec_->sent[6].bytes, plain2);  // untouched, byte for byte
  const GsoStats& s = ep_->gso_stats();
  EXPECT_EQ(s.super_segments, 2u);
  EXPECT_EQ(s.packets_out, 8u);
  EXPECT_EQ(s.passed_through, 3u);
  EXPECT_EQ(s.failures(), 0u);
}

TEST_F(GsoEndpointTest, PartialInnerSendPutsTheRestBackInFront) {
  Create(/*accept_per_call=*/4);
  buffer::PacketChain chain;
  chain.PushBack(Super(5 * 1460, 100'000));
  chain.PushBack(Plain(1));
  EXPECT_EQ(ep_->Transmit(chain, kT0), 4u);
  // The 5th wire packet and the plain one wait, already split.
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_FALSE(chain.front().is_gso());
  // The caller queues more behind them and retries.
  chain.PushBack(Super(1460 + 7, 300'000));
  chain.PushBack(Plain(2));
  rec_->set_accept_per_call(SIZE_MAX);
  EXPECT_EQ(ep_->Transmit(chain, kT0), 5u);
  EXPECT_TRUE(chain.empty());
  const std::vector<uint32_t> want = {100'000, 101'460, 102'920, 104'380,
                                      105'840, 1'000'001, 300'000, 301'460,
                                      1'000'002};
  EXPECT_EQ(SentTags(), want);
  EXPECT_EQ(ep_->gso_stats().super_segments, 2u);
  EXPECT_EQ(ep_->gso_stats().packets_out, 7u);
  // Plain 1, then the two retried packets (passed through, not split
  // again) and plain 2.
  EXPECT_EQ(ep_->gso_stats().passed_through, 4u);
}

TEST_F(GsoEndpointTest, MalformedSuperSegmentIsDroppedAndCountedOthersSent) {
  Create();
  buffer::PacketChain chain;
  chain.PushBack(Super(3000, 100'000));
  buffer::PacketPtr bad = Super(3000, 200'000);
  bad->headers().mutable_data()[14 + 9] = 17;  // IPv4 protocol UDP
  chain.PushBack(std::move(bad));
  chain.PushBack(Plain(1));
  EXPECT_EQ(ep_->Transmit(chain, kT0), 4u);
  EXPECT_TRUE(chain.empty());
  const std::vector<uint32_t> want = {100'000, 101'460, 102'920, 1'000'001};
  EXPECT_EQ(SentTags(), want);
  EXPECT_EQ(ep_->gso_stats().malformed, 1u);
  EXPECT_EQ(ep_->gso_stats().failures(), 1u);
}

}  // namespace
}  // namespace netstack::link
