"""Writes models/bench/transformer_encoder_layer-symbol.json with MXNet 1.9.1's symbol API.

One post-norm Transformer encoder layer (BERT's: self-attention with 4 heads, residual,
LayerNorm, a GELU feed-forward of 4x the width, residual, LayerNorm) over data of shape
(batch, 64 tokens, 256), then a mean over the tokens and a SoftmaxOutput over 10 classes,
so that `ampfuse train` and bench/train_step_bench.cpp can train it. Run on demand:
    python -m venv v && v/bin/pip install mxnet==1.9.1 'numpy<1.24'
    v/bin/python scripts/make_transformer_layer.py
"""
import math
import os

import mxnet as mx

TOKENS, WIDTH, HEADS, CLASSES = 64, 256, 4, 10


def encoder_layer(x):
    head = WIDTH // HEADS

    def split_heads(t, name):  # (B, T, W) -> (B * H, T, W / H)
        t = mx.sym.reshape(t, shape=(0, 0, HEADS, head), name=name + '_split')
        t = mx.sym.transpose(t, axes=(0, 2, 1, 3), name=name + '_heads')
        return mx.sym.reshape(t, shape=(-3, 0, 0), name=name + '_merge')

    q = split_heads(mx.sym.FullyConnected(x, num_hidden=WIDTH, flatten=False, name='query'), 'q')
    k = split_heads(mx.sym.FullyConnected(x, num_hidden=WIDTH, flatten=False, name='key'), 'k')
    v = split_heads(mx.sym.FullyConnected(x, num_hidden=WIDTH, flatten=False, name='value'), 'v')
    scores = mx.sym.batch_dot(q, k, transpose_b=True, name='scores') * (1 / math.sqrt(head))
    attention = mx.sym.softmax(scores, axis=-1, name='attention')
    context = mx.sym.batch_dot(attention, v, name='context')  # (B * H, T, W / H)
    context = mx.sym.reshape(context, shape=(-4, -1, HEADS, 0, 0), name='context_split')
    context = mx.sym.transpose(context, axes=(0, 2, 1, 3), name='context_tokens')
    context = mx.sym.reshape(context, shape=(0, 0, -3), name='context_merge')
    projected = mx.sym.FullyConnected(context, num_hidden=WIDTH, flatten=False, name='proj')
    x = mx.sym.LayerNorm(x + projected, axis=-1, name='attention_norm')
    hidden = mx.sym.FullyConnected(x, num_hidden=4 * WIDTH, flatten=False, name='ffn1')
    hidden = mx.sym.LeakyReLU(hidden, act_type='gelu', name='gelu')
    out = mx.sym.FullyConnected(hidden, num_hidden=WIDTH, flatten=False, name='ffn2')
    return mx.sym.LayerNorm(x + out, axis=-1, name='ffn_norm')


def classifier():
    x = encoder_layer(mx.sym.var('data'))
    pooled = mx.sym.mean(x, axis=1, name='pool')
    logits = mx.sym.FullyConnected(pooled, num_hidden=CLASSES, name='classes')
    return mx.sym.SoftmaxOutput(logits, name='softmax')


if __name__ == '__main__':
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'models', 'bench')
    os.makedirs(out, exist_ok=True)
    sym = classifier()
    sym.infer_shape(data=(32, TOKENS, WIDTH))
    sym.save(os.path.join(out, 'transformer_encoder_layer-symbol.json'))
