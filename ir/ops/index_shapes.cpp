#include "ir/ops/index_shapes.h"

#include "ir/error.h"
#include "ir/ops/tensor_shapes.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace ampfuse::ir {

namespace {

int64_t rank_of(const Shape& s) { return static_cast<int64_t>(s.size()); }

int64_t positive_int(const Attrs& a, const std::string& name) {
  const int64_t v = a.get_int(name);
  if (v < 1) fail("attribute '{}' must be at least 1, not {}", name, v);
  return v;
}

void require_rank(const Shape& in, int64_t rank, std::string_view what) {
  if (rank_of(in) != rank) fail("{} needs {}-D input, not {}", what, rank, shape_str(in));
}

}  // namespace

ArangeSpec arange_spec(const Attrs& a) {
  double start = a.get_float("start");
  double stop = 0;
  if (a.is_none("stop")) {
    stop = start;
    start = 0;
  } else {
    stop = a.get_float("stop");
  }
  const double step = a.get_float("step");
  if (step == 0) fail("attribute 'step' must not be 0");
  if (a.get_bool("infer_range")) fail("attribute 'infer_range=True' is not supported: give 'stop'");
  const double span = std::ceil((stop - start) / step);
  if (!(span > 0)) fail("attributes start={}, stop={}, step={} give an empty range", start, stop, step);
  ArangeSpec s;
  s.count = static_cast<int64_t>(span);
  s.repeat = positive_int(a, "repeat");
  const DType dt = a.get_dtype("dtype");
  s.start = is_float(dt) ? start : std::trunc(start);
  s.step = is_float(dt) ? step : std::trunc(step);
  return s;
}

TilePlan tile_plan(const Shape& in, const Attrs& a) {
  const auto& reps = a.get_ints("reps");
  for (int64_t r : reps)
    if (r < 1) fail("reps={} has {}: every repetition count must be at least 1", format_mxnet_attr(reps), r);
  const size_t rank = std::max(in.size(), reps.size());
  TilePlan p;
  p.in_view.assign(rank - in.size(), 1);
  p.in_view.insert(p.in_view.end(), in.begin(), in.end());
  p.out = p.in_view;
  for (size_t k = 0; k < reps.size(); ++k) p.out[rank - reps.size() + k] *= reps[k];
  return p;
}

RepeatPlan repeat_plan(const Shape& in, const Attrs& a) {
  RepeatPlan p;
  p.repeats = a.get_int("repeats");
  if (p.repeats < 0) fail("attribute 'repeats' must not be negative, not {}", p.repeats);
  if (a.is_none("axis")) {
    p.in_view = {num_elements(in)};
    p.axis = 0;
  } else {
    p.in_view = in;
    p.axis = resolve_axis(a.get_int("axis"), in, "axis");
  }
  p.out = p.in_view;
  p.out[p.axis] *= p.repeats;
  // MXNet 1.9.1 gives repeats=0 the shape (0,) whatever the input's rank.
  if (p.repeats == 0) p.out = {0};
  return p;
}

Shape take_shape(const Shape& a, const Shape& indices, const Attrs& attrs) {
  const int64_t axis = resolve_axis(attrs.get_int("axis"), a, "axis");
  if (a[axis] == 0) fail("cannot take from dim {} of input {}: it is empty", axis, shape_str(a));
  Shape out(a.begin(), a.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), a.begin() + axis + 1, a.end());
  return out;
}

Shape pick_shape(const Shape& data, const Shape& index, const Attrs& a) {
  const int64_t axis = resolve_axis(a.get_int("axis"), data, "axis");
  if (data[axis] == 0) fail("cannot pick from dim {} of input {}: it is empty", axis, shape_str(data));
  Shape kept = data;
  kept[axis] = 1;
  Shape dropped = data;
  dropped.erase(dropped.begin() + axis);
  if (dropped.empty()) dropped = {1};
  if (index != kept && index != dropped)
    fail("input 1 (index) has shape {} but {} or {} is needed for data {} and axis {}", shape_str(index),
         shape_str(dropped), shape_str(kept), shape_str(data), axis);
  return a.get_bool("keepdims") ? kept : dropped;
}

Shape gather_nd_shape(const Shape& data, const Shape& indices) {
  if (indices.empty()) fail("input 1 (indices) must have at least one dim");
  const int64_t m = indices[0];
  if (m < 1 || m > rank_of(data))
    fail("input 1 (indices) has shape {}: its first dim {} must be between 1 and the rank of data {}",
         shape_str(indices), m, shape_str(data));
  Shape out(indices.begin() + 1, indices.end());
  out.insert(out.end(), data.begin() + m, data.end());
  if (out.empty()) out = {1};  // MXNet 1.x has no 0-d arrays
  return out;
}

