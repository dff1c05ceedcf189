#!/usr/bin/env python3
"""Writes tests/data/index_ops/mxnet_cases.json: the outputs real MXNet 1.9.1 gives for the
indexing, shape and data-movement ops of ir/ops/tensor_index.cpp on small inputs, edge cases
included. tests/index_ops_test.cpp runs each case through the ampfuse interpreter and
compares bit for bit.

Run with MXNet 1.9.1:  MXNET_SUBGRAPH_BACKEND=NONE python scripts/index_ops_cases.py
"""
import json
import os

import mxnet as mx
import numpy as np

nd = mx.nd
OUT = os.path.join(os.path.dirname(__file__), '..', 'tests', 'data', 'index_ops', 'mxnet_cases.json')


def arr(shape, dtype='float32', start=0):
    n = int(np.prod(shape))
    return nd.array(np.arange(start, start + n).reshape(shape), dtype=dtype)


def desc(x):
    return {'dtype': str(np.dtype(x.dtype)), 'shape': list(x.shape),
            'values': [float(v) for v in x.asnumpy().astype('float64').ravel()]}


cases = []


def case(name, op, inputs, **attrs):
    """One case: `op` called the way MXNet's symbol JSON names it, attributes as strings."""
    sym_inputs = [mx.sym.var('x%d' % i) for i in range(len(inputs))]
    str_attrs = {k: str(v) for k, v in attrs.items()}
    fn = getattr(mx.sym, op, None) or getattr(mx.sym._internal, op, None) or getattr(mx.sym.contrib, op.replace('_contrib_', ''))
    s = fn(*sym_inputs, **attrs)
    ex = s.bind(mx.cpu(), {('x%d' % i): x for i, x in enumerate(inputs)})
    out = ex.forward()[0]
    # The op name and attributes exactly as MXNet's JSON export writes them.
    node = json.loads(s.tojson())['nodes'][-1]
    cases.append({'name': name, 'op': node['op'], 'attrs': node.get('attrs', {}),
                  'inputs': [desc(x) for x in inputs], 'output': desc(out)})


a34 = arr((3, 4))
d432 = arr((4, 3, 2))

