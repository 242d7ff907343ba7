// Dot products and GEMMs under a matrix-unit model (unit.hpp). The scalar path (dot) is the
// specification; gemm() decodes each operand once into integer significands and exponents and runs each
// block as 32-bit lane shifts and adds (vectorised by the compiler), rows fanned out with parallel_for; its
// results equal dot()'s bit for bit whatever the thread count (tests/mma/reference_test).
#pragma once

#include <cstddef>
#include <cstdint>
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

// The same through the scalar specification path (dot for every element); gemm() takes it for units the
// integer path does not hold (sticky bits, promotion with split instructions) and for rows or columns
// holding NaN or inf. For tests and benchmarks.
void gemm_scalar(const MatrixUnit& unit, std::size_t M, std::size_t N, std::size_t K, const double* A, const double* B,
                 const double* C, double* D, int threads = 0);

// Rounds values in place to `fmt` with round-to-nearest-even (what the published GEMM.m does with CPFloat
// before it multiplies); returns how many changed. NaN stays NaN.
std::size_t round_to_format(std::span<double> values, const Format& fmt);

}  // namespace mpsim::mma
