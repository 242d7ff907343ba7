#include "mpsim/io/npy.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/io/atomic_file.hpp"

namespace mpsim::io {

namespace {

static_assert(std::endian::native == std::endian::little, "mpsim assumes a little-endian host");

// numpy/lib/format.py: MAGIC_PREFIX = b'\x93NUMPY', then major and minor version bytes.
constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// numpy/lib/format.py: ARRAY_ALIGN = 64 (the header is padded so the data starts 64-byte aligned).
constexpr std::size_t kAlign = 64;
// numpy refuses headers above 10000 bytes unless allow_pickle/max_header_size says otherwise
// (numpy/lib/format.py _MAX_HEADER_SIZE); we accept up to 1 MiB so odd but honest files still load.
constexpr std::size_t kMaxHeader = 1 << 20;

[[noreturn]] void fail(std::string_view name, const std::string& what) {
  throw Error(fmt::format("{}: {}", name, what));
}

// ---- a parser for the header's Python dict literal ------------------------------------------------
class DictParser {
 public:
  DictParser(std::string_view text, std::string_view name) : s_(text), name_(name) {}

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c, std::string_view where) {
    if (!eat(c)) bad(fmt::format("expected '{}' {}", c, where));
  }
  bool at_end() {
    skip_ws();
    return i_ >= s_.size();
  }
  char peek() {
    skip_ws();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  std::string string_literal() {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad("expected a quoted string");
    const char q = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') bad("escape sequences are not supported in the header");
      out += s_[i_++];
    }
    if (i_ >= s_.size()) bad("unterminated string");
    ++i_;
    return out;
  }
  std::string word() {
    skip_ws();
    std::string out;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) out += s_[i_++];
    return out;
  }
  std::int64_t integer() {
    skip_ws();
    std::int64_t v = 0;
    std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const int d = s_[i_] - '0';
      if (v > (std::numeric_limits<std::int64_t>::max() - d) / 10) bad("shape dimension too large");
      v = v * 10 + d;
      ++i_;
    }
    if (i_ == start) bad("expected a non-negative integer in the shape");
    // Python 2 era writers appended 'L' to longs.
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;
    return v;
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail(name_, fmt::format("malformed .npy header ({} at offset {} of \"{}\")", what, i_, printable()));
  }

 private:
  std::string printable() const {
    std::string out;
    for (char c : s_.substr(0, 200)) {
      if (c == '\n') out += "\\n";
      else if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126) out += '?';
      else out += c;
    }
    if (s_.size() > 200) out += "...";
    return out;
  }
  std::string_view s_;
  std::string_view name_;
  std::size_t i_ = 0;
};

struct DescrInfo {
  DType dtype;
  bool big_endian;
};

DescrInfo parse_descr(const std::string& d, std::string_view name) {
  if (d.size() < 2) fail(name, fmt::format("unsupported dtype '{}'", d));
  const char order = d[0];
  std::string_view code = std::string_view(d).substr(1);
  DType t;
  if (code == "f2") t = DType::f16;
  else if (code == "f4") t = DType::f32;
  else if (code == "f8") t = DType::f64;
  else if (code == "u1") t = DType::u8;
  else if (code == "u2") t = DType::u16;
  else if (code == "u4") t = DType::u32;
  else if (code == "i4") t = DType::i32;
  else if (code == "i8") t = DType::i64;
  // ml_dtypes' float8_e5m2 is saved as '<f1' (a 1-byte 'f' kind numpy has no type for): opaque too.
  else if (code == "V1" || code == "f1") t = DType::void8;
  else if (code == "V2") t = DType::void16;
  else if (code == "V4") t = DType::void32;
  else
    throw FieldError("", "",
                     fmt::format("{}: unsupported dtype '{}' (supported: float16/32/64, uint8/16/32, int32/64, and "
                                 "the opaque types |V1 <f1 <V2 <V4 of ml_dtypes arrays read with {{dtype}})",
                                 name, d),
                     {"dtype"});
  if (is_opaque(t)) {
    // numpy writes '|V2' for a plain void and ml_dtypes '<V2' (its types are stored little-endian here).
    if (order == '>')
      fail(name, fmt::format("unsupported dtype '{}' (big-endian ml_dtypes data; save it on a little-endian "
                             "machine or as uint)",
                             d));
    return {t, false};
  }
  bool big;
  if (order == '<' || order == '=') big = false;  // '=' is native: every host we build for is little-endian
  else if (order == '>') big = true;
  else if (order == '|') big = false;
  else fail(name, fmt::format("unsupported dtype '{}' (unknown byte order '{}')", d, order));
  if (order == '|' && dtype_size(t) != 1)
    fail(name, fmt::format("unsupported dtype '{}' (byte order '|' on a multi-byte type)", d));
  if (dtype_size(t) == 1) big = false;
  return {t, big};
}

