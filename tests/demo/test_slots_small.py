"""Issue 50, the demo's ATIS-small-like slot set (demo/slots_small.py): few rows per frame, values that the test set
has in frames where training never showed them, written beside the other demo files."""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import islice

from demo import write_demo
from demo.slots_small import SMALL_SLOTS_ROWS, iter_small_slots


def frame(tags: list[str]) -> frozenset[str]:
    """The frame of a row: its set of slot types (C2C's key, tasks/c2c/delex.py)."""
    return frozenset(t[2:] for t in tags if t != "O")


def spans(tokens: list[str], tags: list[str]) -> list[tuple[str, str]]:
    """(slot type, value) of every B-/I- span, the value's words joined by ``_``."""
    out: list[tuple[str, list[str]]] = []
    for word, tag in zip(tokens, tags):
        if tag.startswith("B-"):
            out.append((tag[2:], [word]))
        elif tag.startswith("I-"):
            out[-1][1].append(word)
    return [(slot, "_".join(words)) for slot, words in out]


def test_small_slots_are_valid_bio_in_15_frames_of_15_slot_types_issue_50():
    rows = list(iter_small_slots(SMALL_SLOTS_ROWS))
    for tokens, tags in rows:
        assert len(tokens) == len(tags) and tokens
        for prev, tag in zip(["O", *tags], tags):
            assert tag == "O" or (tag[:2] in ("B-", "I-") and (tag[0] == "B" or prev[2:] == tag[2:])), (tokens, tags)
    assert len({frame(tags) for _, tags in rows}) == 15
    assert len({t[2:] for _, tags in rows for t in tags if t != "O"}) == 15  # a city in 4 roles, a day in 3, a time in 2
    assert rows[:40] == list(islice(iter_small_slots(40), 40))  # fewer rows are a prefix of more


def test_the_small_test_set_has_values_in_frames_training_never_showed_them_in_issue_50():
    seen: dict[tuple[str, str], set[frozenset[str]]] = defaultdict(set)
    count: Counter[tuple[str, str]] = Counter()
    for tokens, tags in iter_small_slots(SMALL_SLOTS_ROWS):
        for span in spans(tokens, tags):
            seen[span].add(frame(tags))
            count[span] += 1
    test = [
        (span, frame(tags)) for tokens, tags in iter_small_slots(300, stream="slots_small_test") for span in spans(tokens, tags)
    ]
    unseen = sum(span not in seen for span, _ in test)
    other_frames = sum(span in seen and f not in seen[span] for span, f in test)
    assert (len(test), unseen, other_frames) == (828, 80, 261)
    assert (len(count), sum(n == 1 for n in count.values())) == (116, 40)  # a third of the values occur once


def test_write_demo_writes_the_small_slot_set_capped_by_slots_rows_issue_50(tmp_path):
    paths, planted = write_demo(tmp_path, bitext_rows=100, mono_rows=100, labeled_rows=100, slots_rows=100, test_rows=50)
    assert len(paths.slots_small.read_text(encoding="utf-8").splitlines()) == 100  # min(SMALL_SLOTS_ROWS, slots_rows)
    assert len(paths.slots_small_test.read_text(encoding="utf-8").splitlines()) == 50
    assert paths.slots_small.name not in planted  # clean: the planted bad rows stay in slots.jsonl
