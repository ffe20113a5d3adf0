"""A tiny decoder-only language model serving batched requests with a KV cache (issue 24).

Requests arrive in batches of ``--batch``. For each batch the script, on its one CPU thread:

1. tokenizes every prompt (a byte-level tokenizer with a regex pre-split, in Python: CPU work that
   delays the GPU, as real tokenizers do);
2. runs one **prefill** forward over the (left-padded) prompts, filling the KV cache;
3. runs ``--new-tokens`` **decode** forwards of one token per request, reading and extending the
   cache, picking tokens greedily and copying them to the host after every step (as a serving
   engine does to check stop conditions);
4. detokenizes the outputs.

``record_function`` markers (the names charllm-trace's ``--step-marker`` and per-iteration phases
use; docs/analyses.md, "Iterations without an optimizer"):

- ``batch``: one engine iteration (a batch of requests, steps 1-4);
- ``tokenize``, ``prefill``, ``decode`` (one per decode step), ``detokenize``: its phases;
- ``request#ID``: the request's arrival (its tokenization); ``token#ID``: a token of request ``ID``
  reached the host (the end of the range). Time to first token and time per output token are
  computed from these.

Runs on CPU by default, on CUDA with ``--device cuda``. It knows nothing about the collector:
``charllm-trace collect --step-marker batch --steps 1-2 -- python examples/infer_tiny.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import record_function

PAD = 256  # byte values are tokens 0..255
VOCAB = 257
_SPLIT = re.compile(r"\w+|[^\w\s]+|\s+")

WORDS = ("the model reads a prompt and writes an answer one token at a time while the cache grows "
         "with every step and the host waits for the device to finish").split()  # fmt: skip


def tokenize(text: str) -> list[int]:
    """Bytes of each pre-split piece (a stand-in for a BPE tokenizer: Python work on the CPU)."""
    out: list[int] = []
    for piece in _SPLIT.findall(text):
        out.extend(piece.encode("utf-8"))
    return out


def detokenize(ids: list[int]) -> str:
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, cache: torch.Tensor, pos: int, mask: torch.Tensor) -> torch.Tensor:
        """``x`` [B, T, d] at positions ``pos..pos+T``; ``cache`` [2, B, H, L, hd] (keys, values),
        written in place; ``mask`` [B, 1, T, pos+T] (True: attend)."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        cache[0, :, :, pos : pos + t] = k
        cache[1, :, :, pos : pos + t] = v
        keys, vals = cache[0, :, :, : pos + t], cache[1, :, :, : pos + t]
        a = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyDecoder(nn.Module):
    def __init__(self, d: int, heads: int, layers: int, max_len: int) -> None:
        super().__init__()
        self.heads, self.max_len = heads, max_len
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)

    def new_cache(self, batch: int, device: torch.device) -> torch.Tensor:
        d = self.tok.embedding_dim
        shape = (len(self.blocks), 2, batch, self.heads, self.max_len, d // self.heads)
        return torch.zeros(shape, device=device)

    def forward(self, idx: torch.Tensor, cache: torch.Tensor, pos: int, npad: torch.Tensor) -> torch.Tensor:
        """Logits of the last position of ``idx`` [B, T] (cache positions ``pos..pos+T``); ``npad``
        [B]: each row's left padding (masked out; positions count from the first real token)."""
        t = idx.shape[1]
        where = torch.arange(pos, pos + t, device=idx.device)
        keys = torch.arange(pos + t, device=idx.device)
        causal = where[:, None] >= keys[None, :]
        mask = (causal[None] & (keys[None, None, :] >= npad[:, None, None])).unsqueeze(1)
        x = self.tok(idx) + self.pos((where[None, :] - npad[:, None]).clamp(min=0))
        for i, blk in enumerate(self.blocks):
            x = blk(x, cache[i], pos, mask)
        return self.head(self.ln(x[:, -1]))


def make_prompts(n: int, words: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(WORDS), (n, words), generator=g).tolist()
    return [" ".join(WORDS[i] for i in row) + "." for row in picks]


@torch.inference_mode()
def serve_batch(
    model: TinyDecoder,
    prompts: list[str],
    first_id: int,
    new_tokens: int,
    device: torch.device,
    clock: dict[str, dict[int, Any]] | None = None,
) -> list[str]:
    """One engine iteration: tokenize, prefill, decode, detokenize (each a marked phase).
    ``clock``: filled with each request's arrival and token times (``time.time_ns``, the script's
    own measurement, next to the markers)."""
    clock = clock if clock is not None else {"arrival": {}, "tokens": {}}
    with record_function("tokenize"):
        ids = []
        for j, text in enumerate(prompts):
            clock["arrival"][first_id + j] = time.time_ns()
            with record_function(f"request#{first_id + j}"):
                ids.append(tokenize(text))
        width = max(len(r) for r in ids)
        padded = [[PAD] * (width - len(r)) + r for r in ids]  # left padding
        idx = torch.tensor(padded, dtype=torch.long).to(device)
    npad = torch.tensor([width - len(r) for r in ids], device=device)
    cache = model.new_cache(len(ids), device)
    out: list[list[int]] = [[] for _ in ids]
    with record_function("prefill"):
        nxt = model(idx, cache, 0, npad).argmax(-1)
        _emit(nxt, out, first_id, clock)
    for step in range(new_tokens - 1):
        with record_function("decode"):
            nxt = model(nxt[:, None], cache, width + step, npad).argmax(-1)
            _emit(nxt, out, first_id, clock)
    with record_function("detokenize"):
        return [detokenize(r) for r in out]


def _emit(nxt: torch.Tensor, out: list[list[int]], first_id: int, clock: dict[str, dict[int, Any]]) -> None:
    """Copy the batch's new tokens to the host (a synchronisation on a GPU) and mark each."""
    toks = nxt.tolist()
    for j, t in enumerate(toks):
        with record_function(f"token#{first_id + j}"):
            out[j].append(t)
        clock["tokens"].setdefault(first_id + j, []).append(time.time_ns())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt-words", type=int, default=24)
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write per-batch latencies (JSON) here")
    a = p.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(a.seed)
    max_len = a.prompt_words * 16 + a.new_tokens
    model = TinyDecoder(a.dim, a.heads, a.layers, max_len).to(device).eval()
    prompts = make_prompts(a.requests, a.prompt_words, a.seed)
    lat, clock = [], {"arrival": {}, "tokens": {}}
    for first in range(0, a.requests, a.batch):
        t0 = time.perf_counter()
        with record_function("batch"):
            texts = serve_batch(model, prompts[first : first + a.batch], first, a.new_tokens, device, clock)
        lat.append(time.perf_counter() - t0)
    print(f"served {a.requests} requests in {len(lat)} batches; last output {texts[-1]!r}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"batch_s": lat, **clock}, f)


if __name__ == "__main__":
    main()