std::size_t checked_count(std::span<const std::int64_t> shape, std::size_t elem, std::string_view name) {
  std::size_t n = 1;
  const std::size_t limit = std::numeric_limits<std::size_t>::max() / elem;
  for (std::int64_t d : shape) {
    if (d < 0) fail(name, fmt::format("negative dimension in shape {}", shape_string(shape)));
    const auto ud = static_cast<std::size_t>(d);
    if (ud != 0 && n > limit / ud) fail(name, fmt::format("shape {} is too large", shape_string(shape)));
    n *= ud;
  }
  return n;
}

void byteswap_in_place(std::span<std::byte> data, std::size_t elem) {
  if (elem == 1) return;
  for (std::size_t i = 0; i + elem <= data.size(); i += elem) std::reverse(data.begin() + i, data.begin() + i + elem);
}

// Fortran (column-major) to C (row-major) order: walk the C multi-index as an odometer, keeping the
// Fortran offset of the same element in step.
std::vector<std::byte> fortran_to_c(std::span<const std::byte> src, std::span<const std::int64_t> shape,
                                    std::size_t elem) {
  std::vector<std::byte> dst(src.size());
  const std::size_t nd = shape.size();
  const std::size_t count = elem ? src.size() / elem : 0;
  if (count == 0) return dst;
  std::vector<std::size_t> fstride(nd), idx(nd, 0);
  std::size_t s = 1;
  for (std::size_t k = 0; k < nd; ++k) {
    fstride[k] = s;
    s *= static_cast<std::size_t>(shape[k]);
  }
  std::size_t foff = 0;
  for (std::size_t c = 0; c < count; ++c) {
    std::memcpy(dst.data() + c * elem, src.data() + foff * elem, elem);
    for (std::size_t k = nd; k-- > 0;) {
      if (++idx[k] < static_cast<std::size_t>(shape[k])) {
        foff += fstride[k];
        break;
      }
      foff -= fstride[k] * (idx[k] - 1);
      idx[k] = 0;
    }
  }
  return dst;
}

template <class T>
std::vector<T> as_vector(const NpyArray& a) {
  std::vector<T> v(a.count());
  if (!v.empty()) std::memcpy(v.data(), a.data.data(), v.size() * sizeof(T));
  return v;
}

template <class Out>
std::vector<Out> convert(const NpyArray& a) {
  const std::size_t n = a.count();
  if (a.data.size() != n * dtype_size(a.dtype))
    throw Error(fmt::format("array of shape {} holds {} bytes, not {}", shape_string(a.shape), a.data.size(),
                            n * dtype_size(a.dtype)));
  auto cast_all = [&](auto tag) {
    using In = decltype(tag);
    auto in = as_vector<In>(a);
    return std::vector<Out>(in.begin(), in.end());
  };
  auto decode_all = [&](auto tag, const Format& f) {
    using In = decltype(tag);
    auto in = as_vector<In>(a);
    std::vector<float> out(n);
    decode_array(std::span<const In>(in), std::span<float>(out), f);
    if constexpr (std::is_same_v<Out, float>) return out;
    else return std::vector<Out>(out.begin(), out.end());
  };
  if (is_opaque(a.dtype)) throw FieldError("", "", "the array " + opaque_message(a.dtype), {"dtype"});
  if (const Format* f = bits_format(a.dtype)) {
    if (dtype_size(a.dtype) == 2) return decode_all(std::uint16_t{}, *f);
    return decode_all(std::uint8_t{}, *f);
  }
  switch (a.dtype) {
    case DType::f32: return cast_all(float{});
    case DType::f64: return cast_all(double{});
    case DType::u8: return cast_all(std::uint8_t{});
    case DType::u16: return cast_all(std::uint16_t{});
    case DType::u32: return cast_all(std::uint32_t{});
    case DType::i32: return cast_all(std::int32_t{});
    case DType::i64: return cast_all(std::int64_t{});
    default: break;
  }
  throw Error("unknown dtype");
}

