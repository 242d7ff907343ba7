// mpsim accumulation-error --model h100-fp8 --k 32..65536 [--promote-every 128] [--json F] [--csv F]: the error
// of a matrix unit's dot products against the exact ones as K grows, fast and promoted to fp32 every N
// (lib/mpsim/mma/accumulation.hpp, docs/mma.md).
#include <fmt/core.h>

#include <memory>
#include <string>

#include "command.hpp"
#include "mpsim/error.hpp"
#include "mpsim/mma/accumulation.hpp"
#include "npy_input.hpp"

namespace {

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "accumulation-error", "Error of a matrix unit's dot products against the exact ones by K, fast and promoted");
  struct Opts {
    std::string model, k = "32..65536", json, csv, data = "uniform";
    std::vector<std::string> tensors;
    int trials = 32, promote = 128;
    std::uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "The unit: MODEL-INPUT (h100-fp8 = fp8_e4m3 in, h100-fp16, b200-bf16, ...)")
      ->required();
  cmd->add_option("--k", o->k, "Lengths: LO..HI (powers of two), a list K1,K2,..., or one K");
  cmd->add_option("--trials", o->trials, "Dot products per K");
  cmd->add_option("--promote-every", o->promote,
                  "The promoted variant's interval (0: fast only; default 128 for fp32-output units)");
  cmd->add_option("--data", o->data, "Operands: uniform ([0, 1)) or normal (N(0, 1)), rounded to the input format");
  cmd->add_option("--seed", o->seed, "Seed of the operands");
  cmd->add_option("--tensors", o->tensors,
                  "Real operands instead: A.npy (M x K) B.npy (K x N); trials take rows of A and "
                  "columns of B")
      ->expected(2);
  cmd->add_option("--json", o->json, "Write the report as JSON (-: standard output)");
  cmd->add_option("--csv", o->csv, "Write the table as CSV (-: standard output)");
  cmd->callback([o, cmd] {
    const auto unit = mpsim::mma::parse_matrix_unit(o->model);
    mpsim::mma::AccumulationOptions opt;
    opt.ks = mpsim::mma::parse_k_range(o->k);
    opt.trials = o->trials;
    // The default promotion needs an fp32 accumulator; an fp16-output unit is reported fast only unless asked.
    opt.promote_every = (cmd->count("--promote-every") == 0 && !(unit.output == mpsim::fp32())) ? 0 : o->promote;
    opt.seed = o->seed;
    opt.data = o->data;
    if (!o->tensors.empty()) {
      std::vector<std::int64_t> shape[2];
      std::vector<double>* dst[2] = {&opt.a_matrix, &opt.b_matrix};
      for (int m = 0; m < 2; ++m) {
        const auto src = mpsim::cli::open_npy(o->tensors[static_cast<std::size_t>(m)]);
        const auto& t = src.tensors().front();
        if (t.shape.size() != 2)
          throw mpsim::Error(fmt::format("{}: --tensors takes 2-d arrays, got shape {}",
                                         o->tensors[static_cast<std::size_t>(m)], mpsim::io::shape_string(t.shape)));
        shape[m] = t.shape;
        *dst[m] = src.read_double(t);
      }
      if (shape[0][1] != shape[1][0])
        throw mpsim::Error(fmt::format("{} and {}: shapes ({}, {}) and ({}, {}) do not multiply", o->tensors[0],
                                       o->tensors[1], shape[0][0], shape[0][1], shape[1][0], shape[1][1]));
      opt.rows = static_cast<std::size_t>(shape[0][0]);
      opt.cols = static_cast<std::size_t>(shape[0][1]);
      opt.b_cols = static_cast<std::size_t>(shape[1][1]);
      opt.data = "tensors";
    }
    const auto rep = mpsim::mma::accumulation_error(unit, opt);
    if (!o->json.empty()) mpsim::cli::write_report(o->json, mpsim::mma::accumulation_json(rep));
    if (!o->csv.empty()) mpsim::cli::write_report(o->csv, mpsim::mma::accumulation_csv(rep));
    fmt::print("{}\n", rep.unit);
    if (!rep.promoted_unit.empty()) fmt::print("promoted: every {} elements into fp32 (RNE)\n", opt.promote_every);
    fmt::print("{:>8} {:>13} {:>13} {:>11} | {:>13} {:>13} {:>11}   ({} {} trials per K)\n", "K", "fast rel med",
               "fast rel max", "fast ulps", "prom rel med", "prom rel max", "prom ulps", opt.trials, opt.data);
    for (std::size_t i = 0; i < rep.fast.size(); ++i) {
      const auto& f = rep.fast[i];
      fmt::print("{:>8} {:>13.4g} {:>13.4g} {:>11.4g}", f.k, f.rel_median, f.rel_max, f.ulps_mean);
      if (i < rep.promoted.size()) {
        const auto& p = rep.promoted[i];
        fmt::print(" | {:>13.4g} {:>13.4g} {:>11.4g}", p.rel_median, p.rel_max, p.ulps_mean);
      }
      fmt::print("\n");
    }
  });
}

const bool registered = mpsim::cli::register_command("accumulation-error", setup);

}  // namespace
