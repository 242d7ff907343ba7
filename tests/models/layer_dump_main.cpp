// mpsim_layer_dump: writes models::write_layer_dump's file (lib/mpsim/models/layer_dump.hpp) for the Python
// tests that check the simulator against PyTorch (tests/python/test_sim_vs_torch.py).
//   mpsim_layer_dump --model ssd|lstm [--batch B] [--size N] [--seed S] [--batch-index I]
//                    [--policy SPEC] [--loss-scale X] --out FILE.safetensors
// Bad input: one message naming it, exit 2 (as the mpsim command line); a runtime failure exits 3.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "mpsim/error.hpp"
#include "mpsim/models/layer_dump.hpp"

int main(int argc, char** argv) {
  CLI::App app{"One training step of an mpsim model with every rounding site recorded, as safetensors"};
  mpsim::models::LayerDumpOptions o;
  std::string out;
  app.add_option("--model", o.model, "ssd or lstm")->required();
  app.add_option("--batch", o.config.batch, "batch size (0: the model's default)");
  app.add_option("--size", o.config.size, "the model's width knob (0: its default)");
  app.add_option("--seed", o.seed, "the run's seed (weights and data)");
  app.add_option("--batch-index", o.batch_index, "which training batch");
  app.add_option("--policy", o.policy, "precision policy (fp32, mixed-fp16, ...)");
  app.add_option("--loss-scale", o.loss_scale, "loss scale of the step");
  app.add_option("--out", out, "output file (safetensors)")->required();
  try {
    app.parse(argc, argv);
    mpsim::models::write_layer_dump(out, o);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const mpsim::Error& e) {
    std::fprintf(stderr, "mpsim_layer_dump: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpsim_layer_dump: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
