#include "mpsim/models/layer_dump.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/format/stats_fields.hpp"
#include "mpsim/io/safetensors_writer.hpp"
#include "mpsim/models/corpus.hpp"
#include "mpsim/models/shapes.hpp"
#include "mpsim/nn/policy.hpp"

namespace mpsim::models {

namespace {

// The models' training batches, generated the way ssd_lite.cpp and lstm_lm.cpp generate them (the
// dump's site/conv1/in and site/lstm/in let a reader check that these are the batch the step used).
constexpr int kSsdImage = 32;                 // ssd_lite.cpp kImage
constexpr std::uint64_t kSsdTrainStream = 0;  // ssd_lite.cpp kTrainStream
constexpr int kLstmSteps = 32;                // lstm_lm.cpp kSteps
constexpr int kSsdDefaultBatch = 8, kLstmDefaultBatch = 16;

struct SiteRecord {
  nn::OpClass cls{};
  std::vector<std::size_t> call_sizes;
  std::vector<float> before, after;
};

// Under the names of `mpsim round --stats-json` (format/stats_fields.hpp; "overflow_num" since 0.2.0).
nlohmann::json stats_json(const Stats& s) {
  nlohmann::json j = nlohmann::json::object();
  for_each_stats_field(s, [&](std::string_view name, auto value) { j[std::string(name)] = value; });
  return j;
}

// (rows, cols) when every call had the same size, else one flat row.
std::vector<std::int64_t> site_shape(const SiteRecord& r) {
  const bool same =
      std::all_of(r.call_sizes.begin(), r.call_sizes.end(), [&](std::size_t n) { return n == r.call_sizes.front(); });
  if (same) return {static_cast<std::int64_t>(r.call_sizes.size()), static_cast<std::int64_t>(r.call_sizes.front())};
  return {static_cast<std::int64_t>(r.before.size())};
}

}  // namespace

void write_layer_dump(const std::filesystem::path& path, const LayerDumpOptions& o) {
  const bool ssd = o.model == "ssd" || o.model == "ssd_lite";
  const bool lstm = o.model == "lstm" || o.model == "lstm_lm";
  if (!ssd && !lstm) throw Error("layer dump: unknown model '" + o.model + "' (expected ssd or lstm)");
  if (lstm && !o.config.corpus_path.empty())
    throw FieldError("corpus_path", o.config.corpus_path, "the layer dump runs the lstm on the generated corpus only");
  if (lstm && o.config.vocab != 0)
    throw FieldError("vocab", std::to_string(o.config.vocab),
                     "the layer dump runs the lstm on the default generated language only");
  if (lstm && !std::isnan(o.config.zipf))
    throw FieldError("zipf", fmt::format("{}", o.config.zipf),
                     "the layer dump runs the lstm on the default generated language only");
  if (!(std::isfinite(o.loss_scale) && o.loss_scale > 0))
    throw Error("layer dump: the loss scale must be a positive finite number, got " + std::to_string(o.loss_scale));
  const int batch = o.config.batch > 0 ? o.config.batch : (ssd ? kSsdDefaultBatch : kLstmDefaultBatch);
  std::unique_ptr<nn::Model> model = nn::make_model(o.model, o.config, o.seed);

  nn::Precision prec(nn::parse_policy(o.policy));
  std::vector<std::string> order;
  std::map<std::string, SiteRecord> sites;
  prec.observe(
      [&](std::string_view site, nn::OpClass cls, std::span<const float> before, std::span<const float> after) {
        auto [it, fresh] = sites.try_emplace(std::string(site));
        if (fresh) {
          order.push_back(it->first);
          it->second.cls = cls;
        }
        it->second.call_sizes.push_back(before.size());
        it->second.before.insert(it->second.before.end(), before.begin(), before.end());
        it->second.after.insert(it->second.after.end(), after.begin(), after.end());
      });

  std::vector<nn::Param> params = model->params();
  std::vector<std::vector<float>> weights;
  for (auto& p : params) {
    weights.emplace_back(p.value.begin(), p.value.end());
    std::fill(p.grad.begin(), p.grad.end(), 0.0f);
  }
  const double loss = model->forward_backward(o.batch_index, o.loss_scale, prec);

  nlohmann::json meta = {{"format", "mpsim layer dump"},
                         {"schema", "mpsim-layer-dump-2"},
                         {"model", ssd ? "ssd" : "lstm"},
                         {"seed", o.seed},
                         {"batch_index", o.batch_index},
                         {"batch", batch},
                         {"size", o.config.size},
                         {"policy", prec.policy().name},
                         {"policy_spec", o.policy},
                         {"loss_scale", o.loss_scale},
                         {"loss", loss}};
  std::vector<io::SafetensorsView> tensors;
  for (std::size_t i = 0; i < params.size(); ++i) tensors.push_back({"param/" + params[i].name, {}, weights[i]});
  for (const auto& p : params) tensors.push_back({"grad/" + p.name, {}, p.grad});

  ShapesBatch shapes;
  if (ssd) {
    shapes = make_shapes(o.seed, kSsdTrainStream, o.batch_index * static_cast<std::uint64_t>(batch), batch, kSsdImage);
    tensors.push_back({"batch/images", {batch, 1, kSsdImage, kSsdImage}, shapes.images});
    nlohmann::json truths = nlohmann::json::array();
    for (const auto& image : shapes.truths) {
      nlohmann::json boxes = nlohmann::json::array();
      for (const auto& t : image) boxes.push_back({t.box.cx, t.box.cy, t.box.w, t.box.h, t.label});
      truths.push_back(boxes);
    }
    meta["truths"] = truths;
  } else {
    const GeneratedLanguage lang;
    nlohmann::json inputs = nlohmann::json::array(), targets = nlohmann::json::array();
    std::vector<std::vector<std::int32_t>> seqs;
    for (int b = 0; b < batch; ++b) seqs.push_back(lang.sample(o.seed, o.batch_index, b, kLstmSteps + 1));
    for (int t = 0; t < kLstmSteps; ++t) {
      nlohmann::json in_row = nlohmann::json::array(), tg_row = nlohmann::json::array();
      for (int b = 0; b < batch; ++b) {
        in_row.push_back(seqs[b][t]);
        tg_row.push_back(seqs[b][t + 1]);
      }
      inputs.push_back(in_row);
      targets.push_back(tg_row);
    }
    meta["inputs"] = inputs;
    meta["targets"] = targets;
  }

  nlohmann::json site_list = nlohmann::json::array(), site_stats = nlohmann::json::object();
  for (const auto& name : order) {
    const SiteRecord& r = sites.at(name);
    site_list.push_back({{"name", name}, {"class", std::string(nn::to_string(r.cls))}, {"calls", r.call_sizes.size()}});
    tensors.push_back({"site/" + name, site_shape(r), r.before});
    if (prec.rounds(r.cls)) tensors.push_back({"rounded/" + name, site_shape(r), r.after});
  }
  for (const auto& [name, st] : prec.site_stats()) site_stats[name] = stats_json(st);
  meta["sites"] = site_list;
  meta["site_stats"] = site_stats;

  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : meta.items()) metadata[key] = value.dump();
  io::write_safetensors(path, metadata, tensors);
}

}  // namespace mpsim::models
