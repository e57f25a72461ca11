// Test support for the tests that attack a live connection with forged
// segments (tcp_fuzz_test, and its coverage-guided form
// fuzz/tcp_conn_fuzzer): the forgery, and the connection and bulk
// transfer they attack on a testing::Network.
//
// ForgeTcpSegment turns a copy of a genuine IPv4/TCP frame into a forgery:
// its payload stripped and one field of its TCP header rewritten
// (sequence and acknowledgment numbers near and far, flags, window, data
// offset, option bytes, truncation), with the checksums fixed so the
// forgery reaches the TCP layer. What it never forges, because no TCP can
// tell it from the genuine article:
//   - a segment with payload at a plausible sequence number (it is data);
//   - a RST or FIN with the exact sequence number (a valid reset or close,
//     RFC 5961 section 3) of the segment it copies. A FIN at that number
//     plus the payload it stripped is exact too, and can come out: the
//     receiver takes it as the end of the stream, which BulkTransfer
//     counts as an error the application saw;
//   - a later TSval in an otherwise exact copy (it poisons TS.Recent in
//     any TCP, Linux too: every later genuine segment fails PAWS), nor an
//     option byte that makes another TSval the one a receiver takes (a
//     SACK option turned into a second Timestamps option).
#ifndef NETSTACK_TCP_TCP_FORGE_TEST_UTIL_H_
#define NETSTACK_TCP_TCP_FORGE_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "netstack/base/time.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/tcp/tcp_test_util.h"

namespace netstack::tcp::testing {

// Offset of the TSval in the TCP header at `t` of `l4_len` bytes (0 if
// there is none).
size_t TsvalOffset(const uint8_t* t, size_t l4_len);

// Rewrites one TCP field of the IPv4 frame `f`, choosing what and how from
// `next` (any source of numbers: a seeded generator, fuzzer bytes), and
// fixes the checksums. Returns false, `f` untouched, if the frame is not
// IPv4/TCP.
bool ForgeTcpSegment(std::vector<uint8_t>& f,
                     absl::FunctionRef<uint64_t()> next);

// Sets net.filter: from then on, every frame for which `forge()` says yes
// is followed on the wire by a forged copy of it (ForgeTcpSegment, its
// choices from `next`), and `forged` counts the copies. The callables and
// `forged` must outlive the filter.
void ForgeFollowers(Network& net, std::function<bool()> forge,
                    std::function<uint64_t()> next, uint64_t& forged);

// A client on host a connected to `listener` (on host b, at `to`), and the
// server end b accepted.
struct Connection {
  std::unique_ptr<TcpSocket> client;
  std::unique_ptr<TcpSocket> server;
};
// Runs the handshake; nullopt when it did not complete within `limit`.
std::optional<Connection> Connect(Network& net, TcpSocket& listener,
                                  const transport::SocketAddress& to,
                                  Duration limit = absl::Seconds(60));

// `total` bytes of a fixed pattern from client to server, driven one
// application round at a time (Pump, from a Network::RunUntil predicate).
// Every byte read is compared with the one written at its position.
class BulkTransfer {
 public:
  BulkTransfer(TcpSocket& client, TcpSocket& server, size_t total);

  // Writes what the client takes, reads and checks what the server has,
  // and notes any error the application is told of: a failed Write or
  // Read (other than would-block), either end closed, or the end of the
  // stream before every byte.
  void Pump();
  // Every byte arrived, or the application saw an error.
  bool finished() const { return got_ == total() || error_; }

  size_t total() const { return out_.size(); }
  size_t written() const { return written_; }
  size_t got() const { return got_; }
  // A byte read that is not the one written there, or past the end.
  bool corrupt() const { return corrupt_; }
  bool error() const { return error_; }

 private:
  TcpSocket& client_;
  TcpSocket& server_;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> in_;
  size_t written_ = 0;
  size_t got_ = 0;
  bool corrupt_ = false;
  bool error_ = false;
};

}  // namespace netstack::tcp::testing

#endif  // NETSTACK_TCP_TCP_FORGE_TEST_UTIL_H_
