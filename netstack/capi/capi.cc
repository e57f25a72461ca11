// libnetstack's C ABI (netstack.h) on the runtime (runtime.h).
//
// netstack_new turns the caller's config into RuntimeOptions with a
// backend: the address plan, the policy, the limits, and the guest link
// (a TAP fd, a stream socket, or the embedder's callbacks through a
// link::CallbackEndpoint). Every other function is a thin call into the
// runtime. Nothing C++ crosses back: absl::Status becomes a negative
// errno plus the handle's last_error, and no function throws (the
// library is built with -fno-exceptions).
#include <errno.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "link/callback_endpoint.h"
#include "link/fd_util.h"
#include "link/unix_stream_endpoint.h"
#include "link/vhost_user_endpoint.h"
#include "netstack/backend/backend.h"
#include "netstack/backend/dns_config.h"
#include "netstack/capi/capi_internal.h"
#include "netstack/capi/netstack.h"
#include "netstack/policy/policy.h"
#include "netstack/policy/policy_file.h"
#include "netstack/runtime/forward_spec.h"
#include "netstack/runtime/runtime.h"
#include "netstack/stack/route_table.h"
#include "netstack/wire/address.h"

namespace netstack::capi {
namespace {

using runtime::RuntimeOptions;

// The config as 1.0 has it. A caller's struct is at least this big: 1.0
// is the first release. Fields appended later are read only when the
// caller's size covers them (CopyConfig leaves the rest zero: a 1.0
// caller's policy_file is NULL).
constexpr size_t kConfigSizeV1 =
    offsetof(netstack_config, tcp_guest_timeout_ms) + sizeof(uint32_t);
// The environment variable that names a policy file when policy_file is
// NULL: for callers that cannot pass a config (QEMU through libslirp).
constexpr char kPolicyEnv[] = "NETSTACK_POLICY";
// A super-segment of TCP's: the software splitter above a link without
// host GSO, and the host GSO of a TAP with a vnet header.
constexpr uint32_t kGsoMaxSize = 65535;
// Frames netstack_input queues before it runs a turn itself: one delivery
// batch of the link's.
constexpr size_t kInputTurnBatch = 64;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

// The caller's struct into ours, field by field as far as its size goes:
// the rest keeps netstack_config_init's defaults. Fields past ours must
// be zero: this library cannot do what they ask.
absl::Status CopyConfig(const netstack_config* cfg, netstack_config* out) {
  if (cfg == nullptr) return Invalid("config is NULL");
  netstack_config_init(out);
  const uint32_t size = cfg->size;
  if (size < kConfigSizeV1) {
    return Invalid(absl::StrCat(
        "config size ", size, " is smaller than netstack 1.0's (",
        kConfigSizeV1, "): call netstack_config_init() before filling it"));
  }
  if (size > sizeof(netstack_config)) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(cfg);
    for (size_t i = sizeof(netstack_config); i < size; ++i) {
      if (bytes[i] != 0) {
        return Invalid(absl::StrCat(
            "config has fields past this library's (", sizeof(netstack_config),
            " bytes; the caller's header has ", size, "): libnetstack ",
            netstack_version(), " is older than the header it was built with"));
      }
    }
  }
  std::memcpy(out, cfg, std::min<size_t>(size, sizeof(netstack_config)));
  out->size = sizeof(netstack_config);
  return absl::OkStatus();
}

bool Given(const char* s) { return s != nullptr && s[0] != '\0'; }

template <typename Address, typename Cidr>
absl::Status HostIn(const char* field, const char* text, const Cidr& net,
                    Address* out) {
  if (!Given(text)) return absl::OkStatus();
  std::optional<Address> a = Address::Parse(text);
  if (!a) return Invalid(absl::StrCat(field, ": '", text, "' is not an address"));
  if (!net.Contains(*a) || *a == net.address) {
    return Invalid(absl::StrCat(field, ": ", text, " is not a host of ",
                                net.address.ToString(), "/", net.prefix_len));
  }
  *out = *a;
  return absl::OkStatus();
}

// net4/net6 with hosts 2, 3 and 100, then whatever the caller set.
absl::StatusOr<backend::AddressPlan> ParsePlan(const netstack_config& c,
                                               uint32_t mtu) {
  const char* n4 = Given(c.net4) ? c.net4 : "10.0.2.0/24";
  const char* n6 = Given(c.net6) ? c.net6 : "fd00::/64";
  std::optional<stack::Ipv4Cidr> net4 = stack::ParseIpv4Cidr(n4);
  if (!net4) {
    return Invalid(absl::StrCat("net4: bad IPv4 CIDR '", n4,
                                "' (want e.g. 10.0.2.0/24)"));
  }
  std::optional<stack::Ipv6Cidr> net6 = stack::ParseIpv6Cidr(n6);
  if (!net6) {
    return Invalid(
        absl::StrCat("net6: bad IPv6 prefix '", n6, "' (want e.g. fd00::/64)"));
  }
  absl::StatusOr<backend::AddressPlan> plan =
      backend::AddressPlan::ForNetworks(*net4, *net6, mtu);
  if (!plan.ok()) return plan.status();
  backend::AddressPlan& p = *plan;
  for (absl::Status s :
       {HostIn("gateway4", c.gateway4, p.net4, &p.gateway4),
        HostIn("dns4", c.dns4, p.net4, &p.dns4),
        HostIn("lease4", c.lease4, p.net4, &p.lease4),
        HostIn("gateway6", c.gateway6, p.net6, &p.gateway6),
        HostIn("dns6", c.dns6, p.net6, &p.dns6)}) {
    if (!s.ok()) return s;
  }
  if (p.lease4 == p.gateway4 || p.lease4 == p.dns4) {
    return Invalid(absl::StrCat("lease4 ", p.lease4.ToString(),
                                " is the gateway's or the DNS address"));
  }
  return plan;
}

absl::Status ParsePolicy(const netstack_config& c, backend::BackendPolicy* p) {
  p->host_loopback = c.host_loopback != 0;
  if (Given(c.outbound_addr4)) {
    p->outbound_bind4 = wire::Ipv4Address::Parse(c.outbound_addr4);
    if (!p->outbound_bind4) {
      return Invalid(absl::StrCat("outbound_addr4: '", c.outbound_addr4,
                                  "' is not an IPv4 address"));
    }
  }
  if (Given(c.outbound_addr6)) {
    p->outbound_bind6 = wire::Ipv6Address::Parse(c.outbound_addr6);
    if (!p->outbound_bind6) {
      return Invalid(absl::StrCat("outbound_addr6: '", c.outbound_addr6,
                                  "' is not an IPv6 address"));
    }
  }
  if (Given(c.dns_upstreams)) {
    for (absl::string_view u :
         absl::StrSplit(c.dns_upstreams, ',', absl::SkipWhitespace())) {
      u = absl::StripAsciiWhitespace(u);
      absl::StatusOr<transport::SocketAddress> a =
          backend::ParseDnsUpstream(std::string(u));
      if (!a.ok()) {
        return Invalid(absl::StrCat("dns_upstreams: ", a.status().message()));
      }
      p->dns_upstreams.push_back(*a);
    }
  }
  if (Given(c.resolv_conf)) p->resolv_conf = c.resolv_conf;
  p->dns = !c.disable_dns;
  p->dhcp4 = !c.disable_dhcp;
  return absl::OkStatus();
}

// The egress policy of policy_file, or of NETSTACK_POLICY when that is
// NULL. Not given at all: null, the backend's open policy. An error names
// where the path came from, the path and the line.
absl::Status LoadEgressPolicy(const netstack_config& c,
                              std::shared_ptr<const policy::Policy>* out) {
  const char* path = c.policy_file;
  const char* source = "policy_file";
  if (path == nullptr) {
    path = ::getenv(kPolicyEnv);
    source = kPolicyEnv;
  }
  if (!Given(path)) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<const policy::Policy>> p =
      policy::LoadPolicyFile(path);
  if (!p.ok()) {
    return absl::Status(p.status().code(),
                        absl::StrCat(source, " ", p.status().message()));
  }
  *out = *std::move(p);
  return absl::OkStatus();
}

absl::Status ParseLimits(const netstack_config& c, backend::BackendLimits* l,
                         runtime::PortForwards::Options* f) {
  constexpr uint32_t kMaxFlows = 1000000;
  for (auto [name, v] : {std::pair{"max_tcp_flows", c.max_tcp_flows},
                         std::pair{"max_udp_flows", c.max_udp_flows},
                         std::pair{"max_forward_conns", c.max_forward_conns}}) {
    if (v > kMaxFlows) {
      return Invalid(
          absl::StrCat(name, " ", v, " out of range [1, ", kMaxFlows, "]"));
    }
  }
  if (c.max_tcp_flows != 0) l->max_tcp_flows = c.max_tcp_flows;
  if (c.max_udp_flows != 0) l->max_udp_flows = c.max_udp_flows;
  if (c.max_forward_conns != 0) {
    l->max_inbound_tcp_flows = c.max_forward_conns;
    f->max_conns = c.max_forward_conns;
    f->max_conns_per_forward = c.max_forward_conns;
  }
  if (c.udp_timeout_ms != 0) {
    if (c.udp_timeout_ms < 1000) {
      return Invalid(
          absl::StrCat("udp_timeout_ms ", c.udp_timeout_ms, " is below 1000"));
    }
    l->udp_idle_timeout = absl::Milliseconds(c.udp_timeout_ms);
  }
  if (c.tcp_guest_timeout_ms != 0) {
    if (c.tcp_guest_timeout_ms < 1000) {
      return Invalid(absl::StrCat("tcp_guest_timeout_ms ",
                                  c.tcp_guest_timeout_ms,
                                  " is below 1000 (0 turns it off)"));
    }
    l->tcp_guest_timeout = absl::Milliseconds(c.tcp_guest_timeout_ms);
  }
  return absl::OkStatus();
}

// Whether `fd` is a TAP (IFF_TAP | IFF_NO_PI) and has a vnet header.
absl::StatusOr<bool> TapHasVnetHeader(int fd) {
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  if (::ioctl(fd, TUNGETIFF, &ifr) != 0) {
    return link::ErrnoStatus(
        errno, absl::StrCat("link_fd ", fd, " is not a TAP (TUNGETIFF)"));
  }
  if ((ifr.ifr_flags & IFF_TAP) == 0 || (ifr.ifr_flags & IFF_NO_PI) == 0) {
    return Invalid(absl::StrCat("link_fd ", fd, " (", ifr.ifr_name,
                                ") is not a TAP with IFF_NO_PI"));
  }
  return (ifr.ifr_flags & IFF_VNET_HDR) != 0;
}

// The guest link into `o`. `fd` is the caller's link_fd, owned here; it
// moves into the link (whose constructors close it on error too).
absl::Status LinkOptions(const netstack_config& c, uint32_t mtu,
                         std::optional<wire::MacAddress> mac, link::UniqueFd fd,
                         netstack_t* ns, RuntimeOptions* o) {
  switch (c.link_type) {
    case NETSTACK_LINK_TAP: {
      absl::StatusOr<bool> vnet = TapHasVnetHeader(fd.get());
      if (!vnet.ok()) return vnet.status();
      o->host.tap_fd = fd.release();
      o->host.mtu = mtu;
      o->host.mac = mac;
      // With a vnet header the kernel segments our super-segments and
      // hands us the guest's whole; without one, we split them here.
      if (*vnet) {
        o->host.host_gso_max_size = kGsoMaxSize;
      } else {
        o->decorators.software_gso_max_size = kGsoMaxSize;
      }
      return absl::OkStatus();
    }
    case NETSTACK_LINK_STREAM: {
      auto shared = std::make_shared<link::UniqueFd>(std::move(fd));
      o->open_link = [shared, mtu, mac](buffer::ChunkPool& chunks,
                                        buffer::PacketPool&)
          -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
        link::UnixStreamOptions uo;
        uo.mtu = mtu;
        uo.mac = mac;
        uo.path = "fd";
        auto ep = link::UnixStreamEndpoint::FromConnectedFd(shared->release(),
                                                            uo, chunks);
        if (!ep.ok()) return ep.status();
        return std::unique_ptr<link::LinkEndpoint>(*std::move(ep));
      };
      o->decorators.software_gso_max_size = kGsoMaxSize;
      return absl::OkStatus();
    }
    case NETSTACK_LINK_VHOST_USER: {
      auto shared = std::make_shared<link::UniqueFd>(std::move(fd));
      o->open_link = [shared, mtu, mac](buffer::ChunkPool& chunks,
                                        buffer::PacketPool& packets)
          -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
        link::VhostUserOptions vo;
        vo.mtu = mtu;
        vo.mac = mac;
        vo.path = "fd";
        auto ep = link::VhostUserEndpoint::FromConnectedFd(
            shared->release(), vo, chunks, packets);
        if (!ep.ok()) return ep.status();
        return std::unique_ptr<link::LinkEndpoint>(*std::move(ep));
      };
      return absl::OkStatus();
    }
    case NETSTACK_LINK_CALLBACK: {
      if (c.send_frame == nullptr) {
        return Invalid("a callback link needs send_frame");
      }
      ns->send_frame = c.send_frame;
      ns->opaque = c.opaque;
      o->open_link = [ns, mtu, mac](buffer::ChunkPool& chunks,
                                    buffer::PacketPool&)
          -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
        link::CallbackOptions co;
        co.mtu = mtu;
        co.mac = mac;
        co.send = [ns](std::span<const uint8_t> frame) {
          return ns->send_frame(frame.data(), frame.size(), ns->opaque) == 0;
        };
        auto ep = link::CallbackEndpoint::Create(std::move(co), chunks);
        if (!ep.ok()) return ep.status();
        ns->callback = ep->get();
        return std::unique_ptr<link::LinkEndpoint>(*std::move(ep));
      };
      o->decorators.software_gso_max_size = kGsoMaxSize;
      return absl::OkStatus();
    }
  }
  return Invalid(absl::StrCat("link_type ", c.link_type,
                              " is not NETSTACK_LINK_CALLBACK, _TAP, "
                              "_STREAM or _VHOST_USER"));
}

