// Every layer against an independent double-precision reference: the forward output must match,
// and the backward's parameter and input gradients must match central finite differences of the
// reference (h = 1e-5 in double, so the differences are accurate to ~1e-9; the tolerance covers the
// engine's float arithmetic).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "site/backend/cpu/cpu_backend.h"
#include "site/backend/op_math.h"
#include "site/nn/model.h"

namespace strait::site {
namespace {

using Vec = std::vector<double>;
using Params = std::vector<Vec>;
// Reference forward of one layer: (params, x, dropout key) -> y, all double.
using RefForward = std::function<Vec(const Params&, const Vec&, uint64_t)>;

double RefGelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// y[r, o] = sum_i x[r, i] w[o, i] + b[o]
Vec RefLinear(const Vec& x, int rows, int in, int out, const Vec& w, const Vec& b) {
  Vec y(static_cast<size_t>(rows) * out);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      double s = b[o];
      for (int i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  }
  return y;
}

Vec RefLayerNorm(const Vec& x, int rows, int d, const Vec& g, const Vec& b) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < d; ++c) mean += x[r * d + c] / d;
    for (int c = 0; c < d; ++c) var += (x[r * d + c] - mean) * (x[r * d + c] - mean) / d;
    for (int c = 0; c < d; ++c) {
      y[r * d + c] = (x[r * d + c] - mean) / std::sqrt(var + kLayerNormEps) * g[c] + b[c];
    }
  }
  return y;
}

void RefDropout(Vec& x, float p, uint64_t key) {
  if (p <= 0.0f) return;
  for (size_t i = 0; i < x.size(); ++i) x[i] *= DropoutScale(p, key, i);
}

// Multi-head attention core on qkv [n*T, 3D] -> [n*T, D]; causal: token i sees tokens 0..i.
Vec RefAttention(const Vec& qkv, int n, int t, int heads, int dh, bool causal) {
  const int d = heads * dh;
  Vec out(static_cast<size_t>(n) * t * d);
  for (int b = 0; b < n; ++b) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < t; ++i) {
        const int seen = causal ? i + 1 : t;
        Vec s(seen);
        double mx = -1e300;
        for (int j = 0; j < seen; ++j) {
          double dot = 0;
          for (int k = 0; k < dh; ++k) {
            dot +=
                qkv[(b * t + i) * 3 * d + h * dh + k] * qkv[(b * t + j) * 3 * d + d + h * dh + k];
          }
          s[j] = dot / std::sqrt(static_cast<double>(dh));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < seen; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int k = 0; k < dh; ++k) {
          double o = 0;
          for (int j = 0; j < seen; ++j)
            o += s[j] / sum * qkv[(b * t + j) * 3 * d + 2 * d + h * dh + k];
          out[(b * t + i) * d + h * dh + k] = o;
        }
      }
    }
  }
  return out;
}

struct Harness {
  ModelSpec model;
  int layer = 0;
  int n = 3;
  RefForward ref;
  bool has_input_grad = true;
  int token_vocab = 0;  // > 0: the input is token ids in [0, token_vocab), not random floats.
  AttentionKernel attention = AttentionKernel::kBatched;
};

float Random(uint64_t key, uint64_t i, float lo, float hi) {
  return lo + (hi - lo) * CounterUniform(key, i);
}

