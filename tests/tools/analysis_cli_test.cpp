// Tests of `mpsim hist | underflow | rounding-error | updates` (tools/mpsim/{hist,underflow,rounding,updates}.cpp):
// run the real binary ($MPSIM_BIN) on .npy files written here and check the JSON against counts made
// here with round_bits(), the tidy CSV's shape, the exit codes, that bad input leaves no output behind,
// that a directory with one bad file reports the others and names the bad one, `--json -` / `--csv -`
// (standard output), the schema tag, --version and the old command name.
#include "catch_compat.hpp"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <tuple>

#include "../io/test_files.hpp"
#include "mpsim/analysis/updates.hpp"
#include "mpsim/format/block.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/io/npy.hpp"
#include "run_mpsim.hpp"

using namespace mpsim;
using mpsim::test::ScratchDir;

namespace {

using mpsim::test::quote;
using mpsim::test::run_mpsim;

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

std::vector<float> gradients(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> e(-22, 5);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = i % 13 == 0 ? 0.0f : static_cast<float>((g() & 1 ? -1 : 1) * std::exp2(e(g)));
  v[1] = 1e6f;  // overflows fp16
  return v;
}

std::uint64_t brute_underflow(const std::vector<float>& v, const Format& f, int k) {
  std::uint64_t n = 0;
  for (const float x : v)
    if (std::isfinite(x) && x != 0 && decode(round_bits(std::ldexp(double(x), k), f), f) == 0) ++n;
  return n;
}

void write_truncated(const std::filesystem::path& p, const std::vector<float>& v) {
  auto bytes = io::npy_bytes(io::make_npy(std::span<const float>(v)));
  bytes.resize(bytes.size() - 6);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace

TEST_CASE("hist and underflow on .npy files: JSON against brute force, tidy CSV, readable summary", "[analysis_cli]") {
  ScratchDir dir("analysis-cli");
  const auto a = gradients(5000, 1), b = gradients(3000, 2);
  io::write_npy(dir / "a.npy", io::make_npy(std::span<const float>(a)));
  io::write_npy(dir / "b.npy", io::make_npy(std::span<const float>(b)));
  const std::string files = quote((dir / "a.npy").string()) + " " + quote((dir / "b.npy").string());

  const auto h = run_mpsim(dir, "hist " + files + " --format float16 --json " + quote((dir / "h.json").string()) +
                                    " --csv " + quote((dir / "h.csv").string()));
  REQUIRE(h.status == 0);
  CHECK(h.output.find("subnormal") != std::string::npos);
  CHECK(h.output.find("overflow") != std::string::npos);
  const auto hj = read_json(dir / "h.json");
  CHECK(hj["format"] == "fp16");
  REQUIRE(hj["tensors"].size() == 2);
  // The total histogram against binades counted here (ilogb: floor(log2|x|)).
  std::map<int, std::uint64_t> want;
  std::uint64_t zeros = 0;
  for (const auto* v : {&a, &b})
    for (const float x : *v) x == 0 ? ++zeros : ++want[std::ilogb(x)];
  std::map<int, std::uint64_t> got;
  for (const auto& bin : hj["total"]["histogram"]["bins"]) got[bin[0].get<int>()] = bin[1].get<std::uint64_t>();
  CHECK(got == want);
  CHECK(hj["total"]["histogram"]["zero"].get<std::uint64_t>() == zeros);
  // Tidy CSV: header, five fields a row.
  std::ifstream csv(dir / "h.csv");
  std::string line;
  std::getline(csv, line);
  CHECK(line == "tensor,format,scale,stat,value");
  std::size_t rows = 0;
  while (std::getline(csv, line)) {
    CHECK(std::count(line.begin(), line.end(), ',') == 4);
    ++rows;
  }
  CHECK(rows > 20);

  const auto u = run_mpsim(
      dir, "underflow " + files + " --format fp16 --scale 1024 --sweep --json " + quote((dir / "u.json").string()));
  REQUIRE(u.status == 0);
  const auto uj = read_json(dir / "u.json");
  const auto& ta = uj["tensors"][0]["tensor"] == (dir / "a.npy").string() ? uj["tensors"][0] : uj["tensors"][1];
  CHECK(ta["underflows_num"].get<std::uint64_t>() == brute_underflow(a, fp16(), 10));
  CHECK(ta["sweep"]["rows"].size() == 41);
  CHECK(ta["sweep"]["rows"][0]["underflows_num"].get<std::uint64_t>() == brute_underflow(a, fp16(), -8));
  CHECK(ta["overflows_num"].get<std::uint64_t>() == 1);
  CHECK(ta["rounding"] == "roundTiesToEven");
  // 1e6 · 2^k · 2 <= 65504 needs k <= -5.
  CHECK(uj["total"]["recommended"]["log2_scale"].get<int>() == -5);
  CHECK(u.output.find("underflows%") != std::string::npos);
}

TEST_CASE("underflow reports min, max, mean, std, l1_norm, l2_norm of every tensor", "[analysis_cli]") {
  ScratchDir dir("analysis-cli");
  // Mean 1, sum of squares 36, sample variance 28 / 7 = 4: every statistic is exact in double, so the plain
  // double arithmetic here gives the exact values (analysis/moments_test checks the hard cases).
  const std::vector<float> v = {4, -2, 3, -1, std::numeric_limits<float>::quiet_NaN(), 2, 0, 1, 1};
  io::write_npy(dir / "v.npy", io::make_npy(std::span<const float>(v)));
  const auto u =
      run_mpsim(dir, "underflow " + quote((dir / "v.npy").string()) + " --json " + quote((dir / "u.json").string()));
  REQUIRE(u.status == 0);
  const auto t = read_json(dir / "u.json")["tensors"][0];
  double n = 0, sum = 0, l1 = 0, sq = 0, lo = 1e9, hi = -1e9;
  for (const float x : v)
    if (std::isfinite(x)) {
      ++n;
      sum += x;
      l1 += std::fabs(x);
      sq += double(x) * x;
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
    }
  const double mean = sum / n, var = (sq - n * mean * mean) / (n - 1);
  std::printf("underflow statistics: %s\n", t.dump().substr(0, 400).c_str());
  CHECK(t["min"].get<double>() == lo);
  CHECK(t["max"].get<double>() == hi);
  CHECK(t["mean"].get<double>() == mean);
  CHECK(t["l1_norm"].get<double>() == l1);
  CHECK(t["l2_norm"].get<double>() == std::sqrt(sq));
  CHECK(t["std"].get<double>() == std::sqrt(var));
}

TEST_CASE("--json - and --csv - write the report to standard output, the summary to standard error", "[analysis_cli]") {
  ScratchDir dir("analysis-cli");
  const auto a = gradients(2000, 5);
  io::write_npy(dir / "a.npy", io::make_npy(std::span<const float>(a)));
  const std::string in = quote((dir / "a.npy").string());
  const std::string bin = quote(std::getenv("MPSIM_BIN"));
  auto run_split = [&](const std::string& args) {
    const std::string cmd =
        bin + " " + args + " > " + quote((dir / "out").string()) + " 2> " + quote((dir / "err").string());
    const int raw = std::system(cmd.c_str());
    std::ifstream o(dir / "out"), e(dir / "err");
    std::stringstream so, se;
    so << o.rdbuf();
    se << e.rdbuf();
    std::filesystem::remove(dir / "out");
    std::filesystem::remove(dir / "err");
    INFO(cmd << "\nstdout: " << so.str().substr(0, 300) << "\nstderr: " << se.str().substr(0, 300));
    REQUIRE(WIFEXITED(raw));
    return std::tuple{WEXITSTATUS(raw), so.str(), se.str()};
  };
  for (const std::string cmd : {"hist", "underflow", "rounding-error", "updates"}) {
    const std::string args = cmd == "updates" ? in + " " + in : in;
    // The same report to a file and to standard output: the same bytes.
    REQUIRE(std::get<0>(run_split(cmd + " " + args + " --json " + quote((dir / "r.json").string()))) == 0);
    const auto [status, out, err] = run_split(cmd + " " + args + " --json -");
    CHECK(status == 0);
    std::ifstream f(dir / "r.json");
    std::stringstream file;
    file << f.rdbuf();
    CHECK(out == file.str());
    CHECK(!err.empty());  // the human summary
    CHECK_FALSE(std::filesystem::exists(dir / "-"));
    const auto j = nlohmann::json::parse(out);
    std::printf("%s --json -: %zu bytes on stdout, %zu on stderr, schema %s, version %s\n", cmd.c_str(), out.size(),
                err.size(), j["schema"].dump().c_str(), j["mpsim_version"].dump().c_str());
    CHECK(j["schema"] == "mpsim-" + cmd + "-1");
    CHECK(j["mpsim_version"].is_string());
  }
  {  // mpsim formats --json - and mpsim round --stats-json -: tagged JSON on stdout, the output file written
    const auto [fs, fout, ferr] = run_split("formats --json -");
    CHECK(fs == 0);
    const auto fj = nlohmann::json::parse(fout);
    CHECK(fj["schema"] == "mpsim-formats-1");
    CHECK(fj["formats"].size() == named_formats().size());
    const auto [rs, rout, rerr] =
        run_split("round --to bf16 --stats-json - " + in + " " + quote((dir / "o.npy").string()));
    CHECK(rs == 0);
    const auto rj = nlohmann::json::parse(rout);
    std::printf("formats --json -: %zu formats; round --stats-json -: schema %s, count %s\n", fj["formats"].size(),
                rj["schema"].dump().c_str(), rj["count"].dump().c_str());
    CHECK(rj["schema"] == "mpsim-round-1");
    CHECK(rj["count"] == a.size());
    CHECK(std::filesystem::exists(dir / "o.npy"));
    CHECK(rerr.find("-> ") != std::string::npos);  // the summary line, on stderr
  }
  {  // mpsim hw runs mpsim-hw with the same arguments: its `--json -` reaches standard output too
    const auto [hs, hout, herr] = run_split("hw info --json -");
    std::printf("hw info --json -: exit %d, %zu bytes on stdout\n", hs, hout.size());
    CHECK(hs == 0);
    CHECK(nlohmann::json::parse(hout)["schema"] == "mpsim-hw-1");
    // hw gemm --dump into a folder that does not exist: refused by name before any device is looked for (a
    // build without CUDA refuses the command itself); nothing created.
    const auto missing = dir / "no-such-folder";
    const auto [gs, gout, gerr] = run_split("hw gemm --dump " + quote(missing.string()));
    std::printf("hw gemm --dump <missing>: exit %d: %s", gs, gerr.c_str());
    CHECK(gs != 0);
    CHECK((gerr.find("--dump") != std::string::npos || gerr.find("CUDA") != std::string::npos));
    CHECK(!std::filesystem::exists(missing));
  }
  const auto [status, out, err] = run_split("underflow " + in + " --csv=-");
  CHECK(status == 0);
  CHECK(out.rfind("tensor,format,scale,stat,value\n", 0) == 0);
  const auto both = run_split("underflow " + in + " --csv - --json -");
  CHECK(std::get<0>(both) == 2);
  CHECK(std::get<2>(both).find("only one of") != std::string::npos);
}

TEST_CASE("--version; the old name 'rounding' still runs, with a notice", "[analysis_cli]") {
  ScratchDir dir("analysis-cli");
  const auto v = run_mpsim(dir, "--version");
  std::printf("--version: %s", v.output.c_str());
  CHECK(v.status == 0);
  CHECK(v.output.rfind("mpsim 0.", 0) == 0);
  CHECK(v.output.find("\ngit ") != std::string::npos);
  CHECK(v.output.find("buildtype=") != std::string::npos);
  CHECK(v.output.find("cuda=") != std::string::npos);
  const auto a = gradients(500, 6);
  io::write_npy(dir / "a.npy", io::make_npy(std::span<const float>(a)));
  const std::string in = quote((dir / "a.npy").string());
  const auto old = run_mpsim(dir, "rounding " + in + " --json " + quote((dir / "old.json").string()));
  const auto now = run_mpsim(dir, "rounding-error " + in + " --json " + quote((dir / "new.json").string()));
  CHECK(old.status == 0);
  CHECK(old.output.find("notice: 'rounding' is now called 'rounding-error'") != std::string::npos);
  CHECK(now.output.find("notice") == std::string::npos);
  CHECK(read_json(dir / "old.json") == read_json(dir / "new.json"));
}

TEST_CASE("rounding and updates commands", "[analysis_cli]") {
  ScratchDir dir("analysis-cli");
  const auto a = gradients(4000, 3);
  io::write_npy(dir / "a.npy", io::make_npy(std::span<const float>(a)));
  const auto r = run_mpsim(dir, "rounding-error " + quote((dir / "a.npy").string()) +
                                    " --format bf16 --modes rne,sr,rtz --json " + quote((dir / "r.json").string()));
  REQUIRE(r.status == 0);
  const auto rj = read_json(dir / "r.json");
  const auto& modes = rj["tensors"][0]["modes"];
  REQUIRE(modes.size() == 3);
  CHECK(modes[0]["rounding"] == std::string(ieee_name(RoundingMode::nearest_even)));
  CHECK(modes[1]["rounding"] == std::string(ieee_name(RoundingMode::stochastic)));
  std::uint64_t nonzero = 0;
  double max_rel = 0;
  for (const float x : a)
    if (x != 0) {
      ++nonzero;
      max_rel = std::max(max_rel, std::fabs(double(round(x, bf16())) - x) / std::fabs(double(x)));
    }
  CHECK(modes[0]["measured_num"].get<std::uint64_t>() == nonzero);
  CHECK(modes[0]["rel_err_max"].get<double>() == max_rel);

  // Weights 1, updates 2^-12: every update vanishes in fp16 (below half of ulp(1) = 2^-10), none in fp32.
  const std::vector<float> w(100, 1.0f), up(100, std::ldexp(1.0f, -12));
  io::write_npy(dir / "w.npy", io::make_npy(std::span<const float>(w)));
  io::write_npy(dir / "u.npy", io::make_npy(std::span<const float>(up)));
  const std::string wu = quote((dir / "w.npy").string()) + " " + quote((dir / "u.npy").string());
  const auto s = run_mpsim(dir, "updates " + wu + " --format fp16 --json " + quote((dir / "s.json").string()));
  REQUIRE(s.status == 0);
  const auto sj = read_json(dir / "s.json");
  CHECK(sj["total"]["swallowed_num"].get<std::uint64_t>() == 100);
  CHECK(sj["total"]["swallowed%"].get<double>() == 100.0);
  CHECK(sj["total"]["threshold_log2_ratio"].get<int>() == 11);
  const auto s32 = run_mpsim(dir, "updates " + wu + " --format fp32 --json " + quote((dir / "s32.json").string()));
  REQUIRE(s32.status == 0);
  CHECK(read_json(dir / "s32.json")["total"]["swallowed_num"].get<std::uint64_t>() == 0);
}

TEST_CASE("updates reads each pair in chunks: the report equals the library's over the whole arrays",
          "[analysis_cli]") {
  ScratchDir dir("analysis-cli");
  // 2^20 + 5 pairs: a whole chunk of the command's stream and an odd tail; stochastic rounding, so
  // every element's generator index must be its index in the array.
  const std::size_t n = (std::size_t{1} << 20) + 5;
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<float> e(-24.0f, 4.0f);
  std::vector<float> w(n), u(n);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = std::exp2(e(gen)) * ((gen() & 1) ? -1.0f : 1.0f);
    u[i] = w[i] * std::exp2(-std::abs(e(gen)) + 4.0f) * 1e-3f;
  }
  io::write_npy(dir / "w.npy", io::make_npy(std::span<const float>(w)));
  io::write_npy(dir / "u.npy", io::make_npy(std::span<const float>(u)));
  const auto res = run_mpsim(dir, "updates " + quote((dir / "w.npy").string()) + " " + quote((dir / "u.npy").string()) +
                                      " --format bf16 --mode sr --seed 11 --json " + quote((dir / "s.json").string()));
  REQUIRE(res.status == 0);
  Rounding r = Rounding::of(RoundingMode::stochastic);
  r.seed = 11;
  analysis::SwallowedUpdates want(bf16(), r);
  want.add(std::span<const float>(w), std::span<const float>(u), 0);
  nlohmann::json got = read_json(dir / "s.json")["pairs"][0];
  got.erase("weights");
  got.erase("updates");
  CHECK(got == want.to_json());
  WARN(n << " pairs, bf16 stochastic: swallowed " << want.swallowed() << " of " << want.measured()
         << " measured, the same in the command's chunked report");
}

TEST_CASE("bad input: exit 2 and no output; one bad file among good ones is named, the rest reported",
          "[analysis_cli]") {
  ScratchDir dir("analysis-cli");
  const auto a = gradients(1000, 4);
  std::filesystem::create_directories(dir / "in");
  io::write_npy(dir / "in/a.npy", io::make_npy(std::span<const float>(a)));
  io::write_npy(dir / "in/b.npy", io::make_npy(std::span<const float>(a)));
  write_truncated(dir / "in/c.npy", a);
  const std::string out = quote((dir / "out.json").string());
  const std::string good = quote((dir / "in/a.npy").string());
  for (const std::string cmd : {"hist", "underflow", "rounding-error"}) {
    for (const std::string& bad : std::vector<std::string>{
             good + " --format fp99", good + " --scale 3", good + " --format fp16 --scale 0",
             quote((dir / "missing.npy").string()), quote((dir / "in/c.npy").string()), good + " --mode sideways"}) {
      if (cmd == "hist" && bad.find("--mode") != std::string::npos) continue;
      const auto r = run_mpsim(dir, cmd + " " + bad + " --json " + out);
      CHECK(r.status == 2);
      CHECK_FALSE(std::filesystem::exists(dir / "out.json"));
    }
    const auto r = run_mpsim(dir, cmd + " " + quote((dir / "in").string()) + " --json " + out);
    CHECK(r.status == 1);
    CHECK(r.output.find("c.npy") != std::string::npos);
    REQUIRE(std::filesystem::exists(dir / "out.json"));
    const auto j = read_json(dir / "out.json");
    CHECK(j["tensors"].size() == 2);
    REQUIRE(j["failed"].size() == 1);
    CHECK(j["failed"][0]["input"].get<std::string>().find("c.npy") != std::string::npos);
    std::filesystem::remove(dir / "out.json");
  }
  // Integer arrays are refused unless --dtype says whose bits they are.
  const std::vector<std::uint16_t> bits{0x3f80, 0x0001, 0x0000, 0x7f80};  // bf16: 1, smallest subnormal, 0, inf
  io::write_npy(dir / "bits.npy", io::make_npy(std::span<const std::uint16_t>(bits)));
  const auto no = run_mpsim(dir, "hist " + quote((dir / "bits.npy").string()));
  CHECK(no.status == 2);
  CHECK(no.output.find("--dtype") != std::string::npos);
  const auto yes = run_mpsim(dir, "hist " + quote((dir / "bits.npy").string()) + " --dtype bf16 --json " + out);
  REQUIRE(yes.status == 0);
  const auto hj = read_json(dir / "out.json");
  CHECK(hj["total"]["histogram"]["pos_inf"] == 1);
  CHECK(hj["total"]["histogram"]["zero"] == 1);
  CHECK(hj["total"]["histogram"]["bins"] == nlohmann::json::parse("[[-133, 1], [0, 1]]"));
  // updates: mismatched sizes.
  const std::vector<float> w3(3, 1.0f), u4(4, 1.0f);
  io::write_npy(dir / "w3.npy", io::make_npy(std::span<const float>(w3)));
  io::write_npy(dir / "u4.npy", io::make_npy(std::span<const float>(u4)));
  const auto m = run_mpsim(
      dir, "updates " + quote((dir / "w3.npy").string()) + " " + quote((dir / "u4.npy").string()) + " --json " + out);
  CHECK(m.status == 2);
}

TEST_CASE("block formats stream in underflow, hist and rounding-error: any chunk gives the whole tensor's report",
          "[analysis_cli]") {
  // An .npz of three tensors whose rows (100, 37 and 16 values) are no multiple of the chunks (7, 1000): a
  // tensor spans many chunks and a chunk ends inside rows and blocks. The default chunk (2^20 values) reads
  // every tensor in one piece. The reports must agree number for number; underflow's block counts are also
  // checked against quantize_blocks on each whole tensor in-process.
  ScratchDir dir("analysis-cli");
  const auto a = gradients(97 * 100, 11), b = gradients(50 * 37, 12), c = gradients(16 * 16, 13);
  const std::vector<std::pair<std::string, io::NpyArray>> members = {
      {"a", io::make_npy(std::span<const float>(a), {97, 100})},
      {"b", io::make_npy(std::span<const float>(b), {50, 37})},
      {"c", io::make_npy(std::span<const float>(c), {16, 16})}};
  const auto bytes = io::npz_bytes(members);
  mpsim::test::write_bytes(dir / "t.npz", bytes);
  const std::string in = quote((dir / "t.npz").string()), out = quote((dir / "r.json").string());
  int reports = 0, numbers = 0;
  auto count_numbers = [](const nlohmann::json& j, auto&& self) -> int {
    if (j.is_number()) return 1;
    int n = 0;
    if (j.is_structured())
      for (const auto& v : j) n += self(v, self);
    return n;
  };
  const std::vector<std::string> commands = {
      "underflow --format mxfp8_e4m3,mxfp4_e2m1,nvfp4,fp8_e4m3,fp16 --scale 1024",
      "hist --format nvfp4",
      "hist --format mxfp4_e2m1",
      "hist --format mxfp8_e4m3",
      "rounding-error --format nvfp4 --modes rne,sr --seed 3",
      "rounding-error --format mxfp8_e4m3 --modes rne,sr",
      "rounding-error --format mxfp4_e2m1"};
  for (const std::string& cmd : commands) {
    const auto whole = run_mpsim(dir, cmd + " " + in + " --json " + out);
    INFO(cmd << ": " << whole.output);
    REQUIRE(whole.status == 0);
    auto want = read_json(dir / "r.json");
    want.erase("mpsim_version");
    for (const char* chunk : {" --chunk 7", " --chunk 1000"}) {
      const auto res = run_mpsim(dir, cmd + chunk + " " + in + " --json " + out);
      REQUIRE(res.status == 0);
      auto got = read_json(dir / "r.json");
      got.erase("mpsim_version");
      CHECK(got == want);
      ++reports;
      numbers += count_numbers(got, count_numbers);
    }
    if (cmd.rfind("underflow", 0) == 0) {
      // Each block format's counts against the whole tensor quantized at once.
      const std::vector<std::pair<const std::vector<float>*, std::size_t>> tensors = {{&a, 100}, {&b, 37}, {&c, 16}};
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        for (std::size_t k = 0; k < 3; ++k) {
          const auto& j = want["tensors"][t]["formats"][k];
          const BlockFormat bf = parse_block_format(j["format"].get<std::string>());
          BlockStats s;
          quantize_blocks(*tensors[t].first, tensors[t].second, bf, Rounding{}, &s);
          CHECK(j["flushed_num"] == s.flushed);
          CHECK(j["subnormal_num"] == s.subnormal);
          CHECK(j["saturated_num"] == s.saturated);
          CHECK(j["blocks"] == s.blocks);
          std::printf(
              "underflow %s %s: flushed %llu subnormal %llu saturated %llu blocks %llu (quantize_blocks on "
              "the whole tensor: the same)\n",
              want["tensors"][t]["tensor"].get<std::string>().c_str(), bf.name.c_str(),
              static_cast<unsigned long long>(s.flushed), static_cast<unsigned long long>(s.subnormal),
              static_cast<unsigned long long>(s.saturated), static_cast<unsigned long long>(s.blocks));
        }
      }
    }
  }
  std::printf(
      "block formats streamed: %d reports with chunks of 7 and 1000 values equal to the one-chunk report "
      "(%d JSON numbers compared)\n",
      reports, numbers);

