#include "mpsim/io/names.hpp"

#include <fmt/core.h>

#include "mpsim/error.hpp"

namespace mpsim::io {

namespace {

// The length of the well-formed UTF-8 sequence at text[i], or 0 (Unicode 15, table 3-7).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
  else if (b0 == 0xE0) n = 3, lo = 0xA0;
  else if (b0 >= 0xE1 && b0 <= 0xEC) n = 3;
  else if (b0 == 0xED) n = 3, hi = 0x9F;  // no surrogates
  else if (b0 >= 0xEE && b0 <= 0xEF) n = 3;
  else if (b0 == 0xF0) n = 4, lo = 0x90;
  else if (b0 >= 0xF1 && b0 <= 0xF3) n = 4;
  else if (b0 == 0xF4) n = 4, hi = 0x8F;  // <= U+10FFFF
  else return 0;
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence_length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string escaped(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence_length(text, i);
    const auto b = static_cast<unsigned char>(text[i]);
    if (n == 1 && b == '\\') {
      out += "\\\\";
    } else if (n == 0 || (n == 1 && (b < 0x20 || b == 0x7F))) {
      out += fmt::format("\\x{:02x}", b);
      i += 1;
      continue;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

void require_utf8_name(std::string_view name, std::string_view what) {
  if (!is_valid_utf8(name)) throw Error(fmt::format("{} {}: {}", what, escaped(name), kNotUtf8Name));
}

}  // namespace mpsim::io
