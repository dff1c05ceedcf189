#!/usr/bin/env python3
"""The torch and JAX side of the peer harness (bench/peers/run.py drives it; it runs in the
torch virtual environment).

  models WORK THREADS OUT.json NAMES DTYPES  torch eager and torch.compile (inductor, with
                           freezing: the weights become constants) of each model through
                           mx2torch (the MXNet graph with MXNet's weights), f32 and bf16.
                           bf16 casts the module's weights and the input to bfloat16 (no
                           autocast): every op runs in bf16, as ampfuse's and MXNet's AMP
                           run their convolutions and matmuls.
  kernels THREADS OUT.json  C8, C8-f32 and cast + transpose: torch eager, torch.compile
                           (writing into a preallocated output with copy_), and torch's own
                           copy of the same bytes (Tensor.copy_ of uint8).
  jax THREADS OUT.json      the same kernels through jax.jit with the output buffer
                           donated (XLA writes into it), and jax's copy of the same bytes.
Every peer's output is checked (common.check) before it is timed; one that fails is not timed.
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CAST_SHAPES, KERNEL_ELEMENTS, check, timed  # noqa: E402


def error_of(e):
    # torch's compile errors end in advice lines ("Set TORCHDYNAMO_VERBOSE=1 ..."); the
    # cause is the last line before them.
    lines = [l.strip() for l in str(e).split("\n") if l.strip() and not l.strip().startswith(
        ("Set TORCH", "You can suppress", "import torch._dynamo", "torch._dynamo.config"))]
    return (lines[-1] if lines else type(e).__name__)[:160]


def models(work, threads, out_path, names, dtypes):
    import torch
    import torch._dynamo
    import torch._inductor.config
    import mx2torch
    torch.set_num_threads(threads)
    torch._inductor.config.freezing = True
    res = {}
    for name in names:
        d = os.path.join(work, name)
        ref = np.load(os.path.join(d, "ref_f32.npy"))
        data = torch.from_numpy(np.load(os.path.join(d, "data.npy")))
        for dt in dtypes:
            tdt = torch.bfloat16 if dt == "bf16" else torch.float32
            for mode in ("eager", "compile"):
                key = "%s/%s/%s" % (name, dt, mode)
                try:
                    model = mx2torch.load(os.path.join(d, "symbol.json"), os.path.join(d, "weights.npz"), ["data"])
                    model = model.to(tdt)
                    x = data.to(tdt)
                    if mode == "compile":
                        torch._dynamo.reset()
                        # dynamic=False: with symbolic shapes, freezing's layout pass fails
                        # on squeezenet (torch 2.15: sym_max of None in enforce_output_layout).
                        model = torch.compile(model, dynamic=False)
                    with torch.no_grad():
                        t = time.perf_counter()
                        out = model(x)
                        first = (time.perf_counter() - t) * 1e3
                        ok, err = check(out.float().numpy(), ref, dt)
                        r = {"ok": ok, "err": err, "first_ms": first}
                        if ok:
                            r["ms"] = timed(lambda: model(x))
                except Exception as e:
                    r = {"ok": False, "error": error_of(e)}
                res[key] = r
                print("[torch] %s %s" % (key, r), flush=True)
                json.dump(res, open(out_path, "w"), indent=1)


def c8_ref(x, y):
    return np.maximum(x * y + 0.5, 0) * 1.5 - x


def kernels(threads, out_path):
    import torch
    torch.set_num_threads(threads)
    res = {}
    gen = torch.Generator().manual_seed(1)

    def c8(x, y, out):
        a, b = x.float(), y.float()
        out.copy_(torch.relu(a * b + 0.5) * 1.5 - a)

    def cast(x, out):
        out.copy_(x.permute(0, 2, 3, 1))  # copy_ converts f32 -> bf16 (round to nearest even)

    def memcpy_ms(nbytes):
        # float32 elements, as for MXNet and JAX (whose uint8 copies are slower loops).
        src = torch.rand(nbytes // 4, generator=gen)
        dst = torch.empty_like(src)
        return timed(lambda: dst.copy_(src))

    compiled_c8, compiled_cast = torch.compile(c8, dynamic=False), torch.compile(cast, dynamic=False)
    for dt in ("bf16", "f32"):
        tdt = torch.bfloat16 if dt == "bf16" else torch.float32
        n = KERNEL_ELEMENTS
        x = (torch.rand(n, generator=gen) * 2 - 1).to(tdt)
        y = (torch.rand(n, generator=gen) * 2 - 1).to(tdt)
        out = torch.empty(n, dtype=tdt)
        ref = c8_ref(x.float().numpy(), y.float().numpy())
        base = memcpy_ms(n * (3 if dt == "bf16" else 6))
        for mode, fn in (("eager", c8), ("compile", compiled_c8)):
            key = "c8_%s/%s" % (dt, mode)
            try:
                out.zero_()
                fn(x, y, out)
                ok, err = check(out.float().numpy(), ref, dt)
                r = {"ok": ok, "err": err, "memcpy_ms": base}
                if ok:
                    r["ms"] = timed(lambda: fn(x, y, out))
            except Exception as e:
                r = {"ok": False, "error": error_of(e)}
            res[key] = r
            print("[torch kernels] %s %s" % (key, r), flush=True)
        del x, y, out, ref
    for c, shape in CAST_SHAPES.items():
        x = torch.rand(shape, generator=gen) * 2 - 1
        out = torch.empty((shape[0], shape[2], shape[3], shape[1]), dtype=torch.bfloat16)
        ref = x.permute(0, 2, 3, 1).numpy()
        base = memcpy_ms(x.numel() * 3)
        for mode, fn in (("eager", cast), ("compile", compiled_cast)):
            key = "cast_c%d/%s" % (c, mode)
            try:
                out.zero_()
                fn(x, out)
                ok, err = check(out.float().numpy(), ref, "bf16")
                r = {"ok": ok, "err": err, "memcpy_ms": base}
                if ok:
                    r["ms"] = timed(lambda: fn(x, out))
            except Exception as e:
                r = {"ok": False, "error": error_of(e)}
            res[key] = r
            print("[torch kernels] %s %s" % (key, r), flush=True)
        del x, out, ref
    json.dump(res, open(out_path, "w"), indent=1)


def jax_kernels(threads, out_path):
    # XLA's CPU client runs one thread per CPU it may use; restricting the process to
    # `threads` CPUs is what makes its thread count equal the others' on a larger machine.
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > threads:
        os.sched_setaffinity(0, cpus[:threads])
    import jax
    import jax.numpy as jnp
    res = {"_cpus": len(os.sched_getaffinity(0))}
    rng = np.random.RandomState(1)

    def memcpy_ms(nbytes):
        src = jnp.asarray(rng.uniform(-1, 1, nbytes // 4).astype(np.float32))
        box = [jnp.zeros(nbytes // 4, jnp.float32)]
        copy = jax.jit(lambda s, d: jnp.copy(s), donate_argnums=1, keep_unused=True)

        def run():
            box[0] = copy(src, box[0])
            box[0].block_until_ready()
        return timed(run)

    def c8(x, y, out):
        a, b = x.astype(jnp.float32), y.astype(jnp.float32)
        return (jnp.maximum(a * b + 0.5, 0) * 1.5 - a).astype(out.dtype)

    def cast(x, out):
        return jnp.transpose(x, (0, 2, 3, 1)).astype(jnp.bfloat16)

    # keep_unused=True: jit otherwise drops the unread output argument, and with it the
    # donation; every call then allocates (and page-faults) a new output, 3-6x slower here.
    c8_jit = jax.jit(c8, donate_argnums=2, keep_unused=True)
    cast_jit = jax.jit(cast, donate_argnums=1, keep_unused=True)
    for dt in ("bf16", "f32"):
        jdt = jnp.bfloat16 if dt == "bf16" else jnp.float32
        n = KERNEL_ELEMENTS
        x = jnp.asarray(rng.uniform(-1, 1, n).astype(np.float32)).astype(jdt)
        y = jnp.asarray(rng.uniform(-1, 1, n).astype(np.float32)).astype(jdt)
        box = [jnp.zeros(n, jdt)]
        key = "c8_%s/jax" % dt
        try:
            def run():
                box[0] = c8_jit(x, y, box[0])
                box[0].block_until_ready()
            run()
            ref = c8_ref(np.asarray(x.astype(jnp.float32)), np.asarray(y.astype(jnp.float32)))
            ok, err = check(np.asarray(box[0].astype(jnp.float32)), ref, dt)
            r = {"ok": ok, "err": err, "memcpy_ms": memcpy_ms(n * (3 if dt == "bf16" else 6))}
            if ok:
                r["ms"] = timed(run)
            del ref
        except Exception as e:
            r = {"ok": False, "error": error_of(e)}
        res[key] = r
        print("[jax kernels] %s %s" % (key, r), flush=True)
        del x, y, box
    for c, shape in CAST_SHAPES.items():
        key = "cast_c%d/jax" % c
        x_np = rng.uniform(-1, 1, shape).astype(np.float32)
        x = jnp.asarray(x_np)
        box = [jnp.zeros((shape[0], shape[2], shape[3], shape[1]), jnp.bfloat16)]
        try:
            def run():
                box[0] = cast_jit(x, box[0])
                box[0].block_until_ready()
            run()
            ok, err = check(np.asarray(box[0].astype(jnp.float32)), x_np.transpose(0, 2, 3, 1), "bf16")
            r = {"ok": ok, "err": err, "memcpy_ms": memcpy_ms(x_np.size * 3)}
            if ok:
                r["ms"] = timed(run)
        except Exception as e:
            r = {"ok": False, "error": error_of(e)}
        res[key] = r
        print("[jax kernels] %s %s" % (key, r), flush=True)
        del x, x_np, box
    json.dump(res, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "models":
        models(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5].split(","), sys.argv[6].split(","))
    elif cmd == "kernels":
        kernels(int(sys.argv[2]), sys.argv[3])
    elif cmd == "jax":
        jax_kernels(int(sys.argv[2]), sys.argv[3])
    else:
        raise SystemExit("torch_worker.py: unknown command '%s'" % cmd)
