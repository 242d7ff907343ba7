// mpsim._core's analysis objects: Histogram (Log2Histogram, the bins of `mpsim hist`) and UnderflowCounter
// (RangeCounter, the one pass behind `mpsim underflow`, with the exact moments that command reports), with the
// JSON of those commands and a flat int64 layout of their counts for merging across processes.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "mpsim/analysis/histogram.hpp"
#include "mpsim/analysis/mass_lost.hpp"
#include "mpsim/analysis/moments.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/report.hpp"
#include "mpsim/analysis/underflow.hpp"
#include "mpsim/error.hpp"

namespace mpsim::python {
namespace {

using analysis::Log2Histogram;
using analysis::Moments;
using analysis::RangeCounter;

// mpsim.UnderflowCounter: the range counts, the exact moments of the same values (min, max, mean, std, l1_norm,
// l2_norm, as `mpsim underflow` reports them; absent when made with moments=False, which saves their pass), and the
// shape and dtype of the array when exactly one was added (the command line reports them per file).
struct Counter {
  RangeCounter range;
  std::optional<Moments> moments;
  std::uint64_t arrays = 0;  // arrays added, over merges too
  std::vector<std::int64_t> shape;
  std::string dtype;
};
using Int64Array = nb::ndarray<nb::numpy, std::int64_t, nb::ndim<1>>;

Int64Array to_numpy(std::vector<std::int64_t>&& v) {
  auto* owned = new std::vector<std::int64_t>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<std::int64_t>*>(p); });
  return Int64Array(owned->data(), {owned->size()}, owner);
}

// The Python value of j, built directly (no JSON text in between); non-finite numbers become None, as they
// do in the JSON text (nlohmann writes them as null).
nb::object to_python(const nlohmann::json& j) {
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::boolean: return nb::bool_(j.get<bool>());
    case T::number_integer: return nb::int_(j.get<std::int64_t>());
    case T::number_unsigned: return nb::int_(j.get<std::uint64_t>());
    case T::number_float: {
      const double v = j.get<double>();
      return std::isfinite(v) ? nb::object(nb::float_(v)) : nb::none();
    }
    case T::string: return nb::str(j.get_ref<const std::string&>().c_str());
    case T::array: {
      nb::list l;
      for (const auto& e : j) l.append(to_python(e));
      return l;
    }
    case T::object: {
      nb::dict d;
      for (const auto& [k, v] : j.items()) d[k.c_str()] = to_python(v);
      return d;
    }
    default: return nb::none();
  }
}

// underflow(): the dict to_python makes of range_stats_json + amax_stats_json (lib/mpsim/analysis/underflow.cpp
// lines 139-159), built directly: the same keys in the JSON object's order (nlohmann::json keeps them sorted), the
// same numbers, NaN as None. The JSON path cost 15 us a call (docs/performance.md), asked per site and format on
// each sampled step of the gradient monitor; tests/python/test_analysis.py compares the two.
nb::dict underflow_dict(const RangeCounter& c, int log2_scale) {
  const analysis::RangeCounts r = c.at_scale(log2_scale);
  auto number = [](double v) { return std::isfinite(v) ? nb::object(nb::float_(v)) : nb::none(); };
  // underflow.cpp's percent(): of the non-zero finite values, 0 without any.
  auto percent = [&](std::uint64_t n) {
    return number(r.nonzero_finite ? 100.0 * double(n) / double(r.nonzero_finite) : 0.0);
  };
  const double amax = c.amax(), amin = c.amin_nonzero();
  nb::dict d;
  d["cur_amax"] = number(amax);
  d["dynamic_range"] = number(amax > 0 ? std::log2(amax) - std::log2(amin) : 0.0);
  d["inf_num"] = nb::int_(r.inf_in);
  d["nan_num"] = nb::int_(r.nan_in);
  d["nonzero_amin"] = number(amin);
  d["nonzero_finite_num"] = nb::int_(r.nonzero_finite);
  d["numel"] = nb::int_(r.total);
  d["overflows%"] = percent(r.overflow);
  d["overflows_num"] = nb::int_(r.overflow);
  d["subnormal_bits_lost_max"] = nb::int_(r.subnormal_bits_lost_max);
  d["subnormal_bits_lost_mean"] = number(r.subnormal_bits_lost_mean());
  d["subnormals%"] = percent(r.subnormal);
  d["subnormals_num"] = nb::int_(r.subnormal);
  d["underflows%"] = percent(r.underflow);
  d["underflows_num"] = nb::int_(r.underflow);
  d["zero_num"] = nb::int_(r.zero_in);
  return d;
}

// The array an analysis object counts, and the dtype name of what was passed, as the command line names a file's.
struct Counted {
  nb::object keep;  // the prepared copy, when one was made
  AnyArray x;
  std::string dtype;
};

