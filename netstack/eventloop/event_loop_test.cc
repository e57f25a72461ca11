#include "netstack/eventloop/event_loop.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace netstack::eventloop {
namespace {

// Real fds and the real clock. Waits are short, and bounds on elapsed
// time are generous: the machine is noisy, so a test only asserts what
// must hold (a timer never fires before its deadline; a loop with a due
// deadline does not sleep for its whole max_wait).
constexpr Duration kLongWait = absl::Seconds(10);
constexpr Duration kGenerous = absl::Seconds(5);

class Pipe {
 public:
  Pipe() {
    int fds[2];
    ok_ = pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0;
    r_ = fds[0];
    w_ = fds[1];
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  bool ok() const { return ok_; }
  int r() const { return r_; }
  int w() const { return w_; }
  void CloseRead() {
    if (r_ >= 0) close(r_);
    r_ = -1;
  }
  void CloseWrite() {
    if (w_ >= 0) close(w_);
    w_ = -1;
  }
  bool Write(const std::string& s) {
    return write(w_, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  }
  std::string ReadAll() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(r_, buf, sizeof(buf))) > 0) out.append(buf, n);
    return out;
  }

 private:
  bool ok_ = false;
  int r_ = -1;
  int w_ = -1;
};

// Counts calls and runs optional actions.
class TestHandler : public Handler {
 public:
  void OnReadable(Instant now) override {
    ++readable;
    last_now = now;
    if (on_readable) on_readable(now);
  }
  void OnWritable(Instant now) override {
    ++writable;
    last_now = now;
    if (on_writable) on_writable(now);
  }
  void OnError(Instant now, uint32_t events) override {
    ++errors;
    error_events = events;
    if (on_error) on_error(now);
  }

  int readable = 0;
  int writable = 0;
  int errors = 0;
  uint32_t error_events = 0;
  Instant last_now;
  std::function<void(Instant)> on_readable;
  std::function<void(Instant)> on_writable;
  std::function<void(Instant)> on_error;
};

std::unique_ptr<EventLoop> MakeLoop() {
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  EXPECT_TRUE(loop.ok()) << loop.status();
  return loop.ok() ? std::move(*loop) : nullptr;
}

TEST(EventLoopTest, NowIsMonotonic) {
  Instant prev = EventLoop::MonotonicNow();
  for (int i = 0; i < 1000; ++i) {
    const Instant now = EventLoop::MonotonicNow();
    ASSERT_GE(now, prev);
    prev = now;
  }
  // The clock's reading on top of the Unix epoch: a positive offset.
  EXPECT_GT(prev, absl::UnixEpoch());
}

TEST(EventLoopTest, PipeReadableDispatch) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe p;
  ASSERT_TRUE(p.ok());
  TestHandler h;
  std::string got;
  h.on_readable = [&](Instant) { got += p.ReadAll(); };
  ASSERT_TRUE(loop->Add(p.r(), EventLoop::kReadable, &h).ok());
  EXPECT_TRUE(loop->IsRegistered(p.r()));

  // Nothing to read: the handler is not called.
  ASSERT_TRUE(loop->RunOnce(absl::Milliseconds(10)).ok());
  EXPECT_EQ(h.readable, 0);

  ASSERT_TRUE(p.Write("hello"));
  const Instant before = loop->Now();
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(h.readable, 1);
  EXPECT_EQ(got, "hello");
  EXPECT_GE(h.last_now, before);
  EXPECT_LT(loop->Now() - before, kGenerous);  // woke for the data
  EXPECT_EQ(loop->stats().events, 1u);

  // Drained: level-triggered readiness is gone.
  ASSERT_TRUE(loop->RunOnce(absl::Milliseconds(10)).ok());
  EXPECT_EQ(h.readable, 1);
  ASSERT_TRUE(loop->Remove(p.r()).ok());
  EXPECT_FALSE(loop->IsRegistered(p.r()));
  ASSERT_TRUE(p.Write("x"));
  ASSERT_TRUE(loop->RunOnce(absl::Milliseconds(10)).ok());
  EXPECT_EQ(h.readable, 1);
}

