// Writing .npz archives: a zip of stored (uncompressed) .npy members, as numpy.savez writes them, whole
// (npz_bytes) or member by member as they are computed (NpzWriter).
#include <zlib.h>

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "mpsim/error.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/npz_writer.hpp"

namespace mpsim::io {

namespace {

void put(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

// PKWARE APPNOTE.TXT 6.3: local file header 0x04034b50, central directory header 0x02014b50, end of
// central directory 0x06054b50; method 0 (stored); DOS date 1980-01-01 (0x0021), time 0.
constexpr std::uint16_t kZipVersion = 20, kDosDate = 0x0021;

// A member's local header (local) or central directory entry, for `size` stored bytes at `offset`.
void zip_header(std::vector<std::byte>& h, bool local, const std::string& file, std::uint32_t crc, std::uint64_t size,
                std::uint64_t offset) {
  put(h, local ? 0x04034b50u : 0x02014b50u, 4);
  if (!local) put(h, kZipVersion, 2);  // version made by
  put(h, kZipVersion, 2);              // version needed
  put(h, 0, 2);                        // flags
  put(h, 0, 2);                        // method: stored
  put(h, 0, 2);                        // time
  put(h, kDosDate, 2);
  put(h, crc, 4);
  put(h, size, 4);  // compressed size
  put(h, size, 4);  // uncompressed size
  put(h, file.size(), 2);
  put(h, 0, 2);  // extra length
  if (!local) {
    put(h, 0, 2);  // comment length
    put(h, 0, 2);  // disk number
    put(h, 0, 2);  // internal attributes
    put(h, 0, 4);  // external attributes
    put(h, offset, 4);
  }
  for (char c : file) h.push_back(static_cast<std::byte>(c));
}

std::uint64_t local_header_size(const std::string& file) { return 30 + file.size(); }

// Without zip64, sizes and offsets are 32-bit fields.
void check_zip32(const std::string& name, std::uint64_t size, std::uint64_t offset) {
  if (size >= std::numeric_limits<std::uint32_t>::max() || offset >= std::numeric_limits<std::uint32_t>::max())
    throw Error(fmt::format("npz member '{}': {} bytes need zip64, which mpsim does not write", name, size));
}

void end_of_central_directory(std::vector<std::byte>& out, std::uint16_t entries, std::uint64_t central_size,
                              std::uint64_t central_offset) {
  put(out, 0x06054b50u, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, entries, 2);
  put(out, entries, 2);
  put(out, central_size, 4);
  put(out, central_offset, 4);
  put(out, 0, 2);
}

std::uint32_t crc_of(std::uint32_t crc, const void* data, std::uint64_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  // crc32 takes a uInt length: feed very large pieces in parts.
  constexpr std::uint64_t kPart = std::uint64_t{1} << 30;
  for (std::uint64_t done = 0; done < bytes; done += kPart)
    crc = static_cast<std::uint32_t>(crc32(crc, p + done, static_cast<uInt>(std::min(kPart, bytes - done))));
  return crc;
}

}  // namespace

std::vector<std::byte> npz_bytes(const std::vector<std::pair<std::string, NpyArray>>& members) {
  std::vector<std::byte> out, central;
  std::uint16_t entries = 0;
  for (const auto& [name, array] : members) {
    const std::string file = name + ".npy";
    const std::vector<std::byte> data = npy_bytes(array);
    check_zip32(name, data.size(), out.size());
    const std::uint32_t crc = crc_of(0, data.data(), data.size());
    const std::uint64_t offset = out.size();
    zip_header(out, true, file, crc, data.size(), offset);
    out.insert(out.end(), data.begin(), data.end());
    zip_header(central, false, file, crc, data.size(), offset);
    ++entries;
  }
  const std::uint64_t cd_offset = out.size();
  out.insert(out.end(), central.begin(), central.end());
  end_of_central_directory(out, entries, central.size(), cd_offset);
  return out;
}

NpzWriter::NpzWriter(std::filesystem::path path, std::vector<Member> members) : file_(std::move(path)) {
  std::uint64_t offset = 0;
  for (auto& m : members) {
    Slot s;
    const std::vector<std::byte> header = npy_header_bytes(m.dtype, m.shape);  // checks the shape
    for (std::int64_t d : m.shape) s.count *= static_cast<std::uint64_t>(d);
    const std::string file = m.name + ".npy";
    s.header_offset = offset;
    s.data_offset = offset + local_header_size(file);
    s.npy_bytes = header.size() + s.count * dtype_size(m.dtype);
    check_zip32(m.name, s.npy_bytes, s.header_offset);
    s.crc = crc_of(0, header.data(), header.size());
    file_.write_at(s.data_offset, header.data(), header.size());
    s.member = std::move(m);
    offset = s.data_offset + s.npy_bytes;
    slots_.push_back(std::move(s));
  }
  if (slots_.size() > std::numeric_limits<std::uint16_t>::max())
    throw Error(fmt::format("{}: {} npz members; a zip without zip64 holds at most 65535", file_.target().string(),
                            slots_.size()));
  end_ = offset;
}

void NpzWriter::append_bytes(std::size_t index, const void* data, std::uint64_t count, std::size_t elem_size) {
  Slot& s = slots_.at(index);
  const std::string where = file_.target().string() + ":" + s.member.name;
  if (elem_size != dtype_size(s.member.dtype))
    throw Error(
        fmt::format("{}: writing {}-byte elements into a {} array", where, elem_size, to_string(s.member.dtype)));
  if (count > s.count - s.written)
    throw Error(
        fmt::format("{}: {} elements written past the array's {}", where, s.written + count - s.count, s.count));
  const std::uint64_t bytes = count * elem_size;
  const std::uint64_t at = s.data_offset + (s.npy_bytes - s.count * elem_size) + s.written * elem_size;
  file_.write_at(at, data, bytes);
  s.crc = crc_of(s.crc, data, bytes);
  s.written += count;
}

void NpzWriter::commit() {
  std::vector<std::byte> central;
  for (const Slot& s : slots_) {
    if (s.written != s.count)
      throw Error(
          fmt::format("{}:{}: {} of {} elements written", file_.target().string(), s.member.name, s.written, s.count));
    const std::string file = s.member.name + ".npy";
    std::vector<std::byte> local;
    zip_header(local, true, file, s.crc, s.npy_bytes, s.header_offset);
    file_.write_at(s.header_offset, local.data(), local.size());
    zip_header(central, false, file, s.crc, s.npy_bytes, s.header_offset);
  }
  check_zip32("central directory", central.size(), end_);
  std::vector<std::byte> tail = central;
  end_of_central_directory(tail, static_cast<std::uint16_t>(slots_.size()), central.size(), end_);
  file_.write_at(end_, tail.data(), tail.size());
  file_.commit();
}

}  // namespace mpsim::io
