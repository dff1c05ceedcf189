"""Writes models/digits/digits_{mlp,cnn}-symbol.json with MXNet 1.9.1's symbol API.

The two classifiers `ampfuse train` and tests/trainer_test.cpp train on data/digits/ (8x8
images, pixel counts 0..16, scaled to [0, 1] inside the graph). Run once, on demand:
    python -m venv v && v/bin/pip install mxnet==1.9.1 'numpy<1.24'
    v/bin/python scripts/make_digits_models.py
"""
import os

import mxnet as mx


def scaled_data():
    return mx.sym.var('data') * (1 / 16.0)


def mlp():
    x = mx.sym.Flatten(scaled_data(), name='flatten')
    x = mx.sym.FullyConnected(x, num_hidden=128, name='fc1')
    x = mx.sym.Activation(x, act_type='relu', name='relu1')
    x = mx.sym.FullyConnected(x, num_hidden=10, name='fc2')
    return mx.sym.SoftmaxOutput(x, name='softmax')


def cnn():
    x = mx.sym.Convolution(scaled_data(), num_filter=16, kernel=(3, 3), pad=(1, 1), name='conv1')
    x = mx.sym.BatchNorm(x, fix_gamma=False, name='bn1')
    x = mx.sym.Activation(x, act_type='relu', name='relu1')
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type='max', name='pool1')
    x = mx.sym.Convolution(x, num_filter=32, kernel=(3, 3), pad=(1, 1), name='conv2')
    x = mx.sym.Activation(x, act_type='relu', name='relu2')
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type='max', name='pool2')
    x = mx.sym.Flatten(x, name='flatten')
    x = mx.sym.FullyConnected(x, num_hidden=10, name='fc')
    return mx.sym.SoftmaxOutput(x, name='softmax')


if __name__ == '__main__':
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'models', 'digits')
    os.makedirs(out, exist_ok=True)
    for name, sym in [('digits_mlp', mlp()), ('digits_cnn', cnn())]:
        sym.save(os.path.join(out, name + '-symbol.json'))
