#include "mpsim/models/lstm_lm.hpp"

#include <cmath>
#include <optional>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/models/corpus.hpp"
#include "mpsim/models/detail/rng.hpp"
#include "mpsim/models/detail/sites.hpp"
#include "mpsim/nn/embedding.hpp"
#include "mpsim/nn/linear.hpp"
#include "mpsim/nn/loss.hpp"
#include "mpsim/nn/lstm.hpp"

namespace mpsim::models {

namespace {

using nn::OpClass;

constexpr int kSteps = 32;  // tokens per training window (BPTT length)
constexpr int kEmbed = 32;
constexpr int kEvalWindows = 64;             // validation: 64 windows of 32 predicted tokens
constexpr std::uint64_t kEvalSeed = 0x5eed;  // one validation set for every run
constexpr double kLn2 = 0.69314718055994530942;

class LstmLm final : public nn::Model {
 public:
  LstmLm(const nn::ModelConfig& cfg, std::uint64_t seed) : seed_(seed) {
    if (cfg.batch < 0 || cfg.size < 0) throw Error("lstm: batch and size must be positive");
    B_ = cfg.batch > 0 ? cfg.batch : 16;
    H_ = cfg.size > 0 ? cfg.size : 64;
    const bool language_set = cfg.vocab != 0 || !std::isnan(cfg.zipf);
    if (!cfg.corpus_path.empty()) {
      if (language_set)
        throw FieldError("corpus_path", cfg.corpus_path,
                         "brings its own language; {vocab} and {zipf} shape the generated one", {"vocab", "zipf"});
      text_ = load_text_corpus(cfg.corpus_path, kSteps + 1);
      V_ = static_cast<int>(text_->vocab.size());
    } else {
      if (language_set)
        lang_ = GeneratedLanguage(cfg.vocab != 0 ? cfg.vocab : GeneratedLanguage::default_vocab,
                                  std::isnan(cfg.zipf) ? GeneratedLanguage::default_zipf : cfg.zipf);
      V_ = lang_.vocab;
    }
    const int G = 4 * H_;
    auto take = [&](std::size_t n) {
      const std::size_t off = total_;
      total_ += n;
      return off;
    };
    emb_ = take(static_cast<std::size_t>(V_) * kEmbed);
    w_ih_ = take(static_cast<std::size_t>(G) * kEmbed);
    w_hh_ = take(static_cast<std::size_t>(G) * H_);
    b_ = take(G);
    fc_w_ = take(static_cast<std::size_t>(V_) * H_);
    fc_b_ = take(V_);
    params_.assign(total_, 0.0f);
    grads_.assign(total_, 0.0f);
    // PyTorch's defaults: embedding N(0, 1); LSTM and linear U(-1/sqrt(H), 1/sqrt(H)) (fan-in of the
    // linear layer is H too). The forget-gate bias starts at 1 (Jozefowicz et al. 2015), which helps the
    // gradient reach back across the record body.
    Rng rng(seed, 0x1417);
    for (int i = 0; i < V_ * kEmbed; ++i) params_[emb_ + i] = static_cast<float>(rng.normal());
    const double k = 1.0 / std::sqrt(static_cast<double>(H_));
    for (std::size_t i = w_ih_; i < fc_w_; ++i) params_[i] = static_cast<float>(rng.uniform(-k, k));
    for (int j = 0; j < H_; ++j) params_[b_ + H_ + j] += 1.0f;
    for (std::size_t i = fc_w_; i < total_; ++i) params_[i] = static_cast<float>(rng.uniform(-k, k));
  }

  std::string name() const override { return "lstm"; }

  // Plain SGD with momentum on the mean loss, verified in README.md. Clipping at 0.2: the median global
  // gradient norm of the fp32 run (seed 1, 400 steps: 0.12..0.34, median 0.196), so about half the
  // steps clip.
  nn::TrainHints hints() const override { return {"sgd", 0.5, 0.9, 0.0, 400, 0.2}; }

  std::vector<nn::Param> params() override {
    auto p = [&](const char* name, std::size_t off, std::size_t n) {
      return nn::Param{name, {params_.data() + off, n}, {grads_.data() + off, n}};
    };
    const std::size_t G = 4 * static_cast<std::size_t>(H_);
    return {p("embed/weight", emb_, static_cast<std::size_t>(V_) * kEmbed),
            p("lstm/w_ih", w_ih_, G * kEmbed),
            p("lstm/w_hh", w_hh_, G * H_),
            p("lstm/bias", b_, G),
            p("fc/weight", fc_w_, static_cast<std::size_t>(V_) * H_),
            p("fc/bias", fc_b_, V_)};
  }

