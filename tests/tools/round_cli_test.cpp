// Tests of `mpsim round` (tools/mpsim/round.cpp): runs the real binary ($MPSIM_BIN) on .npy files
// written here and checks every output element against round_bits() computed in the test, the
// statistics against counts made here, the exit codes, and that a failing run leaves no file behind.
#include "catch_compat.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "../format/recorded_conversions.hpp"
#include "../io/test_files.hpp"
#include "mpsim/format/block.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/format/soft_error.hpp"
#include "mpsim/io/npy.hpp"
#include "run_mpsim.hpp"

using namespace mpsim;
using mpsim::io::DType;
using mpsim::test::ScratchDir;

namespace {

using mpsim::test::quote;
using mpsim::test::run_mpsim;

// Inputs covering every binade of float from subnormals to overflow, both signs, ties of fp16 and
// bf16, and the specials.
std::vector<float> test_inputs(std::size_t random_count) {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          1.00048828125f /* fp16 tie 1 + 2^-11 */,
                          65504.0f,
                          65520.0f,
                          65536.0f,
                          448.0f,
                          464.0f,
                          57344.0f,
                          61440.0f,
                          std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25),
                          std::ldexp(3.0f, -26),
                          std::ldexp(1.0f, -149),
                          -std::ldexp(1.0f, -126),
                          1.00390625f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max()};
  std::mt19937_64 gen(12345);
  std::uniform_real_distribution<float> expo(-40.0f, 40.0f);
  for (std::size_t i = 0; i < random_count; ++i) {
    const float v = std::exp2(expo(gen));
    x.push_back((gen() & 1) ? -v : v);
  }
  return x;
}

// The block format and rounding that a `round --to` spec ("<format> [--mode sr|rtz] [--seed S]
// [--block-scale rceil]") names: the in-process reference of the streaming tests.
std::pair<mpsim::BlockFormat, mpsim::Rounding> block_spec(const std::string& spec) {
  const auto has = [&](const char* word) { return spec.find(word) != std::string::npos; };
  const mpsim::BlockFormat bf = mpsim::parse_block_format(
      spec.substr(0, spec.find(' ')), 0, has("rceil") ? mpsim::BlockScaleRule::rceil : mpsim::BlockScaleRule::floor);
  mpsim::Rounding r = mpsim::Rounding::of(has("--mode sr")    ? mpsim::RoundingMode::stochastic
                                          : has("--mode rtz") ? mpsim::RoundingMode::toward_zero
                                                              : mpsim::RoundingMode::nearest_even);
  if (const auto at = spec.find("--seed "); at != std::string::npos) r.seed = std::stoull(spec.substr(at + 7));
  return {bf, r};
}

bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

}  // namespace

TEST_CASE("mpsim round: simulate mode matches round_bits for every format and mode", "[round_cli]") {
  ScratchDir dir("round-cli");
  const auto x = test_inputs(2000);
  mpsim::io::write_npy(dir / "x.npy",
                       mpsim::io::make_npy(std::span<const float>(x), {2, static_cast<std::int64_t>(x.size() / 2)}));
  const char* formats[] = {"fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2", "e5m7", "float8_e4m3fn"};
  const char* modes[] = {"rne", "rtz", "ru", "rd", "rna", "rto", "sr"};
  std::size_t checked = 0, mismatches = 0;
  for (const char* fname : formats) {
    for (const char* mname : modes) {
      const std::string extra = std::string(mname) == "sr" ? " --seed 99 --sr-bits 13" : "";
      const auto res = run_mpsim(dir, std::string("round --to ") + fname + " --mode " + mname + extra + " " +
                                          quote((dir / "x.npy").string()) + " " + quote((dir / "y.npy").string()));
      INFO(fname << " " << mname << ": " << res.output);
      REQUIRE(res.status == 0);
      const auto y = mpsim::io::read_npy(dir / "y.npy");
      CHECK(y.dtype == DType::f32);
      CHECK(y.shape == std::vector<std::int64_t>{2, static_cast<std::int64_t>(x.size() / 2)});
      const auto got = mpsim::io::to_float(y);
      REQUIRE(got.size() == x.size());
      const Format f = parse_format(fname);
      Rounding r = Rounding::of(parse_rounding_mode(mname));
      if (r.mode == RoundingMode::stochastic) r = Rounding::stochastic(99, 13);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double want = decode(round_bits(x[i], f, r, i), f);
        if (!same_value(got[i], want)) {
          if (++mismatches <= 5) UNSCOPED_INFO("x=" << x[i] << " got " << got[i] << " want " << want);
        }
        ++checked;
      }
    }
  }
  WARN("simulate mode: " << checked << " elements over 7 formats x 7 modes, " << mismatches << " mismatches");
  CHECK(mismatches == 0);
}