int64_t gather_nd_index(double raw, int64_t n, int64_t dim) {
  const int64_t i = static_cast<int64_t>(std::isnan(raw) ? 0.0 : std::trunc(raw));
  if (i < -n || i >= n) fail("gather_nd index {} is out of range for dim {} (extent {})", i, dim, n);
  return i < 0 ? i + n : i;
}

IndexMode index_mode(const Attrs& a) {
  const std::string& m = a.get_string("mode");
  return m == "wrap" ? IndexMode::wrap : m == "raise" ? IndexMode::raise : IndexMode::clip;
}

int64_t fit_index(double raw, int64_t n, IndexMode mode, std::string_view what) {
  if (n < 1) fail("{} from an empty dim", what);
  // MXNet converts index values with a C cast: truncation toward zero. NaN has no integer
  // value; it reads as 0 like the saturating conversions of ir/int_conversion.h.
  const double t = std::isnan(raw) ? 0.0 : std::trunc(raw);
  const double big = 9.0e18;
  const int64_t i = static_cast<int64_t>(std::clamp(t, -big, big));
  switch (mode) {
    case IndexMode::clip: return std::clamp<int64_t>(i, 0, n - 1);
    case IndexMode::wrap: return ((i % n) + n) % n;
    case IndexMode::raise:
      if (i < 0 || i >= n) fail("{} index {} is out of range [0, {}) (mode='raise')", what, i, n);
      return i;
  }
  return 0;
}

Shape reshape_like_shape(const Shape& lhs, const Shape& rhs, const Attrs& a) {
  // A None end is the rank; a negative bound counts from the end (MXNet's ReshapeLikeRangeCanonicalize).
  const auto range = [&](const Shape& s, const char* begin_attr, const char* end_attr) {
    const int64_t r = rank_of(s);
    auto canon = [&](const char* attr, int64_t fallback) {
      const std::optional<int64_t> v = a.get_opt_int(attr);
      if (!v) return fallback;
      const int64_t x = *v < 0 ? *v + r : *v;
      if (x < 0 || x > r) fail("attribute '{}'={} is out of range for shape {}", attr, *v, shape_str(s));
      return x;
    };
    const int64_t b = canon(begin_attr, 0), e = canon(end_attr, r);
    if (b > e) fail("attribute '{}' ({}) is past '{}' ({})", begin_attr, b, end_attr, e);
    return std::pair{b, e};
  };
  const auto [lb, le] = range(lhs, "lhs_begin", "lhs_end");
  const auto [rb, re] = range(rhs, "rhs_begin", "rhs_end");
  Shape out(lhs.begin(), lhs.begin() + lb);
  out.insert(out.end(), rhs.begin() + rb, rhs.begin() + re);
  out.insert(out.end(), lhs.begin() + le, lhs.end());
  if (num_elements(out) != num_elements(lhs))
    fail("cannot reshape lhs {} like rhs {}: the result {} has another element count", shape_str(lhs), shape_str(rhs),
         shape_str(out));
  return out;
}

Shape depth_to_space_shape(const Shape& in, const Attrs& a) {
  require_rank(in, 4, "depth_to_space");
  const int64_t b = positive_int(a, "block_size");
  if (in[1] % (b * b) != 0)
    fail("depth_to_space: channels {} of input {} are not a multiple of block_size^2 = {}", in[1], shape_str(in), b * b);
  return {in[0], in[1] / (b * b), in[2] * b, in[3] * b};
}

Shape space_to_depth_shape(const Shape& in, const Attrs& a) {
  require_rank(in, 4, "space_to_depth");
  const int64_t b = positive_int(a, "block_size");
  if (in[2] % b != 0 || in[3] % b != 0)
    fail("space_to_depth: height and width of input {} are not multiples of block_size={}", shape_str(in), b);
  return {in[0], in[1] * b * b, in[2] / b, in[3] / b};
}

