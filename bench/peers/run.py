#!/usr/bin/env python3
"""Issue 18's peer harness: ampfuse against torch (eager, torch.compile), JAX and MXNet
1.9.1 on one machine, in one sitting, with one thread count. `make peers` runs it (after
bench/peers/setup.sh); bench/README.md, "Peers (bench/peers)", explains the table.

Runs in the torch virtual environment (it needs numpy for the checks) and drives:
  mx_worker.py     (MXNet venv) weights, inputs and the reference outputs; MXNet's timings
  torch_worker.py  (torch venv) torch eager / torch.compile and jax.jit
  build/ampfuse run            the models, as users run them (--params, --inputs, --amp)
  build/ampfuse_bench          the kernels: BM_C8_Fused (the generated kernel),
                               BM_C8_Executor/into:1 (the same graph through the executor,
                               run_into a caller's buffer), BM_CastTranspose, BM_Memcpy
Each worker is a separate process, one after the other; their JSON results are joined
into one markdown report (stdout and --out).
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from common import CAST_SHAPES, MODELS, REPEAT, TOLERANCE, WARMUP, check  # noqa: E402


def sh(cmd, env=None, **kw):
    print("[peers] $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, check=True, **kw)


def worker(cmd, env, out, crashed):
    """Runs a peer's worker, which writes its results to `out` as it goes. A worker that dies
    (a peer's own crash: torch 2.15 aborted with "invalid fastbin entry" under
    MKL_ENABLE_INSTRUCTIONS=AVX2) is named in `crashed` and the run goes on with what it
    wrote; a file left from an earlier run is removed first, so that it is never taken for
    this run's."""
    if os.path.exists(out):
        os.remove(out)
    print("[peers] $ " + " ".join(cmd), flush=True)
    code = subprocess.run(cmd, env=env).returncode
    if code != 0:
        how = "signal %d" % -code if code < 0 else "exit status %d" % code
        crashed.append("%s %s (%s)" % (os.path.basename(cmd[1]), cmd[2], how))
        print("[peers] the worker died (%s); its results so far are kept" % how, flush=True)
    if not os.path.exists(out):
        json.dump({}, open(out, "w"))


def cpu_info():
    model, flags = platform.processor() or "unknown CPU", []
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    except OSError:
        pass
    keep = [f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "f16c", "fma")]
    return model, keep


def ampfuse_models(ampfuse, work, names, dtypes, out_root, env):
    res = {}
    for name in names:
        d = os.path.join(work, name)
        ref = np.load(os.path.join(d, "ref_f32.npy"))
        for dt in dtypes:
            key = "%s/%s/ampfuse" % (name, dt)
            save = os.path.join(out_root, "ampfuse-out", name, dt)
            cmd = [ampfuse, "run", os.path.join(d, "symbol.json"), "--params", os.path.join(d, "model.params"),
                   "--inputs", "data=" + os.path.join(d, "data.npy"), "--amp", "off" if dt == "f32" else "bf16",
                   "--repeat", str(REPEAT), "--no-baseline", "--save-outputs", save, "--json"]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if p.returncode != 0:
                r = {"ok": False, "error": (p.stderr.strip().split("\n") or ["exit %d" % p.returncode])[-1][:160]}
            else:
                j = json.loads(p.stdout)
                # The run's one output, saved as f32 (bf16 exactly widened).
                out = np.load(j["saved"][0])
                ok, err = check(out, ref, dt)
                r = {"ok": ok, "err": err, "first_ms": j["first_run_ms"], "solo_runs": j.get("solo_runs", 0)}
                if ok:  # a wrong output's time is not reported
                    r["ms"] = j["run_ms"]
            res[key] = r
            print("[ampfuse] %s %s" % (key, r), flush=True)
    return res


