// The job spec: one YAML file that describes a whole federation (docs/config.md lists every key).
//
// Every process of a federation (gateway, each site, `strait train`) loads the same file, so the
// structs here are the single source of truth for the split of layers, the data order, the training
// hyper-parameters and the links' codecs. LoadJobSpec validates everything it can without touching
// the network or the data; errors name file:line:column, the key, what was expected and what was
// found.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strait {

enum class ModelFamily { kMlp, kVit, kGpt, kLlama };
enum class Activation { kRelu, kGelu };
enum class DatasetKind { kFashionMnist, kSynthetic, kText };
// How `dataset: text` is stored: a UTF-8 file (`text`) or token shards that `strait data prepare`
// wrote (`tokens`: a directory of shard-NNNNN.bin and index.json, memory-mapped).
enum class DataFormat { kText, kTokens };
// Pipeline schedules (core/schedule.h): 1f1b and gpipe flush the pipeline every step and
// equal single-process gradient accumulation; 2bw (PipeDream-2BW) never flushes, and step t
// computes its gradient with the weights of one update before (L_{t-1}: pipeline/weight_history.h).
enum class Schedule { k1F1B, kGPipe, k2BW };
// 2bw: when a stage applies the update of a step's gradient (training.update). Deferred
// (PipeDream-2BW): right before its first forward of the step after next, so every microbatch of a
// step computes with the weights of one update before. Eager: as soon as the stage's own last
// backward of the step is done, so only the microbatches the stage started before then (its
// warm-up) compute with the older weights (core/schedule.h).
enum class UpdateTiming { kDeferred, kEager };
// 2bw with update eager: what becomes of the parameter gradients of a stage's warm-up microbatches,
// the ones it computed with the weights of one update before (training.stale_gradients). Keep:
// they count like the others. Drop: the stage's gradient is the mean over its other microbatches,
// all computed with its newest weights, so no stale gradient reaches its optimizer
// (site/pipeline/weight_history.h).
enum class StaleGradients { kKeep, kDrop };
enum class OptimizerKind { kSgd, kAdamW };
enum class LrDecay { kNone, kCosine };
enum class DeviceKind { kCpu, kCuda };
// Matrix products' inputs (training.precision): fp32, or rounded to bf16 (round to nearest even)
// with fp32 accumulation, as tensor cores compute them. Weights, optimizer state and every other
// op stay fp32.
enum class Precision { kFp32, kBf16 };
// How the replicas of a stage (JobSpec::replicas) agree (training.sync): every_step sums their
// gradients before every update (one pipeline with R times the batch); outer (DiLoCo) lets each
// train `outer.every` steps alone, then averages their pseudo-gradients (start - now) and applies
// the outer optimizer.
enum class ReplicaSync { kEveryStep, kOuter };

const char* ToString(ModelFamily v);
const char* ToString(Activation v);
const char* ToString(DatasetKind v);
const char* ToString(DataFormat v);
const char* ToString(Schedule v);
const char* ToString(UpdateTiming v);
const char* ToString(StaleGradients v);
const char* ToString(OptimizerKind v);
const char* ToString(LrDecay v);
const char* ToString(DeviceKind v);
const char* ToString(Precision v);
const char* ToString(ReplicaSync v);

// Multi-layer perceptron: input -> hidden[0] -> ... -> hidden[n-1] -> classes. Layer i (< n) is
// Linear + activation; layer n is the output Linear (logits). So it has hidden.size() + 1 layers.
struct MlpSpec {
  int input = 784;
  std::vector<int> hidden;
  int classes = 10;
  Activation activation = Activation::kRelu;
  float dropout = 0.0f;  // Dropout probability after each hidden activation (0 = none).
};

// Vision transformer: layer 0 is the patch embedding (+ class token + position embedding), layers
// 1..depth are pre-LN transformer blocks, layer depth+1 is the head (LayerNorm + Linear on the
// class token). So it has depth + 2 layers.
struct VitSpec {
  int channels = 1;
  int height = 28;
  int width = 28;
  int patch = 7;  // Square patches; must divide height and width.
  int dim = 64;   // Embedding width; must be divisible by heads.
  int depth = 4;  // Number of transformer blocks.
  int heads = 4;
  int mlp_dim = 256;  // Hidden width of each block's MLP.
  int classes = 10;
  float dropout = 0.0f;
  int Patches() const { return (height / patch) * (width / patch); }
  int Tokens() const { return Patches() + 1; }  // The patches and the class token.
};

