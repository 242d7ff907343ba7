#include "recompute.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <functional>
#include <mutex>

#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/format/arith.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/parallel.hpp"

namespace mpsim::hw {

namespace {

// Elements per work item: small enough that a chunk's inputs and outputs stay in the L2 cache.
constexpr std::uint64_t kChunk = std::uint64_t{1} << 14;

int worker_count(int threads) {
  const int n = threads > 0 ? threads : hardware_threads();
  return std::min(n, 64);
}

// Runs body(begin, end) over [begin, end) in kChunk pieces on `threads` threads.
template <class Body>
void parallel_chunks(std::uint64_t begin, std::uint64_t end, int threads, Body&& body) {
  std::atomic<std::uint64_t> next{begin};
  auto work = [&] {
    for (std::uint64_t lo = next.fetch_add(kChunk); lo < end; lo = next.fetch_add(kChunk))
      body(lo, std::min(end, lo + kChunk));
  };
  // mpsim::run_workers: each worker under the default floating-point environment, an error rethrown here.
  run_workers(worker_count(threads), "recompute", [&](int) { work(); });
}

// The float inputs of a range contain NaNs only where the range meets the NaN patterns.
bool range_has_nan_floats(std::uint64_t begin, std::uint64_t end) {
  auto meets = [&](std::uint64_t lo, std::uint64_t hi) { return begin < hi && lo < end; };
  return meets(0x7f800001u, 0x80000000u) || meets(0xff800001u, std::uint64_t{1} << 32);
}

// One piece of float or double inputs through the bulk engine (one thread: the caller fans out), the
// encodings widened into the digest's 32-bit outputs.
template <class T, class In>
void round_piece(std::span<const In> in, std::span<std::uint32_t> out, const DeviceRounding& d) {
  T buf[kChunk];
  BulkOptions opt;
  opt.threads = 1;
  round_array(in, std::span<T>(buf, in.size()), d.format, d.rounding, nullptr, opt);
  for (std::size_t k = 0; k < in.size(); ++k) out[k] = buf[k];
}

void convert_piece(const ConvertRun& run, const DeviceRounding& d, std::uint64_t begin, std::span<std::uint32_t> out) {
  const std::size_t n = out.size();
  const int bytes = d.format.storage_bytes();
  // Only NaN inputs, and NaNs a conversion makes in a format without inf, ever get a profile's fix.
  const bool fix_all = !d.is_plain() && !d.format.has_inf && !(d.rule && d.rule->canonical_for_nan_inputs_only);
  if (run.input == InputType::float64) {
    double x[kChunk];
    for (std::size_t k = 0; k < n; ++k) x[k] = std::bit_cast<double>(f64_sample(begin + k));
    const std::span<const double> in(x, n);
    if (bytes == 1) round_piece<std::uint8_t>(in, out, d);
    else round_piece<std::uint16_t>(in, out, d);
    if (!d.is_plain())
      for (std::size_t k = 0; k < n; ++k)
        if (fix_all || x[k] != x[k]) out[k] = static_cast<std::uint32_t>(d.convert_result(out[k], x[k]));
  } else {
    float x[kChunk];
    for (std::size_t k = 0; k < n; ++k) x[k] = std::bit_cast<float>(static_cast<std::uint32_t>(begin + k));
    const std::span<const float> in(x, n);
    if (bytes == 1) round_piece<std::uint8_t>(in, out, d);
    else if (bytes == 2) round_piece<std::uint16_t>(in, out, d);
    else round_piece<std::uint32_t>(in, out, d);
    if (!d.is_plain() && (fix_all || range_has_nan_floats(begin, begin + n)))
      for (std::size_t k = 0; k < n; ++k)
        if (fix_all || x[k] != x[k]) out[k] = static_cast<std::uint32_t>(d.convert_result(out[k], x[k]));
  }
  if (run.output_shift)
    for (std::size_t k = 0; k < n; ++k) out[k] <<= run.output_shift;
}

DeviceRounding convert_device(const ConvertRun& run, const Profile& profile) {
  return resolve_profile(profile, run_format(run), Rounding::of(run.mode), Operation::convert, run.input);
}

mpsim::ArithOp base_op(ArithOp op) {
  switch (op) {
    case kAdd:
    case kAddSat: return mpsim::ArithOp::add;
    case kSub:
    case kSubSat: return mpsim::ArithOp::sub;
    case kMul:
    case kMulSat: return mpsim::ArithOp::mul;
    case kDiv: return mpsim::ArithOp::div;
    default: return mpsim::ArithOp::fma;
  }
}
bool is_saturating(ArithOp op) { return op == kAddSat || op == kSubSat || op == kMulSat || op == kFmaSat; }

// The device semantics of an arithmetic run with the decoded value of every 16-bit encoding, so the
// loop over 2^32 operand pairs calls arith.hpp's *_values (which round with round_bits) directly.
struct ArithSetup {
  DeviceRounding device;
  std::vector<double> value;  // decode(bits, format) for every encoding
};

ArithSetup arith_setup(const ArithRun& run, const Profile& profile) {
  ArithSetup s{resolve_profile(profile, parse_format(run.format), Rounding{}, Operation::arithmetic), {}};
  s.value.resize(std::size_t{1} << 16);
  for (std::uint32_t b = 0; b < s.value.size(); ++b) s.value[b] = decode(b, s.device.format);
  return s;
}

void arith_piece(const ArithRun& run, const ArithSetup& s, std::uint64_t begin, std::span<std::uint32_t> out) {
  const mpsim::ArithOp op = base_op(run.op);
  const bool sat = is_saturating(run.op);
  const Format& f = s.device.format;
  const Rounding& r = s.device.rounding;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::uint64_t i = begin + k;
    std::uint32_t a, b, c;
    arith_operands(i, a, b, c);
    const double x = s.value[a], y = s.value[b], z = s.value[c];
    std::uint64_t res;
    switch (op) {
      case mpsim::ArithOp::add: res = add_values(x, y, f, r, i); break;
      case mpsim::ArithOp::sub: res = sub_values(x, y, f, r, i); break;
      case mpsim::ArithOp::mul: res = mul_values(x, y, f, r, i); break;
      case mpsim::ArithOp::div: res = div_values(x, y, f, r, i); break;
      default: res = fma_values(x, y, z, f, r, i); break;
    }
    const bool nan_operand = x != x || y != y || (op == mpsim::ArithOp::fma && z != z);
    out[k] =
        static_cast<std::uint32_t>(s.device.is_plain() && !sat ? res : s.device.arith_result(res, nan_operand, sat));
  }
}

void check_range(std::uint64_t begin, std::size_t n, std::uint64_t elements, const std::string& name) {
  if (begin + n > elements)
    throw Error(fmt::format("run {}: elements {} .. {} lie beyond its {} elements", name, begin, begin + n, elements));
}

// Sum of digest terms of a piece: a loop the compiler vectorises, built a second time for AVX-512
// (vpmullq, AVX512DQ: splitmix64's 64-bit products 8 lanes at a time) and picked at run time.
template <int>
inline std::uint64_t digest_loop(std::uint64_t begin, const std::uint32_t* out, std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k < n; ++k) sum += digest_term(begin + k, out[k]);
  return sum;
}
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512dq"), optimize("tree-vectorize"))) std::uint64_t digest_loop_avx512(
    std::uint64_t begin, const std::uint32_t* out, std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k < n; ++k) sum += digest_term(begin + k, out[k]);
  return sum;
}
#endif

