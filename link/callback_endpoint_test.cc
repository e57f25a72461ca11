#include "link/callback_endpoint.h"

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "link/link_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"

namespace netstack::link {
namespace {

using ::netstack::link::testing::FrameId;
using ::netstack::link::testing::MakePacket;
using ::netstack::link::testing::RecordingReceiver;
using ::netstack::link::testing::TestFrame;

const Instant kT0 = absl::UnixEpoch() + absl::Seconds(1000);

class CallbackEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override { Create(CallbackOptions{}); }
  void TearDown() override {
    ep_.reset();
    rx_.frames.clear();
    EXPECT_EQ(packets_.stats().in_use, 0u);
    EXPECT_EQ(chunks_.stats().in_use, 0u);
  }

  void Create(CallbackOptions o) {
    ep_.reset();
    o.send = [this](std::span<const uint8_t> f) {
      sent_.emplace_back(f.begin(), f.end());
      if (on_send_) on_send_(f);
      return refuse_ == 0 || (--refuse_, false);
    };
    auto ep = CallbackEndpoint::Create(std::move(o), chunks_);
    ASSERT_TRUE(ep.ok()) << ep.status();
    ep_ = *std::move(ep);
    ep_->Attach(&rx_);
  }

  buffer::ChunkPool chunks_{64};
  buffer::PacketPool packets_{256};
  std::unique_ptr<CallbackEndpoint> ep_;
  RecordingReceiver rx_;
  std::vector<std::vector<uint8_t>> sent_;
  std::function<void(std::span<const uint8_t>)> on_send_;
  int refuse_ = 0;
};

TEST_F(CallbackEndpointTest, InputIsDeliveredAtPollInOrder) {
  EXPECT_EQ(ep_->NextDeadline(), kNever);
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(ep_->Input(TestFrame(1514, i)),
              CallbackEndpoint::InputResult::kQueued);
  }
  // Nothing reaches the receiver from Input; the loop is asked to poll.
  EXPECT_TRUE(rx_.frames.empty());
  EXPECT_EQ(ep_->NextDeadline(), absl::InfinitePast());
  ep_->Poll(kT0);
  ASSERT_EQ(rx_.frames.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(rx_.frames[i].bytes, TestFrame(1514, i)) << i;
  }
  // Batches of at most 64; frames packed many to a chunk (43 of 1514
  // bytes in 64 KiB), so 100 frames took 3 chunks.
  EXPECT_EQ(rx_.calls, 2u);
  EXPECT_EQ(chunks_.stats().allocations, 3u);
  EXPECT_EQ(ep_->NextDeadline(), kNever);
  EXPECT_EQ(ep_->Stats().rx_frames, 100u);
  EXPECT_EQ(ep_->Stats().rx_bytes, 151400u);
}

TEST_F(CallbackEndpointTest, BadFramesAreDroppedAndCounted) {
  const std::vector<uint8_t> runt(13, 0);
  EXPECT_EQ(ep_->Input({}), CallbackEndpoint::InputResult::kRunt);
  EXPECT_EQ(ep_->Input(runt), CallbackEndpoint::InputResult::kRunt);
  // MTU 1500: 1518 with a VLAN tag is the largest.
  EXPECT_EQ(ep_->Input(TestFrame(1518, 1)),
            CallbackEndpoint::InputResult::kQueued);
  EXPECT_EQ(ep_->Input(TestFrame(1519, 2)),
            CallbackEndpoint::InputResult::kOversized);
  ep_->Poll(kT0);
  ASSERT_EQ(rx_.frames.size(), 1u);
  EXPECT_EQ(ep_->Stats().rx_dropped, 3u);
  EXPECT_EQ(ep_->callback_stats().rx_runts, 2u);
  EXPECT_EQ(ep_->callback_stats().rx_oversized, 1u);
}

TEST_F(CallbackEndpointTest, QueueLimitDropsAndCounts) {
  CallbackOptions o;
  o.queue_limit = 3;
  Create(std::move(o));
  for (uint32_t i = 0; i < 3; ++i) ep_->Input(TestFrame(100, i));
  EXPECT_EQ(ep_->Input(TestFrame(100, 3)),
            CallbackEndpoint::InputResult::kQueueFull);
  ep_->Poll(kT0);
  EXPECT_EQ(rx_.frames.size(), 3u);
  EXPECT_EQ(ep_->callback_stats().rx_queue_full, 1u);
}

