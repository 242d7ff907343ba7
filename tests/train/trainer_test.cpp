// Tests of lib/mpsim/train/trainer.hpp and checkpoint.hpp with a tiny linear-regression model:
// determinism (same run twice, 1 vs 2 threads: byte-identical steps.csv), resume (2N straight == N, stop,
// resume to 2N: identical steps.csv tail, weights and optimiser state), the loss scaler's effect on
// skipped steps and underflow, pure-fp16 weights, and corrupt or mismatched checkpoints.
#include "catch_compat.hpp"

#include <fmt/core.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/train/checkpoint.hpp"
#include "mpsim/train/trainer.hpp"
#include "tiny_model.hpp"

using namespace mpsim;
using namespace mpsim::train;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("mpsim_train_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d.parent_path());
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

TrainConfig base(const std::string& name, const std::string& policy, const std::string& scaler, int steps) {
  TrainConfig c;
  c.model = "tiny";
  c.policy = policy;
  c.scaler = scaler;
  c.steps = steps;
  c.seed = 7;
  c.optimizer.name = "adamw";
  c.optimizer.lr = 0.01;
  c.eval_every = 5;
  c.out = temp_dir(name);
  return c;
}

}  // namespace

TEST_CASE("the same run twice, and with 1 and 2 threads, gives byte-identical steps.csv", "[trainer]") {
  for (const char* policy : {"fp32", "mixed-fp16", "pure-fp16"}) {
    INFO("policy " << policy);
    auto a = base(std::string("det_a_") + policy, policy, "dynamic,init_scale=1048576,growth_interval=4", 30);
    if (std::string(policy) == "pure-fp16") a.optimizer.name = "sgd";  // no master copy: SGD only
    auto b = a;
    b.out = temp_dir(std::string("det_b_") + policy);
    auto c = a;
    c.out = temp_dir(std::string("det_c_") + policy);
    c.threads = 2;
    run_training(a, tiny::make);
    run_training(b, tiny::make);
    run_training(c, tiny::make);
    const std::string sa = slurp(a.out / "steps.csv");
    INFO("steps.csv: " << lines(sa).size() << " lines, " << sa.size() << " bytes");
    CHECK(lines(sa).size() == 31);
    CHECK(sa == slurp(b.out / "steps.csv"));
    CHECK(sa == slurp(c.out / "steps.csv"));
    CHECK(slurp(a.out / "checkpoint.safetensors") == slurp(c.out / "checkpoint.safetensors"));
  }
}

TEST_CASE("resume: N steps, stop, resume to 2N equals 2N straight, bit for bit", "[trainer]") {
  for (const char* scaler :
       {"dynamic,init_scale=1048576,growth_interval=3", "hysteresis:megatron,init_scale=1048576,growth_interval=3",
        "hysteresis:deepspeed,init_scale=1048576,growth_interval=3"}) {
    for (const char* opt : {"sgd", "adamw"}) {
      INFO("scaler " << scaler << ", optimizer " << opt);
      auto straight = base("straight", "mixed-fp16", scaler, 24);
      straight.optimizer.name = opt;
      straight.hist_steps = {3, 20};
      straight.eval_every = 4;  // step 12, where the first run stops and evaluates, is an eval step of both
      auto first = straight;
      first.out = temp_dir("first");
      first.steps = 12;
      auto second = straight;
      second.out = temp_dir("second");
      second.resume = first.out / "checkpoint.safetensors";
      const auto s_straight = run_training(straight, tiny::make);
      run_training(first, tiny::make);
      const auto s_resumed = run_training(second, tiny::make);

      const auto all = lines(slurp(straight.out / "steps.csv"));
      const auto head = lines(slurp(first.out / "steps.csv"));
      const auto tail = lines(slurp(second.out / "steps.csv"));
      REQUIRE(all.size() == 25);
      REQUIRE(head.size() == 13);
      REQUIRE(tail.size() == 13);
      CHECK(tail[0] == all[0]);  // header
      int mismatches = 0;
      for (int i = 1; i <= 12; ++i) {
        mismatches += head[i] != all[i];
        mismatches += tail[i] != all[12 + i];
      }
      INFO("24 rows compared, " << mismatches << " differ; skipped steps " << s_straight.skipped_steps);
      CHECK(mismatches == 0);
      CHECK(s_resumed.skipped_steps == s_straight.skipped_steps);
      CHECK(s_resumed.final_scale == s_straight.final_scale);
      CHECK(s_resumed.act_grad_nonzero == s_straight.act_grad_nonzero);
      const auto ck_a = read_checkpoint(straight.out / "checkpoint.safetensors");
      const auto ck_b = read_checkpoint(second.out / "checkpoint.safetensors");
      REQUIRE(ck_a.tensors.size() == ck_b.tensors.size());
      for (std::size_t t = 0; t < ck_a.tensors.size(); ++t) {
        INFO("tensor " << ck_a.tensors[t].name);
        CHECK(std::memcmp(ck_a.tensors[t].values.data(), ck_b.tensors[t].values.data(),
                          ck_a.tensors[t].values.size() * 4) == 0);
      }
      CHECK(ck_a.header["scaler_state"] == ck_b.header["scaler_state"]);
      CHECK(slurp(straight.out / "hist/step_000020.json") == slurp(second.out / "hist/step_000020.json"));
    }
  }
}

