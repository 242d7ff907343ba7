// Internal to the tensor readers: the zip (.npz) side of TensorSource (PKWARE APPNOTE.TXT): the directory of
// an .npz's .npy members, a zip member inflated piece by piece, and a stored member's CRC-32 check.
// Not installed.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "mpsim/io/detail/tensor_reader.hpp"
#include "mpsim/io/tensor_source.hpp"

namespace mpsim::io::detail {

// Inflates a zip member (raw deflate) piece by piece, keeping the CRC-32 of what it produced.
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

// The tensors of an .npz file (every member a .npy array, named as numpy.load names it).
std::vector<TensorRef> read_npz_directory(std::span<const std::byte> b, const std::string& file,
                                          const SourceOptions& o);

// A stored (uncompressed) npz member's CRC-32, checked like a deflated one's: numpy's zipfile refuses a member
// whose bytes disagree with the central directory (zipfile.ZipExtFile._update_crc), whether or not it is
// compressed. `crc` is the CRC-32 of the member's first `done` bytes; the rest are read from `b` here.
void check_stored_crc(std::span<const std::byte> b, const TensorRef& t, uLong crc, std::uint64_t done);

}  // namespace mpsim::io::detail
