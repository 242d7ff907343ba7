// Dot products and GEMMs under a matrix-unit model (unit.hpp). The scalar path (dot) is the
// specification; gemm() decodes each operand once into integer significands and exponents and runs each
// block as 32-bit lane shifts and adds (vectorised by the compiler), rows fanned out with parallel_for; its
// results equal dot()'s bit for bit whatever the thread count (tests/mma/reference_test).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "mpsim/mma/unit.hpp"

namespace mpsim::mma {

// d = c + a·b under `unit`: a and b hold K values of unit.input, c a value of unit.output (exact doubles;
// use round_to_format first). K need not be a multiple of the block: the last block is padded with zero
// products, as the GPU pads a tile. Returns D's value (an output-format value, ±inf or NaN).
//
// Special values (the published models' rule, applied per block; not in the recordings): a NaN operand or
// c, inf × 0, or +inf and -inf among the products and c give NaN (the output format's canonical NaN);
// otherwise an infinite product or c gives that infinity. A finite sum beyond the output's range is ±inf
// in both rounding modes (Generic_BFMA_TC.m); an exact zero sum is +0. An element of a or b that is not a value
// of unit.input (inexact, beyond its range, or an inf the format lacks) is an mpsim::Error naming it.
double dot(const MatrixUnit& unit, std::span<const double> a, std::span<const double> b, double c);

// D (M×N) = C + A (M×K) B (K×N), all row-major; C may be null (zero). Values as for dot(). `threads` <= 0:
// the library's default (parallel_for). Every D(i, j) equals dot(unit, row i of A, column j of B, C(i, j)).
void gemm(const MatrixUnit& unit, std::size_t M, std::size_t N, std::size_t K, const double* A, const double* B,
          const double* C, double* D, int threads = 0);

// B (K×N, row-major) decoded once under `unit` for many products with different A: the simulator's recurrent
// weight, which multiplies a new state at every time step (lib/mpsim/nn/mma_gemm.cpp). Validates B as gemm()
// does (an element not in unit.input is an mpsim::Error naming it) and keeps a copy of it for the scalar path.
class PreparedB {
 public:
  PreparedB(const MatrixUnit& unit, std::size_t K, std::size_t N, const double* B);
  std::size_t k() const { return k_; }
  std::size_t n() const { return n_; }
  struct Data;  // dot.cpp

 private:
  friend void gemm(const MatrixUnit&, std::size_t, const double*, const PreparedB&, const double*, double*, int);
  std::size_t k_ = 0, n_ = 0;
  std::shared_ptr<const Data> data_;
};

// gemm() with B prepared: equal to gemm(unit, M, B.n(), B.k(), A, B's values, C, D) bit for bit. `unit` must
// decode its inputs as the unit B was prepared under did (the same input format, block and instruction
// split; the promotion and the rounding may differ), else mpsim::Error.
void gemm(const MatrixUnit& unit, std::size_t M, const double* A, const PreparedB& B, const double* C, double* D,
          int threads = 0);

// The same through the scalar specification path (dot for every element); gemm() takes it for units the
// integer path does not hold (sticky bits, promotion with split instructions) and for rows or columns
// holding NaN or inf. For tests and benchmarks.
void gemm_scalar(const MatrixUnit& unit, std::size_t M, std::size_t N, std::size_t K, const double* A, const double* B,
                 const double* C, double* D, int threads = 0);

// Rounds values in place to `fmt` with round-to-nearest-even (what the published GEMM.m does with CPFloat
// before it multiplies); returns how many changed. NaN stays NaN.
std::size_t round_to_format(std::span<double> values, const Format& fmt);

}  // namespace mpsim::mma
