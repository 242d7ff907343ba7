#include "mpsim/mma/dot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/hd/arith.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/mma/detail/block_avx2.hpp"
#include "mpsim/parallel.hpp"

namespace mpsim::mma {
namespace {

// fp32's smallest normal exponent: the accumulator register c is decoded as fp32 whatever the output
// (AlignSignficand in Generic_BFMA_TC.m clamps c's exponent at -126).
constexpr int kAccumulatorEmin = -126;
constexpr int kAccumulatorFrac = 23;

enum class Kind : std::uint8_t { zero, finite, inf, nan };

// An operand split once: |x| = mag * 2^(exp - frac), exp = max(floor(log2|x|), emin) (the alignment
// exponent), mag < 2^(frac + 1).
struct Operand {
  std::uint64_t mag = 0;
  int exp = 0;
  Kind kind = Kind::zero;
  bool neg = false;
};

Operand split(double x, int emin, int frac, bool subnormals) {
  Operand o;
  o.neg = std::signbit(x);
  if (std::isnan(x)) {
    o.kind = Kind::nan;
    return o;
  }
  if (std::isinf(x)) {
    o.kind = Kind::inf;
    return o;
  }
  if (x == 0) return o;
  int e2 = 0;
  std::frexp(x, &e2);  // |x| = f * 2^e2, f in [0.5, 1)
  const int e = std::max(e2 - 1, emin);
  if (e2 - 1 < emin && !subnormals) return o;  // a subnormal input read as zero
  o.kind = Kind::finite;
  o.exp = e;
  o.mag = static_cast<std::uint64_t>(std::ldexp(std::fabs(x), frac - e));  // exact: x holds frac bits below 2^e
  return o;
}

// A term ready for alignment: |value| = mag * 2^(exp - frac).
struct Term {
  std::uint64_t mag;
  int exp;
  int frac;
  bool neg;
};

// floor(mag * 2^shift), with the lost bits ORed into bit 0 when `sticky`.
std::uint64_t align_term(std::uint64_t mag, int shift, bool sticky) {
  if (shift >= 0) return mag << shift;
  if (shift <= -64) return (sticky && mag != 0) ? 1 : 0;
  const std::uint64_t kept = mag >> -shift;
  if (sticky && (kept << -shift) != mag) return kept | 1;
  return kept;
}

// S * 2^ue rounded to `result_bits` fraction bits within out's exponent range: |value| = R * 2^q, or inf
// beyond the range; a subnormal result is zero when out_subnormals is false. Not round_bits: S holds up to 63
// significant bits (a double would round it first), and result_bits is the unit's internal width (e.g. the 25
// bits of the fp16 path), which no Format names.
struct Rounded {
  std::uint64_t R = 0;
  int q = 0;
  bool neg = false;
  bool inf = false;
};
Rounded round_sum_parts(std::int64_t S, int ue, int result_bits, const Format& out, FinalRounding mode,
                        bool out_subnormals) {
  Rounded r;
  if (S == 0) return r;
  r.neg = S < 0;
  const std::uint64_t M = r.neg ? 0 - static_cast<std::uint64_t>(S) : static_cast<std::uint64_t>(S);
  const int e = 63 - std::countl_zero(M) + ue;
  r.q = std::max(e, out.emin) - result_bits;  // the exponent of the result's last bit
  const int sh = r.q - ue;
  if (sh <= 0) {
    r.R = M << -sh;
  } else if (sh < 64) {  // |S| < 2^41 (validate: align_bits <= 40), so sh >= 64 leaves nothing
    r.R = M >> sh;
    if (mode == FinalRounding::nearest_even) {
      const std::uint64_t rem = M - (r.R << sh);
      const std::uint64_t half = std::uint64_t{1} << (sh - 1);
      if (rem > half || (rem == half && (r.R & 1))) ++r.R;
    }
  }
  if (r.R != 0) {
    const int lead = 63 - std::countl_zero(r.R) + r.q;
    if (lead >= out.emax + 1) r.inf = true;
    else if (!out_subnormals && lead < out.emin) r.R = 0;
  }
  return r;
}

double round_sum(std::int64_t S, int ue, int result_bits, const Format& out, FinalRounding mode, bool out_subnormals) {
  const Rounded r = round_sum_parts(S, ue, result_bits, out, mode, out_subnormals);
  const double v = r.inf ? std::numeric_limits<double>::infinity() : std::ldexp(static_cast<double>(r.R), r.q);
  return r.neg ? -v : v;
}

// The accumulator operand of a rounded block result, as split(round_sum(...)) gives it, without the double.
Operand to_operand(const Rounded& r) {
  Operand o;
  o.neg = r.neg;
  if (r.inf) {
    o.kind = Kind::inf;
    return o;
  }
  if (r.R == 0) return o;
  o.kind = Kind::finite;
  o.exp = std::max(63 - std::countl_zero(r.R) + r.q, kAccumulatorEmin);
  o.mag = r.R << (r.q - o.exp + kAccumulatorFrac);  // exact: R has at most 24 significant bits
  return o;
}

double to_double(const Operand& o) {
  double v = 0.0;
  if (o.kind == Kind::inf) v = std::numeric_limits<double>::infinity();
  else if (o.kind == Kind::nan) v = std::numeric_limits<double>::quiet_NaN();
  else if (o.kind == Kind::finite) v = std::ldexp(static_cast<double>(o.mag), o.exp - kAccumulatorFrac);
  return o.neg ? -v : v;
}

// Special operands of one block (products a_k b_k and c): NaN, an infinity, or none (finite).
struct Special {
  bool any = false;
  double value = 0;
};
Special block_special(const Operand* a, const Operand* b, int n, const Operand& c) {
  bool nan = c.kind == Kind::nan, pos_inf = c.kind == Kind::inf && !c.neg, neg_inf = c.kind == Kind::inf && c.neg;
  for (int k = 0; k < n; ++k) {
    if (a[k].kind == Kind::nan || b[k].kind == Kind::nan) {
      nan = true;
      continue;
    }
    const bool ia = a[k].kind == Kind::inf, ib = b[k].kind == Kind::inf;
    if (!ia && !ib) continue;
    if (a[k].kind == Kind::zero || b[k].kind == Kind::zero) {
      nan = true;
      continue;
    }  // inf * 0
    ((a[k].neg != b[k].neg) ? neg_inf : pos_inf) = true;
  }
  if (nan || (pos_inf && neg_inf)) return {true, std::numeric_limits<double>::quiet_NaN()};
  if (pos_inf) return {true, std::numeric_limits<double>::infinity()};
  if (neg_inf) return {true, -std::numeric_limits<double>::infinity()};
  return {};
}

// One block FMA on finite operands (block_special said none is special): the model of unit.hpp.
double block_fma(const BlockFma& p, const Operand* a, const Operand* b, int n, int in_frac, const Operand& c,
                 const Format& out, bool out_subnormals) {
  Term terms[257];
  int count = 0;
  for (int k = 0; k < n; ++k) {
    if (a[k].kind != Kind::finite || b[k].kind != Kind::finite) continue;  // zero products drop out
    terms[count++] = {a[k].mag * b[k].mag, a[k].exp + b[k].exp, 2 * in_frac, a[k].neg != b[k].neg};
  }
  if (c.kind == Kind::finite) terms[count++] = {c.mag, c.exp, kAccumulatorFrac, c.neg};
  if (count == 0) return 0.0;
  int E = p.exponent_floor;
  for (int i = 0; i < count; ++i) E = std::max(E, terms[i].exp);
  std::int64_t S = 0;
  for (int i = 0; i < count; ++i) {
    const auto t =
        static_cast<std::int64_t>(align_term(terms[i].mag, terms[i].exp - terms[i].frac - E + p.align_bits, p.sticky));
    S += terms[i].neg ? -t : t;
  }
  return round_sum(S, E - p.align_bits, p.result_bits, out, p.rounding, out_subnormals);
}

// x + y exactly, rounded once to `out` (both are values of fp32 or narrower): two terms with three bits
// below fp32's and a sticky bit round exactly (a guard, a round and a sticky bit, as any IEEE adder).
double add_rounded(double x, double y, const Format& out, FinalRounding mode, bool out_subnormals) {
  const Operand ox = split(x, kAccumulatorEmin, kAccumulatorFrac, true);
  const Operand oy = split(y, kAccumulatorEmin, kAccumulatorFrac, true);
  if (ox.kind == Kind::nan || oy.kind == Kind::nan ||
      (ox.kind == Kind::inf && oy.kind == Kind::inf && ox.neg != oy.neg))
    return std::numeric_limits<double>::quiet_NaN();
  if (ox.kind == Kind::inf) return x;
  if (oy.kind == Kind::inf) return y;
  if (ox.kind == Kind::zero && oy.kind == Kind::zero) return (std::signbit(x) && std::signbit(y)) ? -0.0 : 0.0;
  constexpr int align_bits = kAccumulatorFrac + 5;
  int E = std::numeric_limits<int>::min();
  for (const Operand* o : {&ox, &oy})
    if (o->kind == Kind::finite) E = std::max(E, o->exp);
  std::int64_t S = 0;
  for (const Operand* o : {&ox, &oy}) {
    if (o->kind != Kind::finite) continue;
    const auto v = static_cast<std::int64_t>(align_term(o->mag, o->exp - kAccumulatorFrac - E + align_bits, true));
    S += o->neg ? -v : v;
  }
  return round_sum(S, E - align_bits, out.man_bits, out, mode, out_subnormals);
}

// ---- the CDNA block structures (unit.hpp, BlockStructure; Generic_BFMA_TC.m at commit 0d3049f) -------------

// A product's exact value as a double: |a b| < 2^(2 emax + 2) and its bits lie above 2^(2 emin - 2 frac), both
// inside double's range for every input format (bf16: 2^-266 .. 2^256).
double product_value(const Operand& a, const Operand& b, int in_frac) {
  if (a.kind != Kind::finite || b.kind != Kind::finite) return 0.0;
  const double v = std::ldexp(static_cast<double>(a.mag * b.mag), a.exp + b.exp - 2 * in_frac);
  return a.neg != b.neg ? -v : v;
}

// prd_limit (Generic_BFMA_TC.m lines 92-104): a product of magnitude 2^128 or more makes the block ±inf, NaN
// when such products of both signs meet. Returns 0 when none does.
double product_limit(const Operand* a, const Operand* b, int n, int in_frac) {
  bool pos = false, neg = false;
  for (int k = 0; k < n; ++k) {
    const double p = product_value(a[k], b[k], in_frac);
    if (p >= 0x1p128) pos = true;
    if (p <= -0x1p128) neg = true;
  }
  if (pos && neg) return std::numeric_limits<double>::quiet_NaN();
  if (pos || neg) return pos ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  return 0.0;
}

// A nonoverlapping expansion (Shewchuk, "Adaptive precision floating-point arithmetic and fast robust geometric
// predicates", DCG 18, 1997: Grow-Expansion with zero elimination, Fig. 6): its components sum exactly to the
// value held, smallest first; the sign of the value is the sign of the largest non-zero component.
struct Expansion {
  double c[40];
  int n = 0;
  void add(double b) {  // exact: Two-Sum of every component (no overflow: every value here is below 2^260)
    double q = b;
    int m = 0;
    for (int i = 0; i < n; ++i) {
      const double s = q + c[i];
      const double bv = s - q;
      const double err = (q - (s - bv)) + (c[i] - bv);
      if (err != 0) c[m++] = err;
      q = s;
    }
    c[m++] = q;
    n = m;
  }
  int sign() const {
    for (int i = n - 1; i >= 0; --i)
      if (c[i] != 0) return c[i] > 0 ? 1 : -1;
    return 0;
  }
};

// The exact value of `e` as a double rounded to odd (RO53; format/hd/arith.hpp): a double s with the value
// strictly between s and its neighbour on the value's side (found from the components' double sum, which lies
// within a few doubles of it, by comparing with neighbours: each comparison is the sign of an exact expansion),
// then hd::round_to_odd. The values here lie between 2^-300 and 2^260: no double subnormal, no overflow.
double expansion_ro53(const Expansion& e) {
  double s = 0.0;
  for (int i = 0; i < e.n; ++i) s += e.c[i];
  const auto side = [&](double m) {  // sign(value - m)
    Expansion t = e;
    t.add(-m);
    return t.sign();
  };
  int d = side(s);
  while (d != 0) {
    const double next =
        std::nextafter(s, d > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity());
    const int d_next = side(next);
    if (d_next == 0) return next;  // the value is that double
    if (d_next != d) break;        // the value lies strictly between s and next
    s = next;
  }
  return hd::round_to_odd(s, d);
}

// The exact value of `e` rounded once to fp32 (RO53, then round_bits: one correct rounding, Boldo & Melquiond
// 2005), nearest-even or toward zero. Beyond fp32's range as nearest-even rounds it, ±inf in both modes (the
// published models compute the nearest-even result first, as this did before); an exact zero sum is +0.
double round_expansion_fp32(const Expansion& e, FinalRounding mode) {
  const double x = expansion_ro53(e);
  const double nearest = decode(round_bits(x, fp32()), fp32());
  if (std::isinf(nearest) || mode == FinalRounding::nearest_even) return nearest == 0 ? 0.0 : nearest;
  const double f = decode(round_bits(x, fp32(), Rounding::of(RoundingMode::toward_zero)), fp32());
  return f == 0 ? 0.0 : f;
}

double block_exact(const BlockFma& p, const Operand* a, const Operand* b, int n, int in_frac, const Operand& c) {
  Expansion e;
  for (int k = 0; k < n; ++k) {
    const double p = product_value(a[k], b[k], in_frac);
    if (p != 0) e.add(p);
  }
  if (c.kind == Kind::finite) e.add(to_double(c));
  return round_expansion_fp32(e, p.rounding);
}

// CDNA2 (MI210MC.m, pws_main): each product rounded to fp32, the block of `products` (a power of two, zero-padded
// as GEMM.m pads K) summed as a pairwise tree of fp32 additions, then c + that sum; each result below fp32's
// normal range is flushed (out_subnormals = 0: `d * (abs(d) >= min_out)`, which keeps the sign).
double block_pairwise(const BlockFma& p, const Operand* a, const Operand* b, int n, int in_frac, const Operand& c,
                      bool out_subnormals) {
  const double lim = product_limit(a, b, n, in_frac);
  if (lim != 0) return lim;
  constexpr float kMin = std::numeric_limits<float>::min();
  auto flush = [&](float x) { return (!out_subnormals && std::fabs(x) < kMin) ? x * 0.0f : x; };
  float v[256];
  for (int k = 0; k < p.products; ++k) {
    // single(a .* b): the exact product rounded to fp32, then products below the normal range set to zero.
    const float q = k < n ? static_cast<float>(product_value(a[k], b[k], in_frac)) : 0.0f;
    v[k] = (!out_subnormals && std::fabs(q) < kMin) ? 0.0f : q;
  }
  // pws_fma: d = sum(first half); d = d + sum(second half), each addition one fp32 rounding (MATLAB's fma(d, 1, x)).
  for (int width = 1; width < p.products; width *= 2)
    for (int k = 0; k + width < p.products; k += 2 * width) v[k] = flush(v[k] + v[k + width]);
  const float cc = flush(static_cast<float>(to_double(c)));  // c: an fp32 value; flushed first (lines 69-71)
  return flush(cc + v[0]);
}

// AddTwoNonNormSums (Generic_BFMA_TC.m lines 511-580) on two aligned sums |S| * 2^(E - 23 - neab): the one with
// the smaller exponent is shifted to the other's with round-toward-minus-infinity (armode 'rd': a negative sum
// that loses bits grows by one), after both gain `eab1` bits when the first is the smaller; with `exp_check`, a
// second operand more than 25 binades below is truncated instead. Returns the signed sum; E and neab updated.
std::int64_t add_two(int E1, std::int64_t S1, int E2, std::int64_t S2, int eab1, bool exp_check, int& E, int& neab) {
  E = std::max(E1, E2);
  int shift = std::abs(E1 - E2);
  if (shift > 532) shift = 0;  // line 526: one side is an empty group (exponent -1024)
  const bool n1 = S1 < 0, n2 = S2 < 0;
  std::uint64_t m1 = n1 ? 0 - static_cast<std::uint64_t>(S1) : static_cast<std::uint64_t>(S1);
  std::uint64_t m2 = n2 ? 0 - static_cast<std::uint64_t>(S2) : static_cast<std::uint64_t>(S2);
  auto floor_shift = [&](std::uint64_t m, bool neg, bool adjust) {
    const std::uint64_t kept = shift >= 64 ? 0 : m >> shift;
    const bool lost = shift >= 64 ? m != 0 : (kept << shift) != m;
    return kept + ((adjust && lost && neg) ? 1 : 0);
  };
  if (E1 < E) {
    neab += eab1;
    m1 <<= eab1;
    m2 <<= eab1;
    m1 = floor_shift(m1, n1, true);
  } else if (E2 < E) {
    m2 = floor_shift(m2, n2, !(exp_check && E2 < E - 25));
  }
  return (n1 ? -static_cast<std::int64_t>(m1) : static_cast<std::int64_t>(m1)) +
         (n2 ? -static_cast<std::int64_t>(m2) : static_cast<std::int64_t>(m2));
}

// GlobalAlignmentSum over products k = first, first + step, ... < n (AlignSignficand, lines 1040-1127): each
// product's significand (in [0, 4): products are not normalised, denorm_prd = 1) with align_bits - 23 extra bits,
// shifted right to the largest exponent (shifts beyond 31 leave nothing), the signed sum. `zeros_count`: zero
// products take part with exponent -1024 (odd_even_grouping, line 135); otherwise they drop out, and a group of
// none returns false.
bool group_sum(const BlockFma& p, const Operand* a, const Operand* b, int n, int in_frac, int first, int step,
               bool zeros_count, int& E, std::int64_t& S) {
  E = std::numeric_limits<int>::min();
  for (int k = first; k < p.products; k += step) {
    const bool finite = k < n && a[k].kind == Kind::finite && b[k].kind == Kind::finite;
    if (finite) E = std::max(E, a[k].exp + b[k].exp);
    else if (zeros_count) E = std::max(E, -1024);
  }
  if (E == std::numeric_limits<int>::min()) return false;
  E = std::max(E, p.exponent_floor);
  S = 0;
  const int up = p.align_bits - 2 * in_frac;  // |product| * 2^(align_bits - 2 frac): an integer (align_bits >= 23)
  for (int k = first; k < n && k < p.products; k += step) {
    if (a[k].kind != Kind::finite || b[k].kind != Kind::finite) continue;
    const int shift = E - (a[k].exp + b[k].exp);
    if (shift > 31) continue;
    const auto t = static_cast<std::int64_t>((a[k].mag * b[k].mag << up) >> shift);
    S += a[k].neg != b[k].neg ? -t : t;
  }
  return true;
}

// CDNA3 (MI300MC.m): late_accumulator (fp16, bf16, tf32) and odd_even (fp8) blocks.
double block_late(const BlockFma& p, const Operand* a, const Operand* b, int n, int in_frac, const Operand& c,
                  const Format& out, bool out_subnormals) {
  const double lim = product_limit(a, b, n, in_frac);
  if (lim != 0) return lim;
  int neab = p.align_bits - 23;
  int E = 0;
  std::int64_t S = 0;
  if (p.structure == BlockStructure::odd_even) {
    int Ee = 0, Eo = 0;
    std::int64_t Se = 0, So = 0;
    group_sum(p, a, b, n, in_frac, 0, 2, true, Ee, Se);  // MATLAB's prod(1:2:end): positions 0, 2, ...
    group_sum(p, a, b, n, in_frac, 1, 2, true, Eo, So);
    S = add_two(Ee, Se, Eo, So, 0, false, E, neab);
  } else if (!group_sum(p, a, b, n, in_frac, 0, 1, false, E, S)) {
    return c.kind == Kind::finite ? to_double(c) : 0.0;  // no non-zero product: d = c (exactly; 0 when c is)
  }
  // c as AddTwoNonNormSums takes it (lines 189-205): its fp32 significand with 23 + neab fraction bits, its
  // exponent clamped at -126; c = 0 sits at exponent -126 (c_min_exp_limit = 1).
  std::int64_t Sc = 0;
  int Ec = kAccumulatorEmin;
  if (c.kind == Kind::finite) {
    Ec = c.exp;
    Sc = static_cast<std::int64_t>(c.mag << neab);
    if (c.neg) Sc = -Sc;
  }
  int Ed = 0;
  S = add_two(E, S, Ec, Sc, 7, p.structure == BlockStructure::odd_even, Ed, neab);  // eab_1 = 31 - 24 (line 211)
  return round_sum(S, Ed - 23 - neab, out.man_bits, out, FinalRounding::nearest_even, out_subnormals);
}

// One block on finite operands, by the unit's structure.
double block_sum(const MatrixUnit& u, const Operand* a, const Operand* b, int n, const Operand& c, const Format& out) {
  const int in_frac = u.input.man_bits;
  switch (u.block.structure) {
    case BlockStructure::aligned: return block_fma(u.block, a, b, n, in_frac, c, out, u.output_subnormals);
    case BlockStructure::exact: return block_exact(u.block, a, b, n, in_frac, c);
    case BlockStructure::pairwise_fp32: return block_pairwise(u.block, a, b, n, in_frac, c, u.output_subnormals);
    case BlockStructure::late_accumulator:
    case BlockStructure::odd_even: return block_late(u.block, a, b, n, in_frac, c, out, u.output_subnormals);
  }
  return 0.0;
}

// One dot product over pre-split operands (a, b: K each; the caller pads nothing).
double dot_split(const MatrixUnit& u, const Operand* a, const Operand* b, std::size_t K, double c) {
  auto run_chain = [&](std::size_t begin, std::size_t end, double acc, const Format& out, const BlockFma& p,
                       const int* order) {
    // Blocks of p.products over [begin, end); with `order`, over one instruction's positions in that order
    // (positions past `end` are the zero padding of a short last instruction).
    Operand ga[256], gb[256];
    const std::size_t span = order ? static_cast<std::size_t>(u.instruction.k) : end - begin;
    for (std::size_t j0 = 0; j0 < span; j0 += static_cast<std::size_t>(p.products)) {
      int m = 0;
      for (std::size_t j = j0; j < j0 + static_cast<std::size_t>(p.products); ++j) {
        const std::size_t k = begin + (order ? static_cast<std::size_t>(order[j]) : j);
        if (k < end) {
          ga[m] = a[k];
          gb[m] = b[k];
          ++m;
        }
      }
      const Operand oc = split(acc, kAccumulatorEmin, kAccumulatorFrac, true);
      const Special s = block_special(ga, gb, m, oc);
      acc = s.any ? s.value : block_sum(u, ga, gb, m, oc, out);  // p is u.block: block_sum's dispatch
    }
    return acc;
  };
  auto chain = [&](std::size_t begin, std::size_t end, double acc) {
    if (u.instruction.k == 0) return run_chain(begin, end, acc, u.output, u.block, nullptr);
    // Each instruction: its products in `groups` interleaved blocks chained from zero, then + C once.
    const int ik = u.instruction.k;
    std::vector<int> order;
    for (int g = 0; g < u.instruction.groups; ++g)
      for (int k = 0; k < ik; ++k)
        if ((k / u.instruction.interleave) % u.instruction.groups == g) order.push_back(k);
    for (std::size_t i0 = begin; i0 < end; i0 += static_cast<std::size_t>(ik)) {
      const std::size_t i1 = std::min(end, i0 + static_cast<std::size_t>(ik));
      const double partial = run_chain(i0, i1, 0.0, u.instruction.block_output, u.block, order.data());
      acc = add_rounded(acc, partial, u.output, u.instruction.end_rounding, u.output_subnormals);
    }
    return acc;
  };
  if (u.promote_every <= 0) return chain(0, K, c);
  // Split accumulation: each chunk of promote_every products from zero, added to an fp32 accumulator (RNE).
  double acc = c;
  for (std::size_t k0 = 0; k0 < K; k0 += static_cast<std::size_t>(u.promote_every)) {
    const std::size_t k1 = std::min(K, k0 + static_cast<std::size_t>(u.promote_every));
    acc = add_rounded(acc, chain(k0, k1, 0.0), u.output, FinalRounding::nearest_even, u.output_subnormals);
  }
  return acc;
}

// An element of A or B; a value outside the input format is refused (the callers that take arbitrary values,
// `mpsim gemm` and mpsim.matmul, round them first with round_to_format).
Operand split_input(const MatrixUnit& u, double x) {
  // A value of the format held as a normal double (every one, but for subnormals read as zero): its fields read
  // from the bits, what split() computes with frexp and ldexp (the decoding of gemm's A at every call).
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const int be = static_cast<int>((bits >> 52) & 0x7ff);
  const int e2 = be - 1023;
  if (be != 0 && be != 0x7ff && (e2 >= u.input.emin || u.input_subnormals)) {
    const std::uint64_t sig = (bits & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52);
    const int e = std::max(e2, u.input.emin);
    const int drop = 52 - u.input.man_bits + (e - e2);  // bits below the format's last one: zero if x is a value
    if (drop < 53 && (sig & ((std::uint64_t{1} << drop) - 1)) == 0 && std::fabs(x) <= u.input.max_finite) {
      Operand o;
      o.neg = (bits >> 63) != 0;
      o.kind = Kind::finite;
      o.exp = e;
      o.mag = sig >> drop;
      return o;
    }
  }
  const Operand o = split(x, u.input.emin, u.input.man_bits, u.input_subnormals);
  const bool exact =
      o.kind != Kind::finite || (std::ldexp(static_cast<double>(o.mag), o.exp - u.input.man_bits) == std::fabs(x) &&
                                 std::fabs(x) <= u.input.max_finite);
  if (!exact || (o.kind == Kind::inf && !u.input.has_inf))
    throw Error(
        fmt::format("mma: {} is not a {} value (A and B hold values of the unit's input format: round them "
                    "first, mma::round_to_format)",
                    x, u.input.name));
  return o;
}

// ---- the integer GEMM path ----------------------------------------------------------------------------
// Operands decoded once into signed integer significands and exponents (structure of arrays), K padded with
// zeros to whole instructions/blocks and, for split instructions, permuted so that each group's products lie
// together. A block is then: exponents added, their maximum, each |product| shifted into a 32-bit lane and
// truncated, the lanes summed (the compiler vectorises these loops), c added in 64 bits, one round_sum.
// Equal to dot_split bit for bit (tests/mma/reference_test compares gemm with gemm_scalar).
constexpr std::int32_t kZeroExp = -(1 << 20);  // the exponent of a zero operand: its products never set E

struct Decoded {
  std::vector<std::int32_t> sig;      // signed significand (|sig| < 2^11)
  std::vector<std::int32_t> exp;      // alignment exponent, kZeroExp for zero
  std::vector<std::uint8_t> special;  // per row: holds a NaN or inf
};

// Whether the integer path holds this unit exactly: no sticky, products aligned by left shifts, and a
// block's lanes summing inside int32.
bool fast_path_fits(const MatrixUnit& u) {
  const int lshift = u.block.align_bits - 2 * u.input.man_bits;
  if (u.block.structure != BlockStructure::aligned) return false;  // the CDNA structures: the scalar path
  if (u.block.sticky || lshift < 0 || (u.promote_every && u.instruction.k)) return false;
  // |product| < 2^(2 * man_bits + 2), shifted: < 2^(align_bits + 2); a block of them must stay below 2^31.
  return static_cast<double>(u.block.products) * std::ldexp(1.0, u.block.align_bits + 2) <= std::ldexp(1.0, 31);
}

// Rows of `rows` vectors of K values (row r, element k at get(r, k)), decoded into Kp slots in `order`.
template <class Get>
Decoded decode_rows(const MatrixUnit& u, std::size_t rows, std::size_t K, std::size_t Kp, const std::vector<int>& order,
                    std::size_t period, Get get) {
  Decoded d;
  d.sig.assign(rows * Kp, 0);
  d.exp.assign(rows * Kp, kZeroExp);
  d.special.assign(rows, 0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t slot = 0; slot < Kp; ++slot) {
      const std::size_t k =
          order.empty() ? slot : slot / period * period + static_cast<std::size_t>(order[slot % period]);
      if (k >= K) continue;
      const Operand o = split_input(u, get(r, k));
      if (o.kind == Kind::nan || o.kind == Kind::inf) d.special[r] = 1;
      if (o.kind != Kind::finite) continue;
      d.sig[r * Kp + slot] = o.neg ? -static_cast<std::int32_t>(o.mag) : static_cast<std::int32_t>(o.mag);
      d.exp[r * Kp + slot] = o.exp;
    }
  return d;
}

// One block of n products (finite operands) plus acc (finite), as block_fma computes it.
// N > 0: the block size known at compile time (the unrolled, vectorised kernels); N == 0: n at run time.
template <int N>
Operand fast_block(const BlockFma& p, int lshift, const std::int32_t* sa, const std::int32_t* ea,
                   const std::int32_t* sb, const std::int32_t* eb, int n_runtime, const Operand& c, const Format& out,
                   bool out_subnormals) {
  const int n = N > 0 ? N : n_runtime;
  std::int32_t E = p.exponent_floor;
  if (c.kind == Kind::finite) E = std::max(E, c.exp);
  std::int32_t s32 = 0;
  static const bool avx2 = cpu_features().avx2;
  if (N % 8 == 0 && N > 0 && avx2) {
    E = detail::block_lanes_avx2(sa, ea, sb, eb, n, E, lshift, &s32);
  } else {
    E = detail::block_lanes_scalar(sa, ea, sb, eb, n, E, lshift, &s32);
  }
  std::int64_t S = s32;
  if (c.kind == Kind::finite) {
    const auto t = static_cast<std::int64_t>(align_term(c.mag, c.exp - kAccumulatorFrac - E + p.align_bits, false));
    S += c.neg ? -t : t;
  }
  return to_operand(round_sum_parts(S, E - p.align_bits, p.result_bits, out, p.rounding, out_subnormals));
}

// The chain of blocks over decoded slots [s0, s1) (whole blocks), as dot_split's chain.
double fast_chain(const MatrixUnit& u, int lshift, const Decoded& A, std::size_t ia, const Decoded& B, std::size_t jb,
                  std::size_t Kp, std::size_t s0, std::size_t s1, double acc) {
  const std::int32_t* sa = A.sig.data() + ia * Kp;
  const std::int32_t* ea = A.exp.data() + ia * Kp;
  const std::int32_t* sb = B.sig.data() + jb * Kp;
  const std::int32_t* eb = B.exp.data() + jb * Kp;
  const auto n = static_cast<std::size_t>(u.block.products);
  auto block = [&](std::size_t k0, const Operand& c, const Format& out) {
    switch (n) {
      case 4: return fast_block<4>(u.block, lshift, sa + k0, ea + k0, sb + k0, eb + k0, 4, c, out, u.output_subnormals);
      case 8: return fast_block<8>(u.block, lshift, sa + k0, ea + k0, sb + k0, eb + k0, 8, c, out, u.output_subnormals);
      case 16:
        return fast_block<16>(u.block, lshift, sa + k0, ea + k0, sb + k0, eb + k0, 16, c, out, u.output_subnormals);
      case 32:
        return fast_block<32>(u.block, lshift, sa + k0, ea + k0, sb + k0, eb + k0, 32, c, out, u.output_subnormals);
      default:
        return fast_block<0>(u.block, lshift, sa + k0, ea + k0, sb + k0, eb + k0, static_cast<int>(n), c, out,
                             u.output_subnormals);
    }
  };
  // The accumulator travels between blocks as an operand (its bits), not as a double.
  if (u.instruction.k == 0) {
    Operand c = split(acc, kAccumulatorEmin, kAccumulatorFrac, true);
    for (std::size_t k0 = s0; k0 < s1; k0 += n) {
      if (c.kind == Kind::inf || c.kind == Kind::nan) break;  // stays inf (block_special: c inf, products finite)
      c = block(k0, c, u.output);
    }
    return to_double(c);
  }
  const auto ik = static_cast<std::size_t>(u.instruction.k);
  for (std::size_t i0 = s0; i0 < s1; i0 += ik) {
    Operand partial;
    for (std::size_t k0 = i0; k0 < i0 + ik; k0 += n) {
      if (partial.kind == Kind::inf) break;
      partial = block(k0, partial, u.instruction.block_output);
    }
    acc = add_rounded(acc, to_double(partial), u.output, u.instruction.end_rounding, u.output_subnormals);
  }
  return acc;
}

// Up to four plain chains (rows `rows` of A against column jb of B) stepped block by block together, so that
// the serial dependency of one chain (each block's rounding feeds the next) overlaps with the others.
template <int N>
void fast_chains(const MatrixUnit& u, int lshift, const Decoded& A, const std::size_t* rows, int R, const Decoded& B,
                 std::size_t jb, std::size_t Kp, Operand* c) {
  const std::int32_t* sb = B.sig.data() + jb * Kp;
  const std::int32_t* eb = B.exp.data() + jb * Kp;
  for (std::size_t k0 = 0; k0 < Kp; k0 += N)
    for (int r = 0; r < R; ++r) {
      if (c[r].kind == Kind::inf) continue;  // stays inf (block_special: c inf, products finite)
      const std::size_t off = rows[r] * Kp + k0;
      c[r] = fast_block<N>(u.block, lshift, A.sig.data() + off, A.exp.data() + off, sb + k0, eb + k0, N, c[r], u.output,
                           u.output_subnormals);
    }
}

// The same for split instructions: per instruction, each row's groups chained from zero, then + C once.
template <int N>
void fast_split_chains(const MatrixUnit& u, int lshift, const Decoded& A, const std::size_t* rows, int R,
                       const Decoded& B, std::size_t jb, std::size_t Kp, double* acc) {
  const std::int32_t* sb = B.sig.data() + jb * Kp;
  const std::int32_t* eb = B.exp.data() + jb * Kp;
  const auto ik = static_cast<std::size_t>(u.instruction.k);
  for (std::size_t i0 = 0; i0 < Kp; i0 += ik) {
    Operand partial[4];
    for (std::size_t k0 = i0; k0 < i0 + ik; k0 += N)
      for (int r = 0; r < R; ++r) {
        if (partial[r].kind == Kind::inf) continue;
        const std::size_t off = rows[r] * Kp + k0;
        partial[r] = fast_block<N>(u.block, lshift, A.sig.data() + off, A.exp.data() + off, sb + k0, eb + k0, N,
                                   partial[r], u.instruction.block_output, u.output_subnormals);
      }
    for (int r = 0; r < R; ++r)
      acc[r] = add_rounded(acc[r], to_double(partial[r]), u.output, u.instruction.end_rounding, u.output_subnormals);
  }
}

}  // namespace

void gemm_scalar(const MatrixUnit& unit, std::size_t M, std::size_t N, std::size_t K, const double* A, const double* B,
                 const double* C, double* D, int threads) {
  // Decode once: A's rows as they lie, B's columns gathered into rows (B transposed).
  std::vector<Operand> sa(M * K), sbt(N * K);
  for (std::size_t i = 0; i < M * K; ++i) sa[i] = split_input(unit, A[i]);
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t j = 0; j < N; ++j) sbt[j * K + k] = split_input(unit, B[k * N + j]);
  const int workers = threads > 0 ? threads : hardware_threads();
  parallel_for(M, std::min<std::size_t>(static_cast<std::size_t>(workers), std::max<std::size_t>(M, 1)), "mma_gemm",
               [&](int, std::size_t i0, std::size_t i1) {
                 for (std::size_t i = i0; i < i1; ++i)
                   for (std::size_t j = 0; j < N; ++j)
                     D[i * N + j] = dot_split(unit, sa.data() + i * K, sbt.data() + j * K, K, C ? C[i * N + j] : 0.0);
               });
}

