#include "mpsim/train/checkpoint.hpp"

#include <fmt/core.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "mpsim/error.hpp"
#include "mpsim/io/safetensors_writer.hpp"
#include "mpsim/io/tensor_source.hpp"

namespace mpsim::train {

namespace {

// The tensors are written as the host's float bytes; safetensors says little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");

constexpr const char* kFormat = "mpsim training checkpoint";
// The container of earlier mpsim versions: its first 8 bytes.
constexpr char kOldMagic[8] = {'M', 'P', 'S', 'I', 'M', 'C', 'K', 'P'};

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

std::uint32_t crc32_init() { return static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0)); }

// The CRC-32 of the metadata: the header's compact JSON (keys sorted, as nlohmann::json keeps them) less this
// key itself. It depends on the values, not on how a writer spaced or ordered them, so a checkpoint re-saved by
// the safetensors library (which keeps the metadata strings and reorders the tensors) keeps it.
constexpr const char* kMetadataCrcKey = "metadata_crc32";
std::string metadata_crc(nlohmann::json header) {
  header.erase(kMetadataCrcKey);
  const std::string text = header.dump();
  return fmt::format("{:08x}", crc32_update(crc32_init(), text.data(), text.size()));
}

}  // namespace

void write_checkpoint(const std::filesystem::path& path, nlohmann::json header,
                      std::span<const CheckpointTensorView> tensors) {
  nlohmann::json names = nlohmann::json::array();
  std::uint32_t crc = crc32_init();
  std::vector<io::SafetensorsView> views;
  for (const auto& t : tensors) {
    names.push_back(t.name);
    crc = crc32_update(crc, t.values.data(), t.values.size() * sizeof(float));
    views.push_back({t.name, {}, t.values});
  }
  header["format"] = kFormat;
  header["schema"] = "mpsim-checkpoint-1";
  header["tensors"] = names;
  header["data_crc32"] = fmt::format("{:08x}", crc);
  header[kMetadataCrcKey] = metadata_crc(header);
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : header.items()) metadata[key] = value.dump();
  io::write_safetensors(path, metadata, views);
}

Checkpoint read_checkpoint(const std::filesystem::path& path) {
  const std::string name = path.string();
  // Checked before opening: a folder makes the stream fail deep inside with "Is a directory", and a FIFO with
  // no writer would block the open forever.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status))
    throw Error(
        fmt::format("{}: is a folder, not a checkpoint file (a run writes FOLDER/checkpoint.safetensors)", name));
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    throw Error(fmt::format("{}: not a regular file; a checkpoint is read from a file", name));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the checkpoint", name));
  std::vector<std::byte> bytes;
  {
    const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw Error(fmt::format("{}: read failed", name));
    bytes.resize(raw.size());
    if (!raw.empty()) std::memcpy(bytes.data(), raw.data(), raw.size());
  }
  return read_checkpoint_bytes(std::move(bytes), name);
}