// obj as a contiguous CPU float32 / float64 array. A numpy array or tensor that already is one is taken as it is,
// without calling into the package's Python (add() is called per tensor per step by the torch monitor: 1.3 us a
// call for a numpy array here, 9 us through _prepare). Anything else goes through the package's own checks
// (mpsim._prepare, python/mpsim/__init__.py): a tensor on another device or of another dtype is named in a
// TypeError, a strided one is made contiguous, one that requires grad is detached, float16 / bfloat16 ones are
// widened to float32 (exact).
Counted counted_array(nb::handle obj) {
  Counted c;
  if (nb::try_cast(obj, c.x) && c.x.device_type() == nb::device::cpu::value &&
      (c.x.dtype() == nb::dtype<float>() || c.x.dtype() == nb::dtype<double>()) &&
      (c.x.size() == 0 || c.x.stride_ptr() == nullptr ||
       is_c_contiguous(c.x.ndim(), c.x.shape_ptr(), c.x.stride_ptr()))) {
    c.dtype = dtype_name(c.x.dtype());
    return c;
  }
  c.keep = nb::module_::import_("mpsim").attr("_prepare")(obj, "x", true)[0];
  c.x = nb::cast<AnyArray>(c.keep);
  check_layout(c.x, "x");
  c.dtype = dtype_name(c.x.dtype());
  if (nb::hasattr(obj, "dtype")) {  // float16 / bfloat16 before the widening
    std::string name = nb::steal<nb::str>(PyObject_Str(obj.attr("dtype").ptr())).c_str();
    if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
    c.dtype = name == "half" ? "float16" : name;
  }
  return c;
}

// Calls add(span) on x's float32 or float64 values with the GIL released.
template <class Add>
void count_values(const AnyArray& x, Add add) {
  if (x.dtype() == nb::dtype<float>()) {
    const auto s = input_span<float>(x, "x");
    nb::gil_scoped_release release;
    add(s);
  } else if (x.dtype() == nb::dtype<double>()) {
    const auto s = input_span<double>(x, "x");
    nb::gil_scoped_release release;
    add(s);
  } else {
    throw nb::type_error(("x has dtype " + dtype_name(x.dtype()) +
                          "; the analysis objects take float32 and float64 arrays (convert others first)")
                             .c_str());
  }
}

void add_to_histogram(Log2Histogram& h, nb::handle obj) {
  const Counted in = counted_array(obj);
  count_values(in.x, [&h](auto s) { h.add(s); });
}

// The same values into every counter: the array is prepared once and read once for all their range counts
// (RangeCounter::add_each), and once per counter that keeps moments.
void add_to_counters(std::span<Counter* const> counters, nb::handle obj) {
  const Counted in = counted_array(obj);
  std::vector<RangeCounter*> ranges;
  ranges.reserve(counters.size());
  for (Counter* c : counters) ranges.push_back(&c->range);
  count_values(in.x, [&](auto s) {
    RangeCounter::add_each(ranges, s);
    for (Counter* c : counters)
      if (c->moments) c->moments->add(s);
  });
  for (Counter* c : counters)
    if (++c->arrays == 1) {
      c->shape.assign(in.x.shape_ptr(), in.x.shape_ptr() + in.x.ndim());
      c->dtype = in.dtype;
    }
}

void add_to_counter(Counter& c, nb::handle obj) {
  Counter* one = &c;
  add_to_counters(std::span<Counter* const>(&one, 1), obj);
}

void merge_into(Counter& c, const Counter& o) {
  c.range += o.range;  // checks format and mode
  if (c.moments && o.moments) *c.moments += *o.moments;
  else c.moments.reset();  // one side did not count them: the sum does not know them
  if (c.arrays == 0) {
    c.shape = o.shape;
    c.dtype = o.dtype;
  }
  c.arrays += o.arrays;
}

bool same_moments(const std::optional<Moments>& a, const std::optional<Moments>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  const auto sa = a->stats(), sb = b->stats();
  auto eq = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return a->words() == b->words() && eq(sa.min, sb.min) && eq(sa.max, sb.max);
}

// The per-tensor fields the command line adds to a counter's entry: moments (underflow only), shape, dtype.
void add_tensor_fields(nlohmann::json& j, const Counter& c, bool with_moments) {
  if (with_moments && c.moments) j.update(analysis::moment_stats_json(c.moments->stats()));
  if (c.arrays == 1) {
    j["shape"] = c.shape;
    j["dtype"] = c.dtype;
  }
}

RangeCounter make_counter(const nb::handle& fmt, const std::string& mode) {
  const RoundingMode m = parse_rounding_mode(mode);
  if (m == RoundingMode::stochastic)
    throw nb::value_error(
        "UnderflowCounter: mode='sr' has no single outcome per value; use a deterministic mode "
        "(rne, rtz, ru, rd, rna, rto)");
  return RangeCounter(format_of(fmt), Rounding::of(m));
}

