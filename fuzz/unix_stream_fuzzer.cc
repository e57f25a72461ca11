// The UNIX stream link's receive side (link/unix_stream_endpoint.h: QEMU's
// `-netdev stream` framing, a 4-byte big-endian length before each
// frame), fed through a real socketpair in the chunks the input chooses,
// against a receiver that sometimes keeps the frames' views (pinning
// their chunks) and a small chunk pool, so the paths that move a partial
// frame, reuse a chunk and pause receive for lack of chunks all run.
//
// An input is: the MTU (2 bytes) and the batch size (1 byte), then a
// script of steps:
//   write       up to 4 KiB of stream bytes into the peer's end;
//   read        the endpoint's OnReadable();
//   keep/free   the receiver starts keeping what it is given, or releases
//               everything it kept;
//   time step   1 ms on (receive's retry delay) and Poll().
// At the end the peer shuts down its end, the receiver lets go, and the
// endpoint reads until it has disconnected.
//
// A reference parser reads the same stream bytes. Checked:
//   - the frames delivered are, in order and byte for byte, the stream's
//     frames of 14..MTU+18 bytes (at every step a prefix of them);
//   - each shorter one is counted rx_runt, each longer one rx_oversize;
//   - a length of 0 or above 65535 drops the connection
//     (disconnect_bad_length), and nothing after it is delivered;
//     otherwise the connection ends at the peer's EOF;
//   - buffering is bounded: the pool's chunks in use never exceed one per
//     view the receiver holds, plus the one being filled; after the
//     disconnect and the release, none.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "link/fd_util.h"
#include "link/unix_stream_endpoint.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/wire/bytes.h"

namespace netstack::link {
namespace {

constexpr size_t kPoolChunks = 4;

struct Expected {
  std::vector<std::vector<uint8_t>> frames;
  uint64_t runts = 0;
  uint64_t oversize = 0;
  bool bad_length = false;
};

// The framing as the header documents it, over the whole stream.
Expected ParseStream(const std::vector<uint8_t>& s, uint32_t max_frame) {
  Expected e;
  size_t pos = 0;
  while (pos + 4 <= s.size()) {
    const uint32_t len = wire::LoadBe32(&s[pos]);
    if (len == 0 || len > UnixStreamEndpoint::kMaxFrameLen) {
      e.bad_length = true;
      break;
    }
    if (pos + 4 + len > s.size()) break;  // cut off by EOF
    if (len < kMinFrameLen) {
      ++e.runts;
    } else if (len > max_frame) {
      ++e.oversize;
    } else {
      e.frames.emplace_back(s.begin() + pos + 4, s.begin() + pos + 4 + len);
    }
    pos += 4 + len;
  }
  return e;
}

class Receiver : public LinkReceiver {
 public:
  void DeliverFrames(std::span<InboundFrame> frames, Instant) override {
    for (InboundFrame& f : frames) {
      const auto b = f.frame.bytes();
      delivered.emplace_back(b.begin(), b.end());
      if (keep) held.push_back(std::move(f.frame));
    }
  }
  std::vector<std::vector<uint8_t>> delivered;
  std::vector<buffer::PayloadView> held;
  bool keep = false;
};

void CheckBounded(const buffer::ChunkPool& pool, const Receiver& r) {
  FUZZ_CHECK(pool.stats().in_use <= r.held.size() + 1);
}

void CheckPrefix(const Receiver& r, const std::vector<uint8_t>& stream,
                 uint32_t max_frame) {
  const Expected e = ParseStream(stream, max_frame);
  FUZZ_CHECK(r.delivered.size() <= e.frames.size());
  for (size_t i = 0; i < r.delivered.size(); ++i) {
    FUZZ_CHECK(r.delivered[i] == e.frames[i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  UnixStreamOptions options;
  options.mtu = 68 + in.U16() % (UnixStreamEndpoint::kMaxFrameLen - 14 - 68 + 1);
  options.rx_batch = 1 + in.U8() % 8;
  const uint32_t max_frame = std::min<uint32_t>(
      options.mtu + kEthernetOverhead, UnixStreamEndpoint::kMaxFrameLen);
  int fds[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          0, fds) == 0);
  UniqueFd peer(fds[1]);
  buffer::ChunkPool pool(kPoolChunks);
  Receiver receiver;
  std::vector<uint8_t> stream;
  {
    auto ep = UnixStreamEndpoint::FromConnectedFd(fds[0], options, pool);
    FUZZ_CHECK(ep.ok());
    UnixStreamEndpoint& e = **ep;
    e.Attach(&receiver);
    Instant now = absl::FromUnixSeconds(1'700'000'000);
    auto read = [&] {
      e.OnReadable(now);
      CheckBounded(pool, receiver);
      CheckPrefix(receiver, stream, max_frame);
    };
    for (int step = 0; step < 1024 && !in.done(); ++step) {
      const uint8_t op = in.U8();
      switch (op % 4) {
        case 0: {  // write; the socket holds far more than one step writes
          const auto bytes = in.Bytes(in.U16() % 4097);
          if (bytes.empty()) break;
          // MSG_NOSIGNAL: after a bad length the endpoint has closed its
          // end, and a write would raise SIGPIPE.
          const ssize_t n =
              ::send(peer.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
          if (n > 0) stream.insert(stream.end(), bytes.begin(), bytes.begin() + n);
          break;
        }
        case 1:
          read();
          break;
        case 2:
          receiver.keep = (op & 0x80) != 0;
          if (!receiver.keep) receiver.held.clear();
          break;
        default:
          now += absl::Milliseconds(1);
          e.Poll(now);
          break;
      }
    }
    // The peer goes away; the receiver lets go; the endpoint drains.
    ::shutdown(peer.get(), SHUT_WR);
    receiver.keep = false;
    receiver.held.clear();
    for (int i = 0; i < 4096 && e.connected(); ++i) {
      now += absl::Milliseconds(1);
      e.Poll(now);
      read();
    }
    FUZZ_CHECK(!e.connected());
    const Expected x = ParseStream(stream, max_frame);
    FUZZ_CHECK(receiver.delivered == x.frames);
    const UnixStreamStats& s = e.stream_stats();
    FUZZ_CHECK(s.rx_runt == x.runts);
    FUZZ_CHECK(s.rx_oversize == x.oversize);
    FUZZ_CHECK(s.disconnect_bad_length == (x.bad_length ? 1u : 0u));
    FUZZ_CHECK(s.disconnect_peer_closed == (x.bad_length ? 0u : 1u));
    FUZZ_CHECK(s.disconnect_io_error == 0);
    FUZZ_CHECK(e.Stats().rx_frames == x.frames.size());
    FUZZ_CHECK(pool.stats().in_use == 0);
  }
  return 0;
}

}  // namespace netstack::link
