#include "mpsim/analysis/report.hpp"

#include "mpsim/error.hpp"
#include "mpsim/version.hpp"

namespace mpsim::analysis {

nlohmann::json failures_json(const std::vector<InputFailure>& failures) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& f : failures) j.push_back({{"input", f.input}, {"error", f.message}});
  return j;
}

nlohmann::json report_json(const Report& report) {
  if (report.command.empty()) throw Error("report_json: the report names no command");
  nlohmann::json j = report.fields.is_null() ? nlohmann::json::object() : report.fields;
  if (!j.is_object()) throw Error("report_json: the fields of a " + report.command + " report must be an object");
  const char* envelope[] = {"command", "total", "failed", "schema", "mpsim_version"};
  for (const char* key : envelope)
    if (j.contains(key))
      throw Error("report_json: '" + std::string(key) + "' is the envelope's, not a field of " + report.command);
  if (j.contains(report.entries_key))
    throw Error("report_json: '" + report.entries_key + "' is the envelope's, not a field of " + report.command);
  j["command"] = report.command;
  j[report.entries_key] = report.tensors;
  j["total"] = report.total;
  if (report.lists_failures) j["failed"] = failures_json(report.failed);
  j["schema"] = "mpsim-" + report.command + "-1";
  j["mpsim_version"] = kVersion;
  return j;
}

}  // namespace mpsim::analysis
