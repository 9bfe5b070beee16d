#!/usr/bin/env bash
# The MT effects of docs/effects.md in one command: conf/effects_mt.yaml's Multi30k arms (baseline; bitext + random vs
# uncertainty-sampled synthetic pairs from in-domain captions; rejuvenated; paraphrase 10:1 + CT; bitext + robust on
# upper- and title-cased test sets), each arm's students with three seeds, BLEU/chrF and sacrebleu's paired p.
#
#   scripts/device_effects.sh [--size gpu|cpu|tiny] [--data DIR] [--out DIR] [--cache DIR] [--no-install] [--check]
#
#   --size gpu   (default) transformer-base students, 15k updates, 3 seeds: for a GPU machine (`make install-gpu`, the
#                CUDA torch). 22 trainings of a base model: about 5-6 hours on one modern GPU (an estimate: no GPU run yet)
#   --size cpu   the same profile CPU-sized: the product's tiny transformer (2+2 layers, 64 dims), students at 400
#                updates (the teacher and the other data-making models 800), 5,000 sampled captions, a tenth of the
#                pairs paraphrased, 2 seeds (`make install`); 30 min 27 s on 2 idle cores (2026-12-03)
#   --size tiny  10-update models on a few hundred pairs: the plumbing only (the test tier runs it, on made-up data)
#   --data DIR   holds multi30k_en_de/ and multi30k_task2_mono/ (default: $AUGDAG_EFFECTS_DATA, else ../shared/data)
#   --out DIR    what comes back (default: $OUT if set, else ./effects-out): effects.tsv (the table: arm, test set,
#                metric, seeds, mean, sd, delta, p), evaluations.parquet (every student's score), the night's report
#                page (report/), the profile's overrides (overrides.txt) and each step's log (logs/)
#   --cache DIR  the augdag cache (default: OUT/cache); a rerun reuses every finished stage and model
#   --check      validate the profile at this size, print its overrides (one a line) and stop
#
# The steps are augdag's own commands: self_training twice (random, then uncertainty sampling), each night's
# `synthetic` pairs exported as TSV (the datasets syn_random / syn_uncertainty), then one nightly of ingest,
# rejuvenation, mt_paraphrase, robustness and train_nmt. A failing step stops the script with its exit code.
set -euo pipefail
main() {  # the whole script is read before it runs: an edit of this file cannot change a run in progress

size=gpu install=1 check=0
root=$(cd "$(dirname "$0")/.." && pwd)
data=${AUGDAG_EFFECTS_DATA:-$root/../shared/data}
out=${OUT:-$PWD/effects-out}
cache=
while [ $# -gt 0 ]; do
  case $1 in
    --size) size=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --no-install) install=0; shift ;;
    --check) check=1; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "device_effects.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $size in gpu|cpu|tiny) ;; *) echo "device_effects.sh: --size must be gpu, cpu or tiny, not '$size'" >&2; exit 2 ;; esac
for f in multi30k_en_de/train.en multi30k_en_de/test.de multi30k_en_de/test2017.en multi30k_task2_mono/mono.en; do
  [ -f "$data/$f" ] || { echo "device_effects.sh: $data/$f not found (--data DIR or \$AUGDAG_EFFECTS_DATA)" >&2; exit 2; }
done
mkdir -p "$out/logs" "$out/synthetic"
out=$(cd "$out" && pwd) data=$(cd "$data" && pwd)
cache=${cache:-$out/cache}
export AUGDAG_EFFECTS_DATA=$data

cd "$root"
if [ "$install" = 1 ]; then
  if [ "$size" = gpu ]; then make install-gpu; else make install; fi
fi
augdag=$root/.venv/bin/augdag

# The sizes: --set overrides of conf/effects_mt.yaml (the gpu size is the profile as written)
models=(self_training.teacher rejuvenation.identification paraphrase.generator.forward paraphrase.generator.backward
        train_nmt.student)
sets=()
small() {  # $1: the `train` mapping of the models that make data (teacher, identification, round trip), $2: the
  local m; #   students'; the rest: more overrides
  for m in "${models[@]}"; do sets+=("$m.train=$([ "$m" = train_nmt.student ] && echo "$2" || echo "$1")"); done
  shift 2
  sets+=("$@")
}
case $size in
  # the teacher at 800 updates (BLEU ~15 on its training pairs; at 400, 4.7: under its min_bleu gate of 5)
  cpu) small '{max_update: 800, vocab_size: 8000}' '{max_update: 400, vocab_size: 8000}' \
         self_training.sampling.budget=5000 mt_paraphrase.share=0.1 \
         'train_nmt.seeds=[1, 2]' train_nmt.experiments.para_10_1_ct.continue_on.max_update=100 \
         train_nmt.experiments.para_10_1_ct.continue_on.lr=0.0003 train_nmt.parallel_arms=2 ;;
  tiny) small '{max_update: 10, vocab_size: 200}' '{max_update: 10, vocab_size: 200}' self_training.sampling.budget=40 mt_paraphrase.n=2 mt_paraphrase.keep=2 \
          'train_nmt.seeds=[1]' train_nmt.experiments.para_10_1_ct.continue_on.max_update=2 shard_size=100 \
          self_training.aligner.iterations=2 \
          'self_training.filter={lm_drop: 0, repetition: false, repeated_ngram: false, language_id: false, max_ratio: 100}' \
          self_training.teacher.min_bleu=0 rejuvenation.identification.min_bleu=0 rejuvenation.rejuvenation.min_bleu=0 ;;
