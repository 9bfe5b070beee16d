"""What each section uses a dataset for: evaluation (a held-out test or dev set) or training.

A held-out set is read and validated (a broken row still goes to `rejects`) but never cleaned: no dedup, no
length or ratio filter (flows/pipelines/ingest.py), so a score on it is a score on the file as everyone else reports it.
A dataset one key holds out and another trains on is an error naming both keys.

A use counts when a key names the dataset, or when the key's pipeline is enabled (``pipelines:``) and its
default resolves to the dataset (train_nmt's test set, unnamed: the profile's only bitext). Training here
means any input a pipeline learns from or augments (the aligner's bitext, the paraphrased set, ...).
``train_nmt``'s arms are SQL over the views and are not traced: `default_mix` leaves the test sets out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Uses = dict[str, list[str]]  # dataset -> the dotted keys that use it, in the profile's order

EVALUATION_KEYS = (
    "train_nmt.test",
    "train_nmt.tests",
    "train_classifier.test",
    "epida.test",
    "train_slot_tagger.dev",
    "train_slot_tagger.test",
)
TRAINING_KEYS = (
    "self_training.bitext",
    "self_training.mono",
    "rejuvenation.bitext",
    "paraphrase.dataset",
    "paraphrase.generator.bitext",
    "mt_paraphrase.bitext",
    "robustness.bitext",
    "robustness.mono",
    "train_classifier.dataset",
    "epida.dataset",
    "c2c.dataset",
    "train_slot_tagger.dataset",
)

Resolved = Callable[[Any], Iterable[tuple[str, str | None]]]  # conf -> (key, dataset) with the defaults applied


def _train_nmt_tests(conf: Any) -> Iterable[tuple[str, str | None]]:
    tests = conf.train_nmt_test()
    return zip([f"train_nmt.tests.{i}" for i in range(len(tests))] if conf.train_nmt.tests else ["train_nmt.test"], tests)


def _self_training(conf: Any) -> Iterable[tuple[str, str | None]]:
    bitext, mono = conf.self_training_datasets()
    named = bool(conf.self_training.mono)  # else every mono dataset, by default
    keys = [f"self_training.mono.{i}" if named else "self_training.mono" for i in range(len(mono))]
    return [("self_training.bitext", bitext), *zip(keys, mono)]


EVALUATES: dict[str, Resolved] = {  # pipeline -> its held-out sets, defaults applied
    "train_nmt": _train_nmt_tests,
    "train_classifier": lambda c: [("train_classifier.test", c.classifier_datasets()[1])],
    "epida": lambda c: [("epida.test", c.epida_datasets()[1])],
    "train_slot_tagger": lambda c: zip(("train_slot_tagger.dev", "train_slot_tagger.test"), c.slot_tagger_datasets()[1:]),
}
TRAINS: dict[str, Resolved] = {  # pipeline -> what it trains on or augments, defaults applied
    "self_training": _self_training,
    "rejuvenation": lambda c: [("rejuvenation.bitext", c.rejuvenation_bitext())],
    "paraphrase": lambda c: [
        ("paraphrase.dataset", c.paraphrase_dataset()),
        ("paraphrase.generator.bitext", c.paraphrase_bitext()),
    ],
    "mt_paraphrase": lambda c: [("mt_paraphrase.bitext", c.mt_paraphrase_bitext())],
    "robustness": lambda c: [
        ("robustness.bitext", c.dataset_of_kind(c.robustness.bitext, "bitext", "robustness.bitext")),
        *(
            (f"robustness.mono.{i}", c.dataset_of_kind(m, "mono", f"robustness.mono.{i}"))
            for i, m in enumerate(c.robustness.mono)
        ),
    ],
    "train_classifier": lambda c: [("train_classifier.dataset", c.classifier_datasets()[0])],
    "epida": lambda c: [("epida.dataset", c.epida_datasets()[0])],
    "c2c": lambda c: [("c2c.dataset", c.c2c_dataset())],
    "train_slot_tagger": lambda c: [("train_slot_tagger.dataset", c.slot_tagger_datasets()[0])],
}


def evaluation_datasets(conf: Any) -> Uses:
    """Every dataset some section holds out for evaluation, with the keys that do (``train_nmt.tests.0``, ...)."""
    return _uses(conf, EVALUATION_KEYS, EVALUATES)


def training_datasets(conf: Any) -> Uses:
    """Every dataset some section trains on or augments, with the keys that do (``self_training.bitext``, ...)."""
    return _uses(conf, TRAINING_KEYS, TRAINS)


def check_dataset_uses(conf: Any) -> None:
    """A held-out set is neither trained on nor given its own ``clean:`` settings; ValueError naming the keys."""
    trained = training_datasets(conf)
    for name, keys in evaluation_datasets(conf).items():
        if name in trained:
            raise ValueError(
                f"{keys[0]}: dataset {name!r} is held out for evaluation, but {', '.join(trained[name])} "
                f"{'trains' if len(trained[name]) == 1 else 'train'} on it: a score on data a model learnt "
                f"from is not a held-out score. Hint: evaluate on another dataset, or train on another one"
            )
        ds = conf.datasets.get(name)
        if ds is not None and ds.clean not in (None, False):
            raise ValueError(
                f"datasets.{name}.clean: {name!r} is held out for evaluation ({keys[0]}) and a held-out "
                f"set is never cleaned: its scores are on the file as it is. Hint: remove `clean`"
            )


def _uses(conf: Any, keys: Iterable[str], resolved: dict[str, Resolved]) -> Uses:
    pairs = [pair for key in keys for pair in _named(conf, key)]
    for pipeline, resolve in resolved.items():
        if pipeline in conf.pipelines:
            try:
                pairs += list(resolve(conf))
            except ValueError:  # the pipeline's own check says what is wrong (conf/pipelines.py)
                continue
    uses: Uses = {}
    for key, name in pairs:
        if name is not None and key not in uses.setdefault(name, []):
            uses[name].append(key)
    return uses


def _named(conf: Any, key: str) -> list[tuple[str, str]]:
    """The datasets ``key`` names in the profile: a name, or each entry of a list (``key.0``, ``key.1``)."""
    value = conf
    for part in key.split("."):
        value = getattr(value, part)
    if isinstance(value, list):  # a train_nmt.tests entry may be a noised set: {dataset: X, modifiers: ...}
        return [(f"{key}.{i}", getattr(v, "dataset", v)) for i, v in enumerate(value)]
    return [] if value is None else [(key, value)]
