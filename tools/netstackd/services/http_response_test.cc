#include "tools/netstackd/services/http_response.h"

#include "gtest/gtest.h"

namespace netstack::tools::http {
namespace {

TEST(HttpResponse, ContentTypeByExtension) {
  EXPECT_EQ(ContentTypeFor("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("a/b/PAGE.HTM"), "text/html; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("notes.txt"), "text/plain; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("x.css"), "text/css; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("x.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("x.json"), "application/json");
  EXPECT_EQ(ContentTypeFor("img/x.png"), "image/png");
  EXPECT_EQ(ContentTypeFor("x.jpeg"), "image/jpeg");
  EXPECT_EQ(ContentTypeFor("x.bin"), "application/octet-stream");
  EXPECT_EQ(ContentTypeFor("Makefile"), "application/octet-stream");
  EXPECT_EQ(ContentTypeFor("dir.html/file"), "application/octet-stream");
  EXPECT_EQ(ContentTypeFor("trailing."), "application/octet-stream");
}

TEST(HttpResponse, Head) {
  ResponseHead h;
  h.status = 200;
  h.content_type = "text/plain; charset=utf-8";
  h.content_length = 12345;
  h.keep_alive = true;
  h.date = absl::FromUnixSeconds(784111777);  // RFC 9110's example
  EXPECT_EQ(FormatHead(h),
            "HTTP/1.1 200 OK\r\n"
            "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
            "Server: netstackd\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 12345\r\n"
            "Connection: keep-alive\r\n\r\n");
  h.status = 405;
  h.keep_alive = false;
  h.allow_get_head = true;
  h.date = absl::InfinitePast();
  h.content_type = "";
  h.content_length = 0;
  EXPECT_EQ(FormatHead(h),
            "HTTP/1.1 405 Method Not Allowed\r\n"
            "Server: netstackd\r\n"
            "Content-Length: 0\r\n"
            "Allow: GET, HEAD\r\n"
            "Connection: close\r\n\r\n");
}

TEST(HttpResponse, StatusTexts) {
  for (int code : {200, 400, 403, 404, 405, 413, 414, 500, 501, 505}) {
    EXPECT_NE(StatusText(code), "Unknown") << code;
  }
  EXPECT_EQ(StatusText(299), "Unknown");
}

TEST(HttpResponse, ErrorBody) {
  const std::string b = ErrorBody(404, "");
  EXPECT_NE(b.find("<title>404 Not Found</title>"), std::string::npos);
  EXPECT_NE(ErrorBody(400, "bad path").find("<p>bad path</p>"),
            std::string::npos);
}

}  // namespace
}  // namespace netstack::tools::http
