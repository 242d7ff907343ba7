// Exhaustive and large sampled checks of lib/mpsim/format/arith.hpp against a second, fast exact
// method that shares no code with the production path:
//  * every fp16 and bf16 number is M * 2^e with integer M < 2^11 (2^8); sums, products and fmas are
//    integer sums of such terms, held exactly in unsigned __int128 after aligning exponents (a term more
//    than 90 binades below the other only sets a sticky bit); quotients are integer quotient + remainder
//    of M_a * 2^40 / M_b; square roots an integer square root with its remainder;
//  * the exact result is rounded by an integer rounder written here (not round_bits()).
// The fast method itself is cross-checked against Boost.Multiprecision (cpp_int dyadic arithmetic:
// the result must lie between the midpoints to its neighbours) on 10^7 sampled cases.
#include "catch_compat.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <boost/multiprecision/cpp_int.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/format/arith.hpp"
#include "mpsim/format/round.hpp"

namespace {

using u128 = unsigned __int128;
using i128 = __int128;

// ---- the reference: an IEEE binary format with inf and NaN, in integers ----------------------------
struct RefFormat {
  int m;  // stored mantissa bits
  int bias;
  int e;  // exponent bits
  std::uint32_t sign() const { return 1u << (e + m); }
  std::uint32_t inf() const { return ((1u << e) - 1) << m; }
  std::uint32_t quiet() const { return 1u << (m - 1); }
  std::uint32_t default_nan() const { return sign() | inf() | quiet(); }  // x86 "QNaN indefinite"
  int emin() const { return 1 - bias; }
  int emax() const { return (1 << e) - 2 - bias; }
};
const RefFormat kHalf{10, 15, 5};
const RefFormat kBf16{7, 127, 8};

enum class Mode { rne, rtz, down };

struct Num {  // a decoded encoding
  bool neg;
  bool nan, inf, zero;
  std::uint64_t M;  // value = M * 2^e
  int e;
};

Num ref_decode(std::uint32_t bits, const RefFormat& F) {
  Num n{};
  n.neg = bits & F.sign();
  const std::uint32_t field = (bits >> F.m) & ((1u << F.e) - 1);
  const std::uint32_t man = bits & ((1u << F.m) - 1);
  if (field == (1u << F.e) - 1) {
    n.nan = man != 0;
    n.inf = man == 0;
    return n;
  }
  if (field == 0) {
    n.zero = man == 0;
    n.M = man;
    n.e = F.emin() - F.m;
  } else {
    n.M = man | (1u << F.m);
    n.e = static_cast<int>(field) - F.bias - F.m;
  }
  return n;
}

int msb128(u128 x) {
  const auto hi = static_cast<std::uint64_t>(x >> 64);
  return hi ? 127 - std::countl_zero(hi) : 63 - std::countl_zero(static_cast<std::uint64_t>(x));
}

// Rounds (-1)^neg * mag * 2^exp (mag > 0; its lowest bit may be a sticky bit, callers keep it at least two
// bits below the format's quantum) to the format.
std::uint32_t ref_round(bool neg, u128 mag, int exp, const RefFormat& F, Mode mode) {
  const int lead = msb128(mag) + exp;
  int qe = std::max(lead, F.emin()) - F.m;
  const int drop = qe - exp;
  u128 kept;
  bool inexact = false, above = false, tie = false;
  if (drop > 0 && drop < 64 && !(mag >> 64)) {  // the common case, in 64-bit arithmetic
    const auto m64 = static_cast<std::uint64_t>(mag);
    kept = m64 >> drop;
    const std::uint64_t rem = m64 & ((std::uint64_t{1} << drop) - 1);
    const std::uint64_t half = std::uint64_t{1} << (drop - 1);
    inexact = rem != 0;
    above = rem > half;
    tie = rem == half;
  } else if (drop <= 0) {
    kept = mag << -drop;
  } else if (drop >= 127) {
    kept = 0;
    inexact = true;
  } else {
    kept = mag >> drop;
    const u128 rem = mag & ((u128(1) << drop) - 1);
    const u128 half = u128(1) << (drop - 1);
    inexact = rem != 0;
    above = rem > half;
    tie = rem == half;
  }
  bool up = false;
  switch (mode) {
    case Mode::rne: up = above || (tie && (kept & 1)); break;
    case Mode::rtz: break;
    case Mode::down: up = inexact && neg; break;
  }
  kept += up;
  if (kept >> (F.m + 1)) {
    kept >>= 1;
    ++qe;
  }
  const std::uint32_t s = neg ? F.sign() : 0;
  if (kept == 0) return s;
  if (!(kept >> F.m)) return s | static_cast<std::uint32_t>(kept);
  const int res_e = qe + F.m;
  if (res_e > F.emax()) {
    const bool to_inf = mode == Mode::rne || (mode == Mode::down && neg);
    return s | (to_inf ? F.inf() : F.inf() - 1);
  }
  return s | (static_cast<std::uint32_t>(res_e + F.bias) << F.m) | static_cast<std::uint32_t>(kept & ((1u << F.m) - 1));
}

// The exact sum of two signed terms M * 2^e (M < 2^23), rounded.
std::uint32_t ref_sum(bool na, std::uint64_t Ma, int ea, bool nb, std::uint64_t Mb, int eb, const RefFormat& F,
                      Mode mode) {
  if (std::abs(ea - eb) <= 90) {
    const int e0 = std::min(ea, eb);
    const i128 A = i128(Ma) << (ea - e0), B = i128(Mb) << (eb - e0);
    const i128 S = (na ? -A : A) + (nb ? -B : B);
    if (S == 0) return mode == Mode::down ? F.sign() : 0;
    return ref_round(S < 0, static_cast<u128>(S < 0 ? -S : S), e0, F, mode);
  }
  // The smaller term is below 2^-67 of the larger: it only decides the sticky bit and its direction.
  const bool a_big = ea > eb;
  const u128 X = u128(a_big ? Ma : Mb) << 40;
  const bool same = na == nb;
  return ref_round(a_big ? na : nb, same ? 2 * X + 1 : 2 * X - 1, (a_big ? ea : eb) - 41, F, mode);
}

std::uint32_t ref_add(std::uint32_t a, std::uint32_t b, bool negate_b, const RefFormat& F, Mode mode) {
  const Num x = ref_decode(a, F);
  Num y = ref_decode(b, F);
  if (x.nan) return a | F.quiet();
  if (y.nan) return b | F.quiet();
  if (negate_b) y.neg = !y.neg;
  if (x.inf && y.inf) return x.neg == y.neg ? a : F.default_nan();
  if (x.inf) return a;
  if (y.inf) return (y.neg ? F.sign() : 0) | F.inf();
  if (x.zero && y.zero) return ((x.neg && y.neg) || (mode == Mode::down && (x.neg || y.neg))) ? F.sign() : 0;
  if (x.zero) return (y.neg ? F.sign() : 0) | (b & ~F.sign());
  if (y.zero) return a;
  return ref_sum(x.neg, x.M, x.e, y.neg, y.M, y.e, F, mode);
}

std::uint32_t ref_mul(std::uint32_t a, std::uint32_t b, const RefFormat& F, Mode mode) {
  const Num x = ref_decode(a, F), y = ref_decode(b, F);
  if (x.nan) return a | F.quiet();
  if (y.nan) return b | F.quiet();
  const std::uint32_t s = x.neg != y.neg ? F.sign() : 0;
  if ((x.inf && y.zero) || (x.zero && y.inf)) return F.default_nan();
  if (x.inf || y.inf) return s | F.inf();
  if (x.zero || y.zero) return s;
  return ref_round(x.neg != y.neg, u128(x.M) * y.M, x.e + y.e, F, mode);
}

std::uint32_t ref_div(std::uint32_t a, std::uint32_t b, const RefFormat& F, Mode mode) {
  const Num x = ref_decode(a, F), y = ref_decode(b, F);
  if (x.nan) return a | F.quiet();
  if (y.nan) return b | F.quiet();
  const std::uint32_t s = x.neg != y.neg ? F.sign() : 0;
  if ((x.inf && y.inf) || (x.zero && y.zero)) return F.default_nan();
  if (x.inf || y.zero) return s | F.inf();
  if (x.zero || y.inf) return s;
  const std::uint64_t num = x.M << 40;
  const std::uint64_t q = num / y.M, r = num % y.M;
  return ref_round(x.neg != y.neg, u128(2 * q + (r != 0)), x.e - y.e - 41, F, mode);
}

std::uint32_t ref_sqrt(std::uint32_t a, const RefFormat& F, Mode mode) {
  const Num x = ref_decode(a, F);
  if (x.nan) return a | F.quiet();
  if (x.zero) return a;
  if (x.neg) return F.default_nan();
  if (x.inf) return a;
  std::uint64_t M = x.M;
  int e = x.e;
  if (e & 1) {
    M <<= 1;
    --e;
  }
  const std::uint64_t T = M << 50;  // M < 2^12: T < 2^62
  auto R = static_cast<std::uint64_t>(std::sqrt(static_cast<long double>(T)));
  while (u128(R) * R > T) --R;
  while (u128(R + 1) * (R + 1) <= T) ++R;
  return ref_round(false, u128(2 * R + (u128(R) * R != T)), e / 2 - 25 - 1, F, mode);
}

std::uint32_t ref_fma(std::uint32_t a, std::uint32_t b, std::uint32_t c, const RefFormat& F, Mode mode) {
  const Num x = ref_decode(a, F), y = ref_decode(b, F), z = ref_decode(c, F);
  if (x.nan) return a | F.quiet();
  if (y.nan) return b | F.quiet();
  if (z.nan) return c | F.quiet();
  const bool pneg = x.neg != y.neg;
  if ((x.inf && y.zero) || (x.zero && y.inf)) return F.default_nan();
  if (x.inf || y.inf) {
    if (z.inf && z.neg != pneg) return F.default_nan();
    return (pneg ? F.sign() : 0) | F.inf();
  }
  if (z.inf) return c;
  if (x.zero || y.zero) {
    if (z.zero) return ((pneg && z.neg) || (mode == Mode::down && (pneg || z.neg))) ? F.sign() : 0;
    return c;
  }
  if (z.zero) return ref_round(pneg, u128(x.M) * y.M, x.e + y.e, F, mode);
  return ref_sum(pneg, x.M * y.M, x.e + y.e, z.neg, z.M, z.e, F, mode);
}

// ---- running and tallying --------------------------------------------------------------------------
struct Tally {
  std::uint64_t checked = 0, mismatches = 0;
  std::uint32_t first[3] = {0, 0, 0};
  std::uint64_t got = 0, want = 0;
  void check(std::uint64_t g, std::uint64_t w, std::uint32_t a, std::uint32_t b = 0, std::uint32_t c = 0) {
    ++checked;
    if (g != w) {
      if (mismatches++ == 0) {
        first[0] = a, first[1] = b, first[2] = c;
        got = g, want = w;
      }
    }
  }
  void merge(const Tally& o) {
    if (mismatches == 0 && o.mismatches) {
      std::copy(o.first, o.first + 3, first);
      got = o.got, want = o.want;
    }
    checked += o.checked;
    mismatches += o.mismatches;
  }
  void report(const char* what) const {
    std::printf("  %-34s checked %12llu  mismatches %llu", what, static_cast<unsigned long long>(checked),
                static_cast<unsigned long long>(mismatches));
    if (mismatches)
      std::printf("  first: (0x%x, 0x%x, 0x%x) got 0x%llx want 0x%llx", first[0], first[1], first[2],
                  static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
    std::printf("\n");
  }
};

// MPSIM_TEST_STRIDE=k checks only every k-th first operand of the pair loops (default 1: every one;
// the fp16 all-pairs case has its own default, see there).
std::uint32_t stride(long fallback = 1) {
  const char* s = std::getenv("MPSIM_TEST_STRIDE");
  const long k = s ? std::atol(s) : fallback;
  if (k > 1) std::printf("MPSIM_TEST_STRIDE=%ld: only every %ld-th first operand is checked\n", k, k);
  return k > 1 ? static_cast<std::uint32_t>(k) : 1u;
}

unsigned thread_count() { return std::max(2u, std::min(16u, std::thread::hardware_concurrency())); }

// Runs body(chunk, tallies) for chunk in [0, chunks) on all cores; each thread owns a vector of
// `kinds` tallies, merged at the end.
std::vector<Tally> run_parallel(std::uint32_t chunks, std::size_t kinds,
                                const std::function<void(std::uint32_t, std::vector<Tally>&)>& body) {
  std::atomic<std::uint32_t> next{0};
  const unsigned n = thread_count();
  std::vector<std::vector<Tally>> per(n, std::vector<Tally>(kinds));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      for (std::uint32_t c; (c = next.fetch_add(1)) < chunks;) body(c, per[t]);
    });
  for (auto& th : threads) th.join();
  std::vector<Tally> all(kinds);
  for (auto& p : per)
    for (std::size_t k = 0; k < kinds; ++k) all[k].merge(p[k]);
  return all;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<double> decode_table(const mpsim::Format& f) {
  std::vector<double> t(std::size_t{1} << f.storage_bits);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = mpsim::decode(i, f);
  return t;
}

// A counter-based hash for sampling (splitmix64 finaliser; Steele et al. 2014).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

mpsim::Rounding rounding(Mode m) {
  switch (m) {
    case Mode::rne: return mpsim::Rounding::of(mpsim::RoundingMode::nearest_even);
    case Mode::rtz: return mpsim::Rounding::of(mpsim::RoundingMode::toward_zero);
    case Mode::down: return mpsim::Rounding::of(mpsim::RoundingMode::down);
  }
  return {};
}

// ---- Boost.Multiprecision check of the fast method ------------------------------------------------
using boost::multiprecision::cpp_int;
struct Dy {  // n * 2^k, n >= 0
  cpp_int n;
  int k;
};
int compare(const Dy& a, const Dy& b) {
  if (a.k >= b.k) {
    const cpp_int l = a.n << (a.k - b.k);
    return l < b.n ? -1 : l > b.n ? 1 : 0;
  }
  const cpp_int r = b.n << (b.k - a.k);
  return a.n < r ? -1 : a.n > r ? 1 : 0;
}
Dy mul(const Dy& a, const Dy& b) { return {a.n * b.n, a.k + b.k}; }

enum class Op { add, mul, div, fma, sqrt };

// True if `result` is the nearest-even rounding of op(a, b, c), for finite non-zero operands whose
// exact result is non-zero: |x| must lie between the midpoints to the neighbours of |result| (the
// next number above the largest finite one being 2^(emax+1), which is where inf's encoding sits).
bool boost_confirms(Op op, std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t result,
                    const RefFormat& F) {
  const Num x = ref_decode(a, F), y = ref_decode(b, F), z = ref_decode(c, F);
  // The exact value as sign and a comparison function "|exact| vs d".
  bool neg = false;
  std::function<int(const Dy&)> cmp;
  Dy exact_dy;
  auto signed_sum = [](bool na, const Dy& A, bool nb, const Dy& B, bool& neg_out) {
    const int k = std::min(A.k, B.k);
    cpp_int s = (na ? -1 : 1) * (A.n << (A.k - k)) + (nb ? -1 : 1) * (B.n << (B.k - k));
    neg_out = s < 0;
    return Dy{boost::multiprecision::abs(s), k};
  };
  const Dy X{x.M, x.e}, Y{y.M, y.e}, Z{z.M, z.e};
  switch (op) {
    case Op::add: exact_dy = signed_sum(x.neg, X, y.neg, Y, neg); break;
    case Op::mul:
      exact_dy = mul(X, Y);
      neg = x.neg != y.neg;
      break;
    case Op::fma: exact_dy = signed_sum(x.neg != y.neg, mul(X, Y), z.neg, Z, neg); break;
    case Op::div: neg = x.neg != y.neg; break;
    case Op::sqrt: break;
  }
  if (op == Op::div) cmp = [&](const Dy& d) { return compare(X, mul(d, Y)); };  // |a|/|b| vs d  <=>  |a| vs d*|b|
  else if (op == Op::sqrt) cmp = [&](const Dy& d) { return compare(X, mul(d, d)); };
  else cmp = [&](const Dy& d) { return compare(exact_dy, d); };

  const bool rneg = result & F.sign();
  const std::uint32_t mag = result & ~F.sign();
  if (cmp(Dy{0, 0}) == 0) return false;  // exact zero: not a case for this check
  if (rneg != neg) return false;
  if (mag > F.inf()) return false;  // NaN
  auto value = [&](std::uint32_t bits) {
    if (bits == F.inf()) return Dy{1, F.emax() + 1};
    const Num n = ref_decode(bits, F);
    return Dy{n.M, n.e};
  };
  const Dy r = value(mag);
  const bool odd = mag & 1;
  if (mag == F.inf()) {
    // Overflow: |x| at or above max + half an ulp (a tie with "even" 2^(emax+1)).
    const Dy mx = value(F.inf() - 1);
    const Dy mid{mx.n * 2 + 1, mx.k - 1};
    return cmp(mid) >= 0;
  }
  const Dy next = value(mag + 1);
  auto midpoint = [](const Dy& p, const Dy& q) {
    const int k = std::min(p.k, q.k);
    return Dy{(p.n << (p.k - k)) + (q.n << (q.k - k)), k - 1};
  };
  const Dy hi = midpoint(r, next);
  const int ch = cmp(hi);
  if (ch > 0 || (ch == 0 && odd)) return false;
  if (mag == 0) return true;
  const Dy prev = value(mag - 1);
  const Dy lo = midpoint(prev, r);
  const int cl = cmp(lo);
  return cl > 0 || (cl == 0 && !odd);
}

}  // namespace

