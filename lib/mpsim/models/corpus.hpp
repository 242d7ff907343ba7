// Token streams for the language model: a generated corpus with long-range structure, or a UTF-8 text
// file tokenised by Unicode code point.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mpsim::models {

// The generated language (vocabulary 32 by default): records "<open k> w w ... w <close k> ." where k is one
// of 8 bracket kinds, the body is 6..16 words of a first-order Markov chain over 15 words (each word has
// three successors, probabilities 0.6 / 0.3 / 0.1, fixed by a task seed: the same language for every
// run), and the closing token repeats the kind chosen 7..17 tokens earlier. Predicting it needs memory
// across the whole body: the long-range part of the task, worth log2(8) = 3 bits per record.
//
// With any other vocabulary V (GeneratedLanguage(V, s)) the records keep their brackets and body lengths,
// and the body runs over V - 17 words with Zipf frequencies: the first body word, and each next one with
// probability 1/2, is drawn from P(rank r) ~ 1 / r^s (r = 1..V-17); otherwise it is one of the previous
// word's three successors (probabilities 0.6 / 0.3 / 0.1, themselves drawn from the Zipf law once per
// language). The unigram law of the words stays close to Zipf's, and half of the transitions are
// predictable from the previous word. This is what makes the softmax's non-target gradients small: most
// of the V logits belong to rare words whose probability, and so gradient p / N, is tiny (the one-sided
// flush of issue 34 item 5). V = 32 is the language above, bit for bit (the recorded figures rest on it).
struct GeneratedLanguage {
  static constexpr int default_vocab = 32;
  static constexpr double default_zipf = 1.0;
  static constexpr int min_vocab = 20, max_vocab = 1 << 18;  // at least 3 words; the embedding stays < 32 MiB
  static constexpr int separator = 0, first_open = 1, first_close = 9, first_word = 17, kinds = 8;
  static constexpr int min_body = 6, max_body = 16;
  int vocab = default_vocab;
  int words = default_vocab - first_word;  // body words: vocab - 17
  double zipf = default_zipf;              // the Zipf exponent s (unused at the default vocabulary)
  std::vector<std::int32_t> successor;     // (words, 3)
  std::vector<double> zipf_cdf;            // (words): P(rank <= r + 1); empty at the default vocabulary
  // The default language, or the Zipf language of `vocab` tokens with exponent `zipf`; mpsim::Error naming
  // the value when vocab is outside [min_vocab, max_vocab] or zipf is not finite and >= 0.
  GeneratedLanguage();
  GeneratedLanguage(int vocab, double zipf);
  // `count` tokens of the stream keyed by (seed, a, b), starting at the beginning of a record.
  std::vector<std::int32_t> sample(std::uint64_t seed, std::uint64_t a, std::uint64_t b, int count) const;

 private:
  int zipf_word(double u) const;  // the word of rank r with zipf_cdf[r - 1] <= u < zipf_cdf[r] (index r)
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
