#include "netstack/transport/errors.h"

#include <cerrno>
#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace netstack::transport {
namespace {

constexpr char kErrnoUrl[] = "netstack/errno";

absl::Status Make(absl::StatusCode code, int err, std::string_view what,
                  std::string_view detail) {
  std::string msg(what);
  if (!detail.empty()) absl::StrAppend(&msg, ": ", std::string(detail));
  absl::Status s(code, msg);
  s.SetPayload(kErrnoUrl, absl::Cord(absl::StrCat(err)));
  return s;
}

}  // namespace

absl::Status WouldBlock() {
  // The hot one (every drained Read ends with it): built once, then
  // copied, which only bumps the status's reference count.
  static const absl::Status* const kStatus = new absl::Status(
      Make(absl::StatusCode::kUnavailable, EAGAIN, "would block", ""));
  return *kStatus;
}
absl::Status ConnectionRefused() {
  return Make(absl::StatusCode::kUnavailable, ECONNREFUSED,
              "connection refused", "");
}
absl::Status HostUnreachable(std::string_view detail) {
  return Make(absl::StatusCode::kUnavailable, EHOSTUNREACH,
              "host unreachable", detail);
}
absl::Status NetworkUnreachable(std::string_view detail) {
  return Make(absl::StatusCode::kUnavailable, ENETUNREACH,
              "network unreachable", detail);
}
absl::Status ProtocolUnavailable(std::string_view detail) {
  return Make(absl::StatusCode::kUnavailable, ENOPROTOOPT,
              "protocol unreachable", detail);
}
absl::Status ConnectionReset() {
  return Make(absl::StatusCode::kAborted, ECONNRESET,
              "connection reset by peer", "");
}
absl::Status ConnectionAborted() {
  return Make(absl::StatusCode::kAborted, ECONNABORTED,
              "connection aborted", "");
}
absl::Status TimedOut() {
  return Make(absl::StatusCode::kDeadlineExceeded, ETIMEDOUT,
              "connection timed out", "");
}
absl::Status AddressInUse(std::string_view detail) {
  return Make(absl::StatusCode::kAlreadyExists, EADDRINUSE,
              "address already in use", detail);
}
absl::Status NotConnected() {
  return Make(absl::StatusCode::kFailedPrecondition, ENOTCONN,
              "not connected", "");
}
absl::Status BrokenPipe() {
  return Make(absl::StatusCode::kFailedPrecondition, EPIPE,
              "write side shut down", "");
}
absl::Status InvalidState(std::string_view detail) {
  return Make(absl::StatusCode::kFailedPrecondition, EINVAL,
              "invalid state", detail);
}
absl::Status InvalidArgument(std::string_view detail) {
  return Make(absl::StatusCode::kInvalidArgument, EINVAL, "invalid argument",
              detail);
}
absl::Status MessageTooLong() {
  return Make(absl::StatusCode::kInvalidArgument, EMSGSIZE,
              "message too long", "");
}
absl::Status NoBuffers() {
  return Make(absl::StatusCode::kResourceExhausted, ENOBUFS,
              "no buffer space", "");
}

int ErrnoOf(const absl::Status& s) {
  if (s.ok()) return 0;
  auto p = s.GetPayload(kErrnoUrl);
  int err = 0;
  if (!p || !absl::SimpleAtoi(std::string(*p), &err)) return EIO;
  return err;
}

}  // namespace netstack::transport
