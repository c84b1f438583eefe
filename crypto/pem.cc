#include "crypto/pem.h"

#include <fcntl.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::crypto {
namespace {

absl::StatusOr<BioPtr> ReadBio(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  STRAIT_OPENSSL_CHECK(bio.get());
  return bio;
}

absl::StatusOr<std::string> BioContents(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  if (size < 0 || (size > 0 && data == nullptr))
    return absl::InternalError("BIO_get_mem_data failed");
  return std::string(data, static_cast<size_t>(size));
}

int RefusePassword(char*, int, int, void*) { return 0; }

}  // namespace

absl::StatusOr<X509Ptr> ParseCertificatePem(absl::string_view pem) {
  if (pem.size() > (1 << 20))
    return absl::InvalidArgumentError("certificate PEM larger than 1 MiB");
  STRAIT_ASSIGN_OR_RETURN(BioPtr bio, ReadBio(pem));
  X509Ptr certificate(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!certificate) {
    ERR_clear_error();
    return absl::InvalidArgumentError("no PEM certificate found (expected BEGIN CERTIFICATE)");
  }
  return certificate;
}

absl::StatusOr<EvpPkeyPtr> ParsePrivateKeyPem(absl::string_view pem) {
  if (pem.size() > (1 << 20))
    return absl::InvalidArgumentError("private key PEM larger than 1 MiB");
  STRAIT_ASSIGN_OR_RETURN(BioPtr bio, ReadBio(pem));
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, RefusePassword, nullptr));
  if (!key) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "no usable PEM private key found (expected an unencrypted BEGIN PRIVATE KEY)");
  }
  return key;
}

absl::StatusOr<std::string> CertificateToPem(X509* certificate) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  STRAIT_OPENSSL_CHECK(bio.get());
  STRAIT_OPENSSL_CHECK(PEM_write_bio_X509(bio.get(), certificate));
  return BioContents(bio.get());
}

absl::StatusOr<std::string> PrivateKeyToPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  STRAIT_OPENSSL_CHECK(bio.get());
  STRAIT_OPENSSL_CHECK(
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr));
  return BioContents(bio.get());
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

absl::Status WritePemFile(const std::string& path, absl::string_view contents, int mode,
                          bool overwrite) {
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  // O_EXCL and the mode at creation: the key is never readable by others, not even briefly.
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", temp, ": ", std::strerror(errno)));
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  bool ok = written == contents.size() && fchmod(fd, mode) == 0 && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  // link() fails when `path` exists, so without `overwrite` an existing file is never replaced.
  if (ok)
    ok = (overwrite ? rename(temp.c_str(), path.c_str()) : link(temp.c_str(), path.c_str())) == 0;
  const int saved_errno = errno;
  unlink(temp.c_str());
  if (!ok && saved_errno == EEXIST) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, " exists; refusing to overwrite it (use --force)"));
  }
  if (!ok) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(saved_errno)));
  }
  return absl::OkStatus();
}

}  // namespace strait::crypto
