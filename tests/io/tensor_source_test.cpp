// Tests of lib/mpsim/io/tensor_source.hpp: .npy, .npz (stored and deflate), safetensors and raw files
// built byte by byte here (zip records per PKWARE APPNOTE, safetensors per its README), their values
// streamed in small chunks and compared with the values the test put in, and every kind of bad file.
#include <sys/stat.h>
#include <zlib.h>
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <limits>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "test_files.hpp"

using namespace mpsim;
using namespace mpsim::io;
using mpsim::test::append;
using mpsim::test::append_le;
using mpsim::test::Bytes;
using mpsim::test::ScratchDir;

namespace {

const float finf = std::numeric_limits<float>::infinity();

struct Member {
  std::string name;
  Bytes data;
  bool deflate = false;
};

Bytes deflate_raw(const Bytes& in) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&z, in.size()) + 16);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip file as PKWARE APPNOTE.TXT describes it: local headers + data, central directory, end record.
Bytes zip_file(const std::vector<Member>& members) {
  Bytes out, cd;
  for (const auto& m : members) {
    const Bytes body = m.deflate ? deflate_raw(m.data) : m.data;
    const auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), static_cast<uInt>(m.data.size())));
    const auto offset = static_cast<std::uint32_t>(out.size());
    const std::uint16_t method = m.deflate ? 8 : 0;
    append_le(out, std::uint32_t{0x04034b50});
    for (std::uint16_t v : {std::uint16_t{20}, std::uint16_t{0}, method, std::uint16_t{0}, std::uint16_t{0}})
      append_le(out, v);
    append_le(out, crc);
    append_le(out, static_cast<std::uint32_t>(body.size()));
    append_le(out, static_cast<std::uint32_t>(m.data.size()));
    append_le(out, static_cast<std::uint16_t>(m.name.size()));
    append_le(out, std::uint16_t{0});
    append(out, m.name);
    append(out, body);
    append_le(cd, std::uint32_t{0x02014b50});
    for (std::uint16_t v :
         {std::uint16_t{20}, std::uint16_t{20}, std::uint16_t{0}, method, std::uint16_t{0}, std::uint16_t{0}})
      append_le(cd, v);
    append_le(cd, crc);
    append_le(cd, static_cast<std::uint32_t>(body.size()));
    append_le(cd, static_cast<std::uint32_t>(m.data.size()));
    append_le(cd, static_cast<std::uint16_t>(m.name.size()));
    for (int i = 0; i < 4; ++i) append_le(cd, std::uint16_t{0});  // extra, comment, disk, internal attrs
    append_le(cd, std::uint32_t{0});                              // external attrs
    append_le(cd, offset);
    append(cd, m.name);
  }
  const auto cd_offset = static_cast<std::uint32_t>(out.size());
  append(out, cd);
  append_le(out, std::uint32_t{0x06054b50});
  append_le(out, std::uint16_t{0});
  append_le(out, std::uint16_t{0});
  append_le(out, static_cast<std::uint16_t>(members.size()));
  append_le(out, static_cast<std::uint16_t>(members.size()));
  append_le(out, static_cast<std::uint32_t>(cd.size()));
  append_le(out, cd_offset);
  append_le(out, std::uint16_t{0});
  return out;
}

// safetensors: u64 LE header length, the JSON, then the data.
Bytes safetensors_file(const std::string& json, const Bytes& data) {
  Bytes out;
  append_le(out, static_cast<std::uint64_t>(json.size()));
  append(out, json);
  append(out, data);
  return out;
}

template <class T>
Bytes le_bytes(std::initializer_list<T> values) {
  Bytes b;
  for (T v : values) {
    if constexpr (std::is_floating_point_v<T>)
      append_le(b, std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(v));
    else append_le(b, v);
  }
  return b;
}

// Streams the tensor in chunks of `chunk` and checks the offsets are contiguous.
std::vector<double> stream_all(const TensorSource& s, const TensorRef& t, std::size_t chunk) {
  std::vector<double> out;
  s.for_each_chunk_double(t, chunk, [&](std::span<const double> v, std::uint64_t offset) {
    CHECK(offset == out.size());
    CHECK(v.size() <= chunk);
    out.insert(out.end(), v.begin(), v.end());
  });
  std::vector<float> f;
  s.for_each_chunk(t, chunk, [&](std::span<const float> v, std::uint64_t) { f.insert(f.end(), v.begin(), v.end()); });
  CHECK(f.size() == out.size());
  return out;
}

