#include <sys/uio.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/chunk_arena.h"
#include "netstack/buffer/packet.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/buffer/prependable.h"

// Counts every global operator new, so tests can prove that building and
// walking chains does not allocate once the pools are warm.
namespace {
std::atomic<uint64_t> g_heap_allocations{0};
}
void* operator new(size_t n) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  std::abort();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace netstack::buffer {
namespace {

// Every test checks that all chunks and packets went back to their pools.
class BufferTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(chunks_.stats().in_use, 0u);
    EXPECT_EQ(packets_.stats().in_use, 0u);
    EXPECT_EQ(chunks_.stats().free, chunks_.stats().created);
    EXPECT_EQ(packets_.stats().free, packets_.stats().created);
  }
  ChunkPool chunks_{8};
  PacketPool packets_{128};
};

TEST_F(BufferTest, PrependGrowsBackwards) {
  PrependableBuffer b;
  EXPECT_EQ(b.headroom(), kMaxHeaderLen);
  auto tcp = b.Prepend(20);
  ASSERT_TRUE(tcp.has_value());
  std::memset(tcp->data(), 'T', tcp->size());
  auto ip = b.Prepend(20);
  ASSERT_TRUE(ip.has_value());
  std::memset(ip->data(), 'I', ip->size());
  auto eth = b.Prepend(14);
  ASSERT_TRUE(eth.has_value());
  std::memset(eth->data(), 'E', eth->size());
  ASSERT_EQ(b.size(), 54u);
  EXPECT_EQ(b.data()[0], 'E');
  EXPECT_EQ(b.data()[14], 'I');
  EXPECT_EQ(b.data()[34], 'T');
  EXPECT_EQ(b.data()[53], 'T');
  EXPECT_EQ(b.headroom(), kMaxHeaderLen - 54);
}

TEST_F(BufferTest, HeadroomExhaustionFailsCleanly) {
  PrependableBuffer b;
  ASSERT_TRUE(b.Prepend(kMaxHeaderLen - 10).has_value());
  // One byte too many fails and leaves the buffer unchanged.
  EXPECT_FALSE(b.Prepend(11).has_value());
  EXPECT_EQ(b.size(), kMaxHeaderLen - 10);
  EXPECT_FALSE(b.Prepend(SIZE_MAX).has_value());
  // Exactly the rest fits; then nothing more does, not even one byte.
  auto last = b.Prepend(10);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->data(), b.data().data());
  EXPECT_EQ(b.headroom(), 0u);
  EXPECT_FALSE(b.Prepend(1).has_value());
  EXPECT_TRUE(b.Prepend(0).has_value());
  b.Reset();
  EXPECT_EQ(b.size(), 0u);
  EXPECT_TRUE(b.Prepend(kMaxHeaderLen).has_value());
}

TEST_F(BufferTest, WorstCaseHeadersFit) {
  // virtio-net 12 + Ethernet 14 + 802.1Q 4 + IPv6 40 + Fragment 8 + TCP 60.
  PrependableBuffer b;
  for (size_t n : {60u, 8u, 40u, 4u, 14u, 12u}) {
    ASSERT_TRUE(b.Prepend(n).has_value()) << n;
  }
  EXPECT_GE(b.headroom(), 0u);
  EXPECT_EQ(b.size(), 138u);
}

TEST_F(BufferTest, ViewsShareAChunkWithoutCopying) {
  ChunkRef c = chunks_.Allocate();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->refs(), 1u);
  std::memcpy(c->mutable_data().data(), "hello, world", 12);
  PayloadView whole(c, 0, 12);
  PayloadView world = whole.Subview(7, 5);
  PayloadView copy = world;
  EXPECT_EQ(c->refs(), 4u);
  // Same bytes in memory: views point into the chunk.
  EXPECT_EQ(world.bytes().data(), c->data().data() + 7);
  EXPECT_EQ(copy.bytes().data(), world.bytes().data());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(world.bytes().data()),
                        world.size()),
            "world");
  EXPECT_EQ(chunks_.stats().in_use, 1u);
  c.Reset();
  whole = PayloadView();
  world = PayloadView();
  EXPECT_EQ(chunks_.stats().in_use, 1u);  // `copy` still holds it
  copy = PayloadView();
  EXPECT_EQ(chunks_.stats().in_use, 0u);
  EXPECT_EQ(chunks_.stats().free, 1u);
}

