// slirp4netns 1.2's command line, read with getopt_long as slirp4netns
// reads it (short options clustered, "--opt=V" and "--opt V", options
// after the positional arguments), then turned into netstackd's own
// flags: the same checks, the same daemon, and a line that shows the
// translation. What netstackd's flags cannot say (-c or not, IPv6 off,
// the API socket, --macaddress) is set on the Config after.
#include "tools/netstackd/slirp4netns_mode.h"

#include <getopt.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "netstack/policy/policy.h"
#include "netstack/runtime/forward_spec.h"
#include "netstack/wire/address.h"
#include "tools/common/cli.h"
#include "tools/netstackd/config.h"
#include "tools/netstackd/daemon.h"

namespace netstack::tools {
namespace {

// The version of slirp4netns whose command line and API this follows.
constexpr char kSlirp4netnsVersion[] = "1.2.0";

constexpr char kUsageLine[] =
    "Usage: slirp4netns [OPTION]... PID|PATH TAPNAME\n";

constexpr char kHelp[] =
    "User-mode networking for an unprivileged network namespace: netstack's\n"
    "netstackd, answering to slirp4netns 1.2's command line and API socket\n"
    "(docs/SLIRP4NETNS.md). PID|PATH names the namespace (a process in it,\n"
    "or with --netns-type=path its file); TAPNAME is the TAP device there.\n"
    "\n"
    "  -c, --configure          bring up lo and TAPNAME there: MTU, the MAC of\n"
    "                           --macaddress, 10.0.2.100/24 (of --cidr) and a\n"
    "                           default route via 10.0.2.2; IPv6 comes by RA\n"
    "  -e, --exit-fd=FD         exit on any event on FD (its other end closed)\n"
    "  -r, --ready-fd=FD        write one byte to FD once the network, the API\n"
    "                           socket and the sandbox are up, then close it\n"
    "  -m, --mtu=MTU            the link's MTU (default 1500, at most 65520)\n"
    "  -6, --enable-ipv6        IPv6 too: RAs for fd00::/64, gateway fd00::2,\n"
    "                           DNS fd00::3 (without it: no IPv6 at all)\n"
    "  -a, --api-socket=PATH    serve slirp4netns's API (add_hostfwd,\n"
    "                           list_hostfwd, remove_hostfwd) at PATH\n"
    "      --cidr=CIDR          the guest's network (default 10.0.2.0/24)\n"
    "      --disable-host-loopback\n"
    "                           the gateway address does not reach the host's\n"
    "                           127.0.0.1 (without it, it does)\n"
    "      --netns-type=TYPE    pid (default): PID is a process in the\n"
    "                           namespace; path: PATH is its file\n"
    "      --userns-path=PATH   join the user namespace at PATH first\n"
    "      --enable-sandbox     accepted: netstackd's sandbox is always on\n"
    "      --enable-seccomp     accepted: netstackd's seccomp filter is always\n"
    "                           on\n"
    "      --outbound-addr=IPv4 host sockets bind this IPv4 address (or the\n"
    "                           address of this interface)\n"
    "      --outbound-addr6=IPv6\n"
    "                           host sockets bind this IPv6 address (or the\n"
    "                           address of this interface)\n"
    "      --disable-dns        no DNS forwarder at 10.0.2.3 (and fd00::3)\n"
    "      --macaddress=MAC     the MAC of TAPNAME (with -c)\n"
    "      --target-type=TYPE   netns (the default, and the only one served;\n"
    "                           bess is refused)\n"
    "      --policy=FILE        netstack's egress policy (docs/POLICY.md): what\n"
    "                           the guest may reach; without it, the file that\n"
    "                           NETSTACK_POLICY names, if set (not in\n"
    "                           slirp4netns)\n"
    "  -h, --help               show this help and exit\n"
    "  -v, --version            show the version and exit\n"
    "\n"
    "Unlike slirp4netns: the sandbox (a mount namespace with no files,\n"
    "capabilities dropped, no_new_privs and a seccomp filter) is on whether\n"
    "or not --enable-sandbox and --enable-seccomp are given; a forwarded\n"
    "connection reaches the guest from the gateway through netstack's TCP,\n"
    "as in slirp4netns, and the API also takes an IPv6 host_addr.\n"
    "netstackd's own flags: netstackd --help.\n";

struct Args {
  bool configure = false;
  int exit_fd = -1;
  int ready_fd = -1;
  uint32_t mtu = 1500;
  bool ipv6 = false;
  std::string api_socket;
  std::string cidr;
  bool disable_host_loopback = false;
  std::string netns_type = "pid";
  std::string userns_path;
  std::string outbound_addr;
  std::string outbound_addr6;
  bool disable_dns = false;
  std::string macaddress;
  std::string target_type = "netns";
  std::string policy;  // --policy, else NETSTACK_POLICY (PolicySource)
  std::string target;  // PID or PATH
  std::string tap;
  bool help = false;
  bool version = false;
};

enum LongOnly {
  kCidr = 256,
  kDisableHostLoopback,
  kNetnsType,
  kUsernsPath,
  kEnableSandbox,
  kEnableSeccomp,
  kOutboundAddr,
  kOutboundAddr6,
  kDisableDns,
  kMacAddress,
  kTargetType,
  kPolicy,
};

// The egress policy's file: netstackd's own --policy (a long option
// slirp4netns 1.2 does not have, so no caller of slirp4netns passes it by
// accident), else NETSTACK_POLICY, which rootlesskit and Podman pass on
// from their environment. "" for none.
constexpr char kPolicyEnv[] = "NETSTACK_POLICY";

struct PolicySource {
  std::string path;
  const char* from = "";  // "--policy" or kPolicyEnv
};

PolicySource PolicyOf(const std::string& flag) {
  if (!flag.empty()) return {flag, "--policy"};
  const char* env = std::getenv(kPolicyEnv);
  if (env != nullptr && *env != '\0') return {env, kPolicyEnv};
  return {};
}

absl::StatusOr<int> FdArg(const char* flag, const char* v) {
  int fd;
  if (!absl::SimpleAtoi(v, &fd) || fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", v, "' is not a file descriptor"));
  }
  return fd;
}

// One option getopt_long returned, into `a`.
absl::Status TakeOption(int opt, const char* v, Args& a) {
  switch (opt) {
    case 'c': a.configure = true; break;
    case 'e': {
      absl::StatusOr<int> fd = FdArg("--exit-fd", v);
      if (!fd.ok()) return fd.status();
      a.exit_fd = *fd;
      break;
    }
    case 'r': {
      absl::StatusOr<int> fd = FdArg("--ready-fd", v);
      if (!fd.ok()) return fd.status();
      a.ready_fd = *fd;
      break;
    }
    case 'm':
      if (!absl::SimpleAtoi(v, &a.mtu) || a.mtu < 1280 || a.mtu > 65520) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--mtu: '", v, "': netstackd takes 1280 to 65520 (slirp4netns "
            "takes up to 65521; a TAP's frames here are at most 65520)"));
      }
      break;
    case '6': a.ipv6 = true; break;
    case 'a': a.api_socket = v; break;
    case 'h': a.help = true; break;
    case 'v': a.version = true; break;
    case kCidr: a.cidr = v; break;
    case kDisableHostLoopback: a.disable_host_loopback = true; break;
    case kNetnsType: a.netns_type = v; break;
    case kUsernsPath: a.userns_path = v; break;
    case kEnableSandbox: break;  // always on
    case kEnableSeccomp: break;  // always on
    case kOutboundAddr: a.outbound_addr = v; break;
    case kOutboundAddr6: a.outbound_addr6 = v; break;
    case kDisableDns: a.disable_dns = true; break;
    case kMacAddress: a.macaddress = v; break;
    case kTargetType: a.target_type = v; break;
    case kPolicy: a.policy = v; break;
    default:  // '?': getopt_long has named the option
      return absl::InvalidArgumentError("");
  }
  return absl::OkStatus();
}

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  static const option kOptions[] = {
      {"configure", no_argument, nullptr, 'c'},
      {"exit-fd", required_argument, nullptr, 'e'},
      {"ready-fd", required_argument, nullptr, 'r'},
      {"mtu", required_argument, nullptr, 'm'},
      {"enable-ipv6", no_argument, nullptr, '6'},
      {"api-socket", required_argument, nullptr, 'a'},
      {"cidr", required_argument, nullptr, kCidr},
      {"disable-host-loopback", no_argument, nullptr, kDisableHostLoopback},
      {"netns-type", required_argument, nullptr, kNetnsType},
      {"userns-path", required_argument, nullptr, kUsernsPath},
      {"enable-sandbox", no_argument, nullptr, kEnableSandbox},
      {"enable-seccomp", no_argument, nullptr, kEnableSeccomp},
      {"outbound-addr", required_argument, nullptr, kOutboundAddr},
      {"outbound-addr6", required_argument, nullptr, kOutboundAddr6},
      {"disable-dns", no_argument, nullptr, kDisableDns},
      {"macaddress", required_argument, nullptr, kMacAddress},
      {"target-type", required_argument, nullptr, kTargetType},
      {"policy", required_argument, nullptr, kPolicy},
      {"help", no_argument, nullptr, 'h'},
      {"version", no_argument, nullptr, 'v'},
      {nullptr, 0, nullptr, 0},
  };
  Args a;
  optind = 1;
  int opt;
  while ((opt = getopt_long(argc, argv, "ce:r:m:6a:hv", kOptions, nullptr)) !=
         -1) {
    if (absl::Status s = TakeOption(opt, optarg, a); !s.ok()) return s;
  }
  if (a.help || a.version) return a;
  if (argc - optind != 2) {
    return absl::InvalidArgumentError(
        argc - optind < 2 ? "PID|PATH and TAPNAME are needed"
                          : absl::StrCat("unexpected argument '",
                                         argv[optind + 2], "'"));
  }
  a.target = argv[optind];
  a.tap = argv[optind + 1];
  return a;
}