namespace {

// A third method, for the all-pairs sweep, that is fast enough to run on every pair: the operation in
// float on the x86 FPU, then F16C's vcvtps2ph (nearest-even) to fp16. float carries 24 bits >= 2 * 11 + 2,
// so rounding the exact result to float and then to fp16 gives the correctly rounded fp16 result for
// + - * / (S. A. Figueroa, "When is double rounding innocuous?", SIGNUM Newsletter 30(3), 1995); fp16
// operands and results never leave float's normal range. NaN rules come out as x86 defines them, which
// is what arith.hpp promises (first NaN operand quieted, default NaN for invalid operations).
#if defined(__x86_64__)
bool have_f16c() { return mpsim::cpu_features().f16c; }

__attribute__((target("avx,f16c"))) void f16c_pair_ops(std::uint32_t a, const std::uint16_t* bs, std::size_t n,
                                                       std::uint16_t* add, std::uint16_t* sub, std::uint16_t* mul,
                                                       std::uint16_t* div) {
  const __m256 va = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(a)));
  for (std::size_t j = 0; j < n; j += 8) {
    const __m256 vb = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bs + j)));
    // (no lambda: it would not inherit this function's target attribute)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(add + j),
                     _mm256_cvtps_ph(_mm256_add_ps(va, vb), _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(sub + j),
                     _mm256_cvtps_ph(_mm256_sub_ps(va, vb), _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(mul + j),
                     _mm256_cvtps_ph(_mm256_mul_ps(va, vb), _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(div + j),
                     _mm256_cvtps_ph(_mm256_div_ps(va, vb), _MM_FROUND_TO_NEAREST_INT));
  }
}
#else
bool have_f16c() { return false; }
void f16c_pair_ops(std::uint32_t, const std::uint16_t*, std::size_t, std::uint16_t*, std::uint16_t*, std::uint16_t*,
                   std::uint16_t*) {}
