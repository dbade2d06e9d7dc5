// Input text quoted in error messages: printable ASCII as it is, every other byte as \xHH
// (two hex digits), so a message about a binary or mis-encoded file stays one readable
// line and names the bytes exactly.
#pragma once

#include <string>
#include <string_view>

namespace cowstate::sim {

inline std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  return out;
}

}  // namespace cowstate::sim
