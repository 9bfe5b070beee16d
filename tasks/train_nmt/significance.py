"""Paired significance of each arm against the baseline, with sacrebleu's own tests (``sacrebleu.significance``):
paired bootstrap resampling (Koehn 2004) and approximate randomisation (Riezler & Maxwell 2005), on the test
output of all seeds of an arm concatenated, against the baseline's seeds concatenated in the same order:

    system   = hyp(arm, seed₁) ‖ hyp(arm, seed₂) ‖ …        refs = ref ‖ ref ‖ …
    baseline = hyp(base, seed₁) ‖ hyp(base, seed₂) ‖ …

p_value (bootstrap): (#{resamples with |Δ*| − mean|Δ*| ≥ |Δ|} + 1) / (n + 1); ci_low, ci_high: the system's
mean score over the resamples ± sacrebleu's 95 % half-width (the 2.5th to 97.5th percentile); p_ar: the
approximate randomisation's p. Both seeded: sacrebleu reads ``SACREBLEU_SEED``, set here for the call.

One departure: sacrebleu counts only resamples with a strictly larger difference (multeval's choice), so a
system whose output *is* the baseline's (every Δ* = 0) gets its smallest p, 1/(n + 1), as if it differed
significantly; such a system has p = 1 here (both tests), there being no difference to test.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ConfigDict
from typing_extensions import TypedDict

from conf.errors import ArtifactError, InputError
from storage.parts import Parts
from tasks.runtime.stage import Stage

METRICS = ("BLEU", "chrF")  # sacrebleu's BLEU (13a) and chrF (n = 6, β = 2), as tasks.common.evaluation scores them
TRANSLATIONS = pa.schema(
    [
        ("uid", pa.string()),
        ("src", pa.string()),
        ("ref", pa.string()),
        ("hyp", pa.string()),
        ("testset", pa.string()),
        ("arm", pa.string()),
        ("seed", pa.int64()),
        ("model", pa.string()),
    ]
)
SIGNIFICANCE = pa.schema(
    [
        ("arm", pa.string()),
        ("metric", pa.string()),
        ("score", pa.float64()),
        ("p_value", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("p_ar", pa.float64()),
        ("seeds", pa.int64()),
        ("sentences", pa.int64()),
        ("signature", pa.string()),
    ]
)


class System(TypedDict):
    """One student of an arm: the test translations it made (a stage input) are its seed's block."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    arm: str
    seed: int
    model: str


def arm_translations(*translations: Parts, systems: list[System], testset: str) -> pa.Table:
    """Every student's translations of one test set in one table (the `test_translations` view): input i is
    ``systems[i]``'s translate stage output (uid, src, ref, hyp), tagged with the test set, arm, seed and model.
    All translate the same test rows in the same order (what the paired tests pair up); a mismatch raises."""
    if len(translations) != len(systems):
        raise InputError(f"arm_translations: {len(translations)} inputs for {len(systems)} systems")
    tables, uids = [], None
    for parts, s in zip(translations, systems):
        t = parts.table(["uid", "src", "ref", "hyp"])
        if uids is None:
            uids = t["uid"]
        elif not t["uid"].equals(uids):
            raise ArtifactError(
                f"arm_translations: arm {s['arm']!r} seed {s['seed']} translated other test rows "
                f"of {testset!r} than arm {systems[0]['arm']!r} seed {systems[0]['seed']}"
            )
        n = t.num_rows
        tables.append(
            pa.table(
                {
                    **{c: t[c] for c in ("uid", "src", "ref", "hyp")},
                    "testset": pa.repeat(pa.scalar(testset), n),
                    "arm": pa.repeat(pa.scalar(s["arm"]), n),
                    "seed": pa.repeat(pa.scalar(s["seed"], pa.int64()), n),
                    "model": pa.repeat(pa.scalar(s["model"]), n),
                },
                schema=TRANSLATIONS,
            )
        )
    return pa.concat_tables(tables) if tables else TRANSLATIONS.empty_table()


_SEED_LOCK = threading.Lock()


@contextlib.contextmanager
def sacrebleu_seed(seed: int) -> Iterator[None]:
    """``SACREBLEU_SEED`` = ``seed`` for the block (sacrebleu's tests read it), one holder at a time."""
    with _SEED_LOCK:
        before = os.environ.get("SACREBLEU_SEED")
        os.environ["SACREBLEU_SEED"] = str(seed)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("SACREBLEU_SEED", None)
            else:
                os.environ["SACREBLEU_SEED"] = before