#endif

}  // namespace

TEST_CASE(
    "fp16 + - * / over every 16th first operand x every second operand (all 2^32 pairs with MPSIM_EXHAUSTIVE_FULL=1), "
    "nearest-even, against float + F16C and the exact integer method",
    "[arith][exhaustive]") {
  // Every pair checked against the hardware method; every pair whose first operand is a multiple of 61
  // (and every pair where the hardware is missing) also against the exact integer method, which the
  // last test case cross-checks with Boost. The three agreeing on the overlap ties the methods together.
  // The suite checks 2^28 pairs per operation (every 16th first operand, the k-th of them offset by k mod
  // 16: every sign, exponent and residue of the low mantissa bits, +-0, +-inf, max finite and NaNs among
  // them; all second operands) to stay inside CI's time (every 4th took about 60 s of ./run test on the
  // 2-core machine); MPSIM_EXHAUSTIVE_FULL=1 (`./run test-full`) checks all 2^32 (about 190 s on two cores).
  const mpsim::Format& h = mpsim::fp16();
  const mpsim::Rounding rne;
  const auto dec = decode_table(h);
  const bool hw = have_f16c();
  if (!hw) std::printf("SKIPPED: no F16C: the exact integer method checks every pair instead\n");
  const auto t0 = std::chrono::steady_clock::now();
  enum { ADD, SUB, MUL, DIV, N, XADD = N, XSUB, XMUL, XDIV, N2 };
  const char* full = std::getenv("MPSIM_EXHAUSTIVE_FULL");
  const std::uint32_t step = stride(full && std::string(full) == "1" ? 1 : 16);
  std::vector<std::uint16_t> bs(1u << 16);
  for (std::uint32_t b = 0; b < bs.size(); ++b) bs[b] = static_cast<std::uint16_t>(b);
  const auto tallies = run_parallel((1u << 16) / step, N2, [&](std::uint32_t chunk, std::vector<Tally>& t) {
    const std::uint32_t a = chunk * step + chunk % step;
    const double da = dec[a];
    thread_local std::vector<std::uint16_t> hadd(1u << 16), hsub(1u << 16), hmul(1u << 16), hdiv(1u << 16);
    if (hw) f16c_pair_ops(a, bs.data(), bs.size(), hadd.data(), hsub.data(), hmul.data(), hdiv.data());
    const bool exact_too = !hw || chunk % 61 == 0;
    for (std::uint32_t b = 0; b < (1u << 16); ++b) {
      const double db = dec[b];
      const std::uint64_t add = mpsim::add_values(da, db, h, rne), sub = mpsim::sub_values(da, db, h, rne),
                          mul = mpsim::mul_values(da, db, h, rne), div = mpsim::div_values(da, db, h, rne);
      if (hw) {
        t[ADD].check(add, hadd[b], a, b);
        t[SUB].check(sub, hsub[b], a, b);
        t[MUL].check(mul, hmul[b], a, b);
        t[DIV].check(div, hdiv[b], a, b);
      }
      if (exact_too) {
        t[XADD].check(add, ref_add(a, b, false, kHalf, Mode::rne), a, b);
        t[XSUB].check(sub, ref_add(a, b, true, kHalf, Mode::rne), a, b);
        t[XMUL].check(mul, ref_mul(a, b, kHalf, Mode::rne), a, b);
        t[XDIV].check(div, ref_div(a, b, kHalf, Mode::rne), a, b);
      }
    }
  });
  std::printf("fp16 exhaustive pairs, nearest-even (%.1f s on %u threads):\n", seconds_since(t0), thread_count());
  const char* names[] = {"add (float + F16C)",   "sub (float + F16C)",   "mul (float + F16C)",
                         "div (float + F16C)",   "add (exact integers)", "sub (exact integers)",
                         "mul (exact integers)", "div (exact integers)"};
  for (int k = 0; k < N2; ++k) {
    tallies[k].report(names[k]);
    CHECK(tallies[k].mismatches == 0);
  }
  for (int k = 0; k < N; ++k) {
    if (hw) CHECK(tallies[k].checked == (std::uint64_t{1} << 32) / step);
    const std::uint64_t firsts = (1u << 16) / step;
    CHECK(tallies[N + k].checked == (hw ? (firsts + 60) / 61 : firsts) << 16);
  }
}