TEST_CASE("a too-large initial scale overflows fp16: dynamic skips and backs off, static keeps skipping", "[trainer]") {
  auto dyn = base("overflow_dyn", "mixed-fp16", "dynamic,init_scale=1e9,growth_interval=1000", 20);
  const auto s = run_training(dyn, tiny::make);
  const auto rows = lines(slurp(dyn.out / "steps.csv"));
  // Gradients of order 0.1-1 times 1e9 overflow fp16 (65504) until the scale is below ~6e4: the
  // first steps are skipped and the scale halves each time.
  int skipped_prefix = 0;
  double expected_scale = 1e9;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    std::stringstream ss(rows[r]);
    std::string step, loss, metric, scale, skipped;
    std::getline(ss, step, ',');
    std::getline(ss, loss, ',');
    std::getline(ss, metric, ',');
    std::getline(ss, scale, ',');
    std::getline(ss, skipped, ',');
    if (skipped != "1") break;
    CHECK(std::stod(scale) == expected_scale);
    expected_scale /= 2;
    ++skipped_prefix;
  }
  INFO("skipped prefix " << skipped_prefix << ", skipped total " << s.skipped_steps << ", final scale "
                         << s.final_scale);
  CHECK(skipped_prefix >= 10);
  CHECK(s.skipped_steps == skipped_prefix);
  CHECK_FALSE(s.diverged);

  auto fixed = base("overflow_static", "mixed-fp16", "static:1e9", 10);
  const auto sf = run_training(fixed, tiny::make);
  CHECK(sf.skipped_steps == 10);  // static never adapts: every step overflows and is skipped
}

TEST_CASE("small gradients underflow in fp16 without scaling and survive with a scale", "[trainer]") {
  auto plain = base("under_none", "mixed-fp16", "none", 10);
  plain.model = "tiny_small_grads";
  const auto s0 = run_training(plain, tiny::make);
  auto scaled = plain;
  scaled.out = temp_dir("under_static");
  scaled.scaler = "static:1048576";  // 2^20 brings 2^-20-sized gradients back to order 1
  const auto s1 = run_training(scaled, tiny::make);
  auto full = plain;
  full.out = temp_dir("under_fp32");
  full.policy = "fp32";
  const auto s2 = run_training(full, tiny::make);
  INFO("lost: none " << 100 * s0.act_grad_lost_fraction() << "%, static 2^20 " << 100 * s1.act_grad_lost_fraction()
                     << "%, fp32 " << 100 * s2.act_grad_lost_fraction() << "%; nonzero " << s0.act_grad_nonzero);
  CHECK(s0.act_grad_nonzero > 0);
  CHECK(s0.act_grad_lost_fraction() > 0.05);
  CHECK(s1.act_grad_lost_fraction() == 0.0);
  CHECK(s2.act_grad_nonzero == 0);  // fp32 does not round the site
  const auto header = lines(slurp(plain.out / "steps.csv"))[0];
  CHECK(header ==
        "step,loss,metric,scale,skipped,grad_norm,swallowed,lin/act_grad:zero,lin/act_grad:subnormal,"
        "lin/act_grad:overflow,lin/act_grad:l1_lost,lin/act_grad:l2sq_lost,lin/act_grad:cosine,"
        "lin/act_grad:push_down,lin/act_grad:lost_bias,step:l1_lost,step:l2sq_lost,step:cosine,step:push_down,"
        "step:lost_bias");
  CHECK(lines(slurp(full.out / "steps.csv"))[0] == header);  // same columns under fp32 (all zero)
  CHECK(fs::exists(full.out / "hist/step_000001.json"));
  const auto snap = nlohmann::json::parse(slurp(full.out / "hist/step_000010.json"));
  CHECK(snap["activation_grad"].contains("lin/act_grad"));
  CHECK(snap["weight_grad"].contains("lin/w_grad"));
  CHECK(snap["master_grad"].contains("lin/weight"));
}