// Runs the engine's Forward and Backward for one layer and checks both against the reference.
void CheckLayer(const Harness& h) {
  auto backend = *CreateCpuBackend(1, Precision::kFp32, h.attention);
  auto layers = BuildLayers(h.model, {h.layer, h.layer + 1}, {}, backend.get());
  ASSERT_TRUE(layers.ok()) << layers.status();
  Layer& layer = *(*layers)[0];
  const LayerLayout& layout = layer.layout();
  const int n = h.n;
  const int64_t in = layer.in_features(), out = layer.out_features();

  // Random parameters (not the init: biases and gammas must not be trivial) and input, one after
  // another in one arena as a Stage lays them out (a llama block reads q, k and v as one matrix).
  std::vector<std::vector<float>> value;
  std::vector<float> value_arena(layout.param_count), grad_arena(layout.param_count, 0.0f);
  LayerParams params;
  int64_t at = 0;
  for (size_t p = 0; p < layout.params.size(); ++p) {
    value.emplace_back(layout.params[p].numel);
    for (int64_t i = 0; i < layout.params[p].numel; ++i)
      value[p][i] = value_arena[at + i] = Random(100 + p, i, -0.6f, 0.6f);
    params.value.push_back(value_arena.data() + at);
    params.grad.push_back(grad_arena.data() + at);
    at += layout.params[p].numel;
  }
  std::vector<float> x(n * in), y(n * out), saved(layer.SavedBytes(n) / 4 + 1),
      scratch(layer.ScratchBytes(n) / 4 + 1), dx(n * in, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = h.token_vocab > 0 ? std::floor(Random(7, i, 0.0f, h.token_vocab - 0.01f))
                             : Random(7, i, -1.0f, 1.0f);
  }
  PassInfo pass{true, 0x1234};
  layer.Forward(*backend, params, pass, n, x.data(), y.data(), saved.data(), scratch.data());

  Params ref_params;
  for (const auto& v : value) ref_params.emplace_back(v.begin(), v.end());
  const Vec ref_x(x.begin(), x.end());
  const Vec ref_y = h.ref(ref_params, ref_x, pass.dropout_key);
  ASSERT_EQ(ref_y.size(), y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_NEAR(y[i], ref_y[i], 1e-4 * (1 + std::abs(ref_y[i]))) << layout.name << " output " << i;
  }

  // Loss = sum(c * y) for fixed random c, so dLoss/dy = c.
  std::vector<float> c(y.size());
  for (size_t i = 0; i < c.size(); ++i) c[i] = Random(9, i, -1.0f, 1.0f);
  std::vector<float> dy = c;
  layer.Backward(*backend, params, pass, n, x.data(), y.data(), dy.data(),
                 h.has_input_grad ? dx.data() : nullptr, saved.data(), scratch.data());
  auto loss = [&](const Params& p, const Vec& xx) {
    const Vec yy = h.ref(p, xx, pass.dropout_key);
    double s = 0;
    for (size_t i = 0; i < yy.size(); ++i) s += c[i] * yy[i];
    return s;
  };
  const double eps = 1e-5;
  auto expect_close = [&](double analytic, double numeric, const std::string& what) {
    EXPECT_NEAR(analytic, numeric, 2e-4 + 2e-3 * std::abs(numeric)) << layout.name << " " << what;
  };
  for (size_t p = 0; p < layout.params.size(); ++p) {
    for (int64_t i = 0; i < layout.params[p].numel; ++i) {
      Params plus = ref_params, minus = ref_params;
      plus[p][i] += eps;
      minus[p][i] -= eps;
      const double numeric = (loss(plus, ref_x) - loss(minus, ref_x)) / (2 * eps);
      expect_close(params.grad[p][i], numeric,
                   layout.params[p].name + "[" + std::to_string(i) + "]");
    }
  }
  if (!h.has_input_grad) return;
  for (size_t i = 0; i < x.size(); ++i) {
    Vec plus = ref_x, minus = ref_x;
    plus[i] += eps;
    minus[i] -= eps;
    const double numeric = (loss(ref_params, plus) - loss(ref_params, minus)) / (2 * eps);
    expect_close(dx[i], numeric, "input[" + std::to_string(i) + "]");
  }
}

ModelSpec TinyMlp(Activation act, float dropout) {
  ModelSpec m;
  m.family = ModelFamily::kMlp;
  m.mlp.input = 6;
  m.mlp.hidden = {5, 4};
  m.mlp.classes = 3;
  m.mlp.activation = act;
  m.mlp.dropout = dropout;
  return m;
}

RefForward DenseRef(int in, int out, Activation act, bool hidden, float dropout, int n) {
  return [=](const Params& p, const Vec& x, uint64_t key) {
    Vec y = RefLinear(x, n, in, out, p[0], p[1]);
    if (hidden) {
      for (double& v : y) v = act == Activation::kRelu ? std::max(v, 0.0) : RefGelu(v);
      RefDropout(y, dropout, key);
    }
    return y;
  };
}

TEST(LayerGradientTest, DenseReluHidden) {
  Harness h{TinyMlp(Activation::kRelu, 0.0f), 1};
  h.ref = DenseRef(5, 4, Activation::kRelu, true, 0.0f, h.n);
  CheckLayer(h);
}

