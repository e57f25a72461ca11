#include "tools/netstackd/slirp4netns_api.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/transport/address.h"

namespace netstack::tools {

using bench::JsonQuote;
using bench::JsonValue;
using link::ErrnoStatus;
using link::UniqueFd;

namespace {

// A port number as slirp4netns takes one: an integral JSON number in
// 1..65535.
std::optional<uint16_t> PortOf(const JsonValue& args, std::string_view key) {
  const JsonValue* v = args.Find(key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  const double d = v->number();
  if (!(d >= 1 && d <= 65535) || std::floor(d) != d) return std::nullopt;
  return static_cast<uint16_t>(d);
}

// A string member, "" when absent; nullopt when present but not a string.
std::optional<std::string> OptionalString(const JsonValue& args,
                                          std::string_view key) {
  const JsonValue* v = args.Find(key);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string()) return std::nullopt;
  return v->string();
}

}  // namespace

// One connection: a request in (at most kMaxRequest bytes), one reply out,
// then shutdown and close. Deleted by the server (Drop), also from inside
// its own callbacks, which the loop allows.
class Slirp4netnsApi::Client : public eventloop::Handler {
 public:
  Client(Slirp4netnsApi& api, UniqueFd fd)
      : api_(api), fd_(std::move(fd)), timeout_([this](Instant) {
          ++api_.counters_.timeouts;
          Reply(api_.Error("cannot parse JSON"));
        }) {}
  ~Client() override {
    if (timeout_.scheduled()) api_.loop_.timers().Cancel(timeout_);
    if (api_.loop_.IsRegistered(fd_.get())) (void)api_.loop_.Remove(fd_.get());
  }

  absl::Status Start(Instant now) {
    api_.loop_.timers().Schedule(timeout_, now + kClientTimeout);
    return api_.loop_.Add(fd_.get(), eventloop::EventLoop::kReadable, this);
  }

  void OnReadable(Instant) override {
    if (replying_) return;
    char* end = in_ + in_len_;
    const ssize_t n = recv(fd_.get(), end, sizeof(in_) - in_len_, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return api_.Drop(this);
    }
    in_len_ += static_cast<size_t>(n);
    if (in_len_ >= kMaxRequest) {
      ++api_.counters_.too_large;
      return Reply(TooLarge());
    }
    const std::string_view request(in_, in_len_);
    const bool complete = n == 0 ||
                          std::memchr(end, '\n', static_cast<size_t>(n)) ||
                          bench::ParseJson(request).ok();
    if (!complete) return;
    if (n == 0 && in_len_ == 0) return api_.Drop(this);  // nothing asked
    Reply(api_.Handle(request));
  }

  void OnWritable(Instant) override { Send(); }
  void OnError(Instant, uint32_t) override { api_.Drop(this); }

 private:
  void Reply(std::string reply) {
    replying_ = true;
    out_ = std::move(reply);
    Send();
  }

  // What is left of the reply; the connection ends once it is all sent
  // (or the client is gone). A reply that does not fit in the socket
  // buffer at once waits for room, within the same timeout.
  void Send() {
    while (sent_ < out_.size()) {
      const ssize_t n = send(fd_.get(), out_.data() + sent_,
                             out_.size() - sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          (void)api_.loop_.Modify(fd_.get(), eventloop::EventLoop::kWritable);
          return;
        }
        break;
      }
      sent_ += static_cast<size_t>(n);
    }
    (void)shutdown(fd_.get(), SHUT_RDWR);
    api_.Drop(this);
  }

  Slirp4netnsApi& api_;
  UniqueFd fd_;
  eventloop::Timer timeout_;
  char in_[kMaxRequest];
  size_t in_len_ = 0;
  bool replying_ = false;
  std::string out_;
  size_t sent_ = 0;
};

