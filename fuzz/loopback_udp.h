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

// Entries of /proc/self/fd: the same "." / ".." / the listing's own fd
// every time, so two counts compare.
size_t OpenFdCount();

}  // namespace netstack::fuzz

#endif  // NETSTACK_FUZZ_LOOPBACK_UDP_H_
