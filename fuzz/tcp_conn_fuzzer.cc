// A live TCP connection fed forged segments while a bulk transfer runs:
// the coverage-guided form of netstack/tcp/tcp_fuzz_test.cc, on the same
// two-stack testing::Network and with the same forgeries
// (tcp_forge_test_util.h: what is forged, and what never is because no
// TCP could refuse it).
//
// An input is:
//   1 byte         the transfer's size, 1..64 KiB;
//   then, for every frame that crosses the wire once both ends are
//   established, one byte: when odd, a forged copy of the frame follows
//   it, and the forgery's choices (what to rewrite, and to what) are read
//   from the input right after that byte, 32 bits at a time.
// Once the input is used up, frames cross untouched. Time moves as the
// connection's own timers and the wire's 2 ms delay say. (Per-frame extra
// delays, which reorder the wire, were tried as the input's time steps:
// together with forgeries they stalled a transfer with PAWS rejections on
// both ends, not yet explained; fuzz/findings/tcp_conn_fuzzer/ has the
// input and docs/FUZZING.md the details.)
//
// Checked after every round of the network:
//   - every frame each stack received is consumed or dropped for one
//     counted reason;
//   - sequence space: the client's acked bytes (SND.UNA) plus the bytes
//     still queued is what it wrote; the acked bytes never exceed the
//     written ones; the server's in-order bytes (RCV.NXT) are what was
//     read plus what is readable, and never more than was written;
// and at the end: no byte read differs from the one written there, and
// the transfer delivered every byte or the application saw an error (an
// early end of stream is one: BulkTransfer), unless the client took an acknowledgment for bytes the server never
// received: a forged ACK inside [SND.UNA, SND.NXT] is acceptable to any
// TCP (RFC 5961 section 5.2), and the sender, which then frees those
// bytes, cannot resend them. That case is counted, not failed.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "netstack/tcp/tcp_forge_test_util.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/tcp/tcp_test_util.h"

namespace netstack::tcp {
namespace {

using testing::BulkTransfer;
using testing::Host;
using testing::Network;

void CheckFrames(const Host& h) {
  const auto& c = h.stack->counters();
  FUZZ_CHECK(c.rx_frames == c.rx_consumed + c.rx_dropped_frames);
  FUZZ_CHECK(c.RxDrops() == c.rx_dropped_frames);
}

// Returns true when the client holds an acknowledgment for bytes the
// server does not have (see the file comment).
bool CheckSequenceSpace(const testing::Connection& conn, const BulkTransfer& t) {
  const TcpInfo client = conn.client->Info();
  const TcpInfo server = conn.server->Info();
  FUZZ_CHECK(client.bytes_acked <= t.written());
  if (client.state != TcpState::kClosed) {
    FUZZ_CHECK(client.bytes_acked + conn.client->unsent_bytes() ==
               t.written());
  }
  FUZZ_CHECK(server.bytes_received <= t.written());
  if (server.state != TcpState::kClosed) {
    FUZZ_CHECK(server.bytes_received ==
               t.got() + conn.server->readable_bytes());
  }
  return client.bytes_acked > server.bytes_received;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  const size_t total = size_t{1024} * (1 + in.U8() % 64);
  Network net({}, 1500, 1);
  net.delay = absl::Milliseconds(2);
  bool armed = false;
  uint64_t forged = 0;
  testing::ForgeFollowers(
      net, [&] { return armed && !in.done() && (in.U8() & 1) != 0; },
      [&] { return uint64_t{in.U32()}; }, forged);
  auto listener = net.b().tcp->Open(transport::Family::kIpv4);
  FUZZ_CHECK(listener->Bind({net.b().v4(), 80}).ok());
  FUZZ_CHECK(listener->Listen(8).ok());
  std::optional<testing::Connection> conn =
      testing::Connect(net, *listener, {net.b().v4(), 80});
  FUZZ_CHECK(conn.has_value());  // nothing forged yet
  armed = true;
  BulkTransfer t(*conn->client, *conn->server, total);
  bool acked_unreceived = false;
  net.RunUntil([&] {
    t.Pump();
    CheckFrames(net.a());
    CheckFrames(net.b());
    if (CheckSequenceSpace(*conn, t)) acked_unreceived = true;
    return t.finished();
  }, absl::Seconds(300));
  FUZZ_CHECK(!t.corrupt());
  if (std::getenv("FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "forged %llu; got %zu of %zu; error %d; "
                 "acked_unreceived %d\n%s\n%s\n",
                 static_cast<unsigned long long>(forged), t.got(), t.total(),
                 t.error(), acked_unreceived,
                 conn->client->Info().ToString().c_str(),
                 conn->server->Info().ToString().c_str());
    for (Host* h : {&net.a(), &net.b()}) {
      std::fprintf(stderr, "host %u:\n%s%s", h->id,
                   h->stack->FormatCounters().c_str(),
                   h->tcp->FormatCounters().c_str());
    }
  }
  FUZZ_CHECK(t.got() == t.total() || t.error() || acked_unreceived);
  return 0;
}

}  // namespace netstack::tcp
