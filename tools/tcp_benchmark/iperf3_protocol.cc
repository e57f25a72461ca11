#include "tools/tcp_benchmark/iperf3_protocol.h"

#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace netstack::tools::bench::iperf3 {

std::string StateName(int8_t state) {
  switch (state) {
    case kTestStart: return "TEST_START";
    case kTestRunning: return "TEST_RUNNING";
    case kTestEnd: return "TEST_END";
    case kParamExchange: return "PARAM_EXCHANGE";
    case kCreateStreams: return "CREATE_STREAMS";
    case kServerTerminate: return "SERVER_TERMINATE";
    case kClientTerminate: return "CLIENT_TERMINATE";
    case kExchangeResults: return "EXCHANGE_RESULTS";
    case kDisplayResults: return "DISPLAY_RESULTS";
    case kIperfStart: return "IPERF_START";
    case kIperfDone: return "IPERF_DONE";
    case kAccessDenied: return "ACCESS_DENIED";
    case kServerError: return "SERVER_ERROR";
  }
  return absl::StrCat("unknown state ", state);
}

std::string MakeCookie(std::mt19937_64& rng) {
  // iperf3 draws from the base32 alphabet.
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::string cookie(kCookieSize, '\0');
  for (size_t i = 0; i + 1 < kCookieSize; ++i) {
    cookie[i] = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  }
  return cookie;
}

bool IsWellFormedCookie(std::string_view cookie) {
  if (cookie.size() != kCookieSize || cookie.back() != '\0') return false;
  for (size_t i = 0; i + 1 < kCookieSize; ++i) {
    if (cookie[i] < 0x21 || cookie[i] > 0x7e) return false;
  }
  return true;
}

int StreamId(int index) { return index == 0 ? 1 : index + 2; }

std::string EncodeParams(const TestParams& p) {
  JsonWriter w;
  w.BeginObject();
  w.Key("tcp").Bool(true);
  w.Key("omit").Int(p.omit);
  // iperf3 reads "time" as an int; the client keeps its own exact clock.
  w.Key("time").Int(static_cast<int64_t>(std::ceil(p.duration)));
  w.Key("num").Int(p.bytes);
  w.Key("blockcount").Int(p.blocks);
  w.Key("parallel").Int(p.parallel);
  if (p.reverse) w.Key("reverse").Bool(true);
  if (p.no_delay) w.Key("nodelay").Bool(true);
  if (p.window > 0) w.Key("window").Int(p.window);
  w.Key("len").Int(p.len);
  w.Key("pacing_timer").Int(1000);
  if (!p.congestion.empty()) w.Key("congestion").String(p.congestion);
  w.Key("client_version").String(kClientVersion);
  w.EndObject();
  return w.text();
}

namespace {

absl::Status BadParam(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("bad test parameters: ", what));
}

