#include "tools/netstackd/control_api.h"

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "netstack/transport/address.h"
#include "netstack/transport/errors.h"
#include "tools/netstackd/counter_json.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {
namespace {

using bench::JsonValue;
using bench::JsonWriter;

std::string ErrorReply(int err, std::string_view why) {
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(false).Key("errno").Int(err);
  w.Key("error").String(why).EndObject();
  return w.text();
}

std::string ErrorReply(const absl::Status& s) {
  int e = transport::ErrnoOf(s);
  if (e == 0) e = EINVAL;
  return ErrorReply(e, std::string(s.message()));
}

std::string OkReply() { return "{\"ok\":true}"; }

// The names Linux's TCP_INFO tcpi_state takes (include/net/tcp_states.h),
// so that a scenario compares the same words for both DUTs.
const char* LinuxStateName(tcp::TcpState s) {
  switch (s) {
    case tcp::TcpState::kClosed: return "CLOSE";
    case tcp::TcpState::kListen: return "LISTEN";
    case tcp::TcpState::kSynSent: return "SYN_SENT";
    case tcp::TcpState::kSynReceived: return "SYN_RECV";
    case tcp::TcpState::kEstablished: return "ESTABLISHED";
    case tcp::TcpState::kFinWait1: return "FIN_WAIT1";
    case tcp::TcpState::kFinWait2: return "FIN_WAIT2";
    case tcp::TcpState::kCloseWait: return "CLOSE_WAIT";
    case tcp::TcpState::kClosing: return "CLOSING";
    case tcp::TcpState::kLastAck: return "LAST_ACK";
    case tcp::TcpState::kTimeWait: return "TIME_WAIT";
  }
  return "CLOSE";
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::vector<uint8_t>> FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = HexDigit(hex[2 * i]);
    const int lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

std::string ToHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

// The payload of a send: "data" (hex) or "size" bytes of 'a'..'z' (the
// Linux helper fills the same pattern).
std::optional<std::vector<uint8_t>> Payload(const JsonValue& req) {
  if (std::optional<std::string> hex = req.GetString("data")) {
    if (hex->size() / 2 > ControlApi::kMaxIo) return std::nullopt;
    return FromHex(*hex);
  }
  std::optional<int64_t> size = req.GetInt("size");
  if (!size || *size < 0 || *size > static_cast<int64_t>(ControlApi::kMaxIo)) {
    return std::nullopt;
  }
  std::vector<uint8_t> out(static_cast<size_t>(*size));
  for (size_t i = 0; i < out.size(); ++i) out[i] = 'a' + i % 26;
  return out;
}

std::optional<transport::SocketAddress> Address(const JsonValue& req) {
  std::optional<std::string> addr = req.GetString("addr");
  std::optional<int64_t> port = req.GetInt("port");
  if (!addr || !port || *port < 0 || *port > 65535) return std::nullopt;
  std::optional<transport::IpAddress> ip = transport::IpAddress::Parse(*addr);
  if (!ip) return std::nullopt;
  return transport::SocketAddress{*ip, static_cast<uint16_t>(*port)};
}

void WriteAddress(JsonWriter& w, const transport::SocketAddress& a) {
  w.Key("addr").String(a.ip.ToString()).Key("port").Uint(a.port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlApi>> ControlApi::Create(
    eventloop::EventLoop& loop, tcp::TcpLayer& tcp, udp::UdpLayer& udp,
    std::function<std::string()> counters, const std::string& path) {
  std::unique_ptr<ControlApi> api(new ControlApi(tcp, udp, std::move(counters)));
  ControlApi* raw = api.get();
  JsonLinesServer::Options o;
  o.flag = "--control";
  o.max_line = kMaxLine;
  o.max_output = kMaxOutput;
  o.max_clients = kMaxClients;
  o.max_lines_per_wakeup = kMaxLinesPerWakeup;
  o.handle = [raw](std::string_view line, Instant now) {
    return raw->Handle(line, now);
  };
  o.too_long = [raw] {
    ++raw->errors_;
    return ErrorReply(EMSGSIZE, "request too long");
  };
  absl::StatusOr<std::unique_ptr<JsonLinesServer>> server =
      JsonLinesServer::Create(loop, path, std::move(o));
  if (!server.ok()) return server.status();
  api->server_ = *std::move(server);
  return api;
}

ControlApi::ControlApi(tcp::TcpLayer& tcp, udp::UdpLayer& udp,
                       std::function<std::string()> counters)
    : tcp_(tcp), udp_(udp), counter_text_(std::move(counters)) {}

ControlApi::~ControlApi() {
  server_.reset();
  sockets_.clear();  // closes them (their connections live on in the layer)
}

int ControlApi::AddSocket(Socket s) {
  const int fd = next_fd_++;
  sockets_.emplace(fd, std::move(s));
  return fd;
}

std::string ControlApi::Fail(int err, std::string_view why) {
  ++errors_;
  return ErrorReply(err, why);
}

std::string ControlApi::Fail(const absl::Status& s) {
  ++errors_;
  return ErrorReply(s);
}

std::string ControlApi::Handle(std::string_view line, Instant now) {
  ++requests_;
  absl::StatusOr<JsonValue> parsed = bench::ParseJson(line);
  if (!parsed.ok() || !parsed->is_object()) {
    return Fail(EINVAL, "a request is one JSON object");
  }
  const JsonValue& req = *parsed;
  const std::optional<std::string> op = req.GetString("op");
  if (!op) return Fail(EINVAL, "no \"op\"");
  if (*op == "socket") return OpenSocket(req);
  if (*op == "reset") return Reset();
  if (*op == "counters") return Counters();

  // Everything else names a socket (an unknown op is said so, whether or
  // not it names one).
  struct SocketOp {
    std::string_view name;
    std::string (ControlApi::*handle)(const SocketRequest& r);
  };
  static constexpr SocketOp kSocketOps[] = {
      {"close", &ControlApi::CloseSocket},
      {"bind", &ControlApi::BindOrConnect},
      {"connect", &ControlApi::BindOrConnect},
      {"listen", &ControlApi::Listen},
      {"accept", &ControlApi::Accept},
      {"send", &ControlApi::Send},
      {"sendto", &ControlApi::Send},
      {"recv", &ControlApi::Recv},
      {"shutdown", &ControlApi::Shutdown},
      {"poll", &ControlApi::Poll},
      {"info", &ControlApi::Info},
      {"getsockopt", &ControlApi::GetSockOpt},
      {"setsockopt", &ControlApi::SetSockOpt}};
  const SocketOp* found = std::find_if(
      std::begin(kSocketOps), std::end(kSocketOps),
      [&](const SocketOp& o) { return o.name == *op; });
  if (found == std::end(kSocketOps)) {
    return Fail(EINVAL, absl::StrCat("unknown op '", *op, "'"));
  }
  const std::optional<int64_t> fd = req.GetInt("fd");
  auto it = fd ? sockets_.find(static_cast<int>(*fd)) : sockets_.end();
  if (it == sockets_.end()) return Fail(EBADF, "no such fd");
  return (this->*found->handle)(SocketRequest{*op, req, it, now});
}

std::string ControlApi::OpenSocket(const JsonValue& req) {
  const std::optional<int64_t> family = req.GetInt("family");
  const std::optional<std::string> proto = req.GetString("proto");
  if (!family || (*family != 4 && *family != 6)) {
    return Fail(EAFNOSUPPORT, "family is 4 or 6");
  }
  if (sockets_.size() >= kMaxSockets) return Fail(EMFILE, "too many sockets");
  const transport::Family f =
      *family == 4 ? transport::Family::kIpv4 : transport::Family::kIpv6;
  Socket s;
  if (proto && *proto == "tcp") {
    s.tcp = tcp_.Open(f);
  } else if (proto && *proto == "udp") {
    s.udp = udp_.Open(f);
  } else {
    return Fail(EPROTONOSUPPORT, "proto is tcp or udp");
  }
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true).Key("fd").Int(AddSocket(std::move(s)));
  w.EndObject();
  return w.text();
}

std::string ControlApi::Reset() {
  for (auto& [fd, s] : sockets_) {
    if (s.tcp) s.tcp->Abort();
  }
  sockets_.clear();
  return OkReply();
}

std::string ControlApi::Counters() {
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true).Key("counters").BeginObject();
  const std::string text = counter_text_ ? counter_text_() : std::string();
  WriteCounterText(w, text, /*keep_text=*/false);
  w.EndObject().EndObject();
  return w.text();
}

std::string ControlApi::CloseSocket(const SocketRequest& r) {
  Socket& s = r.it->second;
  if (s.tcp && s.linger_zero) s.tcp->Abort();
  if (s.tcp) s.tcp->Close();
  if (s.udp) s.udp->Close();
  sockets_.erase(r.it);
  return OkReply();
}

std::string ControlApi::BindOrConnect(const SocketRequest& r) {
  Socket& s = r.it->second;
  std::optional<transport::SocketAddress> a = Address(r.req);
  if (!a) return Fail(EINVAL, "addr and port");
  absl::Status st;
  if (r.op == "bind") {
    st = s.tcp ? s.tcp->Bind(*a) : s.udp->Bind(*a);
  } else {
    st = s.tcp ? s.tcp->Connect(*a) : s.udp->Connect(*a);
  }
  return st.ok() ? OkReply() : Fail(st);
}

std::string ControlApi::Listen(const SocketRequest& r) {
  Socket& s = r.it->second;
  if (!s.tcp) return Fail(EOPNOTSUPP, "listen on UDP");
  const int64_t backlog = r.req.GetInt("backlog").value_or(16);
  if (backlog < 0) return Fail(EINVAL, "backlog");
  absl::Status st = s.tcp->Listen(static_cast<uint32_t>(backlog));
  return st.ok() ? OkReply() : Fail(st);
}

std::string ControlApi::Accept(const SocketRequest& r) {
  Socket& s = r.it->second;
  if (!s.tcp) return Fail(EOPNOTSUPP, "accept on UDP");
  absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> c = s.tcp->Accept();
  if (!c.ok()) return Fail(c.status());
  const transport::SocketAddress remote = (*c)->remote_address();
  Socket child;
  child.tcp = std::move(*c);
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true);
  w.Key("fd").Int(AddSocket(std::move(child)));
  WriteAddress(w, remote);
  w.EndObject();
  return w.text();
}

std::string ControlApi::Send(const SocketRequest& r) {
  Socket& s = r.it->second;
  std::optional<std::vector<uint8_t>> data = Payload(r.req);
  if (!data) return Fail(EINVAL, "data (hex) or size");
  size_t n = 0;
  if (s.tcp) {
    if (data->empty()) return Fail(EINVAL, "empty send");
    absl::StatusOr<size_t> written = s.tcp->Write(*data);
    if (!written.ok()) return Fail(written.status());
    n = *written;
  } else {
    absl::Status st;
    if (r.op == "sendto") {
      std::optional<transport::SocketAddress> a = Address(r.req);
      if (!a) return Fail(EINVAL, "addr and port");
      st = s.udp->SendTo(*data, *a, r.now);
    } else {
      st = s.udp->Send(*data, r.now);
    }
    if (!st.ok()) return Fail(st);
    n = data->size();
  }
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true).Key("n").Uint(n).EndObject();
  return w.text();
}

