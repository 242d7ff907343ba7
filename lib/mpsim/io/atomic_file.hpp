// Output files appear whole or not at all (DESIGN.md, "Errors"): write to a temporary name beside the
// target, then rename over it. An AtomicFile that is destroyed without commit() removes its temporary.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace mpsim::io {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Writes at a byte offset (a file laid out in advance; a gap reads as zeros until written). A later
  // write() continues after these bytes.
  void write_at(std::uint64_t offset, const void* data, std::size_t bytes);
  // Flushes, closes and renames onto the target. Throws mpsim::Error naming the file on failure.
  void commit();
  const std::filesystem::path& target() const { return target_; }

 private:
  std::filesystem::path target_, temp_;
  std::FILE* file_ = nullptr;
};

// Writes the whole text atomically.
void write_text_file(const std::filesystem::path& path, std::string_view text);

}  // namespace mpsim::io
