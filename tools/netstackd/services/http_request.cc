#include "tools/netstackd/services/http_request.h"

#include <algorithm>
#include <optional>

namespace netstack::tools::http {
namespace {

// RFC 9110 5.6.2: tchar.
bool IsTokenChar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return IsTokenChar(static_cast<unsigned char>(c));
  });
}

// RFC 9110 5.5: field-value = VCHAR / obs-text / SP / HTAB.
bool IsFieldValueChar(unsigned char c) {
  return c == '\t' || (c >= 0x20 && c != 0x7f);
}

// The request-target: visible ASCII without '#' (a fragment is never
// sent, RFC 9112 3.2).
bool IsTargetChar(unsigned char c) { return c > 0x20 && c < 0x7f && c != '#'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

ParseResult Error(int status, std::string reason) {
  ParseResult r;
  r.status = ParseStatus::kError;
  r.error_status = status;
  r.error_reason = std::move(reason);
  return r;
}

// The next line starting at `pos`: its text without the CRLF (or bare LF)
// and the offset after it; nullopt if no LF yet. A CR anywhere but before
// the LF is reported through `bad_cr`.
struct Line {
  std::string_view text;
  size_t next = 0;
  bool bad_cr = false;
};
std::optional<Line> NextLine(std::string_view data, size_t pos) {
  const size_t lf = data.find('\n', pos);
  if (lf == std::string_view::npos) return std::nullopt;
  Line line;
  line.text = data.substr(pos, lf - pos);
  line.next = lf + 1;
  if (!line.text.empty() && line.text.back() == '\r')
    line.text.remove_suffix(1);
  line.bad_cr = line.text.find('\r') != std::string_view::npos;
  return line;
}

// "HTTP/1.1" -> minor 1. 0 ok, -1 malformed, -2 another major version.
int ParseVersion(std::string_view v, int* minor) {
  if (v.size() != 8 || v.substr(0, 5) != "HTTP/" || v[6] != '.' || v[5] < '0' ||
      v[5] > '9' || v[7] < '0' || v[7] > '9') {
    return -1;
  }
  if (v[5] != '1') return -2;
  *minor = v[7] - '0';
  return 0;
}

// Content-Length: 1*DIGIT, or a list of identical values (RFC 9110 8.6).
bool ParseContentLength(std::string_view value, std::optional<uint64_t>* out) {
  while (true) {
    const size_t comma = value.find(',');
    std::string_view item = TrimOws(value.substr(0, comma));
    if (item.empty() || item.size() > 18) return false;
    uint64_t n = 0;
    for (char c : item) {
      if (c < '0' || c > '9') return false;
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    if (out->has_value() && **out != n) return false;
    *out = n;
    if (comma == std::string_view::npos) return true;
    value.remove_prefix(comma + 1);
  }
}

// Splits the target into the path part (before '?'); absolute-form
// (RFC 9112 3.2.2) drops the scheme and authority first.
bool TargetPath(std::string_view target, std::string_view* path) {
  if (!target.empty() && target.front() == '/') {
    *path = target.substr(0, target.find('?'));
    return true;
  }
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() &&
        EqualsIgnoreCase(target.substr(0, scheme.size()), scheme)) {
      std::string_view rest = target.substr(scheme.size());
      const size_t end = rest.find_first_of("/?");
      if (end == 0) return false;  // no authority
      if (end == std::string_view::npos || rest[end] == '?') {
        *path = "/";
      } else {
        rest.remove_prefix(end);
        *path = rest.substr(0, rest.find('?'));
      }
      return true;
    }
  }
  return false;  // asterisk-form, authority-form or garbage
}

}  // namespace

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x + 32);
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y + 32);
    if (x != y) return false;
  }
  return true;
}

