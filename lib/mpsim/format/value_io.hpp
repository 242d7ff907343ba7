// Text output of the value types: an fmt formatter and operator<<, both printing the shortest decimal
// that reads back (rounded to nearest-even into the format) to the same encoding.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "mpsim/format/format.hpp"
#include "mpsim/format/value.hpp"

namespace mpsim {

// The shortest decimal string that round_bits(strtod(s), f) maps back to `bits` ("1.5", "65500", "1e-07",
// "-0", "inf", "nan"). Every NaN prints as "nan" (with "-" for a set sign bit).
std::string shortest_decimal(std::uint64_t bits, const Format& f);

namespace num {
template <class Tag>
std::string to_string(Float<Tag> v) {
  return shortest_decimal(v.bits(), Tag::format());
}

template <class Tag>
std::ostream& operator<<(std::ostream& os, Float<Tag> v) {
  return os << to_string(v);
}
}  // namespace num

}  // namespace mpsim

// fmt 9: "{}" prints the shortest round-trip decimal; string format specs (width, fill, alignment) apply.
template <class Tag>
struct fmt::formatter<mpsim::num::Float<Tag>> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(mpsim::num::Float<Tag> v, FormatContext& ctx) const {
    const std::string s = mpsim::num::to_string(v);
    return fmt::formatter<std::string_view>::format(std::string_view(s), ctx);
  }
};