TEST(EventLoopTest, WritableInterestToggling) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe p;
  ASSERT_TRUE(p.ok());
  TestHandler h;
  ASSERT_TRUE(loop->Add(p.w(), EventLoop::kWritable, &h).ok());
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(h.writable, 1);

  // Interest off: an empty pipe stays writable, but nobody is told.
  ASSERT_TRUE(loop->Modify(p.w(), 0).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(loop->RunOnce(absl::Milliseconds(5)).ok());
  }
  EXPECT_EQ(h.writable, 1);

  // On again.
  ASSERT_TRUE(loop->Modify(p.w(), EventLoop::kWritable).ok());
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(h.writable, 2);

  // A full pipe is not writable, until the reader drains it.
  const std::string block(4096, 'x');
  while (write(p.w(), block.data(), block.size()) > 0) {
  }
  ASSERT_EQ(errno, EAGAIN);
  ASSERT_TRUE(loop->RunOnce(absl::Milliseconds(20)).ok());
  EXPECT_EQ(h.writable, 2);
  EXPECT_FALSE(p.ReadAll().empty());
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(h.writable, 3);
}

TEST(EventLoopTest, InterestChangedByOnReadableIsHonouredInTheSameEvent) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  TestHandler h;
  // Readable and writable at once; reading turns writable interest off.
  h.on_readable = [&](Instant) {
    char buf[16];
    EXPECT_EQ(read(sv[0], buf, sizeof(buf)), 1);
    EXPECT_TRUE(loop->Modify(sv[0], EventLoop::kReadable).ok());
  };
  ASSERT_TRUE(
      loop->Add(sv[0], EventLoop::kReadable | EventLoop::kWritable, &h).ok());
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(h.readable, 1);
  EXPECT_EQ(h.writable, 0);
  EXPECT_TRUE(loop->Remove(sv[0]).ok());
  close(sv[0]);
  close(sv[1]);
}

TEST(EventLoopTest, HandlersMayRemoveAndDeleteEachOther) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  auto ha = std::make_unique<TestHandler>();
  auto hb = std::make_unique<TestHandler>();
  int calls = 0;
  // Whichever runs first removes the other fd and deletes its handler:
  // the other's event, already in the batch, must not reach it (ASan
  // reports a use after free if it does).
  ha->on_readable = [&](Instant) {
    ++calls;
    if (hb == nullptr) return;
    EXPECT_TRUE(loop->Remove(b.r()).ok());
    hb.reset();
  };
  hb->on_readable = [&](Instant) {
    ++calls;
    if (ha == nullptr) return;
    EXPECT_TRUE(loop->Remove(a.r()).ok());
    ha.reset();
  };
  ASSERT_TRUE(loop->Add(a.r(), EventLoop::kReadable, ha.get()).ok());
  ASSERT_TRUE(loop->Add(b.r(), EventLoop::kReadable, hb.get()).ok());
  ASSERT_TRUE(a.Write("1"));
  ASSERT_TRUE(b.Write("2"));
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(loop->stats().events, 2u);  // both were in the batch
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE((ha == nullptr) != (hb == nullptr));
  // The survivor keeps being called while its data stays unread.
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(calls, 2);
}

TEST(EventLoopTest, HandlerMayRemoveAndDeleteItself) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  auto h = std::make_unique<TestHandler>();
  int calls = 0;
  // Readable and writable interest on a socketpair that is both: after
  // OnReadable deletes the handler, OnWritable and OnError must not run.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  h->on_readable = [&](Instant) {
    ++calls;
    EXPECT_TRUE(loop->Remove(sv[0]).ok());
    h.reset();
  };
  ASSERT_TRUE(
      loop->Add(sv[0], EventLoop::kReadable | EventLoop::kWritable, h.get())
          .ok());
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(h, nullptr);
  close(sv[0]);
  close(sv[1]);
}

