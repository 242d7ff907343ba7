// The inputs of the analysis commands: every tensor of every file named (a directory names its
// regular files, sorted) — .npy, .npz, safetensors or raw, read through io::TensorSource — streamed
// in chunks from a memory map so that files larger than memory are analysed in bounded memory.
// A file that cannot be read is reported by name and the others go on.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mpsim/field_error.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/progress.hpp"

namespace mpsim::analysis {

struct TensorInfo {
  std::string file;   // the path as given (or found in a directory)
  std::string name;   // the tensor's name inside the file ("" for a bare .npy)
  std::string label;  // how reports name it: "file" or "file:name"
  std::vector<std::int64_t> shape;
  std::uint64_t count = 0;
  io::DType dtype = io::DType::f32;
};

// One chunk of a tensor's values in element order: `f` holds them for every type float holds exactly
// (f32, f16, bf16 and fp8 bits), `d` for f64 (exactly one of them is non-empty unless the chunk is
// empty); `offset` is the index of the chunk's first element in the tensor.
using ChunkVisitor = std::function<void(std::span<const float> f, std::span<const double> d, std::uint64_t offset)>;
// Streams the tensor's chunks into the visitor; throws mpsim::Error naming the file on a read error.
using TensorRead = std::function<void(const ChunkVisitor&)>;

struct InputOptions {
  // How to read integer arrays: u16 as bf16 (or fp16) bits, u8 as fp8 bits (`--dtype`).
  std::optional<io::DType> dtype;
  std::size_t chunk_elements = std::size_t{1} << 20;
  // Advanced by the stored bytes of every chunk read (io/progress.hpp), when given.
  io::ProgressBar* progress = nullptr;
};

struct InputFailure {
  std::string input;    // the file
  std::string message;  // mpsim::Error's message (it names the file and what is wrong)
  // The error, where its message advises a field (a dtype for raw data): a front end words `message` again
  // with its own name for it (FieldError::message; the command line's --dtype, tools/mpsim/analysis_common.hpp).
  std::optional<FieldError> field_error;
};

// The files the inputs name: files as given, directories expanded to their regular files (sorted).
// Throws mpsim::Error for an input that does not exist.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

// Calls fn(info, read) for every tensor of every file, in order. An mpsim::Error thrown while a file
// is opened or read (by read() inside fn, too) abandons that file: it is recorded in the result and
// the next file goes on; fn should therefore keep a tensor's results only once read() has returned.
std::vector<InputFailure> for_each_tensor(const std::vector<std::string>& files, const InputOptions& options,
                                          const std::function<void(const TensorInfo&, const TensorRead&)>& fn);

// The bytes of the files together: the total of a progress line over them.
std::uint64_t total_bytes(const std::vector<std::string>& files);

// Reads one whole tensor as doubles (for reports that pair tensors element by element).
std::vector<double> read_all(const TensorRead& read, std::uint64_t count);

}  // namespace mpsim::analysis
