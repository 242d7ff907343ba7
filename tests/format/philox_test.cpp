// Tests of lib/mpsim/format/hd/philox.hpp, the generator of stochastic rounding, and of the streams the
// bulk engine draws from it: the generator against Random123 (the authors' implementation, Debian
// librandom123-dev) and its published known-answer vectors; independence of the streams of different
// seeds (no window of 64 consecutive rounding decisions repeats between them); unbiasedness per element
// over seeds; the same bits on every code path, thread count and alignment of the first index.
#include "catch_compat.hpp"

#include <Random123/philox.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "mpsim/format/bulk.hpp"
#include "mpsim/format/hd/philox.hpp"
#include "mpsim/format/round.hpp"

using namespace mpsim;

namespace {

// Random123's philox4x32_R(10, ctr, key).
philox::Block reference_philox(const philox::Block& c, std::uint32_t k0, std::uint32_t k1, int rounds = 10) {
  const r123::Philox4x32::ctr_type ctr = {{c.v[0], c.v[1], c.v[2], c.v[3]}};
  const r123::Philox4x32::key_type key = {{k0, k1}};
  const r123::Philox4x32::ctr_type out = philox4x32_R(static_cast<unsigned>(rounds), ctr, key);
  return philox::Block{{out.v[0], out.v[1], out.v[2], out.v[3]}};
}

bool same(const philox::Block& a, const philox::Block& b) {
  return a.v[0] == b.v[0] && a.v[1] == b.v[1] && a.v[2] == b.v[2] && a.v[3] == b.v[3];
}

}  // namespace

