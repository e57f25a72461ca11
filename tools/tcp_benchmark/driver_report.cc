#include "tools/tcp_benchmark/driver_report.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace netstack::tools::bench {
namespace {

std::optional<double> Ratio(const std::vector<Measurement>& all,
                            const Measurement& m) {
  if (m.spec.is_kernel()) return 1.0;
  const std::optional<double> kernel = KernelGbps(all, m.spec.mtu);
  if (!kernel || *kernel <= 0 || !m.ok()) return std::nullopt;
  return m.client.gbps / *kernel;
}

const char* RoleName(const Measurement& m) {
  return m.spec.netstack_sends() ? "sender" : "receiver";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

std::string JsonNumber(std::optional<double> v) {
  return v ? absl::StrFormat("%.6g", *v) : "null";
}

std::string JsonObject(const std::vector<Measurement>& all,
                       const Measurement& m) {
  std::vector<std::string> fields = {
      absl::StrCat("\"mode\":", JsonString(m.spec.mode)),
      absl::StrCat("\"mtu\":", m.spec.mtu),
      absl::StrCat("\"netstack_role\":\"", RoleName(m), "\""),
      absl::StrCat("\"gbps\":", JsonNumber(m.client.gbps)),
      absl::StrCat("\"cpu_s_per_gb\":", JsonNumber(m.CpuSecondsPerGb())),
      absl::StrCat("\"retransmits\":", m.client.retransmits),
      absl::StrCat("\"ratio_to_kernel\":", JsonNumber(Ratio(all, m))),
      absl::StrCat("\"link\":",
                   JsonString(m.spec.is_kernel() ? "veth" : m.spec.link)),
      absl::StrCat("\"reverse\":", m.spec.reverse ? "true" : "false"),
      absl::StrCat("\"duration\":", JsonNumber(m.spec.duration)),
      absl::StrCat("\"streams\":", m.spec.streams),
      absl::StrCat("\"bytes\":", m.client.bytes),
      absl::StrCat("\"seconds\":", JsonNumber(m.client.seconds)),
      absl::StrCat("\"cpu_s\":", JsonNumber(m.netstack_cpu_seconds))};
  if (!m.ok()) {
    fields.push_back(absl::StrCat("\"error\":", JsonString(m.error)));
  }
  return absl::StrCat("{", absl::StrJoin(fields, ","), "}");
}

}  // namespace

std::optional<double> KernelGbps(const std::vector<Measurement>& all, int mtu) {
  for (const Measurement& m : all) {
    if (m.spec.is_kernel() && m.spec.mtu == mtu && m.ok()) {
      return m.client.gbps;
    }
  }
  return std::nullopt;
}

std::string FormatTable(const std::vector<Measurement>& all) {
  constexpr char kRow[] = "%-6s %6s  %-8s %8s %10s %11s %13s %7s\n";
  std::string out =
      absl::StrFormat(kRow, "mode", "MTU", "netstack", "Gbit/s", "CPU s/GB",
                      "retransmits", "kernel Gbit/s", "ratio");
  for (const Measurement& m : all) {
    const std::optional<double> kernel = KernelGbps(all, m.spec.mtu);
    const std::optional<double> ratio = Ratio(all, m);
    const std::string role = m.spec.is_kernel() ? "-" : RoleName(m);
    if (!m.ok()) {
      absl::StrAppendFormat(&out, kRow, m.spec.mode, absl::StrCat(m.spec.mtu),
                            role, "FAILED", "-", "-", "-", "-");
      continue;
    }
    absl::StrAppendFormat(&out, kRow, m.spec.mode, absl::StrCat(m.spec.mtu),
                          role, absl::StrFormat("%.2f", m.client.gbps),
                          absl::StrFormat("%.3f", m.CpuSecondsPerGb()),
                          absl::StrCat(m.client.retransmits),
                          kernel ? absl::StrFormat("%.2f", *kernel) : "-",
                          ratio ? absl::StrFormat("%.2f", *ratio) : "-");
  }
  return out;
}

std::string FormatJson(const std::vector<Measurement>& all) {
  std::vector<std::string> objects;
  for (const Measurement& m : all) objects.push_back(JsonObject(all, m));
  return absl::StrCat("[\n", absl::StrJoin(objects, ",\n"), "\n]\n");
}

}  // namespace netstack::tools::bench
