// mpsim round --to FMT [--mode M] [--sr-bits N] [--seed S] [--subnormals keep|flush]
//              [--overflow inf|saturate] [--daz] [--like PROFILE] [--flip P [--flip-seed S]
//              [--flip-bits fraction|any]] [--bits]
//              [--stats-json FILE] IN.npy OUT.npy
// Rounds every element of IN to FMT with the bulk engine. --like x86 | cuda-sm90 reproduces a device
// (lib/mpsim/format/profile.hpp): its flushing rules adjust the format and rounding, and its NaN rule
// (canonical patterns, cut payloads, ±inf / ±max finite for cut-away payloads) replaces round_bits()'s,
// in --bits output and in simulate output alike (a value is the decoded --bits encoding, NaN payload
// included). OUT holds the rounded values in IN's dtype
// (simulate mode) or, with --bits, the encodings as uint8 / uint16 / uint32 (by the format's storage).
// IN is memory-mapped and rounded chunk by chunk, each chunk's results appended to a temporary OUT that is
// renamed into place at the end: resident memory stays bounded whatever the size of IN, and a failure
// leaves no OUT behind.
// Block formats (mxfp8_e4m3 ... nvfp4, [--block N] [--block-scale floor|rceil]): the dequantized values, or
// with --bits an .npz of the element and scale encodings.
// --flip P: soft errors after rounding (lib/mpsim/format/soft_error.hpp): each element's result has one bit
// of its fraction field (--flip-bits any: of its encoding) flipped with probability P, in the encodings
// (--bits) and in the values alike.
#include <fmt/core.h>

#include <cmath>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "command.hpp"
#include "format_options.hpp"
#include "mpsim/analysis/block_scaling.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/block.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/format/soft_error.hpp"
#include "mpsim/format/stats_fields.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/npy_writer.hpp"
#include "mpsim/io/npz_writer.hpp"
#include "mpsim/io/progress.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "mpsim/version.hpp"
#include "npy_input.hpp"

