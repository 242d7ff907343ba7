// mpsim gemm (tools/mpsim/gemm.cpp): D from the recorded GPU inputs equals the recorded results; inputs
// are rounded to the formats first; bad input (shapes, model, formats, files) exits 2 with a message
// naming it and leaves no output file.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "mpsim/mma/dot.hpp"
#include "run_mpsim.hpp"

using namespace mpsim;
using namespace mpsim::test;

namespace {

void write_matrix(const std::filesystem::path& p, const std::vector<double>& v, std::int64_t r, std::int64_t c) {
  io::write_npy(p, io::make_npy(std::span<const double>(v), {r, c}));
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("mpsim gemm reproduces recorded H100 fp8 dot products with fp16 output", "[gemm_cli]") {
  ScratchDir dir("gemm-cli");
  const char* root = std::getenv("MPSIM_SOURCE_ROOT");
  REQUIRE(root != nullptr);
  io::SourceOptions opt;
  opt.dtype = io::DType::fp8_e4m3_bits;
  const auto src = io::TensorSource::open(std::filesystem::path(root) / "data/mma/recorded/h100_e4m3.npz", opt);
  const auto a = src.read_double(src.tensor("a")), b = src.read_double(src.tensor("b")),
             c = src.read_double(src.tensor("c"));
  const auto d = src.read_float(src.tensor("d_fp16"));
  // n recorded cases as one GEMM: A = rows a_i, B = columns b_i, C diagonal c_i; D's diagonal is compared.
  const std::int64_t n = 64, K = 32;
  std::vector<double> A(a.begin(), a.begin() + n * K), B(static_cast<std::size_t>(K * n)),
      C(static_cast<std::size_t>(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t k = 0; k < K; ++k)
      B[static_cast<std::size_t>(k * n + i)] = b[static_cast<std::size_t>(i * K + k)];
    C[static_cast<std::size_t>(i * n + i)] = c[static_cast<std::size_t>(i)];  // fp32 values: gemm rounds C to fp16
  }
  write_matrix(dir / "A.npy", A, n, K);
  write_matrix(dir / "B.npy", B, K, n);
  write_matrix(dir / "C.npy", C, n, n);
  const auto res = run_mpsim(dir, "gemm --model h100 --in fp8_e4m3 --out fp16 " + quote((dir / "A.npy").string()) +
                                      " " + quote((dir / "B.npy").string()) + " " + quote((dir / "C.npy").string()) +
                                      " " + quote((dir / "D.npy").string()));
  REQUIRE(res.status == 0);
  const auto D = io::to_float(io::read_npy(dir / "D.npy"));
  REQUIRE(D.size() == static_cast<std::size_t>(n * n));
  std::size_t miss = 0;
  for (std::int64_t i = 0; i < n; ++i)
    miss += bits(D[static_cast<std::size_t>(i * n + i)]) != bits(d[static_cast<std::size_t>(i)]);
  WARN("mpsim gemm h100 fp8_e4m3 -> fp16: " << n << " recorded cases, " << miss << " mismatches");
  CHECK(miss == 0);
  CHECK(res.output.find("rounded to the formats first") != std::string::npos);
}

TEST_CASE("mpsim gemm rounds inputs to the formats first, and rejects bad input with status 2", "[gemm_cli]") {
  ScratchDir dir("gemm-cli");
  // 1 + 2^-12 is not an fp16 value: rounded to 1 first, so D = 1 * 1 = 1 exactly.
  write_matrix(dir / "A.npy", {1.0 + std::ldexp(1.0, -12)}, 1, 1);
  write_matrix(dir / "B.npy", {1.0}, 1, 1);
  auto res = run_mpsim(dir, "gemm --model a100 " + quote((dir / "A.npy").string()) + " " +
                                quote((dir / "B.npy").string()) + " " + quote((dir / "D.npy").string()));
  REQUIRE(res.status == 0);
  CHECK(io::to_float(io::read_npy(dir / "D.npy")) == std::vector<float>{1.0f});
  CHECK(res.output.find("1 of A, 0 of B") != std::string::npos);

  write_matrix(dir / "B2.npy", {1.0, 2.0}, 2, 1);
  const struct {
    std::string args, message;
  } bad[] = {
      {"--model a100 A.npy B2.npy E.npy", "do not multiply"},
      {"--model h900 A.npy B.npy E.npy", "known: v100"},
      {"--model a100 --in fp8_e4m3 A.npy B.npy E.npy", "model a100 has no"},
      {"--model h100 --in bf16 --out fp16 A.npy B.npy E.npy", "fp16 out only"},
      {"--model h100 --in fp16 --out bf16 A.npy B.npy E.npy", "not one a matrix unit writes"},
      {"--model h100 A.npy B.npy B2.npy E.npy", "C has shape"},
      {"--model mi300x --in fp8_e4m3 A.npy B.npy E.npy", "model mi300x has no fp8_e4m3"},
      {"--model mi250 --out fp16 A.npy B.npy E.npy", "fp32 out only"},
      {"--model h100 missing.npy B.npy E.npy", "missing.npy"},
  };
  for (const auto& b : bad) {
    std::string args = "gemm";
    std::istringstream words(b.args);
    for (std::string w; words >> w;) args += " " + (w.ends_with(".npy") ? quote((dir / w).string()) : w);
    res = run_mpsim(dir, args);
    INFO(b.args << ": " << res.output);
    CHECK(res.status == 2);
    CHECK(res.output.find(b.message) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir / "E.npy"));
  }
}

TEST_CASE("mpsim accumulation-error writes JSON and CSV; a bad --k exits 2", "[gemm_cli]") {
  ScratchDir dir("gemm-cli");
  auto res = run_mpsim(dir, "accumulation-error --model h100-fp8 --k 32..256 --trials 4 --json " +
                                quote((dir / "e.json").string()) + " --csv " + quote((dir / "e.csv").string()));
  REQUIRE(res.status == 0);
  std::ifstream csv(dir / "e.csv");
  std::string line;
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  CHECK(rows == 1 + 4 + 4);  // header, fast and promoted for K = 32, 64, 128, 256
  std::ifstream json(dir / "e.json");
  std::stringstream ss;
  ss << json.rdbuf();
  CHECK(ss.str().find("mpsim-accumulation-error-1") != std::string::npos);
  res = run_mpsim(dir, "accumulation-error --model h100-fp8 --k 64..32 --json " + quote((dir / "f.json").string()));
  CHECK(res.status == 2);
  CHECK(res.output.find("empty") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "f.json"));
  // Real operands: rows of A, columns of B.
  write_matrix(dir / "TA.npy", std::vector<double>(2 * 64, 1.0), 2, 64);
  write_matrix(dir / "TB.npy", std::vector<double>(64, 1.0), 64, 1);
  res = run_mpsim(dir, "accumulation-error --model h100-fp16 --k 32,64 --tensors " + quote((dir / "TA.npy").string()) +
                           " " + quote((dir / "TB.npy").string()) + " --csv " + quote((dir / "t.csv").string()));
  REQUIRE(res.status == 0);
  std::ifstream tcsv(dir / "t.csv");
  rows = 0;
  while (std::getline(tcsv, line)) ++rows;
  CHECK(rows == 1 + 2 + 2);
  res = run_mpsim(dir, "accumulation-error --model h100-fp16 --k 32 --tensors " + quote((dir / "TB.npy").string()) +
                           " " + quote((dir / "TB.npy").string()));
  CHECK(res.status == 2);
  CHECK(res.output.find("do not multiply") != std::string::npos);
  res = run_mpsim(dir, "accumulation-error --model h900-fp8");
  CHECK(res.status == 2);
  CHECK(res.output.find("known: v100") != std::string::npos);
}

