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
#include "mpsim/format/bulk.hpp"
#include "mpsim/io/names.hpp"

namespace mpsim::io {

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
      const char* kind = S_ISFIFO(st.st_mode)  ? "a pipe (FIFO)"
                         : S_ISCHR(st.st_mode) ? "a character device"
                         : S_ISSOCK(st.st_mode) ? "a socket"
                                               : "not a regular file";
      throw Error(fmt::format("{}: is {}; tensor inputs are mapped into memory and must be regular files (save the "
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
// safetensors: the reference implementation's MAX_HEADER_SIZE (safetensors/src/tensor.rs).
constexpr std::uint64_t kMaxJsonHeader = 100'000'000;
// Bytes of a .npy member header we are willing to inflate before the data (npy.cpp accepts 1 MiB).
constexpr std::size_t kMaxNpyHead = (std::size_t{1} << 20) + 16;

[[noreturn]] void fail(const std::string& what) { throw Error(what); }

std::uint64_t le(std::span<const std::byte> b, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

bool is_integer(DType t) { return !is_float(t) && !is_opaque(t); }

std::string label_of(const std::string& file, const std::string& name) {
  return name.empty() ? file : file + ":" + name;
}

// ---- inflating a zip member piece by piece ---------------------------------------------------------------
class Inflater {
 public:
  Inflater(std::span<const std::byte> in, std::string what) : in_(in), what_(std::move(what)) {
    if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) fail(what_ + ": zlib inflateInit2 failed");
  }
  ~Inflater() { inflateEnd(&z_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Fills dst with the next dst.size() bytes; returns how many it produced (fewer only at the end).
  std::size_t read(std::span<std::byte> dst) {
    std::size_t got = 0;
    while (got < dst.size() && !ended_) {
      if (z_.avail_in == 0 && pos_ < in_.size()) {
        const std::size_t n = std::min<std::size_t>(in_.size() - pos_, UINT_MAX / 2);
        z_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in_.data() + pos_));
        z_.avail_in = static_cast<uInt>(n);
        pos_ += n;
      }
      const std::size_t want = std::min<std::size_t>(dst.size() - got, UINT_MAX / 2);
      z_.next_out = reinterpret_cast<Bytef*>(dst.data() + got);
      z_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const std::size_t produced = want - z_.avail_out;
      crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(dst.data() + got), produced);
      got += produced;
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc == Z_BUF_ERROR && z_.avail_in == 0 && pos_ >= in_.size()) {
        fail(what_ + ": deflate data is truncated");
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        fail(fmt::format("{}: corrupt deflate data ({})", what_, z_.msg ? z_.msg : "zlib error"));
      }
    }
    total_ += got;
    return got;
  }
  bool ended() const { return ended_; }
  std::uint32_t crc() const { return static_cast<std::uint32_t>(crc_); }
  std::uint64_t total() const { return total_; }
  std::size_t consumed() const { return pos_ - z_.avail_in; }

 private:
  std::span<const std::byte> in_;
  std::string what_;
  z_stream z_{};
  std::size_t pos_ = 0;
  bool ended_ = false;
  uLong crc_ = crc32(0, nullptr, 0);
  std::uint64_t total_ = 0;
};

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

// The dtype a stored tensor is read as under the override.
DType effective(DType stored, const SourceOptions& o, bool single, const std::string& label) {
  if (is_opaque(stored) && (!o.dtype || dtype_size(*o.dtype) != dtype_size(stored))) {
    if (o.dtype)
      fail(fmt::format("{}: {}; {} is {} bytes wide", label, opaque_message(stored), to_string(*o.dtype),
                       dtype_size(*o.dtype)));
    fail(fmt::format("{}: {}", label, opaque_message(stored)));
  }
  if (!o.dtype || *o.dtype == stored) return stored;
  const DType want = *o.dtype;
  if ((is_integer(stored) || is_opaque(stored)) && dtype_size(stored) == dtype_size(want)) return want;
  if (single)
    fail(fmt::format("{}: holds {}, which cannot be read as {} (a dtype override applies to integer arrays of the "
                     "same element size)",
                     label, to_string(stored), to_string(want)));
  return stored;
}

DType safetensors_dtype(const std::string& s, const std::string& label) {
  // safetensors Dtype names (safetensors/src/tensor.rs).
  if (s == "F64") return DType::f64;
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "BF16") return DType::bf16_bits;
  if (s == "F8_E4M3") return DType::fp8_e4m3_bits;
  if (s == "F8_E5M2") return DType::fp8_e5m2_bits;
  if (s == "F8_E4M3FNUZ") return DType::fp8_e4m3fnuz_bits;
  if (s == "F8_E5M2FNUZ") return DType::fp8_e5m2fnuz_bits;
  if (s == "F8_E8M0") return DType::float8_e8m0fnu_bits;
  if (s == "F4" || s == "F6_E2M3" || s == "F6_E3M2")
    fail(fmt::format("{}: dtype '{}' packs its elements below a byte (safetensors' sub-byte layout); mpsim reads "
                     "one element per byte: unpack it to uint8 (as ml_dtypes stores float4/float6) and read it "
                     "with --dtype {}",
                     label, s, s == "F4" ? "float4_e2m1fn" : s == "F6_E2M3" ? "float6_e2m3fn" : "float6_e3m2fn"));
  if (s == "I32") return DType::i32;
  if (s == "I64") return DType::i64;
  if (s == "U8") return DType::u8;
  if (s == "U16") return DType::u16;
  if (s == "U32") return DType::u32;
  fail(fmt::format("{}: unsupported dtype '{}' (supported: F64, F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E4M3FNUZ, "
                   "F8_E5M2FNUZ, F8_E8M0, I32, I64, U8, U16, U32)",
                   label, s));
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

}  // namespace

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
  fail(fmt::format("{}: not a .npy, .npz or safetensors file (unknown magic); pass --dtype to read it as raw "
                   "data (a 1-D array)",
                   file));
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

