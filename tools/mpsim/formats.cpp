// mpsim formats [--json FILE]: the table of named formats and their constants.
#include <fmt/core.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/version.hpp"

namespace {

// The other names the one name table gives this format (format.hpp, format_names).
nlohmann::json aliases_of(const std::string& canonical) {
  nlohmann::json out = nlohmann::json::array();
  bool in_group = false;
  for (const auto& n : mpsim::format_names()) {
    if (n.canonical) in_group = n.name == canonical;
    else if (in_group) out.push_back(std::string(n.name));
  }
  return out;
}

nlohmann::json format_json(const mpsim::Format& f) {
  return {{"name", f.name},
          {"exp_bits", f.exp_bits},
          {"man_bits", f.man_bits},
          {"precision", f.precision},
          {"bias", f.bias},
          {"storage_bits", f.storage_bits},
          {"has_inf", f.has_inf},
          {"has_nan", f.has_nan()},
          {"has_sign", f.has_sign},
          {"has_zero", f.has_zero},
          {"aliases", aliases_of(f.name)},
          {"nan_encoding", std::string(mpsim::to_string(f.nan))},
          {"subnormals", std::string(mpsim::to_string(f.subnormals))},
          {"overflow", std::string(mpsim::to_string(f.overflow))},
          {"emin", f.emin},
          {"emax", f.emax},
          {"max_finite", f.max_finite},
          {"min_normal", f.min_normal},
          {"min_subnormal", f.min_subnormal},
          {"log2_max_finite", std::log2(f.max_finite)},
          {"log2_min_normal", f.emin},
          {"log2_min_subnormal", std::log2(f.min_subnormal)},
          {"epsilon", f.epsilon},
          {"unit_roundoff", f.unit_roundoff}};
}

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("formats", "Table of the named formats and their constants");
  auto json_path = std::make_shared<std::string>();
  auto print_json = std::make_shared<bool>(false);
  cmd->add_option("--json", *json_path, "Also write the table as JSON to this file (-: standard output)");
  cmd->add_flag("--print-json", *print_json, "Print JSON to stdout instead of the table");
  cmd->callback([json_path, print_json] {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& f : mpsim::named_formats()) all.push_back(format_json(f));
    if (!json_path->empty())
      mpsim::cli::write_report(
          *json_path,
          nlohmann::json{{"schema", "mpsim-formats-1"}, {"mpsim_version", mpsim::kVersion}, {"formats", all}}.dump(2) +
              "\n");
    if (*print_json) {
      fmt::print("{}\n", all.dump(2));
      return;
    }
    fmt::print("{:<19} {:>4} {:>4} {:>5} {:>5} {:>5} {:>4} {:>4} {:>5} {:>13} {:>13} {:>13} {:>9}  {}\n", "format",
               "exp", "man", "bias", "emin", "emax", "inf", "nan", "sign", "max finite", "min normal", "min subnorm",
               "epsilon", "aliases");
    for (const auto& f : mpsim::named_formats()) {
      std::string aliases;
      for (const auto& a : aliases_of(f.name)) aliases += (aliases.empty() ? "" : " ") + a.get<std::string>();
      fmt::print("{:<19} {:>4} {:>4} {:>5} {:>5} {:>5} {:>4} {:>4} {:>5} {:>13.6g} {:>13.6g} {:>13.6g} {:>9.4g}  {}\n",
                 f.name, f.exp_bits, f.man_bits, f.bias, f.emin, f.emax, f.has_inf ? "yes" : "no",
                 f.has_nan() ? "yes" : "no", f.has_sign ? "yes" : "no", f.max_finite, f.min_normal, f.min_subnormal,
                 f.epsilon, aliases);
    }
  });
}

const bool registered = mpsim::cli::register_command("formats", setup);

}  // namespace
