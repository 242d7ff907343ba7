#include "mpsim/format/value_io.hpp"

#include <cmath>
#include <cstdlib>

#include "mpsim/format/round.hpp"

namespace mpsim {

std::string shortest_decimal(std::uint64_t bits, const Format& f) {
  bits &= f.storage_mask();
  const double v = decode(bits, f);
  if (std::isnan(v)) return std::signbit(v) && f.nan != NanEncoding::neg_zero ? "-nan" : "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return std::signbit(v) ? "-0" : "0";
  // Try 1, 2, ... significant digits. A candidate decimal d is read back as back = strtod(d) (the
  // nearest double) and rounded to the format. That equals rounding d itself unless back lands exactly
  // on a midpoint of the format (a double, as p + 1 <= 53) that d is not: such candidates are skipped.
  // 17 digits always succeed: they read back to v itself.
  // (fp64 itself has no double rounding: back is already in the format.)
  const bool can_double_round = f.man_bits < 52;
  const Format finer = make_format(f.name + "+1", f.exp_bits, can_double_round ? f.man_bits + 1 : f.man_bits, f.bias,
                                   f.has_inf, f.nan, Subnormals::keep, f.overflow);
  for (int digits = 1; digits <= 17; ++digits) {
    const std::string candidate = fmt::format("{:.{}e}", v, digits - 1);
    const double back = std::strtod(candidate.c_str(), nullptr);
    if (round_bits(back, f) != bits) continue;
    if (can_double_round && !is_representable(back, f) && is_representable(back, finer)) continue;
    return fmt::format("{}", back);  // fmt's shortest form of that double: the same digits
  }
  return fmt::format("{}", v);
}

}  // namespace mpsim