// Decoder-only transformer language models: `gpt` (GPT-2's shape) and `llama` (LLaMA's). Layer 0
// is the token embedding (gpt: plus a learned position embedding), layers 1..depth are pre-norm
// blocks with causal self-attention, layer depth+1 is the final norm and the LM head (logits over
// the vocabulary at every position). So it has depth + 2 layers. A sample is a window of `context`
// tokens; what crosses a boundary between sites is the residual stream [context, dim] per sample.
//   gpt: LayerNorm, GELU MLP (mlp_dim), biases, the head has a bias.
//   llama: RMSNorm (norm_eps), rotary positions (rope_theta) on queries and keys, grouped-query
//   attention (kv_heads key/value heads shared by heads / kv_heads query heads each), a SwiGLU
//   MLP (mlp_dim: the width of its gate and up projections), no biases anywhere.
struct GptSpec {
  int vocab = 256;  // Token ids in [0, vocab): 256 for `tokenizer: bytes`, else the model's size.
  int context = 128;
  int dim = 256;  // Must be divisible by heads.
  int depth = 6;
  int heads = 8;
  int mlp_dim = 1024;  // gpt: 4 * dim unless set. llama: required.
  float dropout = 0.0f;
  // The LM head's weight is the token embedding (one matrix, [vocab, D]). Each of the two layers
  // keeps a copy; both copies take the sum of the two gradients every step, so they stay equal
  // (across sites: exchanged through the gateway, sealed end to end; core/tied_embeddings.h).
  bool tie_embeddings = false;
  // llama only.
  int kv_heads = 0;  // Divides heads; 0: `heads` (KeyValueHeads()).
  double rope_theta = 10000.0;
  float norm_eps = 1e-5f;
  int head_dim() const { return dim / heads; }
  int KeyValueHeads() const { return kv_heads > 0 ? kv_heads : heads; }
};

struct ModelSpec {
  ModelFamily family = ModelFamily::kMlp;
  MlpSpec mlp;             // Valid when family == kMlp.
  VitSpec vit;             // Valid when family == kVit.
  GptSpec gpt;             // Valid when IsLanguageModel().
  uint64_t init_seed = 1;  // Parameter initialisation; identical whatever the split.
  // gpt or llama: a Hugging Face model directory (model.safetensors, config.json; absolute) the
  // parameters start from instead of init_seed's (site/nn/model_import.h). Empty: none.
  std::string init_from;
  // gpt or llama: token windows in, logits over the vocabulary out (model.gpt).
  bool IsLanguageModel() const {
    return family == ModelFamily::kGpt || family == ModelFamily::kLlama;
  }
  int NumLayers() const;
  // Per-sample input size in floats (784 for 28x28 images; a gpt sample is `context` token ids,
  // each held exactly in a float).
  int InputFeatures() const;
  // Classes of each target: the vocabulary for gpt.
  int Classes() const;
  // Targets (labels) per sample: 1 for a classifier, `context` next tokens for gpt. The last
  // stage's output per sample is [TargetsPerSample(), Classes()] logits.
  int TargetsPerSample() const;
};

struct DataSpec {
  DatasetKind kind = DatasetKind::kFashionMnist;
  std::string path = "/usr/share/datasets/fashion-mnist";  // Absolute (resolved against the file).
  uint64_t seed = 1;           // Sample order (epoch shuffling); shared by first and last stage.
  int synthetic_train = 4096;  // Sizes of the generated data set (kind: synthetic only).
  int synthetic_test = 1024;
  // kind: text only. `path` is a UTF-8 file (format text) or a directory of token shards (format
  // tokens); `tokenizer` is "bytes" (one token per byte, vocab 256) or a SentencePiece model file
  // (absolute, resolved against the job spec's folder; its vocabulary must be model.vocab; with
  // tokens, the shards' index must name the same tokenizer). The last `validation` fraction of the
  // tokens (format tokens: of whole documents) is the held-out split.
  DataFormat format = DataFormat::kText;
  std::string tokenizer = "bytes";
  double validation = 0.05;
};

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double momentum = 0.9;  // SGD only.
  double beta1 = 0.9;     // AdamW only.
  double beta2 = 0.999;   // AdamW only.
  double eps = 1e-8;      // AdamW only.
  double weight_decay = 0.0;
  // Linear learning-rate warm-up: update k (from 1) uses lr * min(1, k / warmup_steps); 0 = none.
  // Damps the first updates, which one-step-stale gradients (schedule 2bw) make unstable.
  int64_t warmup_steps = 0;
  // Learning-rate decay: cosine multiplies update k's lr by (1 + cos(pi min(1, (k-1) /
  // decay_steps))) / 2. decay_steps 0 = the whole run (WithDecayHorizon fills it in where the run's
  // length is known).
  LrDecay decay = LrDecay::kNone;
  int64_t decay_steps = 0;
};

