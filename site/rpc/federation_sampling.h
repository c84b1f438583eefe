// Text from a serving federation (`strait generate --federation`; docs/distillation.md): this
// process is one of the job's serving.clients. It asks the gateway for a request id and the first
// and the last stage's signed keys, seals the prompt's tokens for the first stage with keys derived
// for this request alone, and opens the tokens the last stage sealed for it. The gateway and the
// sites between see neither; no site's weights leave it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/nn/text_generator.h"

namespace strait::site {

struct FederationClient {
  std::string id;             // One of serving.clients; empty: the first.
  std::string cert, key, ca;  // PEM paths; empty: the job spec's tls: paths for `id`.
  std::string gateway;        // host:port; empty: gateway.address.
};

struct FederationSample {
  std::vector<int32_t> tokens;  // The prompt's, then the sampled ones.
  int prompt_tokens = 0;
  std::string text;    // The same, decoded.
  double seconds = 0;  // The gateway's time from the prompt to the last token.
};

// `tokens` tokens after `prompt` (a new line when empty; fewer when the context fills).
// PERMISSION_DENIED for a client the job does not name; INVALID_ARGUMENT for bad options.
absl::StatusOr<FederationSample> SampleFromFederation(const JobSpec& spec,
                                                      const FederationClient& client,
                                                      const std::string& prompt, int tokens,
                                                      const SamplingOptions& sampling);

}  // namespace strait::site
