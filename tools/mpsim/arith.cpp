// mpsim arith OP --format FMT [--mode M] [--sr-bits N] [--seed S] [--subnormals keep|flush]
//              [--overflow inf|saturate] [--daz] [--like PROFILE] [--bits] A.npy [B.npy [C.npy]] OUT.npy
// Element-wise arithmetic in FMT, correctly rounded in the mode (lib/mpsim/format/arith.hpp): OP is add,
// sub, mul, div, fma (a * b + c) or sqrt, or the PTX saturating forms add_sat, sub_sat, mul_sat, fma_sat
// (__hadd_sat ...: the result clamped to [0, 1], NaN -> +0). Inputs are float arrays whose values are all exactly
// representable in FMT, or with --bits the encodings as uint8/uint16/uint32; OUT has A's dtype, so a
// user can compare our results with a GPU's or another library's bit for bit. The stochastic index of
// element i is i (C order). --like x86 | cuda-sm90 reproduces a device's arithmetic
// (lib/mpsim/format/profile.hpp): its flushing rules, and its NaN pattern in --bits output.
#include <fmt/core.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "command.hpp"
#include "format_options.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/arith.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/io/npy.hpp"

namespace {

using mpsim::io::DType;
using mpsim::io::NpyArray;

struct Options {
  std::string op, format, mode = "rne", subnormals = "keep", overflow = "inf", like = "ieee";
  std::vector<std::string> files;  // the inputs, then OUT
  int sr_bits = 32;
  std::uint64_t seed = 0;
  bool daz = false, bits = false;
};

mpsim::Format arith_format(const Options& o) { return mpsim::cli::format_with_options(o.format, o.subnormals, o.overflow); }

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

// The encodings of an input array, checked.
std::vector<std::uint64_t> encodings(const NpyArray& a, const std::string& name, const mpsim::Format& f, bool bits) {
  std::vector<std::uint64_t> enc(a.count());
  if (bits) {
    const bool is_uint = a.dtype == DType::u8 || a.dtype == DType::u16 || a.dtype == DType::u32 ||
                         a.dtype == DType::bf16_bits || a.dtype == DType::fp8_e4m3_bits ||
                         a.dtype == DType::fp8_e5m2_bits;
    if (!is_uint)
      throw mpsim::Error(fmt::format("{}: --bits takes the encodings as uint8/uint16/uint32, this array is {}", name,
                                     mpsim::io::to_string(a.dtype)));
    if (static_cast<int>(mpsim::io::dtype_size(a.dtype)) != f.storage_bytes())
      throw mpsim::Error(fmt::format("{}: {} encodings take {} byte(s) each, this array is {}", name, f.name,
                                     f.storage_bytes(), mpsim::io::to_string(a.dtype)));
    const std::size_t size = mpsim::io::dtype_size(a.dtype);
    for (std::size_t i = 0; i < enc.size(); ++i) {
      std::uint64_t v = 0;
      for (std::size_t b = 0; b < size; ++b) v |= std::uint64_t(std::to_integer<std::uint8_t>(a.data[i * size + b])) << (8 * b);
      if (v & ~f.storage_mask())
        throw mpsim::Error(fmt::format("{}: element {}{} is 0x{:x}, not a {}-bit {} encoding", name, i,
                                       multi_index(i, a.shape), v, f.storage_bits, f.name));
      enc[i] = v;
    }
    return enc;
  }
  if (!(a.dtype == DType::f16 || a.dtype == DType::f32 || a.dtype == DType::f64))
    throw mpsim::Error(fmt::format("{}: arith takes float16/float32/float64 values (or, with --bits, encodings); "
                                   "this array is {}",
                                   name, mpsim::io::to_string(a.dtype)));
  const std::vector<double> x = mpsim::io::to_double(a);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!mpsim::is_representable(x[i], f))
      throw mpsim::Error(fmt::format("{}: element {}{} = {} is not exactly representable in {} (round it first with "
                                     "`mpsim round --to {}`)",
                                     name, i, multi_index(i, a.shape), x[i], f.name, f.name));
    enc[i] = mpsim::round_bits(x[i], f);  // exact (NaN: quieted, payload kept)
  }
  return enc;
}

