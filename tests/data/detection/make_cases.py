#!/usr/bin/env python3
"""Writes cases.json: inputs, attributes and MXNet 1.9.1's outputs for the contrib detection
ops (_contrib_box_nms, _contrib_box_decode, _contrib_ROIAlign), read by tests/contrib_detection_test.cpp.

Run with the Python of a venv holding mxnet==1.9.1 (tests/zoo/make_venv.sh):
  MXNET_SUBGRAPH_BACKEND=NONE python tests/data/detection/make_cases.py
"""
import json
import os

import mxnet as mx
import numpy as np

rng = np.random.RandomState(7)
cases = []


def add(name, op, inputs, attrs):
    fn = getattr(mx.nd.contrib, op)
    outs = fn(*[mx.nd.array(np.asarray(x, dtype=np.float32)) for x in inputs], **attrs)
    outs = [o.asnumpy() for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
    if op == "ROIAlign":
        # MXNet skips a region with a negative batch index without writing its output
        # (whatever the memory held, NaN included; it zeroes flat element r instead, which
        # ampfuse does too); ampfuse writes zeros there.
        outs[0][np.asarray(inputs[1])[:, 0] < 0] = 0
    cases.append({
        "name": name, "op": "_contrib_" + op,
        "attrs": {k: str(v) for k, v in attrs.items()},
        "inputs": [{"shape": list(np.shape(x)), "values": np.asarray(x, np.float32).ravel().tolist()} for x in inputs],
        "outputs": [{"shape": list(o.shape), "values": o.ravel().tolist()} for o in outs],
    })


def boxes(batch, n, width, ids=3, coord_start=2, score_index=1, id_index=0, ties=False, fmt="corner"):
    x = np.zeros(batch + (n, width), np.float32)
    score = rng.uniform(0, 1, batch + (n,))
    x[..., score_index] = np.round(score, 1) if ties else score
    if id_index >= 0:
        x[..., id_index] = rng.randint(0, ids, batch + (n,))
    xy = rng.uniform(0, 10, batch + (n, 2))
    wh = rng.uniform(1, 6, batch + (n, 2))
    if fmt == "corner":
        x[..., coord_start:coord_start + 2] = xy
        x[..., coord_start + 2:coord_start + 4] = xy + wh
    else:
        x[..., coord_start:coord_start + 2] = xy + wh / 2
        x[..., coord_start + 2:coord_start + 4] = wh
    return x


doc = [[0, 0.5, 0.1, 0.1, 0.2, 0.2], [1, 0.4, 0.1, 0.1, 0.2, 0.2],
       [0, 0.3, 0.1, 0.1, 0.14, 0.14], [2, 0.6, 0.5, 0.5, 0.7, 0.8]]
add("nms_doc_example", "box_nms", [doc], dict(overlap_thresh=0.1, coord_start=2, score_index=1, id_index=0,
                                             force_suppress=True))
add("nms_doc_example_per_class", "box_nms", [doc], dict(overlap_thresh=0.1, id_index=0))
add("nms_defaults", "box_nms", [boxes((2,), 16, 6)], {})
add("nms_ties_topk_valid", "box_nms", [boxes((2,), 20, 6, ties=True)],
    dict(overlap_thresh=0.3, valid_thresh=0.25, topk=6, id_index=0))
add("nms_force_suppress", "box_nms", [boxes((2,), 20, 6, ties=True)],
    dict(overlap_thresh=0.2, id_index=0, force_suppress=True))
add("nms_background", "box_nms", [boxes((1,), 20, 6)], dict(overlap_thresh=0.3, id_index=0, background_id=1))
add("nms_center_in", "box_nms", [boxes((2,), 12, 6, fmt="center")],
    dict(overlap_thresh=0.3, in_format="center", id_index=0))
add("nms_center_to_corner", "box_nms", [boxes((2,), 12, 6, fmt="center")],
    dict(overlap_thresh=0.3, in_format="center", out_format="corner"))
add("nms_corner_to_center", "box_nms", [boxes((2,), 12, 6)], dict(overlap_thresh=0.3, out_format="center"))
add("nms_no_id_width5_4d", "box_nms", [boxes((2, 3), 10, 5, id_index=-1, score_index=0, coord_start=1)],
    dict(overlap_thresh=0.4, score_index=0, coord_start=1, topk=5))
add("nms_width7_score_last", "box_nms", [boxes((1,), 10, 7, id_index=1, score_index=6, coord_start=2)],
    dict(overlap_thresh=0.4, score_index=6, coord_start=2, id_index=1))
add("nms_nothing_valid", "box_nms", [boxes((2,), 6, 6)], dict(valid_thresh=2.0))
add("nms_topk_zero", "box_nms", [boxes((1,), 6, 6)], dict(topk=0))
neg = boxes((1,), 8, 6)
neg[0, ::2, 2:6] -= 12  # boxes left of 0: corner_to_center leaves such rows alone
neg[0, 1, 4] = neg[0, 1, 2] - 1  # an inverted box: area 0
add("nms_negative_and_inverted", "box_nms", [neg], dict(overlap_thresh=0.2, out_format="center"))

anchors_corner = boxes((1,), 6, 4, id_index=-1, score_index=-1, coord_start=0)
anchors_center = boxes((1,), 6, 4, id_index=-1, score_index=-1, coord_start=0, fmt="center")
offsets = rng.normal(0, 1, (2, 6, 4)).astype(np.float32)
add("decode_center", "box_decode", [offsets, anchors_center], {})
add("decode_corner_std", "box_decode", [offsets, anchors_corner],
    dict(format="corner", std0=0.1, std1=0.1, std2=0.2, std3=0.2))
add("decode_clip", "box_decode", [offsets * 3, anchors_center], dict(clip=1.5, std2=0.5))

feat = rng.normal(0, 1, (2, 3, 9, 11)).astype(np.float32)
rois = np.array([[0, 4, 4, 30, 20], [1, -8, -8, 12, 40], [1, 40, 30, 90, 70], [0, 10, 10, 10.5, 10.5],
                 [-1, 0, 0, 20, 20], [0, 60, 50, 100, 80]], np.float32)
add("roi_align_adaptive_grid", "ROIAlign", [feat, rois], dict(pooled_size=(3, 2), spatial_scale=0.125))
add("roi_align_sample_ratio", "ROIAlign", [feat, rois], dict(pooled_size=(2, 2), spatial_scale=0.25, sample_ratio=2))
add("roi_align_aligned", "ROIAlign", [feat, rois], dict(pooled_size=(4, 3), spatial_scale=0.125, aligned=True))

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.json"), "w") as f:
    json.dump({"generator": "tests/data/detection/make_cases.py", "mxnet": mx.__version__, "cases": cases}, f)
print(len(cases), "cases")
