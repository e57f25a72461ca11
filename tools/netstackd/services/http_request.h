// The HTTP/1.1 request parser of netstackd's static file server: a pure
// function from the bytes received so far to "need more", "one complete
// request of N bytes", or "error, answer with status S". No I/O, no
// allocation beyond the Request it fills, no state between calls: the
// server keeps the unparsed bytes and calls again (pipelining: a buffer may
// hold several requests; each call parses the first one).
//
// What it accepts (RFC 9112):
//   - request-line `method SP request-target SP HTTP/1.x` (2.2, 3); empty
//     lines before it are skipped; bare LF ends a line as well as CRLF;
//   - origin-form (`/path?query`) and absolute-form (`http://host/path`)
//     targets (3.2);
//   - header fields `name ":" OWS value OWS` (5); obs-fold, whitespace
//     before the colon and control characters are errors (5.1, 5.2);
//   - a body framed by Content-Length (6.3); Transfer-Encoding is not
//     implemented (501).
//   - HTTP/1.1 needs exactly one Host header (3.2).
//
// The decoded path is checked here, so that the server never sees a
// traversal: percent-decoding first (so %2e%2e and %2F count), then `.`
// segments and empty segments are dropped and any `..` segment is an
// error; NUL and backslash are refused.
#ifndef TOOLS_NETSTACKD_SERVICES_HTTP_REQUEST_H_
#define TOOLS_NETSTACKD_SERVICES_HTTP_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace netstack::tools::http {

struct ParseLimits {
  // The request line plus the header fields plus the blank line.
  size_t max_header_bytes = 16 << 10;
  // The request-target alone (longer: 414).
  size_t max_target_bytes = 8 << 10;
  // A request body we are willing to skip (GET/HEAD rarely have one).
  size_t max_body_bytes = 16 << 10;
};

struct Request {
  std::string method;  // as sent (case-sensitive, RFC 9110 9.1)
  std::string target;  // the raw request-target
  // The decoded path relative to the document root: no leading '/', no
  // empty, "." or ".." segments; "" is the root itself. `directory` says
  // the target ended in '/' (or was the root).
  std::string path;
  bool directory = false;
  int version_minor = 1;  // HTTP/1.<minor>
  // RFC 9112 9.3: HTTP/1.1 persists unless "Connection: close"; HTTP/1.0
  // only with "Connection: keep-alive".
  bool keep_alive = true;
  uint64_t content_length = 0;
  // Every field as received (names as sent, values trimmed of OWS).
  std::vector<std::pair<std::string, std::string>> headers;
};

enum class ParseStatus { kIncomplete, kComplete, kError };

struct ParseResult {
  ParseStatus status = ParseStatus::kIncomplete;
  // kComplete: bytes of this request, head and body; the next request (if
  // pipelined) starts there.
  size_t consumed = 0;
  Request request;  // kComplete only
  // kError: the status code to answer with (400, 413, 414, 501, 505) and
  // a short reason for the response body and logs.
  int error_status = 0;
  std::string error_reason;
};

ParseResult ParseRequest(std::string_view data, const ParseLimits& limits = {});

// Percent-decodes and normalises a URL path (the part of the target before
// '?'). Returns false on a malformed escape, NUL, backslash or a ".."
// segment. `out` is relative (see Request::path).
bool NormalizePath(std::string_view raw, std::string* out, bool* directory);

// Case-insensitive ASCII comparison (HTTP field names and tokens).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

}  // namespace netstack::tools::http

#endif  // TOOLS_NETSTACKD_SERVICES_HTTP_REQUEST_H_