bool NormalizePath(std::string_view raw, std::string* out, bool* directory) {
  // Decode first: every check below sees the bytes the file system would.
  std::string decoded;
  decoded.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '%') {
      if (i + 2 >= raw.size()) return false;
      const int hi = HexValue(raw[i + 1]);
      const int lo = HexValue(raw[i + 2]);
      if (hi < 0 || lo < 0) return false;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == '\0' || c == '\\') return false;
    decoded.push_back(c);
  }
  out->clear();
  *directory = true;  // the root, until a named segment comes
  std::string_view rest = decoded;
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    const bool last = slash == std::string_view::npos;
    rest = last ? std::string_view() : rest.substr(slash + 1);
    if (seg == "..") return false;
    if (seg.empty() || seg == ".") {
      if (last) *directory = true;
      continue;
    }
    if (!out->empty()) out->push_back('/');
    out->append(seg);
    *directory = false;
  }
  if (!decoded.empty() && decoded.back() == '/') *directory = true;
  return true;
}

namespace {

// A step's verdict: nullopt to go on, else the result (an error, or
// "need more bytes").
using Verdict = std::optional<ParseResult>;

// RFC 9112 2.2: ignore at least one empty line before the request-line.
Verdict SkipEmptyLines(std::string_view data, const ParseLimits& limits,
                       size_t* pos) {
  while (*pos < data.size() && (data[*pos] == '\r' || data[*pos] == '\n')) {
    if (data[*pos] == '\r' && *pos + 1 < data.size() &&
        data[*pos + 1] != '\n') {
      return Error(400, "bare CR");
    }
    ++*pos;
    if (*pos > limits.max_header_bytes) {
      return Error(413, "request header too large");
    }
  }
  return std::nullopt;
}

// No whole request-line yet: tell a long target (414) from a long header
// section, without waiting for bytes that would exceed either limit.
ParseResult IncompleteRequestLine(std::string_view partial,
                                  const ParseLimits& limits) {
  const size_t sp = partial.find(' ');
  if (sp != std::string_view::npos &&
      partial.size() - sp - 1 > limits.max_target_bytes) {
    const std::string_view target = partial.substr(sp + 1);
    if (target.find(' ') == std::string_view::npos) {
      return Error(414, "request-target too long");
    }
  }
  if (partial.size() > limits.max_header_bytes) {
    return Error(413, "request header too large");
  }
  return ParseResult{};
}

// METHOD SP TARGET SP VERSION into `req` (method, target, version).
Verdict ParseRequestLine(std::string_view line, const ParseLimits& limits,
                         Request* req) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 =
      sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Error(400, "malformed request line");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(method)) return Error(400, "malformed method");
  if (target.size() > limits.max_target_bytes) {
    return Error(414, "request-target too long");
  }
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
        return IsTargetChar(static_cast<unsigned char>(c));
      })) {
    return Error(400, "malformed request-target");
  }
  switch (ParseVersion(version, &req->version_minor)) {
    case -1:
      return Error(400, "malformed HTTP version");
    case -2:
      return Error(505, "HTTP version not supported");
    default:
      break;
  }
  req->method = std::string(method);
  req->target = std::string(target);
  return std::nullopt;
}

// What the header section says beyond the headers themselves.
struct HeaderFacts {
  int hosts = 0;
  bool close = false;
  bool keep_alive = false;
  std::optional<uint64_t> content_length;
};

// Connection: a comma-separated list of tokens.
void ReadConnection(std::string_view value, HeaderFacts* facts) {
  std::string_view rest = value;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view token = TrimOws(rest.substr(0, comma));
    if (EqualsIgnoreCase(token, "close")) facts->close = true;
    if (EqualsIgnoreCase(token, "keep-alive")) facts->keep_alive = true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
}

