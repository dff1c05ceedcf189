// Reference kernels of the backward ops of ir/ops/tensor_backward.cpp. _backward_slice
// copies the gradient's bits into zeros; the scatters add in the compute type (f32 for
// f16/bf16/f32 gradients, f64 for f64) and round once to the gradient's dtype. Index values
// are read as the forward kernels read them (ir/ops/index_shapes.h).
#include "ir/error.h"
#include "ir/ops/index_shapes.h"
#include "ir/ops/tensor_shapes.h"
#include "runtime/reference/bilinear_taps.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/reference_kernels.h"
#include "runtime/reference/strided_view.h"

#include <cstring>
#include <type_traits>

namespace ampfuse::runtime {

namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

void fill_zeros(Tensor& t) {
  if (t.bytes()) std::memset(t.raw(), 0, t.bytes());  // +0 in every dtype
}

void backward_slice(const ir::Node& n, Inputs in, Outputs out) {
  fill_zeros(out[0]);
  const auto& begin = n.attrs.get_ints("begin");
  const auto& step = n.attrs.get_ints("step");
  const auto strides = dense_strides(out[0].shape());
  StridedView window{in[0].shape(), {}, 0};
  for (size_t d = 0; d < strides.size(); ++d) {
    window.offset += begin[d] * strides[d];
    window.strides.push_back(step[d] * strides[d]);
  }
  strided_copy(in[0], dense_view(in[0].shape()), out[0], window);
}

// Runs scatter(grad, sums) with the gradient loaded in the compute type and sums zeros of
// the output's size, then rounds the sums once into the output.
template <class Scatter>
void scatter_add(Inputs in, Outputs out, Scatter&& scatter) {
  ref::with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> grad = ref::load<T>(in[0]);
    std::vector<T> sums(static_cast<size_t>(out[0].size()), T(0));
    scatter(grad, sums);
    ref::store(sums, out[0]);
  });
}

// Each gradient element goes to the input element its padded position copied (the Pad
// kernel's mapping); constant mode's pad positions copied none.
void backward_pad(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = out[0].shape();
  const ir::PadPlan p = ir::pad_plan(s, n.attrs);
  const auto strides = dense_strides(s);
  scatter_add(in, out, [&](const auto& grad, auto& sums) {
    std::vector<int64_t> index(s.size(), 0);
    for (size_t o = 0; o < grad.size(); ++o) {
      int64_t to = 0;
      bool outside = false;
      for (size_t d = 0; d < s.size(); ++d) {
        const int64_t j = ir::pad_source(p.mode, index[d] - p.before[d], s[d]);
        outside = outside || j < 0;
        to += j * strides[d];
      }
      if (!outside) sums[to] += grad[o];
      for (size_t d = s.size(); d-- > 0;) {
        if (++index[d] < p.out[d]) break;
        index[d] = 0;
      }
    }
  });
}

// take's gradient: grad[p, k, q] added to row fit(indices[k]) of (p, q).
void backward_take(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = out[0].shape();
  const auto axis = static_cast<size_t>(ir::resolve_axis(n.attrs.get_int("axis"), s, "axis"));
  const ir::IndexMode mode = ir::index_mode(n.attrs);
  const int64_t outer = ref::extent(s, 0, axis), inner = ref::extent(s, axis + 1, s.size());
  std::vector<int64_t> rows(static_cast<size_t>(in[1].size()));
  for (int64_t k = 0; k < in[1].size(); ++k) rows[k] = ir::fit_index(in[1].get_f64(k), s[axis], mode, "take");
  scatter_add(in, out, [&](const auto& grad, auto& sums) {
    size_t o = 0;
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t row : rows)
        for (int64_t q = 0; q < inner; ++q) sums[(p * s[axis] + row) * inner + q] += grad[o++];
  });
}

// pick's gradient: grad[p, q] at element fit(index[p, q]) of (p, q); one element each.
void backward_pick(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = out[0].shape();
  const auto axis = static_cast<size_t>(ir::resolve_axis(n.attrs.get_int("axis"), s, "axis"));
  const ir::IndexMode mode = ir::index_mode(n.attrs);
  const int64_t outer = ref::extent(s, 0, axis), inner = ref::extent(s, axis + 1, s.size());
  scatter_add(in, out, [&](const auto& grad, auto& sums) {
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t q = 0; q < inner; ++q) {
        const int64_t o = p * inner + q;
        const int64_t k = ir::fit_index(in[1].get_f64(o), s[axis], mode, "pick");
        sums[(p * s[axis] + k) * inner + q] += grad[o];
      }
  });
}

// gather_nd's gradient: slice y of grad added at data[indices[0, y], ..., indices[M-1, y]].
void backward_gather_nd(const ir::Node&, Inputs in, Outputs out) {
  const Shape& s = out[0].shape();
  const Tensor& idx = in[1];
  const int64_t m = idx.shape()[0], count = idx.size() / m;
  const auto strides = dense_strides(s);
  const int64_t inner = ref::extent(s, static_cast<size_t>(m), s.size());
  scatter_add(in, out, [&](const auto& grad, auto& sums) {
    size_t o = 0;
    for (int64_t y = 0; y < count; ++y) {
      int64_t base = 0;
      for (int64_t d = 0; d < m; ++d) base += ir::gather_nd_index(idx.get_f64(d * count + y), s[d], d) * strides[d];
      for (int64_t q = 0; q < inner; ++q) sums[base + q] += grad[o++];
    }
  });
}

// Bilinear resize's gradient, as MXNet's CPU backward kernel: each output element's
// gradient added to its four neighbours with their weights; equal sizes copy.
void backward_bilinear_resize(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = out[0].shape();
  const Shape& o = in[0].shape();
  const bool align = n.attrs.get_bool("align_corners");
  const int64_t planes = s[0] * s[1], ih = s[2], iw = s[3], oh = o[2], ow = o[3];
  scatter_add(in, out, [&](const auto& grad, auto& sums) {
    using T = typename std::decay_t<decltype(grad)>::value_type;
    if (ih == oh && iw == ow) {
      sums = grad;
      return;
    }
    const auto rows = ref::bilinear_taps<T>(ih, oh, align), cols = ref::bilinear_taps<T>(iw, ow, align);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t y = 0; y < oh; ++y) {
        const ref::BilinearTap<T>& h = rows[y];
        for (int64_t x = 0; x < ow; ++x) {
          const ref::BilinearTap<T>& w = cols[x];
          const T g = grad[(p * oh + y) * ow + x];
          T* plane = sums.data() + p * ih * iw;
          plane[h.lo * iw + w.lo] += h.w_lo * w.w_lo * g;
          plane[h.lo * iw + w.lo + w.step] += h.w_lo * w.w_hi * g;
          plane[(h.lo + h.step) * iw + w.lo] += h.w_hi * w.w_lo * g;
          plane[(h.lo + h.step) * iw + w.lo + w.step] += h.w_hi * w.w_hi * g;
        }
      }
  });
}

}  // namespace

void register_tensor_backward_kernels() {
  register_reference_kernel("_backward_slice", backward_slice);
  register_reference_kernel("_backward_Pad", backward_pad);
  register_reference_kernel("_backward_take", backward_take);
  register_reference_kernel("_backward_pick", backward_pick);
  register_reference_kernel("_backward_gather_nd", backward_gather_nd);
  register_reference_kernel("_backward_BilinearResize2D", backward_bilinear_resize);
}

}  // namespace ampfuse::runtime