CropWindow crop_window(const Shape& in, const Shape* like, const Attrs& a) {
  require_rank(in, 4, "Crop");
  const auto& offset = a.get_ints("offset");
  const auto& h_w = a.get_ints("h_w");
  if (offset.size() != 2) fail("attribute 'offset'={} must have 2 entries (y, x)", format_mxnet_attr(offset));
  if (h_w.size() != 2) fail("attribute 'h_w'={} must have 2 entries (height, width)", format_mxnet_attr(h_w));
  CropWindow w;
  if (like) {
    if (like->size() < 4) fail("input 1 (crop_like) has shape {}: Crop needs 4-D", shape_str(*like));
    w.height = (*like)[2], w.width = (*like)[3];
  } else {
    w.height = h_w[0], w.width = h_w[1];
  }
  if (w.height < 1 || w.width < 1 || w.height > in[2] || w.width > in[3])
    fail("Crop to {}x{} does not fit input {} (attribute 'h_w' or input crop_like)", w.height, w.width, shape_str(in));
  if (a.get_bool("center_crop")) {
    w.top = (in[2] - w.height) / 2, w.left = (in[3] - w.width) / 2;
  } else {
    w.top = offset[0], w.left = offset[1];
    if (w.top < 0 || w.left < 0 || w.top > in[2] - w.height || w.left > in[3] - w.width)
      fail("attribute 'offset'={} puts the {}x{} window outside input {}", format_mxnet_attr(offset), w.height, w.width,
           shape_str(in));
  }
  return w;
}

PadPlan pad_plan(const Shape& in, const Attrs& a) {
  const auto& pw = a.get_ints("pad_width");
  if (in.size() != 4 && in.size() != 5) fail("Pad supports 4-D and 5-D input only (as MXNet), not {}", shape_str(in));
  if (pw.size() != 2 * in.size())
    fail("attribute 'pad_width'={} needs 2 entries per dim of input {}", format_mxnet_attr(pw), shape_str(in));
  if (pw[0] || pw[1] || pw[2] || pw[3])
    fail("attribute 'pad_width'={} pads the first two dims, which MXNet does not support", format_mxnet_attr(pw));
  const std::string& mode = a.get_string("mode");
  const bool reflect = mode == "reflect";
  PadPlan p;
  p.mode = reflect ? PadMode::reflect : mode == "edge" ? PadMode::edge : PadMode::constant;
  p.out = in;
  for (size_t d = 0; d < in.size(); ++d) {
    const int64_t b = pw[2 * d], e = pw[2 * d + 1];
    if (b < 0 || e < 0) fail("attribute 'pad_width'={} has a negative entry", format_mxnet_attr(pw));
    if (reflect && (b >= in[d] || e >= in[d]))
      fail("attribute 'pad_width'={}: reflect padding must be smaller than dim {} (extent {})", format_mxnet_attr(pw), d,
           in[d]);
    if ((b || e) && in[d] == 0) fail("cannot pad empty dim {} of input {}", d, shape_str(in));
    p.before.push_back(b), p.after.push_back(e);
    p.out[d] += b + e;
  }
  return p;
}

int64_t pad_source(PadMode mode, int64_t j, int64_t n) {
  if (j >= 0 && j < n) return j;
  switch (mode) {
    case PadMode::constant: return -1;
    case PadMode::edge: return j < 0 ? 0 : n - 1;
    case PadMode::reflect: return j < 0 ? -j : 2 * (n - 1) - j;
  }
  return -1;
}

bool is_bilinear_upsampling(const Attrs& a) { return a.has("sample_type") && a.get_string("sample_type") == "bilinear"; }

Attrs bilinear_upsampling_deconv_attrs(const Attrs& a, int64_t channels) {
  const int64_t scale = positive_int(a, "scale");
  const int64_t filters = a.get_int("num_filter");
  if (filters != channels)
    fail("attribute 'num_filter'={} must equal the data's {} channels for sample_type='bilinear' (MXNet's "
         "depthwise Deconvolution has num_group = num_filter)",
         filters, channels);
  const int64_t kernel = 2 * scale - scale % 2, pad = scale / 2;  // ceil((scale - 1) / 2)
  Attrs d;
  d.set("kernel", std::vector<int64_t>{kernel, kernel});
  d.set("stride", std::vector<int64_t>{scale, scale});
  d.set("pad", std::vector<int64_t>{pad, pad});
  d.set("dilate", std::vector<int64_t>{1, 1});
  d.set("num_filter", channels);
  d.set("num_group", channels);
  d.set("no_bias", true);
  d.set("adj", std::vector<int64_t>{});
  d.set("target_shape", std::vector<int64_t>{});
  return d;
}

