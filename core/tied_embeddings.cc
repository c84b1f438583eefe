#include "core/tied_embeddings.h"

#include <algorithm>

#include "core/model_layout.h"

namespace strait {

std::optional<TiedMatrix> TiedMatrixOf(const ModelSpec& model) {
  if (model.family != ModelFamily::kGpt || !model.gpt.tie_embeddings) return std::nullopt;
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  TiedMatrix tied;
  tied.embed_layer = 0;
  tied.head_layer = static_cast<int>(layout.size()) - 1;
  auto param = [](const LayerLayout& layer, const std::string& name) {
    for (size_t p = 0; p < layer.params.size(); ++p) {
      if (layer.params[p].name == name) return static_cast<int>(p);
    }
    return -1;
  };
  tied.embed_param = param(layout[tied.embed_layer], "token_embed");
  tied.head_param = param(layout[tied.head_layer], "fc.weight");
  tied.numel = int64_t{model.gpt.vocab} * model.gpt.dim;
  return tied;
}

bool TiedAcrossSites(const JobSpec& spec) {
  return TiedMatrixOf(spec.model).has_value() && spec.sites.size() >= 2;
}

LinkSpec TiedLink(const JobSpec& spec) {
  LinkSpec link;
  link.boundary = 0;
  link.encryption = std::any_of(spec.links.begin(), spec.links.end(),
                                [](const LinkSpec& l) { return l.encryption; });
  for (const LinkSpec& l : spec.links)
    link.rotate_bytes = std::min(link.rotate_bytes, l.rotate_bytes);
  return link;
}

std::vector<int> KeyPeers(const JobSpec& spec, int stage) {
  const int stages = static_cast<int>(spec.sites.size());
  std::vector<int> peers;
  const bool own_tied_link = TiedAcrossSites(spec) && stages >= 3 && TiedLink(spec).encryption;
  if (own_tied_link && stage == stages - 1) peers.push_back(0);
  if (stage > 0 && spec.links[stage - 1].encryption) peers.push_back(stage - 1);
  if (stage + 1 < stages && spec.links[stage].encryption) peers.push_back(stage + 1);
  if (own_tied_link && stage == 0) peers.push_back(stages - 1);
  return peers;
}

}  // namespace strait