TEST_CASE("Philox4x32 gives Random123's known answers and equals its philox4x32_R", "[philox]") {
  // Random123 1.14.0, tests/kat_vectors (Debian librandom123-doc): "philox4x32 R ctr[4] key[2] out[4]".
  struct Kat {
    int rounds;
    philox::Block ctr;
    std::uint32_t k0, k1;
    philox::Block out;
  };
  const Kat kats[] = {
      {7, {{0, 0, 0, 0}}, 0, 0, {{0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}}},
      {7,
       {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}}},
      {7,
       {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}}},
      {10, {{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {10,
       {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {10,
       {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  int kat_bad = 0;
  for (const Kat& k : kats) {
    kat_bad += !same(philox::generate(k.ctr, k.k0, k.k1, k.rounds), k.out);
    kat_bad += !same(reference_philox(k.ctr, k.k0, k.k1, k.rounds), k.out);  // the reference agrees with its file
  }
  // Random counters and keys against the reference implementation.
  std::mt19937_64 rng(20111112);  // SC'11
  std::uint64_t checked = 0, bad = 0;
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t a = rng(), b = rng(), k = rng();
    const philox::Block c{{static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(a >> 32),
                           static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32)}};
    ++checked;
    bad += !same(philox::generate(c, static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)),
                 reference_philox(c, static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)));
  }
  // sr_random(seed, i): word i % 4 of the block with counter (i / 4, 0) under key = seed.
  std::uint64_t sr_checked = 0, sr_bad = 0;
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t seed = i < 50000 ? static_cast<std::uint64_t>(i % 64) : rng();
    const std::uint64_t index = i % 3 == 0 ? static_cast<std::uint64_t>(i) : rng();
    const std::uint64_t q = index >> 2;
    const philox::Block ref =
        reference_philox({{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), 0, 0}},
                         static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
    ++sr_checked;
    sr_bad += sr_random(seed, index) != ref.v[index & 3];
  }
  static_assert(philox::sr_random(0, 0) == 0x6627e8d5u, "constexpr evaluation gives the first KAT word");
  std::printf(
      "philox4x32: %d known-answer vectors (2 per vector: ours, Random123's) %d wrong; %llu random "
      "(counter, key) vs Random123 philox4x32_R(10): %llu mismatches; sr_random vs Random123: %llu (seed, "
      "index), %llu mismatches\n",
      2 * static_cast<int>(std::size(kats)), kat_bad, (unsigned long long)checked, (unsigned long long)bad,
      (unsigned long long)sr_checked, (unsigned long long)sr_bad);
  CHECK(kat_bad == 0);
  CHECK(bad == 0);
  CHECK(sr_bad == 0);
}

TEST_CASE("streams of different seeds share no window of 64 consecutive rounding decisions", "[philox]") {
  // The decisions of fp16 stochastic rounding of 1 + 2^-11, halfway between 1 and 1 + 2^-10 (each
  // decision up with probability 1/2), through the bulk engine: element i of seed s decides with bit 31
  // of sr_random(s, i). Every window of 64 consecutive decisions of every stream is a 64-bit word; among
  // N random words the expected number of equal pairs is N^2 / 2^65 (the birthday bound): 5 * 10^-7 here.
  // Streams that were shifted copies of one stream (a per-seed offset added to the index before a hash)
  // would repeat a window wherever two seeds' offsets lie within the stream length of each other.
  // Seeds: 0 .. 383 (the consecutive seeds a user picks) and 128 that differ only in the key's high word.
  constexpr std::size_t kLen = 8192;
  std::vector<std::uint64_t> seeds;
  for (std::uint64_t s = 0; s < 384; ++s) seeds.push_back(s);
  for (std::uint64_t s = 1; s <= 128; ++s) seeds.push_back(s << 32);
  const std::vector<float> x(kLen, 1.0f + 0x1p-11f);
  std::vector<std::uint16_t> out(kLen);
  struct Window {
    std::uint64_t bits;
    std::uint32_t seed, at;
  };
  std::vector<Window> windows;
  windows.reserve(seeds.size() * (kLen - 63));
  std::uint64_t ups = 0;
  // Both streams (hd/philox.hpp): 32 random bits, and 16 (two elements per word: the decision of element
  // 8q + 4 + k is bit 15 of the word whose bit 31 decides element 8q + k).
  const int bits = GENERATE(32, 16);
  for (std::size_t k = 0; k < seeds.size(); ++k) {
    round_array(std::span<const float>(x), std::span<std::uint16_t>(out), fp16(), Rounding::stochastic(seeds[k], bits));
    std::uint64_t w = 0;
    for (std::size_t i = 0; i < kLen; ++i) {
      const bool up = out[i] == 0x3c01;
      ups += up;
      w = (w << 1) | (up ? 1 : 0);
      if (i >= 63) windows.push_back({w, static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(i - 63)});
    }
  }
  std::sort(windows.begin(), windows.end(), [](const Window& a, const Window& b) { return a.bits < b.bits; });
  std::uint64_t repeats_across = 0, repeats_within = 0;
  for (std::size_t i = 1; i < windows.size(); ++i)
    if (windows[i].bits == windows[i - 1].bits) {
      if (windows[i].seed != windows[i - 1].seed) ++repeats_across;
      else ++repeats_within;
      if (repeats_across + repeats_within <= 5)
        UNSCOPED_INFO("window 0x" << std::hex << windows[i].bits << std::dec << " at seed #" << windows[i].seed
                                  << " offset " << windows[i].at << " and seed #" << windows[i - 1].seed << " offset "
                                  << windows[i - 1].at);
    }
  const double n = static_cast<double>(seeds.size() * kLen);
  std::printf(
      "birthday test, %d-bit stream: %zu seeds x %zu decisions, %zu windows of 64; repeated windows between "
      "seeds %llu, within a seed %llu (expected by chance %.1e); share of up decisions %.5f (1/2 +- %.5f at 5 "
      "sigma)\n",
      bits, seeds.size(), kLen, windows.size(), (unsigned long long)repeats_across, (unsigned long long)repeats_within,
      static_cast<double>(windows.size()) * static_cast<double>(windows.size()) / 0x1p65, static_cast<double>(ups) / n,
      5 * 0.5 / std::sqrt(n));
  CHECK(repeats_across == 0);
  CHECK(repeats_within == 0);
  CHECK(std::fabs(static_cast<double>(ups) / n - 0.5) < 5 * 0.5 / std::sqrt(n));
}

TEST_CASE("stochastic rounding is unbiased per element over seeds", "[philox]") {
  // Element i holds x_i between fp16 neighbours lo_i < hi_i, at a fraction p_i of the gap (normal and
  // subnormal binades, p from 2^-10 to 1 - 2^-10). Over N seeds the mean of SR(x_i) has expectation
  // x_i (the fraction has at most 13 bits, so neither sr_bits = 32 nor 16 truncates it) and standard deviation
  // (hi_i - lo_i) sqrt(p_i (1 - p_i) / N): each element's mean must lie within 5 of them.
  constexpr int kSeeds = 4096;
  std::mt19937_64 rng(7);
  std::vector<float> x;
  for (int i = 0; i < 512; ++i) {
    const int e = -24 + static_cast<int>(rng() % 39);  // binades 2^-24 .. 2^14 (below max finite)
    double lo, quantum;
    if (e >= -14) {
      quantum = std::ldexp(1.0, e - 10);
      lo = static_cast<double>(1024 + rng() % 1024) * quantum;
    } else {  // the subnormal range, quantum 2^-24
      quantum = 0x1p-24;
      lo = static_cast<double>(rng() % 1024) * quantum;
    }
    const int p_num = 1 + static_cast<int>(rng() % 1023);  // p = p_num / 1024: exact in float
    const double v = lo + quantum * p_num / 1024.0;
    x.push_back(static_cast<float>((i & 1) ? -v : v));
  }
  std::vector<double> sum(x.size(), 0.0);
  std::vector<float> out(x.size());
  const int bits = GENERATE(32, 16);  // the two streams (hd/philox.hpp)
  for (int s = 0; s < kSeeds; ++s) {
    BulkOptions opt;
    opt.index0 = 1000003;  // not a multiple of 4 (nor of 8)
    round_array(std::span<const float>(x), std::span<float>(out), fp16(),
                Rounding::stochastic(static_cast<std::uint64_t>(s), bits), nullptr, opt);
    for (std::size_t i = 0; i < x.size(); ++i) sum[i] += out[i];
  }
  double worst_z = 0;
  std::uint64_t outside = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double lo = round(static_cast<double>(x[i]), fp16(), Rounding::of(RoundingMode::toward_zero));
    const double hi =
        round(static_cast<double>(x[i]), fp16(), Rounding::of(x[i] < 0 ? RoundingMode::down : RoundingMode::up));
    const double gap = std::fabs(hi - lo);
    const double p = std::fabs(static_cast<double>(x[i]) - lo) / gap;
    const double sd = gap * std::sqrt(p * (1 - p) / kSeeds);
    const double mean = sum[i] / kSeeds;
    const double z = std::fabs(mean - x[i]) / sd;
    worst_z = std::max(worst_z, z);
    if (std::fabs(mean - x[i]) > 5 * sd + gap * 0x1p-32) ++outside;
  }
  std::printf(
      "SR unbiasedness, %d random bits: %zu elements (fp16, normal and subnormal gaps), mean over %d seeds; "
      "worst |mean - x| = %.2f standard deviations, %llu beyond 5\n",
      bits, x.size(), kSeeds, worst_z, (unsigned long long)outside);
  CHECK(outside == 0);
}

