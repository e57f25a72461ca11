#include "tools/splice_proxy/forwarder.h"

#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/splice_proxy/log.h"

namespace netstack::tools {
namespace {

using eventloop::EventLoop;

// Backoff of the connect retries to a UNIX target whose backlog is full
// (a non-blocking connect() to a UNIX socket answers EAGAIN then, instead
// of EINPROGRESS: there is nothing to wait for in epoll).
constexpr Duration kFirstUnixRetry = absl::Milliseconds(2);
constexpr Duration kMaxUnixRetry = absl::Milliseconds(100);
// At most one "pausing accepts" message per this interval.
constexpr Duration kPauseLogInterval = absl::Seconds(5);

std::string ErrnoText(int err) { return std::strerror(err); }

// A hint for the errors people meet when they listen somewhere.
std::string ListenHint(const SocketAddress& address, int err) {
  switch (err) {
    case EADDRINUSE:
      return address.is_unix() ? "" : " (another socket listens on this port)";
    case EACCES:
      return address.is_unix()
                 ? ""
                 : " (ports below 1024 need CAP_NET_BIND_SERVICE)";
    case EADDRNOTAVAIL:
      return " (no local interface has this address)";
    case ENOENT:
      return " (the directory does not exist)";
    default:
      return "";
  }
}

}  // namespace

// One accepted client: its connect to the target, then its relay.
class Forwarder::Connection final : public eventloop::Handler {
 public:
  Connection(Forwarder& owner, uint64_t id, int client_fd, SocketAddress peer)
      : owner_(owner),
        id_(id),
        peer_(std::move(peer)),
        client_fd_(client_fd),
        timer_([this](Instant now) { OnTimer(now); }) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() override {
    Unregister();
    CloseFds();
  }

  uint64_t id() const { return id_; }
  bool connecting() const { return phase_ == Phase::kConnecting; }
  bool done() const { return phase_ == Phase::kDone; }
  // The relay while relaying (and after, until Reap).
  const forward::Relay* relay() const { return relay_.get(); }

  // Creates the target socket and starts connecting.
  void Start(Instant now);
  // Closes it now, counted as aborted (shutdown).
  void Abort();

  void OnWritable(Instant now) override { CheckConnect(); }
  void OnError(Instant now, uint32_t epoll_events) override { CheckConnect(); }

 private:
  enum class Phase { kConnecting, kRelaying, kDone };

  std::string Prefix() const {
    return absl::StrCat("#", id_, " from ", peer_.ToString());
  }
  void Attempt(Instant now);
  void OnTimer(Instant now);
  void CheckConnect();
  void Connected();
  // The target cannot be reached: reset the client, log `why`.
  void Fail(const std::string& why);
  void OnRelayDone(forward::Relay& relay, const absl::Status& status);
  void Unregister();
  void CloseFds();

