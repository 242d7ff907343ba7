// "KEY=VALUE,KEY=VALUE" option lists (the custom precision policy, the scaling recipes' options), split in
// one place so that every spec is read, and refused, the same way.
#pragma once

#include <charconv>
#include <string>
#include <string_view>

#include "mpsim/error.hpp"

namespace mpsim {

inline std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls f(key, value) for each comma-separated KEY=VALUE of `list`, both trimmed. An item that is not
// KEY=VALUE is an mpsim::Error "<context>: expected KEY=VALUE, got '<item>'".
template <class F>
void for_each_key_value(std::string_view list, const std::string& context, F&& f) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view item = trim_blanks(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      throw Error(context + ": expected KEY=VALUE, got '" + std::string(item) + "'");
    f(trim_blanks(item.substr(0, eq)), trim_blanks(item.substr(eq + 1)));
  }
}

// The integer v spells; mpsim::Error "<context>: <key> needs an integer, got '<v>'" otherwise.
template <class Int>
Int parse_integer(std::string_view v, const std::string& context, std::string_view key) {
  Int out{};
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size())
    throw Error(context + ": " + std::string(key) + " needs an integer, got '" + std::string(v) + "'");
  return out;
}

}  // namespace mpsim
