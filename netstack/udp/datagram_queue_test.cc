#include "netstack/udp/datagram_queue.h"

#include <cstring>

#include "gtest/gtest.h"
#include "netstack/buffer/chunk.h"

namespace netstack::udp {
namespace {

using transport::SocketAddress;

class DatagramQueueTest : public ::testing::Test {
 protected:
  // A view of `len` bytes of the shared chunk, starting at `offset`.
  buffer::PayloadView View(uint32_t offset, uint32_t len) {
    return buffer::PayloadView(chunk_, offset, len);
  }
  SocketAddress From(uint16_t port) {
    return SocketAddress{*transport::IpAddress::Parse("10.0.0.9"), port};
  }

  buffer::ChunkPool pool_{4};
  buffer::ChunkRef chunk_ = pool_.Allocate();
};

TEST_F(DatagramQueueTest, ChargesPayloadPlusOverheadAgainstTheLimit) {
  DatagramQueue q(3 * DatagramQueue::Charge(100));
  EXPECT_TRUE(q.Push(View(0, 100), From(1)));
  EXPECT_TRUE(q.Push(View(0, 100), From(2)));
  EXPECT_TRUE(q.Push(View(0, 100), From(3)));
  EXPECT_EQ(q.bytes(), 3 * (100 + DatagramQueue::kEntryOverhead));
  EXPECT_FALSE(q.Push(View(0, 1), From(4)));
  // Empty datagrams are not free: they pin a chunk too.
  EXPECT_FALSE(q.Push(View(0, 0), From(4)));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.Pop().from.port, 1);
  EXPECT_TRUE(q.Push(View(0, 100), From(5)));
  EXPECT_FALSE(q.Push(View(0, 100), From(6)));
}

TEST_F(DatagramQueueTest, AnEmptyQueueTakesOneDatagramAboveTheLimit) {
  DatagramQueue q(1000);
  EXPECT_TRUE(q.Push(View(0, 9000), From(1)));
  EXPECT_FALSE(q.Push(View(0, 1), From(2)));
  q.Pop();
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_TRUE(q.Push(View(0, 1), From(2)));
}

TEST_F(DatagramQueueTest, KeepsOrderAcrossGrowthAndWrapAround) {
  DatagramQueue q(1 << 20);
  uint16_t next_in = 0;
  uint16_t next_out = 0;
  // Interleave pushes and pops so the ring wraps while it grows.
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(q.Push(View(next_in, 1), From(next_in)));
      ++next_in;
    }
    for (int i = 0; i < 2; ++i) {
      DatagramQueue::Entry e = q.Pop();
      EXPECT_EQ(e.from.port, next_out);
      EXPECT_EQ(e.payload.offset(), next_out);
      ++next_out;
    }
  }
  while (!q.empty()) EXPECT_EQ(q.Pop().from.port, next_out++);
  EXPECT_EQ(next_out, next_in);
  EXPECT_EQ(q.bytes(), 0u);
}

TEST_F(DatagramQueueTest, SharesTheChunkAndReleasesItOnPopAndClear) {
  std::memcpy(chunk_->mutable_data().data(), "hello", 5);
  DatagramQueue q;
  ASSERT_TRUE(q.Push(View(0, 5), From(1)));
  ASSERT_TRUE(q.Push(View(1, 4), From(2)));
  EXPECT_EQ(chunk_->refs(), 3u);  // no copy: the queue holds references
  EXPECT_EQ(q.Front().payload.bytes().data(), chunk_->data().data());
  {
    DatagramQueue::Entry e = q.Pop();
    EXPECT_EQ(chunk_->refs(), 3u);  // now held by `e`
  }
  EXPECT_EQ(chunk_->refs(), 2u);
  q.Clear();
  EXPECT_EQ(chunk_->refs(), 1u);
  EXPECT_TRUE(q.empty());
}

TEST_F(DatagramQueueTest, RingStopsGrowingOnceWarm) {
  DatagramQueue q;
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(q.Push(View(0, 10), From(1)));
  q.Clear();
  const size_t capacity = q.capacity();
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(q.Push(View(0, 10), From(1)));
    for (int i = 0; i < 8; ++i) q.Pop();
  }
  EXPECT_EQ(q.capacity(), capacity);
}

TEST_F(DatagramQueueTest, LoweringTheLimitKeepsWhatIsQueued) {
  DatagramQueue q;
  ASSERT_TRUE(q.Push(View(0, 100), From(1)));
  ASSERT_TRUE(q.Push(View(0, 100), From(2)));
  q.set_limit(1);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_FALSE(q.Push(View(0, 1), From(3)));
  q.Pop();
  q.Pop();
  EXPECT_TRUE(q.Push(View(0, 1), From(3)));
}

}  // namespace
}  // namespace netstack::udp