bool same(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

void expect_error(const std::string& what, const std::function<void()>& fn) {
  try {
    fn();
    FAIL("no error; expected one containing '" << what << "'");
  } catch (const mpsim::Error& e) {
    INFO("message: " << e.what());
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
}

Bytes npy_of(const NpyArray& a) { return npy_bytes(a); }

}  // namespace

TEST_CASE(".npy through TensorSource: chunks, big-endian, Fortran order, dtype override", "[tensor_source]") {
  ScratchDir dir("ts");
  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(1.0f + float(i) / 1024, int(i % 60) - 30);
  write_npy(dir / "x.npy", make_npy(std::span<const float>(x), {10, 100}));
  auto s = TensorSource::open(dir / "x.npy");
  CHECK(s.kind() == FileKind::npy);
  REQUIRE(s.tensors().size() == 1);
  const auto& t = s.tensors()[0];
  CHECK(t.name.empty());
  CHECK(t.label == (dir / "x.npy").string());
  CHECK(t.shape == std::vector<std::int64_t>{10, 100});
  CHECK(t.count == 1000);
  CHECK(same(stream_all(s, t, 7), std::vector<double>(x.begin(), x.end())));
  CHECK(s.read_float(t) == x);

  // Big-endian float64, Fortran order 2x3.
  Bytes be;
  for (double v : {1.0, 4.0, 2.0, 5.0, 3.0, 6.0}) mpsim::test::append_be(be, std::bit_cast<std::uint64_t>(v));
  mpsim::test::write_bytes(dir / "f.npy",
                           mpsim::test::npy_file("{'descr': '>f8', 'fortran_order': True, 'shape': (2, 3), }", be));
  auto f = TensorSource::open(dir / "f.npy");
  CHECK(same(stream_all(f, f.tensors()[0], 4), {1, 2, 3, 4, 5, 6}));

  // uint16 holding bf16 bits, read with a dtype override; float arrays refuse one.
  const std::vector<std::uint16_t> bits = {0x3f80, 0xc000, 0x7f80, 0x0001};
  write_npy(dir / "b.npy", make_npy(std::span<const std::uint16_t>(bits)));
  auto b = TensorSource::open(dir / "b.npy", {.dtype = DType::bf16_bits});
  CHECK(b.tensors()[0].dtype == DType::bf16_bits);
  CHECK(b.tensors()[0].stored == DType::u16);
  CHECK(same(stream_all(b, b.tensors()[0], 3), {1.0, -2.0, finf, std::ldexp(1.0, -133)}));
  expect_error("holds float32, which cannot be read as bfloat16",
               [&] { TensorSource::open(dir / "x.npy", {.dtype = DType::bf16_bits}); });
}

TEST_CASE(".npz: stored and deflated members, every array named, values streamed", "[tensor_source]") {
  ScratchDir dir("ts");
  std::vector<float> big(5000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = float(i) * 0.25f - 300;
  const std::vector<double> d = {0.1, -1e300, 5e-324};
  const std::vector<std::uint16_t> h = {0x3c00, 0x0001, 0xfc00};
  const std::vector<std::uint8_t> e4 = {0x38, 0x7e, 0x01};
  Bytes fortran;
  for (float v : {1.f, 3.f, 2.f, 4.f}) append_le(fortran, std::bit_cast<std::uint32_t>(v));
  const Bytes zip = zip_file({
      {"weights.npy", npy_of(make_npy(std::span<const float>(big), {50, 100})), true},
      {"bias.npy", npy_of(make_npy(std::span<const double>(d))), false},
      {"half.npy", npy_of(make_npy(std::span<const std::uint16_t>(h), DType::f16)), true},
      {"fp8.npy", npy_of(make_npy(std::span<const std::uint8_t>(e4))), false},
      {"fortran.npy", mpsim::test::npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", fortran),
       true},
  });
  mpsim::test::write_bytes(dir / "g.npz", zip);
  auto s = TensorSource::open(dir / "g.npz", {.dtype = DType::fp8_e4m3_bits});
  CHECK(s.kind() == FileKind::npz);
  REQUIRE(s.tensors().size() == 5);
  CHECK(s.tensors()[0].name == "weights");
  CHECK(s.tensors()[0].label == (dir / "g.npz").string() + ":weights");
  CHECK(s.tensors()[0].deflated);
  CHECK(s.tensors()[0].shape == std::vector<std::int64_t>{50, 100});
  CHECK(same(stream_all(s, s.tensor("weights"), 333), std::vector<double>(big.begin(), big.end())));
  CHECK(same(stream_all(s, s.tensor("bias"), 2), d));
  CHECK(
      same(stream_all(s, s.tensor("half"), 2), {1.0, std::ldexp(1.0, -24), -std::numeric_limits<double>::infinity()}));
  CHECK(s.tensor("fp8").dtype == DType::fp8_e4m3_bits);  // the override applies to the uint8 member
  CHECK(s.tensor("half").dtype == DType::f16);           // and leaves float members alone
  CHECK(same(stream_all(s, s.tensor("fp8"), 2), {1.0, 448.0, std::ldexp(1.0, -9)}));
  CHECK(same(stream_all(s, s.tensor("fortran"), 3), {1, 2, 3, 4}));
  expect_error("no tensor named 'nope'", [&] { s.tensor("nope"); });
}

TEST_CASE("read_range_double: ranges in step equal the stream; compressed and Fortran members refused",
          "[tensor_source]") {
  ScratchDir dir("ts");
  std::vector<float> x(4099);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(1.0f + float(i) / 4096, int(i % 70) - 35);
  write_npy(dir / "x.npy", make_npy(std::span<const float>(x)));
  Bytes be;  // big-endian float32: swapped per range
  for (float v : x) mpsim::test::append_be(be, std::bit_cast<std::uint32_t>(v));
  mpsim::test::write_bytes(dir / "be.npy",
                           mpsim::test::npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (4099,), }", be));
  const std::vector<std::uint16_t> h = {0x3c00, 0x0001, 0xfc00, 0x7e00, 0x8000};
  for (const char* name : {"x.npy", "be.npy"}) {
    auto s = TensorSource::open(dir / name);
    const auto& t = s.tensors()[0];
    std::vector<double> all, part;
    for (std::uint64_t offset = 0; offset < t.count; offset += 1000) {  // 4099 = 4 * 1000 + an odd tail
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(1000, t.count - offset));
      s.read_range_double(t, offset, n, part);
      CHECK(part.size() == n);
      all.insert(all.end(), part.begin(), part.end());
    }
    CHECK(same(all, stream_all(s, t, 1 << 20)));
    expect_error("elements 4000..4100 asked of 4099", [&] { s.read_range_double(t, 4000, 100, part); });
  }
  const Bytes zip = zip_file({
      {"x.npy", npy_of(make_npy(std::span<const float>(x))), true},
      {"h.npy", npy_of(make_npy(std::span<const std::uint16_t>(h), DType::f16)), false},
  });
  mpsim::test::write_bytes(dir / "z.npz", zip);
  auto z = TensorSource::open(dir / "z.npz");
  std::vector<double> part;
  z.read_range_double(z.tensor("h"), 1, 3, part);
  CHECK(part[0] == std::ldexp(1.0, -24));
  CHECK(part[1] == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(part[2]));
  expect_error("compressed npz member cannot be read in ranges",
               [&] { z.read_range_double(z.tensor("x"), 0, 1, part); });
  WARN("read 2 x 4099 values in ranges of 1000 (float32, big-endian float32) and a stored npz member");
}

TEST_CASE("safetensors: every dtype, named, in file order; metadata ignored", "[tensor_source]") {
  ScratchDir dir("ts");
  Bytes data;
  append(data, le_bytes<float>({1.5f, -2.0f, finf, 0.0f, 3.0f, -0.5f}));  // a: F32 [2,3]   0..24
  append(data, le_bytes<std::uint16_t>({0x3c00, 0x7bff}));                // h: F16 [2]     24..28
  append(data, le_bytes<std::uint16_t>({0x3f80, 0x4049}));                // b: BF16 [2]    28..32
  append(data, le_bytes<std::uint8_t>({0x38, 0x7e}));                     // e: F8_E4M3     32..34
  append(data, le_bytes<std::uint8_t>({0x3c, 0x7b}));                     // m: F8_E5M2     34..36
  append(data, le_bytes<double>({0.1}));                                  // d: F64 []      36..44
  const std::string json =
      R"({"__metadata__": {"format": "pt"}, "d": {"dtype": "F64", "shape": [], "data_offsets": [36, 44]},)"
      R"( "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "h": {"dtype": "F16", "shape": [2], "data_offsets": [24, 28]},)"
      R"( "b": {"dtype": "BF16", "shape": [2], "data_offsets": [28, 32]},)"
      R"( "m": {"dtype": "F8_E5M2", "shape": [2], "data_offsets": [34, 36]},)"
      R"( "e": {"dtype": "F8_E4M3", "shape": [2, 1], "data_offsets": [32, 34]}})";
  mpsim::test::write_bytes(dir / "m.safetensors", safetensors_file(json, data));
  auto s = TensorSource::open(dir / "m.safetensors");
  CHECK(s.kind() == FileKind::safetensors);
  std::vector<std::string> names;
  for (const auto& t : s.tensors()) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"a", "h", "b", "e", "m", "d"});
  CHECK(same(stream_all(s, s.tensor("a"), 4), {1.5, -2.0, std::numeric_limits<double>::infinity(), 0.0, 3.0, -0.5}));
  CHECK(same(stream_all(s, s.tensor("h"), 1), {1.0, 65504.0}));
  CHECK(same(stream_all(s, s.tensor("b"), 1), {1.0, 3.140625}));
  CHECK(same(stream_all(s, s.tensor("e"), 1), {1.0, 448.0}));
  CHECK(same(stream_all(s, s.tensor("m"), 1), {1.0, 57344.0}));
  CHECK(same(stream_all(s, s.tensor("d"), 1), {0.1}));
  CHECK(s.tensor("d").shape.empty());
  CHECK(s.tensor("e").shape == std::vector<std::int64_t>{2, 1});
  CHECK(s.tensor("b").dtype == DType::bf16_bits);
}

