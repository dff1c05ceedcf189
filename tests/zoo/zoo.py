#!/usr/bin/env python3
"""The GluonCV model-zoo corpus: does ampfuse import, run and match every architecture?

For each architecture of GluonCV 0.10.5 (gluoncv.model_zoo.get_model_list()):
  1. export   MXNet 1.9.1 builds it with random weights, exports symbol + .params, and
              records its outputs for one input, in f32 and under MXNet's bf16 AMP
              (tests/zoo/export_model.py, in a child process with a time limit);
  2. import   `ampfuse info` reads the symbol (a refusal names the op);
  3. f32      `ampfuse run` with MXNet's weights and input; every output must match
              MXNet's f32 output within F32_TOL of that output's largest |value|, or, where
              MXNet's own two CPU backends differ by more, within twice their difference
              (an output they put more than SPREAD_LIMIT apart is decided by rounding at this
              input: it matches when it is within F32_TOL of MXNet's reference-kernel output,
              and is counted "ill-conditioned", not a match, otherwise);
  4. bf16     `ampfuse run --amp bf16` against MXNet's f32 output, within
              max(BF16_TOL, 2 x the error of MXNet's own bf16 AMP run) of the largest |value|;
              a detector's ranked rows that fail this, where MXNet runs bf16 too, match when
              they keep as many of MXNet's f32 detections as MXNet's own bf16 run does
              (detections_kept).
A model with `_contrib_ROIAlign` (the R-CNNs) is compared with MXNet's runs of its symbol with
the output blocks of negative-batch regions zeroed, which MXNet 1.9.1 leaves unwritten
(tests/zoo/mxnet_symbol.py), not with the export's outputs.
Every step is cached in OUT/NAME (the export until the exporter's weights change, the
ampfuse results until the ampfuse binary or this script's comparison changes), so a rerun
does only what is new.
Outputs that are rows ranked by a score (GluonCV's detectors) may come in another order
where MXNet's scores of the rows are within twice the tolerance of each other (a near-tie);
docs/model_zoo.md, "How outputs are compared". Prints one table and writes
OUT/summary.md (the table, and the failures grouped by the op ampfuse refuses or by the
first error) and OUT/results.csv (one row a model).

Run it with the Python of a virtual environment holding mxnet==1.9.1, numpy<1.24 and
gluoncv==0.10.5.post0 (`make zoo` creates one: scripts/python_env.sh). See
docs/model_zoo.md.
"""
import argparse
import csv
import fnmatch
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
INIT_VERSION = 2  # export_model.INIT_VERSION (not imported: that module sets MXNet's environment)
F32_TOL = 1e-4   # relative to the output's largest |value|
BF16_TOL = 5e-2  # bf16 keeps 8 significant bits; errors add up over a deep network
# Where MXNet's oneDNN and reference kernels give outputs further apart than this (relative,
# as above), the output at this input is not a computed value but a decision that rounding
# makes: a ranking of near-equal scores, an overflow. No comparison with it says anything.
SPREAD_LIMIT = 1e-2
# A detection (one ranked row of a detector's outputs: id, score, box) is kept by a bf16 run
# when that run has a row within this of it, each output relative to its largest |value|
# (2-3 bf16 steps; detections_kept).
DETECTION_TOL = 1e-2
# Bumped when the comparison changes, so that cached results are compared again (where the
# change can alter them: still_compared).
COMPARE_VERSION = 4

FAMILIES = ["classification", "detection", "segmentation", "pose"]
OUT_OF_TARGET = ["video", "depth", "tracking", "int8"]


# ---------------------------------------------------------------- the model list
def family_of(name):
    if "int8" in name:
        return "int8"  # quantized graphs: refused by design (README, Models)
    if re.search(r"kinetics|ucf101|hmdb51|sthsthv2|^c3d|^p3d|^r2plus1d|^i3d|^slowfast", name):
        return "video"  # 5-D input (N, C, T, H, W)
    if name.startswith("monodepth2"):
        return "depth"
    if name.startswith("siamrpn"):
        return "tracking"
    if re.match(r"ssd_|yolo3_|faster_rcnn|mask_rcnn|doublehead_rcnn|custom_|center_net", name):
        return "detection"
    if re.match(r"fcn_|psp_|deeplab|icnet|fastscnn|danet", name) or re.match(r"hrnet_.*_s$", name):
        return "segmentation"
    if re.match(r"simple_pose|mobile_pose|alpha_pose", name):
        return "pose"
    return "classification"


