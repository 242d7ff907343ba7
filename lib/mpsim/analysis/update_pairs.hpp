// The (weights, updates) tensor pairs `mpsim updates` measures (tools/mpsim/updates.cpp): found in two files
// whose tensors pair up in order, or in one file by name, and read pair by pair into a SwallowedUpdates
// (updates.hpp), in step, chunk by chunk, from the mapped files.
#pragma once

#include <string>
#include <vector>

#include "mpsim/analysis/inputs.hpp"
#include "mpsim/analysis/updates.hpp"
#include "mpsim/io/progress.hpp"

namespace mpsim::analysis {

struct UpdatePair {
  TensorInfo weights, updates;
};

// The i-th tensor of `weights_file` with the i-th of `updates_file`. mpsim::Error when a file cannot be read,
// holds no tensors, when the two hold different numbers of tensors, or a pair different numbers of values.
std::vector<UpdatePair> pairs_in_order(const std::string& weights_file, const std::string& updates_file,
                                       const InputOptions& options);

// The tensors named `weights` and `updates` of `file`. mpsim::Error when one is not there, or the two hold
// different numbers of values.
UpdatePair pair_by_name(const std::string& file, const std::string& weights, const std::string& updates,
                        const InputOptions& options);

// Adds the pair to `s`: read in step, 2^20 elements at a time, from the mapped files (resident memory bounded
// whatever their size); a compressed npz member or a Fortran-order array cannot be read by range and is read
// whole. `progress` (may be null) advances by the bytes read.
void add_pair(SwallowedUpdates& s, const UpdatePair& pair, const InputOptions& options, io::ProgressBar* progress);

}  // namespace mpsim::analysis
