"""Translation throughput: CTranslate2 vs fairseq vs transformers `generate`, same model, same beam, CPU.

    python bench/translate.py [--sentences 10000] [--beam 5] [--threads 2] [--work DIR]

Two tiny models trained on the demo bitext (bench/nmt_models.py, reused from --work):
- fairseq (its SequenceGenerator, what fairseq-generate runs) vs its CTranslate2 conversion;
- a Marian model under transformers `generate` vs its CTranslate2 conversion.
Each backend translates the same held-out demo sentences, sorted into length batches by the backend.
Goal (issue 4): CTranslate2 >= 3x fairseq sentences/s, with BLEU within 0.5 of fairseq's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import timed  # noqa: E402
from bench.nmt_models import demo_pairs, prepare  # noqa: E402


def bleu(hyps: list[str], refs: list[str]) -> float:
    import sacrebleu

    return sacrebleu.corpus_bleu(hyps, [refs]).score


def run(
    name: str, path: Path, backend: str, src: list[str], refs: list[str], beam: int, threads: int, compute_type: str = "default"
) -> tuple[list[str], float]:
    from models.nmt import DecodeOptions, load_model

    model = load_model(path, backend=backend, device="cpu", threads=threads, compute_type=compute_type)
    model.translate(src[:64], DecodeOptions(beam=beam))  # warm-up: first-batch allocations
    hyps, seconds = timed(model.translate, src, DecodeOptions(beam=beam))
    print(f"  {name:<28} {len(src) / seconds:9.0f} sent/s  ({seconds:6.1f} s)  BLEU {bleu(hyps, refs):6.2f}")
    return hyps, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=10_000)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/augdag-bench-nmt"))
    args = p.parse_args()
    fs, fs_ct2, hf, hf_ct2 = prepare(args.work, args.threads)
    test = demo_pairs(args.sentences, split="test")
    src, refs = [s for s, _ in test], [t for _, t in test]
    print(f"{len(src):,} sentences, beam {args.beam}")

    print("fairseq model:")
    fs_hyps, fs_s = run("fairseq SequenceGenerator", fs, "fairseq", src, refs, args.beam, args.threads)
    ct_hyps, ct_s = run("CTranslate2 float32", fs_ct2, "ctranslate2", src, refs, args.beam, args.threads)
    i8_hyps, i8_s = run("CTranslate2 int8", fs_ct2, "ctranslate2", src, refs, args.beam, args.threads, "int8")
    same = sum(a == b for a, b in zip(fs_hyps, ct_hyps)) / len(src)
    gap = abs(bleu(ct_hyps, refs) - bleu(fs_hyps, refs))
    ratio = fs_s / ct_s
    print(
        f"  CTranslate2 / fairseq = {ratio:.2f}x (goal >= 3x: {'met' if ratio >= 3 else 'MISSED'}); "
        f"BLEU gap {gap:.2f} (goal <= 0.5: {'met' if gap <= 0.5 else 'MISSED'}); identical output {same:.1%}; "
        f"int8 {fs_s / i8_s:.2f}x, identical {sum(a == b for a, b in zip(fs_hyps, i8_hyps)) / len(src):.1%}"
    )

    print("Marian model:")
    hf_hyps, hf_s = run("transformers generate", hf, "transformers", src, refs, args.beam, args.threads)
    hc_hyps, hc_s = run("CTranslate2 float32", hf_ct2, "ctranslate2", src, refs, args.beam, args.threads)
    print(
        f"  CTranslate2 / transformers = {hf_s / hc_s:.2f}x; BLEU gap {abs(bleu(hc_hyps, refs) - bleu(hf_hyps, refs)):.2f}; "
        f"identical output {sum(a == b for a, b in zip(hf_hyps, hc_hyps)) / len(src):.1%}"
    )


if __name__ == "__main__":
    main()
