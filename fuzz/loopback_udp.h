// What the fuzz targets that talk to real host sockets share
// (dns_forwarder_fuzzer's upstreams, udp_flows_fuzzer's host peers): UDP
// sockets of the fuzzer's own process on loopback, what they receive,
// and a count of the process's open fds to catch a leak.
#ifndef NETSTACK_FUZZ_LOOPBACK_UDP_H_
#define NETSTACK_FUZZ_LOOPBACK_UDP_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "netstack/transport/address.h"

namespace netstack::fuzz {

// A non-blocking UDP socket bound to `ip` (a loopback address) on a port
// the kernel picks, with a receive buffer of `rcvbuf` bytes; aborts the
// run if it cannot be made.
struct LoopbackUdp {
  int fd = -1;
  transport::SocketAddress addr;  // where it is bound
};
LoopbackUdp BindLoopbackUdp(const transport::IpAddress& ip, int rcvbuf);

struct Datagram {
  std::vector<uint8_t> bytes;
  transport::SocketAddress from;
};
// The next datagram waiting on `fd`, if any (never blocks).
std::optional<Datagram> RecvDatagram(int fd);

// How long a harness waits for the kernel to deliver what loopback has
// queued already: `waits` waits of up to 100 ms each that found nothing.
// Counted in waits, not in wall time: a long run at SCHED_IDLE can be
// starved for seconds behind a build, and a wall-clock limit then failed
// a check that the kernel never missed (udp_flows_fuzzer, at 6.97 M
// executions).
class KernelWait {
 public:
  explicit KernelWait(int waits = 100) : left_(waits) {}
  // Whether one more wait is allowed.
  bool Another() { return left_-- > 0; }

 private:
  int left_;
};

// Entries of /proc/self/fd: the same "." / ".." / the listing's own fd
// every time, so two counts compare.
size_t OpenFdCount();

}  // namespace netstack::fuzz

#endif  // NETSTACK_FUZZ_LOOPBACK_UDP_H_
