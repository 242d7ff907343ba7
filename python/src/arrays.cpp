// mpsim._core's array functions: rounding, encoding and decoding numpy arrays and CPU torch tensors in
// place, through the bulk engine (lib/mpsim/format/bulk.hpp) and the block quantizer (block.hpp). The
// Python layer (python/mpsim/__init__.py) allocates the outputs and calls these with the GIL released.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <type_traits>
#include <vector>

#include "bindings.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/block.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/stats_fields.hpp"

namespace mpsim::python {
namespace {

// The integer counters of `mpsim round --stats-json`, by its names: what a series of calls sums.
// (format/stats_fields.hpp: the one table of these names.)
nb::dict counts_dict(const Stats& s) {
  nb::dict d;
  for (const auto& f : kStatsCountFields) d[nb::str(f.name.data(), f.name.size())] = s.*f.member;
  return d;
}

}  // namespace

nb::dict stats_dict(const Stats& s, std::uint64_t flipped) {
  // The names of `mpsim round --stats-json`.
  nb::dict d = counts_dict(s);
  d["flipped"] = flipped;
  for (const auto& f : kStatsExtremeFields) d[nb::str(f.name.data(), f.name.size())] = s.*f.member;
  return d;
}

namespace {

nb::dict block_stats_dict(const BlockStats& s, const BlockFormat& bf, float tensor_scale) {
  // The names of `mpsim round --stats-json` for a block format (schema mpsim-round-block-1).
  nb::dict d;
  d["count"] = s.count;
  d["nonzero"] = s.nonzero;
  d["nan"] = s.nan_in;
  d["inf_in"] = s.inf_in;
  d["flushed"] = s.flushed;
  d["subnormal"] = s.subnormal;
  d["saturated"] = s.saturated;
  d["blocks"] = s.blocks;
  d["nan_blocks"] = s.nan_blocks;
  nb::list scales;
  for (const auto& [k, c] : s.scale_log2) scales.append(nb::make_tuple(k, c));
  d["scale_log2"] = scales;
  d["tensor_scale"] = tensor_scale;
  d["block"] = bf.block;
  return d;
}

// The device a `like` profile names, resolved for this format, rounding and input type: its flushing rules
// adjust the pair, and its NaN rule fixes encodings afterwards (what `mpsim round --like` does). subnormals /
// overflow not given (None in Python): the format's own, so that a Format made with with_options(overflow=
// "saturate") keeps saturating.
DeviceRounding resolve(const Format& fmt, const std::optional<std::string>& subnormals,
                       const std::optional<std::string>& overflow, const std::string& mode, int sr_bits,
                       std::uint64_t seed, bool daz, const std::string& like, bool double_input) {
  const Format requested = format_with_given_kwargs(fmt, subnormals, overflow);
  const Rounding r = rounding_with_kwargs(mode, sr_bits, seed, daz);
  return resolve_profile(find_profile(like), requested, r, Operation::convert,
                         double_input ? InputType::float64 : InputType::float32);
}

bool is_f64(const AnyArray& x) { return x.dtype() == nb::dtype<double>(); }

void check_float_input(const AnyArray& x) {
  check_layout(x, "x");
  if (x.dtype() != nb::dtype<float>() && x.dtype() != nb::dtype<double>())
    throw nb::type_error(("x has dtype " + dtype_name(x.dtype()) +
                          "; mpsim rounds float32 and float64 arrays (convert others with .astype(numpy.float32) / "
                          ".float())")
                             .c_str());
}

// out[i] = round(x[i]) in x's dtype under a resolved pair (x: float32 or float64, checked), with the GIL
// released; `stats` (may be null) counts what it did. Soft errors (`se`, may be null: none) after the
// rounding; returns how many elements they hit.
std::uint64_t round_values_with(const DeviceRounding& device, const AnyArray& x, const WritableArray& out, Stats* stats,
                                const BulkOptions& opt, const SoftErrors* se = nullptr) {
  std::uint64_t flipped = 0;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const std::span<const T> in = input_span<T>(x, "x");
    const std::span<T> o = output_span<T>(out, "out", in.size());
    nb::gil_scoped_release release;
    if (device.is_plain()) {
      round_array(in, o, device.format, device.rounding, stats, opt);
      if (se) flipped = flip_values(o, device.format, *se, opt);
      return;
    }
    // A device profile rewrites NaN results from the input's payload (DeviceRounding::convert_values, as
    // `mpsim round --like` does), so the inputs must outlive the output: in place (out=x) they are kept first.
    std::vector<T> kept;
    std::span<const T> src = in;
    if (static_cast<const void*>(in.data()) == static_cast<const void*>(o.data())) {
      kept.assign(in.begin(), in.end());
      src = kept;
    }
    round_array(src, o, device.format, device.rounding, stats, opt);
    device.convert_values(src, o, opt.index0);
    if (se) flipped = flip_values(o, device.format, *se, opt);
  };
  if (is_f64(x)) run(double{});
  else run(float{});
  return flipped;
}

// out[i] = round(x[i]) in x's dtype.
nb::object round_values(const AnyArray& x, const WritableArray& out, const Format& fmt, const std::string& mode,
                        std::uint64_t seed, int sr_bits, const std::optional<std::string>& subnormals,
                        const std::optional<std::string>& overflow, const std::string& like, bool daz, bool want_stats,
                        std::uint64_t index0, int threads, double flip, std::uint64_t flip_seed,
                        const std::string& flip_bits_word) {
  check_float_input(x);
  const DeviceRounding device = resolve(fmt, subnormals, overflow, mode, sr_bits, seed, daz, like, is_f64(x));
  const SoftErrors se = soft_errors_with_kwargs(flip, flip_seed, flip_bits_word);
  BulkOptions opt;
  opt.index0 = index0;
  opt.threads = threads;
  Stats stats;
  const std::uint64_t flipped = round_values_with(device, x, out, want_stats ? &stats : nullptr, opt, &se);
  if (!want_stats) return nb::none();
  return stats_dict(stats, flipped);
}

// A rounding whose options were parsed and resolved once (for float32 and for float64 input) and which sums
// the Stats of its calls in C++: what each of mpsim.torch's rounding sites calls once per tensor, so that a
// call costs no option parsing and builds no stats dict (docs/torch.md#cost). The values and Stats of a call
// are those of round_values with the same options and seed. It keeps the options it was made from, so that
// it pickles (an emulated model's deepcopy, pickle and torch.save): the state is those options and the totals.
class PreparedRounding {
 public:
  PreparedRounding(const Format& fmt, const std::string& mode, int sr_bits, const std::string& subnormals,
                   const std::string& overflow, const std::string& like, bool daz)
      : fmt_(fmt),
        mode_(mode),
        sr_bits_(sr_bits),
        subnormals_(subnormals),
        overflow_(overflow),
        like_(like),
        daz_(daz),
        f32_(resolve(fmt, subnormals, overflow, mode, sr_bits, 0, daz, like, false)),
        f64_(resolve(fmt, subnormals, overflow, mode, sr_bits, 0, daz, like, true)) {}