// The gradient mass columns of steps.csv against the activation gradient of the same first step recomputed
// here: the tiny model run once by hand under mixed-fp16, its act_grad site's values before and after
// rounding taken with the precision's observer, and the shares and the cosine summed in long double.
TEST_CASE("steps.csv's gradient mass lost matches the first step recomputed by hand", "[trainer]") {
  auto plain = base("mass_none", "mixed-fp16", "none", 2);
  plain.model = "tiny_small_grads";
  run_training(plain, tiny::make);
  auto model = tiny::make(plain.model, plain.model_config, plain.seed);
  nn::Precision prec(nn::parse_policy("mixed-fp16"));
  std::vector<float> before, after;
  prec.observe([&](std::string_view, nn::OpClass cls, std::span<const float> b, std::span<const float> a) {
    if (cls != nn::OpClass::activation_grad) return;
    before.insert(before.end(), b.begin(), b.end());
    after.insert(after.end(), a.begin(), a.end());
  });
  model->forward_backward(0, 1.0f, prec);  // step 1: batch 0, loss scale 1, accumulate 1
  long double abs = 0, sq = 0, f_abs = 0, f_sq = 0, f_down = 0, f_signed = 0, dot = 0, sq_q = 0;
  int flushed = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    const long double g = before[i], q = after[i];
    if (g == 0) continue;
    abs += std::fabs(g);
    sq += g * g;
    if (q == 0) {
      ++flushed;
      f_abs += std::fabs(g);
      f_sq += g * g;
      f_signed += g;
      if (g > 0) f_down += g;
    }
    dot += g * q;
    sq_q += q * q;
  }
  const auto rows = lines(slurp(plain.out / "steps.csv"));
  const std::string row1 = rows.at(1);
  std::vector<std::string> names, cells;
  for (std::stringstream ss(rows[0]); ss.good();) names.emplace_back(), std::getline(ss, names.back(), ',');
  for (std::stringstream ss(row1); ss.good();) cells.emplace_back(), std::getline(ss, cells.back(), ',');
  REQUIRE(names.size() == cells.size());
  std::map<std::string, double> v;
  for (std::size_t i = 0; i < names.size(); ++i) v[names[i]] = cells[i].empty() ? NAN : std::stod(cells[i]);
  const double l1 = double(f_abs / abs), l2 = double(f_sq / sq), cos = double(dot / std::sqrt(sq * sq_q));
  const double down = double(f_down / f_abs), bias = double(f_signed / abs);
  std::printf(
      "tiny model, mixed-fp16, step 1: %zu activation gradients, %d flushed; |g| lost %.6g (csv %.6g), "
      "g^2 lost %.6g (csv %.6g), cosine %.12f (csv %.12f), lost pushing down %.6g (csv %.6g), lost bias "
      "%.6g (csv %.6g)\n",
      before.size(), flushed, l1, v["lin/act_grad:l1_lost"], l2, v["lin/act_grad:l2sq_lost"], cos,
      v["lin/act_grad:cosine"], down, v["lin/act_grad:push_down"], bias, v["lin/act_grad:lost_bias"]);
  CHECK(v["lin/act_grad:push_down"] == Approx(down).epsilon(1e-5));
  CHECK(v["lin/act_grad:lost_bias"] == Approx(bias).epsilon(1e-5));
  CHECK(v["step:push_down"] == v["lin/act_grad:push_down"]);
  CHECK(flushed > 0);
  CHECK(v["lin/act_grad:l1_lost"] == Approx(l1).epsilon(1e-5));  // the CSV prints shares to 6 digits
  CHECK(v["lin/act_grad:l2sq_lost"] == Approx(l2).epsilon(1e-5));
  CHECK(v["lin/act_grad:cosine"] == Approx(cos).epsilon(1e-14));
  // One site: the whole step's columns are the site's.
  CHECK(v["step:l1_lost"] == v["lin/act_grad:l1_lost"]);
  CHECK(v["step:cosine"] == v["lin/act_grad:cosine"]);
  // Under fp32 nothing is lost and the cosine is 1.
  auto full = plain;
  full.out = temp_dir("mass_fp32");
  full.policy = "fp32";
  run_training(full, tiny::make);
  const auto fp32_row = lines(slurp(full.out / "steps.csv")).at(1);
  CHECK(fp32_row.substr(fp32_row.size() - 12) == ",0,0,1,nan,0");  // nothing flushed: no push-down share
}

