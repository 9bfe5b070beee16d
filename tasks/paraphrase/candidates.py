"""PCC's candidates and their scores (Alg. 2, lines 4–6): bags of paraphrases, M(x, x̄) and G(x, x̄).

    bag(x)  = dedup( n_easy top-k/top-p samples ∪ n_hard bottom-k samples ) \\ {x}      (Eq. 1, Eq. 2)
    mi      = 1[argmax NLI(x ⇒ x̄) = entailment ∧ argmax NLI(x̄ ⇒ x) = entailment]        (M of Eq. 3)
    sim     = G(x, x̄): chrF/100, a regression cross-encoder, or embedding cosine        (G of Eq. 3–4)

With ``candidates`` kept per sentence of which ``bottom_k_candidates`` are hard (appendix A: 20 and
4), each sampler draws ``ceil(oversample × its share)`` so that deduplication and the filter leave
enough. Candidates keep ``parent_uid`` (the original row), ``sampler``, the draw's index and the
generator's fingerprint. Models are loaded once per process and reused by every shard.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from models.candidates import BOTTOM_K, TOP_K_TOP_P, Sampler, candidate_bag
from models.runtime import loaded
from tasks.runtime.progress import sentences
from tasks.runtime.stage import Stage

CANDIDATES = pa.schema(
    [
        ("uid", pa.string()),
        ("parent_uid", pa.string()),
        ("text", pa.string()),
        ("label", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("sampler", pa.string()),
        ("sample", pa.int32()),
        ("model", pa.string()),
        ("original", pa.string()),
    ]
)
SCORED = pa.schema(
    list(CANDIDATES) + [("mi", pa.bool_()), ("p_entail_fwd", pa.float64()), ("p_entail_bwd", pa.float64()), ("sim", pa.float64())]
)


def sampling_plan(
    *,
    candidates: int,
    bottom_k_candidates: int,
    oversample: float,
    top_k: int,
    top_p: float,
    bottom_k: int,
    bottom_k_steps: int,
    temperature: float,
    seed: int,
) -> list[tuple[Sampler, int]]:
    """(sampler, draws per sentence): the easy share by top-k/top-p, the hard share by bottom-k."""
    easy = Sampler(TOP_K_TOP_P, top_k, top_p, temperature=temperature, seed=seed)
    hard = Sampler(BOTTOM_K, top_k, top_p, bottom_k, bottom_k_steps, temperature, seed + 1)
    return [
        (easy, math.ceil(oversample * (candidates - bottom_k_candidates))),
        (hard, math.ceil(oversample * bottom_k_candidates)),
    ]


def _load_generator(spec: tuple) -> Any:
    kind, args = spec[0], dict(spec[1:])
    if kind == "hf":
        from models.generation import HFParaphraser

        return HFParaphraser.load(args["model_path"], device=args["device"], threads=args["threads"], prompt=args["prompt"])
    from models.generation import RoundTripParaphraser
    from tasks.common.nmt import load

    return RoundTripParaphraser(
        load(args["forward_path"], dict(args["forward"]), dict(args["forward_runtime"])),
        load(args["backward_path"], dict(args["backward"]), dict(args["backward_runtime"])),
        pivot_beam=args["pivot_beam"],
    )


_generator = loaded(_load_generator, maxsize=2)


def _frozen(d: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, _frozen(v) if isinstance(v, Mapping) else v) for k, v in d.items()))


def load_generator(generator: Mapping[str, Any], resources: Mapping[str, Any]) -> Any:
    """The paraphraser the stage's ``generator`` parameters and ``resources`` (paths, runtime) describe, loaded
    once per process: shard threads wait for the first load (``models.runtime.loaded``: transformers' loading
    is not thread-safe, two concurrent ``from_pretrained`` calls can leave weights on the meta device)."""
    return _generator((generator["kind"], *_frozen({**generator, **resources})))


def generate_candidates(
    rows: pa.Table,
    *,
    generator: Mapping[str, Any],
    plan: list[Mapping[str, Any]],
    generator_fingerprint: str,
    max_tokens: int,
    **resources: Any,
) -> pa.Table:
    """Every row's bag of candidates (``candidate_bag``): deduplicated, never the input, lineage kept."""
    model = load_generator(generator, resources)
    texts = rows["text"].to_pylist()
    samplers = [(Sampler(**s["sampler"]), s["n"]) for s in plan]
    progress = sentences(len(texts) * (model.pivot_passes + len(samplers)))
    drawn = model.generate(texts, samplers, max_tokens=max_tokens, progress=progress)
    labels = rows["label"].to_pylist() if "label" in rows.column_names else [None] * rows.num_rows
    out: dict[str, list] = {k: [] for k in CANDIDATES.names}
    for i, (uid, text) in enumerate(zip(rows["uid"].to_pylist(), texts)):
        for sampler, sample, cand in candidate_bag(text, {name: per_text[i] for name, per_text in drawn.items()}):
            for k, v in (
                ("parent_uid", uid),
                ("text", cand),
                ("label", labels[i]),
                ("sampler", sampler),
                ("sample", sample),
                ("original", text),
            ):
                out[k].append(v)
            out["source"].append(rows["source"][i].as_py())
            out["line"].append(rows["line"][i].as_py())
    n = len(out["text"])
    out["model"] = [generator_fingerprint] * n
    out["uid"] = candidate_uids(out["parent_uid"], out["text"])
    return pa.table(out, schema=CANDIDATES)


