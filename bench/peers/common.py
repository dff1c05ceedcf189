"""What every side of the peer harness (bench/peers) shares: the workloads, the run counts
and the output check. Plain Python + numpy, importable from both virtual environments."""

import numpy as np

WARMUP = 5    # untimed runs first (compiles, first-touch page faults, oneDNN primitive caches)
REPEAT = 20   # timed runs; every cell is their median

# Models at batch 1. file None: built by mx_worker.transformer_symbol.
MODELS = {
    "resnet152": {"file": "resnet152-mxnet-symbolic-symbol.json", "shape": (1, 3, 224, 224), "seed": 152},
    "squeezenet_v1.1": {"file": "squeezenet_v1.1-mms-legacy-symbol.json", "shape": (1, 3, 224, 224), "seed": 11},
    "cifar_resnet20_v2": {"file": "cifar_resnet20_v2-gluoncv-symbol.json", "shape": (1, 3, 32, 32), "seed": 20},
    "transformer_layer": {"file": None, "shape": (1, 128, 512), "seed": 512},
}

# C8 and C8-f32 over 64 Mi elements, and f32 NCHW -> bf16 NHWC at C = 64 and C = 3: the
# sizes of bench/ampfuse_bench.cpp (BM_C8_Fused, BM_CastTranspose).
KERNEL_ELEMENTS = 64 << 20
CAST_SHAPES = {64: (64, 64, 128, 128), 3: (64, 3, 512, 682)}

# Largest |out - ref| relative to the largest |ref|: f32 peers must agree with MXNet's
# unfused f32 to rounding; bf16 peers (8-bit mantissa, errors growing with depth) to 5 %.
TOLERANCE = {"f32": 1e-4, "bf16": 5e-2}


def check(out, ref, dtype):
    """(passed, relative error) of one output against the reference."""
    out = np.asarray(out, dtype=np.float32)
    ref = np.asarray(ref, dtype=np.float32)
    if out.shape != ref.shape:
        if out.size != ref.size:
            return False, float("inf")
        out = out.reshape(ref.shape)
    if not np.all(np.isfinite(out)):
        return False, float("inf")
    scale = float(np.abs(ref).max()) or 1.0
    err = float(np.abs(out.astype(np.float64) - ref).max()) / scale
    return err <= TOLERANCE[dtype], err


WARMUP_S = 2.0  # and untimed runs for at least this long (at most 200 of them)


def timed(fn):
    """Median milliseconds of REPEAT calls of fn after at least WARMUP untimed ones and
    WARMUP_S seconds of them. fn must wait for its result (block_until_ready, wait_to_read):
    every peer is timed to completion. The seconds: after torch.compile, calls stayed
    10-200x slower for up to ~2 s here (its compile workers still busy on the 2 cores), and
    5 calls of a 1 ms model are not enough."""
    import statistics
    import time
    start, n = time.perf_counter(), 0
    while n < WARMUP or (time.perf_counter() - start < WARMUP_S and n < 200):
        fn()
        n += 1
    ts = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
