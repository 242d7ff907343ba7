// An .npz archive written as its members are computed: numpy.savez's layout (a zip of stored .npy members),
// through an AtomicFile (docs/design.md, "Errors": the file appears under its name only when commit() finds every
// member complete; an error, or a writer destroyed before commit(), leaves nothing).
//
// Every member's dtype and shape are given up front, so each has its place in the file from the start: the
// elements of several members may be appended interleaved (each member's in order), as a block quantizer
// produces elements and scales together. commit() fills in the zip headers (with each member's CRC-32, kept
// as it is appended). The bytes equal npz_bytes' for the same arrays.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "mpsim/io/atomic_file.hpp"
#include "mpsim/io/npy.hpp"

namespace mpsim::io {

class NpzWriter {
 public:
  struct Member {
    std::string name;  // stored as NAME.npy
    DType dtype;
    std::vector<std::int64_t> shape;
  };
  // Creates the temporary file; throws mpsim::Error naming a member too large for a zip without zip64.
  NpzWriter(std::filesystem::path path, std::vector<Member> members);

  // Appends elements of member `index` (in the order given to the constructor) in C order; T must be the
  // dtype's element size, and writing past the member's shape is an mpsim::Error.
  template <class T>
  void append(std::size_t index, std::span<const T> values) {
    append_bytes(index, values.data(), values.size(), sizeof(T));
  }
  void append_bytes(std::size_t index, const void* data, std::uint64_t count, std::size_t elem_size);

  // Writes the zip headers and renames the finished file into place; an mpsim::Error if a member is short.
  void commit();

 private:
  struct Slot {
    Member member;
    std::uint64_t header_offset = 0;  // of the zip local header
    std::uint64_t data_offset = 0;    // of the .npy bytes (its header, then the elements)
    std::uint64_t npy_bytes = 0;      // the .npy member's size
    std::uint64_t count = 1, written = 0;
    std::uint32_t crc = 0;
  };
  AtomicFile file_;
  std::vector<Slot> slots_;
  std::uint64_t end_ = 0;  // where the central directory goes
};

}  // namespace mpsim::io