template <class T>
NpyArray make(std::span<const T> values, std::vector<std::int64_t> shape, DType dtype) {
  const std::size_t n = checked_count(shape, sizeof(T), "make_npy");
  if (n != values.size())
    throw Error(
        fmt::format("make_npy: shape {} holds {} values, but {} were given", shape_string(shape), n, values.size()));
  NpyArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.resize(values.size_bytes());
  if (!values.empty()) std::memcpy(a.data.data(), values.data(), values.size_bytes());
  return a;
}

std::vector<std::int64_t> flat(std::size_t n) { return {static_cast<std::int64_t>(n)}; }

}  // namespace

// ---- dtypes ------------------------------------------------------------------------------------------

namespace {
// The dtypes that hold a format's encodings, by that format.
struct BitsDType {
  DType dtype;
  const Format& (*format)();
};
constexpr BitsDType kBitsDTypes[] = {
    {DType::f16, fp16},
    {DType::bf16_bits, bf16},
    {DType::fp8_e4m3_bits, fp8_e4m3},
    {DType::fp8_e5m2_bits, fp8_e5m2},
    {DType::fp8_e4m3fnuz_bits, fp8_e4m3fnuz},
    {DType::fp8_e5m2fnuz_bits, fp8_e5m2fnuz},
    {DType::float8_e4m3_bits, float8_e4m3},
    {DType::float8_e3m4_bits, float8_e3m4},
    {DType::float8_e4m3b11fnuz_bits, float8_e4m3b11fnuz},
    {DType::float8_e8m0fnu_bits, float8_e8m0fnu},
    {DType::float6_e2m3fn_bits, float6_e2m3fn},
    {DType::float6_e3m2fn_bits, float6_e3m2fn},
    {DType::float4_e2m1fn_bits, float4_e2m1fn},
};
}  // namespace

const Format* bits_format(DType t) {
  for (const auto& b : kBitsDTypes)
    if (b.dtype == t) return &b.format();
  return nullptr;
}

std::size_t dtype_size(DType t) {
  if (const Format* f = bits_format(t)) return static_cast<std::size_t>(f->storage_bytes());
  switch (t) {
    case DType::u8: return 1;
    case DType::u16: return 2;
    case DType::f32:
    case DType::u32:
    case DType::i32: return 4;
    case DType::f64:
    case DType::i64: return 8;
    case DType::void8: return 1;
    case DType::void16: return 2;
    case DType::void32: return 4;
    default: return 0;
  }
}

bool is_opaque(DType t) { return t == DType::void8 || t == DType::void16 || t == DType::void32; }

