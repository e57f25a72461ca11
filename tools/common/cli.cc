#include "tools/common/cli.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace netstack::tools {

void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-' || a[1] != '-') continue;
    if (a[2] == '\0') break;
    for (char* p = a + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

void HelpListsFlagsUnder(std::string dir) {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [dir = std::move(dir)](absl::string_view file) {
    return absl::StrContains(file, dir);
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
}

namespace {

// Empty: argv is well formed. Else the one-line usage error.
std::string CheckFlagSyntax(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg[0] != '-' || arg[1] != '-') continue;
    const size_t eq = arg.find('=');
    const std::string name =
        arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (absl::StartsWith(name, "help") || name == "version") continue;
    if (name == "flagfile" || name == "fromenv" || name == "tryfromenv" ||
        name == "undefok") {
      if (eq == std::string::npos) ++i;  // "--flagfile FILE"
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* positive =
          absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>() &&
          eq == std::string::npos) {
        continue;
      }
    }
    if (flag == nullptr) return absl::StrCat("unknown flag --", name);
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::StrCat("--", name, " needs a value");
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::string hint;
      if (flag->IsOfType<absl::Duration>()) {
        hint = " (a duration needs its unit: 10ms, 1.5s, 2m)";
      }
      return absl::StrCat("--", name, "=", value, ": ", error, hint);
    }
  }
  return "";
}

}  // namespace

std::vector<char*> ParseCommandLineOrExit(std::string_view tool, int argc,
                                          char** argv) {
  if (const std::string error = CheckFlagSyntax(argc, argv); !error.empty()) {
    std::fprintf(stderr, "%.*s: %s (see --help)\n",
                 static_cast<int>(tool.size()), tool.data(), error.c_str());
    std::exit(2);
  }
  // The flags parse (checked above), so Abseil's own exit(1) paths are not
  // taken; the usage flags are handled here, with exit status 0.
  std::vector<char*> positional = absl::flags_internal::ParseCommandLineImpl(
      argc, argv, absl::flags_internal::ArgvListAction::kRemoveParsedArgs,
      absl::flags_internal::UsageFlagsAction::kIgnoreUsage,
      absl::flags_internal::OnUndefinedFlag::kReportUndefined);
  if (absl::flags_internal::HandleUsageFlags(std::cout,
                                             absl::ProgramUsageMessage()) >=
      0) {
    std::cout.flush();
    std::exit(0);
  }
  return positional;
}

}  // namespace netstack::tools