TEST(LayerGradientTest, DenseGeluWithDropout) {
  Harness h{TinyMlp(Activation::kGelu, 0.3f), 0};
  h.ref = DenseRef(6, 5, Activation::kGelu, true, 0.3f, h.n);
  CheckLayer(h);
}

TEST(LayerGradientTest, DenseLogits) {
  Harness h{TinyMlp(Activation::kRelu, 0.3f), 2};
  h.ref = DenseRef(4, 3, Activation::kRelu, false, 0.0f, h.n);
  CheckLayer(h);
}

ModelSpec TinyVit(float dropout) {
  ModelSpec m;
  m.family = ModelFamily::kVit;
  m.vit.channels = 2;
  m.vit.height = 4;
  m.vit.width = 6;
  m.vit.patch = 2;  // 2 x 3 patches + class token = 7 tokens
  m.vit.dim = 8;
  m.vit.depth = 1;
  m.vit.heads = 2;
  m.vit.mlp_dim = 12;
  m.vit.classes = 3;
  m.vit.dropout = dropout;
  return m;
}

TEST(LayerGradientTest, PatchEmbed) {
  for (float dropout : {0.0f, 0.25f}) {
    Harness h{TinyVit(dropout), 0};
    const VitSpec v = h.model.vit;
    const int gw = v.width / v.patch, patches = (v.height / v.patch) * gw, t = patches + 1;
    const int ps = v.channels * v.patch * v.patch, n = h.n;
    h.has_input_grad = false;  // the input is data
    h.ref = [=](const Params& p, const Vec& x, uint64_t key) {
      Vec patch(static_cast<size_t>(n) * patches * ps);
      for (int b = 0; b < n; ++b)
        for (int q = 0; q < patches; ++q)
          for (int c = 0; c < v.channels; ++c)
            for (int i = 0; i < v.patch; ++i)
              for (int j = 0; j < v.patch; ++j)
                patch[(b * patches + q) * ps + (c * v.patch + i) * v.patch + j] =
                    x[((b * v.channels + c) * v.height + (q / gw) * v.patch + i) * v.width +
                      (q % gw) * v.patch + j];
      const Vec proj = RefLinear(patch, n * patches, ps, v.dim, p[0], p[1]);
      Vec y(static_cast<size_t>(n) * t * v.dim);
      for (int b = 0; b < n; ++b)
        for (int tok = 0; tok < t; ++tok)
          for (int k = 0; k < v.dim; ++k)
            y[(b * t + tok) * v.dim + k] =
                (tok == 0 ? p[2][k] : proj[(b * patches + tok - 1) * v.dim + k]) +
                p[3][tok * v.dim + k];
      RefDropout(y, v.dropout, key);
      return y;
    };
    CheckLayer(h);
  }
}

// A pre-LN block over n samples of t tokens of width d.
RefForward BlockRef(int n, int t, int d, int heads, int mlp_dim, float dropout, bool causal) {
  const int rows = n * t;
  return [=](const Params& p, const Vec& x, uint64_t key) {
    const Vec xn1 = RefLayerNorm(x, rows, d, p[0], p[1]);
    const Vec qkv = RefLinear(xn1, rows, d, 3 * d, p[2], p[3]);
    const Vec att = RefAttention(qkv, n, t, heads, d / heads, causal);
    Vec branch = RefLinear(att, rows, d, d, p[4], p[5]);
    RefDropout(branch, dropout, CombineKey(key, 1));
    Vec r1 = x;
    for (size_t i = 0; i < r1.size(); ++i) r1[i] += branch[i];
    const Vec xn2 = RefLayerNorm(r1, rows, d, p[6], p[7]);
    Vec hidden = RefLinear(xn2, rows, d, mlp_dim, p[8], p[9]);
    for (double& z : hidden) z = RefGelu(z);
    Vec y = RefLinear(hidden, rows, mlp_dim, d, p[10], p[11]);
    RefDropout(y, dropout, CombineKey(key, 2));
    for (size_t i = 0; i < y.size(); ++i) y[i] += r1[i];
    return y;
  };
}

