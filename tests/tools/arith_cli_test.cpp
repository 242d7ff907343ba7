// Tests of `mpsim arith` (tools/mpsim/arith.cpp): runs the real binary ($MPSIM_BIN) on .npy files written
// here and checks every output element against the arith.hpp functions called in the test (which are
// themselves checked exhaustively in tests/format), the hand-worked values of a few elements, exit codes
// and messages on bad input, and that a failing run leaves no output file.
#include "catch_compat.hpp"

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "../io/test_files.hpp"
#include "mpsim/format/arith.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/io/npy.hpp"
#include "run_mpsim.hpp"

using mpsim::io::DType;
using mpsim::test::ScratchDir;

namespace {

using mpsim::test::quote;
using mpsim::test::RunResult;

RunResult run_arith(const ScratchDir& dir, const std::string& args) {
  return mpsim::test::run_mpsim(dir, "arith " + args);
}

std::string p(const ScratchDir& dir, const char* name) { return quote((dir / name).string()); }

// Pseudo-random fp16 encodings (every class: NaNs, infs, subnormals), as uint16.
std::vector<std::uint16_t> fp16_operands(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::uint16_t> v;
  v.reserve(n);
  while (v.size() < n) {
    v.push_back(static_cast<std::uint16_t>(gen()));
  }
  // Hand-worked ones first: 1 + 2^-11 (tie), 1 / 3, inf - inf, NaN payload.
  v[0] = 0x3c00;
  v[1] = 0x3c00;
  v[2] = 0x7c00;
  v[3] = 0x7d23;
  return v;
}

}  // namespace

