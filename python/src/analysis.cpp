// mpsim._core's analysis objects: Histogram (Log2Histogram, the bins of `mpsim hist`) and UnderflowCounter
// (RangeCounter, the one pass behind `mpsim underflow`), with the JSON of those commands and a flat int64
// layout of their counts for merging across processes.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "mpsim/analysis/histogram.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/underflow.hpp"
#include "mpsim/error.hpp"
#include "mpsim/version.hpp"

namespace mpsim::python {
namespace {

using analysis::Log2Histogram;
using analysis::RangeCounter;
using Int64Array = nb::ndarray<nb::numpy, std::int64_t, nb::ndim<1>>;

Int64Array to_numpy(std::vector<std::int64_t>&& v) {
  auto* owned = new std::vector<std::int64_t>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<std::int64_t>*>(p); });
  return Int64Array(owned->data(), {owned->size()}, owner);
}

nb::object json_loads(const nlohmann::json& j) { return nb::module_::import_("json").attr("loads")(j.dump()); }

// Adds a float32 / float64 array or tensor of any shape with the GIL released. The package's own checks come
// first (mpsim._prepare, python/mpsim/__init__.py): a tensor on another device or of another dtype is named
// in a TypeError, a strided one is made contiguous, one that requires grad is detached, float16 / bfloat16
// ones are widened to float32 (exact).
template <class Counter>
void add_array(Counter& c, nb::handle obj) {
  const nb::object prepared = nb::module_::import_("mpsim").attr("_prepare")(obj, "x", true)[0];
  const auto x = nb::cast<AnyArray>(prepared);
  check_layout(x, "x");
  if (x.dtype() == nb::dtype<float>()) {
    const auto s = input_span<float>(x, "x");
    nb::gil_scoped_release release;
    c.add(s);
  } else if (x.dtype() == nb::dtype<double>()) {
    const auto s = input_span<double>(x, "x");
    nb::gil_scoped_release release;
    c.add(s);
  } else {
    throw nb::type_error(("x has dtype " + dtype_name(x.dtype()) +
                          "; the analysis objects take float32 and float64 arrays (convert others first)")
                             .c_str());
  }
}

Format format_of(const nb::handle& fmt) {
  if (nb::isinstance<nb::str>(fmt)) return parse_format(nb::cast<std::string>(fmt));
  return nb::cast<Format>(fmt);
}

RangeCounter make_counter(const nb::handle& fmt, const std::string& mode) {
  const RoundingMode m = parse_rounding_mode(mode);
  if (m == RoundingMode::stochastic)
    throw nb::value_error("UnderflowCounter: mode='sr' has no single outcome per value; use a deterministic mode "
                          "(rne, rtz, ru, rd, rna, rto)");
  return RangeCounter(format_of(fmt), Rounding::of(m));
}


// The report of `mpsim <command>` over named counters ({"tensors": [...], "total": ..., "failed": []} with
// its schema tag), each entry made by `entry(label, counter)`.
template <class Entry>
nlohmann::json report_over(const std::string& command, const std::vector<std::pair<std::string, const RangeCounter*>>& named,
                           const RangeCounter& first, nlohmann::json header, Entry entry) {
  RangeCounter total(first.format(), first.rounding());
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [label, c] : named) {
    total += *c;
    tensors.push_back(entry(label, *c));
  }
  header["command"] = command;
  header["tensors"] = tensors;
  header["total"] = entry("total", total);
  header["failed"] = nlohmann::json::array();
  header["schema"] = "mpsim-" + command + "-1";
  header["mpsim_version"] = kVersion;
  return header;
}

std::vector<std::pair<std::string, const RangeCounter*>> named_counters(const nb::dict& counters) {
  std::vector<std::pair<std::string, const RangeCounter*>> named;
  for (auto [k, v] : counters) named.emplace_back(nb::cast<std::string>(k), &nb::cast<const RangeCounter&>(v));
  if (named.empty()) throw nb::value_error("no counters: pass a dict {tensor name: UnderflowCounter}");
  for (const auto& [label, c] : named)
    if (!(c->format() == named.front().second->format()) || c->rounding().mode != named.front().second->rounding().mode)
      throw nb::value_error(("counter '" + label + "' counts " + c->format().name + " " +
                             std::string(short_name(c->rounding().mode)) + ", the first one " +
                             named.front().second->format().name + " " +
                             std::string(short_name(named.front().second->rounding().mode)))
                                .c_str());
  return named;
}

