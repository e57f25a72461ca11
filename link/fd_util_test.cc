#include "link/fd_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"

namespace netstack::link {
namespace {

// The entry follows its directory, not the path: after the directory is
// renamed (as a moved root would hide it), Stat and Unlink still reach
// the file.
TEST(DirEntryRef, ReachesTheFileAfterItsPathChanged) {
  char dir[] = "/tmp/nst-direntry-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/sock";
  close(open(file.c_str(), O_CREAT | O_WRONLY, 0600));
  absl::StatusOr<DirEntryRef> e = DirEntryRef::Of(file);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string moved = std::string(dir) + ".moved";
  ASSERT_EQ(rename(dir, moved.c_str()), 0);
  struct stat st;
  EXPECT_EQ(e->Stat(&st), 0);
  EXPECT_EQ(e->Unlink(), 0);
  EXPECT_NE(e->Stat(&st), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(access((moved + "/sock").c_str(), F_OK), -1);
  rmdir(moved.c_str());
  EXPECT_FALSE(DirEntryRef::Of("/tmp/").ok());
  EXPECT_FALSE(DirEntryRef::Of("/nonexistent-dir/x").ok());
  EXPECT_FALSE(DirEntryRef{}.valid());
}

TEST(UniqueFdTest, ClosesOnDestructionAndReset) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    UniqueFd a(fds[0]);
    UniqueFd b(std::move(a));
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), fds[0]);
  }
  EXPECT_EQ(::fcntl(fds[0], F_GETFD), -1);  // closed
  UniqueFd c(fds[1]);
  EXPECT_EQ(c.release(), fds[1]);
  EXPECT_NE(::fcntl(fds[1], F_GETFD), -1);  // released, still open
  ::close(fds[1]);
}

TEST(ErrnoStatusTest, MapsCodeAndKeepsMessage) {
  absl::Status s = ErrnoStatus(ENOENT, "open /x");
  EXPECT_TRUE(absl::IsNotFound(s));
  // Once: "open /x: No such file or directory", not the reason twice.
  EXPECT_EQ(s.message(),
            absl::StrCat("open /x: ", std::strerror(ENOENT)));
}

TEST(InterfaceNameTest, KernelRules) {
  EXPECT_TRUE(ValidateInterfaceName("tap0").ok());
  EXPECT_TRUE(ValidateInterfaceName("abcdefghijklmno").ok());  // 15 bytes
  EXPECT_FALSE(ValidateInterfaceName("").ok());
  EXPECT_FALSE(ValidateInterfaceName("abcdefghijklmnop").ok());  // 16
  EXPECT_FALSE(ValidateInterfaceName("a/b").ok());
  EXPECT_FALSE(ValidateInterfaceName("a b").ok());
  EXPECT_FALSE(ValidateInterfaceName("..").ok());
}

TEST(DeriveLocalMacTest, DeterministicLocalUnicast) {
  const wire::MacAddress a = DeriveLocalMac("tap:ns/tap0");
  EXPECT_EQ(a, DeriveLocalMac("tap:ns/tap0"));
  EXPECT_NE(a, DeriveLocalMac("tap:ns/tap1"));
  for (const char* seed : {"", "a", "tap:ns/tap0", "unix:/tmp/x"}) {
    const wire::MacAddress m = DeriveLocalMac(seed);
    EXPECT_EQ(m.bytes[0] & 0x02, 0x02) << seed;  // locally administered
    EXPECT_FALSE(m.IsMulticast()) << seed;
  }
}

TEST(VnetHeaderTest, FlagsAndGso) {
  const uint8_t none[kVnetHdrLen] = {};
  VnetRxInfo i = ParseVnetHeader(none);
  EXPECT_FALSE(i.checksum_partial);
  EXPECT_FALSE(i.checksum_verified);
  EXPECT_FALSE(i.gso);
  const uint8_t partial_tso[kVnetHdrLen] = {1, 1};  // NEEDS_CSUM, TCPV4
  i = ParseVnetHeader(partial_tso);
  EXPECT_TRUE(i.checksum_partial);
  EXPECT_TRUE(i.gso);
  const uint8_t valid_ecn_only[kVnetHdrLen] = {2, 0x80};
  i = ParseVnetHeader(valid_ecn_only);
  EXPECT_TRUE(i.checksum_verified);
  EXPECT_FALSE(i.gso);
}

// A packet of `size` bytes with EtherType `type`, the first `header_len`
// bytes in the headers and the rest in views of `chunk`.
buffer::PacketPtr Packet(buffer::PacketPool& packets, buffer::ChunkPool& chunks,
                         size_t size, uint16_t type, size_t header_len) {
  std::vector<uint8_t> bytes(size, 0);
  bytes[12] = static_cast<uint8_t>(type >> 8);
  bytes[13] = static_cast<uint8_t>(type);
  buffer::PacketPtr p = packets.Allocate();
  auto h = p->headers().Prepend(header_len);
  std::memcpy(h->data(), bytes.data(), header_len);
  buffer::ChunkRef c = chunks.Allocate();
  std::memcpy(c->mutable_data().data(), bytes.data() + header_len,
              size - header_len);
  // Two views, split right inside the EtherType for header_len 0.
  const uint32_t rest = static_cast<uint32_t>(size - header_len);
  EXPECT_TRUE(p->AppendPayload(buffer::PayloadView(c, 0, 13)));
  EXPECT_TRUE(p->AppendPayload(buffer::PayloadView(c, 13, rest - 13)));
  return p;
}

