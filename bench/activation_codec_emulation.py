#!/usr/bin/python3
"""Activation codecs for the GPT's pipeline links, emulated in PyTorch before one is built in C++.

Trains the model of configs/kjv-gpt-3site.yaml (pre-LN GPT, 6 blocks of width 256, byte tokens,
context 128; AdamW lr 0.002, weight decay 0.01, warm-up 40, cosine, clip 1.0; 32 windows a step in 8
microbatches) on data/kjv.txt, with a codec at each of the job's two boundaries (after block 1 and
after block 4), applied per microbatch of 4 windows ([512, 256]) as a link would: --fwd on the
residual stream, --bwd on its gradient. Prints the validation loss through the links and without
them, and the bits a value each way: the entropy of the quantized symbols (what an ideal entropy
coder would send) and zstd's size of them (level 1, component-major: what Strait's zstd stage
would send), a basis included.

Codecs (STEP: the quantizer's step as a fraction of the tensor's rms; the forward rounds to nearest,
the backward rounds stochastically, unbiased):
  none, bf16
  int8, int4           Strait's per-row absmax quantizers (one fp32 scale a row of 256)
  uq:STEP              stateless: centred on the microbatch's mean, one uniform step
  klt:STEP             adaptive transform coding: the sender keeps the covariance of what it sent,
                       every --refresh steps takes its eigenvectors as the basis (sent once, bf16),
                       and codes coefficients in that basis with one uniform step; components of
                       little variance fall to zero and cost almost nothing
  fklt:STEP[:LAMBDA]   klt with the noise shaped by what the loss is sensitive to (forward only):
                       the sender also keeps the covariance G of the gradients that come back over
                       the link, and codes in the KLT basis of W x, W = (G / mean eigenvalue +
                       LAMBDA I)^(1/2) (LAMBDA default 1); the receiver gets the synthesis matrix

The figures in docs/notes/activation-subspace.md come from runs of two processes side by side
(one thread each, about 27 minutes for 800 steps), a reference and a codec, same seed:

  /usr/bin/python3 bench/activation_codec_emulation.py --fwd none --bwd none
  /usr/bin/python3 bench/activation_codec_emulation.py --fwd klt:0.3 --bwd klt:1.0

(python3-numpy and PyTorch; OMP_NUM_THREADS is set from --threads before torch is imported.)
"""
import argparse
import ctypes
import math
import os
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fwd", default="none", help="codec of the residual stream (see above)")
parser.add_argument("--bwd", default="none", help="codec of its gradient")
parser.add_argument("--steps", type=int, default=800)
parser.add_argument("--refresh", type=int, default=20, help="klt: steps between bases")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--seed", type=int, default=7)
parser.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "data", "kjv.txt"))
args = parser.parse_args()
os.environ["OMP_NUM_THREADS"] = str(args.threads)
import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)
VOCAB, T, D, DEPTH, HEADS, MLP = 256, 128, 256, 6, 8, 1024
BOUNDARIES = (1, 4)  # after block 1 (dc-a | dc-b) and after block 4 (dc-b | dc-c)
ZSTD = ctypes.CDLL("libzstd.so.1")
ZSTD.ZSTD_compressBound.restype = ctypes.c_size_t
ZSTD.ZSTD_compress.restype = ctypes.c_size_t


def zstd_size(data):
    cap = ZSTD.ZSTD_compressBound(len(data))
    out = ctypes.create_string_buffer(cap)
    return ZSTD.ZSTD_compress(out, cap, data, len(data), 1)


text = np.frombuffer(open(args.text, "rb").read(), dtype=np.uint8)
cut = int(len(text) * 0.98)  # the job's validation: the last 2%
train_text, val_text = text[:cut], text[cut:]
rng = np.random.default_rng(args.seed)


def windows(src, n, r):
    start = r.integers(0, len(src) - T - 1, n)
    x = np.stack([src[i:i + T] for i in start])
    y = np.stack([src[i + 1:i + T + 1] for i in start])
    return torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))


