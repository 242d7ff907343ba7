// One training step of a model with every rounding site recorded, for checking the hand-written forward
// and backward passes against another implementation (tests/python/test_sim_vs_torch.py compares them with
// PyTorch autograd; docs/validation.md). The step is Model::forward_backward on one training batch, under
// a precision policy, with a Precision observer (nn/policy.hpp) tapping every site.
//
// The file is safetensors (io/safetensors_writer.hpp), float32 tensors:
//   param/<name>          the fp32 master weights the step used, (n)
//   grad/<name>           the gradient buffers after the step (zeroed before it), (n): the loss scale included
//   site/<site>           the values at the site BEFORE rounding, (calls, n): one row per call of the site in
//                         the step (the LSTM's sites inside its time loop are called once per time step, in the
//                         order the step makes them: forward t = 0..T-1, backward t = T-1..0)
//   rounded/<site>        the same AFTER rounding, only at sites the policy rounds
//   batch/images          ssd: the batch's images, (B, 1, S, S)
// and metadata (safetensors metadata values are strings; each is JSON text):
//   format "mpsim layer dump", schema "mpsim-layer-dump-2", model, seed, batch_index, batch, size, policy,
//   loss_scale, loss (the unscaled fp32 loss of the batch), sites (in first-call order: name, class),
//   site_stats ({site: the bulk engine's Stats of the step at that site, under `mpsim round --stats-json`'s
//              names, format/stats_fields.hpp; schema -1 spelled overflow_num as overflow}, rounded sites only),
//   ssd: truths (per image [[cx, cy, w, h, label], ...]); lstm: inputs and targets ((T, B) token ids).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "mpsim/nn/model.hpp"

namespace mpsim::models {

struct LayerDumpOptions {
  std::string model = "ssd";  // "ssd" or "lstm" (the generated corpus only)
  nn::ModelConfig config;     // batch and size (0 = the model's defaults)
  std::uint64_t seed = 1;
  std::uint64_t batch_index = 0;
  std::string policy = "fp32";  // any spec nn::parse_policy takes
  float loss_scale = 1.0f;
};

// Runs the step and writes the dump atomically to `path`. Throws mpsim::Error naming a bad option.
void write_layer_dump(const std::filesystem::path& path, const LayerDumpOptions& options);

}  // namespace mpsim::models
