"""Against OpusTrainer 0.5 itself (the ``bench`` extra; skipped without it), on Multi30k lines when shared/ has them.

UpperCase and TitleCase: OpusTrainer's output for every row we change. Typos, Tags, Noise and Merge: OpusTrainer's
own code, fed the same choices through a stand-in for its ``random`` module (``Replay``: every ``randint``/``choice``/
``randrange`` must ask for exactly the range our draw was made in), produces exactly our output, so every output is
one OpusTrainer can produce, its kind, positions and lengths within its rules. Rates: the share of rows changed by
both at p = 0.1 on the same 10,000 lines, within 3 standard errors of their difference.
"""

from __future__ import annotations

import random
import re
from collections import deque
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from robustness_helpers import diagonal, make_pairs, same_rate_3_se

from tasks.robustness import typos as T
from tasks.robustness.casing import title_case, upper_case
from tasks.robustness.draws import Stream, lane, row_states, uniform
from tasks.robustness.merge import merge, plan
from tasks.robustness.noise import SCRIPTS, noise, unicode_words
from tasks.robustness.rows import format_pairs, parse_pairs
from tasks.robustness.tags import candidate_links, tags

pytest.importorskip("opustrainer")
import typo  # noqa: E402 — comes with OpusTrainer
from opustrainer.modifiers import placeholders as ot_placeholders  # noqa: E402
from opustrainer.modifiers import typos as ot_typos  # noqa: E402
from opustrainer.modifiers.merge import MergeModifier, merge_sents  # noqa: E402
from opustrainer.modifiers.noise import NoiseModifier  # noqa: E402
from opustrainer.modifiers.placeholders import PlaceholderTagModifier  # noqa: E402
from opustrainer.modifiers.surface import TitleCaseModifier, UpperCaseModifier  # noqa: E402
from opustrainer.modifiers.typos import TypoModifier  # noqa: E402

MULTI30K = Path(__file__).resolve().parents[4] / "shared" / "data" / "multi30k_en_de"
VOCAB = ("a", "man", "woman", "dog", "runs", "in", "the", "park", "street", "with", "two", "girls", "ball", ".", ",", "!")
SPECIAL = [("Die Straße ist groß", "ŉ ǆ ß ﬁ"), ("  two  spaces\x0band vt ", "x\x1cy\u3000z"), ("ALL CAPS 123", "1 2 3 !")]


def lines(n: int) -> tuple[list[str], list[str]]:
    """``n`` Multi30k en-de pairs (tabs inside a line made spaces), else generated ones, and a few special pairs."""
    if (MULTI30K / "train.en").is_file():
        src = (MULTI30K / "train.en").read_text(encoding="utf-8").replace("\t", " ").splitlines()[:n]
        tgt = (MULTI30K / "train.de").read_text(encoding="utf-8").replace("\t", " ").splitlines()[:n]
    else:
        rng = random.Random(0)
        vocab = VOCAB
        src = [" ".join(rng.choices(vocab, k=rng.randint(4, 14))).capitalize() for _ in range(n)]
        tgt = [" ".join(rng.choices(vocab, k=rng.randint(4, 14))) for _ in range(n)]
    return [s for s, _ in SPECIAL] + src, [t for _, t in SPECIAL] + tgt


class Replay:
    """Stands in for ``random`` in OpusTrainer's and typo's modules, answering with given choices: ``picks`` holds
    (size of the range, index in it) per discrete call; ``uniforms`` the values of ``random()``."""

    def __init__(self, picks=(), uniforms=()):
        self.picks, self.uniforms = deque(picks), deque(uniforms)

    def _pick(self, n: int) -> int:
        size, k = self.picks.popleft()
        assert size == n, f"OpusTrainer draws from {n} options here, we drew from {size}"
        return k

    def randint(self, a: int, b: int) -> int:
        return a + self._pick(b - a + 1)

    def randrange(self, a: int, b: int) -> int:
        return a + self._pick(b - a)

    def choice(self, seq):
        return seq[self._pick(len(seq))]

    def random(self) -> float:
        return self.uniforms.popleft()

    def seed(self, *args, **kwargs) -> None:
        pass

    def getrandbits(self, k: int) -> int:
        return 0


