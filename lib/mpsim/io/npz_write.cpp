// Writing .npz archives: a zip of stored (uncompressed) .npy members, as numpy.savez writes them.
#include <zlib.h>

#include <fmt/core.h>

#include <cstdint>
#include <limits>

#include "mpsim/error.hpp"
#include "mpsim/io/npy.hpp"

namespace mpsim::io {

namespace {

void put(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

}  // namespace

std::vector<std::byte> npz_bytes(const std::vector<std::pair<std::string, NpyArray>>& members) {
  // PKWARE APPNOTE.TXT 6.3: local file header 0x04034b50, central directory header 0x02014b50, end of
  // central directory 0x06054b50; method 0 (stored); DOS date 1980-01-01 (0x0021), time 0.
  constexpr std::uint16_t kVersion = 20, kDate = 0x0021;
  std::vector<std::byte> out, central;
  std::uint16_t entries = 0;
  for (const auto& [name, array] : members) {
    const std::string file = name + ".npy";
    const std::vector<std::byte> data = npy_bytes(array);
    if (data.size() >= std::numeric_limits<std::uint32_t>::max() || out.size() >= std::numeric_limits<std::uint32_t>::max())
      throw Error(fmt::format("npz member '{}': {} bytes need zip64, which mpsim does not write", name, data.size()));
    const auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const std::uint64_t offset = out.size();
    auto header = [&](std::vector<std::byte>& h, bool local) {
      put(h, local ? 0x04034b50u : 0x02014b50u, 4);
      if (!local) put(h, kVersion, 2);  // version made by
      put(h, kVersion, 2);              // version needed
      put(h, 0, 2);                     // flags
      put(h, 0, 2);                     // method: stored
      put(h, 0, 2);                     // time
      put(h, kDate, 2);
      put(h, crc, 4);
      put(h, data.size(), 4);  // compressed size
      put(h, data.size(), 4);  // uncompressed size
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
    };
    header(out, true);
    out.insert(out.end(), data.begin(), data.end());
    header(central, false);
    ++entries;
  }
  const std::uint64_t cd_offset = out.size();
  out.insert(out.end(), central.begin(), central.end());
  put(out, 0x06054b50u, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, entries, 2);
  put(out, entries, 2);
  put(out, central.size(), 4);
  put(out, cd_offset, 4);
  put(out, 0, 2);
  return out;
}

}  // namespace mpsim::io