std::string opaque_message(DType t) {
  const char* example = t == DType::void8    ? "float8_e4m3fn, float8_e5m2, float4_e2m1fn, float8_e8m0fnu, ..."
                        : t == DType::void16 ? "bfloat16 or float16"
                                             : "float32 or uint32";
  return fmt::format(
      "holds '{}' elements (opaque {}-byte values: how np.save writes an ml_dtypes array); say "
      "which type they are with {{dtype}} ({})",
      t == DType::void8    ? "V1' or 'f1"
      : t == DType::void16 ? "V2"
                           : "V4",
      dtype_size(t), example);
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || bits_format(t) != nullptr; }

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f16: return "float16";
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::u8: return "uint8";
    case DType::u16: return "uint16";
    case DType::u32: return "uint32";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::bf16_bits: return "bfloat16";
    case DType::fp8_e4m3_bits: return "float8_e4m3fn";
    case DType::fp8_e5m2_bits: return "float8_e5m2";
    case DType::fp8_e4m3fnuz_bits: return "float8_e4m3fnuz";
    case DType::fp8_e5m2fnuz_bits: return "float8_e5m2fnuz";
    case DType::float8_e4m3_bits: return "float8_e4m3";
    case DType::float8_e3m4_bits: return "float8_e3m4";
    case DType::float8_e4m3b11fnuz_bits: return "float8_e4m3b11fnuz";
    case DType::float8_e8m0fnu_bits: return "float8_e8m0fnu";
    case DType::float6_e2m3fn_bits: return "float6_e2m3fn";
    case DType::float6_e3m2fn_bits: return "float6_e3m2fn";
    case DType::float4_e2m1fn_bits: return "float4_e2m1fn";
    case DType::void8: return "void8 (|V1)";
    case DType::void16: return "void16 (<V2)";
    case DType::void32: return "void32 (<V4)";
  }
  return "?";
}

namespace {

// numpy's names of the plain types and what np.dtype(name) makes of each (numpy 2 on x86-64 Linux, where C's long
// is 64 bits; tests/python/test_dtype_names.py checks every row against the numpy it runs with). `numpy` is the
// dtype's name in numpy; `t` the type mpsim reads it as, or none where mpsim has no such element type: then the
// name is refused, saying what numpy means by it, rather than read as something else (numpy's "u8" is uint64,
// not uint8; its "f16" float128, not float16).
struct NumpyName {
  std::string_view name;
  std::string_view numpy;
  std::optional<DType> t;
};
constexpr NumpyName kNumpyNames[] = {
    {"f2", "float16", DType::f16},
    {"e", "float16", DType::f16},
    {"half", "float16", DType::f16},
    {"float16", "float16", DType::f16},
    {"f4", "float32", DType::f32},
    {"f", "float32", DType::f32},
    {"single", "float32", DType::f32},
    {"float32", "float32", DType::f32},
    {"f8", "float64", DType::f64},
    {"d", "float64", DType::f64},
    {"double", "float64", DType::f64},
    {"float64", "float64", DType::f64},
    {"float", "float64", DType::f64},
    {"f16", "float128", {}},
    {"g", "float128", {}},
    {"longdouble", "float128", {}},
    {"float128", "float128", {}},
    {"u1", "uint8", DType::u8},
    {"B", "uint8", DType::u8},
    {"ubyte", "uint8", DType::u8},
    {"uint8", "uint8", DType::u8},
    {"u2", "uint16", DType::u16},
    {"H", "uint16", DType::u16},
    {"ushort", "uint16", DType::u16},
    {"uint16", "uint16", DType::u16},
    {"u4", "uint32", DType::u32},
    {"I", "uint32", DType::u32},
    {"uintc", "uint32", DType::u32},
    {"uint32", "uint32", DType::u32},
    {"u8", "uint64", {}},
    {"L", "uint64", {}},
    {"Q", "uint64", {}},
    {"ulong", "uint64", {}},
    {"ulonglong", "uint64", {}},
    {"uint", "uint64", {}},
    {"uint64", "uint64", {}},
    {"i1", "int8", {}},
    {"b", "int8", {}},
    {"byte", "int8", {}},
    {"int8", "int8", {}},
    {"i2", "int16", {}},
    {"h", "int16", {}},
    {"short", "int16", {}},
    {"int16", "int16", {}},
    {"i4", "int32", DType::i32},
    {"i", "int32", DType::i32},
    {"intc", "int32", DType::i32},
    {"int32", "int32", DType::i32},
    {"i8", "int64", DType::i64},
    {"l", "int64", DType::i64},
    {"q", "int64", DType::i64},
    {"long", "int64", DType::i64},
    {"longlong", "int64", DType::i64},
    {"int", "int64", DType::i64},
    {"int64", "int64", DType::i64},
    {"?", "bool", {}},
    {"b1", "bool", {}},
    {"bool", "bool", {}},
    {"c8", "complex64", {}},
    {"F", "complex64", {}},
    {"complex64", "complex64", {}},
    {"c16", "complex128", {}},
    {"D", "complex128", {}},
    {"complex128", "complex128", {}},
    {"complex", "complex128", {}},
};

// mpsim's own short names, which numpy does not know (np.dtype refuses each): bits, not numpy's bytes.
constexpr std::pair<std::string_view, DType> kOwnNames[] = {
    {"f32", DType::f32}, {"fp32", DType::f32}, {"f64", DType::f64}, {"fp64", DType::f64},
    {"u16", DType::u16}, {"u32", DType::u32},  {"i32", DType::i32}, {"i64", DType::i64},
};

constexpr std::string_view kReadable = "float16, float32, float64, uint8, uint16, uint32, int32, int64";

}  // namespace

