#include "mpsim/analysis/tensor_passes.hpp"

#include "mpsim/format/bulk.hpp"

namespace mpsim::analysis {

std::size_t row_length(const TensorInfo& info) {
  return info.shape.empty() ? static_cast<std::size_t>(info.count) : static_cast<std::size_t>(info.shape.back());
}

RangePass count_ranges(const std::vector<std::string>& files, const InputOptions& options, const Format& f) {
  RangePass pass;
  pass.failures = for_each_tensor(files, options, [&](const TensorInfo& info, const TensorRead& read) {
    RangeCounter c(f);
    read([&](std::span<const float> x, std::span<const double> d, std::uint64_t) {
      if (!x.empty()) c.add(x);
      if (!d.empty()) c.add(d);
    });
    pass.tensors.push_back({info, std::move(c)});  // only once read() has returned (for_each_tensor)
  });
  return pass;
}

BlockValuesPass count_dequantized(const std::vector<std::string>& files, const InputOptions& options,
                                  const BlockFormat& bf) {
  BlockValuesPass pass;
  pass.failures = for_each_tensor(files, options, [&](const TensorInfo& info, const TensorRead& read) {
    TensorBlockValues res{info, RangeCounter(fp32()), {}};
    const std::size_t row_len = row_length(info);
    std::vector<float> y;
    for_each_block_rows(
        read, row_len, bf,
        [&](std::span<const float> x, std::uint64_t index0, float t) {
          y.resize(x.size());
          BulkOptions opt;
          opt.index0 = index0;
          round_blocks(x, y, row_len, bf, Rounding{}, &res.stats, opt, t);
          res.values.add(std::span<const float>(y));
        },
        options.chunk_elements);
    pass.tensors.push_back(std::move(res));
  });
  return pass;
}

ScalingPass scaling_pass(const std::vector<std::string>& files, const InputOptions& options,
                         const std::vector<ScalingTarget>& targets, double loss_scale, const Rounding& r) {
  ScalingPass pass;
  pass.failures = for_each_tensor(files, options, [&](const TensorInfo& info, const TensorRead& read) {
    pass.tensors.push_back(
        {info, scaling_telemetry(read, row_length(info), targets, loss_scale, r, options.chunk_elements)});
  });
  return pass;
}

UnderflowPass count_underflow(const std::vector<std::string>& files, const InputOptions& options, const Format& f,
                              const Rounding& r, int log2_scale) {
  UnderflowPass pass;
  pass.failures = for_each_tensor(files, options, [&](const TensorInfo& info, const TensorRead& read) {
    RangeCounter c(f, r);
    Moments m;
    MassLost mass;
    read([&](std::span<const float> x, std::span<const double> d, std::uint64_t) {
      if (!x.empty()) {
        c.add(x);
        m.add(x);
        add_rounded(mass, x, f, r, log2_scale);
      }
      if (!d.empty()) {
        c.add(d);
        m.add(d);
        add_rounded(mass, d, f, r, log2_scale);
      }
    });
    pass.tensors.push_back({info, std::move(c), std::move(m), std::move(mass)});
  });
  return pass;
}

RoundingErrorPass measure_rounding_errors(const std::vector<std::string>& files, const InputOptions& options,
                                          const Format& f, const std::vector<Rounding>& roundings, int log2_scale,
                                          const std::optional<BlockFormat>& block) {
  RoundingErrorPass pass;
  pass.failures = for_each_tensor(files, options, [&](const TensorInfo& info, const TensorRead& read) {
    std::vector<RoundingError> acc;
    for (const auto& r : roundings) acc.emplace_back(f, r, log2_scale);
    if (block) {
      const std::size_t row_len = row_length(info);
      for_each_block_rows(
          read, row_len, *block,
          [&](std::span<const float> x, std::uint64_t index0, float t) {
            for (auto& a : acc) add_block_rounding_error(a, x, row_len, *block, index0, t);
          },
          options.chunk_elements);
    } else {
      read([&](std::span<const float> x, std::span<const double> d, std::uint64_t offset) {
        for (auto& a : acc) {
          if (!x.empty()) a.add(x, offset);
          if (!d.empty()) a.add(d, offset);
        }
      });
    }
    pass.tensors.push_back({info, std::move(acc)});
  });
  return pass;
}

}  // namespace mpsim::analysis