std::vector<TensorRef> read_npy_directory(std::span<const std::byte> b, const std::string& file, const SourceOptions& o) {
  return {npy_tensor(parse_npy_header(b, file, b.size()), file, "", o)};
}

std::vector<TensorRef> read_raw_directory(std::span<const std::byte> b, const std::string& file, const SourceOptions& o) {
  if (!o.dtype) fail(file + ": raw data needs a dtype (--dtype)");
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

// The safetensors JSON header, refusing duplicate tensor names (the JSON library would otherwise keep the
// last one silently) and absurd nesting.
nlohmann::json parse_safetensors_header(std::string_view text, const std::string& file) {
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& j) {
    if (depth > 16) throw Error(file + ": safetensors JSON header is nested too deeply");
    if (ev == nlohmann::json::parse_event_t::key && depth == 1 && !seen.insert(j.get<std::string>()).second &&
        duplicate.empty())
      duplicate = j.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, cb);
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("{}: malformed safetensors JSON header: {}", file, e.what()));
  }
  if (!duplicate.empty()) fail(fmt::format("{}: duplicate tensor name '{}' in the safetensors header", file, duplicate));
  if (!header.is_object()) fail(file + ": malformed safetensors JSON header: not an object");
  return header;
}

// One safetensors header entry; base is the file offset of the data section, data_size its length.
TensorRef safetensors_tensor(const std::string& file, const std::string& name, const nlohmann::json& v,
                             std::uint64_t base, std::uint64_t data_size, const SourceOptions& o) {
  const std::string label = label_of(file, name);
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets") ||
      !v["dtype"].is_string() || !v["shape"].is_array() || !v["data_offsets"].is_array() ||
      v["data_offsets"].size() != 2)
    fail(label + ": malformed safetensors entry (needs \"dtype\", \"shape\" and two \"data_offsets\")");
  TensorRef t;
  t.file = file;
  t.name = name;
  t.label = label;
  t.stored = safetensors_dtype(v["dtype"].get<std::string>(), label);
  t.dtype = effective(t.stored, o, false, label);
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned()) fail(label + ": shape entries must be non-negative integers");
    const auto u = d.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(label + ": shape dimension too large");
    t.shape.push_back(static_cast<std::int64_t>(u));
  }
  if (t.shape.size() > 64) fail(label + ": more than 64 dimensions");
  const auto& off = v["data_offsets"];
  if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(label + ": data_offsets must be non-negative integers");
  const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
  const std::size_t elem = dtype_size(t.stored);
  t.count = checked_count(t.shape, elem, label);
  if (begin > end || end > data_size)
    fail(fmt::format("{}: data_offsets [{}, {}] lie outside the {} bytes of data", label, begin, end, data_size));
  if (end - begin != t.count * elem)
    fail(fmt::format("{}: shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", label,
                     shape_string(t.shape), to_string(t.stored), t.count * elem, begin, end, end - begin));
  t.data_offset = base + begin;
  t.data_bytes = end - begin;
  return t;
}

