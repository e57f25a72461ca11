#include "tools/tcp_benchmark/interrupt.h"

#include <signal.h>

#include <atomic>

namespace netstack::tools::bench {
namespace {

// Lock-free atomics of int are async-signal-safe to read in the handler.
std::atomic<int> g_signal{0};
std::atomic<pid_t> g_children[kMaxChildren];

static_assert(std::atomic<pid_t>::is_always_lock_free);

void OnInterrupt(int signo) {
  // Only the first signal stops the children: a second Ctrl-C must not
  // kill the `ip netns del` commands of the teardown it is waiting for.
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, signo)) return;
  for (auto& child : g_children) {
    const pid_t pgid = child.load();
    if (pgid > 0) kill(-pgid, SIGTERM);
  }
}

sigset_t InterruptSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void InstallInterruptHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: blocking calls return EINTR
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool Interrupted() { return g_signal.load() != 0; }
int InterruptSignal() { return g_signal.load(); }

bool RegisterChild(pid_t pgid) {
  for (auto& child : g_children) {
    pid_t expected = 0;
    if (child.compare_exchange_strong(expected, pgid)) return true;
  }
  return false;
}

void UnregisterChild(pid_t pgid) {
  for (auto& child : g_children) {
    pid_t expected = pgid;
    child.compare_exchange_strong(expected, 0);
  }
}

BlockInterrupts::BlockInterrupts() {
  const sigset_t set = InterruptSet();
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

BlockInterrupts::~BlockInterrupts() {
  const sigset_t set = InterruptSet();
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

void ResetSignalsInChild() {
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace netstack::tools::bench
