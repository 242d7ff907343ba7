// The matrix-unit models against every recorded GPU result (data/mma/recorded/, converted from
// north-numerical-computing/MATLAB-tensor-core model_validation/ by scripts/mma_recorded_convert.py):
// 48 files of 5,000 dot products each, compared bit for bit; then mutated models, which must miss.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "mpsim/mma/dot.hpp"

using namespace mpsim;
namespace fs = std::filesystem;

namespace {

fs::path recorded_dir() {
  const char* root = std::getenv("MPSIM_SOURCE_ROOT");
  return fs::path(root ? root : ".") / "data" / "mma" / "recorded";
}

struct RecordedSet {
  std::string gpu, input_name;
  const Format* input = nullptr;
  std::size_t cases = 0, k = 0;
  std::vector<double> a, b, c;
  std::vector<std::pair<const Format*, std::vector<float>>> results;  // (output format, recorded D)
};

RecordedSet load(const fs::path& file) {
  RecordedSet s;
  const std::string stem = file.stem().string();  // "<gpu>_<format>"
  s.gpu = stem.substr(0, stem.find('_'));
  s.input_name = stem.substr(stem.find('_') + 1);
  io::SourceOptions opt;
  if (s.input_name == "e4m3") {
    s.input = &fp8_e4m3();
    opt.dtype = io::DType::fp8_e4m3_bits;
  } else if (s.input_name == "e5m2") {
    s.input = &fp8_e5m2();
    opt.dtype = io::DType::fp8_e5m2_bits;
  } else if (s.input_name == "bf16") {
    s.input = &bf16();
    opt.dtype = io::DType::bf16_bits;
  } else if (s.input_name == "fp16") s.input = &fp16();
  else s.input = &tf32();
  const auto src = io::TensorSource::open(file, opt);
  const auto& ta = src.tensor("a");
  s.cases = static_cast<std::size_t>(ta.shape.at(0));
  s.k = static_cast<std::size_t>(ta.shape.at(1));
  s.a = src.read_double(ta);
  s.b = src.read_double(src.tensor("b"));
  s.c = src.read_double(src.tensor("c"));
  for (const auto& t : src.tensors()) {
    if (t.name == "d_fp32") s.results.push_back({&fp32(), src.read_float(t)});
    if (t.name == "d_fp16") s.results.push_back({&fp16(), src.read_float(t)});
  }
  return s;
}

std::vector<RecordedSet> load_all() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(recorded_dir()))
    if (e.path().extension() == ".npz") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<RecordedSet> sets;
  for (const auto& f : files) sets.push_back(load(f));
  return sets;
}

// The C each recording ran with: as the file gives it, rounded by the GPU to fp16 for fp16 output
// (__float2half, model_validation/CUDA/*.cu); zero for Hopper fp8 with fp32 output, which wgmma ran as
// D = A B (Validate_TC_models.m).
double recorded_c(const RecordedSet& s, const Format& out, std::size_t i) {
  if ((s.gpu == "h100" || s.gpu == "h200") && s.input->man_bits <= 3 && out == fp32()) return 0.0;
  std::vector<double> c{s.c[i]};
  mma::round_to_format(c, out);
  return c[0];
}

// Mismatches of `unit` over one recorded file; the first one is printed.
std::size_t mismatches(const mma::MatrixUnit& unit, const RecordedSet& s, const Format& out,
                       const std::vector<float>& recorded, bool print_first = true) {
  std::size_t miss = 0;
  for (std::size_t i = 0; i < s.cases; ++i) {
    const std::span<const double> a(s.a.data() + i * s.k, s.k), b(s.b.data() + i * s.k, s.k);
    const double d = mma::dot(unit, a, b, recorded_c(s, out, i));
    const auto got = std::bit_cast<std::uint32_t>(static_cast<float>(d));
    const auto want = std::bit_cast<std::uint32_t>(recorded[i]);
    if (got != want) {
      if (miss == 0 && print_first)
        std::printf("    first mismatch: case %zu: model %08x, GPU %08x\n", i, static_cast<unsigned>(got),
                    static_cast<unsigned>(want));
      ++miss;
    }
  }
  return miss;
}

}  // namespace

