#include "mpsim/train/checkpoint.hpp"

#include <fmt/core.h>
#include <zlib.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include "mpsim/error.hpp"
#include "mpsim/io/atomic_file.hpp"

namespace mpsim::train {

namespace {

// The tensors are written as the host's float bytes; the format says little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");

constexpr char kMagic[8] = {'M', 'P', 'S', 'I', 'M', 'C', 'K', 'P'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kFixed = 8 + 4 + 8;  // magic, version, header length

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

}  // namespace

void write_checkpoint(const std::filesystem::path& path, nlohmann::json header,
                      std::span<const CheckpointTensorView> tensors) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : tensors) list.push_back({{"name", t.name}, {"size", t.values.size()}});
  header["tensors"] = list;
  const std::string text = header.dump();
  const std::uint64_t header_len = text.size();

  io::AtomicFile file(path);
  std::uint32_t crc = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
  auto put = [&](const void* data, std::size_t n) {
    file.write(data, n);
    crc = crc32_update(crc, data, n);
  };
  put(kMagic, sizeof kMagic);
  put(&kVersion, sizeof kVersion);
  put(&header_len, sizeof header_len);
  put(text.data(), text.size());
  for (const auto& t : tensors) put(t.values.data(), t.values.size() * sizeof(float));
  file.write(&crc, sizeof crc);
  file.commit();
}

Checkpoint read_checkpoint(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the checkpoint", name));
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(fmt::format("{}: read failed", name));
  if (bytes.size() < kFixed + 4 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    if (bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0)
      throw Error(fmt::format("{}: truncated checkpoint ({} bytes)", name, bytes.size()));
    throw Error(fmt::format("{}: not an mpsim checkpoint (no MPSIMCKP magic)", name));
  }
  std::uint32_t version = 0;
  std::uint64_t header_len = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&header_len, bytes.data() + 12, 8);
  if (version != kVersion)
    throw Error(fmt::format("{}: checkpoint version {} (this mpsim reads version {})", name, version, kVersion));
  if (header_len > bytes.size() - kFixed - 4)
    throw Error(fmt::format("{}: truncated checkpoint (header of {} bytes announced, {} bytes in the file)", name,
                            header_len, bytes.size()));
  std::uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const std::uint32_t crc =
      crc32_update(static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0)), bytes.data(), bytes.size() - 4);

  Checkpoint ck;
  const char* header_begin = bytes.data() + kFixed;
  ck.header = nlohmann::json::parse(header_begin, header_begin + header_len, nullptr, false);
  if (ck.header.is_discarded() || !ck.header.is_object() || !ck.header.contains("tensors") ||
      !ck.header["tensors"].is_array()) {
    if (crc != stored_crc) throw Error(fmt::format("{}: corrupt checkpoint (checksum mismatch)", name));
    throw Error(fmt::format("{}: corrupt checkpoint (header is not valid JSON)", name));
  }
  std::uint64_t floats = 0;
  try {
    for (const auto& t : ck.header["tensors"]) {
      const std::uint64_t n = t.at("size").get<std::uint64_t>();
      if (n > bytes.size()) throw Error(fmt::format("{}: corrupt checkpoint (tensor size {})", name, n));
      floats += n;
      ck.tensors.push_back({t.at("name").get<std::string>(), {}});
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: corrupt checkpoint (tensor list: {})", name, e.what()));
  }
  const std::uint64_t expected = kFixed + header_len + floats * 4 + 4;
  if (bytes.size() < expected)
    throw Error(fmt::format("{}: truncated checkpoint ({} bytes, {} expected)", name, bytes.size(), expected));
  if (bytes.size() > expected)
    throw Error(fmt::format("{}: corrupt checkpoint ({} bytes, {} expected)", name, bytes.size(), expected));
  if (crc != stored_crc)
    throw Error(fmt::format("{}: corrupt checkpoint (CRC-32 {:08x}, the file says {:08x})", name, crc, stored_crc));
  const char* p = header_begin + header_len;
  std::size_t i = 0;
  for (const auto& t : ck.header["tensors"]) {
    const std::uint64_t n = t["size"].get<std::uint64_t>();
    ck.tensors[i].values.resize(n);
    std::memcpy(ck.tensors[i].values.data(), p, n * 4);
    p += n * 4;
    ++i;
  }
  return ck;
}

}  // namespace mpsim::train
