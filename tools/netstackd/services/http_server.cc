#include "tools/netstackd/services/http_server.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/transport/errors.h"
#include "tools/netstackd/services/http_response.h"

namespace netstack::tools {
namespace {

constexpr int kOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

// Opens `path` (relative, already normalised) beneath `root_fd`. With
// RESOLVE_BENEATH the kernel refuses any step outside the root, symlinks
// included (EXDEV). -1 with errno on failure.
int OpenBeneath(int root_fd, const std::string& path) {
  const char* p = path.empty() ? "." : path.c_str();
  open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = kOpenFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, root_fd, p, &how, sizeof(how));
  if (fd < 0 && errno == ENOSYS) {
    // Linux before 5.6: the parser's refusal of ".." is the only guard.
    fd = openat(root_fd, p, kOpenFlags);
  }
  return static_cast<int>(fd);
}

int StatusForErrno(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
      return 403;
    case ENOENT:
    case ENOTDIR:
    case ELOOP:
    case EXDEV:  // RESOLVE_BENEATH: it leads outside the root
    case ENAMETOOLONG:
      return 404;
    default:
      return 500;
  }
}

}  // namespace

class HttpServer::Connection {
 public:
  const tcp::TcpSocket& socket() const { return *socket_; }
  Connection(HttpServer& server, std::unique_ptr<tcp::TcpSocket> socket)
      : server_(server),
        socket_(std::move(socket)),
        idle_([this](Instant) { OnIdle(); }) {}
  ~Connection() { CloseFile(); }

  void Start() {
    socket_->set_callback([this](uint32_t events) { OnEvent(events); });
    Touch();
    Pump();  // the request may have arrived before the callback was set
  }

 private:
  void OnEvent(uint32_t events) {
    if (done_) return;
    if ((events & transport::event::kError) != 0 &&
        !socket_->TakeError().ok()) {
      Fail();
      return;
    }
    if (lingering_) {
      Linger();
    } else {
      Pump();
    }
  }

  // Serve: flush the pending response, then take the next request from
  // what was read, then read more; stop when a side would block.
  void Pump() {
    while (!done_) {
      if (!Flush()) return;
      if (close_after_) {
        StartLinger();
        return;
      }
      if (NextRequest()) continue;
      if (peer_eof_) {
        Done();  // nothing unread: a graceful close
        return;
      }
      const size_t old = in_.size();
      in_.resize(old + kReadBytes);
      absl::StatusOr<size_t> n = socket_->Read(std::span<uint8_t>(
          reinterpret_cast<uint8_t*>(in_.data()) + old, kReadBytes));
      in_.resize(old + (n.ok() ? *n : 0));
      if (!n.ok()) {
        if (!transport::IsWouldBlock(n.status())) Fail();
        return;
      }
      if (*n == 0) {
        peer_eof_ = true;
      } else {
        Touch();
      }
    }
  }

  // Parses one request from `in_` and queues its response. False: the
  // request is not complete yet.
  bool NextRequest() {
    if (in_.empty()) return false;
    http::ParseResult r = http::ParseRequest(in_, server_.options_.limits);
    switch (r.status) {
      case http::ParseStatus::kIncomplete:
        return false;
      case http::ParseStatus::kError:
        ++server_.counters_.requests;
        // The framing is lost: answer and close.
        RespondError(r.error_status, r.error_reason, /*keep_alive=*/false,
                     /*head_only=*/false);
        in_.clear();
        return true;
      case http::ParseStatus::kComplete:
        ++server_.counters_.requests;
        Respond(r.request);
        in_.erase(0, r.consumed);
        return true;
    }
    return false;
  }

