// mpsim arith OP --format FMT [--mode M] [--sr-bits N] [--seed S] [--subnormals keep|flush]
//              [--overflow inf|saturate] [--daz] [--like PROFILE] [--bits] A.npy [B.npy [C.npy]] OUT.npy
// Element-wise arithmetic in FMT, correctly rounded in the mode (lib/mpsim/format/arith.hpp): OP is add,
// sub, mul, div, fma (a * b + c) or sqrt, or the PTX saturating forms add_sat, sub_sat, mul_sat, fma_sat
// (__hadd_sat ...: the result clamped to [0, 1], NaN -> +0). Inputs are float arrays whose values are all exactly
// representable in FMT, or with --bits the encodings as uint8/uint16/uint32; OUT has A's dtype, so a
// user can compare our results with a GPU's or another library's bit for bit. The stochastic index of
// element i is i (C order). --like x86 | cuda-sm90 reproduces a device's arithmetic
// (lib/mpsim/format/profile.hpp): its flushing rules, and its NaN pattern in --bits output.
// The inputs are memory-mapped and read in step chunk by chunk, each chunk's results appended to a
// temporary OUT renamed into place at the end (nothing is left behind on an error).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "command.hpp"
#include "format_options.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/arith.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/npy_writer.hpp"
#include "mpsim/io/progress.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "mpsim/parallel.hpp"
#include "npy_input.hpp"

namespace {

using mpsim::io::DType;

struct Options {
  std::string op, format, mode = "rne", subnormals = "keep", overflow = "inf", like = "ieee";
  std::vector<std::string> files;  // the inputs, then OUT
  int sr_bits = 32;
  std::uint64_t seed = 0;
  bool daz = false, bits = false;
  std::size_t chunk = std::size_t{1} << 16;  // elements per chunk: the inputs' and the output's pieces stay in cache
};

mpsim::Format arith_format(const Options& o) {
  return mpsim::cli::format_with_options(o.format, o.subnormals, o.overflow);
}

// "(2, 5)" for flat index i of `shape` (C order), or "" for 1-d arrays.
std::string multi_index(std::size_t i, const std::vector<std::int64_t>& shape) {
  if (shape.size() <= 1) return "";
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = static_cast<std::int64_t>(i % static_cast<std::size_t>(shape[d]));
    i /= static_cast<std::size_t>(shape[d]);
  }
  return " " + mpsim::io::shape_string(idx);
}

// True if every value of `f` is a value of the float dtype, so results can be stored without rounding.
bool fits_in(const mpsim::Format& f, DType dtype) {
  const mpsim::Format& t = dtype == DType::f16 ? mpsim::fp16() : dtype == DType::f32 ? mpsim::fp32() : mpsim::fp64();
  return f.man_bits <= t.man_bits && f.emax <= t.emax && f.emin - f.man_bits >= t.emin - t.man_bits;
}

bool is_uint(DType d) {
  return d == DType::u8 || d == DType::u16 || d == DType::u32 || d == DType::bf16_bits || d == DType::fp8_e4m3_bits ||
         d == DType::fp8_e5m2_bits;
}

// The input's dtype is one this command takes (encodings with --bits, values without).
void check_dtype(const mpsim::io::TensorRef& t, const std::string& name, const mpsim::Format& f, bool bits) {
  if (bits) {
    if (!is_uint(t.dtype))
      throw mpsim::Error(fmt::format("{}: --bits takes the encodings as uint8/uint16/uint32, this array is {}", name,
                                     mpsim::io::to_string(t.dtype)));
    if (static_cast<int>(mpsim::io::dtype_size(t.dtype)) != f.storage_bytes())
      throw mpsim::Error(fmt::format("{}: {} encodings take {} byte(s) each, this array is {}", name, f.name,
                                     f.storage_bytes(), mpsim::io::to_string(t.dtype)));
  } else if (!(t.dtype == DType::f16 || t.dtype == DType::f32 || t.dtype == DType::f64)) {
    throw mpsim::Error(
        fmt::format("{}: arith takes float16/float32/float64 values (or, with --bits, encodings); "
                    "this array is {}",
                    name, mpsim::io::to_string(t.dtype)));
  }
}

// The encodings of one chunk of an input (elements offset .. offset + x.size(), read as double, which
// holds every float and every uint32 exactly), checked.
void encodings(std::span<const double> x, std::uint64_t offset, const mpsim::io::TensorRef& t, const std::string& name,
               const mpsim::Format& f, bool bits, std::vector<std::uint64_t>& enc) {
  enc.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (bits) {
      const auto v = static_cast<std::uint64_t>(x[i]);
      if (v & ~f.storage_mask())
        throw mpsim::Error(fmt::format("{}: element {}{} is 0x{:x}, not a {}-bit {} encoding", name, offset + i,
                                       multi_index(offset + i, t.shape), v, f.storage_bits, f.name));
      enc[i] = v;
    } else {
      if (!mpsim::is_representable(x[i], f))
        throw mpsim::Error(
            fmt::format("{}: element {}{} = {} is not exactly representable in {} (round it first "
                        "with `mpsim round --to {}`)",
                        name, offset + i, multi_index(offset + i, t.shape), x[i], f.name, f.name));
      enc[i] = mpsim::round_bits(x[i], f);  // exact (NaN: quieted, payload kept)
    }
  }
}

