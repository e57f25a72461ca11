// Issue #12 item 4: a peer that sends thousands of one-byte segments
// beyond holes, each in its own 64 KiB receive slot, must not make the
// receiver pin memory out of proportion to its receive buffer. What a
// flow holds is charged as the memory it pins (docs/TCP.md "Receive
// memory"); over the limit the queue collapses small views into compact
// chunks, then prunes out-of-order data from the top, then drops.
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "netstack/buffer/chunk.h"
#include "netstack/tcp/hostile_ooo.h"

namespace netstack::tcp {
namespace {

using testing::HostileOooResult;
using testing::RunHostileOoo;

// (segments, each beyond a hole of its own?)
class HostileOooTest
    : public ::testing::TestWithParam<std::tuple<size_t, bool>> {};

INSTANTIATE_TEST_SUITE_P(
    Storms, HostileOooTest,
    ::testing::Combine(::testing::Values(size_t{2000}, size_t{8000}),
                       ::testing::Bool()),
    [](const auto& p) {
      return std::to_string(std::get<0>(p.param)) +
             (std::get<1>(p.param) ? "_holes" : "_adjacent");
    });

TEST_P(HostileOooTest, PinnedMemoryStaysWithinTwiceTheReceiveBuffer) {
  constexpr uint32_t kBuffer = 256 << 10;
  const auto [count, holes] = GetParam();
  const HostileOooResult r = RunHostileOoo(count, kBuffer, 64, holes);
  // The bound: the charge limit (2x the buffer) plus the slack the
  // charge does not see: one compact tail chunk, and one 64-frame batch
  // the stack is still answering (its frames are freed with it) is not
  // counted because peaks are taken after each batch. Two chunks spare.
  const size_t bound = 2 * size_t{kBuffer} + 2 * buffer::kChunkSize;
  EXPECT_LE(r.peak_pinned_bytes, bound)
      << r.segments << " segments pinned " << (r.peak_pinned_bytes >> 10)
      << " KiB at the peak (" << (r.final_pinned_bytes >> 10)
      << " KiB at the end), bound " << (bound >> 10) << " KiB";
  // What was kept is delivered intact once the holes fill.
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(r.bytes_read, (holes ? 2 : 1) * count + 1);
}

}  // namespace
}  // namespace netstack::tcp
