// Pure helpers for the responses of netstackd's HTTP server: status texts,
// Content-Type by file extension, the response head, error bodies and the
// IMF-fixdate of the Date header (RFC 9110 5.6.7).
#ifndef TOOLS_NETSTACKD_SERVICES_HTTP_RESPONSE_H_
#define TOOLS_NETSTACKD_SERVICES_HTTP_RESPONSE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/time/time.h"

namespace netstack::tools::http {

// "OK", "Not Found", ...; "Unknown" for codes the server never sends.
std::string_view StatusText(int status);

// By the extension of the last path segment, case-insensitively;
// application/octet-stream for anything else.
std::string_view ContentTypeFor(std::string_view path);

// "Sun, 06 Nov 1994 08:49:37 GMT".
std::string HttpDate(absl::Time t);

struct ResponseHead {
  int status = 200;
  std::string_view content_type;
  uint64_t content_length = 0;
  bool keep_alive = true;                  // else "Connection: close"
  bool allow_get_head = false;             // "Allow: GET, HEAD" (405)
  absl::Time date = absl::InfinitePast();  // no Date header if infinite
};

// The status line and header section, ending with the empty line. Always
// HTTP/1.1 (RFC 9110 6.2: a server sends its own version) and always an
// explicit Connection header, so an HTTP/1.0 client sees keep-alive.
std::string FormatHead(const ResponseHead& head);

// A small HTML body for an error status.
std::string ErrorBody(int status, std::string_view detail);

}  // namespace netstack::tools::http

#endif  // TOOLS_NETSTACKD_SERVICES_HTTP_RESPONSE_H_
