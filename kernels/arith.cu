// fp16 / bf16 arithmetic on arrays of bits: the binary/ternary intrinsics and the approximate functions.
#include "check.cuh"
#include "hw_ops.cuh"
#include "mpsim_cuda.hpp"

namespace mpsim::cuda {

namespace {

template <class T, int Op>
__global__ void arith_kernel(const std::uint16_t* a, const std::uint16_t* b, const std::uint16_t* c, std::uint16_t* out,
                             std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = static_cast<std::uint16_t>(hw_arith<T, Op>(a[i], b[i], c ? c[i] : 0u));
}

template <class T>
__global__ void unary_kernel(int op, const std::uint16_t* a, std::uint16_t* out, std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const T x = from_bits<T>(a[i]);
    T y;
    switch (op) {
      case 0: y = hsqrt(x); break;
      case 1: y = hrcp(x); break;
      case 2: y = hexp(x); break;
      default: y = hlog(x); break;
    }
    out[i] = static_cast<std::uint16_t>(to_bits(y));
  }
}

using ArithLaunch = void (*)(unsigned, const std::uint16_t*, const std::uint16_t*, const std::uint16_t*, std::uint16_t*,
                             std::uint32_t);
template <class T, int Op>
void launch(unsigned g, const std::uint16_t* a, const std::uint16_t* b, const std::uint16_t* c, std::uint16_t* o,
            std::uint32_t n) {
  arith_kernel<T, Op><<<g, 256>>>(a, b, c, o, n);
}

}  // namespace

void arith_16(std::uint8_t op, Half16 fmt, std::span<const std::uint16_t> a, std::span<const std::uint16_t> b,
              std::span<const std::uint16_t> c, std::span<std::uint16_t> out) {
  const char* what = "arith_16";
  const bool ternary = op == hw::kFma || op == hw::kFmaSat;
  if (op >= hw::kArithOpCount) throw Error(std::string(what) + ": unknown operation " + std::to_string(op));
  if (a.size() != out.size() || b.size() != out.size() || (ternary && c.size() != out.size()))
    throw Error(std::string(what) + ": operand and output sizes differ");
  check_size(out.size(), what);
  if (out.empty()) return;
  const auto n = static_cast<std::uint32_t>(out.size());
  DeviceBuffer<std::uint16_t> da(n, what), db(n, what), dc(ternary ? n : 0, what), dout(n, what);
  da.upload(a.data(), n, what);
  db.upload(b.data(), n, what);
  if (ternary) dc.upload(c.data(), n, what);
  static constexpr ArithLaunch half_ops[] = {launch<__half, 0>, launch<__half, 1>, launch<__half, 2>,
                                             launch<__half, 3>, launch<__half, 4>, launch<__half, 5>,
                                             launch<__half, 6>, launch<__half, 7>, launch<__half, 8>};
  static constexpr ArithLaunch bf_ops[] = {
      launch<__nv_bfloat16, 0>, launch<__nv_bfloat16, 1>, launch<__nv_bfloat16, 2>,
      launch<__nv_bfloat16, 3>, launch<__nv_bfloat16, 4>, launch<__nv_bfloat16, 5>,
      launch<__nv_bfloat16, 6>, launch<__nv_bfloat16, 7>, launch<__nv_bfloat16, 8>};
  (fmt == Half16::bf16 ? bf_ops : half_ops)[op](grid_for(n, 256), da.ptr, db.ptr, ternary ? dc.ptr : nullptr, dout.ptr,
                                                n);
  check_launch(what);
  dout.download(out.data(), n, what);
}

void unary_16(Unary op, Half16 fmt, std::span<const std::uint16_t> a, std::span<std::uint16_t> out) {
  const char* what = "unary_16";
  if (a.size() != out.size()) throw Error(std::string(what) + ": input and output sizes differ");
  check_size(out.size(), what);
  if (out.empty()) return;
  const auto n = static_cast<std::uint32_t>(out.size());
  DeviceBuffer<std::uint16_t> da(n, what), dout(n, what);
  da.upload(a.data(), n, what);
  if (fmt == Half16::bf16)
    unary_kernel<__nv_bfloat16><<<grid_for(n, 256), 256>>>(static_cast<int>(op), da.ptr, dout.ptr, n);
  else unary_kernel<__half><<<grid_for(n, 256), 256>>>(static_cast<int>(op), da.ptr, dout.ptr, n);
  check_launch(what);
  dout.download(out.data(), n, what);
}

}  // namespace mpsim::cuda
