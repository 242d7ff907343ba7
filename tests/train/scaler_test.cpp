// Tests of lib/mpsim/train/scaler.hpp: the scale sequence of every scaler on scripted sequences of
// overflowing (I) and clean (C) steps, against tables worked by hand from the published rules
// (torch _amp_update_scale_, Megatron-LM DynamicGradScaler.update, DeepSpeed DynamicLossScaler.update_scale
// with consecutive_hysteresis) and against an independent re-statement of each rule on a long sequence.
#include "catch_compat.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/train/scaler.hpp"

using namespace mpsim;
using namespace mpsim::train;

namespace {

std::vector<bool> script(const std::string& s) {
  std::vector<bool> inf;
  for (char c : s) inf.push_back(c == 'I');
  return inf;
}

// The scale after each update.
std::vector<double> run(LossScaler& scaler, const std::vector<bool>& infs) {
  std::vector<double> out;
  for (bool inf : infs) {
    scaler.update(inf);
    out.push_back(scaler.scale());
  }
  return out;
}

void check_sequence(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  int mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      ++mismatches;
      UNSCOPED_INFO(what << ": step " << i + 1 << " scale " << got[i] << ", expected " << want[i]);
    }
  INFO(what << ": " << got.size() << " steps compared, " << mismatches << " mismatches");
  CHECK(mismatches == 0);
}

std::uint64_t lcg(std::uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return s >> 33;
}

}  // namespace

TEST_CASE("parse_scaler: names, parameters and bad input", "[scaler]") {
  CHECK(parse_scaler("none").kind == ScalerKind::none);
  const auto st = parse_scaler("static:128");
  CHECK(st.kind == ScalerKind::constant);
  CHECK(st.init_scale == 128);
  const auto dyn = parse_scaler("dynamic");
  CHECK(dyn.kind == ScalerKind::dynamic);
  CHECK(dyn.init_scale == 65536);
  CHECK(dyn.growth_factor == 2);
  CHECK(dyn.backoff_factor == 0.5);
  CHECK(dyn.growth_interval == 2000);
  CHECK(parse_scaler("hysteresis").kind == ScalerKind::hysteresis_megatron);
  CHECK(parse_scaler("hysteresis:megatron").kind == ScalerKind::hysteresis_megatron);
  const auto ds = parse_scaler("hysteresis:deepspeed,hysteresis=3,min_scale=4,growth_interval=10");
  CHECK(ds.kind == ScalerKind::hysteresis_deepspeed);
  CHECK(ds.hysteresis == 3);
  CHECK(ds.min_scale == 4);
  CHECK(ds.growth_interval == 10);
  for (const char* bad : {"", "dynamics", "static", "static:0", "static:-8", "static:inf", "static:nan", "static:1e999",
                          "static:abc", "hysteresis:apex", "dynamic,growth_factor=1", "dynamic,backoff_factor=1",
                          "dynamic,growth_interval=0", "dynamic,growth_interval=2.5", "dynamic,hysteresis=2",
                          "none,init_scale=4", "hysteresis,min_scale=0", "dynamic,init_scale", "static:8,foo=1"}) {
    INFO("spec '" << bad << "'");
    CHECK_THROWS_AS(parse_scaler(bad), Error);
  }
  for (const char* spec : {"none", "static:8", "dynamic,growth_interval=7", "hysteresis:deepspeed,hysteresis=3"}) {
    const auto c = parse_scaler(spec);
    const auto again = parse_scaler(to_spec(c));
    CHECK(to_spec(again) == to_spec(c));
  }
}

TEST_CASE("none and static scalers keep their scale; only none lets a non-finite step through", "[scaler]") {
  LossScaler none(parse_scaler("none")), fixed(parse_scaler("static:1024"));
  const auto seq = script("CICCIIC");
  check_sequence(run(none, seq), std::vector<double>(seq.size(), 1.0), "none");
  check_sequence(run(fixed, seq), std::vector<double>(seq.size(), 1024.0), "static:1024");
  CHECK_FALSE(none.skips_step(true));
  CHECK(fixed.skips_step(true));
  CHECK_FALSE(fixed.skips_step(false));
}

TEST_CASE("dynamic scaler follows GradScaler step for step (hand-worked table)", "[scaler]") {
  ScalerConfig c = parse_scaler("dynamic,init_scale=16,growth_interval=3");
  LossScaler s(c);
  // C C C: the third clean step grows 16 -> 32; I halves and resets the tracker; two clean steps are not
  // enough; I halves again; three clean grow; three more grow.
  const auto seq = script("CCCICCICCCCCC");
  const std::vector<double> want = {16, 16, 32, 16, 16, 16, 8, 8, 8, 16, 16, 16, 32};
  check_sequence(run(s, seq), want, "dynamic");
  CHECK(s.skips_step(true));
}

