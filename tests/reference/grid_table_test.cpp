// Tests of lib/mpsim/reference/grid_table.hpp, the fast method of the exhaustive sweeps: its table
// against the Boost reference's exact decoding, and its rounding against the Boost reference on
// >= 10^7 sampled (input, mode) cases ([exhaustive]; a smaller sample in the unit suite).
#include "catch_compat.hpp"

#include <chrono>
#include <cstdio>

#include "mpsim/error.hpp"
#include "mpsim/reference/grid_table.hpp"
#include "mpsim/reference/reference.hpp"
#include "mpsim/reference/verify.hpp"

using namespace mpsim;

namespace {

const Format& (*const small_formats[])() = {fp16, bf16, fp8_e4m3, fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz};

// Runs grid_vs_boost on every small format, float and double inputs, every mode; returns (cases, mismatches).
std::pair<std::uint64_t, std::uint64_t> cross_check(std::uint64_t samples_per_format, std::uint64_t seed) {
  const auto modes = verify::all_modes(seed);
  std::uint64_t cases = 0, mismatches = 0;
  for (auto f : small_formats) {
    for (bool as_float : {false, true}) {
      for (const auto& row : verify::grid_vs_boost("grid-vs-boost", f(), modes, samples_per_format, as_float, seed)) {
        cases += row.checked;
        mismatches += row.mismatches;
        if (row.mismatches)
          FAIL_CHECK(row.format << " " << row.mode << ": " << row.mismatches << " mismatches, first "
                                << row.first->input << " boost 0x" << std::hex << row.first->expected << " grid 0x"
                                << row.first->got);
      }
    }
  }
  return {cases, mismatches};
}

}  // namespace

TEST_CASE("grid table values are the exact values of the encodings", "[grid_table]") {
  for (auto f : small_formats) {
    const GridTable g(f());
    std::uint64_t checked = 0;
    for (std::uint32_t e = 0; e < g.beyond(); ++e, ++checked) {
      const ReferenceValue v = reference_decode(e, f());
      REQUIRE(v.kind == ReferenceValue::Kind::finite);
      REQUIRE(exact_value(g.value(e)) == v.value);
    }
    // The entry past the last finite value is the next point of the unbounded grid.
    const double last = g.value(g.beyond() - 1), past = g.value(g.beyond());
    CHECK(past - last == g.value(g.beyond() - 1) - g.value(g.beyond() - 2));
    CHECK(last == f().max_finite);
    std::printf("grid table %s: %llu finite encodings, max %g, next grid point %g\n", f().name.c_str(),
                static_cast<unsigned long long>(checked), last, past);
  }
  CHECK(GridTable(fp16()).value(GridTable(fp16()).beyond()) == 65536.0);
  CHECK(GridTable(fp8_e4m3()).value(GridTable(fp8_e4m3()).beyond()) == 480.0);
  CHECK_THROWS_AS(GridTable(fp32()), Error);
}

TEST_CASE("grid table agrees with the Boost reference (sample)", "[grid_table]") {
  const auto [cases, mismatches] = cross_check(2'000, 5);
  std::printf("grid table vs Boost reference: %llu cases, %llu mismatches\n", static_cast<unsigned long long>(cases),
              static_cast<unsigned long long>(mismatches));
  CHECK(mismatches == 0);
}

TEST_CASE("grid table agrees with the Boost reference on >= 10^7 cases", "[grid_table][exhaustive]") {
  const auto t0 = std::chrono::steady_clock::now();
  // 6 formats x 2 input types x 7 modes x 120000 = 1.008e7 cases.
  const auto [cases, mismatches] = cross_check(120'000, 2026);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("grid table vs Boost reference: %llu cases, %llu mismatches, %.1f s\n",
              static_cast<unsigned long long>(cases), static_cast<unsigned long long>(mismatches), secs);
  CHECK(cases >= 10'000'000);
  CHECK(mismatches == 0);
}
