// The report of an analysis command: what `mpsim hist`, `underflow`, `rounding-error` and `updates` write
// with --json (tools/mpsim/*.cpp) and the Python package's report functions return (python/src/analysis.cpp,
// `mpsim.hist_report_json`, `mpsim.underflow_report_json`). The envelope every one shares is written here once:
//   {"command", <the command's own fields>, "tensors": [one entry per tensor], "total": the entry of all of
//    them together, "failed": [{"input", "error"}], "schema": "mpsim-<command>-1", "mpsim_version"}
// (docs/analysis.md describes each command's fields and entries).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpsim/analysis/inputs.hpp"

namespace mpsim::analysis {

struct Report {
  std::string command;                               // "hist", "underflow", "rounding-error", "updates"
  nlohmann::json fields = nlohmann::json::object();  // the command's own: format, scale, ...
  nlohmann::json tensors = nlohmann::json::array();  // one entry per tensor (per pair of tensors: updates)
  nlohmann::json total = nlohmann::json::object();   // the entry of all of them together
  std::vector<InputFailure> failed;                  // inputs that could not be read (the others reported)
  // `updates` lists its entries under "pairs" and has no "failed" (a pair that cannot be read stops it).
  std::string entries_key = "tensors";
  bool lists_failures = true;
};

// [{"input", "error"}, ...] of the failed inputs.
nlohmann::json failures_json(const std::vector<InputFailure>& failures);

// The whole report, its envelope included: the command's fields, its entries, "total", "failed", its schema
// ("mpsim-<command>-1") and mpsim's version. A field of the command's own may not take an envelope key.
nlohmann::json report_json(const Report& report);

}  // namespace mpsim::analysis
