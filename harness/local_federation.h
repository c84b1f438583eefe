// A federation on this machine's loopback: a work directory with certificates and the job spec, a
// strait-gateway process and one strait-site process per site, all stopped when the LocalFederation
// goes out of scope. Shared by `strait demo`, `strait bench e2e` and the integration tests.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "harness/cpu_quota.h"
#include "harness/subprocess.h"
#include "harness/test_certificates.h"
#include "harness/wan/emulator_thread.h"
#include "harness/wan/link_emulator.h"
#include "harness/wan/link_profile.h"

namespace strait::harness {

// Where the three Strait executables are.
struct Executables {
  std::string gateway, site, strait;
  // Beside the running executable or in its build tree (FindStraitExecutable); empty when missing.
  static Executables Find();
  // In a build tree rooted at `binary_dir` (gateway/, site/, tools/).
  static Executables InBuildTree(const std::string& binary_dir);
};

class LocalFederation {
 public:
  // A fresh work directory with certs/ for `sites` and `yaml` written as fed.yaml (relative paths
  // in `yaml` resolve against that directory). Certificate errors surface in StartGateway.
  LocalFederation(const std::string& yaml, const std::vector<std::string>& sites,
                  Executables executables = Executables::Find());
  // The same in `workdir`, which is kept; its certificates are reused when certs/ca.pem exists.
  LocalFederation(const std::string& yaml, const std::vector<std::string>& sites,
                  Executables executables, const std::string& workdir);
  // Stops the sites, then the gateway; removes the work directory unless KeepDirectory() was
  // called.
  ~LocalFederation();
  LocalFederation(const LocalFederation&) = delete;
  LocalFederation& operator=(const LocalFederation&) = delete;

  const TempDir& dir() const { return dir_; }
  void KeepDirectory() { dir_.Keep(); }
  // Processes started from now on write after their log's earlier content (restarts included)
  // instead of replacing it.
  void AppendLogs() { append_logs_ = true; }
  std::string config() const { return dir_.File("fed.yaml"); }

  // Starts strait-gateway on a free loopback port (no dashboard unless `extra_args` asks for one)
  // and waits until it serves; false with the log tail in `error` otherwise. A gateway started
  // earlier is stopped first.
  bool StartGateway(const std::vector<std::string>& extra_args, std::string* error);
  // Starts the gateway again (after it died or was killed) on the port it had, with the same
  // arguments, so that sites find it where they left it.
  bool RestartGateway(std::string* error);
  const std::string& gateway_address() const { return gateway_address_; }
  // The dashboard's port ("" when the gateway serves none).
  const std::string& dashboard_port() const { return dashboard_port_; }
  Process& gateway() { return *gateway_; }

  // Puts an emulated link with `profile` between every site and the gateway (`strait wan`'s
  // emulator; all the links on one thread of this process): sites started from now on without a
  // `gateway` of their own dial it. The links stay across restarts of the sites and of the gateway
  // (which keeps its port). Call after StartGateway. Errors: the emulator's (a profile it refuses,
  // no port).
  // `sites` non-empty: only those sites get the link (the others dial the gateway directly).
  absl::Status EmulateWan(const LinkProfile& profile, const std::vector<std::string>& sites = {});
  // CPU seconds the emulated links' thread has used so far (0 without them).
  double WanCpuSeconds() const;

  // Starts strait-site for `site` (--out <dir>/out/<site>) with `extra_args`, dialling the gateway
  // at `gateway` (default: its emulated link, or where the gateway listens; a fault test may put a
  // proxy in between).
  void StartSite(const std::string& site, const std::vector<std::string>& extra_args = {},
                 const std::string& gateway = "");
  // Caps the CPU of `site`'s processes started from now on (all its ranks) at `cores` CPUs with a
  // cgroup of their own (tools/cpu_quota.h); the error says why where cgroups are not writable.
  // A site capped already gets the new quota instead (its processes must have exited).
  absl::Status LimitSiteCpus(const std::string& site, double cores);
  // The same from command-line values "SITE=CORES" (e.g. "dc-b=0.3"); InvalidArgument for one
  // that is malformed or names no site of the federation.
  absl::Status LimitSiteCpus(const std::vector<std::string>& caps);

