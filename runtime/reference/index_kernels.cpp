// Reference kernels of the indexing and data-movement ops (ir/ops/tensor_index.cpp). Pure
// re-indexing (reverse, tile, repeat, depth_to_space, space_to_depth, Crop, UpSampling's
// concat) is one strided gather (runtime/reference/strided_view.h), bit for bit in every
// dtype; gathers through index tensors copy element bytes too. Index values are read as
// MXNet reads them: any dtype, truncated toward zero.
#include "ir/error.h"
#include "ir/lowp.h"
#include "ir/ops/index_shapes.h"
#include "ir/ops/tensor_shapes.h"
#include "runtime/reference/bilinear_taps.h"
#include "runtime/reference/reference_kernels.h"
#include "runtime/reference/strided_view.h"

#include <cmath>
#include <cstring>

namespace ampfuse::runtime {

namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;
using ir::DType;

void copy_element(const Tensor& src, int64_t from, Tensor& dst, int64_t to) {
  const size_t bytes = ir::dtype_size(src.dtype());
  std::memcpy(static_cast<std::byte*>(dst.raw()) + to * bytes, static_cast<const std::byte*>(src.raw()) + from * bytes,
              bytes);
}

// ---- ranges -------------------------------------------------------------------------------

// start + k * step as MXNet computes it in dtype `t` (mshadow's half types round after
// each operation; integer dtypes got integral start and step from ir::arange_spec).
double range_value(DType t, double start, double step, int64_t k) {
  const double kd = static_cast<double>(k);
  switch (t) {
    case DType::f64: return start + kd * step;
    case DType::f32: return static_cast<float>(static_cast<float>(start) + static_cast<float>(kd) * static_cast<float>(step));
    case DType::f16: {
      auto r = [](float x) { return ir::round_to_f16(x); };
      return r(r(start) + r(r(static_cast<float>(kd)) * r(step)));
    }
    case DType::bf16: {
      auto r = [](float x) { return ir::round_to_bf16(x); };
      return r(r(start) + r(r(static_cast<float>(kd)) * r(step)));
    }
    default: return start + kd * step;
  }
}

void fill_range(Tensor& out, double start, double step, int64_t repeat) {
  for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, range_value(out.dtype(), start, step, i / repeat));
}

void arange(const ir::Node& n, Inputs, Outputs out) {
  const ir::ArangeSpec s = ir::arange_spec(n.attrs);
  fill_range(out[0], s.start, s.step, s.repeat);
}

void arange_like(const ir::Node& n, Inputs, Outputs out) {
  const bool integral = !ir::is_float(out[0].dtype());
  const auto value = [&](const char* attr) {
    const double v = n.attrs.get_float(attr);
    return integral ? std::trunc(v) : v;
  };
  fill_range(out[0], value("start"), value("step"), n.attrs.get_int("repeat"));
}

void shape_array(const ir::Node&, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  for (size_t d = 0; d < s.size(); ++d) out[0].data<int64_t>()[d] = s[d];
}

void size_array(const ir::Node&, Inputs in, Outputs out) { out[0].data<int64_t>()[0] = in[0].size(); }

// ---- strided re-indexing -------------------------------------------------------------------

// Copies `from` (a view of in) densely into out, whose element count it has.
void gather(const Tensor& in, const StridedView& from, Tensor& out) {
  if (ir::num_elements(from.shape) != out.size())
    fail("internal error: gather of {} into {}", ir::shape_str(from.shape), ir::type_str(out.type()));
  strided_copy(in, from, out, dense_view(from.shape));
}

void reverse(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const auto strides = dense_strides(s);
  StridedView from{s, strides, 0};
  std::vector<bool> flip(s.size(), false);
  for (int64_t axis : n.attrs.get_ints("axis")) flip[axis] = !flip[axis];  // checked by inference
  for (size_t d = 0; d < s.size(); ++d)
    if (flip[d] && s[d] > 0) from.offset += (s[d] - 1) * strides[d], from.strides[d] = -strides[d];
  gather(in[0], from, out[0]);
}