TEST_CASE("pure-fp16 keeps the weights representable in fp16 after every update", "[trainer]") {
  auto c = base("pure", "pure-fp16", "dynamic,init_scale=1024", 8);
  c.optimizer.name = "sgd";
  run_training(c, tiny::make);
  const auto ck = read_checkpoint(c.out / "checkpoint.safetensors");
  std::size_t checked = 0;
  for (const auto& t : ck.tensors) {
    if (t.name.rfind("param/", 0) != 0) continue;
    for (float v : t.values) {
      CHECK(mpsim::round(v, mpsim::fp16()) == v);
      ++checked;
    }
  }
  INFO(checked << " weights checked");
  CHECK(checked == 9);
}

TEST_CASE("the checkpoint is a safetensors file: F32 tensors by name, the state in __metadata__", "[trainer]") {
  auto c = base("ck_layout", "mixed-fp16", "dynamic,init_scale=1024,growth_interval=4", 6);
  c.optimizer.name = "adamw";
  run_training(c, tiny::make);
  const std::string bytes = slurp(c.out / "checkpoint.safetensors");
  // Parsed here from the safetensors README's layout, not with the library's reader.
  REQUIRE(bytes.size() >= 8);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<unsigned char>(bytes[i]);
  REQUIRE(header_len <= bytes.size() - 8);
  CHECK(header_len % 8 == 0);  // the data starts 8-byte aligned
  const auto st = nlohmann::json::parse(bytes.substr(8, header_len));
  const std::uint64_t data_bytes = bytes.size() - 8 - header_len;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  const Checkpoint ck = read_checkpoint(c.out / "checkpoint.safetensors");
  std::size_t tensors = 0, values = 0, bad = 0;
  for (const auto& [name, v] : st.items()) {
    if (name == "__metadata__") continue;
    ++tensors;
    CHECK(v["dtype"] == "F32");
    const auto b = v["data_offsets"][0].get<std::uint64_t>(), e = v["data_offsets"][1].get<std::uint64_t>();
    CHECK(v["shape"] == nlohmann::json::array({(e - b) / 4}));
    spans.push_back({b, e});
    const auto it = std::find_if(ck.tensors.begin(), ck.tensors.end(), [&](const auto& t) { return t.name == name; });
    REQUIRE(it != ck.tensors.end());
    REQUIRE(it->values.size() * 4 == e - b);
    bad += std::memcmp(it->values.data(), bytes.data() + 8 + header_len + b, e - b) != 0;
    values += it->values.size();
  }
  // The tensors tile the data with no gap and no overlap (safetensors' own validation asks that).
  std::sort(spans.begin(), spans.end());
  std::uint64_t at = 0;
  for (const auto& [b, e] : spans) {
    CHECK(b == at);
    at = e;
  }
  CHECK(at == data_bytes);
  std::printf("checkpoint: %zu tensors, %zu values compared with the reader's, %zu differ\n", tensors, values, bad);
  CHECK(tensors == ck.tensors.size());
  CHECK(bad == 0);
  // Every metadata value is a string holding JSON text.
  const auto& meta = st["__metadata__"];
  for (const auto& [key, v] : meta.items()) {
    INFO("metadata " << key);
    REQUIRE(v.is_string());
    CHECK_NOTHROW(nlohmann::json::parse(v.get<std::string>()));
  }
  CHECK(nlohmann::json::parse(meta["step"].get<std::string>()) == 6);
  CHECK(nlohmann::json::parse(meta["schema"].get<std::string>()) == "mpsim-checkpoint-1");
  // The scaler's state as torch.amp.GradScaler.state_dict() returns it (torch/amp/grad_scaler.py: "scale",
  // "growth_factor", "backoff_factor" Python floats, "growth_interval", "_growth_tracker" Python ints).
  const auto scaler = nlohmann::json::parse(meta["scaler_state"].get<std::string>());
  std::printf("scaler_state: %s\n", scaler.dump().c_str());
  for (const char* key : {"scale", "growth_factor", "backoff_factor"}) CHECK(scaler[key].is_number_float());
  for (const char* key : {"growth_interval", "_growth_tracker"}) CHECK(scaler[key].is_number_integer());
  CHECK(scaler["growth_interval"] == 4);
  CHECK(scaler["growth_factor"] == 2.0);
  CHECK(scaler["backoff_factor"] == 0.5);
}