TEST_CASE("fp16 + - * / rounding down and toward zero on 2^27 sampled pairs each", "[arith][exhaustive]") {
  const mpsim::Format& h = mpsim::fp16();
  const auto rd = rounding(Mode::down), rz = rounding(Mode::rtz);
  const auto dec = decode_table(h);
  const auto t0 = std::chrono::steady_clock::now();
  enum { ADD, SUB, MUL, DIV, N };
  const std::uint32_t step = stride();
  const auto tallies = run_parallel((1u << 16) / step, N, [&](std::uint32_t chunk, std::vector<Tally>& t) {
    const std::uint32_t a = chunk * step;
    const double da = dec[a];
    for (std::uint32_t j = 0; j < 2048; ++j) {
      const auto b = static_cast<std::uint32_t>(mix((std::uint64_t{a} << 32) | j | (std::uint64_t{1} << 62)) & 0xffff);
      const double db = dec[b];
      t[ADD].check(mpsim::add_values(da, db, h, rd), ref_add(a, b, false, kHalf, Mode::down), a, b);
      t[SUB].check(mpsim::sub_values(da, db, h, rz), ref_add(a, b, true, kHalf, Mode::rtz), a, b);
      t[MUL].check(mpsim::mul_values(da, db, h, rd), ref_mul(a, b, kHalf, Mode::down), a, b);
      t[DIV].check(mpsim::div_values(da, db, h, rz), ref_div(a, b, kHalf, Mode::rtz), a, b);
    }
  });
  std::printf("fp16 sampled pairs, directed modes (%.1f s):\n", seconds_since(t0));
  const char* names[] = {"add (down)", "sub (toward zero)", "mul (down)", "div (toward zero)"};
  for (int k = 0; k < N; ++k) {
    tallies[k].report(names[k]);
    CHECK(tallies[k].checked == (std::uint64_t{1} << 27) / step);
    CHECK(tallies[k].mismatches == 0);
  }
}