def ampfuse_kernels(bench, out_json, env):
    """BM_* medians of REPEAT repetitions, each the mean of the iterations that fill 0.2 s
    (8-12 of these kernels), after a warm-up. Not one iteration per repetition: so timed,
    BM_C8_Fused came out at multiples of 4 ms (the C8-f32 kernel faster than the bf16 one),
    as if each lone iteration's wake-up of the pool's threads waited for a timer tick."""
    sh([bench, "--benchmark_filter=^(BM_Memcpy|BM_C8_Fused|BM_C8_Executor|BM_CastTranspose)/",
        "--benchmark_repetitions=%d" % REPEAT, "--benchmark_min_time=0.2",
        "--benchmark_min_warmup_time=0.2", "--benchmark_report_aggregates_only=true",
        "--benchmark_out=" + out_json, "--benchmark_out_format=json"], env=env, stdout=subprocess.DEVNULL)
    med = {}
    for b in json.load(open(out_json))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            assert b["time_unit"] == "ms", b
            med[b["run_name"].replace("/real_time", "")] = b["real_time"]
    res = {}
    for dt, f32, traffic in (("bf16", 0, 6), ("f32", 1, 12)):
        base = med["BM_Memcpy/%d" % traffic]
        res["c8_%s/ampfuse" % dt] = {"ok": True, "ms": med["BM_C8_Fused/f32:%d" % f32], "memcpy_ms": base}
        res["c8_%s/ampfuse_exec" % dt] = {"ok": True, "ms": med["BM_C8_Executor/f32:%d/into:1" % f32],
                                          "memcpy_ms": base}
    for c, (_, _, h, w) in CAST_SHAPES.items():
        res["cast_c%d/ampfuse" % c] = {"ok": True, "ms": med["BM_CastTranspose/C:%d/HW:%d/reverse:0" % (c, h * w)],
                                       "memcpy_ms": med["BM_Memcpy/6"]}
    return res


def cell(r, ratio=False):
    if r is None:
        return "n/a"
    if "error" in r:
        return "error: " + r["error"].replace("|", "/")
    if not r["ok"]:
        return "**WRONG** (err %.2g)" % r["err"]
    ms = r["ms"]
    s = ("%.0f ms" if ms >= 100 else "%.1f ms" if ms >= 10 else "%.3g ms") % ms
    if r.get("solo_runs"):
        s += " (%d solo)" % r["solo_runs"]
    if ratio and r.get("memcpy_ms"):
        s += " (%.2fx)" % (r["memcpy_ms"] / r["ms"])
    return s


KERNEL_COLS = [("torch eager", "eager"), ("torch.compile", "compile"), ("jax.jit", "jax"), ("MXNet", "mxnet"),
               ("ampfuse kernel", "ampfuse"), ("ampfuse executor", "ampfuse_exec")]
MODEL_COLS = [("torch eager", "eager"), ("torch.compile", "compile"), ("MXNet", "mxnet_none"),
              ("MXNet oneDNN fusion", "mxnet_default"), ("ampfuse", "ampfuse")]


