#include "mpsim/analysis/detail/report_text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace mpsim::analysis {

std::string number_text(double v) { return fmt::format("{}", v); }

std::string number_text(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return std::to_string(v.get<std::uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float()) return number_text(v.get<double>());
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

void TidyCsv::add(const std::string& tensor, const std::string& format, double scale, const std::string& stat,
                  const nlohmann::json& value) {
  rows_.push_back({tensor, format, number_text(scale), stat, number_text(value)});
}

void TidyCsv::add_stats(const std::string& tensor, const std::string& format, double scale,
                        const nlohmann::json& stats) {
  for (const auto& [k, v] : stats.items())
    if (v.is_number()) add(tensor, format, scale, k, v);
}

namespace {
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::string TidyCsv::text() const {
  std::string out = "tensor,format,scale,stat,value\n";
  for (const auto& r : rows_) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (i) out += ',';
      out += csv_field(r[i]);
    }
    out += '\n';
  }
  return out;
}

std::string text_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(header.size(), 0);
  for (std::size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const std::string cell = i < r.size() ? r[i] : "";
      if (i) s += "  ";
      s += i == 0 ? fmt::format("{:<{}}", cell, w[i]) : fmt::format("{:>{}}", cell, w[i]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(header);
  std::size_t total = 0;
  for (const auto x : w) total += x;
  out += std::string(total + 2 * (w.size() - 1), '-') + "\n";
  for (const auto& r : rows) out += line(r);
  return out;
}

std::string range_of_binade(int n, const Format& f, int log2_scale) {
  const int b = n + log2_scale;  // binade of x·S
  const int min_sub_exp = f.emin - (f.subnormals == Subnormals::keep ? f.man_bits : 0);
  if (b > f.emax) return "overflow";
  if (b == f.emax) return "edge";  // the top binade: overflow from the rounding threshold up
  if (b >= f.emin) return "normal";
  if (b == f.emin - 1) return "edge";  // values just below min normal may round up to it
  if (b >= min_sub_exp) return "subnormal";
  if (b == min_sub_exp - 1) return "edge";  // rounds to zero or to the smallest subnormal by significand
  return "underflow";
}

std::string bar_chart(const Log2Histogram& h, const Format* f, int log2_scale, int width) {
  std::string out;
  const int lo = h.lowest_nonempty(), hi = h.highest_nonempty();
  std::uint64_t top = std::max({h.zero, h.nan, h.neg_inf, h.pos_inf});
  for (int n = lo; n <= hi; ++n) top = std::max(top, h.count(n));
  auto bar = [&](std::uint64_t c) {
    const int len = top ? static_cast<int>(std::ceil(double(c) * width / double(top))) : 0;
    return std::string(static_cast<std::size_t>(len), '#') + std::string(static_cast<std::size_t>(width - len), ' ');
  };
  std::string last_range;
  for (int n = hi; n >= lo; --n) {
    const std::uint64_t c = h.count(n);
    std::string range = f ? range_of_binade(n, *f, log2_scale) : "";
    // Mark a range where it starts (reading downwards), so the chart shows the boundaries.
    std::string mark = range != last_range || range == "edge" ? range : "";
    last_range = range;
    out += fmt::format("{:>7} |{}| {:>12}  {}\n", fmt::format("2^{}", n), bar(c), c, mark);
  }
  for (const auto& [label, c] :
       {std::pair{"zero", h.zero}, std::pair{"nan", h.nan}, std::pair{"-inf", h.neg_inf}, std::pair{"+inf", h.pos_inf}})
    if (c) out += fmt::format("{:>7} |{}| {:>12}\n", label, bar(c), c);
  return out;
}

}  // namespace mpsim::analysis
