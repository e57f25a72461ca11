// Counters of splice_proxy: per direction of a forward, per forward, and
// their one-line text form (name=value tokens, so that people and tests
// read the same thing).
#ifndef TOOLS_SPLICE_PROXY_FORWARD_COUNTERS_H_
#define TOOLS_SPLICE_PROXY_FORWARD_COUNTERS_H_

#include <cstdint>
#include <string>

#include "netstack/forward/relay.h"

namespace netstack::tools {

// One direction (client to server, or back) summed over connections.
struct DirectionCounters {
  uint64_t bytes = 0;         // delivered to the destination
  uint64_t splice_bytes = 0;  // of which through a pipe
  uint64_t copy_bytes = 0;    // of which through a user buffer
  uint64_t splice_syscalls = 0;
  uint64_t copy_syscalls = 0;
  uint64_t would_block = 0;  // writes that found the destination full
  uint64_t segment_vetoes = 0;  // auto: TCP segments too small to splice
  uint64_t pipe_acquires = 0;   // pipes taken from the pool
  uint64_t pipe_shortages = 0;  // pool empty when needed again: copied
  // Connections whose direction fell back to copying, by reason.
  uint64_t fallback_einval = 0;
  uint64_t fallback_no_pipe = 0;
  uint64_t eof_forwarded = 0;  // half-closes passed on

  void Add(const forward::DirectionStats& d);
  void Add(const DirectionCounters& d);
  // "bytes=... splice_bytes=... ... syscalls=... ..."
  std::string Format() const;
};

struct ForwardCounters {
  uint64_t accepted = 0;
  uint64_t connecting = 0;       // now: waiting for the target
  uint64_t active = 0;           // now: relaying
  uint64_t completed = 0;        // both directions ended with EOF
  uint64_t relay_errors = 0;     // an error on one leg closed both
  uint64_t connect_failed = 0;   // target unreachable or timed out
  uint64_t connect_retries = 0;  // a UNIX target's backlog was full
  uint64_t aborted = 0;          // closed by the proxy's shutdown
  uint64_t accept_errors = 0;    // accept() failed (EMFILE, ENFILE, ...)
  DirectionCounters client_to_server;
  DirectionCounters server_to_client;

  void Add(const ForwardCounters& c);
  void AddRelay(const forward::RelayStats& s);
  // "accepted=... connecting=... active=... ..."
  std::string FormatConnections() const;
};

// "created=... reused=... in_use=... pooled=... ... trimmed=..."
std::string FormatPipeStats(const forward::PipePool::Stats& s);

}  // namespace netstack::tools

#endif  // TOOLS_SPLICE_PROXY_FORWARD_COUNTERS_H_
