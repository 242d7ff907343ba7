// Checkpoint files: one file holding a JSON header (model name, config, tensor names and sizes, optimiser,
// scaler and RNG state, step, ...) and the raw fp32 tensors (master weights, then optimiser buffers),
// closed by a CRC-32. Written atomically (io::AtomicFile): a checkpoint is whole or absent.
//
// Layout (little-endian):
//   8 bytes  magic "MPSIMCKP"
//   u32      version (1)
//   u64      header length H
//   H bytes  header, JSON text (UTF-8)
//   4*N      the tensors' float32 values, in the order of header["tensors"] (each {"name","size"})
//   u32      CRC-32 (zlib's crc32, ISO-HDLC polynomial) of every byte before it
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace mpsim::train {

struct CheckpointTensor {
  std::string name;
  std::vector<float> values;
};

struct Checkpoint {
  nlohmann::json header;  // everything but the tensors; header["tensors"] lists their names and sizes
  std::vector<CheckpointTensor> tensors;
};

struct CheckpointTensorView {
  std::string name;
  std::span<const float> values;
};

// Writes header + tensors atomically to `path`. header["tensors"] is filled in here.
void write_checkpoint(const std::filesystem::path& path, nlohmann::json header,
                      std::span<const CheckpointTensorView> tensors);

// Reads and checks a checkpoint: magic, version, lengths, checksum, JSON, tensor sizes. Throws
// mpsim::Error naming the file and what is wrong (truncated, corrupt, not a checkpoint).
Checkpoint read_checkpoint(const std::filesystem::path& path);

}  // namespace mpsim::train
