"""Writes MXNet's default AMP op lists, per target, as tests/data/mxnet_amp_lists.txt.

The file is test data: tests/amp_lists_test.cpp checks every registered op's AMP classes
against it. Regenerate it with the real MXNet (1.9.1):

    MXNET_SUBGRAPH_BACKEND=NONE /work/venv-mx/bin/python tests/mxnet/dump_amp_lists.py \
        > tests/data/mxnet_amp_lists.txt

Lines (one op a line, sorted; `#` starts a comment):
    <target> <class> <op>                   class: lowp fp32 neutral widest
    <target> cond_fp32 <op> <attr> <v1,v2>  runs in f32 when attr is one of the values
    <target> fp32_params <op> <slot,...>    input slots kept in f32 when the op runs low
target: fp16 or bf16. `neutral` is MXNet's *_FP32_FUNCS list ("can run in both"): MXNet's
pass leaves these ops' inputs as they are, as it does for an op no list names.
"""
import os
os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
import mxnet as mx
from mxnet.contrib.amp.lists import symbol_bf16, symbol_fp16

TARGETS = (("fp16", symbol_fp16, "FP16_FUNCS", "FP16_FP32_FUNCS", "FP16_USE_FP32_PARAMS"),
           ("bf16", symbol_bf16, "BF16_FUNCS", "BF16_FP32_FUNCS", "BF16_USE_FP32_PARAMS"))


def main():
    print("# MXNet %s default AMP lists (mxnet/contrib/amp/lists/symbol_fp16.py, symbol_bf16.py)" %
          mx.__version__)
    print("# written by tests/mxnet/dump_amp_lists.py")
    for target, mod, low, neutral, params in TARGETS:
        classes = {}
        # The order of MXNet's ReducePrecision checks: fp32 first, then the target list,
        # widest, conditional; anything else keeps its inputs (neutral).
        for cls, ops in (("fp32", mod.FP32_FUNCS), ("lowp", getattr(mod, low)),
                         ("widest", mod.WIDEST_TYPE_CASTS), ("neutral", getattr(mod, neutral))):
            for op in ops:
                classes.setdefault(op, cls)
        conds = {op: (attr, values) for op, attr, values in mod.CONDITIONAL_FP32_FUNCS}
        for op in sorted(classes):
            if op not in conds:
                print("%s %s %s" % (target, classes[op], op))
        for op in sorted(conds):
            attr, values = conds[op]
            print("%s cond_fp32 %s %s %s" % (target, op, attr, ",".join(values)))
        for op, slots in sorted(getattr(mod, params, {}).items()):
            # MXNet's list starts with "" for the data input, which is never kept.
            print("%s fp32_params %s %s" % (target, op, ",".join(s for s in slots if s)))


if __name__ == "__main__":
    main()
