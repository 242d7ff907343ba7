// Checkpoint files in the safetensors format (https://github.com/huggingface/safetensors, README
// "Format"), so that numpy (safetensors.numpy.load_file), torch and mpsim's own `hist` / `underflow` open
// a run's weights:
//   u64 (little-endian)  header length H
//   H bytes              JSON header, padded with spaces to a multiple of 8 bytes:
//                          {"__metadata__": {...}, "param/<name>": {"dtype": "F32", "shape": [n],
//                           "data_offsets": [begin, end]}, "optimizer/<k>": {...}, ...}
//   the tensors' float32 values, little-endian, in the order of the "tensors" entry of the metadata
// safetensors metadata values are strings: every entry of the run's header (model, config, step,
// optimiser and scaler state, ...) is stored as its JSON text (json.loads in Python gives the value back);
// "tensors" lists the tensor names in order, "data_crc32" is the CRC-32 (zlib's crc32) of the data,
// "format" says "mpsim training checkpoint" and "schema" "mpsim-checkpoint-1".
// The scaler state carries torch.amp.GradScaler.state_dict()'s key names (scaler.hpp).
// Written atomically (io::AtomicFile): a checkpoint is whole or absent.
#pragma once

#include <cstddef>
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
  nlohmann::json header;  // everything but the tensors; header["tensors"] lists their names
  std::vector<CheckpointTensor> tensors;
};

struct CheckpointTensorView {
  std::string name;
  std::span<const float> values;
};

// Writes header + tensors atomically to `path`. header["tensors"] is filled in here.
void write_checkpoint(const std::filesystem::path& path, nlohmann::json header,
                      std::span<const CheckpointTensorView> tensors);

// Reads and checks a checkpoint: the safetensors structure, the metadata, the tensors (F32), the data's
// CRC-32. Throws mpsim::Error naming the file and what is wrong (truncated, corrupt, not a checkpoint, a
// checkpoint in the MPSIMCKP container of earlier mpsim versions).
Checkpoint read_checkpoint(const std::filesystem::path& path);
// The same from the file's bytes; `name` names it in messages (the fuzz target tests/fuzz/fuzz_checkpoint.cpp).
Checkpoint read_checkpoint_bytes(std::vector<std::byte> bytes, const std::string& name);

}  // namespace mpsim::train
