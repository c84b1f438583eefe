// A small federation PKI for tests: a CA, certificates that must be accepted, and certificates that
// must be refused (other CA, expired, not yet valid). Built once per process.
#pragma once

#include <gtest/gtest.h>

#include "crypto/certificates.h"

namespace strait::crypto::testing {

struct TestPki {
  CertifiedKey ca;
  CertifiedKey other_ca;  // Same federation name, different key: a stranger's CA.
  CertifiedKey gateway;   // Hosts localhost, 127.0.0.1.
  CertifiedKey east;      // Valid site certificates.
  CertifiedKey west;
  CertifiedKey east_other_ca;  // Site "east" issued by other_ca.
  CertifiedKey east_expired;   // Valid from 2 days ago to 1 day ago.
  CertifiedKey east_not_yet;   // Valid from tomorrow.
};

inline const TestPki& Pki() {
  static const TestPki* pki = [] {
    auto ok = [](absl::StatusOr<CertifiedKey> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? *r : CertifiedKey{};
    };
    auto* p = new TestPki;
    p->ca = ok(CreateCa("test-fed"));
    p->other_ca = ok(CreateCa("test-fed"));
    p->gateway = ok(IssueGatewayCertificate(p->ca, {"localhost", "127.0.0.1"}));
    p->east = ok(IssueSiteCertificate(p->ca, "east"));
    p->west = ok(IssueSiteCertificate(p->ca, "west"));
    p->east_other_ca = ok(IssueSiteCertificate(p->other_ca, "east"));
    const absl::Time now = absl::Now();
    p->east_expired = ok(IssueSiteCertificate(
        p->ca, "east", {.not_before = now - absl::Hours(48), .validity = absl::Hours(24)}));
    p->east_not_yet = ok(IssueSiteCertificate(
        p->ca, "east", {.not_before = now + absl::Hours(24), .validity = absl::Hours(24)}));
    return p;
  }();
  return *pki;
}

}  // namespace strait::crypto::testing
