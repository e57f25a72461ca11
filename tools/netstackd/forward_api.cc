#include "tools/netstackd/forward_api.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/netstackd/forward_spec.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {
namespace {

using bench::JsonValue;
using bench::JsonWriter;
using link::ErrnoStatus;
using link::UniqueFd;

std::string Error(std::string_view why) {
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(false).Key("error").String(why).EndObject();
  return w.text();
}

std::string Ok() { return "{\"ok\":true}"; }

void WriteCounters(JsonWriter& w, const ForwardInfo& i) {
  const ForwardCounters& c = i.counters;
  w.Key("counters").BeginObject();
  w.Key("accepted").Uint(c.accepted).Key("failed").Uint(c.failed);
  w.Key("active").Uint(c.active);
  w.Key("bytes_to_guest").Uint(c.bytes_to_guest);
  w.Key("bytes_from_guest").Uint(c.bytes_from_guest);
  w.Key("spliced_bytes").Uint(c.spliced_bytes);
  w.Key("accept_errors").Uint(c.accept_errors);
  if (i.udp) {
    w.Key("datagrams_to_guest").Uint(c.datagrams_to_guest);
    w.Key("datagrams_from_guest").Uint(c.datagrams_from_guest);
    w.Key("udp_refused_limit").Uint(c.udp_refused_limit);
    w.Key("udp_dropped").Uint(c.udp_dropped);
    w.Key("udp_expired").Uint(c.udp_expired);
  }
  w.EndObject();
}

}  // namespace

// One connection to the API: request lines in, answer lines out.
class ForwardApi::Client : public eventloop::Handler {
 public:
  Client(ForwardApi& api, UniqueFd fd) : api_(api), fd_(std::move(fd)) {}
  ~Client() override {
    if (api_.loop_.IsRegistered(fd_.get())) {
      (void)api_.loop_.Remove(fd_.get());
    }
  }
  int fd() const { return fd_.get(); }

  void OnReadable(Instant now) override {
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
        return api_.Drop(this);
      }
      in_.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = in_.find('\n', start)) != std::string::npos;
           start = nl + 1) {
        std::string_view line(in_.data() + start, nl - start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        absl::StrAppend(&out_, api_.Handle(line), "\n");
      }
      in_.erase(0, start);
      if (in_.size() > kMaxLine) {
        absl::StrAppend(&out_,
                        Error(absl::StrCat("request longer than ", kMaxLine,
                                           " bytes: closing")),
                        "\n");
        ++api_.counters_.errors;
        (void)send(fd_.get(), out_.data(), out_.size(),
                   MSG_DONTWAIT | MSG_NOSIGNAL);
        return api_.Drop(this);
      }
    }
    Flush();
  }

  void OnWritable(Instant now) override { Flush(); }
  void OnError(Instant now, uint32_t) override { api_.Drop(this); }

 private:
  // Sends what waits; watches for room when some is left. Drops a client
  // that lets kMaxOutput pile up, or that has left with nothing due.
  void Flush() {
    while (!out_.empty()) {
      const ssize_t n = send(fd_.get(), out_.data(), out_.size(),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return api_.Drop(this);
      }
      out_.erase(0, static_cast<size_t>(n));
    }
    if (out_.size() > kMaxOutput) return api_.Drop(this);
    if (eof_ && out_.empty()) return api_.Drop(this);
    const uint32_t want = (eof_ ? 0 : eventloop::EventLoop::kReadable) |
                          (out_.empty() ? 0 : eventloop::EventLoop::kWritable);
    (void)api_.loop_.Modify(fd_.get(), want);
  }

  ForwardApi& api_;
  UniqueFd fd_;
  std::string in_;
  std::string out_;
  bool eof_ = false;
};

absl::StatusOr<std::unique_ptr<ForwardApi>> ForwardApi::Create(
    eventloop::EventLoop& loop, PortForwards& forwards,
    std::function<std::string()> counters, const std::string& path) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(un.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--forward-api '", path, "': a UNIX socket path is 1 to ",
        sizeof(un.sun_path) - 1, " bytes"));
  }
  std::memcpy(un.sun_path, path.data(), path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, "--forward-api: socket");
  // 0600 from the start: no window in which another user could connect.
  const mode_t old = umask(0177);
  const int rc = bind(fd.get(), reinterpret_cast<const sockaddr*>(&un),
                      sizeof(un));
  const int bind_errno = errno;
  umask(old);
  if (rc != 0) {
    return ErrnoStatus(bind_errno,
                       absl::StrCat("--forward-api: bind ", path,
                                    bind_errno == EADDRINUSE
                                        ? " (the file exists; remove it if "
                                          "no netstackd uses it)"
                                        : ""));
  }
  if (listen(fd.get(), 16) != 0) {
    const int e = errno;
    (void)unlink(path.c_str());
    return ErrnoStatus(e, absl::StrCat("--forward-api: listen on ", path));
  }
  std::unique_ptr<ForwardApi> api(new ForwardApi(
      loop, forwards, std::move(counters), path, std::move(fd)));
  if (absl::Status s = loop.Add(api->fd_.get(),
                                eventloop::EventLoop::kReadable, api.get());
      !s.ok()) {
    return s;  // the destructor unlinks the file
  }
  return api;
}

ForwardApi::ForwardApi(eventloop::EventLoop& loop, PortForwards& forwards,
                       std::function<std::string()> counters, std::string path,
                       UniqueFd fd)
    : loop_(loop),
      forwards_(forwards),
      counter_text_(std::move(counters)),
      path_(std::move(path)),
      fd_(std::move(fd)) {
  // By its directory: removable at exit after the root has moved.
  if (auto e = link::DirEntryRef::Of(path_); e.ok()) {
    socket_file_ = *std::move(e);
  }
}

