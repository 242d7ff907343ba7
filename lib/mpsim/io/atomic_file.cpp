#include "mpsim/io/atomic_file.hpp"

#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mpsim/error.hpp"

namespace mpsim::io {

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  temp_ = target_;
  temp_ += ".tmp." + std::to_string(::getpid());
  file_ = std::fopen(temp_.c_str(), "wb");
  if (!file_) throw Error(target_.string() + ": cannot create: " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    std::error_code ec;
    std::filesystem::remove(temp_, ec);
  }
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes)
    throw Error(target_.string() + ": write failed: " + std::strerror(errno));
}

void AtomicFile::write_at(std::uint64_t offset, const void* data, std::size_t bytes) {
  if (::fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0)
    throw Error(target_.string() + ": seek failed: " + std::strerror(errno));
  write(data, bytes);
}

void AtomicFile::commit() {
  if (std::fflush(file_) != 0 || std::ferror(file_))
    throw Error(target_.string() + ": write failed: " + std::strerror(errno));
  std::fclose(file_);
  file_ = nullptr;
  std::error_code ec;
  std::filesystem::rename(temp_, target_, ec);
  if (ec) {
    std::filesystem::remove(temp_, ec);
    throw Error(target_.string() + ": cannot rename the finished file into place: " + ec.message());
  }
}

void write_text_file(const std::filesystem::path& path, std::string_view text) {
  AtomicFile f(path);
  f.write(text);
  f.commit();
}

}  // namespace mpsim::io