namespace {

using mpsim::io::DType;

struct Options {
  std::string to, mode = "rne", subnormals = "keep", overflow = "inf", like = "ieee", stats_json, in, out;
  std::string block_scale = "floor";
  std::string flip;  // --flip as given (empty: no soft errors)
  std::uint64_t flip_seed = 0;
  std::string flip_bits = "fraction";
  int block = 0;  // block formats: elements per block (0: the format's own, 32 or 16)
  int sr_bits = 32;
  std::uint64_t seed = 0;
  bool daz = false, bits = false;
  // 2^18 elements: 1 MiB of float input and its output stay in the caches between the rounding and
  // the write, and split into pieces large enough for the engine's threads (bulk.cpp kMinPerThread).
  std::size_t chunk = std::size_t{1} << 18;
};

mpsim::Format target_format(const Options& o) {
  return mpsim::cli::format_with_options(o.to, o.subnormals, o.overflow);
}

// True if every value of `f` (finite, inf, NaN) is a float16 value, so simulate-mode results of a
// float16 input can be stored back as float16 without a second rounding.
bool fits_in_fp16(const mpsim::Format& f) {
  const mpsim::Format& h = mpsim::fp16();
  return f.man_bits <= h.man_bits && f.emax <= h.emax && f.emin - f.man_bits >= h.emin - h.man_bits;
}

// The device's NaN pattern in place of round_bits()'s, element by element (--bits output).
template <class T, class In>
void canonicalize(std::span<T> enc, std::span<const In> x, const mpsim::DeviceRounding& device) {
  for (std::size_t i = 0; i < enc.size(); ++i) enc[i] = static_cast<T>(device.convert_result(enc[i], x[i]));
}

// What the output file holds: the encodings (--bits) in the format's storage, or the rounded values in
// the input's dtype.
DType output_dtype(const Options& o, const mpsim::Format& fmt, DType in) {
  if (!o.bits) return in;
  const int bytes = fmt.storage_bytes();
  return bytes == 1 ? DType::u8 : bytes == 2 ? DType::u16 : DType::u32;
}

// --stats-json of a block conversion: the telemetry (BlockStats) and the options.
std::string block_stats_json(const Options& o, const mpsim::BlockFormat& bf, const mpsim::Rounding& r,
                             const mpsim::BlockStats& st, float tensor_scale) {
  nlohmann::json scales = nlohmann::json::array();
  for (const auto& [k, c] : st.scale_log2) scales.push_back({k, c});
  const nlohmann::json j = {{"schema", "mpsim-round-block-1"},
                            {"mpsim_version", mpsim::kVersion},
                            {"input", o.in},
                            {"output", o.out},
                            {"format", bf.name},
                            {"block", bf.block},
                            {"block_scale", o.block_scale},
                            {"mode", std::string(mpsim::ieee_name(r.mode))},
                            {"seed", r.seed},
                            {"output_kind", o.bits ? "bits" : "values"},
                            {"count", st.count},
                            {"nonzero", st.nonzero},
                            {"nan", st.nan_in},
                            {"inf_in", st.inf_in},
                            {"flushed", st.flushed},
                            {"subnormal", st.subnormal},
                            {"saturated", st.saturated},
                            {"blocks", st.blocks},
                            {"nan_blocks", st.nan_blocks},
                            {"scale_log2", scales},
                            {"tensor_scale", tensor_scale}};
  return j.dump(2) + "\n";
}

// The closing lines of a block conversion: the stats to standard output (--stats-json -) and the summary.
void block_summary(const Options& o, const mpsim::BlockFormat& bf, const mpsim::Rounding& r,
                   const mpsim::BlockStats& st, const std::string& stats_text) {
  if (o.stats_json == "-") mpsim::cli::write_report("-", stats_text);
  fmt::print(
      "{} -> {} ({}, blocks of {}, {}): count {}, nonzero {}, flushed in block {}, subnormal {}, saturated {}, "
      "blocks {} ({} NaN)\n",
      o.in, o.out, bf.name, bf.block, mpsim::ieee_name(r.mode), st.count, st.nonzero, st.flushed, st.subnormal,
      st.saturated, st.blocks, st.nan_blocks);
}

// Block formats (mxfp8_e4m3, ..., nvfp4; lib/mpsim/format/block.hpp): blocks along the last axis. Values:
// the dequantized array in the input's dtype; --bits: an .npz of 'elements' and 'scales' (uint8; nvfp4
// also 'tensor_scale', float32). The input is mapped and streamed by runs of whole rows
// (analysis::for_each_block_rows: about --chunk values at a time), each run quantized and its results
// written to their place in the output as they come (io::NpyWriter, io::NpzWriter), so memory stays bounded
// whatever the file's size; nvfp4's per-tensor scale needs every value, so its input is read twice, the
// amax first.
void run_block(const Options& o) {
  const mpsim::BlockFormat bf = mpsim::parse_block_format(o.to, o.block, mpsim::parse_block_scale_rule(o.block_scale));
  const mpsim::Rounding r = mpsim::cli::rounding_with_options(o.mode, o.sr_bits, o.seed, o.daz);
  if (o.subnormals != "keep" || o.overflow != "inf" || o.like != "ieee")
    throw mpsim::Error(
        fmt::format("--subnormals, --overflow and --like do not apply to {}: its elements keep "
                    "subnormals and saturate (OCP MX v1.0)",
                    bf.name));
  if (!o.flip.empty())
    throw mpsim::Error(
        fmt::format("--flip does not apply to {}: soft errors are defined for the element formats "
                    "(a block format's element and scale codes would need a rule of their own)",
                    bf.name));
  if (o.chunk == 0) throw mpsim::Error("--chunk must be at least 1");
  const auto src = mpsim::cli::open_npy(o.in);
  const mpsim::io::TensorRef& in = src.tensors().front();
  if (in.dtype != DType::f32 && in.dtype != DType::f16)
    throw mpsim::Error(fmt::format("{}: block formats take float16/float32 arrays, this one is {}", o.in,
                                   mpsim::io::to_string(in.dtype)));
  const std::size_t row_len = in.shape.empty() ? in.count : static_cast<std::size_t>(in.shape.back());

  // Open the outputs before the work, so a bad output path fails before anything is written.
  std::optional<mpsim::io::NpyWriter> values;
  std::optional<mpsim::io::NpzWriter> bits;
  if (o.bits) {
    std::vector<std::int64_t> scale_shape = in.shape;
    if (scale_shape.empty()) scale_shape.push_back(1);
    scale_shape.back() = static_cast<std::int64_t>((row_len + bf.block - 1) / bf.block);
    std::vector<mpsim::io::NpzWriter::Member> members = {{"elements", DType::u8, in.shape},
                                                         {"scales", DType::u8, scale_shape}};
    if (bf.two_level) members.push_back({"tensor_scale", DType::f32, {1}});
    bits.emplace(o.out, std::move(members));
  } else {
    values.emplace(o.out, in.dtype, in.shape);
  }
  std::optional<mpsim::io::AtomicFile> stats_file;
  if (!o.stats_json.empty() && o.stats_json != "-") stats_file.emplace(o.stats_json);
  const int reads = bf.two_level ? 2 : 1;
  mpsim::io::ProgressBar progress("round " + o.in, reads * in.count * mpsim::io::dtype_size(in.stored),
                                  mpsim::io::ProgressBar::Unit::bytes);
  const mpsim::analysis::TensorRead read = [&](const mpsim::analysis::ChunkVisitor& visit) {
    src.for_each_chunk(in, o.chunk, [&](std::span<const float> x, std::uint64_t offset) {
      visit(x, {}, offset);
      progress.advance(x.size() * mpsim::io::dtype_size(in.stored));
    });
  };

  mpsim::BlockStats st;
  std::vector<float> y;
  std::vector<std::uint16_t> h;
  const float tensor_scale = mpsim::analysis::for_each_block_rows(
      read, row_len, bf,
      [&](std::span<const float> x, std::uint64_t index0, float t) {
        mpsim::BulkOptions opt;
        opt.index0 = index0;
        if (bits) {
          const mpsim::BlockQuantized q = mpsim::quantize_blocks(x, row_len, bf, r, &st, opt, t);
          bits->append(0, std::span<const std::uint8_t>(q.elements));
          bits->append(1, std::span<const std::uint8_t>(q.scales));
          return;
        }
        y.resize(x.size());
        mpsim::round_blocks(x, y, row_len, bf, r, &st, opt, t);
        if (in.dtype == DType::f16) {
          // float16 output: the dequantized values rounded once more, to nearest float16.
          h.resize(y.size());
          mpsim::round_array(std::span<const float>(y), std::span<std::uint16_t>(h), mpsim::fp16());
          values->append(std::span<const std::uint16_t>(h));
        } else {
          values->append(std::span<const float>(y));
        }
      },
      o.chunk);
  progress.finish();
  if (bits && bf.two_level) bits->append(2, std::span<const float>(&tensor_scale, 1));
  const std::string stats_text = o.stats_json.empty() ? "" : block_stats_json(o, bf, r, st, tensor_scale);
  if (stats_file) stats_file->write(stats_text);
  if (bits) bits->commit();
  else values->commit();
  if (stats_file) stats_file->commit();
  block_summary(o, bf, r, st, stats_text);
}

// Rounds one chunk of input (elements offset .. offset + x.size() of the array) and appends its results
// to the output. Every element's result depends only on its value and its index (the stochastic
// generator is keyed by offset + i), so the output is the same whatever the chunk size.
template <class In>
class ChunkRounder {
 public:
  ChunkRounder(const Options& o, const mpsim::DeviceRounding& device, const mpsim::SoftErrors& soft_errors,
               mpsim::io::NpyWriter& out, DType in_dtype)
      : o_(o),
        device_(device),
        fmt_(device.format),
        r_(device.rounding),
        soft_errors_(soft_errors),
        out_(out),
        in_dtype_(in_dtype) {
    // Only a profile whose rule changes results (NaN patterns, zero signs) needs the per-element pass.
    device_rule_ = !device.is_plain();
  }

