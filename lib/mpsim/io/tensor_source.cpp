#include "mpsim/io/tensor_source.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/io/detail/safetensors_reader.hpp"
#include "mpsim/io/detail/tensor_reader.hpp"
#include "mpsim/io/detail/zip_reader.hpp"
#include "mpsim/io/names.hpp"

namespace mpsim::io {

using namespace detail;

// ---- the bytes of a file: a read-only memory map, or a vector (from_bytes) ----------------------------
class MappedFile {
 public:
  explicit MappedFile(std::vector<std::byte> bytes) : owned_(std::move(bytes)) {
    data_ = owned_.data();
    size_ = owned_.size();
  }
  explicit MappedFile(const std::string& name) {
    // O_NONBLOCK: a FIFO with no writer would block open() forever; here it opens, and is refused below.
    const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      const char* kind = S_ISFIFO(st.st_mode)   ? "a pipe (FIFO)"
                         : S_ISCHR(st.st_mode)  ? "a character device"
                         : S_ISSOCK(st.st_mode) ? "a socket"
                                                : "not a regular file";
      throw Error(
          fmt::format("{}: is {}; tensor inputs are mapped into memory and must be regular files (save the "
                      "array to a file first)",
                      name, kind));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw Error(fmt::format("{}: cannot map: {}", name, std::strerror(err)));
      }
      ::madvise(p, size_, MADV_SEQUENTIAL);
      data_ = static_cast<const std::byte*>(p);
      mapped_ = true;
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (mapped_) ::munmap(const_cast<std::byte*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  // Drops the pages of [begin, end) from this process (they stay in the page cache), so a stream
  // through a large file keeps its resident memory bounded.
  void release(std::size_t begin, std::size_t end) const {
    if (!mapped_) return;
    static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t b = (begin + page - 1) / page * page, e = std::min(end, size_) / page * page;
    if (e > b) ::madvise(const_cast<std::byte*>(data_) + b, e - b, MADV_DONTNEED);
  }

 private:
  std::vector<std::byte> owned_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
};

namespace {

// Release mapped pages behind a stream every this many bytes.
constexpr std::size_t kReleaseEvery = std::size_t{32} << 20;

void byteswap(std::span<std::byte> data, std::size_t elem) {
  if (elem == 1) return;
  for (std::size_t i = 0; i + elem <= data.size(); i += elem) std::reverse(data.begin() + i, data.begin() + i + elem);
}

template <class In, class T>
void cast_into(const std::byte* raw, std::size_t n, std::vector<T>& out) {
  for (std::size_t i = 0; i < n; ++i) {
    In v;
    std::memcpy(&v, raw + i * sizeof(In), sizeof(In));
    out[i] = static_cast<T>(v);
  }
}

// Converts n little-endian elements of dtype dt at raw into out (resized to n).
template <class T>
void convert(const std::byte* raw, std::size_t n, DType dt, std::vector<T>& out, std::vector<float>& tmp) {
  out.resize(n);
  if (const Format* f = bits_format(dt)) {
    std::vector<float>& dst = [&]() -> std::vector<float>& {
      if constexpr (std::is_same_v<T, float>) return out;
      else return tmp;
    }();
    dst.resize(n);
    if (dtype_size(dt) == 2) {
      std::vector<std::uint16_t> u(n);
      if (n) std::memcpy(u.data(), raw, n * 2);
      decode_array(std::span<const std::uint16_t>(u), std::span<float>(dst), *f);
    } else {
      decode_array(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(raw), n), std::span<float>(dst),
                   *f);
    }
    if constexpr (!std::is_same_v<T, float>) std::copy(dst.begin(), dst.end(), out.begin());
    return;
  }
  switch (dt) {
    case DType::f32:
      if constexpr (std::is_same_v<T, float>) {
        if (n) std::memcpy(out.data(), raw, n * 4);
      } else {
        cast_into<float>(raw, n, out);
      }
      return;
    case DType::f64:
      if constexpr (std::is_same_v<T, double>) {
        if (n) std::memcpy(out.data(), raw, n * 8);
      } else {
        cast_into<double>(raw, n, out);
      }
      return;
    case DType::u8: cast_into<std::uint8_t>(raw, n, out); return;
    case DType::u16: cast_into<std::uint16_t>(raw, n, out); return;
    case DType::u32: cast_into<std::uint32_t>(raw, n, out); return;
    case DType::i32: cast_into<std::int32_t>(raw, n, out); return;
    case DType::i64: cast_into<std::int64_t>(raw, n, out); return;
    default: fail("unsupported dtype in convert");
  }
}

}  // namespace

namespace detail {

[[noreturn]] void fail(const std::string& what) { throw Error(what); }
[[noreturn]] void fail_advising_dtype(const std::string& what) { throw FieldError("", "", what, {"dtype"}); }

std::uint64_t le(std::span<const std::byte> b, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

bool is_integer(DType t) { return !is_float(t) && !is_opaque(t); }

std::string label_of(const std::string& file, const std::string& name) {
  return name.empty() ? file : file + ":" + name;
}

// The dtype a stored tensor is read as under the override.
DType effective(DType stored, const SourceOptions& o, bool single, const std::string& label) {
  if (is_opaque(stored) && (!o.dtype || dtype_size(*o.dtype) != dtype_size(stored))) {
    if (o.dtype)
      fail_advising_dtype(fmt::format("{}: {}; {} is {} bytes wide", label, opaque_message(stored), to_string(*o.dtype),
                                      dtype_size(*o.dtype)));
    fail_advising_dtype(fmt::format("{}: {}", label, opaque_message(stored)));
  }
  if (!o.dtype || *o.dtype == stored) return stored;
  const DType want = *o.dtype;
  if ((is_integer(stored) || is_opaque(stored)) && dtype_size(stored) == dtype_size(want)) return want;
  if (single)
    fail(
        fmt::format("{}: holds {}, which cannot be read as {} (a dtype override applies to integer arrays of the "
                    "same element size)",
                    label, to_string(stored), to_string(want)));
  return stored;
}

std::uint64_t checked_count(const std::vector<std::int64_t>& shape, std::size_t elem, const std::string& label) {
  std::uint64_t n = 1;
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() / elem;
  for (auto d : shape) {
    if (d < 0) fail(fmt::format("{}: negative dimension in shape {}", label, shape_string(shape)));
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && n > limit / ud) fail(fmt::format("{}: shape {} is too large", label, shape_string(shape)));
    n *= ud;
  }
  return n;
}

// A tensor described by a .npy header (a .npy file, or an .npz member with name).
TensorRef npy_tensor(const NpyHeader& h, const std::string& file, const std::string& name, const SourceOptions& o) {
  TensorRef t;
  t.file = file;
  t.name = name;
  t.label = label_of(file, name);
  t.stored = h.dtype;
  t.dtype = effective(h.dtype, o, name.empty(), t.label);
  t.shape = h.shape;
  t.count = h.count;
  t.data_offset = h.data_offset;
  t.data_bytes = h.data_bytes;
  t.big_endian = h.big_endian;
  t.fortran_order = h.fortran_order && h.shape.size() > 1;
  return t;
}

}  // namespace detail

std::string_view to_string(FileKind k) {
  switch (k) {
    case FileKind::npy: return "npy";
    case FileKind::npz: return "npz";
    case FileKind::safetensors: return "safetensors";
    case FileKind::raw: return "raw";
  }
  return "?";
}

TensorSource::TensorSource(TensorSource&&) noexcept = default;
TensorSource& TensorSource::operator=(TensorSource&&) noexcept = default;
TensorSource::~TensorSource() = default;

TensorSource TensorSource::open(const std::filesystem::path& path, const SourceOptions& options) {
  TensorSource s;
  s.file_ = path.string();
  require_utf8_name(s.file_, "input file");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(s.file_ + ": is a directory, not a tensor file");
  s.map_ = std::make_unique<MappedFile>(s.file_);
  s.scan(options);
  return s;
}

TensorSource TensorSource::from_bytes(std::vector<std::byte> bytes, std::string name, const SourceOptions& options) {
  TensorSource s;
  s.file_ = std::move(name);
  s.map_ = std::make_unique<MappedFile>(std::move(bytes));
  s.scan(options);
  return s;
}

namespace {

// ---- one reader per file kind: the directory of tensors (not the data) -------------------------------------

// The kind of a file, by its first bytes.
FileKind detect_kind(std::span<const std::byte> b, const SourceOptions& o, const std::string& file) {
  auto starts_with = [&](std::string_view m) {
    return b.size() >= m.size() && std::memcmp(b.data(), m.data(), m.size()) == 0;
  };
  if (o.force_raw) return FileKind::raw;
  if (starts_with("\x93NUMPY")) return FileKind::npy;
  if (starts_with("PK\x03\x04") || starts_with("PK\x05\x06")) return FileKind::npz;
  // safetensors has no magic: its JSON header opens with '{' right after the 8-byte length. With a dtype
  // given, a raw file whose ninth byte happens to be '{' is told apart by an impossible length.
  if (b.size() >= 9 && static_cast<char>(b[8]) == '{' && (!o.dtype || le(b, 0, 8) <= b.size() - 8))
    return FileKind::safetensors;
  if (o.dtype) return FileKind::raw;
  fail_advising_dtype(
      fmt::format("{}: not a .npy, .npz or safetensors file (unknown magic); pass {{dtype}} to read it as raw "
                  "data (a 1-D array)",
                  file));
}

std::vector<TensorRef> read_npy_directory(std::span<const std::byte> b, const std::string& file,
                                          const SourceOptions& o) {
  return {npy_tensor(parse_npy_header(b, file, b.size()), file, "", o)};
}

std::vector<TensorRef> read_raw_directory(std::span<const std::byte> b, const std::string& file,
                                          const SourceOptions& o) {
  if (!o.dtype) fail_advising_dtype(file + ": raw data needs a dtype ({dtype})");
  const std::size_t elem = dtype_size(*o.dtype);
  TensorRef t;
  t.file = file;
  t.label = file;
  t.dtype = t.stored = *o.dtype;
  if (o.shape) {
    t.shape = *o.shape;
    t.count = checked_count(t.shape, elem, file);
    if (t.count * elem != b.size())
      fail(fmt::format("{}: shape {} of {} needs {} bytes but the file holds {}", file, shape_string(t.shape),
                       to_string(t.dtype), t.count * elem, b.size()));
  } else {
    if (b.size() % elem != 0)
      fail(fmt::format("{}: {} bytes is not a whole number of {} values ({} bytes each)", file, b.size(),
                       to_string(t.dtype), elem));
    t.count = b.size() / elem;
    t.shape = {static_cast<std::int64_t>(t.count)};
  }
  t.data_offset = 0;
  t.data_bytes = t.count * elem;
  return {std::move(t)};
}

}  // namespace

const TensorRef& TensorSource::tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  fail(fmt::format("{}: no tensor named '{}'", file_, name));
}