TEST_CASE("bf16 + - * / on 2.5 * 10^8 sampled pairs each (every a, pseudo-random b), nearest-even",
          "[arith][exhaustive]") {
  const mpsim::Format& f = mpsim::bf16();
  const mpsim::Rounding rne;
  const auto dec = decode_table(f);
  // 65536 * 3815 > 2.5 * 10^8 pairs, each checked for + - * /: 10^9 checks in all (the 2^32 fp16 pairs
  // take most of this file's time budget).
  constexpr std::uint32_t kPerA = 3815;
  const auto t0 = std::chrono::steady_clock::now();
  enum { ADD, SUB, MUL, DIV, N };
  const std::uint32_t step = stride();
  const auto tallies = run_parallel((1u << 16) / step, N, [&](std::uint32_t chunk, std::vector<Tally>& t) {
    const std::uint32_t a = chunk * step;
    const double da = dec[a];
    for (std::uint32_t j = 0; j < kPerA; ++j) {
      const std::uint64_t h = mix((std::uint64_t{a} << 32) | j);
      const auto b = static_cast<std::uint32_t>(h & 0xffff);
      const double db = dec[b];
      t[ADD].check(mpsim::add_values(da, db, f, rne), ref_add(a, b, false, kBf16, Mode::rne), a, b);
      t[SUB].check(mpsim::sub_values(da, db, f, rne), ref_add(a, b, true, kBf16, Mode::rne), a, b);
      t[MUL].check(mpsim::mul_values(da, db, f, rne), ref_mul(a, b, kBf16, Mode::rne), a, b);
      t[DIV].check(mpsim::div_values(da, db, f, rne), ref_div(a, b, kBf16, Mode::rne), a, b);
    }
  });
  std::printf("bf16 sampled pairs, nearest-even (%.1f s):\n", seconds_since(t0));
  const char* names[] = {"add", "sub", "mul", "div"};
  for (int k = 0; k < N; ++k) {
    tallies[k].report(names[k]);
    CHECK(tallies[k].checked >= 250000000ull / step);
    CHECK(tallies[k].mismatches == 0);
  }
}

