#!/usr/bin/python3
"""PyTorch reference for `strait bench engine` on a gpt or llama job spec (optional; the build and
tests never need torch). Trains the same model on random token windows with the same global batch
and microbatches and AdamW, and prints the tokens/s of a whole training step (forward, backward,
update), the best of several rounds. The model is the spec's `model.family`:

  gpt: pre-LN blocks, causal attention, GELU (tanh) MLP of mlp_dim, learned positions, biases,
       an untied LM head with bias.
  llama: token embedding only (no position embedding), pre-norm blocks with RMSNorm (norm_eps,
       default 1e-5), rotary positions on queries and keys (rope_theta, default 10000; the
       rotate_half pairing), grouped-query attention (kv_heads key/value heads, default heads,
       each shared by heads / kv_heads query heads), a SwiGLU MLP down(silu(gate(x)) * up(x))
       of width mlp_dim, no biases, a final RMSNorm and the LM head (tied to the token embedding
       when tie_embeddings is true, default false).

  OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_gpt.py --config configs/kjv-gpt-3site.yaml --threads 1

OMP_NUM_THREADS must be set before Python starts (as above) or before torch is imported (this script
sets it from --threads when it is unset): torch.set_num_threads alone leaves Debian's torch (oneDNN)
on every core. On the CPU the model is plain fp32 with an explicit causal mask and the step is the
one this script has always timed.

  python3 bench/torch_gpt.py --config configs/kjv-gpt-gpu.yaml --device cuda \
      --batch 16 --microbatches 1

With --device cuda (PyTorch 2.x) it trains the same model on one GPU the way a careful PyTorch user
would: fp32 master weights, torch.autocast bf16 around forward and loss,
scaled_dot_product_attention(is_causal=True) (a llama's grouped key/value heads through
enable_gqa=True from PyTorch 2.5, repeated before it on older ones), fused AdamW, gradient
accumulation over the microbatches and one AdamW step per step. --compile picks the variants, each
timed separately in the same process: eager, torch.compile(model) (--compile-mode is passed
through), or both (the default on cuda). Warm-up steps, torch.compile's compilation included, are
never timed; each round is timed between torch.cuda.synchronize() calls and the best round is
reported, with the MFU against --peak-tflops (dense bf16; taken from the device name when not given)
and llm.c's count of 6N + 6LCT FLOPs per token (N: all parameters, a tied head counted once, L:
depth, C: dim, T: context). At the end it prints one line per variant for scripts (mfu in percent,
nan when no peak is known):

  RESULT torch_<eager|compile> tokens_per_s=<float> ms_per_step=<float> mfu=<float>
"""
import argparse
import gc
import math
import os
import re
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--config", required=True, help="job spec with model.family gpt or llama")
parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--batch", type=int, default=0, help="global batch (default: the spec's)")
parser.add_argument("--microbatches", type=int, default=0, help="(default: the spec's)")
parser.add_argument("--steps", type=int, default=0,
                    help="timed steps per round (default: 2 on cpu, 10 on cuda)")
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--warmup", type=int, default=0,
                    help="untimed steps before the rounds (default: 2 on cpu, 3 on cuda; "
                         "torch.compile gets 3 more, its compilation among them)")
parser.add_argument("--compile", choices=["none", "eager", "compile", "both"], default=None,
                    help="variants to time: none and eager mean eager only, compile means "
                         "torch.compile(model) only (default: both on cuda, none on cpu)")
parser.add_argument("--compile-mode", default="default",
                    help="torch.compile mode, passed through: default, reduce-overhead, "
                         "max-autotune, max-autotune-no-cudagraphs, ...")
parser.add_argument("--peak-tflops", type=float, default=0,
                    help="peak dense bf16 TFLOP/s for the MFU (default on cuda, from the device "
                         "name: 312 for A100, 756 for H100 PCIe, 835 for H100 NVL, 989.4 for "
                         "H100 SXM, H200 and anything else)")
args = parser.parse_args()
if args.compile is None:
    args.compile = "both" if args.device == "cuda" else "none"
if args.steps < 0 or args.rounds < 1 or args.warmup < 0:
    parser.error("--steps and --warmup must not be negative, --rounds must be at least 1")
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import torch  # noqa: E402  (after OMP_NUM_THREADS)
import yaml  # noqa: E402

torch.set_num_threads(args.threads)
with open(args.config) as f:
    spec = yaml.safe_load(f)
m = spec["model"]
family = m.get("family")
if family not in ("gpt", "llama"):
    sys.exit(f"{args.config}: model.family must be gpt or llama")
vocab, context, dim = m.get("vocab", 256), m["context"], m["dim"]
depth, heads = m["depth"], m["heads"]
if family == "gpt":
    mlp_dim = m.get("mlp_dim", 4 * dim)