std::uint64_t digest_piece(std::uint64_t begin, std::span<const std::uint32_t> out) {
#if defined(__x86_64__)
  static const bool avx512 = cpu_features().avx512f && cpu_features().avx512dq;
  if (avx512) return digest_loop_avx512(begin, out.data(), out.size());
#endif
  return digest_loop<0>(begin, out.data(), out.size());
}

template <class Run, class Piece>
std::uint64_t digest_of_block(const Run& run, std::uint64_t block, std::uint64_t elements, int threads, Piece piece) {
  if (block >= (elements >> kDigestBlockLog2))
    throw Error(
        fmt::format("run {}: block {} does not exist (it has {})", run.name, block, elements >> kDigestBlockLog2));
  std::mutex m;
  std::uint64_t total = 0;
  const std::uint64_t begin = block << kDigestBlockLog2;
  parallel_chunks(begin, begin + kDigestBlock, threads, [&](std::uint64_t lo, std::uint64_t hi) {
    std::uint32_t out[kChunk];
    const std::span<std::uint32_t> o(out, hi - lo);
    piece(lo, o);
    const std::uint64_t s = digest_piece(lo, o);
    const std::lock_guard<std::mutex> lock(m);
    total += s;  // addition mod 2^64: the order of the pieces does not matter
  });
  return total;
}

