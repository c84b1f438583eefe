#include "site/nn/kv_decoder.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/model_layout.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

// y[o] = b[o] + sum_i w[o, i] x[i] (a Linear's weight is [out, in]; b may be null).
void MatVec(const float* w, const float* b, const float* x, int in, int out, float* y) {
  for (int o = 0; o < out; ++o) {
    const float* row = w + int64_t{o} * in;
    float sum = 0.0f;
    for (int i = 0; i < in; ++i) sum += row[i] * x[i];
    y[o] = b != nullptr ? sum + b[o] : sum;
  }
}

void LayerNorm(const float* x, const float* gamma, const float* beta, int dim, float* y) {
  float mean, rstd;
  LayerNormRow(x, gamma, beta, dim, y, &mean, &rstd);
}

// Rotary positions on `heads` heads of width dh at position t (Backend::Rotary).
void Rotary(float* x, int heads, int dh, int t, double theta) {
  for (int i = 0; i < dh / 2; ++i) {
    float c, s;
    RotaryCosSin(t, i, dh, theta, &c, &s);
    for (int h = 0; h < heads; ++h) {
      float* v = x + h * dh + 2 * i;
      const float a = v[0], b = v[1];
      v[0] = a * c - b * s;
      v[1] = a * s + b * c;
    }
  }
}

}  // namespace

// One transformer block's parameters (layout order, core/model_layout.cc) and its cache.
struct KvDecoder::Block {
  std::vector<const float*> w;
  std::vector<float> keys, values;  // [context, kv_heads * dh] each.
};

absl::StatusOr<std::unique_ptr<KvDecoder>> KvDecoder::Create(const ModelSpec& model,
                                                             LayerRange range,
                                                             std::vector<float> params) {
  if (!model.IsLanguageModel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "incremental decoding needs a language model (gpt, llama), not ", ToString(model.family)));
  }
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  if (range.start < 0 || range.end > static_cast<int>(layout.size()) || range.size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers [", range.start, ", ", range.end, ") of ", layout.size()));
  }
  int64_t expected = 0;
  for (int i = range.start; i < range.end; ++i) expected += layout[i].param_count;
  if (static_cast<int64_t>(params.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("layers [", range.start, ", ", range.end,
                                                   ") have ", expected, " parameters, given ",
                                                   params.size()));
  }
  std::unique_ptr<KvDecoder> d(new KvDecoder(model, range, static_cast<int>(layout.size()) - 1));
  d->params_ = std::move(params);
  const float* p = d->params_.data();
  const int64_t cache =
      int64_t{model.gpt.context} * model.gpt.KeyValueHeads() * model.gpt.head_dim();
  for (int i = range.start; i < range.end; ++i) {
    std::vector<const float*> at;  // Each parameter's start, in layout order.
    for (const ParamLayout& param : layout[i].params) {
      at.push_back(p);
      p += param.numel;
    }
    if (i == 0) {
      d->token_embed_ = at[0];
      d->pos_embed_ = d->llama() ? nullptr : at[1];
    } else if (i == d->last_layer_) {
      d->head_ = at[0];
    } else {
      d->blocks_.push_back(Block{at, std::vector<float>(cache), std::vector<float>(cache)});
    }
  }
  return d;
}

KvDecoder::KvDecoder(const ModelSpec& model, LayerRange range, int last_layer)
    : gpt_(model.gpt), family_(model.family), range_(range), last_layer_(last_layer) {}

KvDecoder::~KvDecoder() = default;

absl::StatusOr<std::vector<float>> KvDecoder::Step(absl::Span<const float> input) {
  const int d = gpt_.dim;
  if (position_ >= gpt_.context) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the context of ", gpt_.context, " positions is full: Reset and decode a shorter window"));
  }
  std::vector<float> x(d);
  if (token_embed_ != nullptr) {
    const float token = input.size() == 1 ? input[0] : -1.0f;
    if (!(token >= 0 && token < gpt_.vocab) || token != std::floor(token)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", token, " of a vocabulary of ", gpt_.vocab, " (one value)"));
    }
    const float* te = token_embed_ + static_cast<int64_t>(token) * d;
    for (int c = 0; c < d; ++c) x[c] = te[c];
    if (pos_embed_ != nullptr) {
      for (int c = 0; c < d; ++c) x[c] += pos_embed_[int64_t{position_} * d + c];
    }
  } else if (static_cast<int>(input.size()) == d) {
    x.assign(input.begin(), input.end());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("a residual row of ", d, " values, given ", input.size()));
  }
  for (Block& block : blocks_) {
    if (llama()) {
      RunLlamaBlock(block, x);
    } else {
      RunBlock(block, x);
    }
  }
  ++position_;
  if (head_ == nullptr) return x;
  const int v = gpt_.vocab;
  std::vector<float> xn(d), logits(v);
  if (llama()) {  // norm.gamma, fc.weight
    RmsNormRow(x.data(), head_, d, gpt_.norm_eps, xn.data());
    MatVec(head_ + d, nullptr, xn.data(), d, v, logits.data());
    return logits;
  }
  LayerNorm(x.data(), head_, head_ + d, d, xn.data());  // ln.gamma, ln.beta, fc.weight, fc.bias
  const float* w = head_ + 2 * d;
  MatVec(w, w + int64_t{v} * d, xn.data(), d, v, logits.data());
  return logits;
}