TEST(EventLoopTest, StaleEventForAReusedFdNumberIsSkipped) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe a, b, c;
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  TestHandler ha, hb, hc;
  // Whichever of a and b runs first replaces the other's registration by
  // a new fd with the same number (a dup of c's empty read end) and a new
  // handler. The other's event is already in the batch: it must not reach
  // the new registration.
  int replaced = -1;
  auto replace = [&](int other) {
    return [&, other](Instant) {
      if (replaced >= 0) return;
      replaced = other;
      EXPECT_TRUE(loop->Remove(other).ok());
      ASSERT_EQ(dup3(c.r(), other, O_CLOEXEC), other);
      EXPECT_TRUE(loop->Add(other, EventLoop::kReadable, &hc).ok());
    };
  };
  ha.on_readable = replace(b.r());
  hb.on_readable = replace(a.r());
  ASSERT_TRUE(loop->Add(a.r(), EventLoop::kReadable, &ha).ok());
  ASSERT_TRUE(loop->Add(b.r(), EventLoop::kReadable, &hb).ok());
  ASSERT_TRUE(a.Write("a"));
  ASSERT_TRUE(b.Write("b"));
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(loop->stats().events, 2u);
  EXPECT_EQ(ha.readable + hb.readable, 1);
  ASSERT_GE(replaced, 0);
  EXPECT_EQ(hc.readable, 0) << "a stale event reached the new registration";
  // The new registration works.
  ASSERT_TRUE(c.Write("c"));
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(hc.readable, 1);
  EXPECT_TRUE(loop->Remove(a.r()).ok());
  EXPECT_TRUE(loop->Remove(b.r()).ok());
}

TEST(EventLoopTest, RegistrationErrors) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe p;
  ASSERT_TRUE(p.ok());
  TestHandler h;
  EXPECT_EQ(loop->Add(-1, EventLoop::kReadable, &h).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->Add(p.r(), EventLoop::kReadable, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->Add(p.r(), EPOLLONESHOT, &h).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->Modify(p.r(), EventLoop::kReadable).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(loop->Remove(p.r()).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(loop->Add(p.r(), EventLoop::kReadable, &h).ok());
  EXPECT_EQ(loop->Add(p.r(), EventLoop::kReadable, &h).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(loop->Modify(p.r(), 1u << 20).code(),
            absl::StatusCode::kInvalidArgument);
  // epoll_ctl's own errors come back as statuses, and register nothing.
  const int closed = dup(p.r());
  ASSERT_GE(closed, 0);
  close(closed);
  EXPECT_FALSE(loop->Add(closed, EventLoop::kReadable, &h).ok());
  EXPECT_FALSE(loop->IsRegistered(closed));
  // A regular file cannot be watched by epoll (EPERM).
  const char* dir = getenv("TEST_TMPDIR");
  std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/event_loop_test_XXXXXX";
  const int file = mkstemp(path.data());
  ASSERT_GE(file, 0);
  unlink(path.c_str());
  EXPECT_EQ(loop->Add(file, EventLoop::kReadable, &h).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(loop->IsRegistered(file));
  close(file);
}

TEST(EventLoopTest, HangupReachesOnReadableAndOnError) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe p;
  ASSERT_TRUE(p.ok());
  TestHandler h;
  bool saw_eof = false;
  h.on_readable = [&](Instant) {
    char buf[8];
    saw_eof = read(p.r(), buf, sizeof(buf)) == 0;
  };
  h.on_error = [&](Instant) { EXPECT_TRUE(loop->Remove(p.r()).ok()); };
  ASSERT_TRUE(loop->Add(p.r(), EventLoop::kReadable, &h).ok());
  p.CloseWrite();
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(h.readable, 1);
  EXPECT_TRUE(saw_eof);
  EXPECT_EQ(h.errors, 1);
  EXPECT_NE(h.error_events & EPOLLHUP, 0u);
  EXPECT_FALSE(loop->IsRegistered(p.r()));
}

TEST(EventLoopTest, ErrorWithoutInterestStillReportsOnError) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe p;
  ASSERT_TRUE(p.ok());
  TestHandler h;
  h.on_error = [&](Instant) { EXPECT_TRUE(loop->Remove(p.w()).ok()); };
  ASSERT_TRUE(loop->Add(p.w(), 0, &h).ok());
  p.CloseRead();  // writing would now fail: EPOLLERR on the write end
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(h.writable, 0);
  EXPECT_EQ(h.errors, 1);
  EXPECT_NE(h.error_events & EPOLLERR, 0u);
}

TEST(EventLoopTest, TimerFiresThroughRunOnceNotBeforeItsDeadline) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  const Instant start = loop->Now();
  const Instant deadline = start + absl::Milliseconds(30);
  Instant fired_at = kNever;
  Timer timer([&](Instant now) { fired_at = now; });
  loop->timers().Schedule(timer, deadline);
  // With no fds, each RunOnce sleeps until the timer's deadline, not for
  // its whole max_wait.
  for (int i = 0; i < 5 && fired_at == kNever; ++i) {
    ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  }
  ASSERT_NE(fired_at, kNever);
  EXPECT_GE(fired_at, deadline);
  EXPECT_GE(loop->Now(), deadline);
  EXPECT_LT(loop->Now() - start, kGenerous);
  EXPECT_EQ(loop->stats().timers_fired, 1u);
  EXPECT_EQ(loop->timers().NextDeadline(), kNever);
}

TEST(EventLoopTest, TimersFireInOrderAndCanRearmFromRunOnce) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  std::vector<int> order;
  Timer a([&](Instant) { order.push_back(1); });
  Timer b([&](Instant) { order.push_back(2); });
  int ticks = 0;
  Timer periodic;
  periodic.set_callback([&](Instant now) {
    if (++ticks < 3) {
      loop->timers().Schedule(periodic, now + absl::Milliseconds(5));
    }
  });
  const Instant now = loop->Now();
  loop->timers().Schedule(b, now + absl::Milliseconds(12));
  loop->timers().Schedule(a, now + absl::Milliseconds(6));
  loop->timers().Schedule(periodic, now + absl::Milliseconds(1));
  const Instant start = loop->Now();
  while ((ticks < 3 || order.size() < 2) && loop->Now() - start < kGenerous) {
    ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  }
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(ticks, 3);
  EXPECT_GE(loop->Now() - now, absl::Milliseconds(11));
}