  bool stochastic() const { return f32_.rounding.mode == RoundingMode::stochastic; }

  // out[i] = round(x[i]) with stochastic rounding's seed `seed` on up to `threads` threads (0: the engine's
  // default); adds the call's Stats to the totals.
  void round_into(const AnyArray& x, const WritableArray& out, std::uint64_t seed, int threads) {
    check_float_input(x);
    DeviceRounding device = is_f64(x) ? f64_ : f32_;
    device.rounding.seed = seed;
    BulkOptions opt;
    opt.threads = threads;
    Stats stats;
    round_values_with(device, x, out, &stats, opt);
    totals_.merge(stats);
    ++calls_;
  }

  // Adds the integer counters of a stats dict (round_values' names; one rounding done elsewhere, as torch's
  // own cast on a tensor's device, docs/torch.md#devices) to the totals, as a call.
  void add_stats(const nb::dict& d) {
    Stats s;
    auto get = [&](const char* key) { return d.contains(key) ? nb::cast<std::uint64_t>(d[key]) : std::uint64_t{0}; };
    for (const auto& f : kStatsCountFields) s.*f.member = get(std::string(f.name).c_str());
    totals_.merge(s);
    ++calls_;
  }

  // The sums of the integer counters of round_values' stats dict over the calls since the last reset() (an
  // empty dict before the first call); max_abs and min_abs_nonzero are left out (not sums).
  nb::dict totals() const { return calls_ == 0 ? nb::dict() : counts_dict(totals_); }