def paired_tests(
    hyps: Mapping[str, Sequence[str]],
    refs: Sequence[str],
    *,
    baseline: str,
    resamples: int = 1000,
    ar_trials: int = 10000,
    seed: int = 12345,
) -> list[dict]:
    """sacrebleu's ``PairedTest`` of every system in ``hyps`` against ``baseline``, BLEU and chrF.

    Args:
        hyps: System name -> its hypotheses (for an arm: its seeds' outputs concatenated), each aligned
            with ``refs``.
        refs: The references (for concatenated seeds: the test references repeated as often).
        baseline: The key of ``hyps`` every other system is compared with.
        resamples: Paired bootstrap resamples.
        ar_trials: Approximate randomisation trials (0: not run, ``p_ar`` null).
        seed: ``SACREBLEU_SEED`` (≥ 1: sacrebleu leaves 0 unseeded).

    Returns:
        One row per system and metric (``SIGNIFICANCE``'s fields but ``seeds``): the corpus score, the
        bootstrap p-value and 95 % CI (the baseline's row: p null, its own CI) and the AR p-value.
    """
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    if baseline not in hyps:
        raise InputError(f"paired_tests: the baseline {baseline!r} is not among the systems {sorted(hyps)}")
    if seed < 1:
        raise InputError(f"paired_tests: seed {seed}; sacrebleu leaves a seed of 0 unseeded, use one >= 1")
    names = [baseline, *(n for n in hyps if n != baseline)]
    for n in names:
        if len(hyps[n]) != len(refs):
            raise InputError(f"paired_tests: system {n!r} has {len(hyps[n])} hypotheses for {len(refs)} references")
    if not refs:
        raise InputError("paired_tests: the test set is empty")
    systems = [(n, list(hyps[n])) for n in names]
    with sacrebleu_seed(seed):
        metrics = dict(zip(METRICS, (BLEU(), CHRF())))
        signatures, bs = PairedTest(systems, metrics, [list(refs)], test_type="bs", n_samples=resamples)()
        ar = PairedTest(systems, metrics, [list(refs)], test_type="ar", n_samples=ar_trials)()[1] if ar_trials else None
    rows = []
    for metric, key in zip(METRICS, [k for k in bs if k != "System"]):  # sacrebleu's keys: BLEU, chrF2
        for i, (name, out) in enumerate(systems):
            r, same = bs[key][i], i > 0 and out == systems[0][1]  # same: the baseline's own output
            rows.append(
                {
                    "arm": name,
                    "metric": metric,
                    "score": float(r.score),
                    "p_value": None if i == 0 else 1.0 if same else float(r.p_value),
                    "ci_low": float(r.mean - r.ci),
                    "ci_high": float(r.mean + r.ci),
                    "p_ar": None if i == 0 or ar is None else 1.0 if same else float(ar[key][i].p_value),
                    "sentences": len(refs),
                    "signature": str(signatures[key]),
                }
            )
    return rows


def paired_significance(
    translations: Parts, *, baseline: str, arms: list[str], resamples: int = 1000, ar_trials: int = 10000, seed: int = 12345
) -> pa.Table:
    """``paired_tests`` over the `test_translations` of one test set: each arm's seeds concatenated in the order
    they were listed, seed i of an arm paired with seed i of the baseline (the same test rows: their references)."""
    table = translations.table(["uid", "ref", "hyp", "arm", "seed"])
    blocks: dict[str, list[tuple[int, pa.Table]]] = {}
    for arm in arms:
        mine = table.filter(pc.equal(table["arm"], arm))
        seeds = list(dict.fromkeys(mine["seed"].to_pylist()))
        blocks[arm] = [(s, mine.filter(pc.equal(mine["seed"], s))) for s in seeds]
    n = len(blocks.get(baseline, []))
    if uneven := {a: len(b) for a, b in blocks.items() if len(b) != n or not b}:
        raise InputError(f"paired_significance: every arm needs the baseline's {n} seed(s); found {uneven}")
    hyps = {arm: [h for _, t in b for h in t["hyp"].to_pylist()] for arm, b in blocks.items()}
    refs = [r for _, t in blocks[baseline] for r in t["ref"].to_pylist()]
    rows = paired_tests(hyps, refs, baseline=baseline, resamples=resamples, ar_trials=ar_trials, seed=seed)
    return pa.Table.from_pylist([{**r, "seeds": n} for r in rows], schema=SIGNIFICANCE)


ARM_TRANSLATIONS = Stage("arm_translations", "1", arm_translations, view="test_translations", reduce=True)
PAIRED_SIGNIFICANCE = Stage("paired_significance", "1", paired_significance, reduce=True)