UpSamplingPlan upsampling_plan(const std::vector<Shape>& ins, const Attrs& a) {
  if (a.get_string("sample_type") != "nearest") fail("upsampling_plan is for sample_type='nearest'");
  const int64_t scale = positive_int(a, "scale");
  UpSamplingPlan p;
  for (size_t k = 0; k < ins.size(); ++k) require_rank(ins[k], 4, "UpSampling");
  const int64_t oh = ins[0][2] * scale, ow = ins[0][3] * scale;
  p.out = {ins[0][0], 0, oh, ow};
  const bool sum = a.get_string("multi_input_mode") == "sum";
  for (size_t k = 0; k < ins.size(); ++k) {
    const Shape& s = ins[k];
    if (s[0] != ins[0][0] || s[2] == 0 || s[3] == 0 || oh % s[2] != 0 || ow % s[3] != 0 || oh / s[2] != ow / s[3])
      fail("input {} has shape {}, which no integer scale takes to {}x{}", k, shape_str(s), oh, ow);
    if (sum && s[1] != ins[0][1])
      fail("input {} has {} channels but input 0 has {}: multi_input_mode='sum' needs one count", k, s[1], ins[0][1]);
    p.factors.push_back(oh / s[2]);
    p.out[1] = sum ? s[1] : p.out[1] + s[1];
  }
  return p;
}

std::pair<int64_t, int64_t> bilinear_resize_size(const Shape& in, const Shape* like, const Attrs& a) {
  require_rank(in, 4, "_contrib_BilinearResize2D");
  const std::string& mode = a.get_string("mode");
  const int64_t ih = in[2], iw = in[3];
  // MXNet multiplies the float scale by the extent in float and truncates toward zero.
  const auto times = [](double scale, int64_t extent) {
    return static_cast<int64_t>(static_cast<float>(scale) * static_cast<float>(extent));
  };
  const auto scale_of = [&](const char* name) {
    if (a.is_none(name)) fail("attribute '{}' is needed by mode='{}' (MXNet: bad optional access)", name, mode);
    return a.get_float(name);
  };
  int64_t h = 0, w = 0;
  if (mode == "like") {
    if (!like || like->size() != 4) fail("mode='like' needs a 4-D input 1 (like)");
    h = (*like)[2], w = (*like)[3];
  } else if (mode == "size") {
    // As MXNet 1.9.1: scale_height decides for both extents. Given, it scales the height and
    // scale_width (then required) the width; absent, height and width are taken as they are
    // and a lone scale_width is ignored.
    if (a.is_none("scale_height")) {
      h = a.get_int("height"), w = a.get_int("width");
    } else {
      h = times(a.get_float("scale_height"), ih);
      w = times(scale_of("scale_width"), iw);
    }
  } else if (mode == "odd_scale") {
    // An even extent is scaled; an odd one keeps its corners: (extent - 1) * scale + 1.
    const auto odd_scaled = [&](double scale, int64_t extent) {
      return extent % 2 == 0 ? times(scale, extent) : times(scale, extent - 1) + 1;
    };
    h = odd_scaled(scale_of("scale_height"), ih);
    w = odd_scaled(scale_of("scale_width"), iw);
  } else if (mode == "to_even_down" || mode == "to_even_up" || mode == "to_odd_down" || mode == "to_odd_up") {
    // Each extent of the wrong parity moves by one (down or up); height/width and the scales
    // are ignored. to_even_down takes an extent of 1 to 0, an empty output, as MXNet does.
    const bool even = mode.starts_with("to_even"), up = mode.ends_with("_up");
    const auto moved = [&](int64_t extent) {
      return (extent % 2 == 0) == even ? extent : extent + (up ? 1 : -1);
    };
    h = moved(ih), w = moved(iw);
  } else {
    fail("attribute 'mode'='{}' is not supported", mode);
  }
  if (mode == "size" || mode == "like" || mode == "odd_scale") {
    if (h < 1 || w < 1) fail("the output size {}x{} (attributes 'height'/'width' or their scales) must be positive", h, w);
  }
  // MXNet keeps the new extents in an int16_t: larger ones wrap there.
  if (h > 32767 || w > 32767) fail("the output size {}x{} exceeds MXNet's limit of 32767", h, w);
  return {h, w};
}

int64_t sequence_axis(const Shape& data, const Attrs& a, bool only_zero) {
  if (data.size() < 2) fail("input 0 (data) has shape {}: the Sequence ops need (time, batch, ...)", shape_str(data));
  const int64_t axis = a.get_int("axis");
  if (axis != 0 && (only_zero || axis != 1))
    fail("attribute 'axis'={} is not supported: MXNet allows {}", axis, only_zero ? "0" : "0 or 1");
  return axis;
}

}  // namespace ampfuse::ir
