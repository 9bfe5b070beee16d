"""C2C-GenDA's serialisation of a cluster pair for one causal LM (hand-written; the tokenizers are the
``tokenizers`` library's, wrapped by transformers).

One output utterance of rank r given the input cluster s1 … sn is the sequence

    <|bos|> s1 <|eos|> <|bos|> s2 <|eos|> … <|bos|> <#r> <|eos|> <|bos|> target <|eos|>
    └──────────── prefix (the input cluster) ───┘ └─ rank part ─┘ └──── target ─────┘

and the loss covers the target's tokens and its final ``<|eos|>`` only (the authors' "loss only after the
rank token"). All outputs of one cluster share the prefix and a rank part of the same length, so in a batch
of the cluster's outputs every target starts at the same position (``Window.start``) and positions align,
which the duplication-aware attention and the diverse-oriented regulariser rely on.

Special tokens are spelt ``<|…|>`` and rank tokens ``<#r>`` so that neither clashes with a delexicalised slot
token (``<fromloc.city_name>``). From scratch the vocabulary is a ``tokenizers`` WordLevel model over the
training tokens (split on whitespace only: the inputs are already word tokens); initialised from a
checkpoint, its own tokenizer gets the specials, the rank tokens and the slot tokens as single added tokens.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any

from conf.errors import ModelError

BOS, EOS, PAD, UNK = "<|bos|>", "<|eos|>", "<|pad|>", "<|unk|>"
SPECIALS = (PAD, UNK, BOS, EOS)
SLOT = re.compile(r"<[^<>#|\s][^<>\s]*>")  # a delexicalised slot token; not <#r>, not <|x|>
RANK = re.compile(r"<#\d+>")
RANK_PART = 4  # <|bos|> <#r> <|eos|> <|bos|>: the target's <|bos|> ends the prompt

Utterance = Sequence[str]
Cluster = Sequence[Utterance]


def rank_token(r: int) -> str:
    """``<#r>``: the diversity rank condition (rank 0 = the most distant target, the pairing's first pick)."""
    return f"<#{r}>"


def rank_tokens(max_outputs: int) -> list[str]:
    return [rank_token(r) for r in range(max_outputs)]


def check_utterance(utterance: Utterance, where: str) -> None:
    """A token is a non-empty string without whitespace, and not one of the reserved spellings."""
    for i, token in enumerate(utterance):
        if not isinstance(token, str) or not token or any(c.isspace() for c in token):
            raise ModelError(
                f"{where}, token {i}: {token!r}; expected a non-empty string without whitespace "
                "(an utterance is a list of word tokens)"
            )
        if token in SPECIALS or RANK.fullmatch(token):
            raise ModelError(f"{where}, token {i}: {token!r} is reserved for the C2C model's own special tokens")


@dataclasses.dataclass(frozen=True)
class Specials:
    """The ids of the serialisation's tokens in one tokenizer, and those sampling must never produce."""

    bos: int
    eos: int
    pad: int
    ranks: tuple[int, ...]
    banned: tuple[int, ...]  # every special id but eos: never sampled
    added: frozenset[int]  # added tokens (specials, slots): decoded one by one, never merged into a word

    @classmethod
    def of(cls, tokenizer: Any, max_outputs: int) -> Specials:
        ids = tokenizer.convert_tokens_to_ids
        bos, eos, pad = ids(BOS), ids(EOS), ids(PAD)
        ranks = [ids(t) for t in rank_tokens(max_outputs)]
        if None in (bos, eos, pad, *ranks) or tokenizer.unk_token_id in (bos, eos, pad, *ranks):
            raise ModelError(
                f"the tokenizer lacks the C2C special or rank tokens ({BOS}, {EOS}, {PAD}, <#0>…"
                f"<#{max_outputs - 1}>); expected a tokenizer made by models.c2c's training"
            )
        decoder = tokenizer.added_tokens_decoder
        special = {i for i, t in decoder.items() if t.special} | set(tokenizer.all_special_ids) | set(ranks)
        return cls(bos, eos, pad, tuple(ranks), tuple(sorted(special - {eos})), frozenset(decoder))


