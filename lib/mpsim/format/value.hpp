// Value types: mpsim::num::fp16, bf16, tf32, fp8_e4m3, fp8_e5m2 — one template, Float<Tag>, on the format.
// (In namespace mpsim::num because mpsim::fp16() etc. already name the Format descriptors.)
//
// Like CUTLASS's half_t, a value is a tiny struct holding the encoding (`storage`), constexpr-
// constructible from bits. Conversions from float/double round to nearest-even through round_bits();
// conversion to float/double is exact. + - * /, fma and sqrt are correctly rounded to nearest-even
// (arith.hpp; other modes: the *_bits functions there with a Rounding). Comparisons follow IEEE 754:
// NaN compares unequal to everything, -0 == +0. std::numeric_limits is specialised below; fmt and
// iostream output (the shortest decimal that reads back to the same value) are in value_io.hpp.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "mpsim/format/arith.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::num {

// A tag names a format and gives its parameters as compile-time constants (for numeric_limits and
// constexpr bit patterns); format() returns the matching run-time Format.
struct fp16_tag {
  using storage = std::uint16_t;
  static constexpr int exp_bits = 5, man_bits = 10, bias = 15;
  static constexpr NanEncoding nan = NanEncoding::ieee;
  static const Format& format() { return mpsim::fp16(); }
};
struct bf16_tag {
  using storage = std::uint16_t;
  static constexpr int exp_bits = 8, man_bits = 7, bias = 127;
  static constexpr NanEncoding nan = NanEncoding::ieee;
  static const Format& format() { return mpsim::bf16(); }
};
// TensorFloat-32 is 19 bits wide; like CUDA's wmma::precision::tf32 it is held in 32 bits.
struct tf32_tag {
  using storage = std::uint32_t;
  static constexpr int exp_bits = 8, man_bits = 10, bias = 127;
  static constexpr NanEncoding nan = NanEncoding::ieee;
  static const Format& format() { return mpsim::tf32(); }
};
struct fp8_e4m3_tag {
  using storage = std::uint8_t;
  static constexpr int exp_bits = 4, man_bits = 3, bias = 7;
  static constexpr NanEncoding nan = NanEncoding::all_ones;
  static const Format& format() { return mpsim::fp8_e4m3(); }
};
struct fp8_e5m2_tag {
  using storage = std::uint8_t;
  static constexpr int exp_bits = 5, man_bits = 2, bias = 15;
  static constexpr NanEncoding nan = NanEncoding::ieee;
  static const Format& format() { return mpsim::fp8_e5m2(); }
};

// Compile-time bit patterns of a tag's format (IEEE or all-ones NaN encodings).
template <class Tag>
struct FormatBits {
  static constexpr int e = Tag::exp_bits, m = Tag::man_bits;
  static constexpr bool ieee = Tag::nan == NanEncoding::ieee;
  static constexpr std::uint64_t sign = std::uint64_t{1} << (e + m);
  static constexpr std::uint64_t man_mask = (std::uint64_t{1} << m) - 1;
  static constexpr std::uint64_t top_field = (std::uint64_t{1} << e) - 1;
  static constexpr std::uint64_t max_finite =
      ieee ? ((top_field - 1) << m) | man_mask : (top_field << m) | (man_mask - 1);
  static constexpr std::uint64_t inf = ieee ? top_field << m : 0;
  static constexpr std::uint64_t quiet_nan =
      ieee ? (top_field << m) | (std::uint64_t{1} << (m - 1)) : (top_field << m) | man_mask;
  static constexpr std::uint64_t signaling_nan = ieee ? (top_field << m) | 1 : quiet_nan;
  static constexpr std::uint64_t min_normal = std::uint64_t{1} << m;
  static constexpr std::uint64_t one = std::uint64_t(Tag::bias) << m;
  static constexpr std::uint64_t epsilon = std::uint64_t(Tag::bias - m) << m;  // 2^-m
  static constexpr std::uint64_t half = std::uint64_t(Tag::bias - 1) << m;     // 0.5
  static constexpr int emin = 1 - Tag::bias;
  static constexpr int emax = (ieee ? static_cast<int>(top_field) - 1 : static_cast<int>(top_field)) - Tag::bias;
};

