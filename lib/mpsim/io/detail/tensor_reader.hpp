// Internal to the tensor readers (tensor_source.cpp, zip_reader.cpp, safetensors_reader.cpp): the helpers
// every file kind's directory reader shares. Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mpsim/io/npy.hpp"
#include "mpsim/io/tensor_source.hpp"

namespace mpsim::io::detail {

// Throws mpsim::Error with the message (every reader's errors name the file or member first).
[[noreturn]] void fail(const std::string& what);
// The same for a message that advises the dtype override (SourceOptions::dtype), marked "{dtype}" in it: a
// FieldError, so that each front end names it its own way (the command line: --dtype).
[[noreturn]] void fail_advising_dtype(const std::string& what);
// The little-endian unsigned integer of n bytes at b[at].
std::uint64_t le(std::span<const std::byte> b, std::size_t at, int n);
bool is_integer(DType t);
// "file" or "file:name".
std::string label_of(const std::string& file, const std::string& name);
// The dtype a stored tensor is read as under the override (SourceOptions::dtype); `single`: the file's only
// tensor, where an override that cannot apply is an error rather than left out.
DType effective(DType stored, const SourceOptions& o, bool single, const std::string& label);
// The element count of `shape`, refusing negative dimensions and counts whose bytes overflow.
std::uint64_t checked_count(const std::vector<std::int64_t>& shape, std::size_t elem, const std::string& label);
// A tensor described by a .npy header (a .npy file, or an .npz member with name).
TensorRef npy_tensor(const NpyHeader& h, const std::string& file, const std::string& name, const SourceOptions& o);

}  // namespace mpsim::io::detail