class Recording(Stream):
    """Our stream, keeping (n, k) of every ``below(n)``."""

    def __init__(self, state: int, start: int) -> None:
        super().__init__(state, start)
        self.log: list[tuple[int, int]] = []

    def below(self, n: int) -> int:
        k = super().below(n)
        self.log.append((n, k))
        return k


def word_picks(words: list[str], min_length: int, max_length: int, max_words: int) -> list[tuple[int, int]]:
    """The choices ``get_random_unicode_words`` makes to produce ``words``: length, script, count, characters."""
    lo, hi = next(r for r in SCRIPTS if r[0] <= ord(words[0][0]) < r[1])
    picks = [(max_length - min_length + 1, len(words[0]) - min_length), (len(SCRIPTS), SCRIPTS.index((lo, hi)))]
    return picks + [(max_words, len(words) - 1)] + [(hi - lo, ord(c) - lo) for w in words for c in w]


@pytest.fixture
def replay(monkeypatch):
    """Install a Replay as ``random`` of typo, its keyboard layout and OpusTrainer's typos and placeholders."""

    def install(oracle: Replay) -> Replay:
        for module in (typo.Errer, typo.keyboardlayouts.en_default, ot_typos, ot_placeholders):
            monkeypatch.setattr(module, "random", oracle)
        return oracle

    return install


def test_upper_and_title_case_give_opustrainers_output_for_every_changed_row():
    src, tgt = lines(3000)
    rows = make_pairs(src, tgt)
    for stage, modifier in ((upper_case, UpperCaseModifier(1.0)), (title_case, TitleCaseModifier(1.0))):
        out = stage(rows, p=1.0)
        theirs = [line.split("\t") for line in modifier([f"{s}\t{t}" for s, t in zip(src, tgt, strict=True)])]
        changed = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True)) if theirs[i] != [s, t]]
        assert out["line"].to_pylist() == [i + 1 for i in changed]  # the same rows change
        assert [[s, t] for s, t in zip(out["src"].to_pylist(), out["tgt"].to_pylist(), strict=True)] == [
            theirs[i] for i in changed
        ]


ALIGNED = {
    "random_space": ot_typos.add_random_space_with_alignment,
    "skipped_space": ot_typos.skip_random_space_with_alignment,
    "missing_char": ot_typos.missing_char_with_alignment,
}


def last_word_of_many(text: str, pick: int) -> bool:
    """Whether the ``pick``-th non-space character of ``text`` is in its last word, and that is not its only one."""
    at = [m.start() for m in re.finditer(r"\S", text)][pick]
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    return len(spans) > 1 and spans[-1][0] <= at


