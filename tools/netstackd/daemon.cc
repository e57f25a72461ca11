#include "tools/netstackd/daemon.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "link/fd_util.h"
#include "link/netns.h"
#include "link/netns_sockets.h"
#include "link/tap_endpoint.h"
#include "link/unix_stream_endpoint.h"
#include "link/vhost_user_endpoint.h"
#include "netstack/backend/dns_forwarder.h"
#include "netstack/backend/ping_flows.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/policy/flow_log.h"
#include "netstack/policy/policy.h"
#include "netstack/runtime/fd_limit.h"
#include "netstack/runtime/runtime.h"
#include "tools/netstackd/control_api.h"
#include "tools/netstackd/forward_api.h"
#include "tools/netstackd/slirp4netns_api.h"
#include "netstack/sandbox/least_privilege.h"
#include "netstack/sandbox/rtnl.h"
#include "netstack/sandbox/sandbox.h"
#include "tools/netstackd/services/discard_service.h"
#include "tools/netstackd/services/echo_service.h"
#include "tools/netstackd/services/http_server.h"
#include "tools/netstackd/services/service.h"

namespace netstack::tools {
namespace {

using runtime::FdBudget;
using runtime::FdLimits;
using runtime::PortForwards;
using runtime::Runtime;
using runtime::RuntimeOptions;
using sandbox::AttemptForbiddenCall;
using sandbox::ConfigureGuestInterface;
using sandbox::DropPrivileges;
using sandbox::GuestInterface;
using sandbox::GuestNamespaces;
using sandbox::HideFromGuest;
using sandbox::JoinUserns;
using sandbox::LeastPrivilegeOptions;
using sandbox::MakeGuestNamespaces;
using sandbox::OpenNetnsOfPid;
using sandbox::OpenNetnsPath;
using sandbox::SandboxCommand;

// A setup step's failure: the message for stderr ("netstackd: " is added)
// and the exit status.
struct Failure {
  std::string message;
  int status = 1;
};

Failure Fail(const absl::Status& s, absl::string_view prefix = "") {
  return Failure{absl::StrCat(prefix, s.message())};
}

// A Handler that calls `fn` when its fd is readable (or hung up).
class OnReadableFn : public eventloop::Handler {
 public:
  explicit OnReadableFn(absl::AnyInvocable<void(Instant)> fn)
      : fn_(std::move(fn)) {}
  void OnReadable(Instant now) override { fn_(now); }

