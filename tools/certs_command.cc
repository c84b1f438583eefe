// `strait certs init|issue|show`: the federation's certificates (DESIGN.md §5, docs/security.md).
// Everything goes through crypto/ (OpenSSL's C API); nothing shells out to the openssl tool.
//
// Layout of --dir, matching the job spec's tls: defaults:
//   ca.pem, ca.key            federation CA (init)
//   gateway.pem, gateway.key  the gateway's server certificate (issue --gateway)
//   <site>.pem, <site>.key    one client certificate per site (issue --site)
// Keys are written with mode 0600 and never overwritten without --force; they are never printed.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "core/status.h"
#include "crypto/certificates.h"
#include "crypto/pem.h"
#include "tools/command.h"

namespace strait::tools {
namespace {

namespace fs = std::filesystem;

struct CertsFlags {
  std::string dir = "certs";
  std::string name = "strait";
  std::string gateway_hosts;
  std::string site;
  int days = 365;
  bool force = false;
  std::vector<std::string> files;
};

std::string Utc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", t, absl::UTCTimeZone());
}

void PrintInfo(const crypto::CertificateInfo& info) {
  std::printf("subject:     %s\n", info.subject.c_str());
  std::printf("issuer:      %s\n", info.issuer.c_str());
  if (!info.subject_alt_names.empty()) {
    std::printf("SANs:        %s\n", absl::StrJoin(info.subject_alt_names, ", ").c_str());
  }
  if (!info.site_id.empty()) std::printf("site id:     %s\n", info.site_id.c_str());
  std::printf("valid:       %s .. %s%s\n", Utc(info.not_before).c_str(),
              Utc(info.not_after).c_str(),
              absl::Now() > info.not_after    ? "  (EXPIRED)"
              : absl::Now() < info.not_before ? "  (NOT YET VALID)"
                                              : "");
  std::printf("usage:       %s\n",
              info.is_ca ? "CA" : absl::StrJoin(info.extended_key_usage, ", ").c_str());
  std::printf("serial:      %s\n", info.serial_hex.c_str());
  std::printf("sha256:      %s\n", info.sha256_fingerprint.c_str());
}

// Writes a certificate and its key as <dir>/<stem>.pem and <dir>/<stem>.key, refusing to replace
// either unless `force`, so that a key is never lost by accident.
absl::Status WritePair(const std::string& dir, const std::string& stem,
                       const crypto::CertifiedKey& pair, bool force) {
  const std::string cert_path = (fs::path(dir) / (stem + ".pem")).string();
  const std::string key_path = (fs::path(dir) / (stem + ".key")).string();
  if (!force) {
    for (const std::string& path : {key_path, cert_path}) {
      if (fs::exists(path)) {
        return absl::AlreadyExistsError(
            absl::StrCat(path, " exists; refusing to overwrite it (use --force)"));
      }
    }
  }
  STRAIT_RETURN_IF_ERROR(crypto::WritePemFile(key_path, pair.key_pem, 0600, force));
  STRAIT_RETURN_IF_ERROR(crypto::WritePemFile(cert_path, pair.certificate_pem, 0644, force));
  std::printf("wrote %s and %s (key mode 0600)\n", cert_path.c_str(), key_path.c_str());
  return absl::OkStatus();
}

absl::Status EnsureDir(const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  return absl::OkStatus();
}

crypto::CertificateOptions Validity(const CertsFlags& flags) {
  return {.validity = absl::Hours(24) * flags.days};
}

absl::Status RunInit(const CertsFlags& flags) {
  STRAIT_RETURN_IF_ERROR(EnsureDir(flags.dir));
  STRAIT_ASSIGN_OR_RETURN(crypto::CertifiedKey ca, crypto::CreateCa(flags.name, Validity(flags)));
  STRAIT_RETURN_IF_ERROR(WritePair(flags.dir, "ca", ca, flags.force));
  STRAIT_ASSIGN_OR_RETURN(crypto::CertificateInfo info,
                          crypto::DescribeCertificate(ca.certificate_pem));
  PrintInfo(info);
  return absl::OkStatus();
}

absl::Status RunIssue(const CertsFlags& flags) {
  if (flags.gateway_hosts.empty() == flags.site.empty()) {
    return absl::InvalidArgumentError(
        "issue needs exactly one of --gateway HOST[,HOST...] or --site ID");
  }
  const fs::path dir(flags.dir);
  crypto::CertifiedKey ca;
  STRAIT_ASSIGN_OR_RETURN(ca.certificate_pem, crypto::ReadPemFile((dir / "ca.pem").string()));
  STRAIT_ASSIGN_OR_RETURN(ca.key_pem, crypto::ReadPemFile((dir / "ca.key").string()));
  crypto::CertifiedKey issued;
  std::string stem;
  if (!flags.site.empty()) {
    STRAIT_ASSIGN_OR_RETURN(issued, crypto::IssueSiteCertificate(ca, flags.site, Validity(flags)));
    stem = flags.site;
  } else {
    const std::vector<std::string> hosts =
        absl::StrSplit(flags.gateway_hosts, ',', absl::SkipEmpty());
    STRAIT_ASSIGN_OR_RETURN(issued, crypto::IssueGatewayCertificate(ca, hosts, Validity(flags)));
    stem = "gateway";
  }
  STRAIT_RETURN_IF_ERROR(WritePair(flags.dir, stem, issued, flags.force));
  STRAIT_ASSIGN_OR_RETURN(crypto::CertificateInfo info,
                          crypto::DescribeCertificate(issued.certificate_pem));
  PrintInfo(info);
  return absl::OkStatus();
}

absl::Status RunShow(const CertsFlags& flags) {
  for (size_t i = 0; i < flags.files.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(std::string pem, crypto::ReadPemFile(flags.files[i]));
    absl::StatusOr<crypto::CertificateInfo> info = crypto::DescribeCertificate(pem);
    if (!info.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flags.files[i], ": ", info.status().message()));
    }
    if (flags.files.size() > 1) std::printf("%s%s:\n", i > 0 ? "\n" : "", flags.files[i].c_str());
    PrintInfo(*info);
  }
  return absl::OkStatus();
}

