#include "netstack/transport/notifier.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace netstack::transport {
namespace {

TEST(NotifierTest, CoalescesEventsAndRunsOncePerDispatch) {
  Notifier notifier;
  Notifiable a;
  std::vector<uint32_t> seen;
  a.set_callback([&](uint32_t ev) { seen.push_back(ev); });
  notifier.Mark(a, event::kReadable);
  notifier.Mark(a, event::kWritable);
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(notifier.Dispatch(), 1u);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], event::kReadable | event::kWritable);
  EXPECT_EQ(notifier.Dispatch(), 0u);
  EXPECT_TRUE(notifier.empty());
}

TEST(NotifierTest, DestroyedEndpointIsSkippedAndCallbackMayDestroyOthers) {
  Notifier notifier;
  auto a = std::make_unique<Notifiable>();
  auto b = std::make_unique<Notifiable>();
  auto c = std::make_unique<Notifiable>();
  int b_ran = 0;
  int c_ran = 0;
  a->set_callback([&](uint32_t) { b.reset(); });
  b->set_callback([&](uint32_t) { ++b_ran; });
  c->set_callback([&](uint32_t) {
    ++c_ran;
    c.reset();  // destroys itself from its own callback
  });
  notifier.Mark(*a, event::kReadable);
  notifier.Mark(*b, event::kReadable);
  notifier.Mark(*c, event::kReadable);
  EXPECT_EQ(notifier.Dispatch(), 2u);
  EXPECT_EQ(b_ran, 0);
  EXPECT_EQ(c_ran, 1);
  EXPECT_TRUE(notifier.empty());
}

TEST(NotifierTest, MarksFromCallbacksRunInTheSameDispatch) {
  Notifier notifier;
  Notifiable a;
  Notifiable b;
  int b_ran = 0;
  a.set_callback([&](uint32_t) { notifier.Mark(b, event::kWritable); });
  b.set_callback([&](uint32_t ev) {
    EXPECT_EQ(ev, event::kWritable);
    ++b_ran;
  });
  notifier.Mark(a, event::kReadable);
  EXPECT_EQ(notifier.Dispatch(), 2u);
  EXPECT_EQ(b_ran, 1);
}

}  // namespace
}  // namespace netstack::transport
