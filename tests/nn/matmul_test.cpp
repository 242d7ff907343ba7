// Tests of lib/mpsim/nn/matmul.hpp: accumulation in fp16 against the value types' correctly rounded
// fused multiply-add (arith.hpp, checked against Boost.Multiprecision in tests/format), and constructed
// cases where fp16 and fp32 accumulation differ by a known amount.
#include "catch_compat.hpp"

#include <cstdio>
#include <cstring>
#include <vector>

#include "mpsim/format/value.hpp"
#include "mpsim/nn/conv2d.hpp"
#include "mpsim/nn/linear.hpp"
#include "mpsim/nn/matmul.hpp"

using namespace mpsim;
using namespace mpsim::nn;

TEST_CASE("fp16 accumulation stalls where fp32 accumulation does not: constructed sums", "[matmul]") {
  // 4096 products 1 x 1: fp32 sums to 4096; in fp16 the running sum reaches 2048, where the spacing is 2
  // and 2048 + 1 is a tie that nearest-even rounds back to 2048.
  const int K = 4096;
  std::vector<float> ones(K, 1.0f), out32(1), out16(1);
  linear_forward(out32.data(), ones.data(), ones.data(), static_cast<const float*>(nullptr), 1, K, 1);
  linear_forward(out16.data(), ones.data(), ones.data(), static_cast<const float*>(nullptr), 1, K, 1, &fp16());
  // 1 + 1024 products 2^-11 x 1: fp32 gives 1.5; fp16 rounds every 1 + 2^-11 (a tie) back to 1.
  std::vector<float> a(1025, 0x1p-11f), b(1025, 1.0f), s32(1), s16(1);
  a[0] = 1.0f;
  linear_forward(s32.data(), a.data(), b.data(), static_cast<const float*>(nullptr), 1, 1025, 1);
  linear_forward(s16.data(), a.data(), b.data(), static_cast<const float*>(nullptr), 1, 1025, 1, &fp16());
  std::printf("sum of 4096 ones: fp32 accumulation %g, fp16 accumulation %g; 1 + 1024 x 2^-11: fp32 %g, fp16 %g\n",
              out32[0], out16[0], s32[0], s16[0]);
  CHECK(out32[0] == 4096.0f);
  CHECK(out16[0] == 2048.0f);
  CHECK(s32[0] == 1.5f);
  CHECK(s16[0] == 1.0f);
}

TEST_CASE("fp16 accumulation equals an in-order loop of fp32 multiply-adds rounded to fp16, bit for bit", "[matmul]") {
  // Random fp16 inputs; each output computed independently, k ascending, as s = fp16(float(s) + a_k b_k)
  // through the scalar rounding (round_bits via the value type's constructor), and for comparison as
  // s = fma(a_k, b_k, s) with the fp16 value type (one correctly rounded fused operation per step).
  const int M = 6, N = 5, K = 700;
  std::vector<float> A(M * K), Bt(N * K);
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state >> 11) * 0x1.0p-53;
    return static_cast<float>(num::fp16(static_cast<float>((u - 0.45) * 8.0)));
  };
  for (auto& v : A) v = next();
  for (auto& v : Bt) v = next();
  std::vector<float> out16(M * N), out32(M * N);
  // linear: out (M, N) = A (M, K) . Bt (N, K)^T
  linear_forward(out16.data(), A.data(), Bt.data(), static_cast<const float*>(nullptr), M, K, N, &fp16());
  linear_forward(out32.data(), A.data(), Bt.data(), static_cast<const float*>(nullptr), M, K, N);
  int mismatches = 0, differ_from_fused = 0, differ_from_fp32 = 0;
  double worst = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      num::fp16 s(0.0f), fused(0.0f);
      for (int k = 0; k < K; ++k) {
        s = num::fp16(static_cast<float>(s) + A[m * K + k] * Bt[n * K + k]);
        fused = fma(num::fp16(A[m * K + k]), num::fp16(Bt[n * K + k]), fused);
      }
      const float want = static_cast<float>(s), got = out16[m * N + n];
      mismatches += std::memcmp(&want, &got, 4) != 0;
      differ_from_fused += static_cast<float>(fused) != got;
      differ_from_fp32 += got != out32[m * N + n];
      worst = std::max(worst, std::abs(static_cast<double>(got) - out32[m * N + n]));
    }
  std::printf(
      "fp16 accumulation, %d outputs of %d-term sums: %d differ from the fp32-multiply-add loop, %d from the "
      "fused fp16 fma loop; %d differ from fp32 accumulation (largest difference %g)\n",
      M * N, K, mismatches, differ_from_fused, differ_from_fp32, worst);
  CHECK(mismatches == 0);
  CHECK(differ_from_fused <= 3);  // double rounding at a tie only, when the terms lie far apart
  CHECK(differ_from_fp32 > M * N / 2);

  // The convolution's three products use the same path: a 1x1 convolution over 1 channel of ones,
  // 64x64 positions; its weight gradient sums 4096 ones: fp16 stalls at 2048.
  Conv2dShape s{1, 1, 64, 64, 1, 1, 1, 0};
  std::vector<float> img(64 * 64, 1.0f), w(1, 1.0f), dout(64 * 64, 1.0f), dw32(1), dw16(1), db(1);
  conv2d_backward(static_cast<float*>(nullptr), dw32.data(), db.data(), dout.data(), img.data(), w.data(), s);
  conv2d_backward(static_cast<float*>(nullptr), dw16.data(), db.data(), dout.data(), img.data(), w.data(), s, &fp16());
  std::printf("1x1 convolution weight gradient over 4096 positions: fp32 accumulation %g, fp16 %g\n", dw32[0], dw16[0]);
  CHECK(dw32[0] == 4096.0f);
  CHECK(dw16[0] == 2048.0f);
}