TEST_CASE("the vector paths draw the specification's words at every alignment and across counter words", "[philox]") {
  // The vector kernels evaluate W / 4 Philox blocks per vector and, where the first index is not a
  // multiple of 4, take lanes of two block vectors; bulk.cpp splits calls where the block counter's
  // high word changes (index 2^34). Each start, each path, each thread count: the bits of round_bits().
  std::mt19937_64 rng(3);
  std::vector<float> in(70000);
  for (auto& v : in)
    v = std::ldexp(static_cast<float>(rng() % 4096) / 4096.0f + 1.0f, static_cast<int>(rng() % 40) - 30) *
        ((rng() & 1) ? -1.0f : 1.0f);
  const std::uint64_t starts[] = {
      0, 1, 2, 3, 4097, (std::uint64_t{1} << 34) - 30001, (std::uint64_t{1} << 34) - 30000, ~std::uint64_t{0} - 80000};
  std::uint64_t checked = 0, bad = 0;
  for (const Format* f : {&fp16(), &bf16(), &fp8_e5m2(), &fp8_e4m3()})
    for (std::uint64_t index0 : starts)
      for (Path path : {Path::scalar, Path::avx2, Path::avx512})
        for (int threads : {1, 3}) {
          if (!path_available(path)) continue;
          const Rounding r = Rounding::stochastic(0xfeedface12345678ull, 32);
          BulkOptions opt;
          opt.path = path;
          opt.threads = threads;
          opt.index0 = index0;
          std::vector<float> out(in.size());
          round_array(std::span<const float>(in), std::span<float>(out), *f, r, nullptr, opt);
          for (std::size_t i = 0; i < in.size(); ++i) {
            ++checked;
            const float want = round(in[i], *f, r, index0 + i);
            if (std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(out[i]) && ++bad <= 5)
              UNSCOPED_INFO(f->name << " path " << to_string(path) << " index " << index0 + i);
          }
        }
  std::printf(
      "SR vector paths vs round_bits at 8 first indices (aligned, misaligned, across 2^34 and 2^64), 3 "
      "paths, 1 and 3 threads: %llu results, %llu mismatches\n",
      (unsigned long long)checked, (unsigned long long)bad);
  CHECK(bad == 0);
}

