// Options, input handling and output writing shared by the analysis commands (hist, underflow,
// rounding, updates). Thin: the work is in lib/mpsim/analysis.
#pragma once

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command.hpp"
#include "mpsim/analysis/detail/report_text.hpp"
#include "mpsim/analysis/inputs.hpp"
#include "mpsim/analysis/report.hpp"
#include "mpsim/analysis/tensor_passes.hpp"  // row_length
#include "mpsim/error.hpp"
#include "mpsim/format/block.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/progress.hpp"

namespace mpsim::cli::analysis_cli {

struct CommonOptions {
  std::vector<std::string> inputs;
  std::string format = "fp16";
  double scale = 1;
  std::string json_path, csv_path, dtype;
  // Elements per chunk of the streamed reads (and per run of rows of a block format): the tests make it
  // small so that a tensor spans many chunks.
  std::size_t chunk = std::size_t{1} << 20;
};

inline void add_common(CLI::App* cmd, CommonOptions& o, bool with_inputs = true) {
  if (with_inputs)
    cmd->add_option("inputs", o.inputs, "Files or directories of tensors (.npy, .npz, safetensors; raw with --dtype)")
        ->required();
  cmd->add_option("--format", o.format, "Target format (fp16, bf16, fp8_e4m3, ... or ml_dtypes names)")
      ->capture_default_str();
  cmd->add_option("--scale", o.scale, "Loss scale S applied before rounding (a power of two)")->capture_default_str();
  cmd->add_option("--json", o.json_path, "Write the report as JSON to this file (-: standard output)");
  cmd->add_option("--csv", o.csv_path,
                  "Write the report as tidy CSV (tensor,format,scale,stat,value; -: standard output)");
  cmd->add_option("--dtype", o.dtype, "Read integer arrays as the bits of this type (bf16, fp16, fp8_e4m3, fp8_e5m2)");
  cmd->add_option("--chunk", o.chunk, "Elements read per chunk")->group("");  // hidden: for the tests
}

// --block / --block-scale, for the commands whose --format may name a block format (hist, rounding-error).
struct BlockOptions {
  int block = 0;  // 0: the format's own (32; nvfp4 16)
  std::string scale_rule = "floor";
};

inline void add_block_options(CLI::App* cmd, BlockOptions& b) {
  cmd->add_option("--block", b.block, "Block formats: elements per block (default 32; nvfp4 16)");
  cmd->add_option("--block-scale", b.scale_rule, "MX formats: floor (OCP MX) or rceil")->capture_default_str();
}

// The block format --format names, if it names one (blocks run along each tensor's last axis).
inline std::optional<BlockFormat> block_format_of(const std::string& name, const BlockOptions& b) {
  if (!is_block_format_name(name)) return std::nullopt;
  return parse_block_format(name, b.block, parse_block_scale_rule(b.scale_rule));
}

// log2 of a power-of-two scale; mpsim::Error naming --scale otherwise.
inline int log2_scale(double scale) {
  int e = 0;
  if (!(scale > 0) || !std::isfinite(scale) || std::frexp(scale, &e) != 0.5)
    throw Error(fmt::format("--scale {}: must be a positive power of two (loss scales are; the reports use it exactly)",
                            scale));
  return e - 1;  // frexp's exponent is one more than the binade
}

// `progress` (may be null) is advanced as the inputs are read.
inline analysis::InputOptions input_options(const CommonOptions& o, io::ProgressBar* progress = nullptr) {
  analysis::InputOptions io;
  if (o.chunk == 0) throw Error("--chunk must be at least 1");
  io.chunk_elements = o.chunk;
  if (!o.dtype.empty()) io.dtype = io::parse_dtype(o.dtype, "--dtype");
  io.progress = progress;
  // "e4m3" used to mean OCP's e4m3fn here while --format read it as IEEE-style; one name table now gives
  // it the --format meaning everywhere.
  if (o.dtype == "e4m3")
    fmt::print(stderr,
               "warning: --dtype e4m3 is the IEEE-style e4m3 (ml_dtypes' float8_e4m3, max 240), as under "
               "--format; for OCP's e4m3fn (max 448) say fp8_e4m3 or float8_e4m3fn\n");
  return io;
}

// The progress line of a command reading these files (drawn only on a terminal).
// `passes`: how many times each tensor is read (2 where nvfp4's tensor scale or a per-tensor amax is needed first).
inline std::unique_ptr<io::ProgressBar> input_progress(const std::string& command,
                                                       const std::vector<std::string>& files, int passes = 1) {
  return std::make_unique<io::ProgressBar>(command, analysis::total_bytes(files) * static_cast<std::uint64_t>(passes),
                                           io::ProgressBar::Unit::bytes);
}

// After the inputs were read: with no tensor read at all, an error (exit 2, nothing written); with
// some inputs failing, they are named on stderr and the exit status becomes 1 (the others reported).
inline void check_failures(const std::vector<analysis::InputFailure>& failures, std::size_t tensors_read) {
  if (failures.empty() && tensors_read > 0) return;
  if (tensors_read == 0) {
    std::string msg = failures.empty() ? std::string("no tensors in the inputs") : failures.front().message;
    for (std::size_t i = 1; i < failures.size(); ++i) msg += "; " + failures[i].message;
    throw Error(msg);
  }
  for (const auto& f : failures)
    fmt::print(stderr, "mpsim: error: {} (skipped; the other inputs are reported)\n", f.message);
  exit_status() = 1;
}

// The end of a pass over the inputs (analysis/tensor_passes.hpp): the progress line closed, the failures
// worded with the command line's flags (an unknown file's "pass --dtype") and checked as above. Returns the pass.
template <class Pass>
const Pass& finish_pass(Pass& pass, io::ProgressBar& progress) {
  progress.finish();
  for (auto& f : pass.failures)
    if (f.field_error) f.message = f.field_error->message(flag_of_field, " ");
  check_failures(pass.failures, pass.tensors.size());
  return pass;
}

// The report in its envelope (analysis/report.hpp, which the Python package's reports share) to --json, the
// tidy CSV to --csv.
inline void write_outputs(const CommonOptions& o, const analysis::Report& report, const analysis::TidyCsv& csv) {
  // Both are built before either is written; each appears whole or not at all ("-": standard output).
  const std::string json_text = analysis::report_json(report).dump(2) + "\n";
  const std::string csv_text = csv.text();
  if (!o.json_path.empty()) write_report(o.json_path, json_text);
  if (!o.csv_path.empty()) write_report(o.csv_path, csv_text);
}

inline std::string num(const nlohmann::json& v) { return analysis::number_text(v); }

}  // namespace mpsim::cli::analysis_cli
