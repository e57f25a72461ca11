#include "tools/netstackd/json_lines_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace netstack::tools {

using link::ErrnoStatus;
using link::UniqueFd;

// One connection: request lines in, answer lines out.
//
// Lines are handled from in_ a bounded number per turn and only while the
// answers waiting in out_ are under max_output. While a complete line
// waits in in_, nothing more is read (what the client sends meanwhile
// stays in the kernel, which pushes back on it) and the next batch is
// handled on the next turn (resume_). A client that does not read thus
// reaches max_output and is closed, as one that reads is answered.
class JsonLinesServer::Client : public eventloop::Handler {
 public:
  Client(JsonLinesServer& server, UniqueFd fd)
      : server_(server),
        fd_(std::move(fd)),
        resume_([this](Instant now) { Serve(now, /*read=*/false); }) {}
  ~Client() override {
    if (server_.loop_.IsRegistered(fd_.get())) {
      (void)server_.loop_.Remove(fd_.get());
    }
  }
  int fd() const { return fd_.get(); }

  void OnReadable(Instant now) override { Serve(now, /*read=*/true); }
  void OnWritable(Instant now) override { Serve(now, /*read=*/false); }
  void OnError(Instant now, uint32_t) override { server_.Drop(this); }

 private:
  // Handles what waits, reads more (bounded, like every handler on the
  // loop) if everything read is handled, and sends.
  void Serve(Instant now, bool read) {
    // The budget is per loop turn, however many callbacks the turn makes.
    const uint64_t turn = server_.loop_.stats().turns;
    if (turn != budget_turn_) {
      budget_turn_ = turn;
      budget_ = server_.options_.max_lines_per_wakeup;
    }
    if (!HandleLines(now)) return;
    char buf[16 * 1024];
    for (int i = 0; read && i < 16 && !eof_ && CanHandle(); ++i) {
      const ssize_t n = recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0) {
        eof_ = true;
        break;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return server_.Drop(this);
      }
      in_.append(buf, static_cast<size_t>(n));
      if (!HandleLines(now)) return;
    }
    Flush(now);
  }

  // Whether another line may be handled now: budget left this turn and
  // room for its answer.
  bool CanHandle() const {
    return budget_ > 0 && out_.size() < server_.options_.max_output;
  }
  bool LineWaits() const { return in_.find('\n') != std::string::npos; }

  // Answers the complete lines of in_ while CanHandle(); false if the
  // client was dropped (a line past max_line).
  bool HandleLines(Instant now) {
    const Options& o = server_.options_;
    size_t start = 0;
    for (size_t nl;
         CanHandle() && (nl = in_.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      std::string_view line(in_.data() + start, nl - start);
      if (line.size() > o.max_line) return TooLong();
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      --budget_;  // empty lines too: they cost a scan
      if (line.empty()) continue;
      absl::StrAppend(&out_, o.handle(line, now), "\n");
      server_.output_high_water_ =
          std::max(server_.output_high_water_, out_.size());
    }
    in_.erase(0, start);
    // An unfinished line past max_line can never be handled.
    if (in_.size() > o.max_line && !LineWaits()) return TooLong();
    return true;
  }

  bool TooLong() {
    absl::StrAppend(&out_, server_.options_.too_long(), "\n");
    (void)send(fd_.get(), out_.data(), out_.size(),
               MSG_DONTWAIT | MSG_NOSIGNAL);
    server_.Drop(this);
    return false;
  }

  // Sends what waits; then watches for room while answers wait, for
  // requests while no read line waits, and comes back next turn for the
  // lines that do. Drops a client that lets max_output pile up, or that
  // has left with nothing due.
  void Flush(Instant now) {
    while (!out_.empty()) {
      const ssize_t n = send(fd_.get(), out_.data(), out_.size(),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return server_.Drop(this);
      }
      out_.erase(0, static_cast<size_t>(n));
    }
    if (out_.size() >= server_.options_.max_output) {
      ++server_.closed_slow_clients_;
      return server_.Drop(this);
    }
    const bool line_waits = LineWaits();
    if (eof_ && out_.empty() && !line_waits) return server_.Drop(this);
    const uint32_t want =
        (eof_ || line_waits ? 0 : eventloop::EventLoop::kReadable) |
        (out_.empty() ? 0 : eventloop::EventLoop::kWritable);
    (void)server_.loop_.Modify(fd_.get(), want);
    // After `now`, so that it fires on the next turn, not this one.
    if (line_waits && !resume_.scheduled()) {
      server_.loop_.timers().Schedule(resume_, now + absl::Nanoseconds(1));
    }
  }

  JsonLinesServer& server_;
  UniqueFd fd_;
  std::string in_;   // read, not handled yet
  std::string out_;  // answers not sent yet
  bool eof_ = false;
  uint64_t budget_turn_ = ~uint64_t{0};
  size_t budget_ = 0;        // lines left this turn
  eventloop::Timer resume_;  // last: cancelled first when this goes
};

