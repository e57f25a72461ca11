#include "tools/tcp_benchmark/request_response.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "netstack/transport/errors.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools::bench {

namespace {

// How often the client looks at the clock for the end of the duration and
// for a response that is late; the end itself is scheduled exactly.
constexpr Duration kTick = absl::Milliseconds(20);
constexpr uint8_t kRequest = 'q';
constexpr uint8_t kResponse = 'r';

struct UdpAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;
};

UdpAddress ToUdpAddress(const transport::SocketAddress& a) {
  UdpAddress out;
  if (a.ip.is_v4()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&out.storage);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(a.port);
    std::memcpy(&sin->sin_addr, a.ip.v4().bytes.data(), 4);
    out.len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(a.port);
    std::memcpy(&sin6->sin6_addr, a.ip.v6().bytes.data(), 16);
    out.len = sizeof(sockaddr_in6);
  }
  return out;
}

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

double PercentileUs(std::vector<uint32_t>& ns, double q) {
  if (ns.empty()) return 0;
  const size_t k = std::min(ns.size() - 1, static_cast<size_t>(q * ns.size()));
  std::nth_element(ns.begin(), ns.begin() + k, ns.end());
  return ns[k] / 1e3;
}

const char* RrModeName(RrMode mode) {
  switch (mode) {
    case RrMode::kRr:
      return "rr";
    case RrMode::kCrr:
      return "crr";
    case RrMode::kUdpRr:
      return "udp-rr";
  }
  return "?";
}

std::string FormatRrText(const RrResult& r) {
  return absl::StrFormat(
      "%s: %d transactions in %.2f s (%d connection%s): %.1f trans/s, mean "
      "%.1f us, p50 %.1f us, p99 %.1f us, max %.1f us%s\n",
      RrModeName(r.mode), r.transactions, r.seconds, r.connections,
      r.connections == 1 ? "" : "s", r.transactions_per_second(), r.mean_us(),
      r.p50_us, r.p99_us, r.max_us,
      r.mode == RrMode::kUdpRr ? absl::StrCat(", ", r.lost, " lost") : "");
}

std::string FormatRrJson(const RrResult& r, const std::string& server,
                         const std::string& stack) {
  JsonWriter w;
  w.BeginObject();
  w.Key("mode").String(RrModeName(r.mode));
  w.Key("server").String(server);
  w.Key("stack").String(stack);
  w.Key("transactions").Uint(r.transactions);
  w.Key("connections").Uint(r.connections);
  w.Key("bytes_sent").Uint(r.bytes_sent);
  w.Key("bytes_received").Uint(r.bytes_received);
  w.Key("lost").Uint(r.lost);
  w.Key("seconds").Double(r.seconds);
  w.Key("transactions_per_second").Double(r.transactions_per_second());
  w.Key("mean_us").Double(r.mean_us());
  w.Key("p50_us").Double(r.p50_us);
  w.Key("p99_us").Double(r.p99_us);
  w.Key("max_us").Double(r.max_us);
  w.EndObject();
  return w.text();
}

// --- RrClient ---

RrClient::RrClient(Net& net, RrClientOptions options,
                   absl::AnyInvocable<void()> on_done)
    : net_(net),
      loop_(net.loop()),
      options_(std::move(options)),
      on_done_(std::move(on_done)),
      tick_([this](Instant now) { OnTick(now); }) {
  figures_.mode = options_.mode;
}

absl::Status RrClient::Start() {
  if (!(options_.duration > 0)) {
    return absl::InvalidArgumentError("--duration must be positive");
  }
  start_ = loop_.Now();
  end_ = start_ + absl::Seconds(options_.duration);
  latencies_ns_.reserve(1 << 16);
  if (absl::Status s = Connect(); !s.ok()) return s;
  loop_.timers().Schedule(tick_, std::min(end_, start_ + kTick));
  return absl::OkStatus();
}

void RrClient::Interrupt() { Finish(absl::AbortedError("interrupted")); }

absl::Status RrClient::Connect() {
  // Before the call: a kernel connect() to a local peer does much of the
  // handshake inside the call.
  transaction_start_ = loop_.Now();
  absl::StatusOr<std::unique_ptr<Stream>> stream =
      net_.Connect(options_.server, options_.stream_options);
  if (!stream.ok()) return stream.status();
  retired_ = std::move(stream_);  // not running: its handler returned
  stream_ = *std::move(stream);
  connected_ = false;
  ++figures_.connections;
  stream_->SetHandler([this](uint32_t bits) { OnReady(bits); });
  return absl::OkStatus();
}