std::string ControlApi::Recv(const SocketRequest& r) {
  Socket& s = r.it->second;
  const int64_t len = r.req.GetInt("len").value_or(65536);
  if (len < 0 || len > static_cast<int64_t>(kMaxIo)) {
    return Fail(EINVAL, "len");
  }
  std::vector<uint8_t> buf(static_cast<size_t>(len));
  JsonWriter w;
  if (s.tcp) {
    absl::StatusOr<size_t> read = s.tcp->Read(buf);
    if (!read.ok()) return Fail(read.status());
    w.BeginObject().Key("ok").Bool(true).Key("n").Uint(*read);
    w.Key("data").String(ToHex(std::span<const uint8_t>(buf.data(), *read)));
  } else {
    absl::StatusOr<udp::RecvResult> got = s.udp->RecvFrom(buf);
    if (!got.ok()) return Fail(got.status());
    w.BeginObject().Key("ok").Bool(true).Key("n").Uint(got->bytes);
    w.Key("data").String(
        ToHex(std::span<const uint8_t>(buf.data(), got->bytes)));
    WriteAddress(w, got->from);
  }
  w.EndObject();
  return w.text();
}

std::string ControlApi::Shutdown(const SocketRequest& r) {
  Socket& s = r.it->second;
  if (!s.tcp) return Fail(EOPNOTSUPP, "shutdown on UDP");
  const std::string how = r.req.GetString("how").value_or("");
  const bool rd = how == "rd" || how == "rdwr";
  const bool wr = how == "wr" || how == "rdwr";
  if (!rd && !wr) return Fail(EINVAL, "how is rd, wr or rdwr");
  absl::Status st = s.tcp->Shutdown(rd, wr);
  return st.ok() ? OkReply() : Fail(st);
}

