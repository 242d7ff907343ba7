// File and member names in messages and reports. Linux names are bytes; JSON strings are UTF-8 (RFC 8259,
// section 8.1), so a name that is not valid UTF-8 cannot go into a report as it is: the commands refuse it
// up front, naming it with its odd bytes escaped.
#pragma once

#include <string>
#include <string_view>

namespace mpsim::io {

// True when `text` is well-formed UTF-8 (Unicode 15, table 3-7: no overlong forms, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view text);

// `text` with every byte that is not part of well-formed UTF-8, and every ASCII control character, written as
// \xNN (and a backslash as \\), as Python's repr and GNU ls --quoting-style=escape show them.
std::string escaped(std::string_view text);

// Throws mpsim::Error "WHAT NAME: the name is not valid UTF-8 ..." when `name` is not well-formed UTF-8.
void require_utf8_name(std::string_view name, std::string_view what);
// What that message says after the name (for a FieldError naming a config's field, lib/mpsim/field_error.hpp).
inline constexpr std::string_view kNotUtf8Name =
    "the name is not valid UTF-8; reports name it in JSON, which holds UTF-8 only: rename it";

}  // namespace mpsim::io