case('arange_repeat', '_arange', [], start=2, stop=7, step=1.5, repeat=2)
case('arange_negative_step', '_arange', [], start=5, stop=0, step=-2)
case('arange_stop_none', '_arange', [], start=3.5)
case('arange_int32_truncates_step', '_arange', [], start=0, stop=5, step=1.5, dtype='int32')
# (No float16 _arange: MXNet 1.9.1's CPU kernel returns zeros for it, a bug.)
case('arange_f32_fraction', '_arange', [], start=0.1, stop=3, step=0.3)
case('arange_like', '_contrib_arange_like', [a34], start=1, step=0.5)
case('arange_like_axis_repeat', '_contrib_arange_like', [a34], axis=-1, repeat=2)
case('arange_like_int32', '_contrib_arange_like', [arr((2, 3), 'int32')], step=0.5, start=1.7)
case('shape_array', 'shape_array', [arr((2, 1, 3))])
case('size_array', 'size_array', [arr((2, 1, 3))])
case('reverse_two_axes', 'reverse', [a34], axis=(0, 1))
case('reverse_axis_twice', 'reverse', [a34], axis=(1, 1))
case('flip_3d', 'flip', [d432], axis=(1,))
case('tile_short_reps', 'tile', [arr((2, 2))], reps=(2,))
case('tile_long_reps', 'tile', [arr((2, 2))], reps=(2, 1, 2))
case('tile_f16', 'tile', [arr((1, 3), 'float16')], reps=(2, 2))
case('repeat_axis_none', 'repeat', [arr((2, 2))], repeats=2)
case('repeat_negative_axis', 'repeat', [arr((2, 2))], repeats=3, axis=-1)
case('repeat_zero', 'repeat', [arr((2, 2))], repeats=0, axis=0)
case('repeat_axis0_3d', 'repeat', [d432], repeats=2, axis=0)
case('take_float_indices_clip', 'take', [a34, nd.array([1.7, -0.5, 2.9, 5.2, -1.2])])
case('take_wrap', 'take', [a34, nd.array([4, -1, -5, 7.5])], mode='wrap')
case('take_axis_minus1_2d_indices', 'take', [a34, nd.array([[0, 3], [1, 5]])], axis=-1)
case('take_int64_indices', 'take', [a34, nd.array([1, 2], dtype='int64')], axis=1)
case('take_raise_in_range', 'take', [a34, nd.array([2, 1.5])], mode='raise')
case('pick_axis1', 'pick', [a34, nd.array([0, 3.7, 5])], axis=1)
case('pick_wrap', 'pick', [a34, nd.array([-1, 5, -6])], axis=1, mode='wrap')
case('pick_axis0_keepdims', 'pick', [a34, nd.array([0, 2, -1, 1])], axis=0, keepdims=True)
case('pick_kept_index_shape', 'pick', [d432, nd.array([[[1], [0], [1]], [[0], [0], [1]], [[1], [1], [1]], [[0], [1], [0]]])], axis=2)
case('pick_f16', 'pick', [arr((3, 4), 'float16'), nd.array([1, 2, 3], dtype='float16')])
case('one_hot_out_of_range_rows', 'one_hot', [nd.array([1, -1, 3, 5, 2.6])], depth=4)
case('one_hot_values_int32', 'one_hot', [nd.array([[1, 0], [2, 3]])], depth=3, on_value=2.5, off_value=-1, dtype='int32')
case('gather_nd_negative', 'gather_nd', [a34, nd.array([[0, 2, -1], [1, 3, -1]])])
case('gather_nd_partial', 'gather_nd', [a34, nd.array([[2, 0]])])
case('gather_nd_3d', 'gather_nd', [d432, nd.array([[[3, 0], [1, 1]], [[2, 0], [0, 1]]], dtype='int32')])
case('reshape_like_whole', 'reshape_like', [a34, nd.zeros((2, 6))])
case('reshape_like_ranges', 'reshape_like', [arr((6, 2)), nd.zeros((3, 2, 5))], lhs_begin=0, lhs_end=1, rhs_begin=0, rhs_end=2)
case('reshape_like_negative', 'reshape_like', [arr((6, 2)), nd.zeros((3, 2, 5))], lhs_begin=-2, lhs_end=-1, rhs_begin=0, rhs_end=-1)
case('depth_to_space', 'depth_to_space', [arr((1, 8, 1, 2))], block_size=2)
case('depth_to_space_batch2', 'depth_to_space', [arr((2, 9, 2, 1))], block_size=3)
case('space_to_depth', 'space_to_depth', [arr((1, 1, 4, 4))], block_size=2)
case('space_to_depth_2ch', 'space_to_depth', [arr((1, 2, 2, 4))], block_size=2)
y = arr((1, 1, 5, 6))
case('crop_offset_hw', 'Crop', [y], offset=(1, 2), h_w=(2, 3))
case('crop_center', 'Crop', [y], h_w=(2, 3), center_crop=True)
case('crop_like_offset', 'Crop', [y, nd.zeros((1, 1, 3, 3))], num_args=2, offset=(1, 1))
case('crop_like_center', 'Crop', [arr((2, 2, 5, 6)), nd.zeros((2, 7, 2, 3))], num_args=2, center_crop=True)
x = arr((1, 2, 3, 3))
case('pad_constant', 'Pad', [x], mode='constant', pad_width=(0, 0, 0, 0, 1, 0, 0, 2), constant_value=-1.5)
case('pad_edge', 'Pad', [x], mode='edge', pad_width=(0, 0, 0, 0, 1, 2, 2, 1))
case('pad_reflect', 'Pad', [x], mode='reflect', pad_width=(0, 0, 0, 0, 2, 1, 1, 2))
case('pad_reflect_5d', 'Pad', [arr((1, 1, 2, 2, 2))], mode='reflect', pad_width=(0, 0, 0, 0, 1, 1, 1, 0, 0, 1))
case('pad_f16_constant', 'Pad', [arr((1, 1, 2, 2), 'float16')], mode='constant', pad_width=(0, 0, 0, 0, 1, 1, 1, 1), constant_value=0.1)
case('upsampling_nearest', 'UpSampling', [arr((1, 1, 2, 2))], scale=2, sample_type='nearest')
case('upsampling_nearest_scale3', 'UpSampling', [arr((2, 2, 1, 2))], scale=3, sample_type='nearest')
case('upsampling_two_inputs_concat', 'UpSampling', [arr((1, 1, 2, 2)), arr((1, 2, 1, 1), start=4)], scale=2, sample_type='nearest', num_args=2)
case('upsampling_two_inputs_sum', 'UpSampling', [arr((1, 1, 2, 2)), arr((1, 1, 1, 1), start=4)], scale=2, sample_type='nearest', num_args=2, multi_input_mode='sum')
r = nd.array(np.random.RandomState(1).uniform(-1, 1, (1, 2, 3, 4)).astype('float32'))
case('bilinear_size', '_contrib_BilinearResize2D', [r], height=5, width=7)
case('bilinear_scale', '_contrib_BilinearResize2D', [r], scale_height=1.5, scale_width=0.5)
case('bilinear_no_align_corners', '_contrib_BilinearResize2D', [r], scale_height=2.0, scale_width=2.0, align_corners=False)
case('bilinear_down_no_align', '_contrib_BilinearResize2D', [arr((1, 1, 5, 7))], height=2, width=3, align_corners=False)
case('bilinear_like', '_contrib_BilinearResize2D', [r, nd.zeros((1, 1, 6, 2))], mode='like')
case('bilinear_same_size', '_contrib_BilinearResize2D', [r], height=3, width=4)
case('bilinear_to_1x1', '_contrib_BilinearResize2D', [r], height=1, width=1)
# The modes that derive the size from the input's extents, each on an input with an even
# height and odd width (e45) and one the other way round (o56), both align_corners.
e45 = nd.array(np.random.RandomState(2).uniform(-1, 1, (1, 2, 4, 5)).astype('float32'))
o56 = nd.array(np.random.RandomState(3).uniform(-1, 1, (1, 1, 5, 6)).astype('float32'))
for mode in ('odd_scale', 'to_even_down', 'to_even_up', 'to_odd_down', 'to_odd_up'):
    scales = {'scale_height': 2.0, 'scale_width': 1.5} if mode == 'odd_scale' else {}
    case('bilinear_%s_even_odd' % mode, '_contrib_BilinearResize2D', [e45], mode=mode, **scales)
    case('bilinear_%s_odd_even_no_align' % mode, '_contrib_BilinearResize2D', [o56], mode=mode,
         align_corners=False, **scales)