TEST_CASE("mpsim round --bits writes the encodings; float64 and float16 inputs; format options", "[round_cli]") {
  ScratchDir dir("round-cli");
  const auto x = test_inputs(500);
  const auto in = (dir / "x.npy").string();
  mpsim::io::write_npy(in, mpsim::io::make_npy(std::span<const float>(x)));
  std::size_t checked = 0;

  auto check_bits = [&](const std::string& args, const Format& f, const Rounding& r, DType want_dtype,
                        const std::vector<double>& xs) {
    const auto res = run_mpsim(dir, args);
    INFO(args << ": " << res.output);
    REQUIRE(res.status == 0);
    const auto y = mpsim::io::read_npy(dir / "y.npy");
    CHECK(y.dtype == want_dtype);
    REQUIRE(y.count() == xs.size());
    const auto got = mpsim::io::to_double(y);  // integers: exact
    std::size_t bad = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const std::uint64_t want = round_bits(xs[i], f, r, i);
      if (static_cast<std::uint64_t>(got[i]) != want && ++bad <= 5)
        UNSCOPED_INFO("x=" << xs[i] << " got " << got[i] << " want " << want);
      ++checked;
    }
    CHECK(bad == 0);
  };
  const std::vector<double> xd(x.begin(), x.end());
  const std::string io = " " + quote(in) + " " + quote((dir / "y.npy").string());
  check_bits("round --to fp16 --bits" + io, fp16(), {}, DType::u16, xd);
  check_bits("round --to bf16 --mode rtz --bits" + io, bf16(), Rounding::of(RoundingMode::toward_zero), DType::u16, xd);
  check_bits("round --to fp8_e4m3 --mode sr --seed 7 --bits" + io, fp8_e4m3(), Rounding::stochastic(7), DType::u8, xd);
  check_bits("round --to fp8_e5m2 --mode rna --bits" + io, fp8_e5m2(), Rounding::of(RoundingMode::nearest_away),
             DType::u8, xd);
  check_bits("round --to tf32 --bits" + io, tf32(), {}, DType::u32, xd);

  SECTION("format options: --subnormals flush, --overflow saturate, --daz") {
    const Format flush = make_format("fp16", 5, 10, 15, true, NanEncoding::ieee, Subnormals::flush, Overflow::to_inf);
    check_bits("round --to fp16 --subnormals flush --bits" + io, flush, {}, DType::u16, xd);
    const Format sat = make_format("fp8_e5m2", 5, 2, 15, true, NanEncoding::ieee, Subnormals::keep, Overflow::saturate);
    check_bits("round --to fp8_e5m2 --overflow saturate --bits" + io, sat, {}, DType::u8, xd);
    Rounding daz;
    daz.input_subnormals = InputSubnormals::zero;
    check_bits("round --to bf16 --daz --bits" + io, bf16(), daz, DType::u16, xd);
  }
  SECTION("float64 input: rounded directly from double, simulate and bits") {
    std::vector<double> d = xd;
    d.push_back(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));  // above the fp16 tie only in double
    d.push_back(std::ldexp(1.0, -1074));
    const auto ind = (dir / "d.npy").string();
    mpsim::io::write_npy(ind, mpsim::io::make_npy(std::span<const double>(d)));
    const std::string iod = " " + quote(ind) + " " + quote((dir / "y.npy").string());
    check_bits("round --to fp16 --bits" + iod, fp16(), {}, DType::u16, d);
    check_bits("round --to tf32 --mode ru --bits" + iod, tf32(), Rounding::of(RoundingMode::up), DType::u32, d);
    const auto res = run_mpsim(dir, "round --to fp16" + iod);
    REQUIRE(res.status == 0);
    const auto y = mpsim::io::read_npy(dir / "y.npy");
    CHECK(y.dtype == DType::f64);
    const auto got = mpsim::io::to_double(y);
    for (std::size_t i = 0; i < d.size(); ++i) CHECK(same_value(got[i], decode(round_bits(d[i], fp16()), fp16())));
    CHECK(got[d.size() - 2] == 1.0 + std::ldexp(1.0, -10));
  }
  SECTION("float16 input rounds to fp8 and stays float16; bf16 does not fit and is refused") {
    std::vector<std::uint16_t> h;
    std::vector<double> hv;
    for (std::uint32_t b = 0; b < 0x10000; b += 7) {
      h.push_back(static_cast<std::uint16_t>(b));
      hv.push_back(decode(b, fp16()));
    }
    const auto inh = (dir / "h.npy").string();
    mpsim::io::write_npy(inh, mpsim::io::make_npy(std::span<const std::uint16_t>(h), DType::f16));
    const std::string ioh = " " + quote(inh) + " " + quote((dir / "y.npy").string());
    const auto res = run_mpsim(dir, "round --to fp8_e5m2 --mode rd" + ioh);
    REQUIRE(res.status == 0);
    const auto y = mpsim::io::read_npy(dir / "y.npy");
    CHECK(y.dtype == DType::f16);
    const auto got = mpsim::io::to_double(y);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < hv.size(); ++i)
      if (!same_value(got[i], decode(round_bits(hv[i], fp8_e5m2(), Rounding::of(RoundingMode::down), i), fp8_e5m2())))
        ++bad;
    CHECK(bad == 0);
    checked += hv.size();
    std::filesystem::remove(dir / "y.npy");
    const auto bad_res = run_mpsim(dir, "round --to bf16" + ioh);
    CHECK(bad_res.status == 2);
    CHECK(bad_res.output.find("do not all fit in float16") != std::string::npos);
    CHECK(!std::filesystem::exists(dir / "y.npy"));
  }
  WARN("--bits and dtype cases: " << checked << " elements compared with round_bits");
}