def input_size(name):
    """The (height, width) the architecture is trained at."""
    if name.startswith("cifar_"):
        return 32, 32
    if name.startswith("inceptionv3"):
        return 299, 299
    if name.startswith("nasnet") and name != "nasnet_4_1056":
        return 331, 331
    if name.startswith("ssd_300"):
        return 300, 300
    if name.startswith("ssd_512") or "rcnn" in name or name.startswith("center_net"):
        return 512, 512
    if name.startswith("yolo3"):
        return 416, 416
    if family_of(name) == "segmentation":
        return 480, 480
    if name.startswith("alpha_pose"):
        return 320, 256
    if family_of(name) == "pose":
        return 256, 192
    if name.startswith("monodepth2"):
        return 192, 640
    return 224, 224


def cost_estimate(name):
    """A rough relative cost, to run cheap models first when time is short."""
    h, w = input_size(name)
    cost = h * w / (224 * 224)
    depth = re.search(r"(?:resnet|resnest|resnext|densenet|vgg|darknet|hrnet_w)(\d+)", name)
    if depth:
        cost *= max(int(depth.group(1)), 18) / 50
    m = re.search(r"mobilenet(?:v2_|v3_)?(\d\.\d+)?", name)
    if m:
        cost *= 0.3 * float(m.group(1) or 1)
    if "rcnn" in name or "fpn" in name:
        cost *= 3
    if family_of(name) == "segmentation":
        cost *= 2
    if re.search(r"senet|nasnet_[567]|residualattention|xception71|269|200|wideresnet|16x64d", name):
        cost *= 4
    return cost


def cheapest_first_by_family(names):
    """Round robin over the families, each cheapest first: a short run sees every family."""
    # The same network trained on another dataset (…_voc, …_coco, …_custom) adds little: last.
    def base(n):
        return re.sub(r"_(voc|coco|custom|ade|citys|mhpv1|kitti\w*)$", "", n)
    first = {}
    for n in sorted(names, key=cost_estimate):
        first.setdefault(base(n), n)
    queues = {}
    for n in sorted(names, key=lambda n: (first[base(n)] != n, cost_estimate(n))):
        queues.setdefault(family_of(n), []).append(n)
    order = []
    while any(queues.values()):
        for fam in FAMILIES + OUT_OF_TARGET:
            if queues.get(fam):
                order.append(queues[fam].pop(0))
    return order


def all_models():
    out = subprocess.run([sys.executable, "-c",
                          "import gluoncv.model_zoo as z; print('\\n'.join(z.get_model_list()))"],
                         capture_output=True, text=True, check=True)
    return [l for l in out.stdout.split() if l]