TEST_CASE("float data read in place where aligned and copied where not: the same values", "[tensor_source]") {
  // Little-endian f32/f64 data aligned for its type is handed out straight from the memory map; data at
  // an odd offset (allowed by safetensors) is copied first. Both must give the same values.
  ScratchDir dir("align");
  const std::initializer_list<float> fv = {1.5f, -2.0f, 0x1p-140f, -0.0f, 3.0e38f, finf};
  const std::initializer_list<double> dv = {0.1, -0x1p-1070, 1e300};
  Bytes data;
  append(data, le_bytes<float>(fv));   // f_aligned   0..24
  append(data, Bytes(1));              // 24
  append(data, le_bytes<float>(fv));   // f_odd      25..49
  append(data, Bytes(7));              // 49..56
  append(data, le_bytes<double>(dv));  // d_aligned  56..80
  append(data, Bytes(3));              // 80..83
  append(data, le_bytes<double>(dv));  // d_odd      83..107
  std::string json = R"({"f_aligned": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]},)"
                     R"( "f_odd": {"dtype": "F32", "shape": [6], "data_offsets": [25, 49]},)"
                     R"( "d_aligned": {"dtype": "F64", "shape": [3], "data_offsets": [56, 80]},)"
                     R"( "d_odd": {"dtype": "F64", "shape": [3], "data_offsets": [83, 107]}})";
  while ((8 + json.size()) % 8 != 0) json += ' ';  // data starts 8-byte aligned in the file
  mpsim::test::write_bytes(dir / "a.safetensors", safetensors_file(json, data));
  auto s = TensorSource::open(dir / "a.safetensors");
  std::vector<double> fwant(fv.begin(), fv.end()), dwant(dv.begin(), dv.end());
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{4}, std::size_t{100}}) {
    CHECK(same(stream_all(s, s.tensor("f_aligned"), chunk), fwant));
    CHECK(same(stream_all(s, s.tensor("f_odd"), chunk), fwant));
    CHECK(same(stream_all(s, s.tensor("d_aligned"), chunk), dwant));
    CHECK(same(stream_all(s, s.tensor("d_odd"), chunk), dwant));
  }
  // Float chunks in place keep every bit (the sign of -0, the subnormal).
  std::vector<std::uint32_t> bits;
  s.for_each_chunk(s.tensor("f_aligned"), 2, [&](std::span<const float> v, std::uint64_t) {
    for (const float x : v) bits.push_back(std::bit_cast<std::uint32_t>(x));
  });
  std::vector<std::uint32_t> want_bits;
  for (const float x : fv) want_bits.push_back(std::bit_cast<std::uint32_t>(x));
  CHECK(bits == want_bits);
}

