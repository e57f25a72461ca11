#include "tools/tcp_benchmark/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace netstack::tools::bench {
namespace {

// iperf3's precision: three significant digits.
std::string ThreeDigits(double v) {
  if (v < 9.995) return absl::StrFormat("%.2f", v);
  if (v < 99.95) return absl::StrFormat("%.1f", v);
  return absl::StrFormat("%.0f", v);
}

}  // namespace

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"Bytes", "KBytes", "MBytes",
                                           "GBytes", "TBytes"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%.0f %s", bytes, kUnits[0]);
  return absl::StrCat(ThreeDigits(bytes), " ", kUnits[unit]);
}

std::string FormatRate(double bytes, double seconds) {
  static constexpr const char* kUnits[] = {"bits/sec", "Kbits/sec",
                                           "Mbits/sec", "Gbits/sec",
                                           "Tbits/sec"};
  double bits = seconds > 0 ? bytes * 8 / seconds : 0;
  int unit = 0;
  while (bits >= 1000 && unit < 4) {
    bits /= 1000;
    ++unit;
  }
  return absl::StrCat(ThreeDigits(bits), " ", kUnits[unit]);
}

std::string StreamLabel(int id) { return absl::StrFormat("%3d", id); }

std::string FormatLine(const std::string& label, double from, double to,
                       uint64_t bytes, std::optional<uint64_t> retransmits,
                       const std::string& tag) {
  std::string line = absl::StrFormat(
      "[%s] %6.2f-%-6.2f sec  %11s  %15s", label, from, to,
      FormatBytes(static_cast<double>(bytes)),
      FormatRate(static_cast<double>(bytes), to - from));
  if (retransmits) absl::StrAppend(&line, absl::StrFormat("  %4d retr", *retransmits));
  if (!tag.empty()) absl::StrAppend(&line, "  ", tag);
  return line;
}

}  // namespace netstack::tools::bench
