// GPU tests of kernels/ (run only where a CUDA device is present; gpu_main.cpp exits 77 otherwise).
// Each kernel is compared with the emulation or an independent host computation, and each wrapper's
// bad-input errors are checked.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "digest.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/mma/dot.hpp"
#include "mpsim/mma/unit.hpp"
#include "mpsim_cuda.hpp"
#include "runs_host.hpp"

using namespace mpsim;
namespace cu = mpsim::cuda;

namespace {
std::vector<float> probe_floats(std::size_t n) {
  std::mt19937_64 rng(3);
  std::vector<float> v(n);
  for (auto& x : v) x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  const float specials[] = {0.f,    -0.f,    1.f,      65504.f,   65520.f, 448.f, 464.f,    57344.f,  61440.f,
                            1e-40f, -1e-40f, INFINITY, -INFINITY, NAN,     -NAN,  0x1p-24f, 0x1p-25f, 0x1.8p-25f};
  for (std::size_t i = 0; i < std::size(specials); ++i) v[i] = specials[i];
  return v;
}
}  // namespace

TEST_CASE("conversions match the emulation under the cuda-sm90 profile", "[gpu]") {
  const auto x = probe_floats(1 << 20);
  std::uint64_t checked = 0, mismatches = 0;
  for (const auto& run : hw::convert_runs()) {
    if (!run.on_device) continue;  // tf32 and fp64 runs: recorded on the device, compared on the CPU
    emu::DevFormat f;
    emu::DevRounding r;
    hw::dev_params(run, profile_cuda_sm90(), f, r);
    std::vector<std::uint32_t> got(x.size());
    if (run.format == "fp16" || run.format == "bf16") {
      std::vector<std::uint16_t> out(x.size());
      cu::convert_to_16(x, out, run.format == "fp16" ? cu::Half16::fp16 : cu::Half16::bf16,
                        static_cast<std::uint8_t>(run.mode));
      for (std::size_t i = 0; i < x.size(); ++i) got[i] = out[i];
    } else {
      std::vector<std::uint8_t> out(x.size());
      cu::convert_to_fp8(x, out, run.format == "fp8_e4m3" ? cu::Fp8::e4m3 : cu::Fp8::e5m2, run.saturate);
      for (std::size_t i = 0; i < x.size(); ++i) got[i] = out[i];
    }
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (got[i] != emu::round_float(std::bit_cast<std::uint32_t>(x[i]), f, r)) ++bad;
    std::printf("%-20s %zu inputs, %llu mismatches\n", run.name.c_str(), x.size(), (unsigned long long)bad);
    checked += x.size();
    mismatches += bad;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("the on-device exhaustive comparison agrees with a host spot check", "[gpu]") {
  emu::DevFormat f;
  emu::DevRounding r;
  hw::dev_params(hw::convert_runs()[0], profile_cuda_sm90(), f, r);
  const cu::CompareResult res = cu::compare_convert(0, f, r);
  std::printf("fp16_rn over 2^32: %llu mismatches, %.2f ms\n", (unsigned long long)res.mismatches, res.gpu_ms);
  REQUIRE(res.emu_digests.size() == 256);
  // Block 0 of the emulated digests recomputed on the host.
  const std::uint64_t d0 = hw::block_digest(0, [&](std::uint64_t i) { return hw::emulate_convert(i, f, r); });
  CHECK(d0 == res.emu_digests[0]);
  CHECK(res.mismatches == 0);
}

TEST_CASE("fp16 arithmetic matches the emulation on random pairs", "[gpu]") {
  std::mt19937_64 rng(8);
  const std::size_t n = 1 << 20;
  std::vector<std::uint16_t> a(n), b(n), c(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<std::uint16_t>(rng());
    b[i] = static_cast<std::uint16_t>(rng());
    c[i] = static_cast<std::uint16_t>(rng());
  }
  for (const auto& run : hw::arith_runs()) {
    emu::DevFormat f;
    emu::DevRounding r;
    hw::dev_params(run, profile_cuda_sm90(), f, r);
    cu::arith_16(run.op, run.format == "fp16" ? cu::Half16::fp16 : cu::Half16::bf16, a, b, c, out);
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      emu::Op base = run.op == hw::kAdd || run.op == hw::kAddSat   ? emu::kAdd
                     : run.op == hw::kSub || run.op == hw::kSubSat ? emu::kSub
                     : run.op == hw::kMul || run.op == hw::kMulSat ? emu::kMul
                     : run.op == hw::kDiv                          ? emu::kDiv
                                                                   : emu::kFma;
      std::uint64_t want = emu::arith(base, a[i], b[i], c[i], f, r);
      if (run.op >= hw::kAddSat) want = emu::saturate01(want, f);
      bad += want != out[i];
    }
    std::printf("%-16s %zu pairs, %llu mismatches\n", run.name.c_str(), n, (unsigned long long)bad);
    if (run.op != hw::kDiv) CHECK(bad == 0);  // __hdiv is rcp.approx-based: reported, not required
  }
}

TEST_CASE("SIMT GEMM equals the in-order fp32 fma emulation bit for bit", "[gpu]") {
  const int m = 64, n = 48, k = 80;
  std::mt19937_64 rng(2);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<std::uint16_t> a(m * k), b(k * n);
  for (auto& v : a) v = static_cast<std::uint16_t>(round_bits(d(rng), fp16()));
  for (auto& v : b) v = static_cast<std::uint16_t>(round_bits(d(rng), fp16()));
  std::vector<float> c(m * n);
  cu::gemm(cu::Gemm::simt_f32, m, n, k, a, b, c);
  int bad = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0.f;
      for (int p = 0; p < k; ++p)
        acc = std::fma(static_cast<float>(decode(a[i * k + p], fp16())),
                       static_cast<float>(decode(b[p * n + j], fp16())), acc);
      bad += std::bit_cast<std::uint32_t>(acc) != std::bit_cast<std::uint32_t>(c[i * n + j]);
    }
  std::printf("SIMT GEMM %dx%dx%d: %d of %d elements differ from the emulation\n", m, n, k, bad, m * n);
  CHECK(bad == 0);
  CHECK_THROWS_AS(
      cu::gemm(cu::Gemm::wmma_f32, m, n, 72, std::vector<std::uint16_t>(m * 72), std::vector<std::uint16_t>(72 * n), c),
      Error);
}