  void Respond(const http::Request& req) {
    const bool head_only = req.method == "HEAD";
    if (req.method != "GET" && !head_only) {
      RespondError(405, "", req.keep_alive, /*head_only=*/false);
      return;
    }
    int fd = OpenBeneath(server_.root_fd_, req.path);
    std::string name = req.path;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      fd = -1;
      errno = err;
    }
    if (fd >= 0 && S_ISDIR(st.st_mode)) {
      const int index = openat(fd, "index.html", kOpenFlags | O_NOFOLLOW);
      const int err = errno;
      close(fd);
      fd = index;
      errno = err;
      name = "index.html";
      if (fd >= 0 && fstat(fd, &st) != 0) {
        const int err2 = errno;
        close(fd);
        fd = -1;
        errno = err2;
      }
    }
    if (fd >= 0 && !S_ISREG(st.st_mode)) {
      close(fd);  // a directory, device, FIFO or socket: nothing to serve
      fd = -1;
      errno = ENOENT;
    }
    if (fd < 0) {
      RespondError(StatusForErrno(errno), "", req.keep_alive, head_only);
      return;
    }
    http::ResponseHead h;
    h.status = 200;
    h.content_type = http::ContentTypeFor(name);
    h.content_length = static_cast<uint64_t>(st.st_size);
    h.keep_alive = req.keep_alive;
    h.date = Date();
    head_ = http::FormatHead(h);
    head_pos_ = 0;
    ++server_.counters_.status_2xx;
    close_after_ = !req.keep_alive;
    if (head_only || st.st_size == 0) {
      close(fd);
      return;
    }
    fd_ = fd;
    file_offset_ = 0;
    file_left_ = static_cast<uint64_t>(st.st_size);
  }

  void RespondError(int status, std::string_view detail, bool keep_alive,
                    bool head_only) {
    const std::string body = http::ErrorBody(status, detail);
    http::ResponseHead h;
    h.status = status;
    h.content_type = "text/html; charset=utf-8";
    h.content_length = body.size();
    h.keep_alive = keep_alive;
    h.allow_get_head = status == 405;
    h.date = Date();
    head_ = http::FormatHead(h);
    if (!head_only) head_ += body;
    head_pos_ = 0;
    (status >= 500 ? server_.counters_.status_5xx
                   : server_.counters_.status_4xx)++;
    close_after_ = !keep_alive;
  }

  // Writes the response head, then the file, a chunk at a time. True when
  // all is in the send buffer; false when Write would block (kWritable
  // resumes us) or the connection failed.
  bool Flush() {
    while (head_pos_ < head_.size()) {
      absl::StatusOr<size_t> n = socket_->Write(std::span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(head_.data()) + head_pos_,
          head_.size() - head_pos_));
      if (!Wrote(n)) return false;
      head_pos_ += *n;
    }
    head_.clear();
    head_pos_ = 0;
    while (fd_ >= 0) {
      if (chunk_pos_ == chunk_len_) {
        if (file_left_ == 0) {
          CloseFile();
          break;
        }
        if (chunk_ == nullptr) chunk_.reset(new uint8_t[kFileChunkBytes]);
        const size_t want = static_cast<size_t>(
            std::min<uint64_t>(kFileChunkBytes, file_left_));
        const ssize_t r =
            pread(fd_, chunk_.get(), want, static_cast<off_t>(file_offset_));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          // A read error, or the file shrank: the promised Content-Length
          // cannot be kept, so the client must see an abort, not an end.
          Fail();
          return false;
        }
        chunk_pos_ = 0;
        chunk_len_ = static_cast<size_t>(r);
        file_offset_ += chunk_len_;
        file_left_ -= chunk_len_;
      }
      absl::StatusOr<size_t> n = socket_->Write(std::span<const uint8_t>(
          chunk_.get() + chunk_pos_, chunk_len_ - chunk_pos_));
      if (!Wrote(n)) return false;
      chunk_pos_ += *n;
      server_.counters_.body_bytes += *n;
    }
    return true;
  }

  // Handles a Write result: true if bytes went in.
  bool Wrote(const absl::StatusOr<size_t>& n) {
    if (n.ok()) {
      Touch();
      return true;
    }
    if (!transport::IsWouldBlock(n.status())) Fail();
    return false;
  }

  // The last response is queued: send our FIN after it and read until the
  // peer's FIN (RFC 9112 9.6), dropping what comes, so that closing with
  // unread data cannot turn into an RST that destroys the response.
  void StartLinger() {
    lingering_ = true;
    in_.clear();
    in_.shrink_to_fit();
    (void)socket_->Shutdown(/*read=*/false, /*write=*/true);
    if (peer_eof_) {
      Done();
      return;
    }
    Linger();
  }

  void Linger() {
    uint8_t scratch[4096];
    while (!done_) {
      absl::StatusOr<size_t> n = socket_->Read(std::span<uint8_t>(scratch));
      if (!n.ok()) {
        if (transport::IsWouldBlock(n.status())) return;
        Done();
        return;
      }
      if (*n == 0) {
        Done();
        return;
      }
      Touch();
    }
  }

  void OnIdle() {
    if (done_) return;
    ++server_.counters_.idle_timeouts;
    const bool pending = head_pos_ < head_.size() || fd_ >= 0;
    if (pending) {
      socket_->Abort();  // the peer stopped reading
      Retire();
    } else {
      Done();
    }
  }

  void Done() {
    socket_->Close();
    Retire();
  }

  void Fail() {
    ++server_.counters_.connection_errors;
    socket_->Abort();
    Retire();
  }

  void Retire() {
    done_ = true;
    server_.ctx_.timers->Cancel(idle_);
    CloseFile();
    server_.conns_.Retire(this);
  }

  void Touch() {
    server_.ctx_.timers->Schedule(
        idle_, server_.ctx_.now + server_.options_.idle_timeout);
  }

  void CloseFile() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    chunk_.reset();
    chunk_pos_ = chunk_len_ = 0;
  }

  absl::Time Date() const {
    return server_.options_.send_date ? absl::Now() : absl::InfinitePast();
  }

  HttpServer& server_;
  std::unique_ptr<tcp::TcpSocket> socket_;
  eventloop::Timer idle_;
  std::string in_;    // received, not yet parsed
  std::string head_;  // response head (and error body) to write
  size_t head_pos_ = 0;
  int fd_ = -1;  // the file being sent
  uint64_t file_offset_ = 0;
  uint64_t file_left_ = 0;
  std::unique_ptr<uint8_t[]> chunk_;
  size_t chunk_pos_ = 0;
  size_t chunk_len_ = 0;
  bool close_after_ = false;
  bool peer_eof_ = false;
  bool lingering_ = false;
  bool done_ = false;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    ServiceContext& ctx, const HttpServerOptions& options) {
  const int root =
      open(options.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
  if (root < 0) {
    const int err = errno;
    const std::string msg =
        absl::StrCat("'", options.root, "': ", std::strerror(err));
    switch (err) {
      case ENOENT:
        return absl::NotFoundError(msg);
      case EACCES:
      case EPERM:
        return absl::PermissionDeniedError(msg);
      default:
        return absl::FailedPreconditionError(msg);
    }
  }
  std::unique_ptr<HttpServer> s(new HttpServer(ctx, options, root));
  HttpServer* self = s.get();
  auto listeners =
      TcpListeners::Open(*ctx.tcp, options.port, /*backlog=*/1024,
                         [self](std::unique_ptr<tcp::TcpSocket> c) {
                           self->Accept(std::move(c));
                         });
  if (!listeners.ok()) return listeners.status();
  s->listeners_ = std::move(*listeners);
  return s;
}

HttpServer::HttpServer(ServiceContext& ctx, const HttpServerOptions& options,
                       int root_fd)
    : ctx_(ctx), options_(options), root_fd_(root_fd) {}

HttpServer::~HttpServer() {
  listeners_.reset();
  conns_ = ConnectionSet<Connection>();
  close(root_fd_);
}

void HttpServer::Sweep() { conns_.Sweep(); }

void HttpServer::Accept(std::unique_ptr<tcp::TcpSocket> s) {
  ++counters_.connections;
  conns_.Add(std::make_unique<Connection>(*this, std::move(s)))->Start();
}

std::string HttpServer::FormatCounters() const {
  return absl::StrCat(
      "service.http.connections ", counters_.connections, "\n",
      "service.http.open ", conns_.size(), "\n", "service.http.requests ",
      counters_.requests, "\n", "service.http.status_2xx ",
      counters_.status_2xx, "\n", "service.http.status_4xx ",
      counters_.status_4xx, "\n", "service.http.status_5xx ",
      counters_.status_5xx, "\n", "service.http.body_bytes ",
      counters_.body_bytes, "\n", "service.http.connection_errors ",
      counters_.connection_errors, "\n", "service.http.idle_timeouts ",
      counters_.idle_timeouts, "\n");
}

std::string HttpServer::FormatConnections() const {
  std::string out;
  conns_.ForEach([&](const Connection& c) {
    absl::StrAppend(&out,
                    DescribeConnection("service.http.connection", c.socket()));
  });
  return out;
}

}  // namespace netstack::tools
