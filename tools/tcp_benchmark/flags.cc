#include "tools/tcp_benchmark/flags.h"

#include <cstdint>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, role, "",
          "Run one role: 'server' (answers iperf3 clients, like iperf3 -s) or "
          "'client' (measures against an iperf3 server, like iperf3 -c). "
          "Without --role, tcp_benchmark is the driver: it builds its own "
          "namespaces and link, runs both roles and the kernel baseline, and "
          "prints a table.");
ABSL_FLAG(std::string, stack, "netstack",
          "With --role: 'netstack' (our stack on --packet/--tap) or "
          "'kernel' (the host's sockets).");
ABSL_FLAG(std::string, connect, "",
          "Client role: the server's HOST:PORT ([v6]:port for IPv6).");
ABSL_FLAG(int, port, 5201, "Server role: the TCP port to listen on.");
ABSL_FLAG(bool, one_off, false,
          "Server role: exit after one test (iperf3 -1).");
ABSL_FLAG(bool, reverse, false,
          "Client role: the server sends, the client receives (iperf3 -R).");
ABSL_FLAG(bool, rr, false,
          "Kernel roles, instead of iperf3: netperf's TCP_RR. The client "
          "sends a 1-byte request and waits for the 1-byte response on one "
          "connection, back to back for --duration, and reports "
          "transactions/s and the mean, p50, p99 and max microseconds per "
          "transaction. The server (--rr or --crr) answers every byte it "
          "reads with one byte, on any number of connections. Not iperf3's "
          "protocol: both ends must be tcp_benchmark.");
ABSL_FLAG(bool, crr, false,
          "Kernel roles: netperf's TCP_CRR, as --rr but each transaction is "
          "connect, 1-byte request, 1-byte response, close (timed from the "
          "connect). The server is the same as for --rr.");
ABSL_FLAG(bool, udp_rr, false,
          "Client role, kernel: netperf's UDP_RR, a 1-byte datagram and the "
          "same byte back, back to back for --duration; a request not "
          "answered within 200 ms is counted lost and the next one goes. "
          "The --rr server answers UDP datagrams on its port too.");

ABSL_FLAG(double, duration, 10, "Seconds of data transfer per measurement.");
ABSL_FLAG(double, interval, 1, "Seconds between interval lines; 0 = none.");
ABSL_FLAG(int, streams, 1, "Parallel data streams (iperf3 -P).");
ABSL_FLAG(bool, exit_counters, true,
          "Roles: print the stack's counters to stderr at exit (drops with "
          "their reasons, link syscalls, GSO splits). The driver passes "
          "false unless --verbose.");
ABSL_FLAG(bool, verbose, false,
          "Driver: show netstack's counters for each measurement: the "
          "client role's at its exit, and the server role's stderr after "
          "the run (its counters when netstack serves, as in receiver "
          "rows). Without it the driver prints progress and the table.");
ABSL_FLAG(bool, json, false,
          "Print results as JSON on stdout; progress goes to stderr.");
ABSL_FLAG(std::string, cc, "",
          "Congestion control of the data streams: 'reno' or 'cubic'. A "
          "role's default is its stack's own (the kernel's may be bbr); the "
          "driver's default is cubic for every sender, kernel baseline "
          "included, so the comparison is like for like.");
ABSL_FLAG(bool, sack, true, "netstack: offer and accept SACK.");
ABSL_FLAG(std::string, recv_mode, "plain",
          "Kernel stack, receiving: 'plain' (recv into a buffer) or 'splice' "
          "(splice socket -> pipe -> /dev/null: no copy to user memory).");
ABSL_FLAG(std::string, send_mode, "plain",
          "Kernel stack, sending: 'plain' (send from a buffer), 'vmsplice' "
          "(vmsplice a buffer into a pipe, splice the pipe to the socket) or "
          "'sendfile' (sendfile from a memfd).");

ABSL_FLAG(std::string, tap, "",
          "netstack: attach to the TAP device NAME (created if needed).");
ABSL_FLAG(std::string, packet, "",
          "netstack: attach to interface IFNAME with an AF_PACKET socket.");
ABSL_FLAG(std::string, netns, "",
          "netstack: open the link inside this network namespace.");
ABSL_FLAG(std::vector<std::string>, addr, {},
          "netstack: IPv4 address with prefix, e.g. 10.9.0.2/24.");
ABSL_FLAG(std::vector<std::string>, addr6, {},
          "netstack: IPv6 address with prefix, e.g. fd00:9::2/64.");
ABSL_FLAG(int, mtu, 0,
          "Link MTU. Role: 0 = the link's own. Driver: the one MTU to "
          "measure (0 = 1500); --mtus measures several.");
ABSL_FLAG(int, gso, 65535,
          "netstack: largest GSO super-segment in bytes (IP packet) with "
          "--swgso or --hostgso; 0 turns GSO off. Without --swgso or "
          "--hostgso there is no GSO (unlike gVisor, where --gso alone means "
          "host GSO).");
ABSL_FLAG(bool, swgso, false,
          "netstack: software GSO (split super-segments in the link layer, "
          "one sendmmsg per batch).");
ABSL_FLAG(bool, hostgso, false,
          "netstack: host GSO (hand super-segments to the kernel with a "
          "virtio-net header).");
ABSL_FLAG(std::string, pcap, "",
          "netstack: write the frames in and out to this pcap file. The "
          "driver (no --role) writes one file per run, named "
          "PATH.MODE.MTU.client|server.pcap (e.g. /tmp/x.off.1500.client.pcap), "
          "and prints each name.");

ABSL_FLAG(double, loss, 0, "netstack: drop this fraction of frames each way.");
ABSL_FLAG(double, duplicate, 0,
          "netstack: duplicate this fraction of frames each way.");
ABSL_FLAG(double, reorder, 0,
          "netstack: hold back this fraction of frames behind later ones.");
ABSL_FLAG(absl::Duration, latency, absl::ZeroDuration(),
          "netstack: delay every frame by this much each way, e.g. 5ms.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the fault injector.");

ABSL_FLAG(bool, client, false,
          "Driver: measure netstack as the client (the sender; with "
          "--reverse the receiver). The default when neither --client nor "
          "--server is given; both: measure both.");
ABSL_FLAG(bool, server, false,
          "Driver: measure netstack as the server (the receiver; with "
          "--reverse the sender).");
ABSL_FLAG(bool, ideal, false,
          "Driver: no impairments at all (the default already has none; "
          "kept for gVisor's command line).");
ABSL_FLAG(std::string, link, "packet",
          "Driver: the link netstack uses: 'packet' (AF_PACKET on vB of a "
          "veth pair, the kernel peer on vA in another namespace) or 'tap' "
          "(a TAP in one namespace, the kernel peer on its kernel side).");
ABSL_FLAG(std::string, modes, "",
          "Driver: comma-separated GSO modes to measure, from off (--gso=0), "
          "sw (--swgso), host (--hostgso); 'kernel' alone measures only the "
          "kernel baseline. Default: the mode --gso/--swgso/--hostgso "
          "select, else off,sw.");
ABSL_FLAG(std::string, mtus, "",
          "Driver: comma-separated MTUs to measure, e.g. 1500,9000 "
          "(default: --mtu, or 1500).");
ABSL_FLAG(bool, kernel_baseline, true,
          "Driver: also measure kernel to kernel over a veth pair of the "
          "same MTU (default offloads) and report each ratio to it.");
ABSL_FLAG(bool, keep_topology, false,
          "Driver: leave the namespaces (tcpb<pid>a, tcpb<pid>b) in place "
          "at exit, for debugging; delete them with `ip netns del`.");