// An --outbound-addr[6] value: an address of the family, or an
// interface's first address of it (as slirp4netns takes either).
absl::StatusOr<std::string> OutboundAddress(const std::string& v, bool v6,
                                            const char* flag) {
  if (v6 ? wire::Ipv6Address::Parse(v).has_value()
         : wire::Ipv4Address::Parse(v).has_value()) {
    return v;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", v, "' is no address, and getifaddrs failed"));
  }
  std::optional<std::string> found;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || v != i->ifa_name) continue;
    if (!v6 && i->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      found = wire::Ipv4Address::FromBytes(
                  reinterpret_cast<const uint8_t*>(&in->sin_addr))
                  .ToString();
    } else if (v6 && i->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      const auto a = wire::Ipv6Address::FromBytes(in6->sin6_addr.s6_addr);
      if (!a.IsLinkLocal()) found = a.ToString();
    }
  }
  freeifaddrs(list);
  if (!found) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": '", v, "' is neither an IPv", v6 ? "6" : "4",
        " address nor an interface with one"));
  }
  return *found;
}

// netstackd's flags for `a` (with underscores, as Abseil names them).
absl::StatusOr<std::vector<std::string>> NetstackdFlags(const Args& a) {
  if (a.target_type != "netns") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--target-type=", a.target_type,
        ": netstackd serves only netns (a TAP in a network namespace)"));
  }
  std::vector<std::string> f = {"netstackd"};
  if (a.netns_type == "pid") {
    int pid;
    if (!absl::SimpleAtoi(a.target, &pid) || pid <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", a.target, "' is not a PID (--netns-type=path ",
                       "takes a path)"));
    }
    f.push_back(absl::StrCat("--netns_pid=", pid));
  } else if (a.netns_type == "path") {
    f.push_back(absl::StrCat("--netns=", a.target));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--netns-type=", a.netns_type, ": pid or path"));
  }
  if (!a.userns_path.empty()) f.push_back("--userns=" + a.userns_path);
  // With --netns, --tap would name a host-mode link in that namespace;
  // the guest's interface is set on the Config instead (ToConfig).
  if (a.netns_type == "pid") f.push_back("--tap=" + a.tap);
  f.push_back(absl::StrCat("--mtu=", a.mtu));
  if (!a.cidr.empty()) f.push_back("--net=" + a.cidr);
  if (!a.disable_host_loopback) f.push_back("--host_loopback");
  std::vector<std::string> bind;
  for (auto [v, v6, flag] :
       {std::tuple{&a.outbound_addr, false, "--outbound-addr"},
        std::tuple{&a.outbound_addr6, true, "--outbound-addr6"}}) {
    if (v->empty()) continue;
    absl::StatusOr<std::string> addr = OutboundAddress(*v, v6, flag);
    if (!addr.ok()) return addr.status();
    bind.push_back(*addr);
  }
  if (!bind.empty()) f.push_back("--outbound_bind=" + absl::StrJoin(bind, ","));
  if (a.ready_fd >= 0) f.push_back(absl::StrCat("--ready_fd=", a.ready_fd));
  if (a.exit_fd >= 0) f.push_back(absl::StrCat("--exit_fd=", a.exit_fd));
  // As slirp4netns: a forward reaches the guest's address from the
  // gateway (not its loopback, which pasta's splice reaches), so a
  // server bound to the guest's 127.0.0.1 stays unpublished.
  f.push_back("--forward_path=stack");
  // netstackd's --policy reads, checks and (on SIGHUP) rereads the file.
  if (const PolicySource p = PolicyOf(a.policy); !p.path.empty()) {
    f.push_back("--policy=" + p.path);
  }
  return f;
}

