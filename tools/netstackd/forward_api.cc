#include "tools/netstackd/forward_api.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "netstack/runtime/forward_spec.h"
#include "tools/netstackd/counter_json.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {

using runtime::ForwardCounters;
using runtime::ForwardInfo;
using runtime::ParseForwardSpec;
using runtime::PortForwards;
using sandbox::PidNamespaceFence;

namespace {

using bench::JsonValue;
using bench::JsonWriter;

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
    w.Key("udp_expired_unreplied").Uint(c.udp_expired_unreplied);
    w.Key("udp_evicted_unreplied").Uint(c.udp_evicted_unreplied);
    w.Key("udp_evicted_replied").Uint(c.udp_evicted_replied);
  }
  w.EndObject();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ForwardApi>> ForwardApi::Create(
    eventloop::EventLoop& loop, PortForwards& forwards,
    std::function<std::string()> counters, const std::string& path) {
  std::unique_ptr<ForwardApi> api(
      new ForwardApi(forwards, std::move(counters)));
  ForwardApi* raw = api.get();
  JsonLinesServer::Options o;
  o.flag = "--forward-api";
  o.max_line = kMaxLine;
  o.max_output = kMaxOutput;
  o.max_clients = kMaxClients;
  o.max_lines_per_wakeup = kMaxLinesPerWakeup;
  o.handle = [raw](std::string_view line, Instant) {
    return raw->Handle(line);
  };
  o.too_long = [raw] {
    ++raw->counters_.errors;
    return Error(
        absl::StrCat("request longer than ", kMaxLine, " bytes: closing"));
  };
  absl::StatusOr<std::unique_ptr<JsonLinesServer>> server =
      JsonLinesServer::Create(loop, path, std::move(o));
  if (!server.ok()) return server.status();
  api->server_ = *std::move(server);
  return api;
}

ForwardApi::ForwardApi(PortForwards& forwards,
                       std::function<std::string()> counters)
    : forwards_(forwards), counter_text_(std::move(counters)) {}

ForwardApi::~ForwardApi() = default;

absl::Status ForwardApi::RefuseClientsBelow(pid_t pid, std::string owner) {
  PidNamespaceFence::Options o;
  o.owner = std::move(owner);
  absl::StatusOr<std::unique_ptr<PidNamespaceFence>> fence =
      PidNamespaceFence::Below(pid, std::move(o));
  if (absl::IsNotFound(fence.status())) {
    // Gone already (CMD has exited, and the init with it, or is about
    // to): nothing is told apart any more, so nobody is admitted; the
    // loop stops once it sees the exit.
    const std::string why =
        absl::StrCat("the guest's PID namespace could not be checked (",
                     fence.status().message(), ")");
    server_->SetPeerCheck(
        [why](int) { return absl::PermissionDeniedError(why); });
    return absl::OkStatus();
  }
  if (!fence.ok()) return fence.status();
  fence_ = *std::move(fence);
  const PidNamespaceFence* f = fence_.get();
  server_->SetPeerCheck([f](int fd) { return f->CheckPeer(fd); });
  return absl::OkStatus();
}

ForwardApiCounters ForwardApi::counters() const {
  ForwardApiCounters c = counters_;
  if (server_) {
    c.connections = server_->connections();
    c.refused_connections = server_->refused_connections();
    c.closed_slow_clients = server_->closed_slow_clients();
    c.refused_peers = server_->refused_peers();
  }
  return c;
}

namespace {

// The ops; an error's message is the reply's "error".
absl::StatusOr<std::string> AddOp(PortForwards& forwards,
                                  const JsonValue& req) {
  const std::optional<std::string> proto = req.GetString("proto");
  const std::optional<std::string> spec = req.GetString("spec");
  if (!proto || (*proto != "tcp" && *proto != "udp")) {
    return absl::InvalidArgumentError(
        "add: \"proto\" must be \"tcp\" or \"udp\"");
  }
  if (!spec) return absl::InvalidArgumentError("add: no \"spec\"");
  const bool udp = *proto == "udp";
  const std::string flag = udp ? "-u " : "-t ";
  auto rules = ParseForwardSpec(udp, *spec);
  if (!rules.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, *spec, ": ", rules.status().message()));
  }
  absl::StatusOr<uint64_t> id = forwards.Add(*spec, *rules);
  if (!id.ok()) {
    return absl::Status(id.status().code(),
                        absl::StrCat(flag, id.status().message()));
  }
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true).Key("id").Uint(*id).EndObject();
  return w.text();
}