Checkpoint read_checkpoint_bytes(std::vector<std::byte> bytes, const std::string& name) {
  if (bytes.size() >= sizeof kOldMagic && std::memcmp(bytes.data(), kOldMagic, sizeof kOldMagic) == 0)
    throw Error(
        fmt::format("{}: an MPSIMCKP checkpoint, the container of earlier mpsim versions; this mpsim reads "
                    "safetensors checkpoints only: rerun the training to write one",
                    name));
  std::uint64_t header_len = 0;
  if (bytes.size() < 8)
    throw Error(
        fmt::format("{}: truncated checkpoint ({} bytes; a safetensors file starts with an 8-byte header "
                    "length)",
                    name, bytes.size()));
  std::memcpy(&header_len, bytes.data(), 8);
  if (bytes.size() > 8 && bytes[8] != std::byte{'{'})
    throw Error(
        fmt::format("{}: not an mpsim checkpoint (not a safetensors file: no JSON header after the 8-byte "
                    "length)",
                    name));
  if (header_len > bytes.size() - 8)
    throw Error(fmt::format("{}: truncated checkpoint (a header of {} bytes announced, {} bytes follow)", name,
                            header_len, bytes.size() - 8));
  const char* text = reinterpret_cast<const char*>(bytes.data()) + 8;
  const nlohmann::json st = nlohmann::json::parse(text, text + header_len, nullptr, false);
  if (st.is_discarded() || !st.is_object())
    throw Error(fmt::format("{}: not an mpsim checkpoint (no safetensors JSON header)", name));
  if (!st.contains("__metadata__") || !st["__metadata__"].is_object())
    throw Error(fmt::format("{}: not an mpsim checkpoint (a safetensors file without metadata)", name));

  // The run's header back from the metadata's JSON texts.
  Checkpoint ck;
  ck.header = nlohmann::json::object();
  for (const auto& [key, value] : st["__metadata__"].items()) {
    if (!value.is_string())
      throw Error(fmt::format("{}: corrupt checkpoint (metadata '{}' is not a string)", name, key));
    nlohmann::json v = nlohmann::json::parse(value.get<std::string>(), nullptr, false);
    if (v.is_discarded())
      throw Error(fmt::format("{}: corrupt checkpoint (metadata '{}' is not JSON text)", name, key));
    ck.header[key] = std::move(v);
  }
  if (ck.header.value("format", nlohmann::json()) != kFormat)
    throw Error(fmt::format("{}: not an mpsim checkpoint (a safetensors file whose metadata has no format \"{}\")",
                            name, kFormat));
  const auto& names = ck.header.value("tensors", nlohmann::json());
  if (!names.is_array() || !ck.header.contains("data_crc32") || !ck.header["data_crc32"].is_string())
    throw Error(fmt::format("{}: corrupt checkpoint (metadata without its tensor list or data_crc32)", name));

  // A cut file is the common failure (a disk that filled up, a copy interrupted): say so before anything else.
  std::uint64_t data_end = 0;
  for (const auto& [key, v] : st.items())
    if (key != "__metadata__" && v.is_object() && v.contains("data_offsets") && v["data_offsets"].is_array() &&
        v["data_offsets"].size() == 2 && v["data_offsets"][1].is_number_unsigned())
      data_end = std::max(data_end, v["data_offsets"][1].get<std::uint64_t>());
  const std::uint64_t expected = 8 + header_len + data_end;
  if (bytes.size() < expected)
    throw Error(fmt::format("{}: truncated checkpoint ({} bytes, {} expected)", name, bytes.size(), expected));
  if (bytes.size() > expected)
    throw Error(fmt::format("{}: corrupt checkpoint ({} bytes, {} expected)", name, bytes.size(), expected));

  // The safetensors structure (dtypes, shapes, offsets) is checked by the library's one reader of it.
  const io::TensorSource src = io::TensorSource::from_bytes(std::move(bytes), name);
  if (src.tensors().size() != names.size())
    throw Error(fmt::format("{}: corrupt checkpoint ({} tensors, the metadata lists {})", name, src.tensors().size(),
                            names.size()));
  for (const auto& n : names) {
    if (!n.is_string()) throw Error(fmt::format("{}: corrupt checkpoint (a tensor name that is not a string)", name));
    const io::TensorRef& t = src.tensor(n.get<std::string>());
    if (t.stored != io::DType::f32)
      throw Error(fmt::format("{}: tensor {} is {}, checkpoints hold F32", name, t.name, io::to_string(t.stored)));
    ck.tensors.push_back({t.name, src.read_float(t)});
  }
  // data_crc32 covers the tensors' values in the order of the metadata's list, wherever the file puts them: a
  // writer that lays the tensors out in another order (safetensors' save_file sorts them) changes no value.
  // An mpsim-written file lays them out in that order, so this is also the CRC of its data bytes as written by
  // earlier versions.
  std::uint32_t crc = crc32_init();
  for (const auto& t : ck.tensors) crc = crc32_update(crc, t.values.data(), t.values.size() * sizeof(float));
  if (ck.header.contains(kMetadataCrcKey)) {  // checkpoints of earlier versions have none
    const auto& stored = ck.header[kMetadataCrcKey];
    const std::string computed = metadata_crc(ck.header);
    if (!stored.is_string() || stored.get<std::string>() != computed)
      throw Error(fmt::format("{}: corrupt checkpoint (the metadata's CRC-32 is {}, the metadata says {})", name,
                              computed, stored.dump()));
  }
  const std::string want_crc = ck.header["data_crc32"].get<std::string>();
  if (fmt::format("{:08x}", crc) != want_crc)
    throw Error(
        fmt::format("{}: corrupt checkpoint (the data's CRC-32 is {:08x}, the metadata says {})", name, crc, want_crc));
  return ck;
}

}  // namespace mpsim::train