  Forwarder& owner_;
  const uint64_t id_;
  const SocketAddress peer_;
  int client_fd_;
  int server_fd_ = -1;
  bool registered_ = false;  // server_fd_ is in the loop (connecting)
  Phase phase_ = Phase::kConnecting;
  Instant deadline_;
  Duration retry_delay_ = kFirstUnixRetry;
  eventloop::Timer timer_;
  std::unique_ptr<forward::Relay> relay_;
};

void Forwarder::Connection::Start(Instant now) {
  const SocketAddress& target = owner_.options_.target;
  server_fd_ =
      socket(target.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (server_fd_ < 0) {
    const int err = errno;
    Fail(absl::StrCat("socket for ", target.ToString(), ": ", ErrnoText(err)));
    if (err == EMFILE || err == ENFILE) owner_.PauseAccepting(now, err);
    return;
  }
  deadline_ = now + owner_.options_.connect_timeout;
  Attempt(now);
}

void Forwarder::Connection::Attempt(Instant now) {
  const SocketAddress& target = owner_.options_.target;
  if (connect(server_fd_, target.get(), target.length()) == 0) {
    Connected();
    return;
  }
  const int err = errno;
  EventLoop& loop = owner_.loop_;
  if (err == EINPROGRESS || err == EINTR) {
    // EINTR: the connection attempt goes on in the background, exactly as
    // after EINPROGRESS.
    if (absl::Status s = loop.Add(server_fd_, EventLoop::kWritable, this);
        !s.ok()) {
      Fail(absl::StrCat("event loop: ", std::string(s.message())));
      return;
    }
    registered_ = true;
    loop.timers().Schedule(timer_, deadline_);
    return;
  }
  if (err == EAGAIN && target.is_unix() && now < deadline_) {
    ++owner_.totals_.connect_retries;
    loop.timers().Schedule(timer_, std::min(now + retry_delay_, deadline_));
    retry_delay_ = std::min(retry_delay_ * 2, kMaxUnixRetry);
    return;
  }
  std::string why = ErrnoText(err);
  if (err == EAGAIN) {
    why = target.is_unix()
              ? absl::StrCat(
                    "its backlog stayed full for ",
                    absl::FormatDuration(owner_.options_.connect_timeout))
              : "no free local port";
  }
  Fail(absl::StrCat("connect to ", target.ToString(), ": ", why));
}

void Forwarder::Connection::OnTimer(Instant now) {
  if (phase_ != Phase::kConnecting) return;
  if (registered_ || now >= deadline_) {
    Fail(absl::StrCat("connect to ", owner_.options_.target.ToString(),
                      ": no answer within ",
                      absl::FormatDuration(owner_.options_.connect_timeout),
                      " (--connect_timeout)"));
    return;
  }
  Attempt(now);  // a UNIX target's backlog was full: try again
}

void Forwarder::Connection::CheckConnect() {
  if (phase_ != Phase::kConnecting) return;
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(server_fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    err = errno;
  }
  if (err != 0) {
    Fail(absl::StrCat("connect to ", owner_.options_.target.ToString(), ": ",
                      ErrnoText(err)));
    return;
  }
  Connected();
}

void Forwarder::Connection::Connected() {
  owner_.loop_.timers().Cancel(timer_);
  Unregister();
  const int a = std::exchange(client_fd_, -1);
  const int b = std::exchange(server_fd_, -1);
  phase_ = Phase::kRelaying;
  // Relay takes both fds, even when it fails.
  auto relay = forward::Relay::Create(
      owner_.loop_, owner_.pipes_, a, b, owner_.options_.relay,
      [this](forward::Relay& r, absl::Status s) { OnRelayDone(r, s); });
  if (!relay.ok()) {
    phase_ = Phase::kDone;
    owner_.Log(absl::StrCat(Prefix(),
                            ": relay: ", std::string(relay.status().message()),
                            "; connection closed"));
    owner_.Finished(*this, Outcome::kRelayError, nullptr);
    return;
  }
  relay_ = std::move(*relay);
  if (owner_.options_.verbose && phase_ == Phase::kRelaying) {
    owner_.Log(absl::StrCat(Prefix(), ": connected to ",
                            owner_.options_.target.ToString()));
  }
}

void Forwarder::Connection::OnRelayDone(forward::Relay& relay,
                                        const absl::Status& status) {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kDone;
  const forward::RelayStats stats = relay.stats();
  const std::string summary =
      absl::StrCat("client_to_server ", stats.a_to_b.bytes,
                   " bytes, server_to_client ", stats.b_to_a.bytes, " bytes");
  if (!status.ok()) {
    owner_.Log(absl::StrCat(Prefix(), ": closed on error: ",
                            std::string(status.message()), " (", summary, ")"));
  } else if (owner_.options_.verbose) {
    owner_.Log(absl::StrCat(Prefix(), ": closed (", summary, ")"));
  }
  owner_.Finished(
      *this, status.ok() ? Outcome::kCompleted : Outcome::kRelayError, &stats);
}

void Forwarder::Connection::Fail(const std::string& why) {
  phase_ = Phase::kDone;
  owner_.loop_.timers().Cancel(timer_);
  Unregister();
  if (client_fd_ >= 0 && !owner_.options_.listen.is_unix()) {
    // Close with a reset: the client must not read the failure as a
    // server that accepted and had nothing to say.
    const linger reset = {1, 0};
    setsockopt(client_fd_, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  }
  CloseFds();
  owner_.Log(absl::StrCat(Prefix(), ": ", why, "; client connection closed"));
  owner_.Finished(*this, Outcome::kConnectFailed, nullptr);
}

void Forwarder::Connection::Abort() {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kDone;
  owner_.loop_.timers().Cancel(timer_);
  Unregister();
  CloseFds();
  if (relay_ != nullptr) {
    const forward::RelayStats stats = relay_->stats();
    relay_.reset();  // closes both legs
    owner_.Finished(*this, Outcome::kAborted, &stats);
  } else {
    owner_.Finished(*this, Outcome::kAborted, nullptr);
  }
}

void Forwarder::Connection::Unregister() {
  if (!registered_) return;
  registered_ = false;
  (void)owner_.loop_.Remove(server_fd_);
}

void Forwarder::Connection::CloseFds() {
  if (client_fd_ >= 0) close(std::exchange(client_fd_, -1));
  if (server_fd_ >= 0) close(std::exchange(server_fd_, -1));
}

Forwarder::Forwarder(int index, ForwarderOptions options,
                     eventloop::EventLoop& loop, forward::PipePool& pipes)
    : options_(std::move(options)),
      loop_(loop),
      pipes_(pipes),
      name_(absl::StrCat("forward ", index)),
      resume_timer_([this](Instant) { ResumeAccepting(); }) {}

Forwarder::~Forwarder() {
  StopListening();
  CloseAll();
  Reap();
}

void Forwarder::Log(const std::string& message) const {
  LogLine(absl::StrCat(name_, ": ", message));
}

absl::Status Forwarder::Listen() {
  const SocketAddress& address = options_.listen;
  const std::string where = absl::StrCat("listen on ", address.ToString());
  auto fail = [&](const char* call, int err) {
    return absl::UnavailableError(absl::StrCat(
        where, ": ", call, ": ", ErrnoText(err), ListenHint(address, err)));
  };
  const int fd =
      socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("socket", errno);
  if (!address.is_unix()) {
    // SO_REUSEADDR: restart while old connections sit in TIME_WAIT. It
    // does not let two sockets listen on one port (that is SO_REUSEPORT).
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (address.family() == AF_INET6) {
      // [::]:PORT is IPv6 only, so that 0.0.0.0:PORT can be a forward too.
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
  }
  absl::Status bound = address.is_unix() ? BindUnix(fd) : absl::OkStatus();
  if (!address.is_unix() && bind(fd, address.get(), address.length()) != 0) {
    bound = fail("bind", errno);
  }
  if (!bound.ok()) {
    close(fd);
    return bound;
  }
  listen_fd_ = fd;  // from here on, CloseListener() undoes everything
  if (listen(fd, options_.backlog) != 0) {
    const absl::Status s = fail("listen", errno);
    CloseListener();
    return s;
  }
  sockaddr_storage storage = {};
  socklen_t length = sizeof(storage);
  bound_ = getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) == 0
               ? SocketAddress::FromSockaddr(
                     reinterpret_cast<sockaddr*>(&storage), length)
               : address;
  if (absl::Status s = loop_.Add(fd, EventLoop::kReadable, this); !s.ok()) {
    CloseListener();
    return absl::InternalError(
        absl::StrCat(where, ": event loop: ", std::string(s.message())));
  }
  return absl::OkStatus();
}

absl::Status Forwarder::BindUnix(int fd) {
  const SocketAddress& address = options_.listen;
  const std::string where = absl::StrCat("listen on ", address.ToString());
  auto fail = [&](int err) {
    return absl::UnavailableError(absl::StrCat(
        where, ": bind: ", ErrnoText(err), ListenHint(address, err)));
  };
  const std::string path = address.unix_path();
  if (bind(fd, address.get(), address.length()) != 0) {
    const int err = errno;
    if (err != EADDRINUSE || address.is_abstract()) return fail(err);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return fail(err);
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(absl::StrCat(
          where, ": the path exists and is not a socket (left alone)"));
    }
    // A socket file: is anybody listening there? A refused connect means
    // its owner died without removing it.
    const int probe =
        socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe < 0) return fail(errno);
    const int probe_err =
        connect(probe, address.get(), address.length()) == 0 ? 0 : errno;
    close(probe);
    if (probe_err != ECONNREFUSED && probe_err != ENOENT) {
      return absl::AlreadyExistsError(
          absl::StrCat(where, ": another process is listening on this socket"));
    }
    if (probe_err == ECONNREFUSED) {
      if (unlink(path.c_str()) != 0 && errno != ENOENT) return fail(errno);
      Log(absl::StrCat("removed the stale socket file ", path,
                       " (nobody was listening on it)"));
    }
    if (bind(fd, address.get(), address.length()) != 0) return fail(errno);
  }
  if (!path.empty()) {
    struct stat st;
    if (lstat(path.c_str(), &st) == 0) {
      created_file_ = true;
      file_dev_ = st.st_dev;
      file_ino_ = st.st_ino;
    }
  }
  return absl::OkStatus();
}

void Forwarder::CloseListener() {
  if (listen_fd_ >= 0) {
    if (loop_.IsRegistered(listen_fd_)) (void)loop_.Remove(listen_fd_);
    close(std::exchange(listen_fd_, -1));
  }
  loop_.timers().Cancel(resume_timer_);
  accept_paused_ = false;
  if (created_file_) {
    created_file_ = false;
    // Only if the path still names our socket: another process may have
    // replaced it since.
    const std::string path = options_.listen.unix_path();
    struct stat st;
    if (lstat(path.c_str(), &st) == 0 && st.st_dev == file_dev_ &&
        st.st_ino == file_ino_) {
      unlink(path.c_str());
    }
  }
}

void Forwarder::StopListening() {
  CloseListener();
  for (auto& [id, connection] : connections_) {
    if (connection->connecting()) connection->Abort();
  }
}

void Forwarder::CloseAll() {
  for (auto& [id, connection] : connections_) connection->Abort();
}

void Forwarder::Reap() {
  if (finished_.empty()) return;
  for (uint64_t id : finished_) connections_.erase(id);
  finished_.clear();
  // Closed connections gave fds back: if accept() ran out, try again.
  ResumeAccepting();
}

ForwardCounters Forwarder::counters() const {
  ForwardCounters c = totals_;
  for (const auto& [id, connection] : connections_) {
    if (connection->done()) continue;
    if (connection->connecting()) {
      ++c.connecting;
    } else if (connection->relay() != nullptr) {
      ++c.active;
      c.AddRelay(connection->relay()->stats());
    }
  }
  return c;
}

void Forwarder::OnReadable(Instant now) {
  while (listen_fd_ >= 0 && !accept_paused_) {
    sockaddr_storage peer = {};
    socklen_t length = sizeof(peer);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer),
                           &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      ++totals_.accept_errors;
      switch (err) {
        // The connection died in the queue, or (accept(2), "Error
        // handling") a network error pending on it: the next one may be
        // fine.
        case ECONNABORTED:
        case EPROTO:
        case EPERM:
        case ENETDOWN:
        case ENOPROTOOPT:
        case EHOSTDOWN:
        case ENONET:
        case EHOSTUNREACH:
        case EOPNOTSUPP:
        case ENETUNREACH:
          continue;
        default:
          // EMFILE, ENFILE, ENOBUFS, ENOMEM, or worse: the queued
          // connections stay queued until resources come back.
          PauseAccepting(now, err);
          return;
      }
    }
    ++totals_.accepted;
    const uint64_t id = next_id_++;
    auto connection = std::make_unique<Connection>(
        *this, id, fd,
        SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&peer),
                                    length));
    Connection& started = *connection;
    connections_.emplace(id, std::move(connection));
    started.Start(now);
  }
}

