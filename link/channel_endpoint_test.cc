#include "link/channel_endpoint.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "link/link_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"

// Counts global operator new calls, to show that a warmed-up channel moves
// frames without touching the heap.
namespace {
std::atomic<uint64_t> g_heap_allocations{0};
}  // namespace
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

namespace netstack::link {
namespace {

using ::netstack::link::testing::FrameId;
using ::netstack::link::testing::MakePacket;
using ::netstack::link::testing::RecordingReceiver;
using ::netstack::link::testing::TestFrame;

const Instant kT0 = absl::UnixEpoch() + absl::Seconds(1000);

class ChannelTest : public ::testing::Test {
 protected:
  void SetUp() override { Create(ChannelOptions{}); }
  void TearDown() override {
    a_.reset();
    b_.reset();
    rx_a_.frames.clear();
    rx_b_.frames.clear();
    EXPECT_EQ(packets_.stats().in_use, 0u);
    EXPECT_EQ(chunks_.stats().in_use, 0u);
  }

  void Create(const ChannelOptions& options) {
    a_.reset();
    b_.reset();
    auto pair = CreateChannelPair(chunks_, options);
    ASSERT_TRUE(pair.ok()) << pair.status();
    a_ = std::move(pair->a);
    b_ = std::move(pair->b);
    a_->Attach(&rx_a_);
    b_->Attach(&rx_b_);
  }

  // A chain of frames with ids [first, first + n), each `len` bytes, built
  // like the stack builds them: headers plus two payload views.
  buffer::PacketChain Frames(uint32_t first, size_t n, size_t len = 1514) {
    buffer::PacketChain chain;
    for (size_t i = 0; i < n; ++i) {
      const std::vector<uint8_t> f = TestFrame(len, first + i);
      chain.PushBack(MakePacket(packets_, chunks_, f, 54, 2));
    }
    return chain;
  }

