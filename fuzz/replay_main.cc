// Runs every file in the directories named on the command line through the
// fuzz target's LLVMFuzzerTestOneInput: the corpus and the
// regression inputs of one target, in the normal (gcc) and ASan builds. A
// crash, a sanitizer report or a failed invariant (the targets abort) fails
// the test and names the file on stderr before the input runs.
//
// Each input runs twice: once as it is, once with SIGALRM arriving every
// 200 us. libFuzzer's -timeout arms such a timer (every timeout/2 + 1 s),
// and a signal that lands inside a system call makes it fail with EINTR,
// even a poll() that does not wait. A harness or a library that takes
// EINTR for an error fails here, not once in a while in CI.
#include <dirent.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::string> g_dirs;

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;  // a target with no regressions yet
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == "README.md") continue;
    out.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Arms a fast SIGALRM timer with a handler that only counts and has no
// SA_RESTART, as libFuzzer's has none; disarms it when it goes.
class FrequentSignals {
 public:
  FrequentSignals() {
    struct sigaction sa = {};
    sa.sa_handler = [](int) { delivered_ = delivered_ + 1; };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old_);
    const itimerval every = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &every, nullptr);
  }
  ~FrequentSignals() {
    const itimerval off = {};
    setitimer(ITIMER_REAL, &off, nullptr);
    sigaction(SIGALRM, &old_, nullptr);
  }
  // How many arrived: a replay they never interrupted proves nothing.
  static long Delivered() { return delivered_; }

 private:
  static inline volatile sig_atomic_t delivered_ = 0;
  struct sigaction old_ = {};
};

// Replays every input once; `how` names the pass on stderr, or nullptr for
// a silent one.
size_t ReplayAll(const char* how) {
  size_t runs = 0;
  for (const std::string& dir : g_dirs) {
    for (const std::string& path : FilesIn(dir)) {
      std::ifstream in(path, std::ios::binary);
      EXPECT_TRUE(in.good()) << path;
      if (!in.good()) continue;
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
      if (how != nullptr) {
        std::fprintf(stderr, "replay%s: %s (%zu bytes)\n", how,
                     path.c_str(), bytes.size());
      }
      EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0)
          << path;
      ++runs;
    }
  }
  if (how != nullptr) std::fprintf(stderr, "replay%s: %zu inputs\n", how, runs);
  return runs;
}

TEST(FuzzReplay, EveryCorpusAndRegressionInputRuns) {
  ReplayAll("");
  // The corpus (the first directory) is committed; an empty one means a
  // wrong path, not a target with nothing to run.
  EXPECT_FALSE(g_dirs.empty() || FilesIn(g_dirs[0]).empty())
      << "no inputs in " << (g_dirs.empty() ? "(none)" : g_dirs[0]);
}

TEST(FuzzReplay, EveryInputRunsWhileSignalsInterruptItsSystemCalls) {
  FrequentSignals signals;
  ReplayAll(" (SIGALRM every 200 us)");
  // A parser's whole corpus can run before the first signal: go again
  // (silently) until one has arrived, so that the test always tests.
  for (int pass = 0; pass < 100000 && FrequentSignals::Delivered() == 0;
       ++pass) {
    ReplayAll(nullptr);
  }
  std::fprintf(stderr, "replay: %ld signals delivered\n",
               FrequentSignals::Delivered());
  EXPECT_GT(FrequentSignals::Delivered(), 0);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) g_dirs.push_back(argv[i]);
  return RUN_ALL_TESTS();
}