TEST(FrameFitsMtuTest, TaggedFramesGetFourMoreBytes) {
  buffer::PacketPool packets(8);
  buffer::ChunkPool chunks(8);
  for (size_t header_len : {0u, 14u}) {
    SCOPED_TRACE(header_len);
    EXPECT_TRUE(
        FrameFitsMtu(*Packet(packets, chunks, 1514, 0x0800, header_len), 1500));
    EXPECT_FALSE(
        FrameFitsMtu(*Packet(packets, chunks, 1515, 0x0800, header_len), 1500));
    EXPECT_TRUE(
        FrameFitsMtu(*Packet(packets, chunks, 1518, 0x8100, header_len), 1500));
    EXPECT_TRUE(
        FrameFitsMtu(*Packet(packets, chunks, 1518, 0x88a8, header_len), 1500));
    EXPECT_FALSE(
        FrameFitsMtu(*Packet(packets, chunks, 1519, 0x8100, header_len), 1500));
  }
  buffer::PacketPtr runt = packets.Allocate();
  ASSERT_TRUE(runt->headers().Prepend(13).has_value());
  EXPECT_FALSE(FrameFitsMtu(*runt, 1500));
}

TEST(RxSlotsTest, SlotSizeRoundsToCacheLines) {
  buffer::ChunkPool pool(4);
  RxSlots slots(pool, 2 + 1500 + 18 + 1, 64);
  EXPECT_EQ(slots.slot_size(), 1536u);
  EXPECT_EQ(slots.slots_per_chunk(), 42u);
  RxSlots whole(pool, 70000, 64);
  EXPECT_EQ(whole.slot_size(), buffer::kChunkSize);
  EXPECT_EQ(whole.slots_per_chunk(), 1u);
}

TEST(RxSlotsTest, FramesShareChunkAndChunkReturnsWhenViewsDie) {
  buffer::ChunkPool pool(4);
  {
    RxSlots slots(pool, 1536, 64);
    ASSERT_EQ(slots.Prepare(3), 3u);
    std::vector<buffer::PayloadView> views;
    for (size_t i = 0; i < 3; ++i) {
      std::memset(slots.Slot(i), 'a' + static_cast<int>(i), 100);
      views.push_back(slots.View(i, 0, 100));
    }
    slots.Consume(3);
    EXPECT_EQ(pool.stats().in_use, 1u);
    EXPECT_EQ(views[0].chunk().get(), views[2].chunk().get());
    EXPECT_EQ(views[1].offset(), 1536u);
    EXPECT_EQ(views[2].bytes()[99], 'c');
    EXPECT_EQ(views[0].chunk()->refs(), 4u);  // three views + the carver
    // The chunk says what each view pins (TCP charges it).
    EXPECT_EQ(views[0].chunk()->slot_size(), 1536u);

    // While views are alive, the next batch continues after them.
    ASSERT_EQ(slots.Prepare(1), 1u);
    buffer::PayloadView next = slots.View(0, 0, 10);
    EXPECT_EQ(next.offset(), 3u * 1536);
    slots.Consume(1);
    views.clear();
    next = buffer::PayloadView();
    // All views gone: the carver starts over at slot 0 of the same chunk.
    ASSERT_EQ(slots.Prepare(1), 1u);
    EXPECT_EQ(slots.View(0, 0, 10).offset(), 0u);
    EXPECT_EQ(pool.stats().allocations, 1u);
  }
  EXPECT_EQ(pool.stats().in_use, 0u);
}

TEST(RxSlotsTest, BatchSpansChunksAndOldChunksAreReleased) {
  buffer::ChunkPool pool(8);
  RxSlots slots(pool, 16384, 10);  // 4 per chunk
  ASSERT_EQ(slots.Prepare(10), 10u);
  EXPECT_EQ(pool.stats().in_use, 3u);
  std::vector<buffer::PayloadView> views;
  for (size_t i = 0; i < 10; ++i) views.push_back(slots.View(i, 0, 1));
  EXPECT_EQ(views[3].chunk().get(), views[0].chunk().get());
  EXPECT_NE(views[4].chunk().get(), views[3].chunk().get());
  EXPECT_EQ(views[9].offset(), 16384u);
  slots.Consume(10);
  views.clear();
  // Two chunks were used up and went back to the pool; the third is the
  // carver's, and since nobody else holds it, it starts over.
  EXPECT_EQ(pool.stats().in_use, 1u);
  ASSERT_EQ(slots.Prepare(1), 1u);
  EXPECT_EQ(slots.View(0, 0, 1).offset(), 0u);
}

TEST(RxSlotsTest, ExhaustedPoolGivesFewerSlots) {
  buffer::ChunkPool pool(1);
  RxSlots slots(pool, 32768, 8);  // 2 per chunk
  EXPECT_EQ(slots.Prepare(8), 2u);
  buffer::PayloadView held = slots.View(0, 0, 1);
  slots.Consume(2);
  // The only chunk is used up and still referenced: nothing to prepare.
  EXPECT_EQ(slots.Prepare(8), 0u);
  EXPECT_GT(pool.stats().exhausted, 0u);
  held = buffer::PayloadView();
  EXPECT_EQ(slots.Prepare(8), 2u);
}

}  // namespace
}  // namespace netstack::link
