#include "tools/netstackd/help.h"

namespace netstack::tools {

namespace {

// Each usage line is one way to start netstackd, with what it is for
// below it; at most 80 columns.
constexpr char kUsage[] =
    "usage: netstackd [FLAGS] -- CMD [ARGS...]\n"
    "         run CMD in new namespaces whose only network is netstackd\n"
    "       netstackd [FLAGS] (--netns-pid PID | --netns NS|PATH)\n"
    "         be the network of a namespace that exists\n"
    "       netstackd --backend [FLAGS] (--unix PATH | --fd N "
    "--fd-type tap|stream)\n"
    "         be a VM's network (QEMU's -netdev stream, or a parent's fd)\n"
    "       netstackd --backend [FLAGS] --vhost-user PATH\n"
    "         be a VM's network as its vhost-user-net back-end\n"
    "       netstackd --backend [FLAGS] --tap NAME --netns NS\n"
    "         be the network behind a TAP device\n"
    "       netstackd --addr CIDR [FLAGS] (--tap NAME | --packet IFNAME)\n"
    "         host mode: a host on the link, with services of its own\n"
    "       netstackd slirp4netns [OPTIONS] PID|PATH TAPNAME\n"
    "         slirp4netns's command line and API socket, for Podman and\n"
    "         rootlesskit (also when run under the name slirp4netns); see\n"
    "         netstackd slirp4netns --help\n";

constexpr char kDescription[] =
    "netstackd is a userspace TCP/IP stack on one link. As a backend it is "
    "a guest's gateway: the guest (a network namespace or a VM) gets "
    "10.0.2.100 by DHCP and an address in fd00::/64 by SLAAC, each TCP and "
    "UDP flow and ping it starts becomes a socket on this host, and its "
    "DNS queries to 10.0.2.3 or fd00::3 go to --dns-upstream."
    "\n\n"
    "With -- CMD, netstackd runs CMD in new user, network, PID and mount "
    "namespaces whose only way out is the backend: tap0 there has "
    "10.0.2.100/24 and fd00::100/64 with default routes, and CMD sees a "
    "resolv.conf naming the DNS address. Root there is the caller (nobody "
    "if the caller is root: --runas), with no capability outside. SIGINT, "
    "SIGTERM and SIGHUP (unless --policy: then it reads the file again) go "
    "on to CMD; when CMD "
    "exits, whatever it left running is killed and netstackd exits with "
    "CMD's status."
    "\n\n"
    "In host mode (no --backend, no CMD) the stack is a host on the link "
    "with the addresses of --addr and --addr6: it answers ARP, NDP and "
    "ping, and runs the services --http-root, --echo-port and "
    "--discard-port ask for."
    "\n\n"
    "Counters go to stderr on SIGUSR1 and at exit. SIGHUP reads --policy "
    "FILE again. SIGINT or SIGTERM stop netstackd.";

constexpr char kExitStatus[] =
    "Exit status:\n"
    "  0    a clean stop (SIGINT or SIGTERM), or --help\n"
    "  1    the link or a resource could not be set up (a port in use, ...)\n"
    "  2    bad flags\n"
    "  159  the sandbox stopped a forbidden system call (--sandbox)\n"
    "  With -- CMD: CMD's status, 128+N if signal N killed it, 127 if CMD\n"
    "  cannot be found.\n";

}  // namespace

HelpPage NetstackdHelpPage() {
  HelpPage page;
  page.tool = "netstackd";
  page.usage = kUsage;
  page.description = kDescription;
  page.exit_status = kExitStatus;
  page.flags_dir = "tools/netstackd/";
  page.groups = {
      {"Attaching the guest",
       "always needed. One of -- CMD, --netns-pid, --netns, --tap, --unix, "
       "--vhost-user, --fd or --packet says how the guest's frames reach netstackd.",
       {"--backend", "--netns-pid PID", "--netns NS|PATH", "--userns-pid PID",
        "--userns PATH", "--tap NAME", "--unix PATH", "--unix-connect",
        "--unix-allow-uid UID", "--vhost-user PATH", "--fd N", "--fd-type tap|stream",
        "--packet IFNAME", "--no-dns-config", "--ready-fd N",
        "--exit-fd N"}},
      {"Address plan",
       "when the guest's network must be another than 10.0.2.0/24 and "
       "fd00::/64, or the link needs another MTU or MAC address.",
       {"--net CIDR", "--net6 PREFIX", "--mtu N", "--mac MAC"}},
      {"Forwards",
       "when the host must reach a server in the guest (a published port).",
       {"-t, --tcp-forward SPEC", "-u, --udp-forward SPEC",
        "--forward-path auto|splice|stack", "--forward-api PATH"}},
      {"Limits",
       "when a guest, or the clients of a forward, must not take more than "
       "their share of flows, connections and time. D is a duration with "
       "its unit (30s, 3m).",
       {"--max-tcp-flows N", "--max-udp-flows N", "--max-forward-conns N",
        "--max-conns-per-forward N", "--udp-timeout D",
        "--tcp-guest-timeout D", "--busy-syn-rate N",
        "--reassembly-timeout D"}},
      {"Policy",
       "when the guest must reach more or less: of the world (rules by name "
       "or address, logged; docs/POLICY.md), or of this host (its loopback, "
       "a source address, a DNS server).",
       {"--allow RULE", "--deny RULE", "--policy FILE", "--egress open|none",
        "--flow-log FILE", "--flow-log-max-bytes N", "--flow-log-rate N",
        "--new-flow-rate N[/s][,burst=M]", "--egress-rate RATE[,burst=SIZE]",
        "--host-loopback", "--outbound-bind IP", "--dns-upstream ADDR[:PORT]"}},
      {"Performance",
       "to tune throughput (segmentation offload, the TAP's queues); the "
       "defaults suit most uses.",
       {"--gso N", "--swgso", "--hostgso", "--tap-queues N"}},
      {"Sandbox",
       "when netstackd's own confinement must change, or whom CMD runs as "
       "(docs/SECURITY.md).",
       {"--sandbox on|log|off", "--runas USER[:GROUP]",
        "--sandbox-test execve|kill"}},
      {"Diagnostics",
       "when something does not work (what netstackd saw and did).",
       {"--verbose", "--pcap FILE"}},
      {"Fault injection",
       "to test TCP under loss, delay and reordering (tests, not "
       "production). F is a fraction (0.01 = 1%), D a duration (10ms).",
       {"--loss F", "--duplicate F", "--reorder F", "--corrupt F",
        "--delay D", "--jitter D", "--seed N", "--fault-queue-limit N",
        "--fault-ingress"}},
      {"Host mode",
       "when netstackd is a host on the link, not a gateway (tests, "
       "benchmarks, demos), with addresses and services of its own.",
       {"--addr CIDR", "--addr6 CIDR", "--gateway IP", "--http-root DIR",
        "--http-port N", "--echo-port N", "--discard-port N",
        "--control PATH"}},
  };
  return page;
}

}  // namespace netstack::tools
