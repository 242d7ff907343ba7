// mpsim hw info|convert|arith|unary|gemm|hist|bench: the real CUDA kernels beside the emulation.
//
// convert / arith compare every one of 2^32 inputs (all floats; all fp16 or bf16 pairs) bit for bit,
// the emulation (kernels/emu.hpp under a device profile) running on the device next to the intrinsic.
// Results: a readable table on stdout, JSON with mismatch counts, the first mismatching inputs and
// per-2^24-block digests of both outputs (--json FILE), and with --record ROOT the same JSON stored as
// ROOT/<device>/<command>.json (data/hardware/ in the repository) for the CPU tests to recompute.
//
// Built without CUDA, `hw info` says so and exits 0; the other commands exit 2 with a message.
#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "command.hpp"
#include "digest.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/mma/dot.hpp"
#include "mpsim/mma/unit.hpp"
#include "mpsim/version.hpp"
#include "mpsim_cuda.hpp"
#include "runs_host.hpp"

namespace {

using nlohmann::json;
namespace cu = mpsim::cuda;

[[maybe_unused]] std::string hex(std::uint64_t v, int digits) { return fmt::format("0x{:0{}x}", v, digits); }

void require_cuda(const std::string& cmd) {
  if (!cu::cuda_built())
    throw mpsim::Error("mpsim hw " + cmd +
                       ": this mpsim was built without CUDA (nvcc not found or -Dcuda=disabled); rebuild with "
                       "-Dcuda=enabled on a machine with the CUDA toolkit");
}

[[maybe_unused]] std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

[[maybe_unused]] std::string version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

#if defined(MPSIM_WITH_CUDA)
json device_json(const cu::DeviceInfo& d) {
  return {{"name", d.name},
          {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
          {"driver_cuda_version", version_string(d.driver_version)},
          {"runtime_cuda_version", version_string(d.runtime_version)},
          {"multiprocessors", d.multiprocessors},
          {"global_memory_bytes", d.global_memory},
          {"date", utc_now()}};
}

std::string device_slug(const std::string& name) {
  std::string s;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!s.empty() && s.back() != '-') s += '-';
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "unknown-device" : s;
}
#endif

[[maybe_unused]] void write_outputs(const json& doc, const std::string& json_path, const std::string& record_root,
                                    const std::string& file_name) {
  const std::string text = doc.dump(1) + "\n";
  if (!json_path.empty()) mpsim::cli::write_report(json_path, text);
  if (!record_root.empty()) {
    const std::string slug = doc.at("device").value("slug", "unknown-device");
    const std::filesystem::path dir = std::filesystem::path(record_root) / slug;
    std::filesystem::create_directories(dir);
    mpsim::io::write_text_file(dir / file_name, text);
    fmt::print("recorded {}\n", (dir / file_name).string());
  }
}

// ---- info ----
void info_cmd(const std::string& json_path) {
  json doc;
  if (!cu::cuda_built()) {
    fmt::print("no CUDA device (built without CUDA)\n");
    doc = {{"present", false}, {"reason", "built without CUDA"}};
  } else {
#if defined(MPSIM_WITH_CUDA)
    const cu::DeviceInfo d = cu::device_info();
    if (!d.present) {
      fmt::print("no CUDA device ({})\n", d.why_absent);
      doc = {{"present", false}, {"reason", d.why_absent}};
    } else {
      fmt::print("device:              {}\n", d.name);
      fmt::print("compute capability:  {}.{}\n", d.cc_major, d.cc_minor);
      fmt::print("driver (CUDA):       {}\n", version_string(d.driver_version));
      fmt::print("runtime (CUDA):      {}\n", version_string(d.runtime_version));
      fmt::print("multiprocessors:     {}\n", d.multiprocessors);
      fmt::print("memory:              {:.1f} GiB, L2 {:.0f} MiB\n", d.global_memory / 1073741824.0,
                 d.l2_bytes / 1048576.0);
      doc = device_json(d);
      doc["present"] = true;
    }
#endif
  }
  doc["schema"] = "mpsim-hw-1";
  doc["mpsim_version"] = mpsim::kVersion;
  if (!json_path.empty()) mpsim::cli::write_report(json_path, doc.dump(2) + "\n");
}

#if defined(MPSIM_WITH_CUDA)
json compare_json(const std::string& name, const std::string& intrinsic, const cu::CompareResult& r, int digits) {
  json first = json::array();
  for (std::size_t k = 0; k < r.first_mismatch_index.size(); ++k)
    first.push_back({{"index", r.first_mismatch_index[k]},
                     {"hw", hex(r.first_mismatch_hw[k], digits)},
                     {"emu", hex(r.first_mismatch_emu[k], digits)}});
  json hw = json::array(), em = json::array();
  for (auto d : r.hw_digests) hw.push_back(mpsim::hw::digest_hex(d));
  for (auto d : r.emu_digests) em.push_back(mpsim::hw::digest_hex(d));
  return {{"name", name},
          {"intrinsic", intrinsic},
          {"elements", r.elements},
          {"mismatches", r.mismatches},
          {"nan_mismatches", r.nan_mismatches},
          {"first_mismatches", first},
          {"gpu_ms", r.gpu_ms},
          {"hw_digests", hw},
          {"emu_digests", em}};
}

json base_doc(const std::string& kind, const mpsim::Profile& profile) {
  const cu::DeviceInfo d = cu::device_info();
  json dev = device_json(d);
  dev["slug"] = device_slug(d.name);
  return {{"schema", "mpsim-hw-1"}, {"mpsim_version", mpsim::kVersion}, {"kind", kind},
          {"device", dev},          {"profile", profile.name},          {"block_elements", mpsim::hw::kDigestBlock}};
}

void print_compare_row(const std::string& name, const std::string& intrinsic, const cu::CompareResult& r, int digits) {
  std::string first = "-";
  if (!r.first_mismatch_index.empty())
    first = fmt::format("in {} hw {} emu {}", hex(r.first_mismatch_index[0], 8), hex(r.first_mismatch_hw[0], digits),
                        hex(r.first_mismatch_emu[0], digits));
  fmt::print("{:<20} {:<44} {:>12} {:>10} {:>9.2f}  {}\n", name, intrinsic, r.mismatches, r.nan_mismatches, r.gpu_ms,
             first);
}
#endif

void convert_cmd(const std::vector<std::string>& runs, const std::string& like, const std::string& json_path,
                 const std::string& record) {
  require_cuda("convert");
#if defined(MPSIM_WITH_CUDA)
  const mpsim::Profile& profile = mpsim::find_profile(like);
  cu::require_device("mpsim hw convert");
  json doc = base_doc("convert", profile);
  doc["runs"] = json::array();
  fmt::print("all 2^32 float inputs per run; emulation = round_bits under profile '{}', computed on the device\n",
             profile.name);
  fmt::print("{:<20} {:<44} {:>12} {:>10} {:>9}  {}\n", "run", "intrinsic", "mismatches", "NaN-only", "GPU ms",
             "first mismatch");
  const auto& all = mpsim::hw::convert_runs();
  for (std::size_t k = 0; k < all.size(); ++k) {
    const auto& run = all[k];
    if (!runs.empty() && std::find(runs.begin(), runs.end(), run.name) == runs.end()) continue;
    if (!run.on_device) {
      // tf32 / fp64 inputs: the hardware's digests only; `mpsim verify --against` and recorded_test
      // recompute the emulation's on the CPU.
      const cu::CompareResult res = cu::record_convert(static_cast<int>(k), run.elements());
      fmt::print("{:<20} {:<44} {:>12} {:>10} {:>9.2f}  (recorded: compared on the CPU by verify --against)\n",
                 run.name, run.intrinsic, "-", "-", res.gpu_ms);
      json hw = json::array();
      for (auto d : res.hw_digests) hw.push_back(mpsim::hw::digest_hex(d));
      doc["runs"].push_back({{"name", run.name},
                             {"intrinsic", run.intrinsic},
                             {"elements", res.elements},
                             {"compared_on_device", false},
                             {"gpu_ms", res.gpu_ms},
                             {"hw_digests", hw}});
      continue;
    }
    mpsim::emu::DevFormat f;
    mpsim::emu::DevRounding r;
    mpsim::hw::dev_params(run, profile, f, r);
    const cu::CompareResult res = cu::compare_convert(static_cast<int>(k), f, r);
    const int digits = run.format.rfind("fp8", 0) == 0 ? 2 : 4;
    print_compare_row(run.name, run.intrinsic, res, digits);
    doc["runs"].push_back(compare_json(run.name, run.intrinsic, res, digits));
  }
  write_outputs(doc, json_path, record, "convert.json");
#else
  (void)runs, (void)like, (void)json_path, (void)record;
#endif
}

void arith_cmd(const std::vector<std::string>& runs, const std::string& like, const std::string& json_path,
               const std::string& record) {
  require_cuda("arith");
#if defined(MPSIM_WITH_CUDA)
  const mpsim::Profile& profile = mpsim::find_profile(like);
  cu::require_device("mpsim hw arith");
  json doc = base_doc("arith", profile);
  doc["runs"] = json::array();
  fmt::print(
      "all 2^32 operand pairs per run (fma: 2^32 of the triples); emulation = correctly rounded RNE under "
      "profile '{}', on the device\n",
      profile.name);
  fmt::print("{:<20} {:<44} {:>12} {:>10} {:>9}  {}\n", "run", "intrinsic", "mismatches", "NaN-only", "GPU ms",
             "first mismatch (a<<16|b)");
  const auto& all = mpsim::hw::arith_runs();
  for (std::size_t k = 0; k < all.size(); ++k) {
    const auto& run = all[k];
    if (!runs.empty() && std::find(runs.begin(), runs.end(), run.name) == runs.end()) continue;
    mpsim::emu::DevFormat f;
    mpsim::emu::DevRounding r;
    mpsim::hw::dev_params(run, profile, f, r);
    const cu::CompareResult res = cu::compare_arith(static_cast<int>(k), f, r);
    print_compare_row(run.name, run.intrinsic, res, 4);
    doc["runs"].push_back(compare_json(run.name, run.intrinsic, res, 4));
  }
  write_outputs(doc, json_path, record, "arith.json");
#else
  (void)runs, (void)like, (void)json_path, (void)record;
#endif
}

#if defined(MPSIM_WITH_CUDA)
// Error of an approximate function in ulps of the format at the exact value.
double ulp_error(double got, double exact, const mpsim::Format& f) {
  if (std::isinf(exact) || std::isinf(got)) return got == exact ? 0.0 : INFINITY;
  const double ax = std::max(std::fabs(exact), f.min_normal);
  const int e = std::ilogb(ax);
  const double ulp = std::ldexp(1.0, std::max(e, f.emin) - f.man_bits);
  return std::fabs(got - exact) / ulp;
}
#endif

void unary_cmd(const std::string& json_path) {
  require_cuda("unary");
#if defined(MPSIM_WITH_CUDA)
  cu::require_device("mpsim hw unary");
  json doc = base_doc("unary", mpsim::profile_cuda_sm90());
  doc["runs"] = json::array();
  fmt::print(
      "all 2^16 inputs; error in ulps against the exact value (double libm, then compared to the correctly "
      "rounded result)\n");
  fmt::print("{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8}\n", "function", "inputs", "correct", "<=0.5ulp",
             "<=1ulp", "<=2ulp", "max ulp", "NaN diff");
  std::vector<std::uint16_t> in(65536), out(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<std::uint16_t>(i);
  for (auto fmt16 : {cu::Half16::fp16, cu::Half16::bf16}) {
    const mpsim::Format& f = fmt16 == cu::Half16::fp16 ? mpsim::fp16() : mpsim::bf16();
    for (auto op : {cu::Unary::sqrt, cu::Unary::rcp, cu::Unary::exp, cu::Unary::log}) {
      cu::unary_16(op, fmt16, in, out);
      static constexpr const char* names[] = {"sqrt", "rcp", "exp", "log"};
      const std::string name = f.name + "_" + names[static_cast<int>(op)];
      std::uint64_t n = 0, correct = 0, le_half = 0, le1 = 0, le2 = 0, nan_diff = 0;
      double worst = 0;
      std::uint32_t worst_input = 0;
      for (std::uint32_t i = 0; i < 65536; ++i) {
        const double x = mpsim::decode(i, f);
        double exact;
        switch (op) {
          case cu::Unary::sqrt: exact = std::sqrt(x); break;
          case cu::Unary::rcp: exact = 1.0 / x; break;
          case cu::Unary::exp: exact = std::exp(x); break;
          default: exact = std::log(x); break;
        }
        const double got = mpsim::decode(out[i], f);
        ++n;
        if (std::isnan(exact) || std::isnan(got)) {
          if (std::isnan(exact) != std::isnan(got)) ++nan_diff;
          continue;
        }
        if (out[i] == mpsim::round_bits(exact, f)) ++correct;
        const double e = ulp_error(got, exact, f);
        if (e <= 0.5) ++le_half;
        if (e <= 1) ++le1;
        if (e <= 2) ++le2;
        if (e > worst) {
          worst = e;
          worst_input = i;
        }
      }
      fmt::print("{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10.3g} {:>8}\n", name, n, correct, le_half, le1, le2, worst,
                 nan_diff);
      doc["runs"].push_back({{"name", name},
                             {"inputs", n},
                             {"correctly_rounded", correct},
                             {"le_half_ulp", le_half},
                             {"le_1_ulp", le1},
                             {"le_2_ulp", le2},
                             {"max_ulp", worst},
                             {"max_ulp_input", hex(worst_input, 4)},
                             {"nan_differences", nan_diff}});
    }
  }
  write_outputs(doc, json_path, "", "unary.json");
#else
  (void)json_path;
#endif
}

void gemm_cmd(const std::vector<std::string>& shapes, std::uint64_t seed, const std::string& json_path,
              const std::string& record, const std::string& dump_dir) {
  require_cuda("gemm");
#if defined(MPSIM_WITH_CUDA)
  if (!dump_dir.empty() && !std::filesystem::is_directory(dump_dir))
    throw mpsim::Error("--dump '" + dump_dir + "': not an existing folder");
  cu::require_device("mpsim hw gemm");
  json doc = base_doc("gemm", mpsim::profile_cuda_sm90());
  doc["results"] = json::array();
  fmt::print("{:<16} {:<20} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>8}\n", "shape", "kernel", "exact", "<=1ulp",
             "<=4ulp", "<=16ulp", "max ulp", "ms", "TFLOP/s", "vs cuBLAS");
  for (const std::string& s : shapes) {
    int m = 0, n = 0, k = 0;
    if (std::sscanf(s.c_str(), "%dx%dx%d", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 1)
      throw mpsim::Error("--shape '" + s + "': expected MxNxK with positive integers, e.g. 1024x1024x1024");
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<std::uint16_t> a(std::size_t(m) * k), b(std::size_t(k) * n);
    for (auto& v : a) v = static_cast<std::uint16_t>(mpsim::round_bits(dist(rng), mpsim::fp16()));
    for (auto& v : b) v = static_cast<std::uint16_t>(mpsim::round_bits(dist(rng), mpsim::fp16()));
    // The emulation: fp32 accumulation in order p = 0..k-1, one fma rounding per step (the SIMT kernel's order),
    // which is the library's "exact-fp32" unit.
    auto fp32_chain = [&](const mpsim::Format& in, const std::vector<double>& A, const std::vector<double>& B) {
      std::vector<double> d(std::size_t(m) * n);
      mpsim::mma::gemm(mpsim::mma::matrix_unit("exact-fp32", in, mpsim::fp32()), m, n, k, A.data(), B.data(), nullptr,
                       d.data());
      return std::vector<float>(d.begin(), d.end());
    };
    std::vector<double> ad(a.size()), bd(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) ad[i] = mpsim::decode(a[i], mpsim::fp16());
    for (std::size_t i = 0; i < b.size(); ++i) bd[i] = mpsim::decode(b[i], mpsim::fp16());
    const std::vector<float> ref = fp32_chain(mpsim::fp16(), ad, bd);
    const bool tiles = m % 16 == 0 && n % 16 == 0 && k % 16 == 0;
    // The matrix-unit model (lib/mpsim/mma) of the Hopper tensor cores, fp32 and fp16 outputs: each kernel's
    // D compared with it bit for bit (the WMMA kernels chain one mma per 16 of K, as the model chains its
    // instructions; cuBLAS picks its own kernels, so its column is a finding, not a check). One unit: unit.cpp
    // gives h100 and h200 the same Hopper parameters, so computing both would only repeat the work.
    const std::vector<std::string> models = {"h200"};
    std::vector<std::vector<double>> model_f32, model_f16;
    for (const auto& name : models)
      for (bool half : {false, true}) {
        const auto unit = mpsim::mma::matrix_unit(name, mpsim::fp16(), half ? mpsim::fp16() : mpsim::fp32());
        std::vector<double> d(std::size_t(m) * n);
        mpsim::mma::gemm(unit, m, n, k, ad.data(), bd.data(), nullptr, d.data());
        (half ? model_f16 : model_f32).push_back(std::move(d));
      }
    double cublas_ms = 0;
    // --dump: each kernel's C as raw little-endian float32, row-major (the inputs follow from --seed).
    auto dump = [&](const char* kernel, const std::vector<float>& c) {
      if (dump_dir.empty()) return;
      std::string bytes(c.size() * 4, '\0');
      std::memcpy(bytes.data(), c.data(), bytes.size());
      mpsim::io::write_text_file(std::filesystem::path(dump_dir) / fmt::format("{}_{}.f32", s, kernel), bytes);
    };
    // One row: a kernel's C against the in-order fp32 reference (ulp columns) and the model (bit equality).
    auto report = [&](const char* kernel, const std::vector<float>& c, const std::vector<float>& reference,
                      const std::vector<std::pair<std::string, const std::vector<double>*>>& model_d, bool half_out,
                      double ms) {
      const mpsim::Format& f = half_out ? mpsim::fp16() : mpsim::fp32();
      std::uint64_t exact = 0, le1 = 0, le4 = 0, le16 = 0;
      double worst = 0;
      for (std::size_t i = 0; i < c.size(); ++i) {
        // Reference in the output's format: the fp32 result, rounded to fp16 for fp16 outputs.
        const double r = half_out ? mpsim::round(static_cast<double>(reference[i]), f) : reference[i];
        const double e = ulp_error(c[i], r, f);
        if (std::bit_cast<std::uint32_t>(c[i]) == std::bit_cast<std::uint32_t>(static_cast<float>(r))) ++exact;
        if (e <= 1) ++le1;
        if (e <= 4) ++le4;
        if (e <= 16) ++le16;
        worst = std::max(worst, e);
      }
      const double tflops = 2.0 * m * n * k / (ms * 1e-3) / 1e12;
      json equal_to_model = json::object();
      std::string model_text;
      for (const auto& [label, d] : model_d) {
        std::uint64_t same = 0;
        for (std::size_t i = 0; i < c.size(); ++i)
          same += std::bit_cast<std::uint32_t>(c[i]) == std::bit_cast<std::uint32_t>(static_cast<float>((*d)[i]));
        equal_to_model[label] = same;
        model_text += fmt::format(" ={}:{}", label, same);
      }
      fmt::print("{:<16} {:<20} {:>10} {:>9} {:>9} {:>9} {:>9.3g} {:>10.4f} {:>9.2f} {:>8.2f}{}\n", s, kernel, exact,
                 le1, le4, le16, worst, ms, tflops, cublas_ms > 0 ? cublas_ms / ms : 0.0, model_text);
      doc["results"].push_back({{"shape", s},
                                {"kernel", kernel},
                                {"elements", c.size()},
                                {"exact", exact},
                                {"le_1_ulp", le1},
                                {"le_4_ulp", le4},
                                {"le_16_ulp", le16},
                                {"max_ulp", worst},
                                {"ms", ms},
                                {"tflops", tflops},
                                {"fraction_of_cublas_32f", cublas_ms > 0 ? cublas_ms / ms : 0.0},
                                {"equal_to_model", equal_to_model}});
    };
    for (auto kind : {cu::Gemm::cublas_32f, cu::Gemm::simt_f32, cu::Gemm::wmma_f32, cu::Gemm::wmma_f16,
                      cu::Gemm::cublas_16f, cu::Gemm::cublas_32f_fast_16f}) {
      if (!tiles && (kind == cu::Gemm::wmma_f32 || kind == cu::Gemm::wmma_f16)) continue;
      std::vector<float> c(std::size_t(m) * n);
      const double ms = cu::gemm(kind, m, n, k, a, b, c, 5);
      if (kind == cu::Gemm::cublas_32f) cublas_ms = ms;
      const bool half_out = kind == cu::Gemm::wmma_f16 || kind == cu::Gemm::cublas_16f;
      std::vector<std::pair<std::string, const std::vector<double>*>> model_d;
      for (std::size_t u = 0; u < models.size(); ++u)
        model_d.emplace_back(models[u], half_out ? &model_f16[u] : &model_f32[u]);
      report(cu::gemm_name(kind), c, ref, model_d, half_out, ms);
      dump(cu::gemm_name(kind), c);
    }
    // bf16, tf32 and fp8 inputs with fp32 accumulators: the same normal(0,1) draws rounded to the input format,
    // the model's unit for that input (Hopper: 16 products a block for bf16, 8 for tf32, wgmma's 32 for fp8)
    // and, for tf32, the same unit with blocks of 4 products ("-k4": what a chain of k4 instructions computes),
    // for fp8 the b200 unit (two fp16-path blocks of 16, added to C at the end).
    if (!tiles) continue;
    for (const mpsim::Format* fin : {&mpsim::bf16(), &mpsim::tf32(), &mpsim::fp8_e4m3(), &mpsim::fp8_e5m2()}) {
      const bool bf = fin == &mpsim::bf16(), tf = fin == &mpsim::tf32();
      if (!bf && !tf && k % 32 != 0) continue;  // mma.sync's fp8 shape takes K in steps of 32
      std::mt19937_64 rng_in(seed);
      std::normal_distribution<float> dist_in(0.f, 1.f);
      std::vector<float> ai(a.size()), bi(b.size());
      for (auto& v : ai) v = static_cast<float>(mpsim::round(static_cast<double>(dist_in(rng_in)), *fin));
      for (auto& v : bi) v = static_cast<float>(mpsim::round(static_cast<double>(dist_in(rng_in)), *fin));
      const std::vector<double> ain(ai.begin(), ai.end()), bin(bi.begin(), bi.end());
      const std::vector<float> ref_in = fp32_chain(*fin, ain, bin);
      std::vector<mpsim::mma::MatrixUnit> units;
      std::vector<std::string> labels;
      for (const auto& name : models) {
        units.push_back(mpsim::mma::matrix_unit(name, *fin, mpsim::fp32()));
        labels.push_back(name);
        if (!bf && !tf) {
          // The h200 fp8 unit is wgmma's; mma.sync computed what the b200 unit computes (docs/hardware.md).
          units.push_back(mpsim::mma::matrix_unit("b200", *fin, mpsim::fp32()));
          labels.push_back("b200");
        }
        if (tf) {
          auto k4 = units.back();
          k4.block.products = 4;
          k4.name += "-k4";
          mpsim::mma::validate(k4);
          units.push_back(k4);
          labels.push_back(name + "-k4");
        }
      }
      std::vector<std::vector<double>> model_in(units.size(), std::vector<double>(std::size_t(m) * n));
      std::vector<std::pair<std::string, const std::vector<double>*>> model_d;
      for (std::size_t u = 0; u < units.size(); ++u) {
        mpsim::mma::gemm(units[u], m, n, k, ain.data(), bin.data(), nullptr, model_in[u].data());
        model_d.emplace_back(labels[u], &model_in[u]);
      }
      const auto kernels = bf   ? std::vector<cu::MmaKernel>{cu::MmaKernel::wmma_bf16}
                           : tf ? std::vector<cu::MmaKernel>{cu::MmaKernel::wmma_tf32, cu::MmaKernel::mma_sync_tf32_k8,
                                                             cu::MmaKernel::mma_sync_tf32_k4}
                           : fin == &mpsim::fp8_e4m3() ? std::vector<cu::MmaKernel>{cu::MmaKernel::mma_sync_e4m3_k32}
                                                       : std::vector<cu::MmaKernel>{cu::MmaKernel::mma_sync_e5m2_k32};
      for (auto kernel : kernels) {
        std::vector<float> c(std::size_t(m) * n);
        const double ms = cu::mma_gemm_f32(kernel, m, n, k, ai, bi, c, 5);
        report(cu::mma_kernel_name(kernel), c, ref_in, model_d, false, ms);
        dump(cu::mma_kernel_name(kernel), c);
      }
    }
  }
  write_outputs(doc, json_path, record, "gemm.json");
#else
  (void)shapes, (void)seed, (void)json_path, (void)record, (void)dump_dir;
#endif
}

void hist_cmd(std::uint64_t count, std::uint64_t seed, const std::string& json_path) {
  require_cuda("hist");
#if defined(MPSIM_WITH_CUDA)
  cu::require_device("mpsim hw hist");
  if (count == 0 || count >= (std::uint64_t{1} << 32)) throw mpsim::Error("--count must be 1 .. 2^32 - 1");
  // Log-uniform magnitudes over float's whole range, random signs, and some zeros/NaNs/infs/subnormals.
  std::mt19937_64 rng(seed);
  std::vector<float> x(count);
  for (auto& v : x) {
    const std::uint64_t r = rng();
    v = std::bit_cast<float>(static_cast<std::uint32_t>(r));
  }
  double ms = 0;
  const cu::Histogram h = cu::exponent_histogram(x, &ms);
  // CPU bins, written independently with frexp: |x| = f * 2^e, f in [0.5, 1) -> n = e - 1.
  std::vector<std::uint64_t> bins(277, 0);
  std::uint64_t zero = 0, nan = 0, ninf = 0, pinf = 0;
  for (float v : x) {
    if (std::isnan(v)) ++nan;
    else if (std::isinf(v)) ++(v < 0 ? ninf : pinf);
    else if (v == 0) ++zero;
    else {
      int e;
      std::frexp(v, &e);
      ++bins[e - 1 + 149];
    }
  }
  std::uint64_t differing = 0;
  for (int b = 0; b < 277; ++b) differing += bins[b] != h.bins[b];
  differing += (zero != h.zero) + (nan != h.nan) + (ninf != h.neg_inf) + (pinf != h.pos_inf);
  fmt::print(
      "{} random float bit patterns: GPU histogram vs CPU (frexp): {} of 281 counters differ; kernel {:.3f} ms "
      "({:.1f} GB/s)\n",
      count, differing, ms, 4.0 * count / (ms * 1e-3) / 1e9);
  json doc = base_doc("hist", mpsim::profile_cuda_sm90());
  doc["count"] = count;
  doc["differing_counters"] = differing;
  doc["bins"] = h.bins;
  doc["zero"] = h.zero;
  doc["nan"] = h.nan;
  doc["neg_inf"] = h.neg_inf;
  doc["pos_inf"] = h.pos_inf;
  doc["gpu_ms"] = ms;
  write_outputs(doc, json_path, "", "hist.json");
  if (differing) mpsim::cli::exit_status() = 1;
#else
  (void)count, (void)seed, (void)json_path;
#endif
}

void bench_cmd(const std::string& json_path, const std::string& record) {
  require_cuda("bench");
#if defined(MPSIM_WITH_CUDA)
  cu::require_device("mpsim hw bench");
  const std::uint64_t n = std::uint64_t{1} << 28;  // 1 GiB of floats
  // The copy and the conversion variants alternate, round after round (the device's bandwidth drifts by
  // ~10 % between minutes); each variant's ratio is the median over rounds of its GB/s over that round's copy.
  // The conversion figure is the best variant by that ratio, named in the output.
  const auto variants = cu::convert_bandwidth_variants();
  constexpr int kRounds = 7;
  std::vector<double> copies;
  std::vector<std::vector<double>> gbs_of(variants.size()), ratio_of(variants.size());
  std::vector<std::uint64_t> differing(variants.size(), 0);
  for (int round = 0; round < kRounds; ++round) {
    const double copy_round = cu::copy_bandwidth_gbs(n * 4, 3);
    copies.push_back(copy_round);
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const double gbs = cu::convert_bandwidth_gbs(n, 3, v, round == 0 ? &differing[v] : nullptr);
      gbs_of[v].push_back(gbs);
      ratio_of[v].push_back(gbs / copy_round);
    }
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  const double copy = median(copies);
  json variant_docs = json::array();
  double conv = 0, conv_ratio = 0;
  std::string conv_variant;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const double gbs = median(gbs_of[v]), ratio = median(ratio_of[v]);
    variant_docs.push_back({{"variant", variants[v]},
                            {"gbs", gbs},
                            {"fraction_of_copy", ratio},
                            {"fraction_of_copy_rounds", ratio_of[v]},
                            {"differ_from_scalar_kernel", differing[v]}});
    if (differing[v]) mpsim::cli::exit_status() = 1;
    if (ratio > conv_ratio) conv = gbs, conv_ratio = ratio, conv_variant = variants[v];
  }
  const double hist = cu::histogram_bandwidth_gbs(n);
  // One exhaustive comparison of each kind, GPU-timed.
  mpsim::emu::DevFormat f;
  mpsim::emu::DevRounding r;
  mpsim::hw::dev_params(mpsim::hw::convert_runs()[0], mpsim::profile_cuda_sm90(), f, r);
  const double conv_ms = cu::compare_convert(0, f, r).gpu_ms;
  mpsim::hw::dev_params(mpsim::hw::arith_runs()[0], mpsim::profile_cuda_sm90(), f, r);
  const double add_ms = cu::compare_arith(0, f, r).gpu_ms;
  fmt::print("device-to-device copy:              {:8.1f} GB/s\n", copy);
  fmt::print("  (median of {} rounds, {:.1f} to {:.1f} GB/s)\n", kRounds,
             *std::min_element(copies.begin(), copies.end()), *std::max_element(copies.begin(), copies.end()));
  for (const auto& d : variant_docs)
    fmt::print("float -> fp16 RN, {:<28} {:8.1f} GB/s ({:.1f} % of copy; {} outputs differ from the scalar kernel)\n",
               d["variant"].get<std::string>() + ":", d["gbs"].get<double>(), 100 * d["fraction_of_copy"].get<double>(),
               d["differ_from_scalar_kernel"].get<std::uint64_t>());
  fmt::print("float -> fp16 RN conversion, best:  {:8.1f} GB/s ({:.1f} % of copy; target >= 95 %)\n", conv,
             100 * conv_ratio);
  fmt::print("exponent histogram:                 {:8.1f} GB/s ({:.1f} % of copy; target >= 80 %)\n", hist,
             100 * hist / copy);
  fmt::print("2^32 compare, fp16_rn conversion:   {:8.1f} ms GPU (target <= 100 ms)\n", conv_ms);
  fmt::print("2^32 compare, fp16 add:             {:8.1f} ms GPU (target <= 100 ms)\n", add_ms);
  json doc = base_doc("bench", mpsim::profile_cuda_sm90());
  doc["copy_gbs"] = copy;
  doc["copy_gbs_rounds"] = copies;
  doc["convert_fp16_rn_gbs"] = conv;
  doc["convert_variant"] = conv_variant;
  doc["convert_variants"] = variant_docs;
  doc["histogram_gbs"] = hist;
  doc["convert_fraction_of_copy"] = conv_ratio;
  doc["histogram_fraction_of_copy"] = hist / copy;
  doc["compare_fp16_rn_ms"] = conv_ms;
  doc["compare_fp16_add_ms"] = add_ms;
  write_outputs(doc, json_path, record, "bench.json");
#else
  (void)json_path, (void)record;
#endif
}

void setup(CLI::App& app) {
  auto* hw = app.add_subcommand("hw",
                                "CUDA kernels beside the emulation: device info, bit-exact comparisons, GEMM, "
                                "histogram, benchmarks (needs a CUDA build and device)");
  hw->require_subcommand(1);
  struct Opts {
    std::string json, record, dump, like = "cuda-sm90";
    std::vector<std::string> runs, shapes{"256x256x256", "1024x1024x1024"};
    bool list = false;
    std::uint64_t seed = 1, count = std::uint64_t{1} << 26;
  };
  auto o = std::make_shared<Opts>();

  auto* info = hw->add_subcommand("info", "The CUDA device, driver and compute capability (or 'no CUDA device')");
  info->add_option("--json", o->json, "Also write JSON to this file");
  info->callback([o] { info_cmd(o->json); });

  auto add_compare = [&](const char* name, const char* help, bool is_convert) {
    auto* c = hw->add_subcommand(name, help);
    c->add_option("--run", o->runs, "Only these runs (default: all; see --list)");
    c->add_option("--like", o->like, "Device profile of the emulation (ieee, x86, cuda-sm90)")->capture_default_str();
    c->add_option("--json", o->json, "Write the results (counts, first mismatches, digests) as JSON");
    c->add_option("--record", o->record, "Also store the JSON under DIR/<device>/ (the repository's data/hardware)");
    c->add_flag("--list", o->list, "List the runs and exit");
    c->callback([o, is_convert] {
      if (o->list) {
        if (is_convert)
          for (const auto& r : mpsim::hw::convert_runs()) fmt::print("{:<20} {}\n", r.name, r.intrinsic);
        else
          for (const auto& r : mpsim::hw::arith_runs()) fmt::print("{:<20} {}\n", r.name, r.intrinsic);
        return;
      }
      for (const auto& r : o->runs)
        is_convert ? (void)mpsim::hw::find_convert_run(r) : (void)mpsim::hw::find_arith_run(r);
      is_convert ? convert_cmd(o->runs, o->like, o->json, o->record) : arith_cmd(o->runs, o->like, o->json, o->record);
    });
  };
  add_compare("convert", "float -> fp16/bf16 (rn rz rd ru) and fp8 (nosat/satfinite) on all 2^32 floats, vs emulation",
              true);
  add_compare("arith", "fp16/bf16 add sub mul div fma (+ _sat) on all 2^32 operand pairs, vs emulation", false);

  auto* unary = hw->add_subcommand("unary", "hsqrt hrcp hexp hlog on all fp16/bf16 inputs: ulp-error distributions");
  unary->add_option("--json", o->json, "Write the results as JSON");
  unary->callback([o] { unary_cmd(o->json); });

  auto* gemm = hw->add_subcommand("gemm",
                                  "SIMT, WMMA (fp16 inputs with fp32/fp16 accumulators; bf16, tf32 inputs) and cuBLAS "
                                  "GEMMs vs the fp32 emulation and the matrix-unit model");
  gemm->add_option("--shape", o->shapes, "MxNxK (repeatable; default 256x256x256 1024x1024x1024)");
  gemm->add_option("--seed", o->seed, "Seed of the normal(0,1) inputs")->capture_default_str();
  gemm->add_option("--json", o->json, "Write the results as JSON");
  gemm->add_option("--record", o->record, "Also store the JSON under DIR/<device>/");
  gemm->add_option("--dump", o->dump, "Write each kernel's C as raw float32 (row-major) into this existing folder");
  gemm->callback([o] { gemm_cmd(o->shapes, o->seed, o->json, o->record, o->dump); });

  auto* hist = hw->add_subcommand("hist", "Exponent-histogram kernel vs the CPU bins on random float bit patterns");
  hist->add_option("--count", o->count, "Number of floats")->capture_default_str();
  hist->add_option("--seed", o->seed, "Seed")->capture_default_str();
  hist->add_option("--json", o->json, "Write the histogram as JSON");
  hist->callback([o] { hist_cmd(o->count, o->seed, o->json); });

  auto* bench = hw->add_subcommand("bench", "Bandwidth of conversion and histogram vs device copy; 2^32 compare time");
  bench->add_option("--json", o->json, "Write the figures as JSON");
  bench->add_option("--record", o->record, "Also store the JSON under DIR/<device>/");
  bench->callback([o] { bench_cmd(o->json, o->record); });
}

const bool registered = mpsim::cli::register_command("hw", setup);

}  // namespace