TEST_CASE("mpsim round --stats-json and the summary line count what happened", "[round_cli]") {
  ScratchDir dir("round-cli");
  const auto x = test_inputs(3000);
  mpsim::io::write_npy(dir / "x.npy", mpsim::io::make_npy(std::span<const float>(x)));
  const auto res = run_mpsim(dir, "round --to fp16 --stats-json " + quote((dir / "s.json").string()) + " " +
                                      quote((dir / "x.npy").string()) + " " + quote((dir / "y.npy").string()));
  REQUIRE(res.status == 0);
  // Brute-force counts: classify every input by what round() does to it.
  std::uint64_t nan = 0, exact = 0, rounded = 0, underflow = 0, subnormal = 0, overflow = 0;
  for (float v : x) {
    if (std::isnan(v)) {
      ++nan;
      continue;
    }
    if (std::isinf(v) || v == 0) continue;
    const double r = decode(round_bits(v, fp16()), fp16());
    if (r == v) ++exact;
    else ++rounded;
    if (r == 0) ++underflow;
    if (r != 0 && std::fabs(r) < std::ldexp(1.0, -14)) ++subnormal;
    if (std::isinf(r)) ++overflow;
  }
  const auto j = read_json(dir / "s.json");
  INFO(j.dump());
  CHECK(j["count"] == x.size());
  CHECK(j["nan"] == nan);
  CHECK(j["exact"] == exact);
  CHECK(j["rounded"] == rounded);
  CHECK(j["underflow"] == underflow);
  CHECK(j["subnormal"] == subnormal);
  CHECK(j["overflow_num"] == overflow);
  CHECK(j["format"] == "fp16");
  CHECK(j["mode"] == "roundTiesToEven");
  const std::string line = res.output;
  CHECK(line.find("count " + std::to_string(x.size()) + ", exact " + std::to_string(exact) + ", rounded " +
                  std::to_string(rounded) + ", underflow " + std::to_string(underflow)) != std::string::npos);
  WARN("stats of " << x.size() << " values: exact " << exact << ", rounded " << rounded << ", underflow " << underflow
                   << ", subnormal " << subnormal << ", overflow " << overflow << ", nan " << nan);
}

TEST_CASE("mpsim round: bad options and inputs exit 2 with one message and leave no output", "[round_cli]") {
  ScratchDir dir("round-cli");
  const std::vector<float> x = {1.0f, 2.0f, 3.0f};
  const auto in = (dir / "x.npy").string();
  mpsim::io::write_npy(in, mpsim::io::make_npy(std::span<const float>(x)));
  const std::vector<std::int32_t> ints = {1, 2};
  mpsim::io::NpyArray ia;
  ia.dtype = DType::i32;
  ia.shape = {2};
  ia.data.resize(8);
  std::memcpy(ia.data.data(), ints.data(), 8);
  mpsim::io::write_npy(dir / "ints.npy", ia);
  auto bytes = mpsim::test::read_bytes(in);
  bytes.resize(bytes.size() - 2);
  mpsim::test::write_bytes(dir / "short.npy", bytes);
  mpsim::test::write_bytes(dir / "junk.npy", mpsim::test::bytes_of("hello, not an array"));
  const auto before = dir.files().size();

  const std::string out = quote((dir / "out.npy").string());
  const std::string stats = quote((dir / "s.json").string());
  const std::pair<std::string, std::string> cases[] = {
      {"round --to fp17 " + quote(in) + " " + out, "fp17"},
      {"round --to fp16 --mode nearest " + quote(in) + " " + out, "unknown rounding mode 'nearest'"},
      {"round --to fp16 --mode sr --sr-bits 0 " + quote(in) + " " + out, "random bits must be 1..32"},
      {"round --to fp16 --mode sr --sr-bits 33 " + quote(in) + " " + out, "random bits must be 1..32"},
      {"round --to fp16 --sr-bits 8 " + quote(in) + " " + out, "--sr-bits applies only to --mode sr"},
      {"round --to fp16 --mode sr --sr-bits many " + quote(in) + " " + out, "sr-bits"},
      {"round --to fp16 --subnormals drop " + quote(in) + " " + out, "--subnormals: unknown value 'drop'"},
      {"round --to fp16 --overflow wrap " + quote(in) + " " + out, "--overflow: unknown value 'wrap'"},
      {"round --to fp16 " + quote((dir / "short.npy").string()) + " " + out, "short.npy"},
      {"round --to fp16 " + quote((dir / "junk.npy").string()) + " " + out, "bad magic"},
      {"round --to fp16 " + quote((dir / "missing.npy").string()) + " " + out, "missing.npy: cannot open"},
      {"round --to fp16 " + quote((dir / "ints.npy").string()) + " " + out, "this one is int32"},
      {"round --to fp64 " + quote(in) + " " + out, "does not fit in float"},
      {"round --to fp64 --bits " + quote(in) + " " + out, "--bits writes formats of up to 32 bits"},
      {"round --to fp16 --stats-json " + stats + " " + quote(in) + " " + quote((dir / "no/such/dir/o.npy").string()),
       "cannot create"},
      {"round --to fp16 --stats-json " + quote((dir / "no/such/s.json").string()) + " " + quote(in) + " " + out,
       "cannot create"},
      {"round " + quote(in) + " " + out, "--to is required"},
      {"round --to fp16 --flip -0.5 " + quote(in) + " " + out,
       "--flip: the probability must be a number in [0, 1], got '-0.5'"},
      {"round --to fp16 --flip 1.5 " + quote(in) + " " + out,
       "--flip: the probability must be a number in [0, 1], got '1.5'"},
      {"round --to fp16 --flip nan --stats-json " + stats + " " + quote(in) + " " + out,
       "--flip: the probability must be"},
      {"round --to fp16 --flip abc --bits " + quote(in) + " " + out,
       "--flip: the probability must be a number in [0, 1], got 'abc'"},
      {"round --to mxfp8_e4m3 --flip 0.1 " + quote(in) + " " + out, "--flip does not apply to mxfp8_e4m3"},
      {"round --to fp16 --flip 0.1 --flip-bits sign " + quote(in) + " " + out,
       "--flip-bits: unknown value 'sign' (known: fraction, any)"},
  };
  for (const auto& [args, what] : cases) {
    const auto res = run_mpsim(dir, args);
    INFO("args: " << args << "\noutput: " << res.output);
    CHECK(res.status == 2);
    CHECK(res.output.find(what) != std::string::npos);
    CHECK(!std::filesystem::exists(dir / "out.npy"));
    CHECK(!std::filesystem::exists(dir / "s.json"));
    CHECK(dir.files().size() == before);  // no temporaries either
  }
  WARN("checked " << std::size(cases) << " bad invocations: exit 2, message, no output");
}