void TensorSource::scan(const SourceOptions& o) {
  const auto b = map_->bytes();
  kind_ = detect_kind(b, o, file_);
  switch (kind_) {
    case FileKind::npy: tensors_ = read_npy_directory(b, file_, o); break;
    case FileKind::raw: tensors_ = read_raw_directory(b, file_, o); break;
    case FileKind::safetensors: tensors_ = read_safetensors_directory(b, file_, o); break;
    case FileKind::npz: tensors_ = read_npz_directory(b, file_, o); break;
  }
}

template <class T, class Fn>
void TensorSource::stream(const TensorRef& t, std::size_t chunk, const Fn& fn) const {
  if (chunk == 0) chunk = std::size_t{1} << 20;
  const std::size_t elem = dtype_size(t.stored);
  const auto b = map_->bytes();
  std::vector<T> out;
  std::vector<float> tmp;
  auto emit_all = [&](const std::byte* data, std::size_t count) {
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = std::min(chunk, count - done);
      convert(data + done * elem, n, t.dtype, out, tmp);
      fn(std::span<const T>(out), done);
      done += n;
    }
  };

  if (t.fortran_order) {
    // Transposing needs the whole tensor: let the .npy reader do it.
    std::vector<std::byte> member;
    std::span<const std::byte> npy;
    if (kind_ == FileKind::npy) {
      npy = b;
    } else if (!t.deflated) {
      check_stored_crc(b, t, crc32(0, nullptr, 0), 0);
      npy = b.subspan(t.data_offset - t.npy_offset, t.npy_offset + t.data_bytes);
    } else {
      Inflater inf(b.subspan(t.data_offset, t.data_bytes), t.label);
      member.resize(t.member_size);
      member.resize(inf.read(member));
      if (member.size() != t.member_size || inf.crc() != t.crc32)
        fail(t.label + ": zip member is corrupt (size or CRC-32 differs from the central directory)");
      npy = member;
    }
    NpyArray a = parse_npy(npy, t.label);
    emit_all(a.data.data(), a.count());
    return;
  }

  std::vector<std::byte> raw;
  if (t.deflated) {
    Inflater inf(b.subspan(t.data_offset, t.data_bytes), t.label);
    std::vector<std::byte> head(t.npy_offset);
    if (inf.read(head) != head.size()) fail(t.label + ": deflate data ends inside the .npy header");
    std::size_t released = t.data_offset;
    for (std::uint64_t done = 0; done < t.count;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, t.count - done));
      raw.resize(n * elem);
      if (inf.read(raw) != raw.size())
        fail(fmt::format("{}: deflate data ends after {} of {} values", t.label, done + 0, t.count));
      if (t.big_endian) byteswap(raw, elem);
      convert(raw.data(), n, t.dtype, out, tmp);
      fn(std::span<const T>(out), done);
      done += n;
      const std::size_t at = t.data_offset + inf.consumed();
      if (at - released >= kReleaseEvery) {
        map_->release(released, at);
        released = at;
      }
    }
    std::byte extra[1];
    if (inf.read(extra) != 0 || !inf.ended()) fail(t.label + ": zip member holds more data than its .npy header says");
    if (inf.total() != t.member_size || inf.crc() != t.crc32)
      fail(
          fmt::format("{}: zip member is corrupt (inflated {} bytes with CRC-32 {:08x}; the central directory says "
                      "{} bytes, {:08x})",
                      t.label, inf.total(), inf.crc(), t.member_size, t.crc32));
    return;
  }

  const std::byte* base = b.data() + t.data_offset;
  std::size_t released = t.data_offset;
  // A stored npz member's CRC-32 runs along with the values (the bytes are in cache) and is checked at the end.
  const bool stored_member = kind_ == FileKind::npz;
  uLong crc = crc32(0, nullptr, 0);
  if (stored_member) crc = crc32_z(crc, reinterpret_cast<const Bytef*>(base - t.npy_offset), t.npy_offset);
  // Little-endian values of the requested type, aligned for it (.npy data is 64-byte aligned;
  // safetensors and npz members need not be).
  constexpr DType same = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const bool zero_copy =
      t.dtype == same && t.stored == same && !t.big_endian && reinterpret_cast<std::uintptr_t>(base) % alignof(T) == 0;
  for (std::uint64_t done = 0; done < t.count;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, t.count - done));
    const std::byte* src = base + done * elem;
    if (stored_member) crc = crc32_z(crc, reinterpret_cast<const Bytef*>(src), n * elem);
    if (zero_copy) {
      // The mapped bytes are the values already: no copy (the analysis commands run at memory speed).
      fn(std::span<const T>(reinterpret_cast<const T*>(src), n), done);
    } else {
      if (t.big_endian) {
        raw.assign(src, src + n * elem);
        byteswap(raw, elem);
        src = raw.data();
      }
      convert(src, n, t.dtype, out, tmp);
      fn(std::span<const T>(out), done);
    }
    done += n;
    const std::size_t at = t.data_offset + done * elem;
    if (at - released >= kReleaseEvery) {
      map_->release(released, at);
      released = at;
    }
  }
  if (stored_member) check_stored_crc(b, t, crc, t.npy_offset + t.data_bytes);
}

