#include "link/frame_util.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "link/link_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"

namespace netstack::link {
namespace {

using ::netstack::link::testing::MakePacket;
using ::netstack::link::testing::TestFrame;

class FrameUtilTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(chunks_.stats().in_use, 0u);
    EXPECT_EQ(packets_.stats().in_use, 0u);
  }
  buffer::ChunkPool chunks_{8};
  buffer::PacketPool packets_{8};
};

TEST_F(FrameUtilTest, CopiesHeadersThenEveryView) {
  const std::vector<uint8_t> frame = TestFrame(1514, 7);
  buffer::PacketPtr p = MakePacket(packets_, chunks_, frame, 54, 3);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->payload().size(), 3u);
  std::vector<uint8_t> out(frame.size());
  EXPECT_EQ(CopyPacketBytes(*p, out), frame.size());
  EXPECT_EQ(out, frame);
  EXPECT_EQ(PacketBytes(*p), frame);
}

TEST_F(FrameUtilTest, ShortOutputTruncates) {
  const std::vector<uint8_t> frame = TestFrame(200, 1);
  buffer::PacketPtr p = MakePacket(packets_, chunks_, frame, 54, 2);
  ASSERT_NE(p, nullptr);
  // Cut inside the headers, and inside the second view.
  for (size_t cut : {10u, 54u, 60u, 150u}) {
    std::vector<uint8_t> out(cut, 0xee);
    EXPECT_EQ(CopyPacketBytes(*p, out), cut);
    EXPECT_EQ(out, std::vector<uint8_t>(frame.begin(), frame.begin() + cut));
  }
}

TEST_F(FrameUtilTest, FlattenMakesAnUnsharedCopy) {
  const std::vector<uint8_t> frame = TestFrame(1000, 3);
  buffer::ChunkRef source;
  buffer::PacketPtr p = MakePacket(packets_, chunks_, frame, 40, 2, &source);
  ASSERT_NE(p, nullptr);
  std::optional<buffer::PayloadView> flat = FlattenToChunk(*p, chunks_);
  ASSERT_TRUE(flat.has_value());
  EXPECT_NE(flat->chunk().get(), source.get());
  EXPECT_EQ(flat->chunk()->refs(), 1u);
  EXPECT_EQ(std::vector<uint8_t>(flat->bytes().begin(), flat->bytes().end()),
            frame);
}

TEST_F(FrameUtilTest, FlattenFailsCleanlyWhenThePoolIsEmpty) {
  buffer::ChunkPool one(1);
  const std::vector<uint8_t> frame = TestFrame(100, 3);
  buffer::PacketPtr p = MakePacket(packets_, one, frame, 14);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(FlattenToChunk(*p, one).has_value());
  EXPECT_EQ(one.stats().exhausted, 1u);
}

TEST_F(FrameUtilTest, FlattenRefusesFramesLargerThanAChunk) {
  std::vector<uint8_t> frame = TestFrame(buffer::kChunkSize + 54, 1);
  buffer::PacketPtr p = MakePacket(packets_, chunks_, frame, 54);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->size(), buffer::kChunkSize + 54);
  EXPECT_FALSE(FlattenToChunk(*p, chunks_).has_value());
}

TEST_F(FrameUtilTest, CopyToChunk) {
  const std::vector<uint8_t> bytes = TestFrame(64, 9);
  std::optional<buffer::PayloadView> v = CopyToChunk(bytes, chunks_);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(std::vector<uint8_t>(v->bytes().begin(), v->bytes().end()), bytes);
  std::vector<uint8_t> too_big(buffer::kChunkSize + 1);
  EXPECT_FALSE(CopyToChunk(too_big, chunks_).has_value());
}

TEST_F(FrameUtilTest, CloneCopiesHeadersAndSharesPayload) {
  const std::vector<uint8_t> frame = TestFrame(1514, 5);
  buffer::ChunkRef source;
  buffer::PacketPtr p = MakePacket(packets_, chunks_, frame, 54, 2, &source);
  ASSERT_NE(p, nullptr);
  const uint32_t refs_before = source->refs();
  buffer::PacketPtr copy = ClonePacket(*p, packets_);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(PacketBytes(*copy), frame);
  // Headers are separate memory; payload views share the same chunk.
  EXPECT_NE(copy->headers().data().data(), p->headers().data().data());
  EXPECT_EQ(copy->headers().headroom(), p->headers().headroom());
  ASSERT_EQ(copy->payload().size(), 2u);
  EXPECT_EQ(copy->payload()[0].chunk().get(), source.get());
  EXPECT_EQ(source->refs(), refs_before + 2);
  EXPECT_EQ(chunks_.stats().allocations, 1u);  // no payload copy
}

TEST_F(FrameUtilTest, CloneFailsCleanlyWhenThePoolIsEmpty) {
  buffer::PacketPool one(1);
  const std::vector<uint8_t> frame = TestFrame(100, 5);
  buffer::PacketPtr p = MakePacket(one, chunks_, frame, 14);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ClonePacket(*p, one), nullptr);
}

}  // namespace
}  // namespace netstack::link