  double forward_backward(std::uint64_t batch_index, float loss_scale, nn::Precision& prec) override {
    std::vector<std::int32_t> inputs, targets;
    train_batch(batch_index, inputs, targets);
    return step(inputs, targets, B_, loss_scale, prec, true);
  }

  nn::Metric evaluate(nn::Precision& prec) override {
    nn::Precision local = prec.evaluation_copy();
    double nats = 0;
    std::size_t tokens = 0;
    const int chunk = 16;
    std::vector<std::int32_t> all_in, all_tg;
    int windows = 0;
    if (text_) {
      const auto& v = text_->validation;
      for (std::size_t s = 0; s + kSteps + 1 <= v.size() && windows < kEvalWindows; s += kSteps, ++windows)
        append_window(v, s, all_in, all_tg);
    } else {
      for (; windows < kEvalWindows; ++windows) {
        const auto seq = lang_.sample(kEvalSeed, 1, windows, kSteps + 1);
        append_window(seq, 0, all_in, all_tg);
      }
    }
    for (int first = 0; first < windows; first += chunk) {
      const int n = std::min(chunk, windows - first);
      // windows are stored (window, time); the model wants (time, batch)
      std::vector<std::int32_t> in(static_cast<std::size_t>(n) * kSteps), tg(in.size());
      for (int b = 0; b < n; ++b)
        for (int t = 0; t < kSteps; ++t) {
          in[static_cast<std::size_t>(t) * n + b] = all_in[static_cast<std::size_t>(first + b) * kSteps + t];
          tg[static_cast<std::size_t>(t) * n + b] = all_tg[static_cast<std::size_t>(first + b) * kSteps + t];
        }
      nats += step(in, tg, n, 1.0f, local, false) * n * kSteps;
      tokens += static_cast<std::size_t>(n) * kSteps;
    }
    return {"bits_per_token", nats / static_cast<double>(tokens) / kLn2, false};
  }

 private:
  static void append_window(const std::vector<std::int32_t>& v, std::size_t s, std::vector<std::int32_t>& in,
                            std::vector<std::int32_t>& tg) {
    in.insert(in.end(), v.begin() + s, v.begin() + s + kSteps);
    tg.insert(tg.end(), v.begin() + s + 1, v.begin() + s + kSteps + 1);
  }

  // inputs/targets (T, B) for training batch `index`: window b starts at a position drawn from (seed, index, b).
  void train_batch(std::uint64_t index, std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets) {
    inputs.assign(static_cast<std::size_t>(kSteps) * B_, 0);
    targets.assign(inputs.size(), 0);
    for (int b = 0; b < B_; ++b) {
      std::vector<std::int32_t> seq;
      if (text_) {
        Rng rng(seed_, index, b);
        const auto& tr = text_->train;
        const std::size_t start = static_cast<std::size_t>(rng.uniform() * static_cast<double>(tr.size() - kSteps));
        seq.assign(tr.begin() + start, tr.begin() + start + kSteps + 1);
      } else {
        seq = lang_.sample(seed_, index, b, kSteps + 1);
      }
      for (int t = 0; t < kSteps; ++t) {
        inputs[static_cast<std::size_t>(t) * B_ + b] = seq[t];
        targets[static_cast<std::size_t>(t) * B_ + b] = seq[t + 1];
      }
    }
  }

