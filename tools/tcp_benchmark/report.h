// iperf3-style text: sizes in binary units, rates in decimal bits, and
// the "[ ID] Interval  Transfer  Bitrate  Retr" lines.
#ifndef TOOLS_TCP_BENCHMARK_REPORT_H_
#define TOOLS_TCP_BENCHMARK_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>

namespace netstack::tools::bench {

// "1.10 GBytes", "512 KBytes", "17 Bytes" (1024-based, as iperf3 -f a).
std::string FormatBytes(double bytes);
// "9.42 Gbits/sec" (1000-based).
std::string FormatRate(double bytes, double seconds);

// "[  1]   0.00-1.00   sec  1.10 GBytes  9.42 Gbits/sec    0 retr", with
// label "SUM" for the total of several streams; no retransmit column
// without `retransmits`, and `tag` ("sender"/"receiver") appended.
std::string FormatLine(const std::string& label, double from, double to,
                       uint64_t bytes, std::optional<uint64_t> retransmits,
                       const std::string& tag = "");
std::string StreamLabel(int id);

inline constexpr char kSummarySeparator[] =
    "- - - - - - - - - - - - - - - - - - - - - - - - -";
inline constexpr char kHeader[] =
    "[ ID] Interval           Transfer     Bitrate";

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_REPORT_H_