TEST(EventLoopTest, RunOnceWaitsAtMostMaxWait) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  const Instant start = loop->Now();
  ASSERT_TRUE(loop->RunOnce(absl::Milliseconds(20)).ok());
  EXPECT_GE(loop->Now() - start, absl::Milliseconds(20));
  EXPECT_LT(loop->Now() - start, kGenerous);
  EXPECT_EQ(loop->stats().turns, 1u);
  EXPECT_EQ(loop->stats().events, 0u);
}

// A poller with a settable deadline; Poll clears it.
class FakePoller : public Poller {
 public:
  Instant NextDeadline() const override { return deadline; }
  void Poll(Instant now) override {
    polls.push_back(now);
    deadline = kNever;
    if (on_poll) on_poll(now);
  }
  Instant deadline = kNever;
  std::vector<Instant> polls;
  std::function<void(Instant)> on_poll;
};

TEST(EventLoopTest, PollerDeadlineIsHonoured) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  FakePoller due, idle;
  const Instant start = loop->Now();
  due.deadline = start + absl::Milliseconds(40);
  loop->AddPoller(&due);
  loop->AddPoller(&idle);
  loop->AddPoller(&due);  // twice is once
  // One turn: the loop sleeps until the poller's deadline, not 10 s.
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  ASSERT_EQ(due.polls.size(), 1u);
  EXPECT_GE(due.polls[0], start + absl::Milliseconds(40));
  EXPECT_LT(loop->Now() - start, kGenerous);
  EXPECT_TRUE(idle.polls.empty());
  EXPECT_EQ(loop->stats().polls, 1u);
  // Not due any more: not polled again.
  ASSERT_TRUE(loop->RunOnce(absl::Milliseconds(5)).ok());
  EXPECT_EQ(due.polls.size(), 1u);
  // A deadline in the past is polled on the next turn, without waiting.
  idle.deadline = start;
  const Instant before = loop->Now();
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(idle.polls.size(), 1u);
  EXPECT_LT(loop->Now() - before, kGenerous);
  loop->RemovePoller(&due);
  loop->RemovePoller(&idle);
  due.deadline = start;
  ASSERT_TRUE(loop->RunOnce(absl::ZeroDuration()).ok());
  EXPECT_EQ(due.polls.size(), 1u);
}

