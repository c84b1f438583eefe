#include "harness/local_federation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace strait::harness {

Executables Executables::Find() {
  return {FindStraitExecutable("strait-gateway"), FindStraitExecutable("strait-site"),
          FindStraitExecutable("strait")};
}

Executables Executables::InBuildTree(const std::string& binary_dir) {
  return {binary_dir + "/gateway/strait-gateway", binary_dir + "/site/strait-site",
          binary_dir + "/tools/strait"};
}

LocalFederation::LocalFederation(const std::string& yaml, const std::vector<std::string>& sites,
                                 Executables executables)
    : executables_(std::move(executables)) {
  Init(yaml, sites);
}

LocalFederation::LocalFederation(const std::string& yaml, const std::vector<std::string>& sites,
                                 Executables executables, const std::string& workdir)
    : dir_(workdir), executables_(std::move(executables)) {
  Init(yaml, sites);
}

void LocalFederation::Init(const std::string& yaml, const std::vector<std::string>& sites) {
  site_ids_ = sites;
  std::error_code error;
  if (!std::filesystem::exists(dir_.File("certs/ca.pem"), error)) {
    certificates_ = MakeCertificates(dir_.File("certs"), sites).status();
  }
  std::ofstream(config()) << yaml;
}

LocalFederation::~LocalFederation() {
  sites_.clear();  // Sites first, so none is left waiting for a gateway that is gone.
  gateway_.reset();
}

bool LocalFederation::StartGateway(const std::vector<std::string>& extra_args, std::string* error) {
  if (!certificates_.ok()) {
    *error = "certificates: " + certificates_.ToString();
    return false;
  }
  gateway_args_ = extra_args;
  std::vector<std::string> args = {executables_.gateway,
                                   "-c",
                                   config(),
                                   "--listen",
                                   "127.0.0.1:" + gateway_port_,
                                   "--ready-file",
                                   dir_.File("gateway.ready")};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const bool dashboard = std::find(args.begin(), args.end(), "--dashboard") != args.end();
  if (!dashboard) args.push_back("--no-dashboard");
  gateway_.reset();  // A restart: the old gateway goes first, with its ready file.
  std::error_code ignored;
  std::filesystem::remove(dir_.File("gateway.ready"), ignored);
  gateway_ = std::make_unique<Process>(args, GatewayLogFile(), append_logs_);
  std::vector<std::string> keys = {"grpc"};
  if (dashboard) keys.push_back("http");
  auto ready =
      gateway_->WaitForReadyFile(dir_.File("gateway.ready"), keys, std::chrono::seconds(60));
  if (ready.empty()) {
    *error = gateway_->LogTail();
    return false;
  }
  gateway_address_ = "127.0.0.1:" + ready["grpc"];
  gateway_port_ = "0";
  if (dashboard) dashboard_port_ = ready["http"];
  return true;
}

bool LocalFederation::RestartGateway(std::string* error) {
  gateway_port_ = gateway_address_.substr(gateway_address_.rfind(':') + 1);
  return StartGateway(gateway_args_, error);
}

absl::Status LocalFederation::EmulateWan(const LinkProfile& profile,
                                         const std::vector<std::string>& sites) {
  if (wan_thread_ == nullptr) wan_thread_ = std::make_shared<EmulatorThread>();
  for (const std::string& site : sites.empty() ? site_ids_ : sites) {
    absl::StatusOr<std::unique_ptr<LinkEmulator>> link = LinkEmulator::Start(
        "127.0.0.1:0", gateway_address_, profile, LinkEmulator::kDialTimeout, wan_thread_);
    if (!link.ok()) return link.status();
    wan_links_[site] = *std::move(link);
  }
  return absl::OkStatus();
}

double LocalFederation::WanCpuSeconds() const {
  return wan_thread_ == nullptr ? 0 : wan_thread_->CpuSeconds();
}

void LocalFederation::StartSite(const std::string& site, const std::vector<std::string>& extra_args,
                                const std::string& gateway) {
  std::string dial = gateway;
  if (dial.empty()) dial = wan_links_.count(site) ? wan_links_[site]->address() : gateway_address_;
  std::vector<std::string> args = {executables_.site, "-c", config(), "--site",    site,
                                   "--gateway",       dial, "--out",  OutDir(site)};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  sites_[site] = std::make_unique<Process>(args, SiteLogFile(site), append_logs_);
  CapCpus(site, *sites_[site]);
}