TEST(LayerGradientTest, TransformerBlock) {
  for (float dropout : {0.0f, 0.2f}) {
    Harness h{TinyVit(dropout), 1};
    const VitSpec v = h.model.vit;
    const int t = v.Tokens();
    h.ref = BlockRef(h.n, t, v.dim, v.heads, v.mlp_dim, v.dropout, /*causal=*/false);
    CheckLayer(h);
  }
}

TEST(LayerGradientTest, ClassifierHead) {
  Harness h{TinyVit(0.0f), 2};
  const VitSpec v = h.model.vit;
  const int t = v.Tokens(), d = v.dim, n = h.n;
  h.ref = [=](const Params& p, const Vec& x, uint64_t) {
    Vec cls(static_cast<size_t>(n) * d);
    for (int b = 0; b < n; ++b)
      for (int k = 0; k < d; ++k) cls[b * d + k] = x[b * t * d + k];
    return RefLinear(RefLayerNorm(cls, n, d, p[0], p[1]), n, d, v.classes, p[2], p[3]);
  };
  CheckLayer(h);
}

ModelSpec TinyGpt(float dropout) {
  ModelSpec m;
  m.family = ModelFamily::kGpt;
  m.gpt.vocab = 7;
  m.gpt.context = 5;
  m.gpt.dim = 8;
  m.gpt.depth = 1;
  m.gpt.heads = 2;
  m.gpt.mlp_dim = 12;
  m.gpt.dropout = dropout;
  return m;
}

TEST(LayerGradientTest, TokenEmbed) {
  for (float dropout : {0.0f, 0.25f}) {
    Harness h{TinyGpt(dropout), 0};
    const GptSpec g = h.model.gpt;
    const int n = h.n, t = g.context, d = g.dim;
    h.has_input_grad = false;  // the input is data
    h.token_vocab = g.vocab;
    h.ref = [=](const Params& p, const Vec& x, uint64_t key) {
      Vec y(static_cast<size_t>(n) * t * d);
      for (int r = 0; r < n * t; ++r) {
        const int id = static_cast<int>(x[r]);
        for (int k = 0; k < d; ++k) y[r * d + k] = p[0][id * d + k] + p[1][(r % t) * d + k];
      }
      RefDropout(y, g.dropout, key);
      return y;
    };
    CheckLayer(h);
  }
}

TEST(LayerGradientTest, CausalTransformerBlock) {
  for (float dropout : {0.0f, 0.2f}) {
    Harness h{TinyGpt(dropout), 1};
    const GptSpec g = h.model.gpt;
    h.ref = BlockRef(h.n, g.context, g.dim, g.heads, g.mlp_dim, g.dropout, /*causal=*/true);
    CheckLayer(h);
  }
}

// The fused attention ops (a head of 8 floats, 37 tokens: a second tile of 32 keys that is partly
// masked), with and without the causal mask.
TEST(LayerGradientTest, FusedAttentionTransformerBlock) {
  for (bool causal : {true, false}) {
    ModelSpec m = causal ? TinyGpt(0.2f) : TinyVit(0.2f);
    if (causal) {
      m.gpt.context = 37, m.gpt.dim = 16;
    } else {
      m.vit.height = 12, m.vit.width = 12, m.vit.dim = 16;  // 6 x 6 patches + class token
    }
    Harness h{m, 1};
    h.attention = AttentionKernel::kFused;
    const int t = causal ? m.gpt.context : m.vit.Tokens(), d = causal ? m.gpt.dim : m.vit.dim;
    const int heads = causal ? m.gpt.heads : m.vit.heads;
    const int mlp = causal ? m.gpt.mlp_dim : m.vit.mlp_dim;
    h.ref = BlockRef(h.n, t, d, heads, mlp, 0.2f, causal);
    CheckLayer(h);
    // The fused layer keeps a log-sum-exp per query, not a [T, T] matrix per head.
    auto fused = *CreateCpuBackend(1, Precision::kFp32, AttentionKernel::kFused);
    auto with = BuildLayers(m, {1, 2}, {}, fused.get()), without = BuildLayers(m, {1, 2});
    ASSERT_TRUE(with.ok() && without.ok());
    EXPECT_LT((*with)[0]->SavedBytes(h.n), (*without)[0]->SavedBytes(h.n));
  }
}