TEST_CASE("raw files need a dtype; the shape must match the size", "[tensor_source]") {
  ScratchDir dir("ts");
  mpsim::test::write_bytes(dir / "g.bin", le_bytes<float>({1, 2, 3, 4, 5, 6}));
  auto s = TensorSource::open(dir / "g.bin", {.dtype = DType::f32, .shape = std::vector<std::int64_t>{3, 2}});
  CHECK(s.kind() == FileKind::raw);
  CHECK(s.tensors()[0].shape == std::vector<std::int64_t>{3, 2});
  CHECK(same(stream_all(s, s.tensors()[0], 4), {1, 2, 3, 4, 5, 6}));
  auto flat = TensorSource::open(dir / "g.bin", {.dtype = DType::bf16_bits});
  CHECK(flat.tensors()[0].count == 12);
  expect_error("not a .npy, .npz or safetensors file", [&] { TensorSource::open(dir / "g.bin"); });
  expect_error("shape (4, 2) of float32 needs 32 bytes but the file holds 24", [&] {
    TensorSource::open(dir / "g.bin", {.dtype = DType::f32, .shape = std::vector<std::int64_t>{4, 2}});
  });
  mpsim::test::write_bytes(dir / "odd.bin", mpsim::test::bytes_of("0123456789"));
  expect_error("10 bytes is not a whole number of float32 values",
               [&] { TensorSource::open(dir / "odd.bin", {.dtype = DType::f32, .shape = std::nullopt}); });
  expect_error("cannot open", [&] { TensorSource::open(dir / "none.bin", {.dtype = DType::f32}); });
  expect_error("is a directory", [&] { TensorSource::open(dir.path()); });
}