// The tensor cores against the library's matrix-unit model of this GPU (lib/mpsim/mma; its h100 and h200
// units are one Hopper model, checked against the recorded dot products of data/mma/recorded/): the WMMA
// kernels chain one 16x16x16 mma per 16 of K into their accumulator, as the model chains its instructions,
// so every element must be equal, fp32 and fp16 accumulators alike. K = 272 chains 17 of them. On an H200
// `mpsim hw gemm` found every element equal at 256^3, 1024^3 and 128x128x4096 (docs/hardware.md).
TEST_CASE("WMMA GEMM equals the matrix-unit model of the GPU bit for bit", "[gpu]") {
  const cu::DeviceInfo info = cu::device_info();
  const std::string gpu = info.cc_major == 9 && info.cc_minor == 0 ? "h200" : "";
  if (gpu.empty()) {
    std::printf("WMMA vs model: compute capability %d.%d has no model here (sm_90 only): skipped\n", info.cc_major,
                info.cc_minor);
    return;
  }
  const int m = 64, n = 48, k = 272;
  std::mt19937_64 rng(4);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<std::uint16_t> a(m * k), b(k * n);
  for (auto& v : a) v = static_cast<std::uint16_t>(round_bits(d(rng), fp16()));
  for (auto& v : b) v = static_cast<std::uint16_t>(round_bits(d(rng), fp16()));
  std::vector<double> ad(a.size()), bd(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ad[i] = decode(a[i], fp16());
  for (std::size_t i = 0; i < b.size(); ++i) bd[i] = decode(b[i], fp16());
  for (bool half : {false, true}) {
    const auto unit = mma::matrix_unit(gpu, fp16(), half ? fp16() : fp32());
    std::vector<double> want(m * n);
    mma::gemm(unit, m, n, k, ad.data(), bd.data(), nullptr, want.data());
    std::vector<float> c(m * n);
    cu::gemm(half ? cu::Gemm::wmma_f16 : cu::Gemm::wmma_f32, m, n, k, a, b, c);
    int bad = 0, differs_from_fp32_fma = 0;
    for (int i = 0; i < m * n; ++i) {
      bad += std::bit_cast<std::uint32_t>(c[i]) != std::bit_cast<std::uint32_t>(static_cast<float>(want[i]));
      float acc = 0.f;  // the in-order fp32 FMA chain, to show the model is not that
      for (int p = 0; p < k; ++p)
        acc = std::fma(static_cast<float>(ad[(i / n) * k + p]), static_cast<float>(bd[p * n + i % n]), acc);
      differs_from_fp32_fma += acc != c[i];
    }
    std::printf("WMMA %s %dx%dx%d vs model %s: %d of %d elements differ (%d differ from an fp32 FMA chain)\n",
                half ? "fp16 acc" : "fp32 acc", m, n, k, unit.name.c_str(), bad, m * n, differs_from_fp32_fma);
    CHECK(bad == 0);
  }
}

// bf16, tf32 and fp8 inputs with fp32 accumulators against the model's units, as `mpsim hw gemm` found them
// on an H200 (docs/hardware.md). bf16 (WMMA 16x16x16, SASS HMMA.16816.F32.BF16): blocks of 16 products. tf32:
// mma.sync m16n8k8 (HMMA.1688) adds blocks of 8 products, the h200 unit checked against the recorded dot
// products; m16n8k4 and WMMA's 16x16x8 tf32 shape (both HMMA.1684) blocks of 4. fp8 through mma.sync m16n8k32
// (two HMMA.16816.F32 per instruction on sm_90): not the h200 fp8 unit, which is wgmma's (one block of 32,
// 13 result bits), but two fp16-path blocks of 16 products chained from zero and added to C at the end with
// nearest-even: the structure of the library's b200 fp8 unit. K = 288 chains 9 to 72 instructions.
TEST_CASE("tensor-core GEMM with bf16, tf32 and fp8 inputs equals the matrix-unit model bit for bit", "[gpu]") {
  const cu::DeviceInfo info = cu::device_info();
  if (!(info.cc_major == 9 && info.cc_minor == 0)) {
    std::printf(
        "bf16/tf32/fp8 tensor cores vs model: compute capability %d.%d has no model here (sm_90 only): skipped\n",
        info.cc_major, info.cc_minor);
    return;
  }
  const int m = 64, n = 48, k = 288;
  struct Case {
    cu::MmaKernel kernel;
    const Format& format;
    const char* model;
    int block_products;  // the block the kernel must equal (0: the unit's own)
  };
  for (const Case& cs :
       {Case{cu::MmaKernel::wmma_bf16, bf16(), "h200", 0}, Case{cu::MmaKernel::mma_sync_tf32_k8, tf32(), "h200", 0},
        Case{cu::MmaKernel::mma_sync_tf32_k4, tf32(), "h200", 4}, Case{cu::MmaKernel::wmma_tf32, tf32(), "h200", 4},
        Case{cu::MmaKernel::mma_sync_e4m3_k32, fp8_e4m3(), "b200", 0},
        Case{cu::MmaKernel::mma_sync_e5m2_k32, fp8_e5m2(), "b200", 0}}) {
    const Format& f = cs.format;
    std::mt19937_64 rng(5);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> a(m * k), b(k * n);
    for (auto& v : a) v = static_cast<float>(round(static_cast<double>(d(rng)), f));
    for (auto& v : b) v = static_cast<float>(round(static_cast<double>(d(rng)), f));
    const std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
    auto unit = mma::matrix_unit(cs.model, f, fp32());
    if (cs.block_products) unit.block.products = cs.block_products;
    mma::validate(unit);
    std::vector<double> want(m * n);
    mma::gemm(unit, m, n, k, ad.data(), bd.data(), nullptr, want.data());
    std::vector<float> c(m * n);
    cu::mma_gemm_f32(cs.kernel, m, n, k, a, b, c);
    int bad = 0, differs_from_fp32_fma = 0;
    for (int i = 0; i < m * n; ++i) {
      bad += std::bit_cast<std::uint32_t>(c[i]) != std::bit_cast<std::uint32_t>(static_cast<float>(want[i]));
      float acc = 0.f;
      for (int p = 0; p < k; ++p) acc = std::fma(a[(i / n) * k + p], b[p * n + i % n], acc);
      differs_from_fp32_fma += acc != c[i];
    }
    std::printf("%s %dx%dx%d vs %s (blocks of %d): %d of %d elements differ (%d differ from an fp32 FMA chain)\n",
                cu::mma_kernel_name(cs.kernel), m, n, k, cs.model, unit.block.products, bad, m * n,
                differs_from_fp32_fma);
    CHECK(bad == 0);
    // An input the format does not hold is refused, not rounded by the kernel.
    a[7] = std::nextafter(a[7], 10.f);
    CHECK_THROWS_AS(cu::mma_gemm_f32(cs.kernel, m, n, k, a, b, c), Error);
  }
}

TEST_CASE("exponent histogram matches frexp bins", "[gpu]") {
  const auto x = probe_floats(1 << 20);
  const cu::Histogram h = cu::exponent_histogram(x);
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
  CHECK(h.bins == bins);
  CHECK(h.zero == zero);
  CHECK(h.nan == nan);
  CHECK(h.neg_inf == ninf);
  CHECK(h.pos_inf == pinf);
}

TEST_CASE("AMP unscale and scale update follow GradScaler", "[gpu]") {
  std::vector<float> g1 = {2.f, -4.f, 8.f}, g2 = {1.f, INFINITY};
  float found = 0.f;
  cu::amp_unscale_f32({g1, g2}, found, 0.5f);
  CHECK(found == 1.f);
  CHECK(g1 == std::vector<float>{1.f, -2.f, 4.f});
  float scale = 65536.f;
  int tracker = 0;
  cu::amp_update_scale(scale, tracker, 1.f, 2.0, 0.5, 2000);
  CHECK(scale == 32768.f);
  CHECK(tracker == 0);
  tracker = 1998;
  cu::amp_update_scale(scale, tracker, 0.f, 2.0, 0.5, 2000);
  CHECK(tracker == 1999);
  cu::amp_update_scale(scale, tracker, 0.f, 2.0, 0.5, 2000);
  CHECK(scale == 65536.f);
  CHECK(tracker == 0);
  float big = 3e38f;
  tracker = 0;
  cu::amp_update_scale(big, tracker, 0.f, 2.0, 0.5, 1);
  CHECK(big == 3e38f);  // growth to inf refused
}

TEST_CASE("wrappers reject bad sizes with an Error", "[gpu]") {
  std::vector<float> in(4);
  std::vector<std::uint16_t> out(3);
  CHECK_THROWS_AS(cu::convert_to_16(in, out, cu::Half16::fp16, 0), Error);
  std::vector<std::uint16_t> out4(4);
  CHECK_THROWS_AS(cu::convert_to_16(in, out4, cu::Half16::fp16, emu::kNearestAway), Error);
  CHECK_THROWS_AS(cu::gemm(cu::Gemm::simt_f32, 0, 4, 4, {}, {}, {}), Error);
  CHECK_THROWS_AS(cu::gemm(cu::Gemm::simt_f32, 1 << 16, 1 << 16, 1, std::vector<std::uint16_t>(1 << 16),
                           std::vector<std::uint16_t>(1 << 16), std::span<float>()),
                  Error);
}