@pytest.mark.parametrize("aligned", [False, True])
def test_every_typo_is_one_opustrainers_code_makes_with_the_same_choices(replay, aligned):
    src, tgt = lines(1500)
    rows = make_pairs(src, tgt, diagonal(src, tgt) if aligned else None)
    kinds = dict.fromkeys(T.KINDS, 0.3)
    out = T.typos(rows, p=1.0, seed=0, kinds=kinds)
    states = row_states(rows["uid"], seed=0, modifier="Typos")
    chosen, applied = T.decisions(states, 1.0, kinds)
    ours = dict(zip(out["line"].to_pylist(), zip(out["src"].to_pylist(), out["links"].to_pylist(), strict=True), strict=True))
    for i, row_applied in zip(chosen.tolist(), applied.tolist(), strict=True):
        s, links = src[i], parse_pairs(rows["links"][i].as_py()) if aligned else None
        stream = Recording(int(states[i]), lane(1))
        for kind in (k for k, a in zip(kinds, row_applied, strict=True) if a):
            before, before_links, start = s, links, len(stream.log)
            s, links = T.typo_row(s, links, [kind], stream)
            picks = stream.log[start:]
            if aligned and kind in ALIGNED:
                if kind == "missing_char" and len(picks) == 2 and last_word_of_many(before, picks[0][1]):  # we
                    picks[1] = (2, 0)  # take the left neighbour only, of OpusTrainer's two (the right is past the end)
                oracle = replay(Replay(picks))
                theirs, their_links = ALIGNED[kind](before, format_pairs(before_links))
                assert parse_pairs(their_links) == sorted(set(links)), (kind, before)
            else:
                oracle = replay(Replay(picks))
                theirs = getattr(typo.StrErrer(before), kind)().result
            assert theirs == s and not oracle.picks, (kind, before)
        if i + 1 in ours:  # a row whose source came out the same is not emitted
            got_src, got_links = ours.pop(i + 1)
            assert got_src == s and (parse_pairs(got_links) == sorted(set(links)) if aligned else got_links is None)
    assert not ours and out.num_rows > 500


def tag_replay(rows: pa.Table, out: pa.Table, *, p: float, seed: int, augment: float = 0.0, replace: float = 0.0) -> int:
    """Feed OpusTrainer's Tags our draws for each changed row; returns how many rows it reproduced exactly."""
    flat, chosen, _, _ = candidate_links(rows)
    states = row_states(rows["uid"], seed=seed, modifier="Tags")
    row = flat.row[chosen]
    ordinal = np.arange(len(chosen)) - np.searchsorted(row, row)
    u, v = uniform(states[row], ordinal), uniform(states[row], lane(1) + ordinal)
    multi = (augment > 0) + (replace > 0) + 1 > 1
    modifier = PlaceholderTagModifier(p, augment=augment, replace=replace)
    same = 0
    for line, s, t in zip(out["line"].to_pylist(), out["src"].to_pylist(), out["tgt"].to_pylist(), strict=True):
        r = line - 1
        mine = np.flatnonzero(row == r)
        uniforms, picks, words = [], [], Stream(int(states[r]), lane(2))
        for k in mine:
            uniforms.append(float(u[k]))
            if u[k] < p and multi:
                uniforms.append(float(v[k]))
                if v[k] < augment + replace:  # augment or replace: a random string
                    picks += word_picks(unicode_words(words), 2, 10, 3)
        ot_placeholders.random = Replay(picks, uniforms)
        same += modifier.apply("\t".join(rows.slice(r, 1).select(["src", "tgt", "links"]).to_pylist()[0].values())) == f"{s}\t{t}"
    return same


@pytest.mark.parametrize("augment", [0.0, 0.5])
def test_every_tagged_row_is_opustrainers_output_for_the_same_draws(monkeypatch, augment):
    monkeypatch.setattr(ot_placeholders, "random", None)
    src, tgt = lines(1000)
    rows = make_pairs(src, tgt, diagonal(src, tgt))
    out = tags(rows, p=0.3, seed=1, augment=augment)
    assert out.num_rows > 500 and tag_replay(rows, out, p=0.3, seed=1, augment=augment) == out.num_rows


def test_tags_candidates_match_opustrainers_on_crossing_and_many_to_one_links(monkeypatch):
    monkeypatch.setattr(ot_placeholders, "random", None)
    rng = np.random.default_rng(0)
    src, tgt, links = [], [], []
    for i in range(400):
        n = int(rng.integers(3, 9))
        src.append(" ".join(f"s{i}w{k}" for k in range(n)))
        tgt.append(" ".join(f"t{i}w{k}" for k in range(n)))
        perm = rng.permutation(n)
        extra = [(int(a), int(b)) for a, b in rng.integers(0, n, size=(int(rng.integers(0, 3)), 2))]
        links.append(format_pairs([(k, int(perm[k])) for k in range(n)] + extra))
    rows = make_pairs(src, tgt, links)
    out = tags(rows, p=0.5, seed=2)
    assert out.num_rows > 300 and tag_replay(rows, out, p=0.5, seed=2) == out.num_rows