TEST_F(BufferTest, SubviewAndTrimClamp) {
  PayloadView v(chunks_.Allocate(), 100, 50);
  EXPECT_EQ(v.Subview(40, 100).size(), 10u);
  EXPECT_EQ(v.Subview(60, 1).size(), 0u);
  v.TrimFront(20);
  EXPECT_EQ(v.offset(), 120u);
  EXPECT_EQ(v.size(), 30u);
  v.Truncate(100);
  EXPECT_EQ(v.size(), 30u);
  v.Truncate(5);
  EXPECT_EQ(v.size(), 5u);
  v.TrimFront(99);
  EXPECT_TRUE(v.empty());
}

TEST_F(BufferTest, ChunkPoolIsBoundedAndRecycles) {
  std::vector<ChunkRef> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(chunks_.Allocate());
    ASSERT_TRUE(held.back());
  }
  EXPECT_FALSE(chunks_.Allocate());
  EXPECT_EQ(chunks_.stats().exhausted, 1u);
  Chunk* first = held[0].get();
  held.clear();
  EXPECT_EQ(chunks_.stats().in_use, 0u);
  const uint64_t before = g_heap_allocations.load();
  ChunkRef again = chunks_.Allocate();
  EXPECT_EQ(g_heap_allocations.load(), before);  // recycled, not allocated
  EXPECT_EQ(chunks_.stats().created, 8u);
  EXPECT_NE(again.get(), nullptr);
  (void)first;
}

TEST_F(BufferTest, QueuedDataLeavesTheReceiveReserve) {
  chunks_.set_receive_reserve(2);
  std::vector<ChunkRef> held;
  for (int i = 0; i < 6; ++i) {
    held.push_back(chunks_.AllocateForQueue());
    ASSERT_TRUE(held.back());
  }
  // Two chunks are left, and they are the reserve.
  EXPECT_FALSE(chunks_.CanAllocateForQueue());
  EXPECT_FALSE(chunks_.AllocateForQueue());
  EXPECT_EQ(chunks_.stats().queue_refused, 1u);
  held.push_back(chunks_.Allocate());  // a link's receive still gets one
  held.push_back(chunks_.Allocate());
  EXPECT_TRUE(held[6] && held[7]);
  EXPECT_FALSE(chunks_.Allocate());
  held.clear();
  EXPECT_TRUE(chunks_.CanAllocateForQueue());
}

TEST_F(BufferTest, DefaultReserveIsAnEighthOfThePool) {
  EXPECT_EQ(chunks_.receive_reserve(), 1u);
  ChunkPool big(1024);
  EXPECT_EQ(big.receive_reserve(), 128u);
}

// Many writers with a few bytes each pin one chunk between them, not one
// chunk each.
TEST_F(BufferTest, ArenaPacksManyWritersIntoOneChunk) {
  ChunkArena arena(chunks_);
  std::vector<PayloadView> views;
  for (int i = 0; i < 500; ++i) {
    auto room = arena.Room(100);
    ASSERT_GE(room.size(), 100u);
    std::memset(room.data(), i & 0xff, 100);
    views.push_back(arena.Commit(100));
  }
  EXPECT_EQ(chunks_.stats().in_use, 1u);
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(views[i].size(), 100u);
    EXPECT_EQ(views[i].bytes()[0], i & 0xff);
    EXPECT_EQ(views[i].bytes()[99], i & 0xff);
  }
  // A write that does not fit the rest takes a fresh chunk; the old one
  // lives on in its views.
  auto room = arena.Room(kChunkSize);
  ASSERT_EQ(room.size(), kChunkSize);
  PayloadView big = arena.Commit(kChunkSize);
  EXPECT_EQ(chunks_.stats().in_use, 2u);
  EXPECT_NE(big.chunk().get(), views[0].chunk().get());
  views.clear();
  EXPECT_EQ(chunks_.stats().in_use, 1u);
  big = PayloadView();
  arena.Release();
}

