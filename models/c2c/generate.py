"""Generation with a trained C2C-GenDA model: all outputs of a cluster decoded together (the joint decoding
loop is hand-written; the LM and its KV cache are transformers').

For an input cluster and ``n_outputs`` = M′, row r of one batch is the prompt ``prefix <|bos|> <#r> <|eos|>
<|bos|>``; every step feeds each row its last token through the LM with its KV cache, takes the new final
hidden states h′ of all rows, subtracts λ·h̄′ (each row's query against the other rows' states so far,
``DuplicationAwareAttention``), and draws one token per row from softmax(LM head(h) / temperature), plain
sampling, special tokens other than ``<|eos|>`` excluded. A row stops at ``<|eos|>`` or after ``max_tokens``
tokens; a stopped row's later states are masked out of the others' attention, as padding is in training.

Each cluster's draws come from a ``torch.Generator`` seeded with (seed, the cluster's tokens), so a cluster's
outputs do not depend on the other clusters in the call or their order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from conf.errors import ModelError
from models.c2c.model import C2CModel
from models.c2c.serialise import RANK_PART, Cluster, check_utterance, decode, encode, prefix_ids, prompt
from models.nmt.base import pick_device
from models.runtime import torch_threads


def cluster_seed(seed: int, cluster: Cluster) -> int:
    """A 63-bit seed from the call's seed and the cluster's tokens."""
    text = json.dumps([seed, [list(u) for u in cluster]], ensure_ascii=False)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


class C2CGenerator:
    """``generate(clusters)``: for each input cluster, ``n_outputs`` new utterances in rank order."""

    def __init__(self, model: C2CModel, card: dict[str, Any], path: Path, device: str):
        self.model, self.card, self.path, self.device = model, card, path, device

    @classmethod
    def load(cls, path: str | Path, *, device: str = "auto", threads: int = 0) -> C2CGenerator:
        """The directory ``train_c2c`` wrote (read offline); a missing one is a ``ModelError`` naming it."""
        device = pick_device(device)
        if device == "cpu":
            torch_threads(threads)
        model, card = C2CModel.load(Path(path), device)
        return cls(model, card, Path(path), device)

    def describe(self) -> str:
        settings = self.card.get("settings", {})
        lm = self.model.lm.config
        origin = f"init {settings['init']}" if settings.get("init") else "from scratch"
        return (
            f"c2c {lm.model_type} {lm.num_hidden_layers}x{lm.hidden_size} ({origin}), "
            f"λ={self.model.dup.lam:g}, ranks 0…{self.model.max_outputs - 1}: {self.path} on {self.device}"
        )

    def fingerprint(self) -> str:
        """A content hash of the model directory's files."""
        from storage.artifacts import hash_inputs

        return hash_inputs([self.path])

    def generate(
        self, clusters: Sequence[Cluster], *, n_outputs: int = 10, max_tokens: int = 40, temperature: float = 1.0, seed: int = 0
    ) -> list[list[list[str]]]:
        """For each input cluster, ``n_outputs`` token lists in rank order (``<#0>`` first).

        Args:
            clusters: input clusters, each a list of utterances (lists of delexicalised word tokens).
            n_outputs: M′, outputs per cluster, at most the model's number of rank tokens.
            max_tokens: the most model tokens an output may have (words from scratch, subwords with an
                initialised BPE model; ``<|eos|>`` not counted).
            temperature: > 0; logits are divided by it before the softmax (plain sampling, no top-k).
            seed: with each cluster's tokens, seeds that cluster's draws.
        """
        if not 1 <= n_outputs <= self.model.max_outputs:
            raise ModelError(
                f"generate: n_outputs = {n_outputs}; expected 1 … {self.model.max_outputs} "
                f"(the rank tokens {self.path} was trained with)"
            )
        if max_tokens < 1 or max_tokens + RANK_PART > self.model.max_length:
            raise ModelError(
                f"generate: max_tokens = {max_tokens}; expected 1 … "
                f"{self.model.max_length - RANK_PART} (the model's {self.model.max_length} positions)"
            )
        if not temperature > 0:
            raise ModelError(f"generate: temperature = {temperature!r}; expected a number > 0")
        for k, cluster in enumerate(clusters):
            for i, utterance in enumerate(cluster):
                check_utterance(utterance, f"clusters[{k}] utterance {i}")
        with torch.inference_mode():
            return [self.decode_cluster(c, n_outputs, max_tokens, temperature, cluster_seed(seed, c)) for c in clusters]

    def decode_cluster(self, cluster: Cluster, n_outputs: int, max_tokens: int, temperature: float, seed: int) -> list[list[str]]:
        """The joint decoding loop of the module docstring, for one cluster."""
        model, specials = self.model, self.model.specials
        generator = torch.Generator(device=self.device).manual_seed(seed)
        budget = model.max_length - RANK_PART - max_tokens
        prefix = prefix_ids([encode(model.tokenizer, list(u)) for u in cluster], specials, budget)
        ids = torch.tensor([prompt(prefix, r, specials) for r in range(n_outputs)], device=self.device)
        h, cache = model.hidden(ids, use_cache=True)
        states = h[:, -1:]  # h′ at the target window's positions so far: M′ × t × d
        real = torch.ones(n_outputs, 1, dtype=torch.bool, device=self.device)
        banned = torch.tensor(specials.banned, dtype=torch.long, device=self.device)
        alive = torch.ones(n_outputs, dtype=torch.bool, device=self.device)
        tokens: list[list[int]] = [[] for _ in range(n_outputs)]
        for step in range(max_tokens):
            logits = model.head(model.dup(states, real, q_start=step))[:, 0].float()
            logits[:, banned] = float("-inf")
            probs = torch.softmax(logits / temperature, dim=-1)
            drawn = torch.multinomial(probs, 1, generator=generator)[:, 0]
            for r in alive.nonzero()[:, 0].tolist():
                if drawn[r].item() != specials.eos:
                    tokens[r].append(int(drawn[r]))
            alive &= drawn != specials.eos
            if step == max_tokens - 1 or not alive.any():
                break
            h, cache = model.hidden(torch.where(alive, drawn, specials.eos)[:, None], past_key_values=cache, use_cache=True)
            states = torch.cat([states, h], dim=1)
            real = torch.cat([real, alive[:, None]], dim=1)
        return [decode(model.tokenizer, row, specials) for row in tokens]