TEST_CASE("every recorded tensor-core result equals the model bit for bit", "[mma]") {
  const auto sets = load_all();
  std::size_t files = 0, cases = 0, missed = 0;
  for (const auto& s : sets) {
    for (const auto& [out, recorded] : s.results) {
      const mma::MatrixUnit unit = mma::matrix_unit(s.gpu, *s.input, *out);
      REQUIRE(recorded.size() == s.cases);
      CHECK_FALSE(unit.recorded.empty());  // the unit knows it is checked here
      const std::size_t miss = mismatches(unit, s, *out, recorded);
      std::printf("  %-5s %-5s -> %-4s  K=%-2zu %zu cases, %zu mismatches  (%s)\n", s.gpu.c_str(), s.input_name.c_str(),
                  out->name.c_str(), s.k, s.cases, miss, mma::describe(unit).c_str());
      ++files;
      cases += s.cases;
      missed += miss;
    }
  }
  std::printf("recorded: %zu files, %zu cases, %zu mismatches\n", files, cases, missed);
  CHECK(mma::matrix_unit("l40s", fp8_e4m3(), fp16()).recorded.empty());  // no L40S fp8 -> fp16 recording
  CHECK(files == 48);
  CHECK(cases == 240000);
  CHECK(missed == 0);
}

TEST_CASE("a mutated model misses the recordings", "[mma]") {
  const auto sets = load_all();
  auto find = [&](const std::string& gpu, const std::string& in) -> const RecordedSet& {
    for (const auto& s : sets)
      if (s.gpu == gpu && s.input_name == in) return s;
    FAIL("no recorded set " << gpu << " " << in);
    return sets.front();
  };
  struct Mutation {
    const char* what;
    const char* gpu;
    const char* input;
    void (*apply)(mma::MatrixUnit&);
  };
  const Mutation mutations[] = {
      {"one fewer alignment bit", "h100", "fp16", [](mma::MatrixUnit& u) { --u.block.align_bits; }},
      {"RNE instead of RZ", "h100", "fp16",
       [](mma::MatrixUnit& u) { u.block.rounding = mma::FinalRounding::nearest_even; }},
      {"block 8 instead of 16", "h100", "fp16", [](mma::MatrixUnit& u) { u.block.products = 8; }},
      {"one fewer alignment bit", "v100", "fp16", [](mma::MatrixUnit& u) { --u.block.align_bits; }},
      {"one more alignment bit", "a100", "bf16", [](mma::MatrixUnit& u) { ++u.block.align_bits; }},
      {"one fewer alignment bit", "h100", "e4m3", [](mma::MatrixUnit& u) { --u.block.align_bits; }},
      {"sticky bit in the alignment", "b200", "bf16", [](mma::MatrixUnit& u) { u.block.sticky = true; }},
      {"fp8 as one block of 32 (B200TC.m)", "b200", "e4m3",
       [](mma::MatrixUnit& u) {
         u.instruction.k = 0;
         u.block.products = 32;
       }},
      {"fp8 split into halves, not pairs", "h100", "e5m2", [](mma::MatrixUnit& u) { u.instruction.interleave = 16; }},
      {"fp8->fp16: C into the first block", "h100", "e4m3", [](mma::MatrixUnit& u) { u.instruction.k = 0; }},
      {"fp8->fp16: blocks held in fp32 (RZ)", "h100", "e4m3",
       [](mma::MatrixUnit& u) {
         u.instruction.block_output = fp32();
         u.block.rounding = mma::FinalRounding::toward_zero;
         u.block.result_bits = 23;
         u.block.exponent_floor = -133;
       }},
      {"fp8->fp16: C added toward zero", "h200", "e4m3",
       [](mma::MatrixUnit& u) { u.instruction.end_rounding = mma::FinalRounding::toward_zero; }},
      {"fp8->fp16: 13 alignment bits (fp8 path)", "b200", "e5m2", [](mma::MatrixUnit& u) { u.block.align_bits = 13; }},
      {"fp8->fp16: exponent floor -133, not -21", "h100", "e4m3",
       [](mma::MatrixUnit& u) { u.block.exponent_floor = -133; }},
  };
  for (const auto& m : mutations) {
    const RecordedSet& s = find(m.gpu, m.input);
    // The fp16-output recording for the fp8 split, fp32 for the others.
    const bool fp16_out = std::string(m.what).find("pairs") != std::string::npos ||
                          std::string(m.what).find("fp8->fp16") != std::string::npos;
    const auto& [out, recorded] = fp16_out ? s.results.back() : s.results.front();
    mma::MatrixUnit unit = mma::matrix_unit(s.gpu, *s.input, *out);
    m.apply(unit);
    const std::size_t miss = mismatches(unit, s, *out, recorded, false);
    std::printf("  mutation %-40s on %s %s -> %s: %zu of %zu cases differ\n", m.what, m.gpu, m.input, out->name.c_str(),
                miss, s.cases);
    // The exponent floor of the fp16 path lies below every recorded result: the data cannot tell it (printed).
    if (std::string(m.what).find("floor") == std::string::npos) CHECK(miss > 0);
  }
}