// The report of `mpsim <command>` over named counters (analysis/report.hpp: {"tensors": [...], "total": ...,
// "failed": []} in the envelope), each entry made by `entry(label, counter)` plus the per-tensor fields the command
// line adds (the moments with `with_moments`; shape and dtype for the tensors, not the total).
template <class Entry>
nlohmann::json report_over(const std::string& command, const std::vector<std::pair<std::string, const Counter*>>& named,
                           nlohmann::json header, bool with_moments, Entry entry) {
  const Counter& first = *named.front().second;
  Counter total{RangeCounter(first.range.format(), first.range.rounding()), Moments(), 0, {}, {}};
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [label, c] : named) {
    merge_into(total, *c);
    nlohmann::json j = entry(label, c->range);
    add_tensor_fields(j, *c, with_moments);
    tensors.push_back(j);
  }
  nlohmann::json tj = entry("total", total.range);
  if (with_moments && total.moments) tj.update(analysis::moment_stats_json(total.moments->stats()));
  // The envelope (command, tensors, total, failed, schema, version) as the command line writes it.
  return analysis::report_json(
      {.command = command, .fields = std::move(header), .tensors = std::move(tensors), .total = std::move(tj)});
}

std::vector<std::pair<std::string, const Counter*>> named_counters(const nb::dict& counters) {
  std::vector<std::pair<std::string, const Counter*>> named;
  for (auto [k, v] : counters) named.emplace_back(nb::cast<std::string>(k), &nb::cast<const Counter&>(v));
  if (named.empty()) throw nb::value_error("no counters: pass a dict {tensor name: UnderflowCounter}");
  const RangeCounter& front = named.front().second->range;
  for (const auto& [label, c] : named)
    if (!(c->range.format() == front.format()) || c->range.rounding().mode != front.rounding().mode)
      throw nb::value_error(("counter '" + label + "' counts " + c->range.format().name + " " +
                             std::string(short_name(c->range.rounding().mode)) + ", the first one " +
                             front.format().name + " " + std::string(short_name(front.rounding().mode)))
                                .c_str());
  return named;
}

nlohmann::json hist_report(const nb::dict& counters, int k) {
  const auto named = named_counters(counters);
  const RangeCounter& first = named.front().second->range;
  const nlohmann::json header = {{"format", first.format().name}, {"scale", std::ldexp(1.0, k)}, {"log2_scale", k}};
  return report_over("hist", named, header, false, [&](const std::string& label, const RangeCounter& c) {
    nlohmann::json j = {{"tensor", label}};
    j.update(analysis::hist_stats_json(c, k));
    return j;
  });
}

void check_margin(double margin) {
  if (!(margin >= 1) || !std::isfinite(margin))
    throw nb::value_error(("margin=" + std::to_string(margin) + ": must be at least 1").c_str());
}

nlohmann::json underflow_report(const nb::dict& counters, int log2_scale, double margin, bool with_sweep) {
  const auto named = named_counters(counters);
  const RangeCounter& first = named.front().second->range;
  analysis::UnderflowOptions uo;
  uo.log2_scale = log2_scale;
  check_margin(margin);
  uo.margin = margin;
  const nlohmann::json header = {{"format", first.format().name},
                                 {"rounding", std::string(ieee_name(first.rounding().mode))},
                                 {"scale", std::ldexp(1.0, log2_scale)},
                                 {"log2_scale", uo.log2_scale},
                                 {"margin", margin}};
  return report_over("underflow", named, header, true, [&](const std::string& label, const RangeCounter& c) {
    return analysis::underflow_report_json(label, c, uo, with_sweep);
  });
}

// Non-zero entries of v as [index, value] pairs.
nlohmann::json sparse(const std::vector<std::int64_t>& v) {
  nlohmann::json pairs = nlohmann::json::array();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != 0) pairs.push_back({i, v[i]});
  return pairs;
}
std::vector<std::int64_t> dense(const nlohmann::json& pairs, std::size_t size, const char* what) {
  std::vector<std::int64_t> v(size, 0);
  for (const auto& e : pairs) {
    const auto i = e.at(0).get<std::size_t>();
    if (i >= v.size())
      throw Error(std::string("UnderflowCounter.from_json: ") + what + " index " + std::to_string(i) + " beyond " +
                  std::to_string(size));
    v[i] = e.at(1).get<std::int64_t>();
  }
  return v;
}
double number_or_nan(const nlohmann::json& j) {
  return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>();
}

