// Tests of lib/mpsim/models/corpus.hpp: the generated language's long-range structure, and the UTF-8
// decoder on hand-encoded sequences.
#include "catch_compat.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
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
      {"ab\xE9z", "byte 2"},           // Latin-1 é
      {"\xC0\xAF", "byte 0"},          // overlong '/'
      {"x\xED\xA0\x80", "byte 1"},     // UTF-16 surrogate D800
      {"\xF4\x90\x80\x80", "byte 0"},  // above U+10FFFF
      {"ok\xE2\x82", "byte 2"},        // truncated
      {"\x80", "byte 0"},              // lone continuation byte
  };
  for (const auto& [bytes, where] : bad) {
    INFO(where);
    CHECK_THROWS_WITH(decode_utf8(bytes, "f.txt"), Catch::Contains("f.txt") && Catch::Contains(where));
  }
}

TEST_CASE("generated language: --vocab 32 is the default language bit for bit, whatever --zipf", "[corpus]") {
  const GeneratedLanguage plain, named(32, 2.5);
  std::size_t tokens = 0;
  for (std::uint64_t b = 0; b < 8; ++b) {
    const auto s = plain.sample(7, 3, b, 1000);
    CHECK(named.sample(7, 3, b, 1000) == s);
    tokens += s.size();
  }
  CHECK(named.successor == plain.successor);
  std::printf("vocab 32: %zu tokens equal to the default language's\n", tokens);
}

TEST_CASE("generated language: a Zipf vocabulary keeps the records and draws its words by Zipf's law", "[corpus]") {
  using L = GeneratedLanguage;
  const int vocab = 8192;
  const double s_exp = 1.1;
  const L lang(vocab, s_exp);
  const int words = vocab - L::first_word;
  // Zipf's law written out here, not taken from the class: P(rank r) = r^-s / sum_k k^-s.
  std::vector<double> p(words);
  double norm = 0;
  for (int r = 0; r < words; ++r) norm += std::pow(r + 1.0, -s_exp);
  for (int r = 0; r < words; ++r) p[r] = std::pow(r + 1.0, -s_exp) / norm;
  std::vector<double> first(5, 0);
  double records = 0, transitions = 0, to_successor = 0, expected_successor = 0, var_successor = 0;
  for (std::uint64_t b = 0; b < 40; ++b) {
    const auto seq = lang.sample(5, 0, b, 4000);
    std::size_t i = 0;
    while (i + L::max_body + 3 <= seq.size()) {
      REQUIRE(seq[i] >= L::first_open);
      REQUIRE(seq[i] < L::first_open + L::kinds);
      std::size_t j = i + 1;
      const int w0 = seq[j] - L::first_word;
      if (w0 < 5) first[w0] += 1;
      while (seq[j] >= L::first_word) {
        REQUIRE(seq[j] < vocab);
        if (seq[j + 1] >= L::first_word) {
          const int w = seq[j] - L::first_word;
          // The next word is a successor with probability 1/2 + 1/2 P_zipf(the successor set).
          std::vector<int> succ{lang.successor[w * 3], lang.successor[w * 3 + 1], lang.successor[w * 3 + 2]};
          std::sort(succ.begin(), succ.end());
          succ.erase(std::unique(succ.begin(), succ.end()), succ.end());
          double q = 0;
          for (int t : succ) q += p[t - L::first_word];
          const double e = 0.5 + 0.5 * q;
          expected_successor += e;
          var_successor += e * (1 - e);
          to_successor += std::find(succ.begin(), succ.end(), seq[j + 1]) != succ.end();
          transitions += 1;
        }
        ++j;
      }
      const std::size_t body = j - i - 1;
      CHECK(body >= static_cast<std::size_t>(L::min_body));
      CHECK(body <= static_cast<std::size_t>(L::max_body));
      CHECK(seq[j] == seq[i] - L::first_open + L::first_close);
      CHECK(seq[j + 1] == L::separator);
      i = j + 2;
      records += 1;
    }
  }
  // The first word of a body is a plain Zipf draw: the counts of ranks 1..5 within 5 standard deviations.
  double worst_z = 0;
  for (int r = 0; r < 5; ++r) {
    const double sd = std::sqrt(records * p[r] * (1 - p[r]));
    worst_z = std::max(worst_z, std::abs(first[r] - records * p[r]) / sd);
  }
  const double z_succ = (to_successor - expected_successor) / std::sqrt(var_successor);
  std::printf(
      "zipf language (%d words, s = %.1f): %.0f records; first-word ranks 1..5 worst |z| %.2f "
      "(rank 1: %.0f, expected %.1f); %.0f of %.0f transitions to a successor, expected %.1f (z %.2f)\n",
      words, s_exp, records, worst_z, first[0], records * p[0], to_successor, transitions, expected_successor, z_succ);
  CHECK(worst_z < 5);
  CHECK(std::abs(z_succ) < 5);
}

// The library names the config's field (FieldError); the command line spells it as a flag, Python as a
// keyword (tests/tools, tests/python).
TEST_CASE("generated language: a vocabulary or exponent out of range is refused by name", "[corpus]") {
  const auto field_of = [](auto&& make) -> std::pair<std::string, std::string> {
    try {
      make();
    } catch (const FieldError& e) {
      return {e.field, e.what()};
    }
    return {"(nothing thrown)", ""};
  };
  const std::pair<std::string, std::string> cases[] = {
      field_of([] { GeneratedLanguage(19, 1.0); }), field_of([] { GeneratedLanguage(300000, 1.0); }),
      field_of([] { GeneratedLanguage(64, -1.0); }), field_of([] { GeneratedLanguage(64, std::nan("")); })};
  const char* const want_field[] = {"vocab", "vocab", "zipf", "zipf"};
  const char* const want_text[] = {"vocab 19", "vocab 300000", "zipf -1", "zipf nan"};
  for (int i = 0; i < 4; ++i) {
    std::printf("refused: field %s, \"%s\"\n", cases[i].first.c_str(), cases[i].second.c_str());
    CHECK(cases[i].first == want_field[i]);
    CHECK(cases[i].second.find(want_text[i]) != std::string::npos);
    CHECK(cases[i].second.find("--") == std::string::npos);
  }
}