// Runs `run` and maps its Status to the exit code (2: bad input, 1: any other failure).
void Finish(const absl::Status& status, int* exit_code) {
  if (status.ok()) return;
  std::fprintf(stderr, "strait certs: %s\n", std::string(status.message()).c_str());
  *exit_code = status.code() == absl::StatusCode::kInvalidArgument ||
                       status.code() == absl::StatusCode::kAlreadyExists ||
                       status.code() == absl::StatusCode::kNotFound
                   ? 2
                   : 1;
}

}  // namespace

void AddCertsCommand(CLI::App& app, int* exit_code) {
  CLI::App* certs = app.add_subcommand(
      "certs", "Make the federation's certificates: a CA, the gateway's and one per site");
  certs->require_subcommand(1);
  auto flags = std::make_shared<CertsFlags>();
  auto add_common = [&](CLI::App* command) {
    command->add_option("--dir", flags->dir, "Folder of ca.pem/ca.key and the issued files")
        ->capture_default_str();
    command->add_option("--days", flags->days, "Validity in days")
        ->capture_default_str()
        ->check(CLI::Range(1, 36500));
    command->add_flag("--force", flags->force, "Overwrite existing certificates and keys");
  };

  CLI::App* init =
      certs->add_subcommand("init", "Create the federation CA (ECDSA P-256): ca.pem, ca.key");
  add_common(init);
  init->add_option("--name", flags->name, "Federation name, put in the CA's subject")
      ->capture_default_str();
  init->callback([=] { Finish(RunInit(*flags), exit_code); });

  CLI::App* issue = certs->add_subcommand(
      "issue",
      "Issue the gateway's server certificate (--gateway) or a site's client certificate "
      "(--site) with the CA in --dir");
  add_common(issue);
  auto* gateway = issue
                      ->add_option("--gateway", flags->gateway_hosts,
                                   "Host names and IP addresses the gateway is reached at (SANs)")
                      ->type_name("HOST[,HOST...]");
  auto* site = issue->add_option("--site", flags->site, "Site id (the certificate's identity)")
                   ->type_name("ID");
  gateway->excludes(site);
  issue->callback([=] { Finish(RunIssue(*flags), exit_code); });

  CLI::App* show = certs->add_subcommand(
      "show", "Print subject, SANs, validity, issuer, serial and fingerprint of certificates");
  show->add_option("files", flags->files, "PEM certificate files")->required()->type_name("FILE");
  show->callback([=] { Finish(RunShow(*flags), exit_code); });
}

}  // namespace strait::tools
