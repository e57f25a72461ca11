#include "tools/common/cli.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, cli_test_port, 8080, "The port to listen on.");
ABSL_FLAG(std::string, cli_test_root, "",
          "-r, --cli-test-root DIR: serve the files under DIR. This help is "
          "long enough that it has to be wrapped to fit in eighty columns, "
          "at spaces only.");
ABSL_FLAG(bool, cli_test_quiet, false, "Say nothing.");
ABSL_FLAG(int, cli_test_fd, -1, "An inherited fd.");
ABSL_FLAG(bool, cli_test_loose, false, "A flag no group names.");

namespace netstack::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

HelpPage Page() {
  HelpPage page;
  page.tool = "cli_test";
  page.usage = "usage: cli_test [FLAGS]\n";
  page.description = "First paragraph.\n\nSecond paragraph.";
  page.groups = {
      {"Serving", "when you serve files.",
       {"-r, --cli-test-root DIR", "--cli-test-port N"}},
      {"Quiet", "", {"--cli-test-quiet", "--cli-test-fd N"}},
  };
  page.exit_status = "Exit status:\n  0    fine\n";
  page.flags_dir = "tools/common/cli_test";
  return page;
}

TEST(WrapText, WrapsAtSpacesWithinTheWidth) {
  EXPECT_EQ(WrapText("aaa bbb ccc", 2, 9), "  aaa bbb\n  ccc\n");
  EXPECT_EQ(WrapText("a  b", 0, 80), "a b\n");
  // A word longer than the line stands alone, unbroken.
  EXPECT_EQ(WrapText("x abcdefghij y", 0, 5), "x\nabcdefghij\ny\n");
  EXPECT_EQ(WrapText("", 4, 80), "");
}

TEST(FormatHelp, GroupsFlagsWithDashesDefaultsAndWrappedHelp) {
  std::vector<std::string> problems;
  const std::string out = FormatHelp(Page(), &problems);
  EXPECT_EQ(out.substr(0, out.find("Serving:")),
            "usage: cli_test [FLAGS]\n"
            "\nFirst paragraph.\n"
            "\nSecond paragraph.\n\n");
  EXPECT_THAT(out, HasSubstr(
      "Serving: when you serve files.\n"
      "  -r, --cli-test-root DIR\n"
      "      serve the files under DIR. This help is long enough that it has "
      "to be\n"
      "      wrapped to fit in eighty columns, at spaces only.\n"
      "  --cli-test-port N (default: 8080)\n"
      "      The port to listen on.\n"));
  // No "(default: ...)" for false and -1; a group without its "when".
  EXPECT_THAT(out, HasSubstr("\nQuiet:\n  --cli-test-quiet\n      Say "
                             "nothing.\n  --cli-test-fd N\n"));
  EXPECT_THAT(out, HasSubstr("\nExit status:\n  0    fine\n"));
  EXPECT_THAT(out, HasSubstr("Flag names take '-' or '_'."));
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    EXPECT_LE(line.size(), 80u) << line;
  }
  // The flag no group names is not lost: it is shown, and reported.
  EXPECT_THAT(out, HasSubstr("\nOther flags: not yet sorted into a group "
                             "above.\n  --cli-test-loose\n      A flag no "
                             "group names.\n"));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("--cli-test-loose"));
  EXPECT_THAT(problems[0], HasSubstr("is in no group of cli_test's --help"));
}

TEST(FormatHelp, ReportsAnEntryTwiceAndAnEntryThatIsNoFlag) {
  HelpPage page = Page();
  page.groups[1].flags.push_back("--cli-test-port N");
  page.groups[1].flags.push_back("--cli-test-nosuch X");
  page.groups[1].flags.push_back("--cli-test-loose");
  std::vector<std::string> problems;
  const std::string out = FormatHelp(page, &problems);
  EXPECT_THAT(problems,
              ElementsAre("--cli-test-port is in group 'Serving' and in "
                          "'Quiet'",
                          "group 'Quiet' names --cli-test-nosuch, which is "
                          "no flag"));
  EXPECT_THAT(out, Not(HasSubstr("Other flags")));
}

TEST(FormatHelp, UnderscoredNamesStayUnderscored) {
  HelpPage page = Page();
  page.dashed_names = false;
  page.groups[0].flags = {"--cli_test_root DIR", "--cli_test_port N"};
  page.groups[1].flags = {"--cli_test_quiet", "--cli_test_fd N",
                          "--cli_test_loose"};
  std::vector<std::string> problems;
  const std::string out = FormatHelp(page, &problems);
  EXPECT_THAT(problems, ElementsAre());
  EXPECT_THAT(out, HasSubstr("  --cli_test_port N (default: 8080)\n"));
  EXPECT_THAT(out, Not(HasSubstr("Flag names take")));
}

}  // namespace
}  // namespace netstack::tools