 private:
  absl::AnyInvocable<void(Instant)> fn_;
};

// How many -t connections fit: spliced ones (6 fds each) and ones through
// the stack (1 each), after the guest's own flows, once the fd limit is
// raised as far as it goes.
struct ForwardLimits {
  uint64_t spliced;
  uint64_t inbound_tcp;
};

ForwardLimits RaiseFdLimitFor(const Config& c) {
  ForwardLimits out{c.max_forward_conns, c.max_forward_conns};
  if (!c.backend) return out;
  // One host fd per flow: the limit must cover the flow limits.
  FdBudget budget;
  budget.tcp_flows = c.backend->limits.max_tcp_flows;
  budget.udp_flows = c.backend->limits.max_udp_flows;
  budget.ping_flows = backend::PingOptions{}.max_flows;
  budget.dns_queries = backend::DnsForwarderOptions{}.max_pending;
  bool udp_forwards = false;
  bool tcp_rules = false;
  for (const Config::Forward& f : c.forwards) {
    for (const ForwardRule& r : f.rules) {
      // One listener, or two without BIND_ADDR (both families).
      budget.forwards += r.bind || !r.unix_path.empty() ? 1 : 2;
      udp_forwards |= r.udp;
      tcp_rules |= !r.udp;
    }
  }
  // A forward API (--forward-api, slirp4netns's -a) may add forwards later.
  const bool api = !c.forward_api.empty() || !c.slirp4netns_api.empty();
  // A -u added later through an API has as many client flows.
  if (udp_forwards || api) {
    budget.forwards += c.backend->limits.max_udp_flows;
  }
  // A namespace guest's -t connections are spliced (the forward API may
  // add some later), 6 fds each; a VM's go through the stack, 1 each.
  if (tcp_rules || api) {
    if (c.guest != Config::Guest::kNone &&
        c.forward_path != ForwardPath::kStack) {
      budget.spliced_conns = c.max_forward_conns;
    } else {
      budget.stack_conns = c.max_forward_conns;
    }
  }
  FdLimits limits;
  const std::string line = runtime::RaiseFdLimit(budget, &limits);
  out.spliced = runtime::SplicedConnsThatFit(budget, limits.soft);
  out.inbound_tcp = runtime::StackConnsThatFit(budget, limits.soft);
  if (!c.quiet || absl::StrContains(line, "warning")) {
    std::fputs(line.c_str(), stderr);
  }
  return out;
}

// The guest's namespace when netstackd makes or joins it, and what tells
// that it is gone.
struct Guest {
  link::UniqueFd netns;
  link::UniqueFd userns;       // -- CMD's user namespace
  link::UniqueFd watched_pid;  // --netns-pid: quit when it exits
  std::string watched_path;    // --netns: quit when it is gone
  struct stat watched_stat {};
  link::DirEntryRef watched_entry;  // watched_path
};

// --netns NAME|PATH, watched by its directory: the check still works once
// the filesystem is detached (least_privilege.h).
absl::Status OpenNetnsPathGuest(const Config& c, Guest& g) {
  absl::StatusOr<link::UniqueFd> ns =
      OpenNetnsPath(c.netns_path, &g.watched_path);
  if (!ns.ok()) return ns.status();
  if (fstat(ns->get(), &g.watched_stat) != 0) {
    return link::ErrnoStatus(errno, absl::StrCat("stat ", g.watched_path));
  }
  absl::StatusOr<link::DirEntryRef> entry =
      link::DirEntryRef::Of(g.watched_path);
  if (!entry.ok()) return entry.status();
  g.watched_entry = *std::move(entry);
  g.netns = *std::move(ns);
  return absl::OkStatus();
}

// Makes or joins the guest's namespaces. Before any thread: a user
// namespace needs a single-threaded process.
absl::StatusOr<Guest> OpenGuest(const Config& c) {
  Guest g;
  // No process of the guest's may read or write our memory (issue #30,
  // sandbox.h): from before anything of the guest's runs or is joined.
  // Except that, when not root, -- CMD's start writes our own uid_map
  // first, which a non-dumpable process may not; no guest exists then.
  const bool maps_itself =
      c.guest == Config::Guest::kRun && geteuid() != 0 && c.userns.empty();
  if (!maps_itself) {
    if (absl::Status s = HideFromGuest(); !s.ok()) return s;
  }
  if (!c.userns.empty()) {
    if (absl::Status s = JoinUserns(c.userns); !s.ok()) return s;
  }
  switch (c.guest) {
    case Config::Guest::kNone:
      return g;
    case Config::Guest::kRun: {
      bool made_userns = false;
      absl::StatusOr<GuestNamespaces> made =
          MakeGuestNamespaces(&made_userns, c.runas);
      if (!made.ok()) return made.status();
      if (absl::Status h = HideFromGuest(); !h.ok()) return h;
      g.userns = std::move(made->userns);
      g.netns = std::move(made->netns);
      return g;
    }
    case Config::Guest::kNetnsPid: {
      const bool join = geteuid() != 0 && c.userns.empty();
      absl::StatusOr<link::UniqueFd> ns =
          OpenNetnsOfPid(c.netns_pid, join, &g.watched_pid);
      if (!ns.ok()) {
        return absl::Status(ns.status().code(),
                            absl::StrCat("--netns-pid ", c.netns_pid, ": ",
                                         ns.status().message()));
      }
      g.netns = *std::move(ns);
      return g;
    }
    case Config::Guest::kNetnsPath:
      if (absl::Status s = OpenNetnsPathGuest(c, g); !s.ok()) return s;
      return g;
  }
  return g;
}

// The guest's side of a namespace guest: lo and the TAP up, the plan's
// addresses (the DHCP lease's, and host ::100 of the IPv6 prefix),
// default routes.
absl::Status ConfigureGuest(const Config& c, int netns_fd) {
  const backend::AddressPlan& p = c.backend->plan;
  GuestInterface g;
  g.name = c.guest_ifname;
  g.mtu = p.mtu;
  // Room for a full receive window of MTU-sized frames: the guest's
  // frames wait in the TAP's queue until we read them.
  g.tx_queue_len = BackendTapQueueLen(p.mtu);
  g.addr4 = stack::Ipv4Cidr{p.lease4, p.net4.prefix_len};
  g.gateway4 = p.gateway4;
  g.addr6 = stack::Ipv6Cidr{p.net6.address, p.net6.prefix_len};
  g.addr6.address.bytes[14] = 0x01;
  g.addr6.address.bytes[15] = 0x00;
  g.gateway6 = p.gateway6;
  g.ipv6 = c.guest_static_ipv6 && c.backend->policy.ipv6;
  g.mac = c.guest_mac;
  return link::RunInNetnsFd(netns_fd,
                            [&] { return ConfigureGuestInterface(g); });
}

// --unix or a stream --fd: QEMU's framing on a UNIX stream socket.
runtime::LinkFactory StreamLink(const Config& c,
                                const link::UnixStreamEndpoint** stream) {
  link::UnixStreamOptions o;
  o.path = c.unix_path;
  o.mode = c.unix_connect ? link::UnixStreamOptions::Mode::kConnect
                          : link::UnixStreamOptions::Mode::kListen;
  o.allow_uid = c.unix_allow_uid;
  o.mac = c.mac;
  if (c.mtu != 0) o.mtu = c.mtu;
  if (c.backend) o.mtu = c.backend->plan.mtu;
  const int fd = c.fd;
  return [o, fd, stream](buffer::ChunkPool& chunks, buffer::PacketPool&)
             -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
    auto us = fd >= 0 ? link::UnixStreamEndpoint::FromConnectedFd(fd, o, chunks)
                      : link::UnixStreamEndpoint::Open(o, chunks);
    if (!us.ok()) return us.status();
    *stream = us->get();
    return std::unique_ptr<link::LinkEndpoint>(*std::move(us));
  };
}

// --vhost-user: QEMU's vhost-user-net front-end connects to PATH.
runtime::LinkFactory VhostUserLink(const Config& c) {
  link::VhostUserOptions o;
  o.path = c.vhost_user_path;
  o.allow_uid = c.unix_allow_uid;
  o.mac = c.mac;
  if (c.mtu != 0) o.mtu = c.mtu;
  if (c.backend) o.mtu = c.backend->plan.mtu;
  return [o](buffer::ChunkPool& chunks, buffer::PacketPool& packets)
             -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
    auto vu = link::VhostUserEndpoint::Listen(o, chunks, packets);
    if (!vu.ok()) return vu.status();
    return std::unique_ptr<link::LinkEndpoint>(*std::move(vu));
  };
}