// Output dim d of extent reps*n is walked as (rep, i) with the input's stride on i alone.
void tile(const ir::Node& n, Inputs in, Outputs out) {
  const ir::TilePlan p = ir::tile_plan(in[0].shape(), n.attrs);
  const auto strides = dense_strides(p.in_view);
  StridedView from;
  for (size_t d = 0; d < p.in_view.size(); ++d) {
    from.shape.push_back(p.out[d] / std::max<int64_t>(p.in_view[d], 1));
    from.strides.push_back(0);
    from.shape.push_back(p.in_view[d]);
    from.strides.push_back(strides[d]);
  }
  gather(in[0], from, out[0]);
}

// The repeated axis is walked as (i, copy) with stride 0 on the copy.
void repeat(const ir::Node& n, Inputs in, Outputs out) {
  const ir::RepeatPlan p = ir::repeat_plan(in[0].shape(), n.attrs);
  const auto strides = dense_strides(p.in_view);
  StridedView from;
  for (size_t d = 0; d < p.in_view.size(); ++d) {
    from.shape.push_back(p.in_view[d]);
    from.strides.push_back(strides[d]);
    if (static_cast<int64_t>(d) == p.axis) from.shape.push_back(p.repeats), from.strides.push_back(0);
  }
  gather(in[0], from, out[0]);
}

// depth_to_space: out[n, c, h*b + i, w*b + j] = in[n, (i*b + j)*C' + c, h, w], walked in
// the output's order (n, c, h, i, w, j).
void depth_to_space(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const int64_t b = n.attrs.get_int("block_size"), c_out = s[1] / (b * b);
  const auto st = dense_strides(s);
  gather(in[0],
         {{s[0], c_out, s[2], b, s[3], b}, {st[0], st[1], st[2], b * c_out * st[1], st[3], c_out * st[1]}, 0},
         out[0]);
}

// space_to_depth: out[n, (i*b + j)*C + c, h, w] = in[n, c, h*b + i, w*b + j], walked in
// the output's order (n, i, j, c, h, w).
void space_to_depth(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const int64_t b = n.attrs.get_int("block_size");
  const auto st = dense_strides(s);
  gather(in[0], {{s[0], b, b, s[1], s[2] / b, s[3] / b}, {st[0], st[2], st[3], st[1], b * st[2], b * st[3]}, 0},
         out[0]);
}

void crop(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const ir::CropWindow w = ir::crop_window(s, in.size() > 1 ? &in[1].shape() : nullptr, n.attrs);
  const auto st = dense_strides(s);
  gather(in[0], {out[0].shape(), st, w.top * st[2] + w.left * st[3]}, out[0]);
}

// ---- gathers through index tensors -----------------------------------------------------------

// take: out[p, k, q] = a[p, fit(indices[k]), q], with p the dims before axis, q after.
void take(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const int64_t axis = ir::resolve_axis(n.attrs.get_int("axis"), s, "axis");
  const ir::IndexMode mode = ir::index_mode(n.attrs);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const Tensor& idx = in[1];
  std::vector<int64_t> rows(static_cast<size_t>(idx.size()));
  for (int64_t k = 0; k < idx.size(); ++k) rows[k] = ir::fit_index(idx.get_f64(k), s[axis], mode, "take");
  int64_t o = 0;
  for (int64_t p = 0; p < outer; ++p)
    for (int64_t row : rows)
      for (int64_t q = 0; q < inner; ++q) copy_element(in[0], (p * s[axis] + row) * inner + q, out[0], o++);
}