// `optimizer` with decay_steps set to total_steps where it is 0 (what the run's optimizer uses).
OptimizerSpec WithDecayHorizon(OptimizerSpec optimizer, int64_t total_steps);

struct CheckpointSpec {
  int every = 0;  // Steps between coordinated checkpoints; 0 = off.
  std::string dir =
      "checkpoints";  // Absolute (resolved against the file); each site writes dir/<id>/.
  int keep = 3;       // Newest checkpoints kept per site.
};

// DiLoCo's outer step (training.outer; site/nn/outer_optimizer.h): every `every` inner steps the
// replicas of a stage average their pseudo-gradients and take a Nesterov step of `lr` with
// `momentum` from the parameters they started the round with. The pseudo-gradients cross the
// gateway as `bits`-bit fixed point (4, 8, 16 or 32; per-block scales and error feedback:
// site/exchange/masked_sum.h). With `fragments` P > 1 the stage's parameters are cut into P
// fragments whose rounds are staggered over the `every` steps (Streaming DiLoCo): each round
// carries one fragment, and lands `delay` steps after it was sent, the inner steps running
// meanwhile (site/pipeline/outer_rounds.h).
struct OuterSpec {
  int every = 20;
  double lr = 0.7;
  double momentum = 0.9;
  int bits = 8;
  int fragments = 1;
  int delay = 0;
};

// The student's loss with a teacher (site/nn/distillation_loss.h): alpha * cross-entropy on the
// labels + (1 - alpha) * temperature^2 * KL(teacher's tempered top-k || student's tempered).
// Applies with a teacher only (JobSpec::teacher).
struct DistillSpec {
  double alpha = 0.5;
  double temperature = 2.0;
};

struct TrainingSpec {
  int64_t steps = 0;  // Exactly one of steps / epochs is set (the other is 0).
  int epochs = 0;
  int global_batch = 128;
  int microbatches = 4;  // global_batch % microbatches == 0.
  Schedule schedule = Schedule::k1F1B;
  // Microbatches stage 0 keeps in flight beyond the schedule's own S (1f1b, 2bw), so that it keeps
  // computing while its activations travel a slow link to the last stage and their gradients come
  // back; later stages get a share in proportion to their round trip (core/schedule.h).
  // Costs that many more microbatches of activations held; the results stay the same bits.
  int extra_in_flight = 0;
  // `extra_in_flight: auto`: the split planner chooses extra_in_flight (plan/split_planner.h).
  bool plan_extra_in_flight = false;
  // 2bw only: forward weights extrapolated this many updates along the last one (weight_history.h);
  // 0 = PipeDream-2BW's plain one-step-stale weights.
  double lookahead = 2.0;
  // 2bw only (see UpdateTiming); eager needs lookahead 0 (its default under eager), and clips each
  // step with the global norm of the step before (a stage cannot wait for the other stages' norms
  // of its own step without stalling: core/schedule.h LaggedClip).
  UpdateTiming update = UpdateTiming::kDeferred;
  // 2bw with update eager only (see StaleGradients).
  StaleGradients stale_gradients = StaleGradients::kKeep;
  Precision precision = Precision::kFp32;
  OptimizerSpec optimizer;
  double grad_clip = 0.0;  // Clip by global norm across all stages; 0 = off (2bw eager: lagged).
  CheckpointSpec checkpoint;
  // With replicas (JobSpec::replicas): how the stage replicas agree, the outer step, and the fixed
  // point of the secure sum (crypto/pairwise_masks.h): values are summed as round(v * 2^bits) in
  // Z/2^32, so |v| must stay below 2^(31 - bits) / replicas (larger values are clamped, and
  // counted).
  ReplicaSync sync = ReplicaSync::kEveryStep;
  OuterSpec outer;
  int fixed_point_bits = 24;
  // Steps between held-out evaluations during training (validation loss for a language model,
  // test accuracy for a classifier); 0 = only after the last step. Not with 2bw, whose pipeline
  // never holds one consistent version of the weights between steps.
  int64_t eval_every = 0;
  DistillSpec distill;  // training.distill.
  int MicrobatchSize() const { return global_batch / microbatches; }
  // Whether a run of `total_steps` evaluates on the held-out split once `steps_done` steps are
  // done, before the next step: every eval_every steps, but not after the last (the run's final
  // evaluation is there). `strait train` and every site of a federation evaluate at these steps.
  bool EvaluatesAfter(int64_t steps_done, int64_t total_steps) const {
    return eval_every > 0 && steps_done % eval_every == 0 && steps_done > 0 &&
           steps_done < total_steps;
  }
};