nlohmann::json hist_report(const nb::dict& counters, int k) {
  const auto named = named_counters(counters);
  const RangeCounter& first = *named.front().second;
  const nlohmann::json header = {{"format", first.format().name}, {"scale", std::ldexp(1.0, k)}, {"log2_scale", k}};
  return report_over("hist", named, first, header, [&](const std::string& label, const RangeCounter& c) {
    nlohmann::json j = {{"tensor", label}};
    j.update(analysis::hist_stats_json(c, k));
    return j;
  });
}

nlohmann::json underflow_report(const nb::dict& counters, int log2_scale, double margin, bool with_sweep) {
  const auto named = named_counters(counters);
  const RangeCounter& first = *named.front().second;
  analysis::UnderflowOptions uo;
  uo.log2_scale = log2_scale;
  if (!(margin >= 1) || !std::isfinite(margin))
    throw nb::value_error(("margin=" + std::to_string(margin) + ": must be at least 1").c_str());
  uo.margin = margin;
  const nlohmann::json header = {{"format", first.format().name},
                                 {"rounding", std::string(ieee_name(first.rounding().mode))},
                                 {"scale", std::ldexp(1.0, log2_scale)},
                                 {"log2_scale", uo.log2_scale},
                                 {"margin", margin}};
  return report_over("underflow", named, first, header, [&](const std::string& label, const RangeCounter& c) {
    return analysis::underflow_report_json(label, c, uo, with_sweep);
  });
}

}  // namespace

