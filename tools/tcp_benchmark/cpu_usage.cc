#include "tools/tcp_benchmark/cpu_usage.h"

#include <sys/resource.h>

namespace netstack::tools::bench {
namespace {

void ReadUsage(Duration& user, Duration& system) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  user = absl::DurationFromTimeval(ru.ru_utime);
  system = absl::DurationFromTimeval(ru.ru_stime);
}

}  // namespace

void CpuMeter::Start(Instant now) {
  started_ = true;
  stopped_ = false;
  start_wall_ = now;
  ReadUsage(start_user_, start_system_);
}

CpuUtil CpuMeter::Stop(Instant now) {
  if (!started_ || stopped_) return result_;
  stopped_ = true;
  Duration user, system;
  ReadUsage(user, system);
  const double wall = absl::ToDoubleSeconds(now - start_wall_);
  if (wall <= 0) return result_;
  result_.user = 100 * absl::ToDoubleSeconds(user - start_user_) / wall;
  result_.system = 100 * absl::ToDoubleSeconds(system - start_system_) / wall;
  result_.total = result_.user + result_.system;
  return result_;
}

}  // namespace netstack::tools::bench
