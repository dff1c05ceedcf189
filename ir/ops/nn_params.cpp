#include "ir/ops/nn_params.h"

#include <algorithm>

#include "ir/error.h"

namespace ampfuse::ir::nn {

int64_t normalize_axis(int64_t axis, size_t rank, std::string_view attr) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) fail("{}={} is out of range for data of rank {}", attr, axis, rank);
  return axis < 0 ? axis + r : axis;
}

namespace {
constexpr std::string_view kChannelsFirst[] = {"NCW", "NCHW", "NCDHW"};
constexpr std::string_view kChannelsLast[] = {"NWC", "NHWC", "NDHWC"};
}  // namespace

bool layout_channels_last(const Attrs& a, size_t rank, const std::string& attr) {
  if (!a.has(attr)) return false;
  const std::string& layout = a.get_string(attr);
  if (layout == "None") return false;
  if (rank >= 3 && rank <= 5) {
    if (layout == kChannelsFirst[rank - 3]) return false;
    if (layout == kChannelsLast[rank - 3]) return true;
  }
  fail("{} {} does not fit data of rank {}", attr, layout, rank);
}

std::string_view layout_name(size_t rank, bool channels_last) {
  if (rank < 3 || rank > 5) fail("data of rank {} has no layout name (ranks 3 to 5 do)", rank);
  return (channels_last ? kChannelsLast : kChannelsFirst)[rank - 3];
}

Shape to_layout(const Shape& ncx, bool channels_last) {
  if (!channels_last || ncx.size() < 3) return ncx;
  Shape out{ncx[0]};
  out.insert(out.end(), ncx.begin() + 2, ncx.end());
  out.push_back(ncx[1]);
  return out;
}

Shape from_layout(const Shape& shape, bool channels_last) {
  if (!channels_last || shape.size() < 3) return shape;
  Shape out{shape[0], shape.back()};
  out.insert(out.end(), shape.begin() + 1, shape.end() - 1);
  return out;
}

