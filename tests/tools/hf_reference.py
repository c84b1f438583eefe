#!/usr/bin/python3
"""Independent reference forward pass for `strait export` output (issue 47).

`strait export` writes a trained model as model.safetensors + config.json with Hugging Face's names
and layout (GPT-2 for the gpt family, LlamaForCausalLM for llama). This script checks that claim
without sharing a line of code with Strait: it parses the safetensors file itself, runs the
architecture as Hugging Face defines it in float64 with numpy only (no torch, no safetensors
package), and compares its logits with the ones Strait computed for the same tokens.

  /usr/bin/python3 tests/tools/hf_reference.py --model DIR --tokens FILE --batch N \
      --logits FILE [--rtol 1e-4] [--dump-logits OUT]

--tokens: raw little-endian int32 [N, T]; --logits: raw little-endian float32 [N, T, vocab].
Prints one line; exit 0 when max|strait - ref| / max|ref| <= rtol, 1 on a mismatch, 2 on a usage
error or a malformed model (bad safetensors header, tensor out of the file, wrong shape, ...).
--dump-logits writes the reference logits as raw float32 (for debugging).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


def fail(message, code=2):
    print(f"hf_reference: {message}", file=sys.stderr)
    sys.exit(code)


def load_safetensors(path):
    """name -> float64 array, after checking every tensor's byte range against the file."""
    sizes = {"F32": 4, "BF16": 2}
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if len(blob) < 8:
        fail(f"{path}: {len(blob)} bytes, too short for the 8-byte header length")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        fail(f"{path}: header of {header_len} bytes runs past the end of the file "
             f"({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        fail(f"{path}: header is not JSON: {e}")
    if not isinstance(header, dict):
        fail(f"{path}: header is not a JSON object")
    base, data_len = 8 + header_len, len(blob) - 8 - header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            fail(f"{path}: tensor {name}: needs dtype, shape and data_offsets [begin, end)")
        if dtype not in sizes:
            fail(f"{path}: tensor {name}: dtype {dtype} (only F32 and BF16 are read)")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            fail(f"{path}: tensor {name}: bad shape {shape}")
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= data_len):
            fail(f"{path}: tensor {name}: bytes [{begin}, {end}) are outside the {data_len} bytes "
                 f"of data after the header (truncated file?)")
        count = math.prod(shape)
        if end - begin != count * sizes[dtype]:
            fail(f"{path}: tensor {name}: {end - begin} bytes, but {dtype} {shape} needs "
                 f"{count * sizes[dtype]}")
        if dtype == "F32":
            a = np.frombuffer(blob, dtype="<f4", count=count, offset=base + begin)
        else:  # bfloat16: the high half of a float32
            a = (np.frombuffer(blob, dtype="<u2", count=count, offset=base + begin)
                 .astype(np.uint32) << 16).view(np.float32)
        tensors[name] = a.astype(np.float64).reshape(shape)
    return tensors


class Weights:
    def __init__(self, tensors):
        self.tensors = tensors

    def __contains__(self, name):
        return name in self.tensors

    def __call__(self, name, *shape):
        if name not in self.tensors:
            fail(f"model.safetensors has no tensor {name}")
        t = self.tensors[name]
        if t.shape != shape:
            fail(f"tensor {name}: shape {list(t.shape)}, expected {list(shape)}")
        return t


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def causal_attention(q, k, v):
    """q, k, v: [N, heads, T, dh] -> [N, T, heads * dh]."""
    n, h, t, dh = q.shape
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
    s[..., np.triu(np.ones((t, t), dtype=bool), 1)] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(n, t, h * dh)