  // A truncated file: exit 2, nothing written.
  write_truncated(dir / "short.npy", a);
  std::filesystem::remove(dir / "r.json");
  const auto before = dir.files();
  for (const std::string& cmd : commands) {
    const auto r = run_mpsim(dir, cmd + " --chunk 7 " + quote((dir / "short.npy").string()) + " --json " + out +
                                      " --csv " + quote((dir / "r.csv").string()));
    CHECK(r.status == 2);
    CHECK(r.output.find("short.npy") != std::string::npos);
    CHECK(dir.files() == before);
    std::printf("%s, truncated input: exit %d, %s", cmd.c_str(), r.status, r.output.c_str());
  }
}

TEST_CASE("an error about one option names it as the command line spells it", "[analysis_cli]") {
  // The library names the field (FieldError "block_scale", lib/mpsim/field_error.hpp); main() names the flag.
  ScratchDir dir("analysis-cli-field");
  const auto a = gradients(64, 5);
  io::write_npy(dir / "a.npy", io::make_npy(std::span<const float>(a)));
  const std::string in = quote((dir / "a.npy").string());
  std::ofstream(dir / "junk.bin") << "no tensor file";
  const std::pair<std::string, std::string> cases[] = {
      {"hist " + in + " --format mxfp8_e4m3 --block-scale sideways",
       "mpsim: error: --block-scale 'sideways': unknown rule (known: floor, rceil)"},
      {"rounding-error " + in + " --format nvfp4 --block-scale rceil",
       "mpsim: error: --block-scale 'rceil': applies to the MX formats"},
      {"underflow " + in + " --format mxfp8_e4m3,fp16 --block -3", "mpsim: error: --block -3: must be positive"},
      {"train --model ssd --steps 1 --clip-norm -1 --out " + quote((dir / "run").string()),
       "mpsim: error: --clip-norm -1: must be finite and >= 0"},
      {"train --model ssd --steps 1 --scaler static:0 --out " + quote((dir / "run").string()),
       "mpsim: error: --scaler 'static:0': the scale must be finite and > 0"},
      // Fields the library names otherwise than the flag (ModelConfig::corpus_path is --corpus), the models'
      // and the study's fields, a length list, and advice naming a field (raw data: --dtype).
      {"train --model ssd --steps 1 --corpus c.txt --out " + quote((dir / "run").string()),
       "mpsim: error: --corpus c.txt: for the lstm model only, not ssd"},
      {"train --model lstm --steps 1 --vocab 7 --out " + quote((dir / "run").string()),
       "mpsim: error: --vocab 7: the generated language takes"},
      {"study loss-scaling --model ssd --tolerance-pct -1 --out " + quote((dir / "study").string()),
       "mpsim: error: --tolerance-pct -1: must be finite and >= 0"},
      {"accumulation-error --model h100-fp8 --k 64..32", "mpsim: error: --k '64..32': the range is empty"},
      {"underflow " + quote((dir / "junk.bin").string()) + " --format fp16",
       "(unknown magic); pass --dtype to read it as raw data"},
      {"updates " + in + " " + in + " --format mxfp8_e4m3",
       "); `mpsim round --to` and the --format of underflow, hist and rounding-error take it"},
  };
  int named = 0;
  for (const auto& [args, want] : cases) {
    const auto r = run_mpsim(dir, args);
    CHECK(r.status == 2);
    CHECK(r.output.find(want) != std::string::npos);
    named += r.status == 2 && r.output.find(want) != std::string::npos;
    if (r.output.find(want) == std::string::npos) std::printf("%s: %s", args.c_str(), r.output.c_str());
  }
  CHECK_FALSE(std::filesystem::exists(dir / "run"));
  CHECK_FALSE(std::filesystem::exists(dir / "study"));
  WARN(named << " of " << std::size(cases) << " errors named their flag as the command line spells it");
}