def build_tokenizer(utterances: Iterable[Utterance], max_outputs: int) -> Any:
    """A WordLevel tokenizer over the tokens of ``utterances`` (sorted, after the specials and the rank
    tokens), whitespace-split, as a ``PreTrainedTokenizerFast``; an unseen word is ``<|unk|>``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    ranks = rank_tokens(max_outputs)
    words = sorted({t for u in utterances for t in u} - set(SPECIALS) - set(ranks))
    vocab = {t: i for i, t in enumerate([*SPECIALS, *ranks, *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, additional_special_tokens=ranks
    )


def extend_tokenizer(tokenizer: Any, utterances: Iterable[Utterance], max_outputs: int) -> int:
    """Add the specials, the rank tokens and every slot token of ``utterances`` to a checkpoint's tokenizer,
    each as one token; returns how many were new (the caller resizes the embeddings)."""
    from tokenizers import AddedToken

    slots = sorted({t for u in utterances for t in u if SLOT.fullmatch(t)})
    vocab = tokenizer.get_vocab()
    new = tokenizer.add_tokens([AddedToken(s, lstrip=True, normalized=False) for s in slots if s not in vocab])
    return new + tokenizer.add_special_tokens(
        {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "additional_special_tokens": rank_tokens(max_outputs)}
    )


def encode(tokenizer: Any, utterance: Utterance) -> list[int]:
    """The ids of one utterance (its tokens joined by spaces), without specials."""
    if not utterance:
        return []
    return list(tokenizer(" ".join(utterance), add_special_tokens=False)["input_ids"])


def decode(tokenizer: Any, ids: Sequence[int], specials: Specials) -> list[str]:
    """Word tokens back from ids: runs of ordinary ids through the tokenizer's decoder, split on whitespace;
    an added token (a slot) stands alone, so ``to<toloc.city_name>`` never comes out glued."""
    out: list[str] = []
    run: list[int] = []
    for i in [*ids, None]:
        if i is None or i in specials.added:
            if run:  # a subword run spelling a reserved token ("<", "#", "3", ">") is dropped with it
                words = tokenizer.decode(run, clean_up_tokenization_spaces=False).split()
                out.extend(w for w in words if w not in SPECIALS and not RANK.fullmatch(w))
                run = []
            if i is not None and i not in specials.banned and i != specials.eos:
                out.append(tokenizer.convert_ids_to_tokens(i))
        else:
            run.append(i)
    return out


def prefix_ids(encoded: Sequence[Sequence[int]], specials: Specials, budget: int) -> list[int]:
    """``<|bos|> s1 <|eos|> …`` of the encoded input cluster, whole utterances dropped from the left until it
    has at most ``budget`` ids (the most recent utterances are kept)."""
    parts: list[list[int]] = []
    size = 0
    for ids in reversed(encoded):
        if size + len(ids) + 2 > budget:
            break
        parts.append([specials.bos, *ids, specials.eos])
        size += len(ids) + 2
    return [i for part in reversed(parts) for i in part]


def prompt(prefix: Sequence[int], rank: int, specials: Specials) -> list[int]:
    """The prefix, the rank part and the target's ``<|bos|>``: what generation starts from."""
    return [*prefix, specials.bos, specials.ranks[rank], specials.eos, specials.bos]


@dataclasses.dataclass(frozen=True)
class ClusterBatch:
    """The M outputs of one cluster as one batch (lists of ids; ``train`` makes tensors).

    ``input_ids`` (M × L) = prompt + target, right-padded; the target window is positions ``start`` …
    L − 1 (T = L − start), where position ``start + k`` predicts ``labels[r][k]`` (target token k, then
    ``<|eos|>``, then −100 for padding)."""

    input_ids: list[list[int]]
    attention_mask: list[list[int]]
    labels: list[list[int]]
    start: int


def cluster_batch(
    encoded_inputs: Sequence[Sequence[int]],
    encoded_targets: Sequence[Sequence[int]],
    specials: Specials,
    max_length: int,
    where: str,
) -> ClusterBatch:
    """Serialise one pair (targets in rank order) within ``max_length`` positions."""
    longest = max(len(t) for t in encoded_targets)
    budget = max_length - RANK_PART - longest
    if budget < 0:
        raise ModelError(
            f"{where}: a target of {longest} tokens does not fit in max_length={max_length} with its "
            f"rank part; expected at most {max_length - RANK_PART} tokens. Hint: raise max_length"
        )
    prefix = prefix_ids(encoded_inputs, specials, budget)
    rows, masks, labels = [], [], []
    for r, target in enumerate(encoded_targets):
        head = prompt(prefix, r, specials)
        pad = longest - len(target)
        rows.append([*head, *target] + [specials.pad] * pad)
        masks.append([1] * (len(head) + len(target)) + [0] * pad)
        labels.append([*target, specials.eos] + [-100] * pad)
    return ClusterBatch(rows, masks, labels, len(prefix) + RANK_PART - 1)