TEST_CASE("corrupt, truncated and mismatched checkpoints are refused, nothing overwritten", "[trainer]") {
  auto c = base("ck_src", "mixed-fp16", "dynamic", 6);
  run_training(c, tiny::make);
  const fs::path good = c.out / "checkpoint.safetensors";
  const std::string bytes = slurp(good);

  auto write = [](const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; };
  const fs::path dir = temp_dir("ck_bad");
  fs::create_directories(dir);
  write(dir / "truncated.safetensors", bytes.substr(0, bytes.size() / 2));
  write(dir / "cut_by_4.safetensors", bytes.substr(0, bytes.size() - 4));
  std::string flipped = bytes;
  flipped[flipped.size() - 20] ^= 0x40;  // a bit of the last tensor's data
  write(dir / "flipped.safetensors", flipped);
  write(dir / "empty.safetensors", "");
  write(dir / "text.safetensors", "hello, not a checkpoint at all");
  // The container of earlier versions: magic, version 1, header length, header, no tensors, CRC-32.
  write(dir / "old.mpck", std::string("MPSIMCKP\x01\0\0\0\x02\0\0\0\0\0\0\0{}\0\0\0\0", 26));
  // What each must say besides the file's name.
  const std::vector<std::pair<const char*, const char*>> cases = {{"truncated.safetensors", "truncated checkpoint"},
                                                                  {"cut_by_4.safetensors", "truncated checkpoint"},
                                                                  {"flipped.safetensors", "CRC-32"},
                                                                  {"empty.safetensors", "truncated checkpoint"},
                                                                  {"text.safetensors", "not an mpsim checkpoint"},
                                                                  {"old.mpck", "MPSIMCKP"},
                                                                  {"missing.safetensors", "cannot open"}};
  for (const auto& [name, why] : cases) {
    std::string message;
    try {
      read_checkpoint(dir / name);
    } catch (const Error& e) {
      message = e.what();
    }
    std::printf("%s: %s\n", name, message.c_str());
    CHECK(message.find(name) != std::string::npos);
    CHECK(message.find(why) != std::string::npos);
  }

  // A resume that fails leaves an existing output folder exactly as it was.
  auto victim = base("ck_victim", "mixed-fp16", "dynamic", 12);
  run_training(victim, tiny::make);
  const std::string before = slurp(victim.out / "steps.csv");
  const std::string run_before = slurp(victim.out / "run.json");
  auto bad = victim;
  bad.resume = dir / "flipped.safetensors";
  CHECK_THROWS_AS(run_training(bad, tiny::make), Error);
  auto other_shape = victim;
  other_shape.model_config.size = 12;
  other_shape.resume = good;
  CHECK_THROWS_WITH(run_training(other_shape, tiny::make), Catch::Contains("parameter shapes"));
  auto other_policy = victim;
  other_policy.policy = "mixed-bf16";
  other_policy.resume = good;
  CHECK_THROWS_WITH(run_training(other_policy, tiny::make), Catch::Contains("policy"));
  auto other_model = victim;
  other_model.model = "tiny_small_grads";
  other_model.resume = good;
  CHECK_THROWS_AS(run_training(other_model, tiny::make), Error);
  auto done = victim;
  done.steps = 6;
  done.resume = good;
  CHECK_THROWS_WITH(run_training(done, tiny::make), Catch::Contains("nothing to do"));
  CHECK(slurp(victim.out / "steps.csv") == before);
  CHECK(slurp(victim.out / "run.json") == run_before);
}

TEST_CASE("bad configs are refused before anything is written", "[trainer]") {
  auto c = base("bad_cfg", "fp32", "none", 5);
  // The policy and the scaler are parsed where they are given: a bad spelling is refused there.
  CHECK_THROWS_WITH(ParsedPolicy("fp17"), Catch::Contains("fp17"));
  CHECK_THROWS_WITH(ParsedScaler("static:0"), Catch::Contains("scaler 'static:0': the scale must be finite and > 0"));
  CHECK_THROWS_WITH(ParsedScaler("static:nan"), Catch::Contains("static:nan"));
  CHECK_THROWS_WITH(ParsedScaler("magic"), Catch::Contains("scaler 'magic': unknown scaler"));
  for (auto mutate : std::vector<std::function<void(TrainConfig&)>>{
           [](TrainConfig& t) { t.scaler.config.init_scale = 0; },  // changed after parsing: validate() refuses it
           [](TrainConfig& t) { t.optimizer.name = "lamb"; },
           [](TrainConfig& t) { t.steps = -1; },
           [](TrainConfig& t) { t.model = "resnet"; },
           [](TrainConfig& t) { t.loss_divisor_log2 = 61; },
           [](TrainConfig& t) { t.loss_divisor_log2 = -1; },
           [](TrainConfig& t) {  // no master copy is implemented for SGD only
             t.policy = "pure-fp16";
             t.optimizer.name = "adamw";
           },
       }) {
    auto t = c;
    mutate(t);
    CHECK_THROWS_AS(run_training(t, tiny::make), Error);
    CHECK_FALSE(fs::exists(t.out));
  }
}

