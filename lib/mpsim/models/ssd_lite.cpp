#include "mpsim/models/ssd_lite.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/models/detail/rng.hpp"
#include "mpsim/models/detail/sites.hpp"
#include "mpsim/models/detection_map.hpp"
#include "mpsim/models/shapes.hpp"
#include "mpsim/nn/activation.hpp"
#include "mpsim/nn/conv2d.hpp"
#include "mpsim/nn/multibox.hpp"
#include "mpsim/nn/pool.hpp"

namespace mpsim::models {

namespace {

using nn::OpClass;

constexpr int kImage = 32;
constexpr int kAnchors = 3;                  // aspect ratios 1, 2, 1/2 at every cell
constexpr int kClasses = kShapeClasses + 1;  // with the background
constexpr int kHeadChannels = kAnchors * (4 + kClasses);
constexpr int kEvalImages = 128;
constexpr std::uint64_t kTrainStream = 0, kEvalStream = 1;
constexpr std::uint64_t kEvalSeed = 0x5eed;  // one held-out set for every run, so metrics compare across seeds
// Detection post-processing as SSD's (Liu et al. 2016, §3: confidence 0.01, NMS 0.45 per class);
// we keep at most 20 boxes per class and image since images hold at most 3 objects.
constexpr double kScoreThreshold = 0.01, kNmsThreshold = 0.45;
constexpr int kTopK = 20;

struct Conv {
  std::string name;
  int C = 0, OC = 0;
  std::size_t w_off = 0, b_off = 0;
  // per forward pass
  nn::Conv2dShape shape;
  const float* in = nullptr;  // the input as the GEMM saw it (rounded)
  std::vector<float> in_r, w_r, out;
  const float* w_used = nullptr;
};

class SsdLite final : public nn::Model {
 public:
  SsdLite(const nn::ModelConfig& cfg, std::uint64_t seed) : seed_(seed) {
    batch_ = cfg.batch > 0 ? cfg.batch : 8;
    const int width = cfg.size > 0 ? cfg.size : 16;
    if (cfg.batch < 0 || cfg.size < 0) throw Error("ssd: batch and size must be positive");
    if (!cfg.corpus_path.empty()) throw FieldError("corpus_path", cfg.corpus_path, "for the lstm model only, not ssd");
    if (cfg.vocab != 0) throw FieldError("vocab", std::to_string(cfg.vocab), "for the lstm model only, not ssd");
    if (!std::isnan(cfg.zipf))
      throw FieldError("zipf", fmt::format("{}", cfg.zipf), "for the lstm model only, not ssd");
    auto add = [&](const std::string& name, int C, int OC) {
      Conv c;
      c.name = name;
      c.C = C;
      c.OC = OC;
      c.w_off = total_;
      total_ += static_cast<std::size_t>(OC) * C * 9;
      c.b_off = total_;
      total_ += OC;
      convs_.push_back(std::move(c));
    };
    add("conv1", 1, width);
    add("conv2", width, 2 * width);
    add("conv3", 2 * width, 2 * width);
    add("head1", 2 * width, kHeadChannels);
    add("head2", 2 * width, kHeadChannels);
    params_.assign(total_, 0.0f);
    grads_.assign(total_, 0.0f);
    // He initialisation (He et al. 2015): N(0, 2 / fan_in) for the convolutions feeding a ReLU; the
    // heads feed the loss directly and get N(0, 1 / fan_in). Biases start at 0.
    for (std::size_t l = 0; l < convs_.size(); ++l) {
      Rng rng(seed, 0x1417, l);
      const auto& c = convs_[l];
      const double fan_in = c.C * 9.0;
      const double sd = std::sqrt((c.name.rfind("head", 0) == 0 ? 1.0 : 2.0) / fan_in);
      for (int i = 0; i < c.OC * c.C * 9; ++i) params_[c.w_off + i] = static_cast<float>(sd * rng.normal());
    }
    defaults_ = nn::make_default_boxes({{8, 0.3, {1.0, 2.0, 0.5}}, {4, 0.5, {1.0, 2.0, 0.5}}});
  }

