// netstackd --backend holds one host fd per TCP flow, UDP flow and ping
// flow. A flow past the process's RLIMIT_NOFILE fails at socket() with
// EMFILE and the guest gets RST (backend.tcp_end.connect_failed), so the
// limit must cover the flow limits. Many shells start with a soft limit
// of 1024 and a higher hard one: netstackd raises the soft limit itself,
// and the hard one when it may (CAP_SYS_RESOURCE, i.e. root), and says
// on stderr what it got and, when that is short, what to do.
#ifndef NETSTACK_TOOLS_NETSTACKD_FD_LIMIT_H_
#define NETSTACK_TOOLS_NETSTACKD_FD_LIMIT_H_

#include <cstdint>
#include <string>

namespace netstack::tools {

// What the backend's fds are for. need() is their sum.
struct FdBudget {
  uint64_t tcp_flows = 0;   // --max-tcp-flows
  uint64_t udp_flows = 0;   // --max-udp-flows
  uint64_t ping_flows = 0;  // the ping forwarder's cap
  // The link, epoll, timerfd, signalfd, the DNS forwarder's sockets, a
  // pcap file, stdio: a few dozen; 64 leaves room.
  uint64_t others = 64;
  // -t/-u: the listeners, and the UDP forwards' client flows (as many as
  // --max-udp-flows, shared by every -u). TCP forwards' connections
  // count as TCP flows.
  uint64_t forwards = 0;
  uint64_t need() const {
    return tcp_flows + udp_flows + ping_flows + others + forwards;
  }
};

// RLIMIT_NOFILE as getrlimit gives it; RLIM_INFINITY as UINT64_MAX.
struct FdLimits {
  uint64_t soft = 0;
  uint64_t hard = 0;
};

// The limits to ask for: the soft limit up to the need (never down), the
// hard limit up to the need only when `may_raise_hard` (a privileged
// process may; for another one setrlimit fails with EPERM), the soft one
// never past the hard one. `ceiling` is the kernel's fs.nr_open, past
// which no hard limit can go.
FdLimits PlanFdLimits(FdLimits now, uint64_t need, bool may_raise_hard,
                      uint64_t ceiling);

// The line netstackd prints: the limit it runs with and, when that is
// below budget.need(), a warning with the numbers and the fixes.
std::string DescribeFdLimit(FdLimits before, FdLimits after,
                            const FdBudget& budget);

// Plans and applies (setrlimit; the hard limit is tried and, on EPERM,
// left) and returns DescribeFdLimit's line. Reads fs.nr_open.
std::string RaiseFdLimit(const FdBudget& budget);

}  // namespace netstack::tools

#endif  // NETSTACK_TOOLS_NETSTACKD_FD_LIMIT_H_