  void operator()(std::span<const In> x, std::uint64_t offset) {
    // The output goes to the file through write(), which reads it back: ordinary stores keep the chunk
    // in the cache for it (BulkOptions::streaming_stores would send it to memory first).
    mpsim::BulkOptions opt;
    opt.index0 = offset;
    if (o_.bits) {
      const int bytes = fmt_.storage_bytes();
      if (bytes == 1) pack(x, u8_, opt);
      else if (bytes == 2) pack(x, u16_, opt);
      else if constexpr (std::is_same_v<In, float>) pack(x, u32_, opt);
      else {
        // The engine has no double -> uint32 path: the statistics from a simulate pass, the encodings from
        // the scalar specification.
        values(x, opt);
        u32_.resize(x.size());
        for (std::size_t i = 0; i < x.size(); ++i)
          u32_[i] = static_cast<std::uint32_t>(mpsim::round_bits(x[i], fmt_, r_, offset + i));
        if (device_rule_) canonicalize(std::span<std::uint32_t>(u32_), x, device_);
        flipped_ += mpsim::flip_bits(std::span<std::uint32_t>(u32_), fmt_, soft_errors_, opt);
        out_.append(std::span<const std::uint32_t>(u32_));
      }
      return;
    }
    values(x, opt);
    if constexpr (std::is_same_v<In, float>) {
      if (in_dtype_ == DType::f16) {
        // Every result is a float16 value (fits_in_fp16): store its float16 encoding.
        u16_.resize(x.size());
        mpsim::round_array(std::span<const float>(sim_), std::span<std::uint16_t>(u16_), mpsim::fp16());
        out_.append(std::span<const std::uint16_t>(u16_));
        return;
      }
    }
    out_.append(std::span<const In>(sim_));
  }

