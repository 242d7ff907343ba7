// make_model: the models by name (declared in nn/model.hpp so the training loop needs no model headers).
#include "mpsim/error.hpp"
#include "mpsim/models/lstm_lm.hpp"
#include "mpsim/models/ssd_lite.hpp"
#include "mpsim/nn/model.hpp"

namespace mpsim::nn {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"ssd", "lstm"};
  return names;
}

std::unique_ptr<Model> make_model(std::string_view name, const ModelConfig& config, std::uint64_t seed) {
  if (name == "ssd" || name == "ssd_lite") return models::make_ssd_lite(config, seed);
  if (name == "lstm" || name == "lstm_lm") return models::make_lstm_lm(config, seed);
  throw Error("unknown model '" + std::string(name) + "' (expected ssd or lstm)");
}

}  // namespace mpsim::nn