std::vector<TensorRef> read_safetensors_directory(std::span<const std::byte> b, const std::string& file,
                                                  const SourceOptions& o) {
  const std::uint64_t n = le(b, 0, 8);
  if (n > kMaxJsonHeader)
    fail(fmt::format("{}: safetensors JSON header of {} bytes is absurdly large (limit {})", file, n, kMaxJsonHeader));
  if (n > b.size() - 8)
    fail(fmt::format("{}: truncated safetensors file (JSON header of {} bytes, only {} present)", file, n,
                     b.size() - 8));
  const nlohmann::json header =
      parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(b.data()) + 8, n), file);
  const std::uint64_t base = 8 + n, data_size = b.size() - base;
  std::vector<TensorRef> tensors;
  for (const auto& [name, v] : header.items())
    if (name != "__metadata__") tensors.push_back(safetensors_tensor(file, name, v, base, data_size, o));
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorRef& a, const TensorRef& c) { return a.data_offset < c.data_offset; });
  for (std::size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].data_offset < tensors[i - 1].data_offset + tensors[i - 1].data_bytes)
      fail(fmt::format("{}: tensors '{}' and '{}' overlap in the data", file, tensors[i - 1].name, tensors[i].name));
  return tensors;
}

// ---- zip (.npz) -------------------------------------------------------------------------------------------

struct CentralDirectory {
  std::uint64_t entries, size, offset;
};

