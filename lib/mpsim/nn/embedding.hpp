// Token embedding (a table lookup).
#pragma once

#include <cstdint>
#include <cstring>

namespace mpsim::nn {

// out (N, C) = table[tokens[n]] with table (V, C).
template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* table, int N, int C) {
  for (int n = 0; n < N; ++n)
    std::memcpy(out + static_cast<std::int64_t>(n) * C, table + static_cast<std::int64_t>(tokens[n]) * C,
                sizeof(T) * C);
}

// dtable (V, C) = Σ over n with tokens[n] = v of dout (N, C) row n (overwritten).
template <class T>
void embedding_backward(T* dtable, const T* dout, const std::int32_t* tokens, int N, int V, int C) {
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(V) * C; ++i) dtable[i] = T(0);
  for (int n = 0; n < N; ++n) {
    T* row = dtable + static_cast<std::int64_t>(tokens[n]) * C;
    const T* d = dout + static_cast<std::int64_t>(n) * C;
    for (int c = 0; c < C; ++c) row[c] += d[c];
  }
}

}  // namespace mpsim::nn