void bind_analysis(nb::module_& m) {
  using namespace nb::literals;

  nb::class_<Log2Histogram>(m, "Histogram",
                            "Counts of values by binade (bin n: 2^n <= |x| < 2^(n+1)), zeros, NaN, -inf and +inf "
                            "apart: the bins of `mpsim hist`.")
      .def("__init__", [](Log2Histogram* h) { new (h) Log2Histogram(analysis::make_float_histogram()); })
      .def("add", [](Log2Histogram& h, nb::handle x) { add_array(h, x); }, "x"_a,
           "Counts every element of a float32/float64 array or tensor.")
      .def(
          "merge", [](Log2Histogram& h, const Log2Histogram& o) -> Log2Histogram& { return h += o; }, "other"_a,
          nb::rv_policy::reference_internal, "Adds the counts of another histogram (in place; returns self).")
      .def("__iadd__", [](Log2Histogram& h, const Log2Histogram& o) -> Log2Histogram& { return h += o; },
           nb::rv_policy::reference_internal)
      .def("__add__", [](const Log2Histogram& a, const Log2Histogram& b) { Log2Histogram r = a; r += b; return r; })
      .def("__eq__", [](const Log2Histogram& a, const Log2Histogram& b) { return a == b; }, nb::is_operator())
      .def_prop_ro("total", &Log2Histogram::total)
      .def_prop_ro("finite_nonzero", &Log2Histogram::finite_nonzero)
      .def_ro("zero", &Log2Histogram::zero)
      .def_ro("nan", &Log2Histogram::nan)
      .def_ro("neg_inf", &Log2Histogram::neg_inf)
      .def_ro("pos_inf", &Log2Histogram::pos_inf)
      .def_ro("min_exp", &Log2Histogram::min_exp)
      .def_ro("max_exp", &Log2Histogram::max_exp)
      .def("count", &Log2Histogram::count, "n"_a, "The count of bin n (2^n <= |x| < 2^(n+1)).")
      .def("bins",
           [](const Log2Histogram& h) {
             nb::dict d;
             for (int n = h.lowest_nonempty(); n <= h.highest_nonempty(); ++n)
               if (h.count(n)) d[nb::int_(n)] = h.count(n);
             return d;
           },
           "The non-empty bins as {n: count}, in increasing n.")
      .def("to_json", [](const Log2Histogram& h) { return h.to_json().dump(); },
           "The histogram object of `mpsim hist` JSON (its tensors[i]['histogram']), as a string.")
      .def_static("from_json", [](const std::string& s) { return Log2Histogram::from_json(nlohmann::json::parse(s)); },
                  "s"_a)
      .def("counts_array", [](const Log2Histogram& h) { return to_numpy(h.counts()); },
           "Every counter in one fixed layout (int64, 4 + 2098 values: zero, nan, -inf, +inf, bins 2^-1074 .. "
           "2^1023): histograms of several processes merge with one sum of these arrays.")
      .def_static("from_counts_array",
                  [](const AnyArray& a) { return Log2Histogram::from_counts(input_span<std::int64_t>(a, "counts")); },
                  "counts"_a)
      .def("__getstate__", [](const Log2Histogram& h) { return h.to_json().dump(); })
      .def("__setstate__",
           [](Log2Histogram* h, const std::string& s) { new (h) Log2Histogram(Log2Histogram::from_json(nlohmann::json::parse(s))); })
      .def("__repr__", [](const Log2Histogram& h) {
        return "mpsim.Histogram(total=" + std::to_string(h.total()) + ", zero=" + std::to_string(h.zero) +
               ", nan=" + std::to_string(h.nan) + ", binades " + std::to_string(h.lowest_nonempty()) + ".." +
               std::to_string(h.highest_nonempty()) + ")";
      });

  nb::class_<RangeCounter>(m, "UnderflowCounter",
                           "One pass over values that answers, for every power-of-two loss scale at once, how many "
                           "would underflow to zero, become subnormal or overflow in a format (`mpsim underflow`).")
      .def("__init__", [](RangeCounter* c, nb::handle fmt, const std::string& mode) { new (c) RangeCounter(make_counter(fmt, mode)); },
           "fmt"_a = "fp16", "mode"_a = "rne")
      .def("add", [](RangeCounter& c, nb::handle x) { add_array(c, x); }, "x"_a,
           "Counts every element of a float32/float64 array or tensor.")
      .def(
          "merge", [](RangeCounter& c, const RangeCounter& o) -> RangeCounter& { return c += o; }, "other"_a,
          nb::rv_policy::reference_internal, "Adds the counts of another counter of the same format and mode.")
      .def("__iadd__", [](RangeCounter& c, const RangeCounter& o) -> RangeCounter& { return c += o; },
           nb::rv_policy::reference_internal)
      .def("__add__", [](const RangeCounter& a, const RangeCounter& b) { RangeCounter r = a; r += b; return r; })
      .def("__eq__",
           [](const RangeCounter& a, const RangeCounter& b) {
             return a.format() == b.format() && a.rounding().mode == b.rounding().mode && a.counts() == b.counts() &&
                    a.amax() == b.amax() && a.amin_nonzero() == b.amin_nonzero();
           },
           nb::is_operator())
      .def_prop_ro("format", [](const RangeCounter& c) { return c.format(); })
      .def_prop_ro("mode", [](const RangeCounter& c) { return std::string(short_name(c.rounding().mode)); })
      .def_prop_ro("total", &RangeCounter::total)
      .def_prop_ro("amax", &RangeCounter::amax, "Largest finite |x| seen (0 if none).")
      .def_prop_ro("amin_nonzero", &RangeCounter::amin_nonzero, "Smallest non-zero finite |x| seen (0 if none).")
      .def("histogram", &RangeCounter::histogram, "The log2 histogram of the values seen.")
      .def(
          "underflow",
          [](const RangeCounter& c, int log2_scale) {
            nlohmann::json j = analysis::range_stats_json(c.at_scale(log2_scale));
            j.update(analysis::amax_stats_json(c));
            return json_loads(j);
          },
          "log2_scale"_a = 0,
          "Under the scale 2^log2_scale: numel, underflows%, underflows_num, subnormals%, overflows%, ... (the "
          "names of `mpsim underflow`) and cur_amax, nonzero_amin, dynamic_range.")
      .def(
          "recommend_scale",
          [](const RangeCounter& c, double margin, int log2_scale) {
            analysis::UnderflowOptions uo;
            uo.margin = margin;
            uo.log2_scale = log2_scale;
            if (!(margin >= 1) || !std::isfinite(margin))
              throw nb::value_error(("margin=" + std::to_string(margin) + ": must be at least 1").c_str());
            const nlohmann::json j = analysis::underflow_report_json("", c, uo, false);
            return json_loads(j["recommended"]);
          },
          "margin"_a = 2.0, "log2_scale"_a = 0,
          "The largest power-of-two scale with cur_amax*S*margin <= max finite, with its counts and the "
          "underflows it rescues compared with 2^log2_scale (the report's 'recommended'); None without a non-zero "
          "finite value.")
      .def(
          "sweep",
          [](const RangeCounter& c, int lo, int hi) {
            analysis::UnderflowOptions uo;
            uo.sweep_lo = lo;
            uo.sweep_hi = hi;
            if (lo > hi) throw nb::value_error("sweep: lo must not exceed hi");
            return json_loads(analysis::underflow_report_json("", c, uo, true)["sweep"]);
          },
          "lo"_a = -8, "hi"_a = 32,
          "Every scale 2^lo .. 2^hi: {'rows': [...], 'largest_safe_log2_scale', 'best_window'} as in the report.")
      .def(
          "report_json",
          [](const RangeCounter& c, const std::string& tensor, int log2_scale, double margin, bool with_sweep) {
            nb::dict d;
            d[tensor.c_str()] = nb::cast(c, nb::rv_policy::reference);
            return underflow_report(d, log2_scale, margin, with_sweep).dump(2) + "\n";
          },
          "tensor"_a = "tensor", "log2_scale"_a = 0, "margin"_a = 2.0, "sweep"_a = false,
          "The JSON report `mpsim underflow` writes, for these values as one tensor.")
      .def(
          "hist_json",
          [](const RangeCounter& c, const std::string& tensor, int log2_scale) {
            nb::dict d;
            d[tensor.c_str()] = nb::cast(c, nb::rv_policy::reference);
            return hist_report(d, log2_scale).dump(2) + "\n";
          },
          "tensor"_a = "tensor", "log2_scale"_a = 0, "The JSON report `mpsim hist` writes, for these values as one tensor.")
      .def("counts_array", [](const RangeCounter& c) { return to_numpy(c.counts()); },
           "Every count in one fixed layout (int64) for this format and mode: counters of several processes merge "
           "with one sum of these arrays (and a max of amax, a min of amin_nonzero).")
      .def_static(
          "from_counts_array",
          [](nb::handle fmt, const std::string& mode, const AnyArray& a, double amax, double amin_nonzero) {
            const RangeCounter proto = make_counter(fmt, mode);
            return RangeCounter::from_counts(proto.format(), proto.rounding(), input_span<std::int64_t>(a, "counts"),
                                             amax, amin_nonzero);
          },
          "fmt"_a, "mode"_a, "counts"_a, "amax"_a = 0.0, "amin_nonzero"_a = 0.0)
      .def("__getstate__",
           [](const RangeCounter& c) {
             const Format& f = c.format();
             return nb::make_tuple(f.name, std::string(to_string(f.subnormals)),
                                   f.overflow == Overflow::saturate ? "saturate" : "inf",
                                   std::string(short_name(c.rounding().mode)), to_numpy(c.counts()), c.amax(),
                                   c.amin_nonzero());
           })
      .def("__setstate__",
           [](RangeCounter* c, const nb::tuple& t) {
             const Format f = format_with_options(parse_format(nb::cast<std::string>(t[0])), nb::cast<std::string>(t[1]),
                                                  nb::cast<std::string>(t[2]));
             const auto counts = nb::cast<AnyArray>(t[4]);
             new (c) RangeCounter(RangeCounter::from_counts(f, Rounding::of(parse_rounding_mode(nb::cast<std::string>(t[3]))),
                                                            input_span<std::int64_t>(counts, "counts"),
                                                            nb::cast<double>(t[5]), nb::cast<double>(t[6])));
           })
      .def("__repr__", [](const RangeCounter& c) {
        return "mpsim.UnderflowCounter('" + c.format().name + "', mode='" + std::string(short_name(c.rounding().mode)) +
               "', total=" + std::to_string(c.total()) + ")";
      });

  m.def("hist_report_json", [](const nb::dict& counters, int log2_scale) { return hist_report(counters, log2_scale).dump(2) + "\n"; },
        "counters"_a, "log2_scale"_a = 0,
        "The JSON `mpsim hist` writes, for {tensor name: UnderflowCounter} (one format and mode).");
  m.def("underflow_report_json",
        [](const nb::dict& counters, int log2_scale, double margin, bool with_sweep) {
          return underflow_report(counters, log2_scale, margin, with_sweep).dump(2) + "\n";
        },
        "counters"_a, "log2_scale"_a = 0, "margin"_a = 2.0, "sweep"_a = false,
        "The JSON `mpsim underflow` writes, for {tensor name: UnderflowCounter} (one format and mode).");
}

}  // namespace mpsim::python
