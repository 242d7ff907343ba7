// libFuzzer target: `mpsim train --scaler-state FILE`, a torch.amp.GradScaler.state_dict() saved as JSON
// (lib/mpsim/train/scaler.hpp, scaler_from_torch_state). Any JSON text must either give a scaler or throw
// mpsim::Error; an accepted state must survive the spelling the run records (to_spec, parse_scaler).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "mpsim/error.hpp"
#include "mpsim/train/scaler.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto state = nlohmann::json::parse(data, data + size, nullptr, false);
  if (state.is_discarded()) return 0;  // `train` reports invalid JSON before this parser sees it
  try {
    const auto config = mpsim::train::scaler_from_torch_state(state, "fuzz.json");
    const auto again = mpsim::train::parse_scaler(mpsim::train::to_spec(config));
    if (mpsim::train::to_spec(again) != mpsim::train::to_spec(config)) __builtin_trap();
  } catch (const mpsim::Error&) {}
  return 0;
}
