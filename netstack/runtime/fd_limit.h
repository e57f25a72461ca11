// netstackd --backend holds one host fd per TCP flow, UDP flow and ping
// flow. A flow past the process's RLIMIT_NOFILE fails at socket() with
// EMFILE and the guest gets RST (backend.tcp_end.connect_failed), so the
// limit must cover the flow limits. Many shells start with a soft limit
// of 1024 and a higher hard one: netstackd raises the soft limit itself,
// and the hard one when it may (CAP_SYS_RESOURCE, i.e. root), and says
// on stderr what it got and, when that is short, what to do.
#ifndef NETSTACK_NETSTACK_RUNTIME_FD_LIMIT_H_
#define NETSTACK_NETSTACK_RUNTIME_FD_LIMIT_H_

#include <cstdint>
#include <string>

namespace netstack::runtime {

// What the backend's fds are for. need() is their sum.
struct FdBudget {
  // A spliced connection's fds: the client's socket, the socket in the
  // guest's namespace and, while data moves, a pipe each way (two fds a
  // pipe; netstack/forward/relay.h).
  static constexpr uint64_t kFdsPerSplicedConn = 6;

  uint64_t tcp_flows = 0;   // --max-tcp-flows
  uint64_t udp_flows = 0;   // --max-udp-flows
  uint64_t ping_flows = 0;  // the ping forwarder's cap
  // The link, epoll, timerfd, signalfd, a pcap file, stdio: a few dozen;
  // 64 leaves room.
  uint64_t others = 64;
  // -t/-u: the listeners, and the UDP forwards' client flows (as many as
  // --max-udp-flows, shared by every -u). -t connections: below.
  uint64_t forwards = 0;
  // Spliced -t connections at once (a namespace guest; --max-forward-conns),
  // kFdsPerSplicedConn each.
  uint64_t spliced_conns = 0;
  // The DNS forwarder's queries in flight: a host socket each, UDP or TCP
  // (DnsForwarderOptions::max_pending; none when idle).
  uint64_t dns_queries = 0;
  // -t connections through the stack at once (a VM, or --forward-path=
  // stack; --max-forward-conns): the backend's inbound TCP flows, each
  // holding the client's accepted socket (the guest side is the stack's).
  // A forward's connections take one path: this or spliced_conns.
  uint64_t stack_conns = 0;

  // The guest's own flows.
  uint64_t flows() const {
    return tcp_flows + udp_flows + ping_flows + dns_queries;
  }
  uint64_t need() const {
    return flows() + others + forwards + spliced_conns * kFdsPerSplicedConn +
           stack_conns;
  }
};

// How many spliced connections to allow in a soft fd limit of `soft`:
// budget.spliced_conns when the limit covers budget.need(). When it falls
// short (a hard limit netstackd may not raise), the guest's own flows keep
// their fds first, since anyone who can reach a published port could
// otherwise take them (review 2026-12-06, finding 7). The forwards get what
// is left after those, and at least a quarter of what the others and the
// listeners leave, so that a limit short even of the guest's flows does
// not close every forward.
uint64_t SplicedConnsThatFit(const FdBudget& budget, uint64_t soft);
// The same for the connections through the stack (budget.stack_conns, one
// fd each): the backend's inbound share (BackendLimits::
// max_inbound_tcp_flows).
uint64_t StackConnsThatFit(const FdBudget& budget, uint64_t soft);

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
// below budget.need(), a warning with the numbers and the fixes (and how
// many spliced connections fit: SplicedConnsThatFit).
std::string DescribeFdLimit(FdLimits before, FdLimits after,
                            const FdBudget& budget);

// Plans and applies (setrlimit; the hard limit is tried and, on EPERM,
// left) and returns DescribeFdLimit's line; the limits it got go to
// `*after` when given. Reads fs.nr_open.
std::string RaiseFdLimit(const FdBudget& budget, FdLimits* after = nullptr);

}  // namespace netstack::runtime

#endif  // NETSTACK_NETSTACK_RUNTIME_FD_LIMIT_H_