# ---------------------------------------------------------------- step 1: export
class Exporter(threading.Thread):
    """Exports models in one child process, restarting it when a model passes the limit."""

    def __init__(self, out_root, names, timeout, done):
        super().__init__(daemon=True)
        self.out_root, self.todo, self.timeout, self.done = out_root, list(names), timeout, done

    def give_up(self, name, why):
        """Records a model whose export did not finish, keeping its f32 part if that was done."""
        d = os.path.join(self.out_root, name)
        partial = os.path.join(d, "export.partial.json")
        if os.path.exists(partial):
            info = dict(read_json(partial), bf16="failed", bf16_error=why)
        else:
            info = {"name": name, "status": "export_failed", "error": why}
        write_json(os.path.join(d, "export.json"), info)

    def run(self):
        for n in self.todo:  # a stale mark from an interrupted run would time out at once
            stale = os.path.join(self.out_root, n, "started")
            if os.path.exists(stale):
                os.remove(stale)
        while self.todo:
            progress = False
            specs = [f"{n}:{input_size(n)[0]}:{input_size(n)[1]}" for n in self.todo]
            child = subprocess.Popen([sys.executable, os.path.join(HERE, "export_model.py"), self.out_root] + specs,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            stderr_tail = []
            threading.Thread(target=lambda: [stderr_tail.append(l) for l in child.stderr], daemon=True).start()
            while self.todo:
                name = self.todo[0]
                d = os.path.join(self.out_root, name)
                if os.path.exists(os.path.join(d, "export.json")):
                    self.todo.pop(0)
                    self.done.put(name)
                    progress = True
                    continue
                started = os.path.join(d, "started")
                if child.poll() is not None:  # died on this model (an abort, not an exception)
                    if os.path.exists(started):
                        tail = [l.strip() for l in stderr_tail if l.strip()][-1:] or [f"exit status {child.returncode}"]
                        self.give_up(name, "MXNet died: " + tail[0][:300])
                        continue
                    if not progress:  # cannot even start (gluoncv does not import): give up
                        tail = [l.strip() for l in stderr_tail if l.strip()][-1:] or ["no output"]
                        for n in self.todo:
                            write_json(os.path.join(self.out_root, n, "export.json"),
                                       {"name": n, "status": "export_failed", "error": "exporter: " + tail[0][:300]})
                            self.done.put(n)
                        self.todo = []
                    break  # died before reaching it: restart
                if os.path.exists(started) and time.time() - os.path.getmtime(started) > self.timeout:
                    child.kill()
                    child.wait()
                    self.give_up(name, f"MXNet took over {self.timeout} s")
                    break
                time.sleep(0.5)
            if child.poll() is None:
                child.kill()
                child.wait()
        self.done.put(None)


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def read_json(path):
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------- steps 2-4: ampfuse
def weight_args(model_dir):
    """The weights for `ampfuse run`: MXNet's own .params file, as exported."""
    return ["--params", os.path.join(model_dir, "model-0000.params")]


def run_tool(cmd, timeout=None):
    """subprocess.run, waiting out a rebuild of the binary under a long run (the linker
    replaces it: for a moment it cannot be executed)."""
    for attempt in range(10):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (PermissionError, FileNotFoundError, OSError) as e:
            if attempt == 9:
                raise RuntimeError(f"cannot run {cmd[0]}: {e}") from e
            time.sleep(30)


def first_error(stderr, returncode):
    lines = [l for l in stderr.splitlines() if "error" in l]
    if lines:
        return lines[-1].replace("ampfuse: error: ", "")[:300]
    return f"exit status {returncode}" + (" (killed by a signal)" if returncode < 0 else "")


def missing_ops(ampfuse, symbol_file, cache):
    """The ops of the symbol that ampfuse's registry does not know (probes each op once)."""
    with open(symbol_file) as f:
        ops = sorted({n["op"] for n in json.load(f)["nodes"] if n["op"] != "null"})
    missing = []
    for op in ops:
        if op not in cache:
            probe = os.path.join(os.path.dirname(symbol_file), "op_probe.json")
            write_json(probe, {"nodes": [{"op": "null", "name": "x", "inputs": []},
                                         {"op": op, "name": "probe", "inputs": [[0, 0, 0]]}],
                               "arg_nodes": [0], "heads": [[1, 0, 0]]})
            r = run_tool([ampfuse, "info", probe])
            cache[op] = f"unknown op '{op}'" in r.stderr
            os.remove(probe)
        if cache[op]:
            missing.append(op)
    return missing


def score_output(wants):
    """The index of the score output when the outputs are rows ranked by it, else None.

    GluonCV's detectors return (ids, scores, boxes[, masks]), each (B, N, ...), the rows
    sorted by score, highest first, and rows they drop filled with -1 at the end. The score
    output is the (B, N, 1) one whose values are non-increasing along N over its rows >= 0
    (ids can be sorted by chance: of several such, one holding fractions before one of whole
    numbers, then the one with the most distinct values)."""
    if len(wants) < 2 or wants[0].ndim < 3 or wants[0].shape[1] < 2:
        return None
    lead = wants[0].shape[:2]
    if any(w.ndim < 3 or w.shape[:2] != lead for w in wants):
        return None
    best, best_key = None, None
    for k, w in enumerate(wants):
        if w.shape[2:] != (1,):
            continue
        s = w[..., 0]
        if not all(np.all(np.diff(row[row >= 0]) <= 0) for row in s):
            continue
        finite = s[np.isfinite(s)]
        key = (bool(np.any(finite != np.round(finite))), len(np.unique(s)))
        if best_key is None or key > best_key:
            best, best_key = k, key
    return best


def reorder_near_ties(gots, wants, tol):
    """ampfuse's rows put in MXNet's order where MXNet's scores leave the order to rounding.

    Rows whose MXNet scores differ by at most 2 x tol x the largest |score| form a group
    (consecutive in MXNet's order): each output may be off by tol, so their order is not
    determined, and a sort or NMS of ampfuse's values may put them in any order. Within a
    group, each MXNet row takes the closest of ampfuse's rows not yet taken (over the outputs
    with at most 16 values a row), where that brings the group's rows closer than ampfuse's
    own order does. Returns the reordered outputs and how many rows moved."""
    k = score_output(wants)
    if k is None:
        return gots, 0
    gots = [g.copy() for g in gots]
    moved = 0
    key_outputs = [i for i, w in enumerate(wants) if int(np.prod(w.shape[2:])) <= 16]
    scores = wants[k][..., 0]
    scale = max(np.abs(scores[np.isfinite(scores)]).max(initial=0), 1e-30)
    for b in range(scores.shape[0]):
        s = scores[b]
        start = 0
        for end in range(1, len(s) + 1):
            if end < len(s) and s[end] >= 0 and s[end - 1] - s[end] <= 2 * tol * scale:
                continue
            if end - start > 1:
                rows = slice(start, end)
                ref = np.concatenate([wants[i][b, rows].reshape(end - start, -1) for i in key_outputs], axis=1)
                got = np.concatenate([gots[i][b, rows].reshape(end - start, -1) for i in key_outputs], axis=1)
                dist = np.nan_to_num(np.abs(ref[:, None, :] - got[None, :, :]), nan=np.inf).max(axis=2)
                order, free = [], np.ones(end - start, bool)
                for r in range(end - start):
                    c = int(np.argmin(np.where(free, dist[r], np.inf)))
                    order.append(c)
                    free[c] = False
                identity = float(np.max(np.diag(dist)))
                if order != list(range(end - start)) and float(np.max(dist[np.arange(end - start), order])) < identity:
                    moved += sum(o != r for r, o in enumerate(order))
                    for i in range(len(gots)):
                        gots[i][b, rows] = gots[i][b, start + np.array(order)]
            start = end
    return gots, moved


def detections_kept(gots, wants, tol=DETECTION_TOL):
    """How many of MXNet's f32 detections a run keeps: (kept, total), or None when the
    outputs are not ranked rows.

    bf16 moves a detector's scores by more than the gaps between them (random weights give
    hundreds of anchors within 1 % of each other), so its top-N list keeps most detections
    in another order and trades a few at the bottom for their neighbours: a row-by-row
    comparison fails for MXNet's own bf16 run as well. Here each valid f32 row (score >= 0),
    best first, takes the nearest not yet taken row of the run (over the outputs with at
    most 16 values a row, each relative to its largest |value|) and is kept when that row
    is within tol of it."""
    k = score_output(wants)
    if k is None:
        return None
    keys = [i for i, w in enumerate(wants) if int(np.prod(w.shape[2:])) <= 16]
    scales = [max(np.abs(wants[i][np.isfinite(wants[i])]).max(initial=0), 1e-30) for i in keys]
    kept = total = 0
    for b in range(wants[k].shape[0]):
        n = wants[k].shape[1]
        ref = np.concatenate([wants[i][b].reshape(n, -1) / s for i, s in zip(keys, scales)], axis=1)
        got = np.concatenate([gots[i][b].reshape(n, -1) / s for i, s in zip(keys, scales)], axis=1)
        dist = np.nan_to_num(np.abs(ref[:, None, :] - got[None, :, :]), nan=np.inf).max(axis=2)
        free = np.ones(n, bool)
        for r in np.flatnonzero(wants[k][b, :, 0] >= 0):
            total += 1
            c = int(np.argmin(np.where(free, dist[r], np.inf)))
            if free[c] and dist[r, c] <= tol:
                kept += 1
                free[c] = False
    return kept, total


def load_outputs(paths):
    return [np.load(path).astype(np.float64) for path in paths]


def output_paths(folder, n_ref):
    """The n_ref outputs MXNet's runs write into folder: 0.npy, 1.npy, ..."""
    return [os.path.join(folder, f"{k}.npy") for k in range(n_ref)]


def compare(saved, ref_dir, n_ref, tol=F32_TOL):
    """Largest |ampfuse - MXNet| over the outputs, relative to each output's largest |value|,
    after reorder_near_ties; (error, None, rows moved) or (None, why not comparable, 0)."""
    if len(saved) != n_ref:
        return None, f"{len(saved)} outputs, MXNet has {n_ref}", 0
    gots = load_outputs(saved)
    wants = load_outputs(output_paths(ref_dir, n_ref))
    for k, (got, want) in enumerate(zip(gots, wants)):
        if got.shape != want.shape:
            return None, f"output {k}: shape {list(got.shape)}, MXNet {list(want.shape)}", 0
    gots, moved = reorder_near_ties(gots, wants, tol)
    worst = 0.0
    for k, (got, want) in enumerate(zip(gots, wants)):
        fin = np.isfinite(want)
        if not np.array_equal(fin, np.isfinite(got)):
            return None, f"output {k}: non-finite elements differ from MXNet's", moved
        if not fin.any():
            continue
        scale = max(np.abs(want[fin]).max(), 1e-30)
        worst = max(worst, float(np.abs(got[fin] - want[fin]).max() / scale))
    return worst, None, moved


def mxnet_symbol_run(model_dir, name, flags, timeout):
    """MODEL_DIR/name: MXNet's outputs from tests/zoo/mxnet_symbol.py with flags (run once,
    cached); None when that run fails or passes the time limit."""
    out = os.path.join(model_dir, name)
    if not os.path.isdir(out):
        try:
            subprocess.run([sys.executable, os.path.join(HERE, "mxnet_symbol.py"), model_dir, name, *flags],
                           capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    return out if os.path.isdir(out) else None


def uses_roialign(model_dir):
    with open(os.path.join(model_dir, "model-symbol.json")) as f:
        return '"_contrib_ROIAlign"' in f.read()


def references(model_dir, exp, timeout):
    """MXNet's outputs to compare with: {"f32", "native" (reference kernels, made when first
    needed: None until then), "bf16" (None where MXNet's bf16 AMP fails), "zeroed"}.

    The export's, but for a model with `_contrib_ROIAlign`, whose MXNet outputs depend on
    memory that MXNet leaves unwritten (tests/zoo/mxnet_symbol.py --zero-negative-rois):
    all three are then runs of the symbol with those blocks zeroed, as GluonCV means them
    and ampfuse computes them ("zeroed")."""
    if not uses_roialign(model_dir):
        return {"f32": os.path.join(model_dir, "ref_f32"), "native": None, "zeroed": False,
                "bf16": os.path.join(model_dir, "ref_bf16") if exp.get("bf16") == "ran" else None}
    return {"f32": mxnet_symbol_run(model_dir, "ref_f32_zeroed", ["--zero-negative-rois"], timeout),
            "native": None, "zeroed": True,
            "bf16": mxnet_symbol_run(model_dir, "ref_bf16_zeroed", ["--zero-negative-rois", "--bf16"], timeout)}


def mxnet_spread(model_dir, refs, n_ref, timeout):
    """How far MXNet's reference-kernel outputs are from its oneDNN ones (tests/zoo/mxnet_symbol.py
    --native), as compare() measures it; None when that run fails. inf when their non-finite
    elements differ. Sets refs["native"]."""
    name = "ref_f32_zeroed_native" if refs["zeroed"] else "ref_f32_native"
    refs["native"] = mxnet_symbol_run(model_dir, name, ["--native"] + (["--zero-negative-rois"] if refs["zeroed"] else []),
                                      timeout)
    if refs["native"] is None:
        return None
    spread, err, _ = compare(output_paths(refs["native"], n_ref), refs["f32"], n_ref)
    return float("inf") if err else spread


def run_ampfuse(ampfuse, model_dir, amp, engine, timeout):
    out_dir = os.path.join(model_dir, f"ampfuse_{amp}")
    cmd = [ampfuse, "run", os.path.join(model_dir, "model-symbol.json"),
           "--inputs", f"data={os.path.join(model_dir, 'input', 'data.npy')}",
           *weight_args(model_dir), "--save-outputs", out_dir, "--repeat", "1", "--no-baseline", "--json"]
    if amp != "f32":
        cmd += ["--amp", amp]
    if engine == "interpreter":
        cmd += ["--interpreter"]
    t0 = time.time()
    try:
        r = run_tool(cmd, timeout)
    except subprocess.TimeoutExpired:
        return None, f"ampfuse run took over {timeout} s", timeout
    seconds = round(time.time() - t0, 1)
    if r.returncode != 0:
        return None, first_error(r.stderr, r.returncode), seconds
    return json.loads(r.stdout)["saved"], None, seconds


def check_model(ampfuse, model_dir, engine, timeout, op_cache):
    exp = read_json(os.path.join(model_dir, "export.json"))
    res = {"name": exp["name"], "export": exp["status"], "mxnet_bf16": exp.get("bf16", "-")}
    if exp["status"] != "exported":
        res["error"] = "MXNet: " + exp.get("error", "?")
        return res
    symbol = os.path.join(model_dir, "model-symbol.json")
    res["missing_ops"] = missing_ops(ampfuse, symbol, op_cache)
    r = run_tool([ampfuse, "info", symbol, "--shape", "data=" + ",".join(map(str, exp["input"]))], timeout)
    res["imports"] = r.returncode == 0
    if not res["imports"]:
        res["error"] = first_error(r.stderr, r.returncode)
        return res
    n_ref = len(exp["outputs_f32"])
    refs = references(model_dir, exp, timeout)
    if refs["zeroed"]:
        res["reference"] = "roialign_zeroed"
        res["mxnet_bf16"] = "ran" if refs["bf16"] else "failed"
        if refs["f32"] is None:
            res["error"] = "MXNet: the run with ROIAlign's negative regions zeroed failed"
            return res
    mx_bf16_err = None
    if refs["bf16"]:
        mx_bf16_err, _, _ = compare(output_paths(refs["bf16"], n_ref),
                                    refs["f32"], n_ref, BF16_TOL)
        res["mxnet_bf16_err"] = mx_bf16_err
    for amp in ("f32", "bf16"):
        run_and_compare(ampfuse, model_dir, refs, amp, engine, timeout, n_ref, mx_bf16_err, res)
    return res


def run_and_compare(ampfuse, model_dir, refs, amp, engine, timeout, n_ref, mx_bf16_err, res):
    """One `ampfuse run` (f32 or bf16 AMP) against MXNet's f32 outputs (refs: references()),
    recorded in res."""
    saved, err, seconds = run_ampfuse(ampfuse, model_dir, amp, engine, timeout)
    res[f"{amp}_seconds"] = seconds
    res[f"{amp}_runs"] = saved is not None
    if saved is None:
        res.setdefault("error", f"{amp}: {err}")
        return
    tol = F32_TOL if amp == "f32" else max(BF16_TOL, 2 * (mx_bf16_err or 0))
    worst, err, moved = compare(saved, refs["f32"], n_ref, tol)
    if amp == "f32" and (worst is None or worst > tol) and "shape" not in (err or ""):
        # Is it ampfuse, or is the output this sensitive to f32 rounding? MXNet's two CPU
        # backends tell: the tolerance becomes twice their difference, unless that
        # difference is so large that the output is decided by rounding (ill-conditioned).
        spread = mxnet_spread(model_dir, refs, n_ref, timeout)
        res["mxnet_spread"] = spread
        if spread is not None and spread > SPREAD_LIMIT:
            # Rounding decides the output; MXNet's two backends decide differently. ampfuse
            # matches MXNet when it decides as one of them does (within the plain tolerance).
            native, _, _ = compare(saved, refs["native"], n_ref, F32_TOL)
            res["f32_err_native"] = native
            if native is not None and native <= F32_TOL:
                res["f32_matches_native"] = True
            else:
                res["f32_ill_conditioned"] = True
                err = (f"ill-conditioned: MXNet's oneDNN and reference kernels differ by "
                       f"{spread:.3g} (> {SPREAD_LIMIT:g}) of the largest |value|; ampfuse: "
                       + (err or f"{worst:.3g}"))
        elif spread is not None and spread > F32_TOL / 2:
            tol = 2 * spread
            res["f32_tol"] = tol
    as_detections = False
    if amp != "f32" and worst is not None and worst > tol and mx_bf16_err is not None:
        # A ranked top-N list in bf16: compared as detections, against MXNet's own bf16 run.
        wants = load_outputs(output_paths(refs["f32"], n_ref))
        ours = detections_kept(load_outputs(saved), wants)
        if ours is not None:
            theirs = detections_kept(load_outputs(output_paths(refs["bf16"], n_ref)), wants)
            res[f"{amp}_detections_kept"] = f"{ours[0]}/{ours[1]}"
            res[f"mxnet_{amp}_detections_kept"] = f"{theirs[0]}/{theirs[1]}"
            as_detections = ours[0] >= theirs[0]
            if not as_detections:
                err = (f"keeps {ours[0]} of MXNet's {ours[1]} f32 detections, MXNet's own bf16 run "
                       f"{theirs[0]} (error {worst:.3g} > {tol:.3g} row by row)")
    shutil.rmtree(os.path.join(model_dir, f"ampfuse_{amp}"), ignore_errors=True)
    res[f"{amp}_err"] = worst
    res[f"{amp}_rows_reordered"] = moved
    if amp != "f32" and (res.get("mxnet_spread") or 0) > SPREAD_LIMIT:
        # Rounding decides the f32 output already; bf16's cannot be held to it either (its
        # tolerance, twice MXNet's own bf16 error, would take anything).
        res[f"{amp}_ill_conditioned"] = True
    as_detections = as_detections and not res.get(f"{amp}_ill_conditioned")
    matches = (worst is not None and worst <= tol or (amp == "f32" and res.get("f32_matches_native"))
               or as_detections)
    res[f"{amp}_matches_as_detections"] = as_detections
    res[f"{amp}_matches"] = bool(matches) and not res.get(f"{amp}_ill_conditioned")
    if not res[f"{amp}_matches"]:
        if res.get(f"{amp}_ill_conditioned") and amp != "f32" and not err:
            err = (f"not counted: the f32 output is ill-conditioned (MXNet's backends differ by "
                   f"{res['mxnet_spread']:.3g}); error {worst:.3g}")
        res.setdefault("error", f"{amp}: " + (err or f"error {worst:.3g} > {tol:.3g} of the largest |value|"))


def still_compared(r, model_dir):
    """Whether a cached result holds under this COMPARE_VERSION: its own, or an older one's
    where the changes since do not look: version 3 (detections_kept) at the bf16 failures
    of models that MXNet runs in bf16, version 4 (references()) at models with ROIAlign."""
    v = r.get("compare")
    if v == COMPARE_VERSION:
        return True
    if v not in (2, 3) or r.get("export") == "exported" and uses_roialign(model_dir):
        return False
    return v == 3 or not (r.get("bf16_runs") and not r.get("bf16_matches") and not r.get("bf16_ill_conditioned")
                          and r.get("mxnet_bf16") == "ran")


def binary_stamp(path):
    st = os.stat(path)
    return f"{st.st_size}:{int(st.st_mtime)}"


# ---------------------------------------------------------------- the report
def summarize(results, names, out_root):
    fams = FAMILIES + OUT_OF_TARGET
    rows = []
    header = ("| family | architectures | run here | MXNet exports | ampfuse imports | "
              "f32 runs | f32 matches | f32 ill-conditioned | bf16 runs | bf16 matches | MXNet runs bf16 |")
    rows += [header, "|" + "---|" * 11]
    for fam in fams + ["all"]:
        members = [n for n in names if fam == "all" or family_of(n) == fam]
        rs = [results[n] for n in members if n in results]
        cells = [len(members), len(rs), sum(r["export"] == "exported" for r in rs),
                 sum(bool(r.get("imports")) for r in rs),
                 sum(bool(r.get("f32_runs")) for r in rs), sum(bool(r.get("f32_matches")) for r in rs),
                 sum(bool(r.get("f32_ill_conditioned")) for r in rs),
                 sum(bool(r.get("bf16_runs")) for r in rs), sum(bool(r.get("bf16_matches")) for r in rs),
                 sum(r.get("mxnet_bf16") == "ran" for r in rs)]
        if fam != "all" and not members:
            continue
        rows.append(f"| {'**all**' if fam == 'all' else fam} | " + " | ".join(map(str, cells)) + " |")
    table = "\n".join(rows)

    groups = {}
    for n, r in results.items():
        if r.get("f32_matches") and r.get("bf16_matches"):
            continue
        if r.get("missing_ops"):
            key = "refused ops: " + ", ".join(r["missing_ops"])
        else:
            key = re.sub(r"'[^']*'", "'…'", r.get("error", "?")) if r.get("error", "").startswith("MXNet") \
                else r.get("error", "?")
            key = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", key)[:160]
        groups.setdefault(key, []).append(n)
    by_op = {}
    for n, r in results.items():
        for op in r.get("missing_ops", []):
            by_op.setdefault(op, []).append(n)
    lines = [table, ""]
    as_detections = sorted(n for n, r in results.items() if r.get("bf16_matches_as_detections"))
    if as_detections:
        lines += ["bf16 matches counted as detections (keeping as many of MXNet's f32 detections as MXNet's "
                  "own bf16 run): " + ", ".join(f"{n} ({results[n]['bf16_detections_kept']}, MXNet "
                                                 f"{results[n]['mxnet_bf16_detections_kept']})" for n in as_detections), ""]
    lines += ["Ops ampfuse refuses, with the number of architectures that use each:", ""]
    for op, ms in sorted(by_op.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"- `{op}`: {len(ms)}")
    lines += ["", "Failures grouped by cause:", ""]
    for key, ms in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- {key} ({len(ms)}): {', '.join(sorted(ms))}")
    with open(os.path.join(out_root, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

    keys = ["name", "family", "export", "reference", "imports", "missing_ops", "f32_runs", "f32_matches", "f32_err",
            "f32_tol", "mxnet_spread", "f32_ill_conditioned", "f32_matches_native", "f32_err_native", "f32_rows_reordered", "f32_seconds", "mxnet_bf16",
            "mxnet_bf16_err", "bf16_runs", "bf16_matches", "bf16_err", "bf16_rows_reordered", "bf16_matches_as_detections",
            "bf16_detections_kept", "mxnet_bf16_detections_kept", "bf16_seconds", "error"]
    with open(os.path.join(out_root, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for n in names:
            if n in results:
                row = dict(results[n], family=family_of(n))
                row["missing_ops"] = " ".join(row.get("missing_ops", []))
                w.writerow(row)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ampfuse", default=os.path.join(HERE, "..", "..", "build", "ampfuse"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "build", "zoo"))
    ap.add_argument("--models", nargs="*", default=[], help="names or glob patterns (default: all)")
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help=f"comma-separated, of {', '.join(FAMILIES + OUT_OF_TARGET)} (default: the target ones)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per model and step")
    ap.add_argument("--engine", choices=["fused", "interpreter"], default="fused")
    ap.add_argument("--limit", type=int, default=0, help="only the N cheapest models")
    ap.add_argument("--summary-only", action="store_true", help="print the table of the cached results")
    a = ap.parse_args()
    ampfuse = os.path.abspath(a.ampfuse)
    out_root = os.path.abspath(a.out)
    os.makedirs(out_root, exist_ok=True)

    every = all_models()
    fams = a.families.split(",")
    names = [n for n in every if family_of(n) in fams]
    if a.models:
        names = [n for n in names if any(fnmatch.fnmatch(n, p) for p in a.models)]
    names = cheapest_first_by_family(names)
    if a.limit:
        names = names[:a.limit]

    stamp = binary_stamp(ampfuse)
    results = {}
    for n in names:
        p = os.path.join(out_root, n, "result.json")
        if os.path.exists(p):
            r = read_json(p)
            if (r.get("ampfuse") == stamp and still_compared(r, os.path.dirname(p))) or a.summary_only:
                results[n] = r
    if not a.summary_only:
        todo = [n for n in names if n not in results]
        for n in todo:  # exported with older random weights (export_model.INIT_VERSION): again
            d = os.path.join(out_root, n)
            p = os.path.join(d, "export.json")
            if os.path.exists(p) and read_json(p).get("init", 1) < INIT_VERSION:
                for stale in ("export.json", "export.partial.json"):
                    if os.path.exists(os.path.join(d, stale)):
                        os.remove(os.path.join(d, stale))
                for stale in ("ref_f32", "ref_bf16", "ref_f32_native", "ref_f32_zeroed", "ref_f32_zeroed_native",
                              "ref_bf16_zeroed"):
                    shutil.rmtree(os.path.join(d, stale), ignore_errors=True)
        to_export = [n for n in todo if not os.path.exists(os.path.join(out_root, n, "export.json"))]
        done = queue.Queue()
        for n in todo:
            if n not in to_export:
                done.put(n)
        exporter = Exporter(out_root, to_export, a.timeout, done)
        exporter.start()
        op_cache = {}
        finished = 0
        while finished < len(todo):
            n = done.get()
            if n is None:
                continue
            finished += 1
            r = check_model(ampfuse, os.path.join(out_root, n), a.engine, a.timeout, op_cache)
            r["ampfuse"] = stamp
            r["compare"] = COMPARE_VERSION
            write_json(os.path.join(out_root, n, "result.json"), r)
            results[n] = r
            verdict = "matches" if r.get("f32_matches") else r.get("error", "?")
            print(f"[{finished}/{len(todo)}] {n}: f32 {verdict}; bf16 "
                  f"{'matches' if r.get('bf16_matches') else '-'}", flush=True)
            summarize(results, names, out_root)
    print(summarize(results, [n for n in every if family_of(n) in fams], out_root))
    print(f"\n{out_root}/summary.md, {out_root}/results.csv")


if __name__ == "__main__":
    main()
