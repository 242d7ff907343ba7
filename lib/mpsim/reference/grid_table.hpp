// The fast independent rounding method for exhaustive sweeps over formats of at most 16 bits.
//
// A table holds the value of every positive finite encoding, built from the format's fields with ldexp,
// plus the first point of the unbounded grid past max_finite (the encoding formula continued one step).
// A magnitude's neighbours are found by binary search in that table (or by a cursor that only moves
// forward, for sweeps in increasing order), and every decision is made exactly in double:
//  * the midpoint (lo + hi) / 2 = (2K + 1) * q / 2 is exact (2K + 1 < 2^18 for these formats);
//  * |x| - lo is exact (Sterbenz: lo <= |x| < hi <= 2 lo, or lo = 0), and hi - lo is a power of two,
//    so frac = (|x| - lo) / (hi - lo) and floor(frac * 2^b) are exact.
// It shares no code with round.cpp nor with the Boost reference (reference.cpp), and is cross-checked
// against the latter on >= 10^7 sampled cases (tests/reference/grid_table_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim {

class GridTable {
 public:
  // Throws mpsim::Error if the format has more than 16 bits or its encodings are not ordered by value.
  explicit GridTable(const Format& fmt);

  // Where a positive finite magnitude falls: lo is the encoding of the largest grid value <= it (lo ==
  // beyond() when it is at or past the first grid point beyond max_finite: overflow in every mode).
  struct Position {
    std::uint32_t lo = 0;
    bool exact = false;  // magnitude == value(lo)
    int vs_mid = 0;      // sign of magnitude - (value(lo) + value(lo + 1)) / 2
    double frac = 0;     // (magnitude - value(lo)) / (value(lo + 1) - value(lo)), in [0, 1)
  };
  Position locate(double magnitude) const;
  // As locate(), for magnitudes visited in non-decreasing order: `cursor` (start it at 0) only moves up.
  Position locate_from(double magnitude, std::uint32_t& cursor) const;

  // The encoding for a finite non-zero input of sign `negative` at `pos`.
  std::uint64_t decide(bool negative, const Position& pos, const Rounding& r, std::uint64_t index) const;

  // The whole conversion, with ±0, ±inf, NaN (payload as round.hpp documents) and input subnormals.
  std::uint64_t round(double x, const Rounding& r = {}, std::uint64_t index = 0) const;
  std::uint64_t round(float x, const Rounding& r = {}, std::uint64_t index = 0) const;

  // Results for special float inputs (used by sweeps that classify inputs themselves).
  std::uint64_t nan_from_float(std::uint32_t float_bits) const;
  std::uint64_t from_infinity(bool negative) const;
  std::uint64_t zero(bool negative) const { return negative && fmt_.nan != NanEncoding::neg_zero ? sign_ : 0; }

  const Format& format() const { return fmt_; }
  std::uint32_t beyond() const { return static_cast<std::uint32_t>(values_.size() - 1); }
  double value(std::uint32_t enc) const { return values_[enc]; }

 private:
  std::uint64_t overflow(bool negative, RoundingMode mode) const;
  std::uint64_t infinite_result(bool negative) const;
  Position finish(double magnitude, std::uint32_t lo) const;

  Format fmt_;
  std::uint64_t sign_ = 0;
  std::uint32_t min_normal_enc_ = 0;
  std::uint64_t inf_enc_ = 0;   // ieee formats: +inf
  std::uint64_t nan_enc_ = 0;   // canonical +NaN (quiet)
  std::vector<double> values_;  // values_[e] for e = 0 .. max finite encoding, then the beyond point
};

}  // namespace mpsim