// Everything but the link's fd, checked before the link is touched.
absl::Status BuildOptions(const netstack_config& c, RuntimeOptions* o,
                          uint32_t* mtu, std::optional<wire::MacAddress>* mac) {
  *mtu = c.mtu != 0 ? c.mtu
                    : (c.link_type == NETSTACK_LINK_CALLBACK ||
                               c.link_type == NETSTACK_LINK_VHOST_USER
                           ? 1500
                           : 65520);
  if (*mtu < 1280 || *mtu > 65520) {
    return Invalid(absl::StrCat("mtu ", *mtu, " out of range [1280, 65520]"));
  }
  if (Given(c.mac)) {
    *mac = wire::MacAddress::Parse(c.mac);
    if (!*mac) {
      return Invalid(absl::StrCat("mac: '", c.mac,
                                  "' is not an Ethernet address "
                                  "(want e.g. 52:55:0a:00:02:02)"));
    }
  }
  backend::BackendConfig b;
  absl::StatusOr<backend::AddressPlan> plan = ParsePlan(c, *mtu);
  if (!plan.ok()) return plan.status();
  b.plan = *plan;
  if (absl::Status s = ParsePolicy(c, &b.policy); !s.ok()) return s;
  if (absl::Status s = LoadEgressPolicy(c, &b.policy.egress); !s.ok()) {
    return s;
  }
  if (absl::Status s = ParseLimits(c, &b.limits, &o->forwards); !s.ok()) {
    return s;
  }
  o->backend = b;
  // The guest is behind a link, never a namespace of ours: every forward
  // goes through the stack.
  o->forwards.guest_netns_fd = -1;
  o->forwards.path = runtime::ForwardPath::kStack;
  if (Given(c.pcap_path)) o->decorators.pcap = c.pcap_path;
  return absl::OkStatus();
}