  void reset() {
    totals_ = {};
    calls_ = 0;
  }

  // The resolved format (the subnormals / overflow options and the `like` profile applied) and the options.
  const Format& format() const { return f32_.format; }
  const std::string& mode() const { return mode_; }
  nb::dict options() const {
    nb::dict d;
    d["sr_bits"] = sr_bits_;
    d["subnormals"] = subnormals_;
    d["overflow"] = overflow_;
    d["like"] = like_;
    d["daz"] = daz_;
    return d;
  }

  nb::tuple state() const {
    nb::list counts;  // the Stats fields in the table's order (format/stats_fields.hpp), which restore() reads
    for_each_stats_field(totals_, [&](std::string_view, auto value) { counts.append(value); });
    return nb::make_tuple(fmt_, mode_, sr_bits_, subnormals_, overflow_, like_, daz_, nb::tuple(counts), calls_);
  }
  static void restore(PreparedRounding* p, const nb::tuple& t) {
    new (p) PreparedRounding(nb::cast<Format>(t[0]), nb::cast<std::string>(t[1]), nb::cast<int>(t[2]),
                             nb::cast<std::string>(t[3]), nb::cast<std::string>(t[4]), nb::cast<std::string>(t[5]),
                             nb::cast<bool>(t[6]));
    const nb::tuple c = nb::cast<nb::tuple>(t[7]);
    Stats& s = p->totals_;
    std::size_t i = 0;  // the order of state(): the counters, then the extremes (format/stats_fields.hpp)
    for (const auto& f : kStatsCountFields) s.*f.member = nb::cast<std::uint64_t>(c[i++]);
    for (const auto& f : kStatsExtremeFields) s.*f.member = nb::cast<double>(c[i++]);
    p->calls_ = nb::cast<std::uint64_t>(t[8]);
  }