val_x, val_y = windows(val_text, 96, np.random.default_rng(123))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.qkv, self.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
        self.fc, self.out = torch.nn.Linear(D, MLP), torch.nn.Linear(MLP, D)
        for m in (self.qkv, self.proj, self.fc, self.out):
            torch.nn.init.normal_(m.weight, 0, 0.02)
            torch.nn.init.zeros_(m.bias)
        for m in (self.proj, self.out):
            torch.nn.init.normal_(m.weight, 0, 0.02 / math.sqrt(2 * DEPTH))
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, x):
        b = x.shape[0]
        q, k, v = (t.view(b, T, HEADS, D // HEADS).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).split(D, -1))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D // HEADS)
        att = scores.masked_fill(self.mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, T, D))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Codec:
    """One direction of one link. Counts bits: entropy of the symbols and zstd's size of them."""

    def __init__(self, spec, stochastic):
        self.kind, _, arg = spec.partition(":")
        if self.kind not in ("none", "bf16", "int8", "int4", "uq", "klt", "fklt"):
            raise SystemExit(f"unknown codec {spec!r}")
        arg, _, floor = arg.partition(":")
        self.step = float(arg) if arg else 0.0
        self.floor = float(floor) if floor else 1.0  # fklt: LAMBDA
        self.synthesis = torch.eye(D)  # fklt: x = z synthesis + mean (basis: the analysis)
        self.gradient_moment = torch.zeros(D, D, dtype=torch.float64)
        self.gradient_rows = 0
        self.stochastic = stochastic
        self.basis, self.mean = torch.eye(D), torch.zeros(D)
        self.moment2 = torch.zeros(D, D, dtype=torch.float64)
        self.moment1 = torch.zeros(D, dtype=torch.float64)
        self.rows = 0
        self.entropy_bits = self.zstd_bits = 0.0
        self.values = 0

    def observe_gradient(self, grad):
        """fklt: the gradient of what this link sent, as it came back."""
        if self.kind == "fklt":
            rows = grad.reshape(-1, D).double()
            self.gradient_moment += rows.T @ rows
            self.gradient_rows += rows.shape[0]

    def refresh(self):
        """klt: the basis of what was sent since the last refresh (the receiver gets it in bf16)."""
        if self.kind not in ("klt", "fklt") or self.rows == 0:
            return
        mean = self.moment1 / self.rows
        cov = self.moment2 / self.rows - torch.outer(mean, mean)
        if self.kind == "fklt":
            weight = torch.eye(D, dtype=torch.float64)
            if self.gradient_rows:
                g = self.gradient_moment / self.gradient_rows
                w, v = torch.linalg.eigh(g / (torch.trace(g) / D) + self.floor * weight)
                weight = v @ torch.diag(w.clamp_min(0).sqrt()) @ v.T
            _, vectors = torch.linalg.eigh(weight @ cov @ weight)
            analysis = weight @ vectors.flip(1)
            self.synthesis = torch.linalg.inv(analysis).bfloat16().float()
            self.basis = analysis.float()
            self.gradient_moment.zero_()
            self.gradient_rows = 0
        else:
            _, vectors = torch.linalg.eigh(cov)
            self.basis = vectors.flip(1).bfloat16().float()
        # A gradient's mean is about zero: the backward is coded uncentred.
        self.mean = torch.zeros(D) if self.stochastic else mean.float()
        self.moment2.zero_()
        self.moment1.zero_()
        self.rows = 0
        sent = 8 * 2 * (D * D + D)
        self.entropy_bits += sent
        self.zstd_bits += sent

    def round(self, q):
        return torch.floor(q + torch.rand_like(q)) if self.stochastic else torch.round(q)

    def count(self, symbols, extra_bits):
        """symbols: [rows, D] integers; counted per component (column)."""
        s = symbols.long()
        lo = s.min()
        span = int(s.max() - lo) + 1
        flat = ((s - lo) + torch.arange(D) * span).reshape(-1)
        p = torch.bincount(flat, minlength=D * span).reshape(D, span).double() / s.shape[0]
        entropy = float(-(p * torch.where(p > 0, p.log2(), torch.zeros_like(p))).sum())
        self.entropy_bits += entropy * s.shape[0] + extra_bits
        packed = s.clamp(-128, 127).to(torch.int8).T.contiguous().numpy().tobytes()
        self.zstd_bits += 8 * zstd_size(packed) + extra_bits
        self.values += s.numel()

    def __call__(self, x, train=True):
        rows = x.reshape(-1, D)
        if self.kind in ("uq", "klt", "fklt"):
            out = self.step_coded(rows, train)
        else:
            out, bits = self.fixed_rate(rows)
            if train:
                self.entropy_bits += bits * rows.numel()
                self.zstd_bits += bits * rows.numel()
                self.values += rows.numel()
        return out.reshape(x.shape)

    def fixed_rate(self, x):
        """none, bf16, int8, int4: (decoded values, bits a value)."""
        if self.kind == "none":
            return x, 32
        if self.kind == "bf16":
            return x.bfloat16().float(), 16
        levels = 127 if self.kind == "int8" else 7
        scale = x.abs().amax(1, keepdim=True).clamp_min(1e-30) / levels
        return self.round(x / scale) * scale, (8 if self.kind == "int8" else 4) + 32 / D

    def step_coded(self, x, train):
        """uq, klt: one uniform step a tensor, centred (uq: on the tensor's mean, sent with it)."""
        if self.kind in ("klt", "fklt"):
            if train:
                xd = x.double()
                self.moment2 += xd.T @ xd
                self.moment1 += xd.sum(0)
                self.rows += x.shape[0]
            centre = self.mean
            z = (x - centre) @ self.basis
        else:
            centre = x.mean(0)
            z = x - centre
        delta = self.step * z.pow(2).mean().sqrt().clamp_min(1e-30)
        q = self.round(z / delta)
        if train:
            self.count(q, 32 + (32 * D if self.kind == "uq" else 0))
        out = q * delta
        if self.kind == "fklt":
            return out @ self.synthesis + centre
        return (out @ self.basis.T if self.kind == "klt" else out) + centre


class Link(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, codecs):
        ctx.codecs = codecs
        return codecs[0](x.detach())

    @staticmethod
    def backward(ctx, grad):
        decoded = ctx.codecs[1](grad)
        ctx.codecs[0].observe_gradient(decoded)
        return decoded, None


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, D)
        self.pos = torch.nn.Parameter(torch.zeros(T, D))
        torch.nn.init.normal_(self.tok.weight, 0, 0.02)
        torch.nn.init.normal_(self.pos, 0, 0.01)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(DEPTH))
        self.ln_f, self.head = torch.nn.LayerNorm(D), torch.nn.Linear(D, VOCAB)
        torch.nn.init.normal_(self.head.weight, 0, 0.02)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, ids, links, train=True):
        x = self.tok(ids) + self.pos
        for i, block in enumerate(self.blocks):
            x = block(x)
            if links and i in links:
                x = Link.apply(x, links[i]) if train else links[i][0](x, train=False)
        return self.head(self.ln_f(x))


