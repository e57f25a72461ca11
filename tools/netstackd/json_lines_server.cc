#include "tools/netstackd/json_lines_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace netstack::tools {

using link::ErrnoStatus;
using link::UniqueFd;

// One connection: request lines in, answer lines out.
class JsonLinesServer::Client : public eventloop::Handler {
 public:
  Client(JsonLinesServer& server, UniqueFd fd)
      : server_(server), fd_(std::move(fd)) {}
  ~Client() override {
    if (server_.loop_.IsRegistered(fd_.get())) {
      (void)server_.loop_.Remove(fd_.get());
    }
  }
  int fd() const { return fd_.get(); }

  void OnReadable(Instant now) override {
    const Options& o = server_.options_;
    char buf[16 * 1024];
    // Bounded per wake-up, like every handler on the loop.
    for (int i = 0; i < 16 && !eof_; ++i) {
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
      size_t start = 0;
      for (size_t nl; (nl = in_.find('\n', start)) != std::string::npos;
           start = nl + 1) {
        std::string_view line(in_.data() + start, nl - start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        absl::StrAppend(&out_, o.handle(line, now), "\n");
      }
      in_.erase(0, start);
      if (in_.size() > o.max_line) {
        absl::StrAppend(&out_, o.too_long(), "\n");
        (void)send(fd_.get(), out_.data(), out_.size(),
                   MSG_DONTWAIT | MSG_NOSIGNAL);
        return server_.Drop(this);
      }
    }
    Flush();
  }

  void OnWritable(Instant now) override { Flush(); }
  void OnError(Instant now, uint32_t) override { server_.Drop(this); }

 private:
  // Sends what waits; watches for room when some is left. Drops a client
  // that lets max_output pile up, or that has left with nothing due.
  void Flush() {
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
    if (out_.size() > server_.options_.max_output) return server_.Drop(this);
    if (eof_ && out_.empty()) return server_.Drop(this);
    const uint32_t want = (eof_ ? 0 : eventloop::EventLoop::kReadable) |
                          (out_.empty() ? 0 : eventloop::EventLoop::kWritable);
    (void)server_.loop_.Modify(fd_.get(), want);
  }

  JsonLinesServer& server_;
  UniqueFd fd_;
  std::string in_;
  std::string out_;
  bool eof_ = false;
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