  // A site of `machines` > 1 ranks, all on loopback: rank 0 (the leader, started as `site`, with
  // --out) listening for the others on a free port, and ranks 1 .. machines - 1 as processes named
  // RankName(site, r). Every rank gets `extra_args`.
  void StartSiteRanks(const std::string& site, int machines,
                      const std::vector<std::string>& extra_args = {});
  // (Re)starts follower rank `rank` of `site` (after StartSiteRanks).
  void StartRank(const std::string& site, int rank,
                 const std::vector<std::string>& extra_args = {});
  // Restarts the leader (rank 0) of `site` (after StartSiteRanks) where its ranks look for it.
  void StartLeader(const std::string& site, const std::vector<std::string>& extra_args = {});
  // The emulated link between `site` and the gateway (EmulateWan), or null.
  LinkEmulator* link(const std::string& site) {
    auto it = wan_links_.find(site);
    return it == wan_links_.end() ? nullptr : it->second.get();
  }
  static std::string RankName(const std::string& site, int rank);
  Process& site(const std::string& site) { return *sites_.at(site); }
  // Waits for site `site` to exit; its exit code (-1 on timeout).
  int WaitSite(const std::string& site, std::chrono::seconds timeout);
  // Waits for all of `sites` to exit 0, and stops at the first that exits with another code: its
  // peers wait for a failed site to come back (by design), so waiting for them one by one would
  // report the failure only at the timeout. The error names the site, its code (-1: still running
  // at the timeout) and its log's tail.
  absl::Status WaitSites(const std::vector<std::string>& sites, std::chrono::seconds timeout);
  std::string SiteLog(const std::string& site) const;
  std::string SiteLogFile(const std::string& site) const { return dir_.File(site + ".log"); }
  std::string GatewayLogFile() const { return dir_.File("gateway.log"); }
  std::string OutDir(const std::string& site) const { return dir_.File("out/" + site); }

  // Runs `strait train` on the same job spec into <dir>/reference; its exit code.
  int RunReference(const std::vector<std::string>& extra_args, std::chrono::seconds timeout);
  std::string ReferenceDir() const { return dir_.File("reference"); }

 private:
  void Init(const std::string& yaml, const std::vector<std::string>& sites);
  // Puts a process of `site` under the site's CPU quota, if it has one.
  void CapCpus(const std::string& site, Process& process);

  TempDir dir_;
  Executables executables_;
  std::map<std::string, std::string> leaders_;  // Site -> its leader's address for its ranks.
  // Site -> its CPU quota; declared before the processes, so that it outlives them.
  std::map<std::string, std::unique_ptr<CpuQuota>> quotas_;
  absl::Status certificates_;
  std::unique_ptr<Process> gateway_;
  std::string gateway_address_;
  std::string gateway_port_ = "0";  // 0: a free one.
  std::vector<std::string> gateway_args_;
  std::string dashboard_port_;
  std::vector<std::string> site_ids_;
  std::shared_ptr<EmulatorThread> wan_thread_;                      // All the links run on it.
  std::map<std::string, std::unique_ptr<LinkEmulator>> wan_links_;  // Outlive the sites.
  std::map<std::string, std::unique_ptr<Process>> sites_;
  bool append_logs_ = false;
};

// This source tree's configs/<name> (fashion-mlp-3site.yaml: the default of `strait demo` and
// `strait bench e2e`); "" when the source tree is not there.
std::string DefaultJobSpec(const std::string& name = "fashion-mlp-3site.yaml");

// A whole file as text ("" when it cannot be read).
std::string ReadFile(const std::string& path);

// Follows a growing log file: each call returns the complete lines added since the previous call.
class LogFollower {
 public:
  explicit LogFollower(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> NewLines();

 private:
  std::string path_;
  uint64_t offset_ = 0;
  std::string partial_;
};

}  // namespace strait::harness
