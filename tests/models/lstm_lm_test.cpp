// Tests of lib/mpsim/models/lstm_lm.hpp (through make_model): determinism, exact scaling, the policy's
// sites, the text corpus path and its errors.
#include "catch_compat.hpp"

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "models_test_util.hpp"
#include "mpsim/error.hpp"
#include "mpsim/nn/model.hpp"

using namespace mpsim;
namespace fs = std::filesystem;

namespace {
fs::path write_temp(const std::string& name, const std::string& bytes) {
  const fs::path p = fs::temp_directory_path() / ("mpsim_lstm_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}
}  // namespace

TEST_CASE("lstm: same seed, same bits; another seed, other bits", "[lstm_lm]") {
  nn::Precision p1(nn::parse_policy("mixed-fp16")), p2(nn::parse_policy("mixed-fp16")),
      p3(nn::parse_policy("mixed-fp16"));
  auto a = nn::make_model("lstm", {}, 7), b = nn::make_model("lstm", {}, 7), c = nn::make_model("lstm", {}, 8);
  const double la = modeltest::sgd_steps(*a, p1, 3, 0.1, 1024.0f);
  const double lb = modeltest::sgd_steps(*b, p2, 3, 0.1, 1024.0f);
  const double lc = modeltest::sgd_steps(*c, p3, 3, 0.1, 1024.0f);
  std::printf("lstm: loss after 3 steps, seed 7 twice: %.17g %.17g, seed 8: %.17g\n", la, lb, lc);
  CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
  CHECK(la != lc);
  CHECK(modeltest::bits_of(a->params(), true) == modeltest::bits_of(b->params(), true));
  CHECK(modeltest::bits_of(a->params(), false) == modeltest::bits_of(b->params(), false));
  CHECK(p1.site_stats() == p2.site_stats());
  const auto ma = a->evaluate(p1), mb = b->evaluate(p2);
  CHECK(ma.name == "bits_per_token");
  CHECK(!ma.higher_is_better);
  CHECK(ma.value == mb.value);
  // An untrained model is close to uniform over the 32 tokens: about 5 bits.
  auto fresh = nn::make_model("lstm", {}, 1);
  const double untrained = fresh->evaluate(p1).value;
  std::printf("lstm: untrained validation bits/token %.4f (uniform: 5)\n", untrained);
  CHECK(untrained > 4.5);
  CHECK(untrained < 6.5);
}

TEST_CASE("lstm: gradients scale exactly with a power-of-two loss scale under fp32", "[lstm_lm]") {
  nn::Precision prec(nn::parse_policy("fp32"));
  auto a = nn::make_model("lstm", {}, 3);
  auto b = nn::make_model("lstm", {}, 3);
  CHECK(a->forward_backward(4, 0.25f, prec) == b->forward_backward(4, 1.0f, prec));
  const auto ga = a->params(), gb = b->params();
  std::size_t n = 0, mismatches = 0;
  for (std::size_t k = 0; k < ga.size(); ++k)
    for (std::size_t i = 0; i < ga[k].grad.size(); ++i, ++n)
      mismatches += ga[k].grad[i] != std::ldexp(gb[k].grad[i], -2);
  std::printf("lstm: %zu gradients compared (scale 2^-2 vs 1), %zu mismatches\n", n, mismatches);
  CHECK(mismatches == 0);
}

TEST_CASE("lstm: mixed-fp16 sites", "[lstm_lm]") {
  nn::Precision prec(nn::parse_policy("mixed-fp16"));
  auto m = nn::make_model("lstm", {}, 1);
  // The loss times 2^-10 (the trainer's --loss-divisor-log2 10): activation gradients underflow in fp16.
  m->forward_backward(0, 0x1p-10f, prec);
  for (const char* site :
       {"lstm/in", "lstm/w_ih", "lstm/ih_out", "lstm/h_in", "lstm/hh_out", "fc/out", "fc/out_grad", "fc/in_grad",
        "lstm/gates_grad", "lstm/h_grad", "lstm/in_grad", "lstm/w_hh_grad", "embed/w_grad"}) {
    INFO(site);
    CHECK(prec.site_stats().count(site) == 1);
  }
  const auto& g = prec.site_stats().at("lstm/gates_grad");
  std::printf("lstm mixed-fp16, no scaling: lstm/gates_grad %llu values, %llu flushed to zero\n",
              (unsigned long long)g.count, (unsigned long long)g.underflow);
  CHECK(g.underflow > g.nonzero_finite() / 10);
}

TEST_CASE("lstm: a UTF-8 text corpus", "[lstm_lm]") {
  std::string text;
  const std::u32string line = U"the cat sat on the mat; le chat était là — ";
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat; le chat était là — ";
  const fs::path p = write_temp("ok.txt", text);
  nn::ModelConfig c;
  c.corpus_path = p.string();
  nn::Precision prec(nn::parse_policy("fp32"));
  auto m = nn::make_model("lstm", c, 1);
  // vocabulary: the distinct code points (é, à and — count once each)
  const auto ps = m->params();
  const std::size_t distinct = std::set<char32_t>(line.begin(), line.end()).size();
  CHECK(ps[0].value.size() == distinct * 32);
  const double loss = modeltest::sgd_steps(*m, prec, 20, 0.5, 1.0f);
  const double bits = m->evaluate(prec).value;
  std::printf("lstm on a %zu-byte text corpus: vocab %zu, loss after 20 steps %.4f, validation %.4f bits/token\n",
              text.size(), distinct, loss, bits);
  CHECK(std::isfinite(bits));
  fs::remove(p);
}

TEST_CASE("lstm: bad corpora are rejected with the file named", "[lstm_lm]") {
  const fs::path empty = write_temp("empty.txt", "");
  const fs::path latin1 = write_temp("latin1.txt", std::string(500, 'a') + "caf\xe9" + std::string(500, 'b'));
  const fs::path shorty = write_temp("short.txt", "just a few words");
  nn::ModelConfig c;
  for (const auto& [p, why] :
       {std::pair{empty, "empty"}, std::pair{latin1, "invalid UTF-8 at byte 503"}, std::pair{shorty, "characters"}}) {
    c.corpus_path = p.string();
    try {
      nn::make_model("lstm", c, 1);
      FAIL("accepted " << p);
    } catch (const Error& e) {
      std::printf("rejected %s: %s\n", p.filename().c_str(), e.what());
      CHECK_THAT(e.what(), Catch::Contains(p.string()) && Catch::Contains(why));
    }
    fs::remove(p);
  }
  c.corpus_path = "/nonexistent/corpus.txt";
  CHECK_THROWS_WITH(nn::make_model("lstm", c, 1), Catch::Contains("/nonexistent/corpus.txt"));
}
