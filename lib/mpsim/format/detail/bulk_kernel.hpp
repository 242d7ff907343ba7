// Internal to the bulk engine: the vector kernels, written once over a small ISA wrapper `S`
// (bulk_avx2.cpp: 8 lanes of __m256i; bulk_avx512.cpp: 16 lanes of __m512i with mask registers).
// Included only by those two files, each compiled with its own -m flags; everything here has internal
// linkage (anonymous namespace) and uses no std:: inline function, so no AVX-512 instruction can leak
// into code the linker shares with the rest of the program.
//
// The algorithm is the integer one described in bulk_params.hpp: branch-free, every lane carries its
// own rounding shift (vpsrlvd/vpsllvd), the carry out of the mantissa propagates into the exponent
// field by plain addition, and the Stats are counted in per-lane 32-bit counters in the same pass.
#pragma once

// By topic, in the order each needs the ones before it.
#include "mpsim/format/detail/bulk_counters.hpp"
#include "mpsim/format/detail/bulk_decode.hpp"
#include "mpsim/format/detail/bulk_dispatch.hpp"
#include "mpsim/format/detail/bulk_f16c.hpp"
#include "mpsim/format/detail/bulk_float_layout.hpp"
#include "mpsim/format/detail/bulk_philox.hpp"
#include "mpsim/format/detail/bulk_round.hpp"
#include "mpsim/format/detail/bulk_store.hpp"