absl::StatusOr<std::unique_ptr<JsonLinesServer>> JsonLinesServer::Create(
    eventloop::EventLoop& loop, const std::string& path, Options options) {
  const std::string& flag = options.flag;
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(un.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " '", path, "': a UNIX socket path is 1 to ",
        sizeof(un.sun_path) - 1, " bytes"));
  }
  std::memcpy(un.sun_path, path.data(), path.size());
  // The socket file, by its directory, opened before the bind: removable
  // at exit after the root has moved (the filesystem is detached after
  // setup), and removed if the setup fails past the bind.
  absl::StatusOr<link::DirEntryRef> socket_file = link::DirEntryRef::Of(path);
  if (!socket_file.ok()) {
    return absl::Status(socket_file.status().code(),
                        absl::StrCat(flag, ": ", socket_file.status().message()));
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat(flag, ": socket"));
  // 0600 from the start: no window in which another user could connect.
  const mode_t old = umask(0177);
  const int rc = bind(fd.get(), reinterpret_cast<const sockaddr*>(&un),
                      sizeof(un));
  const int bind_errno = errno;
  umask(old);
  if (rc != 0) {
    return ErrnoStatus(bind_errno,
                       absl::StrCat(flag, ": bind ", path,
                                    bind_errno == EADDRINUSE
                                        ? " (the file exists; remove it if "
                                          "no netstackd uses it)"
                                        : ""));
  }
  if (listen(fd.get(), static_cast<int>(options.max_clients)) != 0) {
    const int e = errno;
    (void)socket_file->Unlink();
    return ErrnoStatus(e, absl::StrCat(flag, ": listen on ", path));
  }
  std::unique_ptr<JsonLinesServer> server(
      new JsonLinesServer(loop, std::move(options), path, std::move(fd),
                          *std::move(socket_file)));
  if (absl::Status s = loop.Add(server->fd_.get(),
                                eventloop::EventLoop::kReadable, server.get());
      !s.ok()) {
    return s;  // the destructor unlinks the file
  }
  return server;
}

JsonLinesServer::JsonLinesServer(eventloop::EventLoop& loop, Options options,
                                 std::string path, UniqueFd fd,
                                 link::DirEntryRef socket_file)
    : loop_(loop),
      options_(std::move(options)),
      path_(std::move(path)),
      fd_(std::move(fd)),
      socket_file_(std::move(socket_file)) {}

JsonLinesServer::~JsonLinesServer() {
  clients_.clear();
  if (loop_.IsRegistered(fd_.get())) (void)loop_.Remove(fd_.get());
  (void)socket_file_.Unlink();
}

void JsonLinesServer::OnReadable(Instant now) {
  for (int i = 0; i < 16; ++i) {
    UniqueFd c(accept4(fd_.get(), nullptr, nullptr,
                       SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!c.valid()) return;  // EAGAIN; or out of fds: the next wake-up
    if (peer_check_) {
      if (absl::Status s = peer_check_(c.get()); !s.ok()) {
        if (refused_peers_++ == 0) {
          std::fprintf(stderr,
                       "netstackd: %s: refused a client: %s; later refusals "
                       "are only counted\n",
                       options_.flag.c_str(), std::string(s.message()).c_str());
        }
        continue;  // closed
      }
    }
    if (clients_.size() >= options_.max_clients) {
      ++refused_connections_;
      continue;  // closed
    }
    auto client = std::make_unique<Client>(*this, std::move(c));
    if (!loop_.Add(client->fd(), eventloop::EventLoop::kReadable, client.get())
             .ok()) {
      continue;
    }
    ++connections_;
    Client* raw = client.get();
    clients_.emplace(raw, std::move(client));
  }
}

void JsonLinesServer::Drop(Client* c) { clients_.erase(c); }

}  // namespace netstack::tools