absl::StatusOr<std::string> RemoveOp(PortForwards& forwards,
                                     const JsonValue& req) {
  const std::optional<int64_t> id = req.GetInt("id");
  if (!id || *id <= 0) {
    return absl::InvalidArgumentError(
        "remove: \"id\" must be a forward's id");
  }
  if (absl::Status s = forwards.Remove(static_cast<uint64_t>(*id)); !s.ok()) {
    return s;
  }
  return Ok();
}

std::string ListOp(const PortForwards& forwards) {
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true).Key("forwards").BeginArray();
  for (const ForwardInfo& i : forwards.List()) {
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

void WritePolicy(JsonWriter& w, const PolicySummary& p) {
  w.Key("policy").BeginObject().Key("mode").String(p.mode);
  w.Key("rules").BeginArray();
  for (const std::string& r : p.rules) w.String(r);
  w.EndArray().EndObject();
}

// {"op":"policy"}: the policy in force; with "replace" (an array of
// policy file lines) or "file" (a file's text), a new one first.
absl::StatusOr<std::string> PolicyOp(const PolicyHooks& hooks,
                                     const JsonValue& req) {
  if (!hooks.get || !hooks.replace) {
    return absl::FailedPreconditionError(
        "policy: no egress policy here (netstackd --backend, -- CMD or "
        "--netns-pid has one)");
  }
  const JsonValue* replace = req.Find("replace");
  const JsonValue* file = req.Find("file");
  if (replace != nullptr && file != nullptr) {
    return absl::InvalidArgumentError(
        "policy: \"replace\" or \"file\", not both");
  }
  std::optional<uint64_t> reset;
  if (replace != nullptr || file != nullptr) {
    std::string text;
    if (replace != nullptr) {
      if (!replace->is_array()) {
        return absl::InvalidArgumentError(
            "policy: \"replace\" is an array of rules (\"allow RULE\", "
            "\"deny RULE\", \"egress none\")");
      }
      for (const JsonValue& item : replace->items()) {
        // A line break inside an item would make two lines of one.
        if (!item.is_string() ||
            item.string().find_first_of("\r\n") != std::string::npos) {
          return absl::InvalidArgumentError(
              "policy: each \"replace\" item is one rule, a string");
        }
        absl::StrAppend(&text, item.string(), "\n");
      }
    } else {
      if (!file->is_string()) {
        return absl::InvalidArgumentError(
            "policy: \"file\" is a policy file's text, a string");
      }
      text = file->string();
    }
    absl::StatusOr<uint64_t> n = hooks.replace(text);
    if (!n.ok()) {
      return absl::Status(n.status().code(),
                          absl::StrCat("policy: ", n.status().message()));
    }
    reset = *n;
  }
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true);
  if (reset) w.Key("reset").Uint(*reset);
  WritePolicy(w, hooks.get());
  w.EndObject();
  return w.text();
}

std::string CountersOp(const std::string& text) {
  JsonWriter w;
  w.BeginObject().Key("ok").Bool(true).Key("counters").BeginObject();
  WriteCounterText(w, text, /*keep_text=*/true);
  w.EndObject().EndObject();
  return w.text();
}

}  // namespace

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
  if (!op) return fail("no \"op\" (add, remove, list, counters or policy)");
  absl::StatusOr<std::string> reply;
  if (*op == "add") {
    reply = AddOp(forwards_, *req);
  } else if (*op == "remove") {
    reply = RemoveOp(forwards_, *req);
  } else if (*op == "list") {
    reply = ListOp(forwards_);
  } else if (*op == "counters") {
    reply = CountersOp(counter_text_ ? counter_text_() : std::string());
  } else if (*op == "policy") {
    reply = PolicyOp(policy_, *req);
  } else {
    return fail(absl::StrCat("unknown op '", *op,
                             "' (add, remove, list, counters or policy)"));
  }
  if (!reply.ok()) return fail(reply.status().message());
  return *std::move(reply);
}

std::string ForwardApi::FormatCounters() const {
  const ForwardApiCounters c = counters();
  return absl::StrCat("forward_api.connections ", c.connections, "\n",
                      "forward_api.refused_connections ", c.refused_connections,
                      "\n", "forward_api.closed_slow_clients ",
                      c.closed_slow_clients, "\n", "forward_api.refused_peers ",
                      c.refused_peers, "\n", "forward_api.requests ",
                      c.requests, "\n", "forward_api.errors ", c.errors, "\n");
}

}  // namespace netstack::tools