// Appends one chunk of results to the output: the encodings in the input's integer dtype (--bits), or
// the values in its float dtype (exact: fits_in).
class ResultWriter {
 public:
  ResultWriter(mpsim::io::NpyWriter& out, const mpsim::Format& f, bool bits) : out_(out), f_(f), bits_(bits) {}

  void append(std::span<const std::uint64_t> res) {
    const std::size_t size = mpsim::io::dtype_size(out_.dtype());
    if (bits_) {
      bytes_.resize(res.size() * size);
      for (std::size_t i = 0; i < res.size(); ++i)
        for (std::size_t b = 0; b < size; ++b) bytes_[i * size + b] = static_cast<std::byte>(res[i] >> (8 * b));
      out_.append_bytes(bytes_.data(), res.size(), size);
    } else if (out_.dtype() == DType::f64) {
      f64_.resize(res.size());
      for (std::size_t i = 0; i < res.size(); ++i) f64_[i] = mpsim::decode(res[i], f_);
      out_.append(std::span<const double>(f64_));
    } else if (out_.dtype() == DType::f32) {
      f32_.resize(res.size());
      for (std::size_t i = 0; i < res.size(); ++i) f32_[i] = static_cast<float>(mpsim::decode(res[i], f_));
      out_.append(std::span<const float>(f32_));
    } else {
      f16_.resize(res.size());
      for (std::size_t i = 0; i < res.size(); ++i)
        f16_[i] = static_cast<std::uint16_t>(mpsim::round_bits(mpsim::decode(res[i], f_), mpsim::fp16()));
      out_.append(std::span<const std::uint16_t>(f16_));
    }
  }

 private:
  mpsim::io::NpyWriter& out_;
  const mpsim::Format& f_;
  bool bits_;
  std::vector<std::byte> bytes_;
  std::vector<double> f64_;
  std::vector<float> f32_;
  std::vector<std::uint16_t> f16_;
};

// arith_array over the chunk, split between the hardware threads: element i's result depends only on
// its operands and its index (the stochastic generator is keyed by it), so the bits do not depend on
// the split (mpsim::parallel_for: a worker's error reaches the caller). The scalar exact arithmetic is compute-bound,
// so every core shortens it.
void parallel_arith(mpsim::ArithOp op, const std::vector<std::vector<std::uint64_t>>& enc,
                    std::vector<std::uint64_t>& res, const mpsim::Format& f, const mpsim::Rounding& r,
                    std::uint64_t offset) {
  const std::size_t n = res.size();
  const int workers =
      static_cast<int>(std::clamp<std::size_t>(mpsim::hardware_threads(), 1, std::max<std::size_t>(1, n / 1024)));
  mpsim::parallel_for(n, workers, "arith", [&](int, std::size_t b, std::size_t e) {
    auto slice = [&](const std::vector<std::uint64_t>& v) {
      return v.empty() ? std::span<const std::uint64_t>() : std::span<const std::uint64_t>(v).subspan(b, e - b);
    };
    mpsim::arith_array(op, slice(enc[0]), slice(enc[1]), slice(enc[2]), std::span<std::uint64_t>(res).subspan(b, e - b),
                       f, r, offset + b);
  });
}

