// Socket-level errors and readiness, shared by TCP and UDP endpoints.
//
// Every error is an absl::Status whose code says the broad class and whose
// payload carries the errno a POSIX caller would have seen, so an embedder
// can act on it (retry on would-block, report refused vs reset, ...):
//
//   WouldBlock          kUnavailable        EAGAIN
//   ConnectionRefused   kUnavailable        ECONNREFUSED
//   HostUnreachable     kUnavailable        EHOSTUNREACH
//   NetworkUnreachable  kUnavailable        ENETUNREACH
//   ProtocolUnavailable kUnavailable        ENOPROTOOPT (ICMP protocol
//                                           unreachable)
//   ConnectionReset     kAborted            ECONNRESET
//   ConnectionAborted   kAborted            ECONNABORTED (local Abort)
//   TimedOut            kDeadlineExceeded   ETIMEDOUT
//   AddressInUse        kAlreadyExists      EADDRINUSE
//   NotConnected        kFailedPrecondition ENOTCONN
//   BrokenPipe          kFailedPrecondition EPIPE (write after shutdown)
//   InvalidState        kFailedPrecondition EINVAL (listen on connected..)
//   InvalidArgument     kInvalidArgument    EINVAL
//   MessageTooLong      kInvalidArgument    EMSGSIZE
//   NoBuffers           kResourceExhausted  ENOBUFS
#ifndef NETSTACK_TRANSPORT_ERRORS_H_
#define NETSTACK_TRANSPORT_ERRORS_H_

#include <cstdint>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"

namespace netstack::transport {

absl::Status WouldBlock();
absl::Status ConnectionRefused();
absl::Status HostUnreachable(std::string_view detail = "");
absl::Status NetworkUnreachable(std::string_view detail = "");
absl::Status ProtocolUnavailable(std::string_view detail = "");
absl::Status ConnectionReset();
absl::Status ConnectionAborted();
absl::Status TimedOut();
absl::Status AddressInUse(std::string_view detail = "");
absl::Status NotConnected();
absl::Status BrokenPipe();
absl::Status InvalidState(std::string_view detail);
absl::Status InvalidArgument(std::string_view detail);
absl::Status MessageTooLong();
absl::Status NoBuffers();

// The errno carried by a status made above; 0 for OK, EIO for any other.
int ErrnoOf(const absl::Status& s);
inline bool IsWouldBlock(const absl::Status& s) {
  return ErrnoOf(s) == 11;  // EAGAIN
}

// Readiness events, epoll-style. Callbacks run on the event loop thread,
// after the stack finished the batch that changed the state (never from
// inside an API call), and are edge-triggered: they report what became
// true; the endpoint's poll-style Events() says what holds now.
namespace event {
inline constexpr uint32_t kReadable = 1;  // data, EOF, or a pending accept
inline constexpr uint32_t kWritable = 2;  // send buffer space, or connected
inline constexpr uint32_t kError = 4;     // an error is pending (reset...)
inline constexpr uint32_t kHangup = 8;    // both directions closed
}  // namespace event
using ReadyCallback = absl::AnyInvocable<void(uint32_t events)>;

}  // namespace netstack::transport

#endif  // NETSTACK_TRANSPORT_ERRORS_H_