TEST_CASE("an error names the field and the fields it advises; each front end spells them its way", "[trainer]") {
  // lib/mpsim/field_error.hpp: what() is the library's spelling; message(spell, sep) a front end's (the command
  // line's flags are checked in tests/tools/analysis_cli_test.cpp, Python's keywords in tests/python/test_round.py).
  auto c = base("field_error", "fp32", "none", 1);
  fs::create_directories(c.out);
  std::ofstream(c.out / "run.json") << "{}";
  c.previous_run = TrainConfig::PreviousRun::refuse;
  const auto flag = [](std::string_view f) {
    return f == "previous_run" ? std::string("--force") : "--" + std::string(f);
  };
  const auto keyword = [](std::string_view f) { return std::string(f); };
  try {
    validate(c);
    FAIL("a previous run was not refused");
  } catch (const FieldError& e) {
    const std::string lib = e.what(), cli = e.message(flag, " "), py = e.message(keyword, "=");
    std::printf("what(): %s\ncommand line: %s\nkeywords: %s\n", lib.c_str(), cli.c_str(), py.c_str());
    const std::string tail = ": holds a previous run (run.json); choose another folder, or replace that run's files (";
    CHECK(lib == "out " + c.out.string() + tail + "previous_run)");
    CHECK(cli == "--out " + c.out.string() + tail + "--force)");
    CHECK(py == "out=" + c.out.string() + tail + "previous_run)");
  }
  // Only the fields the error lists are replaced: a brace in the problem's own text stays.
  const FieldError odd("k", "'{x}'", "'{k}' and {y}: {x}", {"x"});
  CHECK(odd.message(flag, " ") == "--k '{x}': '{k}' and {y}: --x");
  // An error about an input, not a field: the problem alone, its advice spelled.
  const FieldError input("", "", "a.bin: raw data needs a dtype ({dtype})", {"dtype"});
  CHECK(std::string(input.what()) == "a.bin: raw data needs a dtype (dtype)");
  CHECK(input.message(flag, " ") == "a.bin: raw data needs a dtype (--dtype)");
}

namespace {
// The rows of a steps.csv without the header, and one column of it by name.
std::vector<std::string> csv_column(const fs::path& file, const std::string& name) {
  const auto rows = lines(slurp(file));
  std::vector<std::string> header, out;
  std::stringstream hs(rows.at(0));
  for (std::string h; std::getline(hs, h, ',');) header.push_back(h);
  const auto col = static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  for (std::size_t r = 1; r < rows.size(); ++r) {
    std::stringstream ss(rows[r]);
    std::string cell;
    for (std::size_t c = 0; c <= col && std::getline(ss, cell, ','); ++c) {}
    out.push_back(cell);
  }
  return out;
}
}  // namespace

TEST_CASE("loss / accumulate: 2 and 4 micro-batches equal one big batch bit for bit where the sums are exact",
          "[trainer]") {
  // tiny_exact: data and weights on a coarse binary grid, so the first step's sums over samples are
  // exact in float in any order; the seed of each backward is scale / accumulate, a power of two here.
  // Under fp32 the arithmetic allows bit-for-bit equality. Under mixed-fp16 it does not: each
  // micro-batch's weight gradient leaves its GEMM rounded to fp16 (as in PyTorch), a partial sum rounded
  // separately; the weights then agree to fp16's relative precision of the update.
  for (const char* policy : {"fp32", "mixed-fp16"}) {
    const bool exact = std::string(policy) == "fp32";
    auto big = base(std::string("acc_big_") + policy, policy, "static:1024", 1);
    big.model = "tiny_exact";
    big.optimizer.name = "sgd";
    big.optimizer.lr = 0x1p-4;
    big.optimizer.momentum = 0;
    big.model_config.batch = 16;
    std::vector<Checkpoint> cks;
    std::vector<std::string> rows;
    for (int accumulate : {1, 2, 4}) {
      auto c = big;
      c.out = temp_dir(fmt::format("acc_{}_{}", accumulate, policy));
      c.accumulate = accumulate;
      c.model_config.batch = 16 / accumulate;
      run_training(c, tiny::make);
      cks.push_back(read_checkpoint(c.out / "checkpoint.safetensors"));
      rows.push_back(lines(slurp(c.out / "steps.csv")).at(1));
    }
    // The largest weight change of the step (vs the initial weights, which all runs share).
    double largest_update = 0;
    {
      auto fresh = tiny::make("tiny_exact", big.model_config, big.seed);
      const auto init = fresh->params();
      for (std::size_t t = 0; t < init.size(); ++t)
        for (std::size_t i = 0; i < init[t].value.size(); ++i)
          largest_update =
              std::max(largest_update, std::abs(static_cast<double>(cks[0].tensors[t].values[i]) - init[t].value[i]));
    }
    std::size_t compared = 0, mismatches = 0;
    double worst = 0;
    for (std::size_t a = 1; a < cks.size(); ++a)
      for (std::size_t t = 0; t < cks[0].tensors.size(); ++t)
        for (std::size_t i = 0; i < cks[0].tensors[t].values.size(); ++i, ++compared) {
          const float x = cks[0].tensors[t].values[i], y = cks[a].tensors[t].values[i];
          mismatches += std::memcmp(&x, &y, 4) != 0;
          worst = std::max(worst, std::abs(static_cast<double>(x) - y));
        }
    std::printf(
        "%s: batch 16 vs 2 x 8 vs 4 x 4 (loss / accumulate), one step: %zu weights compared, %zu differ "
        "(largest difference %g, largest update %g); steps.csv rows %s | %s | %s\n",
        policy, compared, mismatches, worst, largest_update, rows[0].c_str(), rows[1].c_str(), rows[2].c_str());
    CHECK(compared == 18);
    if (exact) {
      CHECK(mismatches == 0);
      CHECK(rows[0] == rows[1]);  // loss, metric, grad_norm (the model's units) and the underflow columns
      CHECK(rows[0] == rows[2]);
    } else {
      // up to 4 partial sums, each rounded to fp16 (unit roundoff 2^-11), with some cancellation: a few
      // roundoffs of the largest update, far below the update itself
      CHECK(worst <= 0x1p-7 * largest_update);
      CHECK(worst > 0);
    }
  }
}