// UnderflowCounter's state as JSON: the format (name and options), the mode, amax / amin_nonzero and the non-zero
// entries of the range counts as [index, count] pairs (the layout is fixed for a format and mode), the moments
// (their exact words, Moments::words, the same way, with min and max; null when not counted), the number of
// arrays added and the shape and dtype of the first.
nlohmann::json counter_state_json(const Counter& c) {
  const Format& f = c.range.format();
  const auto v = c.range.counts();
  nlohmann::json moments = nullptr;
  if (c.moments) {
    const auto st = c.moments->stats();
    moments = {{"min", st.min}, {"max", st.max}, {"words", sparse(c.moments->words())}};
  }
  return {{"schema", "mpsim-underflow-counter-2"},
          {"format", f.name},
          {"subnormals", std::string(to_string(f.subnormals))},
          {"overflow", std::string(to_string(f.overflow))},
          {"mode", std::string(short_name(c.range.rounding().mode))},
          {"amax", c.range.amax()},
          {"amin_nonzero", c.range.amin_nonzero()},
          {"counts_size", v.size()},
          {"counts", sparse(v)},
          {"moments", moments},
          {"arrays", c.arrays},
          {"shape", c.shape},
          {"dtype", c.dtype}};
}

Counter counter_from_state_json(const nlohmann::json& j) {
  if (!j.is_object() || j.value("schema", "") != "mpsim-underflow-counter-2")
    throw Error("UnderflowCounter.from_json: not an mpsim-underflow-counter-2 object");
  const Format f = format_with_kwargs(parse_format(j.at("format").get<std::string>()),
                                      j.at("subnormals").get<std::string>(), j.at("overflow").get<std::string>());
  const Rounding r = Rounding::of(parse_rounding_mode(j.at("mode").get<std::string>()));
  // The layout's size, checked before anything is allocated for it (a corrupt state may claim any size).
  const std::size_t layout = RangeCounter(f, r).counts_size();
  if (j.at("counts_size").get<std::size_t>() != layout)
    throw Error("UnderflowCounter.from_json: counts_size " + j.at("counts_size").dump() + " does not match " + f.name +
                " " + std::string(short_name(r.mode)) + "'s layout of " + std::to_string(layout));
  const auto v = dense(j.at("counts"), layout, "count");
  Counter c{RangeCounter::from_counts(f, r, v, j.at("amax").get<double>(), j.at("amin_nonzero").get<double>()),
            std::nullopt, j.at("arrays").get<std::uint64_t>(), j.at("shape").get<std::vector<std::int64_t>>(),
            j.at("dtype").get<std::string>()};
  if (const auto& m = j.at("moments"); !m.is_null())
    c.moments = Moments::from_words(dense(m.at("words"), Moments::kWords, "moment word"), number_or_nan(m.at("min")),
                                    number_or_nan(m.at("max")));
  return c;
}

// counts_array(): the range counts, then the moment words when the counter has moments.
std::vector<std::int64_t> counts_of(const Counter& c) {
  std::vector<std::int64_t> v = c.range.counts();
  if (c.moments) {
    const auto w = c.moments->words();
    v.insert(v.end(), w.begin(), w.end());
  }
  return v;
}

Counter counter_from_counts(nb::handle fmt, const std::string& mode, std::span<const std::int64_t> a, double amax,
                            double amin_nonzero, double min, double max) {
  const RangeCounter proto = make_counter(fmt, mode);
  const std::size_t n = proto.counts().size();
  if (a.size() != n && a.size() != n + Moments::kWords)
    throw nb::value_error(("counts has " + std::to_string(a.size()) + " values; a " + proto.format().name + " " + mode +
                           " counter has " + std::to_string(n) + " (without moments) or " +
                           std::to_string(n + Moments::kWords) + " (with them)")
                              .c_str());
  Counter c{RangeCounter::from_counts(proto.format(), proto.rounding(), a.first(n), amax, amin_nonzero),
            std::nullopt,
            0,
            {},
            {}};
  if (a.size() > n) c.moments = Moments::from_words(a.subspan(n), min, max);
  return c;
}

// scripts/bench_python.py: the C++ calls UnderflowCounter.add makes, timed in C++ on fresh objects, best of
// `repeats`: (RangeCounter::add, Moments::add) seconds, so the binding's cost is measured against them.
std::pair<double, double> time_counter_add(const AnyArray& x, const Format& fmt, int repeats) {
  const std::span<const float> in = input_span<float>(x, "x");
  nb::gil_scoped_release release;
  double range = 1e300, moments = 1e300;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    RangeCounter c(fmt);
    Moments m;
    const auto t0 = std::chrono::steady_clock::now();
    c.add(in);
    const auto t1 = std::chrono::steady_clock::now();
    m.add(in);
    const auto t2 = std::chrono::steady_clock::now();
    range = std::min(range, std::chrono::duration<double>(t1 - t0).count());
    moments = std::min(moments, std::chrono::duration<double>(t2 - t1).count());
  }
  return {range, moments};
}

}  // namespace