TEST_CASE("mpsim gemm takes the AMD CDNA profiles: D equals mma::gemm under the named unit", "[gemm_cli]") {
  ScratchDir dir("gemm-cli-cdna");
  // fp16 values from 2^-20 to 2^9 with both signs, K = 12 (blocks of 8 on mi300x: one padded).
  std::vector<double> A(3 * 12), B(12 * 2);
  for (std::size_t i = 0; i < A.size(); ++i)
    A[i] = std::ldexp((i % 2 ? -1.0 : 1.0) * (1 + 0.125 * (i % 7)), static_cast<int>(i % 30) - 20);
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = std::ldexp(1.0 + 0.25 * (i % 3), static_cast<int>(i % 11) - 5);
  write_matrix(dir / "A.npy", A, 3, 12);
  write_matrix(dir / "B.npy", B, 12, 2);
  for (const char* model : {"mi100", "mi250", "mi300x"}) {
    auto res = run_mpsim(dir, std::string("gemm --model ") + model + " " + quote((dir / "A.npy").string()) + " " +
                                  quote((dir / "B.npy").string()) + " " + quote((dir / "D.npy").string()));
    INFO(res.output);
    REQUIRE(res.status == 0);
    CHECK(res.output.find("no AMD hardware data") != std::string::npos);
    std::vector<double> want(6);
    mma::gemm(mma::matrix_unit(model, fp16(), fp32()), 3, 2, 12, A.data(), B.data(), nullptr, want.data());
    const auto got = io::to_float(io::read_npy(dir / "D.npy"));
    std::size_t miss = 0;
    for (std::size_t i = 0; i < 6; ++i) miss += got[i] != static_cast<float>(want[i]);
    WARN("mpsim gemm --model " << model << ": 6 outputs, " << miss << " differ from mma::gemm");
    CHECK(miss == 0);
  }
}