TEST_CASE("the 16-bit stream: two elements per word of Random123's philox4x32_R, used by round_bits", "[philox]") {
  // hd/philox.hpp: with sr_bits <= 16 element i takes word i % 4 of the block at counter (i / 8, 0) under
  // key = seed, its high half for i % 8 < 4 and its low half otherwise, at the top of the word.
  std::mt19937_64 rng(16);
  std::uint64_t checked = 0, bad = 0, same_as_32 = 0;
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t seed = i < 50000 ? static_cast<std::uint64_t>(i % 64) : rng();
    const std::uint64_t index = i % 3 == 0 ? static_cast<std::uint64_t>(i) : rng();
    const std::uint64_t q = index >> 3;
    const std::uint32_t w =
        reference_philox({{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), 0, 0}},
                         static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32))
            .v[index & 3];
    const std::uint32_t want = (index & 4) ? w << 16 : w & 0xffff0000u;
    for (int b : {1, 7, 16}) {
      ++checked;
      bad += philox::sr_word(seed, index, b) != want;
    }
    for (int b : {17, 32}) {  // the 32-bit stream, unchanged
      ++checked;
      bad += philox::sr_word(seed, index, b) != sr_random(seed, index);
    }
    same_as_32 += (sr_random(seed, index) & 0xffff0000u) == want;
  }
  // round_bits with sr_bits = 16 on fp16: x = lo + k 2^-16 ulp(lo) (13 discarded bits, so the fraction
  // truncated to 16 bits is k exactly) rounds up iff k + the element's 16 random bits >= 2^16.
  std::uint64_t decisions = 0, wrong = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t seed = rng(), index = rng() >> (i & 31);
    const int k = static_cast<int>(rng() % 8192) * 8;  // multiples of 8: 13 bits below fp16's ulp
    const double lo = std::ldexp(1.0 + static_cast<double>(rng() % 1024) / 1024, static_cast<int>(rng() % 29) - 14);
    const double ulp = std::ldexp(1.0, std::ilogb(lo) - 10);
    const float x = static_cast<float>(lo + ulp * k / 65536.0);
    const bool up_want = k + (philox::sr_word(seed, index, 16) >> 16) >= 65536;
    const double got = round(static_cast<double>(x), fp16(), Rounding::stochastic(seed, 16), index);
    ++decisions;
    wrong += got != (up_want ? lo + ulp : lo);
  }
  std::printf(
      "16-bit stream vs Random123: %llu (seed, index, bits) words, %llu mismatches (%llu of 100000 elements "
      "would have drawn the same 16 bits from the 32-bit stream); round_bits fp16 sr_bits=16: %llu "
      "decisions, %llu wrong\n",
      (unsigned long long)checked, (unsigned long long)bad, (unsigned long long)same_as_32,
      (unsigned long long)decisions, (unsigned long long)wrong);
  CHECK(bad == 0);
  // The 16-bit stream is not the 32-bit one's top halves: element i draws from block i / 8, not i / 4 (the two
  // agree only where both counters are 0, elements 0 .. 3, or by chance, 1 in 2^16).
  CHECK(same_as_32 < 100);
  CHECK(wrong == 0);
}

