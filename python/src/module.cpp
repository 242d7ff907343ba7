// mpsim._core: the module, its exceptions and the format descriptors (mpsim.Format, mpsim.formats()).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/format/block.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/options.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/version.hpp"

namespace mpsim::python {

std::string dtype_name(nb::dlpack::dtype d) {
  const auto code = static_cast<nb::dlpack::dtype_code>(d.code);
  std::string kind = code == nb::dlpack::dtype_code::Int       ? "int"
                     : code == nb::dlpack::dtype_code::UInt    ? "uint"
                     : code == nb::dlpack::dtype_code::Float   ? "float"
                     : code == nb::dlpack::dtype_code::Bfloat  ? "bfloat"
                     : code == nb::dlpack::dtype_code::Complex ? "complex"
                     : code == nb::dlpack::dtype_code::Bool    ? "bool"
                                                               : "code" + std::to_string(d.code) + "_";
  std::string name = kind + std::to_string(d.bits);
  if (d.lanes != 1) name += "x" + std::to_string(d.lanes);
  return name;
}

namespace {
// A wrong option in Python's words (keyword arguments).
[[noreturn]] void throw_option_error(const OptionError& e) {
  switch (e.key) {
    case OptionKey::subnormals:
    case OptionKey::overflow: {
      const std::string arg = e.key == OptionKey::subnormals ? "subnormals" : "overflow";
      throw nb::value_error(
          (arg + "='" + e.value + "': unknown (known: " + std::string(option_words(e.key)) + ")").c_str());
    }
    case OptionKey::sr_bits: throw nb::value_error("sr_bits applies only to mode='sr' (stochastic rounding)");
    case OptionKey::flip:
      throw nb::value_error(("flip=" + e.value + ": the probability must be a number in [0, 1]").c_str());
    case OptionKey::flip_bits:
      throw nb::value_error(
          ("flip_bits='" + e.value + "': unknown (known: " + std::string(option_words(e.key)) + ")").c_str());
  }
  throw nb::value_error(e.what());
}
}  // namespace

Format format_with_kwargs(const Format& base, std::string_view subnormals, std::string_view overflow) {
  try {
    return format_with_options(base, subnormals, overflow);
  } catch (const OptionError& e) {
    throw_option_error(e);
  }
}

Format format_with_given_kwargs(const Format& base, const std::optional<std::string>& subnormals,
                                const std::optional<std::string>& overflow) {
  return format_with_kwargs(base, subnormals ? std::string_view(*subnormals) : to_string(base.subnormals),
                            overflow ? std::string_view(*overflow) : to_string(base.overflow));
}

Rounding rounding_with_kwargs(std::string_view mode, int sr_bits, std::uint64_t seed, bool daz) {
  try {
    return rounding_with_options(mode, sr_bits, seed, daz);
  } catch (const OptionError& e) {
    throw_option_error(e);
  }
}

SoftErrors soft_errors_with_kwargs(double flip, std::uint64_t flip_seed, std::string_view flip_bits) {
  try {
    return soft_errors_with_options(flip, flip_seed, flip_bits);
  } catch (const OptionError& e) {
    throw_option_error(e);
  }
}

Format format_of(nb::handle fmt) {
  if (nb::isinstance<nb::str>(fmt)) return parse_format(nb::cast<std::string>(fmt));
  if (nb::isinstance<Format>(fmt)) return nb::cast<Format>(fmt);
  // A torch or numpy dtype: the package maps it to a format name (mpsim._dtype_format_name, one table for
  // every caller) and raises a TypeError naming anything else.
  const nb::object name = nb::module_::import_("mpsim").attr("_dtype_format_name")(fmt);
  return parse_format(nb::cast<std::string>(name));
}

void bind_formats(nb::module_& m) {
  nb::class_<Format>(m, "Format",
                     "A binary floating-point format: Format('fp16'), Format('float8_e4m3fn'), Format('e5m10'), ...\n"
                     "Every name the command line takes (mpsim.formats() lists the canonical ones), or a torch / "
                     "numpy dtype naming one (Format(torch.bfloat16), Format(ml_dtypes.float8_e5m2)).")
      .def(
          "__init__", [](Format* f, nb::handle name) { new (f) Format(format_of(name)); }, nb::arg("name").none())
      .def_ro("name", &Format::name)
      .def_ro("exp_bits", &Format::exp_bits)
      .def_ro("man_bits", &Format::man_bits)
      .def_ro("bias", &Format::bias)
      .def_ro("precision", &Format::precision)
      .def_ro("emin", &Format::emin)
      .def_ro("emax", &Format::emax)
      .def_ro("storage_bits", &Format::storage_bits)
      .def_ro("max_finite", &Format::max_finite)
      .def_ro("min_normal", &Format::min_normal)
      .def_ro("min_subnormal", &Format::min_subnormal)
      .def_ro("epsilon", &Format::epsilon)
      .def_ro("unit_roundoff", &Format::unit_roundoff)
      .def_ro("has_inf", &Format::has_inf)
      .def_ro("has_sign", &Format::has_sign)
      .def_ro("has_zero", &Format::has_zero)
      .def_prop_ro("has_nan", &Format::has_nan)
      .def_prop_ro("nan_encoding", [](const Format& f) { return std::string(to_string(f.nan)); })
      .def_prop_ro("subnormals", [](const Format& f) { return std::string(to_string(f.subnormals)); })
      .def_prop_ro("overflow", [](const Format& f) { return std::string(to_string(f.overflow)); })
      .def_prop_ro("storage_bytes", &Format::storage_bytes)
      .def(
          "with_options",
          [](const Format& f, const std::optional<std::string>& subnormals,
             const std::optional<std::string>& overflow) {
            // A keyword not given keeps the format's own setting: a default of "keep" / "inf" would undo an
            // earlier with_options (f.with_options(overflow="saturate").with_options(subnormals="flush")).
            return format_with_given_kwargs(f, subnormals, overflow);
          },
          nb::arg("subnormals").none() = nb::none(), nb::arg("overflow").none() = nb::none(),
          "The same format with subnormal results kept or flushed and overflow to inf or saturating; a keyword not "
          "given keeps the format's own setting.")
      .def(
          "__eq__", [](const Format& a, const Format& b) { return a == b; }, nb::is_operator())
      .def("__hash__",
           [](const Format& f) {
             return nb::hash(nb::make_tuple(f.exp_bits, f.man_bits, f.bias, f.has_inf, static_cast<int>(f.nan),
                                            static_cast<int>(f.subnormals), static_cast<int>(f.overflow), f.has_sign,
                                            f.has_zero));
           })
      .def("__repr__",
           [](const Format& f) {
             std::string s = "mpsim.Format('" + f.name + "')";
             if (f.subnormals != Subnormals::keep || f.overflow != Overflow::to_inf)
               s += ".with_options(subnormals='" + std::string(to_string(f.subnormals)) + "', overflow='" +
                    std::string(to_string(f.overflow)) + "')";
             return s;
           })
      .def("__getstate__",
           [](const Format& f) {
             return nb::make_tuple(f.name, std::string(to_string(f.subnormals)), std::string(to_string(f.overflow)));
           })
      .def("__setstate__", [](Format* f, const nb::tuple& t) {
        new (f) Format(format_with_kwargs(parse_format(nb::cast<std::string>(t[0])), nb::cast<std::string>(t[1]),
                                          nb::cast<std::string>(t[2])));
      });

  m.def(
      "formats",
      [] {
        std::vector<std::string> names;
        for (const Format& f : named_formats()) names.push_back(f.name);
        return names;
      },
      "The canonical names of the named element formats (Format(name) also takes aliases, ml_dtypes names "
      "and custom eXmY).");
  m.def(
      "block_formats",
      [] {
        std::vector<std::string> names;
        for (auto n : block_format_names()) names.emplace_back(n);
        return names;
      },
      "The block format names mpsim.round and mpsim.encode take (mxfp8_e4m3, ..., nvfp4).");
  m.def(
      "is_block_format", [](std::string_view name) { return is_block_format_name(name); }, nb::arg("name"));
  m.def("rounding_modes", [] {
    std::vector<std::string> names;
    for (auto mode : {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up, RoundingMode::down,
                      RoundingMode::nearest_away, RoundingMode::to_odd, RoundingMode::stochastic})
      names.emplace_back(short_name(mode));
    return names;
  });
}

}  // namespace mpsim::python

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  m.attr("__version__") = mpsim::kVersion;
  // Bad input (an unknown format name, a malformed JSON, a shape that does not fit) is mpsim::Error in the
  // library; in Python it is a ValueError carrying the same message.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const mpsim::FieldError& e) {
      // The library names the field (block_scale); Python names the keyword (block_scale='x').
      PyErr_SetString(PyExc_ValueError, e.message([](std::string_view f) { return std::string(f); }, "=").c_str());
    } catch (const mpsim::BlockFormatNameError& e) {
      // Where Python takes a block format; the command line names its own options (tools/mpsim/main.cpp).
      PyErr_SetString(PyExc_ValueError,
                      (std::string(e.what()) + "; mpsim.round, mpsim.encode and mpsim.decode_blocks take it").c_str());
    } catch (const mpsim::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const nlohmann::json::exception& e) {
      // Histogram.from_json on a malformed string.
      PyErr_SetString(PyExc_ValueError, (std::string("malformed JSON: ") + e.what()).c_str());
    }
  });
  mpsim::python::bind_formats(m);
  mpsim::python::bind_arrays(m);
  mpsim::python::bind_analysis(m);
  mpsim::python::bind_mma(m);

  mpsim::python::bind_recipe(m);
  mpsim::python::bind_mass(m);
}
