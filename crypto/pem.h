// PEM in and out: parsing certificates and private keys, and reading/writing PEM files with the
// right permissions. Used by the rest of crypto and by the gRPC glue to load TLS material.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "crypto/openssl_check.h"

namespace strait::crypto {

// The first certificate in `pem`. kInvalidArgument when there is none or it does not parse.
absl::StatusOr<X509Ptr> ParseCertificatePem(absl::string_view pem);
// The first private key in `pem` (PKCS#8 or traditional; encrypted keys are refused, never
// prompted for). Error messages never quote the input.
absl::StatusOr<EvpPkeyPtr> ParsePrivateKeyPem(absl::string_view pem);

absl::StatusOr<std::string> CertificateToPem(X509* certificate);
// PKCS#8, unencrypted.
absl::StatusOr<std::string> PrivateKeyToPem(EVP_PKEY* key);

// Reads a whole PEM file (certificate, key or deny list). kNotFound when it does not exist.
absl::StatusOr<std::string> ReadPemFile(const std::string& path);

// Writes `contents` to `path` with permission bits `mode` (0600 for keys, 0644 for certificates).
// Refuses with kAlreadyExists when the file exists, unless `overwrite`. Writes a temporary file in
// the same folder and renames it, so a reader never sees a partial file.
absl::Status WritePemFile(const std::string& path, absl::string_view contents, int mode,
                          bool overwrite);

}  // namespace strait::crypto
