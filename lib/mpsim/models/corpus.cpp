#include "mpsim/models/corpus.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/models/detail/rng.hpp"

namespace mpsim::models {

namespace {
constexpr std::uint64_t kLanguageSeed = 0x1a2b3c;  // the task itself: the same for every run
}

GeneratedLanguage::GeneratedLanguage() {
  Rng rng(kLanguageSeed);
  successor.resize(words * 3);
  for (int w = 0; w < words; ++w) {
    // three distinct successors
    std::vector<int> pool(words);
    for (int i = 0; i < words; ++i) pool[i] = i;
    for (int k = 0; k < 3; ++k) {
      const int j = k + rng.below(words - k);
      std::swap(pool[k], pool[j]);
      successor[w * 3 + k] = first_word + pool[k];
    }
  }
}

GeneratedLanguage::GeneratedLanguage(int v, double s) : GeneratedLanguage() {
  if (v < min_vocab || v > max_vocab)
    throw FieldError("vocab", std::to_string(v),
                     fmt::format("the generated language takes {} to {} tokens (17 of them brackets and the "
                                 "separator)",
                                 min_vocab, max_vocab));
  if (!(std::isfinite(s) && s >= 0)) throw FieldError("zipf", fmt::format("{}", s), "must be finite and >= 0");
  zipf = s;
  if (v == default_vocab) return;  // the language above, whatever s (it has no Zipf law)
  vocab = v;
  words = v - first_word;
  zipf_cdf.resize(words);
  double total = 0;
  for (int r = 0; r < words; ++r) zipf_cdf[r] = total += std::pow(static_cast<double>(r + 1), -s);
  for (double& c : zipf_cdf) c /= total;
  zipf_cdf.back() = 1.0;  // u < 1 always lands inside the table
  Rng rng(kLanguageSeed, 0x21bf, static_cast<std::uint64_t>(v));
  successor.assign(static_cast<std::size_t>(words) * 3, 0);
  for (auto& next : successor) next = first_word + zipf_word(rng.uniform());
}

int GeneratedLanguage::zipf_word(double u) const {
  return static_cast<int>(std::upper_bound(zipf_cdf.begin(), zipf_cdf.end(), u) - zipf_cdf.begin());
}

std::vector<std::int32_t> GeneratedLanguage::sample(std::uint64_t seed, std::uint64_t a, std::uint64_t b,
                                                    int count) const {
  Rng rng(seed, a, b);
  std::vector<std::int32_t> out;
  out.reserve(count + max_body + 3);
  const bool zipf_language = !zipf_cdf.empty();
  while (static_cast<int>(out.size()) < count) {
    const int kind = rng.below(kinds);
    out.push_back(first_open + kind);
    const int body = min_body + rng.below(max_body - min_body + 1);
    int w = zipf_language ? zipf_word(rng.uniform()) : rng.below(words);
    for (int i = 0; i < body; ++i) {
      out.push_back(first_word + w);
      if (zipf_language && rng.uniform() < 0.5) {
        w = zipf_word(rng.uniform());
        continue;
      }
      const double u = rng.uniform();
      const int pick = u < 0.6 ? 0 : u < 0.9 ? 1 : 2;
      w = successor[w * 3 + pick] - first_word;
    }
    out.push_back(first_close + kind);
    out.push_back(separator);
  }
  out.resize(count);
  return out;
}

std::vector<std::uint32_t> decode_utf8(const std::string& s, const std::string& what) {
  std::vector<std::uint32_t> out;
  out.reserve(s.size());
  std::size_t i = 0;
  auto bad = [&](std::size_t at) {
    throw Error(what + ": invalid UTF-8 at byte " + std::to_string(at) + " (the corpus must be UTF-8 text)");
  };
  while (i < s.size()) {
    const auto c0 = static_cast<unsigned char>(s[i]);
    int len;
    std::uint32_t cp, min;
    if (c0 < 0x80) {
      out.push_back(c0);
      ++i;
      continue;
    } else if ((c0 & 0xE0) == 0xC0) {
      len = 2, cp = c0 & 0x1F, min = 0x80;
    } else if ((c0 & 0xF0) == 0xE0) {
      len = 3, cp = c0 & 0x0F, min = 0x800;
    } else if ((c0 & 0xF8) == 0xF0) {
      len = 4, cp = c0 & 0x07, min = 0x10000;
    } else {
      bad(i);
    }
    if (i + len > s.size()) bad(i);
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) bad(i);
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) bad(i);
    out.push_back(cp);
    i += len;
  }
  return out;
}

TextCorpus load_text_corpus(const std::filesystem::path& path, int window) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open the corpus file");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(path.string() + ": read error");
  if (bytes.empty()) throw Error(path.string() + ": the corpus is empty");
  const std::vector<std::uint32_t> cps = decode_utf8(bytes, path.string());
  TextCorpus c;
  c.vocab = cps;
  std::sort(c.vocab.begin(), c.vocab.end());
  c.vocab.erase(std::unique(c.vocab.begin(), c.vocab.end()), c.vocab.end());
  const std::size_t split = cps.size() - cps.size() / 10;
  const std::size_t need = static_cast<std::size_t>(window);
  if (cps.size() / 10 < need || split < need)
    throw Error(path.string() + ": the corpus has " + std::to_string(cps.size()) + " characters; at least " +
                std::to_string(10 * need) + " are needed (" + std::to_string(need) + " in the 10% validation split)");
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const auto id =
        static_cast<std::int32_t>(std::lower_bound(c.vocab.begin(), c.vocab.end(), cps[i]) - c.vocab.begin());
    (i < split ? c.train : c.validation).push_back(id);
  }
  return c;
}

}  // namespace mpsim::models