void RrClient::OnReady(uint32_t bits) {
  if (done_) return;
  if (absl::Status s = Step(bits); !s.ok()) Finish(s);
}

absl::Status RrClient::SendRequest() {
  transaction_start_ = loop_.Now();
  const uint8_t request = kRequest;
  absl::StatusOr<size_t> n = stream_->Write({&request, 1});
  if (!n.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "request ", figures_.transactions + 1, ": ", n.status().message()));
  }
  if (*n != 1) {
    // One byte in flight and an empty send buffer: cannot happen on a
    // working stack.
    return absl::InternalError("a 1-byte request was not taken");
  }
  ++figures_.bytes_sent;
  awaiting_response_ = true;
  return absl::OkStatus();
}

absl::Status RrClient::Step(uint32_t bits) {
  if (!connected_) {
    if (bits & (ready::kError | ready::kHangup)) {
      std::array<uint8_t, 1> probe;
      absl::StatusOr<size_t> r = stream_->Read(probe);
      return absl::UnavailableError(absl::StrCat(
          "connect ", figures_.connections, " to ", options_.server.ToString(),
          " failed: ", r.ok() ? "hung up" : r.status().message()));
    }
    if (!(bits & ready::kWritable)) return absl::OkStatus();
    connected_ = true;
    stream_->WantWritable(false);
    // CRR's transaction began at the connect; RR's begins now.
    const Instant began = transaction_start_;
    if (absl::Status s = SendRequest(); !s.ok()) return s;
    if (options_.mode == RrMode::kCrr) transaction_start_ = began;
    return absl::OkStatus();
  }
  if (!(bits & (ready::kReadable | ready::kError | ready::kHangup))) {
    return absl::OkStatus();
  }
  std::array<uint8_t, 16> in;
  absl::StatusOr<size_t> n = stream_->Read(in);
  if (!n.ok()) {
    if (transport::IsWouldBlock(n.status())) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("waiting for response ",
                                               figures_.transactions + 1, ": ",
                                               n.status().message()));
  }
  if (*n == 0) {
    return absl::UnavailableError(
        absl::StrCat("the server closed the connection after ",
                     figures_.transactions, " transactions"));
  }
  if (!awaiting_response_ || *n != 1 || in[0] != kResponse) {
    return absl::DataLossError(absl::StrCat(
        "the server sent ", *n, " bytes where ",
        awaiting_response_ ? "a 1-byte response" : "nothing",
        " was due (is it an RR server: tcp_benchmark --role=server --rr?)"));
  }
  figures_.bytes_received += 1;
  awaiting_response_ = false;
  const Instant now = loop_.Now();
  if (now > end_) {
    // Past the duration: the request was sent in time, but the
    // transaction does not count.
    Finish(absl::OkStatus());
    return absl::OkStatus();
  }
  ++figures_.transactions;
  latencies_ns_.push_back(static_cast<uint32_t>(std::min<int64_t>(
      absl::ToInt64Nanoseconds(now - transaction_start_), UINT32_MAX)));
  if (options_.mode == RrMode::kRr) return SendRequest();
  stream_->Close();
  connected_ = false;
  return Connect();
}

void RrClient::OnTick(Instant now) {
  if (done_) return;
  const bool waiting = awaiting_response_ || !connected_;
  if (waiting && now - transaction_start_ > options_.response_timeout) {
    return Finish(absl::DeadlineExceededError(absl::StrCat(
        awaiting_response_ ? "no response to request " : "connect ",
        awaiting_response_ ? figures_.transactions + 1 : figures_.connections,
        awaiting_response_ ? "" : " did not complete", " within ",
        absl::FormatDuration(options_.response_timeout), " (server ",
        options_.server.ToString(), ")")));
  }
  if (now >= end_ && !awaiting_response_) return Finish(absl::OkStatus());
  // After the end, only the last response is awaited (until its timeout).
  loop_.timers().Schedule(
      tick_, now >= end_ ? now + kTick : std::min(end_, now + kTick));
}