esac
args=(--config conf/effects_mt.yaml --cache "$cache")
for s in "${sets[@]}"; do args+=(--set "$s"); done
if [ "$check" = 1 ]; then  # the profile as the first night loads it (the last one adds the exported synthetic pairs)
  "$root/.venv/bin/python" -c 'import sys, flows; from conf.loader import load_profile
load_profile("conf/effects_mt.yaml", sys.argv[2:], cache=sys.argv[1])' "$cache" "${sets[@]}" || exit 2
  [ ${#sets[@]} -eq 0 ] || printf "%s\n" "${sets[@]}"
  exit 0
fi
printf '%s\n' "size: $size" "${sets[@]}" > "$out/overrides.txt"

step() {  # $1: a name for the log; the rest: the augdag command
  local name=$1; shift
  echo "== $name: augdag $*" >&2
  local t0=$SECONDS
  "$augdag" "$@" > "$out/logs/$name.log" 2>&1 || { local rc=$?; tail -20 "$out/logs/$name.log" >&2; exit $rc; }
  echo "   done in $((SECONDS - t0)) s" >&2
}
for method in random uncertainty; do
  step "self_training_$method" run self_training "${args[@]}" --set "self_training.sampling.method=$method" -q
  step "export_$method" sql --cache "$cache" --format tsv --no-header -o "$out/synthetic/syn_$method.tsv" \
    "SELECT src, tgt FROM synthetic ORDER BY uid"
  if [ ! -s "$out/synthetic/syn_$method.tsv" ]; then  # an arm of no synthetic pair would be the baseline under a new name
    echo "device_effects.sh: self_training ($method sampling) kept no synthetic pair; see $out/logs/self_training_$method.log" \
      "and: augdag sql --cache $cache \"SELECT stage, reason, count(*) FROM dropped GROUP BY ALL\"" >&2
    exit 1
  fi
done
syn=()
for method in random uncertainty; do  # the two nights' synthetic pairs as datasets of the last one
  # decontaminated: a teacher's translation can near-copy a test reference (the CPU size's "Ein Mann steht auf einer
  # Straße in einer Straße in der Straße." vs test2016's line 405, Jaccard 0.86): dropped as test_overlap in `dropped`
  syn+=(--set "datasets.syn_$method={kind: bitext, format: tsv, path: '$out/synthetic/syn_$method.tsv', columns: [src, tgt], clean: {decontaminate: {}}}")
done
step nightly nightly "${args[@]}" "${syn[@]}" --set 'pipelines=[ingest, rejuvenation, mt_paraphrase, robustness, train_nmt]' -q

# What comes back: the table, every score, the night's page
run=$("$augdag" sql --cache "$cache" --format tsv --no-header \
  "SELECT max(run_id) FROM evaluations WHERE model_name = 'student'")
"$augdag" sql --cache "$cache" -o "$out/evaluations.parquet" "SELECT * FROM evaluations WHERE run_id = '$run'" > /dev/null
"$augdag" sql --cache "$cache" --format tsv -o "$out/effects.tsv" "
  SELECT s.arm, s.testset, s.metric, s.seeds, round(s.mean, 2) AS mean, round(s.sd, 2) AS sd,
         round(s.mean - b.mean, 2) AS delta, s.p_value AS p
  FROM evaluation_summary s JOIN evaluation_summary b
    ON b.run_id = s.run_id AND b.model_name = s.model_name AND b.testset = s.testset AND b.metric = s.metric
       AND b.arm = 'baseline'
  WHERE s.run_id = '$run' AND s.model_name = 'student' ORDER BY s.testset, s.metric, s.arm" > /dev/null
night=$(ls -td "$cache"/reports/*/ 2>/dev/null | head -1)
[ -n "$night" ] && rm -rf "$out/report" && cp -r "$night" "$out/report"
echo "effects ($size): $out/effects.tsv; every score: $out/evaluations.parquet; the night's page: $out/report/index.html" >&2
column -t -s $'\t' "$out/effects.tsv" >&2 || cat "$out/effects.tsv" >&2
}
main "$@"
