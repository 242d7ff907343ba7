// The safetensors reader of TensorSource: the JSON header, each entry's dtype, shape and data offsets.
#include "mpsim/io/detail/safetensors_reader.hpp"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include <fmt/core.h>

#include "mpsim/error.hpp"
#include "mpsim/io/detail/tensor_reader.hpp"

namespace mpsim::io::detail {

namespace {

// safetensors: the reference implementation's MAX_HEADER_SIZE (safetensors/src/tensor.rs).
constexpr std::uint64_t kMaxJsonHeader = 100'000'000;

DType safetensors_dtype(const std::string& s, const std::string& label) {
  // safetensors Dtype names (safetensors/src/tensor.rs).
  if (s == "F64") return DType::f64;
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "BF16") return DType::bf16_bits;
  if (s == "F8_E4M3") return DType::fp8_e4m3_bits;
  if (s == "F8_E5M2") return DType::fp8_e5m2_bits;
  if (s == "F8_E4M3FNUZ") return DType::fp8_e4m3fnuz_bits;
  if (s == "F8_E5M2FNUZ") return DType::fp8_e5m2fnuz_bits;
  if (s == "F8_E8M0") return DType::float8_e8m0fnu_bits;
  if (s == "F4" || s == "F6_E2M3" || s == "F6_E3M2")
    fail_advising_dtype(
        fmt::format("{}: dtype '{}' packs its elements below a byte (safetensors' sub-byte layout); mpsim reads "
                    "one element per byte: unpack it to uint8 (as ml_dtypes stores float4/float6) and read it "
                    "with {{dtype}} {}",
                    label, s,
                    s == "F4"        ? "float4_e2m1fn"
                    : s == "F6_E2M3" ? "float6_e2m3fn"
                                     : "float6_e3m2fn"));
  if (s == "I32") return DType::i32;
  if (s == "I64") return DType::i64;
  if (s == "U8") return DType::u8;
  if (s == "U16") return DType::u16;
  if (s == "U32") return DType::u32;
  fail(
      fmt::format("{}: unsupported dtype '{}' (supported: F64, F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E4M3FNUZ, "
                  "F8_E5M2FNUZ, F8_E8M0, I32, I64, U8, U16, U32)",
                  label, s));
}

// The safetensors JSON header, refusing duplicate tensor names (the JSON library would otherwise keep the
// last one silently) and absurd nesting.
nlohmann::json parse_safetensors_header(std::string_view text, const std::string& file) {
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& j) {
    if (depth > 16) throw Error(file + ": safetensors JSON header is nested too deeply");
    if (ev == nlohmann::json::parse_event_t::key && depth == 1 && !seen.insert(j.get<std::string>()).second &&
        duplicate.empty())
      duplicate = j.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, cb);
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("{}: malformed safetensors JSON header: {}", file, e.what()));
  }
  if (!duplicate.empty())
    fail(fmt::format("{}: duplicate tensor name '{}' in the safetensors header", file, duplicate));
  if (!header.is_object()) fail(file + ": malformed safetensors JSON header: not an object");
  return header;
}

// One safetensors header entry; base is the file offset of the data section, data_size its length.
TensorRef safetensors_tensor(const std::string& file, const std::string& name, const nlohmann::json& v,
                             std::uint64_t base, std::uint64_t data_size, const SourceOptions& o) {
  const std::string label = label_of(file, name);
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets") ||
      !v["dtype"].is_string() || !v["shape"].is_array() || !v["data_offsets"].is_array() ||
      v["data_offsets"].size() != 2)
    fail(label + ": malformed safetensors entry (needs \"dtype\", \"shape\" and two \"data_offsets\")");
  TensorRef t;
  t.file = file;
  t.name = name;
  t.label = label;
  t.stored = safetensors_dtype(v["dtype"].get<std::string>(), label);
  t.dtype = effective(t.stored, o, false, label);
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned()) fail(label + ": shape entries must be non-negative integers");
    const auto u = d.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(label + ": shape dimension too large");
    t.shape.push_back(static_cast<std::int64_t>(u));
  }
  if (t.shape.size() > 64) fail(label + ": more than 64 dimensions");
  const auto& off = v["data_offsets"];
  if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(label + ": data_offsets must be non-negative integers");
  const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
  const std::size_t elem = dtype_size(t.stored);
  t.count = checked_count(t.shape, elem, label);
  if (begin > end || end > data_size)
    fail(fmt::format("{}: data_offsets [{}, {}] lie outside the {} bytes of data", label, begin, end, data_size));
  if (end - begin != t.count * elem)
    fail(fmt::format("{}: shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", label,
                     shape_string(t.shape), to_string(t.stored), t.count * elem, begin, end, end - begin));
  t.data_offset = base + begin;
  t.data_bytes = end - begin;
  return t;
}

}  // namespace

std::vector<TensorRef> read_safetensors_directory(std::span<const std::byte> b, const std::string& file,
                                                  const SourceOptions& o) {
  const std::uint64_t n = le(b, 0, 8);
  if (n > kMaxJsonHeader)
    fail(fmt::format("{}: safetensors JSON header of {} bytes is absurdly large (limit {})", file, n, kMaxJsonHeader));
  if (n > b.size() - 8)
    fail(fmt::format("{}: truncated safetensors file (JSON header of {} bytes, only {} present)", file, n,
                     b.size() - 8));
  const nlohmann::json header =
      parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(b.data()) + 8, n), file);
  const std::uint64_t base = 8 + n, data_size = b.size() - base;
  std::vector<TensorRef> tensors;
  for (const auto& [name, v] : header.items())
    if (name != "__metadata__") tensors.push_back(safetensors_tensor(file, name, v, base, data_size, o));
  // In data order as the safetensors library orders them, by (begin, end) (safetensors/src/tensor.rs,
  // Metadata::new: `data_offsets.cmp`), names last so that the order is one: a zero-element tensor's empty
  // range [b, b) then comes before a tensor that begins at b, and overlaps nothing. Its validate() then wants
  // each range to begin where the previous ended; mpsim accepts gaps and refuses only overlaps.
  std::sort(tensors.begin(), tensors.end(), [](const TensorRef& a, const TensorRef& c) {
    return std::tie(a.data_offset, a.data_bytes, a.name) < std::tie(c.data_offset, c.data_bytes, c.name);
  });
  for (std::size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].data_offset < tensors[i - 1].data_offset + tensors[i - 1].data_bytes)
      fail(fmt::format("{}: tensors '{}' and '{}' overlap in the data", file, tensors[i - 1].name, tensors[i].name));
  return tensors;
}

}  // namespace mpsim::io::detail
