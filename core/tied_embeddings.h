// Tied embeddings (model.tie_embeddings, gpt only): the LM head's weight is the token embedding.
//
// As Megatron's embedding group does, each of the two layers keeps its own copy of the [vocab, dim]
// matrix (the head's initialised to the embedding's values) and every step both copies take the
// sum of the two gradients, g = g_embed + g_head (float addition commutes, so both ends get the
// same bits), before clipping and the update; equal gradients, equal optimizer state, equal copies.
// The clipping norm counts the matrix once: the head's copy stays out of it. When the first and the
// last stage are different sites, each sends the other its own gradient of the matrix as TIED
// frames (proto Purpose TIED): on their link when they are neighbours, else on a link of their own
// with keys only the two of them hold (DESIGN.md §5); never lossy.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/job_spec.h"

namespace strait {

// Where the shared matrix lives in the model's layout (core/model_layout.h).
struct TiedMatrix {
  int embed_layer = 0;  // Layer 0; its parameter `embed_param` is token_embed.
  int embed_param = 0;
  int head_layer = 0;  // The last layer; its parameter `head_param` is fc.weight.
  int head_param = 0;
  int64_t numel = 0;  // vocab * dim.
};

// The tied matrix of `model`, or nullopt when the model ties none.
std::optional<TiedMatrix> TiedMatrixOf(const ModelSpec& model);

// True when the two copies live on different sites, so that the first and the last stage exchange
// their gradients every step.
bool TiedAcrossSites(const JobSpec& spec);

// The link of the first and the last stage for their TIED frames when they are not neighbours
// (three stages or more): lossless, sealed unless every link of the job has `encryption: false`,
// rekeyed after the smallest rotate_bytes of the job's links.
LinkSpec TiedLink(const JobSpec& spec);

// The other end of TiedLink for stage `stage`: the last stage for the first and the first for the
// last, when the two exchange tied gradients and are not neighbours; nullopt otherwise.
std::optional<int> TiedLinkPeer(const JobSpec& spec, int stage);

// The stages whose signed keys stage `stage` needs to seal its links: its neighbours where the
// link between them is sealed, and the other end of a sealed TiedLink; with a planned split
// (JobSpec::PlansSplit) every other stage, as layers may move between any two (MOVE frames). In
// stage order.
std::vector<int> KeyPeers(const JobSpec& spec, int stage);

}  // namespace strait