TEST_CASE("dynamic scaler does not grow past float's range", "[scaler]") {
  LossScaler s(parse_scaler("dynamic,init_scale=1.7014118346046923e38,growth_interval=1"));  // 2^127
  s.update(false);
  CHECK(s.scale() == std::ldexp(1.0, 127));
  CHECK(s.growth_tracker() == 0);
}

TEST_CASE("Megatron hysteresis: refilled only when the scale grows (hand-worked table)", "[scaler]") {
  LossScaler s(parse_scaler("hysteresis:megatron,init_scale=16,growth_interval=3,hysteresis=2,min_scale=2"));
  // I uses one unit (no backoff); C does not refill; then every I backs off down to min_scale 2;
  // three clean steps grow to 4 and refill; I uses a unit; C; I backs off.
  const auto seq = script("ICIIIIICCCICI");
  const std::vector<double> want = {16, 16, 8, 4, 2, 2, 2, 2, 2, 4, 4, 4, 2};
  check_sequence(run(s, seq), want, "megatron");
}

TEST_CASE("DeepSpeed consecutive hysteresis: refilled after any clean step (hand-worked table)", "[scaler]") {
  LossScaler s(parse_scaler("hysteresis:deepspeed,init_scale=16,growth_interval=3,hysteresis=2,min_scale=2"));
  // I uses a unit; C refills; I uses a unit; I backs off (hysteresis at 1) and keeps backing off to 2;
  // three clean steps after the last overflow grow to 4; I C I: each I uses the unit the C refilled.
  const auto seq = script("ICIIIIICCCICI");
  const std::vector<double> want = {16, 16, 16, 8, 4, 2, 2, 2, 2, 4, 4, 4, 4};
  check_sequence(run(s, seq), want, "deepspeed");
}

TEST_CASE("every dynamic scaler against an independent statement of its rule on 20000 random steps", "[scaler]") {
  // Restated rules, in terms of runs of clean steps rather than the implementations' trackers.
  std::uint64_t seed = 12345;
  std::vector<bool> infs;
  for (int i = 0; i < 20000; ++i) infs.push_back(lcg(seed) % 23 == 0);  // ~4% overflowing steps
  const int interval = 17, hyst = 3;
  const double min_scale = 1.0;

  // GradScaler: scale doubles after every `interval` consecutive clean steps, halves on every overflow.
  {
    LossScaler s(parse_scaler("dynamic,init_scale=65536,growth_interval=17"));
    std::vector<double> want;
    double scale = 65536;
    int clean_run = 0;
    for (bool inf : infs) {
      if (inf) {
        scale /= 2;
        clean_run = 0;
      } else if (++clean_run % interval == 0) scale *= 2;
      want.push_back(scale);
    }
    check_sequence(run(s, infs), want, "dynamic (random)");
  }
  // Megatron: overflows since the last growth (or the start) count down the hysteresis; from the
  // hyst-th one on, each backs off; growth after `interval` consecutive clean steps resets the count.
  {
    LossScaler s(parse_scaler("hysteresis:megatron,init_scale=65536,growth_interval=17,hysteresis=3,min_scale=1"));
    std::vector<double> want;
    double scale = 65536;
    int clean_run = 0, overflows_since_growth = 0;
    for (bool inf : infs) {
      if (inf) {
        clean_run = 0;
        if (++overflows_since_growth >= hyst) scale = std::max(scale / 2, min_scale);
      } else if (++clean_run % interval == 0) {
        scale *= 2;
        overflows_since_growth = 0;
      }
      want.push_back(scale);
    }
    check_sequence(run(s, infs), want, "megatron (random)");
  }
  // DeepSpeed consecutive: only a run of `hyst` consecutive overflows backs off (and every further
  // consecutive one); growth after `interval` consecutive clean steps.
  {
    LossScaler s(parse_scaler("hysteresis:deepspeed,init_scale=65536,growth_interval=17,hysteresis=3,min_scale=1"));
    std::vector<double> want;
    double scale = 65536;
    int clean_run = 0, overflow_run = 0;
    for (bool inf : infs) {
      if (inf) {
        clean_run = 0;
        if (++overflow_run >= hyst) scale = std::max(scale / 2, min_scale);
      } else {
        overflow_run = 0;
        if (++clean_run % interval == 0) scale *= 2;
      }
      want.push_back(scale);
    }
    check_sequence(run(s, infs), want, "deepspeed (random)");
  }
}