  // One forward (and, if `train`, backward) pass over inputs/targets (T, B). Returns the mean loss in nats.
  double step(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets, int B,
              float loss_scale, nn::Precision& prec, bool train) {
    const int T = kSteps, G = 4 * H_, N = T * B;
    const nn::LstmShape shape{T, B, kEmbed, H_};
    // embedding lookup (a copy: no rounding of its own; the LSTM's GEMM rounds its input)
    std::vector<float> x(static_cast<std::size_t>(N) * kEmbed);
    nn::embedding_forward(x.data(), inputs.data(), params_.data() + emb_, N, kEmbed);
    std::vector<float> x_r, w_ih_r, w_hh_r, h_r, fcw_r;
    const float* xin = rounded_input(prec, "lstm/in", OpClass::matmul_input, x.data(), x.size(), x_r);
    const float* w_ih = rounded_input(prec, "lstm/w_ih", OpClass::matmul_input, params_.data() + w_ih_,
                                      static_cast<std::size_t>(G) * kEmbed, w_ih_r);
    const float* w_hh = rounded_input(prec, "lstm/w_hh", OpClass::matmul_input, params_.data() + w_hh_,
                                      static_cast<std::size_t>(G) * H_, w_hh_r);
    auto hook = [&](const char* tensor, OpClass cls, float* data, std::int64_t n) {
      prec.round(std::string("lstm/") + tensor, cls, std::span<float>(data, static_cast<std::size_t>(n)));
    };
    std::vector<float> h(static_cast<std::size_t>(N) * H_);
    nn::LstmCache<float> cache;
    nn::lstm_forward(h.data(), cache, xin, w_ih, w_hh, params_.data() + b_, shape, hook, prec.gemm("lstm"));
    const float* hin = rounded_input(prec, "fc/in", OpClass::matmul_input, h.data(), h.size(), h_r);
    const float* fcw = rounded_input(prec, "fc/w", OpClass::matmul_input, params_.data() + fc_w_,
                                     static_cast<std::size_t>(V_) * H_, fcw_r);
    std::vector<float> logits(static_cast<std::size_t>(N) * V_), probs(logits.size()), losses(N);
    nn::linear_forward(logits.data(), hin, fcw, params_.data() + fc_b_, N, H_, V_, prec.gemm("fc"));
    round_site(prec, "fc/out", OpClass::matmul_output, logits.data(), logits.size());
    nn::softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V_);
    double sum = 0;
    for (float l : losses) sum += l;
    const double mean = sum / N;
    if (!train) return mean;

    // Backward. The loss is the mean over the N tokens of the batch, times the loss scale.
    const std::vector<float> dloss(N, loss_scale / static_cast<float>(N));
    std::vector<float> dlogits(logits.size());
    nn::softmax_cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), dloss.data(), N, V_);
    round_site(prec, "fc/out_grad", OpClass::activation_grad, dlogits.data(), dlogits.size());
    std::vector<float> dh(h.size()), dfcw(static_cast<std::size_t>(V_) * H_), dfcb(V_);
    nn::linear_backward(dh.data(), dfcw.data(), dfcb.data(), dlogits.data(), hin, fcw, N, H_, V_, prec.gemm("fc"));
    round_site(prec, "fc/in_grad", OpClass::activation_grad, dh.data(), dh.size());
    accumulate_weight_grad(prec, "fc/w_grad", dfcw, grads_.data() + fc_w_);
    accumulate_weight_grad(prec, "fc/b_grad", dfcb, grads_.data() + fc_b_);
    std::vector<float> dx(x.size()), dw_ih(static_cast<std::size_t>(G) * kEmbed),
        dw_hh(static_cast<std::size_t>(G) * H_), db(G);
    nn::lstm_backward(dx.data(), dw_ih.data(), dw_hh.data(), db.data(), dh.data(), cache, xin, w_ih, w_hh, shape, hook,
                      prec.gemm("lstm"));
    round_site(prec, "lstm/in_grad", OpClass::activation_grad, dx.data(), dx.size());
    accumulate_weight_grad(prec, "lstm/w_ih_grad", dw_ih, grads_.data() + w_ih_);
    accumulate_weight_grad(prec, "lstm/w_hh_grad", dw_hh, grads_.data() + w_hh_);
    accumulate_weight_grad(prec, "lstm/b_grad", db, grads_.data() + b_);
    std::vector<float> demb(static_cast<std::size_t>(V_) * kEmbed);
    nn::embedding_backward(demb.data(), dx.data(), inputs.data(), N, V_, kEmbed);
    accumulate_weight_grad(prec, "embed/w_grad", demb, grads_.data() + emb_);
    return mean;
  }

  std::uint64_t seed_;
  int B_ = 16, H_ = 64, V_ = 32;
  std::optional<TextCorpus> text_;
  GeneratedLanguage lang_;
  std::size_t total_ = 0, emb_ = 0, w_ih_ = 0, w_hh_ = 0, b_ = 0, fc_w_ = 0, fc_b_ = 0;
  std::vector<float> params_, grads_;
};

}  // namespace

std::unique_ptr<nn::Model> make_lstm_lm(const nn::ModelConfig& config, std::uint64_t seed) {
  return std::make_unique<LstmLm>(config, seed);
}

}  // namespace mpsim::models
