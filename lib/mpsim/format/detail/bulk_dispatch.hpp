// Internal to the bulk engine (detail/bulk_kernel.hpp, which says how these files are compiled):
// From a call's run-time mode, output kind and Stats to the kernel instance that rounds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/detail/bulk_f16c.hpp"
#include "mpsim/format/detail/bulk_float_layout.hpp"
#include "mpsim/format/detail/bulk_params.hpp"
#include "mpsim/format/detail/bulk_round.hpp"

namespace mpsim::bulk_detail {
namespace {

template <class S, Mode MODE, bool STATS, OutKind KIND, bool NT>
void round_uniform_or_not(const float* in, void* out, std::size_t n, std::uint64_t index0, const KernelParams& p,
                          StatsAcc* acc) {
  if (p.uniform) {
    // 8-bit storage cannot hold float's exponent field: float_fast never holds for u8.
    if constexpr (KIND != OutKind::u8) {
      if (p.float_fast) return float_layout_loop<S, MODE, STATS, KIND, NT>(in, out, n, index0, p, acc);
    }
    round_loop<S, MODE, STATS, KIND, true, false, NT>(in, out, n, index0, p, acc);
  } else if (p.plain && (!STATS || !S::kHasLut || p.lut_ok))
    round_loop<S, MODE, STATS, KIND, false, true, NT>(in, out, n, index0, p, acc);
  else round_loop<S, MODE, STATS, KIND, false, false, NT>(in, out, n, index0, p, acc);
}

template <class S, Mode MODE, bool STATS, bool NT>
void round_dispatch_kind(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
                         const KernelParams& p, StatsAcc* acc) {
  if constexpr (MODE == Mode::nearest_even || MODE == Mode::toward_zero || MODE == Mode::up || MODE == Mode::down) {
    // _MM_FROUND_TO_NEAREST_INT 0, _TO_NEG_INF 1, _TO_POS_INF 2, _TO_ZERO 3 (immintrin.h)
    constexpr int imm = MODE == Mode::nearest_even ? 0 : MODE == Mode::down ? 1 : MODE == Mode::up ? 2 : 3;
    if (p.f16c && kind == OutKind::f32) return f16c_loop<S, imm, STATS, OutKind::f32, NT>(in, out, n, p, acc);
    if (p.f16c && kind == OutKind::u16) return f16c_loop<S, imm, STATS, OutKind::u16, NT>(in, out, n, p, acc);
  }
  if constexpr (MODE == Mode::nearest_away) {
    if (p.f16c && kind == OutKind::f32) return f16c_loop<S, kAwayImm, STATS, OutKind::f32, NT>(in, out, n, p, acc);
    if (p.f16c && kind == OutKind::u16) return f16c_loop<S, kAwayImm, STATS, OutKind::u16, NT>(in, out, n, p, acc);
  }
  if constexpr (MODE == Mode::to_odd) {
    if (p.f16c && kind == OutKind::f32) return f16c_loop<S, kOddImm, STATS, OutKind::f32, NT>(in, out, n, p, acc);
    if (p.f16c && kind == OutKind::u16) return f16c_loop<S, kOddImm, STATS, OutKind::u16, NT>(in, out, n, p, acc);
  }
  switch (kind) {
    case OutKind::f32: return round_uniform_or_not<S, MODE, STATS, OutKind::f32, NT>(in, out, n, index0, p, acc);
    case OutKind::u8: return round_uniform_or_not<S, MODE, STATS, OutKind::u8, NT>(in, out, n, index0, p, acc);
    case OutKind::u16: return round_uniform_or_not<S, MODE, STATS, OutKind::u16, NT>(in, out, n, index0, p, acc);
    case OutKind::u32: return round_uniform_or_not<S, MODE, STATS, OutKind::u32, NT>(in, out, n, index0, p, acc);
  }
}

template <class S, Mode MODE>
void round_dispatch_stats(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
                          const KernelParams& p, StatsAcc* acc) {
  // Streaming stores (KernelParams::stream) are a template parameter too: a test per vector, or two loops
  // in one instantiation, made GCC spill in the AVX2 Stats loops (in cache, fp16 software nearest-even +
  // Stats 0.47 -> 0.71 and 0.48 ns/element, F16C + Stats 0.188 -> 0.195).
  if (acc && p.stream) round_dispatch_kind<S, MODE, true, true>(in, out, kind, n, index0, p, acc);
  else if (acc) round_dispatch_kind<S, MODE, true, false>(in, out, kind, n, index0, p, acc);
  else if (p.stream) round_dispatch_kind<S, MODE, false, true>(in, out, kind, n, index0, p, acc);
  else round_dispatch_kind<S, MODE, false, false>(in, out, kind, n, index0, p, acc);
}

template <class S>
void round_f32(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0, const KernelParams& p,
               StatsAcc* acc) {
  switch (p.mode) {
    case Mode::nearest_even: return round_dispatch_stats<S, Mode::nearest_even>(in, out, kind, n, index0, p, acc);
    case Mode::toward_zero: return round_dispatch_stats<S, Mode::toward_zero>(in, out, kind, n, index0, p, acc);
    case Mode::up: return round_dispatch_stats<S, Mode::up>(in, out, kind, n, index0, p, acc);
    case Mode::down: return round_dispatch_stats<S, Mode::down>(in, out, kind, n, index0, p, acc);
    case Mode::nearest_away: return round_dispatch_stats<S, Mode::nearest_away>(in, out, kind, n, index0, p, acc);
    case Mode::to_odd: return round_dispatch_stats<S, Mode::to_odd>(in, out, kind, n, index0, p, acc);
    case Mode::stochastic: return round_dispatch_stats<S, Mode::stochastic>(in, out, kind, n, index0, p, acc);
  }
}

}  // namespace
}  // namespace mpsim::bulk_detail