  std::string name() const override { return "ssd"; }

  // Plain SGD with momentum, the setting verified in README.md. Clipping at 5: above the median global
  // gradient norm of the fp32 run (seed 1, 300 steps: 1.9..22, median 4.1, 75th percentile 4.8), so the
  // larger steps, about a fifth, clip.
  nn::TrainHints hints() const override { return {"sgd", 0.01, 0.9, 0.0, 300, 5.0}; }

  std::vector<nn::Param> params() override {
    std::vector<nn::Param> out;
    for (auto& c : convs_) {
      const std::size_t nw = static_cast<std::size_t>(c.OC) * c.C * 9;
      out.push_back({c.name + "/weight", {params_.data() + c.w_off, nw}, {grads_.data() + c.w_off, nw}});
      out.push_back({c.name + "/bias",
                     {params_.data() + c.b_off, static_cast<std::size_t>(c.OC)},
                     {grads_.data() + c.b_off, static_cast<std::size_t>(c.OC)}});
    }
    return out;
  }

  double forward_backward(std::uint64_t batch_index, float loss_scale, nn::Precision& prec) override {
    const ShapesBatch data = make_shapes(seed_, kTrainStream, batch_index * batch_, batch_, kImage);
    forward(data.images.data(), batch_, prec);
    std::vector<float> dloc, dconf;
    const nn::MultiboxResult r = loss(data, loss_scale, dloc, dconf);
    backward(dloc, dconf, prec);
    return r.loss;
  }

  nn::Metric evaluate(nn::Precision& prec) override {
    nn::Precision local = prec.evaluation_copy();
    const ShapesBatch data = make_shapes(kEvalSeed, kEvalStream, 0, kEvalImages, kImage);
    std::vector<Detection> dets;
    const int chunk = 32;
    for (int first = 0; first < kEvalImages; first += chunk) {
      const int n = std::min(chunk, kEvalImages - first);
      forward(data.images.data() + static_cast<std::size_t>(first) * kImage * kImage, n, local);
      std::vector<float> loc, conf;
      gather_heads(n, loc, conf);
      const int D = static_cast<int>(defaults_.size());
      for (int b = 0; b < n; ++b) {
        std::vector<std::vector<double>> scores(kClasses, std::vector<double>(D));
        std::vector<nn::Box> boxes(D);
        for (int d = 0; d < D; ++d) {
          const float* z = conf.data() + (static_cast<std::size_t>(b) * D + d) * kClasses;
          const float mx = *std::max_element(z, z + kClasses);
          double sum = 0;
          for (int k = 0; k < kClasses; ++k) sum += std::exp(static_cast<double>(z[k] - mx));
          for (int k = 0; k < kClasses; ++k) scores[k][d] = std::exp(static_cast<double>(z[k] - mx)) / sum;
          const float* o = loc.data() + (static_cast<std::size_t>(b) * D + d) * 4;
          boxes[d] = nn::decode_box({o[0], o[1], o[2], o[3]}, defaults_[d]);
        }
        for (int k = 1; k < kClasses; ++k) {
          std::vector<nn::Box> cand;
          std::vector<double> cand_scores;
          for (int d = 0; d < D; ++d)
            if (scores[k][d] > kScoreThreshold && std::isfinite(scores[k][d])) {
              cand.push_back(boxes[d]);
              cand_scores.push_back(scores[k][d]);
            }
          for (int i : nms(cand, cand_scores, kNmsThreshold, kTopK))
            dets.push_back({first + b, k, cand_scores[i], cand[i]});
        }
      }
    }
    return {"mAP@0.5", mean_average_precision(dets, data.truths, kShapeClasses), true};
  }

 private:
  float* W(const Conv& c) { return params_.data() + c.w_off; }
  float* Bias(const Conv& c) { return params_.data() + c.b_off; }