// A TAP (made in the guest's namespace, named, or inherited) or an
// AF_PACKET socket.
runtime::HostLinkOptions HostLink(const Config& c, int guest_netns_fd) {
  runtime::HostLinkOptions o;
  o.tap_name = c.tap;
  if (guest_netns_fd >= 0) {
    o.tap_name = c.guest_ifname;
    o.tap_netns_fd = guest_netns_fd;
  }
  o.tap_fd = c.fd;
  o.tap_queues = c.tap_queues;
  if (o.tap_name.empty() && c.fd < 0) o.packet_interface = c.packet;
  o.netns = c.link_netns;
  o.mac = c.mac;
  o.mtu = c.backend ? c.backend->plan.mtu : c.mtu;
  o.host_gso_max_size = c.hostgso;
  if (c.backend && !o.tap_name.empty() && guest_netns_fd < 0) {
    // The guest's frames wait in the TAP's queue until we read them:
    // room for a full receive window of MTU-sized frames, so a burst the
    // window allows is not dropped there.
    o.tap_tx_queue_len = BackendTapQueueLen(c.backend->plan.mtu);
  }
  return o;
}

RuntimeOptions RuntimeOptionsFor(const Config& c, const Guest& g,
                                 const ForwardLimits& limits,
                                 const link::UnixStreamEndpoint** stream) {
  RuntimeOptions o;
  if (!c.vhost_user_path.empty()) {
    o.open_link = VhostUserLink(c);
  } else if (!c.unix_path.empty() || (c.fd >= 0 && !c.fd_is_tap)) {
    o.open_link = StreamLink(c, stream);
  } else {
    o.host = HostLink(c, g.netns.valid() ? g.netns.get() : -1);
  }
  o.decorators.pcap = c.pcap;
  o.decorators.faults = c.fault_options;
  o.decorators.software_gso_max_size = c.swgso;
  o.nic_name = c.fd >= 0           ? absl::StrCat("fd", c.fd)
               : !c.tap.empty()    ? c.tap
               : !c.packet.empty() ? c.packet
               : !c.vhost_user_path.empty() ? "vhost0"
               // The TAP netstackd made in a guest's namespace (--netns,
               // --netns-pid, -- CMD) is named there.
               : c.unix_path.empty() && g.netns.valid() ? c.guest_ifname
                                   : "unix0";
  o.addrs4 = c.addrs;
  o.addrs6 = c.addrs6;
  o.gateway4 = c.gateway4;
  o.gateway6 = c.gateway6;
  if (c.reassembly_timeout != absl::ZeroDuration()) {
    o.stack.reassembly.ipv4_timeout = c.reassembly_timeout;
    o.stack.reassembly.ipv6_timeout = c.reassembly_timeout;
  }
  o.tcp.busy_syn_rate = c.busy_syn_rate;
  o.tcp.busy_syn_burst = std::max<uint32_t>(1, c.busy_syn_rate / 10);
  if (c.backend) {
    o.backend = *c.backend;
    o.backend->limits.max_inbound_tcp_flows =
        static_cast<uint32_t>(limits.inbound_tcp);
    o.forwards.guest_netns_fd = g.netns.valid() ? g.netns.get() : -1;
    o.forwards.path = c.forward_path;
    o.forwards.max_conns = limits.spliced;
    o.forwards.max_conns_per_forward = c.max_conns_per_forward;
  }
  return o;
}

