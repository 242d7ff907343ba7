#include "mpsim/io/npy_writer.hpp"

#include <fmt/core.h>

#include "mpsim/error.hpp"

namespace mpsim::io {

NpyWriter::NpyWriter(std::filesystem::path path, DType dtype, std::vector<std::int64_t> shape)
    : file_(std::move(path)), dtype_(dtype) {
  const auto header = npy_header_bytes(dtype, shape);  // checks the shape
  for (std::int64_t d : shape) count_ *= static_cast<std::uint64_t>(d);
  file_.write(header.data(), header.size());
}

void NpyWriter::append_bytes(const void* data, std::uint64_t count, std::size_t elem_size) {
  if (elem_size != dtype_size(dtype_))
    throw Error(fmt::format("{}: writing {}-byte elements into a {} array", file_.target().string(), elem_size,
                            to_string(dtype_)));
  if (count > count_ - written_)
    throw Error(fmt::format("{}: {} elements written past the array's {}", file_.target().string(),
                            written_ + count - count_, count_));
  file_.write(data, count * elem_size);
  written_ += count;
}

void NpyWriter::commit() {
  if (written_ != count_)
    throw Error(fmt::format("{}: {} of {} elements written", file_.target().string(), written_, count_));
  file_.commit();
}

}  // namespace mpsim::io
