"""How tests/zoo/zoo.py compares ampfuse's outputs with MXNet's (docs/model_zoo.md, "How
outputs are compared"): near-tied detection rows in either order, nothing else.
Needs only NumPy and pytest:  python -m pytest tests/zoo/test_zoo_compare.py"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402


def save(folder, outputs):
    os.makedirs(folder, exist_ok=True)
    paths = []
    for k, a in enumerate(outputs):
        paths.append(os.path.join(folder, f"{k}.npy"))
        np.save(paths[-1], np.asarray(a, dtype=np.float32))
    return paths


def detections(scores, boxes, ids=None):
    """GluonCV's (ids, scores, boxes), batch 1, rows in the given order."""
    n = len(scores)
    ids = np.zeros(n) if ids is None else np.asarray(ids, float)
    return [ids.reshape(1, n, 1), np.asarray(scores, float).reshape(1, n, 1), np.asarray(boxes, float).reshape(1, n, 4)]


BOXES = [[0, 0, 10, 10], [50, 50, 90, 90], [20, 0, 40, 30], [-1, -1, -1, -1]]


def compare(tmp_path, got, want, tol=zoo.F32_TOL):
    ref = save(str(tmp_path / "ref"), want)
    return zoo.compare(save(str(tmp_path / "got"), got), os.path.dirname(ref[0]), len(want), tol)


def test_rows_whose_scores_tie_within_the_tolerance_may_come_in_either_order(tmp_path):
    # MXNet ranks box 0 first by 1e-7; ampfuse's scores are a rounding apart and rank box 1 first.
    want = detections([0.35765722, 0.3576571, 0.2, -1], BOXES, ids=[8, 3, 1, -1])
    got = detections([0.35765713, 0.35765713, 0.2, -1], [BOXES[1], BOXES[0], BOXES[2], BOXES[3]], ids=[3, 8, 1, -1])
    err, why, moved = compare(tmp_path, got, want)
    assert why is None and moved == 2 and err < 1e-6


def test_rows_with_distinct_scores_must_keep_mxnets_order(tmp_path):
    want = detections([0.9, 0.5, 0.2, -1], BOXES)
    got = detections([0.9, 0.5, 0.2, -1], [BOXES[1], BOXES[0], BOXES[2], BOXES[3]])
    err, why, moved = compare(tmp_path, got, want)
    assert why is None and moved == 0 and err > 0.4


def test_a_tie_group_does_not_excuse_a_wrong_box(tmp_path):
    want = detections([0.5, 0.5, 0.2, -1], BOXES)
    wrong = [list(b) for b in BOXES]
    wrong[0] = [0, 0, 12, 10]
    err, why, _ = compare(tmp_path, detections([0.5, 0.5, 0.2, -1], wrong), want)
    assert why is None and err > zoo.F32_TOL


def test_outputs_that_are_not_ranked_rows_are_compared_as_they_are(tmp_path):
    want = [np.array([[3.0, 1.0, 2.0]])]
    got = [np.array([[1.0, 3.0, 2.0]])]
    assert zoo.score_output([w.reshape(1, 3, 1) for w in want]) is None
    err, why, moved = compare(tmp_path, got, want)
    assert why is None and moved == 0 and err == pytest.approx(2 / 3)


def test_non_finite_elements_must_be_where_mxnets_are(tmp_path):
    want = [np.array([1.0, np.inf, 3.0])]
    got = [np.array([1.0, 2.0, 3.0])]
    err, why, _ = compare(tmp_path, got, want)
    assert err is None and "non-finite" in why


def test_the_score_output_is_the_sorted_one_holding_fractions():
    # The ids happen to be sorted too, with as many distinct values as the scores.
    assert zoo.score_output(detections([0.9, 0.5, 0.2, -1], BOXES, ids=[8, 3, 1, -1])) == 1
    # Whole-number scores: the one with more distinct values.
    assert zoo.score_output(detections([9, 5, 2, -1], BOXES, ids=[4, 4, 4, -1])) == 1