TEST_CASE("bad .npz files: not an array, duplicates, truncation, corruption", "[tensor_source]") {
  const Bytes arr = npy_of(make_npy(std::vector<float>{1, 2, 3, 4}));
  auto open = [](const Bytes& b) { return TensorSource::from_bytes(b, "bad.npz"); };
  expect_error("bad.npz: zip member 'notes.txt' is not a .npy array", [&] {
    open(zip_file({{"a.npy", arr}, {"notes.txt", mpsim::test::bytes_of("hi")}}));
  });
  expect_error("bad.npz: duplicate array name 'a'", [&] { open(zip_file({{"a.npy", arr}, {"a.npy", arr, true}})); });
  expect_error("bad.npz:x: not a .npy file (bad magic", [&] {
    open(zip_file({{"x.npy", mpsim::test::bytes_of("definitely not numpy data")}}));
  });
  Bytes short_arr(arr.begin(), arr.end() - 4);
  expect_error("bad.npz:s: header says shape (4,)", [&] { open(zip_file({{"s.npy", short_arr, true}})); });

  // Every truncation of a two-member zip fails with an mpsim::Error naming the file, never a crash.
  const Bytes good = zip_file({{"a.npy", arr, false}, {"b.npy", arr, true}});
  int cut_errors = 0;
  for (std::size_t n = 0; n < good.size(); ++n) {
    const Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      auto s = TensorSource::from_bytes(cut, "cut.npz");
      for (const auto& t : s.tensors()) s.read_double(t);
      FAIL("truncation to " << n << " bytes was accepted");
    } catch (const mpsim::Error& e) {
      CHECK(std::string(e.what()).rfind("cut.npz", 0) == 0);
      ++cut_errors;
    }
  }
  // Flipping each byte of the deflated member's data: an error (corrupt stream or CRC) or, where the
  // flip lands in data the npy header does not cover, still never a crash; most must be caught.
  const auto s = TensorSource::from_bytes(good, "g.npz");
  const auto& b = s.tensor("b");
  int caught = 0, flips = 0;
  for (std::uint64_t i = b.data_offset; i < b.data_offset + b.data_bytes; ++i, ++flips) {
    Bytes bad = good;
    bad[i] ^= std::byte{0x10};
    try {
      auto src = TensorSource::from_bytes(bad, "flip.npz");
      src.read_double(src.tensor("b"));
    } catch (const mpsim::Error& e) {
      ++caught;
    }
  }
  // CRC-32 detects every change of the inflated bytes; a flip in the padding bits after the final
  // deflate block changes nothing inflated and may pass.
  CHECK(caught >= flips - 1);
  WARN("npz: " << cut_errors << " truncations rejected, " << caught << " of " << flips << " byte flips caught");
}

