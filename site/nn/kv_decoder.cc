#include "site/nn/kv_decoder.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/model_layout.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

// y[o] = b[o] + sum_i w[o, i] x[i] (a Linear's weight is [out, in]).
void MatVec(const float* w, const float* b, const float* x, int in, int out, float* y) {
  for (int o = 0; o < out; ++o) {
    const float* row = w + int64_t{o} * in;
    float sum = 0.0f;
    for (int i = 0; i < in; ++i) sum += row[i] * x[i];
    y[o] = sum + b[o];
  }
}

void LayerNorm(const float* x, const float* gamma, const float* beta, int dim, float* y) {
  float mean, rstd;
  LayerNormRow(x, gamma, beta, dim, y, &mean, &rstd);
}

}  // namespace

// One transformer block's parameters (layout order, core/model_layout.cc) and its cache.
struct KvDecoder::Block {
  const float *ln1_g, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_g, *ln2_b, *fc1_w, *fc1_b,
      *fc2_w, *fc2_b;
  std::vector<float> keys, values;  // [context, dim] each.
};

absl::StatusOr<std::unique_ptr<KvDecoder>> KvDecoder::Create(const ModelSpec& model,
                                                             LayerRange range,
                                                             std::vector<float> params) {
  if (model.family != ModelFamily::kGpt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "incremental decoding needs a language model (family gpt), not ", ToString(model.family)));
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
  std::unique_ptr<KvDecoder> d(
      new KvDecoder(model.gpt, range, static_cast<int>(layout.size()) - 1));
  d->params_ = std::move(params);
  const float* p = d->params_.data();
  const int64_t cache = int64_t{model.gpt.context} * model.gpt.dim;
  for (int i = range.start; i < range.end; ++i) {
    std::vector<const float*> at;  // Each parameter's start, in layout order.
    for (const ParamLayout& param : layout[i].params) {
      at.push_back(p);
      p += param.numel;
    }
    if (i == 0) {
      d->token_embed_ = at[0];
      d->pos_embed_ = at[1];
    } else if (i == d->last_layer_) {
      d->head_ = at[0];
    } else {
      d->blocks_.push_back(Block{at[0], at[1], at[2], at[3], at[4], at[5], at[6], at[7], at[8],
                                 at[9], at[10], at[11], std::vector<float>(cache),
                                 std::vector<float>(cache)});
    }
  }
  return d;
}

KvDecoder::KvDecoder(const GptSpec& gpt, LayerRange range, int last_layer)
    : gpt_(gpt), range_(range), last_layer_(last_layer) {}

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
    const float* pe = pos_embed_ + int64_t{position_} * d;
    for (int c = 0; c < d; ++c) x[c] = te[c] + pe[c];
  } else if (static_cast<int>(input.size()) == d) {
    x.assign(input.begin(), input.end());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("a residual row of ", d, " values, given ", input.size()));
  }
  for (Block& block : blocks_) RunBlock(block, x);
  ++position_;
  if (head_ == nullptr) return x;
  const int v = gpt_.vocab;
  std::vector<float> xn(d), logits(v);
  LayerNorm(x.data(), head_, head_ + d, d, xn.data());
  const float* w = head_ + 2 * d;
  MatVec(w, w + int64_t{v} * d, xn.data(), d, v, logits.data());
  return logits;
}

// x += attn(ln1(x)) over the cached positions and this one; x += mlp(ln2(x)).
void KvDecoder::RunBlock(Block& b, std::vector<float>& x) {
  const int d = gpt_.dim, heads = gpt_.heads, dh = d / heads, f = gpt_.mlp_dim;
  const int t = position_;
  std::vector<float> xn(d), qkv(3 * d), att(d), branch(d);
  LayerNorm(x.data(), b.ln1_g, b.ln1_b, d, xn.data());
  MatVec(b.qkv_w, b.qkv_b, xn.data(), d, 3 * d, qkv.data());
  std::copy(qkv.begin() + d, qkv.begin() + 2 * d, b.keys.begin() + int64_t{t} * d);
  std::copy(qkv.begin() + 2 * d, qkv.end(), b.values.begin() + int64_t{t} * d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::vector<float> p(t + 1);
  for (int h = 0; h < heads; ++h) {
    const float* q = qkv.data() + h * dh;
    float top = -INFINITY;
    for (int s = 0; s <= t; ++s) {
      const float* k = b.keys.data() + int64_t{s} * d + h * dh;
      float dot = 0.0f;
      for (int c = 0; c < dh; ++c) dot += q[c] * k[c];
      p[s] = dot * scale;
      top = std::max(top, p[s]);
    }
    float sum = 0.0f;
    for (int s = 0; s <= t; ++s) sum += p[s] = std::exp(p[s] - top);
    float* out = att.data() + h * dh;
    std::fill(out, out + dh, 0.0f);
    for (int s = 0; s <= t; ++s) {
      const float* v = b.values.data() + int64_t{s} * d + h * dh;
      const float weight = p[s] / sum;
      for (int c = 0; c < dh; ++c) out[c] += weight * v[c];
    }
  }
  MatVec(b.proj_w, b.proj_b, att.data(), d, d, branch.data());
  for (int c = 0; c < d; ++c) x[c] += branch[c];
  std::vector<float> hidden(f);
  LayerNorm(x.data(), b.ln2_g, b.ln2_b, d, xn.data());
  MatVec(b.fc1_w, b.fc1_b, xn.data(), d, f, hidden.data());
  for (float& h : hidden) h = Gelu(h);
  MatVec(b.fc2_w, b.fc2_b, hidden.data(), f, d, branch.data());
  for (int c = 0; c < d; ++c) x[c] += branch[c];
}

}  // namespace strait::site
