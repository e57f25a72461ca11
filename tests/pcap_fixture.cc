#include "tests/pcap_fixture.h"

#include <pcap/pcap.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace netstack::testing {
namespace {

// Debian's Abseil has its own absl::string_view (not an alias of
// std::string_view), so convert at the boundary.
absl::string_view Absl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

struct PcapCloser {
  void operator()(pcap_t* p) const { pcap_close(p); }
};
using PcapHandle = std::unique_ptr<pcap_t, PcapCloser>;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FileHandle = std::unique_ptr<std::FILE, FileCloser>;

// fopen with an errno-derived status (NotFound for ENOENT, ...).
absl::StatusOr<FileHandle> OpenForReading(const std::string& path,
                                          absl::string_view what) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot open ", what, " '", path,
                                            "'"));
  }
  return FileHandle(f);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view what) {
  absl::StatusOr<FileHandle> f = OpenForReading(path, what);
  if (!f.ok()) return f.status();
  std::string contents;
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f->get())) > 0) {
    contents.append(buf, n);
  }
  if (std::ferror(f->get())) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("error reading ", what, " '", path, "'"));
  }
  return contents;
}

// A tshark field name: "frame.number", "ip.src", "tcp.checksum.status" ...
bool IsFieldName(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

std::string RunfilesRoot() {
  if (const char* d = std::getenv("TEST_SRCDIR"); d != nullptr && *d != '\0') {
    return d;
  }
  if (const char* d = std::getenv("RUNFILES_DIR"); d != nullptr && *d != '\0') {
    return d;
  }
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) return absl::StrCat(absl::string_view(exe, n), ".runfiles");
  return ".";
}

}  // namespace

absl::StatusOr<PcapCapture> ReadPcapFile(const std::string& path) {
  absl::StatusOr<FileHandle> file = OpenForReading(path, "pcap file");
  if (!file.ok()) return file.status();

  char errbuf[PCAP_ERRBUF_SIZE] = {};
  // Nanosecond precision: libpcap scales microsecond files up, so both
  // pcap flavours (and pcapng) come out the same.
  PcapHandle pcap(pcap_fopen_offline_with_tstamp_precision(
      file->get(), PCAP_TSTAMP_PRECISION_NANO, errbuf));
  if (pcap == nullptr) {
    // On failure libpcap leaves the FILE* to us; `file` closes it.
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a pcap/pcapng capture file: ",
                     errbuf));
  }
  // pcap_close now owns the FILE*.
  (void)file->release();

  PcapCapture capture;
  capture.link_type = pcap_datalink(pcap.get());
  capture.snaplen = pcap_snapshot(pcap.get());
  for (;;) {
    pcap_pkthdr* header = nullptr;
    const u_char* data = nullptr;
    const int rc = pcap_next_ex(pcap.get(), &header, &data);
    if (rc == PCAP_ERROR_BREAK) break;  // -2: end of file.
    if (rc != 1) {
      return absl::DataLossError(absl::StrCat(
          "'", path, "': cannot read frame ", capture.frames.size() + 1,
          " (after ", capture.frames.size(),
          " good frames): ", pcap_geterr(pcap.get())));
    }
    CapturedFrame frame;
    // With PCAP_TSTAMP_PRECISION_NANO, tv_usec holds nanoseconds.
    frame.timestamp = absl::FromUnixSeconds(header->ts.tv_sec) +
                      absl::Nanoseconds(header->ts.tv_usec);
    frame.original_length = header->len;
    frame.bytes.assign(data, data + header->caplen);
    capture.frames.push_back(std::move(frame));
  }
  return capture;
}

absl::StatusOr<std::vector<CapturedFrame>> ReadPcap(const std::string& path) {
  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  if (!capture.ok()) return capture.status();
  if (capture->link_type != DLT_EN10MB) {
    const char* name = pcap_datalink_val_to_name(capture->link_type);
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' has link type ", capture->link_type, " (",
        name != nullptr ? name : "unknown", "), not Ethernet (DLT_EN10MB)"));
  }
  return std::move(capture->frames);
}

std::string TestDataPath(std::string_view file) {
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(RunfilesRoot(), "/",
                      workspace != nullptr && *workspace != '\0' ? workspace
                                                                 : "netstack",
                      "/tests/testdata/", Absl(file));
}

absl::StatusOr<TsharkTable> ReadTsharkTsv(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path, "tshark TSV");
  if (!contents.ok()) return contents.status();

  std::vector<absl::string_view> lines = absl::StrSplit(*contents, '\n');
  // The file ends with a newline, which leaves one empty piece.
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is empty; expected a tshark -T fields "
                                "header line"));
  }

  TsharkTable table;
  for (absl::string_view name : absl::StrSplit(lines[0], '\t')) {
    if (!IsFieldName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "' line 1: header is not a tab-separated list of tshark "
                     "field names (written with -E header=y -E separator=/t?)"
                     "; bad column ",
          table.columns.size() + 1, ": \"", absl::CHexEscape(name.substr(0, 40)),
          "\""));
    }
    for (const std::string& seen : table.columns) {
      if (seen == name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", path, "' line 1: column \"", name, "\" appears twice"));
      }
    }
    table.columns.emplace_back(std::string(name));
  }

  table.rows.reserve(lines.size() - 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<absl::string_view> values = absl::StrSplit(lines[i], '\t');
    if (values.size() != table.columns.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "' line ", i + 1, ": ", values.size(),
          " tab-separated values, but the header has ", table.columns.size(),
          " columns"));
    }
    TsharkRow row;
    for (size_t c = 0; c < values.size(); ++c) {
      row.emplace(table.columns[c], std::string(values[c]));
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

std::optional<uint64_t> ParseTsharkNumber(std::string_view value) {
  int base = 10;
  if (value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X')) {
    value.remove_prefix(2);
    base = 16;
  }
  if (value.empty()) return std::nullopt;
  uint64_t out = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out, base);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return out;
}

}  // namespace netstack::testing
