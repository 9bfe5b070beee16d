"""Paraphrase-candidate throughput: batched, length-sorted sampling vs one sentence at a time; bottom-k's cost.

    python bench/generate.py [--sentences 1000] [--baseline-sentences 200] [--samples 8] [--repeats 5]
                             [--max-tokens 4096] [--threads 2] [--work DIR]

Same tiny models as the NMT benchmarks (bench/nmt_models.py, trained once and reused from --work):
- the Marian model under ``HFParaphraser.generate`` (sentences sorted into length batches, ``max_tokens``
  padded tokens each, ``samples`` rows per sentence) vs the loop a user writes: ``model.generate`` on each
  sentence alone, same top-k/top-p, same ``num_return_sequences`` and the same ``max_new_tokens`` rule;
- the same ``HFParaphraser.generate`` with the easy sampler (top-k 120 + top-p 0.95) vs the hard one
  (bottom-k, k = 2 for the first N = 1 token, then top-k/top-p): what bottom-k costs;
- the round trip's return decoder (``RoundTripParaphraser`` on the fairseq model, used as both forward and
  backward model: throughput, not quality), plain sampling vs fairseq's bottom-k search strategy.

For transformers it also prints decoder positions per candidate (rows x steps, padding included): a batch
decodes until its longest sample ends (finished rows stay in it), so a sampler whose samples run longer costs
more per candidate at the same cost per step; the bottom-k overhead per decoder position separates the two.

Every figure is the best of ``--repeats`` runs (the machine is shared and noisy); the easy and hard runs
are interleaved, and bottom-k's overhead is also given as the median of back-to-back (easy, hard) pairs, a
check that cancels slow drifts of the load. Goals (issue): batched >= 5x one-at-a-time candidates/s; bottom-k
<= 10 % over plain sampling.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import median  # noqa: E402
from bench.nmt_models import demo_pairs, prepare  # noqa: E402

BATCH_GOAL, BOTTOM_K_GOAL = 5.0, 0.10


class Steps:
    """Wraps a transformers model's ``generate`` to count decoder positions (rows × generated steps, padding
    included): a batch decodes until its longest sample ends, which is where bottom-k's cost shows."""

    def __init__(self, model: Any):
        self.model, self.inner, self.positions = model, model.generate, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        self.positions += out.shape[0] * (out.shape[1] - 1)  # minus the decoder start token
        return out

    def __enter__(self) -> Steps:
        self.positions = 0
        self.model.generate = self
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.model.generate  # the class' method again


def best_of(repeats: int, fns: dict[str, Callable[[], Any]]) -> dict[str, tuple[Any, float, list[float]]]:
    """Each fn run ``repeats`` times, interleaved; (last output, fastest seconds, every run's seconds) per name."""
    out: dict[str, tuple[Any, float, list[float]]] = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            result = fn()
            seconds = time.perf_counter() - t0
            times = out.get(name, (None, 0.0, []))[2] + [seconds]
            out[name] = (result, min(times), times)
    return out


def paired(plain: list[float], other: list[float]) -> float:
    """Median over repeats of other/plain - 1, each pair run back to back: a check on the best-of figure
    that cancels slow drifts of the machine's load."""
    return median([o / p for p, o in zip(plain, other)]) - 1


def one_at_a_time(
    paraphraser: Any, texts: list[str], n: int, top_k: int, top_p: float, a: float = 1.5, b: int = 10
) -> list[list[str]]:
    """The naive loop: ``generate`` on each sentence alone (the max_new_tokens rule of HFParaphraser)."""
    import torch

    from models.nmt.transformers import seeded

    model, tok = paraphraser.model, paraphraser.tokenizer
    out = []
    with seeded(0), torch.inference_mode():
        for text in texts:
            inputs = tok([text], return_tensors="pt").to(paraphraser.device)
            generated = model.generate(
                **inputs,
                do_sample=True,
                top_k=top_k,
                top_p=top_p,
                num_return_sequences=n,
                max_new_tokens=int(a * inputs["input_ids"].shape[1] + b),
            )
            out.append([t.strip() for t in tok.batch_decode(generated, skip_special_tokens=True)])
    return out


