// Token streams for the language model: a generated corpus with long-range structure, or a UTF-8 text
// file tokenised by Unicode code point.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mpsim::models {

// The generated language (vocabulary 32): records "<open k> w w ... w <close k> ." where k is one of 8
// bracket kinds, the body is 6..16 words of a first-order Markov chain over 15 words (each word has
// three successors, probabilities 0.6 / 0.3 / 0.1, fixed by a task seed: the same language for every
// run), and the closing token repeats the kind chosen 7..17 tokens earlier. Predicting it needs memory
// across the whole body: the long-range part of the task, worth log2(8) = 3 bits per record.
struct GeneratedLanguage {
  static constexpr int vocab = 32;
  static constexpr int separator = 0, first_open = 1, first_close = 9, first_word = 17, kinds = 8, words = 15;
  static constexpr int min_body = 6, max_body = 16;
  std::vector<std::int32_t> successor;  // (words, 3)
  GeneratedLanguage();
  // `count` tokens of the stream keyed by (seed, a, b), starting at the beginning of a record.
  std::vector<std::int32_t> sample(std::uint64_t seed, std::uint64_t a, std::uint64_t b, int count) const;
};

struct TextCorpus {
  std::vector<std::uint32_t> vocab;  // code points, sorted; token id = index
  std::vector<std::int32_t> train, validation;
};

// Reads `path`, checks it is non-empty, valid UTF-8 (RFC 3629: no overlong forms, surrogates or code
// points above U+10FFFF) and long enough for `window` tokens in both splits (the last 10% is the
// validation split); throws mpsim::Error naming the file and the byte offset of the first bad sequence.
TextCorpus load_text_corpus(const std::filesystem::path& path, int window);

// Decodes UTF-8 into code points; throws mpsim::Error("<what>: invalid UTF-8 at byte N") on a bad sequence.
std::vector<std::uint32_t> decode_utf8(const std::string& bytes, const std::string& what);

}  // namespace mpsim::models