TEST_CASE("mpsim round --like reproduces a device profile element by element", "[round_cli]") {
  ScratchDir dir("round-cli-like");
  auto x = test_inputs(300);
  // Float subnormals of both signs (x86's bf16 conversion reads them as zero) and a NaN with a payload
  // (CUDA writes its canonical NaN whatever the payload).
  x.push_back(std::ldexp(1.5f, -130));
  x.push_back(-std::ldexp(1.0f, -127));
  x.push_back(std::bit_cast<float>(0xffc12345u));
  const auto in = (dir / "x.npy").string();
  mpsim::io::write_npy(in, mpsim::io::make_npy(std::span<const float>(x)));
  const std::string io = " " + quote(in) + " " + quote((dir / "y.npy").string());
  for (const char* name : {"ieee", "x86", "cuda-sm90"}) {
    for (const char* fmt_name : {"bf16", "fp16", "fp8_e4m3"}) {
      const Format& f = parse_format(fmt_name);
      const auto res = run_mpsim(dir, std::string("round --to ") + fmt_name + " --like " + name + " --bits" + io);
      INFO(name << " " << fmt_name << ": " << res.output);
      REQUIRE(res.status == 0);
      const auto got = mpsim::io::to_double(mpsim::io::read_npy(dir / "y.npy"));
      REQUIRE(got.size() == x.size());
      const Profile& p = find_profile(name);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < x.size(); ++i)
        bad += static_cast<std::uint64_t>(got[i]) != round_bits_like(p, x[i], f, {}, i);
      CHECK(bad == 0);
      // The profile's rules, written out here.
      const std::size_t sub = x.size() - 3, nan = x.size() - 1;
      if (std::string(name) == "x86" && f == bf16()) {
        CHECK(got[sub] == 0.0);         // +subnormal float -> +0
        CHECK(got[sub + 1] == 0x8000);  // -subnormal float -> -0
      } else if (f == bf16()) {
        CHECK(got[sub] == static_cast<double>(round_bits(x[sub], f)));
        CHECK(got[sub] != 0.0);
      }
      if (std::string(name) == "cuda-sm90" && f == bf16()) CHECK(got[nan] == 0x7fff);
      if (std::string(name) == "ieee") CHECK(got[nan] == static_cast<double>(round_bits(x[nan], f)));
    }
  }
  std::filesystem::remove(dir / "y.npy");
  const auto bad = run_mpsim(dir, "round --to fp16 --like nvidia" + io);
  CHECK(bad.status == 2);
  CHECK(bad.output.find("nvidia") != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "y.npy"));
}

// Simulate mode follows the device too: for every conversion the H100 recording holds, on the recorded
// edge inputs (tests/format/recorded_conversions.hpp), each value `mpsim round --like cuda-sm90` writes
// equals, bit for bit, the decoded encoding the same command writes with --bits (fp16's 0x7FFF as the
// float 0x7FFFE000, tf32 cvt.rna's cut signalling payloads and +-inf, .satfinite's +-max finite). The
// double runs (__double2half, __double2bfloat16) from float64 input.
TEST_CASE("mpsim round --like cuda-sm90: simulate-mode values are the decoded --bits encodings", "[round_cli]") {
  ScratchDir dir("round-cli-like-values");
  const auto patterns = mpsim::test::recorded_edge_patterns();
  std::vector<float> x(patterns.size());
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::bit_cast<float>(patterns[k]);
  std::vector<double> xd(x.begin(), x.end());  // NaN payloads widen into the top double mantissa bits
  xd.push_back(std::bit_cast<double>(0xfff8040000000000ull));
  mpsim::io::write_npy(dir / "x32.npy", mpsim::io::make_npy(std::span<const float>(x)));
  mpsim::io::write_npy(dir / "x64.npy", mpsim::io::make_npy(std::span<const double>(xd)));
  struct Case {
    std::string run, options, input;
  };
  std::vector<Case> cases;
  for (const auto& rc : mpsim::test::kRecordedConversions)
    cases.push_back(
        {rc.run,
         std::string("--to ") + rc.format + " --mode " + rc.cli_mode + (rc.saturate ? " --overflow saturate" : ""),
         "x32.npy"});
  cases.push_back({"fp64_fp16_rn", "--to fp16", "x64.npy"});
  cases.push_back({"fp64_bf16_rn", "--to bf16", "x64.npy"});
  std::uint64_t compared = 0, mismatches = 0, nan_values = 0;
  for (const auto& c : cases) {
    const std::string command = "round " + c.options + " --like cuda-sm90", in = " " + quote((dir / c.input).string());
    const auto values_run = run_mpsim(dir, command + in + " " + quote((dir / "values.npy").string()));
    const auto bits_run = run_mpsim(dir, command + " --bits" + in + " " + quote((dir / "bits.npy").string()));
    INFO(c.run << ": " << values_run.output << bits_run.output);
    REQUIRE(values_run.status == 0);
    REQUIRE(bits_run.status == 0);
    const auto values = mpsim::io::read_npy(dir / "values.npy");
    const auto bits = mpsim::io::to_double(mpsim::io::read_npy(dir / "bits.npy"));  // encodings < 2^32: exact
    Format fmt = parse_format(c.options.substr(5, c.options.find(' ', 5) - 5));
    const bool wide = c.input == "x64.npy";
    REQUIRE(bits.size() == (wide ? xd.size() : x.size()));
    REQUIRE(values.count() == bits.size());
    for (std::size_t k = 0; k < bits.size(); ++k) {
      const auto enc = static_cast<std::uint64_t>(bits[k]);
      bool same;
      if (wide) {
        const double want = decode(enc, fmt);
        double got;
        std::memcpy(&got, values.data.data() + 8 * k, 8);
        same = std::bit_cast<std::uint64_t>(got) == std::bit_cast<std::uint64_t>(want);
        nan_values += got != got;
      } else {
        const float want = decode_float(enc, fmt);
        std::uint32_t got;
        std::memcpy(&got, values.data.data() + 4 * k, 4);
        same = got == std::bit_cast<std::uint32_t>(want);
        nan_values += std::isnan(std::bit_cast<float>(got));
      }
      ++compared;
      if (!same) {
        ++mismatches;
        UNSCOPED_INFO(c.run << " element " << k << ": the value is not the decoded encoding 0x" << std::hex << enc);
      }
    }
  }
  CHECK(mismatches == 0);
  WARN("round --like cuda-sm90, values against decoded --bits: " << cases.size() << " recorded conversions, "
                                                                 << compared << " elements (" << nan_values
                                                                 << " NaN values), " << mismatches << " mismatches");
}