def words(bags: list[list[str]]) -> float:
    cands = [c for bag in bags for c in bag]
    return sum(len(c.split()) for c in cands) / max(len(cands), 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument(
        "--baseline-sentences",
        type=int,
        default=200,
        help="the one-at-a-time loop runs on the first this many sentences (0: all)",
    )
    p.add_argument("--samples", type=int, default=8, help="candidates per sentence and sampler")
    p.add_argument("--repeats", type=int, default=5, help="best of this many timings")
    p.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per batch (HFParaphraser default)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/augdag-bench-nmt"))
    args = p.parse_args()

    fs, _, hf, _ = prepare(args.work, args.threads)  # offline; torch on --threads; models cached in --work
    import torch

    from models.generation import HFParaphraser, RoundTripParaphraser, pcc_samplers
    from models.nmt import load_model

    src = [s for s, _ in demo_pairs(args.sentences, split="test")]
    base_src = src[: args.baseline_sentences or len(src)]
    n, reps = args.samples, args.repeats
    easy, hard = pcc_samplers()
    print(
        f"{len(src):,} held-out demo sentences x {n} samples; one-at-a-time on {len(base_src):,}; "
        f"best of {reps} timings each (shared, noisy machine); torch threads {torch.get_num_threads()}"
    )
    rows: list[tuple[str, float, float, str]] = []  # (path, candidates/s, seconds, note)

    def report(name: str, cands: int, seconds: float, note: str = "") -> float:
        rate = cands / seconds
        rows.append((name, rate, seconds, note))
        print(f"  {name:<34} {rate:9.0f} cand/s  ({seconds:6.2f} s)  {note}")
        return rate

    # -- transformers: batched vs one at a time; easy vs bottom-k ------------------------------------
    para = HFParaphraser.load(hf, device="cpu", threads=args.threads)
    print(f"Marian ({hf.name}) under transformers generate:")
    para.generate(src[:64], [(easy, n), (hard, n)], max_tokens=args.max_tokens)  # warm-up
    one_at_a_time(para, base_src[:8], n, easy.top_k, easy.top_p)
    steps: dict[str, int] = {}

    def counted(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with Steps(para.model) as s:
                result = fn()
            steps[name] = s.positions
            return result

        return run

    naive = best_of(reps, {"naive": counted("naive", lambda: one_at_a_time(para, base_src, n, easy.top_k, easy.top_p))})["naive"]
    timed = best_of(
        reps,
        {
            s.name: counted(s.name, lambda s=s: para.generate(src, [(s, n)], max_tokens=args.max_tokens)[s.name])
            for s in (easy, hard)
        },
    )
    pos = lambda name, count: f"{steps[name] / count:5.1f} decoder positions/cand"  # noqa: E731
    naive_rate = report(
        "one-at-a-time generate (top-k/p)",
        len(base_src) * n,
        naive[1],
        f"{pos('naive', len(base_src) * n)}, {words(naive[0]):.1f} words/cand",
    )
    hf_rates = {
        s.name: report(
            f"batched HFParaphraser {s.name}",
            len(src) * n,
            timed[s.name][1],
            f"{pos(s.name, len(src) * n)}, {words(timed[s.name][0]):.1f} words/cand",
        )
        for s in (easy, hard)
    }
    speedup = hf_rates[easy.name] / naive_rate
    hf_over = hf_rates[easy.name] / hf_rates[hard.name] - 1
    # the same cost per decoder position: what bottom-k's processor costs, apart from longer batches
    hf_paired = paired(timed[easy.name][2], timed[hard.name][2])
    per_pos = (timed[hard.name][1] / steps[hard.name]) / (timed[easy.name][1] / steps[easy.name]) - 1
    print(
        f"  batched / one-at-a-time = {speedup:.1f}x (goal >= {BATCH_GOAL:.0f}x: "
        f"{'met' if speedup >= BATCH_GOAL else 'MISSED'}); bottom-k overhead {hf_over:+.1%} "
        f"(goal <= {BOTTOM_K_GOAL:.0%}: {'met' if hf_over <= BOTTOM_K_GOAL else 'MISSED'}), "
        f"{per_pos:+.1%} per decoder position, paired median {hf_paired:+.1%}"
    )

    # -- fairseq round trip: the return decoder, plain sampling vs bottom-k ---------------------------
    model = load_model(fs, backend="fairseq", device="cpu", threads=args.threads)
    rt = RoundTripParaphraser(model, model)
    print(f"round trip on fairseq ({fs.name}, forward = backward model), return decoder:")
    ((pivots, pivot_s, _),) = best_of(1, {"pivots": lambda: rt.pivots(src, max_tokens=args.max_tokens)}).values()
    print(f"  pivots (beam {rt.pivot_beam}, untimed below)     {len(src) / pivot_s:9.0f} sent/s  ({pivot_s:6.2f} s)")
    rt.generate(src[:64], [(easy, n), (hard, n)], pivots=pivots[:64], max_tokens=args.max_tokens)  # warm-up
    back = best_of(
        reps,
        {s.name: lambda s=s: rt.generate(src, [(s, n)], pivots=pivots, max_tokens=args.max_tokens)[s.name] for s in (easy, hard)},
    )
    fs_rates = {
        s.name: report(f"round-trip return {s.name}", len(src) * n, back[s.name][1], f"{words(back[s.name][0]):.1f} words/cand")
        for s in (easy, hard)
    }
    fs_over = fs_rates[easy.name] / fs_rates[hard.name] - 1
    fs_paired = paired(back[easy.name][2], back[hard.name][2])
    print(
        f"  bottom-k overhead {fs_over:+.1%} (goal <= {BOTTOM_K_GOAL:.0%}: "
        f"{'met' if fs_over <= BOTTOM_K_GOAL else 'MISSED'}), paired median {fs_paired:+.1%}"
    )

    # -- summary --------------------------------------------------------------------------------------
    print(f"\nsummary (candidates/s, best of {reps}; {args.threads} threads; {n} samples/sentence)")
    print(f"  {'path':<34} {'cand/s':>9} {'vs one-at-a-time':>17}")
    for name, rate, _, _ in rows:
        print(f"  {name:<34} {rate:9.0f} {rate / naive_rate:16.1f}x")
    print(f"  goal batched >= {BATCH_GOAL:.0f}x one-at-a-time: {speedup:.1f}x {'met' if speedup >= BATCH_GOAL else 'MISSED'}")
    for what, over, note in (
        ("transformers", hf_over, f" ({per_pos:+.1%} per decoder position, paired median {hf_paired:+.1%})"),
        ("fairseq", fs_over, f" (paired median {fs_paired:+.1%})"),
    ):
        print(
            f"  goal bottom-k <= {BOTTOM_K_GOAL:.0%} over plain sampling ({what}): {over:+.1%} "
            f"{'met' if over <= BOTTOM_K_GOAL else 'MISSED'}{note}"
        )


if __name__ == "__main__":
    main()