TEST_CASE("a stored .npz member with a flipped byte is refused, as numpy refuses it (CRC-32)", "[tensor_source]") {
  std::vector<float> x(300);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i) - 7.5f;
  Bytes fortran;
  for (float v : {1.f, 3.f, 2.f, 4.f}) append_le(fortran, std::bit_cast<std::uint32_t>(v));
  const Bytes good = zip_file({
      {"a.npy", npy_of(make_npy(std::span<const float>(x))), false},
      {"f.npy", mpsim::test::npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", fortran), false},
  });
  const auto clean = TensorSource::from_bytes(good, "g.npz");
  CHECK(same(clean.read_double(clean.tensor("a")), std::vector<double>(x.begin(), x.end())));
  for (const char* name : {"a", "f"}) {
    const auto& t = clean.tensor(name);
    // Every byte of the member's data (the .npy header's flips are caught by its parser or the CRC alike):
    // streamed, and for the C-order member also read in ranges (`arith` and `updates` read in step).
    int flips = 0, caught_stream = 0, caught_ranges = 0;
    for (std::uint64_t i = t.data_offset; i < t.data_offset + t.data_bytes; ++i, ++flips) {
      Bytes bad = good;
      bad[i] ^= std::byte{0x01};
      try {
        auto src = TensorSource::from_bytes(bad, "flip.npz");
        src.read_double(src.tensor(name));
      } catch (const mpsim::Error& e) {
        caught_stream += std::string(e.what()).find("flip.npz:" + std::string(name) + ": zip member is corrupt") == 0;
      }
      if (t.fortran_order) continue;
      try {
        auto src = TensorSource::from_bytes(bad, "flip.npz");
        std::vector<double> part;
        for (std::uint64_t at = 0; at < t.count; at += 128)
          src.read_range_double(src.tensor(name), at, std::min<std::uint64_t>(128, t.count - at), part);
      } catch (const mpsim::Error& e) {
        caught_ranges += std::string(e.what()).find("zip member is corrupt") != std::string::npos;
      }
    }
    std::printf("stored member %s: %d byte flips, %d caught streaming, %d caught in ranges\n", name, flips,
                caught_stream, caught_ranges);
    CHECK(flips == static_cast<int>(t.data_bytes));
    CHECK(caught_stream == flips);
    CHECK(caught_ranges == (t.fortran_order ? 0 : flips));
  }
}

TEST_CASE("input names that are not UTF-8, FIFOs with no writer, files of no known kind", "[tensor_source]") {
  ScratchDir dir("ts-names");
  const Bytes arr = npy_of(make_npy(std::vector<float>{1, 2}));
  mpsim::test::write_bytes(dir / "g\xe9.npy", arr);
  expect_error("g\\xe9.npy: the name is not valid UTF-8", [&] { TensorSource::open(dir / "g\xe9.npy"); });
  expect_error("bad.npz: zip member w\\xff.npy: the name is not valid UTF-8", [&] {
    TensorSource::from_bytes(zip_file({{"w\xff.npy", arr}}), "bad.npz");
  });
  REQUIRE(::mkfifo((dir / "pipe").c_str(), 0600) == 0);
  expect_error("pipe: is a pipe (FIFO)", [&] { TensorSource::open(dir / "pipe"); });  // returns at once
  mpsim::test::write_bytes(dir / "x.bin", mpsim::test::bytes_of("0123456789abcdef"));
  try {
    TensorSource::open(dir / "x.bin");
    FAIL("x.bin was accepted");
  } catch (const mpsim::FieldError& e) {
    // The library names the field it advises (SourceOptions::dtype); the command line says --dtype
    // (tests/tools/analysis_cli_test.cpp).
    const std::string cli = e.message([](std::string_view f) { return "--" + std::string(f); }, " ");
    std::printf("unknown magic: %s\nas the command line words it: %s\n", e.what(), cli.c_str());
    CHECK(std::string(e.what()).find("; pass dtype to read it as raw data") != std::string::npos);
    CHECK(cli.find("; pass --dtype to read it as raw data") != std::string::npos);
    CHECK(cli.find("--shape") == std::string::npos);  // no command has it
  }
}

