#!/usr/bin/python3
"""PyTorch reference for `strait bench engine` on a GPT job spec (optional; the build and tests
never need torch). Trains the same model (pre-LN blocks, causal attention, GELU (tanh), learned
positions, untied LM head with bias, AdamW) on random byte windows with the same global batch and
microbatches, and prints the tokens/s of a whole training step (forward, backward, update), the
best of several rounds.

  OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_gpt.py --config configs/kjv-gpt-3site.yaml --threads 1

OMP_NUM_THREADS must be set before Python starts (as above) or before torch is imported (this script
sets it from --threads when it is unset): torch.set_num_threads alone leaves Debian's torch (oneDNN)
on every core.
"""
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--config", required=True, help="job spec with model.family gpt")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--batch", type=int, default=0, help="global batch (default: the spec's)")
parser.add_argument("--microbatches", type=int, default=0, help="(default: the spec's)")
parser.add_argument("--steps", type=int, default=2, help="timed steps per round")
parser.add_argument("--rounds", type=int, default=3)
args = parser.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import torch  # noqa: E402  (after OMP_NUM_THREADS)
import yaml  # noqa: E402

torch.set_num_threads(args.threads)
with open(args.config) as f:
    spec = yaml.safe_load(f)
m = spec["model"]
if m.get("family") != "gpt":
    sys.exit(f"{args.config}: model.family must be gpt")
vocab, context, dim = m.get("vocab", 256), m["context"], m["dim"]
depth, heads, mlp_dim = m["depth"], m["heads"], m.get("mlp_dim", 4 * m["dim"])
batch = args.batch or spec["training"]["global_batch"]
micro = args.microbatches or spec["training"].get("microbatches", 4)
n = batch // micro


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc1, self.fc2 = torch.nn.Linear(dim, mlp_dim), torch.nn.Linear(mlp_dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / (d // heads) ** 0.5
        p = torch.softmax(s.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
        x = x + self.proj((p @ v).transpose(1, 2).reshape(b, t, d))
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


model = Gpt()
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


for _ in range(2):  # warm-up
    step()
best = float("inf")
for _ in range(args.rounds):
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    best = min(best, (time.perf_counter() - start) / args.steps)
params = sum(p.numel() for p in model.parameters())
print(f"torch {torch.__version__}: gpt {params} parameters, {torch.get_num_threads()} thread(s), "
      f"batch {batch} = {micro} x {n} windows of {context}")
print(f"training step: {1e3 * best:.2f} ms, tokens/s of a whole training step: "
      f"{batch * context / best:.0f}")
