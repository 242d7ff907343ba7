// Exhaustive comparisons on the device: for each of the 2^32 elements of a run, the hardware intrinsic
// and the emulation (emu.hpp, the shared rounding specification) are computed side by side; mismatches are counted, the
// first few recorded, and both outputs digested per 2^24-element block (digest.hpp), so nothing of size 2^32 ever
// leaves the GPU.
#include <algorithm>
#include <vector>

#include "check.cuh"
#include "digest.hpp"
#include "hw_ops.cuh"
#include "mpsim_cuda.hpp"
#include "runs.hpp"

namespace mpsim::cuda {

namespace {

constexpr unsigned kThreads = 256;
constexpr std::uint64_t kChunk = 1u << 16;  // elements per CUDA block (inside one digest block)
constexpr int kMaxRecorded = 16;

struct Counters {
  unsigned long long mismatches;
  unsigned long long nan_mismatches;
  unsigned long long recorded;
  unsigned long long index[kMaxRecorded];
  unsigned int hw[kMaxRecorded];
  unsigned int emu[kMaxRecorded];
  unsigned long long hw_digest[256];
  unsigned long long emu_digest[256];
};

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

template <class Hw, class Emu, class IsNan>
__device__ void compare_chunk(Counters* c, Hw hw_of, Emu emu_of, IsNan is_nan) {
  const std::uint64_t begin = static_cast<std::uint64_t>(blockIdx.x) * kChunk;
  unsigned long long hd = 0, ed = 0;
  for (std::uint64_t k = threadIdx.x; k < kChunk; k += blockDim.x) {
    const std::uint64_t i = begin + k;
    const std::uint32_t h = hw_of(i), e = emu_of(i);
    hd += hw::digest_term(i, h);
    ed += hw::digest_term(i, e);
    if (h != e) {
      atomicAdd(&c->mismatches, 1ull);
      if (is_nan(h) && is_nan(e)) atomicAdd(&c->nan_mismatches, 1ull);
      const unsigned long long slot = atomicAdd(&c->recorded, 1ull);
      if (slot < kMaxRecorded) {
        c->index[slot] = i;
        c->hw[slot] = h;
        c->emu[slot] = e;
      }
    }
  }
  hd = warp_sum(hd);
  ed = warp_sum(ed);
  if ((threadIdx.x & 31) == 0) {
    const unsigned block = static_cast<unsigned>(begin >> hw::kDigestBlockLog2);
    atomicAdd(&c->hw_digest[block], hd);
    atomicAdd(&c->emu_digest[block], ed);
  }
}

template <int Run>
__global__ void __launch_bounds__(kThreads) convert_compare_kernel(Counters* c, emu::DevFormat f, emu::DevRounding r) {
  compare_chunk(
      c, [](std::uint64_t i) { return hw_convert<Run>(__uint_as_float(static_cast<unsigned>(i))); },
      [&](std::uint64_t i) { return hw::emulate_convert(i, f, r); },
      [&](std::uint32_t b) { return emu::is_nan_enc(b, f); });
}

template <class T, int Op>
__global__ void __launch_bounds__(kThreads) arith_compare_kernel(Counters* c, emu::DevFormat f, emu::DevRounding r) {
  compare_chunk(
      c,
      [](std::uint64_t i) {
        std::uint32_t a, b, cc;
        hw::arith_operands(i, a, b, cc);
        return hw_arith<T, Op>(a, b, cc);
      },
      [&](std::uint64_t i) { return hw::emulate_arith(static_cast<hw::ArithOp>(Op), i, f, r); },
      [&](std::uint32_t b) { return emu::is_nan_enc(b, f); });
}

// Recording only (the hardware's digests; the emulation is recomputed on the CPU): hw_record<Run>.
template <int Run>
__global__ void __launch_bounds__(kThreads) record_convert_kernel(unsigned long long* digests) {
  const std::uint64_t begin = static_cast<std::uint64_t>(blockIdx.x) * kChunk;
  unsigned long long hd = 0;
  for (std::uint64_t k = threadIdx.x; k < kChunk; k += blockDim.x) {
    const std::uint64_t i = begin + k;
    hd += hw::digest_term(i, hw_record<Run>(i));
  }
  hd = warp_sum(hd);
  if ((threadIdx.x & 31) == 0) atomicAdd(&digests[begin >> hw::kDigestBlockLog2], hd);
}

template <int Run>
void launch_record(unsigned long long* digests, std::uint64_t elements) {
  record_convert_kernel<Run><<<static_cast<unsigned>(elements / kChunk), kThreads>>>(digests);
}

using Launcher = void (*)(Counters*, emu::DevFormat, emu::DevRounding);

template <int Run>
void launch_convert(Counters* c, emu::DevFormat f, emu::DevRounding r) {
  convert_compare_kernel<Run><<<static_cast<unsigned>((std::uint64_t{1} << 32) / kChunk), kThreads>>>(c, f, r);
}
template <class T, int Op>
void launch_arith(Counters* c, emu::DevFormat f, emu::DevRounding r) {
  arith_compare_kernel<T, Op><<<static_cast<unsigned>((std::uint64_t{1} << 32) / kChunk), kThreads>>>(c, f, r);
}

CompareResult run_compare(Launcher launch, const emu::DevFormat& f, const emu::DevRounding& r, const char* what) {
  require_device(what);
  DeviceBuffer<Counters> dc(1, what);
  check(cudaMemset(dc.ptr, 0, sizeof(Counters)), what);
  EventTimer t;
  t.begin();
  launch(dc.ptr, f, r);
  check(cudaGetLastError(), what);
  const float ms = t.end_ms();
  check_launch(what);
  Counters c{};
  dc.download(&c, 1, what);
  CompareResult out;
  out.elements = std::uint64_t{1} << 32;
  out.mismatches = c.mismatches;
  out.nan_mismatches = c.nan_mismatches;
  const int n = static_cast<int>(std::min<unsigned long long>(c.recorded, kMaxRecorded));
  std::vector<int> order(n);
  for (int k = 0; k < n; ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](int x, int y) { return c.index[x] < c.index[y]; });
  for (int k : order) {
    out.first_mismatch_index.push_back(c.index[k]);
    out.first_mismatch_hw.push_back(c.hw[k]);
    out.first_mismatch_emu.push_back(c.emu[k]);
  }
  out.hw_digests.assign(c.hw_digest, c.hw_digest + 256);
  out.emu_digests.assign(c.emu_digest, c.emu_digest + 256);
  out.gpu_ms = ms;
  return out;
}

}  // namespace

