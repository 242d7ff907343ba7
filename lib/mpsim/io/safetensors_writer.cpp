#include "mpsim/io/safetensors_writer.hpp"

#include <bit>
#include <nlohmann/json.hpp>
#include <set>

#include "mpsim/error.hpp"
#include "mpsim/io/atomic_file.hpp"

namespace mpsim::io {

// The tensors are written as the host's float bytes; safetensors says little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors output assumes a little-endian host");

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata,
                       std::span<const SafetensorsView> tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      throw Error(path.string() + ": tensor name '" + t.name + "' is empty, reserved or given twice");
    std::vector<std::int64_t> shape = t.shape;
    if (shape.empty()) shape.push_back(static_cast<std::int64_t>(t.values.size()));
    std::uint64_t elements = 1;
    for (const std::int64_t d : shape) {
      if (d < 0) throw Error(path.string() + ": tensor '" + t.name + "' has a negative dimension");
      elements *= static_cast<std::uint64_t>(d);
    }
    if (elements != t.values.size())
      throw Error(path.string() + ": tensor '" + t.name + "' has " + std::to_string(t.values.size()) +
                  " values, its shape holds " + std::to_string(elements));
    const std::uint64_t bytes = t.values.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as safetensors writes it
  const std::uint64_t header_len = text.size();

  AtomicFile file(path);
  file.write(&header_len, sizeof header_len);
  file.write(text);
  for (const auto& t : tensors) file.write(t.values.data(), t.values.size() * sizeof(float));
  file.commit();
}

}  // namespace mpsim::io