std::string StreamCounters(const link::UnixStreamEndpoint& stream) {
  const link::UnixStreamStats& u = stream.stream_stats();
  return absl::StrCat(
      "link.stream.connections ", u.connections,
      "\nlink.stream.rejected_peers ", u.rejected_peers,
      "\nlink.stream.refused_peers ", u.refused_peers,
      "\nlink.stream.disconnect_peer_closed ", u.disconnect_peer_closed,
      "\nlink.stream.disconnect_io_error ", u.disconnect_io_error,
      "\nlink.stream.disconnect_bad_length ", u.disconnect_bad_length, "\n");
}

// One run of netstackd, from the guest's namespace to the exit status.
// Members are declared so that they are destroyed in the right order:
// CMD and the APIs before the forwards and services, the services before
// the runtime (their sockets belong to its layers, their timers to its
// loop).
class Daemon {
 public:
  explicit Daemon(const Config& c) : c_(c) {}
  ~Daemon() {
    if (rt_ && netns_check_.scheduled()) {
      rt_->loop().timers().Cancel(netns_check_);
    }
  }
  int Run();

 private:
  std::optional<Failure> Start();
  std::optional<Failure> OpenFlowLog();
  std::optional<Failure> StartServices();
  std::optional<Failure> HandleSignals();
  std::optional<Failure> WatchLifetime();
  std::optional<Failure> StartForwardsAndApis();
  std::optional<Failure> StartCommand();
  std::optional<Failure> FenceForwardApi();
  std::optional<Failure> Sandbox(bool* gone);
  void SignalReady();
  // The egress policy: a new file text (SIGHUP's --policy FILE, or the
  // forward API's) beside the command line's rules; an error keeps the
  // policy in force. Returns the flows reset.
  // `label` says where the text came from, in the log line; `file_label`
  // prefixes a parse error ("" for none).
  absl::StatusOr<uint64_t> ReplaceEgress(std::string_view file_text,
                                         std::string_view label,
                                         std::string_view file_label);
  void ReloadPolicyFile();
  PolicySummary EgressSummary() const;
  bool Watch(int fd, eventloop::Handler* handler, std::optional<Failure>* f);
  void PrintCounters(const char* why);
  std::string Counters() const { return rt_->FormatCounters(); }

  const Config& c_;
  Guest guest_;
  // --flow-log: before rt_, so that it outlives the backend, which
  // records the flows it closes while it goes.
  std::unique_ptr<policy::FlowLog> flow_log_;
  // The egress policy in force (the backend's; never null).
  std::shared_ptr<const policy::Policy> egress_;
  std::unique_ptr<Runtime> rt_;
  const link::UnixStreamEndpoint* stream_ = nullptr;  // owned by rt_
  ServiceContext ctx_;
  std::vector<std::unique_ptr<Service>> services_;
  eventloop::Timer netns_check_;
  std::unique_ptr<ForwardApi> forward_api_;
  std::unique_ptr<Slirp4netnsApi> slirp4netns_api_;
  std::unique_ptr<ControlApi> control_;
  std::optional<SandboxCommand> command_;
  int exit_status_ = 0;
  bool gone_ = false;  // the --netns went away while we started
  std::unique_ptr<OnReadableFn> watch_command_, watch_pid_, watch_exit_fd_;
};

int Daemon::Run() {
  std::optional<Failure> f = Start();
  if (f) {
    std::fprintf(stderr, "netstackd: %s\n", f->message.c_str());
    return f->status;
  }
  if (gone_) return 0;  // the --netns it serves is gone already
  const absl::Status run = rt_->Run();
  if (netns_check_.scheduled()) rt_->loop().timers().Cancel(netns_check_);
  if (!c_.quiet) PrintCounters("exit");
  if (!run.ok()) {
    std::fprintf(stderr, "netstackd: %s\n", std::string(run.message()).c_str());
    return 1;
  }
  return exit_status_;
}