DType parse_dtype(std::string_view s, std::string_view what) {
  // numpy's byte-order prefixes: '<' little-endian, '=' native (little here), '|' not applicable.
  std::string_view name = s;
  if (name.size() > 1 && (name[0] == '<' || name[0] == '=' || name[0] == '|' || name[0] == '>')) {
    if (name[0] == '>')
      throw Error(
          fmt::format("{}: '{}' is big-endian; raw data is read little-endian (write it with '<' or "
                      "byteswap it first)",
                      what, s));
    name.remove_prefix(1);
  }
  for (const auto& n : kNumpyNames) {
    if (n.name != name) continue;
    if (n.t) return *n.t;
    throw Error(
        fmt::format("{}: '{}' is numpy's {}, which mpsim does not read (it reads {}, and the low-precision "
                    "formats' bits)",
                    what, s, n.numpy, kReadable));
  }
  for (const auto& [own, t] : kOwnNames)
    if (own == name) return t;
  std::optional<Format> f;
  try {
    f = parse_format(name);
  } catch (const Error&) {}
  if (f)
    for (const auto& b : kBitsDTypes)
      if (b.format() == *f) return b.dtype;
  std::string known(kReadable);
  for (const auto& b : kBitsDTypes) known += ", " + std::string(b.format().name);
  throw Error(
      fmt::format("{}: unknown dtype '{}' (known: {}, and their other names in `mpsim formats`)", what, s, known));
}