TEST_F(BufferTest, ArenaReusesItsChunkOnceNoViewIsLeft) {
  ChunkArena arena(chunks_);
  (void)arena.Room(10);
  PayloadView a = arena.Commit(10);
  EXPECT_TRUE(arena.Continues(a));
  const Chunk* chunk = a.chunk().get();
  a = PayloadView();
  auto room = arena.Room(kChunkSize);  // all of it again, same chunk
  EXPECT_EQ(room.size(), kChunkSize);
  PayloadView b = arena.Commit(1);
  EXPECT_EQ(b.chunk().get(), chunk);
  EXPECT_EQ(b.offset(), 0u);
  EXPECT_EQ(chunks_.stats().allocations, 1u);
}

TEST_F(BufferTest, ArenaRespectsTheReceiveReserve) {
  chunks_.set_receive_reserve(7);
  ChunkArena arena(chunks_);
  ASSERT_FALSE(arena.Room(kChunkSize).empty());
  PayloadView a = arena.Commit(kChunkSize);
  EXPECT_TRUE(arena.Room(1).empty());  // only the reserve is left
  EXPECT_EQ(chunks_.stats().queue_refused, 1u);
  a = PayloadView();
  EXPECT_FALSE(arena.Room(1).empty());  // its own chunk is free again
  arena.Release();
}

TEST_F(BufferTest, PacketHoldsHeadersAndPayload) {
  PacketPtr p = packets_.Allocate();
  ASSERT_NE(p, nullptr);
  ChunkRef c = chunks_.Allocate();
  std::memset(c->mutable_data().data(), 'x', 3000);
  ASSERT_TRUE(p->AppendPayload(PayloadView(c, 0, 1000)));
  ASSERT_TRUE(p->AppendPayload(PayloadView(c, 1000, 448)));
  ASSERT_TRUE(p->AppendPayload(PayloadView()));  // empty views are skipped
  auto h = p->headers().Prepend(66);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(p->size(), 66u + 1448u);
  iovec iov[4];
  ASSERT_EQ(p->ToIovecs(iov), 3u);
  EXPECT_EQ(iov[0].iov_len, 66u);
  EXPECT_EQ(iov[1].iov_base, c->data().data());
  EXPECT_EQ(iov[2].iov_len, 448u);
  iovec small[2];
  EXPECT_EQ(p->ToIovecs(small), 0u);
  // Payload slots are bounded; a full packet refuses more, unchanged.
  PacketPtr q = packets_.Allocate();
  for (size_t i = 0; i < PacketBuffer::kMaxPayloadViews; ++i) {
    ASSERT_TRUE(q->AppendPayload(PayloadView(c, i, 1)));
  }
  EXPECT_FALSE(q->AppendPayload(PayloadView(c, 0, 1)));
  EXPECT_EQ(q->payload_size(), PacketBuffer::kMaxPayloadViews);
}

TEST_F(BufferTest, MoveTransfersContentNotLinkage) {
  PacketPtr p = packets_.Allocate();
  ChunkRef c = chunks_.Allocate();
  ASSERT_TRUE(p->AppendPayload(PayloadView(c, 0, 10)));
  auto h = p->headers().Prepend(4);
  std::memcpy(h->data(), "abcd", 4);
  PacketBuffer moved(std::move(*p));
  EXPECT_EQ(moved.size(), 14u);
  EXPECT_EQ(moved.headers().data()[3], 'd');
  EXPECT_EQ(p->size(), 0u);
  EXPECT_EQ(c->refs(), 2u);  // c + moved's view; p's view was moved out
  EXPECT_FALSE(moved.next.is_linked());
}

