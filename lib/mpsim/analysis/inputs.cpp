#include "mpsim/analysis/inputs.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"

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

// The value type a chunk of `dtype` is decoded with.
const Format* bits_format(io::DType t) {
  switch (t) {
    case io::DType::f16: return &fp16();
    case io::DType::bf16_bits: return &bf16();
    case io::DType::fp8_e4m3_bits: return &fp8_e4m3();
    case io::DType::fp8_e5m2_bits: return &fp8_e5m2();
    default: return nullptr;
  }
}

io::DType effective_dtype(io::DType stored, const InputOptions& o, const std::string& file) {
  if (!o.dtype || *o.dtype == stored) return stored;
  const io::DType want = *o.dtype;
  if (io::dtype_size(want) != io::dtype_size(stored) || io::is_float(stored))
    throw Error(file + ": holds " + std::string(io::to_string(stored)) + ", which cannot be read as " +
                std::string(io::to_string(want)));
  return want;
}

template <class T>
void byteswap_all(std::span<T> v) {
  for (auto& x : v) {
    auto b = std::bit_cast<std::array<unsigned char, sizeof(T)>>(x);
    std::reverse(b.begin(), b.end());
    x = std::bit_cast<T>(b);
  }
}

// Streams a .npy file's data without holding it whole.
void read_npy_stream(const std::string& file, const io::NpyHeader& h, io::DType as, const InputOptions& o,
                     const ChunkVisitor& visit) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file + ": cannot open");
  in.seekg(static_cast<std::streamoff>(h.data_offset));
  const std::size_t esize = io::dtype_size(h.dtype);
  const std::size_t chunk = std::max<std::size_t>(1, o.chunk_elements);
  std::vector<std::byte> raw(chunk * esize);
  std::vector<float> f;
  std::vector<double> d;
  for (std::uint64_t done = 0; done < h.count;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, h.count - done));
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(n * esize));
    if (static_cast<std::size_t>(in.gcount()) != n * esize)
      throw Error(file + ": data ends after " + std::to_string(done + static_cast<std::uint64_t>(in.gcount()) / esize) +
                  " of " + std::to_string(h.count) + " values");
    if (as == io::DType::f32) {
      f.resize(n);
      std::memcpy(f.data(), raw.data(), n * 4);
      if (h.big_endian) byteswap_all(std::span<float>(f));
      visit(f, {}, done);
    } else if (as == io::DType::f64) {
      d.resize(n);
      std::memcpy(d.data(), raw.data(), n * 8);
      if (h.big_endian) byteswap_all(std::span<double>(d));
      visit({}, d, done);
    } else if (const Format* bf = bits_format(as); bf && esize == 2) {
      std::vector<std::uint16_t> u(n);
      std::memcpy(u.data(), raw.data(), n * 2);
      if (h.big_endian) byteswap_all(std::span<std::uint16_t>(u));
      f.resize(n);
      decode_array(u, f, *bf);
      visit(f, {}, done);
    } else if (bf && esize == 1) {
      f.resize(n);
      decode_array(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(raw.data()), n), f, *bf);
      visit(f, {}, done);
    } else {
      throw Error(file + ": holds " + std::string(io::to_string(as)) +
                  " values, not floating point (pass --dtype bf16, fp16, fp8_e4m3 or fp8_e5m2 if they are the bits of one)");
    }
    done += n;
  }
}

void npy_file(const std::string& file, const InputOptions& o,
              const std::function<void(const TensorInfo&, const TensorRead&)>& fn) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file + ": cannot open");
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) throw Error(file + ": cannot read its size");
  std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uintmax_t>(size, (1u << 20) + 64)));
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  const io::NpyHeader h = io::parse_npy_header(head, file, static_cast<std::size_t>(size));
  const io::DType as = effective_dtype(h.dtype, o, file);
  if (!io::is_float(as) && !bits_format(as))
    throw Error(file + ": holds " + std::string(io::to_string(as)) +
                " values, not floating point (pass --dtype bf16, fp16, fp8_e4m3 or fp8_e5m2 if they are the bits of one)");
  TensorInfo info{file, "", file, h.shape, h.count, as};
  if (h.fortran_order && h.shape.size() > 1) {
    // Element order matters to paired reports and to stochastic rounding's index: read through the
    // reader, which transposes to C order (a Fortran-order file is therefore held in memory).
    fn(info, [&](const ChunkVisitor& v) {
      io::NpyArray a = io::read_npy(file);
      if (a.dtype != as) a = io::reinterpret(std::move(a), as, file);
      if (as == io::DType::f64) {
        const auto d = io::to_double(a);
        v({}, d, 0);
      } else {
        const auto f = io::to_float(a);
        v(f, {}, 0);
      }
    });
    return;
  }
  fn(info, [&](const ChunkVisitor& v) { read_npy_stream(file, h, as, o, v); });
}

}  // namespace

std::vector<InputFailure> for_each_tensor(const std::vector<std::string>& files, const InputOptions& options,
                                          const std::function<void(const TensorInfo&, const TensorRead&)>& fn) {
  std::vector<InputFailure> failures;
  for (const std::string& file : files) {
    try {
      npy_file(file, options, fn);
    } catch (const Error& e) {
      failures.push_back({file, e.what()});
    }
  }
  return failures;
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