void RrClient::Finish(absl::Status status) {
  if (done_) return;
  done_ = true;
  loop_.timers().Cancel(tick_);
  if (stream_) stream_->Close();
  if (status.ok() && figures_.transactions == 0) {
    status = absl::UnavailableError("no transaction completed");
  }
  if (status.ok()) {
    figures_.seconds = absl::ToDoubleSeconds(end_ - start_);
    figures_.p50_us = PercentileUs(latencies_ns_, 0.50);
    figures_.p99_us = PercentileUs(latencies_ns_, 0.99);
    figures_.max_us =
        *std::max_element(latencies_ns_.begin(), latencies_ns_.end()) / 1e3;
    result_ = figures_;
  } else {
    result_ = status;
  }
  on_done_();
}

// --- UDP_RR ---

absl::StatusOr<RrResult> RunUdpRrClient(const UdpRrOptions& options) {
  if (!(options.duration > 0)) {
    return absl::InvalidArgumentError("--duration must be positive");
  }
  const UdpAddress server = ToUdpAddress(options.server);
  const int fd = socket(server.storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "UDP_RR: socket");
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (connect(fd, reinterpret_cast<const sockaddr*>(&server.storage),
              server.len) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("UDP_RR: connect to ", options.server.ToString()));
  }
  // A blocking recv() that gives up after the timeout (EAGAIN): one
  // system call per wait, as netperf's, not a poll() before each read.
  const int64_t timeout_us =
      std::max<int64_t>(1, absl::ToInt64Microseconds(options.response_timeout));
  timeval tv{static_cast<time_t>(timeout_us / 1'000'000),
             static_cast<suseconds_t>(timeout_us % 1'000'000)};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
    return absl::ErrnoToStatus(errno, "UDP_RR: SO_RCVTIMEO");
  }
  RrResult r;
  r.mode = RrMode::kUdpRr;
  r.connections = 1;
  std::vector<uint32_t> latencies_ns;
  latencies_ns.reserve(1 << 16);
  const int64_t start = MonotonicNs();
  const int64_t end =
      start + static_cast<int64_t>(options.duration * 1'000'000'000);
  uint8_t sequence = 0;
  auto failed = [&](const char* what) {
    const int error = errno;
    return absl::UnavailableError(absl::StrCat(
        "UDP_RR: ", what, " request ", r.transactions + r.lost + 1, " to ",
        options.server.ToString(), ": ", std::strerror(error),
        error == ECONNREFUSED ? " (no UDP_RR server on that port?)" : ""));
  };
  while (true) {
    const int64_t sent_at = MonotonicNs();
    if (sent_at >= end) break;
    const uint8_t request = ++sequence;
    if (send(fd, &request, 1, 0) != 1) {
      if (errno == EINTR) continue;
      return failed("sending");
    }
    ++r.bytes_sent;
    while (true) {
      uint8_t response[64];
      const ssize_t n = recv(fd, response, sizeof(response), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        ++r.lost;
        break;
      }
      if (n < 0) return failed("waiting for the answer to");
      r.bytes_received += n;
      if (n == 1 && response[0] == request) {
        ++r.transactions;
        latencies_ns.push_back(static_cast<uint32_t>(
            std::min<int64_t>(MonotonicNs() - sent_at, UINT32_MAX)));
        break;
      }
      // Another request's late answer: not this one's.
    }
  }
  r.seconds = (MonotonicNs() - start) / 1e9;
  if (r.transactions == 0) {
    return absl::UnavailableError(absl::StrCat(
        "UDP_RR: no answer from ", options.server.ToString(), " to ", r.lost,
        " requests within ", absl::FormatDuration(options.response_timeout),
        " each"));
  }
  r.p50_us = PercentileUs(latencies_ns, 0.50);
  r.p99_us = PercentileUs(latencies_ns, 0.99);
  r.max_us = *std::max_element(latencies_ns.begin(), latencies_ns.end()) / 1e3;
  return r;
}

UdpRrServer::UdpRrServer(eventloop::EventLoop& loop,
                         transport::SocketAddress local)
    : loop_(loop), local_(local) {}

UdpRrServer::~UdpRrServer() { Stop(); }

