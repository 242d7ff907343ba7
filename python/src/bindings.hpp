// What the three binding files of mpsim._core share: array checks and the option parsing of the Python
// API (docs/python.md). Thin: every value is computed by lib/mpsim.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/format/soft_error.hpp"

namespace mpsim::python {

namespace nb = nanobind;

// Any array or tensor: numpy arrays (read-only ones included) and anything with __dlpack__ (torch).
using AnyArray = nb::ndarray<nb::ro>;
using WritableArray = nb::ndarray<>;

// The dtype's readable name ("float32", "uint16", "bfloat16" for bf16 tensors, ...).
std::string dtype_name(nb::dlpack::dtype);

// A contiguous CPU array of element type T: its data as a span. TypeError naming `what` for another
// device or dtype; ValueError for a layout that is not C-contiguous (the Python layer copies strided
// inputs first, so this only meets `out=` arrays and direct callers of _core).
template <class Array>
void check_layout(const Array& a, const char* what);
template <class T>
std::span<const T> input_span(const AnyArray& a, const char* what);
template <class T>
std::span<T> output_span(const WritableArray& a, const char* what, std::size_t expected_size);

// The format `fmt` names: a format name, an mpsim.Format, or a torch / numpy dtype (torch.float16,
// torch.float8_e4m3fn, ml_dtypes.bfloat16, ...). ValueError for an unknown name, TypeError for another object.
Format format_of(nb::handle fmt);
// The format, with the subnormals ("keep" | "flush") and overflow ("inf" | "saturate") keyword arguments
// applied (lib/mpsim/format/options.hpp); ValueError naming the argument for an unknown value.
Format format_with_kwargs(const Format& base, std::string_view subnormals, std::string_view overflow);
// The same for keywords that may be left out (None in Python): one not given keeps base's own setting, so that a
// Format made with with_options(overflow="saturate") keeps saturating where a call names neither.
Format format_with_given_kwargs(const Format& base, const std::optional<std::string>& subnormals,
                                const std::optional<std::string>& overflow);
// The rounding: mode name as the CLI takes it, validated (sr_bits 1..32; sr_bits other than 32 only
// with stochastic rounding, as the CLI's --sr-bits).
Rounding rounding_with_kwargs(std::string_view mode, int sr_bits, std::uint64_t seed, bool daz);
// flip / flip_seed / flip_bits: soft errors after rounding; ValueError naming flip if it is not a probability,
// flip_bits for a word other than fraction / any.
SoftErrors soft_errors_with_kwargs(double flip, std::uint64_t flip_seed, std::string_view flip_bits);

void bind_formats(nb::module_& m);
void bind_arrays(nb::module_& m);
void bind_analysis(nb::module_& m);
void bind_mma(nb::module_& m);  // mma.cpp

void bind_recipe(nb::module_& m);  // recipe.cpp
void bind_mass(nb::module_& m);    // mass.cpp
// A Stats as a dict under `mpsim round --stats-json`'s names (arrays.cpp); flipped: the soft errors added.
nb::dict stats_dict(const Stats& s, std::uint64_t flipped);

// ---- templates ----
inline bool is_c_contiguous(std::size_t ndim, const std::int64_t* shape, const std::int64_t* strides) {
  std::int64_t expected = 1;
  for (std::size_t i = ndim; i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

template <class Array>
void check_layout(const Array& a, const char* what) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::type_error((std::string(what) + " is on a non-CPU device (DLPack device type " +
                          std::to_string(a.device_type()) + "); mpsim works on CPU memory: move it with .cpu()")
                             .c_str());
  // DLPack leaves strides null for a compact row-major tensor.
  if (a.size() > 0 && a.stride_ptr() != nullptr && !is_c_contiguous(a.ndim(), a.shape_ptr(), a.stride_ptr()))
    throw nb::value_error((std::string(what) + " is not C-contiguous (a strided view); pass a contiguous array "
                                               "(numpy.ascontiguousarray(a) / tensor.contiguous())")
                              .c_str());
}

template <class T>
std::span<const T> input_span(const AnyArray& a, const char* what) {
  check_layout(a, what);
  if (a.dtype() != nb::dtype<T>())
    throw nb::type_error(
        (std::string(what) + " has dtype " + dtype_name(a.dtype()) + ", expected " + dtype_name(nb::dtype<T>()))
            .c_str());
  return {static_cast<const T*>(a.data()), a.size()};
}

template <class T>
std::span<T> output_span(const WritableArray& a, const char* what, std::size_t expected_size) {
  check_layout(a, what);
  if (a.dtype() != nb::dtype<T>())
    throw nb::type_error(
        (std::string(what) + " has dtype " + dtype_name(a.dtype()) + ", expected " + dtype_name(nb::dtype<T>()))
            .c_str());
  if (a.size() != expected_size)
    throw nb::value_error((std::string(what) + " has " + std::to_string(a.size()) + " elements, expected " +
                           std::to_string(expected_size))
                              .c_str());
  return {static_cast<T*>(a.data()), a.size()};
}

}  // namespace mpsim::python
