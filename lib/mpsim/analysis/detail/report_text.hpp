// Report output shared by the analysis commands: tidy CSV (one row per tensor, format, scale, stat,
// value — loads straight into pandas), aligned text tables, and the terminal bar chart of a log2
// histogram with the target format's ranges marked. Numbers are printed with the shortest digits that
// round-trip (fmt's "{}").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpsim/analysis/histogram.hpp"
#include "mpsim/format/format.hpp"

namespace mpsim::analysis {

// A number as text: integers as integers, doubles with round-trip digits.
std::string number_text(const nlohmann::json& value);
std::string number_text(double value);

class TidyCsv {
 public:
  // Adds one row per numeric member of `stats` (nested objects and arrays are skipped).
  void add_stats(const std::string& tensor, const std::string& format, double scale, const nlohmann::json& stats);
  void add(const std::string& tensor, const std::string& format, double scale, const std::string& stat,
           const nlohmann::json& value);
  // "tensor,format,scale,stat,value\n" then the rows (fields quoted where they need it, RFC 4180).
  std::string text() const;
  std::size_t rows() const { return rows_.size(); }

 private:
  std::vector<std::array<std::string, 5>> rows_;
};

// Columns padded to their widest cell; the first column left-aligned, the others right-aligned.
std::string text_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// Where x·2^log2_scale lands in F for values in binade n of x: "overflow", "normal", "subnormal",
// "underflow" (the whole binade rounds to zero in round-to-nearest), or "edge" for the binades whose
// outcome depends on the significand (just below F's smallest subnormal / smallest normal, and
// F's top binade).
std::string range_of_binade(int n, const Format& f, int log2_scale);

// One line per binade from the highest to the lowest non-empty one: "2^n", a bar proportional to the
// count, the count, and (with a format) the range of F the binade falls in under the scale; then the
// zero / NaN / ±inf buckets.
std::string bar_chart(const Log2Histogram& h, const Format* f, int log2_scale, int width = 50);

}  // namespace mpsim::analysis