TEST(EventLoopTest, AFakeClockIsWhatEveryoneInTheTurnSees) {
  Instant fake = absl::FromUnixSeconds(1'700'000'000);
  auto created = EventLoop::Create({}, [&fake] { return fake; });
  ASSERT_TRUE(created.ok()) << created.status();
  EventLoop& loop = **created;
  EXPECT_EQ(loop.Now(), fake);
  Pipe p;
  ASSERT_TRUE(p.ok());
  TestHandler h;
  h.on_readable = [&](Instant) { p.ReadAll(); };
  ASSERT_TRUE(loop.Add(p.r(), EventLoop::kReadable, &h).ok());
  FakePoller poller;
  poller.deadline = fake + absl::Seconds(5);
  loop.AddPoller(&poller);
  Instant hook_now;
  loop.AddTurnEndHook([&](Instant now) { hook_now = now; });
  bool fired = false;
  Timer timer([&](Instant) { fired = true; });
  loop.timers().Schedule(timer, fake + absl::Seconds(5));
  // Due 5 s later by the fake clock: a turn neither waits for it in real
  // time nor runs it.
  const Instant real_start = EventLoop::MonotonicNow();
  ASSERT_TRUE(p.Write("x"));
  ASSERT_TRUE(loop.RunOnce(absl::ZeroDuration()).ok());
  EXPECT_LT(EventLoop::MonotonicNow() - real_start, kGenerous);
  EXPECT_EQ(h.readable, 1);
  EXPECT_EQ(h.last_now, fake);
  EXPECT_EQ(hook_now, fake);
  EXPECT_TRUE(poller.polls.empty());
  EXPECT_FALSE(fired);
  // The clock moves: the poller and the timer are due at once.
  fake += absl::Seconds(5);
  ASSERT_TRUE(loop.RunOnce(kLongWait).ok());
  EXPECT_LT(EventLoop::MonotonicNow() - real_start, kGenerous);
  ASSERT_EQ(poller.polls.size(), 1u);
  EXPECT_EQ(poller.polls[0], fake);
  EXPECT_TRUE(fired);
  EXPECT_EQ(hook_now, fake);
  loop.RemovePoller(&poller);
  ASSERT_TRUE(loop.Remove(p.r()).ok());
}

TEST(EventLoopTest, PollerRefAdaptsAnyNextDeadlinePollPair) {
  struct Stackish {  // not a Poller: like a LinkEndpoint or the stack
    Instant NextDeadline() const { return next; }
    void Poll(Instant now) {
      ++polls;
      next = kNever;
    }
    Instant next = kNever;
    int polls = 0;
  } stack;
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  PollerRef<Stackish> ref(&stack);
  loop->AddPoller(&ref);
  stack.next = loop->Now();
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(stack.polls, 1);
  loop->RemovePoller(&ref);
}

TEST(EventLoopTest, PollersMayRemovePollersDuringPoll) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  auto first = std::make_unique<FakePoller>();
  auto second = std::make_unique<FakePoller>();
  first->on_poll = [&](Instant) {
    loop->RemovePoller(second.get());
    second.reset();
    loop->RemovePoller(first.get());  // itself, too
  };
  first->deadline = second->deadline = loop->Now();
  loop->AddPoller(first.get());
  loop->AddPoller(second.get());
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  EXPECT_EQ(first->polls.size(), 1u);
  EXPECT_EQ(second, nullptr);
  first->deadline = loop->Now();
  ASSERT_TRUE(loop->RunOnce(absl::ZeroDuration()).ok());
  EXPECT_EQ(first->polls.size(), 1u);  // removed
}

TEST(EventLoopTest, TurnOrderAndEndOfTurnHooks) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe p;
  ASSERT_TRUE(p.ok());
  std::vector<std::string> log;
  TestHandler h;
  h.on_readable = [&](Instant) {
    p.ReadAll();
    log.push_back("io");
  };
  ASSERT_TRUE(loop->Add(p.r(), EventLoop::kReadable, &h).ok());
  Timer timer([&](Instant) { log.push_back("timer"); });
  FakePoller poller;
  poller.on_poll = [&](Instant) { log.push_back("poll"); };
  loop->AddPoller(&poller);
  EventLoop::HookId once = 0;
  once = loop->AddTurnEndHook([&](Instant) {
    log.push_back("once");
    loop->RemoveTurnEndHook(once);  // removes itself while running
    loop->AddTurnEndHook([&](Instant) { log.push_back("added"); });
  });
  const EventLoop::HookId flush =
      loop->AddTurnEndHook([&](Instant) { log.push_back("flush"); });

  ASSERT_TRUE(p.Write("x"));
  const Instant now = loop->Now();
  loop->timers().Schedule(timer, now);
  poller.deadline = now;
  ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
  // I/O, then timers, then pollers, then the hooks in the order added; a
  // hook added during the turn runs at its end.
  EXPECT_EQ(log, (std::vector<std::string>{"io", "timer", "poll", "once",
                                           "flush", "added"}));
  log.clear();
  ASSERT_TRUE(loop->RunOnce(absl::ZeroDuration()).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"flush", "added"}));
  log.clear();
  loop->RemoveTurnEndHook(flush);
  ASSERT_TRUE(loop->RunOnce(absl::ZeroDuration()).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"added"}));
  loop->RemovePoller(&poller);
}

