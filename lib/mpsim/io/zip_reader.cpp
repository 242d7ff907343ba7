// The zip (.npz) reader of TensorSource: the end of central directory, the central directory's entries,
// each member's local header and .npy header (inflated where deflated), and the stored-member CRC check.
#include "mpsim/io/detail/zip_reader.hpp"

#include <cstring>
#include <set>

#include "mpsim/io/names.hpp"

namespace mpsim::io::detail {

namespace {

// Bytes of a .npy member header we are willing to inflate before the data (npy.cpp accepts 1 MiB).
constexpr std::size_t kMaxNpyHead = (std::size_t{1} << 20) + 16;

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
    if (z > b.size() || b.size() - z < 56 || le(b, z, 4) != 0x06064b50)
      fail(file + ": bad zip64 end of central directory");
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

// The tensor of the .npz member `name` (its member name less ".npy"): checks the member, finds its data through the
// local header and reads its .npy header.
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

}  // namespace

std::vector<TensorRef> read_npz_directory(std::span<const std::byte> b, const std::string& file,
                                          const SourceOptions& o) {
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

void check_stored_crc(std::span<const std::byte> b, const TensorRef& t, uLong crc, std::uint64_t done) {
  const std::uint64_t member = t.data_offset - t.npy_offset;
  const auto rest = b.subspan(member + done, t.member_size - done);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(rest.data()), rest.size());
  if (static_cast<std::uint32_t>(crc) != t.crc32)
    fail(
        fmt::format("{}: zip member is corrupt (its {} stored bytes have CRC-32 {:08x}; the central directory "
                    "says {:08x})",
                    t.label, t.member_size, static_cast<std::uint32_t>(crc), t.crc32));
}

}  // namespace mpsim::io::detail