std::optional<Failure> Daemon::Start() {
  const ForwardLimits limits = RaiseFdLimitFor(c_);
  absl::StatusOr<Guest> guest = OpenGuest(c_);
  if (!guest.ok()) return Fail(guest.status());
  guest_ = *std::move(guest);
  absl::StatusOr<std::unique_ptr<Runtime>> rt =
      Runtime::Create(RuntimeOptionsFor(c_, guest_, limits, &stream_));
  if (!rt.ok()) {
    // The link's own errors name it; "link: " says nothing more.
    absl::Status s = rt.status();
    if (absl::StartsWith(s.message(), "link: ")) {
      s = absl::Status(s.code(), s.message().substr(6));
    }
    return Fail(s);
  }
  rt_ = *std::move(rt);
  if (guest_.netns.valid() && c_.configure_guest) {
    if (absl::Status s = ConfigureGuest(c_, guest_.netns.get()); !s.ok()) {
      return Fail(s, "guest interface: ");
    }
  }
  if (stream_ != nullptr) {
    rt_->AddCounters([this] { return StreamCounters(*stream_); });
  }
  if (const auto* vu =
          dynamic_cast<const link::VhostUserEndpoint*>(&rt_->host_link())) {
    rt_->AddCounters([vu] { return link::FormatVhostUserCounters(*vu); });
  }
  // A TAP's frames whose virtio-net header lied (docs/COUNTERS.md).
  if (const auto* tap =
          dynamic_cast<const link::TapEndpoint*>(&rt_->host_link())) {
    rt_->AddCounters([tap] { return tap->FormatVnetCounters(); });
  }
  egress_ = rt_->backend() != nullptr ? rt_->backend()->egress_policy()
            : c_.egress                 ? c_.egress
                                        : policy::Policy::Open();
  using Step = std::optional<Failure> (Daemon::*)();
  for (Step step : {&Daemon::OpenFlowLog, &Daemon::StartServices,
                    &Daemon::HandleSignals,
                    &Daemon::WatchLifetime, &Daemon::StartForwardsAndApis,
                    &Daemon::StartCommand, &Daemon::FenceForwardApi}) {
    if (std::optional<Failure> f = (this->*step)()) return f;
  }
  if (std::optional<Failure> f = Sandbox(&gone_)) return f;
  if (gone_) return std::nullopt;
  if (!c_.sandbox_test.empty()) AttemptForbiddenCall(c_.sandbox_test);
  SignalReady();
  return std::nullopt;
}

// --flow-log FILE, opened before the sandbox detaches the filesystem
// (the log keeps its directory's fd for rotation), written once a turn.
std::optional<Failure> Daemon::OpenFlowLog() {
  if (c_.flow_log.empty()) return std::nullopt;
  policy::FlowLog::Options o;
  o.path = c_.flow_log;
  o.max_bytes = c_.flow_log_max_bytes;
  o.max_lines_per_second = c_.flow_log_rate;
  absl::StatusOr<std::unique_ptr<policy::FlowLog>> log =
      policy::FlowLog::Open(o, rt_->loop().Now());
  if (!log.ok()) return Fail(log.status(), "--flow-log: ");
  flow_log_ = *std::move(log);
  // flow_log_ is declared before rt_: it outlives the backend.
  if (rt_->backend() != nullptr) rt_->backend()->SetFlowLog(flow_log_.get());
  rt_->AddSweep([this](Instant) { flow_log_->Flush(); });
  rt_->AddCounters([this] { return flow_log_->FormatCounters(); });
  return std::nullopt;
}

absl::StatusOr<uint64_t> Daemon::ReplaceEgress(std::string_view file_text,
                                               std::string_view label,
                                               std::string_view file_label) {
  absl::StatusOr<std::shared_ptr<const policy::Policy>> p = MakeEgressPolicy(
      c_.policy_rules, c_.egress_none, file_text, file_label);
  if (!p.ok()) return p.status();
  egress_ = *std::move(p);
  // The backend resets the open flows the new policy denies.
  const uint64_t reset = rt_->backend() != nullptr
                             ? rt_->backend()->SetEgressPolicy(egress_)
                             : 0;
  if (!c_.quiet) {
    std::fprintf(stderr, "netstackd: %.*s: %s; %llu flows reset\n",
                 static_cast<int>(label.size()), label.data(),
                 DescribeEgress(*egress_).c_str(),
                 static_cast<unsigned long long>(reset));
    std::fflush(stderr);
  }
  return reset;
}

