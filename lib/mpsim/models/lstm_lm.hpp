// lstm_lm: embedding (V, 32) -> LSTM (hidden `size`, default 64) -> linear (V) -> softmax cross-entropy,
// trained on windows of 32 tokens (batch 16 by default) of the generated language (corpus.hpp) or of a
// UTF-8 text file. Metric: validation cross-entropy in bits per token.
#pragma once

#include <memory>

#include "mpsim/nn/model.hpp"

namespace mpsim::models {

std::unique_ptr<nn::Model> make_lstm_lm(const nn::ModelConfig& config, std::uint64_t seed);

}  // namespace mpsim::models