std::string ControlApi::Poll(const SocketRequest& r) {
  Socket& s = r.it->second;
  const uint32_t ev = s.tcp ? s.tcp->Events() : s.udp->Events();
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true);
  w.Key("readable").Bool(ev & transport::event::kReadable);
  w.Key("writable").Bool(ev & transport::event::kWritable);
  w.Key("error").Bool(ev & transport::event::kError);
  w.Key("hup").Bool(ev & transport::event::kHangup);
  w.EndObject();
  return w.text();
}

std::string ControlApi::Info(const SocketRequest& r) {
  Socket& s = r.it->second;
  if (!s.tcp) return Fail(EOPNOTSUPP, "info on UDP");
  const tcp::TcpInfo i = s.tcp->Info();
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true);
  w.Key("state").String(LinuxStateName(s.tcp->state()));
  w.Key("rto_ms").Int(absl::ToInt64Milliseconds(i.rto));
  w.Key("snd_mss").Uint(i.mss);
  w.Key("rcv_wnd").Uint(i.rcv_wnd);
  w.Key("snd_wnd").Uint(i.snd_wnd);
  w.Key("retransmits").Uint(i.retransmits);
  w.Key("timeouts").Uint(i.timeouts);
  w.Key("sack").Bool(i.sack).Key("timestamps").Bool(i.timestamps);
  w.Key("snd_wscale").Uint(i.snd_wscale).Key("rcv_wscale").Uint(i.rcv_wscale);
  w.EndObject();
  return w.text();
}