TEST_CASE("the loss divisor: fp32 runs are bit-identical whatever k; fp16 loses more; grad_norm in model units",
          "[trainer]") {
  auto plain = base("div0", "fp32", "none", 12);
  plain.optimizer.name = "sgd";
  plain.clip_norm = 0.05;  // in the model's units: the same steps clip with and without the divisor
  auto divided = plain;
  divided.out = temp_dir("div8");
  divided.loss_divisor_log2 = 8;
  run_training(plain, tiny::make);
  run_training(divided, tiny::make);
  const std::string a = slurp(plain.out / "steps.csv"), b = slurp(divided.out / "steps.csv");
  const auto norms = csv_column(plain.out / "steps.csv", "grad_norm");
  int clipped = 0;
  for (const auto& v : norms) clipped += std::stod(v) > 0.05;
  std::printf(
      "divisor 2^8 under fp32: steps.csv %zu bytes, identical: %s; grad_norm step 1 %s, %d of %zu steps clipped\n",
      a.size(), a == b ? "yes" : "no", norms.at(0).c_str(), clipped, norms.size());
  CHECK(a == b);
  CHECK(clipped > 0);
  const auto ck_a = read_checkpoint(plain.out / "checkpoint.safetensors"),
             ck_b = read_checkpoint(divided.out / "checkpoint.safetensors");
  for (std::size_t t = 0; t < ck_a.tensors.size(); ++t) CHECK(ck_a.tensors[t].values == ck_b.tensors[t].values);

  // Under mixed-fp16 the divided run's activation gradients are 2^8 times smaller inside the network.
  auto h0 = plain, h20 = plain;
  h0.policy = h20.policy = "mixed-fp16";
  h0.out = temp_dir("div0_fp16");
  h20.out = temp_dir("div20_fp16");
  h20.loss_divisor_log2 = 20;
  const auto s0 = run_training(h0, tiny::make), s20 = run_training(h20, tiny::make);
  std::printf("mixed-fp16 activation gradients flushed: divisor 1 %.3g%%, divisor 2^20 %.3g%%\n",
              100 * s0.act_grad_lost_fraction(), 100 * s20.act_grad_lost_fraction());
  CHECK(s0.act_grad_lost_fraction() < 0.01);
  CHECK(s20.act_grad_lost_fraction() > 0.05);
}

TEST_CASE("pure-fp16 (no master copy) swallows updates that mixed-fp16's fp32 master weights keep", "[trainer]") {
  // A small learning rate: the updates are far below half the spacing of fp16 weights of order 0.1.
  std::map<std::string, TrainSummary> s;
  for (const char* policy : {"mixed-fp16", "pure-fp16", "pure-fp16-sr"}) {
    auto c = base(std::string("swallow_") + policy, policy, "static:1024", 20);
    c.optimizer.name = "sgd";
    c.optimizer.lr = 1e-4;
    s[policy] = run_training(c, tiny::make);
    const auto col = csv_column(c.out / "steps.csv", "swallowed");
    std::printf("%s, lr 1e-4, 20 steps: %llu non-zero updates, %llu swallowed (%.3g%%); step 1: %s\n", policy,
                (unsigned long long)s[policy].updates_nonzero, (unsigned long long)s[policy].updates_swallowed,
                100 * s[policy].swallowed_fraction(), col.at(0).c_str());
    CHECK(s[policy].updates_nonzero == 20 * 9);
  }
  CHECK(s["mixed-fp16"].updates_swallowed == 0);
  CHECK(s["pure-fp16"].updates_swallowed >= 20);
  CHECK(s["pure-fp16-sr"].swallowed_fraction() < s["pure-fp16"].swallowed_fraction());
}

