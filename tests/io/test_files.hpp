// Helpers for the io tests: a scratch directory removed at exit, and byte-string builders.
#pragma once

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/error.hpp"

namespace mpsim::test {

// A fresh directory under the system temp dir, removed with everything in it when destroyed.
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view tag) {
    static int serial = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("mpsim-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }
  // Names of the files in the directory (to check that nothing was left behind).
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    return out;
  }

 private:
  std::filesystem::path path_;
};

using Bytes = std::vector<std::byte>;

inline Bytes bytes_of(std::string_view s) {
  Bytes b(s.size());
  if (!s.empty()) std::memcpy(b.data(), s.data(), s.size());
  return b;
}
inline void append(Bytes& b, const Bytes& more) { b.insert(b.end(), more.begin(), more.end()); }
inline void append(Bytes& b, std::string_view s) { append(b, bytes_of(s)); }
template <class T>
void append_le(Bytes& b, T v, int n = sizeof(T)) {
  for (int i = 0; i < n; ++i) b.push_back(std::byte((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
}
template <class T>
void append_be(Bytes& b, T v, int n = sizeof(T)) {
  for (int i = n - 1; i >= 0; --i) b.push_back(std::byte((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
}

inline void write_bytes(const std::filesystem::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
inline Bytes read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return bytes_of(s);
}

// A .npy file built by hand, independently of the library's writer: magic, version, header length
// (2 bytes for 1.0, 4 for 2.0/3.0), the header text as given (no padding added), then `data`.
inline Bytes npy_file(std::string_view header, const Bytes& data, int major = 1) {
  Bytes b = bytes_of("\x93NUMPY");
  b.push_back(std::byte(major));
  b.push_back(std::byte(0));
  append_le(b, header.size(), major == 1 ? 2 : 4);
  append(b, header);
  append(b, data);
  return b;
}

// The whole file as bytes in a string.
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The message of the mpsim::Error `fn` throws ("" if none).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const mpsim::Error& e) {
    return e.what();
  }
  return "";
}

// A character device to write to in a test: a node of the same device (major, minor: /dev/null is 1, 3 and
// /dev/full 1, 7, Documentation/admin-guide/devices.txt) made in `dir` when running as root, the real one in
// /dev otherwise. Never the real one as root: a regression that replaces the target by a regular file would
// replace the machine's /dev/null. "" when no safe node can be had (root without CAP_MKNOD).
inline std::string safe_device(const ScratchDir& dir, const std::string& name, unsigned major, unsigned minor) {
  if (::geteuid() != 0) return "/dev/" + name;
  const auto node = dir / ("device-" + name);
  if (::mknod(node.c_str(), S_IFCHR | 0666, ::makedev(major, minor)) != 0) return "";
  return node.string();
}

}  // namespace mpsim::test
