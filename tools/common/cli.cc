#include "tools/common/cli.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
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
#include "absl/strings/str_split.h"
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

std::string WrapText(std::string_view text, int indent, int width) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(
           absl::string_view(text.data(), text.size()), ' ',
           absl::SkipEmpty())) {
    if (!line.empty() &&
        static_cast<int>(pad.size() + line.size() + 1 + word.size()) >
            width) {
      absl::StrAppend(&out, pad, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, pad, line, "\n");
  return out;
}

namespace {

// The flag an entry ("-t, --tcp-forward SPEC") shows: the word after its
// first "--", with '_' for '-'.
std::string EntryFlagName(std::string_view entry) {
  const size_t at = entry.find("--");
  if (at == std::string_view::npos) return "";
  std::string name(entry.substr(at + 2, entry.find(' ', at) - at - 2));
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// A default worth showing: not "", false, 0 or -1, which mean "none" or
// "off" (the help text says which).
std::string ShownDefault(const absl::CommandLineFlag& flag) {
  std::string d = flag.DefaultValue();
  if (d.empty() || d == "false" || d == "0" || d == "-1") return "";
  return d;
}

void AppendFlag(std::string_view entry, const absl::CommandLineFlag& flag,
                std::string& out) {
  absl::StrAppend(&out, "  ", absl::string_view(entry.data(), entry.size()));
  if (const std::string d = ShownDefault(flag); !d.empty()) {
    absl::StrAppend(&out, " (default: ", d, ")");
  }
  out += "\n";
  std::string help = flag.Help();
  if (const std::string prefix =
          absl::StrCat(absl::string_view(entry.data(), entry.size()), ": ");
      absl::StartsWith(help, prefix)) {
    help.erase(0, prefix.size());
  }
  out += WrapText(help, 6);
}

}  // namespace

std::string FormatHelp(const HelpPage& page,
                       std::vector<std::string>* problems) {
  std::vector<std::string> found;
  // Sorted by name, so that the "Other flags" group has a stable order.
  std::map<std::string, const absl::CommandLineFlag*> own;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), page.flags_dir)) {
      own.emplace(std::string(name), flag);
    }
  }
  std::map<std::string, std::string> group_of;
  std::string out = page.usage;
  if (!out.empty() && out.back() != '\n') out += "\n";
  for (absl::string_view para :
       absl::StrSplit(page.description, "\n\n", absl::SkipEmpty())) {
    out += "\n";
    out += WrapText(std::string_view(para.data(), para.size()), 0);
  }
  auto shown = [&](std::string name) {
    if (!page.dashed_names) return name;
    for (char& c : name) {
      if (c == '_') c = '-';
    }
    return name;
  };
  for (const HelpGroup& g : page.groups) {
    // "Title: when you need it", at column 0, where no entry starts.
    out += "\n";
    out += WrapText(absl::StrCat(g.title, ":", g.when.empty() ? "" : " ",
                                 g.when),
                    0);
    for (const std::string& entry : g.flags) {
      const std::string name = EntryFlagName(entry);
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag == nullptr) {
        found.push_back(absl::StrCat("group '", g.title, "' names --",
                                     shown(name), ", which is no flag"));
        continue;
      }
      if (auto [it, fresh] = group_of.emplace(name, g.title); !fresh) {
        found.push_back(absl::StrCat("--", shown(name), " is in group '",
                                     it->second, "' and in '", g.title,
                                     "'"));
      }
      AppendFlag(entry, *flag, out);
    }
  }
  bool other = false;
  for (const auto& [name, flag] : own) {
    if (group_of.contains(name)) continue;
    if (!other) {
      out += "\nOther flags: not yet sorted into a group above.\n";
      other = true;
    }
    found.push_back(
        absl::StrCat("--", shown(name), " (", flag->Filename(),
                     ") is in no group of ", page.tool, "'s --help"));
    AppendFlag(absl::StrCat("--", shown(name)), *flag, out);
  }
  if (!page.exit_status.empty()) {
    absl::StrAppend(&out, "\n", page.exit_status);
    if (out.back() != '\n') out += "\n";
  }
  out += "\n";
  if (page.dashed_names) out += "Flag names take '-' or '_'. ";
  out += "--helpfull lists every flag in Abseil's format.\n";
  if (problems != nullptr) *problems = std::move(found);
  return out;
}

namespace {

std::optional<HelpPage>& TheHelpPage() {
  static std::optional<HelpPage> page;
  return page;
}

}  // namespace

void SetHelpPage(HelpPage page) {
  absl::SetProgramUsageMessage(
      absl::StrCat(page.usage, "\n", page.description));
  HelpListsFlagsUnder(page.flags_dir);
  TheHelpPage() = std::move(page);
}

namespace {

// Whether argv asks for the grouped page: --help or --helpshort without a
// value, before any "--".
bool AsksForHelpPage(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-help" || a == "--helpshort" ||
        a == "-helpshort") {
      return true;
    }
  }
  return false;
}

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
  if (TheHelpPage() && AsksForHelpPage(argc, argv)) {
    std::cout << FormatHelp(*TheHelpPage());
    std::cout.flush();
    std::exit(0);
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