// One header line (not empty) into `req` and `facts`.
Verdict ParseHeader(std::string_view h, Request* req, HeaderFacts* facts) {
  if (h.front() == ' ' || h.front() == '\t') {
    return Error(400, "obsolete line folding");
  }
  const size_t colon = h.find(':');
  if (colon == std::string_view::npos) {
    return Error(400, "header without colon");
  }
  const std::string_view name = h.substr(0, colon);
  if (!IsToken(name)) return Error(400, "malformed header name");
  const std::string_view value = TrimOws(h.substr(colon + 1));
  if (!std::all_of(value.begin(), value.end(), [](char c) {
        return IsFieldValueChar(static_cast<unsigned char>(c));
      })) {
    return Error(400, "control character in header value");
  }
  if (EqualsIgnoreCase(name, "host")) {
    ++facts->hosts;
  } else if (EqualsIgnoreCase(name, "content-length")) {
    if (!ParseContentLength(value, &facts->content_length)) {
      return Error(400, "bad Content-Length");
    }
  } else if (EqualsIgnoreCase(name, "transfer-encoding")) {
    return Error(501, "Transfer-Encoding not implemented");
  } else if (EqualsIgnoreCase(name, "connection")) {
    ReadConnection(value, facts);
  }
  req->headers.emplace_back(std::string(name), std::string(value));
  return std::nullopt;
}

// The header section from `*pos` up to the empty line, which `*pos` then
// follows.
Verdict ParseHeaders(std::string_view data, size_t start,
                     const ParseLimits& limits, size_t* pos, Request* req,
                     HeaderFacts* facts) {
  while (true) {
    std::optional<Line> l = NextLine(data, *pos);
    if (!l) {
      if (data.size() - start > limits.max_header_bytes) {
        return Error(413, "request header too large");
      }
      return ParseResult{};
    }
    if (l->next - start > limits.max_header_bytes) {
      return Error(413, "request header too large");
    }
    *pos = l->next;
    if (l->bad_cr) return Error(400, "bare CR in header");
    if (l->text.empty()) return std::nullopt;
    if (Verdict v = ParseHeader(l->text, req, facts)) return v;
  }
}

// What the headers together require: one Host (RFC 9112 3.2: a 1.1
// request without Host, or any with two, is a 400), a path we serve, the
// connection's fate and the body's length.
Verdict Conclude(const HeaderFacts& facts, const ParseLimits& limits,
                 Request* req) {
  if (facts.hosts > 1 || (req->version_minor >= 1 && facts.hosts == 0)) {
    return Error(400, facts.hosts == 0 ? "missing Host header"
                                       : "duplicate Host header");
  }
  std::string_view raw_path;
  if (!TargetPath(req->target, &raw_path)) {
    return Error(400, "unsupported request-target form");
  }
  if (!NormalizePath(raw_path, &req->path, &req->directory)) {
    return Error(400, "bad path (traversal, NUL or malformed escape)");
  }
  req->keep_alive = req->version_minor >= 1
                        ? !facts.close
                        : facts.keep_alive && !facts.close;
  req->content_length = facts.content_length.value_or(0);
  if (req->content_length > limits.max_body_bytes) {
    return Error(413, "request body too large");
  }
  return std::nullopt;
}

}  // namespace

ParseResult ParseRequest(std::string_view data, const ParseLimits& limits) {
  size_t pos = 0;
  if (Verdict v = SkipEmptyLines(data, limits, &pos)) return *v;
  const size_t start = pos;
  std::optional<Line> first = NextLine(data, start);
  if (!first) return IncompleteRequestLine(data.substr(start), limits);
  if (first->bad_cr) return Error(400, "bare CR in request line");
  Request req;
  if (Verdict v = ParseRequestLine(first->text, limits, &req)) return *v;
  pos = first->next;
  HeaderFacts facts;
  if (Verdict v = ParseHeaders(data, start, limits, &pos, &req, &facts)) {
    return *v;
  }
  if (Verdict v = Conclude(facts, limits, &req)) return *v;
  if (data.size() - pos < req.content_length) return ParseResult{};
  ParseResult r;
  r.status = ParseStatus::kComplete;
  r.consumed = pos + static_cast<size_t>(req.content_length);
  r.request = std::move(req);
  return r;
}

}  // namespace netstack::tools::http
