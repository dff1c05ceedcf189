"""Compares ampfuse's gradients with MXNet 1.9.1's autograd on the shared models.

Run on demand from the repository root once build/ampfuse exists, with a Python that has
MXNet 1.9 (not needed by the build or the tests):

    MXNET_SUBGRAPH_BACKEND=NONE /work/venv-mx/bin/python scripts/check_gradients_with_mxnet.py \
        [--ampfuse build/ampfuse] [--train] [MODEL ...]

(MXNET_SUBGRAPH_BACKEND=NONE: MXNet's default oneDNN subgraph fusion gives wrong results on
cifar_resnet20_v2.) For each model (default: the small shared ones) it draws seeded
weights and inputs, writes them as MODEL.params and .npy, and computes the gradient of
every weight twice:
  - MXNet: mx.sym.load, simple_bind with grad_req='write', forward(is_train=T) and
    backward() with head gradients of ones (loss heads give their own);
  - ampfuse: `ampfuse run MODEL --params ... --inputs ... --backward [--training]
    --save-gradients DIR`.
is_train (--train) picks batch statistics in BatchNorm on both sides (ampfuse's --training);
without it both use the moving statistics. Prints one row per model: the largest
|difference| of any weight's gradient relative to the model's largest |gradient| element,
and the weight where it is; exit status 1 when one exceeds 1e-4.

Variables that only feed index slots (labels, token ids; INDEX_SLOTS) are inputs holding
class ids, whatever their names, and have no gradient in ampfuse: they are skipped.
--include-index-inputs compares them too, MXNet's gradient against zeros.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import mxnet as mx
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    'mlp_legacy_000800-test-symbol.json': {'data': (4, 32)},
    'cifar_resnet20_v2-gluoncv-symbol.json': {'data': (2, 3, 32, 32)},
    'squeezenet_v1.1-mms-legacy-symbol.json': {'data': (1, 3, 64, 64)},
    'vgg_small-mkldnn-test-symbol.json': {'data': (2, 3, 32, 32)},
    'lstm_ptb_fusedrnn-mms-symbol.json': {'data': (5, 2), 'softmax_label': (10,)},
}


# The input slots ampfuse reads as positions (InputSlot::index in ir/ops/), by MXNet op name.
INDEX_SLOTS = {'SoftmaxOutput': {1}, 'Softmax': {1}, 'Embedding': {0}, 'take': {1}, 'pick': {1}, 'gather_nd': {1},
               'one_hot': {0}, 'SequenceMask': {1}, 'SequenceLast': {1}, 'SequenceReverse': {1}}


def index_only_variables(sym):
    """Variable name -> the largest class id + 1 its readers accept (10 unless an Embedding's
    input_dim or a one_hot's depth is smaller), for the variables read only in index slots."""
    nodes = json.loads(sym.tojson())['nodes']
    readers = {}
    for node in nodes:
        for slot, (src, *_) in enumerate(node.get('inputs', [])):
            if nodes[src]['op'] == 'null':
                readers.setdefault(src, []).append((node, slot))
    bounds = {}
    for src, uses in readers.items():
        if all(slot in INDEX_SLOTS.get(node['op'], ()) for node, slot in uses):
            limits = [int(node.get('attrs', {}).get(k, 10)) for node, _ in uses for k in ('input_dim', 'depth')]
            bounds[nodes[src]['name']] = min([10] + limits)
    return bounds


def seeded_values(sym, shapes, rng):
    """Weights scaled by fan-in, BatchNorm variances in [0.5, 1.5), labels and token ids as
    class ids."""
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    index_only = index_only_variables(sym)
    args, aux, inputs = {}, {}, {}
    for name, shape in zip(sym.list_arguments(), arg_shapes):
        if name in index_only:
            inputs[name] = rng.integers(0, index_only[name], shape).astype(np.float32)
        elif name in shapes:
            inputs[name] = rng.uniform(-1, 1, shape).astype(np.float32)
        elif name.endswith('label'):
            inputs[name] = rng.integers(0, 10, shape).astype(np.float32)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            args[name] = (rng.uniform(-1, 1, shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)
    for name, shape in zip(sym.list_auxiliary_states(), aux_shapes):
        aux[name] = (rng.uniform(0.5, 1.5, shape) if 'var' in name else rng.uniform(-0.1, 0.1, shape)).astype(np.float32)
    return args, aux, inputs


def mxnet_gradients(sym, args, aux, inputs, train, also):
    """The gradients of the weights and of the variables named in `also`."""
    shapes = {k: v.shape for k, v in inputs.items()}
    req = {n: ('write' if n in args or n in also else 'null') for n in sym.list_arguments()}
    exe = sym.simple_bind(mx.cpu(), grad_req=req, **shapes)
    exe.copy_params_from({k: mx.nd.array(v) for k, v in args.items()}, {k: mx.nd.array(v) for k, v in aux.items()})
    outs = exe.forward(is_train=train, **{k: mx.nd.array(v) for k, v in inputs.items()})
    losses = {'SoftmaxOutput', 'LinearRegressionOutput', 'LogisticRegressionOutput', 'MAERegressionOutput', 'MakeLoss'}
    graph = json.loads(sym.tojson())
    is_loss = all(graph['nodes'][h[0]]['op'] in losses for h in graph['heads'])
    # backward's own is_train defaults to True, which would differentiate BatchNorm with
    # batch statistics after a forward that used the moving ones.
    exe.backward(None if is_loss else [mx.nd.ones(o.shape) for o in outs], is_train=train)
    return {k: exe.grad_dict[k].asnumpy() for k in list(args) + list(also)}


def ampfuse_gradients(binary, model, params_file, inputs, train, tmp):
    cmd = [binary, 'run', model, '--params', params_file, '--backward', '--save-gradients', os.path.join(tmp, 'g'),
           '--no-baseline', '--repeat', '1']
    for name, value in inputs.items():
        path = os.path.join(tmp, name + '.npy')
        np.save(path, value)
        cmd += ['--inputs', f'{name}={path}']
    if train:
        cmd.append('--training')
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr.strip())
    return {f[:-4]: np.load(os.path.join(tmp, 'g', f)) for f in os.listdir(os.path.join(tmp, 'g'))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--ampfuse', default=os.path.join(ROOT, 'build', 'ampfuse'))
    ap.add_argument('--train', action='store_true')
    ap.add_argument('--include-index-inputs', action='store_true',
                    help='also compare the variables read only as positions (labels, token ids): '
                         "MXNet's gradient against ampfuse's none (zeros)")
    ap.add_argument('models', nargs='*', default=list(MODELS))
    a = ap.parse_args()
    failed = False
    print(f'{"model":42} {"is_train":8} {"weights":>7} {"worst rel. error":>16}  where')
    for name in a.models:
        shapes = MODELS[name]
        sym = mx.sym.load(os.path.join(ROOT, 'models', name))
        args, aux, inputs = seeded_values(sym, shapes, np.random.default_rng(7))
        with tempfile.TemporaryDirectory() as tmp:
            params_file = os.path.join(tmp, 'model.params')
            mx.nd.save(params_file, {**{'arg:' + k: mx.nd.array(v) for k, v in args.items()},
                                     **{'aux:' + k: mx.nd.array(v) for k, v in aux.items()}})
            try:
                ours = ampfuse_gradients(a.ampfuse, os.path.join(ROOT, 'models', name), params_file, inputs, a.train, tmp)
            except RuntimeError as e:
                print(f'{name:42} {str(a.train):8} ampfuse failed: {e}')
                failed = True
                continue
        index_inputs = list(index_only_variables(sym)) if a.include_index_inputs else []
        theirs = mxnet_gradients(sym, args, aux, inputs, a.train, index_inputs)
        ours.update({k: np.zeros_like(theirs[k]) for k in index_inputs})
        # Relative to the largest gradient element of the whole model: a weight whose
        # gradient cancels to ~0 (a bias before batch-statistics BatchNorm) has no scale.
        largest = max(np.abs(w).max() for w in theirs.values())
        worst, where = 0.0, ''
        for k, want in theirs.items():
            got = ours.get(k)
            if got is None:
                worst, where = float('inf'), k + ' (missing)'
                break
            err = np.abs(got.astype(np.float64) - want).max() / max(largest, 1e-30)
            if err > worst:
                worst, where = err, k
        failed |= worst > 1e-4
        print(f'{name:42} {str(a.train):8} {len(theirs):7} {worst:16.3g}  {where}')
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