TEST_CASE("resume stays bit-exact with accumulation, the divisor, clipping and no master copy", "[trainer]") {
  for (const char* policy : {"mixed-fp16", "pure-fp16-sr"}) {
    INFO("policy " << policy);
    auto straight = base(std::string("rs_straight_") + policy, policy, "hysteresis:deepspeed,growth_interval=3", 16);
    straight.optimizer.name = "sgd";
    straight.accumulate = 2;
    straight.loss_divisor_log2 = 10;
    straight.clip_norm = 0.05;
    straight.eval_every = 4;
    auto first = straight;
    first.out = temp_dir(std::string("rs_first_") + policy);
    first.steps = 8;
    auto second = straight;
    second.out = temp_dir(std::string("rs_second_") + policy);
    second.resume = first.out / "checkpoint.safetensors";
    const auto s_straight = run_training(straight, tiny::make);
    run_training(first, tiny::make);
    const auto s_resumed = run_training(second, tiny::make);
    const auto all = lines(slurp(straight.out / "steps.csv"));
    const auto head = lines(slurp(first.out / "steps.csv"));
    const auto tail = lines(slurp(second.out / "steps.csv"));
    REQUIRE(all.size() == 17);
    REQUIRE(tail.size() == 9);
    int mismatches = 0;
    for (int i = 1; i <= 8; ++i) mismatches += (head[i] != all[i]) + (tail[i] != all[8 + i]);
    std::printf("resume %s: 16 rows compared, %d differ; swallowed %llu / %llu\n", policy, mismatches,
                (unsigned long long)s_resumed.updates_swallowed, (unsigned long long)s_resumed.updates_nonzero);
    CHECK(mismatches == 0);
    CHECK(s_resumed.updates_swallowed == s_straight.updates_swallowed);
    CHECK(s_resumed.updates_nonzero == s_straight.updates_nonzero);
    CHECK(slurp(straight.out / "checkpoint.safetensors").size() == slurp(second.out / "checkpoint.safetensors").size());
    const auto ck_a = read_checkpoint(straight.out / "checkpoint.safetensors"),
               ck_b = read_checkpoint(second.out / "checkpoint.safetensors");
    for (std::size_t t = 0; t < ck_a.tensors.size(); ++t) CHECK(ck_a.tensors[t].values == ck_b.tensors[t].values);
  }
}

TEST_CASE("--dump-grads: the unscaled gradients of each histogram step as safetensors", "[trainer]") {
  // fp32 under a static scale 2^10: the dumped gradients must be the model's gradients at scale 1 exactly
  // (the scaling by a power of two and back is exact in float), read back with the safetensors reader.
  TrainConfig c = base("dump_grads", "fp32", "static:1024", 3);
  c.hist_steps = {1, 3};
  c.dump_grads = true;
  run_training(c, tiny::make);
  const fs::path f = c.out / "grads" / "step_000001.safetensors";
  REQUIRE(fs::exists(f));
  CHECK(fs::exists(c.out / "grads" / "step_000003.safetensors"));
  CHECK(!fs::exists(c.out / "grads" / "step_000002.safetensors"));
  const Checkpoint ck = read_checkpoint(f);
  CHECK(ck.header.at("loss_scale").get<double>() == 1024.0);
  CHECK(ck.header.at("step").get<int>() == 1);

  auto model = tiny::make("tiny", c.model_config, c.seed);
  nn::Precision fp32(nn::parse_policy("fp32"));
  model->forward_backward(0, 1.0f, fp32);
  const auto params = model->params();
  REQUIRE(ck.tensors.size() == params.size());
  std::size_t compared = 0, differ = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    CHECK(ck.tensors[i].name == params[i].name);
    REQUIRE(ck.tensors[i].values.size() == params[i].grad.size());
    for (std::size_t k = 0; k < params[i].grad.size(); ++k, ++compared)
      differ += std::memcmp(&ck.tensors[i].values[k], &params[i].grad[k], sizeof(float)) != 0;
  }
  std::printf(
      "dump-grads: %zu gradient values of step 1 (scale 1024, unscaled) vs the model's gradients at scale 1: "
      "%zu differ\n",
      compared, differ);
  CHECK(differ == 0);
}
