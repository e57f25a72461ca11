#include "tools/tcp_benchmark/child_process.h"

#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace netstack::tools::bench {
namespace {

ChildOptions Command(std::vector<std::string> argv) {
  ChildOptions options;
  options.argv = std::move(argv);
  return options;
}

TEST(ChildProcessTest, CollectsStdoutStderrAndExitStatus) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(
      Command({"sh", "-c", "echo out; echo err1 >&2; echo err2 >&2; exit 3"}));
  ASSERT_TRUE(child.ok()) << child.status();
  const ChildExit exit = WaitChild(*child, {}, absl::Seconds(10));
  EXPECT_FALSE(exit.Succeeded());
  EXPECT_EQ(exit.Describe(), "exited with 3");
  EXPECT_EQ(child->stdout_text(), "out\n");
  EXPECT_EQ(child->StderrTail(), "err1\nerr2");
  EXPECT_TRUE(child->stderr_contains("err2"));
}

TEST(ChildProcessTest, CountsTheChildsCpuTime) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(Command(
      {"sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"}));
  ASSERT_TRUE(child.ok()) << child.status();
  const ChildExit exit = WaitChild(*child, {}, absl::Seconds(60));
  EXPECT_TRUE(exit.Succeeded()) << exit.Describe();
  EXPECT_GT(exit.cpu_seconds, 0.01);
}

TEST(ChildProcessTest, TerminatesAChildPastItsTimeout) {
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Start(Command({"sleep", "60"}));
  ASSERT_TRUE(child.ok()) << child.status();
  const absl::Time start = absl::Now();
  const ChildExit exit = WaitChild(*child, {}, absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(exit.Describe().rfind("killed by signal 15", 0), 0u)
      << exit.Describe();
}

TEST(ChildProcessTest, RunCommandNamesTheFailingCommand) {
  EXPECT_TRUE(RunCommand({"true"}).ok());
  const absl::Status s = RunCommand({"sh", "-c", "echo nope >&2; exit 2"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(
      s.message().find("`sh -c echo nope >&2; exit 2` exited with 2: nope"),
      std::string::npos)
      << s;
  const absl::Status missing = RunCommand({"/nonexistent/tool"});
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("exited with 127"), std::string::npos)
      << missing;
}

TEST(ChildProcessTest, AMissingNamespaceIsAnError) {
  EXPECT_FALSE(
      RunCommand({"true"}, "tcpb-no-such-namespace-for-this-test").ok());
}

}  // namespace
}  // namespace netstack::tools::bench