  // Runs conv c on `in` (B, C, H, H) under the policy; output in c.out (rounded matmul output).
  void conv_forward(Conv& c, const float* in, int B, int H, nn::Precision& prec) {
    c.shape = {B, c.C, H, H, c.OC, 3, 1, 1};
    c.in = rounded_input(prec, c.name + "/in", OpClass::matmul_input, in, c.shape.in_size(), c.in_r);
    c.w_used = rounded_input(prec, c.name + "/w", OpClass::matmul_input, W(c), c.shape.weight_size(), c.w_r);
    c.out.resize(c.shape.out_size());
    nn::conv2d_forward(c.out.data(), c.in, c.w_used, Bias(c), c.shape, prec.gemm(c.name));
    round_site(prec, c.name + "/out", OpClass::matmul_output, c.out.data(), c.out.size());
  }

  // dout: the gradient of c's output (already in the policy's storage format). Adds the weight
  // gradients to the masters; returns the gradient of the input in dinp (rounded) if wanted.
  void conv_backward(Conv& c, const float* dout, std::vector<float>* dinp, nn::Precision& prec) {
    std::vector<float> dw(c.shape.weight_size()), db(c.OC);
    if (dinp) dinp->resize(c.shape.in_size());
    nn::conv2d_backward(dinp ? dinp->data() : nullptr, dw.data(), db.data(), dout, c.in, c.w_used, c.shape,
                        prec.gemm(c.name));
    if (dinp) round_site(prec, c.name + "/in_grad", OpClass::activation_grad, dinp->data(), dinp->size());
    accumulate_weight_grad(prec, c.name + "/w_grad", dw, grads_.data() + c.w_off);
    accumulate_weight_grad(prec, c.name + "/b_grad", db, grads_.data() + c.b_off);
  }

  struct Block {  // relu + pool after a conv
    std::vector<float> act, pooled;
    std::vector<std::int32_t> argmax;
  };

  void relu_pool(const Conv& c, Block& blk) {
    const auto& s = c.shape;
    blk.act.resize(c.out.size());
    nn::relu_forward(blk.act.data(), c.out.data(), c.out.size());
    blk.pooled.resize(static_cast<std::size_t>(s.B) * s.OC * (s.H / 2) * (s.W / 2));
    blk.argmax.resize(blk.pooled.size());
    nn::maxpool_forward(blk.pooled.data(), blk.argmax.data(), blk.act.data(), s.B, s.OC, s.H, s.W, 2);
  }

  // dpooled -> gradient of the conv's output (values are routed, not changed: no rounding needed).
  std::vector<float> relu_pool_backward(const Conv& c, const Block& blk, const float* dpooled) {
    const auto& s = c.shape;
    std::vector<float> d(c.out.size());
    nn::maxpool_backward(d.data(), dpooled, blk.argmax.data(), s.B, s.OC, s.H, s.W, 2);
    nn::relu_backward(d.data(), d.data(), blk.act.data(), d.size());
    return d;
  }

  void forward(const float* images, int B, nn::Precision& prec) {
    conv_forward(convs_[0], images, B, kImage, prec);
    relu_pool(convs_[0], blk_[0]);
    conv_forward(convs_[1], blk_[0].pooled.data(), B, kImage / 2, prec);
    relu_pool(convs_[1], blk_[1]);  // f1: (B, 2w, 8, 8)
    conv_forward(convs_[2], blk_[1].pooled.data(), B, kImage / 4, prec);
    relu_pool(convs_[2], blk_[2]);  // f2: (B, 2w, 4, 4)
    conv_forward(convs_[3], blk_[1].pooled.data(), B, kImage / 4, prec);
    conv_forward(convs_[4], blk_[2].pooled.data(), B, kImage / 8, prec);
  }

  // Head outputs (B, A*(4+NC), f, f) -> loc (B, D, 4) and conf (B, D, NC), D in make_default_boxes order.
  // Channels: a*4 + k are the offsets of anchor a, A*4 + a*NC + k its logits.
  void gather_heads(int B, std::vector<float>& loc, std::vector<float>& conf) {
    const int D = static_cast<int>(defaults_.size());
    loc.assign(static_cast<std::size_t>(B) * D * 4, 0.0f);
    conf.assign(static_cast<std::size_t>(B) * D * kClasses, 0.0f);
    for_each_head_entry(B, [&](int head, std::size_t src, bool is_loc, std::size_t dst) {
      (is_loc ? loc : conf)[dst] = convs_[3 + head].out[src];
    });
  }