TEST_CASE("mpsim round streams: chunked output is bit-identical to one chunk, odd tails included", "[round_cli]") {
  ScratchDir dir("round-cli");
  // 10007 elements (prime): every chunk size below leaves an odd tail, and none divides the 16- or
  // 64-element vectors of the engine evenly.
  const auto x = test_inputs(10007 - 22);
  REQUIRE(x.size() == 10007);
  std::vector<double> xd(x.begin(), x.end());
  std::vector<std::uint16_t> xh(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    xh[i] = static_cast<std::uint16_t>(round_bits(static_cast<double>(x[i]), fp16()));
  mpsim::io::write_npy(dir / "x32.npy", mpsim::io::make_npy(std::span<const float>(x)));
  mpsim::io::write_npy(dir / "x64.npy", mpsim::io::make_npy(std::span<const double>(xd)));
  mpsim::io::write_npy(dir / "x16.npy", mpsim::io::make_npy(std::span<const std::uint16_t>(xh), DType::f16));
  const char* inputs[] = {"x32.npy", "x64.npy", "x16.npy"};
  const char* options[] = {"--to fp16",
                           "--to bf16 --mode sr --seed 7",
                           "--to fp8_e4m3 --bits",
                           "--to fp16 --mode sr --seed 3 --bits",
                           "--to e5m2 --mode rto",
                           "--to tf32 --bits",
                           "--to bf16 --mode rd --bits --like cuda-sm90"};
  const std::size_t chunks[] = {1, 97, 1000, 4096};
  std::size_t files = 0, bytes_compared = 0;
  for (const char* input : inputs) {
    for (const char* opt : options) {
      // float16 input holds only fp16 values: formats wider than fp16 need --bits (tested elsewhere).
      if (std::string(input) == "x16.npy" && std::string(opt).find("bf16") != std::string::npos &&
          std::string(opt).find("--bits") == std::string::npos)
        continue;
      const std::string in = quote((dir / input).string());
      const auto whole =
          run_mpsim(dir, std::string("round ") + opt + " " + in + " " + quote((dir / "whole.npy").string()));
      INFO(input << " " << opt << ": " << whole.output);
      REQUIRE(whole.status == 0);
      const auto want = mpsim::test::read_bytes(dir / "whole.npy");
      for (const std::size_t chunk : chunks) {
        const auto res = run_mpsim(dir, std::string("round ") + opt + " --chunk " + std::to_string(chunk) + " " + in +
                                            " " + quote((dir / "chunked.npy").string()));
        REQUIRE(res.status == 0);
        CHECK(res.output.substr(res.output.find("):")) == whole.output.substr(whole.output.find("):")));
        const auto got = mpsim::test::read_bytes(dir / "chunked.npy");
        CHECK(got == want);
        ++files;
        bytes_compared += got.size();
      }
    }
  }
  WARN("compared " << files << " chunked outputs (" << bytes_compared << " bytes) with the one-chunk output: "
                   << "chunks of 1, 97, 1000, 4096 elements over 10007");
}

TEST_CASE("mpsim round: a truncated input fails with one message and leaves no output", "[round_cli]") {
  ScratchDir dir("round-cli");
  const auto x = test_inputs(5000);
  mpsim::io::write_npy(dir / "x.npy", mpsim::io::make_npy(std::span<const float>(x)));
  auto bytes = mpsim::test::read_bytes(dir / "x.npy");
  bytes.resize(bytes.size() - 4 * 1000 - 1);  // 1000 values and a byte short
  mpsim::test::write_bytes(dir / "short.npy", bytes);
  const auto before = dir.files().size();
  const auto res = run_mpsim(dir, "round --to fp16 --chunk 512 " + quote((dir / "short.npy").string()) + " " +
                                      quote((dir / "out.npy").string()));
  CHECK(res.status == 2);
  CHECK(res.output.find("short.npy") != std::string::npos);
  CHECK(std::count(res.output.begin(), res.output.end(), '\n') == 1);
  CHECK(!std::filesystem::exists(dir / "out.npy"));
  CHECK(dir.files().size() == before);
  WARN("truncated input: " << res.output);
}

TEST_CASE("mpsim round --to tf32 --mode rna [--overflow saturate] --like cuda-sm90: the H100's cvt.rna(.satfinite)",
          "[round_cli]") {
  // The recorded H100 outputs (data/hardware/nvidia-h100-80gb-hbm3/ first_mismatches) as float patterns;
  // --bits writes tf32's 19-bit encodings, the pattern >> 13.
  ScratchDir dir("round-cli-tf32");
  const std::vector<float> x = {
      std::bit_cast<float>(0x7f800001u),      std::bit_cast<float>(0x7fa6f000u), 1.0f,
      std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(), std::bit_cast<float>(0xff802000u)};
  const auto in = (dir / "x.npy").string();
  mpsim::io::write_npy(in, mpsim::io::make_npy(std::span<const float>(x)));
  const std::string io = " " + quote(in) + " " + quote((dir / "y.npy").string());
  auto run = [&](const std::string& opts) {
    const auto res = run_mpsim(dir, "round --to tf32 --mode rna --like cuda-sm90 --bits " + opts + io);
    INFO(res.output);
    REQUIRE(res.status == 0);
    return mpsim::io::to_double(mpsim::io::read_npy(dir / "y.npy"));
  };
  const auto rna = run("");
  CHECK(rna[0] == (0x7f800000u >> 13));  // NaN payload only in the cut bits: +inf
  CHECK(rna[1] == (0x7fa6e000u >> 13));  // signalling payload cut, not quieted
  CHECK(rna[2] == (0x3f800000u >> 13));
  CHECK(rna[3] == (0x7f800000u >> 13));
  const auto sat = run("--overflow saturate");
  CHECK(sat[0] == (0x7f7fe000u >> 13));  // cvt.rna.satfinite: +max finite
  CHECK(sat[3] == (0x7f7fe000u >> 13));  // inf -> max finite
  CHECK(sat[4] == (0x7f7fe000u >> 13));  // float max (0x7F7FFFFF) rounds past tf32 max finite: saturated
  CHECK(sat[1] == (0x7fa6c000u >> 13));  // cut, then one unit down (identified from the NaN-block digests)
  CHECK(sat[5] == (0xff800000u >> 13));  // a cut payload of one unit: -inf
  CHECK(rna[5] == (0xff802000u >> 13));
  CHECK(rna[4] == (0x7f800000u >> 13));  // ... and without .satfinite overflows to +inf
}

TEST_CASE("mpsim round --to an MX format streams by rows: any chunk gives round_blocks' bits", "[round_cli]") {
  ScratchDir dir("round-cli");
  // 97 rows of 100 (three blocks of 32 and one of 4 per row): chunks of 1, 150 and 4096 values end inside
  // rows and blocks; stochastic rounding is keyed by the element index, so every chunking must agree with
  // the whole tensor quantized at once in-process.
  const std::size_t rows = 97, row = 100;
  const auto x = test_inputs(rows * row - 22);
  REQUIRE(x.size() == rows * row);
  mpsim::io::write_npy(dir / "x.npy", mpsim::io::make_npy(std::span<const float>(x), {97, 100}));
  std::size_t compared = 0, differ = 0;
  for (const char* to : {"mxfp8_e4m3 --mode sr --seed 5", "mxfp8_e5m2 --block-scale rceil", "mxfp4_e2m1 --mode rtz"}) {
    const auto [bf, r] = block_spec(to);
    std::vector<float> want(x.size());
    mpsim::round_blocks(x, want, row, bf, r);
    for (const char* chunk : {"", " --chunk 1", " --chunk 150", " --chunk 4096"}) {
      const auto res = run_mpsim(dir, std::string("round --to ") + to + chunk + " " + quote((dir / "x.npy").string()) +
                                          " " + quote((dir / "y.npy").string()));
      INFO(to << chunk << ": " << res.output);
      REQUIRE(res.status == 0);
      const auto y = mpsim::io::read_npy(dir / "y.npy");
      REQUIRE(y.shape == std::vector<std::int64_t>{97, 100});
      const auto got = mpsim::io::to_float(y);
      for (std::size_t i = 0; i < x.size(); ++i, ++compared)
        differ += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]);
    }
  }
  std::printf(
      "round --to MX, streamed by rows with chunks of 1, 150, 4096 and the default: %zu values vs "
      "round_blocks on the whole tensor, %zu differ\n",
      compared, differ);
  CHECK(differ == 0);
}