void TensorSource::for_each_chunk(const TensorRef& t, std::size_t chunk, const FloatChunk& fn) const {
  stream<float>(t, chunk, fn);
}
void TensorSource::for_each_chunk_double(const TensorRef& t, std::size_t chunk, const DoubleChunk& fn) const {
  stream<double>(t, chunk, fn);
}

void TensorSource::read_range_double(const TensorRef& t, std::uint64_t offset, std::size_t count,
                                     std::vector<double>& out) const {
  if (t.deflated || t.fortran_order)
    fail(fmt::format("{}: a {} cannot be read in ranges; save it uncompressed in C order", t.label,
                     t.deflated ? "compressed npz member" : "Fortran-order array"));
  if (offset > t.count || count > t.count - offset)
    fail(fmt::format("{}: elements {}..{} asked of {}", t.label, offset, offset + count, t.count));
  const std::size_t elem = dtype_size(t.stored);
  const std::size_t begin = t.data_offset + offset * elem, end = begin + count * elem;
  const std::byte* src = map_->bytes().data() + begin;
  std::vector<std::byte> raw;
  if (t.big_endian) {
    raw.assign(src, src + count * elem);
    byteswap(raw, elem);
    src = raw.data();
  }
  std::vector<float> tmp;
  convert(src, count, t.dtype, out, tmp);
  // From the start of the page holding `begin` (the previous range's last page is done with too).
  constexpr std::size_t kPage = 4096;
  map_->release(begin / kPage * kPage, end);
  // A stored npz member read in step: its CRC-32 over the whole member once its last range is read (one more
  // pass over the member, from the page cache).
  if (kind_ == FileKind::npz && offset + count == t.count) check_stored_crc(map_->bytes(), t, crc32(0, nullptr, 0), 0);
}

std::vector<float> TensorSource::read_float(const TensorRef& t) const {
  std::vector<float> all;
  all.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(t.count, std::uint64_t{1} << 24)));
  for_each_chunk(t, 0, [&](std::span<const float> v, std::uint64_t) { all.insert(all.end(), v.begin(), v.end()); });
  return all;
}
std::vector<double> TensorSource::read_double(const TensorRef& t) const {
  std::vector<double> all;
  all.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(t.count, std::uint64_t{1} << 24)));
  for_each_chunk_double(t, 0,
                        [&](std::span<const double> v, std::uint64_t) { all.insert(all.end(), v.begin(), v.end()); });
  return all;
}

}  // namespace mpsim::io