model = Gpt()
links = {i: (Codec(args.fwd, False), Codec(args.bwd, True)) for i in BOUNDARIES}
decayed = [p for n, p in model.named_parameters() if p.dim() >= 2 and n != "pos"]
others = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and n != "pos")]
opt = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.01},
                         {"params": others, "weight_decay": 0.0}], lr=0.002)


def learning_rate(step):
    if step < 40:
        return 0.002 * (step + 1) / 40
    return 0.002 * 0.5 * (1 + math.cos(math.pi * (step - 40) / (args.steps - 40)))


def validation_loss(through_links):
    with torch.no_grad():
        total = 0.0
        for k in range(0, len(val_x), 8):
            logits = model(val_x[k:k + 8], links if through_links else None, train=False)
            total += torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                       val_y[k:k + 8].reshape(-1)).item()
        return total / (len(val_x) // 8)


def bits_per_value(direction, attribute):
    codecs = [links[i][direction] for i in links]
    return sum(getattr(c, attribute) for c in codecs) / max(1, sum(c.values for c in codecs))


print(f"links: forward {args.fwd}, backward {args.bwd}; {args.steps} steps", flush=True)
start = time.time()
for step in range(args.steps):
    for group in opt.param_groups:
        group["lr"] = learning_rate(step)
    x, y = windows(train_text, 32, rng)
    opt.zero_grad(set_to_none=True)
    for m in range(8):
        logits = model(x[4 * m:4 * m + 4], links)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                 y[4 * m:4 * m + 4].reshape(-1)) / 8
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if (step + 1) % args.refresh == 0:
        for forward, backward in links.values():
            forward.refresh()
            backward.refresh()
    if (step + 1) % 100 == 0 or step + 1 == args.steps:
        fe, be = bits_per_value(0, "entropy_bits"), bits_per_value(1, "entropy_bits")
        fz, bz = bits_per_value(0, "zstd_bits"), bits_per_value(1, "zstd_bits")
        print(f"step {step + 1}: validation {validation_loss(True):.4f} nats/byte through the links, "
              f"{validation_loss(False):.4f} without; bits a value fwd/bwd: entropy {fe:.2f}/{be:.2f} "
              f"(x{64 / (fe + be):.1f}), zstd {fz:.2f}/{bz:.2f} (x{64 / (fz + bz):.1f}); "
              f"{time.time() - start:.0f} s", flush=True)
