#include "netstack/wire/testing.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace netstack::wire::testing {

std::vector<uint8_t> Hex(std::string_view hex) {
  std::vector<uint8_t> out;
  int high = -1;
  for (char c : hex) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      std::fprintf(stderr, "Hex(): bad character '%c'\n", c);
      std::abort();
    }
    if (high < 0) {
      high = v;
    } else {
      out.push_back(static_cast<uint8_t>(high << 4 | v));
      high = -1;
    }
  }
  if (high >= 0) {
    std::fprintf(stderr, "Hex(): odd number of digits\n");
    std::abort();
  }
  return out;
}

}  // namespace netstack::wire::testing