TEST(LayerGradientTest, LmHead) {
  Harness h{TinyGpt(0.0f), 2};
  const GptSpec g = h.model.gpt;
  const int rows = h.n * g.context, d = g.dim;
  h.ref = [=](const Params& p, const Vec& x, uint64_t) {
    return RefLinear(RefLayerNorm(x, rows, d, p[0], p[1]), rows, d, g.vocab, p[2], p[3]);
  };
  CheckLayer(h);
}

ModelSpec TinyLlama(int kv_heads, float dropout) {
  ModelSpec m;
  m.family = ModelFamily::kLlama;
  m.gpt.vocab = 7;
  m.gpt.context = 5;
  m.gpt.dim = 8;
  m.gpt.depth = 1;
  m.gpt.heads = 2;
  m.gpt.kv_heads = kv_heads;
  m.gpt.mlp_dim = 12;
  m.gpt.rope_theta = 50.0;  // angles that turn visibly within 5 tokens
  m.gpt.norm_eps = 1e-5f;
  m.gpt.dropout = dropout;
  return m;
}

Vec RefRmsNorm(const Vec& x, int rows, int d, const Vec& g, double eps) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int c = 0; c < d; ++c) ms += x[r * d + c] * x[r * d + c] / d;
    for (int c = 0; c < d; ++c) y[r * d + c] = x[r * d + c] / std::sqrt(ms + eps) * g[c];
  }
  return y;
}

// Rotary positions on `heads` heads at column `first` of rows of width `width`: pair (2i, 2i+1) of
// token t turns by t * theta^(-2i/dh).
void RefRotary(Vec& x, int rows, int t, int width, int first, int heads, int dh, double theta) {
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < dh / 2; ++i) {
        const double angle = (r % t) * std::pow(theta, -2.0 * i / dh);
        double& a = x[r * width + first + h * dh + 2 * i];
        double& b = x[r * width + first + h * dh + 2 * i + 1];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(angle) - b0 * std::sin(angle);
        b = a0 * std::sin(angle) + b0 * std::cos(angle);
      }
    }
  }
}