absl::StatusOr<std::unique_ptr<Slirp4netnsApi>> Slirp4netnsApi::Create(
    eventloop::EventLoop& loop, runtime::PortForwards& forwards,
    const std::string& path, wire::Ipv4Address guest4) {
  const std::string what = absl::StrCat("--api-socket ", path);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(un.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a path of 1 to ", sizeof(un.sun_path) - 1,
                     " bytes"));
  }
  std::memcpy(un.sun_path, path.data(), path.size());
  absl::StatusOr<link::DirEntryRef> file = link::DirEntryRef::Of(path);
  if (!file.ok()) return file.status();
  // A previous run's socket (killed before it could remove it) is
  // replaced, as slirp4netns does; anything else is not ours to remove.
  struct stat st;
  if (file->Stat(&st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(
          absl::StrCat(what, ": exists and is not a socket"));
    }
    if (file->Unlink() != 0) {
      return ErrnoStatus(errno, absl::StrCat(what, ": remove the old socket"));
    }
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat(what, ": socket"));
  const mode_t old = umask(0177);
  const int rc =
      bind(fd.get(), reinterpret_cast<const sockaddr*>(&un), sizeof(un));
  const int bind_errno = errno;
  umask(old);
  if (rc != 0) return ErrnoStatus(bind_errno, absl::StrCat(what, ": bind"));
  if (listen(fd.get(), static_cast<int>(kMaxClients)) != 0) {
    const int e = errno;
    (void)file->Unlink();
    return ErrnoStatus(e, absl::StrCat(what, ": listen"));
  }
  std::unique_ptr<Slirp4netnsApi> api(new Slirp4netnsApi(
      loop, forwards, guest4, std::move(fd), *std::move(file)));
  if (absl::Status s =
          loop.Add(api->listener_.get(), eventloop::EventLoop::kReadable,
                   api.get());
      !s.ok()) {
    return s;  // the destructor removes the file
  }
  return api;
}

Slirp4netnsApi::Slirp4netnsApi(eventloop::EventLoop& loop,
                               runtime::PortForwards& forwards,
                               wire::Ipv4Address guest4, UniqueFd listener,
                               link::DirEntryRef socket_file)
    : loop_(loop),
      forwards_(forwards),
      guest4_(guest4),
      listener_(std::move(listener)),
      socket_file_(std::move(socket_file)) {}

Slirp4netnsApi::~Slirp4netnsApi() {
  clients_.clear();
  if (loop_.IsRegistered(listener_.get())) (void)loop_.Remove(listener_.get());
  (void)socket_file_.Unlink();
}

