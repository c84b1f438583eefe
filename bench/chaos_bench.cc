// `strait bench chaos`: a chaos soak (DESIGN.md §7). A federation trains on loopback, undisturbed,
// to its end; then the same job trains again while a seeded schedule injects a fault about every
// `--every` seconds for `--minutes`: kill -9 of a site, of a follower rank, of the gateway, a cut
// link (through an emulated WAN link) and a stall (SIGSTOP for a few seconds, longer than the
// heartbeat timeout at times). A supervisor restarts whatever died (sites with --resume, the
// gateway on its port). With lossless links the chaos run must end with every site's parameters
// and optimizer state bit-identical to the undisturbed run's. Prints each fault and how long the
// federation took to make new progress after it, the longest recovery, and the work lost (steps
// computed again after rollbacks).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/command.h"
#include "bench/federation_run.h"
#include "core/job_spec.h"
#include "core/status.h"
#include "harness/local_federation.h"
#include "harness/wan/link_profile.h"
#include "site/nn/checkpoint.h"

namespace strait::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

struct ChaosOptions {
  std::string config;  // "" = the built-in job below
  double minutes = 10;
  double every_s = 16;  // With the recoveries between them, 25 or more faults in 10 minutes.
  std::string seeds = "1";
  int64_t steps = 0;  // 0: the job's
};

// Three sites, the middle one two ranks, and two replicas of the pipeline: every kind of process a
// federation has. Lossless links (zstd), checkpoints every 20 steps, a 5 s heartbeat timeout.
constexpr char kJob[] = R"(name: chaos
gateway: {memory_budget: 128MiB, heartbeat_timeout: 5s}
model: {family: mlp, input: 784, hidden: [256, 256, 256], classes: 10, dropout: 0.1, init_seed: 3}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist, seed: 5}
training:
  steps: 6000
  global_batch: 64
  microbatches: 4
  schedule: 1f1b
  grad_clip: 1.0
  optimizer: {name: adamw, lr: 0.001}
  sync: every_step
  checkpoint: {every: 20, dir: checkpoints, keep: 4}
sites:
  - {id: dc-a, layers: [0, 1]}
  - {id: dc-b, layers: [1, 3], machines: 2}
  - {id: dc-c, layers: [3, 4]}
replicas:
  - [dc-a, dc-b, dc-c]
  - [dc-d, dc-e, dc-f]
links:
  - {between: [dc-a, dc-b], forward: zstd, backward: zstd}
  - {between: [dc-b, dc-c], forward: shuffle+zstd, backward: zstd}
)";

enum class Fault { kKillSite, kKillRank, kKillGateway, kCutLink, kStall };
constexpr Fault kFaults[] = {Fault::kKillSite, Fault::kKillRank, Fault::kKillGateway,
                             Fault::kCutLink, Fault::kStall};

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kKillSite:
      return "kill_site";
    case Fault::kKillRank:
      return "kill_rank";
    case Fault::kKillGateway:
      return "kill_gateway";
    case Fault::kCutLink:
      return "cut_link";
    case Fault::kStall:
      return "stall";
  }
  return "?";
}

struct FaultRecord {
  double at_s = 0;
  Fault kind = Fault::kKillSite;
  std::string target;
  double recovered_after_s = -1;  // -1: not recovered
};

// The processes of a federation and how each is (re)started: sites by id (every replica's), a
// multi-rank site's followers by RankName.
class Federation {
 public:
  Federation(harness::LocalFederation& fed, const JobSpec& spec, bool wan)
      : fed_(fed), spec_(spec), wan_(wan) {}

  absl::Status Start() {
    std::string error;
    if (!fed_.StartGateway({}, &error)) return absl::UnavailableError(error);
    if (wan_) {
      STRAIT_RETURN_IF_ERROR(fed_.EmulateWan(*harness::NamedProfile("metro")));
    }
    for (int slot = 0; slot < spec_.SiteSlots(); ++slot) {
      const std::string& id = spec_.SiteIdAt(slot);
      const int machines = spec_.sites[slot % spec_.Stages()].machines;
      if (machines > 1) {
        fed_.StartSiteRanks(id, machines, kArgs);
      } else {
        fed_.StartSite(id, kArgs);
      }
      processes_.push_back({id, 0, machines});
      for (int r = 1; r < machines; ++r) processes_.push_back({id, r, machines});
    }
    return absl::OkStatus();
  }

