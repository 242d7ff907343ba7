// The gradient mass lost: what a format's rounding takes from a tensor beyond a count of flushed
// elements. For a tensor g and its rounding q (the same elements, rounded into the format):
//   l1_lost   = sum |g_i| over the elements q flushed to zero (g_i != 0, q_i = 0) / sum |g_i|
//   l2sq_lost = the same with g_i^2: the share of the tensor's squared norm (its "energy") flushed
//   cosine    = <g, q> / (|g| |q|): how far the rounded tensor points away from the exact one
// A share of elements flushed says little about harm: the flushed elements are by construction the
// smallest ones, so 60 % of them can carry 1e-6 of the mass. These measures weigh each element by its
// size, and the cosine also sees the rounding of the survivors.
//
// The flushed mass has a sign, and its sign is what harms (issue 34 item 5): a softmax's logit gradient is
// (p - y) / N, positive for the wrong words (gradient descent pushes their logits down) and negative for the
// target (pushed up). When the many small positive ones flush and the one large negative one survives, the
// rounded gradient is not just smaller but one-sided. So, of the flushed elements:
//   push_down = sum of the flushed g_i > 0 / sum |g_i| flushed: the share of the lost mass that pushed its
//               value down (a descent step lowers an element whose gradient is positive); NaN when nothing
//               was flushed
//   lost_bias = sum of the flushed g_i (signed) / sum |g_i| over all: in [-l1_lost, l1_lost]; +l1_lost when
//               every flushed element pushed down, 0 when the flushes cancel
// Neither depends on a positive scale applied to g.
//
// Sums run over the finite elements of g (NaN and inf are counted apart by the callers' reports) in
// double, in blocks of kBlock whose partial sums are then added, each block in 2 interleaved partial sums
// (element k of a block in sum k % 2, then sum 0 + sum 1): products of two floats are exact in double,
// the summation's relative error stays below (kBlock + n / kBlock) * 2^-53, and the bits depend only on
// the values and their order (not on the thread count or the machine). The cosine is NaN
// when it is undefined: no non-zero finite element, everything flushed (|q| = 0), or a finite g_i rounded
// to a non-finite q_i (overflow to inf / NaN). The measures do not depend on a power-of-two scale applied
// to both g and q, so the trainer's sites report them with the loss scale in.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::analysis {

struct MassLostStats {
  std::uint64_t nonzero_finite = 0;  // finite non-zero elements of g
  std::uint64_t flushed = 0;         // of those, how many q flushed to zero
  double l1_lost = 0;                // share of sum |g| flushed (0 when sum |g| = 0)
  double l2sq_lost = 0;              // share of sum g^2 flushed (0 when sum g^2 = 0)
  double cosine = 0;                 // <g, q> / (|g| |q|); NaN when undefined (see above)
  double push_down = 0;              // share of the flushed sum |g| with g > 0; NaN when nothing was flushed
                                     // (or the sums came from a state written before they existed)
  double lost_bias = 0;              // signed sum of the flushed g / sum |g| (NaN as push_down's state case)
};

class MassLost {
 public:
  static constexpr std::size_t kBlock = 4096;

  // Adds the elements of g (before rounding) and q (after): the same length, else mpsim::Error. For float
  // input, `path` avx512 sums four blocks at a time, avx2 two (detail/mass_lost_kernel.hpp) and scalar one (SSE2
  // where the build has it): the same bits (tests compare them); automatic takes the widest the CPU has.
  void add(std::span<const float> g, std::span<const float> q, Path path = Path::automatic);
  void add(std::span<const double> g, std::span<const double> q);
  // The union of the two tensors' elements (a concatenation): every sum adds.
  MassLost& operator+=(const MassLost& other);

  MassLostStats stats() const;

  // The running sums as JSON (numbers written to round-trip exactly), for checkpoints; from_state throws
  // mpsim::Error on a malformed state.
  nlohmann::json state() const;
  static MassLost from_state(const nlohmann::json& state);

  std::uint64_t nonzero_finite() const { return nonzero_; }
  double sum_abs() const { return sum_abs_; }
  double sum_sq() const { return sum_sq_; }

 private:
  template <class T>
  void add_impl(std::span<const T> g, std::span<const T> q, Path path);
  template <class Sums>
  void add_block(const Sums& s);

  std::uint64_t nonzero_ = 0, flushed_ = 0, overflowed_ = 0;
  double sum_abs_ = 0, sum_sq_ = 0;          // over the finite g
  double flushed_abs_ = 0, flushed_sq_ = 0;  // over the flushed g
  double flushed_signed_ = 0;                // the flushed g with their signs
  bool signed_known_ = true;                 // false after a state without "flushed_signed" (mpsim 0.2.0)
  double dot_ = 0, sum_sq_q_ = 0;            // <g, q> and |q|^2 over the finite g with a finite q
};

// Rounds 2^log2_scale * g into `fmt` under `r` (nearest-even by default; stochastic rounding uses element
// index index0 + i) and adds both, scaled, to `into`. Float input rounds in float where scaling by 2^k is
// exact for every element (else in double), through the bulk engine, so the flushes are the ones
// round_array (and RangeCounter's counts) give.
void add_rounded(MassLost& into, std::span<const float> g, const Format& fmt, const Rounding& r, int log2_scale,
                 std::uint64_t index0 = 0);
void add_rounded(MassLost& into, std::span<const double> g, const Format& fmt, const Rounding& r, int log2_scale,
                 std::uint64_t index0 = 0);

// {"mass_nonzero_num", "mass_flushed_num", "l1_lost", "l2sq_lost", "cosine", "push_down", "lost_bias"}
// (null where NaN).
nlohmann::json mass_lost_json(const MassLostStats&);

}  // namespace mpsim::analysis