bool SignalIsBlocked(int signo) {
  sigset_t current;
  pthread_sigmask(SIG_BLOCK, nullptr, &current);
  return sigismember(&current, signo) == 1;
}

TEST(EventLoopTest, SignalsArriveThroughSignalfd) {
  ASSERT_FALSE(SignalIsBlocked(SIGUSR1));
  {
    auto loop = MakeLoop();
    ASSERT_NE(loop, nullptr);
    std::vector<int> got;
    ASSERT_TRUE(
        loop->HandleSignals({SIGUSR1, SIGUSR2},
                            [&](int signo, Instant) { got.push_back(signo); })
            .ok());
    EXPECT_TRUE(SignalIsBlocked(SIGUSR1));
    // Without the signalfd, SIGUSR1's default action would end the test.
    ASSERT_EQ(raise(SIGUSR1), 0);
    ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
    EXPECT_EQ(got, (std::vector<int>{SIGUSR1}));
    ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
    for (int i = 0; i < 5 && got.size() < 2; ++i) {
      ASSERT_TRUE(loop->RunOnce(kLongWait).ok());
    }
    EXPECT_EQ(got, (std::vector<int>{SIGUSR1, SIGUSR2}));
    EXPECT_EQ(loop->stats().signals, 2u);
    // Pending when the loop goes away: discarded, not fatal.
    ASSERT_EQ(raise(SIGUSR1), 0);
  }
  EXPECT_FALSE(SignalIsBlocked(SIGUSR1));
  EXPECT_FALSE(SignalIsBlocked(SIGUSR2));
}

TEST(EventLoopTest, HandleSignalsRejectsWhatCannotBeHandled) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  auto ignore = [](int, Instant) {};
  EXPECT_EQ(loop->HandleSignals({}, ignore).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->HandleSignals({SIGKILL}, ignore).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->HandleSignals({0}, ignore).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->HandleSignals({SIGUSR1, 100000}, ignore).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SignalIsBlocked(SIGUSR1));
}

TEST(EventLoopTest, StopFromAHandlerEndsRun) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  Pipe p;
  ASSERT_TRUE(p.ok());
  TestHandler h;
  h.on_readable = [&](Instant) {
    p.ReadAll();
    loop->Stop();
  };
  ASSERT_TRUE(loop->Add(p.r(), EventLoop::kReadable, &h).ok());
  // A timer writes to the pipe a few turns in; its handler stops the loop.
  int ticks = 0;
  Timer timer;
  timer.set_callback([&](Instant now) {
    if (++ticks == 3) {
      EXPECT_TRUE(p.Write("stop"));
    } else {
      loop->timers().Schedule(timer, now + absl::Milliseconds(2));
    }
  });
  loop->timers().Schedule(timer, loop->Now());
  ASSERT_TRUE(loop->Run().ok());
  EXPECT_EQ(ticks, 3);
  EXPECT_EQ(h.readable, 1);
  // Run can run again; a Stop before Run makes it return without a turn.
  const uint64_t turns = loop->stats().turns;
  loop->Stop();
  ASSERT_TRUE(loop->Run().ok());
  EXPECT_EQ(loop->stats().turns, turns);
}

TEST(EventLoopTest, StopFromASignalCallback) {
  auto loop = MakeLoop();
  ASSERT_NE(loop, nullptr);
  ASSERT_TRUE(
      loop->HandleSignals({SIGUSR1}, [&](int, Instant) { loop->Stop(); }).ok());
  Timer timer([](Instant) { raise(SIGUSR1); });
  loop->timers().Schedule(timer, loop->Now() + absl::Milliseconds(5));
  ASSERT_TRUE(loop->Run().ok());
  EXPECT_EQ(loop->stats().signals, 1u);
}

}  // namespace
}  // namespace netstack::eventloop