ForwardApi::~ForwardApi() {
  clients_.clear();
  if (loop_.IsRegistered(fd_.get())) (void)loop_.Remove(fd_.get());
  if (socket_file_.valid()) {
    (void)socket_file_.Unlink();
  } else {
    (void)unlink(path_.c_str());
  }
}

void ForwardApi::OnReadable(Instant now) {
  for (int i = 0; i < 16; ++i) {
    UniqueFd c(accept4(fd_.get(), nullptr, nullptr,
                       SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!c.valid()) return;  // EAGAIN; or out of fds: the next wake-up
    if (clients_.size() >= kMaxClients) {
      ++counters_.refused_connections;
      continue;  // closed
    }
    auto client = std::make_unique<Client>(*this, std::move(c));
    if (!loop_.Add(client->fd(), eventloop::EventLoop::kReadable, client.get())
             .ok()) {
      continue;
    }
    ++counters_.connections;
    Client* raw = client.get();
    clients_.emplace(raw, std::move(client));
  }
}

void ForwardApi::Drop(Client* c) { clients_.erase(c); }

std::string ForwardApi::Handle(std::string_view line) {
  ++counters_.requests;
  auto fail = [&](absl::string_view why) {
    ++counters_.errors;
    return Error(std::string_view(why.data(), why.size()));
  };
  absl::StatusOr<JsonValue> req = bench::ParseJson(line);
  if (!req.ok()) {
    return fail(absl::StrCat("not JSON: ", req.status().message()));
  }
  if (!req->is_object()) return fail("a request is a JSON object");
  const std::optional<std::string> op = req->GetString("op");
  if (!op) return fail("no \"op\" (add, remove, list or counters)");

  if (*op == "add") {
    const std::optional<std::string> proto = req->GetString("proto");
    const std::optional<std::string> spec = req->GetString("spec");
    if (!proto || (*proto != "tcp" && *proto != "udp")) {
      return fail("add: \"proto\" must be \"tcp\" or \"udp\"");
    }
    if (!spec) return fail("add: no \"spec\"");
    const bool udp = *proto == "udp";
    const std::string flag = udp ? "-u " : "-t ";
    auto rules = ParseForwardSpec(udp, *spec);
    if (!rules.ok()) {
      return fail(absl::StrCat(flag, *spec, ": ", rules.status().message()));
    }
    absl::StatusOr<uint64_t> id = forwards_.Add(*spec, *rules);
    if (!id.ok()) return fail(absl::StrCat(flag, id.status().message()));
    JsonWriter w;
    w.BeginObject().Key("ok").Bool(true).Key("id").Uint(*id).EndObject();
    return w.text();
  }
  if (*op == "remove") {
    const std::optional<int64_t> id = req->GetInt("id");
    if (!id || *id <= 0) return fail("remove: \"id\" must be a forward's id");
    if (absl::Status s = forwards_.Remove(static_cast<uint64_t>(*id));
        !s.ok()) {
      return fail(s.message());
    }
    return Ok();
  }
  if (*op == "list") {
    JsonWriter w;
    w.BeginObject().Key("ok").Bool(true).Key("forwards").BeginArray();
    for (const ForwardInfo& i : forwards_.List()) {
      w.BeginObject();
      w.Key("id").Uint(i.id).Key("proto").String(i.udp ? "udp" : "tcp");
      w.Key("spec").String(i.spec).Key("path").String(i.path);
      w.Key("listeners").Uint(i.listeners);
      WriteCounters(w, i);
      w.EndObject();
    }
    w.EndArray().EndObject();
    return w.text();
  }
  if (*op == "counters") {
    JsonWriter w;
    w.BeginObject().Key("ok").Bool(true).Key("counters").BeginObject();
    const std::string text = counter_text_ ? counter_text_() : std::string();
    for (absl::string_view l : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      const size_t sp = l.find(' ');
      if (sp == absl::string_view::npos) continue;
      absl::string_view name = l.substr(0, sp);
      const absl::string_view value = l.substr(sp + 1);
      uint64_t n = 0;
      if (name.size() > 1 && name.back() == ':') {
        // "prefix: a=1 b=2" lines (the stack's): "prefix.a", "prefix.b".
        name.remove_suffix(1);
        for (absl::string_view kv :
             absl::StrSplit(value, ' ', absl::SkipEmpty())) {
          const size_t eq = kv.find('=');
          if (eq == absl::string_view::npos ||
              !absl::SimpleAtoi(kv.substr(eq + 1), &n)) {
            continue;
          }
          w.Key(absl::StrCat(name, ".", kv.substr(0, eq))).Uint(n);
        }
        continue;
      }
      w.Key(std::string_view(name.data(), name.size()));
      if (absl::SimpleAtoi(value, &n)) {
        w.Uint(n);
      } else {
        w.String(std::string_view(value.data(), value.size()));
      }
    }
    w.EndObject().EndObject();
    return w.text();
  }
  return fail(absl::StrCat("unknown op '", *op,
                           "' (add, remove, list or counters)"));
}

std::string ForwardApi::FormatCounters() const {
  return absl::StrCat("forward_api.connections ", counters_.connections, "\n",
                      "forward_api.refused_connections ",
                      counters_.refused_connections, "\n",
                      "forward_api.requests ", counters_.requests, "\n",
                      "forward_api.errors ", counters_.errors, "\n");
}

}  // namespace netstack::tools
