// mpsim._core's matrix-unit binding: mma_gemm_into, under mpsim.matmul (python/mpsim/__init__.py).
// Thin: lib/mpsim/mma computes every value.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "mpsim/mma/dot.hpp"

namespace mpsim::python {

void bind_mma(nb::module_& m) {
  // a (M*K), b (K*N), c (M*N or empty): C-contiguous float64; out (M*N) float32. Values not in the formats are
  // rounded first (A, B to `input`, C to `output`, nearest-even), as `mpsim gemm` does. Returns the unit's
  // description.
  m.def(
      "mma_gemm_into",
      [](const AnyArray& a, const AnyArray& b, const AnyArray& c, const WritableArray& out, std::size_t M,
         std::size_t N, std::size_t K, const std::string& model, const std::string& input, const std::string& output,
         int promote_every, int threads) {
        mma::MatrixUnit unit = mma::matrix_unit(model, parse_format(input), parse_format(output));
        if (promote_every) {
          unit.promote_every = promote_every;
          mma::validate(unit);
        }
        const auto sa = input_span<double>(a, "a");
        const auto sb = input_span<double>(b, "b");
        const auto sc = input_span<double>(c, "c");
        if (sa.size() != M * K || sb.size() != K * N || (!sc.empty() && sc.size() != M * N))
          throw nb::value_error("mma_gemm_into: array sizes do not match M, N, K");
        const std::span<float> o = output_span<float>(out, "out", M * N);
        std::vector<double> A(sa.begin(), sa.end()), B(sb.begin(), sb.end()), C(sc.begin(), sc.end()), D(M * N);
        {
          nb::gil_scoped_release release;
          mma::round_to_format(A, unit.input);
          mma::round_to_format(B, unit.input);
          mma::round_to_format(C, unit.output);
          mma::gemm(unit, M, N, K, A.data(), B.data(), C.empty() ? nullptr : C.data(), D.data(), threads);
          for (std::size_t i = 0; i < D.size(); ++i) o[i] = static_cast<float>(D[i]);
        }
        return mma::describe(unit);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("c"), nb::arg("out"), nb::arg("M"), nb::arg("N"), nb::arg("K"),
      nb::arg("model"), nb::arg("input"), nb::arg("output"), nb::arg("promote_every") = 0, nb::arg("threads") = 0);
  m.def(
      "mma_models", [] { return mma::model_names(); }, "The matrix-unit models mpsim.matmul takes.");
}

}  // namespace mpsim::python