struct GatewaySpec {
  std::string address = "127.0.0.1:7443";  // Where sites dial the gateway (host:port).
  std::string listen;                      // Where the gateway listens; defaults to address.
  uint64_t memory_budget = 512ull << 20;   // Bytes of frames the mailbox may hold.
  double heartbeat_timeout_s = 10.0;       // A site silent this long is marked down.
  // Sites push frames in pieces of this size (CutIntoPieces); the gateway forwards each piece as it
  // arrives, so a frame crosses the gateway one piece behind its producer (smaller: sooner, but
  // more messages, each with its own CPU cost in gRPC, the gateway and both sites).
  uint64_t chunk_size = 128ull << 10;
  // Planned split (layers: auto): a site that rejoins with a profile whose time per step differs
  // from the planned one by more than this share makes the gateway plan the split again.
  double replan_share = 0.25;
};

struct DashboardSpec {
  std::string address = "127.0.0.1:8080";  // HTTP address of the dashboard, /metrics and /api.
  std::string token_file;                  // If set, requests need "Authorization: Bearer <token>".
};

// TLS material (PEM files). Paths are resolved against the job spec's directory; "{site}" in the
// site paths is replaced by the site id.
struct TlsSpec {
  std::string ca = "certs/ca.pem";
  std::string gateway_cert = "certs/gateway.pem";
  std::string gateway_key = "certs/gateway.key";
  std::string site_cert = "certs/{site}.pem";
  std::string site_key = "certs/{site}.key";
  std::string deny_list;  // Optional: revoked certificate serials, one per line.
  std::string SiteCert(absl::string_view site_id) const;
  std::string SiteKey(absl::string_view site_id) const;
};

struct LayerRange {
  int start = 0;  // First layer, inclusive.
  int end = 0;    // One past the last layer.
  int size() const { return end - start; }
  bool operator==(const LayerRange&) const = default;
};

struct SiteSpec {
  std::string id;
  LayerRange layers;
  // `layers: auto`: the split planner chooses the layers (plan/split_planner.h); `layers` stays
  // empty, and what runs a stage takes its layers from the planned view (core/job_view.h).
  bool plan_layers = false;
  DeviceKind device = DeviceKind::kCpu;
  int workers = 1;  // Per machine (rank).
  // Processes ("ranks") the site runs on, one per machine (DESIGN.md §4): rank 0 is the leader,
  // the one WAN endpoint; a microbatch's rows are split over machines x workers.
  int machines = 1;
  // Ranks that split every layer of the site Megatron-style (core/tensor_split.h); machines =
  // tensor_parallel x the data-parallel degree. Rank r is tensor rank r % T of replica r / T.
  int tensor_parallel = 1;
  // The ranks that each hold the whole stage and split the rows (data parallel within the site;
  // not the job's `replicas`, which are pipelines).
  int data_parallel() const { return machines / tensor_parallel; }
  int parts() const { return data_parallel() * workers; }  // How many ways a microbatch is split.
};

// The link across boundary b joins sites[b] (producer of forward tensors) and sites[b + 1].
struct LinkSpec {
  int boundary = 0;
  std::string forward = "none";   // Codec chain for activations (sites[b] -> sites[b+1]).
  std::string backward = "none";  // Codec chain for gradients (sites[b+1] -> sites[b]).
  bool encryption = true;
  uint64_t rotate_bytes = 64ull << 30;  // Rekey after this many sealed bytes per direction.
};

// Knowledge sharing (docs/distillation.md): a trained model, the teacher, runs forward only on the
// student's batches and sends, for every target, its top_k tempered probabilities to the student's
// last stage, which adds the distillation loss (training.distill). The teacher's sites hold its
// checkpoint; its weights never leave them.
enum class TeacherValues { kFp16, kInt8 };
const char* ToString(TeacherValues v);

struct TeacherSpec {
  ModelSpec model;  // Any family, of the student's classes (vocabulary), inputs and targets.
  // A whole model's checkpoint (`strait train`'s final.ckpt; absolute, resolved against the file).
  std::string checkpoint;
  // The teacher's pipeline in stage order: ids, layers (one site: all layers by default), device,
  // workers. Forward only; one machine each.
  std::vector<SiteSpec> sites;
  int top_k = 16;  // Probabilities per target, with their vocabulary indices.
  // How each probability crosses: fp16, or int8 steps of 1/16 nat below the target's largest
  // (site/exchange/teacher_top_k.h).
  TeacherValues values = TeacherValues::kFp16;
};