// What a PreparedB holds: B as given (the scalar path's) and, where the integer path holds the unit, its
// columns decoded as gemm() decodes them.
struct PreparedB::Data {
  MatrixUnit unit;
  std::vector<double> raw;  // K×N, row-major
  bool fast = false;
  std::size_t Kp = 0;
  Decoded dec;
};

namespace {

std::size_t decode_period(const MatrixUnit& u) {
  return static_cast<std::size_t>(u.instruction.k ? u.instruction.k : u.block.products);
}

std::vector<int> decode_order(const MatrixUnit& u) {  // slot -> position inside an instruction, groups contiguous
  std::vector<int> order;
  if (u.instruction.k)
    for (int g = 0; g < u.instruction.groups; ++g)
      for (int k = 0; k < u.instruction.k; ++k)
        if ((k / u.instruction.interleave) % u.instruction.groups == g) order.push_back(k);
  return order;
}

// Whether operands decoded under `a` are what `b` would decode (and whether b's integer path is a's).
bool same_decoding(const MatrixUnit& a, const MatrixUnit& b) {
  return a.input == b.input && a.input_subnormals == b.input_subnormals && a.block.products == b.block.products &&
         a.instruction.k == b.instruction.k && a.instruction.groups == b.instruction.groups &&
         a.instruction.interleave == b.instruction.interleave && fast_path_fits(a) == fast_path_fits(b);
}

}  // namespace