std::string npy_descr(DType t) {
  switch (t) {
    case DType::f16: return "<f2";
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::u8: return "|u1";
    case DType::u16: return "<u2";
    case DType::u32: return "<u4";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::void8: return "|V1";
    case DType::void16: return "<V2";
    case DType::void32: return "<V4";
    default: break;
  }
  // The encodings of a format: unsigned integers of its storage width.
  if (const Format* f = bits_format(t)) return f->storage_bytes() == 1 ? "|u1" : "<u2";
  return "?";
}

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::size_t NpyArray::count() const {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

// ---- reading -------------------------------------------------------------------------------------------

NpyHeader parse_npy_header(std::span<const std::byte> file, std::string_view name, std::size_t file_size) {
  auto u8 = [&](std::size_t i) { return static_cast<unsigned char>(file[i]); };
  if (file.size() < 8) fail(name, fmt::format("not a .npy file (only {} bytes, shorter than the magic)", file.size()));
  if (std::memcmp(file.data(), kMagic, 6) != 0) fail(name, "not a .npy file (bad magic: expected \\x93NUMPY)");
  NpyHeader h;
  h.major = u8(6);
  h.minor = u8(7);
  std::size_t len_bytes;
  if (h.major == 1) len_bytes = 2;
  else if (h.major == 2 || h.major == 3) len_bytes = 4;
  else fail(name, fmt::format("unsupported .npy format version {}.{} (known: 1.0, 2.0, 3.0)", h.major, h.minor));
  if (h.minor != 0)
    fail(name, fmt::format("unsupported .npy format version {}.{} (known: 1.0, 2.0, 3.0)", h.major, h.minor));
  if (file.size() < 8 + len_bytes) fail(name, "truncated .npy file (ends inside the header length)");
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) header_len |= std::size_t{u8(8 + i)} << (8 * i);
  if (header_len > kMaxHeader)
    fail(name, fmt::format("malformed .npy header (header length {} bytes is implausibly large)", header_len));
  const std::size_t start = 8 + len_bytes;
  if (file.size() < start + header_len)
    fail(name, fmt::format("truncated .npy file (header says {} header bytes, only {} present)", header_len,
                           file.size() - start));
  h.data_offset = start + header_len;

  // Version 1.0 and 2.0 headers are latin1, 3.0 is utf8; the keys and values we accept are ASCII anyway.
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + start, header_len);
  DictParser p(text, name);
  p.expect('{', "at the start of the header");
  bool have_descr = false, have_order = false, have_shape = false;
  std::string descr;
  while (!p.eat('}')) {
    const std::string key = p.string_literal();
    p.expect(':', "after a key");
    if (key == "descr") {
      if (have_descr) p.bad("duplicate key 'descr'");
      have_descr = true;
      if (p.peek() == '[') fail(name, "unsupported dtype (structured arrays are not supported)");
      descr = p.string_literal();
    } else if (key == "fortran_order") {
      if (have_order) p.bad("duplicate key 'fortran_order'");
      have_order = true;
      const std::string w = p.word();
      if (w == "True") h.fortran_order = true;
      else if (w == "False") h.fortran_order = false;
      else p.bad("fortran_order must be True or False");
    } else if (key == "shape") {
      if (have_shape) p.bad("duplicate key 'shape'");
      have_shape = true;
      p.expect('(', "to open the shape tuple");
      bool need_sep = false;
      while (!p.eat(')')) {
        if (need_sep) p.expect(',', "between shape dimensions");
        if (p.eat(')')) break;  // trailing comma, as in (3,)
        h.shape.push_back(p.integer());
        if (h.shape.size() > 64) p.bad("more than 64 dimensions");
        need_sep = true;
      }
    } else {
      p.bad(fmt::format("unexpected key '{}'", key));
    }
    if (!p.eat(',')) {
      p.expect('}', "to close the header");
      break;
    }
  }
  if (!p.at_end()) p.bad("trailing characters after the dict");
  if (!have_descr || !have_order || !have_shape)
    p.bad(fmt::format("missing key '{}'", !have_descr ? "descr" : !have_order ? "fortran_order" : "shape"));

  const DescrInfo d = parse_descr(descr, name);
  h.dtype = d.dtype;
  h.big_endian = d.big_endian;
  const std::size_t elem = dtype_size(h.dtype);
  h.count = checked_count(h.shape, elem, name);
  h.data_bytes = h.count * elem;
  const std::size_t have = file_size - std::min(file_size, h.data_offset);
  if (file_size < h.data_offset || have != h.data_bytes)
    fail(name, fmt::format("header says shape {} of {} ({} values, {} bytes) but the file holds {} bytes of data",
                           shape_string(h.shape), to_string(h.dtype), h.count, h.data_bytes, have));
  return h;
}

NpyArray parse_npy(std::span<const std::byte> file, std::string_view name) {
  const NpyHeader h = parse_npy_header(file, name, file.size());
  NpyArray a;
  a.dtype = h.dtype;
  a.shape = h.shape;
  const auto data = file.subspan(h.data_offset, h.data_bytes);
  const std::size_t elem = dtype_size(h.dtype);
  if (h.fortran_order && h.shape.size() > 1) a.data = fortran_to_c(data, h.shape, elem);
  else a.data.assign(data.begin(), data.end());
  if (h.big_endian) byteswap_in_place(a.data, elem);
  return a;
}

NpyArray read_npy(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(name, "is a directory, not a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(name, fmt::format("cannot open: {}", std::strerror(errno)));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) fail(name, "cannot determine the file size (not a regular file?)");
  in.seekg(0);
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) fail(name, "read failed");
  return parse_npy(bytes, name);
}