def report(res, args, versions, load_before, load_after):
    model, flags = cpu_info()
    lines = ["# Peers (bench/peers/run.py), %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "",
             "- CPU: %s, %d CPUs, flags: %s (avx512_bf16: %s)" % (
                 model, os.cpu_count(), " ".join(flags) or "none of avx2/avx512", "yes" if "avx512_bf16" in flags else "no"),
             "- threads: %d for every peer (OMP_NUM_THREADS, torch.set_num_threads, JAX pinned to %s CPUs)" % (
                 args.threads, res.get("_jax_cpus") or "(not run)"),
             "- load average before / after: %s / %s" % (load_before, load_after),
             "- versions: " + ", ".join("%s %s" % kv for kv in versions.items()),
             "- ampfuse: `AMPFUSE_TEAMS=always` (teams of %d threads, as the peers; not its default `adaptive`)" % args.threads,
             "- every cell: median of %d runs after %d or more untimed ones, for 2 s at least (ampfuse run: after its first run; "
             "ampfuse_bench: of %d repetitions of 0.2 s each); "
             "**WRONG**: output off the reference (MXNet f32, MXNET_SUBGRAPH_BACKEND=NONE) by more than "
             "%g (f32) / %g (bf16) of max |ref|, not timed" % (REPEAT, WARMUP, REPEAT, TOLERANCE["f32"], TOLERANCE["bf16"]),
             ""]
    if res.get("_crashed"):
        lines[-1:-1] = ["- **crashed** (the cells it had not reached are n/a): " + "; ".join(res["_crashed"])]
    if not args.skip_kernels:
        lines += ["## Kernels (64 Mi elements; in brackets: that peer's memcpy of the same bytes / its time)", "",
                  "| kernel | " + " | ".join(c for c, _ in KERNEL_COLS) + " |",
                  "|---|" + "---:|" * len(KERNEL_COLS)]
        for key, label in (("c8_bf16", "C8 bf16"), ("c8_f32", "C8-f32"),
                           ("cast_c64", "cast f32 NCHW -> bf16 NHWC, C=64"), ("cast_c3", "cast f32 NCHW -> bf16 NHWC, C=3")):
            lines.append("| %s | %s |" % (label, " | ".join(cell(res.get("%s/%s" % (key, k)), True) for _, k in KERNEL_COLS)))
        lines.append("")
    lines += ["## Models (batch 1)", "",
              "| model | dtype | " + " | ".join(c for c, _ in MODEL_COLS) + " |",
              "|---|---|" + "---:|" * len(MODEL_COLS)]
    for name in args.models:
        for dt in args.dtypes:
            lines.append("| %s | %s | %s |" % (name, dt, " | ".join(
                cell(res.get("%s/%s/%s" % (name, dt, k))) for _, k in MODEL_COLS)))
    lines.append("")
    lines += ["Largest |output - reference| / max |reference| of each model run above (the check's "
              "measure; the reference is MXNet f32 unfused, so its own f32 cell is 0):", "",
              "| model | dtype | " + " | ".join(c for c, _ in MODEL_COLS) + " |",
              "|---|---|" + "---:|" * len(MODEL_COLS)]
    for name in args.models:
        for dt in args.dtypes:
            errs = []
            for _, k in MODEL_COLS:
                r = res.get("%s/%s/%s" % (name, dt, k))
                errs.append("%.2g" % r["err"] if r and "err" in r else "-")
            lines.append("| %s | %s | %s |" % (name, dt, " | ".join(errs)))
    lines.append("")
    comp = ["%s %s %.0f s" % (k.split("/")[0], k.split("/")[1], r["first_ms"] / 1e3)
            for k, r in res.items() if k.endswith("/compile") and "first_ms" in r and "/" in k and k.count("/") == 2]
    if comp:
        lines.append("torch.compile's first call (compile included): " + ", ".join(comp) + ".")
    return "\n".join(lines) + "\n"


