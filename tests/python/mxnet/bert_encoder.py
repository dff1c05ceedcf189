"""A BERT-style Transformer encoder in Gluon (the layers of GluonNLP's BERTEncoder: token,
segment and position embeddings, multi-head self-attention with a valid-length mask,
GELU feed-forward, post-LayerNorm) written with Gluon's own layers, and GluonNLP's BERT
itself (gluonnlp_bert), whose attention is MXNet's fused contrib ops."""

import math

import mxnet as mx
from mxnet.gluon import nn


class SelfAttention(nn.HybridBlock):
    def __init__(self, units, heads, **kwargs):
        super().__init__(**kwargs)
        self._units, self._heads = units, heads
        with self.name_scope():
            self.qkv = nn.Dense(3 * units, flatten=False, prefix="qkv_")
            self.proj = nn.Dense(units, flatten=False, prefix="proj_")

    def hybrid_forward(self, F, x, mask):
        # x: (N, T, C); mask: (N, T, T), 1 where a query may attend a key.
        h, d = self._heads, self._units // self._heads
        qkv = self.qkv(x).reshape((0, 0, 3, h, d))                # N, T, 3, H, D
        qkv = F.transpose(qkv, axes=(2, 0, 3, 1, 4))             # 3, N, H, T, D
        q, k, v = F.split(qkv, num_outputs=3, axis=0, squeeze_axis=True)
        q = q.reshape((-3, 0, 0)) * (1.0 / math.sqrt(d))         # N*H, T, D
        k = k.reshape((-3, 0, 0))
        v = v.reshape((-3, 0, 0))
        scores = F.batch_dot(q, k, transpose_b=True)             # N*H, T, T
        mask = F.repeat(mask.expand_dims(1), repeats=h, axis=1).reshape((-3, 0, 0))
        scores = F.where(mask, scores, F.ones_like(scores) * -1e4)
        att = F.softmax(scores, axis=-1)
        ctx = F.batch_dot(att, v).reshape((-4, -1, h, 0, 0))     # N, H, T, D
        ctx = F.transpose(ctx, axes=(0, 2, 1, 3)).reshape((0, 0, -3))
        return self.proj(ctx)


class EncoderLayer(nn.HybridBlock):
    def __init__(self, units, heads, hidden, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.attention = SelfAttention(units, heads, prefix="att_")
            self.ln1 = nn.LayerNorm(in_channels=units, prefix="ln1_")
            self.ffn1 = nn.Dense(hidden, flatten=False, prefix="ffn1_")
            self.ffn2 = nn.Dense(units, flatten=False, prefix="ffn2_")
            self.ln2 = nn.LayerNorm(in_channels=units, prefix="ln2_")

    def hybrid_forward(self, F, x, mask):
        x = self.ln1(x + self.attention(x, mask))
        h = F.LeakyReLU(self.ffn1(x), act_type="gelu")
        return self.ln2(x + self.ffn2(h))


class BertEncoder(nn.HybridBlock):
    """(tokens (N, T) float ids, segments (N, T), valid_length (N,)) -> (N, T, units)."""

    def __init__(self, vocab=1000, units=128, heads=4, hidden=512, layers=2, max_length=64, **kwargs):
        super().__init__(**kwargs)
        self._max_length = max_length
        with self.name_scope():
            self.word_embed = nn.Embedding(vocab, units, prefix="word_embed_")
            self.token_type_embed = nn.Embedding(2, units, prefix="token_type_embed_")
            self.position_weight = self.params.get("position_weight", shape=(max_length, units))
            self.embed_ln = nn.LayerNorm(in_channels=units, prefix="embed_ln_")
            self.layers = nn.HybridSequential(prefix="layers_")
            with self.layers.name_scope():
                for i in range(layers):
                    self.layers.add(EncoderLayer(units, heads, hidden, prefix="layer%d_" % i))

    def hybrid_forward(self, F, tokens, segments, valid_length, position_weight):
        x = self.word_embed(tokens) + self.token_type_embed(segments)
        pos = F.slice_like(position_weight, tokens.transpose(), axes=(0,))  # T, C
        x = self.embed_ln(F.broadcast_add(x, pos.expand_dims(0)))
        steps = F.contrib.arange_like(tokens, axis=1)                       # T
        valid = F.broadcast_lesser(steps.reshape((1, -1)), valid_length.reshape((-1, 1)))  # N, T
        mask = F.broadcast_mul(valid.expand_dims(2), valid.expand_dims(1))  # N, T, T
        for layer in self.layers:
            x = layer(x, mask)
        return x


def gluonnlp_bert():
    """GluonNLP 0.10's BERTModel (a small one: 2 layers, 128 units, 4 heads) with its pooler.
    Its attention core (_contrib_interleaved_matmul_selfatt_qk / _valatt and the softmax
    with a valid length) is not in ampfuse's registry: MXNet runs it between ampfuse's
    regions (the embeddings, projections, feed-forward and LayerNorms)."""
    import gluonnlp
    encoder = gluonnlp.model.BERTEncoder(num_layers=2, units=128, hidden_size=512, num_heads=4, max_length=64,
                                         output_attention=False, output_all_encodings=False)
    return gluonnlp.model.BERTModel(encoder, vocab_size=1000, token_type_vocab_size=2, units=128, embed_size=128,
                                    use_pooler=True, use_decoder=False, use_classifier=False)
