#include "mpsim/analysis/inputs.hpp"

#include <algorithm>
#include <filesystem>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/io/tensor_source.hpp"

namespace mpsim::analysis {

namespace fs = std::filesystem;

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    const auto st = fs::status(in, ec);
    if (ec || !fs::exists(st)) throw Error(in + ": no such file or directory");
    if (fs::is_directory(st)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in))
        if (e.is_regular_file()) found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      if (found.empty()) throw Error(in + ": directory holds no files");
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(in);
    }
  }
  return files;
}

namespace {

// Every tensor of a .npy / .npz / safetensors / raw file through io::TensorSource (memory-mapped,
// streamed). Integer tensors are not values with a binade: a file holding only one is an error
// naming --dtype; in a file of several (an .npz with a step counter) they are left out.
void source_file(const std::string& file, const InputOptions& o,
                 const std::function<void(const TensorInfo&, const TensorRead&)>& fn) {
  io::SourceOptions so;
  so.dtype = o.dtype;
  const io::TensorSource src = io::TensorSource::open(file, so);
  const auto& all = src.tensors();
  for (const io::TensorRef& t : all) {
    if (!io::is_float(t.dtype)) {
      if (all.size() > 1) continue;
      throw FieldError("", "",
                       t.label + ": holds " + std::string(io::to_string(t.dtype)) +
                           " values, not floating point (pass {dtype} bf16, fp16, fp8_e4m3 or fp8_e5m2 if they are "
                           "the bits of one)",
                       {"dtype"});
    }
    TensorInfo info{t.file, t.name, t.label, t.shape, t.count, t.dtype};
    const std::size_t chunk = std::max<std::size_t>(1, o.chunk_elements);
    const std::size_t elem = io::dtype_size(t.stored);
    fn(info, [&](const ChunkVisitor& v) {
      if (t.dtype == io::DType::f64)
        src.for_each_chunk_double(t, chunk, [&](std::span<const double> d, std::uint64_t off) {
          v({}, d, off);
          if (o.progress) o.progress->advance(d.size() * elem);
        });
      else
        src.for_each_chunk(t, chunk, [&](std::span<const float> f, std::uint64_t off) {
          v(f, {}, off);
          if (o.progress) o.progress->advance(f.size() * elem);
        });
    });
  }
}

}  // namespace

std::vector<InputFailure> for_each_tensor(const std::vector<std::string>& files, const InputOptions& options,
                                          const std::function<void(const TensorInfo&, const TensorRead&)>& fn) {
  std::vector<InputFailure> failures;
  for (const std::string& file : files) {
    try {
      source_file(file, options, fn);
    } catch (const FieldError& e) {
      failures.push_back({file, e.what(), e});
    } catch (const Error& e) {
      failures.push_back({file, e.what(), std::nullopt});
    }
  }
  return failures;
}

std::uint64_t total_bytes(const std::vector<std::string>& files) {
  std::uint64_t total = 0;
  for (const std::string& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (!ec) total += size;
  }
  return total;
}

std::vector<double> read_all(const TensorRead& read, std::uint64_t count) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(count));
  read([&](std::span<const float> f, std::span<const double> d, std::uint64_t) {
    out.insert(out.end(), f.begin(), f.end());
    out.insert(out.end(), d.begin(), d.end());
  });
  return out;
}

}  // namespace mpsim::analysis
