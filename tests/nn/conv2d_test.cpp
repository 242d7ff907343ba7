// Tests of lib/mpsim/nn/conv2d.hpp: forward against a direct 7-loop convolution, backward against
// central differences in fp64, for padded stride 1 and unpadded stride 2.
#include "catch_compat.hpp"

#include "grad_check.hpp"
#include "mpsim/nn/conv2d.hpp"

using namespace mpsim::nn;

namespace {

std::vector<double> direct_conv(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& b, const Conv2dShape& s) {
  std::vector<double> out(s.out_size());
  for (int n = 0; n < s.B; ++n)
    for (int o = 0; o < s.OC; ++o)
      for (int oy = 0; oy < s.OH(); ++oy)
        for (int ox = 0; ox < s.OW(); ++ox) {
          double acc = b[o];
          for (int c = 0; c < s.C; ++c)
            for (int ky = 0; ky < s.K; ++ky)
              for (int kx = 0; kx < s.K; ++kx) {
                const int y = oy * s.stride - s.pad + ky, xx = ox * s.stride - s.pad + kx;
                if (y < 0 || y >= s.H || xx < 0 || xx >= s.W) continue;
                acc += x[((n * s.C + c) * s.H + y) * s.W + xx] * w[((o * s.C + c) * s.K + ky) * s.K + kx];
              }
          out[((n * s.OC + o) * s.OH() + oy) * s.OW() + ox] = acc;
        }
  return out;
}

}  // namespace

TEST_CASE("conv2d forward equals the direct convolution; backward matches central differences", "[conv2d]") {
  for (const Conv2dShape s : {Conv2dShape{2, 2, 5, 5, 3, 3, 1, 1}, Conv2dShape{2, 3, 7, 6, 2, 3, 2, 0},
                              Conv2dShape{1, 2, 4, 4, 2, 1, 1, 0}}) {
    INFO("B " << s.B << " C " << s.C << " H " << s.H << " W " << s.W << " OC " << s.OC << " K " << s.K << " stride "
              << s.stride << " pad " << s.pad);
    std::mt19937_64 rng(3);
    auto x = gradcheck::random_vector(s.in_size(), rng), w = gradcheck::random_vector(s.weight_size(), rng),
         b = gradcheck::random_vector(s.OC, rng), r = gradcheck::random_vector(s.out_size(), rng);
    std::vector<double> out(s.out_size());
    conv2d_forward(out.data(), x.data(), w.data(), b.data(), s);
    const auto ref = direct_conv(x, w, b, s);
    double worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - ref[i]));
    std::printf("conv2d forward (%dx%d, K %d, stride %d, pad %d): %zu outputs, worst abs error %.3g\n", s.H, s.W, s.K,
                s.stride, s.pad, out.size(), worst);
    CHECK(worst < 1e-13);
    auto f = [&] {
      std::vector<double> o(s.out_size());
      conv2d_forward(o.data(), x.data(), w.data(), b.data(), s);
      return gradcheck::dot(o, r);
    };
    std::vector<double> dx(s.in_size()), dw(s.weight_size()), db(s.OC);
    conv2d_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), s);
    CHECK(gradcheck::check("conv2d dinp", x, dx, f).worst < 1e-7);
    CHECK(gradcheck::check("conv2d dweight", w, dw, f).worst < 1e-7);
    CHECK(gradcheck::check("conv2d dbias", b, db, f).worst < 1e-7);
  }
}
