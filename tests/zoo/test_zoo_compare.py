"""How tests/zoo/zoo.py compares ampfuse's outputs with MXNet's (docs/model_zoo.md, "How
outputs are compared"): near-tied detection rows in either order, nothing else; bf16
detectors counted by the detections they keep, against MXNet's own bf16 run.
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



def test_detections_kept_counts_the_f32_rows_a_run_reproduces_in_any_order():
    want = detections([0.9, 0.5, 0.2, -1], BOXES, ids=[8, 3, 1, -1])
    # The first two swapped, the third replaced by another box: two of three kept.
    got = detections([0.5, 0.9, 0.2, -1], [BOXES[1], BOXES[0], [60, 0, 80, 30], BOXES[3]], ids=[3, 8, 1, -1])
    assert zoo.detections_kept(got, want) == (2, 3)
    assert zoo.detections_kept(want, want) == (3, 3)


def test_a_detection_with_another_id_or_a_moved_box_is_not_kept():
    want = detections([0.9, 0.5, 0.2, -1], BOXES, ids=[8, 3, 1, -1])
    other_id = detections([0.9, 0.5, 0.2, -1], BOXES, ids=[8, 4, 1, -1])
    assert zoo.detections_kept(other_id, want) == (2, 3)
    moved = detections([0.9, 0.5, 0.2, -1], BOXES, ids=[8, 3, 1, -1])
    moved[2][0, 2, 2] += 0.02 * 90  # 2 % of the largest coordinate
    assert zoo.detections_kept(moved, want) == (2, 3)


def test_outputs_that_are_not_ranked_rows_have_no_detections():
    assert zoo.detections_kept([np.ones((1, 3, 1))], [np.array([[[3.0], [1.0], [2.0]]])]) is None


FOUR = [[0, 0, 10, 10], [50, 50, 90, 90], [20, 0, 40, 30], [0, 60, 30, 90]]
NEW = [60, 0, 80, 30]


def test_a_bf16_detector_matches_when_it_keeps_as_many_detections_as_mxnets_bf16(tmp_path, monkeypatch):
    model = tmp_path / "model"  # the files export_model.py writes that the comparison reads
    want = detections([0.9, 0.8, 0.7, 0.6], FOUR, ids=[8, 3, 1, 2])
    save(str(model / "ref_f32"), want)
    # MXNet's bf16: the last box moved by 4 % of the largest coordinate: 3 of 4 kept.
    mxnet_bf16 = detections([0.9, 0.8, 0.7, 0.6], FOUR[:3] + [[0, 60, 30, 93.6]], ids=[8, 3, 1, 2])
    save(str(model / "ref_bf16"), mxnet_bf16)
    mx_err, _, _ = zoo.compare(save(str(tmp_path / "mx"), mxnet_bf16), str(model / "ref_f32"), 3, zoo.BF16_TOL)

    def run(got):
        saved = save(str(model / "ampfuse_bf16"), got)
        monkeypatch.setattr(zoo, "run_ampfuse", lambda *args: (saved, None, 0.0))
        res = {}
        refs = {"f32": str(model / "ref_f32"), "native": None, "bf16": str(model / "ref_bf16"), "zeroed": False}
        zoo.run_and_compare("ampfuse", str(model), refs, "bf16", "fused", 1, 3, mx_err, res)
        return res

    # A new detection ranked second, the last one dropped: row by row far off, 3 of 4 kept.
    as_many = run(detections([0.9, 0.85, 0.8, 0.7], [FOUR[0], NEW, FOUR[1], FOUR[2]], ids=[8, 5, 3, 1]))
    assert as_many["bf16_err"] > 2 * mx_err
    assert as_many["bf16_matches"] and as_many["bf16_matches_as_detections"]
    assert as_many["bf16_detections_kept"] == "3/4" and as_many["mxnet_bf16_detections_kept"] == "3/4"
    fewer = run(detections([0.9, 0.85, 0.8, 0.8], [FOUR[0], NEW, [70, 0, 90, 30], FOUR[1]], ids=[8, 5, 5, 3]))
    assert not fewer["bf16_matches"] and not fewer["bf16_matches_as_detections"]
    assert "keeps 2 of MXNet's 4" in fewer["error"]


def test_zero_negative_rois_multiplies_each_roialign_by_its_regions_validity():
    import mxnet_symbol
    var = {"op": "null", "inputs": []}
    graph = {"nodes": [dict(var, name="data"), dict(var, name="rois"),
                       {"op": "_contrib_ROIAlign", "name": "pool", "attrs": {"pooled_size": "(2, 2)", "spatial_scale": "1"},
                        "inputs": [[0, 0, 0], [1, 0, 0]]},
                       {"op": "relu", "name": "act", "inputs": [[2, 0, 0]]}],
             "arg_nodes": [0, 1], "heads": [[3, 0, 0], [2, 0, 0]]}
    out = mxnet_symbol.zero_negative_rois(graph)
    nodes = out["nodes"]
    assert [n["op"] for n in nodes] == ["null", "null", "_contrib_ROIAlign", "slice_axis", "_greater_equal_scalar",
                                        "Reshape", "broadcast_mul", "relu"]
    assert nodes[3]["inputs"] == [[1, 0, 0]] and nodes[3]["attrs"] == {"axis": "1", "begin": "0", "end": "1"}
    assert nodes[6]["inputs"] == [[2, 0, 0], [5, 0, 0]]
    assert nodes[7]["inputs"] == [[6, 0, 0]]  # the consumer reads the zeroed blocks
    assert out["arg_nodes"] == [0, 1] and out["heads"] == [[7, 0, 0], [6, 0, 0]]
    assert mxnet_symbol.zero_negative_rois({"nodes": nodes[:2], "arg_nodes": [0, 1], "heads": [[1, 0, 0]]})["nodes"] == nodes[:2]