 private:
  Format fmt_;
  std::string mode_;
  int sr_bits_;
  std::string subnormals_, overflow_, like_;
  bool daz_;
  DeviceRounding f32_, f64_;
  Stats totals_;
  std::uint64_t calls_ = 0;
};

// out[i] = the encoding of round(x[i]) in the format's storage (uint8 / uint16 / uint32).
nb::object encode_values(const AnyArray& x, const WritableArray& out, const Format& fmt, const std::string& mode,
                         std::uint64_t seed, int sr_bits, const std::optional<std::string>& subnormals,
                         const std::optional<std::string>& overflow, const std::string& like, bool daz, bool want_stats,
                         std::uint64_t index0, int threads, double flip, std::uint64_t flip_seed,
                         const std::string& flip_bits_word) {
  check_float_input(x);
  const DeviceRounding device = resolve(fmt, subnormals, overflow, mode, sr_bits, seed, daz, like, is_f64(x));
  const SoftErrors se = soft_errors_with_kwargs(flip, flip_seed, flip_bits_word);
  const Format& f = device.format;
  if (f.storage_bits > 32)
    throw nb::value_error(("encode: " + f.name + " needs " + std::to_string(f.storage_bits) +
                           " bits; encode writes formats of up to 32 bits")
                              .c_str());
  BulkOptions opt;
  opt.index0 = index0;
  opt.threads = threads;
  Stats stats;
  Stats* sp = want_stats ? &stats : nullptr;
  std::uint64_t flipped = 0;
  auto run = [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Enc = decltype(out_tag);
    const std::span<const In> in = input_span<In>(x, "x");
    const std::span<Enc> o = output_span<Enc>(out, "out", in.size());
    nb::gil_scoped_release release;
    if constexpr (std::is_same_v<In, double> && std::is_same_v<Enc, std::uint32_t>) {
      // The engine has no double -> uint32 path (as in `mpsim round --bits`): the statistics from a
      // simulate pass, the encodings from the specification round_bits() itself.
      if (sp) {
        std::vector<double> scratch(in.size());
        round_array(in, std::span<double>(scratch), f, device.rounding, sp, opt);
      }
      for (std::size_t i = 0; i < in.size(); ++i)
        o[i] = static_cast<std::uint32_t>(round_bits(in[i], f, device.rounding, index0 + i));
    } else {
      round_array(in, o, f, device.rounding, sp, opt);
    }
    if (!device.is_plain())
      for (std::size_t i = 0; i < in.size(); ++i) o[i] = static_cast<Enc>(device.convert_result(o[i], in[i]));
    flipped = flip_bits(o, f, se, opt);
  };
  const int bytes = f.storage_bytes();
  auto by_output = [&](auto in_tag) {
    if (bytes == 1) run(in_tag, std::uint8_t{});
    else if (bytes == 2) run(in_tag, std::uint16_t{});
    else run(in_tag, std::uint32_t{});
  };
  if (is_f64(x)) by_output(double{});
  else by_output(float{});
  if (!want_stats) return nb::none();
  return stats_dict(stats, flipped);
}

// out[i] = the value of encoding bits[i] (float32 or float64 output; exact for every format that fits).
void decode_values(const AnyArray& bits, const WritableArray& out, const Format& fmt) {
  check_layout(bits, "bits");
  const int bytes = fmt.storage_bytes();
  if (bytes > 4) throw nb::value_error(("decode: " + fmt.name + " encodings are wider than 32 bits").c_str());
  auto run = [&](auto enc_tag) {
    using Enc = decltype(enc_tag);
    if (bits.dtype() != nb::dtype<Enc>())
      throw nb::type_error(("bits has dtype " + dtype_name(bits.dtype()) + "; " + fmt.name + " encodings are " +
                            dtype_name(nb::dtype<Enc>()))
                               .c_str());
    const std::span<const Enc> in = input_span<Enc>(bits, "bits");
    if (out.dtype() == nb::dtype<double>()) {
      const std::span<double> o = output_span<double>(out, "out", in.size());
      nb::gil_scoped_release release;
      for (std::size_t i = 0; i < in.size(); ++i) o[i] = decode(in[i], fmt);
    } else {
      const std::span<float> o = output_span<float>(out, "out", in.size());
      if (fmt.exp_bits > 8 || fmt.man_bits > 23)
        throw nb::value_error(
            ("decode: " + fmt.name + " values do not all fit in float32; use dtype=numpy.float64").c_str());
      nb::gil_scoped_release release;
      decode_array(in, o, fmt);
    }
  };
  if (bytes == 1) run(std::uint8_t{});
  else if (bytes == 2) run(std::uint16_t{});
  else run(std::uint32_t{});
}

BlockFormat block_format(const std::string& name, int block, const std::string& block_scale) {
  return parse_block_format(name, block, parse_block_scale_rule(block_scale));
}

// Block formats, simulate mode: out = the dequantized values (float32; blocks along the last axis).
nb::object round_blocks_values(const AnyArray& x, const WritableArray& out, const std::string& name, int block,
                               const std::string& block_scale, std::size_t row_len, const std::string& mode,
                               std::uint64_t seed, int sr_bits, bool daz, bool want_stats) {
  const BlockFormat bf = block_format(name, block, block_scale);
  const Rounding r = rounding_with_kwargs(mode, sr_bits, seed, daz);
  const std::span<const float> in = input_span<float>(x, "x");
  const std::span<float> o = output_span<float>(out, "out", in.size());
  BlockStats st;
  BlockQuantized q;
  {
    nb::gil_scoped_release release;
    // quantize + dequantize as `mpsim round --to <block format>` does (round_blocks is the same pair).
    q = quantize_blocks(in, row_len, bf, r, want_stats ? &st : nullptr);
    dequantize_blocks(q, row_len, bf, o);
  }
  if (!want_stats) return nb::none();
  return block_stats_dict(st, bf, q.tensor_scale);
}

// Block formats, packed: element and scale encodings (uint8), and nvfp4's per-tensor scale.
nb::object encode_blocks(const AnyArray& x, const WritableArray& elements, const WritableArray& scales,
                         const std::string& name, int block, const std::string& block_scale, std::size_t row_len,
                         const std::string& mode, std::uint64_t seed, int sr_bits, bool daz, bool want_stats) {
  const BlockFormat bf = block_format(name, block, block_scale);
  const Rounding r = rounding_with_kwargs(mode, sr_bits, seed, daz);
  const std::span<const float> in = input_span<float>(x, "x");
  const std::span<std::uint8_t> e = output_span<std::uint8_t>(elements, "elements", in.size());
  BlockStats st;
  BlockQuantized q;
  {
    nb::gil_scoped_release release;
    q = quantize_blocks(in, row_len, bf, r, want_stats ? &st : nullptr);
  }
  const std::span<std::uint8_t> s = output_span<std::uint8_t>(scales, "scales", q.scales.size());
  std::copy(q.elements.begin(), q.elements.end(), e.begin());
  std::copy(q.scales.begin(), q.scales.end(), s.begin());
  nb::object stats = want_stats ? nb::object(block_stats_dict(st, bf, q.tensor_scale)) : nb::none();
  return nb::make_tuple(q.tensor_scale, stats);
}

// Block formats: values from element and scale encodings.
void decode_blocks(const AnyArray& elements, const AnyArray& scales, float tensor_scale, const WritableArray& out,
                   const std::string& name, int block, const std::string& block_scale, std::size_t row_len) {
  const BlockFormat bf = block_format(name, block, block_scale);
  const std::span<const std::uint8_t> e = input_span<std::uint8_t>(elements, "elements");
  const std::span<const std::uint8_t> s = input_span<std::uint8_t>(scales, "scales");
  const std::span<float> o = output_span<float>(out, "out", e.size());
  BlockQuantized q;
  q.elements.assign(e.begin(), e.end());
  q.scales.assign(s.begin(), s.end());
  q.tensor_scale = tensor_scale;
  const std::size_t row = row_len == 0 ? e.size() : row_len;
  const std::size_t rows = row == 0 ? 0 : e.size() / row;
  const std::size_t expected =
      rows * ((row + static_cast<std::size_t>(bf.block) - 1) / static_cast<std::size_t>(bf.block));
  if (s.size() != expected)
    throw nb::value_error(("scales has " + std::to_string(s.size()) + " elements; " + std::to_string(e.size()) +
                           " elements in rows of " + std::to_string(row) + " need " + std::to_string(expected))
                              .c_str());
  nb::gil_scoped_release release;
  dequantize_blocks(q, row_len, bf, o);
}

// scripts/bench_python.py: the C++ bulk call itself (round_array into a preallocated array), timed in C++, best
// of `repeats`, so the Python call's overhead can be measured against it in the same process.
double time_round_array(const AnyArray& x, const WritableArray& out, const Format& fmt, int repeats) {
  const std::span<const float> in = input_span<float>(x, "x");
  const std::span<float> o = output_span<float>(out, "out", in.size());
  nb::gil_scoped_release release;
  double best = 1e300;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    round_array(in, o, fmt);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

void bind_arrays(nb::module_& m) {
  using namespace nb::literals;
  // The keys of stats_dict in its order, from the one table (format/stats_fields.hpp): python/mpsim/_device.py
  // names the stats of a rounding done by torch operations with them.
  nb::list fields;
  for (const auto& f : kStatsCountFields) fields.append(nb::str(f.name.data(), f.name.size()));
  fields.append("flipped");
  for (const auto& f : kStatsExtremeFields) fields.append(nb::str(f.name.data(), f.name.size()));
  m.attr("_stats_fields") = nb::tuple(fields);
  m.def("round_into", &round_values, "x"_a, "out"_a, "fmt"_a, "mode"_a, "seed"_a, "sr_bits"_a, "subnormals"_a,
        "overflow"_a, "like"_a, "daz"_a, "stats"_a, "index0"_a = 0, "threads"_a = 0, "flip"_a = 0.0, "flip_seed"_a = 0,
        "flip_bits"_a = "fraction",
        "out[...] = the values of x rounded to fmt (x and out: contiguous CPU float32/float64 of one dtype).");
  m.def("encode_into", &encode_values, "x"_a, "out"_a, "fmt"_a, "mode"_a, "seed"_a, "sr_bits"_a, "subnormals"_a,
        "overflow"_a, "like"_a, "daz"_a, "stats"_a, "index0"_a = 0, "threads"_a = 0, "flip"_a = 0.0, "flip_seed"_a = 0,
        "flip_bits"_a = "fraction",
        "out[...] = the encodings of x rounded to fmt (uint8/uint16/uint32 by the format's storage).");
  m.def("decode_into", &decode_values, "bits"_a, "out"_a, "fmt"_a, "out[...] = the values of the encodings bits.");
  m.def("round_blocks_into", &round_blocks_values, "x"_a, "out"_a, "name"_a, "block"_a, "block_scale"_a, "row_len"_a,
        "mode"_a, "seed"_a, "sr_bits"_a, "daz"_a, "stats"_a);
  m.def("encode_blocks_into", &encode_blocks, "x"_a, "elements"_a, "scales"_a, "name"_a, "block"_a, "block_scale"_a,
        "row_len"_a, "mode"_a, "seed"_a, "sr_bits"_a, "daz"_a, "stats"_a);
  m.def("decode_blocks_into", &decode_blocks, "elements"_a, "scales"_a, "tensor_scale"_a, "out"_a, "name"_a, "block"_a,
        "block_scale"_a, "row_len"_a);
  nb::class_<PreparedRounding>(m, "PreparedRounding",
                               "A rounding with its options parsed once, summing its calls' stats (mpsim.torch's "
                               "rounding sites).")
      .def(
          "__init__",
          [](PreparedRounding* p, nb::handle fmt, const std::string& mode, int sr_bits, const std::string& subnormals,
             const std::string& overflow, const std::string& like,
             bool daz) { new (p) PreparedRounding(format_of(fmt), mode, sr_bits, subnormals, overflow, like, daz); },
          "fmt"_a, "mode"_a, "sr_bits"_a, "subnormals"_a, "overflow"_a, "like"_a, "daz"_a)
      .def_prop_ro("stochastic", &PreparedRounding::stochastic)
      .def_prop_ro("format", &PreparedRounding::format, "The format rounded to, its options applied.")
      .def_prop_ro("mode", &PreparedRounding::mode)
      .def_prop_ro("options", &PreparedRounding::options, "{sr_bits, subnormals, overflow, like, daz}.")
      .def("add_stats", &PreparedRounding::add_stats, "stats"_a,
           "Adds a stats dict's integer counters (a rounding done elsewhere) to the totals, as one call.")
      .def("__getstate__", &PreparedRounding::state)
      .def("__setstate__", &PreparedRounding::restore)
      .def("round_into", &PreparedRounding::round_into, "x"_a, "out"_a, "seed"_a, "threads"_a = 0,
           "out[...] = the values of x rounded (as round_into with these options and seed); the stats are summed.")
      .def("totals", &PreparedRounding::totals)
      .def("reset", &PreparedRounding::reset);
  m.def("_time_round_array", &time_round_array, "x"_a, "out"_a, "fmt"_a, "repeats"_a,
        "Benchmark support: the best time of the C++ call round_array(x, out, fmt), float32, nearest-even.");
}

}  // namespace mpsim::python