else:
    if "mlp_dim" not in m:
        sys.exit(f"{args.config}: a llama needs model.mlp_dim (the SwiGLU width)")
    mlp_dim, kv_heads = m["mlp_dim"], m.get("kv_heads", heads)
    rope_theta, norm_eps = float(m.get("rope_theta", 10000.0)), float(m.get("norm_eps", 1e-5))
    tie_embeddings = bool(m.get("tie_embeddings", False))
    if dim % heads or heads % kv_heads or (dim // heads) % 2:
        sys.exit(f"{args.config}: dim {dim}, heads {heads}, kv_heads {kv_heads} do not fit")
batch = args.batch or spec["training"]["global_batch"]
micro = args.microbatches or spec["training"].get("microbatches", 4)
if micro < 1 or batch % micro:
    sys.exit(f"global batch {batch} is not a multiple of {micro} microbatches")
n = batch // micro
cuda = args.device == "cuda"
sdpa = cuda  # the CPU keeps its explicit mask (the numbers in docs/benchmarks.md)
version = tuple(int(v) for v in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc1, self.fc2 = torch.nn.Linear(dim, mlp_dim), torch.nn.Linear(mlp_dim, dim)
        if not sdpa:
            self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        if sdpa:
            q = q.view(b, t, heads, d // heads).transpose(1, 2)
            k = k.view(b, t, heads, d // heads).transpose(1, 2)
            v = v.view(b, t, heads, d // heads).transpose(1, 2)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            s = (q @ k.transpose(-2, -1)) / (d // heads) ** 0.5
            p = torch.softmax(s.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
            a = p @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        h = torch.nn.functional.gelu(self.fc1(self.ln2(x)), approximate="tanh")
        return x + self.fc2(h)


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.zeros(context, dim))
        self.blocks = torch.nn.Sequential(*[Block() for _ in range(depth)])
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.head(self.ln(self.blocks(self.tok(ids) + self.pos)))


class RMSNorm(torch.nn.Module):  # torch.nn.RMSNorm (PyTorch 2.4) where there is none
    def __init__(self, d, eps):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rms_norm():
    if hasattr(torch.nn, "RMSNorm"):
        return torch.nn.RMSNorm(dim, eps=norm_eps)
    return RMSNorm(dim, norm_eps)


def rotary(z, cos, sin):
    """z [b, heads, t, dh]: z * cos + rotate_half(z) * sin (Hugging Face's pairing)."""
    half = z.shape[-1] // 2
    return z * cos + torch.cat((-z[..., half:], z[..., :half]), dim=-1) * sin


class LlamaBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        dh = dim // heads
        self.norm1, self.norm2 = rms_norm(), rms_norm()
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * dh, bias=False)
        self.proj = torch.nn.Linear(heads * dh, dim, bias=False)
        self.gate_up = torch.nn.Linear(dim, 2 * mlp_dim, bias=False)
        self.down = torch.nn.Linear(mlp_dim, dim, bias=False)
        if not sdpa:
            self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        dh, group = d // heads, heads // kv_heads
        q, k, v = self.qkv(self.norm1(x)).split([heads * dh, kv_heads * dh, kv_heads * dh], dim=2)
        q = q.view(b, t, heads, dh).transpose(1, 2)
        k = k.view(b, t, kv_heads, dh).transpose(1, 2)
        v = v.view(b, t, kv_heads, dh).transpose(1, 2)
        cos, sin = cos[:t].to(q.dtype), sin[:t].to(q.dtype)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        if sdpa and group > 1 and version >= (2, 5):  # enable_gqa: PyTorch 2.5
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                 enable_gqa=True)
        else:
            if group > 1:  # kv head g serves query heads g * group .. (g + 1) * group - 1
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            if sdpa:
                a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = (q @ k.transpose(-2, -1)) / dh ** 0.5
                p = torch.softmax(s.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
                a = p @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, heads * dh))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(torch.nn.functional.silu(gate) * up)


class Llama(torch.nn.Module):
    def __init__(self):
        super().__init__()
        dh = dim // heads
        self.tok = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList([LlamaBlock() for _ in range(depth)])
        self.norm = rms_norm()
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        if tie_embeddings:
            self.head.weight = self.tok.weight
        inv_freq = 1.0 / rope_theta ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh)
        angles = torch.arange(context, dtype=torch.float32)[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids):
        x = self.tok(ids)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.norm(x))


Model = Gpt if family == "gpt" else Llama


if not cuda and args.compile in ("none", "eager"):
    # The CPU reference as it has always been timed (PyTorch 1.13 is enough).
    model = Model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, vocab, (batch, context + 1))

    def step():
        optimizer.zero_grad(set_to_none=False)
        for i in range(micro):
            window = ids[i * n:(i + 1) * n]
            logits = model(window[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                     window[:, 1:].reshape(-1)) / micro
            loss.backward()
        optimizer.step()

    for _ in range(args.warmup or 2):  # warm-up
        step()
    best = float("inf")
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.steps or 2):
            step()
        best = min(best, (time.perf_counter() - start) / (args.steps or 2))
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}: {family} {params} parameters, "
          f"{torch.get_num_threads()} thread(s), "
          f"batch {batch} = {micro} x {n} windows of {context}")
    print(f"training step: {1e3 * best:.2f} ms, tokens/s of a whole training step: "
          f"{batch * context / best:.0f}")
    sys.exit(0)