void bind_analysis(nb::module_& m) {
  using namespace nb::literals;

  nb::class_<Log2Histogram>(m, "Histogram",
                            "Counts of values by binade (bin n: 2^n <= |x| < 2^(n+1)), zeros, NaN, -inf and +inf "
                            "apart: the bins of `mpsim hist`.")
      .def("__init__", [](Log2Histogram* h) { new (h) Log2Histogram(analysis::make_float_histogram()); })
      .def(
          "add", [](Log2Histogram& h, nb::handle x) { add_to_histogram(h, x); }, "x"_a,
          "Counts every element of a float32/float64 array or tensor.")
      .def(
          "merge", [](Log2Histogram& h, const Log2Histogram& o) -> Log2Histogram& { return h += o; }, "other"_a,
          nb::rv_policy::reference_internal, "Adds the counts of another histogram (in place; returns self).")
      .def(
          "__iadd__", [](Log2Histogram& h, const Log2Histogram& o) -> Log2Histogram& { return h += o; },
          nb::rv_policy::reference_internal)
      .def("__add__",
           [](const Log2Histogram& a, const Log2Histogram& b) {
             Log2Histogram r = a;
             r += b;
             return r;
           })
      .def(
          "__eq__", [](const Log2Histogram& a, const Log2Histogram& b) { return a == b; }, nb::is_operator())
      .def_prop_ro("total", &Log2Histogram::total)
      .def_prop_ro("finite_nonzero", &Log2Histogram::finite_nonzero)
      .def_ro("zero", &Log2Histogram::zero)
      .def_ro("nan", &Log2Histogram::nan)
      .def_ro("neg_inf", &Log2Histogram::neg_inf)
      .def_ro("pos_inf", &Log2Histogram::pos_inf)
      .def_ro("min_exp", &Log2Histogram::min_exp)
      .def_ro("max_exp", &Log2Histogram::max_exp)
      .def("count", &Log2Histogram::count, "n"_a, "The count of bin n (2^n <= |x| < 2^(n+1)).")
      .def(
          "bins",
          [](const Log2Histogram& h) {
            nb::dict d;
            for (int n = h.lowest_nonempty(); n <= h.highest_nonempty(); ++n)
              if (h.count(n)) d[nb::int_(n)] = h.count(n);
            return d;
          },
          "The non-empty bins as {n: count}, in increasing n.")
      .def(
          "to_json", [](const Log2Histogram& h) { return h.to_json().dump(); },
          "The histogram object of `mpsim hist` JSON (its tensors[i]['histogram']), as a string.")
      .def_static(
          "from_json", [](const std::string& s) { return Log2Histogram::from_json(nlohmann::json::parse(s)); }, "s"_a)
      .def(
          "counts_array", [](const Log2Histogram& h) { return to_numpy(h.counts()); },
          "Every counter in one fixed layout (int64, 4 + 2098 values: zero, nan, -inf, +inf, bins 2^-1074 .. "
          "2^1023): histograms of several processes merge with one sum of these arrays.")
      .def_static(
          "from_counts_array",
          [](const AnyArray& a) { return Log2Histogram::from_counts(input_span<std::int64_t>(a, "counts")); },
          "counts"_a)
      .def("__getstate__", [](const Log2Histogram& h) { return h.to_json().dump(); })
      .def("__setstate__",
           [](Log2Histogram* h, const std::string& s) {
             new (h) Log2Histogram(Log2Histogram::from_json(nlohmann::json::parse(s)));
           })
      .def("__repr__", [](const Log2Histogram& h) {
        return "mpsim.Histogram(total=" + std::to_string(h.total()) + ", zero=" + std::to_string(h.zero) +
               ", nan=" + std::to_string(h.nan) + ", binades " + std::to_string(h.lowest_nonempty()) + ".." +
               std::to_string(h.highest_nonempty()) + ")";
      });

  nb::class_<Counter>(m, "UnderflowCounter",
                      "One pass over values that answers, for every power-of-two loss scale at once, how many "
                      "would underflow to zero, become subnormal or overflow in a format (`mpsim underflow`), with "
                      "the exact moments of the values (moments=False leaves them out).")
      .def(
          "__init__",
          [](Counter* c, nb::handle fmt, const std::string& mode, bool moments) {
            new (c)
                Counter{make_counter(fmt, mode), moments ? std::optional<Moments>(Moments()) : std::nullopt, 0, {}, {}};
          },
          "fmt"_a = "fp16", "mode"_a = "rne", "moments"_a = true)
      .def(
          "add", [](Counter& c, nb::handle x) { add_to_counter(c, x); }, "x"_a,
          "Counts every element of a float32/float64 array or tensor (float16 / bfloat16 widened).")
      .def_static(
          "add_many",
          [](const std::vector<Counter*>& counters, nb::handle x) {
            for (const Counter* c : counters)
              if (c == nullptr) throw nb::type_error("add_many: counters must be UnderflowCounter objects, not None");
            add_to_counters(counters, x);
          },
          "counters"_a, "x"_a,
          "Counts every element of x into each of counters (any formats and modes), reading x once: each ends "
          "as its own add(x) would leave it, count for count.")
      .def(
          "clear",
          [](Counter& c) {
            c.range.clear();
            if (c.moments) c.moments = Moments();
            c.arrays = 0;
            c.shape.clear();
            c.dtype.clear();
          },
          "Forgets every value counted: the counter then holds what a new one of its format, mode and moments "
          "holds, without finding the format's thresholds again (reused from one step to the next).")
      .def(
          "merge",
          [](Counter& c, const Counter& o) -> Counter& {
            merge_into(c, o);
            return c;
          },
          "other"_a, nb::rv_policy::reference_internal,
          "Adds the counts of another counter of the same format and mode (the moments only if both have them).")
      .def(
          "__iadd__",
          [](Counter& c, const Counter& o) -> Counter& {
            merge_into(c, o);
            return c;
          },
          nb::rv_policy::reference_internal)
      .def("__add__",
           [](const Counter& a, const Counter& b) {
             Counter r = a;
             merge_into(r, b);
             return r;
           })
      .def(
          "__eq__",  // the counts and moments; not the shape and dtype of what was added
          [](const Counter& a, const Counter& b) {
            return a.range.format() == b.range.format() && a.range.rounding().mode == b.range.rounding().mode &&
                   a.range.counts() == b.range.counts() && a.range.amax() == b.range.amax() &&
                   a.range.amin_nonzero() == b.range.amin_nonzero() && same_moments(a.moments, b.moments);
          },
          nb::is_operator())
      .def_prop_ro("format", [](const Counter& c) { return c.range.format(); })
      .def_prop_ro("mode", [](const Counter& c) { return std::string(short_name(c.range.rounding().mode)); })
      .def_prop_ro("total", [](const Counter& c) { return c.range.total(); })
      .def_prop_ro(
          "amax", [](const Counter& c) { return c.range.amax(); }, "Largest finite |x| seen (0 if none).")
      .def_prop_ro(
          "amin_nonzero", [](const Counter& c) { return c.range.amin_nonzero(); },
          "Smallest non-zero finite |x| seen (0 if none).")
      .def_prop_ro("has_moments", [](const Counter& c) { return c.moments.has_value(); })
      .def_prop_ro(
          "shape",
          [](const Counter& c) -> std::optional<std::vector<std::int64_t>> {
            if (c.arrays != 1) return std::nullopt;
            return c.shape;
          },
          "The shape of the one array added (None after none or several).")
      .def_prop_ro(
          "dtype",
          [](const Counter& c) -> std::optional<std::string> {
            if (c.arrays != 1) return std::nullopt;
            return c.dtype;
          },
          "The dtype name of the one array added, as the command line names a file's (None after none or several).")
      .def(
          "moments",
          [](const Counter& c) -> nb::object {
            if (!c.moments) return nb::none();
            return to_python(analysis::moment_stats_json(c.moments->stats()));
          },
          "{'min', 'max', 'mean', 'std', 'l1_norm', 'l2_norm'} of the finite values, exact (None values where a "
          "statistic does not exist), as `mpsim underflow` reports them; None for a counter without moments.")
      .def(
          "histogram", [](const Counter& c) { return c.range.histogram(); }, "The log2 histogram of the values seen.")
      .def(
          "underflow", [](const Counter& c, int log2_scale) { return underflow_dict(c.range, log2_scale); },
          "log2_scale"_a = 0,
          "Under the scale 2^log2_scale: numel, underflows%, underflows_num, subnormals%, overflows%, ... (the "
          "names of `mpsim underflow`) and cur_amax, nonzero_amin, dynamic_range.")
      .def(
          "range_counts",
          [](const Counter& c, int log2_scale) {
            const analysis::RangeCounts r = c.range.at_scale(log2_scale);
            return nb::make_tuple(r.nonzero_finite, r.underflow, r.subnormal, r.overflow);
          },
          "log2_scale"_a = 0,
          "(nonzero_finite, underflows, subnormals, overflows) under the scale 2^log2_scale: the counts underflow() "
          "reports as *_num, without building its dict (a search over scales asks for many).")
      .def(
          "recommend_scale",
          [](const Counter& c, double margin, int log2_scale) {
            analysis::UnderflowOptions uo;
            check_margin(margin);
            uo.margin = margin;
            uo.log2_scale = log2_scale;
            return to_python(analysis::underflow_report_json("", c.range, uo, false)["recommended"]);
          },
          "margin"_a = 2.0, "log2_scale"_a = 0,
          "The largest power-of-two scale with cur_amax*S*margin <= max finite, with its counts and the "
          "underflows it rescues compared with 2^log2_scale (the report's 'recommended'); None without a non-zero "
          "finite value.")
      .def(
          "recommended_log2_scale",
          [](const Counter& c, double margin) -> std::optional<int> {
            analysis::UnderflowOptions uo;
            check_margin(margin);
            uo.margin = margin;
            const analysis::ScaleRecommendation rec = analysis::recommend_scale(c.range, uo);
            if (!rec.found) return std::nullopt;
            return rec.log2_scale;
          },
          "margin"_a = 2.0,
          "recommend_scale(margin)['log2_scale'] (None without a non-zero finite value), without building the "
          "report: the gradient monitor asks it per format on every sampled step.")
      .def(
          "sweep",
          [](const Counter& c, int lo, int hi) {
            analysis::UnderflowOptions uo;
            uo.sweep_lo = lo;
            uo.sweep_hi = hi;
            if (lo > hi) throw nb::value_error("sweep: lo must not exceed hi");
            return to_python(analysis::underflow_report_json("", c.range, uo, true)["sweep"]);
          },
          "lo"_a = -8, "hi"_a = 32,
          "Every scale 2^lo .. 2^hi: {'rows': [...], 'largest_safe_log2_scale', 'best_window'} as in the report.")
      .def(
          "best_window",
          [](const Counter& c, int lo, int hi) -> std::optional<std::pair<int, int>> {
            if (lo > hi) throw nb::value_error("best_window: lo must not exceed hi");
            const auto w = analysis::best_window(c.range, lo, hi);
            if (!w) return std::nullopt;
            return std::pair{w->lo, w->hi};
          },
          "lo"_a = -8, "hi"_a = 32,
          "(lo_log2_scale, hi_log2_scale) of sweep(lo, hi)['best_window'] (None when every scale overflows), "
          "found from the counts at a few scales (lib/mpsim/analysis/underflow.hpp best_window).")
      .def(
          "report_json",
          [](const Counter& c, const std::string& tensor, int log2_scale, double margin, bool with_sweep) {
            nb::dict d;
            d[tensor.c_str()] = nb::cast(c, nb::rv_policy::reference);
            return underflow_report(d, log2_scale, margin, with_sweep).dump(2) + "\n";
          },
          "tensor"_a = "tensor", "log2_scale"_a = 0, "margin"_a = 2.0, "sweep"_a = false,
          "The JSON report `mpsim underflow` writes, for these values as one tensor.")
      .def(
          "hist_json",
          [](const Counter& c, const std::string& tensor, int log2_scale) {
            nb::dict d;
            d[tensor.c_str()] = nb::cast(c, nb::rv_policy::reference);
            return hist_report(d, log2_scale).dump(2) + "\n";
          },
          "tensor"_a = "tensor", "log2_scale"_a = 0,
          "The JSON report `mpsim hist` writes, for these values as one tensor.")
      .def(
          "significand_thresholds",
          [](const Counter& c, int mant_bits) {
            // RangeCounter::init_table's thresholds in a table's units (range_counter.cpp): per sign, the three
            // boundaries' significand thresholds, a significand field m reaching T iff (m << (52 - mant_bits))
            // >= T. A value's code in the count layout is how many of its sign's thresholds it reaches.
            if (mant_bits != 23 && mant_bits != 52)
              throw nb::value_error("significand_thresholds: mant_bits is 23 (float) or 52 (double)");
            const int shift = 52 - mant_bits;
            nb::list signs;
            for (int s = 0; s < 2; ++s) {
              nb::list t;
              for (int rank = 1; rank <= 3; ++rank)
                t.append((c.range.boundary(s, rank).threshold + (std::uint64_t{1} << shift) - 1) >> shift);
              signs.append(t);
            }
            return signs;
          },
          "mant_bits"_a = 23,
          "[[t1, t2, t3] for sign +, then -]: the significand thresholds (in units of a mant_bits-bit field) of "
          "the transitions to subnormal, normal and overflow, from which counts_array()'s codes are made (the "
          "torch-op counting of mpsim.torch on a tensor's device builds the same counts from them).")
      .def(
          "counts_array", [](const Counter& c) { return to_numpy(counts_of(c)); },
          "Every count in one fixed layout (int64) for this format and mode, then the moments' exact words "
          "(Moments::words) when the counter has moments: counters of several processes merge with one sum of "
          "these arrays (and a max of amax and max, a min of amin_nonzero and min).")
      .def(
          "to_json", [](const Counter& c) { return counter_state_json(c).dump(); },
          "The counter's state as JSON (format, mode, amax, amin_nonzero, the non-zero counts, the moments' words, "
          "shape and dtype); from_json reads it.")
      .def_static(
          "from_json", [](const std::string& s) { return counter_from_state_json(nlohmann::json::parse(s)); }, "s"_a)
      .def_static(
          "from_counts_array",
          [](nb::handle fmt, const std::string& mode, const AnyArray& a, double amax, double amin_nonzero, double min,
             double max) {
            return counter_from_counts(fmt, mode, input_span<std::int64_t>(a, "counts"), amax, amin_nonzero, min, max);
          },
          "fmt"_a, "mode"_a, "counts"_a, "amax"_a = 0.0, "amin_nonzero"_a = 0.0,
          "min"_a = std::numeric_limits<double>::quiet_NaN(), "max"_a = std::numeric_limits<double>::quiet_NaN(),
          "A counter from counts_array() (summed over processes); min / max: the signed extremes of the values "
          "(NaN: unknown, reported as null).")
      .def("__getstate__", [](const Counter& c) { return counter_state_json(c).dump(); })
      .def("__setstate__",
           [](Counter* c, const std::string& s) { new (c) Counter(counter_from_state_json(nlohmann::json::parse(s))); })
      .def("__repr__", [](const Counter& c) {
        return "mpsim.UnderflowCounter('" + c.range.format().name + "', mode='" +
               std::string(short_name(c.range.rounding().mode)) + "', total=" + std::to_string(c.range.total()) + ")";
      });

  m.def("_time_counter_add", &time_counter_add, "x"_a, "fmt"_a, "repeats"_a,
        "Benchmark support: best seconds of the C++ RangeCounter::add and Moments::add on float32 x.");
  m.def(
      "hist_report_json",
      [](const nb::dict& counters, int log2_scale) { return hist_report(counters, log2_scale).dump(2) + "\n"; },
      "counters"_a, "log2_scale"_a = 0,
      "The JSON `mpsim hist` writes, for {tensor name: UnderflowCounter} (one format and mode).");
  m.def(
      "mass_lost",
      [](const AnyArray& x, nb::handle fmt, int log2_scale, const std::string& mode) {
        const Format f = format_of(fmt);
        const Rounding r = Rounding::of(parse_rounding_mode(mode));
        analysis::MassLost mass;
        count_values(x, [&](auto s) { analysis::add_rounded(mass, s, f, r, log2_scale); });
        return to_python(analysis::mass_lost_json(mass.stats()));
      },
      "x"_a, "fmt"_a, "log2_scale"_a = 0, "mode"_a = "rne",
      "The gradient mass lost when float32/float64 x times 2^log2_scale is rounded into fmt: the share of sum |x| "
      "(l1_lost) and of sum x^2 (l2sq_lost) flushed to zero and the cosine between x and its rounding (None "
      "when undefined), as `mpsim underflow` reports them.");
  // The mass lost by a quantization done elsewhere (a scaling recipe's operands, mpsim.torch emulate(recipe=)):
  // the running sums travel as MassLost's state JSON text, so that a caller sums many calls in C++ order.
  m.def(
      "mass_lost_add",
      [](std::optional<std::string> state, const AnyArray& g, const AnyArray& q) {
        const std::span<const float> gs = input_span<float>(g, "g"), qs = input_span<float>(q, "q");
        analysis::MassLost mass =
            state ? analysis::MassLost::from_state(nlohmann::json::parse(*state)) : analysis::MassLost{};
        {
          nb::gil_scoped_release release;
          mass.add(gs, qs);
        }
        return mass.state().dump();
      },
      "state"_a.none(), "g"_a, "q"_a,
      "The MassLost state (JSON text) `state` (None: empty) with float32 g (before) and q (after its rounding) added.");
  m.def(
      "mass_lost_report",
      [](const std::string& state) {
        return to_python(
            analysis::mass_lost_json(analysis::MassLost::from_state(nlohmann::json::parse(state)).stats()));
      },
      "state"_a, "What `mass_lost` reports (l1_lost, l2sq_lost, cosine, ...) for a MassLost state from mass_lost_add.");
  m.def(
      "underflow_report_json",
      [](const nb::dict& counters, int log2_scale, double margin, bool with_sweep) {
        return underflow_report(counters, log2_scale, margin, with_sweep).dump(2) + "\n";
      },
      "counters"_a, "log2_scale"_a = 0, "margin"_a = 2.0, "sweep"_a = false,
      "The JSON `mpsim underflow` writes, for {tensor name: UnderflowCounter} (one format and mode).");
}

}  // namespace mpsim::python
