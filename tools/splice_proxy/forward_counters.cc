#include "tools/splice_proxy/forward_counters.h"

#include "absl/strings/str_cat.h"

namespace netstack::tools {

void DirectionCounters::Add(const forward::DirectionStats& d) {
  bytes += d.bytes;
  splice_bytes += d.splice_bytes;
  copy_bytes += d.copy_bytes;
  splice_syscalls += d.splice_syscalls;
  copy_syscalls += d.copy_syscalls;
  would_block += d.would_block;
  segment_vetoes += d.segment_vetoes;
  pipe_acquires += d.pipe_acquires;
  pipe_shortages += d.pipe_shortages;
  fallback_einval += d.fell_back_einval ? 1 : 0;
  fallback_no_pipe += d.fell_back_no_pipe ? 1 : 0;
  eof_forwarded += d.eof_forwarded ? 1 : 0;
}

void DirectionCounters::Add(const DirectionCounters& d) {
  bytes += d.bytes;
  splice_bytes += d.splice_bytes;
  copy_bytes += d.copy_bytes;
  splice_syscalls += d.splice_syscalls;
  copy_syscalls += d.copy_syscalls;
  would_block += d.would_block;
  segment_vetoes += d.segment_vetoes;
  pipe_acquires += d.pipe_acquires;
  pipe_shortages += d.pipe_shortages;
  fallback_einval += d.fallback_einval;
  fallback_no_pipe += d.fallback_no_pipe;
  eof_forwarded += d.eof_forwarded;
}

std::string DirectionCounters::Format() const {
  return absl::StrCat(
      "bytes=", bytes, " splice_bytes=", splice_bytes,
      " copy_bytes=", copy_bytes, " syscalls=", splice_syscalls + copy_syscalls,
      " splice_syscalls=", splice_syscalls, " copy_syscalls=", copy_syscalls,
      " would_block=", would_block, " segment_vetoes=", segment_vetoes,
      " pipe_acquires=", pipe_acquires, " pipe_shortages=", pipe_shortages,
      " fallback_einval=", fallback_einval,
      " fallback_no_pipe=", fallback_no_pipe, " eof_forwarded=", eof_forwarded);
}

void ForwardCounters::Add(const ForwardCounters& c) {
  accepted += c.accepted;
  connecting += c.connecting;
  active += c.active;
  completed += c.completed;
  relay_errors += c.relay_errors;
  connect_failed += c.connect_failed;
  connect_retries += c.connect_retries;
  aborted += c.aborted;
  accept_errors += c.accept_errors;
  client_to_server.Add(c.client_to_server);
  server_to_client.Add(c.server_to_client);
}

void ForwardCounters::AddRelay(const forward::RelayStats& s) {
  client_to_server.Add(s.a_to_b);
  server_to_client.Add(s.b_to_a);
}

std::string ForwardCounters::FormatConnections() const {
  return absl::StrCat(
      "accepted=", accepted, " connecting=", connecting, " active=", active,
      " completed=", completed, " relay_errors=", relay_errors,
      " connect_failed=", connect_failed, " connect_retries=", connect_retries,
      " aborted=", aborted, " accept_errors=", accept_errors);
}

std::string FormatPipeStats(const forward::PipePool::Stats& s) {
  return absl::StrCat(
      "created=", s.created, " reused=", s.reused, " in_use=", s.in_use,
      " pooled=", s.pooled, " closed_with_data=", s.closed_with_data,
      " acquire_failed=", s.acquire_failed,
      " resize_refused=", s.resize_refused, " trimmed=", s.trimmed);
}

}  // namespace netstack::tools