def test_replace_of_a_single_candidate_is_opustrainers(monkeypatch):
    monkeypatch.setattr(ot_placeholders, "random", None)
    # the candidate last: OpusTrainer does not move later links on the target side after a replace (tags.py)
    src, tgt = [f"7 . word{i}" for i in range(300)], [f"7 . Wort{i}" for i in range(300)]
    rows = make_pairs(src, tgt, diagonal(src, tgt))
    out = tags(rows, p=1.0, seed=3, replace=0.5)
    assert tag_replay(rows, out, p=1.0, seed=3, replace=0.5) == out.num_rows == 300


def test_every_noise_pair_is_opustrainers_random_words_for_the_same_choices(monkeypatch):
    src, tgt = lines(2000)
    out = noise(make_pairs(src, tgt), p=0.2, seed=0, min_word_length=1, max_word_length=4, max_words=3)
    assert out.num_rows > 300
    for text in out["src"].to_pylist():
        words = text.split(" ")
        monkeypatch.setattr(ot_placeholders, "random", Replay(word_picks(words, 1, 4, 3)))
        assert ot_placeholders.get_random_unicode_words(1, 4, 3) == words


def test_every_merge_is_opustrainers_merge_of_its_parts():
    src, tgt = lines(2000)
    rows = make_pairs(src, tgt, diagonal(src, tgt))
    out = merge(rows, p=0.2, seed=0)
    line = {
        u: "\t".join([s, t, a]) for u, s, t, a in zip(*(rows[c].to_pylist() for c in ("uid", "src", "tgt", "links")), strict=True)
    }
    assert out.num_rows > 300
    for parents, s, t, a in zip(*(out[c].to_pylist() for c in ("parents", "src", "tgt", "links")), strict=True):
        assert 2 <= len(parents) <= 4 and merge_sents([line[u] for u in parents]) == f"{s}\t{t}\t{a}"


def opus_changed(modifier, texts: list[str]) -> int:
    random.seed(0)
    return sum(a != b for a, b in zip(texts, modifier(texts), strict=True))


def test_rates_at_p_01_match_opustrainers_within_3_standard_errors(monkeypatch):
    src, tgt = lines(10_000)
    n = len(src)
    rows = make_pairs(src, tgt, diagonal(src, tgt))
    plain = [f"{s}\t{t}" for s, t in zip(src, tgt, strict=True)]
    assert same_rate_3_se(upper_case(rows, p=0.1).num_rows, n, opus_changed(UpperCaseModifier(0.1), plain), n)
    assert same_rate_3_se(T.typos(rows.drop_columns("links"), p=0.1).num_rows, n, opus_changed(TypoModifier(0.1), plain), n)
    random.seed(0)
    tagged = [
        line.split("\t")[0]
        for line in PlaceholderTagModifier(0.1)([f"{a}\t{b}" for a, b in zip(plain, rows["links"].to_pylist(), strict=True)])
    ]
    theirs = sum(a != " ".join(s.split()) for a, s in zip(tagged, src, strict=True))
    assert same_rate_3_se(tags(rows, p=0.1).num_rows, n, theirs, n)
    random.seed(0)
    assert same_rate_3_se(noise(rows, p=0.1).num_rows, n, len(list(NoiseModifier(0.1)(plain))) - n, n)
    merges = []
    monkeypatch.setattr("opustrainer.modifiers.merge.merge_sents", lambda part: merges.append(part) or merge_sents(part))
    random.seed(0)
    considered = len(list(MergeModifier(0.1)(plain)))
    starts, _ = plan(row_states(rows["uid"], seed=0, modifier="Merge"), 0.1, 2, 4)
    assert same_rate_3_se(len(starts), n, len(merges), considered)