// The link's counters, "link.NAME value" lines (the wire's side, under
// the software GSO splitter).
std::string LinkCounters(const netstack_t* ns) {
  const link::LinkStats s = ns->rt->host_link().Stats();
  std::string out = absl::StrCat(
      "link.rx_frames ", s.rx_frames, "\nlink.rx_bytes ", s.rx_bytes,
      "\nlink.rx_dropped ", s.rx_dropped, "\nlink.tx_frames ", s.tx_frames,
      "\nlink.tx_bytes ", s.tx_bytes, "\nlink.tx_dropped ", s.tx_dropped,
      "\n");
  if (ns->callback != nullptr) {
    const link::CallbackStats& c = ns->callback->callback_stats();
    absl::StrAppend(&out, "link.rx_runts ", c.rx_runts, "\nlink.rx_oversized ",
                    c.rx_oversized, "\nlink.rx_queue_full ", c.rx_queue_full,
                    "\nlink.rx_no_chunk ", c.rx_no_chunk,
                    "\nlink.tx_refused ", c.tx_refused, "\n");
  }
  return out;
}

void WriteError(char* err, size_t errlen, absl::string_view message) {
  if (err == nullptr || errlen == 0) return;
  const size_t n = std::min(errlen - 1, message.size());
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

// absl's code as the errno a C caller expects. The message keeps the
// detail; the code is what a program branches on.
int ToErrno(const absl::Status& s) {
  // listen()'s EADDRINUSE is the one a caller of forward_add wants to tell
  // apart; the port forwards file it under more than one code.
  if (!s.ok() && absl::StrContains(s.message(), std::strerror(EADDRINUSE))) {
    return -EADDRINUSE;
  }
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return -EINVAL;
    case absl::StatusCode::kNotFound:
      return -ENOENT;
    case absl::StatusCode::kAlreadyExists:
      return -EEXIST;
    case absl::StatusCode::kPermissionDenied:
      return -EACCES;
    case absl::StatusCode::kResourceExhausted:
      return -ENOMEM;
    case absl::StatusCode::kUnimplemented:
      return -ENOTSUP;
    case absl::StatusCode::kUnavailable:
      return -EAGAIN;
    default:
      return -EIO;
  }
}

