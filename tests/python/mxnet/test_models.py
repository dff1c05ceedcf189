"""GluonCV networks, GluonNLP's BERT and a BERT-style encoder of our own with random weights:
the ampfuse backend gives MXNet's outputs (MXNet alone, MXNET_SUBGRAPH_BACKEND=NONE), within
1e-5 relative in f32 and bf16's tolerance with AMP. Batch 1, small inputs: the whole file
stays within the CI budget."""

import mxnet as mx
import numpy as np
import pytest

from bert_encoder import BertEncoder, gluonnlp_bert
from conftest import ampfuse_subgraphs, initialize, outputs, relative_error
from test_backend import BF16_TOLERANCE, F32_TOLERANCE

gluoncv = pytest.importorskip("gluoncv")


def bert_inputs():
    rng = np.random.RandomState(1)
    tokens = mx.nd.array(rng.randint(0, 1000, (1, 32)))
    segments = mx.nd.array(rng.randint(0, 2, (1, 32)))
    return [tokens, segments, mx.nd.array([27])]


MODELS = {
    "resnet50_v1b": (lambda: gluoncv.model_zoo.get_model("resnet50_v1b", pretrained=False),
                     lambda: [mx.nd.random.uniform(-1, 1, (1, 3, 224, 224))]),
    "mobilenetv3_large": (lambda: gluoncv.model_zoo.get_model("mobilenetv3_large", pretrained=False),
                          lambda: [mx.nd.random.uniform(-1, 1, (1, 3, 224, 224))]),
    "yolo3_mobilenet1.0_voc": (lambda: gluoncv.model_zoo.get_model("yolo3_mobilenet1.0_voc", pretrained=False,
                                                                   pretrained_base=False),
                               lambda: [mx.nd.random.uniform(-1, 1, (1, 3, 224, 224))]),
    "bert_encoder": (BertEncoder, bert_inputs),
    "gluonnlp_bert": (gluonnlp_bert, bert_inputs),
}


def run(name, backend_options):
    make, make_inputs = MODELS[name]
    mx.random.seed(0)
    inputs = make_inputs()
    net = make()
    initialize(net)
    if backend_options is None:
        net.hybridize()
    else:
        net.optimize_for(*inputs, backend="ampfuse", **backend_options)
    return net, outputs(net(*inputs))


def bf16_comparable(name, outs):
    """What of a model's outputs bf16 can be held to. A detector's outputs after
    non-maximum suppression are a selection and an order: a rounding difference between two
    close scores swaps detections, and ids and boxes then differ wholesale; a score near
    the threshold adds or drops a detection at the end of the list. Its ten best scores,
    sorted, still say whether the network computed the same thing."""
    if name.startswith("yolo3"):
        return [np.sort(outs[1].ravel())[::-1][:10]]
    return outs


@pytest.mark.parametrize("name", list(MODELS))
def test_f32_and_bf16_match_mxnet(name):
    _, want = run(name, None)
    net, got = run(name, {"amp": "off"})
    assert ampfuse_subgraphs(net) >= 1
    assert relative_error(got, want) <= F32_TOLERANCE
    net, got = run(name, {"amp": "bf16"})
    err = relative_error(bf16_comparable(name, got), bf16_comparable(name, want))
    assert err <= BF16_TOLERANCE
    assert err > 1e-6, "the AMP run gave f32's results"