// pick: out[p, q] = data[p, fit(index[p, q]), q]; the index holds one entry per output
// element, in the same order (keepdims or not).
void pick(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const int64_t axis = ir::resolve_axis(n.attrs.get_int("axis"), s, "axis");
  const ir::IndexMode mode = ir::index_mode(n.attrs);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  for (int64_t p = 0; p < outer; ++p)
    for (int64_t q = 0; q < inner; ++q) {
      const int64_t o = p * inner + q;
      const int64_t k = ir::fit_index(in[1].get_f64(o), s[axis], mode, "pick");
      copy_element(in[0], (p * s[axis] + k) * inner + q, out[0], o);
    }
}

// gather_nd: out[y, q] = data[indices[0, y], ..., indices[M-1, y], q]. As MXNet, an index
// in [-n, 0) counts from the end; anything else outside [0, n) is an error.
void gather_nd(const ir::Node&, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const Tensor& idx = in[1];
  const int64_t m = idx.shape()[0], count = idx.size() / m;
  const auto strides = dense_strides(s);
  const int64_t inner = m < static_cast<int64_t>(s.size()) ? strides[m - 1] : 1;
  int64_t o = 0;
  for (int64_t y = 0; y < count; ++y) {
    int64_t base = 0;
    for (int64_t d = 0; d < m; ++d) base += ir::gather_nd_index(idx.get_f64(d * count + y), s[d], d) * strides[d];
    for (int64_t q = 0; q < inner; ++q) copy_element(in[0], base + q, out[0], o++);
  }
}

void one_hot(const ir::Node& n, Inputs in, Outputs out) {
  const int64_t depth = n.attrs.get_int("depth");
  const double on = n.attrs.get_float("on_value"), off = n.attrs.get_float("off_value");
  for (int64_t k = 0; k < in[0].size(); ++k) {
    const double raw = in[0].get_f64(k);
    // An index outside [0, depth) (or NaN) gives a row of off_value, as MXNet.
    const double t = std::isnan(raw) ? -1.0 : std::trunc(raw);
    for (int64_t j = 0; j < depth; ++j) out[0].set_f64(k * depth + j, t == static_cast<double>(j) ? on : off);
  }
}

// ---- pads and upsampling ----------------------------------------------------------------------

void pad(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const ir::PadPlan p = ir::pad_plan(s, n.attrs);
  const double value = n.attrs.get_float("constant_value");
  const auto strides = dense_strides(s);
  const size_t rank = s.size();
  std::vector<int64_t> index(rank, 0);
  for (int64_t o = 0; o < out[0].size(); ++o) {
    int64_t from = 0;
    bool outside = false;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t j = ir::pad_source(p.mode, index[d] - p.before[d], s[d]);
      outside = outside || j < 0;
      from += j * strides[d];
    }
    if (outside) out[0].set_f64(o, value);
    else copy_element(in[0], from, out[0], o);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < p.out[d]) break;
      index[d] = 0;
    }
  }
}

// Nearest upsampling: each input's (y, x) element fills a factor x factor block. concat
// stacks the inputs' channels (a strided gather each); sum adds them in f32 (f64 for f64)
// and rounds once, where MXNet's half kernels round after each addition.
void upsampling(const ir::Node& n, Inputs in, Outputs out) {
  if (ir::is_bilinear_upsampling(n.attrs)) {
    // The depthwise Deconvolution it is in MXNet (ir/ops/index_shapes.h), on that kernel.
    ir::Node deconv = n;
    deconv.op = "Deconvolution";
    deconv.attrs = ir::bilinear_upsampling_deconv_attrs(n.attrs, in[0].shape().at(1));
    const ReferenceKernel* k = find_reference_kernel("Deconvolution");
    if (!k) fail("node '{}': bilinear UpSampling needs the Deconvolution reference kernel", n.name);
    (*k)(deconv, in, out);
    return;
  }
  std::vector<Shape> shapes;
  for (const Tensor& t : in) shapes.push_back(t.shape());
  const ir::UpSamplingPlan p = ir::upsampling_plan(shapes, n.attrs);
  const auto out_strides = dense_strides(p.out);
  const bool sum = n.attrs.get_string("multi_input_mode") == "sum";
  std::vector<double> acc(sum ? static_cast<size_t>(out[0].size()) : 0, 0.0);
  const bool wide = out[0].dtype() == DType::f64;
  int64_t channel = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const Shape& s = shapes[k];
    const int64_t f = p.factors[k];
    const auto st = dense_strides(s);
    const StridedView from{{s[0], s[1], s[2], f, s[3], f}, {st[0], st[1], st[2], 0, st[3], 0}, 0};
    const StridedView to{from.shape,
                         {out_strides[0], out_strides[1], f * out_strides[2], out_strides[2], f, 1},
                         channel * out_strides[1]};
    if (!sum) {
      strided_copy(in[k], from, out[0], to);
      channel += s[1];
      continue;
    }
    for_each_offset_pair(from, to, [&](int64_t a, int64_t b) {
      acc[b] = wide ? acc[b] + in[k].get_f64(a) : static_cast<float>(acc[b] + in[k].get_f64(a));
    });
  }
  for (size_t i = 0; i < acc.size(); ++i) out[0].set_f64(static_cast<int64_t>(i), acc[i]);
}