// ---- writing -------------------------------------------------------------------------------------------

std::vector<std::byte> npy_header_bytes(DType dtype, std::span<const std::int64_t> shape) {
  checked_count(shape, dtype_size(dtype), "write_npy");
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npy_descr(dtype), shape_string(shape));
  // Version 1.0 while the header length fits in uint16, else 2.0 (numpy/lib/format.py _wrap_header).
  int major = 1;
  std::size_t prefix = 10;
  if (dict.size() + 1 + prefix + kAlign > 65535) {
    major = 2;
    prefix = 12;
  }
  const std::size_t total = (prefix + dict.size() + 1 + kAlign - 1) / kAlign * kAlign;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::vector<std::byte> out(total);
  std::memcpy(out.data(), kMagic, 6);
  out[6] = std::byte(major);
  out[7] = std::byte(0);
  const std::size_t hl = dict.size();
  for (std::size_t i = 0; i < prefix - 8; ++i) out[8 + i] = std::byte((hl >> (8 * i)) & 0xff);
  std::memcpy(out.data() + prefix, dict.data(), dict.size());
  return out;
}

std::vector<std::byte> npy_bytes(const NpyArray& a) {
  const std::size_t n = checked_count(a.shape, dtype_size(a.dtype), "write_npy");
  if (a.data.size() != n * dtype_size(a.dtype))
    throw Error(fmt::format("write_npy: shape {} of {} needs {} bytes, the array holds {}", shape_string(a.shape),
                            to_string(a.dtype), n * dtype_size(a.dtype), a.data.size()));
  std::vector<std::byte> out = npy_header_bytes(a.dtype, a.shape);
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

void write_npy(const std::filesystem::path& path, const NpyArray& a) {
  const auto bytes = npy_bytes(a);
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

// ---- conversions ---------------------------------------------------------------------------------------

std::vector<float> to_float(const NpyArray& a) { return convert<float>(a); }
std::vector<double> to_double(const NpyArray& a) { return convert<double>(a); }

NpyArray reinterpret(NpyArray a, DType as, std::string_view name) {
  if (dtype_size(a.dtype) != dtype_size(as))
    fail(name, fmt::format("cannot read {} as {}: elements are {} bytes, {} needs {}", to_string(a.dtype),
                           to_string(as), dtype_size(a.dtype), to_string(as), dtype_size(as)));
  a.dtype = as;
  return a;
}

NpyArray make_npy(std::span<const float> v, std::vector<std::int64_t> shape) {
  return make(v, std::move(shape), DType::f32);
}
NpyArray make_npy(std::span<const double> v, std::vector<std::int64_t> shape) {
  return make(v, std::move(shape), DType::f64);
}
NpyArray make_npy(std::span<const std::uint16_t> v, std::vector<std::int64_t> shape, DType dtype) {
  if (dtype_size(dtype) != 2) throw Error(fmt::format("make_npy: uint16 values cannot be {}", to_string(dtype)));
  return make(v, std::move(shape), dtype);
}
NpyArray make_npy(std::span<const std::uint8_t> v, std::vector<std::int64_t> shape, DType dtype) {
  if (dtype_size(dtype) != 1) throw Error(fmt::format("make_npy: uint8 values cannot be {}", to_string(dtype)));
  return make(v, std::move(shape), dtype);
}
NpyArray make_npy(std::span<const std::uint32_t> v, std::vector<std::int64_t> shape) {
  return make(v, std::move(shape), DType::u32);
}
NpyArray make_npy(std::span<const float> v) { return make_npy(v, flat(v.size())); }
NpyArray make_npy(std::span<const double> v) { return make_npy(v, flat(v.size())); }
NpyArray make_npy(std::span<const std::uint16_t> v, DType dtype) { return make_npy(v, flat(v.size()), dtype); }
NpyArray make_npy(std::span<const std::uint8_t> v, DType dtype) { return make_npy(v, flat(v.size()), dtype); }
NpyArray make_npy(std::span<const std::uint32_t> v) { return make_npy(v, flat(v.size())); }

}  // namespace mpsim::io