  buffer::ChunkPool chunks_{512};
  buffer::PacketPool packets_{2048};
  std::unique_ptr<ChannelEndpoint> a_;
  std::unique_ptr<ChannelEndpoint> b_;
  RecordingReceiver rx_a_;
  RecordingReceiver rx_b_;
};

TEST_F(ChannelTest, DeliversInOrderOnlyAtPoll) {
  buffer::PacketChain chain = Frames(0, 10);
  EXPECT_EQ(a_->NextDeadline(), kNever);
  EXPECT_EQ(b_->NextDeadline(), kNever);
  EXPECT_EQ(a_->Transmit(chain, kT0), 10u);
  EXPECT_TRUE(chain.empty());
  // The sender's packets and chunks are free again: the channel copied.
  EXPECT_EQ(packets_.stats().in_use, 0u);
  EXPECT_EQ(chunks_.stats().in_use, 0u);

  // Nothing is delivered from Transmit; B wants to be polled now.
  EXPECT_TRUE(rx_b_.frames.empty());
  EXPECT_EQ(b_->NextDeadline(), kT0);
  EXPECT_EQ(a_->NextDeadline(), kNever);
  EXPECT_EQ(b_->queued_frames(), 10u);
  a_->Poll(kT0);  // the wrong side delivers nothing
  EXPECT_TRUE(rx_a_.frames.empty());
  EXPECT_TRUE(rx_b_.frames.empty());

  b_->Poll(kT0 + absl::Milliseconds(1));
  ASSERT_EQ(rx_b_.frames.size(), 10u);
  for (uint32_t i = 0; i < 10; ++i) {
    EXPECT_EQ(rx_b_.frames[i].bytes, TestFrame(1514, i)) << i;
    EXPECT_EQ(rx_b_.frames[i].time, kT0 + absl::Milliseconds(1));
  }
  EXPECT_EQ(b_->NextDeadline(), kNever);
  EXPECT_EQ(a_->Stats().tx_frames, 10u);
  EXPECT_EQ(a_->Stats().tx_bytes, 15140u);
  EXPECT_EQ(b_->Stats().rx_frames, 10u);
  EXPECT_EQ(b_->Stats().rx_bytes, 15140u);
  EXPECT_EQ(a_->Stats().tx_dropped, 0u);
}

TEST_F(ChannelTest, BothDirectionsAreIndependent) {
  buffer::PacketChain ab = Frames(100, 3);
  buffer::PacketChain ba = Frames(200, 2);
  a_->Transmit(ab, kT0);
  b_->Transmit(ba, kT0);
  a_->Poll(kT0);
  ASSERT_EQ(rx_a_.frames.size(), 2u);
  EXPECT_EQ(FrameId(rx_a_.frames[0].bytes), 200u);
  EXPECT_EQ(FrameId(rx_a_.frames[1].bytes), 201u);
  EXPECT_TRUE(rx_b_.frames.empty());
  b_->Poll(kT0);
  ASSERT_EQ(rx_b_.frames.size(), 3u);
  EXPECT_EQ(FrameId(rx_b_.frames[2].bytes), 102u);
}

TEST_F(ChannelTest, PacksManyFramesPerChunkAndBatches) {
  buffer::PacketChain chain = Frames(0, 200);
  a_->Transmit(chain, kT0);
  const uint64_t before = chunks_.stats().allocations;
  b_->Poll(kT0);
  ASSERT_EQ(rx_b_.frames.size(), 200u);
  for (uint32_t i = 0; i < 200; ++i) {
    ASSERT_EQ(FrameId(rx_b_.frames[i].bytes), i);
  }
  // 43 frames of 1514 bytes fit one 64 KiB chunk: 5 chunks, not 200.
  EXPECT_EQ(chunks_.stats().allocations - before, 5u);
  EXPECT_LE(rx_b_.largest_batch, 64u);
  EXPECT_GE(rx_b_.calls, 4u);
}

TEST_F(ChannelTest, RespectsTheQueueLimit) {
  ChannelOptions options;
  options.queue_limit = 4;
  Create(options);
  buffer::PacketChain chain = Frames(0, 10);
  EXPECT_EQ(a_->Transmit(chain, kT0), 4u);
  EXPECT_TRUE(chain.empty());  // dropped packets are popped too
  EXPECT_EQ(a_->Stats().tx_frames, 4u);
  EXPECT_EQ(a_->Stats().tx_dropped, 6u);
  EXPECT_EQ(b_->queued_frames(), 4u);
  b_->Poll(kT0);
  ASSERT_EQ(rx_b_.frames.size(), 4u);
  EXPECT_EQ(FrameId(rx_b_.frames[3].bytes), 3u);  // the first four, in order
  // Room again after delivery.
  buffer::PacketChain more = Frames(10, 4);
  EXPECT_EQ(a_->Transmit(more, kT0), 4u);
  EXPECT_EQ(a_->Stats().tx_dropped, 6u);
}

TEST_F(ChannelTest, DropsFramesLargerThanTheMtu) {
  buffer::PacketChain chain;
  chain.PushBack(MakePacket(packets_, chunks_, TestFrame(1514, 1), 54));
  chain.PushBack(MakePacket(packets_, chunks_, TestFrame(1515, 2), 54));
  EXPECT_EQ(a_->Transmit(chain, kT0), 1u);
  EXPECT_EQ(a_->Stats().tx_dropped, 1u);
  b_->Poll(kT0);
  ASSERT_EQ(rx_b_.frames.size(), 1u);
  EXPECT_EQ(FrameId(rx_b_.frames[0].bytes), 1u);
}

// The receiver transmits from inside DeliverFrames, to both sides, and
// polls recursively: nothing it sends is delivered in the same Poll, and
// nothing is lost or reordered.
TEST_F(ChannelTest, ReentrancySafe) {
  int replies = 0;
  rx_b_.on_deliver = [&](Instant now) {
    buffer::PacketChain back = Frames(1000 + replies, 1);   // B -> A
    buffer::PacketChain again = Frames(2000 + replies, 1);  // A -> B
    ++replies;
    EXPECT_EQ(b_->Transmit(back, now), 1u);
    EXPECT_EQ(a_->Transmit(again, now), 1u);
    b_->Poll(now);  // nested: must not deliver
    a_->Poll(now);  // A is not polling: it delivers the reply to rx_a_
  };
  buffer::PacketChain chain = Frames(0, 3);
  a_->Transmit(chain, kT0);
  b_->Poll(kT0);
  // One batch of 3, one reply each way.
  ASSERT_EQ(rx_b_.frames.size(), 3u);
  EXPECT_EQ(replies, 1);
  EXPECT_EQ(b_->queued_frames(), 1u);  // A's re-send waits for B's next Poll
  ASSERT_EQ(rx_a_.frames.size(), 1u);
  EXPECT_EQ(FrameId(rx_a_.frames[0].bytes), 1000u);

  rx_b_.on_deliver = nullptr;
  b_->Poll(kT0);
  ASSERT_EQ(rx_b_.frames.size(), 4u);
  EXPECT_EQ(FrameId(rx_b_.frames[3].bytes), 2000u);
  EXPECT_EQ(b_->queued_frames(), 0u);
}

TEST_F(ChannelTest, LatencyDelaysDelivery) {
  ChannelOptions options;
  options.latency = absl::Milliseconds(5);
  Create(options);
  buffer::PacketChain first = Frames(0, 1);
  buffer::PacketChain second = Frames(1, 1);
  a_->Transmit(first, kT0);
  a_->Transmit(second, kT0 + absl::Milliseconds(2));
  EXPECT_EQ(b_->NextDeadline(), kT0 + absl::Milliseconds(5));
  b_->Poll(kT0 + absl::Microseconds(4999));
  EXPECT_TRUE(rx_b_.frames.empty());
  b_->Poll(kT0 + absl::Milliseconds(5));
  ASSERT_EQ(rx_b_.frames.size(), 1u);
  EXPECT_EQ(b_->NextDeadline(), kT0 + absl::Milliseconds(7));
  b_->Poll(kT0 + absl::Milliseconds(8));
  ASSERT_EQ(rx_b_.frames.size(), 2u);
  EXPECT_EQ(b_->NextDeadline(), kNever);
}

TEST_F(ChannelTest, InjectAndCapture) {
  // Injected bytes need not be a valid frame.
  const std::vector<uint8_t> junk = {1, 2, 3};
  EXPECT_TRUE(b_->InjectFrame(junk, kT0));
  EXPECT_FALSE(b_->InjectFrame({}, kT0));
  EXPECT_FALSE(b_->InjectFrame(TestFrame(1515, 0), kT0));
  b_->Poll(kT0);
  ASSERT_EQ(rx_b_.frames.size(), 1u);
  EXPECT_EQ(rx_b_.frames[0].bytes, junk);

  a_->set_capture(true);
  buffer::PacketChain chain = Frames(5, 2);
  chain.PushBack(MakePacket(packets_, chunks_, TestFrame(1600, 7), 54));
  a_->Transmit(chain, kT0 + absl::Seconds(1));
  std::vector<ChannelEndpoint::CapturedFrame> captured = a_->TakeCaptured();
  ASSERT_EQ(captured.size(), 3u);  // the oversized one too
  EXPECT_EQ(captured[0].bytes, TestFrame(1514, 5));
  EXPECT_EQ(captured[1].bytes, TestFrame(1514, 6));
  EXPECT_EQ(captured[2].bytes.size(), 1600u);
  EXPECT_EQ(captured[0].time, kT0 + absl::Seconds(1));
  EXPECT_TRUE(a_->TakeCaptured().empty());
}

TEST_F(ChannelTest, SurvivorDropsWhenPeerIsGone) {
  buffer::PacketChain queued = Frames(0, 2);
  a_->Transmit(queued, kT0);
  b_.reset();  // releases what was queued for it
  buffer::PacketChain chain = Frames(2, 3);
  EXPECT_EQ(a_->Transmit(chain, kT0), 0u);
  EXPECT_EQ(a_->Stats().tx_dropped, 3u);
  EXPECT_EQ(a_->Name(), "channel:a");
}

TEST_F(ChannelTest, NoChunkMeansReceiveDrop) {
  buffer::ChunkPool tiny(1);
  auto pair = CreateChannelPair(tiny, ChannelOptions{});
  ASSERT_TRUE(pair.ok());
  RecordingReceiver rx;
  pair->b->Attach(&rx);
  ASSERT_TRUE(pair->b->InjectFrame(TestFrame(60, 1), kT0));
  ASSERT_TRUE(pair->b->InjectFrame(TestFrame(60, 2), kT0));
  buffer::ChunkRef hog = tiny.Allocate();  // the only chunk
  pair->b->Poll(kT0);
  EXPECT_TRUE(rx.frames.empty());
  EXPECT_EQ(pair->b->Stats().rx_dropped, 2u);
  EXPECT_EQ(pair->b->NextDeadline(), kNever);
}

TEST_F(ChannelTest, CapabilitiesCarryOptions) {
  ChannelOptions options;
  options.mtu = 9000;
  options.mac_a.bytes = {2, 0, 0, 0, 0, 0xa};
  options.mac_b.bytes = {2, 0, 0, 0, 0, 0xb};
  Create(options);
  EXPECT_EQ(a_->Capabilities().mtu, 9000u);
  EXPECT_EQ(a_->Capabilities().mac, options.mac_a);
  EXPECT_EQ(b_->Capabilities().mac, options.mac_b);
  EXPECT_EQ(b_->Capabilities().gso_max_size, 0u);
  EXPECT_EQ(a_->ReadFd(), -1);
}

TEST_F(ChannelTest, RejectsBadOptions) {
  ChannelOptions o;
  o.mtu = 67;
  EXPECT_EQ(CreateChannelPair(chunks_, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.mtu = 65523;
  EXPECT_EQ(CreateChannelPair(chunks_, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = ChannelOptions{};
  o.queue_limit = 0;
  auto s = CreateChannelPair(chunks_, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("queue_limit"), std::string::npos)
      << s;
  o = ChannelOptions{};
  o.latency = -absl::Milliseconds(1);
  EXPECT_FALSE(CreateChannelPair(chunks_, o).ok());
  o = ChannelOptions{};
  o.queue_limit = size_t{1} << 30;
  EXPECT_FALSE(CreateChannelPair(chunks_, o).ok());
}

// A receiver that only counts, so the measurement sees the channel alone.
class CountingReceiver : public LinkReceiver {
 public:
  void DeliverFrames(std::span<InboundFrame> frames, Instant now) override {
    count += frames.size();
  }
  size_t count = 0;
};

TEST_F(ChannelTest, SteadyStateDoesNotAllocate) {
  CountingReceiver counter;
  b_->Attach(&counter);
  packets_.Reserve(64);
  chunks_.Reserve(64);
  // The test's own frame bytes are made before counting.
  std::vector<std::vector<uint8_t>> bytes;
  for (uint32_t i = 0; i < 11 * 32; ++i) bytes.push_back(TestFrame(1514, i));
  auto round = [&](uint32_t first) {
    buffer::PacketChain chain;
    for (uint32_t i = first; i < first + 32; ++i) {
      chain.PushBack(MakePacket(packets_, chunks_, bytes[i], 54, 2));
    }
    a_->Transmit(chain, kT0);
    b_->Poll(kT0);
  };
  round(0);  // warm-up
  const uint64_t before = g_heap_allocations.load();
  for (uint32_t i = 1; i <= 10; ++i) round(i * 32);
  EXPECT_EQ(g_heap_allocations.load() - before, 0u);
  EXPECT_EQ(counter.count, 11u * 32u);
}

}  // namespace
}  // namespace netstack::link
