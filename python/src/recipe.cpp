// mpsim._core.Recipe: the scaling recipes of lib/mpsim/recipe (docs/recipes.md), for the torch side to
// quantize GEMM operands with the same code as the training simulator. Thin: every value is computed there.
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "mpsim/recipe/recipe.hpp"

namespace mpsim::python {
namespace {

template <class T>
nb::ndarray<nb::numpy, T> owned_array(std::vector<T>&& v, std::initializer_list<std::size_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape, owner);
}

nb::dict quantize(recipe::Quantizer& q, const AnyArray& x, std::string_view role, std::string_view tensor) {
  if (x.ndim() != 2)
    throw nb::value_error(
        ("Recipe.quantize: x must be 2-D (rows x reduction axis), got " + std::to_string(x.ndim()) + " dimensions")
            .c_str());
  const std::span<const float> in = input_span<float>(x, "x");
  const std::size_t rows = x.shape(0), cols = x.shape(1);
  const recipe::Role r = recipe::parse_role(role);
  recipe::QuantizedOperand out;
  {
    nb::gil_scoped_release release;
    out = q.quantize(tensor, r, in, rows, cols);
  }
  nb::dict d;
  d["values"] = owned_array(std::move(out.values), {rows, cols});
  const std::size_t sr = out.scale_rows, sc = out.scale_cols;
  d["scales"] = owned_array(std::move(out.scales), {sr, sc});
  d["tensor_scale"] = out.tensor_scale;
  d["quantized"] = out.quantized;
  d["hadamard"] = out.hadamard;
  d["stats"] = stats_dict(out.stats, 0);
  return d;
}

}  // namespace

void bind_recipe(nb::module_& m) {
  m.def(
      "recipe_names",
      [] {
        std::vector<std::string> v;
        for (auto n : recipe::recipe_names()) v.emplace_back(n);
        return v;
      },
      "The scaling recipes' names (docs/recipes.md).");
  m.def(
      "hadamard16",
      [](const AnyArray& x) {
        if (x.ndim() != 2) throw nb::value_error("hadamard16: x must be 2-D");
        const std::span<const float> in = input_span<float>(x, "x");
        std::vector<float> v(in.begin(), in.end());
        recipe::hadamard16(v, x.shape(0), x.shape(1));
        return owned_array(std::move(v), {x.shape(0), x.shape(1)});
      },
      nb::arg("x"), "nvfp4's 16x16 random Hadamard transform along each row (recipe.hpp).");
  nb::class_<recipe::Quantizer>(
      m, "Recipe", "A scaling recipe with its state: Recipe('mxfp8:scaling_mode=rceil') (docs/recipes.md).")
      .def(
          "__init__",
          [](recipe::Quantizer* self, std::string_view spec) {
            new (self) recipe::Quantizer(recipe::parse_recipe(spec));
          },
          nb::arg("spec"))
      .def_prop_ro("name", [](const recipe::Quantizer& q) { return q.recipe().name; })
      .def_prop_ro("spec", [](const recipe::Quantizer& q) { return q.recipe().spec; })
      .def("quantize", &quantize, nb::arg("x"), nb::arg("role"), nb::arg("tensor") = "",
           "Quantizes a float32 C-contiguous (rows, reduction axis) array as GEMM operand `role` (fprop_x, fprop_w, "
           "dgrad_dy, dgrad_w, wgrad_x, wgrad_dy) of layer `tensor`: a dict of values, scales, tensor_scale, "
           "quantized, hadamard, stats.")
      .def("end_step", &recipe::Quantizer::end_step, "Delayed scaling: roll the amax histories and update the scales.")
      .def(
          "state",
          [](const recipe::Quantizer& q) {
            std::map<std::string, std::pair<std::vector<float>, float>> s;
            for (const auto& [k, st] : q.delayed_state()) s[k] = {st.amax_history, st.scale};
            return s;
          },
          "Delayed scaling's state: {'layer/x': (amax_history, scale), ...}.")
      .def(
          "set_state",
          [](recipe::Quantizer& q, const std::map<std::string, std::pair<std::vector<float>, float>>& s) {
            std::map<std::string, recipe::DelayedState> d;
            for (const auto& [k, v] : s) d[k] = recipe::DelayedState{v.first, v.second};
            q.set_delayed_state(std::move(d));
          },
          nb::arg("state"))
      .def_prop_rw("sr_offset", &recipe::Quantizer::sr_offset, &recipe::Quantizer::set_sr_offset);
}

}  // namespace mpsim::python