// Reads an optional integer member into `out`, checking [lo, hi].
absl::Status GetIntIn(const JsonValue& json, std::string_view key, int64_t lo,
                      int64_t hi, int64_t& out) {
  const JsonValue* v = json.Find(key);
  if (v == nullptr) return absl::OkStatus();
  std::optional<int64_t> i = json.GetInt(key);
  if (!i || *i < lo || *i > hi) {
    return BadParam(absl::StrCat("\"", std::string(key), "\" must be an integer in [",
                                 lo, ", ", hi, "]"));
  }
  out = *i;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TestParams> DecodeParams(const JsonValue& json) {
  if (!json.is_object()) return BadParam("not a JSON object");
  TestParams p;
  p.tcp = json.GetBool("tcp").value_or(false);
  p.udp = json.GetBool("udp").value_or(false);
  p.sctp = json.GetBool("sctp").value_or(false);
  p.reverse = json.GetBool("reverse").value_or(false);
  p.bidirectional = json.GetBool("bidirectional").value_or(false);
  p.no_delay = json.GetBool("nodelay").value_or(false);
  int64_t time = 10, omit = 0, parallel = 1;
  for (absl::Status s :
       {GetIntIn(json, "time", 0, 86400, time),
        GetIntIn(json, "omit", 0, 86400, omit),
        GetIntIn(json, "parallel", 1, 128, parallel),
        GetIntIn(json, "num", 0, int64_t{1} << 50, p.bytes),
        GetIntIn(json, "blockcount", 0, int64_t{1} << 40, p.blocks),
        GetIntIn(json, "len", 1, int64_t{1} << 30, p.len),
        GetIntIn(json, "window", 0, int64_t{1} << 31, p.window)}) {
    if (!s.ok()) return s;
  }
  p.duration = static_cast<double>(time);
  p.omit = static_cast<int>(omit);
  p.parallel = static_cast<int>(parallel);
  p.congestion = json.GetString("congestion").value_or("");
  p.client_version = json.GetString("client_version").value_or("");
  return p;
}

std::string EncodeResults(const TestResults& r) {
  JsonWriter w;
  w.BeginObject();
  w.Key("cpu_util_total").Double(r.cpu_util_total);
  w.Key("cpu_util_user").Double(r.cpu_util_user);
  w.Key("cpu_util_system").Double(r.cpu_util_system);
  w.Key("sender_has_retransmits").Int(r.sender_has_retransmits);
  if (!r.congestion_used.empty()) {
    w.Key("congestion_used").String(r.congestion_used);
  }
  w.Key("streams").BeginArray();
  for (const StreamResult& s : r.streams) {
    w.BeginObject();
    w.Key("id").Int(s.id);
    w.Key("bytes").Uint(s.bytes);
    w.Key("retransmits").Uint(s.retransmits);
    // UDP-only fields; iperf3 requires them for TCP too.
    w.Key("jitter").Int(0);
    w.Key("errors").Int(0);
    w.Key("omitted_errors").Int(0);
    w.Key("packets").Int(0);
    w.Key("omitted_packets").Int(0);
    w.Key("start_time").Double(s.start_time);
    w.Key("end_time").Double(s.end_time);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.text();
}

namespace {

absl::Status BadResults(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("bad results: ", what));
}

absl::StatusOr<StreamResult> DecodeStreamResult(const JsonValue& j) {
  if (!j.is_object()) return BadResults("a stream is not an object");
  std::optional<int64_t> id = j.GetInt("id");
  std::optional<double> bytes = j.GetNumber("bytes");
  std::optional<double> retransmits = j.GetNumber("retransmits");
  if (!id || !bytes || *bytes < 0 || !(*bytes < 1.8e19)) {
    return BadResults("a stream lacks a valid \"id\" or \"bytes\"");
  }
  StreamResult s;
  s.id = static_cast<int>(*id);
  s.bytes = static_cast<uint64_t>(*bytes);
  // A receiver writes -1 ("not known"), 3.12 as 2^64 - 1.
  if (retransmits && *retransmits > 0 && *retransmits < 1.8e19) {
    s.retransmits = static_cast<uint64_t>(*retransmits);
  }
  s.start_time = j.GetNumber("start_time").value_or(0);
  s.end_time = j.GetNumber("end_time").value_or(0);
  return s;
}

}  // namespace

absl::StatusOr<TestResults> DecodeResults(const JsonValue& json) {
  if (!json.is_object()) return BadResults("not a JSON object");
  TestResults r;
  std::optional<double> total = json.GetNumber("cpu_util_total");
  std::optional<double> user = json.GetNumber("cpu_util_user");
  std::optional<double> system = json.GetNumber("cpu_util_system");
  // iperf3 3.12 writes -1 as an unsigned 64-bit number
  // (18446744073709551615): anything but 0 and 1 means "not known".
  std::optional<double> has_retransmits =
      json.GetNumber("sender_has_retransmits");
  if (!total || !user || !system || !has_retransmits) {
    return BadResults("missing cpu_util_* or sender_has_retransmits");
  }
  r.cpu_util_total = *total;
  r.cpu_util_user = *user;
  r.cpu_util_system = *system;
  r.sender_has_retransmits =
      (*has_retransmits == 0 || *has_retransmits == 1)
          ? static_cast<int>(*has_retransmits)
          : -1;
  r.congestion_used = json.GetString("congestion_used").value_or("");
  const JsonValue* streams = json.Find("streams");
  if (streams == nullptr || !streams->is_array()) {
    return BadResults("missing \"streams\" array");
  }
  for (const JsonValue& j : streams->items()) {
    absl::StatusOr<StreamResult> s = DecodeStreamResult(j);
    if (!s.ok()) return s.status();
    r.streams.push_back(*s);
  }
  return r;
}

std::string EncodeState(int8_t state) {
  return std::string(1, static_cast<char>(state));
}

namespace {
void AppendBigEndian32(std::string& out, uint32_t v) {
  out += static_cast<char>(v >> 24);
  out += static_cast<char>(v >> 16);
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v);
}
}  // namespace

std::string EncodeJsonMessage(const std::string& json) {
  std::string out;
  AppendBigEndian32(out, static_cast<uint32_t>(json.size()));
  out += json;
  return out;
}

std::string EncodeServerError(int32_t iperf_errno, int32_t sys_errno) {
  std::string out = EncodeState(kServerError);
  AppendBigEndian32(out, static_cast<uint32_t>(iperf_errno));
  AppendBigEndian32(out, static_cast<uint32_t>(sys_errno));
  return out;
}

void FrameReader::Compact() {
  if (pos_ > 4096 && pos_ * 2 > buffer_.size()) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
}

std::optional<std::string> FrameReader::TakeBytes(size_t n) {
  if (buffered() < n) return std::nullopt;
  std::string out = buffer_.substr(pos_, n);
  pos_ += n;
  Compact();
  return out;
}

std::optional<int8_t> FrameReader::TakeState() {
  if (buffered() < 1) return std::nullopt;
  return static_cast<int8_t>(buffer_[pos_++]);
}

std::optional<int32_t> FrameReader::TakeInt32() {
  if (buffered() < 4) return std::nullopt;
  const auto* p = reinterpret_cast<const uint8_t*>(buffer_.data() + pos_);
  pos_ += 4;
  return static_cast<int32_t>((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
                              (uint32_t{p[2]} << 8) | uint32_t{p[3]});
}

absl::StatusOr<std::optional<JsonValue>> FrameReader::TakeJson() {
  if (buffered() < 4) return std::nullopt;
  const auto* p = reinterpret_cast<const uint8_t*>(buffer_.data() + pos_);
  const uint32_t length = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
                          (uint32_t{p[2]} << 8) | uint32_t{p[3]};
  if (length == 0 || length > kMaxJsonMessage) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON message length ", length, " out of range (1..",
                     kMaxJsonMessage, ")"));
  }
  if (buffered() < 4 + size_t{length}) return std::nullopt;
  std::string_view text(buffer_.data() + pos_ + 4, length);
  // cJSON stops at a NUL; some peers send one at the end.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    text = text.substr(0, nul);
  }
  absl::StatusOr<JsonValue> json = ParseJson(text);
  pos_ += 4 + size_t{length};
  Compact();
  if (!json.ok()) return json.status();
  return std::optional<JsonValue>(*std::move(json));
}

}  // namespace netstack::tools::bench::iperf3
