#include "tools/tcp_benchmark/driver.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/tcp_benchmark/driver_report.h"
#include "tools/tcp_benchmark/flags.h"
#include "tools/tcp_benchmark/interrupt.h"
#include "tools/tcp_benchmark/measurement.h"
#include "tools/tcp_benchmark/topology.h"

namespace netstack::tools::bench {
namespace {

// What to measure, from the driver flags.
struct Plan {
  std::vector<int> mtus;
  std::vector<std::string> modes;  // netstack modes (off, sw, host)
  bool kernel_baseline = true;
  std::vector<bool> netstack_is_client;
};

absl::StatusOr<std::vector<int>> ParseMtus() {
  const std::string list = absl::GetFlag(FLAGS_mtus);
  if (list.empty()) {
    const int mtu = absl::GetFlag(FLAGS_mtu);
    return std::vector<int>{mtu > 0 ? mtu : 1500};
  }
  std::vector<int> mtus;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    int mtu;
    if (!absl::SimpleAtoi(item, &mtu) || mtu < 1280 || mtu > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mtus: '", item, "' is not an MTU in [1280, 65535]"));
    }
    mtus.push_back(mtu);
  }
  return mtus;
}

std::string DefaultModes() {
  if (absl::GetFlag(FLAGS_hostgso)) return kModeHost;
  if (absl::GetFlag(FLAGS_swgso)) return kModeSw;
  if (absl::GetFlag(FLAGS_gso) == 0) return kModeOff;
  return "off,sw";
}

absl::StatusOr<Plan> MakePlan() {
  Plan plan;
  absl::StatusOr<std::vector<int>> mtus = ParseMtus();
  if (!mtus.ok()) return mtus.status();
  plan.mtus = *mtus;
  plan.kernel_baseline = absl::GetFlag(FLAGS_kernel_baseline);
  std::string modes = absl::GetFlag(FLAGS_modes);
  if (modes.empty()) modes = DefaultModes();
  for (absl::string_view mode : absl::StrSplit(modes, ',')) {
    if (mode == kModeKernel) {
      plan.kernel_baseline = true;  // --modes=kernel: the baseline alone
    } else if (mode == kModeOff || mode == kModeSw || mode == kModeHost) {
      plan.modes.push_back(std::string(mode));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--modes: unknown mode '", mode, "' (off, sw, host, kernel)"));
    }
  }
  const std::string link = absl::GetFlag(FLAGS_link);
  if (link != "packet" && link != "tap") {
    return absl::InvalidArgumentError(
        absl::StrCat("--link: '", link, "' is neither packet nor tap"));
  }
  if (absl::GetFlag(FLAGS_server)) plan.netstack_is_client.push_back(false);
  if (absl::GetFlag(FLAGS_client) || plan.netstack_is_client.empty()) {
    plan.netstack_is_client.insert(plan.netstack_is_client.begin(), true);
  }
  if (absl::GetFlag(FLAGS_duration) <= 0) {
    return absl::InvalidArgumentError("--duration must be positive");
  }
  return plan;
}

// The specs in the order they run: per MTU the baseline, then each mode
// with each netstack role.
std::vector<MeasurementSpec> Specs(const Plan& plan) {
  MeasurementSpec base;
  base.link = absl::GetFlag(FLAGS_link);
  base.reverse = absl::GetFlag(FLAGS_reverse);
  base.duration = absl::GetFlag(FLAGS_duration);
  base.streams = absl::GetFlag(FLAGS_streams);
  std::vector<MeasurementSpec> specs;
  for (const int mtu : plan.mtus) {
    base.mtu = mtu;
    if (plan.kernel_baseline) {
      MeasurementSpec kernel = base;
      kernel.mode = kModeKernel;
      kernel.netstack_is_client = true;
      kernel.reverse = false;
      specs.push_back(kernel);
    }
    for (const std::string& mode : plan.modes) {
      for (const bool is_client : plan.netstack_is_client) {
        MeasurementSpec spec = base;
        spec.mode = mode;
        spec.netstack_is_client = is_client;
        specs.push_back(spec);
      }
    }
  }
  return specs;
}

// This binary, for the roles (argv[0] may be relative to a PATH entry).
std::string SelfPath(const char* argv0) {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return argv0;
  return std::string(path, static_cast<size_t>(n));
}

}  // namespace

int RunDriver(const char* self) {
  absl::StatusOr<Plan> plan = MakePlan();
  if (!plan.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n",
                 std::string(plan.status().message()).c_str());
    return 2;
  }
  InstallInterruptHandlers();
  const std::string self_path = SelfPath(self);
  const TopologyNames names = TopologyNames::ForPid(getpid());
  const bool keep = absl::GetFlag(FLAGS_keep_topology);
  std::vector<Measurement> results;
  int failed = 0;
  for (const MeasurementSpec& spec : Specs(*plan)) {
    if (Interrupted()) break;
    std::fprintf(stderr, "%s\n", spec.Title().c_str());
    results.push_back(RunMeasurement(self_path, names, spec, keep));
    if (!results.back().ok()) {
      ++failed;
      std::fprintf(stderr, "tcp_benchmark: measurement failed: %s\n",
                   results.back().error.c_str());
    }
  }
  const bool json = absl::GetFlag(FLAGS_json);
  std::fputs(FormatTable(results).c_str(), json ? stderr : stdout);
  if (json) std::fputs(FormatJson(results).c_str(), stdout);
  if (Interrupted()) {
    std::fprintf(stderr, "tcp_benchmark: interrupted; topology removed\n");
    return 128 + InterruptSignal();
  }
  if (failed > 0) {
    std::fprintf(stderr, "tcp_benchmark: %d of %zu measurements failed\n",
                 failed, results.size());
    return 1;
  }
  return 0;
}

}  // namespace netstack::tools::bench