// Params: attn_norm, q, k, v, o, mlp_norm, gate, up, down.
RefForward LlamaBlockRef(int n, const GptSpec& g) {
  return [=](const Params& p, const Vec& x, uint64_t key) {
    const int t = g.context, d = g.dim, dh = g.head_dim(), f = g.mlp_dim, rows = n * t;
    const int q = g.heads * dh, kv = g.kv_heads * dh, group = g.heads / g.kv_heads;
    const Vec xn1 = RefRmsNorm(x, rows, d, p[0], g.norm_eps);
    const Vec zq(q, 0.0), zkv(kv, 0.0), zd(d, 0.0), zf(f, 0.0);
    Vec qs = RefLinear(xn1, rows, d, q, p[1], zq), ks = RefLinear(xn1, rows, d, kv, p[2], zkv);
    const Vec vs = RefLinear(xn1, rows, d, kv, p[3], zkv);
    RefRotary(qs, rows, t, q, 0, g.heads, dh, g.rope_theta);
    RefRotary(ks, rows, t, kv, 0, g.kv_heads, dh, g.rope_theta);
    Vec qkv(static_cast<size_t>(rows) * 3 * q);  // key/value head h / group for query head h
    for (int r = 0; r < rows; ++r) {
      for (int h = 0; h < g.heads; ++h) {
        for (int j = 0; j < dh; ++j) {
          qkv[r * 3 * q + h * dh + j] = qs[r * q + h * dh + j];
          qkv[r * 3 * q + q + h * dh + j] = ks[r * kv + (h / group) * dh + j];
          qkv[r * 3 * q + 2 * q + h * dh + j] = vs[r * kv + (h / group) * dh + j];
        }
      }
    }
    Vec branch = RefLinear(RefAttention(qkv, n, t, g.heads, dh, true), rows, q, d, p[4], zd);
    RefDropout(branch, g.dropout, CombineKey(key, 1));
    Vec r1 = x;
    for (size_t i = 0; i < r1.size(); ++i) r1[i] += branch[i];
    const Vec xn2 = RefRmsNorm(r1, rows, d, p[5], g.norm_eps);
    const Vec gate = RefLinear(xn2, rows, d, f, p[6], zf),
              up = RefLinear(xn2, rows, d, f, p[7], zf);
    Vec h(gate.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    Vec y = RefLinear(h, rows, f, d, p[8], zd);
    RefDropout(y, g.dropout, CombineKey(key, 2));
    for (size_t i = 0; i < y.size(); ++i) y[i] += r1[i];
    return y;
  };
}

TEST(LayerGradientTest, LlamaTokenEmbed) {
  Harness h{TinyLlama(2, 0.0f), 0};
  const GptSpec g = h.model.gpt;
  const int n = h.n, t = g.context, d = g.dim;
  h.has_input_grad = false;
  h.token_vocab = g.vocab;
  h.ref = [=](const Params& p, const Vec& x, uint64_t) {
    Vec y(static_cast<size_t>(n) * t * d);
    for (int r = 0; r < n * t; ++r) {
      for (int k = 0; k < d; ++k) y[r * d + k] = p[0][static_cast<int>(x[r]) * d + k];
    }
    return y;
  };
  CheckLayer(h);
}

// Multi-head (kv_heads = heads) and grouped-query (one key/value head for two query heads)
// attention, with and without dropout, through batched and fused attention.
TEST(LayerGradientTest, LlamaBlock) {
  for (int kv_heads : {2, 1}) {
    for (float dropout : {0.0f, 0.2f}) {
      SCOPED_TRACE(testing::Message() << "kv_heads " << kv_heads << " dropout " << dropout);
      Harness h{TinyLlama(kv_heads, dropout), 1};
      h.ref = LlamaBlockRef(h.n, h.model.gpt);
      CheckLayer(h);
    }
  }
  ModelSpec m = TinyLlama(1, 0.0f);
  m.gpt.context = 37, m.gpt.dim = 16;  // heads of 8: the fused ops, a partly masked second tile
  Harness h{m, 1};
  h.attention = AttentionKernel::kFused;
  h.ref = LlamaBlockRef(h.n, m.gpt);
  CheckLayer(h);
}

TEST(LayerGradientTest, LlamaLmHead) {
  Harness h{TinyLlama(2, 0.0f), 2};
  const GptSpec g = h.model.gpt;
  const int rows = h.n * g.context, d = g.dim;
  h.ref = [=](const Params& p, const Vec& x, uint64_t) {
    return RefLinear(RefRmsNorm(x, rows, d, p[0], g.norm_eps), rows, d, g.vocab, p[1],
                     Vec(g.vocab, 0.0));
  };
  CheckLayer(h);
}

// The fused classifier: the loss, and the logits' gradient written over the logits.
TEST(LayerGradientTest, ClassifierLoss) {
  auto backend = *CreateCpuBackend(1);
  const int rows = 4, classes = 5;
  const float scale = 0.25f;
  std::vector<float> logits(rows * classes), loss(rows);
  std::vector<int32_t> labels = {0, 4, 2, 2}, correct(rows);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = Random(3, i, -3.0f, 3.0f);
  std::vector<float> dlogits = logits;
  backend->ClassifierLoss(rows, classes, dlogits.data(), labels.data(), scale, loss.data(),
                          correct.data());
  auto ref_loss = [&](const Vec& z, int r) {
    double mx = -1e300, sum = 0;
    for (int c = 0; c < classes; ++c) mx = std::max(mx, z[r * classes + c]);
    for (int c = 0; c < classes; ++c) sum += std::exp(z[r * classes + c] - mx);
    return std::log(sum) + mx - z[r * classes + labels[r]];
  };
  const Vec z(logits.begin(), logits.end());
  for (int r = 0; r < rows; ++r) {
    EXPECT_NEAR(loss[r], ref_loss(z, r), 1e-5);
    int argmax = 0;
    for (int c = 1; c < classes; ++c)
      argmax = z[r * classes + c] > z[r * classes + argmax] ? c : argmax;
    EXPECT_EQ(correct[r], argmax == labels[r] ? 1 : 0);
    for (int c = 0; c < classes; ++c) {
      Vec plus = z, minus = z;
      plus[r * classes + c] += 1e-5;
      minus[r * classes + c] -= 1e-5;
      const double numeric = scale * (ref_loss(plus, r) - ref_loss(minus, r)) / 2e-5;
      EXPECT_NEAR(dlogits[r * classes + c], numeric, 1e-5);
    }
  }
}

}  // namespace
}  // namespace strait::site
