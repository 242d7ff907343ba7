// A .npy file written as it is computed: the header first, then the data in as many pieces as the
// caller likes, through an AtomicFile (docs/design.md, "Errors"): the file appears under its name only when
// commit() finds every element written; an error, or a writer destroyed before commit(), leaves nothing.
// The commands that round or compute arrays larger than memory write their output with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "mpsim/io/atomic_file.hpp"
#include "mpsim/io/npy.hpp"

namespace mpsim::io {

class NpyWriter {
 public:
  // Creates the temporary file and writes the header (version 1.0, C order; see npy_header_bytes).
  NpyWriter(std::filesystem::path path, DType dtype, std::vector<std::int64_t> shape);

  // Appends elements in C order. T must be the dtype's element size (float for f32, std::uint16_t
  // for f16 / bf16 bits, ...); writing past the shape's count is an mpsim::Error.
  template <class T>
  void append(std::span<const T> values) {
    append_bytes(values.data(), values.size(), sizeof(T));
  }
  void append_bytes(const void* data, std::uint64_t count, std::size_t elem_size);

  // Renames the finished file into place; an mpsim::Error if fewer elements than the shape holds were
  // written (the temporary is removed).
  void commit();

  DType dtype() const { return dtype_; }
  std::uint64_t count() const { return count_; }
  std::uint64_t written() const { return written_; }

 private:
  AtomicFile file_;
  DType dtype_;
  std::uint64_t count_ = 1, written_ = 0;
};

}  // namespace mpsim::io
