#include "site/rpc/federation_sampling.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/teach_links.h"
#include "crypto/certificates.h"
#include "site/data/tokenizer.h"
#include "site/exchange/frame_codec.h"
#include "site/exchange/link_security.h"
#include "site/rpc/serve_client.h"

namespace strait::site {
namespace {

v1::TensorKey ServeKey(const JobSpec& spec, const v1::ServeKeysReply& keys, int position,
                       int boundary, v1::Direction direction) {
  v1::TensorKey key;
  key.set_job(spec.name);
  key.set_step(keys.request());
  key.set_microbatch(static_cast<uint32_t>(position));
  key.set_boundary(static_cast<uint32_t>(boundary));
  key.set_direction(direction);
  key.set_purpose(v1::SERVE);
  key.set_generation(keys.generation());
  return key;
}

}  // namespace

absl::StatusOr<FederationSample> SampleFromFederation(const JobSpec& spec,
                                                      const FederationClient& client,
                                                      const std::string& prompt, int tokens,
                                                      const SamplingOptions& sampling) {
  if (spec.serving.clients.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.source_path, " names no serving.clients: its federation serves nobody"));
  }
  const std::string id = client.id.empty() ? spec.serving.clients.front() : client.id;
  STRAIT_ASSIGN_OR_RETURN(
      crypto::TlsMaterial tls,
      crypto::LoadTlsMaterial(client.ca.empty() ? spec.tls.ca : client.ca,
                              client.cert.empty() ? spec.tls.SiteCert(id) : client.cert,
                              client.key.empty() ? spec.tls.SiteKey(id) : client.key));
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                          LoadTokenizer(spec.data, spec.model.gpt));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          tokenizer->Encode(prompt.empty() ? "\n" : prompt));
  if (ids.empty() || static_cast<int>(ids.size()) >= spec.model.gpt.context) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt is ", ids.size(),
                                                   " tokens; the model's context holds ",
                                                   spec.model.gpt.context, " with the sampled"));
  }
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<ServeClient> gateway,
      ServeClient::Connect(client.gateway.empty() ? spec.gateway.address : client.gateway, tls));
  STRAIT_ASSIGN_OR_RETURN(const v1::ServeKeysReply keys, gateway->Keys());
  // This request's keys: derived from a fresh ephemeral key, with the request in the label.
  const auto epoch = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
  STRAIT_ASSIGN_OR_RETURN(auto security,
                          LinkSecurity::Create(spec.name, epoch, tls.own, tls.ca_pem));
  const std::string purpose = absl::StrCat(kServeKeyPurpose, "/", keys.request());
  const uint64_t rotate = TeachLink(spec).rotate_bytes;
  STRAIT_ASSIGN_OR_RETURN(
      LinkSecurity::LinkCrypto first,
      security->Derive(keys.first().site_id(), keys.first(), rotate, keys.generation(), purpose));
  std::unique_ptr<crypto::Opener> opener = std::move(first.opener);
  if (keys.last().site_id() != keys.first().site_id()) {
    STRAIT_ASSIGN_OR_RETURN(
        LinkSecurity::LinkCrypto last,
        security->Derive(keys.last().site_id(), keys.last(), rotate, keys.generation(), purpose));
    opener = std::move(last.opener);
  }
  STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create("none", std::move(first.sealer)));
  const int stages = static_cast<int>(keys.stages());
  std::vector<float> values(ids.begin(), ids.end());
  STRAIT_ASSIGN_OR_RETURN(FrameEncoder::Frame frame,
                          encoder->Encode(ServeKey(spec, keys, 0, stages - 1, v1::FORWARD), values,
                                          {static_cast<int64_t>(ids.size())}));
  frame.header.set_chunk_count(1);

  v1::GenerateRequest request;
  *request.mutable_key() = security->own_key();
  *request.mutable_prompt() = frame.header;
  request.set_prompt_body(frame.body);
  request.set_tokens(static_cast<uint32_t>(tokens));
  request.set_temperature(sampling.temperature);
  request.set_top_k(static_cast<uint32_t>(sampling.top_k));
  request.set_seed(sampling.seed);
  STRAIT_ASSIGN_OR_RETURN(const v1::GenerateReply reply, gateway->Generate(request));
  FederationSample sample;
  sample.tokens = ids;
  sample.prompt_tokens = static_cast<int>(ids.size());
  sample.seconds = reply.seconds();
  FrameDecoder decoder(std::move(opener), /*max_raw_bytes=*/4);
  for (const v1::ServedToken& token : reply.tokens()) {
    const int position = static_cast<int>(sample.tokens.size());
    STRAIT_ASSIGN_OR_RETURN(std::vector<float> value,
                            decoder.Decode(ServeKey(spec, keys, position, 1, v1::BACKWARD), {1},
                                           {token.header(), token.body()}));
    sample.tokens.push_back(static_cast<int32_t>(value[0]));
  }
  STRAIT_ASSIGN_OR_RETURN(sample.text, tokenizer->Decode(sample.tokens));
  return sample;
}

}  // namespace strait::site
