#include "tools/netstackd/services/http_response.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/netstackd/services/http_request.h"

namespace netstack::tools::http {

std::string_view StatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string_view ContentTypeFor(std::string_view path) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {"html", "text/html; charset=utf-8"},
      {"htm", "text/html; charset=utf-8"},
      {"txt", "text/plain; charset=utf-8"},
      {"css", "text/css; charset=utf-8"},
      {"js", "text/javascript; charset=utf-8"},
      {"json", "application/json"},
      {"xml", "application/xml"},
      {"png", "image/png"},
      {"jpg", "image/jpeg"},
      {"jpeg", "image/jpeg"},
      {"gif", "image/gif"},
      {"svg", "image/svg+xml"},
      {"ico", "image/x-icon"},
      {"pdf", "application/pdf"},
      {"wasm", "application/wasm"},
  };
  const size_t slash = path.rfind('/');
  const std::string_view name =
      slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && dot + 1 < name.size()) {
    const std::string_view ext = name.substr(dot + 1);
    for (const auto& [e, type] : kTypes) {
      if (EqualsIgnoreCase(ext, e)) return type;
    }
  }
  return "application/octet-stream";
}

std::string HttpDate(absl::Time t) {
  return absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", t, absl::UTCTimeZone());
}

std::string FormatHead(const ResponseHead& h) {
  std::string out = absl::StrCat("HTTP/1.1 ", h.status, " ",
                                 std::string(StatusText(h.status)), "\r\n");
  if (h.date != absl::InfinitePast() && h.date != absl::InfiniteFuture()) {
    absl::StrAppend(&out, "Date: ", HttpDate(h.date), "\r\n");
  }
  absl::StrAppend(&out, "Server: netstackd\r\n");
  if (!h.content_type.empty()) {
    absl::StrAppend(&out, "Content-Type: ", std::string(h.content_type),
                    "\r\n");
  }
  absl::StrAppend(&out, "Content-Length: ", h.content_length, "\r\n");
  if (h.allow_get_head) absl::StrAppend(&out, "Allow: GET, HEAD\r\n");
  absl::StrAppend(&out, "Connection: ", h.keep_alive ? "keep-alive" : "close",
                  "\r\n\r\n");
  return out;
}

std::string ErrorBody(int status, std::string_view detail) {
  // `detail` comes from the parser's fixed reasons, never from the
  // request, so it needs no escaping.
  std::string title =
      absl::StrCat(status, " ", std::string(StatusText(status)));
  std::string out = absl::StrCat("<!DOCTYPE html>\n<html><head><title>", title,
                                 "</title></head><body><h1>", title, "</h1>");
  if (!detail.empty())
    absl::StrAppend(&out, "<p>", std::string(detail), "</p>");
  absl::StrAppend(&out, "</body></html>\n");
  return out;
}

}  // namespace netstack::tools::http