// The end of central directory record (PKWARE APPNOTE.TXT 4.3.16): signature 0x06054b50, found by searching
// back over at most a 65535-byte comment; its zip64 counterpart (4.3.14, located by 4.3.15) when a field
// is saturated.
CentralDirectory find_central_directory(std::span<const std::byte> b, const std::string& file) {
  if (b.size() < 22) fail(file + ": truncated zip file (no end of central directory)");
  std::size_t eocd = std::string::npos;
  for (std::size_t i = b.size() - 22 + 1; i-- > 0 && b.size() - i <= 22 + 65535;)
    if (le(b, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) fail(file + ": truncated or not a zip file (no end of central directory)");
  CentralDirectory cd{le(b, eocd + 10, 2), le(b, eocd + 12, 4), le(b, eocd + 16, 4)};
  if (cd.entries == 0xffff || cd.size == 0xffffffff || cd.offset == 0xffffffff) {
    if (eocd < 20 || le(b, eocd - 20, 4) != 0x07064b50) fail(file + ": zip64 locator missing");
    const std::uint64_t z = le(b, eocd - 20 + 8, 8);
    if (z > b.size() || b.size() - z < 56 || le(b, z, 4) != 0x06064b50) fail(file + ": bad zip64 end of central directory");
    cd = {le(b, z + 32, 8), le(b, z + 40, 8), le(b, z + 48, 8)};
  }
  if (cd.offset > b.size() || cd.size > b.size() - cd.offset)
    fail(fmt::format("{}: truncated zip file (central directory at {} of {} bytes lies past the end)", file, cd.offset,
                     cd.size));
  return cd;
}

// One central directory file header (APPNOTE 4.3.12), with the zip64 sizes resolved.
struct ZipEntry {
  std::string member;
  std::uint64_t flags, method;
  std::uint32_t crc;
  std::uint64_t csize, usize, local;
};

// Reads the entry at p (advanced past it); cd_end bounds the central directory.
ZipEntry read_zip_entry(std::span<const std::byte> b, std::size_t& p, std::size_t cd_end, const std::string& file) {
  if (p + 46 > cd_end || le(b, p, 4) != 0x02014b50) fail(file + ": corrupt zip central directory");
  ZipEntry e;
  e.flags = le(b, p + 8, 2);
  e.method = le(b, p + 10, 2);
  e.crc = static_cast<std::uint32_t>(le(b, p + 16, 4));
  e.csize = le(b, p + 20, 4);
  e.usize = le(b, p + 24, 4);
  const std::size_t nlen = le(b, p + 28, 2), xlen = le(b, p + 30, 2), clen = le(b, p + 32, 2);
  e.local = le(b, p + 42, 4);
  if (p + 46 + nlen + xlen + clen > cd_end) fail(file + ": corrupt zip central directory");
  e.member.assign(reinterpret_cast<const char*>(b.data()) + p + 46, nlen);
  const std::string mlabel = fmt::format("{}: zip member '{}'", file, e.member);
  // Zip64 extended information (APPNOTE 4.5.3): the 8-byte values of the fields set to 0xffffffff.
  for (std::size_t x = p + 46 + nlen; x + 4 <= p + 46 + nlen + xlen;) {
    const auto id = le(b, x, 2), sz = le(b, x + 2, 2);
    if (x + 4 + sz > p + 46 + nlen + xlen) fail(mlabel + ": corrupt extra field");
    if (id == 0x0001) {
      std::size_t q = x + 4;
      auto take = [&](std::uint64_t& v) {
        if (v != 0xffffffff) return;
        if (q + 8 > x + 4 + sz) fail(mlabel + ": corrupt zip64 extra field");
        v = le(b, q, 8);
        q += 8;
      };
      take(e.usize);
      take(e.csize);
      take(e.local);
    }
    x += 4 + sz;
  }
  p += 46 + nlen + xlen + clen;
  return e;
}

// The .npy header at the start of a deflated member: its magic and length first, then the rest.
NpyHeader inflate_npy_header(std::span<const std::byte> compressed, std::uint64_t usize, const std::string& mlabel,
                             const std::string& label) {
  Inflater inf(compressed, mlabel);
  std::vector<std::byte> head(std::min<std::uint64_t>(usize, 12));
  head.resize(inf.read(head));
  if (head.size() >= 10 && std::memcmp(head.data(), "\x93NUMPY", 6) == 0) {
    const int major = static_cast<int>(head[6]);
    const std::size_t hl = major == 1 ? le(head, 8, 2) : head.size() >= 12 ? le(head, 8, 4) : 0;
    const std::size_t want = std::min<std::uint64_t>({usize, kMaxNpyHead, (major == 1 ? 10 : 12) + hl});
    const std::size_t had = head.size();
    if (want > had) {
      head.resize(want);
      head.resize(had + inf.read(std::span(head).subspan(had)));
    }
  }
  return parse_npy_header(head, label, usize);
}

// The tensor of the .npz member `name` (its member name less ".npy"): checks the member, finds its data through the local header and reads
// its .npy header.
TensorRef npz_member_tensor(std::span<const std::byte> b, const ZipEntry& e, const std::string& name,
                            const std::string& file, const SourceOptions& o) {
  const std::string mlabel = fmt::format("{}: zip member '{}'", file, e.member);
  const std::string label = label_of(file, name);
  if (e.flags & 1) fail(mlabel + " is encrypted");
  if (e.method != 0 && e.method != 8)
    fail(fmt::format("{} uses compression method {} (supported: 0 stored, 8 deflate)", mlabel, e.method));
  // Local file header (APPNOTE 4.3.7): its own name and extra lengths decide where the data starts.
  if (e.local > b.size() || b.size() - e.local < 30 || le(b, e.local, 4) != 0x04034b50)
    fail(mlabel + ": bad local header offset");
  const std::uint64_t data = e.local + 30 + le(b, e.local + 26, 2) + le(b, e.local + 28, 2);
  if (data > b.size() || e.csize > b.size() - data)
    fail(fmt::format("{}: truncated ({} compressed bytes at offset {} run past the end of the file)", mlabel, e.csize,
                     data));
  // Deflate expands at most about 1032:1 (zlib FAQ, "maximum compression ratio"): a larger claimed
  // size is a corrupt or hostile directory, refused before anything is allocated for it.
  if (e.method == 8 && e.usize > e.csize * 1032 + 1024)
    fail(fmt::format("{}: claims {} bytes from {} compressed bytes, beyond deflate's 1032:1 limit", mlabel, e.usize,
                     e.csize));
  const auto compressed = b.subspan(data, e.csize);
  if (e.method == 0 && e.csize != e.usize) fail(mlabel + ": stored member whose sizes disagree");
  const NpyHeader h = e.method == 0 ? parse_npy_header(compressed, label, e.usize)
                                    : inflate_npy_header(compressed, e.usize, mlabel, label);
  TensorRef t = npy_tensor(h, file, name, o);
  t.deflated = e.method == 8;
  t.crc32 = e.crc;
  t.member_size = e.usize;
  t.npy_offset = h.data_offset;
  t.data_offset = e.method == 0 ? data + h.data_offset : data;
  t.data_bytes = e.method == 0 ? h.data_bytes : e.csize;
  return t;
}

std::vector<TensorRef> read_npz_directory(std::span<const std::byte> b, const std::string& file, const SourceOptions& o) {
  const CentralDirectory cd = find_central_directory(b, file);
  std::set<std::string> names;
  std::vector<TensorRef> tensors;
  std::size_t p = cd.offset;
  for (std::uint64_t i = 0; i < cd.entries; ++i) {
    const ZipEntry e = read_zip_entry(b, p, cd.offset + cd.size, file);
    if (e.member.size() < 4 || e.member.substr(e.member.size() - 4) != ".npy")
      fail(fmt::format("{}: zip member '{}' is not a .npy array (an .npz holds only .npy members)", file, e.member));
    require_utf8_name(e.member, file + ": zip member");
    const std::string name = e.member.substr(0, e.member.size() - 4);  // as numpy.load names it
    if (!names.insert(name).second) fail(fmt::format("{}: duplicate array name '{}'", file, name));
    tensors.push_back(npz_member_tensor(b, e, name, file, o));
  }
  return tensors;
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

namespace {

// A stored (uncompressed) npz member's CRC-32, checked like a deflated one's: numpy's zipfile refuses a member
// whose bytes disagree with the central directory (zipfile.ZipExtFile._update_crc), whether or not it is
// compressed. `crc` is the CRC-32 of the member's first `done` bytes; the rest are read from `b` here.
void check_stored_crc(std::span<const std::byte> b, const TensorRef& t, uLong crc, std::uint64_t done) {
  const std::uint64_t member = t.data_offset - t.npy_offset;
  const auto rest = b.subspan(member + done, t.member_size - done);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(rest.data()), rest.size());
  if (static_cast<std::uint32_t>(crc) != t.crc32)
    fail(fmt::format("{}: zip member is corrupt (its {} stored bytes have CRC-32 {:08x}; the central directory "
                     "says {:08x})",
                     t.label, t.member_size, static_cast<std::uint32_t>(crc), t.crc32));
}

}  // namespace

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
    if (inf.read(extra) != 0 || !inf.ended())
      fail(t.label + ": zip member holds more data than its .npy header says");
    if (inf.total() != t.member_size || inf.crc() != t.crc32)
      fail(fmt::format("{}: zip member is corrupt (inflated {} bytes with CRC-32 {:08x}; the central directory says "
                       "{} bytes, {:08x})",
                       t.label, inf.total(), inf.crc(), t.member_size, t.crc32));
    return;
  }

  const std::byte* base = b.data() + t.data_offset;
  std::size_t released = t.data_offset;
  // A stored npz member's CRC-32 runs along with the values (the bytes are in cache) and is checked at the end.
  const bool stored_member = kind_ == FileKind::npz;
  uLong crc = crc32(0, nullptr, 0);
  if (stored_member)
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(base - t.npy_offset), t.npy_offset);
  // Little-endian values of the requested type, aligned for it (.npy data is 64-byte aligned;
  // safetensors and npz members need not be).
  constexpr DType same = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const bool zero_copy = t.dtype == same && t.stored == same && !t.big_endian &&
                         reinterpret_cast<std::uintptr_t>(base) % alignof(T) == 0;
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
  for_each_chunk_double(t, 0, [&](std::span<const double> v, std::uint64_t) { all.insert(all.end(), v.begin(), v.end()); });
  return all;
}

}  // namespace mpsim::io
