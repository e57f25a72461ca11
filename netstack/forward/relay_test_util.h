// Test helpers for the relay: real socket legs (TCP over 127.0.0.1 and ::1,
// UNIX socketpairs), peers that do blocking I/O in threads, seeded data,
// and an fd census.
#ifndef NETSTACK_FORWARD_RELAY_TEST_UTIL_H_
#define NETSTACK_FORWARD_RELAY_TEST_UTIL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "netstack/eventloop/event_loop.h"

namespace netstack::forward::test {

enum class LegKind : uint8_t { kTcp4, kTcp6, kUnix };
std::string LegKindName(LegKind kind);

// A connected stream socket pair: `peer` stays with the test, `relay` is
// handed to the relay. Both blocking.
struct Leg {
  int peer = -1;
  int relay = -1;
};

struct LegOptions {
  // When > 0, SO_RCVBUF on the peer end (before connect for TCP, so that
  // the window is small) and SO_SNDBUF on the relay's end: the bytes the
  // relay sends toward this peer back up quickly.
  int peer_rcvbuf = 0;
};

// TCP legs connect through a listener on the loopback address of the
// family; the accepted end goes to the relay.
absl::StatusOr<Leg> MakeLeg(LegKind kind, const LegOptions& options = {});

// Deterministic pseudo-random bytes.
std::vector<uint8_t> SeededBytes(size_t size, uint64_t seed);

// Writes `data` in chunks of random size in [min_chunk, max_chunk]
// (log-uniform), optionally after waiting for a gate, then
// shutdown(SHUT_WR) if asked.
struct WriterOptions {
  size_t min_chunk = 1;
  size_t max_chunk = 128 * 1024;
  bool shutdown_at_end = true;
  uint64_t seed = 1;
};

// Reads until EOF (or error) in reads of random size in [min_read,
// max_read]; optionally waits for `gate` first and sleeps `pause` every
// `pause_every` reads.
struct ReaderOptions {
  size_t min_read = 1;
  size_t max_read = 128 * 1024;
  const std::atomic<bool>* gate = nullptr;
  int pause_every = 0;
  absl::Duration pause = absl::ZeroDuration();
  uint64_t seed = 2;
};

// One end of the test: a writer thread and a reader thread on one fd,
// which it owns.
class Peer {
 public:
  explicit Peer(int fd) : fd_(fd) {}
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer();

  void StartWriter(std::vector<uint8_t> data, const WriterOptions& options);
  void StartReader(const ReaderOptions& options);
  // shutdown(SHUT_RDWR): unblocks both threads (for a failing test).
  void Abort();
  void Join();

  int fd() const { return fd_; }
  // Valid after Join.
  const std::vector<uint8_t>& received() const { return received_; }
  bool eof() const { return eof_; }
  int read_errno() const { return read_errno_; }
  int write_errno() const { return write_errno_; }
  size_t written() const { return written_.load(); }
  size_t received_so_far() const { return received_count_.load(); }
  // The reader thread has returned (EOF or error).
  bool reader_done() const { return reader_done_.load(); }

 private:
  int fd_;
  std::thread writer_;
  std::thread reader_;
  std::vector<uint8_t> received_;
  std::atomic<size_t> written_{0};
  std::atomic<size_t> received_count_{0};
  std::atomic<bool> reader_done_{false};
  bool eof_ = false;
  int read_errno_ = 0;
  int write_errno_ = 0;
};

// Turns the loop (10 ms waits) until `done()` or `timeout`; true if done.
bool RunUntil(eventloop::EventLoop& loop, absl::FunctionRef<bool()> done,
              absl::Duration timeout);
// Turns the loop for `duration`.
void RunFor(eventloop::EventLoop& loop, absl::Duration duration);

// Whether the kernel gives this process a full-size pipe now. All
// processes of a user without CAP_SYS_RESOURCE (root in a container too)
// share /proc/sys/fs/pipe-user-pages-soft: while other tests or benchmarks
// hold that budget, new pipes come with 2 pages and relays copy. Tests that
// must see the splice path check this first.
bool KernelGrantsPipes(size_t size = size_t{1} << 20);

// Entries in /proc/self/fd.
int CountOpenFds();
bool FdIsOpen(int fd);

}  // namespace netstack::forward::test

#endif  // NETSTACK_FORWARD_RELAY_TEST_UTIL_H_