PreparedB::PreparedB(const MatrixUnit& unit, std::size_t K, std::size_t N, const double* B) : k_(K), n_(N) {
  auto d = std::make_shared<Data>();
  d->unit = unit;
  d->raw.assign(B, B + K * N);
  d->fast = fast_path_fits(unit);
  if (d->fast) {
    const std::size_t period = decode_period(unit);
    d->Kp = (K + period - 1) / period * period;
    d->dec = decode_rows(unit, N, K, d->Kp, decode_order(unit), period,
                         [&](std::size_t r, std::size_t k) { return B[k * N + r]; });
  } else {
    for (const double x : d->raw) split_input(unit, x);  // refused here, as gemm() refuses it
  }
  data_ = std::move(d);
}

void gemm(const MatrixUnit& unit, std::size_t M, std::size_t N, std::size_t K, const double* A, const double* B,
          const double* C, double* D, int threads) {
  if (!fast_path_fits(unit)) return gemm_scalar(unit, M, N, K, A, B, C, D, threads);
  gemm(unit, M, A, PreparedB(unit, K, N, B), C, D, threads);
}

void gemm(const MatrixUnit& unit, std::size_t M, const double* A, const PreparedB& prepared, const double* C, double* D,
          int threads) {
  const PreparedB::Data& pd = *prepared.data_;
  if (!same_decoding(unit, pd.unit))
    throw Error(
        fmt::format("mma::gemm: B was prepared under {}, which decodes its inputs unlike {}", pd.unit.name, unit.name));
  const std::size_t N = prepared.n(), K = prepared.k();
  const double* B = pd.raw.data();
  if (!pd.fast) return gemm_scalar(unit, M, N, K, A, B, C, D, threads);
  const std::size_t period = decode_period(unit);
  const std::size_t Kp = pd.Kp;
  const std::vector<int> order = decode_order(unit);
  const Decoded dA =
      decode_rows(unit, M, K, Kp, order, period, [&](std::size_t r, std::size_t k) { return A[r * K + k]; });
  const Decoded& dB = pd.dec;
  const int lshift = unit.block.align_bits - 2 * unit.input.man_bits;
  const std::size_t chunk = unit.promote_every > 0 ? static_cast<std::size_t>(unit.promote_every) : Kp;
  const int workers = threads > 0 ? threads : hardware_threads();
  parallel_for(M, std::min<std::size_t>(static_cast<std::size_t>(workers), std::max<std::size_t>(M, 1)), "mma_gemm",
               [&](int, std::size_t i0, std::size_t i1) {
                 std::vector<double> a_row, b_col;
                 // Chains of blocks of 8, 16 or 32 products run four rows at a time (fast_chains, fast_split_chains).
                 const int n = unit.block.products;
                 const bool grouped = n == 8 || n == 16 || n == 32;
                 std::size_t rows[4];
                 Operand acc4[4];
                 double accd[4];
                 int R = 0;
                 auto flush = [&](std::size_t j) {
                   if (unit.instruction.k != 0) {
                     if (n == 8) fast_split_chains<8>(unit, lshift, dA, rows, R, dB, j, Kp, accd);
                     else if (n == 16) fast_split_chains<16>(unit, lshift, dA, rows, R, dB, j, Kp, accd);
                     else fast_split_chains<32>(unit, lshift, dA, rows, R, dB, j, Kp, accd);
                     for (int r = 0; r < R; ++r) D[rows[r] * N + j] = accd[r];
                   } else {
                     if (n == 8) fast_chains<8>(unit, lshift, dA, rows, R, dB, j, Kp, acc4);
                     else if (n == 16) fast_chains<16>(unit, lshift, dA, rows, R, dB, j, Kp, acc4);
                     else fast_chains<32>(unit, lshift, dA, rows, R, dB, j, Kp, acc4);
                     for (int r = 0; r < R; ++r) D[rows[r] * N + j] = to_double(acc4[r]);
                   }
                   R = 0;
                 };
                 // Rows in tiles of 8: a column's decoded operands (8 bytes per element) stay in cache for the
                 // tile instead of streaming from memory once per row.
                 constexpr std::size_t kTile = 8;
                 for (std::size_t t0 = i0; t0 < i1; t0 += kTile)
                   for (std::size_t j = 0; j < N; ++j) {
                     for (std::size_t i = t0; i < std::min(i1, t0 + kTile); ++i) {
                       const double c = C ? C[i * N + j] : 0.0;
                       if (dA.special[i] || dB.special[j] || !std::isfinite(c)) {  // NaN / inf: the scalar path
                         a_row.assign(A + i * K, A + (i + 1) * K);
                         b_col.resize(K);
                         for (std::size_t k = 0; k < K; ++k) b_col[k] = B[k * N + j];
                         D[i * N + j] = dot(unit, a_row, b_col, c);
                         continue;
                       }
                       if (unit.promote_every <= 0 && grouped) {
                         rows[R] = i;
                         accd[R] = c;
                         acc4[R++] = split(c, kAccumulatorEmin, kAccumulatorFrac, true);
                         if (R == 4) flush(j);  // the rest of the column's group: after the tile's rows
                         continue;
                       }
                       if (unit.promote_every <= 0) {
                         D[i * N + j] = fast_chain(unit, lshift, dA, i, dB, j, Kp, 0, Kp, c);
                         continue;
                       }
                       double acc = c;
                       for (std::size_t k0 = 0; k0 < Kp; k0 += chunk)
                         acc = add_rounded(
                             acc, fast_chain(unit, lshift, dA, i, dB, j, Kp, k0, std::min(Kp, k0 + chunk), 0.0),
                             unit.output, FinalRounding::nearest_even, unit.output_subnormals);
                       D[i * N + j] = acc;
                     }
                     if (R > 0) flush(j);  // the column's last group of rows
                   }
               });
}

double dot(const MatrixUnit& unit, std::span<const double> a, std::span<const double> b, double c) {
  if (a.size() != b.size())
    throw Error("mma::dot: a has " + std::to_string(a.size()) + " values but b has " + std::to_string(b.size()));
  std::vector<Operand> sa(a.size()), sb(b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    sa[k] = split_input(unit, a[k]);
    sb[k] = split_input(unit, b[k]);
  }
  return dot_split(unit, sa.data(), sb.data(), a.size(), c);
}

std::size_t round_to_format(std::span<double> values, const Format& fmt) {
  std::size_t changed = 0;
  for (double& v : values) {
    if (std::isnan(v)) continue;
    const double r = decode(round_bits(v, fmt), fmt);
    if (!(r == v && std::signbit(r) == std::signbit(v))) {
      ++changed;
      v = r;
    }
  }
  return changed;
}

}  // namespace mpsim::mma
