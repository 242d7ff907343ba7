// The body shared by the .npz and safetensors fuzz targets: open the bytes as a TensorSource, then
// stream every tensor in small chunks. Only mpsim::Error may come out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/io/tensor_source.hpp"

inline int fuzz_tensor_source(const std::uint8_t* data, std::size_t size, const char* name) {
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                               reinterpret_cast<const std::byte*>(data) + size);
  try {
    const auto src = mpsim::io::TensorSource::from_bytes(std::move(bytes), name);
    for (const auto& t : src.tensors()) {
      std::uint64_t seen = 0;
      try {
        src.for_each_chunk_double(t, 4096, [&](std::span<const double> v, std::uint64_t offset) {
          if (offset != seen) __builtin_trap();
          seen += v.size();
        });
        if (seen != t.count) __builtin_trap();
      } catch (const mpsim::Error&) {}
    }
  } catch (const mpsim::Error&) {}
  return 0;
}