// The Config of netstackd's flags `flags`, with what they cannot say.
absl::StatusOr<Config> ToConfig(const Args& a,
                                const std::vector<std::string>& flags) {
  std::vector<char*> argv;
  for (const std::string& s : flags) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  ParseCommandLineOrExit("netstackd", static_cast<int>(flags.size()),
                         argv.data());
  absl::StatusOr<Config> c = ParseConfig(CommandLine{});
  if (!c.ok()) return c.status();
  if (a.tap.empty() || a.tap.size() > 15) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TAPNAME '", a.tap, "': an interface name of 1 to 15 bytes"));
  }
  c->guest_ifname = a.tap;
  c->configure_guest = a.configure;
  c->guest_static_ipv6 = false;
  c->backend->policy.ipv6 = a.ipv6;
  c->backend->policy.dns = !a.disable_dns;
  c->slirp4netns_api = a.api_socket;
  c->exit_on_any_event = true;
  if (!a.macaddress.empty()) {
    if (!a.configure) {
      return absl::InvalidArgumentError(
          "--macaddress sets TAPNAME's MAC, which only -c does");
    }
    c->guest_mac = wire::MacAddress::Parse(a.macaddress);
    if (!c->guest_mac || c->guest_mac->IsMulticast()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--macaddress: '", a.macaddress, "' is not a unicast MAC"));
    }
  }
  return c;
}

