#include "tests/integration/federation_fixture.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace strait::testing {

absl::StatusOr<crypto::CertifiedKey> MakeCertificates(const std::string& dir,
                                                      const std::vector<std::string>& sites,
                                                      const std::string& federation) {
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& stem, const crypto::CertifiedKey& key) {
    std::ofstream(dir + "/" + stem + ".pem") << key.certificate_pem;
    std::ofstream(dir + "/" + stem + ".key") << key.key_pem;
  };
  absl::StatusOr<crypto::CertifiedKey> ca = crypto::CreateCa(federation);
  if (!ca.ok()) return ca.status();
  write("ca", *ca);
  absl::StatusOr<crypto::CertifiedKey> gateway = crypto::IssueGatewayCertificate(*ca, {"127.0.0.1"});
  if (!gateway.ok()) return gateway.status();
  write("gateway", *gateway);
  for (const std::string& site : sites) {
    absl::StatusOr<crypto::CertifiedKey> cert = crypto::IssueSiteCertificate(*ca, site);
    if (!cert.ok()) return cert.status();
    write(site, *cert);
  }
  return ca;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

LocalFederation::LocalFederation(const std::string& yaml, const std::vector<std::string>& sites) {
  (void)MakeCertificates(dir_.File("certs"), sites);
  std::ofstream(config()) << yaml;
}

LocalFederation::~LocalFederation() {
  sites_.clear();  // Sites first, so none is left waiting for a gateway that is gone.
  gateway_.reset();
}

bool LocalFederation::StartGateway(const std::vector<std::string>& extra_args, std::string* error) {
  std::vector<std::string> args = {std::string(STRAIT_BINARY_DIR) + "/gateway/strait-gateway",
                                   "-c", config(), "--listen", "127.0.0.1:0", "--ready-file",
                                   dir_.File("gateway.ready"), "--no-dashboard"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  gateway_ = std::make_unique<tools::Process>(args, dir_.File("gateway.log"));
  auto ready = gateway_->WaitForReadyFile(dir_.File("gateway.ready"), {"grpc"},
                                          std::chrono::seconds(60));
  if (ready.empty()) {
    *error = gateway_->LogTail();
    return false;
  }
  gateway_address_ = "127.0.0.1:" + ready["grpc"];
  return true;
}

void LocalFederation::StartSite(const std::string& site, const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {std::string(STRAIT_BINARY_DIR) + "/site/strait-site", "-c",
                                   config(),  "--site", site, "--gateway", gateway_address_,
                                   "--out",   OutDir(site)};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  sites_[site] = std::make_unique<tools::Process>(args, dir_.File(site + ".log"));
}

int LocalFederation::WaitSite(const std::string& site, std::chrono::seconds timeout) {
  return sites_.at(site)->Wait(timeout);
}

std::string LocalFederation::SiteLog(const std::string& site) const {
  return sites_.at(site)->LogTail(6000);
}

int LocalFederation::RunReference(const std::vector<std::string>& extra_args,
                                  std::chrono::seconds timeout) {
  std::vector<std::string> args = {std::string(STRAIT_BINARY_DIR) + "/tools/strait", "train",
                                   "--config", config(), "--out", ReferenceDir()};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  tools::Process train(args, dir_.File("reference.log"));
  return train.Wait(timeout);
}

}  // namespace strait::testing
