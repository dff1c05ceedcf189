"""Checks with the real MXNet that the .params files ampfuse writes load and run there.

Run on demand from the repository root once build/ampfuse exists, with a Python that has
MXNet 1.9 (not needed by the build or the tests):

    MXNET_SUBGRAPH_BACKEND=NONE /work/venv-mx/bin/python scripts/check_params_with_mxnet.py [build/ampfuse]

For the Gluon MLP of tests/data/params (mlp-symbol.json, mlp-0000.params) and a Gluon
ResNet-18 exported on the spot, for each target (bfloat16, float16), with and without
--cast-params-offline, it runs

    ampfuse convert MODEL-symbol.json --shape data=1,... --amp T [--cast-params-offline] \
        --params MODEL-0000.params --params-out OUT.params -o OUT-symbol.json

(a batch of 1, while MXNet then runs a batch of 2 or 3) and checks that
  1. mx.nd.load reads OUT.params: the same names, in the same order, as the input file;
  2. the weights stored in low precision are the ones MXNet's own
     amp.convert_model(..., cast_optional_params=C) stores so, with the same names and dtypes,
     and every array equals the f32 weight cast to its dtype (bf16 compared after widening,
     within one bf16 rounding: MXNet's cast flushes subnormals, ampfuse's keeps them);
  3. the pair runs in MXNet: mx.sym.load + mx.nd.load + simple_bind and forward on the
     fixture's input, and gives the f32 model's output within the target's tolerance
     (float16: bound only, as MXNet 1.9.1 runs float16 FullyConnected and Convolution on
     GPUs alone);
  4. no input of OUT-symbol.json carries a __shape__ hint (the batch is not baked in; its
     __dtype__ hint lets simple_bind type it without a type_dict), and
     `convert --shape data=7,5` writes no (7, 5) anywhere.
The writer's other half, every dtype and version written byte for byte as MXNet writes it, is
checked without MXNet by the C++ tests (MxnetParams.WritesTheBytesMxnetWrote). Prints one line
per check; exit status 1 on a failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import mxnet as mx
import numpy as np
from mxnet.contrib import amp
from mxnet.gluon.model_zoo import vision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, 'tests', 'data', 'params')
AMPFUSE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, 'build', 'ampfuse')
BF16 = np.dtype([('bfloat16', np.uint16)])
failures = []


def check(ok, what):
    print(('ok    ' if ok else 'FAIL  ') + what)
    if not ok:
        failures.append(what)


def as_f32(a):
    return (a.astype('float32') if a.dtype == BF16 else a.astype('float32')).asnumpy()


def run_in_mxnet(sym, params, x):
    args = {k[4:]: v for k, v in params.items() if k.startswith('arg:')}
    aux = {k[4:]: v for k, v in params.items() if k.startswith('aux:')}
    exe = sym.simple_bind(mx.cpu(), grad_req='null', data=x.shape)
    exe.copy_params_from(args, aux)
    return exe.forward(is_train=False, data=mx.nd.array(x))[0].asnumpy().astype(np.float32)


def check_model(name, sym_file, params_file, x, want, tmp):
    """The checks 1-4 above for one exported model, its input `x` and MXNet's f32 output `want`."""
    original = mx.nd.load(params_file)
    shape = 'data=' + ','.join(str(d) for d in (1,) + x.shape[1:])  # a batch other than x's
    for target, flag in (('bfloat16', 'bf16'), ('float16', 'fp16')):
        for offline in (False, True):
            tag = f'{name} {target}{" offline" if offline else ""}'
            out_json = os.path.join(tmp, f'{name}-{flag}{offline}-symbol.json')
            out_params = os.path.join(tmp, f'{name}-{flag}{offline}.params')
            cmd = [AMPFUSE, 'convert', sym_file, '--shape', shape, '--amp', flag, '--params', params_file,
                   '--params-out', out_params, '-o', out_json] + (['--cast-params-offline'] if offline else [])
            r = subprocess.run(cmd, capture_output=True, text=True)
            check(r.returncode == 0, f'{tag}: ampfuse convert ({r.stderr.strip()})')
            if r.returncode:
                continue
            written = mx.nd.load(out_params)
            check(list(written) == list(original), f'{tag}: mx.nd.load reads the names in the input order')

            # MXNet's own conversion of the same model and weights.
            sym = mx.sym.load(sym_file)
            args = {k[4:]: v for k, v in original.items() if k.startswith('arg:')}
            aux = {k[4:]: v for k, v in original.items() if k.startswith('aux:')}
            _, m_args, m_aux = amp.convert_model(sym, dict(args), dict(aux), target_dtype=target,
                                                cast_optional_params=offline)
            mx_dtypes = {**{'arg:' + k: v.dtype for k, v in m_args.items()},
                         **{'aux:' + k: v.dtype for k, v in m_aux.items()}}
            ours = {k: v.dtype for k, v in written.items()}
            lowp = sum(1 for v in ours.values() if v != np.float32)
            check(ours == mx_dtypes, f'{tag}: stored dtypes as convert_model(cast_optional_params={offline}): '
                  f'{lowp} of {len(ours)} arrays in {target}')
            close = all(np.allclose(as_f32(written[k]), as_f32(original[k].astype(written[k].dtype)
                        if written[k].dtype != BF16 else mx.nd.amp_cast(original[k], dtype=BF16)),
                        rtol=2**-8, atol=1e-30) for k in written)
            check(close, f'{tag}: every array is the f32 weight cast to its stored dtype')

            converted = mx.sym.load(out_json)
            try:
                got = run_in_mxnet(converted, written, x)
            except mx.base.MXNetError as e:
                # MXNet 1.9.1 has float16 FullyConnected and Convolution on GPUs only.
                cpu_only = target == 'float16' and ('only supported by CuDNN' in str(e) or
                                                    'FP16 gemm on cpu not implemented' in str(e))
                check(cpu_only, f'{tag}: the pair binds in MXNet (simple_bind); running it needs a GPU'
                      if cpu_only else f'{tag}: the pair runs in MXNet: {e}')
                got = None
            if got is not None:
                tol = 0.05 if target == 'bfloat16' else 0.01
                check(np.allclose(got, want, atol=tol, rtol=tol),
                      f'{tag}: the pair runs in MXNet (simple_bind), max |diff| to f32 {np.abs(got - want).max():.3g}')
            hints = [n['name'] for n in json.load(open(out_json))['nodes']
                     if n['op'] == 'null' and n['name'] == 'data' and '__shape__' in n.get('attrs', {})]
            check(not hints, f'{tag}: the input carries no __shape__ hint')


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_model('mlp', os.path.join(DATA, 'mlp-symbol.json'), os.path.join(DATA, 'mlp-0000.params'),
                    np.load(os.path.join(DATA, 'mlp_input.npy')), np.load(os.path.join(DATA, 'mlp_output.npy')), tmp)

        # A convolutional network: Gluon's ResNet-18 v1, seeded weights, BatchNorm statistics
        # from one training-mode pass, exported as HybridBlock.export writes it (45 MB).
        mx.random.seed(1)
        net = vision.resnet18_v1(classes=10)
        net.initialize(mx.init.Xavier())
        net.hybridize()
        x = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (2, 3, 64, 64)))
        with mx.autograd.record(train_mode=True):
            net(x)
        want = net(x).asnumpy()
        net.export(os.path.join(tmp, 'resnet18'))
        check_model('resnet18', os.path.join(tmp, 'resnet18-symbol.json'), os.path.join(tmp, 'resnet18-0000.params'),
                    x.asnumpy(), want, tmp)

        # The batch given to convert never reaches the file.
        out_json = os.path.join(tmp, 'shaped-symbol.json')
        r = subprocess.run([AMPFUSE, 'convert', os.path.join(DATA, 'mlp-symbol.json'), '--amp', 'bf16', '--shape',
                            'data=7,5', '-o', out_json], capture_output=True, text=True)
        check(r.returncode == 0 and '(7, 5)' not in open(out_json).read(), 'convert --shape data=7,5 writes no (7, 5)')
    print(f'{len(failures)} failures' if failures else 'all checks passed')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
