#include "netstack/transport/errors.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace netstack::transport {
namespace {

TEST(ErrorsTest, CarryErrnoAndCode) {
  EXPECT_EQ(ErrnoOf(WouldBlock()), EAGAIN);
  EXPECT_TRUE(IsWouldBlock(WouldBlock()));
  EXPECT_FALSE(IsWouldBlock(ConnectionRefused()));
  EXPECT_EQ(ErrnoOf(ConnectionRefused()), ECONNREFUSED);
  EXPECT_EQ(ErrnoOf(ConnectionReset()), ECONNRESET);
  EXPECT_EQ(ConnectionReset().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ErrnoOf(TimedOut()), ETIMEDOUT);
  EXPECT_EQ(ErrnoOf(AddressInUse("10.0.0.1:80")), EADDRINUSE);
  EXPECT_NE(AddressInUse("10.0.0.1:80").message().find("10.0.0.1:80"),
            std::string_view::npos);
  EXPECT_EQ(ErrnoOf(absl::OkStatus()), 0);
  EXPECT_EQ(ErrnoOf(absl::InternalError("x")), EIO);
}

}  // namespace
}  // namespace netstack::transport