  // Restarts every process that died (not one that finished); the gateway first.
  int RestartTheDead() {
    int restarted = 0;
    if (!fed_.gateway().Running()) {
      std::string error;
      if (!fed_.RestartGateway(&error)) std::fprintf(stderr, "chaos: gateway: %s\n", error.c_str());
      ++restarted;
    }
    for (Proc& p : processes_) {
      if (p.done) continue;
      harness::Process& process = fed_.site(Name(p));
      if (process.Running()) continue;
      const int code = process.Wait(seconds(1));
      if (code == 0) {
        p.done = true;
        continue;
      }
      std::vector<std::string> args = kArgs;
      args.push_back("--resume");
      if (p.rank > 0) {
        fed_.StartRank(p.site, p.rank, args);
      } else if (p.machines > 1) {
        fed_.StartLeader(p.site, args);
      } else {
        fed_.StartSite(p.site, args);
      }
      ++restarted;
    }
    return restarted;
  }

  bool Finished() const {
    return std::all_of(processes_.begin(), processes_.end(), [](const Proc& p) { return p.done; });
  }

  // The newest checkpoint step that every site's leader has written (0 before any).
  int64_t CommonCheckpoint() const {
    int64_t common = -1;
    for (int slot = 0; slot < spec_.SiteSlots(); ++slot) {
      const std::string dir = fed_.dir().File("checkpoints/" + spec_.SiteIdAt(slot));
      int64_t newest = 0;
      std::error_code error;
      for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
        const std::string name = entry.path().filename().string();
        if (name.size() == 18 && name.rfind("step-", 0) == 0 && name.ends_with(".ckpt")) {
          newest = std::max<int64_t>(newest, std::atoll(name.substr(5, 8).c_str()));
        }
      }
      common = common < 0 ? newest : std::min(common, newest);
    }
    return std::max<int64_t>(common, 0);
  }

  // Injects `kind` on a target drawn from `random`; returns the target's name.
  std::string Inject(Fault kind, std::mt19937_64& random) {
    switch (kind) {
      case Fault::kKillGateway:
        fed_.gateway().Kill(SIGKILL);
        return "gateway";
      case Fault::kKillRank: {
        std::vector<Proc*> followers;
        for (Proc& p : processes_) {
          if (p.rank > 0 && !p.done) followers.push_back(&p);
        }
        if (followers.empty()) return Inject(Fault::kKillSite, random);
        Proc& p = *followers[random() % followers.size()];
        fed_.site(Name(p)).Kill(SIGKILL);
        return Name(p);
      }
      case Fault::kKillSite: {
        Proc& p = Leader(random);
        fed_.site(Name(p)).Kill(SIGKILL);
        return Name(p);
      }
      case Fault::kCutLink: {
        Proc& p = Leader(random);
        harness::LinkEmulator* link = fed_.link(p.site);
        if (link == nullptr) return Inject(Fault::kStall, random);
        link->Cut();
        pending_.push_back(
            {Clock::now() + RandomSeconds(random, 2, 8), [link] { link->Restore(); }});
        return p.site + " link";
      }
      case Fault::kStall: {
        Proc& p = Leader(random);
        harness::Process& process = fed_.site(Name(p));
        process.Kill(SIGSTOP);
        const pid_t pid = process.pid();
        pending_.push_back(
            {Clock::now() + RandomSeconds(random, 2, 12), [pid] { kill(pid, SIGCONT); }});
        return Name(p);
      }
    }
    return "";
  }

  // Runs the undo actions (restore a link, continue a process) that are due.
  void RunDue() {
    const auto now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->at <= now) {
        it->undo();
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  struct Proc {
    std::string site;
    int rank = 0;
    int machines = 1;
    bool done = false;
  };
  struct Pending {
    Clock::time_point at;
    std::function<void()> undo;
  };
  inline static const std::vector<std::string> kArgs = {"--threads", "1"};

  static std::string Name(const Proc& p) {
    return p.rank == 0 ? p.site : harness::LocalFederation::RankName(p.site, p.rank);
  }
  static Clock::duration RandomSeconds(std::mt19937_64& random, double lo, double hi) {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::uniform_real_distribution<double>(lo, hi)(random)));
  }
  Proc& Leader(std::mt19937_64& random) {
    std::vector<Proc*> leaders;
    for (Proc& p : processes_) {
      if (p.rank == 0 && !p.done) leaders.push_back(&p);
    }
    return *leaders[random() % leaders.size()];
  }

  harness::LocalFederation& fed_;
  const JobSpec& spec_;
  const bool wan_;
  std::vector<Proc> processes_;
  std::vector<Pending> pending_;
};