int Fail(const netstack_t* ns, const absl::Status& s) {
  ns->last_error = std::string(s.message());
  return ToErrno(s);
}

// The stop eventfd, registered with the runtime's loop.
absl::Status AddStopFd(netstack_t* ns) {
  ns->stop_fd.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!ns->stop_fd.valid()) return link::ErrnoStatus(errno, "eventfd");
  ns->stop_handler = std::make_unique<StopHandler>(ns);
  return ns->rt->loop().Add(ns->stop_fd.get(), eventloop::EventLoop::kReadable,
                            ns->stop_handler.get());
}

// Runs `fn` (a turn) unless one is already on this thread's stack.
template <typename Fn>
int Turn(netstack_t* ns, const char* what, Fn fn) {
  if (ns->depth > 0) {
    Fail(ns, absl::FailedPreconditionError(
                 absl::StrCat(what, " from inside a callback of this netstack")));
    return -EBUSY;
  }
  ++ns->depth;
  absl::Status s = fn();
  --ns->depth;
  return s.ok() ? 0 : Fail(ns, s);
}

}  // namespace

absl::StatusOr<size_t> SetEgressPolicy(
    netstack_t* ns, std::shared_ptr<const policy::Policy> egress) {
  backend::Backend* b = ns->rt->backend();
  if (b == nullptr) return absl::FailedPreconditionError("no backend");
  return b->SetEgressPolicy(std::move(egress));
}