absl::Status UdpRrServer::Start() {
  const UdpAddress local = ToUdpAddress(local_);
  fd_ = socket(local.storage.ss_family,
               SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return absl::ErrnoToStatus(errno, "UDP_RR server: socket");
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&local.storage),
           local.len) != 0) {
    const int error = errno;
    Stop();
    return absl::ErrnoToStatus(
        error, absl::StrCat("UDP_RR server: bind ", local_.ToString()));
  }
  if (absl::Status s = loop_.Add(fd_, eventloop::EventLoop::kReadable, this);
      !s.ok()) {
    Stop();
    return s;
  }
  return absl::OkStatus();
}

void UdpRrServer::Stop() {
  if (fd_ < 0) return;
  if (loop_.IsRegistered(fd_)) (void)loop_.Remove(fd_);
  close(fd_);
  fd_ = -1;
}

void UdpRrServer::OnReadable(Instant) {
  // Level-triggered: what is left after a bounded batch wakes the loop
  // again, so one busy client does not hold the loop.
  for (int i = 0; i < 64; ++i) {
    uint8_t datagram[2048];
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const ssize_t n = recvfrom(fd_, datagram, sizeof(datagram), 0,
                               reinterpret_cast<sockaddr*>(&peer), &len);
    if (n < 0) return;  // EAGAIN, or an ICMP error of an earlier answer
    if (sendto(fd_, datagram, n, 0, reinterpret_cast<sockaddr*>(&peer),
               len) == n) {
      ++datagrams_;
    }
  }
}

// --- RrServer ---

RrServer::RrServer(Net& net, transport::SocketAddress local,
                   StreamOptions options, std::FILE* progress)
    : net_(net),
      local_(local),
      options_(std::move(options)),
      progress_(progress) {}

RrServer::~RrServer() { Stop(); }

absl::Status RrServer::Start() {
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      net_.Listen(local_, options_);
  if (!listener.ok()) return listener.status();
  listener_ = *std::move(listener);
  listener_->SetHandler([this] { OnAccept(); });
  std::fprintf(progress_,
               "RR server listening on %s (answers 1 byte per byte: --rr and "
               "--crr clients)\n",
               local_.ToString().c_str());
  std::fflush(progress_);
  return absl::OkStatus();
}

void RrServer::Stop() {
  listener_.reset();
  for (Session& s : sessions_) s.stream->Close();
  sessions_.clear();
  retired_.clear();
}

void RrServer::OnAccept() {
  retired_.clear();  // none of their handlers is running now
  while (listener_) {
    absl::StatusOr<std::unique_ptr<Stream>> stream = listener_->Accept();
    if (!stream.ok()) {
      if (!transport::IsWouldBlock(stream.status())) {
        std::fprintf(progress_, "RR server: accept: %s\n",
                     std::string(stream.status().message()).c_str());
      }
      return;
    }
    ++connections_;
    sessions_.push_front(Session{*std::move(stream)});
    auto it = sessions_.begin();
    it->stream->SetHandler([this, it](uint32_t bits) { OnReady(it, bits); });
  }
}

void RrServer::OnReady(std::list<Session>::iterator it, uint32_t bits) {
  static constexpr std::array<uint8_t, 256> kResponses = [] {
    std::array<uint8_t, 256> a{};
    a.fill(kResponse);
    return a;
  }();
  Session& s = *it;
  bool eof = false;
  if (bits & (ready::kReadable | ready::kError | ready::kHangup)) {
    std::array<uint8_t, 256> in;
    while (true) {
      absl::StatusOr<size_t> n = s.stream->Read(in);
      if (!n.ok() && transport::IsWouldBlock(n.status())) break;
      if (!n.ok() || *n == 0) {
        eof = true;
        break;
      }
      s.owed += *n;
      if (*n < in.size()) break;
    }
  }
  while (s.owed > 0) {
    absl::StatusOr<size_t> n = s.stream->Write(
        {kResponses.data(), std::min<size_t>(s.owed, kResponses.size())});
    if (!n.ok() && transport::IsWouldBlock(n.status())) break;
    if (!n.ok()) {
      eof = true;
      break;
    }
    s.owed -= *n;
    bytes_answered_ += *n;
  }
  if (eof) return Retire(it);
  s.stream->WantWritable(s.owed > 0);
}

void RrServer::Retire(std::list<Session>::iterator it) {
  it->stream->Close();
  // splice keeps `it` valid: the closed stream calls no handler again.
  retired_.splice(retired_.end(), sessions_, it);
}

}  // namespace netstack::tools::bench