namespace {

// An optional per-dimension attribute: () means `fallback` in every spatial dimension.
std::vector<int64_t> spatial_list(const Attrs& a, const std::string& name, size_t n, int64_t fallback) {
  std::vector<int64_t> v = a.has(name) ? a.get_ints(name) : std::vector<int64_t>{};
  if (v.empty()) return std::vector<int64_t>(n, fallback);
  if (v.size() != n) fail("{}={} has {} entries but the kernel has {}", name, format_mxnet_attr(v), v.size(), n);
  return v;
}

void require_each(const std::vector<int64_t>& v, const char* name, int64_t min) {
  for (int64_t x : v)
    if (x < min) fail("{}={} must have entries >= {}", name, format_mxnet_attr(v), min);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Shape ConvGeometry::weight_shape() const {
  Shape w = deconv ? Shape{in_channels, out_channels / groups} : Shape{out_channels, in_channels / groups};
  w.insert(w.end(), kernel.begin(), kernel.end());
  return to_layout(w, channels_last);
}

Shape ConvGeometry::output_shape() const {
  Shape out{batch, out_channels};
  out.insert(out.end(), out_size.begin(), out_size.end());
  return to_layout(out, channels_last);
}

ConvGeometry conv_geometry(const Attrs& a, const Shape& data, bool deconv) {
  ConvGeometry g;
  g.deconv = deconv;
  g.kernel = a.get_ints("kernel");
  const size_t n = g.kernel.size();
  if (n < 1 || n > 3) fail("kernel={} must have 1, 2 or 3 entries", format_mxnet_attr(g.kernel));
  if (data.size() != n + 2)
    fail("a {}-D kernel needs data of rank {}, but the data has shape {}", n, n + 2, shape_str(data));
  require_each(g.kernel, "kernel", 1);
  g.channels_last = layout_channels_last(a, data.size());
  const Shape ncx = from_layout(data, g.channels_last);
  g.batch = ncx[0];
  g.in_channels = ncx[1];
  g.in_size.assign(ncx.begin() + 2, ncx.end());
  g.stride = spatial_list(a, "stride", n, 1);
  g.dilate = spatial_list(a, "dilate", n, 1);
  g.pad = spatial_list(a, "pad", n, 0);
  require_each(g.stride, "stride", 1);
  require_each(g.dilate, "dilate", 1);
  require_each(g.pad, "pad", 0);
  g.out_channels = a.get_int("num_filter");
  g.groups = a.get_int("num_group");
  if (g.out_channels < 1) fail("num_filter={} must be positive", g.out_channels);
  if (g.groups < 1) fail("num_group={} must be positive", g.groups);
  if (g.in_channels % g.groups != 0)
    fail("the data has {} channels, which num_group={} does not divide", g.in_channels, g.groups);
  if (g.out_channels % g.groups != 0) fail("num_filter={} is not divisible by num_group={}", g.out_channels, g.groups);
  if (deconv) {
    const auto& target = a.get_ints("target_shape");
    if (std::any_of(target.begin(), target.end(), [](int64_t t) { return t != 0; }))
      fail("target_shape={} is not supported: give pad and adj instead", format_mxnet_attr(target));
    g.adj = spatial_list(a, "adj", n, 0);
    require_each(g.adj, "adj", 0);
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t span = g.dilate[i] * (g.kernel[i] - 1) + 1;
    if (deconv) {
      if (g.adj[i] >= g.stride[i])
        fail("adj={} must be smaller than stride in every dimension", format_mxnet_attr(g.adj));
      const int64_t out = g.stride[i] * (g.in_size[i] - 1) + span - 2 * g.pad[i] + g.adj[i];
      if (out < 1) fail("pad={} leaves no output in spatial dimension {}", format_mxnet_attr(g.pad), i);
      g.out_size.push_back(out);
    } else {
      const int64_t padded = g.in_size[i] + 2 * g.pad[i];
      if (padded < span)
        fail("the dilated kernel ({}) exceeds the padded input ({}) in spatial dimension {}", span, padded, i);
      g.out_size.push_back((padded - span) / g.stride[i] + 1);
    }
  }
  return g;
}

Shape PoolGeometry::output_shape() const {
  Shape out{batch, channels};
  out.insert(out.end(), out_size.begin(), out_size.end());
  return to_layout(out, channels_last);
}

PoolGeometry pool_geometry(const Attrs& a, const Shape& data) {
  PoolGeometry g;
  if (data.size() < 3 || data.size() > 5)
    fail("Pooling needs data of rank 3, 4 or 5 (batch, channel, spatial...), not {}", shape_str(data));
  const size_t n = data.size() - 2;
  g.channels_last = layout_channels_last(a, data.size());
  const Shape ncx = from_layout(data, g.channels_last);
  g.batch = ncx[0];
  g.channels = ncx[1];
  g.in_size.assign(ncx.begin() + 2, ncx.end());

  const std::string& type = a.get_string("pool_type");
  g.type = type == "max" ? PoolType::max : type == "avg" ? PoolType::avg : type == "sum" ? PoolType::sum : PoolType::lp;
  if (g.type == PoolType::lp) {
    const auto p = a.get_opt_int("p_value");
    if (!p) fail("pool_type=lp needs p_value");
    if (*p < 1 || *p > 3) fail("p_value={} is not supported (1, 2 or 3)", *p);
    g.p_value = static_cast<int>(*p);
  }
  g.count_include_pad = a.is_none("count_include_pad") || a.get_bool("count_include_pad");

  if (a.get_bool("global_pool")) {
    g.kernel = g.in_size;
    g.stride.assign(n, 1);
    g.pad.assign(n, 0);
    g.pad_end.assign(n, 0);
    g.out_size.assign(n, 1);
    return g;
  }
  g.kernel = a.get_ints("kernel");
  if (g.kernel.empty()) fail("Pooling needs kernel unless global_pool=True");
  if (g.kernel.size() != n)
    fail("a {}-D kernel needs data of rank {}, but the data has shape {}", g.kernel.size(), g.kernel.size() + 2,
         shape_str(data));
  require_each(g.kernel, "kernel", 1);
  g.stride = spatial_list(a, "stride", n, 1);
  g.pad = spatial_list(a, "pad", n, 0);
  require_each(g.stride, "stride", 1);
  require_each(g.pad, "pad", 0);
  g.pad_end = g.pad;
  const std::string& convention = a.get_string("pooling_convention");
  if (convention == "same" && n != 1) fail("pooling_convention=same supports 1-D pooling only");
  for (size_t i = 0; i < n; ++i) {
    const int64_t padded = g.in_size[i] + 2 * g.pad[i];
    if (g.kernel[i] > padded)
      fail("kernel={} exceeds the padded input ({}) in spatial dimension {}", format_mxnet_attr(g.kernel), padded, i);
    if (convention == "valid") {
      g.out_size.push_back((padded - g.kernel[i]) / g.stride[i] + 1);
    } else if (convention == "full") {
      g.out_size.push_back(ceil_div(padded - g.kernel[i], g.stride[i]) + 1);
    } else {
      if (g.pad[i] != 0) fail("pooling_convention=same does not take pad");
      g.out_size.push_back(ceil_div(g.in_size[i], g.stride[i]));
      const int64_t total = std::max<int64_t>(0, (g.out_size[i] - 1) * g.stride[i] + g.kernel[i] - g.in_size[i]);
      g.pad[i] = total / 2;
      g.pad_end[i] = total - total / 2;
    }
  }
  return g;
}

int64_t RnnGeometry::gates() const {
  switch (mode) {
    case RnnMode::lstm:
      return 4;
    case RnnMode::gru:
      return 3;
    default:
      return 1;
  }
}

int64_t RnnGeometry::i2h_weight_offset(int64_t layer, int64_t dir) const {
  int64_t off = 0;
  for (int64_t l = 0; l < layer; ++l) off += directions * gates() * hidden * (layer_input_size(l) + hidden);
  return off + dir * gates() * hidden * (layer_input_size(layer) + hidden);
}

int64_t RnnGeometry::h2h_weight_offset(int64_t layer, int64_t dir) const {
  return i2h_weight_offset(layer, dir) + gates() * hidden * layer_input_size(layer);
}

int64_t RnnGeometry::i2h_bias_offset(int64_t layer, int64_t dir) const {
  return i2h_weight_offset(layers, 0) + (layer * directions + dir) * 2 * gates() * hidden;
}

int64_t RnnGeometry::h2h_bias_offset(int64_t layer, int64_t dir) const {
  return i2h_bias_offset(layer, dir) + gates() * hidden;
}

int64_t RnnGeometry::param_count() const { return i2h_bias_offset(layers, 0); }

RnnMode rnn_mode(const Attrs& a) {
  const std::string& m = a.get_string("mode");
  if (m == "lstm") return RnnMode::lstm;
  if (m == "gru") return RnnMode::gru;
  if (m == "rnn_tanh") return RnnMode::rnn_tanh;
  return RnnMode::rnn_relu;
}

RnnGeometry rnn_geometry(const Attrs& a, const Shape& data) {
  if (!a.is_none("projection_size")) fail("projection_size is not supported");
  if (!a.is_none("lstm_state_clip_min") || !a.is_none("lstm_state_clip_max"))
    fail("lstm_state_clip_min/lstm_state_clip_max are not supported");
  if (a.get_bool("use_sequence_length")) fail("use_sequence_length=True is not supported");
  RnnGeometry g;
  g.mode = rnn_mode(a);
  g.layers = a.get_int("num_layers");
  g.directions = a.get_bool("bidirectional") ? 2 : 1;
  g.hidden = a.get_int("state_size");
  if (g.layers < 1) fail("num_layers={} must be positive", g.layers);
  if (g.hidden < 1) fail("state_size={} must be positive", g.hidden);
  if (data.size() != 3) fail("RNN data must be (sequence, batch, features), not {}", shape_str(data));
  g.seq_len = data[0];
  g.batch = data[1];
  g.input_size = data[2];
  return g;
}

}  // namespace ampfuse::ir::nn