TEST_CASE("mpsim arith --bits: every op and mode matches the library, element by element", "[arith_cli]") {
  ScratchDir dir("arith-cli");
  const std::size_t n = 4000;
  auto a = fp16_operands(n, 1), b = fp16_operands(n, 2), c = fp16_operands(n, 3);
  b[0] = 0x1000;  // 2^-11
  b[1] = 0x4200;  // 3
  b[2] = 0xfc00;  // -inf
  b[3] = 0x3c00;
  const std::vector<std::int64_t> shape = {40, 100};
  mpsim::io::write_npy(dir / "a.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(a), shape));
  mpsim::io::write_npy(dir / "b.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(b), shape));
  mpsim::io::write_npy(dir / "c.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(c), shape));
  long checked = 0, mismatches = 0;
  for (const char* op : {"add", "sub", "mul", "div", "fma", "sqrt"}) {
    for (const char* mode : {"rne", "rtz", "rd", "sr"}) {
      const mpsim::ArithOp aop = mpsim::parse_arith_op(op);
      std::string files = p(dir, "a.npy");
      if (mpsim::arity(aop) >= 2) files += " " + p(dir, "b.npy");
      if (mpsim::arity(aop) == 3) files += " " + p(dir, "c.npy");
      const auto res = run_arith(
          dir, fmt::format("{} --format fp16 --mode {} --seed 9 --bits {} {}", op, mode, files, p(dir, "out.npy")));
      REQUIRE(res.status == 0);
      const auto out = mpsim::io::read_npy(dir / "out.npy");
      REQUIRE(out.dtype == DType::u16);
      REQUIRE(out.shape == shape);
      mpsim::Rounding r;
      r.mode = mpsim::parse_rounding_mode(mode);
      r.seed = 9;
      const auto* got = reinterpret_cast<const std::uint16_t*>(out.data.data());
      for (std::size_t i = 0; i < n; ++i) {
        std::uint64_t want = 0;
        const auto& h = mpsim::fp16();
        switch (aop) {
          case mpsim::ArithOp::add: want = mpsim::add_bits(a[i], b[i], h, r, i); break;
          case mpsim::ArithOp::sub: want = mpsim::sub_bits(a[i], b[i], h, r, i); break;
          case mpsim::ArithOp::mul: want = mpsim::mul_bits(a[i], b[i], h, r, i); break;
          case mpsim::ArithOp::div: want = mpsim::div_bits(a[i], b[i], h, r, i); break;
          case mpsim::ArithOp::fma: want = mpsim::fma_bits(a[i], b[i], c[i], h, r, i); break;
          case mpsim::ArithOp::sqrt: want = mpsim::sqrt_bits(a[i], h, r, i); break;
        }
        ++checked;
        if (got[i] != want && mismatches++ < 5)
          std::printf("  %s %s element %zu: got 0x%04x want 0x%04llx\n", op, mode, i, got[i],
                      static_cast<unsigned long long>(want));
      }
      if (std::string(op) == "add" && std::string(mode) == "rne") {
        CHECK(got[0] == 0x3c00);  // 1 + 2^-11 ties to even
        CHECK(got[2] == 0xfe00);  // inf + -inf: default NaN
        CHECK(got[3] == 0x7f23);  // NaN payload kept, quieted
      }
      if (std::string(op) == "div" && std::string(mode) == "rne") CHECK(got[1] == 0x3555);  // 1/3
    }
  }
  std::printf("mpsim arith --bits: %ld elements checked over 6 ops x 4 modes, %ld mismatches\n", checked, mismatches);
  CHECK(mismatches == 0);
}

TEST_CASE("mpsim arith --like cuda-sm90: the canonical NaN 0x7fff, every other result unchanged", "[arith_cli]") {
  ScratchDir dir("arith-cli-like");
  const std::size_t n = 3000;
  const auto a = fp16_operands(n, 11), b = fp16_operands(n, 12);
  mpsim::io::write_npy(dir / "a.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(a)));
  mpsim::io::write_npy(dir / "b.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(b)));
  const auto& h = mpsim::fp16();
  for (const char* op : {"add", "mul", "div"}) {
    std::vector<std::uint16_t> plain, like;
    for (const char* profile : {"ieee", "cuda-sm90"}) {
      const auto res = run_arith(dir, fmt::format("{} --format fp16 --like {} --bits {} {} {}", op, profile,
                                                  p(dir, "a.npy"), p(dir, "b.npy"), p(dir, "out.npy")));
      REQUIRE(res.status == 0);
      const auto out = mpsim::io::read_npy(dir / "out.npy");
      const auto* got = reinterpret_cast<const std::uint16_t*>(out.data.data());
      (std::string(profile) == "ieee" ? plain : like).assign(got, got + n);
    }
    std::size_t nans = 0, bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const mpsim::ArithOp aop = mpsim::parse_arith_op(op);
      const std::uint64_t lib = aop == mpsim::ArithOp::add   ? mpsim::add_bits(a[i], b[i], h)
                                : aop == mpsim::ArithOp::mul ? mpsim::mul_bits(a[i], b[i], h)
                                                             : mpsim::div_bits(a[i], b[i], h);
      bad += plain[i] != lib;
      if (mpsim::is_nan_bits(lib, h)) {
        ++nans;
        bad += like[i] != 0x7fff;  // cuda_fp16.hpp: every NaN result is 0x7FFF
      } else {
        bad += like[i] != plain[i];
      }
    }
    INFO(op);
    CHECK(nans > 50);  // the random operands hold NaNs: the rule is exercised
    CHECK(bad == 0);
  }
}

TEST_CASE("mpsim arith on values: float32 / float16 / float64 in, same dtype out", "[arith_cli]") {
  ScratchDir dir("arith-cli");
  const std::vector<float> a = {1.0f, 2.0f, 65504.0f, -0.5f, 0.0f}, b = {3.0f, 3.0f, 16.0f, 0.5f, -0.0f};
  mpsim::io::write_npy(dir / "a.npy", mpsim::io::make_npy(std::span<const float>(a)));
  mpsim::io::write_npy(dir / "b.npy", mpsim::io::make_npy(std::span<const float>(b)));
  REQUIRE(
      run_arith(dir, "div --format fp16 " + p(dir, "a.npy") + " " + p(dir, "b.npy") + " " + p(dir, "q.npy")).status ==
      0);
  const auto q = mpsim::io::to_float(mpsim::io::read_npy(dir / "q.npy"));
  REQUIRE(q.size() == 5);
  CHECK(q[0] == static_cast<float>(mpsim::decode(0x3555, mpsim::fp16())));  // 1/3 in fp16
  CHECK(q[1] == static_cast<float>(mpsim::decode(0x3955, mpsim::fp16())));  // 2/3
  CHECK(q[2] == 4094.0f);                                                   // 65504 / 16
  CHECK(q[3] == -1.0f);
  CHECK(std::isnan(q[4]));  // 0 / -0
  REQUIRE(
      run_arith(dir, "add --format fp16 " + p(dir, "a.npy") + " " + p(dir, "b.npy") + " " + p(dir, "s.npy")).status ==
      0);
  const auto s = mpsim::io::to_float(mpsim::io::read_npy(dir / "s.npy"));
  CHECK(std::isinf(s[2]));  // 65520 rounds to inf
  CHECK(s[4] == 0.0f);
  CHECK_FALSE(std::signbit(s[4]));  // +0 + -0 = +0
  // float64 in, bf16 arithmetic, float64 out; sqrt takes one input.
  const std::vector<double> d = {2.0, 4.0, -1.0};
  mpsim::io::write_npy(dir / "d.npy", mpsim::io::make_npy(std::span<const double>(d)));
  REQUIRE(run_arith(dir, "sqrt --format bf16 " + p(dir, "d.npy") + " " + p(dir, "r.npy")).status == 0);
  const auto rr = mpsim::io::read_npy(dir / "r.npy");
  CHECK(rr.dtype == DType::f64);
  const auto r = mpsim::io::to_double(rr);
  CHECK(r[0] == mpsim::decode(0x3fb5, mpsim::bf16()));  // sqrt(2) = 1.0110101|00... in bf16
  CHECK(r[1] == 2.0);
  CHECK(std::isnan(r[2]));
}

TEST_CASE("mpsim arith: bad inputs exit 2 with a message naming the problem and leave no output", "[arith_cli]") {
  ScratchDir dir("arith-cli");
  const std::vector<float> a = {1.0f, 2.0f, 3.0f}, b2 = {1.0f, 2.0f}, inexact = {1.0f, 0.1f, 2.0f};
  mpsim::io::write_npy(dir / "a.npy", mpsim::io::make_npy(std::span<const float>(a)));
  mpsim::io::write_npy(dir / "b2.npy", mpsim::io::make_npy(std::span<const float>(b2)));
  mpsim::io::write_npy(dir / "x.npy", mpsim::io::make_npy(std::span<const float>(inexact)));
  mpsim::io::write_npy(dir / "m.npy", mpsim::io::make_npy(std::span<const float>(a), {1, 3}));
  const std::vector<std::uint8_t> bytes = {1, 2, 3};
  mpsim::io::write_npy(dir / "u8.npy", mpsim::io::make_npy(std::span<const std::uint8_t>(bytes)));
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"add --format fp16 " + p(dir, "a.npy") + " " + p(dir, "b2.npy"), "shape mismatch"},
      {"add --format fp16 " + p(dir, "a.npy") + " " + p(dir, "m.npy"), "(1, 3)"},
      {"add --format fp16 " + p(dir, "x.npy") + " " + p(dir, "a.npy"), "element 1"},
      {"add --format fp16 " + p(dir, "x.npy") + " " + p(dir, "a.npy"), "x.npy"},
      {"add --format fp16 --bits " + p(dir, "u8.npy") + " " + p(dir, "u8.npy"), "2 byte"},
      {"add --format fp16 --bits " + p(dir, "a.npy") + " " + p(dir, "a.npy"), "--bits"},
      {"pow --format fp16 " + p(dir, "a.npy") + " " + p(dir, "a.npy"), "unknown operation"},
      {"add --format fp17 " + p(dir, "a.npy") + " " + p(dir, "a.npy"), "fp17"},
      {"add --format fp16 --mode fast " + p(dir, "a.npy") + " " + p(dir, "a.npy"), "fast"},
      {"add --format fp64 " + p(dir, "a.npy") + " " + p(dir, "a.npy"), "not supported"},
      {"fma --format fp16 " + p(dir, "a.npy") + " " + p(dir, "a.npy"), "3 input"},
      {"add --format fp16 " + p(dir, "a.npy") + " " + p(dir, "missing.npy"), "missing.npy"},
  };
  for (const auto& c : cases) {
    const auto res = run_arith(dir, c.args + " " + p(dir, "out.npy"));
    INFO(c.args << "\n" << res.output);
    CHECK(res.status == 2);
    CHECK(res.output.find(c.expect) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir / "out.npy"));
  }
  std::printf("mpsim arith: %zu bad invocations, each exit 2 with its message and no output file\n", std::size(cases));
}

TEST_CASE("mpsim arith streams: chunked output is bit-identical to one chunk, odd tails included", "[arith_cli]") {
  ScratchDir dir("arith-cli");
  // 5003 elements (prime), read in step from three files in chunks that leave odd tails.
  const std::size_t n = 5003;
  const auto a = fp16_operands(n, 11), b = fp16_operands(n, 12), c = fp16_operands(n, 13);
  mpsim::io::write_npy(dir / "a.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(a)));
  mpsim::io::write_npy(dir / "b.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(b)));
  mpsim::io::write_npy(dir / "c.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(c)));
  // Values: the fp16 encodings decoded into float32 (all representable in fp16).
  std::vector<float> av(n), bv(n);
  for (std::size_t i = 0; i < n; ++i) {
    av[i] = static_cast<float>(mpsim::decode(a[i], mpsim::fp16()));
    bv[i] = static_cast<float>(mpsim::decode(b[i], mpsim::fp16()));
  }
  const std::string cases[] = {
      "fma --format fp16 --bits --mode sr --seed 5 " + p(dir, "a.npy") + " " + p(dir, "b.npy") + " " + p(dir, "c.npy"),
      "div --format fp16 --bits --mode rtz --like cuda-sm90 " + p(dir, "a.npy") + " " + p(dir, "b.npy"),
      "sqrt --format fp16 --bits " + p(dir, "c.npy"),
  };
  std::size_t outputs = 0;
  for (const std::string& args : cases) {
    const auto whole = run_arith(dir, args + " " + p(dir, "whole.npy"));
    REQUIRE(whole.status == 0);
    const auto want = mpsim::test::read_bytes(dir / "whole.npy");
    // (The one-chunk output is checked element by element against the library by the cases above.)
    const auto wa = mpsim::io::read_npy(dir / "whole.npy");
    REQUIRE(wa.count() == n);
    for (const std::size_t chunk : {1, 333, 4096}) {
      const auto res = run_arith(dir, args + " --chunk " + std::to_string(chunk) + " " + p(dir, "chunked.npy"));
      REQUIRE(res.status == 0);
      CHECK(res.output.substr(res.output.find("(encodings)")) == whole.output.substr(whole.output.find("(encodings)")));
      CHECK(mpsim::test::read_bytes(dir / "chunked.npy") == want);
      ++outputs;
    }
  }
  // A bad element in a later chunk: one message naming it, and no output (nor temporary) left.
  std::vector<float> bad = av;
  bad[4321] = 0.1f;  // not an fp16 value
  mpsim::io::write_npy(dir / "bad.npy", mpsim::io::make_npy(std::span<const float>(bad)));
  mpsim::io::write_npy(dir / "bv.npy", mpsim::io::make_npy(std::span<const float>(bv)));
  const auto before = dir.files().size();
  const auto res = run_arith(
      dir, "add --format fp16 --chunk 1000 " + p(dir, "bv.npy") + " " + p(dir, "bad.npy") + " " + p(dir, "out.npy"));
  CHECK(res.status == 2);
  CHECK(res.output.find("bad.npy: element 4321") != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "out.npy"));
  CHECK(dir.files().size() == before);
  WARN("compared " << outputs << " chunked outputs of " << n << " elements with the one-chunk output; a bad "
                   << "element in the fifth chunk: " << res.output);
}

TEST_CASE("mpsim arith add_sat / mul_sat / fma_sat: the PTX .sat forms, +0 for -0 on the H100", "[arith_cli]") {
  // Operand pairs the H100 recording lists (data/hardware/nvidia-h100-80gb-hbm3/arith.json): 0 * -0 and
  // 0x0001 * 0x8001 (a negative product rounding to zero) give +0 from __hmul_sat; IEEE's clamp keeps -0.
  ScratchDir dir("arith-cli-sat");
  const std::vector<std::uint16_t> a = {0x0000, 0x0001, 0x3c00, 0x7e00, 0x3800, 0x8000},
                                   b = {0x8000, 0x8001, 0x4000, 0x3c00, 0x3c00, 0x8000},
                                   c = {0x8000, 0x0000, 0xc400, 0x0000, 0x0000, 0x8000};
  mpsim::io::write_npy(dir / "a.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(a)));
  mpsim::io::write_npy(dir / "b.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(b)));
  mpsim::io::write_npy(dir / "c.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(c)));
  auto run = [&](const std::string& op, const std::string& like) {
    const bool fma = op == "fma_sat";
    const auto res =
        run_arith(dir, fmt::format("{} --format fp16 --like {} --bits {} {} {}{}", op, like, p(dir, "a.npy"),
                                   p(dir, "b.npy"), fma ? p(dir, "c.npy") + " " : "", p(dir, "out.npy")));
    INFO(res.output);
    REQUIRE(res.status == 0);
    const auto out = mpsim::io::read_npy(dir / "out.npy");
    const auto* got = reinterpret_cast<const std::uint16_t*>(out.data.data());
    return std::vector<std::uint16_t>(got, got + a.size());
  };
  const auto mul_h100 = run("mul_sat", "cuda-sm90"), mul_ieee = run("mul_sat", "ieee");
  CHECK(mul_h100[0] == 0x0000);
  CHECK(mul_ieee[0] == 0x8000);
  CHECK(mul_h100[1] == 0x0000);
  CHECK(mul_ieee[1] == 0x8000);
  CHECK(mul_h100[2] == 0x3c00);  // 2 clamped to 1
  CHECK(mul_h100[3] == 0x0000);  // NaN -> +0
  CHECK(mul_h100[4] == 0x3800);  // 0.5 unchanged
  const auto add_h100 = run("add_sat", "cuda-sm90"), add_ieee = run("add_sat", "ieee");
  CHECK(add_h100[5] == 0x0000);  // -0 + -0: recorded +0 on the H100 (the one add_sat difference)
  CHECK(add_ieee[5] == 0x8000);
  const auto fma_h100 = run("fma_sat", "cuda-sm90");
  CHECK(fma_h100[0] == 0x0000);  // 0 * -0 + -0 = -0 -> +0
  CHECK(fma_h100[2] == 0x0000);  // 1 * 2 - 4 = -2 -> +0
  const auto bad =
      run_arith(dir, fmt::format("sqrt_sat --format fp16 --bits {} {}", p(dir, "a.npy"), p(dir, "out.npy")));
  CHECK(bad.status == 2);
  CHECK(bad.output.find("sqrt_sat") != std::string::npos);
}
