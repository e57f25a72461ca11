// Runs every file in the directories named on the command line through the
// fuzz target's LLVMFuzzerTestOneInput, once each: the corpus and the
// regression inputs of one target, in the normal (gcc) and ASan builds. A
// crash, a sanitizer report or a failed invariant (the targets abort) fails
// the test and names the file on stderr before the input runs.
#include <dirent.h>

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

TEST(FuzzReplay, EveryCorpusAndRegressionInputRuns) {
  size_t runs = 0;
  for (const std::string& dir : g_dirs) {
    for (const std::string& path : FilesIn(dir)) {
      std::ifstream in(path, std::ios::binary);
      ASSERT_TRUE(in.good()) << path;
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
      std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(),
                   bytes.size());
      EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0)
          << path;
      ++runs;
    }
  }
  std::fprintf(stderr, "replay: %zu inputs\n", runs);
  // The corpus (the first directory) is committed; an empty one means a
  // wrong path, not a target with nothing to run.
  EXPECT_FALSE(g_dirs.empty() || FilesIn(g_dirs[0]).empty())
      << "no inputs in " << (g_dirs.empty() ? "(none)" : g_dirs[0]);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) g_dirs.push_back(argv[i]);
  return RUN_ALL_TESTS();
}