template <class Tag>
class Float {
 public:
  using tag = Tag;
  using storage_type = typename Tag::storage;

  constexpr Float() = default;
  // From a value: rounded to nearest-even (NaN payloads kept, see round_bits).
  explicit Float(double x) : bits_(static_cast<storage_type>(round_bits(x, Tag::format()))) {}
  explicit Float(float x) : bits_(static_cast<storage_type>(round_bits(x, Tag::format()))) {}
  explicit Float(int x) : Float(static_cast<double>(x)) {}

  static constexpr Float from_bits(storage_type bits) {
    Float v;
    v.bits_ = bits;
    return v;
  }
  // Rounds x in any mode (the index keys stochastic rounding).
  static Float round_from(double x, const Rounding& r, std::uint64_t index = 0) {
    return from_bits(static_cast<storage_type>(round_bits(x, Tag::format(), r, index)));
  }
  static const Format& format() { return Tag::format(); }

  constexpr storage_type bits() const { return bits_; }
  // Exact.
  double to_double() const { return decode(bits_, Tag::format()); }
  float to_float() const { return static_cast<float>(to_double()); }  // exact: every tag fits in float
  explicit operator double() const { return to_double(); }
  explicit operator float() const { return to_float(); }

  bool is_nan() const { return is_nan_bits(bits_, Tag::format()); }
  bool is_inf() const { return is_inf_bits(bits_, Tag::format()); }
  constexpr bool signbit() const { return (bits_ & FormatBits<Tag>::sign) != 0; }

  friend Float operator+(Float a, Float b) { return wrap(add_values(a.to_double(), b.to_double(), Tag::format())); }
  friend Float operator-(Float a, Float b) { return wrap(sub_values(a.to_double(), b.to_double(), Tag::format())); }
  friend Float operator*(Float a, Float b) { return wrap(mul_values(a.to_double(), b.to_double(), Tag::format())); }
  friend Float operator/(Float a, Float b) { return wrap(div_values(a.to_double(), b.to_double(), Tag::format())); }
  // Negation flips the sign bit (IEEE negate: exact, NaN too).
  friend constexpr Float operator-(Float a) {
    return from_bits(static_cast<storage_type>(a.bits_ ^ FormatBits<Tag>::sign));
  }
  friend constexpr Float operator+(Float a) { return a; }
  Float& operator+=(Float b) { return *this = *this + b; }
  Float& operator-=(Float b) { return *this = *this - b; }
  Float& operator*=(Float b) { return *this = *this * b; }
  Float& operator/=(Float b) { return *this = *this / b; }

  // IEEE comparisons (on the exact values: NaN unordered, -0 == +0).
  friend bool operator==(Float a, Float b) { return a.to_double() == b.to_double(); }
  friend bool operator!=(Float a, Float b) { return a.to_double() != b.to_double(); }
  friend bool operator<(Float a, Float b) { return a.to_double() < b.to_double(); }
  friend bool operator<=(Float a, Float b) { return a.to_double() <= b.to_double(); }
  friend bool operator>(Float a, Float b) { return a.to_double() > b.to_double(); }
  friend bool operator>=(Float a, Float b) { return a.to_double() >= b.to_double(); }

 private:
  static Float wrap(std::uint64_t bits) { return from_bits(static_cast<storage_type>(bits)); }
  storage_type bits_ = 0;
};

using fp16 = Float<fp16_tag>;
using bf16 = Float<bf16_tag>;
using tf32 = Float<tf32_tag>;
using fp8_e4m3 = Float<fp8_e4m3_tag>;
using fp8_e5m2 = Float<fp8_e5m2_tag>;