TEST_CASE(
    "mpsim round --to a block format, values and --bits, streams by rows: any chunk gives the whole tensor's bytes",
    "[round_cli]") {
  ScratchDir dir("round-cli");
  // 97 rows of 100 (MX: three blocks of 32 and one of 4 per row; nvfp4: six of 16 and one of 4); chunks of 1,
  // 150 and 4096 values end inside rows and blocks. The reference is the whole tensor quantized at once
  // in-process: round_blocks' values, and for --bits the very bytes npz_bytes makes of quantize_blocks'
  // elements, scales (and nvfp4's tensor scale). "with specials" holds inf and NaN: an MX block of them is
  // NaN, and the whole nvfp4 tensor is (its tensor scale is NaN).
  const std::size_t rows = 97, row = 100;
  const std::vector<float> with_specials = test_inputs(rows * row - 22);
  std::vector<float> finite = with_specials;
  for (auto& v : finite)
    if (!std::isfinite(v)) v = 0.5f;
  std::size_t values_compared = 0, values_differ = 0, files_compared = 0, bytes_compared = 0;
  for (const std::vector<float>* input : std::initializer_list<const std::vector<float>*>{&finite, &with_specials}) {
    const std::vector<float>& x = *input;
    mpsim::io::write_npy(dir / "x.npy", mpsim::io::make_npy(std::span<const float>(x), {97, 100}));
    for (const char* to :
         {"mxfp8_e4m3 --mode sr --seed 5", "mxfp4_e2m1 --mode rtz", "nvfp4", "nvfp4 --mode sr --seed 9"}) {
      const auto [bf, r] = block_spec(to);
      std::vector<float> want(x.size());
      mpsim::round_blocks(x, want, row, bf, r);
      const mpsim::BlockQuantized q = mpsim::quantize_blocks(x, row, bf, r);
      std::vector<std::pair<std::string, mpsim::io::NpyArray>> members = {
          {"elements", mpsim::io::make_npy(std::span<const std::uint8_t>(q.elements), {97, 100})},
          {"scales", mpsim::io::make_npy(std::span<const std::uint8_t>(q.scales),
                                         {97, static_cast<std::int64_t>((row + bf.block - 1) / bf.block)})}};
      if (bf.two_level)
        members.push_back({"tensor_scale", mpsim::io::make_npy(std::span<const float>(&q.tensor_scale, 1), {1})});
      const auto want_bits = mpsim::io::npz_bytes(members);
      for (const char* chunk : {"", " --chunk 1", " --chunk 150", " --chunk 4096"}) {
        const std::string io = " " + quote((dir / "x.npy").string()) + " " + quote((dir / "y.out").string());
        auto res = run_mpsim(dir, std::string("round --to ") + to + chunk + io);
        INFO(to << chunk << ": " << res.output);
        REQUIRE(res.status == 0);
        const auto y = mpsim::io::read_npy(dir / "y.out");
        REQUIRE(y.shape == std::vector<std::int64_t>{97, 100});
        const auto got = mpsim::io::to_float(y);
        for (std::size_t i = 0; i < x.size(); ++i, ++values_compared)
          values_differ += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]);
        res = run_mpsim(dir, std::string("round --bits --to ") + to + chunk + io);
        REQUIRE(res.status == 0);
        const auto got_bits = mpsim::test::read_bytes(dir / "y.out");
        CHECK(got_bits == want_bits);
        ++files_compared;
        bytes_compared += got_bits.size();
      }
    }
  }
  std::printf(
      "round --to mxfp8_e4m3 / mxfp4_e2m1 / nvfp4 streamed by rows (chunks of 1, 150, 4096 and the default), "
      "inputs finite and with inf/NaN: %zu values vs round_blocks on the whole tensor, %zu differ; %zu --bits "
      ".npz files (%zu bytes) vs npz_bytes of quantize_blocks on the whole tensor\n",
      values_compared, values_differ, files_compared, bytes_compared);
  CHECK(values_differ == 0);
}

