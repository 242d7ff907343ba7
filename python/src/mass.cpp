// mpsim.MassLostCounter: the gradient mass lost (lib/mpsim/analysis/mass_lost.hpp) as a mergeable, picklable
// accumulator, for reports that count tensors apart and merge them (mpsim.dumps, mpsim.torch.GradientMonitor).
//
// What merges exactly and what does not: the counts (nonzero, flushed, overflowed) are integers, so any order of
// merging gives the same bits. The six sums (sum |g|, sum g^2, their flushed parts, <g, q>, |q|^2) are doubles,
// summed as MassLost sums them (mass_lost.cpp, add_impl: per 4096-element block, the blocks' partials added in
// order); merging adds one accumulator's sums to another's (MassLost::operator+=), which rounds, so the result
// depends on the order of the merges. `mpsim underflow` builds its total by adding the tensors' accumulators in
// the order it read them (tools/mpsim/underflow.cpp, `total_mass += res.mass`); a caller that merges the same
// per-tensor accumulators in that order gets the command line's bits, and python/mpsim/dumps.py does so.
#include <nanobind/stl/string.h>

#include <cmath>
#include <string>

#include "bindings.hpp"
#include "mpsim/analysis/mass_lost.hpp"
#include "mpsim/error.hpp"

namespace mpsim::python {
namespace {

using analysis::MassLost;

struct MassCounter {
  Format format;
  Rounding rounding;
  int log2_scale = 0;
  MassLost mass;
};

void check_same(const MassCounter& a, const MassCounter& b) {
  if (!(a.format == b.format) || a.rounding.mode != b.rounding.mode || a.log2_scale != b.log2_scale)
    throw nb::value_error(("MassLostCounter.merge: " + a.format.name + " " + std::string(short_name(a.rounding.mode)) +
                           " at 2^" + std::to_string(a.log2_scale) + " cannot merge " + b.format.name + " " +
                           std::string(short_name(b.rounding.mode)) + " at 2^" + std::to_string(b.log2_scale))
                              .c_str());
}

MassCounter make(nb::handle fmt, int log2_scale, const std::string& mode) {
  const Rounding r = Rounding::of(parse_rounding_mode(mode));
  if (r.mode == RoundingMode::stochastic)
    throw nb::value_error(
        "MassLostCounter: mode='sr' has no single outcome per value; use a deterministic mode "
        "(rne, rtz, ru, rd, rna, rto)");
  return {format_of(fmt), r, log2_scale, MassLost()};
}

// The counter's state: format (name and options), mode, log2_scale and MassLost::state() (its sums written to
// round-trip exactly: nlohmann::json prints the shortest decimal that reads back as the same double).
nlohmann::json state_json(const MassCounter& c) {
  return {{"schema", "mpsim-mass-lost-counter-1"},
          {"format", c.format.name},
          {"subnormals", std::string(to_string(c.format.subnormals))},
          {"overflow", std::string(to_string(c.format.overflow))},
          {"mode", std::string(short_name(c.rounding.mode))},
          {"log2_scale", c.log2_scale},
          {"sums", c.mass.state()}};
}

MassCounter from_state_json(const nlohmann::json& j) {
  if (!j.is_object() || j.value("schema", "") != "mpsim-mass-lost-counter-1")
    throw Error("MassLostCounter.from_json: not an mpsim-mass-lost-counter-1 object");
  try {
    const Format f = format_with_kwargs(parse_format(j.at("format").get<std::string>()),
                                        j.at("subnormals").get<std::string>(), j.at("overflow").get<std::string>());
    return {f, Rounding::of(parse_rounding_mode(j.at("mode").get<std::string>())), j.at("log2_scale").get<int>(),
            MassLost::from_state(j.at("sums"))};
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("MassLostCounter.from_json: ") + e.what());
  }
}

void add_values(MassCounter& c, nb::handle obj) {
  // float16 / bfloat16 / strided / grad-requiring inputs through the package's checks (mpsim._prepare, as
  // UnderflowCounter.add does), float32 / float64 as they are.
  AnyArray x;
  nb::object keep;
  if (!(nb::try_cast(obj, x) && x.device_type() == nb::device::cpu::value &&
        (x.dtype() == nb::dtype<float>() || x.dtype() == nb::dtype<double>()) &&
        (x.size() == 0 || x.stride_ptr() == nullptr || is_c_contiguous(x.ndim(), x.shape_ptr(), x.stride_ptr())))) {
    keep = nb::module_::import_("mpsim").attr("_prepare")(obj, "x", true)[0];
    x = nb::cast<AnyArray>(keep);
  }
  check_layout(x, "x");
  if (x.dtype() == nb::dtype<float>()) {
    const auto s = input_span<float>(x, "x");
    nb::gil_scoped_release release;
    analysis::add_rounded(c.mass, s, c.format, c.rounding, c.log2_scale);
  } else if (x.dtype() == nb::dtype<double>()) {
    const auto s = input_span<double>(x, "x");
    nb::gil_scoped_release release;
    analysis::add_rounded(c.mass, s, c.format, c.rounding, c.log2_scale);
  } else {
    throw nb::type_error(("x has dtype " + dtype_name(x.dtype()) + "; MassLostCounter takes float arrays").c_str());
  }
}

nb::object to_py(const nlohmann::json& j) { return nb::module_::import_("json").attr("loads")(j.dump()); }

// stats(): the dict json.loads makes of mass_lost_json(s) (lib/mpsim/analysis/mass_lost.cpp): its keys in the
// JSON object's order (nlohmann::json keeps them sorted), NaN as None (JSON null), built without the text, which
// cost 18 us a call (docs/performance.md) and the gradient monitor asks per site and format on each sampled step.
nb::dict mass_stats_dict(const analysis::MassLostStats& s) {
  auto number = [](double v) { return std::isfinite(v) ? nb::object(nb::float_(v)) : nb::none(); };
  nb::dict d;
  d["cosine"] = number(s.cosine);
  d["l1_lost"] = number(s.l1_lost);
  d["l2sq_lost"] = number(s.l2sq_lost);
  d["lost_bias"] = number(s.lost_bias);
  d["mass_flushed_num"] = nb::int_(s.flushed);
  d["mass_nonzero_num"] = nb::int_(s.nonzero_finite);
  d["push_down"] = number(s.push_down);
  return d;
}

}  // namespace

