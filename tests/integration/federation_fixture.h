// Real federations on loopback for the integration tests: tools::LocalFederation (certificates, a
// strait-gateway process and one strait-site process per site) running this build tree's binaries.
#pragma once

#include <string>
#include <vector>

#include "site/nn/checkpoint.h"
#include "tools/local_federation.h"

namespace strait::testing {

using tools::MakeCertificates;
using tools::ReadFile;

class LocalFederation : public tools::LocalFederation {
 public:
  LocalFederation(const std::string& yaml, const std::vector<std::string>& sites)
      : tools::LocalFederation(yaml, sites, tools::Executables::InBuildTree(STRAIT_BINARY_DIR)) {}
};

}  // namespace strait::testing