void run(const Options& o) {
  // "add_sat": the .sat form of add (saturate_unit_bits); sqrt has none.
  const bool saturate_unit = o.op.size() > 4 && o.op.ends_with("_sat") && o.op != "sqrt_sat";
  const mpsim::ArithOp op = mpsim::parse_arith_op(saturate_unit ? o.op.substr(0, o.op.size() - 4) : o.op);
  const int n_in = mpsim::arity(op);
  if (static_cast<int>(o.files.size()) != n_in + 1)
    throw mpsim::Error(fmt::format("arith {} takes {} input file(s) and an output file, got {} file name(s)",
                                   mpsim::to_string(op), n_in, o.files.size()));
  if (o.chunk == 0) throw mpsim::Error("--chunk must be at least 1");
  mpsim::check_arith_format(arith_format(o));
  const mpsim::DeviceRounding device = mpsim::resolve_profile(
      mpsim::find_profile(o.like), arith_format(o), mpsim::cli::rounding_with_options(o.mode, o.sr_bits, o.seed, o.daz),
      mpsim::Operation::arithmetic);
  const mpsim::Format& f = device.format;
  const mpsim::Rounding& r = device.rounding;

  // The inputs are mapped and read in step, chunk by chunk: resident memory does not grow with them.
  std::vector<mpsim::io::TensorSource> src;
  for (int k = 0; k < n_in; ++k) src.push_back(mpsim::cli::open_npy(o.files[k]));
  std::vector<const mpsim::io::TensorRef*> in;
  for (const auto& s : src) in.push_back(&s.tensors().front());
  for (int k = 1; k < n_in; ++k)
    if (in[k]->shape != in[0]->shape)
      throw mpsim::Error(fmt::format("shape mismatch: {} is {} but {} is {} (arith is element-wise, no broadcasting)",
                                     o.files[0], mpsim::io::shape_string(in[0]->shape), o.files[k],
                                     mpsim::io::shape_string(in[k]->shape)));
  for (int k = 0; k < n_in; ++k) check_dtype(*in[k], o.files[k], f, o.bits);
  if (!o.bits && !fits_in(f, in[0]->dtype))
    throw mpsim::Error(
        fmt::format("{}: the output takes this input's dtype, {}, which cannot hold every {} value; "
                    "pass float32/float64 inputs, or use --bits",
                    o.files[0], mpsim::io::to_string(in[0]->dtype), f.name));

  const std::string& out_path = o.files.back();
  mpsim::io::NpyWriter out(out_path, in[0]->dtype, in[0]->shape);
  ResultWriter writer(out, f, o.bits);
  std::uint64_t input_bytes = 0;
  for (const auto* t : in) input_bytes += t->count * mpsim::io::dtype_size(t->stored);
  mpsim::io::ProgressBar progress(fmt::format("arith {}", mpsim::to_string(op)), input_bytes,
                                  mpsim::io::ProgressBar::Unit::bytes);

  const std::uint64_t count = in[0]->count;
  std::vector<std::vector<double>> x(n_in);
  std::vector<std::vector<std::uint64_t>> enc(3);
  std::vector<std::uint64_t> res;
  std::size_t nan_count = 0;
  for (std::uint64_t offset = 0; offset < count;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(o.chunk, count - offset));
    for (int k = 0; k < n_in; ++k) {
      src[k].read_range_double(*in[k], offset, n, x[k]);
      encodings(x[k], offset, *in[k], o.files[k], f, o.bits, enc[k]);
    }
    res.resize(n);
    parallel_arith(op, enc, res, f, r, offset);
    for (std::size_t i = 0; i < n; ++i) {
      bool nan_operand = false;
      for (int k = 0; k < n_in; ++k) nan_operand = nan_operand || mpsim::is_nan_bits(enc[k][i], f);
      res[i] = device.arith_result(res[i], nan_operand, saturate_unit);
      nan_count += mpsim::is_nan_bits(res[i], f);
    }
    writer.append(res);
    offset += n;
    progress.advance(input_bytes / count * n);
  }
  progress.finish();
  out.commit();
  fmt::print("arith {}{} in {} ({}): {} elements -> {} ({}), {} NaN\n", mpsim::to_string(op),
             saturate_unit ? "_sat" : "", f.name, mpsim::ieee_name(r.mode), count, out_path,
             o.bits ? "encodings" : "values", nan_count);
}

void setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("arith", "Element-wise add/sub/mul/div/fma/sqrt in a format, correctly rounded");
  cmd->add_option("OP", o->op, "Operation: add sub mul div fma sqrt, or add_sat sub_sat mul_sat fma_sat (PTX .sat)")
      ->required();
  cmd->add_option("--format", o->format, "Format (fp16, bf16, tf32, fp8_e4m3, fp8_e5m2, fp32, eXmY, ml_dtypes names)")
      ->required();
  cmd->add_option("--mode", o->mode, "Rounding mode: rne rtz ru rd rna rto sr (default rne)");
  cmd->add_option("--sr-bits", o->sr_bits, "Stochastic rounding: random bits per decision, 1..32 (default 32)");
  cmd->add_option("--seed", o->seed, "Stochastic rounding: generator seed (default 0)");
  cmd->add_option("--subnormals", o->subnormals, "Subnormal results: keep or flush (default keep)");
  cmd->add_option("--overflow", o->overflow, "Overflowing results: inf or saturate (default inf)");
  cmd->add_flag("--daz", o->daz, "Treat subnormal operands as zero");
  cmd->add_option("--like", o->like,
                  "Reproduce a device: ieee (default), x86, cuda-sm90 (H100 as recorded: NaN 0x7fff for fp16/bf16; "
                  "the fp16 _sat forms write +0 for -0)");
  cmd->add_flag("--bits", o->bits, "Inputs and output are encodings (uint8/uint16/uint32), not values");
  // Elements per chunk of the stream; hidden: the tests use it to cross chunk boundaries on small inputs.
  cmd->add_option("--chunk", o->chunk, "Elements computed per chunk")->group("");
  cmd->add_option("FILES", o->files, "A.npy [B.npy [C.npy]] OUT.npy (sqrt: one input, fma: three)")->required();
  cmd->callback([o] { run(*o); });
}

const bool registered = mpsim::cli::register_command("arith", setup);

}  // namespace
