// Eigen conveniences for the bulk engine (bulk.hpp): round a matrix, array, map or block in place, or
// into a packed buffer, and decode a packed buffer into one, without copying. Kept apart from bulk.hpp
// so that format/ callers who do not use Eigen do not pull it in.
//
// Element order (and so the stochastic index: element k uses opt.index0 + k) is the object's storage
// order: column by column for column-major objects. Objects whose columns (rows, for row-major) are
// contiguous but not adjacent (blocks, maps with an outer stride) are processed slice by slice;
// an inner stride other than 1 is an mpsim::Error. Stats are added to *stats.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <span>
#include <type_traits>

#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"

namespace mpsim {

namespace bulk_eigen_detail {

template <class Derived>
void check_direct(const Eigen::DenseBase<Derived>& x, const char* who) {
  static_assert(static_cast<bool>(Eigen::internal::traits<Derived>::Flags & Eigen::DirectAccessBit),
                "bulk_eigen: the Eigen object must expose its storage (a Matrix, Array, Map or Block of one)");
  if (x.derived().innerStride() != 1)
    throw Error(std::string(who) + ": the Eigen object has inner stride " + std::to_string(x.derived().innerStride()) +
                "; only objects with contiguous columns (rows if row-major) are supported");
}

// Calls f(pointer, length, first element's position) for each contiguous slice.
template <class Derived, class F>
void for_each_slice(const Eigen::DenseBase<Derived>& x, F f) {
  const auto& d = x.derived();
  const Eigen::Index inner = d.innerSize(), outer = d.outerSize();
  if (d.outerStride() == inner || outer <= 1) {
    f(d.data(), static_cast<std::size_t>(d.size()), std::size_t{0});
    return;
  }
  for (Eigen::Index j = 0; j < outer; ++j)
    f(d.data() + j * d.outerStride(), static_cast<std::size_t>(inner), static_cast<std::size_t>(j * inner));
}

}  // namespace bulk_eigen_detail

// x <- round(x), simulate mode. Takes any writable Eigen float/double object with direct access, also
// temporaries such as m.block(...) or m.col(j) (Eigen's const_cast idiom for writable expressions).
template <class Derived>
void round_in_place(const Eigen::DenseBase<Derived>& x, const Format& fmt, const Rounding& r = {},
                    Stats* stats = nullptr, const BulkOptions& opt = {}) {
  using T = typename Derived::Scalar;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "round_in_place: float or double only");
  bulk_eigen_detail::check_direct(x, "round_in_place");
  auto& w = const_cast<Eigen::DenseBase<Derived>&>(x);
  bulk_eigen_detail::for_each_slice(w, [&](const T* p, std::size_t n, std::size_t pos) {
    BulkOptions o = opt;
    o.index0 = opt.index0 + pos;
    T* q = const_cast<T*>(p);
    round_array(std::span<const T>(p, n), std::span<T>(q, n), fmt, r, stats, o);
  });
}

// out[k] <- round_bits(x_k) for x's elements in storage order; out.size() must equal x.size().
template <class Derived, class Out>
void round_to_packed(const Eigen::DenseBase<Derived>& x, std::span<Out> out, const Format& fmt, const Rounding& r = {},
                     Stats* stats = nullptr, const BulkOptions& opt = {}) {
  using T = typename Derived::Scalar;
  bulk_eigen_detail::check_direct(x, "round_to_packed");
  if (out.size() != static_cast<std::size_t>(x.size()))
    throw Error("round_to_packed: the Eigen object has " + std::to_string(x.size()) +
                " elements but the packed buffer " + std::to_string(out.size()));
  bulk_eigen_detail::for_each_slice(x, [&](const T* p, std::size_t n, std::size_t pos) {
    BulkOptions o = opt;
    o.index0 = opt.index0 + pos;
    round_array(std::span<const T>(p, n), out.subspan(pos, n), fmt, r, stats, o);
  });
}

// x's elements (storage order) <- decode(in[k]); x must be a float object with in.size() elements.
template <class Derived, class In>
void decode_from_packed(std::span<const In> in, const Eigen::DenseBase<Derived>& x, const Format& fmt) {
  static_assert(std::is_same_v<typename Derived::Scalar, float>, "decode_from_packed: float objects only");
  bulk_eigen_detail::check_direct(x, "decode_from_packed");
  if (in.size() != static_cast<std::size_t>(x.size()))
    throw Error("decode_from_packed: the packed buffer has " + std::to_string(in.size()) +
                " elements but the Eigen object " + std::to_string(x.size()));
  auto& w = const_cast<Eigen::DenseBase<Derived>&>(x);
  bulk_eigen_detail::for_each_slice(w, [&](const float* p, std::size_t n, std::size_t pos) {
    decode_array(in.subspan(pos, n), std::span<float>(const_cast<float*>(p), n), fmt);
  });
}

}  // namespace mpsim