void Forwarder::OnError(Instant now, uint32_t epoll_events) {
  if (listen_fd_ < 0) return;
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(listen_fd_, SOL_SOCKET, SO_ERROR, &err, &len);
  Log(absl::StrCat("the listening socket failed (epoll events 0x",
                   absl::Hex(epoll_events), err != 0 ? ", " : "",
                   err != 0 ? ErrnoText(err) : "",
                   "); no longer accepting, open connections go on"));
  CloseListener();
}

void Forwarder::PauseAccepting(Instant now, int err) {
  if (listen_fd_ < 0) return;
  if (!accept_paused_) {
    accept_paused_ = true;
    (void)loop_.Modify(listen_fd_, 0);
  }
  loop_.timers().Schedule(resume_timer_, now + kAcceptPause);
  ++pauses_since_log_;
  if (now - last_pause_log_ >= kPauseLogInterval) {
    Log(absl::StrCat("accept: ", ErrnoText(err), "; pausing accepts until a ",
                     "connection closes or ",
                     absl::FormatDuration(kAcceptPause), " pass (",
                     open_connections(), " connections open, ",
                     pauses_since_log_, " pauses since the last message)"));
    last_pause_log_ = now;
    pauses_since_log_ = 0;
  }
}

void Forwarder::ResumeAccepting() {
  if (!accept_paused_) return;
  accept_paused_ = false;
  loop_.timers().Cancel(resume_timer_);
  if (listen_fd_ >= 0) (void)loop_.Modify(listen_fd_, EventLoop::kReadable);
}

void Forwarder::Finished(Connection& connection, Outcome outcome,
                         const forward::RelayStats* stats) {
  switch (outcome) {
    case Outcome::kCompleted:
      ++totals_.completed;
      break;
    case Outcome::kRelayError:
      ++totals_.relay_errors;
      break;
    case Outcome::kConnectFailed:
      ++totals_.connect_failed;
      break;
    case Outcome::kAborted:
      ++totals_.aborted;
      break;
  }
  if (stats != nullptr) totals_.AddRelay(*stats);
  finished_.push_back(connection.id());
}

}  // namespace netstack::tools