void StopHandler::OnReadable(Instant now) {
  uint64_t n;
  while (::read(ns_->stop_fd.get(), &n, sizeof n) > 0) {
  }
  if (ns_->running) {
    ns_->stop_requested.store(false, std::memory_order_relaxed);
    ns_->rt->Stop();
  }
}

}  // namespace netstack::capi

using netstack::capi::Fail;

extern "C" {

NETSTACK_API void netstack_config_init(netstack_config* cfg) {
  if (cfg == nullptr) return;
  std::memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->link_type = NETSTACK_LINK_CALLBACK;
  cfg->link_fd = -1;
}

NETSTACK_API netstack_t* netstack_new(const netstack_config* cfg, char* err,
                                      size_t errlen) {
  namespace capi = netstack::capi;
  capi::WriteError(err, errlen, "");
  // link_fd is ours from here on, whatever happens (for the fd links).
  netstack::link::UniqueFd fd;
  if (cfg != nullptr && cfg->size >= offsetof(netstack_config, link_fd) +
                                         sizeof(int) &&
      (cfg->link_type == NETSTACK_LINK_TAP ||
       cfg->link_type == NETSTACK_LINK_STREAM ||
       cfg->link_type == NETSTACK_LINK_VHOST_USER)) {
    fd.reset(cfg->link_fd);
  }
  auto fail = [&](const absl::Status& s) -> netstack_t* {
    capi::WriteError(err, errlen, s.message());
    return nullptr;
  };
  netstack_config c;
  if (absl::Status s = capi::CopyConfig(cfg, &c); !s.ok()) return fail(s);
  if (c.link_type != NETSTACK_LINK_CALLBACK &&
      c.link_type != NETSTACK_LINK_TAP && c.link_type != NETSTACK_LINK_STREAM &&
      c.link_type != NETSTACK_LINK_VHOST_USER) {
    return fail(capi::Invalid(absl::StrCat(
        "link_type ", c.link_type,
        " is not NETSTACK_LINK_CALLBACK, _TAP, _STREAM or _VHOST_USER")));
  }
  if (c.link_type == NETSTACK_LINK_CALLBACK && c.link_fd != -1) {
    return fail(capi::Invalid(
        "link_fd is for TAP and STREAM links; a callback link takes -1"));
  }
  if (c.link_type != NETSTACK_LINK_CALLBACK && !fd.valid()) {
    return fail(capi::Invalid(absl::StrCat("link_fd ", c.link_fd,
                                           " is not an fd")));
  }
  netstack::runtime::RuntimeOptions o;
  uint32_t mtu = 0;
  std::optional<netstack::wire::MacAddress> mac;
  if (absl::Status s = capi::BuildOptions(c, &o, &mtu, &mac); !s.ok()) {
    return fail(s);
  }
  std::unique_ptr<netstack_t> ns(new (std::nothrow) netstack_t);
  if (!ns) return fail(absl::ResourceExhaustedError("out of memory"));
  if (absl::Status s =
          capi::LinkOptions(c, mtu, mac, std::move(fd), ns.get(), &o);
      !s.ok()) {
    return fail(s);
  }
  absl::StatusOr<std::unique_ptr<netstack::runtime::Runtime>> rt =
      netstack::runtime::Runtime::Create(std::move(o));
  if (!rt.ok()) return fail(rt.status());
  ns->rt = *std::move(rt);
  netstack_t* raw = ns.get();
  ns->rt->AddCounters([raw] { return capi::LinkCounters(raw); });
  if (absl::Status s = capi::AddStopFd(raw); !s.ok()) return fail(s);
  return ns.release();
}

NETSTACK_API void netstack_free(netstack_t* ns) {
  if (ns == nullptr) return;
  if (ns->rt && ns->stop_fd.valid()) {
    (void)ns->rt->loop().Remove(ns->stop_fd.get());
  }
  ns->rt.reset();
  delete ns;
}

NETSTACK_API const char* netstack_last_error(const netstack_t* ns) {
  return ns == nullptr ? "netstack_t is NULL" : ns->last_error.c_str();
}

NETSTACK_API int netstack_run(netstack_t* ns) {
  if (ns == nullptr) return -EINVAL;
  return netstack::capi::Turn(ns, "netstack_run", [ns] {
    if (ns->stop_requested.exchange(false)) {
      // Stopped before it ran: the eventfd's count is spent too.
      uint64_t n;
      while (::read(ns->stop_fd.get(), &n, sizeof n) > 0) {
      }
      return absl::OkStatus();
    }
    ns->running = true;
    absl::Status s = ns->rt->Run();
    ns->running = false;
    return s;
  });
}

NETSTACK_API void netstack_stop(netstack_t* ns) {
  if (ns == nullptr) return;
  // Async-signal-safe: an atomic store and a write(2).
  ns->stop_requested.store(true, std::memory_order_relaxed);
  const uint64_t one = 1;
  (void)!::write(ns->stop_fd.get(), &one, sizeof one);
}

NETSTACK_API int netstack_fd(const netstack_t* ns) {
  return ns == nullptr ? -EINVAL : ns->rt->fd();
}

NETSTACK_API int64_t netstack_next_deadline_ns(const netstack_t* ns) {
  if (ns == nullptr) return INT64_MAX;
  const netstack::Instant d = ns->rt->NextDeadline();
  if (d == netstack::kNever) return INT64_MAX;
  if (d <= absl::UnixEpoch()) return 0;
  // The loop's instants are CLOCK_MONOTONIC from the Unix epoch
  // (EventLoop::MonotonicNow).
  return absl::ToInt64Nanoseconds(d - absl::UnixEpoch());
}

NETSTACK_API int netstack_poll(netstack_t* ns) {
  if (ns == nullptr) return -EINVAL;
  return netstack::capi::Turn(ns, "netstack_poll",
                              [ns] { return ns->rt->Poll(); });
}

NETSTACK_API int netstack_input(netstack_t* ns, const void* frame,
                                size_t len) {
  if (ns == nullptr) return -EINVAL;
  if (ns->callback == nullptr) {
    return Fail(ns, absl::InvalidArgumentError(
                        "netstack_input: this netstack has an fd link, not a "
                        "callback link"));
  }
  if (frame == nullptr && len != 0) {
    return Fail(ns, absl::InvalidArgumentError("netstack_input: frame is NULL"));
  }
  ns->callback->Input(std::span<const uint8_t>(
      static_cast<const uint8_t*>(frame), frame == nullptr ? 0 : len));
  // A full batch runs its turn at once (not from inside a callback: the
  // frames then wait for the turn after this one).
  if (ns->depth == 0 &&
      ns->callback->queued_frames() >= netstack::capi::kInputTurnBatch) {
    return netstack_poll(ns);
  }
  return 0;
}

NETSTACK_API int netstack_forward_add(netstack_t* ns, int proto,
                                      const char* spec, uint64_t* id) {
  if (ns == nullptr) return -EINVAL;
  if (proto != NETSTACK_TCP && proto != NETSTACK_UDP) {
    return Fail(ns, absl::InvalidArgumentError(absl::StrCat(
                        "proto ", proto, " is not NETSTACK_TCP or NETSTACK_UDP")));
  }
  if (spec == nullptr) {
    return Fail(ns, absl::InvalidArgumentError("forward spec is NULL"));
  }
  const bool udp = proto == NETSTACK_UDP;
  const char* flag = udp ? "-u " : "-t ";
  absl::StatusOr<std::vector<netstack::runtime::ForwardRule>> rules =
      netstack::runtime::ParseForwardSpec(udp, spec);
  if (!rules.ok()) {
    return Fail(ns, absl::InvalidArgumentError(absl::StrCat(
                        flag, spec, ": ", rules.status().message())));
  }
  absl::StatusOr<uint64_t> added =
      ns->rt->forwards()->Add(absl::StrCat(flag, spec), *rules);
  if (!added.ok()) return Fail(ns, added.status());
  if (id != nullptr) *id = *added;
  return 0;
}

NETSTACK_API int netstack_forward_remove(netstack_t* ns, uint64_t id) {
  if (ns == nullptr) return -EINVAL;
  absl::Status s = ns->rt->forwards()->Remove(id);
  return s.ok() ? 0 : Fail(ns, s);
}

NETSTACK_API size_t netstack_counters(const netstack_t* ns, char* buf,
                                      size_t len) {
  if (ns == nullptr) return 0;
  const std::string text = ns->rt->FormatCounters();
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(len - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

NETSTACK_API int netstack_counter(const netstack_t* ns, const char* name,
                                  uint64_t* value) {
  if (ns == nullptr) return -EINVAL;
  if (name == nullptr) {
    return Fail(ns, absl::InvalidArgumentError("counter name is NULL"));
  }
  const std::string text = ns->rt->FormatCounters();
  const absl::string_view want(name);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos || line.substr(0, space) != want) {
      continue;
    }
    uint64_t v = 0;
    if (!absl::SimpleAtoi(line.substr(space + 1), &v)) continue;
    if (value != nullptr) *value = v;
    return 0;
  }
  return Fail(ns, absl::NotFoundError(
                      absl::StrCat("no counter '", name, "'")));
}

NETSTACK_API int netstack_set_policy_file(netstack_t* ns, const char* path,
                                          uint64_t* reset) {
  if (ns == nullptr) return -EINVAL;
  if (ns->depth > 0) {
    return Fail(ns, absl::FailedPreconditionError(
                        "netstack_set_policy_file from inside a callback of "
                        "this netstack"));
  }
  std::shared_ptr<const netstack::policy::Policy> p;
  if (path != nullptr && path[0] != '\0') {
    absl::StatusOr<std::shared_ptr<const netstack::policy::Policy>> loaded =
        netstack::policy::LoadPolicyFile(path);
    if (!loaded.ok()) return Fail(ns, loaded.status());
    p = *std::move(loaded);
  }
  absl::StatusOr<size_t> n = netstack::capi::SetEgressPolicy(ns, std::move(p));
  if (!n.ok()) return Fail(ns, n.status());
  if (reset != nullptr) *reset = *n;
  return 0;
}

NETSTACK_API const char* netstack_version(void) {
  static_assert(NETSTACK_VERSION_MAJOR == 1 && NETSTACK_VERSION_MINOR == 1);
  return "1.1.0";
}

}  // extern "C"