absl::Status LocalFederation::LimitSiteCpus(const std::string& site, double cores) {
  // A site's new quota takes the old one's cgroup name: the old one goes first (its processes must
  // have exited).
  quotas_.erase(site);
  absl::StatusOr<std::unique_ptr<CpuQuota>> quota = CpuQuota::Create(site, cores);
  if (!quota.ok()) return quota.status();
  quotas_[site] = *std::move(quota);
  return absl::OkStatus();
}

absl::Status LocalFederation::LimitSiteCpus(const std::vector<std::string>& caps) {
  absl::StatusOr<std::map<std::string, double>> cores = ParseSiteCpus(caps, site_ids_);
  if (!cores.ok()) return cores.status();
  for (const auto& [site, n] : *cores) {
    if (absl::Status s = LimitSiteCpus(site, n); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--site-cpus ", site, "=", n, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

void LocalFederation::CapCpus(const std::string& site, Process& process) {
  auto it = quotas_.find(site);
  if (it == quotas_.end()) return;
  if (absl::Status s = it->second->Add(process.pid()); !s.ok()) {
    std::fprintf(stderr, "strait: site %s runs without its CPU quota: %s\n", site.c_str(),
                 std::string(s.message()).c_str());
  }
}

namespace {

// A port of 127.0.0.1 that is free now (the kernel's pick for port 0); a process binds it soon.
std::string FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  std::string port = "0";
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
    port = std::to_string(ntohs(addr.sin_port));
  }
  if (fd >= 0) close(fd);
  return port;
}

}  // namespace

std::string LocalFederation::RankName(const std::string& site, int rank) {
  return site + ".rank" + std::to_string(rank);
}

void LocalFederation::StartSiteRanks(const std::string& site, int machines,
                                     const std::vector<std::string>& extra_args) {
  leaders_[site] = "127.0.0.1:" + FreeLoopbackPort();
  StartLeader(site, extra_args);
  for (int r = 1; r < machines; ++r) StartRank(site, r, extra_args);
}

void LocalFederation::StartLeader(const std::string& site,
                                  const std::vector<std::string>& extra_args) {
  std::vector<std::string> leader = {"--rank", "0", "--leader", leaders_.at(site)};
  leader.insert(leader.end(), extra_args.begin(), extra_args.end());
  sites_[site].reset();  // A restart: the old process goes first.
  StartSite(site, leader);
}

void LocalFederation::StartRank(const std::string& site, int rank,
                                const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {
      executables_.site,    "-c",       config(),         "--site", site, "--rank",
      std::to_string(rank), "--leader", leaders_.at(site)};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const std::string name = RankName(site, rank);
  sites_[name].reset();  // A restart: the old process goes first.
  sites_[name] = std::make_unique<Process>(args, SiteLogFile(name), append_logs_);
  CapCpus(site, *sites_[name]);
}

int LocalFederation::WaitSite(const std::string& site, std::chrono::seconds timeout) {
  return sites_.at(site)->Wait(timeout);
}

absl::Status LocalFederation::WaitSites(const std::vector<std::string>& sites,
                                        std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> running = sites;
  while (!running.empty()) {
    for (auto it = running.begin(); it != running.end();) {
      const int code = WaitSite(*it, std::chrono::seconds(0));
      if (code != 0 && code != -1) {
        return absl::InternalError(
            absl::StrCat("site ", *it, " exited with code ", code, ":\n", SiteLog(*it)));
      }
      it = code == 0 ? running.erase(it) : it + 1;
    }
    if (running.empty()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("site ", running.front(),
                                                      " still runs after ", timeout.count(),
                                                      " s:\n", SiteLog(running.front())));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::OkStatus();
}

std::string LocalFederation::SiteLog(const std::string& site) const {
  return sites_.at(site)->LogTail(6000);
}

int LocalFederation::RunReference(const std::vector<std::string>& extra_args,
                                  std::chrono::seconds timeout) {
  std::vector<std::string> args = {executables_.strait, "train", "--config", config(), "--out",
                                   ReferenceDir()};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  Process train(args, dir_.File("reference.log"));
  return train.Wait(timeout);
}

std::string DefaultJobSpec(const std::string& name) {
  const std::string in_tree = STRAIT_SOURCE_DIR "/configs/" + name;
  std::error_code error;
  return std::filesystem::exists(in_tree, error) ? in_tree : "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> LogFollower::NewLines() {
  std::ifstream in(path_, std::ios::binary);
  std::vector<std::string> lines;
  if (!in) return lines;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  offset_ += text.size();
  partial_ += text;
  size_t start = 0;
  for (size_t newline; (newline = partial_.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    lines.push_back(partial_.substr(start, newline - start));
  }
  partial_.erase(0, start);
  return lines;
}

}  // namespace strait::harness
