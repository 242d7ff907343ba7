// Internal to the bulk engine (detail/bulk_kernel.hpp, which says how these files are compiled):
// Encodings back to float bits: decode_vec, decode_finite_vec and the decode() of an array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/detail/bulk_params.hpp"

namespace mpsim::bulk_detail {
namespace {

// Float bits of the value of encodings `res` (the decode() of the specification, NaN payloads kept
// for IEEE encodings, canonical quiet NaN otherwise).
template <class S>
inline typename S::I decode_vec(typename S::I res, const KernelParams& p) {
  using I = typename S::I;
  using M = typename S::M;
  const I mag = S::and_(res, S::set1(p.mag_mask));
  const int up = 23 - p.man_bits;
  // Moves the format's sign bit to bit 31.
  I sign = S::sll(S::and_(res, S::set1(p.fmt_sign)), p.sign_shift);
  const I normal = S::add(S::sll(mag, up), S::set1(p.dec_add));
  I sub;
  if (p.sub_by_shift) sub = S::sll(mag, up);
  else sub = S::cvt_mul(mag, p.sub_scale);
  I y = S::sel(S::gt(S::set1(p.one_m), mag), sub, normal);
  if (p.ieee_nan) {
    const M special = S::gt(mag, S::set1(p.inf_bits - 1));
    const I spec = S::or_(S::set1(0x7f800000), S::sll(S::and_(mag, S::set1(p.one_m - 1)), up));
    y = S::sel(special, spec, y);
  } else if (p.all_ones_nan) {
    y = S::sel(S::eq(mag, S::set1(p.nan_mag)), S::set1(0x7fc00000), y);
  } else if (p.neg_zero) {  // the one NaN has the sign bit set and no sign of its own
    const M isnan = S::eq(res, S::set1(p.nan_mag));
    y = S::sel(isnan, S::set1(0x7fc00000), y);
    sign = S::maskz(S::mnot(isnan), sign);
  }  // NanEncoding::none (OCP fp6 / fp4): every encoding is a number
  return S::or_(y, sign);
}

// decode_vec for finite encodings only (the fast path). Formats with float's exponent field and bias
// (bf16, tf32, e8mX) are float bit patterns cut short: a shift. UNIFORM false: the format's emin is
// above float's, so it has neither float's layout nor its subnormals (known at compile time).
template <class S, bool UNIFORM>
inline typename S::I decode_finite_vec(typename S::I res, const KernelParams& p) {
  using I = typename S::I;
  if (UNIFORM && p.float_layout) return S::sll(res, 23 - p.man_bits);
  const I mag = S::and_(res, S::set1(p.mag_mask));
  const int up = 23 - p.man_bits;
  const I sign = S::sll(S::and_(res, S::set1(p.fmt_sign)), p.sign_shift);
  const I normal = S::add(S::sll(mag, up), S::set1(p.dec_add));
  const I sub = UNIFORM && p.sub_by_shift ? S::sll(mag, up) : S::cvt_mul(mag, p.sub_scale);
  return S::or_(S::sel(S::gt(S::set1(p.one_m), mag), sub, normal), sign);
}

template <class S>
void decode_all(const void* in, OutKind kind, float* out, std::size_t n, const KernelParams& p) {
  constexpr int W = S::W;
  using I = typename S::I;
  std::size_t i = 0;
  auto one = [&](I res, float* dst) { S::store32(dst, decode_vec<S>(res, p)); };
  for (; i + W <= n; i += W) {
    I res;
    if (kind == OutKind::u8) res = S::load8(static_cast<const std::uint8_t*>(in) + i);
    else if (kind == OutKind::u16) res = S::load16(static_cast<const std::uint16_t*>(in) + i);
    else res = S::load32(static_cast<const std::uint32_t*>(in) + i);
    one(res, out + i);
  }
  if (i == n) return;
  alignas(64) std::uint32_t t[W];
  alignas(64) float o[W];
  for (int k = 0; k < W; ++k) {
    std::uint32_t v = 0;
    if (i + k < n) {
      if (kind == OutKind::u8) v = static_cast<const std::uint8_t*>(in)[i + k];
      else if (kind == OutKind::u16) v = static_cast<const std::uint16_t*>(in)[i + k];
      else v = static_cast<const std::uint32_t*>(in)[i + k];
    }
    t[k] = v;
  }
  one(S::load32(t), o);
  std::memcpy(out + i, o, (n - i) * sizeof(float));
}

}  // namespace
}  // namespace mpsim::bulk_detail