// Attention of query heads q [heads * dh] at position t over the cached keys and values of
// positions 0..t ([kv_heads * dh] a position; query head h reads key/value head h / group).
void KvDecoder::Attend(const Block& b, const float* q, int t, float* out) const {
  const int heads = gpt_.heads, dh = gpt_.head_dim(), kv = gpt_.KeyValueHeads() * dh;
  const int group = gpt_.heads / gpt_.KeyValueHeads();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::vector<float> p(t + 1);
  for (int h = 0; h < heads; ++h) {
    const int g = h / group;
    float top = -INFINITY;
    for (int s = 0; s <= t; ++s) {
      const float* k = b.keys.data() + int64_t{s} * kv + g * dh;
      float dot = 0.0f;
      for (int c = 0; c < dh; ++c) dot += q[h * dh + c] * k[c];
      p[s] = dot * scale;
      top = std::max(top, p[s]);
    }
    float sum = 0.0f;
    for (int s = 0; s <= t; ++s) sum += p[s] = std::exp(p[s] - top);
    float* o = out + h * dh;
    std::fill(o, o + dh, 0.0f);
    for (int s = 0; s <= t; ++s) {
      const float* v = b.values.data() + int64_t{s} * kv + g * dh;
      const float weight = p[s] / sum;
      for (int c = 0; c < dh; ++c) o[c] += weight * v[c];
    }
  }
}

// x += attn(ln1(x)) over the cached positions and this one; x += mlp(ln2(x)). Params: ln1.gamma,
// ln1.beta, qkv.{weight,bias}, proj.{weight,bias}, ln2.gamma, ln2.beta, fc1.{weight,bias},
// fc2.{weight,bias}.
void KvDecoder::RunBlock(Block& b, std::vector<float>& x) {
  const int d = gpt_.dim, f = gpt_.mlp_dim, t = position_;
  const std::vector<const float*>& w = b.w;
  std::vector<float> xn(d), qkv(3 * d), att(d), branch(d);
  LayerNorm(x.data(), w[0], w[1], d, xn.data());
  MatVec(w[2], w[3], xn.data(), d, 3 * d, qkv.data());
  std::copy(qkv.begin() + d, qkv.begin() + 2 * d, b.keys.begin() + int64_t{t} * d);
  std::copy(qkv.begin() + 2 * d, qkv.end(), b.values.begin() + int64_t{t} * d);
  Attend(b, qkv.data(), t, att.data());
  MatVec(w[4], w[5], att.data(), d, d, branch.data());
  for (int c = 0; c < d; ++c) x[c] += branch[c];
  std::vector<float> hidden(f);
  LayerNorm(x.data(), w[6], w[7], d, xn.data());
  MatVec(w[8], w[9], xn.data(), d, f, hidden.data());
  for (float& h : hidden) h = Gelu(h);
  MatVec(w[10], w[11], hidden.data(), f, d, branch.data());
  for (int c = 0; c < d; ++c) x[c] += branch[c];
}

// x += o(attn(rope(q, k, v of rmsnorm(x)))); x += down(silu(gate(n)) * up(n)), n = rmsnorm(x).
// Params: attn_norm.gamma, attn.{q,k,v,o}.weight, mlp_norm.gamma, mlp.{gate,up,down}.weight.
void KvDecoder::RunLlamaBlock(Block& b, std::vector<float>& x) {
  const int d = gpt_.dim, f = gpt_.mlp_dim, t = position_, dh = gpt_.head_dim();
  const int q = gpt_.heads * dh, kv = gpt_.KeyValueHeads() * dh;
  const std::vector<const float*>& w = b.w;
  std::vector<float> xn(d), queries(q), att(q), branch(d);
  RmsNormRow(x.data(), w[0], d, gpt_.norm_eps, xn.data());
  float* keys = b.keys.data() + int64_t{t} * kv;
  float* values = b.values.data() + int64_t{t} * kv;
  MatVec(w[1], nullptr, xn.data(), d, q, queries.data());
  MatVec(w[2], nullptr, xn.data(), d, kv, keys);
  MatVec(w[3], nullptr, xn.data(), d, kv, values);
  Rotary(queries.data(), gpt_.heads, dh, t, gpt_.rope_theta);
  Rotary(keys, gpt_.KeyValueHeads(), dh, t, gpt_.rope_theta);
  Attend(b, queries.data(), t, att.data());
  MatVec(w[4], nullptr, att.data(), q, d, branch.data());
  for (int c = 0; c < d; ++c) x[c] += branch[c];
  std::vector<float> gate(f), up(f);
  RmsNormRow(x.data(), w[5], d, gpt_.norm_eps, xn.data());
  MatVec(w[6], nullptr, xn.data(), d, f, gate.data());
  MatVec(w[7], nullptr, xn.data(), d, f, up.data());
  for (int c = 0; c < f; ++c) gate[c] = Silu(gate[c]) * up[c];
  MatVec(w[8], nullptr, gate.data(), f, d, branch.data());
  for (int c = 0; c < d; ++c) x[c] += branch[c];
}

}  // namespace strait::site
