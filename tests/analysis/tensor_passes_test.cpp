// Tests of lib/mpsim/analysis/tensor_passes.hpp and update_pairs.hpp: each pass over files streamed in small
// chunks gives, tensor for tensor, what its accumulators give when fed the whole arrays directly, and names
// an input it cannot read while it goes on with the others.
#include "catch_compat.hpp"

#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include "../io/test_files.hpp"
#include "mpsim/analysis/tensor_passes.hpp"
#include "mpsim/analysis/update_pairs.hpp"
#include "mpsim/io/npy.hpp"

using namespace mpsim;
using namespace mpsim::analysis;

namespace {

std::vector<float> values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> e(-40, 20);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = i % 13 == 0 ? 0.0f : static_cast<float>((g() & 1 ? -1 : 1) * std::exp2(e(g)));
  return v;
}

}  // namespace

TEST_CASE("the passes over streamed files equal their accumulators over the whole arrays", "[tensor_passes]") {
  test::ScratchDir dir("tensor-passes");
  const auto a = values(6 * 64, 1), b = values(500, 2);
  io::write_npy(dir / "a.npy", io::make_npy(std::span<const float>(a), {6, 64}));
  io::write_npy(dir / "b.npy", io::make_npy(std::span<const float>(b), {500}));
  std::ofstream(dir / "c.npy") << "\x93NUMPY not an array";
  const std::vector<std::string> files = {(dir / "a.npy").string(), (dir / "c.npy").string(), (dir / "b.npy").string()};
  InputOptions io;
  io.chunk_elements = 37;  // a tensor spans many chunks, which do not align with its rows
  const std::vector<const std::vector<float>*> whole = {&a, &b};
  int compared = 0;
  auto check_failures = [&](const std::vector<InputFailure>& f) {
    REQUIRE(f.size() == 1);
    CHECK(f[0].input == files[1]);
    CHECK(f[0].message.find("c.npy") != std::string::npos);
  };

  const auto ranges = count_ranges(files, io, fp16());
  check_failures(ranges.failures);
  REQUIRE(ranges.tensors.size() == 2);
  for (std::size_t t = 0; t < 2; ++t) {
    RangeCounter c(fp16());
    c.add(std::span<const float>(*whole[t]));
    CHECK(ranges.tensors[t].counter.counts() == c.counts());
    ++compared;
  }

  const Rounding rne{};
  const auto under = count_underflow(files, io, fp8_e5m2(), rne, 10);
  check_failures(under.failures);
  REQUIRE(under.tensors.size() == 2);
  for (std::size_t t = 0; t < 2; ++t) {
    RangeCounter c(fp8_e5m2(), rne);
    Moments m;
    MassLost mass;
    c.add(std::span<const float>(*whole[t]));
    m.add(std::span<const float>(*whole[t]));
    add_rounded(mass, std::span<const float>(*whole[t]), fp8_e5m2(), rne, 10);
    CHECK(under.tensors[t].counter.counts() == c.counts());
    CHECK(under.tensors[t].moments.words() == m.words());
    CHECK(under.tensors[t].mass.stats().flushed == mass.stats().flushed);
    // The mass sums are grouped by the chunks they arrive in (mass_lost.hpp), so equal up to that grouping.
    CHECK(under.tensors[t].mass.stats().l1_lost == Approx(mass.stats().l1_lost).epsilon(1e-12));
    CHECK(under.tensors[t].mass.stats().l2sq_lost == Approx(mass.stats().l2sq_lost).epsilon(1e-12));
    ++compared;
  }

  Rounding sr = Rounding::of(RoundingMode::stochastic);
  sr.seed = 3;
  const auto errs = measure_rounding_errors(files, io, bf16(), {rne, sr}, 0, std::nullopt);
  check_failures(errs.failures);
  REQUIRE(errs.tensors.size() == 2);
  for (std::size_t t = 0; t < 2; ++t) {
    for (std::size_t m = 0; m < 2; ++m) {
      RoundingError e(bf16(), m == 0 ? rne : sr, 0);
      e.add(std::span<const float>(*whole[t]), 0);
      CHECK(errs.tensors[t].per_mode[m].to_json() == e.to_json());
      ++compared;
    }
  }

  // Block formats: rows of a's last axis (64), b as one row.
  const BlockFormat mx = parse_block_format("mxfp8_e4m3");
  const auto deq = count_dequantized(files, io, mx);
  check_failures(deq.failures);
  REQUIRE(deq.tensors.size() == 2);
  for (std::size_t t = 0; t < 2; ++t) {
    const std::size_t row = t == 0 ? 64 : 500;
    std::vector<float> y(whole[t]->size());
    BlockStats st;
    round_blocks(*whole[t], y, row, mx, Rounding{}, &st, {});
    RangeCounter c(fp32());
    c.add(std::span<const float>(y));
    CHECK(deq.tensors[t].values.counts() == c.counts());
    CHECK(block_result(mx, deq.tensors[t].stats).json() == block_result(mx, st).json());
    ++compared;
  }

  // Pairs: a with itself scaled (the updates), read in step.
  std::vector<float> u(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) u[i] = a[i] * 0x1p-12f;
  io::write_npy(dir / "u.npy", io::make_npy(std::span<const float>(u), {6, 64}));
  const auto pairs = pairs_in_order((dir / "a.npy").string(), (dir / "u.npy").string(), io);
  REQUIRE(pairs.size() == 1);
  SwallowedUpdates got(bf16(), rne), want(bf16(), rne);
  add_pair(got, pairs[0], io, nullptr);
  want.add(std::span<const float>(a), std::span<const float>(u), 0);
  CHECK(got.to_json() == want.to_json());
  ++compared;
  CHECK_THROWS_WITH(pairs_in_order((dir / "a.npy").string(), (dir / "b.npy").string(), io),
                    Catch::Contains("has 384 values but"));
  CHECK_THROWS_WITH(pair_by_name((dir / "a.npy").string(), "w", "u", io), Catch::Contains("no tensor named 'w'"));
  WARN("tensor passes: " << compared << " (pass, tensor[, mode]) results equal to the whole-array accumulators; "
                         << "the unreadable input named in each pass");
}