template <class Run, class Piece>
std::vector<ElementDifference> differences(const Run& run, std::uint64_t block, std::uint64_t elements,
                                           std::size_t limit, int threads, Piece piece_a, Piece piece_b) {
  if (block >= (elements >> kDigestBlockLog2))
    throw Error(fmt::format("run {}: block {} does not exist", run.name, block));
  std::mutex m;
  std::vector<ElementDifference> found;
  const std::uint64_t begin = block << kDigestBlockLog2;
  parallel_chunks(begin, begin + kDigestBlock, threads, [&](std::uint64_t lo, std::uint64_t hi) {
    std::uint32_t a[kChunk], b[kChunk];
    piece_a(lo, std::span<std::uint32_t>(a, hi - lo));
    piece_b(lo, std::span<std::uint32_t>(b, hi - lo));
    std::vector<ElementDifference> local;
    for (std::uint64_t k = 0; k < hi - lo && local.size() < limit; ++k)
      if (a[k] != b[k]) local.push_back({lo + k, a[k], b[k]});
    const std::lock_guard<std::mutex> lock(m);
    found.insert(found.end(), local.begin(), local.end());
  });
  std::sort(found.begin(), found.end(), [](const auto& x, const auto& y) { return x.index < y.index; });
  if (found.size() > limit) found.resize(limit);
  return found;
}

}  // namespace

std::uint64_t block_count(const ConvertRun& run) { return run.elements() >> kDigestBlockLog2; }

void convert_outputs(const ConvertRun& run, const Profile& profile, std::uint64_t begin, std::span<std::uint32_t> out) {
  check_range(begin, out.size(), run.elements(), run.name);
  const DeviceRounding d = convert_device(run, profile);
  for (std::size_t k = 0; k < out.size(); k += kChunk)
    convert_piece(run, d, begin + k, out.subspan(k, std::min<std::size_t>(kChunk, out.size() - k)));
}

void arith_outputs(const ArithRun& run, const Profile& profile, std::uint64_t begin, std::span<std::uint32_t> out) {
  check_range(begin, out.size(), std::uint64_t{1} << 32, run.name);
  arith_piece(run, arith_setup(run, profile), begin, out);
}

std::string describe_convert_input(const ConvertRun& run, std::uint64_t i) {
  if (run.input == InputType::float64) {
    const std::uint64_t b = f64_sample(i);
    return fmt::format("0x{:016x} ({:.17g})", b, std::bit_cast<double>(b));
  }
  const auto b = static_cast<std::uint32_t>(i);
  return fmt::format("0x{:08x} ({:.9g})", b, std::bit_cast<float>(b));
}

std::string describe_arith_input(const ArithRun& run, std::uint64_t i) {
  std::uint32_t a, b, c;
  arith_operands(i, a, b, c);
  if (base_op(run.op) == mpsim::ArithOp::fma) return fmt::format("a=0x{:04x} b=0x{:04x} c=0x{:04x}", a, b, c);
  return fmt::format("a=0x{:04x} b=0x{:04x}", a, b);
}

std::uint64_t recompute_block(const ConvertRun& run, const Profile& profile, std::uint64_t block, int threads) {
  const DeviceRounding d = convert_device(run, profile);
  return digest_of_block(run, block, run.elements(), threads,
                         [&](std::uint64_t lo, std::span<std::uint32_t> o) { convert_piece(run, d, lo, o); });
}

std::uint64_t recompute_block(const ArithRun& run, const Profile& profile, std::uint64_t block, int threads) {
  const ArithSetup d = arith_setup(run, profile);
  return digest_of_block(run, block, std::uint64_t{1} << 32, threads,
                         [&](std::uint64_t lo, std::span<std::uint32_t> o) { arith_piece(run, d, lo, o); });
}

std::vector<ElementDifference> differing_elements(const ConvertRun& run, const Profile& a, const Profile& b,
                                                  std::uint64_t block, std::size_t limit, int threads) {
  const DeviceRounding da = convert_device(run, a), db = convert_device(run, b);
  using Piece = std::function<void(std::uint64_t, std::span<std::uint32_t>)>;
  return differences(run, block, run.elements(), limit, threads,
                     Piece([&](std::uint64_t lo, std::span<std::uint32_t> o) { convert_piece(run, da, lo, o); }),
                     Piece([&](std::uint64_t lo, std::span<std::uint32_t> o) { convert_piece(run, db, lo, o); }));
}

std::vector<ElementDifference> differing_elements(const ArithRun& run, const Profile& a, const Profile& b,
                                                  std::uint64_t block, std::size_t limit, int threads) {
  const ArithSetup da = arith_setup(run, a), db = arith_setup(run, b);
  using Piece = std::function<void(std::uint64_t, std::span<std::uint32_t>)>;
  return differences(run, block, std::uint64_t{1} << 32, limit, threads,
                     Piece([&](std::uint64_t lo, std::span<std::uint32_t> o) { arith_piece(run, da, lo, o); }),
                     Piece([&](std::uint64_t lo, std::span<std::uint32_t> o) { arith_piece(run, db, lo, o); }));
}

}  // namespace mpsim::hw