void bind_mass(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<MassCounter>(m, "MassLostCounter",
                          "The gradient mass lost when values times 2^log2_scale are rounded into a format, "
                          "accumulated over arrays and merged over counters (`mpsim underflow`'s l1_lost, "
                          "l2sq_lost, cosine and their counts; docs/analysis.md).")
      .def(
          "__init__",
          [](MassCounter* c, nb::handle fmt, int log2_scale, const std::string& mode) {
            new (c) MassCounter(make(fmt, log2_scale, mode));
          },
          "fmt"_a = "fp16", "log2_scale"_a = 0, "mode"_a = "rne")
      .def(
          "add", [](MassCounter& c, nb::handle x) { add_values(c, x); }, "x"_a,
          "Rounds 2^log2_scale * x into the format and adds both (float16 / bfloat16 widened exactly).")
      .def(
          "clear", [](MassCounter& c) { c.mass = MassLost(); },
          "Forgets every value added: the counts and sums of a new counter (format, mode and log2_scale kept).")
      .def(
          "merge",
          [](MassCounter& c, const MassCounter& o) -> MassCounter& {
            check_same(c, o);
            c.mass += o.mass;
            return c;
          },
          "other"_a, nb::rv_policy::reference_internal,
          "Adds another counter's counts and sums (same format, mode and log2_scale): the union of their values. "
          "The counts merge exactly; the sums are doubles, so merge in a fixed order to get fixed bits.")
      .def(
          "__iadd__",
          [](MassCounter& c, const MassCounter& o) -> MassCounter& {
            check_same(c, o);
            c.mass += o.mass;
            return c;
          },
          nb::rv_policy::reference_internal)
      .def("__add__",
           [](const MassCounter& a, const MassCounter& b) {
             check_same(a, b);
             MassCounter r = a;
             r.mass += b.mass;
             return r;
           })
      .def(
          "__eq__", [](const MassCounter& a, const MassCounter& b) { return state_json(a) == state_json(b); },
          nb::is_operator())
      .def(
          "stats", [](const MassCounter& c) { return mass_stats_dict(c.mass.stats()); },
          "{'mass_nonzero_num', 'mass_flushed_num', 'l1_lost', 'l2sq_lost', 'cosine'} as `mpsim underflow` writes "
          "them (cosine None when undefined).")
      .def(
          "sums", [](const MassCounter& c) { return to_py(c.mass.state()); },
          "The counts and sums behind the ratios (MassLost::state): nonzero, flushed, overflowed (integers), "
          "sum_abs, sum_sq, flushed_abs, flushed_sq, dot, sum_sq_q (doubles).")
      .def_prop_ro("format", [](const MassCounter& c) { return c.format; })
      .def_prop_ro("mode", [](const MassCounter& c) { return std::string(short_name(c.rounding.mode)); })
      .def_prop_ro("log2_scale", [](const MassCounter& c) { return c.log2_scale; })
      .def("to_json", [](const MassCounter& c) { return state_json(c).dump(); })
      .def_static(
          "from_json", [](const std::string& s) { return from_state_json(nlohmann::json::parse(s)); }, "s"_a)
      .def("__getstate__", [](const MassCounter& c) { return state_json(c).dump(); })
      .def("__setstate__",
           [](MassCounter* c, const std::string& s) { new (c) MassCounter(from_state_json(nlohmann::json::parse(s))); })
      .def("__repr__", [](const MassCounter& c) {
        return "mpsim.MassLostCounter('" + c.format.name + "', log2_scale=" + std::to_string(c.log2_scale) +
               ", mode='" + std::string(short_name(c.rounding.mode)) +
               "', nonzero=" + std::to_string(c.mass.nonzero_finite()) + ")";
      });
}

}  // namespace mpsim::python