  const mpsim::Stats& stats() const { return stats_; }
  std::uint64_t flipped() const { return flipped_; }

 private:
  template <class T>
  void pack(std::span<const In> x, std::vector<T>& enc, const mpsim::BulkOptions& opt) {
    enc.resize(x.size());
    mpsim::round_array(x, std::span<T>(enc), fmt_, r_, &stats_, opt);
    if (device_rule_) canonicalize(std::span<T>(enc), x, device_);
    flipped_ += mpsim::flip_bits(std::span<T>(enc), fmt_, soft_errors_, opt);
    out_.append(std::span<const T>(enc));
  }
  void values(std::span<const In> x, const mpsim::BulkOptions& opt) {
    sim_.resize(x.size());
    mpsim::round_array(x, std::span<In>(sim_), fmt_, r_, &stats_, opt);
    if (device_rule_) device_.convert_values(x, std::span<In>(sim_), opt.index0);
    // Not in the --bits path for double input, whose encodings flip on their own (the same draws).
    if (!o_.bits) flipped_ += mpsim::flip_values(std::span<In>(sim_), fmt_, soft_errors_, opt);
  }

  const Options& o_;
  const mpsim::DeviceRounding& device_;
  const mpsim::Format& fmt_;
  const mpsim::Rounding& r_;
  const mpsim::SoftErrors& soft_errors_;
  mpsim::io::NpyWriter& out_;
  DType in_dtype_;
  bool device_rule_ = false;
  mpsim::Stats stats_;
  std::uint64_t flipped_ = 0;
  std::vector<In> sim_;
  std::vector<std::uint8_t> u8_;
  std::vector<std::uint16_t> u16_;
  std::vector<std::uint32_t> u32_;
};

void run(const Options& o) {
  if (mpsim::is_block_format_name(o.to)) return run_block(o);
  const mpsim::Format requested = target_format(o);
  const mpsim::Rounding requested_rounding = mpsim::cli::rounding_with_options(o.mode, o.sr_bits, o.seed, o.daz);
  const mpsim::Profile& like = mpsim::find_profile(o.like);
  const mpsim::SoftErrors soft_errors =
      mpsim::cli::soft_errors_with_options(o.flip.empty() ? "0" : o.flip, o.flip_seed, o.flip_bits);
  if (o.chunk == 0) throw mpsim::Error("--chunk must be at least 1");

  // The input is mapped, not read: it is streamed chunk by chunk, so its size is not bounded by memory.
  const auto src = mpsim::cli::open_npy(o.in);
  const mpsim::io::TensorRef& in = src.tensors().front();
  const mpsim::DeviceRounding device =
      mpsim::resolve_profile(like, requested, requested_rounding, mpsim::Operation::convert,
                             in.dtype == DType::f64 ? mpsim::InputType::float64 : mpsim::InputType::float32);
  const mpsim::Format& fmt = device.format;
  const mpsim::Rounding& r = device.rounding;
  if (!(in.dtype == DType::f16 || in.dtype == DType::f32 || in.dtype == DType::f64))
    throw mpsim::Error(fmt::format("{}: round takes float16/float32/float64 arrays, this one is {}", o.in,
                                   mpsim::io::to_string(in.dtype)));
  const bool wide = in.dtype == DType::f64;
  if (o.bits && fmt.storage_bits > 32)
    throw mpsim::Error(
        fmt::format("--bits: {} needs {} bits; --bits writes formats of up to 32 bits", fmt.name, fmt.storage_bits));
  if (!o.bits && in.dtype == DType::f16 && !fits_in_fp16(fmt))
    throw mpsim::Error(
        fmt::format("{}: the input is float16 but {} values do not all fit in float16, so the "
                    "rounded values cannot be stored in the input's dtype; convert the input to "
                    "float32, or use --bits",
                    o.in, fmt.name));

  // Open the outputs before the work, so a bad output path fails before anything is written.
  mpsim::io::NpyWriter out(o.out, output_dtype(o, fmt, in.dtype), in.shape);
  std::optional<mpsim::io::AtomicFile> stats_file;
  if (!o.stats_json.empty() && o.stats_json != "-") stats_file.emplace(o.stats_json);
  std::string stats_text;

  mpsim::io::ProgressBar progress("round " + o.in, in.count * mpsim::io::dtype_size(in.stored),
                                  mpsim::io::ProgressBar::Unit::bytes);
  const std::size_t elem = mpsim::io::dtype_size(in.stored);
  mpsim::Stats stats;
  std::uint64_t flipped = 0;
  auto stream = [&](auto tag) {
    using In = decltype(tag);
    ChunkRounder<In> rounder(o, device, soft_errors, out, in.dtype);
    auto each = [&](std::span<const In> x, std::uint64_t offset) {
      rounder(x, offset);
      progress.advance(x.size() * elem);
    };
    if constexpr (std::is_same_v<In, double>) src.for_each_chunk_double(in, o.chunk, each);
    else src.for_each_chunk(in, o.chunk, each);
    stats = rounder.stats();
    flipped = rounder.flipped();
  };
  if (wide) stream(double{});
  else stream(float{});
  progress.finish();

  if (!o.stats_json.empty()) {
    nlohmann::json j = {{"schema", "mpsim-round-1"},
                        {"mpsim_version", mpsim::kVersion},
                        {"input", o.in},
                        {"output", o.out},
                        {"format", fmt.name},
                        {"subnormals", std::string(mpsim::to_string(fmt.subnormals))},
                        {"overflow", std::string(mpsim::to_string(fmt.overflow))},
                        {"mode", std::string(mpsim::ieee_name(r.mode))},
                        {"sr_bits", r.sr_bits},
                        {"seed", r.seed},
                        {"daz", r.input_subnormals == mpsim::InputSubnormals::zero},
                        {"like", like.name},
                        {"flip", soft_errors.p},
                        {"flip_seed", soft_errors.seed},
                        {"flip_bits", std::string(mpsim::to_string(soft_errors.bits))},
                        {"output_kind", o.bits ? "bits" : "values"},
                        {"output_dtype", std::string(mpsim::io::to_string(out.dtype()))},
                        {"flipped", flipped}};
    mpsim::for_each_stats_field(stats, [&](std::string_view name, auto value) { j[std::string(name)] = value; });
    stats_text = j.dump(2) + "\n";
    if (stats_file) stats_file->write(stats_text);
  }
  out.commit();
  if (stats_file) stats_file->commit();
  if (o.stats_json == "-") mpsim::cli::write_report("-", stats_text);
  fmt::print("{} -> {} ({} {}): count {}, exact {}, rounded {}, underflow {}, subnormal {}, overflow {}, nan {}{}\n",
             o.in, o.out, fmt.name, mpsim::ieee_name(r.mode), stats.count, stats.exact, stats.rounded, stats.underflow,
             stats.subnormal, stats.overflow, stats.nan,
             o.flip.empty() ? std::string() : fmt::format(", flipped {}", flipped));
}

void setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("round", "Round every element of a .npy array to a format");
  cmd->add_option("--to", o->to,
                  "Target format (fp16, bf16, tf32, fp8_e4m3, fp8_e5m2, eXmY, ml_dtypes names) or block format "
                  "(mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4_e2m1, nvfp4)")
      ->required();
  cmd->add_option("--mode", o->mode, "Rounding mode: rne rtz ru rd rna rto sr (default rne)");
  cmd->add_option("--sr-bits", o->sr_bits, "Stochastic rounding: random bits per decision, 1..32 (default 32)");
  cmd->add_option("--seed", o->seed, "Stochastic rounding: generator seed (default 0)");
  cmd->add_option("--subnormals", o->subnormals, "Subnormal results: keep or flush (default keep)");
  cmd->add_option("--overflow", o->overflow, "Overflowing results: inf or saturate (default inf)");
  cmd->add_flag("--daz", o->daz, "Treat subnormal inputs as zero");
  cmd->add_option("--like", o->like,
                  "Reproduce a device: ieee (round_bits itself, default), x86 (F16C / AVX512-BF16: bf16 reads "
                  "subnormal floats as zero), cuda-sm90 (H100 as recorded: canonical NaNs; tf32 --mode rna cuts NaN "
                  "payloads, with --overflow saturate it is cvt.rna.satfinite); applies to values and --bits alike");
  cmd->add_option("--block", o->block, "Block formats: elements per block along the last axis (default 32; nvfp4 16)");
  cmd->add_option("--block-scale", o->block_scale,
                  "MX formats: block scale rule floor (OCP MX) or rceil (default floor)");
  cmd->add_option("--flip", o->flip,
                  "Soft errors: flip one bit of the fraction field of each result with this probability, 0..1 "
                  "(chop's / CPFloat's flip; docs/cli.md)");
  cmd->add_option("--flip-seed", o->flip_seed, "Soft errors: seed of the flip draws, apart from --seed (default 0)");
  cmd->add_option("--flip-bits", o->flip_bits,
                  "Soft errors: the bits that can flip, fraction (chop; CPFloat's CPFLOAT_SOFTERR_FRAC) or any "
                  "(CPFLOAT_SOFTERR_FP) (default fraction)");
  cmd->add_flag("--bits", o->bits, "Write the encodings (uint8/uint16/uint32) instead of the rounded values");
  cmd->add_option("--stats-json", o->stats_json,
                  "Also write what the rounding did as JSON to this file (-: standard output)");
  // Elements per chunk of the stream; hidden: the tests use it to cross chunk boundaries on small inputs.
  cmd->add_option("--chunk", o->chunk, "Elements rounded per chunk")->group("");
  cmd->add_option("IN", o->in, "Input .npy (float16, float32 or float64)")->required();
  cmd->add_option("OUT", o->out, "Output .npy")->required();
  cmd->callback([o] { run(*o); });
}

const bool registered = mpsim::cli::register_command("round", setup);

}  // namespace