// SIGHUP: --policy FILE again. A file that cannot be read or does not
// parse keeps the policy in force, and says why (even when quiet: the
// operator asked for the change).
void Daemon::ReloadPolicyFile() {
  const std::string label =
      absl::StrCat("SIGHUP: --policy ", c_.policy_file->path());
  absl::StatusOr<std::string> text = c_.policy_file->Read();
  absl::StatusOr<uint64_t> reset =
      text.ok() ? ReplaceEgress(*text, label, "")
                : absl::StatusOr<uint64_t>(text.status());
  if (!reset.ok()) {
    std::fprintf(stderr, "netstackd: %s: %s; the policy in force stays\n",
                 label.c_str(), std::string(reset.status().message()).c_str());
    std::fflush(stderr);
  }
}

PolicySummary Daemon::EgressSummary() const {
  PolicySummary out;
  out.mode = egress_->egress_none() ? "none"
             : egress_->allowlist() ? "allowlist"
                                    : "open";
  for (const policy::Rule& r : egress_->rules()) out.rules.push_back(r.text);
  return out;
}

// The services come after the runtime, so they are destroyed first.
std::optional<Failure> Daemon::StartServices() {
  ctx_.tcp = &rt_->tcp();
  ctx_.udp = &rt_->udp();
  ctx_.timers = &rt_->loop().timers();
  ctx_.now = rt_->loop().Now();
  rt_->AddSweep([this](Instant now) { ctx_.now = now; },
                Runtime::Phase::kBeforeCallbacks);
  rt_->AddSweep([this](Instant) {
    for (auto& s : services_) s->Sweep();
  });
  rt_->AddCounters([this] {
    std::string text;
    for (const auto& s : services_) {
      absl::StrAppend(&text, s->FormatCounters(), s->FormatConnections());
    }
    return text;
  });
  if (!c_.http_root.empty()) {
    HttpServerOptions o;
    o.root = c_.http_root;
    o.port = c_.http_port;
    auto http = HttpServer::Start(ctx_, o);
    if (!http.ok()) {
      // EADDRINUSE is the port's fault; anything else, the root's.
      return Fail(http.status(), absl::IsAlreadyExists(http.status())
                                     ? "--http-port: "
                                     : "--http-root: ");
    }
    services_.push_back(std::move(*http));
  }
  if (c_.echo_port != 0) {
    auto echo = EchoService::Start(ctx_, c_.echo_port);
    if (!echo.ok()) return Fail(echo.status(), "--echo-port: ");
    services_.push_back(std::move(*echo));
  }
  if (c_.discard_port != 0) {
    auto discard = DiscardService::Start(ctx_, c_.discard_port);
    if (!discard.ok()) return Fail(discard.status(), "--discard-port: ");
    services_.push_back(std::move(*discard));
  }
  return std::nullopt;
}

void Daemon::PrintCounters(const char* why) {
  std::fprintf(stderr, "netstackd: counters (%s):\n%s", why,
               Counters().c_str());
  std::fflush(stderr);
}

// SIGUSR1 prints the counters. SIGINT, SIGTERM (and, with CMD, SIGHUP and
// SIGWINCH: the terminal's new size, for CMD's pty) go on to CMD once it
// runs; before, or without CMD, they stop netstackd.
std::optional<Failure> Daemon::HandleSignals() {
  std::vector<int> signals = {SIGINT, SIGTERM, SIGUSR1};
  if (c_.guest == Config::Guest::kRun || c_.policy_file) {
    signals.push_back(SIGHUP);
  }
  if (c_.guest == Config::Guest::kRun) signals.push_back(SIGWINCH);
  absl::Status s =
      rt_->loop().HandleSignals(signals, [this](int signo, Instant) {
        if (signo == SIGUSR1) {
          PrintCounters("SIGUSR1");
        } else if (signo == SIGHUP && c_.policy_file) {
          ReloadPolicyFile();
        } else if (command_) {
          command_->Signal(signo);
        } else {
          rt_->Stop();
        }
      });
  if (!s.ok()) return Fail(s);
  if (!c_.quiet) {
    std::fprintf(stderr, "netstackd: running on %s (nic %u), pid %d\n%s",
                 rt_->link().Name().c_str(), rt_->nic(),
                 static_cast<int>(getpid()), StartSummary(c_).c_str());
    for (const std::string& note : rt_->notes()) {
      std::fprintf(stderr, "netstackd: note: %s\n", note.c_str());
    }
    std::fflush(stderr);
  }
  return std::nullopt;
}

bool Daemon::Watch(int fd, eventloop::Handler* handler,
                   std::optional<Failure>* f) {
  absl::Status s =
      rt_->loop().Add(fd, eventloop::EventLoop::kReadable, handler);
  if (!s.ok()) *f = Fail(s);
  return s.ok();
}