TEST_CASE("sqrt over every fp16 and bf16 value, nearest-even and toward zero", "[arith][exhaustive]") {
  for (const auto* pair : {&kHalf, &kBf16}) {
    const RefFormat& F = *pair;
    const mpsim::Format& f = &F == &kHalf ? mpsim::fp16() : mpsim::bf16();
    Tally rne, rtz;
    for (std::uint32_t a = 0; a < (1u << 16); ++a) {
      rne.check(mpsim::sqrt_bits(a, f), ref_sqrt(a, F, Mode::rne), a);
      rtz.check(mpsim::sqrt_bits(a, f, rounding(Mode::rtz)), ref_sqrt(a, F, Mode::rtz), a);
    }
    std::printf("%s sqrt, all values:\n", f.name.c_str());
    rne.report("sqrt (nearest-even)");
    rtz.report("sqrt (toward zero)");
    CHECK(rne.mismatches == 0);
    CHECK(rtz.mismatches == 0);
  }
}

TEST_CASE("fma on 10^8 triples, including the double-rounding cases", "[arith][exhaustive]") {
  const auto t0 = std::chrono::steady_clock::now();
  // (1) random fp16 and bf16 triples: the low 48 bits of a hash pick a, b, c.
  enum { H_RNE, H_RTZ, B_RNE, B_DOWN, DR_RNE, DR_RTZ, N };
  const mpsim::Format& h = mpsim::fp16();
  const mpsim::Format& bf = mpsim::bf16();
  const auto hdec = decode_table(h), bdec = decode_table(bf);
  constexpr std::uint32_t kChunks = 1000, kPerChunk = 17000;  // 1.7 * 10^7 per pass, 6 passes
  std::atomic<std::uint64_t> naive_would_fail{0};
  auto tallies = run_parallel(kChunks, N, [&](std::uint32_t chunk, std::vector<Tally>& t) {
    std::uint64_t naive_fail = 0;
    for (std::uint32_t j = 0; j < kPerChunk; ++j) {
      const std::uint64_t r = mix((std::uint64_t{chunk} << 32) | j);
      const auto a = static_cast<std::uint32_t>(r & 0xffff), b = static_cast<std::uint32_t>((r >> 16) & 0xffff),
                 c = static_cast<std::uint32_t>((r >> 32) & 0xffff);
      t[H_RNE].check(mpsim::fma_values(hdec[a], hdec[b], hdec[c], h), ref_fma(a, b, c, kHalf, Mode::rne), a, b, c);
      t[H_RTZ].check(mpsim::fma_values(hdec[a], hdec[b], hdec[c], h, rounding(Mode::rtz)),
                     ref_fma(a, b, c, kHalf, Mode::rtz), a, b, c);
      t[B_RNE].check(mpsim::fma_values(bdec[a], bdec[b], bdec[c], bf), ref_fma(a, b, c, kBf16, Mode::rne), a, b, c);
      t[B_DOWN].check(mpsim::fma_values(bdec[a], bdec[b], bdec[c], bf, rounding(Mode::down)),
                      ref_fma(a, b, c, kBf16, Mode::down), a, b, c);

      // (2) constructed double-rounding cases in bf16: a = m8 * 2^(ea-7) with m8 odd in [129, 255],
      // b = 1.5, so a*b = 3*m8 * 2^(ea-8) is odd with 9 bits (m8 <= 170: exactly a midpoint between two
      // bf16 numbers) or 10 bits; c = ±2^(ea-60-k) lies far below half a double ulp of a*b. The double
      // fma then returns the midpoint itself and a second rounding to bf16 goes to even, while the exact
      // sum lies strictly on c's side of it.
      const std::uint32_t m8 = 129 + 2 * static_cast<std::uint32_t>((r >> 48) % 64);  // odd, 8 bits, < 256
      const int ea = static_cast<int>((r >> 54) % 60) - 30;
      const double da = std::ldexp(static_cast<double>(m8), ea - 7);
      const double db = 1.5;
      // a * b = 3 * m8 * 2^(ea - 8): odd, 9 bits (a bf16 midpoint) or 10 bits.
      const int tiny_exp = ea - 60 - static_cast<int>((r >> 60) % 4);
      const double dc = ((r >> 63) ? -1.0 : 1.0) * std::ldexp(1.0, tiny_exp);
      const auto ua = static_cast<std::uint32_t>(mpsim::round_bits(da, bf));
      const auto ub = static_cast<std::uint32_t>(mpsim::round_bits(db, bf));
      const auto uc = static_cast<std::uint32_t>(mpsim::round_bits(dc, bf));
      if (mpsim::decode(ua, bf) == da && mpsim::decode(uc, bf) == dc) {
        t[DR_RNE].check(mpsim::fma_values(da, db, dc, bf), ref_fma(ua, ub, uc, kBf16, Mode::rne), ua, ub, uc);
        t[DR_RTZ].check(mpsim::fma_values(da, db, dc, bf, rounding(Mode::rtz)), ref_fma(ua, ub, uc, kBf16, Mode::rtz),
                        ua, ub, uc);
        // Would the naive double fma + second rounding be wrong here?
        const auto naive = mpsim::round_bits(std::fma(da, db, dc), bf);
        if (naive != ref_fma(ua, ub, uc, kBf16, Mode::rne)) ++naive_fail;
      }
    }
    naive_would_fail += naive_fail;
  });
  std::printf("fma triples (%.1f s):\n", seconds_since(t0));
  const char* names[] = {"fp16 fma (nearest-even)",          "fp16 fma (toward zero)",
                         "bf16 fma (nearest-even)",          "bf16 fma (down)",
                         "bf16 double-rounding cases (rne)", "bf16 double-rounding cases (rtz)"};
  std::uint64_t total = 0;
  for (int k = 0; k < N; ++k) {
    tallies[k].report(names[k]);
    total += tallies[k].checked;
    CHECK(tallies[k].mismatches == 0);
  }
  std::printf(
      "  total fma checks %llu; on the constructed cases a double fma rounded again to bf16 is wrong "
      "%llu times (the cases do exercise double rounding)\n",
      static_cast<unsigned long long>(total), static_cast<unsigned long long>(naive_would_fail.load()));
  CHECK(total >= 100000000ull);
  CHECK(naive_would_fail.load() > 1000);
}