void Slirp4netnsApi::OnReadable(Instant now) {
  // Bounded, like every handler on the loop.
  for (size_t i = 0; i < kMaxClients; ++i) {
    UniqueFd fd(accept4(listener_.get(), nullptr, nullptr,
                        SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) return;  // EAGAIN, or the client already went
    ++counters_.connections;
    if (clients_.size() >= kMaxClients) {
      ++counters_.refused_connections;
      continue;  // closed here
    }
    auto c = std::make_unique<Client>(*this, std::move(fd));
    if (!c->Start(now).ok()) continue;
    Client* key = c.get();
    clients_.emplace(key, std::move(c));
  }
}

void Slirp4netnsApi::Drop(Client* c) { clients_.erase(c); }

std::string Slirp4netnsApi::Error(std::string_view desc) {
  ++counters_.errors;
  return absl::StrCat(R"({"error":{"desc":)",
                      JsonQuote(absl::StrCat("bad request: ", std::string(desc))),
                      "}}");
}

std::string Slirp4netnsApi::TooLarge() {
  return R"({"error":{"desc":"bad request: too large message"}})";
}

std::string Slirp4netnsApi::Handle(std::string_view request) {
  ++counters_.requests;
  absl::StatusOr<JsonValue> req = bench::ParseJson(request);
  if (!req.ok()) return Error("cannot parse JSON");
  if (!req->is_object()) return Error("json_object() failed");
  const std::optional<std::string> execute = req->GetString("execute");
  if (!execute) return Error("no execute found");
  static const JsonValue kNoArguments = JsonValue::Object();
  const JsonValue* args = req->Find("arguments");
  if (args == nullptr || !args->is_object()) args = &kNoArguments;
  if (*execute == "add_hostfwd") return Add(*args);
  if (*execute == "list_hostfwd") return List();
  if (*execute == "remove_hostfwd") return Remove(*args);
  return Error("unknown execute");
}

std::string Slirp4netnsApi::Add(const JsonValue& args) {
  const std::optional<std::string> proto = args.GetString("proto");
  if (!proto || (*proto != "tcp" && *proto != "udp")) {
    return Error("add_hostfwd: bad arguments.proto");
  }
  std::optional<std::string> host_addr = OptionalString(args, "host_addr");
  if (host_addr && host_addr->empty()) host_addr = "0.0.0.0";
  std::optional<transport::IpAddress> bind;
  if (host_addr) bind = transport::IpAddress::Parse(*host_addr);
  if (!bind) return Error("add_hostfwd: bad arguments.host_addr");
  const std::optional<uint16_t> host_port = PortOf(args, "host_port");
  if (!host_port) return Error("add_hostfwd: bad arguments.host_port");
  const std::optional<std::string> guest_addr =
      OptionalString(args, "guest_addr");
  if (!guest_addr || (!guest_addr->empty() &&
                      wire::Ipv4Address::Parse(*guest_addr) != guest4_)) {
    return Error(absl::StrCat("add_hostfwd: bad arguments.guest_addr (the "
                              "guest is ",
                              guest4_.ToString(), ")"));
  }
  const std::optional<uint16_t> guest_port = PortOf(args, "guest_port");
  if (!guest_port) return Error("add_hostfwd: bad arguments.guest_port");

  runtime::ForwardRule rule;
  rule.udp = *proto == "udp";
  rule.bind = *bind;
  rule.host_port = *host_port;
  rule.guest_port = *guest_port;
  const std::string shown = bind->ToString();
  const std::string spec =
      absl::StrCat(bind->is_v6() ? absl::StrCat("[", shown, "]") : shown, "/",
                   *host_port, ":", *guest_port);
  absl::StatusOr<uint64_t> id = forwards_.Add(spec, {rule});
  if (!id.ok()) return Error(absl::StrCat("add_hostfwd: ", id.status().message()));
  entries_.push_back(Entry{*id, rule.udp, shown, *host_port, *guest_port});
  return absl::StrCat(R"({"return":{"id":)", *id, "}}");
}

std::string Slirp4netnsApi::List() const {
  bench::JsonWriter w;
  w.BeginObject().Key("entries").BeginArray();
  for (const Entry& e : entries_) {
    w.BeginObject()
        .Key("id")
        .Uint(e.id)
        .Key("proto")
        .String(e.udp ? "udp" : "tcp")
        .Key("host_addr")
        .String(e.host_addr)
        .Key("host_port")
        .Uint(e.host_port)
        .Key("guest_addr")
        .String(guest4_.ToString())
        .Key("guest_port")
        .Uint(e.guest_port)
        .EndObject();
  }
  w.EndArray().EndObject();
  return w.text();
}

std::string Slirp4netnsApi::Remove(const JsonValue& args) {
  const JsonValue* v = args.Find("id");
  if (v == nullptr || !v->is_number() || !(v->number() >= 1) ||
      std::floor(v->number()) != v->number() || v->number() > 1e15) {
    return Error("remove_hostfwd: bad arguments.id");
  }
  const auto id = static_cast<uint64_t>(v->number());
  auto it = entries_.begin();
  while (it != entries_.end() && it->id != id) ++it;
  if (it == entries_.end()) {
    return Error(absl::StrCat("remove_hostfwd: no forward with id ", id));
  }
  if (absl::Status s = forwards_.Remove(id); !s.ok()) {
    return Error(absl::StrCat("remove_hostfwd: ", s.message()));
  }
  entries_.erase(it);
  return R"({"return":{}})";
}

std::string Slirp4netnsApi::FormatCounters() const {
  const Slirp4netnsApiCounters& c = counters_;
  return absl::StrCat(
      "slirp4netns_api.connections ", c.connections,
      "\nslirp4netns_api.refused_connections ", c.refused_connections,
      "\nslirp4netns_api.requests ", c.requests, "\nslirp4netns_api.errors ",
      c.errors, "\nslirp4netns_api.timeouts ", c.timeouts,
      "\nslirp4netns_api.too_large ", c.too_large, "\n");
}

}  // namespace netstack::tools
