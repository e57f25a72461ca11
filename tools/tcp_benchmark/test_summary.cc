#include "tools/tcp_benchmark/test_summary.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/tcp_benchmark/json.h"
#include "tools/tcp_benchmark/report.h"

namespace netstack::tools::bench {

iperf3::TestResults LocalResults(
    const std::vector<std::unique_ptr<DataStream>>& streams, bool sender,
    const CpuUtil& cpu, Instant now) {
  iperf3::TestResults r;
  r.cpu_util_total = cpu.total;
  r.cpu_util_user = cpu.user;
  r.cpu_util_system = cpu.system;
  r.sender_has_retransmits = sender ? 1 : -1;
  for (const auto& s : streams) {
    iperf3::StreamResult sr;
    sr.id = s->id();
    sr.bytes = s->bytes();
    sr.retransmits = sender ? s->Retransmits() : 0;
    sr.start_time = 0;
    sr.end_time = s->Seconds(now);
    r.streams.push_back(sr);
  }
  return r;
}

absl::StatusOr<TestSummary> Summarize(const iperf3::TestResults& sender,
                                      const iperf3::TestResults& receiver) {
  if (sender.streams.size() != receiver.streams.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "results name ", receiver.streams.size(), " streams, expected ",
        sender.streams.size()));
  }
  TestSummary t;
  for (const iperf3::StreamResult& s : sender.streams) {
    auto r = std::find_if(
        receiver.streams.begin(), receiver.streams.end(),
        [&](const iperf3::StreamResult& x) { return x.id == s.id; });
    if (r == receiver.streams.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("results lack stream id ", s.id));
    }
    StreamSummary ss{s.id, s.bytes, s.end_time - s.start_time, s.retransmits,
                     r->bytes, r->end_time - r->start_time};
    t.sender_bytes += ss.sender_bytes;
    t.receiver_bytes += ss.receiver_bytes;
    t.retransmits += ss.retransmits;
    t.sender_seconds = std::max(t.sender_seconds, ss.sender_seconds);
    t.receiver_seconds = std::max(t.receiver_seconds, ss.receiver_seconds);
    t.streams.push_back(ss);
  }
  t.sender_cpu = {sender.cpu_util_total, sender.cpu_util_user,
                  sender.cpu_util_system};
  t.receiver_cpu = {receiver.cpu_util_total, receiver.cpu_util_user,
                    receiver.cpu_util_system};
  return t;
}

namespace {
std::string CpuText(const CpuUtil& c) {
  return absl::StrFormat("%.1f%% (%.1f%%u/%.1f%%s)", c.total, c.user, c.system);
}
}  // namespace

std::string FormatSummaryText(const TestSummary& t, bool local_is_sender) {
  std::string out = absl::StrCat(kSummarySeparator, "\n", kHeader,
                                 "         Retr\n");
  auto add = [&](const std::string& label, double sender_s, uint64_t sent,
                 uint64_t retr, double receiver_s, uint64_t received) {
    absl::StrAppend(&out, FormatLine(label, 0, sender_s, sent, retr, "sender"),
                    "\n");
    absl::StrAppend(&out,
                    FormatLine(label, 0, receiver_s, received, std::nullopt,
                               "             receiver"),
                    "\n");
  };
  for (const StreamSummary& s : t.streams) {
    add(StreamLabel(s.id), s.sender_seconds, s.sender_bytes, s.retransmits,
        s.receiver_seconds, s.receiver_bytes);
  }
  if (t.streams.size() > 1) {
    add("SUM", t.sender_seconds, t.sender_bytes, t.retransmits,
        t.receiver_seconds, t.receiver_bytes);
  }
  const CpuUtil& local = local_is_sender ? t.sender_cpu : t.receiver_cpu;
  const CpuUtil& remote = local_is_sender ? t.receiver_cpu : t.sender_cpu;
  absl::StrAppend(&out, "CPU Utilization: local/",
                  local_is_sender ? "sender " : "receiver ", CpuText(local),
                  ", remote/", local_is_sender ? "receiver " : "sender ",
                  CpuText(remote), "\n");
  return out;
}

std::string FormatSummaryJson(const TestSummary& t, const SummaryContext& c) {
  const double seconds = t.receiver_seconds > 0 ? t.receiver_seconds
                                                : t.sender_seconds;
  JsonWriter w;
  w.BeginObject();
  w.Key("role").String(c.role);
  w.Key("stack").String(c.stack);
  w.Key("net").String(c.net);
  w.Key("peer").String(c.peer);
  w.Key("reverse").Bool(c.reverse);
  w.Key("streams").Int(static_cast<int64_t>(t.streams.size()));
  w.Key("bytes").Uint(t.receiver_bytes);
  w.Key("sender_bytes").Uint(t.sender_bytes);
  w.Key("seconds").Double(seconds);
  w.Key("gbps").Double(seconds > 0 ? t.receiver_bytes * 8 / seconds / 1e9 : 0);
  w.Key("retransmits").Uint(t.retransmits);
  w.Key("sender_cpu_util").Double(t.sender_cpu.total);
  w.Key("receiver_cpu_util").Double(t.receiver_cpu.total);
  w.EndObject();
  return w.text();
}

}  // namespace netstack::tools::bench
