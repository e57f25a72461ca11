#include "tools/netstackd/least_privilege.h"

#include <seccomp.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace netstack::tools {
namespace {

TEST(AllowedCalls, EachIsACallOfThisArchitecture) {
  for (const AllowedCall& c : AllowedCalls()) {
    EXPECT_NE(seccomp_syscall_resolve_name(c.name), __NR_SCMP_ERROR)
        << c.name;
    EXPECT_NE(std::string(c.why), "") << c.name;
  }
}

TEST(AllowedCalls, DocsSecurityListsEachOne) {
  std::ifstream in("docs/SECURITY.md");
  ASSERT_TRUE(in.good()) << "docs/SECURITY.md is not in the runfiles";
  std::stringstream text;
  text << in.rdbuf();
  for (const AllowedCall& c : AllowedCalls()) {
    EXPECT_NE(text.str().find(std::string("`") + c.name + "`"),
              std::string::npos)
        << c.name << " is allowed but docs/SECURITY.md does not list it";
  }
}

}  // namespace
}  // namespace netstack::tools