// Serving text through the federation (docs/distillation.md): the clients that may ask the sites of
// a serving federation (`strait-site --serve`) to sample, by the identity of their certificate
// (signed by the federation's CA). A gpt job of one pipeline, without a teacher.
struct ServingSpec {
  std::vector<std::string> clients;
};

struct JobSpec {
  std::string source_path;  // The file it was loaded from ("<string>" when parsed from text).
  std::string name;         // Federation name: part of every tensor key and key-derivation label.
  GatewaySpec gateway;
  DashboardSpec dashboard;
  TlsSpec tls;
  ModelSpec model;
  DataSpec data;
  TrainingSpec training;
  std::vector<SiteSpec> sites;  // In stage order: sites[i] runs stage i.
  std::vector<LinkSpec> links;  // links[b] for every boundary b = 0 .. sites.size()-2.
  // Replicas (data parallel across sites, DESIGN.md §4): `replicas: R` pipelines, replicas[r][s]
  // the id of the site that runs stage s of pipeline r, each on its own shard of the data
  // (site/data/sampler.h). replicas[0] are the ids of `sites`; every other replica site of stage s
  // runs as sites[s] says (layers, device, workers, machines). Empty: one pipeline, `sites`.
  std::vector<std::vector<std::string>> replicas;
  // `teacher:` (knowledge sharing); has_teacher false: no teacher.
  bool has_teacher = false;
  TeacherSpec teacher;
  ServingSpec serving;  // `serving:`; no clients: nobody may ask.

  // Index of the site with this id in `sites` (replica 0's stages), or -1.
  int SiteIndex(absl::string_view id) const;

  int Stages() const { return static_cast<int>(sites.size()); }
  int Replicas() const { return replicas.empty() ? 1 : static_cast<int>(replicas.size()); }
  // Every site of the federation, replica by replica: slot r * Stages() + s runs stage s of
  // replica r.
  int SiteSlots() const { return Replicas() * Stages(); }
  const std::string& SiteIdAt(int slot) const;
  // The ids of stage `stage`'s sites, replica by replica (one without replicas).
  std::vector<std::string> StageReplicaIds(int stage) const;
  // Slot of the site with this id among all replicas, or -1.
  int SiteSlot(absl::string_view id) const;
  // Members of the federation: the student's sites (slots 0 .. SiteSlots() - 1), then the
  // teacher's sites in stage order (knowledge sharing: member slot SiteSlots() + t is teacher stage
  // t).
  int TeacherStages() const { return has_teacher ? static_cast<int>(teacher.sites.size()) : 0; }
  int MemberSlots() const { return SiteSlots() + TeacherStages(); }
  const std::string& MemberIdAt(int slot) const;
  // Member slot of the site with this id, student's or teacher's, or -1.
  int MemberSlot(absl::string_view id) const;
  // The teacher stage of member slot `slot`, or -1 for a student site.
  int TeacherStageOf(int slot) const {
    return slot >= SiteSlots() && slot < MemberSlots() ? slot - SiteSlots() : -1;
  }
  // True when some site has layers: auto (the split is the planner's to choose).
  bool PlansSplit() const;
  // True when the split is the planner's (PlansSplit; the spec keeps `layers: auto` after the
  // plan, which lives in core/job_view.h): the gateway may plan it again, and layers move between
  // sites at a rollback.
  bool SplitMayMove() const { return PlansSplit(); }
};

// The single pipeline that a job's replicas train together, for `strait train`: the job itself
// without replicas; with replicas summing every step, one pipeline with R times the global batch
// (and R times the microbatches, each of the same size), which they equal up to float order and
// the fixed point of the sum. FAILED_PRECONDITION for sync: outer, which no single pipeline
// trains.
absl::StatusOr<JobSpec> OnePipelineOf(const JobSpec& spec);

// FAILED_PRECONDITION naming the first link whose chains project (proj:K): the federation's model
// has a rank-K map X U U^T at that boundary, which one process (`what`: strait train, generate,
// export) does not build. OK when no link projects.
absl::Status RefuseProjectingLinks(const JobSpec& spec, absl::string_view what);

// Parses and validates the YAML text of a job spec. `file_name` is used in error messages and
// `base_dir` to resolve relative paths (TLS files, data path, checkpoint dir). Thread-safe.
absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml_text, absl::string_view file_name,
                                     absl::string_view base_dir);

// Reads `path` and parses it with ParseJobSpec (relative paths resolve against the file's
// directory).
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path);

}  // namespace strait