// Bilinear resize as MXNet's CPU kernel computes it, in f32 (f64 for f64 data) and in its
// order of operations (the taps: runtime/reference/bilinear_taps.h). Equal sizes copy.
template <class T>
void bilinear_resize_in(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const Shape& o = out[0].shape();
  const bool align = n.attrs.get_bool("align_corners");
  const int64_t planes = s[0] * s[1], ih = s[2], iw = s[3], oh = o[2], ow = o[3];
  if (ih == oh && iw == ow) {
    if (in[0].bytes()) std::memcpy(out[0].raw(), in[0].raw(), in[0].bytes());
    return;
  }
  const auto rows = ref::bilinear_taps<T>(ih, oh, align), cols = ref::bilinear_taps<T>(iw, ow, align);
  for (int64_t y = 0; y < oh; ++y) {
    const ref::BilinearTap<T>& h = rows[y];
    for (int64_t x = 0; x < ow; ++x) {
      const ref::BilinearTap<T>& w = cols[x];
      for (int64_t p = 0; p < planes; ++p) {
        const int64_t base = p * ih * iw;
        const auto at = [&](int64_t r, int64_t c) { return static_cast<T>(in[0].get_f64(base + r * iw + c)); };
        const T v = h.w_lo * (w.w_lo * at(h.lo, w.lo) + w.w_hi * at(h.lo, w.lo + w.step)) +
                    h.w_hi * (w.w_lo * at(h.lo + h.step, w.lo) + w.w_hi * at(h.lo + h.step, w.lo + w.step));
        out[0].set_f64(p * oh * ow + y * ow + x, static_cast<double>(v));
      }
    }
  }
}

void bilinear_resize(const ir::Node& n, Inputs in, Outputs out) {
  if (in[0].dtype() == DType::f64) bilinear_resize_in<double>(n, in, out);
  else bilinear_resize_in<float>(n, in, out);
}

// ---- sequences ----------------------------------------------------------------------------------

// Sequence lengths per batch entry, truncated; all `steps` without use_sequence_length.
std::vector<int64_t> sequence_lengths(Inputs in, int64_t batch, int64_t steps) {
  std::vector<int64_t> len(static_cast<size_t>(batch), steps);
  if (in.size() > 1)
    for (int64_t b = 0; b < batch; ++b) {
      const double raw = in[1].get_f64(b);
      len[b] = std::isnan(raw) ? 0 : static_cast<int64_t>(std::clamp(std::trunc(raw), -1.0, static_cast<double>(steps) + 1));
    }
  return len;
}

// The offset of element (t, b, 0) and the size of one (t, b) block, for data with its time
// axis at `axis` (0: (T, B, ...), 1: (B, T, ...)).
struct SequenceLayout {
  int64_t steps, batch, block;
  int64_t axis;
  int64_t at(int64_t t, int64_t b) const { return (axis == 0 ? t * batch + b : b * steps + t) * block; }
};

