// The accumulation-error report (lib/mpsim/mma/accumulation.hpp): known answers, the bound of recursive
// summation for the exact-fp32 unit, promotion's effect, determinism, the K parser.
#include <cmath>
#include <cstdio>

#include "catch_compat.hpp"
#include "mpsim/mma/accumulation.hpp"

using namespace mpsim;

TEST_CASE("accumulation error: exact answers, the summation bound, promotion", "[mma]") {
  mma::AccumulationOptions opt;
  opt.trials = 8;
  opt.promote_every = 0;
  // fp16 products are exact in fp32, so one product has no error at all.
  opt.ks = {1};
  auto rep = mma::accumulation_error(mma::matrix_unit("exact-fp32", fp16(), fp32()), opt);
  CHECK(rep.fast.at(0).rel_max == 0.0);
  CHECK(rep.fast.at(0).ulps_max == 0.0);
  // A recursive fp32 sum of K positive terms: relative error at most (K-1) u / (1 - (K-1) u), u = 2^-24
  // (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §4.2).
  opt.ks = {64, 1024};
  opt.data = "uniform";
  rep = mma::accumulation_error(mma::matrix_unit("exact-fp32", bf16(), fp32()), opt);
  for (const auto& r : rep.fast) {
    const double g = static_cast<double>(r.k - 1) * std::ldexp(1.0, -24);
    std::printf("exact-fp32 bf16, K=%zu: rel max %.3g, bound %.3g\n", r.k, r.rel_max, g / (1 - g));
    CHECK(r.rel_max <= g / (1 - g));
    CHECK(r.rel_max > 0);
  }
  // H100 fp8 fast accumulation against promotion every 128.
  opt.ks = {128, 4096};
  opt.promote_every = 128;
  rep = mma::accumulation_error(mma::parse_matrix_unit("h100-fp8"), opt);
  REQUIRE(rep.promoted.size() == 2);
  std::printf("h100 fp8, K=128: fast %.3g promoted %.3g; K=4096: fast %.3g promoted %.3g (median relative)\n",
              rep.fast[0].rel_median, rep.promoted[0].rel_median, rep.fast[1].rel_median, rep.promoted[1].rel_median);
  CHECK(rep.fast[0].rel_max == rep.promoted[0].rel_max);  // one chunk: promotion changes nothing
  CHECK(rep.promoted[1].rel_max < rep.fast[1].rel_median / 10);
  // Deterministic.
  CHECK(mma::accumulation_json(rep) ==
        mma::accumulation_json(mma::accumulation_error(mma::parse_matrix_unit("h100-fp8"), opt)));
}

TEST_CASE("accumulation error: K ranges and bad options", "[mma]") {
  CHECK(mma::parse_matrix_unit("exact-fp32").name == "exact-fp32-fp16-fp32");
  CHECK(mma::parse_matrix_unit("fp16-acc").name == "fp16-acc-fp16-fp16");
  CHECK(mma::parse_matrix_unit("h100-fp8").name == "h100-fp8_e4m3-fp32");
  CHECK(mma::parse_matrix_unit("b200-fp8_e5m2").name == "b200-fp8_e5m2-fp32");
  CHECK_THROWS_WITH(mma::parse_matrix_unit("h100-fp9"), Catch::Contains("fp9"));
  CHECK(mma::parse_k_range("32..256") == std::vector<std::size_t>{32, 64, 128, 256});
  CHECK(mma::parse_k_range("100,7") == std::vector<std::size_t>{100, 7});
  CHECK(mma::parse_k_range("5") == std::vector<std::size_t>{5});
  CHECK_THROWS_WITH(mma::parse_k_range("64..32"), Catch::Contains("empty"));
  CHECK_THROWS_WITH(mma::parse_k_range("x"), Catch::Contains("'x'"));
  CHECK_THROWS_WITH(mma::parse_k_range("0"), Catch::Contains("1..2^26"));
  mma::AccumulationOptions opt;
  opt.ks = {32};
  opt.data = "gamma";
  CHECK_THROWS_WITH(mma::accumulation_error(mma::parse_matrix_unit("h100-fp16"), opt), Catch::Contains("gamma"));
}

TEST_CASE("accumulation error on given tensors: the H100 fp8 stagnation point", "[mma]") {
  // Sums of ones under H100 fp8 (13 bits kept below the largest exponent): once the accumulator reaches 2^14 a
  // product of 1 lies below its last kept bit and is truncated away, so every sum stops at 16384. Promoted
  // every 128, each partial sum (128) and the fp32 accumulator stay exact.
  mma::AccumulationOptions opt;
  opt.ks = {8192, 32768, 65536};
  opt.trials = 2;
  opt.rows = 2;
  opt.cols = 65536;
  opt.b_cols = 1;
  opt.a_matrix.assign(opt.rows * opt.cols, 1.0);
  opt.b_matrix.assign(opt.cols, 1.0);
  const auto rep = mma::accumulation_error(mma::parse_matrix_unit("h100-fp8"), opt);
  std::printf("ones, h100 fp8: K=8192 rel %.3g, K=32768 rel %.3g, K=65536 rel %.3g; promoted max %.3g\n",
              rep.fast[0].rel_max, rep.fast[1].rel_max, rep.fast[2].rel_max, rep.promoted[2].rel_max);
  CHECK(rep.fast[0].rel_max == 0.0);
  CHECK(rep.fast[1].rel_max == 0.5);   // 16384 of 32768
  CHECK(rep.fast[2].rel_max == 0.75);  // 16384 of 65536
  for (const auto& r : rep.promoted) CHECK(r.rel_max == 0.0);
  opt.ks = {70000};
  CHECK_THROWS_WITH(mma::accumulation_error(mma::parse_matrix_unit("h100-fp8"), opt), Catch::Contains("longer"));
}