def load_avg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peers-dir", default=os.environ.get("AMPFUSE_PEERS_DIR", os.path.join(ROOT, "build", "peers")))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="ampfuse's release build directory")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-kernels", action="store_true", help="models only")
    ap.add_argument("--out", default=None, help="the report's file (default PEERS_DIR/latest.md)")
    args = ap.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    for m in args.models:
        if m not in MODELS:
            raise SystemExit("run.py: unknown model '%s' (known: %s)" % (m, ", ".join(MODELS)))
    for d in args.dtypes:
        if d not in ("f32", "bf16"):
            raise SystemExit("run.py: unknown dtype '%s' (f32, bf16)" % d)
    pd = os.path.abspath(args.peers_dir)
    mx_py, torch_py = os.path.join(pd, "venv-mxnet", "bin", "python"), os.path.join(pd, "venv-torch", "bin", "python")
    ampfuse, bench = os.path.join(args.build, "ampfuse"), os.path.join(args.build, "ampfuse_bench")
    for p, what in ((mx_py, "bench/peers/setup.sh"), (torch_py, "bench/peers/setup.sh"),
                    (ampfuse, "cmake --build build --target ampfuse"),
                    (bench, "cmake --build build --target ampfuse_bench")):
        if not os.path.exists(p):
            raise SystemExit("run.py: %s is missing: run %s first" % (p, what))
    work, res_dir = os.path.join(pd, "work"), os.path.join(pd, "results")
    os.makedirs(res_dir, exist_ok=True)
    t = str(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=t, MKL_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, PYTHONWARNINGS="ignore")
    env.pop("AMPFUSE_THREADS", None)  # ampfuse's kernels then take OMP_NUM_THREADS too
    # Teams of `threads` threads for every parallel op, as the peers' thread pools run: by
    # default (adaptive) ampfuse goes solo while other processes hold the cores, which the
    # peers cannot do, and a table measured on a loaded machine would then compare unlike
    # things. The cells say how many timed runs went solo anyway (none expected).
    env["AMPFUSE_TEAMS"] = "always"
    env_none = dict(env, MXNET_SUBGRAPH_BACKEND="NONE")
    env_default = dict(env)
    env_default.pop("MXNET_SUBGRAPH_BACKEND", None)
    load_before = load_avg()
    mx_worker, torch_worker = os.path.join(HERE, "mx_worker.py"), os.path.join(HERE, "torch_worker.py")

    sh([mx_py, mx_worker, "prepare", work, os.path.join(ROOT, "models")], env=env_none)
    res = {}

    def merge(path, rename=None):
        for k, v in json.load(open(path)).items():
            res[rename(k) if rename else k] = v

    crashed = []
    if not args.skip_kernels:
        res.update(ampfuse_kernels(bench, os.path.join(res_dir, "ampfuse_bench.json"), env))
        worker([torch_py, torch_worker, "kernels", t, os.path.join(res_dir, "torch_kernels.json")], env,
               os.path.join(res_dir, "torch_kernels.json"), crashed)
        merge(os.path.join(res_dir, "torch_kernels.json"))
        worker([torch_py, torch_worker, "jax", t, os.path.join(res_dir, "jax_kernels.json")], env,
               os.path.join(res_dir, "jax_kernels.json"), crashed)
        jax_res = json.load(open(os.path.join(res_dir, "jax_kernels.json")))
        res["_jax_cpus"] = jax_res.pop("_cpus", None)
        res.update(jax_res)
        worker([mx_py, mx_worker, "kernels", os.path.join(res_dir, "mx_kernels.json")], env_none,
               os.path.join(res_dir, "mx_kernels.json"), crashed)
        merge(os.path.join(res_dir, "mx_kernels.json"), lambda k: k + "/mxnet")
    names = ",".join(args.models)
    for dt in args.dtypes:
        for backend, e in (("none", env_none), ("default", env_default)):
            out = os.path.join(res_dir, "mx_%s_%s.json" % (backend, dt))
            worker([mx_py, mx_worker, "models", work, dt, out, names], e, out, crashed)
            merge(out, lambda k, dt=dt, backend=backend: "%s/%s/mxnet_%s" % (k, dt, backend))
    out = os.path.join(res_dir, "torch_models.json")
    worker([torch_py, torch_worker, "models", work, t, out, names, ",".join(args.dtypes)], env, out, crashed)
    merge(out)
    res["_crashed"] = crashed
    res.update(ampfuse_models(ampfuse, work, args.models, args.dtypes, pd, env))

    versions = {}
    for py, code in ((torch_py, "import torch, jax; print('torch', torch.__version__); print('jax', jax.__version__)"),
                     (mx_py, "import mxnet; print('mxnet', mxnet.__version__)")):
        for line in subprocess.run([py, "-c", code], capture_output=True, text=True, env=env).stdout.split("\n"):
            if line:
                versions[line.split()[0]] = line.split()[1]
    try:
        versions["ampfuse"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                             capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    json.dump(res, open(os.path.join(res_dir, "all.json"), "w"), indent=1)
    text = report(res, args, versions, load_before, load_avg())
    out_md = args.out or os.path.join(pd, "latest.md")
    open(out_md, "w").write(text)
    print(text)
    print("[peers] written to " + out_md)


if __name__ == "__main__":
    main()