// What netstackd serves, and stops with: the --netns-pid process, the
// --exit-fd's other end, the --netns namespace (checked once a second:
// `ip netns del` unmounts it). CMD is watched once it runs.
std::optional<Failure> Daemon::WatchLifetime() {
  eventloop::EventLoop& loop = rt_->loop();
  std::optional<Failure> f;
  if (guest_.watched_pid.valid()) {
    watch_pid_ = std::make_unique<OnReadableFn>([this](Instant) {
      (void)rt_->loop().Remove(guest_.watched_pid.get());
      rt_->Stop();
    });
    if (!Watch(guest_.watched_pid.get(), watch_pid_.get(), &f)) return f;
  }
  if (c_.exit_fd >= 0) {
    watch_exit_fd_ = std::make_unique<OnReadableFn>([this](Instant) {
      char byte;
      const ssize_t n = read(c_.exit_fd, &byte, 1);
      if (c_.exit_on_any_event || n == 0 ||
          (n < 0 && errno != EAGAIN && errno != EINTR)) {
        (void)rt_->loop().Remove(c_.exit_fd);
        rt_->Stop();
      }
    });
    if (!Watch(c_.exit_fd, watch_exit_fd_.get(), &f)) return f;
  }
  if (!guest_.watched_path.empty()) {
    netns_check_.set_callback([this](Instant now) {
      struct stat now_stat;
      if (guest_.watched_entry.Stat(&now_stat) != 0 ||
          now_stat.st_dev != guest_.watched_stat.st_dev ||
          now_stat.st_ino != guest_.watched_stat.st_ino) {
        std::fprintf(stderr, "netstackd: %s is gone; quitting\n",
                     guest_.watched_path.c_str());
        rt_->Stop();
        return;
      }
      rt_->loop().timers().Schedule(netns_check_, now + absl::Seconds(1));
    });
    loop.timers().Schedule(netns_check_, loop.Now() + absl::Seconds(1));
  }
  return std::nullopt;
}

std::optional<Failure> Daemon::StartForwardsAndApis() {
  auto counters = [this] { return Counters(); };
  if (PortForwards* forwards = rt_->forwards()) {
    for (const Config::Forward& f : c_.forwards) {
      auto added = forwards->Add(f.spec, f.rules);
      if (!added.ok()) return Fail(added.status(), f.flag + " ");
    }
    if (!c_.forward_api.empty()) {
      auto api =
          ForwardApi::Create(rt_->loop(), *forwards, counters, c_.forward_api);
      if (!api.ok()) return Fail(api.status());
      forward_api_ = *std::move(api);
      rt_->AddCounters([this] { return forward_api_->FormatCounters(); });
      PolicyHooks hooks;
      hooks.get = [this] { return EgressSummary(); };
      hooks.replace = [this](std::string_view text) {
        return ReplaceEgress(text, "--forward-api: policy replaced", "");
      };
      forward_api_->SetPolicyHooks(std::move(hooks));
    }
    if (!c_.slirp4netns_api.empty()) {
      auto api = Slirp4netnsApi::Create(rt_->loop(), *forwards,
                                        c_.slirp4netns_api,
                                        c_.backend->plan.lease4);
      if (!api.ok()) return Fail(api.status());
      slirp4netns_api_ = *std::move(api);
      rt_->AddCounters([this] { return slirp4netns_api_->FormatCounters(); });
    }
  }
  if (!c_.control.empty()) {
    auto api = ControlApi::Create(rt_->loop(), rt_->tcp(), rt_->udp(), counters,
                                  c_.control);
    if (!api.ok()) return Fail(api.status());
    control_ = *std::move(api);
    rt_->AddCounters([this] { return control_->FormatCounters(); });
  }
  return std::nullopt;
}

