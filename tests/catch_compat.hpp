// Catch2 for every test file, v2 (Debian 12's catch2 2.13) or v3 (current upstream, newer Debian): v3
// split the single header into catch_all.hpp and moved two names the tests use (Approx into Catch::,
// Contains to Catch::Matchers::ContainsSubstring), brought back here under their v2 spelling.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#include <string>
using Catch::Approx;
namespace Catch {
inline auto Contains(const std::string& text, CaseSensitive sensitivity = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(text, sensitivity);
}
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#endif