  // Calls f(head, index in that head's output, is_loc, index in loc or conf) for every head output entry.
  template <class F>
  void for_each_head_entry(int B, F&& f) {
    const int D = static_cast<int>(defaults_.size());
    int d0 = 0;
    for (int head = 0; head < 2; ++head) {
      const int fs = head == 0 ? 8 : 4;
      for (int b = 0; b < B; ++b)
        for (int y = 0; y < fs; ++y)
          for (int x = 0; x < fs; ++x)
            for (int a = 0; a < kAnchors; ++a) {
              const int d = d0 + (y * fs + x) * kAnchors + a;
              auto src = [&](int ch) {
                return (static_cast<std::size_t>(b) * kHeadChannels + ch) * fs * fs + y * fs + x;
              };
              for (int k = 0; k < 4; ++k) f(head, src(a * 4 + k), true, (static_cast<std::size_t>(b) * D + d) * 4 + k);
              for (int k = 0; k < kClasses; ++k)
                f(head, src(kAnchors * 4 + a * kClasses + k), false,
                  (static_cast<std::size_t>(b) * D + d) * kClasses + k);
            }
      d0 += fs * fs * kAnchors;
    }
  }

  nn::MultiboxResult loss(const ShapesBatch& data, float loss_scale, std::vector<float>& dloc,
                          std::vector<float>& dconf) {
    std::vector<float> loc, conf;
    gather_heads(batch_, loc, conf);
    dloc.resize(loc.size());
    dconf.resize(conf.size());
    return nn::multibox_loss(dloc.data(), dconf.data(), loc.data(), conf.data(), data.truths, defaults_, kClasses,
                             loss_scale);
  }

  void backward(const std::vector<float>& dloc, const std::vector<float>& dconf, nn::Precision& prec) {
    std::vector<float> dhead1(convs_[3].out.size()), dhead2(convs_[4].out.size());
    for_each_head_entry(batch_, [&](int head, std::size_t src, bool is_loc, std::size_t dst) {
      (head == 0 ? dhead1 : dhead2)[src] = (is_loc ? dloc : dconf)[dst];
    });
    // The loss gradient (fp32) enters the network: stored in the low format.
    round_site(prec, "head1/out_grad", OpClass::activation_grad, dhead1.data(), dhead1.size());
    round_site(prec, "head2/out_grad", OpClass::activation_grad, dhead2.data(), dhead2.size());
    std::vector<float> df1_head, df2, df1_conv3, dp0;
    conv_backward(convs_[4], dhead2.data(), &df2, prec);
    conv_backward(convs_[3], dhead1.data(), &df1_head, prec);
    std::vector<float> d3 = relu_pool_backward(convs_[2], blk_[2], df2.data());
    conv_backward(convs_[2], d3.data(), &df1_conv3, prec);
    // f1 feeds head1 and conv3: its gradient is the sum, a new value stored in the low format.
    for (std::size_t i = 0; i < df1_head.size(); ++i) df1_head[i] += df1_conv3[i];
    round_site(prec, "f1/grad", OpClass::activation_grad, df1_head.data(), df1_head.size());
    std::vector<float> d2 = relu_pool_backward(convs_[1], blk_[1], df1_head.data());
    conv_backward(convs_[1], d2.data(), &dp0, prec);
    std::vector<float> d1 = relu_pool_backward(convs_[0], blk_[0], dp0.data());
    conv_backward(convs_[0], d1.data(), nullptr, prec);
  }

  std::uint64_t seed_;
  int batch_ = 8;
  std::size_t total_ = 0;
  std::vector<Conv> convs_;
  Block blk_[3];
  std::vector<float> params_, grads_;
  std::vector<nn::Box> defaults_;
};

}  // namespace

std::unique_ptr<nn::Model> make_ssd_lite(const nn::ModelConfig& config, std::uint64_t seed) {
  return std::make_unique<SsdLite>(config, seed);
}

}  // namespace mpsim::models