TEST_CASE("the exact integer method agrees with Boost.Multiprecision on 10^7 sampled cases", "[arith][exhaustive]") {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr std::uint32_t kChunks = 200, kPerChunk = 60000;  // 1.2 * 10^7 drawn, >= 10^7 checked
  std::atomic<std::uint64_t> skipped{0};
  const auto tallies = run_parallel(kChunks, 2, [&](std::uint32_t chunk, std::vector<Tally>& t) {
    std::uint64_t skip = 0;
    for (std::uint32_t j = 0; j < kPerChunk; ++j) {
      const std::uint64_t r = mix((std::uint64_t{chunk} << 32) | j | (std::uint64_t{1} << 63));
      const RefFormat& F = (r >> 63) ? kBf16 : kHalf;
      const auto op = static_cast<Op>((r >> 48) % 5);
      const auto a = static_cast<std::uint32_t>(r & 0xffff), b = static_cast<std::uint32_t>((r >> 16) & 0xffff),
                 c = static_cast<std::uint32_t>((r >> 32) & 0xffff);
      const Num x = ref_decode(a, F), y = ref_decode(b, F), z = ref_decode(c, F);
      const auto plain = [](const Num& n) { return !n.nan && !n.inf && !n.zero; };
      if (!plain(x) || !plain(y) || !plain(z) || (op == Op::sqrt && x.neg)) {
        ++skip;
        continue;
      }
      std::uint32_t want = 0;
      switch (op) {
        case Op::add: want = ref_add(a, b, false, F, Mode::rne); break;
        case Op::mul: want = ref_mul(a, b, F, Mode::rne); break;
        case Op::div: want = ref_div(a, b, F, Mode::rne); break;
        case Op::fma: want = ref_fma(a, b, c, F, Mode::rne); break;
        case Op::sqrt: want = ref_sqrt(a, F, Mode::rne); break;
      }
      // An exact zero sum is a sign rule, not a rounding: checked by the unit tests.
      if ((op == Op::add || op == Op::fma) && (want & ~F.sign()) == 0) {
        ++skip;
        continue;
      }
      t[0].check(boost_confirms(op, a, b, c, want, F) ? 1 : 0, 1, a, b, c);
      // Negative control, one sample in eight: a neighbouring encoding must be refused.
      if ((j & 7) == 0) t[1].check(boost_confirms(op, a, b, c, want ^ 1u, F) ? 1 : 0, 0, a, b, c);
    }
    skipped += skip;
  });
  std::printf(
      "Boost.Multiprecision cross-check of the exact integer method (%.1f s, %llu samples with a zero, inf "
      "or NaN operand skipped):\n",
      seconds_since(t0), static_cast<unsigned long long>(skipped.load()));
  tallies[0].report("fp16/bf16 add mul div fma sqrt");
  tallies[1].report("neighbour refused (negative control)");
  CHECK(tallies[1].checked > 1000000ull);
  CHECK(tallies[1].mismatches == 0);
  CHECK(tallies[0].checked >= 10000000ull);
  CHECK(tallies[0].mismatches == 0);
}