// a * b + c with one rounding (nearest-even).
template <class Tag>
Float<Tag> fma(Float<Tag> a, Float<Tag> b, Float<Tag> c) {
  return Float<Tag>::from_bits(
      static_cast<typename Tag::storage>(fma_values(a.to_double(), b.to_double(), c.to_double(), Tag::format())));
}
template <class Tag>
Float<Tag> sqrt(Float<Tag> a) {
  return Float<Tag>::from_bits(static_cast<typename Tag::storage>(sqrt_values(a.to_double(), Tag::format())));
}
template <class Tag>
constexpr Float<Tag> abs(Float<Tag> a) {
  return Float<Tag>::from_bits(static_cast<typename Tag::storage>(a.bits() & ~FormatBits<Tag>::sign));
}
template <class Tag>
bool isnan(Float<Tag> a) {
  return a.is_nan();
}
template <class Tag>
bool isinf(Float<Tag> a) {
  return a.is_inf();
}
template <class Tag>
bool isfinite(Float<Tag> a) {
  return !a.is_nan() && !a.is_inf();
}
template <class Tag>
constexpr bool signbit(Float<Tag> a) {
  return a.signbit();
}

}  // namespace mpsim::num

// numeric_limits, with the members the standard defines for float (C++20 [numeric.limits.members]).
template <class Tag>
class std::numeric_limits<mpsim::num::Float<Tag>> {
  using T = mpsim::num::Float<Tag>;
  using B = mpsim::num::FormatBits<Tag>;
  using S = typename Tag::storage;
  // floor(n * log10(2)) and ceil(n * log10(2)) for |n| < 2^20, in integers (log10(2) = 0.30102999566...).
  static constexpr int floor_log10_pow2(int n) {
    const long long t = static_cast<long long>(n) * 30102999566LL;
    return static_cast<int>(t >= 0 ? t / 100000000000LL : -((-t + 99999999999LL) / 100000000000LL));
  }
  static constexpr int ceil_log10_pow2(int n) { return -floor_log10_pow2(-n); }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = B::ieee;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = B::ieee;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  // IEEE 754 binary interchange layout with inf and NaN (fp16; bf16, tf32 and e5m2 follow the same
  // rules with other widths); e4m3fn has no inf, so it is not.
  static constexpr bool is_iec559 = B::ieee;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = Tag::man_bits + 1;
  // floor((digits - 1) log10 2) and ceil(digits log10 2) + 1, as for float (6 and 9).
  static constexpr int digits10 = floor_log10_pow2(digits - 1);
  static constexpr int max_digits10 = ceil_log10_pow2(digits) + 1;
  static constexpr int radix = 2;
  static constexpr int min_exponent = B::emin + 1;  // 2^(min_exponent - 1) is the smallest normal
  static constexpr int max_exponent = B::emax + 1;
  // The smallest power of ten that is normal / the largest that is finite. The largest finite value
  // lies in [2^emax, 2^(emax+1)); floor(log10(max)) equals floor((emax+1) log10 2) unless a power of
  // ten falls between max and 2^(emax+1) (not the case for the tags here; the test checks it).
  static constexpr int min_exponent10 = ceil_log10_pow2(B::emin);
  static constexpr int max_exponent10 = floor_log10_pow2(B::emax + 1);
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr T min() noexcept { return T::from_bits(static_cast<S>(B::min_normal)); }
  static constexpr T lowest() noexcept { return T::from_bits(static_cast<S>(B::sign | B::max_finite)); }
  static constexpr T max() noexcept { return T::from_bits(static_cast<S>(B::max_finite)); }
  static constexpr T epsilon() noexcept { return T::from_bits(static_cast<S>(B::epsilon)); }
  static constexpr T round_error() noexcept { return T::from_bits(static_cast<S>(B::half)); }
  // Without inf (e4m3fn) the standard leaves infinity() unspecified; it returns the NaN there.
  static constexpr T infinity() noexcept { return T::from_bits(static_cast<S>(B::ieee ? B::inf : B::quiet_nan)); }
  static constexpr T quiet_NaN() noexcept { return T::from_bits(static_cast<S>(B::quiet_nan)); }
  static constexpr T signaling_NaN() noexcept { return T::from_bits(static_cast<S>(B::signaling_nan)); }
  static constexpr T denorm_min() noexcept { return T::from_bits(static_cast<S>(1)); }
};
