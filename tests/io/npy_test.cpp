// Tests of lib/mpsim/io/npy.hpp: round trips through the writer, hand-built byte strings for every
// dtype (little- and big-endian, C and Fortran order, versions 1.0/2.0/3.0, 0-d and empty arrays), and
// every kind of bad file, each of which must give an mpsim::Error naming the file and the problem.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "mpsim/error.hpp"
#include "mpsim/io/npy.hpp"
#include "test_files.hpp"

using namespace mpsim;
using namespace mpsim::io;
using mpsim::test::append_be;
using mpsim::test::append_le;
using mpsim::test::Bytes;
using mpsim::test::npy_file;
using mpsim::test::ScratchDir;

namespace {

const double inf = std::numeric_limits<double>::infinity();

// Reads bytes written to a file, so the error messages name a real path.
NpyArray read_built(const ScratchDir& dir, const Bytes& b, const char* name = "built.npy") {
  mpsim::test::write_bytes(dir / name, b);
  return read_npy(dir / name);
}

// Expects read_npy of the bytes to throw an mpsim::Error whose message names the file and contains `what`.
void expect_error(const ScratchDir& dir, const Bytes& b, const std::string& what) {
  const auto path = dir / "bad.npy";
  mpsim::test::write_bytes(path, b);
  try {
    read_npy(path);
    FAIL("no error for a file that should give '" << what << "'");
  } catch (const mpsim::Error& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.find(path.string()) != std::string::npos);
    CHECK(msg.find(what) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("write_npy then read_npy gives back dtype, shape and bits", "[npy]") {
  ScratchDir dir("npy");
  const std::vector<float> f = {1.0f, -0.0f, 3.5e-45f, std::numeric_limits<float>::infinity(), 65504.0f, -1e30f};
  const std::vector<double> d = {0.1, -2.5, 5e-324, -inf, 1e300, 0.0};
  const std::vector<std::uint16_t> h = {0x3c00, 0x7c00, 0x0001, 0xfbff, 0x7e00, 0x8000};
  const std::vector<std::uint8_t> b = {0x00, 0x38, 0x7e, 0x7f, 0x80, 0xff};
  const std::vector<std::uint32_t> w = {0, 1, 0xffffffffu, 0x3f800000u, 7, 8};
  int checked = 0;
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{6}, {2, 3}, {3, 1, 2}}) {
    const NpyArray arrays[] = {
        make_npy(f, shape), make_npy(d, shape), make_npy(h, shape, DType::f16), make_npy(h, shape, DType::bf16_bits),
        make_npy(b, shape), make_npy(w, shape)};
    for (const auto& a : arrays) {
      write_npy(dir / "a.npy", a);
      const NpyArray r = read_npy(dir / "a.npy");
      // bf16 bits are stored as uint16: the file cannot tell them apart.
      CHECK(r.dtype == (a.dtype == DType::bf16_bits ? DType::u16 : a.dtype));
      CHECK(r.shape == a.shape);
      CHECK(r.data == a.data);
      // The writer pads the header so the data starts 64-byte aligned (numpy's ARRAY_ALIGN).
      const auto file = mpsim::test::read_bytes(dir / "a.npy");
      CHECK((file.size() - a.data.size()) % 64 == 0);
      ++checked;
    }
  }
  // 0-d and empty arrays.
  const float one = 42.0f;
  write_npy(dir / "scalar.npy", make_npy(std::span<const float>(&one, 1), {}));
  const NpyArray s = read_npy(dir / "scalar.npy");
  CHECK(s.shape.empty());
  CHECK(s.count() == 1);
  CHECK(to_float(s) == std::vector<float>{42.0f});
  write_npy(dir / "empty.npy", make_npy(std::span<const float>(), {4, 0}));
  const NpyArray e = read_npy(dir / "empty.npy");
  CHECK(e.shape == std::vector<std::int64_t>{4, 0});
  CHECK(e.count() == 0);
  CHECK(to_float(e).empty());
  CHECK(dir.files().size() == 3);  // no temporaries left behind by the atomic writer
  WARN("round-tripped " << checked << " arrays (6 dtypes x 3 shapes) plus 0-d and empty");
}

TEST_CASE("hand-built little-endian .npy files of every dtype decode to the right values", "[npy]") {
  ScratchDir dir("npy");
  SECTION("float16: 1, -2, +inf, smallest subnormal 2^-24, largest 65504") {
    Bytes data;
    for (std::uint16_t v : {0x3c00, 0xc000, 0x7c00, 0x0001, 0x7bff}) append_le(data, v);
    const auto a = read_built(dir, npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }\n", data));
    CHECK(a.dtype == DType::f16);
    const auto v = to_double(a);
    CHECK(v == std::vector<double>{1.0, -2.0, inf, std::ldexp(1.0, -24), 65504.0});
    CHECK(to_float(a)[3] == std::ldexp(1.0f, -24));
  }
  SECTION("float32 and float64 bit patterns") {
    Bytes data;
    for (std::uint32_t v : {0x3f800000u, 0x00000001u, 0xff800000u, 0x80000000u}) append_le(data, v);
    const auto a = read_built(dir, npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", data));
    CHECK(a.dtype == DType::f32);
    CHECK(a.shape == std::vector<std::int64_t>{2, 2});
    const auto v = to_double(a);
    CHECK(v[0] == 1.0);
    CHECK(v[1] == std::ldexp(1.0, -149));
    CHECK(v[2] == -inf);
    CHECK(std::signbit(v[3]));
    Bytes d8;
    for (std::uint64_t v : {0x3ff0000000000000ull, 0x0000000000000001ull, 0xc000000000000000ull}) append_le(d8, v);
    const auto b = read_built(dir, npy_file("{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (3,)}", d8));
    CHECK(b.dtype == DType::f64);
    const auto w = to_double(b);
    CHECK(w[0] == 1.0);
    CHECK(w[1] == std::ldexp(1.0, -1074));
    CHECK(w[2] == -2.0);
    CHECK(to_float(b)[1] == 0.0f);  // 2^-1074 rounds to +0 in float
  }
  SECTION("unsigned and signed integers") {
    Bytes u1 = {std::byte{0}, std::byte{255}, std::byte{7}};
    CHECK(to_double(read_built(dir, npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", u1))) ==
          std::vector<double>{0, 255, 7});
    Bytes u2;
    for (std::uint16_t v : {1, 65535}) append_le(u2, v);
    CHECK(to_double(read_built(dir, npy_file("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", u2))) ==
          std::vector<double>{1, 65535});
    Bytes u4;
    for (std::uint32_t v : {4000000000u, 3u}) append_le(u4, v);
    CHECK(to_double(read_built(dir, npy_file("{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }", u4))) ==
          std::vector<double>{4e9, 3});
    Bytes i4;
    for (std::int32_t v : {-5, 2147483647}) append_le(i4, static_cast<std::uint32_t>(v));
    CHECK(to_double(read_built(dir, npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", i4))) ==
          std::vector<double>{-5, 2147483647});
    Bytes i8;
    for (std::int64_t v : {std::int64_t{-1}, std::int64_t{1} << 40}) append_le(i8, static_cast<std::uint64_t>(v));
    CHECK(to_double(read_built(dir, npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", i8))) ==
          std::vector<double>{-1, std::ldexp(1.0, 40)});
  }
  SECTION("uint16 / uint8 reinterpreted as bf16 and fp8 bits") {
    Bytes u2;
    for (std::uint16_t v : {0x3f80, 0xc040, 0x7f80, 0x0001}) append_le(u2, v);
    auto a = read_built(dir, npy_file("{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", u2));
    const auto bf = to_double(reinterpret(a, DType::bf16_bits));
    CHECK(bf == std::vector<double>{1.0, -3.0, inf, std::ldexp(1.0, -133)});
    // e4m3fn: bias 7, 0x38 = 1.0, 0x7e = 448 (max), 0x01 = 2^-9, 0x7f = NaN (OCP 8-bit FP spec).
    Bytes u1 = {std::byte{0x38}, std::byte{0x7e}, std::byte{0x01}, std::byte{0x7f}};
    auto b = read_built(dir, npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", u1));
    const auto e4 = to_double(reinterpret(b, DType::fp8_e4m3_bits));
    CHECK(e4[0] == 1.0);
    CHECK(e4[1] == 448.0);
    CHECK(e4[2] == std::ldexp(1.0, -9));
    CHECK(std::isnan(e4[3]));
    // e5m2: bias 15, 0x3c = 1.0, 0x7b = 57344 (max), 0x7c = inf, 0x01 = 2^-16.
    Bytes u1b = {std::byte{0x3c}, std::byte{0x7b}, std::byte{0x7c}, std::byte{0x01}};
    auto c = read_built(dir, npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", u1b));
    CHECK(to_double(reinterpret(c, DType::fp8_e5m2_bits)) ==
          std::vector<double>{1.0, 57344.0, inf, std::ldexp(1.0, -16)});
    CHECK_THROWS_AS(reinterpret(c, DType::bf16_bits, "c.npy"), mpsim::Error);
  }
}

TEST_CASE("big-endian, Fortran order, versions 2.0/3.0, 0-d and empty arrays", "[npy]") {
  ScratchDir dir("npy");
  SECTION("big-endian data is byte-swapped") {
    Bytes f4;
    for (std::uint32_t v : {0x3f800000u, 0xc0000000u}) append_be(f4, v);
    CHECK(to_double(read_built(dir, npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4))) ==
          std::vector<double>{1.0, -2.0});
    Bytes f2;
    for (std::uint16_t v : {0x3c00, 0x4200}) append_be(f2, v);
    CHECK(to_double(read_built(dir, npy_file("{'descr': '>f2', 'fortran_order': False, 'shape': (2,), }", f2))) ==
          std::vector<double>{1.0, 3.0});
    Bytes f8;
    append_be(f8, std::uint64_t{0x4008000000000000ull});
    CHECK(to_double(read_built(dir, npy_file("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", f8))) ==
          std::vector<double>{3.0});
    Bytes i8;
    append_be(i8, static_cast<std::uint64_t>(std::int64_t{-3}));
    CHECK(to_double(read_built(dir, npy_file("{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }", i8))) ==
          std::vector<double>{-3.0});
  }
  SECTION("Fortran order is transposed to C order") {
    // The 2x3 matrix [[0,1,2],[3,4,5]] in column-major order is 0,3,1,4,2,5.
    Bytes d;
    for (float v : {0.f, 3.f, 1.f, 4.f, 2.f, 5.f}) append_le(d, std::bit_cast<std::uint32_t>(v));
    const auto a = read_built(dir, npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", d));
    CHECK(a.shape == std::vector<std::int64_t>{2, 3});
    CHECK(to_float(a) == std::vector<float>{0, 1, 2, 3, 4, 5});
    // 2x3x4: element (i,j,k) has value 100i+10j+k; column-major offset i + 2j + 6k.
    std::vector<float> colmajor(24);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) colmajor[i + 2 * j + 6 * k] = 100.f * i + 10.f * j + k;
    Bytes d3;
    for (float v : colmajor) append_le(d3, std::bit_cast<std::uint32_t>(v));
    const auto b = read_built(dir, npy_file("{'descr': '>f4', 'fortran_order': True, 'shape': (2, 3, 4), }", [&] {
                                Bytes be;
                                for (float v : colmajor) append_be(be, std::bit_cast<std::uint32_t>(v));
                                return be;
                              }()));
    std::vector<float> expect;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) expect.push_back(100.f * i + 10.f * j + k);
    CHECK(to_float(b) == expect);
    const auto c = read_built(dir, npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", d3));
    CHECK(to_float(c) == expect);
  }
  SECTION("format versions 2.0 and 3.0 (4-byte header length)") {
    Bytes d;
    append_le(d, std::uint16_t{0x3c00});
    for (int major : {2, 3}) {
      const auto a = read_built(dir, npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", d, major));
      CHECK(to_double(a) == std::vector<double>{1.0});
    }
  }
  SECTION("0-d and empty arrays") {
    Bytes d;
    append_le(d, std::bit_cast<std::uint64_t>(-7.5));
    const auto a = read_built(dir, npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", d));
    CHECK(a.shape.empty());
    CHECK(to_double(a) == std::vector<double>{-7.5});
    const auto e = read_built(dir, npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }", {}));
    CHECK(e.count() == 0);
    const auto e2 = read_built(dir, npy_file("{'descr': '<f2', 'fortran_order': True, 'shape': (3, 0, 2), }", {}));
    CHECK(e2.count() == 0);
    CHECK(e2.shape == std::vector<std::int64_t>{3, 0, 2});
  }
  SECTION("header spellings: no trailing comma, Python 2 long suffix, extra spaces") {
    Bytes d;
    for (int i = 0; i < 6; ++i) append_le(d, std::uint8_t(i));
    const auto a = read_built(dir, npy_file("{ 'shape' : (2L, 3L) , 'fortran_order':False,'descr':'|u1'}   \n", d));
    CHECK(a.shape == std::vector<std::int64_t>{2, 3});
    CHECK(to_double(a) == std::vector<double>{0, 1, 2, 3, 4, 5});
  }
}

TEST_CASE("bad .npy files give an error naming the file and the problem", "[npy]") {
  ScratchDir dir("npy");
  Bytes four_floats;
  for (int i = 0; i < 4; ++i) append_le(four_floats, std::bit_cast<std::uint32_t>(float(i)));
  const Bytes good = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four_floats);
  const std::size_t header_end = good.size() - four_floats.size();
  int cases = 0;
  auto expect = [&](const Bytes& b, const std::string& what) {
    expect_error(dir, b, what);
    ++cases;
  };

  SECTION("truncated at every length up to the end of the header, and inside the data") {
    for (std::size_t n = 0; n < good.size(); ++n) {
      const Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
      if (n < 8) expect(cut, "not a .npy file");
      else if (n < header_end) expect(cut, "truncated");
      else expect(cut, "but the file holds " + std::to_string(n - header_end) + " bytes of data");
    }
    WARN("checked " << cases << " truncations");
  }
  SECTION("bad magic and unknown versions") {
    Bytes b = good;
    b[1] = std::byte{'n'};
    expect(b, "bad magic");
    Bytes v = good;
    v[6] = std::byte{4};
    expect(v, "unsupported .npy format version 4.0");
    Bytes m = good;
    m[7] = std::byte{1};
    expect(m, "unsupported .npy format version 1.1");
    expect(mpsim::test::bytes_of("PK\x03\x04 this is a zip file, not an npy"), "bad magic");
  }
  SECTION("malformed header dicts") {
    const char* headers[][2] = {
        {"'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", "expected '{'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), ", "malformed .npy header"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [4], }", "to open the shape tuple"},
        {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,), }", "fortran_order must be True or False"},
        {"{'descr': '<f4', 'shape': (4,), }", "missing key 'fortran_order'"},
        {"{'fortran_order': False, 'shape': (4,), }", "missing key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': False, }", "missing key 'shape'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", "duplicate key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'extra': 1, }", "unexpected key 'extra'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", "non-negative integer"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4 4), }", "between shape dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "too large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } junk", "trailing characters"},
        {"{'descr: '<f4', 'fortran_order': False, 'shape': (4,), }", "malformed .npy header"},
        {"", "expected '{'"},
    };
    for (const auto& [header, what] : headers) {
      INFO("header: " << header);
      expect(npy_file(header, four_floats), what);
    }
    // A shape whose byte count overflows size_t.
    expect(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", four_floats),
           "too large");
    // A header length field far beyond the file.
    Bytes big = mpsim::test::bytes_of("\x93NUMPY");
    big.push_back(std::byte{2});
    big.push_back(std::byte{0});
    append_le(big, std::uint32_t{0xfffffff0u});
    expect(big, "implausibly large");
  }
  SECTION("shape disagreeing with the data size") {
    expect(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four_floats),
           "header says shape (5,) of float32 (5 values, 20 bytes) but the file holds 16 bytes of data");
    expect(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", four_floats),
           "header says shape (3,) of float32 (3 values, 12 bytes) but the file holds 16 bytes of data");
    expect(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", four_floats),
           "header says shape (2, 3) of float64");
    expect(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", four_floats), "shape () of float32");
  }
  SECTION("unsupported dtypes") {
    for (const char* descr : {"<c8", "<i2", "|b1", "|i1", "|O", "<U4", "|S3", "<f16", "<M8[s]", "x", "<u8", "*f4"}) {
      INFO("descr: " << descr);
      expect(npy_file(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (4,), }", four_floats),
             "unsupported dtype");
    }
    expect(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", four_floats),
           "structured arrays are not supported");
    expect(npy_file("{'descr': '|f4', 'fortran_order': False, 'shape': (4,), }", four_floats), "unsupported dtype");
  }
  SECTION("a missing file and a directory") {
    try {
      read_npy(dir / "missing.npy");
      FAIL("no error");
    } catch (const mpsim::Error& e) {
      CHECK(std::string(e.what()).find("missing.npy: cannot open") != std::string::npos);
    }
    CHECK_THROWS_AS(read_npy(dir.path()), mpsim::Error);
  }
}

TEST_CASE("make_npy, parse_dtype and the writer reject what does not fit", "[npy]") {
  const std::vector<float> six(6, 1.0f);
  CHECK_THROWS_AS(make_npy(six, {4}), mpsim::Error);
  CHECK_THROWS_AS(make_npy(six, {-1, -6}), mpsim::Error);
  CHECK(make_npy(six, {2, 3}).count() == 6);
  const std::vector<std::uint16_t> u(3);
  CHECK_THROWS_AS(make_npy(u, DType::f32), mpsim::Error);
  NpyArray bad = make_npy(six);
  bad.shape = {7};
  CHECK_THROWS_AS(npy_bytes(bad), mpsim::Error);
  CHECK(parse_dtype("bfloat16") == DType::bf16_bits);
  CHECK(parse_dtype("fp8_e4m3") == DType::fp8_e4m3_bits);
  CHECK(parse_dtype("float8_e5m2") == DType::fp8_e5m2_bits);
  // numpy's short names mean what np.dtype() makes of them: "f16" is float128 and "u8" uint64, which mpsim
  // does not read, so they are refused naming numpy's type (tests/python/test_dtype_names.py: every name).
  CHECK(parse_dtype("f2") == DType::f16);
  CHECK(parse_dtype("<f8") == DType::f64);
  CHECK(parse_dtype("float") == DType::f64);
  CHECK(parse_dtype("u1") == DType::u8);
  CHECK(parse_dtype("f32") == DType::f32);
  CHECK_THROWS_WITH(parse_dtype("f16", "--dtype"), Catch::Contains("'f16' is numpy's float128"));
  CHECK_THROWS_WITH(parse_dtype("u8", "--dtype"), Catch::Contains("'u8' is numpy's uint64"));
  CHECK_THROWS_WITH(parse_dtype(">f4", "--dtype"), Catch::Contains("big-endian"));
  CHECK_THROWS_WITH(parse_dtype("float128", "--dtype"), Catch::Contains("--dtype: 'float128' is numpy's float128"));
  CHECK_THROWS_WITH(parse_dtype("float80", "--dtype"), Catch::Contains("--dtype: unknown dtype 'float80'"));
  CHECK(shape_string(std::vector<std::int64_t>{}) == "()");
  CHECK(shape_string(std::vector<std::int64_t>{5}) == "(5,)");
  CHECK(shape_string(std::vector<std::int64_t>{2, 3}) == "(2, 3)");
}