absl::StatusOr<JobSpec> ChaosJob(const ChaosOptions& o, std::string* yaml) {
  *yaml = o.config.empty() ? std::string(kJob) : harness::ReadFile(o.config);
  if (yaml->empty()) return absl::InvalidArgumentError(absl::StrCat("cannot read ", o.config));
  if (o.steps > 0) {
    const size_t at = yaml->find("steps:");
    if (at == std::string::npos) return absl::InvalidArgumentError("the job has no training.steps");
    yaml->replace(at, yaml->find('\n', at) - at, absl::StrCat("steps: ", o.steps));
  }
  return ParseJobSpec(*yaml, "chaos.yaml", "/");
}

std::vector<std::string> AllSiteIds(const JobSpec& spec) {
  std::vector<std::string> ids;
  for (int slot = 0; slot < spec.SiteSlots(); ++slot) ids.push_back(spec.SiteIdAt(slot));
  return ids;
}

// Trains the job to its end without faults; the seconds it took.
absl::StatusOr<double> RunUndisturbed(harness::LocalFederation& fed, const JobSpec& spec) {
  Federation f(fed, spec, /*wan=*/true);
  const auto start = Clock::now();
  STRAIT_RETURN_IF_ERROR(f.Start());
  while (!f.Finished()) {
    if (Clock::now() - start > kRunLimit) return absl::DeadlineExceededError("undisturbed run");
    if (f.RestartTheDead() > 0) return absl::InternalError("a process died in the undisturbed run");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Waits until the common checkpoint passes `before` (true) or `limit` passes (false), restarting
// what died and undoing what is due meanwhile.
bool WaitForProgress(Federation& f, int64_t before, Clock::time_point limit) {
  while (Clock::now() < limit) {
    f.RunDue();
    f.RestartTheDead();
    if (f.CommonCheckpoint() > before || f.Finished()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

// The chaos run: faults for o.minutes, then training to its end. The faults, in order.
absl::StatusOr<std::vector<FaultRecord>> RunChaos(harness::LocalFederation& fed,
                                                  const JobSpec& spec, const ChaosOptions& o,
                                                  uint64_t seed) {
  Federation f(fed, spec, /*wan=*/true);
  std::mt19937_64 random(seed);
  const auto start = Clock::now();
  const auto stop_faults = start + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(60 * o.minutes));
  STRAIT_RETURN_IF_ERROR(f.Start());
  std::vector<FaultRecord> faults;
  std::vector<Fault> bag;  // Every kind once per five faults, in a seeded order.
  while (Clock::now() < stop_faults && !f.Finished()) {
    const double gap = std::uniform_real_distribution<double>(0.75, 1.25)(random) * o.every_s;
    const auto next = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(gap));
    while (Clock::now() < next && !f.Finished()) {
      f.RunDue();
      f.RestartTheDead();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (f.Finished() || Clock::now() >= stop_faults) break;
    if (bag.empty()) {
      bag.assign(std::begin(kFaults), std::end(kFaults));
      std::shuffle(bag.begin(), bag.end(), random);
    }
    FaultRecord r;
    r.kind = bag.back();
    bag.pop_back();
    r.at_s = std::chrono::duration<double>(Clock::now() - start).count();
    const int64_t before = f.CommonCheckpoint();
    r.target = f.Inject(r.kind, random);
    const auto injected = Clock::now();
    if (WaitForProgress(f, before, injected + seconds(180))) {
      r.recovered_after_s = std::chrono::duration<double>(Clock::now() - injected).count();
    }
    std::printf("  fault %2zu at %6.1f s: %-12s %-16s %s\n", faults.size() + 1, r.at_s,
                FaultName(r.kind), r.target.c_str(),
                r.recovered_after_s < 0
                    ? "NOT RECOVERED within 180 s"
                    : absl::StrFormat("new progress after %.1f s", r.recovered_after_s).c_str());
    std::fflush(stdout);
    faults.push_back(r);
    if (r.recovered_after_s < 0) break;
  }
  while (!f.Finished()) {
    if (Clock::now() - start > kRunLimit) return absl::DeadlineExceededError("chaos run");
    f.RunDue();
    f.RestartTheDead();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return faults;
}

// Sites whose final parameters or optimizer state differ from the undisturbed run's.
std::vector<std::string> DifferingSites(harness::LocalFederation& calm,
                                        harness::LocalFederation& chaos,
                                        const std::vector<std::string>& sites) {
  std::vector<std::string> differ;
  for (const std::string& id : sites) {
    absl::StatusOr<site::CheckpointState> a = site::ReadCheckpoint(calm.OutDir(id) + "/final.ckpt");
    absl::StatusOr<site::CheckpointState> b =
        site::ReadCheckpoint(chaos.OutDir(id) + "/final.ckpt");
    const bool same = a.ok() && b.ok() && a->params.size() == b->params.size() &&
                      a->optimizer_state.size() == b->optimizer_state.size() &&
                      std::memcmp(a->params.data(), b->params.data(), 4 * a->params.size()) == 0 &&
                      std::memcmp(a->optimizer_state.data(), b->optimizer_state.data(),
                                  4 * a->optimizer_state.size()) == 0;
    if (!same) differ.push_back(id);
  }
  return differ;
}

// Steps the last stage computed in its run (its metrics.json's loss per step).
size_t StepsComputed(harness::LocalFederation& fed, const JobSpec& spec) {
  const nlohmann::json m = Metrics(fed.OutDir(spec.sites.back().id));
  return m.contains("loss") && m["loss"].is_array() ? m["loss"].size() : 0;
}

// Work lost to rollbacks, from the sites' logs (which keep every life of a process): each
// "training interrupted at step Y" and the "training again from step X" after it count Y - X steps
// computed again. The most any one site computed again.
int64_t StepsRedone(harness::LocalFederation& fed, const std::vector<std::string>& sites) {
  static const std::regex interrupted(R"(training interrupted at step (\d+))");
  static const std::regex again(R"(training again from step (\d+))");
  int64_t most = 0;
  for (const std::string& id : sites) {
    std::istringstream log(harness::ReadFile(fed.SiteLogFile(id)));
    int64_t redone = 0, reached = -1;
    std::smatch m;
    for (std::string line; std::getline(log, line);) {
      if (std::regex_search(line, m, interrupted)) {
        reached = std::stoll(m[1]);
      } else if (std::regex_search(line, m, again) && reached >= 0) {
        redone += std::max<int64_t>(0, reached - std::stoll(m[1]));
        reached = -1;
      }
    }
    most = std::max(most, redone);
  }
  return most;
}

void PrintSummary(const std::vector<FaultRecord>& faults, int64_t replayed, size_t steps,
                  const std::vector<std::string>& differ, size_t sites, uint64_t seed) {
  std::map<std::string, int> by_kind;
  int recovered = 0;
  const FaultRecord* longest = nullptr;
  for (const FaultRecord& r : faults) {
    ++by_kind[FaultName(r.kind)];
    if (r.recovered_after_s < 0) continue;
    ++recovered;
    if (longest == nullptr || r.recovered_after_s > longest->recovered_after_s) longest = &r;
  }
  std::string kinds;
  for (const auto& [kind, n] : by_kind)
    absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", kind, " ", n);
  std::printf("faults injected: %zu (%s); recovered %d/%zu", faults.size(), kinds.c_str(),
              recovered, faults.size());
  if (longest != nullptr) {
    std::printf("; longest recovery %.1f s (%s at %.0f s)", longest->recovered_after_s,
                FaultName(longest->kind), longest->at_s);
  }
  std::printf(
      "\nlost work: %lld steps computed again after rollbacks by the site that redid the "
      "most (of %zu; a killed process's steps since its last checkpoint are not counted)\n",
      static_cast<long long>(replayed), steps);
  std::printf("final state: %s\n",
              differ.empty() ? absl::StrCat("bit-identical to the undisturbed run on all ", sites,
                                            " sites (parameters and optimizer state)")
                                   .c_str()
                             : absl::StrCat("DIFFERS on ", absl::StrJoin(differ, ", ")).c_str());
  std::printf(
      "RESULT chaos seed=%llu faults=%zu kinds=%zu recovered=%d longest_recovery_s=%.1f "
      "replayed_steps=%lld identical=%d\n",
      static_cast<unsigned long long>(seed), faults.size(), by_kind.size(), recovered,
      longest != nullptr ? longest->recovered_after_s : 0.0, static_cast<long long>(replayed),
      differ.empty() ? 1 : 0);
}

int RunChaosBench(const ChaosOptions& o) {
  std::string yaml;
  absl::StatusOr<JobSpec> spec = ChaosJob(o, &yaml);
  if (!spec.ok()) {
    std::fprintf(stderr, "strait bench chaos: %s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  const std::vector<std::string> sites = AllSiteIds(*spec);
  harness::LocalFederation calm(yaml, sites);
  std::printf("chaos soak: %s, %d sites in %d pipeline(s); the undisturbed run first\n",
              spec->name.c_str(), spec->SiteSlots(), spec->Replicas());
  absl::StatusOr<double> calm_s = RunUndisturbed(calm, *spec);
  if (!calm_s.ok()) {
    calm.KeepDirectory();
    std::fprintf(stderr, "strait bench chaos: %s (logs in %s)\n",
                 std::string(calm_s.status().message()).c_str(), calm.dir().path().c_str());
    return 1;
  }
  // Its sites are done; its gateway would idle beside the chaos runs, taking CPU time from them.
  calm.gateway().Kill(SIGTERM);
  calm.gateway().Wait(std::chrono::seconds(30));
  const size_t steps = StepsComputed(calm, *spec);
  std::printf("undisturbed: %zu steps in %.0f s\n", steps, *calm_s);
  int failed = 0;
  for (const absl::string_view seed_text : absl::StrSplit(o.seeds, ',')) {
    const uint64_t seed = std::strtoull(std::string(seed_text).c_str(), nullptr, 10);
    harness::LocalFederation chaos(yaml, sites);
    chaos.AppendLogs();
    std::printf("seed %llu: a fault about every %.0f s for %.0f min\n",
                static_cast<unsigned long long>(seed), o.every_s, o.minutes);
    absl::StatusOr<std::vector<FaultRecord>> faults = RunChaos(chaos, *spec, o, seed);
    if (!faults.ok()) {
      chaos.KeepDirectory();
      std::fprintf(stderr, "strait bench chaos: %s (logs in %s)\n",
                   std::string(faults.status().message()).c_str(), chaos.dir().path().c_str());
      ++failed;
      continue;
    }
    const std::vector<std::string> differ = DifferingSites(calm, chaos, sites);
    PrintSummary(*faults, StepsRedone(chaos, sites), steps, differ, sites.size(), seed);
    const bool all_recovered =
        std::all_of(faults->begin(), faults->end(),
                    [](const FaultRecord& r) { return r.recovered_after_s >= 0; });
    if (!differ.empty() || !all_recovered) {
      chaos.KeepDirectory();
      std::printf("logs kept in %s\n", chaos.dir().path().c_str());
      ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

void AddBenchChaosCommand(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<ChaosOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "chaos",
      "Chaos soak: a federation (3 sites, one of 2 ranks, 2 replicas by default) trains while a "
      "seeded schedule kills sites, ranks and the gateway, cuts links and stalls processes; the "
      "final state must equal an undisturbed run's bit for bit");
  cmd->add_option("-c,--config", o->config,
                  "Job spec to soak (default: the built-in one; links must be lossless)")
      ->type_name("FILE");
  cmd->add_option("--minutes", o->minutes, "Minutes of faults (the run then trains to its end)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--every", o->every_s, "Mean seconds between faults")->check(CLI::PositiveNumber);
  cmd->add_option("--seeds", o->seeds, "Comma-separated seeds, one chaos run each")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Training steps (default: the job's)")
      ->check(CLI::PositiveNumber);
  cmd->callback([=] { *exit_code = RunChaosBench(*o); });
}

}  // namespace strait::bench
