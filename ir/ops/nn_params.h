// Typed views of the neural-network ops' attributes and their output geometry.
//
// Type inference (ir/ops/nn_*.cpp) and the reference kernels (runtime/reference/) both read
// convolution, pooling and RNN attributes through these functions, so the arithmetic that
// decides an output extent or a weight layout is written once. Every function throws
// ampfuse::Error naming the attribute on a value MXNet would refuse.
#pragma once

#include "ir/attrs.h"
#include "ir/dtype.h"

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace ampfuse::ir::nn {

// `axis` (negative counts from the end) as an index into a rank-`rank` shape.
int64_t normalize_axis(int64_t axis, size_t rank, std::string_view attr = "axis");

// Whether the layout attribute `attr` of a rank-`rank` input puts channels last (NWC,
// NHWC, NDHWC). "None" or no such attribute means channels first. Throws when the layout
// does not fit the rank.
bool layout_channels_last(const Attrs& a, size_t rank, const std::string& attr = "layout");
// The layout name of rank-`rank` data (3 to 5): NCW, NCHW, NCDHW, or with `channels_last`
// NWC, NHWC, NDHWC.
std::string_view layout_name(size_t rank, bool channels_last);

// Reorders (N, C, spatial...) to (N, spatial..., C) when `channels_last`, and back.
Shape to_layout(const Shape& ncx, bool channels_last);
Shape from_layout(const Shape& shape, bool channels_last);

// Convolution and Deconvolution, in channels-first terms whatever the layout.
struct ConvGeometry {
  bool deconv = false;
  bool channels_last = false;
  int64_t batch = 0, in_channels = 0, out_channels = 0, groups = 1;
  std::vector<int64_t> in_size, out_size;  // spatial extents, 1 to 3 of them
  std::vector<int64_t> kernel, stride, dilate, pad, adj;

  size_t spatial() const { return kernel.size(); }
  // MXNet's weight shape: Convolution (num_filter, C/group, k...), Deconvolution
  // (C, num_filter/group, k...), both permuted like the data when channels are last.
  Shape weight_shape() const;
  Shape output_shape() const;  // in the data's layout
};
ConvGeometry conv_geometry(const Attrs& a, const Shape& data, bool deconv);

// _contrib_ModulatedDeformableConvolution (ir/ops/nn_deformable_conv.cpp): 2-d, NCHW, with
// MXNet's defaults filled in (stride and dilate 1, pad 0) and its checks applied.
struct DeformableConvGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, groups = 1, deformable_groups = 1;
  std::array<int64_t, 2> in_size{}, out_size{}, kernel{}, stride{}, dilate{}, pad{};
};
DeformableConvGeometry deformable_conv_geometry(const Attrs& a, const Shape& data);

enum class PoolType : uint8_t { max, avg, sum, lp };

struct PoolGeometry {
  bool channels_last = false;
  PoolType type = PoolType::max;
  int p_value = 0;  // lp only: 1, 2 or 3
  bool count_include_pad = true;
  int64_t batch = 0, channels = 0;
  std::vector<int64_t> in_size, out_size, kernel, stride;
  // Padding before and after the data. They differ only under pooling_convention=same,
  // which pads like TensorFlow's SAME: the total needed, the smaller half first.
  std::vector<int64_t> pad, pad_end;

  Shape output_shape() const;  // in the data's layout
};
PoolGeometry pool_geometry(const Attrs& a, const Shape& data);

// _contrib_AdaptiveAvgPooling2D's output_size: () = (1, 1), (s) = (s, s), (h, w).
std::pair<int64_t, int64_t> adaptive_pool_output_size(const Attrs& a);

enum class RnnMode : uint8_t { rnn_relu, rnn_tanh, lstm, gru };

// RNN over time-major data (T, N, C). The flat parameter vector holds, as MXNet and cuDNN
// lay it out, every weight first (layer by layer, direction by direction, the input-to-
// hidden matrix (G*H, I) then the hidden-to-hidden matrix (G*H, H)), then every bias in
// the same order (i2h then h2h, G*H each). Gates: LSTM i, f, g, o; GRU r, z, n.
struct RnnGeometry {
  RnnMode mode = RnnMode::lstm;
  int64_t layers = 1, directions = 1, hidden = 0;
  int64_t seq_len = 0, batch = 0, input_size = 0;

  int64_t gates() const;
  int64_t layer_input_size(int64_t layer) const { return layer == 0 ? input_size : directions * hidden; }
  // Offsets into the flat parameter vector for (layer, direction).
  int64_t i2h_weight_offset(int64_t layer, int64_t dir) const;
  int64_t h2h_weight_offset(int64_t layer, int64_t dir) const;
  int64_t i2h_bias_offset(int64_t layer, int64_t dir) const;
  int64_t h2h_bias_offset(int64_t layer, int64_t dir) const;
  int64_t param_count() const;
  Shape state_shape() const { return {layers * directions, batch, hidden}; }
};
RnnMode rnn_mode(const Attrs& a);
// Checks the attributes ampfuse refuses (projection_size, lstm_state_clip_*,
// use_sequence_length) and reads the geometry of `data` (T, N, C).
RnnGeometry rnn_geometry(const Attrs& a, const Shape& data);

}  // namespace ampfuse::ir::nn