CompareResult compare_convert(int run, const emu::DevFormat& f, const emu::DevRounding& r) {
  static constexpr Launcher table[] = {launch_convert<0>, launch_convert<1>, launch_convert<2>,  launch_convert<3>,
                                       launch_convert<4>, launch_convert<5>, launch_convert<6>,  launch_convert<7>,
                                       launch_convert<8>, launch_convert<9>, launch_convert<10>, launch_convert<11>};
  if (run < 0 || run >= 12) throw Error("compare_convert: no conversion run " + std::to_string(run));
  return run_compare(table[run], f, r, "hw convert");
}

CompareResult record_convert(int run, std::uint64_t elements) {
  using RecordLauncher = void (*)(unsigned long long*, std::uint64_t);
  static constexpr RecordLauncher table[] = {launch_record<12>, launch_record<13>, launch_record<14>,
                                             launch_record<15>, launch_record<16>, launch_record<17>};
  if (run < 12 || run >= 18) throw Error("record_convert: no recorded-only conversion run " + std::to_string(run));
  if (elements == 0 || elements % kChunk != 0 || (elements >> hw::kDigestBlockLog2) > 256)
    throw Error("record_convert: " + std::to_string(elements) + " elements is not a whole number of chunks");
  const char* what = "hw convert (record)";
  require_device(what);
  const std::uint64_t blocks = elements >> hw::kDigestBlockLog2;
  DeviceBuffer<unsigned long long> dd(256, what);
  check(cudaMemset(dd.ptr, 0, 256 * sizeof(unsigned long long)), what);
  EventTimer t;
  t.begin();
  table[run - 12](dd.ptr, elements);
  check(cudaGetLastError(), what);
  const float ms = t.end_ms();
  check_launch(what);
  std::vector<unsigned long long> d(256);
  dd.download(d.data(), 256, what);
  CompareResult out;
  out.elements = elements;
  out.hw_digests.assign(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(blocks));
  out.gpu_ms = ms;
  return out;
}

CompareResult compare_arith(int run, const emu::DevFormat& f, const emu::DevRounding& r) {
  static constexpr Launcher table[] = {
      launch_arith<__half, 0>,        launch_arith<__half, 1>,        launch_arith<__half, 2>,
      launch_arith<__half, 3>,        launch_arith<__half, 4>,        launch_arith<__half, 5>,
      launch_arith<__half, 6>,        launch_arith<__half, 7>,        launch_arith<__half, 8>,
      launch_arith<__nv_bfloat16, 0>, launch_arith<__nv_bfloat16, 1>, launch_arith<__nv_bfloat16, 2>,
      launch_arith<__nv_bfloat16, 3>, launch_arith<__nv_bfloat16, 4>, launch_arith<__nv_bfloat16, 5>,
      launch_arith<__nv_bfloat16, 6>, launch_arith<__nv_bfloat16, 7>, launch_arith<__nv_bfloat16, 8>};
  if (run < 0 || run >= 18) throw Error("compare_arith: no arithmetic run " + std::to_string(run));
  return run_compare(table[run], f, r, "hw arith");
}

}  // namespace mpsim::cuda
