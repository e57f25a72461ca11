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
// connection's own timers and the wire's 2 ms delay say.
//
// Built with TCP_CONN_REORDER (tcp_conn_reorder_fuzzer), the byte's bits
// 1..7 also hold the frame, and its forged copy, that many ms more on the
// wire: the input's time steps, which reorder the wire. That form found
// a sender that kept a forged SACK of the bytes at SND.UNA across its
// RTOs and resent nothing, for the whole 300 s
// (fuzz/regressions/tcp_conn_reorder_fuzzer/paws_stall_with_reordering;
// the fix: Scoreboard::ForgetSacksIfReneged).
//
// FUZZ_TRACE=1 prints every frame as it enters the wire (when it left,
// when it arrives, forged or not, its TCP fields); FUZZ_VERBOSE=1 the
// outcome and both ends' counters.
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
#include "netstack/wire/bytes.h"

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
#ifdef TCP_CONN_REORDER
  // tcp_conn_reorder_fuzzer: the byte's bits 1..7 also hold the frame
  // (and its forged copy) that many ms more on the wire.
  net.filter = [&](testing::WireFrame& f) {
    if (!armed || in.done()) return true;
    const uint8_t b = in.U8();
    f.at += absl::Milliseconds(b >> 1);
    if ((b & 1) != 0) {
      testing::WireFrame copy = f;
      if (testing::ForgeTcpSegment(copy.bytes,
                                   [&] { return uint64_t{in.U32()}; })) {
        ++forged;
        net.extra.push_back(std::move(copy));
      }
    }
    return true;
  };
#else
  testing::ForgeFollowers(
      net, [&] { return armed && !in.done() && (in.U8() & 1) != 0; },
      [&] { return uint64_t{in.U32()}; }, forged);
#endif
  if (std::getenv("FUZZ_TRACE") != nullptr) {
    // Every frame as it enters the wire, forged copies after it.
    net.filter = [&net, inner = std::move(net.filter),
                  t0 = net.now()](testing::WireFrame& f) {
      const bool keep = inner(f);
      auto show = [&](const testing::WireFrame& w, const char* what) {
        const std::vector<uint8_t>& b = w.bytes;
        if (b.size() < 14 + 20 + 20) return;
        const size_t ihl = (b[14] & 0x0f) * 4u;
        const uint8_t* t = b.data() + 14 + ihl;
        const size_t l4 = b.size() - 14 - ihl;
        const size_t doff = (t[12] >> 4) * 4u;
        const size_t ts = testing::TsvalOffset(t, l4);
        std::fprintf(
            stderr,
            "%8.3f->%8.3f %s %s seq=%u ack=%u fl=%02x win=%u len=%zu "
            "tsval=%u tsecr=%u\n",
            absl::ToDoubleMilliseconds(net.now() - t0),
            absl::ToDoubleMilliseconds(w.at - t0), w.a_to_b ? "c>s" : "s>c",
            what, wire::LoadBe32(t + 4), wire::LoadBe32(t + 8), t[13],
            wire::LoadBe16(t + 14), doff <= l4 ? l4 - doff : 0,
            ts != 0 ? wire::LoadBe32(t + ts) : 0,
            ts != 0 ? wire::LoadBe32(t + ts + 4) : 0);
      };
      show(f, keep ? "    " : "DROP");
      for (const testing::WireFrame& x : net.extra) show(x, "FORG");
      return keep;
    };
  }
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