def candidate_uids(parent_uids: list[str], texts: list[str]) -> list[str]:
    """md5(parent uid, text): a candidate's identity is what it paraphrases and what it says."""
    return [hashlib.md5(f"{p}\x1f{t}".encode()).hexdigest() for p, t in zip(parent_uids, texts)]


def _load_nli(model: str, entailment_label: str | None, device: str, threads: int) -> Any:
    from models.nli import NLIModel

    return NLIModel.load(model, device=device, threads=threads, entailment_label=entailment_label)


def _load_similarity(kind: str, model: str | None, device: str, threads: int) -> Any:
    from models.similarity import load_similarity

    return load_similarity(kind, model, device=device, threads=threads)


_nli, _similarity = loaded(_load_nli, maxsize=2), loaded(_load_similarity, maxsize=2)


def score_candidates(
    cands: pa.Table, *, nli: Mapping[str, Any] | None, similarity: Mapping[str, Any], **resources: Any
) -> pa.Table:
    """Each candidate with M both ways (``mi``, ``p_entail_fwd``: x ⇒ x̄, ``p_entail_bwd``: x̄ ⇒ x; null without
    an NLI model) and G(x, x̄) (``sim``), x being its ``original``."""
    x = cands["original"].to_pylist()
    xbar = cands["text"].to_pylist()
    n = len(xbar)
    mi = p_fwd = p_bwd = None
    if nli is not None and n:
        run = resources["nli_runtime"]
        result = _nli(resources["nli_path"], nli["entailment_label"], run["device"], run["threads"]).mutual_implication(
            x, xbar, max_tokens=run["max_tokens"]
        )
        mi, p_fwd, p_bwd = result.mi, result.p_forward, result.p_backward
    run = resources["similarity_runtime"]
    sim = (
        _similarity(similarity["kind"], resources.get("similarity_path"), run["device"], run["threads"]).score(
            x, xbar, max_tokens=run["max_tokens"]
        )
        if n
        else np.zeros(0)
    )
    nulls = pa.nulls(n, pa.float64())
    return (
        cands.append_column("mi", pa.array(mi, pa.bool_()) if mi is not None else pa.nulls(n, pa.bool_()))
        .append_column("p_entail_fwd", pa.array(p_fwd, pa.float64()) if p_fwd is not None else nulls)
        .append_column("p_entail_bwd", pa.array(p_bwd, pa.float64()) if p_bwd is not None else nulls)
        .append_column("sim", pa.array(np.asarray(sim, dtype=np.float64)))
    )


GENERATE_CANDIDATES = Stage("paraphrase_candidates", "2", generate_candidates, tags=("gpu",))  # 2: samples seeded per batch
SCORE_CANDIDATES = Stage("paraphrase_scores", "1", score_candidates, view="paraphrase_candidates", tags=("gpu",))