TEST_CASE("scaler state round-trips: a restored scaler continues the same sequence", "[scaler]") {
  for (const char* spec : {"static:64", "dynamic,init_scale=1024,growth_interval=5",
                           "hysteresis:megatron,init_scale=1024,growth_interval=5,hysteresis=3",
                           "hysteresis:deepspeed,init_scale=1024,growth_interval=5,hysteresis=3"}) {
    INFO(spec);
    const auto seq = script("CCICCCCCIIICCCCCICIIIICCCCCCCCCC");
    LossScaler straight(parse_scaler(spec));
    const auto want = run(straight, seq);
    LossScaler first(parse_scaler(spec));
    std::vector<bool> head(seq.begin(), seq.begin() + 13), tail(seq.begin() + 13, seq.end());
    auto got = run(first, head);
    LossScaler second(parse_scaler(spec));
    second.load_state(nlohmann::json::parse(first.state().dump()));
    const auto rest = run(second, tail);
    got.insert(got.end(), rest.begin(), rest.end());
    check_sequence(got, want, spec);
  }
  LossScaler dyn(parse_scaler("dynamic"));
  CHECK_THROWS_AS(dyn.load_state(LossScaler(parse_scaler("static:8")).state()), Error);
  CHECK_THROWS_AS(dyn.load_state(nlohmann::json{{"kind", "dynamic"}}), Error);
}

TEST_CASE("a GradScaler.state_dict() seeds the dynamic scaler; its state is one again", "[scaler]") {
  // The five entries and their Python types as torch/amp/grad_scaler.py's GradScaler.state_dict() documents
  // them: scale, growth_factor, backoff_factor (float), growth_interval, _growth_tracker (int). The state of
  // a run 3 clean steps into a growth interval of 5, at scale 2^12.
  const auto torch_state = nlohmann::json::parse(
      R"({"scale": 4096.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 5, "_growth_tracker": 3})");
  const ScalerConfig c = scaler_from_torch_state(torch_state, "state.json");
  std::printf("seeded: %s\n", to_spec(c).c_str());
  CHECK(c.kind == ScalerKind::dynamic);
  CHECK(c.init_scale == 4096.0);
  CHECK(c.growth_interval == 5);
  CHECK(c.init_growth_tracker == 3);
  CHECK(parse_scaler(to_spec(c)).init_growth_tracker == 3);  // the spelling keeps it (run identity, resume)
  // 2 more clean steps complete the interval: the scale grows on the second, as torch's would.
  LossScaler s(c);
  const auto got = run(s, script("CCCCCCCI"));
  check_sequence(got, {4096, 8192, 8192, 8192, 8192, 8192, 16384, 8192}, "seeded by a torch state");
  // The scaler's own state carries the same five entries with the same types, so torch loads it back.
  const auto back = s.state();
  std::printf("state: %s\n", back.dump().c_str());
  for (const char* key : {"scale", "growth_factor", "backoff_factor"}) CHECK(back[key].is_number_float());
  for (const char* key : {"growth_interval", "_growth_tracker"}) CHECK(back[key].is_number_integer());
  const ScalerConfig again = scaler_from_torch_state(back, "state");
  CHECK(again.init_scale == 8192.0);
  CHECK(again.init_growth_tracker == 0);
  CHECK(again.growth_interval == 5);
}

TEST_CASE("a bad GradScaler state is refused with a message naming the file and the entry", "[scaler]") {
  const auto good = nlohmann::json::parse(
      R"({"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 0})");
  std::vector<std::pair<nlohmann::json, std::string>> cases;
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    auto missing = good;
    missing.erase(key);
    cases.push_back({missing, std::string("no \"") + key + "\""});
    auto wrong = good;
    wrong[key] = "1";
    cases.push_back({wrong, std::string("\"") + key + "\" is string"});
  }
  auto fractional = good;
  fractional["growth_interval"] = 2000.5;
  cases.push_back({fractional, "\"growth_interval\" is number"});
  auto negative = good;
  negative["scale"] = -1.0;
  cases.push_back({negative, "scale must be finite and > 0"});
  auto behind = good;
  behind["_growth_tracker"] = 2000;
  cases.push_back({behind, "\"_growth_tracker\" must lie in [0, growth_interval = 2000)"});
  cases.push_back({nlohmann::json::object(), "empty (saved from a disabled GradScaler)"});
  cases.push_back({nlohmann::json::array(), "a JSON object"});
  for (const auto& [state, want] : cases) {
    std::string message;
    try {
      scaler_from_torch_state(state, "state.json");
    } catch (const Error& e) {
      message = e.what();
    }
    std::printf("%s -> %s\n", state.dump().c_str(), message.c_str());
    CHECK(message.rfind("state.json: ", 0) == 0);
    CHECK(message.find(want) != std::string::npos);
  }
}
