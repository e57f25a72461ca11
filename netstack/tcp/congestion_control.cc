#include "netstack/tcp/congestion_control.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string_view>

#include "netstack/tcp/cubic.h"
#include "netstack/tcp/reno.h"

namespace netstack::tcp {
namespace {

// ASCII case-insensitive equality. (Debian's Abseil has its own
// string_view, so EqualsIgnoreCase does not take std's.)
bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  auto lower = [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(),
                    [&](char x, char y) { return lower(x) == lower(y); });
}

}  // namespace

std::string_view AlgorithmName(CongestionAlgorithm a) {
  switch (a) {
    case CongestionAlgorithm::kNewReno:
      return "reno";  // Linux's name for it (net.ipv4.tcp_congestion_control)
    case CongestionAlgorithm::kCubic:
      return "cubic";
  }
  return "unknown";
}

std::optional<CongestionAlgorithm> ParseAlgorithm(std::string_view name) {
  if (EqualsIgnoreCase(name, "reno") || EqualsIgnoreCase(name, "newreno")) {
    return CongestionAlgorithm::kNewReno;
  }
  if (EqualsIgnoreCase(name, "cubic")) return CongestionAlgorithm::kCubic;
  return std::nullopt;
}

std::unique_ptr<CongestionControl> MakeCongestionControl(
    CongestionAlgorithm a, uint32_t initial_cwnd) {
  switch (a) {
    case CongestionAlgorithm::kNewReno:
      return std::make_unique<NewReno>(initial_cwnd);
    case CongestionAlgorithm::kCubic:
      return std::make_unique<Cubic>(initial_cwnd);
  }
  return nullptr;
}

uint32_t CongestionControl::SlowStart(uint32_t delivered) {
  const uint32_t ceiling = std::min(ssthresh_, kMaxCwnd);
  const uint32_t room = ceiling > cwnd_ ? ceiling - cwnd_ : 0;
  const uint32_t grow = std::min(delivered, room);
  cwnd_ += grow;
  // The packets past ssthresh carry over into congestion avoidance.
  return cwnd_ >= ssthresh_ ? delivered - grow : 0;
}

void CongestionControl::RestartAfterIdle() {
  const uint32_t three_quarters =
      static_cast<uint32_t>(uint64_t{cwnd_} * 3 / 4);
  ssthresh_ = std::max(ssthresh_, three_quarters);
  cwnd_ = std::min(cwnd_, initial_cwnd_);
}

}  // namespace netstack::tcp
