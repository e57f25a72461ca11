#include "netstack/eventloop/timer_wheel.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

// Counts every global operator new, so a test can prove that Schedule,
// Cancel and Advance do not allocate once the wheel exists.
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
// Not inlined: at -O2, GCC would otherwise see free() applied to what a
// (replaced) operator new returned and warn (-Wmismatched-new-delete).
__attribute__((noinline)) void operator delete(void* p) noexcept {
  std::free(p);
}
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace netstack::eventloop {
namespace {

// A fake clock: instants are t0 plus an offset; nothing here sleeps.
const Instant t0 = absl::FromUnixSeconds(1'000'000);
Instant Ms(double ms) { return t0 + absl::Microseconds(ms * 1000); }

struct Fired {
  int id;
  Instant now;
  bool operator==(const Fired&) const = default;
};

// N timers whose callbacks record (id, now).
class Timers {
 public:
  explicit Timers(size_t n) : timers_(new Timer[n]), n_(n) {
    for (size_t i = 0; i < n; ++i) {
      timers_[i].set_callback([this, i](Instant now) {
        fired_.push_back({static_cast<int>(i), now});
      });
    }
  }
  Timer& operator[](size_t i) { return timers_[i]; }
  std::vector<int> ids() const {
    std::vector<int> out;
    for (const Fired& f : fired_) out.push_back(f.id);
    return out;
  }
  std::vector<Fired>& fired() { return fired_; }

 private:
  std::unique_ptr<Timer[]> timers_;
  size_t n_;
  std::vector<Fired> fired_;
};

TEST(TimerWheelTest, FiresInDeadlineOrderAcrossAndWithinTicks) {
  TimerWheel wheel(t0);
  Timers t(6);
  // Ids 1..4 share tick 1 (1 ms ticks) but are scheduled out of order.
  const double deadlines[] = {5.0, 1.7, 1.2, 1.5, 1.1, 3.0};
  for (int i = 0; i < 6; ++i) wheel.Schedule(t[i], Ms(deadlines[i]));
  EXPECT_EQ(wheel.size(), 6u);
  EXPECT_EQ(wheel.Advance(Ms(10)), 6u);
  EXPECT_EQ(t.ids(), (std::vector<int>{4, 2, 3, 1, 5, 0}));
  EXPECT_TRUE(wheel.empty());
  EXPECT_EQ(wheel.NextDeadline(), kNever);
}

TEST(TimerWheelTest, SameDeadlineFiresInScheduleOrder) {
  TimerWheel wheel(t0);
  Timers t(5);
  for (int id : {3, 1, 4, 0, 2}) wheel.Schedule(t[id], Ms(2.5));
  // Re-arming counts as scheduling anew: 1 goes to the back.
  wheel.Schedule(t[1], Ms(2.5));
  wheel.Advance(Ms(3));
  EXPECT_EQ(t.ids(), (std::vector<int>{3, 4, 0, 2, 1}));
}

TEST(TimerWheelTest, FiresOnlyWhatIsDueWithinATick) {
  TimerWheel wheel(t0);
  Timers t(2);
  wheel.Schedule(t[0], Ms(5.3));
  wheel.Schedule(t[1], Ms(5.7));
  EXPECT_EQ(wheel.Advance(Ms(5.5)), 1u);
  EXPECT_EQ(t.ids(), (std::vector<int>{0}));
  EXPECT_EQ(wheel.NextDeadline(), Ms(5.7));
  EXPECT_EQ(wheel.Advance(Ms(5.6999)), 0u);
  EXPECT_EQ(wheel.Advance(Ms(5.7)), 1u);
  EXPECT_EQ(t.ids(), (std::vector<int>{0, 1}));
}

TEST(TimerWheelTest, NeverFiresEarlyAndPassesNow) {
  TimerWheel wheel(t0);
  Timers t(1);
  wheel.Schedule(t[0], Ms(10));
  for (int step = 1; step <= 200; ++step) {
    const Instant now = Ms(step * 0.1);
    wheel.Advance(now);
    if (now < Ms(10)) {
      ASSERT_TRUE(t.fired().empty()) << "fired early at step " << step;
    }
  }
  ASSERT_EQ(t.fired().size(), 1u);
  // It fired on the first Advance at or after its deadline; 0.1 ms steps
  // are not exact in binary, so compare with the step it should be.
  EXPECT_GE(t.fired()[0].now, Ms(10));
  EXPECT_LT(t.fired()[0].now, Ms(10.1));
}

TEST(TimerWheelTest, Cancel) {
  TimerWheel wheel(t0);
  Timers t(3);
  wheel.Cancel(t[0]);  // not scheduled: nothing happens
  EXPECT_FALSE(t[0].scheduled());
  wheel.Schedule(t[0], Ms(1));
  wheel.Schedule(t[1], Ms(2));
  wheel.Schedule(t[2], Ms(3));
  EXPECT_TRUE(t[1].scheduled());
  EXPECT_EQ(t[1].deadline(), Ms(2));
  wheel.Cancel(t[1]);
  wheel.Cancel(t[1]);  // twice is fine
  EXPECT_FALSE(t[1].scheduled());
  EXPECT_EQ(t[1].deadline(), kNever);
  EXPECT_EQ(wheel.size(), 2u);
  wheel.Advance(Ms(10));
  EXPECT_EQ(t.ids(), (std::vector<int>{0, 2}));
  EXPECT_FALSE(t[0].scheduled());
}

TEST(TimerWheelTest, RescheduleMovesAnArmedTimer) {
  TimerWheel wheel(t0);
  Timers t(2);
  wheel.Schedule(t[0], Ms(5));
  wheel.Schedule(t[1], Ms(3));
  wheel.Schedule(t[0], Ms(1));  // earlier
  EXPECT_EQ(wheel.size(), 2u);
  EXPECT_EQ(wheel.NextDeadline(), Ms(1));
  wheel.Advance(Ms(2));
  EXPECT_EQ(t.ids(), (std::vector<int>{0}));
  wheel.Schedule(t[1], Ms(700));  // later, beyond one revolution
  EXPECT_EQ(wheel.Advance(Ms(699)), 0u);
  EXPECT_EQ(wheel.NextDeadline(), Ms(700));
  EXPECT_EQ(wheel.Advance(Ms(700)), 1u);
  EXPECT_EQ(t.ids(), (std::vector<int>{0, 1}));
  EXPECT_TRUE(wheel.empty());
}

TEST(TimerWheelTest, PeriodicSelfRescheduleFromCallback) {
  TimerWheel wheel(t0);
  std::vector<Instant> fired_at;
  Instant next = Ms(10);
  Timer periodic;
  periodic.set_callback([&](Instant now) {
    fired_at.push_back(now);
    next += absl::Milliseconds(10);
    wheel.Schedule(periodic, next);
  });
  wheel.Schedule(periodic, next);
  // One Advance over ten periods: each re-arm is due already, so it fires
  // again within the same call, and the wheel ends with the next period.
  EXPECT_EQ(wheel.Advance(Ms(105)), 10u);
  EXPECT_EQ(fired_at.size(), 10u);
  EXPECT_EQ(wheel.NextDeadline(), Ms(110));
  EXPECT_TRUE(periodic.scheduled());
  EXPECT_EQ(wheel.Advance(Ms(110)), 1u);
  EXPECT_EQ(wheel.NextDeadline(), Ms(120));
}

TEST(TimerWheelTest, TimerScheduledInCallbackFiresInDeadlineOrder) {
  TimerWheel wheel(t0);
  Timers t(3);
  // 0 (at 1 ms) schedules 2 for 2 ms, which is due and before 1 (3 ms).
  t[0].set_callback([&](Instant now) {
    t.fired().push_back({0, now});
    wheel.Schedule(t[2], Ms(2));
    EXPECT_EQ(wheel.NextDeadline(), Ms(2));
  });
  wheel.Schedule(t[0], Ms(1));
  wheel.Schedule(t[1], Ms(3));
  EXPECT_EQ(wheel.Advance(Ms(5)), 3u);
  EXPECT_EQ(t.ids(), (std::vector<int>{0, 2, 1}));
  // Scheduled into the future from a callback: waits.
  t[0].set_callback([&](Instant) { wheel.Schedule(t[1], Ms(50)); });
  wheel.Schedule(t[0], Ms(6));
  EXPECT_EQ(wheel.Advance(Ms(10)), 1u);
  EXPECT_EQ(wheel.NextDeadline(), Ms(50));
  EXPECT_EQ(wheel.Advance(Ms(50)), 1u);
}

TEST(TimerWheelTest, CancelOtherInCallback) {
  TimerWheel wheel(t0);
  Timers t(4);
  // All four are due in one Advance: 0 cancels 1 (same tick, already in
  // the due list) and 3 (a later tick), and pushes 2 back.
  t[0].set_callback([&](Instant now) {
    t.fired().push_back({0, now});
    wheel.Cancel(t[1]);
    wheel.Cancel(t[3]);
    wheel.Schedule(t[2], Ms(30));
  });
  wheel.Schedule(t[0], Ms(1.1));
  wheel.Schedule(t[1], Ms(1.2));
  wheel.Schedule(t[2], Ms(1.3));
  wheel.Schedule(t[3], Ms(4));
  EXPECT_EQ(wheel.Advance(Ms(5)), 1u);
  EXPECT_EQ(t.ids(), (std::vector<int>{0}));
  EXPECT_EQ(wheel.size(), 1u);
  EXPECT_EQ(wheel.NextDeadline(), Ms(30));
  EXPECT_EQ(wheel.Advance(Ms(30)), 1u);
  EXPECT_EQ(t.ids(), (std::vector<int>{0, 2}));
}

TEST(TimerWheelTest, CallbackMayDestroyTimers) {
  TimerWheel wheel(t0);
  auto self = std::make_unique<Timer>();
  auto other = std::make_unique<Timer>();
  int other_fired = 0;
  other->set_callback([&](Instant) { ++other_fired; });
  self->set_callback([&](Instant) {
    other.reset();  // due too: its destructor takes it off the due list
    self.reset();   // the running timer itself
  });
  wheel.Schedule(*self, Ms(1));
  wheel.Schedule(*other, Ms(1));
  EXPECT_EQ(wheel.Advance(Ms(2)), 1u);
  EXPECT_EQ(self, nullptr);
  EXPECT_EQ(other_fired, 0);
  EXPECT_TRUE(wheel.empty());
}

TEST(TimerWheelTest, FarDeadlinesWaitTheirRound) {
  // A tiny wheel (8 slots of 1 ms) so that most deadlines are several
  // revolutions away and share slots with near ones.
  TimerWheel wheel(t0, {.tick = absl::Milliseconds(1), .slots = 8});
  Timers t(6);
  const double deadlines[] = {3, 11, 19, 803.2, 803.1, 5000.5};
  for (int i = 0; i < 6; ++i) wheel.Schedule(t[i], Ms(deadlines[i]));
  EXPECT_EQ(wheel.NextDeadline(), Ms(3));
  std::vector<Fired> expected;
  for (int step = 0; step <= 5010; ++step) {
    const Instant now = Ms(step);
    wheel.Advance(now);
    // What must have fired by now, in order.
    for (int i : {0, 1, 2, 4, 3, 5}) {
      if (Ms(deadlines[i]) <= now &&
          std::none_of(expected.begin(), expected.end(),
                       [i](const Fired& f) { return f.id == i; })) {
        expected.push_back({i, now});
      }
    }
    ASSERT_EQ(t.fired(), expected) << "at " << step << " ms";
    if (!wheel.empty()) {
      // NextDeadline stays exact however far the next timer is.
      Instant want = kNever;
      for (int i = 0; i < 6; ++i) {
        if (t[i].scheduled()) want = std::min(want, Ms(deadlines[i]));
      }
      ASSERT_EQ(wheel.NextDeadline(), want) << "at " << step << " ms";
    }
  }
  EXPECT_EQ(t.ids(), (std::vector<int>{0, 1, 2, 4, 3, 5}));
}

TEST(TimerWheelTest, OneLargeJumpFiresEverythingInOrder) {
  TimerWheel wheel(t0);
  constexpr int kCount = 2000;
  Timers t(kCount);
  std::mt19937_64 rng(7);
  std::vector<std::pair<Instant, int>> want;
  for (int i = 0; i < kCount; ++i) {
    // Up to one hour away: thousands of revolutions of the 512 ms wheel.
    const Instant d = t0 + absl::Microseconds(rng() % 3'600'000'000ull);
    wheel.Schedule(t[i], d);
    want.push_back({d, i});
  }
  std::stable_sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
    return a.first < b.first;
  });
  EXPECT_EQ(wheel.NextDeadline(), want.front().first);
  EXPECT_EQ(wheel.Advance(t0 + absl::Hours(1)), static_cast<size_t>(kCount));
  std::vector<int> want_ids;
  for (const auto& [d, id] : want) want_ids.push_back(id);
  EXPECT_EQ(t.ids(), want_ids);
}

TEST(TimerWheelTest, NextDeadlineIsExact) {
  TimerWheel wheel(t0);
  Timers t(4);
  EXPECT_EQ(wheel.NextDeadline(), kNever);
  wheel.Schedule(t[0], Ms(7.25));
  EXPECT_EQ(wheel.NextDeadline(), Ms(7.25));
  wheel.Schedule(t[1], Ms(3.5));
  EXPECT_EQ(wheel.NextDeadline(), Ms(3.5));
  wheel.Schedule(t[2], Ms(3.5));  // same deadline, same slot
  wheel.Cancel(t[1]);
  EXPECT_EQ(wheel.NextDeadline(), Ms(3.5));
  wheel.Cancel(t[2]);
  EXPECT_EQ(wheel.NextDeadline(), Ms(7.25));
  wheel.Cancel(t[0]);
  EXPECT_EQ(wheel.NextDeadline(), kNever);
  // Only timers more than a revolution away, sharing slots.
  wheel.Schedule(t[0], Ms(10'000.75));
  wheel.Schedule(t[1], Ms(2'000.5));
  wheel.Schedule(t[2], Ms(2'512.25));  // same slot as t[1], next round
  EXPECT_EQ(wheel.NextDeadline(), Ms(2'000.5));
  wheel.Cancel(t[1]);
  EXPECT_EQ(wheel.NextDeadline(), Ms(2'512.25));
  // After time passes, a deadline in the past is reported as it is.
  wheel.Advance(Ms(20));
  wheel.Schedule(t[3], Ms(4));
  EXPECT_EQ(wheel.NextDeadline(), Ms(4));
  EXPECT_EQ(wheel.Advance(Ms(20)), 1u);
  EXPECT_EQ(t.ids(), (std::vector<int>{3}));
  EXPECT_EQ(wheel.NextDeadline(), Ms(2'512.25));
}

TEST(TimerWheelTest, PastDeadlinesFireAtTheNextAdvanceInOrder) {
  TimerWheel wheel(t0);
  Timers t(3);
  wheel.Advance(Ms(100));
  wheel.Schedule(t[0], Ms(50));
  wheel.Schedule(t[1], Ms(100));
  wheel.Schedule(t[2], Ms(20));
  wheel.Schedule(t[2], t0 - absl::Hours(1));  // before the wheel's origin
  // Time never goes backwards: an earlier `now` acts as the last one.
  EXPECT_EQ(wheel.Advance(Ms(10)), 3u);
  EXPECT_EQ(t.ids(), (std::vector<int>{2, 0, 1}));
  EXPECT_EQ(t.fired()[0].now, Ms(100));
}

TEST(TimerWheelTest, ScheduleAtNeverCancels) {
  TimerWheel wheel(t0);
  Timers t(1);
  wheel.Schedule(t[0], Ms(1));
  wheel.Schedule(t[0], kNever);
  EXPECT_FALSE(t[0].scheduled());
  EXPECT_TRUE(wheel.empty());
  EXPECT_EQ(wheel.Advance(absl::InfiniteFuture()), 0u);
}

TEST(TimerWheelTest, DestroyingAScheduledTimerUnlinksIt) {
  TimerWheel wheel(t0);
  int fired = 0;
  {
    Timer a([&](Instant) { ++fired; });
    Timer b([&](Instant) { ++fired; });
    wheel.Schedule(a, Ms(1));
    wheel.Schedule(b, Ms(1000));
    EXPECT_EQ(wheel.size(), 2u);
  }
  EXPECT_TRUE(wheel.empty());
  EXPECT_EQ(wheel.NextDeadline(), kNever);
  EXPECT_EQ(wheel.Advance(Ms(2000)), 0u);
  EXPECT_EQ(fired, 0);
}

TEST(TimerWheelTest, TimerMayOutliveItsWheel) {
  Timer timer([](Instant) {});
  {
    TimerWheel wheel(t0);
    wheel.Schedule(timer, Ms(1));
    EXPECT_TRUE(timer.scheduled());
  }
  EXPECT_FALSE(timer.scheduled());
}

TEST(TimerWheelTest, ScheduleOnAnotherWheelMovesTheTimer) {
  TimerWheel a(t0);
  TimerWheel b(t0);
  int fired = 0;
  Timer timer([&](Instant) { ++fired; });
  a.Schedule(timer, Ms(1));
  b.Schedule(timer, Ms(2));
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(a.Advance(Ms(5)), 0u);
  a.Cancel(timer);  // belongs to b: forwarded there
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.Advance(Ms(5)), 0u);
  EXPECT_EQ(fired, 0);
}

TEST(TimerWheelTest, CoarseTickStillFiresExactly) {
  TimerWheel wheel(t0, {.tick = absl::Milliseconds(100), .slots = 64});
  Timers t(2);
  wheel.Schedule(t[0], Ms(150));
  wheel.Schedule(t[1], Ms(120));
  EXPECT_EQ(wheel.Advance(Ms(119)), 0u);
  EXPECT_EQ(wheel.Advance(Ms(120)), 1u);
  EXPECT_EQ(wheel.NextDeadline(), Ms(150));
  EXPECT_EQ(wheel.Advance(Ms(150)), 1u);
  EXPECT_EQ(t.ids(), (std::vector<int>{1, 0}));
}

// A reference model: a multimap ordered by (deadline, schedule sequence).
class Model {
 public:
  using Key = std::pair<Instant, uint64_t>;
  using Queue = std::multimap<Key, int>;
  explicit Model(size_t n) : where_(n), armed_(n, false) {}
  void Schedule(int id, Instant d) {
    Cancel(id);
    where_[id] = queue_.emplace(Key{d, seq_++}, id);
    armed_[id] = true;
  }
  void Cancel(int id) {
    if (armed_[id]) queue_.erase(where_[id]);
    armed_[id] = false;
  }
  Instant Next() const {
    return queue_.empty() ? kNever : queue_.begin()->first.first;
  }
  // Pops the earliest timer if it is due: (id, deadline).
  bool PopDue(Instant now, int& id, Instant& deadline) {
    if (queue_.empty() || queue_.begin()->first.first > now) return false;
    id = queue_.begin()->second;
    deadline = queue_.begin()->first.first;
    queue_.erase(queue_.begin());
    armed_[id] = false;
    return true;
  }
  size_t size() const { return queue_.size(); }

 private:
  Queue queue_;
  std::vector<Queue::iterator> where_;
  std::vector<bool> armed_;
  uint64_t seq_ = 0;
};

// 100k timers, random schedule / reschedule / cancel / advance (with
// callbacks that re-arm themselves, often into the same Advance), all
// checked against the model: same firing order, same NextDeadline.
TEST(TimerWheelTest, StressAgainstReferenceModel) {
  constexpr int kTimers = 100'000;
  TimerWheel wheel(t0);
  Model model(kTimers);
  std::unique_ptr<Timer[]> timers(new Timer[kTimers]);
  std::vector<Instant> deadline(kTimers, kNever);  // wheel side, per timer
  std::vector<int> fired;
  std::mt19937_64 rng(20240601);
  Instant now = t0;

  // A few timers (id % 2000 == 0) re-arm themselves 1..3 ms after their
  // old deadline (so often still due in the same Advance), up to a horizon
  // that keeps the number of firings reasonable.
  const Instant rearm_horizon = t0 + absl::Seconds(20);
  auto rearm = [&](int id, Instant old) -> Instant {
    if (id % 2000 != 0 || old >= rearm_horizon) return kNever;
    return old + absl::Milliseconds(1 + id % 3);
  };
  for (int i = 0; i < kTimers; ++i) {
    timers[i].set_callback([&, i](Instant) {
      fired.push_back(i);
      if (Instant next = rearm(i, deadline[i]); next != kNever) {
        deadline[i] = next;
        wheel.Schedule(timers[i], next);
      }
    });
  }
  auto random_deadline = [&]() {
    const uint64_t r = rng() % 100;
    if (r < 5) return now - absl::Microseconds(rng() % 5000);  // past
    if (r < 70) return now + absl::Microseconds(rng() % 600'000);
    if (r < 90) return now + absl::Microseconds(rng() % 5'000'000);
    return now + absl::Microseconds(rng() % 120'000'000);
  };
  auto schedule = [&](int id, Instant d) {
    deadline[id] = d;
    wheel.Schedule(timers[id], d);
    model.Schedule(id, d);
  };

  for (int i = 0; i < kTimers; ++i) schedule(i, random_deadline());
  ASSERT_EQ(wheel.size(), model.size());
  ASSERT_EQ(wheel.NextDeadline(), model.Next());

  uint64_t total_fired = 0;
  uint64_t advances = 0;
  for (int op = 0; op < 300'000; ++op) {
    const uint64_t r = rng() % 100;
    const int id = static_cast<int>(rng() % kTimers);
    if (r < 45) {
      schedule(id, random_deadline());
    } else if (r < 75) {
      wheel.Cancel(timers[id]);
      model.Cancel(id);
    } else {
      // Mostly sub-tick and few-tick steps, sometimes a jump of seconds.
      now += rng() % 50 == 0 ? absl::Microseconds(rng() % 3'000'000)
                             : absl::Microseconds(rng() % 5'000);
      fired.clear();
      const size_t n = wheel.Advance(now);
      std::vector<int> want;
      int f;
      Instant d;
      while (model.PopDue(now, f, d)) {
        want.push_back(f);
        if (Instant next = rearm(f, d); next != kNever) model.Schedule(f, next);
      }
      ASSERT_EQ(fired, want) << "op " << op;
      ASSERT_EQ(n, want.size());
      total_fired += n;
      ++advances;
    }
    ASSERT_EQ(wheel.size(), model.size()) << "op " << op;
    ASSERT_EQ(wheel.NextDeadline(), model.Next()) << "op " << op;
  }
  // The run exercised what it claims to.
  EXPECT_GT(advances, 50'000u);
  EXPECT_GT(total_fired, 100'000u);
  // Drain everything.
  fired.clear();
  wheel.Advance(absl::InfiniteFuture());
  EXPECT_TRUE(wheel.empty());
}

TEST(TimerWheelTest, ScheduleCancelAdvanceDoNotAllocate) {
  constexpr int kTimers = 1000;
  TimerWheel wheel(t0);
  std::unique_ptr<Timer[]> timers(new Timer[kTimers]);
  uint64_t fired = 0;
  for (int i = 0; i < kTimers; ++i) {
    // Captures two pointers: stored inline in the AnyInvocable.
    timers[i].set_callback([&fired, &wheel](Instant now) {
      ++fired;
      (void)wheel.NextDeadline();
    });
  }
  std::mt19937_64 rng(3);
  Instant now = t0;
  auto round = [&]() {
    for (int i = 0; i < kTimers; ++i) {
      wheel.Schedule(timers[i], now + absl::Microseconds(rng() % 2'000'000));
    }
    for (int i = 0; i < kTimers; i += 3) wheel.Cancel(timers[i]);
    for (int i = 1; i < kTimers; i += 7) {
      wheel.Schedule(timers[i], now + absl::Microseconds(rng() % 100'000));
    }
    for (int step = 0; step < 100; ++step) {
      now += absl::Milliseconds(7);
      wheel.Advance(now);
      (void)wheel.NextDeadline();
    }
    now += absl::Seconds(3);
    wheel.Advance(now);
  };
  round();  // warm-up (nothing to warm, but keep the pattern honest)
  const uint64_t fired_before = fired;
  const uint64_t before = g_heap_allocations.load();
  round();
  round();
  const uint64_t after = g_heap_allocations.load();
  EXPECT_EQ(after - before, 0u);
  // The counter does see heap allocations (so the check above can fail).
  auto probe = std::make_unique<int>(1);
  EXPECT_GT(g_heap_allocations.load(), after);
  EXPECT_GT(fired - fired_before, 1000u);  // it did fire timers
  EXPECT_TRUE(wheel.empty());
}

}  // namespace
}  // namespace netstack::eventloop
