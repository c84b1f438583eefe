// Real federations on loopback for the integration tests: certificates made in-process, a job spec
// written by the test, a strait-gateway process and one strait-site process per site, all stopped
// when the fixture goes out of scope.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "site/nn/checkpoint.h"
#include "tools/subprocess.h"

namespace strait::testing {

// Writes a federation CA, the gateway's certificate (127.0.0.1) and certificates for `sites` into
// `dir` as ca.pem, gateway.pem/.key and <site>.pem/.key (the job spec's default names under certs/).
// `federation` names the CA. Returns the CA.
absl::StatusOr<crypto::CertifiedKey> MakeCertificates(const std::string& dir,
                                                      const std::vector<std::string>& sites,
                                                      const std::string& federation = "test");

class LocalFederation {
 public:
  // A temporary directory with certs/ for `sites` and the job spec `yaml` as fed.yaml.
  LocalFederation(const std::string& yaml, const std::vector<std::string>& sites);
  ~LocalFederation();

  const tools::TempDir& dir() const { return dir_; }
  std::string config() const { return dir_.File("fed.yaml"); }

  // Starts strait-gateway with `extra_args`; false (and a log in `error`) if it does not serve.
  bool StartGateway(const std::vector<std::string>& extra_args, std::string* error);
  const std::string& gateway_address() const { return gateway_address_; }
  tools::Process& gateway() { return *gateway_; }

  // Starts strait-site for `site` (--out <dir>/out/<site>) with `extra_args`.
  void StartSite(const std::string& site, const std::vector<std::string>& extra_args = {});
  // Waits for site `site` to exit; its exit code (-1 on timeout).
  int WaitSite(const std::string& site, std::chrono::seconds timeout);
  std::string SiteLog(const std::string& site) const;
  std::string OutDir(const std::string& site) const { return dir_.File("out/" + site); }

  // Runs `strait train` on the same job spec into <dir>/reference; its exit code.
  int RunReference(const std::vector<std::string>& extra_args, std::chrono::seconds timeout);
  std::string ReferenceDir() const { return dir_.File("reference"); }

 private:
  tools::TempDir dir_;
  std::unique_ptr<tools::Process> gateway_;
  std::string gateway_address_;
  std::map<std::string, std::unique_ptr<tools::Process>> sites_;
};

// The metrics.json a site or `strait train` wrote into `dir`, as text (nlohmann-free callers parse).
std::string ReadFile(const std::string& path);

}  // namespace strait::testing
