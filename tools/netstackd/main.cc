// netstackd: runs one netstack Stack on one link.
//
//   netstackd --packet veth1 --netns b --addr 10.9.0.2/24 --addr6 fd00:9::2/64
//   netstackd --tap tap0 --netns b --addr 10.9.0.2/24 --pcap /tmp/ns.pcap
//
//   netstackd --unix /run/vm0.sock --addr 10.0.2.2/24   (QEMU -netdev stream)
//
//   netstackd --packet veth1 --netns b --addr 10.9.0.2/24
//       --http-root /srv/www --http-port 80 --echo-port 7 --discard-port 9
//
// The link is opened inside --netns (the daemon itself stays in its own
// namespace). The stack has a TCP and a UDP layer; the services
// (tools/netstackd/services) listen on every address of both families.
// Counters (stack, TCP, UDP, services, faults) are printed on SIGUSR1 and
// at exit; SIGINT and SIGTERM stop it cleanly. Bad input is a clear
// message and exit status 2 (usage) or 1 (a resource could not be set up),
// with nothing left behind.
#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/common/cli.h"
#include "tools/netstackd/config.h"
#include "tools/netstackd/daemon.h"
#include "tools/netstackd/help.h"
#include "tools/netstackd/slirp4netns_mode.h"

namespace netstack::tools {
namespace {

// Marks every fd above stderr close-on-exec (close_range, Linux 5.11; a
// loop over /proc/self/fd before that).
void CloseInheritedOnExec() {
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return;
  const int own = dirfd(d);
  while (struct dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd > 2 && fd != own) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  closedir(d);
}

// "-- CMD [ARGS...]": everything after the first "--" is CMD's; argc ends
// before it.
void TakeCommand(int& argc, char** argv, CommandLine& cl) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--") continue;
    cl.have_command = true;
    cl.command.assign(argv + i + 1, argv + argc);
    argc = i;
    return;
  }
}

// The forward list `a` names (-t, --tcp-forward, -u, ...), alone or as
// "FLAG=SPEC" (then *inline_spec is SPEC); nullptr if `a` is no such flag.
std::vector<std::string>* ForwardFlag(std::string_view a, CommandLine& cl,
                                      std::string_view* inline_spec) {
  std::vector<std::string>* to = nullptr;
  for (auto [name, list] :
       {std::pair{std::string_view("-t"), &cl.tcp_forwards},
        std::pair{std::string_view("--tcp-forward"), &cl.tcp_forwards},
        std::pair{std::string_view("--tcp_forward"), &cl.tcp_forwards},
        std::pair{std::string_view("-u"), &cl.udp_forwards},
        std::pair{std::string_view("--udp-forward"), &cl.udp_forwards},
        std::pair{std::string_view("--udp_forward"), &cl.udp_forwards}}) {
    if (a == name) {
      to = list;
    } else if (a.size() > name.size() && a.starts_with(name) &&
               a[name.size()] == '=') {
      to = list;
      *inline_spec = a.substr(name.size() + 1);
    }
  }
  return to;
}

// -t/--tcp-forward and -u/--udp-forward, each "FLAG SPEC" or "FLAG=SPEC",
// taken out of argv (Abseil would keep only the last of a repeated flag).
// False, after the message, when a flag has no SPEC.
bool TakeForwards(int& argc, char** argv, CommandLine& cl) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    std::string_view rest;
    std::vector<std::string>* to = ForwardFlag(a, cl, &rest);
    if (to == nullptr) {
      argv[out++] = argv[i];
      continue;
    }
    if (rest.empty()) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "netstackd: %.*s needs a SPEC (see --help)\n",
                     static_cast<int>(a.size()), a.data());
        return false;
      }
      rest = argv[++i];
    }
    to->emplace_back(rest);
  }
  argc = out;
  return true;
}

// --allow RULE and --deny RULE (or "--allow=RULE"), repeatable, taken out
// of argv in order as TakeForwards does. False, after the message, when a
// flag has no RULE.
bool TakePolicyRules(int& argc, char** argv, CommandLine& cl) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    std::optional<bool> allow;
    std::string_view rest;
    for (auto [name, is_allow] : {std::pair{std::string_view("--allow"), true},
                                  std::pair{std::string_view("-allow"), true},
                                  std::pair{std::string_view("--deny"), false},
                                  std::pair{std::string_view("-deny"), false}}) {
      if (a == name) {
        allow = is_allow;
      } else if (a.size() > name.size() && a.starts_with(name) &&
                 a[name.size()] == '=') {
        allow = is_allow;
        rest = a.substr(name.size() + 1);
      }
    }
    if (!allow) {
      argv[out++] = argv[i];
      continue;
    }
    if (rest.empty()) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "netstackd: %.*s needs a RULE (see --help)\n",
                     static_cast<int>(a.size()), a.data());
        return false;
      }
      rest = argv[++i];
    }
    cl.policy_rules.push_back({*allow, std::string(rest)});
  }
  argc = out;
  return true;
}

// Whether --gso was given at all (its default alone does not ask for GSO).
bool GsoGiven(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "--gso" || a == "-gso" || a.starts_with("--gso=") ||
        a.starts_with("-gso=")) {
      return true;
    }
  }
  return false;
}

}  // namespace
}  // namespace netstack::tools

int main(int argc, char** argv) {
  using netstack::tools::CommandLine;
  // No fd this process inherited goes on to CMD (the caller's sockets of
  // the host's network namespace among them): each is close-on-exec from
  // here. netstackd itself keeps what its flags name (--fd, --ready-fd,
  // --exit-fd).
  netstack::tools::CloseInheritedOnExec();
  if (netstack::tools::InvokedAsSlirp4netns(argc, argv)) {
    return netstack::tools::RunAsSlirp4netns(argc, argv);
  }
  netstack::tools::SetHelpPage(netstack::tools::NetstackdHelpPage());
  CommandLine cl;
  netstack::tools::TakeCommand(argc, argv, cl);
  if (!netstack::tools::TakeForwards(argc, argv, cl)) return 2;
  if (!netstack::tools::TakePolicyRules(argc, argv, cl)) return 2;
  netstack::tools::DashesToUnderscores(argc, argv);
  cl.gso_given = netstack::tools::GsoGiven(argc, argv);
  netstack::tools::ParseCommandLineOrExit("netstackd", argc, argv);
  auto config = netstack::tools::ParseConfig(cl);
  if (!config.ok()) {
    std::fprintf(stderr, "netstackd: %s (see --help)\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  return netstack::tools::RunDaemon(*config);
}
