// Tests of lib/mpsim/models/corpus.hpp: the generated language's long-range structure, and the UTF-8
// decoder on hand-encoded sequences.
#include "catch_compat.hpp"

#include "mpsim/error.hpp"
#include "mpsim/models/corpus.hpp"

using namespace mpsim;
using namespace mpsim::models;

TEST_CASE("generated language: every record closes the bracket it opened", "[corpus]") {
  const GeneratedLanguage lang;
  using L = GeneratedLanguage;
  std::size_t records = 0;
  for (std::uint64_t b = 0; b < 20; ++b) {
    const auto s = lang.sample(99, 0, b, 2000);
    REQUIRE(s.size() == 2000);
    CHECK(lang.sample(99, 0, b, 2000) == s);  // a pure function of its key
    std::size_t i = 0;
    while (i + L::max_body + 3 <= s.size()) {
      REQUIRE(s[i] >= L::first_open);
      REQUIRE(s[i] < L::first_open + L::kinds);
      std::size_t j = i + 1;
      while (s[j] >= L::first_word) {
        // every body transition is one of the word's three successors
        if (s[j + 1] >= L::first_word) {
          const int w = s[j] - L::first_word;
          CHECK((s[j + 1] == lang.successor[w * 3] || s[j + 1] == lang.successor[w * 3 + 1] ||
                 s[j + 1] == lang.successor[w * 3 + 2]));
        }
        ++j;
      }
      const std::size_t body = j - i - 1;
      CHECK(body >= static_cast<std::size_t>(L::min_body));
      CHECK(body <= static_cast<std::size_t>(L::max_body));
      CHECK(s[j] == s[i] - L::first_open + L::first_close);
      CHECK(s[j + 1] == L::separator);
      i = j + 2;
      ++records;
    }
  }
  std::printf("generated language: %zu records checked\n", records);
  CHECK(records > 1000);
}

TEST_CASE("utf-8 decoding", "[corpus]") {
  // "a", "é" (C3 A9), "€" (E2 82 AC), "𝄞" (F0 9D 84 9E)
  CHECK(decode_utf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E", "t") ==
        std::vector<std::uint32_t>{0x61, 0xE9, 0x20AC, 0x1D11E});
  const std::pair<const char*, const char*> bad[] = {
      {"ab\xE9z", "byte 2"},             // Latin-1 é
      {"\xC0\xAF", "byte 0"},            // overlong '/'
      {"x\xED\xA0\x80", "byte 1"},       // UTF-16 surrogate D800
      {"\xF4\x90\x80\x80", "byte 0"},    // above U+10FFFF
      {"ok\xE2\x82", "byte 2"},          // truncated
      {"\x80", "byte 0"},                // lone continuation byte
  };
  for (const auto& [bytes, where] : bad) {
    INFO(where);
    CHECK_THROWS_WITH(decode_utf8(bytes, "f.txt"), Catch::Contains("f.txt") && Catch::Contains(where));
  }
}