SequenceLayout sequence_layout(const ir::Node& n, const Shape& s) {
  const int64_t axis = ir::sequence_axis(s, n.attrs, false);
  int64_t block = 1;
  for (size_t d = 2; d < s.size(); ++d) block *= s[d];
  return {s[axis], s[1 - axis], block, axis};
}

void sequence_mask(const ir::Node& n, Inputs in, Outputs out) {
  const SequenceLayout l = sequence_layout(n, in[0].shape());
  const auto len = sequence_lengths(in, l.batch, l.steps);
  const double value = n.attrs.get_float("value");
  if (in[0].bytes()) std::memcpy(out[0].raw(), in[0].raw(), in[0].bytes());
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t t = std::max<int64_t>(len[b], 0); t < l.steps; ++t)
      for (int64_t e = 0; e < l.block; ++e) out[0].set_f64(l.at(t, b) + e, value);
}

// The element at step length-1 of each sequence. A length outside [1, T] makes MXNet read
// outside the tensor; ampfuse defines the result as zeros there.
void sequence_last(const ir::Node& n, Inputs in, Outputs out) {
  const SequenceLayout l = sequence_layout(n, in[0].shape());
  const auto len = sequence_lengths(in, l.batch, l.steps);
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t e = 0; e < l.block; ++e) {
      if (len[b] < 1 || len[b] > l.steps) out[0].set_f64(b * l.block + e, 0.0);
      else copy_element(in[0], l.at(len[b] - 1, b) + e, out[0], b * l.block + e);
    }
}

// The first length steps of each sequence reversed, the rest kept. A length past T is read
// as T (MXNet reads outside the tensor there); one below 1 keeps the sequence.
void sequence_reverse(const ir::Node& n, Inputs in, Outputs out) {
  const SequenceLayout l = sequence_layout(n, in[0].shape());
  const auto len = sequence_lengths(in, l.batch, l.steps);
  for (int64_t b = 0; b < l.batch; ++b) {
    const int64_t k = std::clamp<int64_t>(len[b], 0, l.steps);
    for (int64_t t = 0; t < l.steps; ++t) {
      const int64_t src = t < k ? k - 1 - t : t;
      for (int64_t e = 0; e < l.block; ++e) copy_element(in[0], l.at(src, b) + e, out[0], l.at(t, b) + e);
    }
  }
}

}  // namespace

void register_index_kernels() {
  register_reference_kernel("_arange", arange);
  register_reference_kernel("_contrib_arange_like", arange_like);
  register_reference_kernel("shape_array", shape_array);
  register_reference_kernel("size_array", size_array);
  register_reference_kernel("reverse", reverse);
  register_reference_kernel("tile", tile);
  register_reference_kernel("repeat", repeat);
  register_reference_kernel("reshape_like", [](const ir::Node&, Inputs in, Outputs out) {
    if (in[0].bytes()) std::memcpy(out[0].raw(), in[0].raw(), in[0].bytes());
  });
  register_reference_kernel("depth_to_space", depth_to_space);
  register_reference_kernel("space_to_depth", space_to_depth);
  register_reference_kernel("Crop", crop);
  register_reference_kernel("take", take);
  register_reference_kernel("pick", pick);
  register_reference_kernel("gather_nd", gather_nd);
  register_reference_kernel("one_hot", one_hot);
  register_reference_kernel("Pad", pad);
  register_reference_kernel("UpSampling", upsampling);
  register_reference_kernel("_contrib_BilinearResize2D", bilinear_resize);
  register_reference_kernel("SequenceMask", sequence_mask);
  register_reference_kernel("SequenceLast", sequence_last);
  register_reference_kernel("SequenceReverse", sequence_reverse);
}

}  // namespace ampfuse::runtime
