"""C2C-GenDA's data side: delexicalisation and relexicalisation (exact round trip, frames, malformed BIO
rejected with its line), dispersed cluster pairing on a constructed frame with known edit distances
(medoids, the output cluster in pick order, the stop rule, folds) and the Table 5 diversity figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from storage.parts import Parts
from storage.schemas import with_uid
from tasks.c2c.delex import (
    delexicalise,
    delexicalise_row,
    draw_values,
    frame_of,
    relexicalise_row,
    value_pool,
)
from tasks.c2c.diversity import diversity, med_histogram, med_to_training
from tasks.c2c.edit_distance import TokenCodes, distance_matrix, min_distances
from tasks.c2c.pairing import assign_folds, cluster_pairs, furthest_including, medoids_of

ROW = (
    ["i", "want", "a", "flight", "from", "new", "york", "to", "san", "francisco", "on", "monday"],
    [
        "O",
        "O",
        "O",
        "O",
        "O",
        "B-fromloc.city_name",
        "I-fromloc.city_name",
        "O",
        "B-toloc.city_name",
        "I-toloc.city_name",
        "O",
        "B-depart_date.day_name",
    ],
)


def slots(rows: list[tuple[list[str], list[str]]], source: str = "s") -> pa.Table:
    table = pa.table(
        {
            "tokens": [r[0] for r in rows],
            "tags": [r[1] for r in rows],
            "source": [source] * len(rows),
            "line": pa.array(range(1, len(rows) + 1), pa.int64()),
        }
    )
    return with_uid(table, "slots")


def test_delexicalise_row_and_relexicalise_round_trip_exactly():
    delex, values = delexicalise_row(*ROW)
    assert delex == [
        "i",
        "want",
        "a",
        "flight",
        "from",
        "<fromloc.city_name>",
        "to",
        "<toloc.city_name>",
        "on",
        "<depart_date.day_name>",
    ]
    assert values == [("fromloc.city_name", "new york"), ("toloc.city_name", "san francisco"), ("depart_date.day_name", "monday")]
    assert frame_of(values) == "depart_date.day_name fromloc.city_name toloc.city_name"
    assert relexicalise_row(delex, [v for _, v in values]) == (ROW[0], ROW[1])


def test_frame_collapses_a_repeated_slot_type():
    delex, values = delexicalise_row(["from", "a", "or", "b", "c"], ["O", "B-city", "O", "B-city", "I-city"])
    assert delex == ["from", "<city>", "or", "<city>"] and values == [("city", "a"), ("city", "b c")]
    assert frame_of(values) == "city"


def test_delexicalise_stage_rejects_malformed_bio_with_its_line_and_drops_rows_without_slots():
    rows = slots(
        [
            ROW,
            (["to", "paris"], ["O", "I-city"]),
            (["hello", "there"], ["O", "O"]),
            (["a", "b"], ["B-x", "I-y"]),
            (["a"], ["X-city"]),
        ]
    )
    out = delexicalise(rows, file="data/slots.jsonl")
    assert out["part"]["line"].to_pylist() == [1]
    assert out["part"]["text"].to_pylist() == [
        "i want a flight from <fromloc.city_name> to <toloc.city_name> on <depart_date.day_name>"
    ]
    rejects = out["rejects"].to_pylist()
    assert [(r["file"], r["line"], r["reason"]) for r in rejects] == [
        ("data/slots.jsonl", 2, "malformed_bio"),
        ("data/slots.jsonl", 4, "malformed_bio"),
        ("data/slots.jsonl", 5, "malformed_bio"),
    ]
    assert rejects[0]["detail"] == ("s:2: tags[1] = 'I-city' follows 'O': an I- tag must continue a B-/I- span of type 'city'")
    assert rejects[1]["detail"].startswith("s:4: tags[1] = 'I-y' follows 'B-x'")
    assert rejects[2]["detail"] == "s:5: tags[0] = 'X-city' is not O, B-<slot> or I-<slot>"
    assert out["dropped"]["line"].to_pylist() == [3] and out["dropped"]["reason"].to_pylist() == ["no_slots"]
    assert out["part"].num_rows + out["rejects"].num_rows + out["dropped"].num_rows == rows.num_rows


def test_value_pool_keeps_repeats_and_draws_are_seeded():
    part = delexicalise(
        slots([ROW, (["to", "boston"], ["O", "B-toloc.city_name"]), (["to", "boston", "now"], ["O", "B-toloc.city_name", "O"])])
    )["part"]
    pool = value_pool(part)
    assert pool == {
        "depart_date.day_name": ["monday"],
        "fromloc.city_name": ["new york"],
        "toloc.city_name": ["boston", "boston", "san francisco"],
    }
    delex = ["to", "<toloc.city_name>", "<unknown>"]
    draws = [tuple(draw_values(delex, pool, np.random.default_rng([7, i]))) for i in range(300)]
    assert draws == [tuple(draw_values(delex, pool, np.random.default_rng([7, i]))) for i in range(300)]
    share = sum(d == ("boston",) for d in draws) / len(draws)
    assert abs(share - 2 / 3) < 0.08  # frequency-weighted: boston is 2 of the 3 values
    tokens, tags = relexicalise_row(delex, ["san francisco"], pool)
    assert tokens == ["to", "san", "francisco", "<unknown>"] and tags == ["O", "B-toloc.city_name", "I-toloc.city_name", "O"]


def test_token_edit_distance_counts_tokens_not_characters():
    codes = TokenCodes()
    a, b, c = codes.encode_all([["show", "me", "flights"], ["show", "flights"], ["list", "all", "fares", "now"]])
    assert distance_matrix([a, b, c]).tolist() == [[0, 1, 4], [1, 0, 4], [4, 4, 0]]
    assert min_distances([a, c], [b]).tolist() == [1, 4]
    assert min_distances([a, b, a], [a, b, a], exclude_self=True).tolist() == [0, 1, 0]


# the constructed frame: three groups, each a centre and three variants one substitution away from it
# (variants 2 apart, centre 1 from each: the centre is the medoid); groups share no token, G2 is longer
G0 = ["a", "b", "c", "d", "e", "f"]
G1 = ["g", "h", "i", "j", "k", "l"]
G2 = ["m", "n", "o", "p", "q", "r", "s", "t"]


def variants(centre: list[str], tag: str) -> list[list[str]]:
    return [centre] + [centre[:i] + [f"{tag}{i}"] + centre[i + 1 :] for i in (0, 2, 4)]


FRAME = variants(G0, "x") + variants(G1, "y") + variants(G2, "z")  # 12 utterances; index = line - 1


def frame_parts(directory: Path, utterances: list[list[str]], frame: str = "city") -> Parts:
    table = pa.table(
        {
            "uid": [f"u{i:02d}" for i in range(len(utterances))],
            "source": ["s"] * len(utterances),
            "line": pa.array(range(1, len(utterances) + 1), pa.int64()),
            "delex": utterances,
            "text": [" ".join(u) for u in utterances],
            "frame": [frame] * len(utterances),
        }
    )
    return Parts.of_tables([table.slice(0, 5), table.slice(5)], directory / frame)


def test_medoids_of_the_constructed_frame_are_the_group_centres():
    dist = distance_matrix(TokenCodes().encode_all(FRAME))
    assert dist[0, 1:4].tolist() == [1, 1, 1] and dist[1, 2] == 2 and dist[0, 4] == 6 and dist[0, 8] == 8
    medoids, members = medoids_of(dist, 3)
    assert medoids.tolist() == [0, 4, 8]
    assert members.tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_furthest_including_picks_in_order_and_stops_below_the_distance():
    dist = distance_matrix(TokenCodes().encode_all(FRAME))
    others = np.arange(4, 12)
    # G2 is 8 away from every G0 utterance, G1 6: first G2's first row, then G1's; the rest are <= 2 from a pick
    assert furthest_including(dist, np.arange(4), others) == [(8, 8), (4, 6)]
    # the first pick is always taken, even below the threshold; M' caps the cluster
    assert furthest_including(dist, np.arange(4), others, min_distance=9) == [(8, 8)]
    assert furthest_including(dist, np.arange(4), others, min_distance=0, max_outputs=3) == [(8, 8), (4, 6), (5, 1)]


def test_cluster_pairs_of_the_constructed_frame(tmp_path):
    pairs = cluster_pairs(frame_parts(tmp_path, FRAME), cluster_size=4, folds=2, seed=42).to_pylist()
    inputs = [(r["cluster"][-3:], r["uid"], r["medoid"]) for r in pairs if r["role"] == "input"]
    assert inputs == [("000", f"u{i:02d}", i == 0) for i in range(4)] + [("001", f"u{i:02d}", i == 4) for i in range(4, 8)] + [
        ("002", f"u{i:02d}", i == 8) for i in range(8, 12)
    ]
    outputs = [(r["cluster"][-3:], r["rank"], r["uid"], r["distance"]) for r in pairs if r["role"] == "output"]
    assert outputs == [
        ("000", 0, "u08", 8),
        ("000", 1, "u04", 6),
        ("001", 0, "u08", 8),
        ("001", 1, "u00", 6),
        ("002", 0, "u00", 8),
        ("002", 1, "u04", 6),
    ]
    folds = {r["cluster"]: r["fold"] for r in pairs}
    assert sorted(folds.values()) == [0, 0, 1] or sorted(folds.values()) == [0, 1, 1]
    assert folds == assign_folds(sorted(folds), folds=2, seed=42)


def test_cluster_pairs_skips_small_frames_and_dedupes_within_a_frame(tmp_path):
    small = frame_parts(tmp_path, FRAME[:7] + [FRAME[0]] * 3, frame="small")  # 7 distinct < 2c = 8: no pairs
    assert cluster_pairs(small, cluster_size=4).num_rows == 0
    dup = frame_parts(tmp_path / "dup", FRAME + [FRAME[5]])  # a repeat of u05 (line 13) is left out
    assert "u12" not in cluster_pairs(dup, cluster_size=4)["uid"].to_pylist()


def test_diversity_table_5_on_a_hand_made_set():
    training = [["a", "b", "c"], ["a", "b", "d"]]
    generated = [["a", "b", "c"], ["a", "x", "c"], ["a", "x", "c"], ["q", "r", "s", "t"]]
    d = diversity(generated, training)
    assert d["inter_ratio"] == 3 / 4  # one is a training utterance
    assert d["inter_med"] == (0 + 1 + 1 + 4) / 4
    assert d["intra_ratio"] == 3 / 4  # three distinct of four
    assert d["intra_med"] == (1 + 0 + 0 + 4) / 4  # each to the closest other generated one
    assert med_to_training(generated, training).tolist() == [0, 1, 1, 4]
    assert med_histogram(np.array([0, 1, 1, 4, 25])) == [
        ("0", 0.2),
        ("1", 0.4),
        ("2", 0.0),
        ("3", 0.0),
        ("4-5", 0.2),
        ("6-10", 0.0),
        ("11-15", 0.0),
        ("16-20", 0.0),
        (">20", 0.2),
    ]
    empty = diversity([], training)
    assert empty["generated"] == 0 and np.isnan(empty["inter_ratio"])


@pytest.mark.parametrize("n", [1, 2])
def test_intra_med_needs_another_generated_utterance(n):
    d = diversity([["a"]] * n, [["b"]])
    assert np.isnan(d["intra_med"]) if n == 1 else d["intra_med"] == 0.0