// Chains of 1 to 64 packets: the per-segment headers of a GSO split share
// one chunk of payload; building, walking and handing over the chain
// allocates nothing once the pools are warm.
class ChainTest : public BufferTest,
                  public ::testing::WithParamInterface<int> {};

PacketChain BuildSplit(PacketPool& packets, const ChunkRef& payload,
                       int count, uint32_t mss) {
  PacketChain chain;
  for (int i = 0; i < count; ++i) {
    PacketPtr p = packets.Allocate();
    if (p == nullptr) break;
    if (!p->AppendPayload(PayloadView(payload, i * mss, mss))) break;
    auto h = p->headers().Prepend(54);
    if (!h) break;
    (*h)[0] = static_cast<uint8_t>(i);  // "sequence" marker
    chain.PushBack(std::move(p));
  }
  return chain;
}

// Stands in for a link endpoint: takes the chain and walks it.
size_t ConsumeLikeALink(PacketChain chain, std::vector<iovec>& iov) {
  size_t used = 0;
  for (const PacketBuffer& p : chain) {
    used += p.ToIovecs(std::span<iovec>(iov).subspan(used));
  }
  return used;
}

TEST_P(ChainTest, BuildWalkAndHandOver) {
  const int n = GetParam();
  constexpr uint32_t kMss = 1000;  // 64 * 1000 fits one 64 KiB chunk
  ChunkRef payload = chunks_.Allocate();
  ASSERT_TRUE(payload);
  packets_.Reserve(64);
  std::vector<iovec> iov(2 * 64);

  const uint64_t before = g_heap_allocations.load();
  PacketChain chain = BuildSplit(packets_, payload, n, kMss);
  ASSERT_EQ(chain.size(), static_cast<size_t>(n));
  EXPECT_EQ(chain.TotalBytes(), static_cast<size_t>(n) * (54 + kMss));
  EXPECT_EQ(payload->refs(), static_cast<uint32_t>(n) + 1);
  int i = 0;
  for (const PacketBuffer& p : chain) {
    EXPECT_EQ(p.headers().data()[0], i);
    EXPECT_EQ(p.payload()[0].bytes().data(),
              payload->data().data() + i * kMss);
    ++i;
  }
  EXPECT_EQ(i, n);
  const size_t used = ConsumeLikeALink(std::move(chain), iov);
  EXPECT_EQ(g_heap_allocations.load(), before) << "chain path allocated";

  EXPECT_EQ(used, static_cast<size_t>(2 * n));
  EXPECT_TRUE(chain.empty());  // NOLINT: moved-from chain is empty
  EXPECT_EQ(packets_.stats().in_use, 0u);
  EXPECT_EQ(payload->refs(), 1u);
}

TEST_P(ChainTest, PopAppendAndPartialHandOver) {
  const int n = GetParam();
  ChunkRef payload = chunks_.Allocate();
  PacketChain a = BuildSplit(packets_, payload, n, 512);
  PacketChain b = BuildSplit(packets_, payload, n, 512);
  a.Append(std::move(b));
  EXPECT_TRUE(b.empty());
  ASSERT_EQ(a.size(), static_cast<size_t>(2 * n));
  // A link that sent only part of a chain pops what went out and keeps
  // the rest for later.
  PacketPtr first = a.PopFront();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->headers().data()[0], 0);
  EXPECT_EQ(a.size(), static_cast<size_t>(2 * n - 1));
  EXPECT_EQ(packets_.stats().in_use, static_cast<size_t>(2 * n));
  first.reset();
  a.Clear();
  EXPECT_EQ(a.PopFront(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(OneTo64, ChainTest, ::testing::Range(1, 65));

TEST_F(BufferTest, PacketPoolIsBounded) {
  PacketPool small(2);
  PacketPtr a = small.Allocate();
  PacketPtr b = small.Allocate();
  EXPECT_EQ(small.Allocate(), nullptr);
  EXPECT_EQ(small.stats().exhausted, 1u);
  a.reset();
  EXPECT_NE(small.Allocate(), nullptr);
}

}  // namespace
}  // namespace netstack::buffer
