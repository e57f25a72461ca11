#include <pcap/pcap.h>
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "boost/intrusive/slist.hpp"
#include "gtest/gtest.h"
TEST(Smoke, Links) {
  absl::StatusOr<int> s = 3;
  EXPECT_EQ(absl::StrCat("a", *s), "a3");
  EXPECT_NE(pcap_lib_version(), nullptr);
}
