#include "core/tied_embeddings.h"

#include <algorithm>

#include "core/model_layout.h"

namespace strait {

std::optional<TiedMatrix> TiedMatrixOf(const ModelSpec& model) {
  if (!model.IsLanguageModel() || !model.gpt.tie_embeddings) return std::nullopt;
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

std::optional<int> TiedLinkPeer(const JobSpec& spec, int stage) {
  const int stages = static_cast<int>(spec.sites.size());
  if (!TiedAcrossSites(spec) || stages < 3 || (stage != 0 && stage != stages - 1)) {
    return std::nullopt;
  }
  return stages - 1 - stage;
}

std::vector<int> KeyPeers(const JobSpec& spec, int stage) {
  const int stages = static_cast<int>(spec.sites.size());
  std::vector<int> peers;
  if (spec.SplitMayMove()) {  // Layers may move between any two stages after a re-plan.
    for (int s = 0; s < stages; ++s) {
      if (s != stage) peers.push_back(s);
    }
    return peers;
  }
  if (stage > 0 && spec.links[stage - 1].encryption) peers.push_back(stage - 1);
  if (stage + 1 < stages && spec.links[stage].encryption) peers.push_back(stage + 1);
  if (const std::optional<int> tied = TiedLinkPeer(spec, stage);
      tied && TiedLink(spec).encryption) {
    peers.push_back(*tied);
  }
  std::sort(peers.begin(), peers.end());  // In stage order.
  return peers;
}

}  // namespace strait
