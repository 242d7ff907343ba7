// Tensor input for the analysis commands (issue 5): every tensor of a .npy, .npz, safetensors or raw
// file, listed by name, dtype and shape, and streamed in chunks from a memory map so that a file larger
// than memory is analysed in bounded resident memory (pages already visited are released as the
// stream moves on).
//
//   auto src = io::TensorSource::open("grads.npz", {});
//   for (const io::TensorRef& t : src.tensors())
//     src.for_each_chunk(t, 1 << 20, [&](std::span<const float> v, std::uint64_t offset) { ... });
//
// Formats:
//  * .npy (see npy.hpp): big-endian data is swapped per chunk; Fortran-order arrays of more than one
//    dimension are transposed, which holds that one tensor in memory.
//  * .npz: a zip of .npy members (stored, or deflate via zlib; zip64 sizes and offsets understood),
//    each named by its member name without ".npy", as numpy.load names them. Deflated members are
//    inflated as they stream and their CRC-32 is checked at the end.
//  * safetensors: 8-byte little-endian header size, a JSON header {"name": {"dtype", "shape",
//    "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data
//    (https://github.com/huggingface/safetensors, README "Format"). Dtypes F64, F32, F16, BF16,
//    F8_E4M3, F8_E5M2 and the integers I32, I64, U8, U16, U32.
//  * raw: headerless little-endian C-order data; SourceOptions::dtype says the element type and
//    SourceOptions::shape the shape (without a shape: 1-d, as many elements as the file holds).
// The kind is recognised by the file's first bytes (magic), not its name; a file with no known magic
// is read as raw when a dtype is given.
//
// Every problem is an mpsim::Error naming the file (and the tensor / zip member) and what is wrong:
// truncated data, wrong magic, a shape that disagrees with the data size, an unsupported dtype, a zip
// member that is not an array, duplicate names, a malformed or absurdly large JSON header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mpsim/io/npy.hpp"

namespace mpsim::io {

enum class FileKind : std::uint8_t { npy, npz, safetensors, raw };
std::string_view to_string(FileKind);

struct SourceOptions {
  // Raw files: the element type (required for raw). For .npy/.npz/safetensors: integer tensors of the
  // same element size are read as this type instead (uint16 as bf16 or fp16 bits, uint8 as fp8 bits,
  // `--dtype bf16`); a single-tensor file whose tensor cannot be read so is an error.
  std::optional<DType> dtype;
  // Raw files: the shape; its element count must match the file size exactly.
  std::optional<std::vector<std::int64_t>> shape;
  // Read as raw whatever the first bytes are (needs dtype).
  bool force_raw = false;
};

struct TensorRef {
  std::string file;                 // the path as opened
  std::string name;                 // name inside the file: "" for .npy and raw files
  std::string label;                // how reports name it: "file" or "file:name"
  DType dtype = DType::f32;         // how the values are read (after SourceOptions::dtype)
  DType stored = DType::f32;        // as the file stores it
  std::vector<std::int64_t> shape;  // empty for a 0-d array (one value)
  std::uint64_t count = 0;          // number of elements

  // ---- where the data lies (used by TensorSource) ----
  std::uint64_t data_offset = 0;  // bytes from the start of the file (npz: of the member's data)
  std::uint64_t data_bytes = 0;   // count * element size (npz deflate: the compressed size)
  std::uint64_t npy_offset = 0;   // npz: the offset of the .npy data inside the member
  bool big_endian = false;
  bool fortran_order = false;
  bool deflated = false;          // npz member compressed with deflate
  std::uint32_t crc32 = 0;        // npz: the member's CRC-32 from the central directory
  std::uint64_t member_size = 0;  // npz: the uncompressed size of the member
};

// Element order is the tensor's C order; `offset` is the index of the chunk's first element.
using FloatChunk = std::function<void(std::span<const float> values, std::uint64_t offset)>;
using DoubleChunk = std::function<void(std::span<const double> values, std::uint64_t offset)>;

class MappedFile;

class TensorSource {
 public:
  // Opens the file, recognises its kind and reads the directory of tensors (not the data).
  // Throws mpsim::Error naming the file (and tensor) on anything malformed.
  static TensorSource open(const std::filesystem::path& path, const SourceOptions& options = {});
  // The same over bytes in memory (for the fuzz targets and tests); `name` names it in messages.
  static TensorSource from_bytes(std::vector<std::byte> bytes, std::string name, const SourceOptions& options = {});

  TensorSource(TensorSource&&) noexcept;
  TensorSource& operator=(TensorSource&&) noexcept;
  ~TensorSource();

  FileKind kind() const { return kind_; }
  const std::string& file() const { return file_; }
  const std::vector<TensorRef>& tensors() const { return tensors_; }
  // The tensor of that name (throws mpsim::Error naming the file and the name if there is none).
  const TensorRef& tensor(std::string_view name) const;

  // Streams the tensor's values in chunks of at most `chunk` elements (0: a default of 2^20).
  // float: every float dtype decodes exactly except f64, which rounds to nearest float; use the
  // double variant for f64 tensors (it is exact for every dtype). Integers are converted by value.
  // Throws mpsim::Error naming the file and tensor on a read error (a corrupt deflate stream, a bad CRC).
  void for_each_chunk(const TensorRef& t, std::size_t chunk, const FloatChunk& fn) const;
  void for_each_chunk_double(const TensorRef& t, std::size_t chunk, const DoubleChunk& fn) const;
  // Elements [offset, offset + count) of the tensor as double (exact for every dtype), into `out`
  // (resized to count); the mapped pages before the range's end are released from this process, so
  // reading a tensor front to back in ranges keeps resident memory bounded. For reading several
  // tensors in step (element-wise commands). Deflated npz members and Fortran-order arrays cannot be
  // read by range: mpsim::Error naming the tensor; so is a range past the end.
  void read_range_double(const TensorRef& t, std::uint64_t offset, std::size_t count, std::vector<double>& out) const;
  // The whole tensor in memory.
  std::vector<float> read_float(const TensorRef& t) const;
  std::vector<double> read_double(const TensorRef& t) const;

 private:
  TensorSource() = default;
  void scan(const SourceOptions& options);
  template <class T, class Fn>
  void stream(const TensorRef& t, std::size_t chunk, const Fn& fn) const;

  FileKind kind_ = FileKind::raw;
  std::string file_;
  std::unique_ptr<MappedFile> map_;
  std::vector<TensorRef> tensors_;
};

}  // namespace mpsim::io