TEST_CASE("mpsim round --to a block format: a truncated input fails with one message and leaves no output",
          "[round_cli]") {
  ScratchDir dir("round-cli");
  const auto x = test_inputs(64 * 100 - 22);
  mpsim::io::write_npy(dir / "x.npy", mpsim::io::make_npy(std::span<const float>(x), {64, 100}));
  auto bytes = mpsim::test::read_bytes(dir / "x.npy");
  bytes.resize(bytes.size() - 4 * 1000 - 1);  // 1000 values and a byte short
  mpsim::test::write_bytes(dir / "short.npy", bytes);
  const auto before = dir.files().size();
  int runs = 0;
  for (const char* to : {"nvfp4", "nvfp4 --bits", "mxfp8_e4m3 --bits", "mxfp4_e2m1"}) {
    const auto res = run_mpsim(dir, std::string("round --to ") + to + " --chunk 512 --stats-json " +
                                        quote((dir / "st.json").string()) + " " + quote((dir / "short.npy").string()) +
                                        " " + quote((dir / "out.npz").string()));
    INFO(to << ": " << res.output);
    CHECK(res.status == 2);
    CHECK(res.output.find("short.npy") != std::string::npos);
    CHECK(std::count(res.output.begin(), res.output.end(), '\n') == 1);
    CHECK(dir.files().size() == before);
    std::printf("round --to %s, truncated input: exit %d, %s", to, res.status, res.output.c_str());
    ++runs;
  }
  CHECK(runs == 4);
}