def heads_of(x, heads):
    """[N, T, heads * dh] -> [N, heads, T, dh], head h = columns h*dh .. (h+1)*dh."""
    n, t, c = x.shape
    return x.reshape(n, t, heads, c // heads).transpose(0, 2, 1, 3)


def gpt2(cfg, w, tokens):
    vocab, positions, d = cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"]
    heads, eps = cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    inner = cfg.get("n_inner") or 4 * d
    if tokens.shape[1] > positions:
        fail(f"T = {tokens.shape[1]} is more than n_positions = {positions}")
    x = w("wte.weight", vocab, d)[tokens] + w("wpe.weight", positions, d)[:tokens.shape[1]]
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        h = layer_norm(x, w(p + "ln_1.weight", d), w(p + "ln_1.bias", d), eps)
        qkv = h @ w(p + "attn.c_attn.weight", d, 3 * d) + w(p + "attn.c_attn.bias", 3 * d)
        q, k, v = (heads_of(qkv[..., j * d:(j + 1) * d], heads) for j in range(3))
        a = causal_attention(q, k, v)
        x = x + a @ w(p + "attn.c_proj.weight", d, d) + w(p + "attn.c_proj.bias", d)
        h = layer_norm(x, w(p + "ln_2.weight", d), w(p + "ln_2.bias", d), eps)
        h = h @ w(p + "mlp.c_fc.weight", d, inner) + w(p + "mlp.c_fc.bias", inner)
        h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ w(p + "mlp.c_proj.weight", inner, d) + w(p + "mlp.c_proj.bias", d)
    x = layer_norm(x, w("ln_f.weight", d), w("ln_f.bias", d), eps)
    head = w("lm_head.weight", vocab, d) if "lm_head.weight" in w else w("wte.weight", vocab, d)
    logits = x @ head.T
    return logits + w("lm_head.bias", vocab) if "lm_head.bias" in w else logits


def llama(cfg, w, tokens):
    vocab, d, heads = cfg["vocab_size"], cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    dh, f = cfg.get("head_dim") or d // heads, cfg["intermediate_size"]
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    rope = cfg.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        fail(f"rope_scaling {rope} is not supported (default rotary only)")
    if heads % kv or dh % 2:
        fail(f"num_attention_heads {heads} / num_key_value_heads {kv} / head_dim {dh} don't fit")
    t = tokens.shape[1]
    if t > cfg.get("max_position_embeddings", t):
        fail(f"T = {t} is more than max_position_embeddings = {cfg['max_position_embeddings']}")
    inv_freq = 1.0 / theta ** (np.arange(0, dh, 2) / dh)
    angles = np.arange(t)[:, None] * inv_freq[None, :]
    angles = np.concatenate([angles, angles], -1)
    cos, sin = np.cos(angles), np.sin(angles)

    def rotary(z):  # [N, heads, T, dh]
        rotated = np.concatenate([-z[..., dh // 2:], z[..., :dh // 2]], -1)
        return z * cos + rotated * sin

    embed = w("model.embed_tokens.weight", vocab, d)
    x = embed[tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w(p + "input_layernorm.weight", d), eps)
        q = rotary(heads_of(h @ w(p + "self_attn.q_proj.weight", heads * dh, d).T, heads))
        k = rotary(heads_of(h @ w(p + "self_attn.k_proj.weight", kv * dh, d).T, kv))
        v = heads_of(h @ w(p + "self_attn.v_proj.weight", kv * dh, d).T, kv)
        k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)  # repeat_kv
        x = x + causal_attention(q, k, v) @ w(p + "self_attn.o_proj.weight", d, heads * dh).T
        h = rms_norm(x, w(p + "post_attention_layernorm.weight", d), eps)
        gate = h @ w(p + "mlp.gate_proj.weight", f, d).T
        up = h @ w(p + "mlp.up_proj.weight", f, d).T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w(p + "mlp.down_proj.weight", d, f).T
    x = rms_norm(x, w("model.norm.weight", d), eps)
    if "lm_head.weight" in w:
        head = w("lm_head.weight", vocab, d)
    elif cfg.get("tie_word_embeddings", False):
        head = embed
    else:
        fail("no lm_head.weight and tie_word_embeddings is false")
    return x @ head.T


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="folder with model.safetensors, config.json")
    parser.add_argument("--tokens", required=True, help="raw little-endian int32 [N, T]")
    parser.add_argument("--batch", type=int, required=True, help="N")
    parser.add_argument("--logits", help="raw little-endian float32 [N, T, vocab] from Strait")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--dump-logits", metavar="OUT", help="write the reference logits (float32)")
    args = parser.parse_args()
    if args.logits is None and args.dump_logits is None:
        parser.error("give --logits, --dump-logits or both")
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    try:
        with open(os.path.join(args.model, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{args.model}/config.json: {e}")
    arch = cfg.get("model_type")
    if arch not in ("gpt2", "llama"):
        fail(f"model_type {arch!r}: only gpt2 and llama are known")
    weights = Weights(load_safetensors(os.path.join(args.model, "model.safetensors")))

    try:
        tokens = np.fromfile(args.tokens, dtype="<i4")
    except OSError as e:
        fail(f"{args.tokens}: {e.strerror}")
    if tokens.size == 0 or tokens.size % args.batch:
        fail(f"{args.tokens}: {tokens.size} int32 tokens are not N = {args.batch} rows of T >= 1")
    tokens = tokens.reshape(args.batch, -1).astype(np.int64)
    vocab = cfg["vocab_size"]
    if tokens.min() < 0 or tokens.max() >= vocab:
        fail(f"{args.tokens}: token ids {tokens.min()}..{tokens.max()} outside [0, {vocab})")
    n, t = tokens.shape
    try:
        ref = (gpt2 if arch == "gpt2" else llama)(cfg, weights, tokens)
    except KeyError as e:
        fail(f"config.json has no {e}")
    if args.dump_logits:
        ref.astype("<f4").tofile(args.dump_logits)
    if args.logits is None:
        print(f"hf_reference: {arch} N={n} T={t} vocab={vocab} wrote {args.dump_logits}")
        return 0

    try:
        strait = np.fromfile(args.logits, dtype="<f4")
    except OSError as e:
        fail(f"{args.logits}: {e.strerror}")
    if strait.size != ref.size:
        fail(f"{args.logits}: {strait.size} floats, expected N*T*vocab = {n}*{t}*{vocab} "
             f"= {ref.size}")
    diff = np.abs(strait.astype(np.float64).reshape(ref.shape) - ref)
    max_diff = float(diff.max()) if np.isfinite(diff).all() else math.inf
    max_ref = float(np.abs(ref).max())
    relative = max_diff / max_ref if max_ref > 0 else (0.0 if max_diff == 0 else math.inf)
    line = (f"{arch} N={n} T={t} vocab={vocab} max_abs_diff={max_diff:.3e} "
            f"max_abs_ref={max_ref:.3e} relative={relative:.3e}")
    if relative <= args.rtol:
        print(f"hf_reference: {line}")
        return 0
    where = np.unravel_index(np.argmax(np.where(np.isfinite(diff), diff, np.inf)), diff.shape)
    print(f"hf_reference: MISMATCH {line} > rtol={args.rtol:g}, worst at [n, t, token] = "
          f"{[int(i) for i in where]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