TEST_CASE("bad safetensors files: JSON, sizes, dtypes, offsets, duplicates", "[tensor_source]") {
  const Bytes four = le_bytes<float>({1, 2, 3, 4});
  auto open = [](const Bytes& b) { return TensorSource::from_bytes(b, "bad.safetensors"); };
  auto one = [&](const std::string& entry) { return safetensors_file("{\"t\": " + entry + "}", four); };
  expect_error("malformed safetensors JSON header", [&] { open(safetensors_file("{\"t\": {\"dtype\": }", four)); });
  expect_error("bad.safetensors:t: unsupported dtype 'BOOL'",
               [&] { open(one(R"({"dtype": "BOOL", "shape": [16], "data_offsets": [0, 16]})")); });
  expect_error("bad.safetensors:t: shape (3,) of float32 needs 12 bytes but data_offsets [0, 16] hold 16",
               [&] { open(one(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 16]})")); });
  expect_error("bad.safetensors:t: data_offsets [0, 20] lie outside the 16 bytes",
               [&] { open(one(R"({"dtype": "F32", "shape": [5], "data_offsets": [0, 20]})")); });
  expect_error("bad.safetensors:t: data_offsets [8, 4]",
               [&] { open(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})")); });
  expect_error("bad.safetensors:t: malformed safetensors entry",
               [&] { open(one(R"({"dtype": "F32", "shape": [4]})")); });
  expect_error("bad.safetensors:t: shape entries must be non-negative",
               [&] { open(one(R"({"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]})")); });
  expect_error("duplicate tensor name 't'", [&] {
    open(safetensors_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                          R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                          four));
  });
  expect_error("tensors 'a' and 'b' overlap", [&] {
    open(safetensors_file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}, )"
                          R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                          four));
  });
  // A zero-element tensor's empty range [0, 0) where another begins overlaps nothing, whichever comes first by
  // name (the safetensors library writes such files: tests/python/test_inputs.py).
  for (const char* empty : {"a0", "z0"}) {
    const auto src = open(safetensors_file(std::string(R"({")") + empty +
                                               R"(": {"dtype": "F64", "shape": [0, 3], "data_offsets": [0, 0]}, )"
                                               R"("m": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                                           four));
    CHECK(src.tensors().size() == 2);
    for (const auto& t : src.tensors()) CHECK(t.count == (t.name == "m" ? 4u : 0u));
  }
  expect_error("nested too deeply",
               [&] { open(safetensors_file("{\"a\": " + std::string(40, '[') + std::string(40, ']') + "}", four)); });
  // An absurd header length: caught before anything is read or allocated.
  Bytes huge;
  append_le(huge, std::uint64_t{1} << 40);
  append(huge, "{}");
  expect_error("JSON header of 1099511627776 bytes is absurdly large", [&] { open(huge); });
  Bytes cut_header;
  append_le(cut_header, std::uint64_t{1000});
  append(cut_header, "{\"t\": ");
  expect_error("truncated safetensors file (JSON header of 1000 bytes, only 6 present)", [&] { open(cut_header); });
  // Every truncation of a valid file.
  const Bytes good = safetensors_file(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", four);
  int cut_errors = 0;
  for (std::size_t n = 0; n < good.size(); ++n) {
    try {
      TensorSource::from_bytes(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)), "cut.safetensors");
      FAIL("truncation to " << n << " bytes was accepted");
    } catch (const mpsim::Error& e) {
      CHECK(std::string(e.what()).rfind("cut.safetensors", 0) == 0);
      ++cut_errors;
    }
  }
  WARN("safetensors: " << cut_errors << " truncations rejected");
}
