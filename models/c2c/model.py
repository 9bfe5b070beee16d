"""The C2C-GenDA network: one causal GPT-2 (transformers' ``GPT2LMHeadModel``, or any causal LM loaded with
``AutoModelForCausalLM`` from a local checkpoint) whose final hidden states pass through the hand-written
``DuplicationAwareAttention`` before its LM head; its settings, and the directory it is saved to.

    h′ = GPT-2(serialised pair)[target window]    (transformers)
    h  = h′ − λ·h̄′                               (models.c2c.attention)
    p  = softmax(LM head(h))                      (transformers' head, tied to the input embeddings)

A saved model is a directory: ``save_pretrained`` of the LM and of its tokenizer, ``dup_attention.safetensors``
(W_q, W_k, W_v) and ``c2c.json`` (the settings, λ, γ, the special and rank tokens, the context length).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from conf.errors import ModelError
from models.c2c.attention import DuplicationAwareAttention
from models.c2c.serialise import BOS, EOS, PAD, UNK, Specials, build_tokenizer, extend_tokenizer, rank_tokens
from models.runtime import loading

CARD = "c2c.json"
DUP_WEIGHTS = "dup_attention.safetensors"
FORMAT = 1
MAKE_HINT = "Hint: train one with models.c2c.train_c2c(pairs, out, settings=C2CSettings(...))"


@dataclasses.dataclass(frozen=True)
class C2CSettings:
    """Training settings (the C2C-GenDA paper and the authors' code), from scratch unless ``init`` is set.

    ``lr`` None means 6.25e-5 (the authors', for an initialised GPT-2) when ``init`` is given, else 1e-3: a
    small randomly initialised model learns nothing useful in 10 epochs at 6.25e-5. No warm-up; the rate
    decays linearly to 0 over the run (AdamW). ``layers``, ``d_model``, ``heads`` size a from-scratch
    GPT-2 (``max_length`` is its ``n_positions``) and are ignored with ``init``.
    """

    layers: int = 2
    d_model: int = 128
    heads: int = 4
    lam: float = 0.01  # λ of the duplication-aware attention (paper: {0.1 … 0.001}, 0.01 in the authors' runs)
    gamma: float = 1.0  # γ of the diverse-oriented regularisation (paper: 1.0); > 1/2 diverges, see attention.py
    epochs: int = 10
    lr: float | None = None
    weight_decay: float = 0.01
    clip: float = 1.0  # gradient-norm clipping
    max_outputs: int = 10  # M′: rank tokens <#0> … <#M′−1>
    max_length: int = 512  # positions of one serialised sequence; the prefix is cut from the left to fit
    seed: int = 0
    init: str | None = None  # a local GPT-2-style checkpoint (directory or cached name)

    def __post_init__(self) -> None:
        positive = {
            "layers": self.layers,
            "d_model": self.d_model,
            "heads": self.heads,
            "epochs": self.epochs,
            "max_outputs": self.max_outputs,
            "max_length": self.max_length,
        }
        for key, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"C2CSettings.{key} = {value!r}; expected an integer >= 1")
        if self.d_model % self.heads:
            raise ModelError(f"C2CSettings.d_model = {self.d_model} is not a multiple of heads = {self.heads}")
        for key in ("lam", "gamma", "weight_decay", "clip"):
            if not getattr(self, key) >= 0:
                raise ModelError(f"C2CSettings.{key} = {getattr(self, key)!r}; expected a number >= 0")
        if self.lr is not None and not self.lr > 0:
            raise ModelError(f"C2CSettings.lr = {self.lr!r}; expected a number > 0 (or None for the default)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ModelError(f"C2CSettings.seed = {self.seed!r}; expected an integer >= 0")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (6.25e-5 if self.init else 1e-3)


class C2CModel(nn.Module):
    """The causal LM, the duplication-aware attention and the tokenizer, with the serialisation's ids."""

    def __init__(self, lm: Any, dup: DuplicationAwareAttention, tokenizer: Any, *, max_outputs: int, max_length: int):
        super().__init__()
        self.lm, self.dup, self.tokenizer = lm, dup, tokenizer
        self.max_outputs, self.max_length = max_outputs, max_length
        self.specials = Specials.of(tokenizer, max_outputs)

    def hidden(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, *, past_key_values: Any = None, use_cache: bool = False
    ) -> tuple[Tensor, Any]:
        """h′: the LM's final hidden states (after its last layer norm), and its KV cache if asked for."""
        out = self.lm.base_model(
            input_ids=input_ids, attention_mask=attention_mask, past_key_values=past_key_values, use_cache=use_cache
        )
        return out.last_hidden_state, out.past_key_values

    def head(self, h: Tensor) -> Tensor:
        return self.lm.get_output_embeddings()(h)

    def window_logits(self, input_ids: Tensor, attention_mask: Tensor, start: int, mask: Tensor) -> Tensor:
        """Logits at the target window (positions ``start`` …) of one cluster's batch, after h′ − λ·h̄′."""
        h, _ = self.hidden(input_ids, attention_mask)
        return self.head(self.dup(h[:, start:], mask))

    def save(self, out: Path, card: dict[str, Any]) -> None:
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        self.lm.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        save_file({k: v.detach().contiguous().cpu() for k, v in self.dup.state_dict().items()}, out / DUP_WEIGHTS)
        card = {
            "format": FORMAT,
            "d": self.dup.d,
            "lam": self.dup.lam,
            "max_outputs": self.max_outputs,
            "max_length": self.max_length,
            "tokens": {"bos": BOS, "eos": EOS, "pad": PAD, "unk": UNK, "ranks": rank_tokens(self.max_outputs)},
            **card,
        }
        (out / CARD).write_text(json.dumps(card, indent=1, sort_keys=True, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path, device: str) -> tuple[C2CModel, dict[str, Any]]:
        """A directory ``save`` wrote; every file read locally."""
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(path)
        if not (path / CARD).is_file():
            what = "does not exist" if not path.exists() else f"has no {CARD}"
            raise ModelError(f"{path}: {what}; expected a C2C model directory. {MAKE_HINT}")
        try:
            card = json.loads((path / CARD).read_text())
            with loading():
                lm = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
                tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            dup = DuplicationAwareAttention(int(card["d"]), float(card["lam"]))
            dup.load_state_dict(load_file(path / DUP_WEIGHTS))
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            raise ModelError(f"{path}: not a complete C2C model directory ({e}). {MAKE_HINT}") from e
        model = cls(lm, dup, tokenizer, max_outputs=int(card["max_outputs"]), max_length=int(card["max_length"]))
        return model.to(device).eval(), card


def new_model(settings: C2CSettings, utterances: list[list[str]]) -> C2CModel:
    """From scratch (a WordLevel tokenizer and a small GPT-2) or from ``settings.init``, seeded by the caller."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if settings.init is None:
        tokenizer = build_tokenizer(utterances, settings.max_outputs)
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=settings.max_length,
            n_embd=settings.d_model,
            n_layer=settings.layers,
            n_head=settings.heads,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        lm, max_length = GPT2LMHeadModel(config), settings.max_length
    else:
        lm, tokenizer = load_init(settings.init)
        extend_tokenizer(tokenizer, utterances, settings.max_outputs)
        lm.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        for key in ("bos", "eos", "pad"):
            setattr(lm.config, f"{key}_token_id", getattr(tokenizer, f"{key}_token_id"))
        positions = getattr(lm.config, "n_positions", None) or getattr(lm.config, "max_position_embeddings", None)
        max_length = min(settings.max_length, positions or settings.max_length)
    d = lm.get_output_embeddings().in_features
    dup = DuplicationAwareAttention(d, settings.lam)
    return C2CModel(lm, dup, tokenizer, max_outputs=settings.max_outputs, max_length=max_length)


def load_init(init: str) -> tuple[Any, Any]:
    """A causal LM and its tokenizer from a local directory or the local Hugging Face cache, never the hub."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with loading():
            lm = AutoModelForCausalLM.from_pretrained(init, local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(init, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ModelError(
            f"C2CSettings.init = {init!r}: no causal LM with its tokenizer found locally (a directory "
            f"written by save_pretrained, or a name in the Hugging Face cache): {e}"
        ) from e
    if not tokenizer.is_fast:
        raise ModelError(f"C2CSettings.init = {init!r}: a slow tokenizer; expected a fast (tokenizers) one")
    return lm, tokenizer
