// NumPy .npy arrays: reading (format versions 1.0, 2.0 and 3.0) and writing (version 1.0, or 2.0 when
// the header does not fit in 64 KiB), as specified in numpy/lib/format.py ("NPY format" NEP 1):
//   6 bytes magic "\x93NUMPY", 1 byte major, 1 byte minor, header length (uint16 LE in 1.0,
//   uint32 LE in 2.0/3.0), then a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': ...}
//   padded with spaces and ending in '\n', then the raw data.
//
// Arrays are held in memory as little-endian C order: big-endian files are byte-swapped and
// Fortran-order files transposed when read. Anything else (structured or object dtypes, complex,
// strings, a header that does not parse, data shorter or longer than the shape says) is an
// mpsim::Error naming the file and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpsim/format/format.hpp"

namespace mpsim::io {

// Element types. The *_bits types are unsigned integers holding the encodings of a low-precision format
// (bf16 in uint16, the 8-, 6- and 4-bit types in the low bits of a uint8, as ml_dtypes stores them): in a
// .npy file they are stored as '<u2' / '|u1', and a reader learns that they are bits only from the user
// (`--dtype bf16`), see reinterpret().
enum class DType : std::uint8_t {
  f16,
  f32,
  f64,
  u8,
  u16,
  u32,
  i32,
  i64,
  bf16_bits,
  fp8_e4m3_bits,
  fp8_e5m2_bits,
  fp8_e4m3fnuz_bits,
  fp8_e5m2fnuz_bits,
  float8_e4m3_bits,
  float8_e3m4_bits,
  float8_e4m3b11fnuz_bits,
  float8_e8m0fnu_bits,
  float6_e2m3fn_bits,
  float6_e3m2fn_bits,
  float4_e2m1fn_bits,
  // Opaque elements of 1, 2 or 4 bytes: numpy's void dtype ('|V1', '<V2', '<V4'), which is how np.save writes
  // an ml_dtypes array (bfloat16, float8_*, ...). Readable only as a type of the same width named by the
  // user (`--dtype float8_e4m3fn`, see reinterpret()); otherwise an error says so.
  void8,
  void16,
  void32,
};

std::size_t dtype_size(DType);
bool is_float(DType);   // f16, f32, f64 and the *_bits formats: values with a binade
bool is_opaque(DType);  // void8 / void16 / void32
// The error text for opaque elements without a type: names the header and the fix ({dtype}: a FieldError's mark).
std::string opaque_message(DType);
// The format whose encodings a *_bits dtype (or f16) holds; nullptr for the others.
const Format* bits_format(DType);
// Names: "float16", "float32", "float64", "uint8", "uint16", "uint32", "int32", "int64", and for the
// *_bits types the format's ml_dtypes name ("bfloat16", "float8_e4m3fn", "float8_e8m0fnu", ...).
std::string_view to_string(DType);
// Accepts the names above, every name numpy's np.dtype() takes for these types, meaning what it means there
// ("f2", "e", "half"; "f8" and "float" are float64; "u1"; "i8" int64; with a '<', '=' or '|' prefix), ours
// that numpy does not know ("f32", "f64", "fp32", "fp64", "u16", "u32", "i32", "i64"), and every name the
// format table takes (format.hpp, parse_format) for a format of at most 16 bits: "bf16", "fp8_e4m3", "float8_e4m3",
// "fp4_e2m1", ... A name means the same format as under
// --format: "e4m3" is the IEEE-style float8_e4m3. A numpy name of a type mpsim does not read ("u8": uint64,
// "f16": float128, "i1", "bool", ...) or a big-endian one is refused. Throws mpsim::Error naming `what`.
DType parse_dtype(std::string_view name, std::string_view what = "dtype");
// The descr a .npy file of this dtype carries ("<f4", "|u1", ...; bf16 bits are "<u2").
std::string npy_descr(DType);

struct NpyArray {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;  // empty: a 0-d array holding one value
  std::vector<std::byte> data;      // count() * dtype_size(dtype) bytes, little-endian, C order

  std::size_t count() const;
};

// What the header of a .npy file says, and where its data starts.
struct NpyHeader {
  int major = 1, minor = 0;
  DType dtype = DType::f32;
  bool big_endian = false;  // the data needs a byte swap to become little-endian
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
  std::size_t data_offset = 0;  // bytes from the start of the file to the data
  std::size_t count = 0;        // product of the shape
  std::size_t data_bytes = 0;   // count * element size
};

// Parses the header at the start of `file` (the whole file or at least its header) and checks that the
// file holds exactly data_bytes after it when `file_size` is given (pass the whole file's size; a
// file shorter or longer than the header says is an error). `name` names the input in messages.
NpyHeader parse_npy_header(std::span<const std::byte> file, std::string_view name, std::size_t file_size);

// Reads a whole .npy file (throws mpsim::Error naming the file).
NpyArray read_npy(const std::filesystem::path& path);
// The same from bytes already in memory (an .npz member); `name` names it in messages.
NpyArray parse_npy(std::span<const std::byte> file, std::string_view name);

// Writes atomically (temp + rename): version 1.0 ('<' descr, C order).
void write_npy(const std::filesystem::path& path, const NpyArray& array);
// The bytes of the .npy file write_npy writes.
std::vector<std::byte> npy_bytes(const NpyArray& array);
// The header alone (magic, version, dict, padding to 64 bytes), for writers that stream the data after it.
std::vector<std::byte> npy_header_bytes(DType dtype, std::span<const std::int64_t> shape);
// The bytes of an .npz archive (stored, as numpy.savez writes) holding each array as member NAME.npy.
std::vector<std::byte> npz_bytes(const std::vector<std::pair<std::string, NpyArray>>& members);

// The values as float / double. Float formats decode exactly (to_float of f64 rounds to nearest);
// integers convert with static_cast. to_float/to_double of *_bits arrays decode the encodings.
std::vector<float> to_float(const NpyArray& array);
std::vector<double> to_double(const NpyArray& array);

// Reinterprets an integer array as the bits of a format: u16 -> bf16_bits (or f16), u8 -> fp8_*_bits.
// Throws mpsim::Error (naming `name`) if the element sizes differ.
NpyArray reinterpret(NpyArray array, DType as, std::string_view name = "array");

// Arrays from values. Without a shape the array is 1-d; a shape must hold exactly values.size()
// elements (otherwise mpsim::Error). The uint16 / uint8 overloads take the dtype to record
// (u16, f16, bf16_bits / u8, fp8_e4m3_bits, fp8_e5m2_bits).
NpyArray make_npy(std::span<const float> values, std::vector<std::int64_t> shape);
NpyArray make_npy(std::span<const double> values, std::vector<std::int64_t> shape);
NpyArray make_npy(std::span<const std::uint16_t> values, std::vector<std::int64_t> shape, DType dtype = DType::u16);
NpyArray make_npy(std::span<const std::uint8_t> values, std::vector<std::int64_t> shape, DType dtype = DType::u8);
NpyArray make_npy(std::span<const std::uint32_t> values, std::vector<std::int64_t> shape);
NpyArray make_npy(std::span<const float> values);
NpyArray make_npy(std::span<const double> values);
NpyArray make_npy(std::span<const std::uint16_t> values, DType dtype = DType::u16);
NpyArray make_npy(std::span<const std::uint8_t> values, DType dtype = DType::u8);
NpyArray make_npy(std::span<const std::uint32_t> values);

// "(3, 4)", "(5,)", "()": a shape as NumPy prints it, for messages and headers.
std::string shape_string(std::span<const std::int64_t> shape);

}  // namespace mpsim::io
