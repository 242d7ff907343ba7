// The names of Stats' fields in every report that carries them: `mpsim round --stats-json`
// (tools/mpsim/round.cpp), the layer dump's site_stats (lib/mpsim/models/layer_dump.cpp) and the stats dict
// of mpsim.round / mpsim.torch (python/src/arrays.cpp). One table, so the three cannot drift apart again:
// the layer dump spelled `overflow_num` as `overflow` until 0.2.0 (CHANGELOG.md). `overflow_num`, not
// `overflow`, because `round --stats-json` also reports the format's overflow option under "overflow".
#pragma once

#include <cstdint>
#include <string_view>

#include "mpsim/format/bulk.hpp"

namespace mpsim {

struct StatsCountField {
  std::string_view name;
  std::uint64_t Stats::*member;
};

// The counters: sums over calls (mpsim.round's stats totals add these and only these).
inline constexpr StatsCountField kStatsCountFields[] = {
    {"count", &Stats::count},         {"zero_in", &Stats::zero_in},     {"nan", &Stats::nan},
    {"inf_in", &Stats::inf_in},       {"exact", &Stats::exact},         {"rounded", &Stats::rounded},
    {"underflow", &Stats::underflow}, {"subnormal", &Stats::subnormal}, {"overflow_num", &Stats::overflow},
};

struct StatsExtremeField {
  std::string_view name;
  double Stats::*member;
};

// The extremes: a max and a min over calls, not sums.
inline constexpr StatsExtremeField kStatsExtremeFields[] = {
    {"max_abs", &Stats::max_abs},
    {"min_abs_nonzero", &Stats::min_abs_nonzero},
};

// Calls f(name, value) for every field of s, the counters first, in the tables' order.
template <class F>
void for_each_stats_field(const Stats& s, F&& f) {
  for (const auto& c : kStatsCountFields) f(c.name, s.*c.member);
  for (const auto& e : kStatsExtremeFields) f(e.name, s.*e.member);
}

}  // namespace mpsim