std::optional<Failure> Daemon::StartCommand() {
  if (c_.guest != Config::Guest::kRun) return std::nullopt;
  SandboxCommand::Options o;
  o.argv = c_.command;
  o.netns_fd = guest_.netns.get();
  o.userns_fd = guest_.userns.get();
  // CMD is the caller's uid (or --runas's) and may write the API socket's
  // directory: covered in CMD's mount namespace, the socket can be
  // neither reached nor removed nor replaced from there (docs/SECURITY.md
  // says what that leaves).
  if (forward_api_) {
    std::string path = c_.forward_api;
    if (path[0] != '/') {
      char cwd[PATH_MAX];
      if (getcwd(cwd, sizeof(cwd)) == nullptr) {
        return Failure{absl::StrCat("getcwd: ", std::strerror(errno))};
      }
      path = absl::StrCat(cwd, "/", path);
    }
    o.cover.push_back(std::move(path));
  }
  if (c_.dns_config) {
    const backend::AddressPlan& p = c_.backend->plan;
    o.resolv_conf = absl::StrCat("# netstackd: the guest's DNS address\n",
                                 "nameserver ", p.dns4.ToString(), "\n",
                                 "nameserver ", p.dns6.ToString(), "\n");
  }
  absl::StatusOr<SandboxCommand> started = SandboxCommand::Start(o);
  if (!started.ok()) {
    return Failure{std::string(started.status().message()),
                   absl::IsNotFound(started.status()) ? 127 : 126};
  }
  command_.emplace(std::move(*started));
  if (!c_.quiet) {
    for (const std::string& note : command_->notes()) {
      std::fprintf(stderr, "netstackd: %s\n", note.c_str());
    }
  }
  watch_command_ = std::make_unique<OnReadableFn>([this](Instant) {
    if (command_ && command_->Reap(&exit_status_)) {
      (void)rt_->loop().Remove(command_->pidfd());
      rt_->Stop();
    }
  });
  std::optional<Failure> f;
  Watch(command_->pidfd(), watch_command_.get(), &f);
  return f;
}

// The forward API is the operator's: CMD runs as our user and sees our
// files, so it is refused by PID namespace; so is a --netns-pid guest
// whose namespace is below ours (forward_api.h).
std::optional<Failure> Daemon::FenceForwardApi() {
  if (!forward_api_ || (!command_ && !guest_.watched_pid.valid())) {
    return std::nullopt;
  }
  const pid_t guest = command_ ? command_->pid() : c_.netns_pid;
  absl::Status s = forward_api_->RefuseClientsBelow(
      guest, command_ ? "CMD's" : "the --netns-pid process's");
  if (s.ok()) return std::nullopt;
  const std::string message =
      absl::StrCat("--forward-api: ", s.message(),
                   command_ ? "" : ": its processes are not told apart");
  if (command_) return Failure{message};
  std::fprintf(stderr, "netstackd: %s\n", message.c_str());
  return std::nullopt;
}

std::optional<Failure> Daemon::Sandbox(bool* gone) {
  if (!c_.sandbox) return std::nullopt;
  LeastPrivilegeOptions lp;
  lp.keep_net_bind_service =
      !c_.forward_api.empty() || !c_.slirp4netns_api.empty();
  lp.serve_files = !c_.http_root.empty();
  lp.log_only = c_.sandbox_log;
  if (command_) lp.cmd_pid = command_->pid();
  if (forward_api_) lp.proc_dir_fd = forward_api_->proc_dir_fd();
  if (flow_log_) lp.flow_log_dir_fd = flow_log_->dir_fd();
  if (c_.policy_file) lp.policy_dir_fd = c_.policy_file->dir_fd();
  PortForwards* forwards = rt_->forwards();
  if (link::NetnsSockets* other =
          forwards != nullptr ? forwards->guest_sockets() : nullptr) {
    lp.on_other_threads = [other](absl::FunctionRef<absl::Status()> step) {
      return other->RunOnWorker(step);
    };
  }
  if (absl::Status s = DropPrivileges(lp); !s.ok()) {
    return Failure{absl::StrCat("--sandbox: ", s.message(),
                                " (--sandbox=off runs without it)")};
  }
  if (forwards != nullptr && lp.detach_filesystem) {
    forwards->FilesystemDetached();
  }
  // What --netns PATH looks like from here on: once the mount namespace
  // is detached, the name no longer leads into the namespace's own mount
  // (the nsfs inode fstat gave) but to the file under it. Either goes
  // away with `ip netns del`, which unmounts and unlinks it.
  if (guest_.watched_entry.valid() &&
      guest_.watched_entry.Stat(&guest_.watched_stat) != 0) {
    std::fprintf(stderr, "netstackd: %s is gone; quitting\n",
                 guest_.watched_path.c_str());
    *gone = true;
  }
  return std::nullopt;
}

void Daemon::SignalReady() {
  if (c_.ready_fd < 0) return;
  const char ready = '1';
  if (write(c_.ready_fd, &ready, 1) != 1) {
    std::fprintf(stderr, "netstackd: --ready-fd %d: %s\n", c_.ready_fd,
                 std::strerror(errno));
  }
  close(c_.ready_fd);
}

}  // namespace

int RunDaemon(const Config& config) { return Daemon(config).Run(); }

}  // namespace netstack::tools