TEST_F(CallbackEndpointTest, PoolExhaustionDropsAndCounts) {
  for (uint32_t i = 0; i < 3; ++i) ep_->Input(TestFrame(100, i));
  ep_->Poll(kT0);
  // Every chunk taken: the next frame that needs a fresh one is dropped.
  std::vector<buffer::ChunkRef> held;
  while (buffer::ChunkRef c = chunks_.Allocate()) held.push_back(std::move(c));
  rx_.frames.clear();
  // The endpoint's current chunk still has room ...
  EXPECT_EQ(ep_->Input(TestFrame(100, 4)),
            CallbackEndpoint::InputResult::kQueued);
  // ... until a frame no longer fits its tail.
  CallbackEndpoint::InputResult r = CallbackEndpoint::InputResult::kQueued;
  int queued = 0;
  while (r == CallbackEndpoint::InputResult::kQueued) {
    r = ep_->Input(TestFrame(1514, 6));
    if (r == CallbackEndpoint::InputResult::kQueued) ++queued;
  }
  EXPECT_EQ(r, CallbackEndpoint::InputResult::kNoChunk);
  EXPECT_EQ(queued, 43);  // (65536 - 400) / 1514
  EXPECT_EQ(ep_->callback_stats().rx_no_chunk, 1u);
  ep_->Poll(kT0);
  EXPECT_EQ(rx_.frames.size(), 44u);
  held.clear();
}

TEST_F(CallbackEndpointTest, TransmitCallsSendPerFrame) {
  buffer::PacketChain chain;
  for (uint32_t i = 0; i < 5; ++i) {
    chain.PushBack(MakePacket(packets_, chunks_, TestFrame(1000, i), 54, 2));
  }
  refuse_ = 1;  // the first one is refused
  EXPECT_EQ(ep_->Transmit(chain, kT0), 4u);
  EXPECT_TRUE(chain.empty());
  ASSERT_EQ(sent_.size(), 5u);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(FrameId(sent_[i]), i);
  EXPECT_EQ(sent_[3], TestFrame(1000, 3));
  EXPECT_EQ(ep_->Stats().tx_frames, 4u);
  EXPECT_EQ(ep_->Stats().tx_dropped, 1u);
  EXPECT_EQ(ep_->callback_stats().tx_refused, 1u);
  EXPECT_EQ(packets_.stats().in_use, 0u);
}

TEST_F(CallbackEndpointTest, OversizedPacketIsNotSent) {
  buffer::PacketChain chain;
  chain.PushBack(MakePacket(packets_, chunks_, TestFrame(1600, 7), 54, 1));
  EXPECT_EQ(ep_->Transmit(chain, kT0), 0u);
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(ep_->callback_stats().tx_oversized, 1u);
}

// An embedder that loops frames straight back from inside send: the
// frame waits for the next Poll, and the receiver is not re-entered.
TEST_F(CallbackEndpointTest, InputFromInsideSendWaitsForNextPoll) {
  on_send_ = [this](std::span<const uint8_t> f) { ep_->Input(f); };
  int depth = 0, max_depth = 0;
  rx_.on_deliver = [&](Instant now) {
    ++depth;
    max_depth = std::max(max_depth, depth);
    if (rx_.frames.size() < 3) {
      buffer::PacketChain chain;
      chain.PushBack(MakePacket(packets_, chunks_,
                                TestFrame(200, 10 + rx_.frames.size()), 14));
      ep_->Transmit(chain, now);
      ep_->Poll(now);  // nested: does nothing
    }
    --depth;
  };
  ep_->Input(TestFrame(200, 10));
  ep_->Poll(kT0);
  EXPECT_EQ(rx_.frames.size(), 1u);
  EXPECT_EQ(ep_->queued_frames(), 1u);
  ep_->Poll(kT0);
  ep_->Poll(kT0);
  EXPECT_EQ(rx_.frames.size(), 3u);
  EXPECT_EQ(max_depth, 1);
  ep_->Poll(kT0);
  EXPECT_EQ(ep_->NextDeadline(), kNever);
}

// slirp4netns's and rootlesskit's --mtu 65520 (and netstack.h's top):
// an untagged frame of that MTU fits one chunk, so it is carried whole
// both ways; only a VLAN tag on a full-size frame would not fit.
TEST_F(CallbackEndpointTest, Mtu65520CarriesFullSizeFrames) {
  CallbackOptions o;
  o.mtu = 65520;
  Create(std::move(o));
  std::vector<uint8_t> frame(65520 + 14, 0x42);
  frame[12] = 0x08;
  frame[13] = 0x00;
  EXPECT_EQ(ep_->Input(frame), CallbackEndpoint::InputResult::kQueued);
  ep_->Poll(kT0);
  ASSERT_EQ(rx_.frames.size(), 1u);
  EXPECT_EQ(rx_.frames[0].bytes, frame);
  EXPECT_EQ(ep_->Capabilities().mtu, 65520u);
}

TEST(CallbackEndpointCreateTest, RefusesBadOptions) {
  buffer::ChunkPool chunks(4);
  CallbackOptions o;
  auto ep = CallbackEndpoint::Create(std::move(o), chunks);
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("no send function"),
            absl::string_view::npos)
      << ep.status();
  CallbackOptions big;
  big.send = [](std::span<const uint8_t>) { return true; };
  big.mtu = 65523;
  ep = CallbackEndpoint::Create(std::move(big), chunks);
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("mtu 65523"), absl::string_view::npos);
  CallbackOptions zero;
  zero.send = [](std::span<const uint8_t>) { return true; };
  zero.queue_limit = 0;
  EXPECT_FALSE(CallbackEndpoint::Create(std::move(zero), chunks).ok());
}

}  // namespace
}  // namespace netstack::link