TEST_CASE("mpsim round --flip: soft errors in the encodings and the values, counted, the same in any chunks",
          "[round_cli]") {
  // The draws themselves are checked against Random123 in tests/format/soft_error_test.cpp; here the
  // command line's output is checked against round_bits() followed by the library's flip of those codes.
  ScratchDir dir("round-cli");
  const auto x = test_inputs(20000 - 22);
  std::vector<double> xd(x.begin(), x.end());
  mpsim::io::write_npy(dir / "x32.npy", mpsim::io::make_npy(std::span<const float>(x)));
  mpsim::io::write_npy(dir / "x64.npy", mpsim::io::make_npy(std::span<const double>(xd)));
  const std::string x32 = quote((dir / "x32.npy").string()), x64 = quote((dir / "x64.npy").string());
  std::size_t compared = 0, mismatches = 0;

  struct Case {
    const char* fmt;
    const std::string& in;
    SoftErrorBits bits;
  };
  for (const Case c : {Case{"fp16", x32, SoftErrorBits::fraction}, Case{"bf16", x64, SoftErrorBits::fraction},
                       Case{"fp8_e4m3", x32, SoftErrorBits::fraction}, Case{"tf32", x64, SoftErrorBits::fraction},
                       Case{"fp16", x64, SoftErrorBits::any}, Case{"fp8_e5m2", x32, SoftErrorBits::any}}) {
    const Format f = parse_format(c.fmt);
    const SoftErrors se{0.2, 5, c.bits};
    const int m = c.bits == SoftErrorBits::any ? f.storage_bits : f.man_bits;
    // The expected codes: round_bits of each input, then the library's flips.
    std::vector<std::uint32_t> want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      want[i] = static_cast<std::uint32_t>(round_bits(static_cast<double>(x[i]), f));
    const std::vector<std::uint32_t> plain = want;
    std::uint64_t want_flipped = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const SoftErrorDraw d = soft_error_draw(se, i, m);
      if (d.hit) want[i] ^= std::uint32_t{1} << d.bit;
      want_flipped += d.hit;
    }
    const std::string common = std::string("round --to ") + c.fmt + " --flip 0.2 --flip-seed 5 --flip-bits " +
                               std::string(to_string(c.bits)) + " ";
    const auto bits = run_mpsim(dir, common + "--bits --stats-json " + quote((dir / "s.json").string()) + " " + c.in +
                                         " " + quote((dir / "bits.npy").string()));
    INFO(c.fmt << ": " << bits.output);
    REQUIRE(bits.status == 0);
    CHECK(bits.output.find("flipped " + std::to_string(want_flipped)) != std::string::npos);
    const auto j = read_json(dir / "s.json");
    CHECK(j["flipped"] == want_flipped);
    CHECK(j["flip"] == 0.2);
    CHECK(j["flip_seed"] == 5);
    CHECK(j["flip_bits"] == std::string(to_string(c.bits)));
    const auto b = mpsim::io::read_npy(dir / "bits.npy");
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::uint32_t got = 0;
      std::memcpy(&got, b.data.data() + i * f.storage_bytes(), static_cast<std::size_t>(f.storage_bytes()));
      bad += got != want[i];
    }
    // Simulate mode: the decoded flipped encodings, in the input's dtype.
    const auto vals = run_mpsim(dir, common + c.in + " " + quote((dir / "vals.npy").string()));
    REQUIRE(vals.status == 0);
    const auto v = mpsim::io::to_double(mpsim::io::read_npy(dir / "vals.npy"));
    REQUIRE(v.size() == x.size());
    for (std::size_t i = 0; i < x.size(); ++i) bad += !same_value(v[i], decode(want[i], f));
    // --flip 0 gives plain rounding; chunks of 97 give the whole run's bytes.
    const auto zero = run_mpsim(dir, std::string("round --to ") + c.fmt + " --flip 0 --bits " + c.in + " " +
                                         quote((dir / "zero.npy").string()));
    REQUIRE(zero.status == 0);
    const auto z = mpsim::io::read_npy(dir / "zero.npy");
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::uint32_t got = 0;
      std::memcpy(&got, z.data.data() + i * f.storage_bytes(), static_cast<std::size_t>(f.storage_bytes()));
      bad += got != plain[i];
    }
    for (const char* kind : {"--bits ", ""}) {
      const auto chunked =
          run_mpsim(dir, common + kind + "--chunk 97 " + c.in + " " + quote((dir / "chunked.npy").string()));
      REQUIRE(chunked.status == 0);
      CHECK(mpsim::test::read_bytes(dir / "chunked.npy") ==
            mpsim::test::read_bytes(dir / (std::string(kind).empty() ? "vals.npy" : "bits.npy")));
    }
    compared += 3 * x.size();
    mismatches += bad;
    CHECK(bad == 0);
    CHECK(want_flipped > 0);
  }
  // With a device profile the flips follow its NaN rule: the values are still the decoded flipped --bits codes.
  {
    const std::string common = "round --to bf16 --mode rd --like cuda-sm90 --flip 0.3 --flip-seed 8 " + x32 + " ";
    REQUIRE(run_mpsim(dir, common + "--bits " + quote((dir / "bits.npy").string())).status == 0);
    REQUIRE(run_mpsim(dir, common + quote((dir / "vals.npy").string())).status == 0);
    const auto b = mpsim::io::read_npy(dir / "bits.npy");
    const auto v = mpsim::io::to_double(mpsim::io::read_npy(dir / "vals.npy"));
    REQUIRE(v.size() == x.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::uint16_t code = 0;
      std::memcpy(&code, b.data.data() + i * 2, 2);
      bad += !same_value(v[i], decode(code, bf16()));
    }
    compared += x.size();
    mismatches += bad;
    CHECK(bad == 0);
  }
  WARN("mpsim round --flip 0.2: " << compared << " codes and values compared with round_bits + flip_bits, "
                                  << mismatches << " mismatches; chunked runs identical");
}
