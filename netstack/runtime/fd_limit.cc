#include "netstack/runtime/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"

namespace netstack::runtime {
namespace {

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

uint64_t FromRlim(rlim_t v) {
  return v == RLIM_INFINITY ? kUnlimited : static_cast<uint64_t>(v);
}
rlim_t ToRlim(uint64_t v) {
  return v == kUnlimited ? RLIM_INFINITY : static_cast<rlim_t>(v);
}

std::string Number(uint64_t v) {
  return v == kUnlimited ? "unlimited" : absl::StrCat(v);
}

// fs.nr_open: no RLIMIT_NOFILE goes past it (the kernel's default is
// 1048576). Unreadable: assume that default.
uint64_t NrOpen() {
  uint64_t v = 1048576;
  if (FILE* f = std::fopen("/proc/sys/fs/nr_open", "re")) {
    unsigned long long n = 0;
    if (std::fscanf(f, "%llu", &n) == 1 && n > 0) v = n;
    std::fclose(f);
  }
  return v;
}

bool Get(FdLimits& out) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  out = {FromRlim(r.rlim_cur), FromRlim(r.rlim_max)};
  return true;
}

bool Set(const FdLimits& l) {
  const rlimit r{ToRlim(l.soft), ToRlim(l.hard)};
  return setrlimit(RLIMIT_NOFILE, &r) == 0;
}

}  // namespace

FdLimits PlanFdLimits(FdLimits now, uint64_t need, bool may_raise_hard,
                      uint64_t ceiling) {
  FdLimits want = now;
  if (may_raise_hard && now.hard < need) {
    want.hard = std::max(now.hard, std::min(need, ceiling));
  }
  // The soft limit only goes up (a user who set it higher meant it), and
  // never past the hard one.
  want.soft = std::min(std::max(now.soft, need), want.hard);
  return want;
}

namespace {

// Forward connections of `fds_each` that fit in a soft limit of `soft`, at
// most `want` (SplicedConnsThatFit).
uint64_t ConnsThatFit(const FdBudget& budget, uint64_t soft, uint64_t want,
                      uint64_t fds_each) {
  if (soft >= budget.need()) return want;
  const uint64_t fixed = budget.others + budget.forwards;
  const uint64_t room = soft > fixed ? soft - fixed : 0;
  const uint64_t left = room > budget.flows() ? room - budget.flows() : 0;
  const uint64_t fds = std::max(left, room / 4);
  return std::min(want, fds / fds_each);
}

}  // namespace

uint64_t SplicedConnsThatFit(const FdBudget& budget, uint64_t soft) {
  return ConnsThatFit(budget, soft, budget.spliced_conns,
                      FdBudget::kFdsPerSplicedConn);
}

uint64_t StackConnsThatFit(const FdBudget& budget, uint64_t soft) {
  return ConnsThatFit(budget, soft, budget.stack_conns, 1);
}

std::string DescribeFdLimit(FdLimits before, FdLimits after,
                            const FdBudget& budget) {
  const std::string was =
      before.soft == after.soft ? std::string("unchanged")
                                : absl::StrCat("was ", Number(before.soft));
  const std::string parts = absl::StrCat(
      "--max-tcp-flows ", budget.tcp_flows, ", --max-udp-flows ",
      budget.udp_flows, ", ", budget.ping_flows, " ping flows",
      budget.dns_queries != 0
          ? absl::StrCat(", ", budget.dns_queries, " DNS queries")
          : std::string(),
      budget.forwards != 0
          ? absl::StrCat(", ", budget.forwards, " for port forwards")
          : std::string(),
      budget.spliced_conns != 0
          ? absl::StrCat(", ", budget.spliced_conns,
                         " spliced forward connections (",
                         FdBudget::kFdsPerSplicedConn, " fds each)")
          : std::string(),
      budget.stack_conns != 0
          ? absl::StrCat(", ", budget.stack_conns,
                         " forward connections through the stack (1 fd "
                         "each)")
          : std::string(),
      " and ", budget.others, " others");
  if (after.soft >= budget.need()) {
    return absl::StrCat("netstackd: fd limit ", Number(after.soft), " (", was,
                        "; hard ", Number(after.hard), "): room for ", parts,
                        "\n");
  }
  // What the forwards' connections get instead (one path or the other).
  std::string forward_conns;
  if (budget.spliced_conns != 0) {
    forward_conns = absl::StrCat(
        " The guest's own flows keep their fds: spliced forward "
        "connections: at most ",
        SplicedConnsThatFit(budget, after.soft), " of --max-forward-conns ",
        budget.spliced_conns,
        "; a client past it is reset (forward.N.refused_limit).");
  } else if (budget.stack_conns != 0) {
    forward_conns = absl::StrCat(
        " The guest's own flows keep their fds: forward connections "
        "through the stack: at most ",
        StackConnsThatFit(budget, after.soft), " of --max-forward-conns ",
        budget.stack_conns,
        "; a client past it is reset (forward.N.refused_limit, "
        "backend.tcp_refused_inbound_limit).");
  }
  return absl::StrCat(
      "netstackd: warning: fd limit ", Number(after.soft), " (", was,
      "; hard ", Number(after.hard), ") is below the ", budget.need(),
      " fds that ", parts,
      " need: a flow past it gets RST (backend.tcp_end.connect_failed). "
      "Raise the hard limit (ulimit -Hn ", budget.need(),
      " where netstackd is started, LimitNOFILE= in a systemd unit, or run "
      "it as root) or lower --max-tcp-flows.",
      forward_conns, "\n");
}

std::string RaiseFdLimit(const FdBudget& budget, FdLimits* got) {
  FdLimits before;
  if (!Get(before)) {
    return absl::StrCat("netstackd: warning: getrlimit(RLIMIT_NOFILE): errno ",
                        errno, "; the fd limit stays as it is\n");
  }
  const uint64_t need = budget.need();
  const uint64_t ceiling = NrOpen();
  FdLimits want = PlanFdLimits(before, need, /*may_raise_hard=*/true, ceiling);
  // Raising the hard limit takes CAP_SYS_RESOURCE; without it, setrlimit
  // fails (EPERM) and the soft limit goes as far as the hard one allows.
  if (!Set(want)) {
    want = PlanFdLimits(before, need, /*may_raise_hard=*/false, ceiling);
    (void)Set(want);
  }
  FdLimits after = before;
  (void)Get(after);
  if (got != nullptr) *got = after;
  return DescribeFdLimit(before, after, budget);
}

}  // namespace netstack::runtime