void run(const Options& o) {
  // "add_sat": the .sat form of add (saturate_unit_bits); sqrt has none.
  const bool saturate_unit = o.op.size() > 4 && o.op.ends_with("_sat") && o.op != "sqrt_sat";
  const mpsim::ArithOp op = mpsim::parse_arith_op(saturate_unit ? o.op.substr(0, o.op.size() - 4) : o.op);
  const int n_in = mpsim::arity(op);
  if (static_cast<int>(o.files.size()) != n_in + 1)
    throw mpsim::Error(fmt::format("arith {} takes {} input file(s) and an output file, got {} file name(s)",
                                   mpsim::to_string(op), n_in, o.files.size()));
  mpsim::check_arith_format(arith_format(o));
  const mpsim::DeviceRounding device =
      mpsim::resolve_profile(mpsim::find_profile(o.like), arith_format(o),
                             mpsim::cli::rounding_with_options(o.mode, o.sr_bits, o.seed, o.daz),
                             mpsim::Operation::arithmetic);
  const mpsim::Format& f = device.format;
  const mpsim::Rounding& r = device.rounding;

  std::vector<NpyArray> in;
  for (int k = 0; k < n_in; ++k) in.push_back(mpsim::io::read_npy(o.files[k]));
  for (int k = 1; k < n_in; ++k)
    if (in[k].shape != in[0].shape)
      throw mpsim::Error(fmt::format("shape mismatch: {} is {} but {} is {} (arith is element-wise, no broadcasting)",
                                     o.files[0], mpsim::io::shape_string(in[0].shape), o.files[k],
                                     mpsim::io::shape_string(in[k].shape)));
  if (!o.bits && !fits_in(f, in[0].dtype))
    throw mpsim::Error(fmt::format("{}: the output takes this input's dtype, {}, which cannot hold every {} value; "
                                   "pass float32/float64 inputs, or use --bits",
                                   o.files[0], mpsim::io::to_string(in[0].dtype), f.name));
  std::vector<std::vector<std::uint64_t>> enc;
  for (int k = 0; k < n_in; ++k) enc.push_back(encodings(in[k], o.files[k], f, o.bits));

  const std::string& out_path = o.files.back();
  mpsim::io::AtomicFile out_file(out_path);
  std::vector<std::uint64_t> res(in[0].count());
  const std::vector<std::uint64_t> none;
  mpsim::arith_array(op, enc[0], n_in >= 2 ? enc[1] : none, n_in == 3 ? enc[2] : none, res, f, r);
  for (std::size_t i = 0; i < res.size(); ++i) {
    bool nan_operand = false;
    for (int k = 0; k < n_in; ++k) nan_operand = nan_operand || mpsim::is_nan_bits(enc[k][i], f);
    res[i] = device.arith_result(res[i], nan_operand, saturate_unit);
  }

  NpyArray result;
  std::size_t nan_count = 0;
  for (std::uint64_t v : res) nan_count += mpsim::is_nan_bits(v, f);
  if (o.bits) {
    result.dtype = in[0].dtype;
    result.shape = in[0].shape;
    const std::size_t size = mpsim::io::dtype_size(result.dtype);
    result.data.resize(res.size() * size);
    for (std::size_t i = 0; i < res.size(); ++i)
      for (std::size_t b = 0; b < size; ++b) result.data[i * size + b] = static_cast<std::byte>(res[i] >> (8 * b));
  } else {
    std::vector<double> values(res.size());
    for (std::size_t i = 0; i < res.size(); ++i) values[i] = mpsim::decode(res[i], f);
    if (in[0].dtype == DType::f64) {
      result = mpsim::io::make_npy(std::span<const double>(values), in[0].shape);
    } else if (in[0].dtype == DType::f32) {
      std::vector<float> v32(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) v32[i] = static_cast<float>(values[i]);  // exact (fits_in)
      result = mpsim::io::make_npy(std::span<const float>(v32), in[0].shape);
    } else {
      std::vector<std::uint16_t> h(values.size());
      for (std::size_t i = 0; i < values.size(); ++i)
        h[i] = static_cast<std::uint16_t>(mpsim::round_bits(values[i], mpsim::fp16()));  // exact (fits_in)
      result = mpsim::io::make_npy(std::span<const std::uint16_t>(h), in[0].shape, DType::f16);
    }
  }
  const auto bytes = mpsim::io::npy_bytes(result);
  out_file.write(bytes.data(), bytes.size());
  out_file.commit();
  fmt::print("arith {}{} in {} ({}): {} elements -> {} ({}), {} NaN\n", mpsim::to_string(op),
             saturate_unit ? "_sat" : "", f.name,
             mpsim::ieee_name(r.mode), res.size(), out_path, o.bits ? "encodings" : "values", nan_count);
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
  cmd->add_option("FILES", o->files, "A.npy [B.npy [C.npy]] OUT.npy (sqrt: one input, fma: three)")->required();
  cmd->callback([o] { run(*o); });
}

const bool registered = mpsim::cli::register_command("arith", setup);

}  // namespace