void PrintVersion() {
  const scmp_version* s = seccomp_version();
  std::printf(
      "slirp4netns version %s+netstack\n"
      "commit: none (netstack's netstackd, answering to slirp4netns's "
      "command line)\n"
      "libslirp: none (netstack)\n"
      "SLIRP_CONFIG_VERSION_MAX: 4\n"
      "libseccomp: %u.%u.%u\n",
      kSlirp4netnsVersion, s != nullptr ? s->major : 0,
      s != nullptr ? s->minor : 0, s != nullptr ? s->micro : 0);
}

}  // namespace

bool InvokedAsSlirp4netns(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "slirp4netns") return true;
  if (argc < 1 || argv[0] == nullptr) return false;
  const std::string_view name = argv[0];
  const size_t slash = name.rfind('/');
  return name.substr(slash == std::string_view::npos ? 0 : slash + 1) ==
         "slirp4netns";
}

int RunAsSlirp4netns(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "slirp4netns") {
    --argc;
    ++argv;
  }
  absl::StatusOr<Args> a = ParseArgs(argc, argv);
  if (!a.ok()) {
    if (!a.status().message().empty()) {
      std::fprintf(stderr, "slirp4netns (netstackd): %s\n",
                   std::string(a.status().message()).c_str());
    }
    std::fprintf(stderr, "%s%s", kUsageLine, kHelp);
    return 1;
  }
  if (a->help) {
    std::printf("%s%s", kUsageLine, kHelp);
    return 0;
  }
  if (a->version) {
    PrintVersion();
    return 0;
  }
  absl::StatusOr<std::vector<std::string>> flags = NetstackdFlags(*a);
  absl::StatusOr<Config> config =
      flags.ok() ? ToConfig(*a, *flags) : absl::StatusOr<Config>(flags.status());
  const PolicySource policy = PolicyOf(a->policy);
  if (!config.ok()) {
    std::string message(config.status().message());
    // A file NETSTACK_POLICY named is reported under that name.
    if (policy.from == kPolicyEnv && absl::StartsWith(message, "--policy ")) {
      message = absl::StrCat(kPolicyEnv, message.substr(8));
    }
    std::fprintf(stderr, "slirp4netns (netstackd): %s\n", message.c_str());
    return 1;
  }
  const std::string egress = absl::StrCat(
      DescribeEgress(config->egress ? *config->egress
                                    : *policy::Policy::Open()),
      policy.path.empty() ? ""
                          : absl::StrCat(" from ", policy.from, " ",
                                         policy.path));
  std::fprintf(stderr,
               "slirp4netns (netstackd): running as %s (TAP %s%s, IPv6 %s%s%s; "
               "%s)\n",
               absl::StrJoin(*flags, " ").c_str(), a->tap.c_str(),
               a->configure ? ", configured" : ", the caller's",
               a->ipv6 ? "on" : "off", a->disable_dns ? ", no DNS" : "",
               a->api_socket.empty()
                   ? ""
                   : absl::StrCat(", API socket ", a->api_socket).c_str(),
               egress.c_str());
  std::fflush(stderr);
  return RunDaemon(*config);
}

}  // namespace netstack::tools