TEST_CASE("the vector paths draw the 16-bit stream at every alignment, packed and simulated", "[philox]") {
  // The kernels take two element vectors from one block vector (a permute and a shift) and, where the
  // first index is not a multiple of 8, lanes of two element vectors: every start modulo 8, the 2^34
  // boundary and the end of the index range; each path against round_bits(). (Thread counts: the call
  // splits between threads only from 2^17 elements on, which the test above covers for the 32-bit stream;
  // the split points are multiples of 64, so of 8, and take the same misaligned-start code.)
  std::mt19937_64 rng(5);
  std::vector<float> in(6000);
  for (auto& v : in)
    v = std::ldexp(static_cast<float>(rng() % 65536) / 65536.0f + 1.0f, static_cast<int>(rng() % 40) - 30) *
        ((rng() & 1) ? -1.0f : 1.0f);
  const std::uint64_t starts[] = {
      0, 1, 2, 3, 4, 5, 6, 7, 8195, (std::uint64_t{1} << 34) - 10003, ~std::uint64_t{0} - 30000};
  std::uint64_t checked = 0, bad = 0;
  for (const Format* f : {&fp16(), &bf16(), &fp8_e5m2(), &fp8_e4m3()})
    for (int bits : {16, 7})
      for (std::uint64_t index0 : starts)
        for (Path path : {Path::scalar, Path::avx2, Path::avx512})
          for (int threads : {1}) {
            if (!path_available(path)) continue;
            const Rounding r = Rounding::stochastic(0x0123456789abcdefull, bits);
            BulkOptions opt;
            opt.path = path;
            opt.threads = threads;
            opt.index0 = index0;
            std::vector<float> out(in.size());
            round_array(std::span<const float>(in), std::span<float>(out), *f, r, nullptr, opt);
            std::vector<std::uint16_t> p16(in.size());
            std::vector<std::uint8_t> p8(in.size());
            if (f->storage_bytes() == 2)
              round_array(std::span<const float>(in), std::span<std::uint16_t>(p16), *f, r, nullptr, opt);
            else round_array(std::span<const float>(in), std::span<std::uint8_t>(p8), *f, r, nullptr, opt);
            for (std::size_t i = 0; i < in.size(); ++i) {
              ++checked;
              const float want = round(in[i], *f, r, index0 + i);
              const std::uint64_t want_bits = round_bits(in[i], *f, r, index0 + i);
              const bool ok = std::bit_cast<std::uint32_t>(want) == std::bit_cast<std::uint32_t>(out[i]) &&
                              (f->storage_bytes() == 2 ? p16[i] : p8[i]) == want_bits;
              if (!ok && ++bad <= 5)
                UNSCOPED_INFO(f->name << " bits " << bits << " path " << to_string(path) << " index " << index0 + i);
            }
          }
  // Three threads on 2^17 + 1000 elements (the engine splits from 2^17 on), fp16 packed, first index 5.
  std::vector<float> big(std::size_t{1} << 17 | 1000);
  for (auto& v : big)
    v = std::ldexp(static_cast<float>(rng() % 65536) / 65536.0f + 1.0f, static_cast<int>(rng() % 30) - 20);
  std::uint64_t threaded = 0, threaded_bad = 0;
  for (Path path : {Path::avx2, Path::avx512}) {
    if (!path_available(path)) continue;
    const Rounding r = Rounding::stochastic(77, 16);
    BulkOptions opt;
    opt.path = path;
    opt.threads = 3;
    opt.index0 = 5;
    std::vector<std::uint16_t> out(big.size());
    round_array(std::span<const float>(big), std::span<std::uint16_t>(out), fp16(), r, nullptr, opt);
    for (std::size_t i = 0; i < big.size(); ++i) {
      ++threaded;
      threaded_bad += out[i] != round_bits(big[i], fp16(), r, 5 + i);
    }
  }
  std::printf("16-bit stream, 3 threads, fp16 packed, %llu results: %llu mismatches\n", (unsigned long long)threaded,
              (unsigned long long)threaded_bad);
  CHECK(threaded_bad == 0);
  std::printf(
      "16-bit stream, vector paths vs round_bits: 4 formats simulated and packed, sr_bits 16 and 7, 11 "
      "first indices (0..7, 8195, across 2^34, the end), 3 paths: %llu results, %llu "
      "mismatches\n",
      (unsigned long long)checked, (unsigned long long)bad);
  CHECK(bad == 0);
}