case('bilinear_odd_scale_down', '_contrib_BilinearResize2D', [o56], mode='odd_scale', scale_height=0.5, scale_width=0.7)
# height/width and the scales are ignored by the parity modes.
case('bilinear_to_odd_up_ignores_size', '_contrib_BilinearResize2D', [e45], mode='to_odd_up', height=9, width=2, scale_height=3.0, scale_width=3.0)
case('bilinear_to_even_down_1x1_is_empty', '_contrib_BilinearResize2D', [arr((1, 1, 1, 1))], mode='to_even_down')
# mode=size: a lone scale_width is ignored (scale_height decides for both).
case('bilinear_size_lone_scale_width', '_contrib_BilinearResize2D', [e45], height=3, width=7, scale_width=2.0)
L = nd.array([1, 4, 2.7])
case('sequence_mask', 'SequenceMask', [d432, L], use_sequence_length=True, value=-1)
case('sequence_mask_axis1', 'SequenceMask', [arr((3, 4, 2)), L], use_sequence_length=True, axis=1)
case('sequence_mask_no_lengths', 'SequenceMask', [d432])
case('sequence_mask_zero_length', 'SequenceMask', [d432, nd.array([0, 3, 1])], use_sequence_length=True)
case('sequence_last', 'SequenceLast', [d432, L], use_sequence_length=True)
case('sequence_last_axis1', 'SequenceLast', [arr((3, 4, 2)), L], use_sequence_length=True, axis=1)
case('sequence_last_no_lengths', 'SequenceLast', [d432])
case('sequence_reverse', 'SequenceReverse', [d432, L], use_sequence_length=True)
case('sequence_reverse_no_lengths', 'SequenceReverse', [d432])
case('sequence_reverse_zero_length', 'SequenceReverse', [d432, nd.array([0, 4, 2])], use_sequence_length=True)


def yolo_like_graph():
    """A small graph in the style of YOLOv3's output head (grid offsets from _arange, tile and
    repeat, cut to the feature map with slice_like), with other ops of this family after it;
    its symbol JSON as MXNet 1.9.1 writes it and the outputs MXNet computes."""
    data = mx.sym.var('data')
    idx = mx.sym.var('idx')
    lengths = mx.sym.var('lengths')
    grid_x = mx.sym.reshape(mx.sym.arange(0, 6), (1, -1))
    grid_y = mx.sym.reshape(mx.sym.arange(0, 6), (-1, 1))
    offsets = mx.sym.concat(mx.sym.tile(grid_x, reps=(6, 1)).expand_dims(-1),
                            mx.sym.repeat(grid_y, repeats=6, axis=1).expand_dims(-1), dim=-1)
    offsets = mx.sym.slice_like(offsets.expand_dims(0), data.transpose((0, 2, 3, 1)), axes=(1, 2))
    head = mx.sym.broadcast_add(data.transpose((0, 2, 3, 1)), offsets)
    up = mx.sym.UpSampling(mx.sym.reverse(data, axis=(3,)), scale=2, sample_type='nearest')
    padded = mx.sym.pad(up, mode='edge', pad_width=(0, 0, 0, 0, 1, 1, 0, 2))
    picked = mx.sym.take(mx.sym.reshape(data, (-1, 4)), idx, axis=0, mode='wrap')
    masked = mx.sym.SequenceMask(picked, lengths, use_sequence_length=True, value=-7)
    sym = mx.sym.Group([head, padded, masked, mx.sym.shape_array(padded), mx.sym.one_hot(idx, depth=5)])
    inputs = {'data': nd.array(np.random.RandomState(7).uniform(-2, 2, (1, 2, 4, 4)).astype('float32')),
              'idx': nd.array([[1, -2, 9], [0, 3, 4]]), 'lengths': nd.array([1, 2, 0])}
    ex = sym.bind(mx.cpu(), inputs)
    outs = ex.forward()
    return {'symbol': sym.tojson(), 'inputs': {k: desc(v) for k, v in inputs.items()},
            'outputs': [desc(o) for o in outs]}


with open(OUT, 'w') as f:
    json.dump({'generator': 'scripts/index_ops_cases.py', 'mxnet': mx.__version__, 'cases': cases,
               'graph': yolo_like_graph()}, f, indent=None,
              separators=(',', ':'))
    f.write('\n')
print(len(cases), 'cases ->', os.path.normpath(OUT))