# Timed variants: on cuda, or torch.compile on the CPU.
if cuda:
    if not torch.cuda.is_available():
        sys.exit("--device cuda: torch.cuda.is_available() is false")
    torch.set_float32_matmul_precision("high")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device_name = torch.cuda.get_device_name()
else:
    device_name = "cpu"
device = torch.device(args.device)
steps = args.steps or (10 if cuda else 2)
warmup = args.warmup or (3 if cuda else 2)


def default_peak(name):
    """Dense bf16 tensor-core TFLOP/s from the device name, and where the figure came from."""
    if "A100" in name:
        return 312.0, "A100"
    if "H100" in name and "PCIe" in name:
        return 756.0, "H100 PCIe"
    if "H100" in name and "NVL" in name:
        return 835.0, "H100 NVL"
    if "H100" in name or "H200" in name:
        return 989.4, "H100 SXM / H200"
    return 989.4, "H100 SXM figure, device not recognised; set --peak-tflops"


if args.peak_tflops > 0:
    peak, peak_source = args.peak_tflops, "--peak-tflops"
elif cuda:
    peak, peak_source = default_peak(device_name)
else:
    peak, peak_source = None, "no peak for the cpu; set --peak-tflops"

with torch.device("meta"):
    params = sum(p.numel() for p in Model().parameters())
flops_per_token = 6 * params + 6 * depth * dim * context  # llm.c's count
tokens_per_step = batch * context
compile_kwargs = {} if args.compile_mode == "default" else {"mode": args.compile_mode}
variants = {"none": ["eager"], "eager": ["eager"], "compile": ["compile"],
            "both": ["eager", "compile"]}[args.compile]


def sync():
    if cuda:
        torch.cuda.synchronize()


def measure(variant):
    """Seconds per step (best round), seconds of warm-up, peak GiB, first and last loss."""
    torch.manual_seed(0)
    with device:
        model = Model()
    forward = model if variant == "eager" else torch.compile(model, **compile_kwargs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if cuda else {}))
    ids = torch.randint(0, vocab, (batch, context + 1), device=device)
    inputs = [ids[i * n:(i + 1) * n, :-1].contiguous() for i in range(micro)]
    targets = [ids[i * n:(i + 1) * n, 1:].reshape(-1) for i in range(micro)]
    del ids

    def step():
        optimizer.zero_grad(set_to_none=True)
        for x, y in zip(inputs, targets):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                logits = forward(x)
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), y) / micro
            loss.backward()
        optimizer.step()
        return loss.detach()

    sync()
    start = time.perf_counter()
    first = step()
    for _ in range(warmup - 1 + (3 if variant == "compile" else 0)):
        last = step()
    sync()
    warm_s = time.perf_counter() - start
    best = float("inf")
    for _ in range(args.rounds):
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            last = step()
        sync()
        best = min(best, (time.perf_counter() - start) / steps)
    losses = (first.item() * micro, last.item() * micro)
    gib = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    del step, forward, optimizer, model, inputs, targets, first, last
    if variant == "compile":
        torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return best, warm_s, gib, losses


print(f"torch {torch.__version__}: {family} {params} parameters on {device_name}, "
      f"batch {batch} = {micro} x {n} windows of {context}, "
      + ("bf16 autocast, sdpa, fused AdamW" if cuda else
         f"fp32, {torch.get_num_threads()} thread(s)")
      + (f", torch.compile mode {args.compile_mode}" if "compile" in variants else "")
      + (f"; peak {peak:g} TFLOP/s ({peak_source})" if peak else f"; {peak_source}"),
      flush=True)
results = []
for variant in variants:
    best, warm_s, gib, (loss0, loss1) = measure(variant)
    tokens_per_s = tokens_per_step / best
    mfu = 100 * tokens_per_s * flops_per_token / (peak * 1e12) if peak else math.nan
    results.append((variant, tokens_per_s, 1e3 * best, mfu))
    mfu_text = (f"MFU {mfu:.1f}% of {peak:g} TFLOP/s (6N + 6LCT per token)" if peak
                else "MFU n/a (no --peak-tflops)")
    print(f"torch {variant} {device_name}: {tokens_per_s:.0f} tokens/s, {1e3 * best:.2f} ms/step, "
          f"{mfu_text}", flush=True)
    print(f"  warm-up {warmup + (3 if variant == 'compile' else 0)} steps {warm_s:.1f} s, "
          f"loss {loss0:.3f} -> {loss1:.3f}"
          + (f", peak memory {gib:.2f} GiB" if gib is not None else ""), flush=True)
for variant, tokens_per_s, ms, mfu in results:
    print(f"RESULT torch_{variant} tokens_per_s={tokens_per_s:.1f} ms_per_step={ms:.3f} "
          f"mfu={mfu:.2f}")
