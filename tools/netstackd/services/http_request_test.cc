#include "tools/netstackd/services/http_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netstack::tools::http {
namespace {

using ::testing::Pair;

ParseResult Parse(std::string_view s, const ParseLimits& l = {}) {
  return ParseRequest(s, l);
}

void ExpectError(std::string_view s, int status, const ParseLimits& l = {}) {
  ParseResult r = Parse(s, l);
  EXPECT_EQ(r.status, ParseStatus::kError) << s;
  EXPECT_EQ(r.error_status, status) << s << ": " << r.error_reason;
}

TEST(HttpRequest, WellFormedGet) {
  const std::string s =
      "GET /dir/file.txt?x=1 HTTP/1.1\r\nHost: example\r\n"
      "User-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n";
  ParseResult r = Parse(s);
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error_reason;
  EXPECT_EQ(r.consumed, s.size());
  EXPECT_EQ(r.request.method, "GET");
  EXPECT_EQ(r.request.target, "/dir/file.txt?x=1");
  EXPECT_EQ(r.request.path, "dir/file.txt");
  EXPECT_FALSE(r.request.directory);
  EXPECT_EQ(r.request.version_minor, 1);
  EXPECT_TRUE(r.request.keep_alive);
  EXPECT_EQ(r.request.content_length, 0u);
  EXPECT_THAT(r.request.headers,
              ::testing::ElementsAre(Pair("Host", "example"),
                                     Pair("User-Agent", "curl/7.88.1"),
                                     Pair("Accept", "*/*")));
}

TEST(HttpRequest, HeadAndOtherMethodsAreParsed) {
  // The parser accepts any token; the server answers 405 for the others.
  ParseResult r = Parse("HEAD / HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_EQ(r.status, ParseStatus::kComplete);
  EXPECT_EQ(r.request.method, "HEAD");
  EXPECT_EQ(r.request.path, "");
  EXPECT_TRUE(r.request.directory);
  r = Parse("DELETE /x HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_EQ(r.status, ParseStatus::kComplete);
  EXPECT_EQ(r.request.method, "DELETE");
}

TEST(HttpRequest, BareLfAndLeadingEmptyLines) {
  const std::string s = "\r\n\nGET /a HTTP/1.1\nHost: h\n\n";
  ParseResult r = Parse(s);
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error_reason;
  EXPECT_EQ(r.consumed, s.size());
  EXPECT_EQ(r.request.path, "a");
}

TEST(HttpRequest, KeepAliveRules) {
  auto keep = [](std::string_view s) {
    ParseResult r = Parse(s);
    EXPECT_EQ(r.status, ParseStatus::kComplete) << s << r.error_reason;
    return r.request.keep_alive;
  };
  EXPECT_TRUE(keep("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"));
  EXPECT_FALSE(
      keep("GET / HTTP/1.1\r\nHost: h\r\nconnection: Upgrade, CLOSE\r\n\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(keep("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"));
}

TEST(HttpRequest, Http10NeedsNoHost) {
  ParseResult r = Parse("GET /x HTTP/1.0\r\n\r\n");
  ASSERT_EQ(r.status, ParseStatus::kComplete);
  EXPECT_EQ(r.request.version_minor, 0);
}

TEST(HttpRequest, AbsoluteForm) {
  ParseResult r =
      Parse("GET http://example.com:8080/a/b?q HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error_reason;
  EXPECT_EQ(r.request.path, "a/b");
  r = Parse("GET HTTP://example.com HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error_reason;
  EXPECT_EQ(r.request.path, "");
  EXPECT_TRUE(r.request.directory);
}

TEST(HttpRequest, PartialAtEveryByte) {
  const std::string s =
      "GET /file HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
  for (size_t n = 0; n < s.size(); ++n) {
    ParseResult r = Parse(std::string_view(s).substr(0, n));
    EXPECT_EQ(r.status, ParseStatus::kIncomplete) << n;
  }
  ParseResult r = Parse(s);
  ASSERT_EQ(r.status, ParseStatus::kComplete);
  EXPECT_EQ(r.consumed, s.size());
  EXPECT_EQ(r.request.content_length, 3u);
}

TEST(HttpRequest, Pipelined) {
  const std::string a = "GET /one HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string b =
      "HEAD /two HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nxy";
  const std::string c =
      "GET /three HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
  std::string all = a + b + c + "GET /fo";
  std::string_view rest = all;
  std::vector<std::string> paths;
  while (true) {
    ParseResult r = Parse(rest);
    if (r.status != ParseStatus::kComplete) {
      EXPECT_EQ(r.status, ParseStatus::kIncomplete);
      break;
    }
    paths.push_back(r.request.path);
    rest.remove_prefix(r.consumed);
  }
  EXPECT_THAT(paths, ::testing::ElementsAre("one", "two", "three"));
  EXPECT_EQ(rest, "GET /fo");
}

TEST(HttpRequest, Malformed) {
  ExpectError("GET\r\n\r\n", 400);
  ExpectError("GET /\r\n\r\n", 400);                       // HTTP/0.9
  ExpectError("GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400);  // double space
  ExpectError("GET / HTTP/1.1 x\r\nHost: h\r\n\r\n", 400);
  ExpectError("G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
  ExpectError("GET / HTTQ/1.1\r\nHost: h\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.10\r\nHost: h\r\n\r\n", 400);
  ExpectError("GET / http/1.1\r\nHost: h\r\n\r\n", 400);
  ExpectError("GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505);
  ExpectError("GET x HTTP/1.1\r\nHost: h\r\n\r\n", 400);  // not origin-form
  ExpectError("GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400);
  ExpectError("GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n", 400);
  ExpectError("GET /\x80 HTTP/1.1\r\nHost: h\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.1\r\n\r\n", 400);  // no Host
  ExpectError("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.1\r\nHost: h\r\nBad Name: x\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400);  // space before :
  ExpectError("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400);  // fold
  ExpectError("GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400);
  ExpectError(
      "GET / HTTP/1.1\r\nHost: h\r\nX: a\x01"
      "b\r\n\r\n",
      400);
  ExpectError("GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", 400);  // bare CR
  ExpectError("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400);
  ExpectError(
      "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n"
      "Content-Length: 2\r\n\r\nab",
      400);
  ExpectError("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 2\r\n\r\nab",
              400);
  ExpectError("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
              501);
}

TEST(HttpRequest, ContentLengthListOfEqualValues) {
  ParseResult r = Parse(
      "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 2, 2\r\n"
      "Content-Length: 2\r\n\r\nab");
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error_reason;
  EXPECT_EQ(r.request.content_length, 2u);
}

TEST(HttpRequest, OversizeHeader413) {
  std::string s = "GET / HTTP/1.1\r\nHost: h\r\n";
  while (s.size() <= 16 << 10)
    s += "X-Filler: " + std::string(100, 'a') + "\r\n";
  // Complete but too large.
  ExpectError(s + "\r\n", 413);
  // Incomplete and already too large: no need to wait for the rest.
  ExpectError(s, 413);
  // Just under the limit is fine.
  std::string ok = "GET / HTTP/1.1\r\nHost: h\r\n";
  ok += "X: " + std::string((16 << 10) - ok.size() - 7, 'b') + "\r\n\r\n";
  ASSERT_EQ(ok.size(), size_t{16 << 10});
  EXPECT_EQ(Parse(ok).status, ParseStatus::kComplete) << Parse(ok).error_reason;
  ExpectError(ok.substr(0, ok.size() - 4) + "b\r\n\r\n", 413);
  // Endless empty lines are not a way around the limit.
  ExpectError(std::string((16 << 10) + 2, '\n'), 413);
}

TEST(HttpRequest, OversizeBody413) {
  ExpectError("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 16385\r\n\r\n",
              413);
  ExpectError(
      "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999999999999\r\n\r\n",
      413);
}

TEST(HttpRequest, LongTarget414) {
  const std::string target = "/" + std::string(9000, 'a');
  ExpectError("GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n", 414);
  // Before the line is complete, too.
  ExpectError("GET " + target, 414);
  // Exactly at the limit is fine.
  const std::string max = "/" + std::string((8 << 10) - 1, 'a');
  EXPECT_EQ(Parse("GET " + max + " HTTP/1.1\r\nHost: h\r\n\r\n").status,
            ParseStatus::kComplete);
  EXPECT_EQ(Parse("GET " + max).status, ParseStatus::kIncomplete);
}

TEST(HttpRequest, TraversalRefused) {
  for (const char* t : {"/..", "/../etc/passwd", "/a/../../b", "/a/..",
                        "/%2e%2e/x", "/%2E%2e%2fetc", "/a%2f..%2f..%2fb",
                        "/..%2f", "/a/%2e%2e", "/a%5c..%5cb", "/a\\b", "/x%00y",
                        "/bad%zz", "/bad%2", "/bad%", "http://h/../x"}) {
    ExpectError(std::string("GET ") + t + " HTTP/1.1\r\nHost: h\r\n\r\n", 400);
  }
}

TEST(HttpRequest, PathNormalization) {
  auto path = [](std::string_view target, bool* dir = nullptr) {
    ParseResult r =
        Parse("GET " + std::string(target) + " HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_EQ(r.status, ParseStatus::kComplete) << target << r.error_reason;
    if (dir != nullptr) *dir = r.request.directory;
    return r.request.path;
  };
  bool dir = false;
  EXPECT_EQ(path("/", &dir), "");
  EXPECT_TRUE(dir);
  EXPECT_EQ(path("//a///b/./c", &dir), "a/b/c");
  EXPECT_FALSE(dir);
  EXPECT_EQ(path("/a/b/", &dir), "a/b");
  EXPECT_TRUE(dir);
  EXPECT_EQ(path("/a/.", &dir), "a");
  EXPECT_TRUE(dir);
  EXPECT_EQ(path("/hello%20world.txt"), "hello world.txt");
  EXPECT_EQ(path("/a%2Fb"), "a/b");
  EXPECT_EQ(path("/..a/b..", &dir), "..a/b..");  // not a ".." segment
  EXPECT_EQ(path("/%252e%252e"), "%2e%2e");      // decoded once only
}

TEST(HttpRequest, NormalizePathDirect) {
  std::string out;
  bool dir = false;
  EXPECT_TRUE(NormalizePath("", &out, &dir));
  EXPECT_EQ(out, "");
  EXPECT_TRUE(dir);
  EXPECT_FALSE(NormalizePath("/a/%2E./b", &out, &dir));
  EXPECT_TRUE(NormalizePath("/a/.%2E.", &out, &dir));  // "..." is a name
  EXPECT_EQ(out, "a/...");
}

TEST(HttpRequest, HeaderValueWhitespaceTrimmed) {
  ParseResult r = Parse("GET / HTTP/1.1\r\nHost:\t h \t\r\nX-Empty:\r\n\r\n");
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error_reason;
  EXPECT_THAT(r.request.headers,
              ::testing::ElementsAre(Pair("Host", "h"), Pair("X-Empty", "")));
}

}  // namespace
}  // namespace netstack::tools::http