std::string ControlApi::GetSockOpt(const SocketRequest& r) {
  Socket& s = r.it->second;
  const std::string opt = r.req.GetString("opt").value_or("");
  if (opt != "error") return Fail(ENOPROTOOPT, "getsockopt: error only");
  const absl::Status e = s.tcp ? s.tcp->TakeError() : s.udp->TakeError();
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true);
  w.Key("value").Int(e.ok() ? 0 : transport::ErrnoOf(e)).EndObject();
  return w.text();
}

std::string ControlApi::SetSockOpt(const SocketRequest& r) {
  Socket& s = r.it->second;
  const std::string opt = r.req.GetString("opt").value_or("");
  const int64_t value = r.req.GetInt("value").value_or(0);
  if (!s.tcp) return Fail(ENOPROTOOPT, "setsockopt: TCP only");
  if (opt == "nodelay") {
    s.tcp->SetNoDelay(value != 0);
  } else if (opt == "cork") {
    s.tcp->SetCork(value != 0);
  } else if (opt == "user_timeout") {
    if (value < 0) return Fail(EINVAL, "user_timeout");
    s.tcp->SetUserTimeout(absl::Milliseconds(value));
  } else if (opt == "keepalive") {
    const int64_t idle = r.req.GetInt("idle").value_or(7200);
    const int64_t interval = r.req.GetInt("interval").value_or(75);
    const int64_t count = r.req.GetInt("count").value_or(9);
    if (idle <= 0 || interval <= 0 || count <= 0) {
      return Fail(EINVAL, "keepalive idle, interval and count");
    }
    s.tcp->SetKeepalive(value != 0, absl::Seconds(idle),
                        absl::Seconds(interval), static_cast<uint32_t>(count));
  } else if (opt == "linger") {
    const int64_t seconds = r.req.GetInt("seconds").value_or(0);
    if (value != 0 && seconds != 0) {
      return Fail(ENOPROTOOPT, "linger: only 0 seconds (abort on close)");
    }
    s.linger_zero = value != 0;
  } else if (opt == "rcvbuf" || opt == "window_clamp") {
    if (value <= 0 || value > (1 << 30)) return Fail(EINVAL, opt);
    tcp::ConnectionOptions o = s.tcp->options();
    o.receive_buffer = static_cast<uint32_t>(value);
    o.max_receive_buffer = static_cast<uint32_t>(value);
    o.receive_autotuning = false;
    absl::Status st = s.tcp->SetOptions(o);
    if (!st.ok()) return Fail(st);
  } else {
    return Fail(ENOPROTOOPT, absl::StrCat("setsockopt: unknown '", opt, "'"));
  }
  return OkReply();
}

std::string ControlApi::FormatCounters() const {
  return absl::StrCat(
      "control.requests ", requests_, "\n", "control.errors ", errors_, "\n",
      "control.sockets ", sockets_.size(), "\n", "control.closed_slow_clients ",
      server_ ? server_->closed_slow_clients() : 0, "\n");
}

}  // namespace netstack::tools
