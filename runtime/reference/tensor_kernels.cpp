// Reference kernels of the tensor ops (ir/ops/tensor.cpp). Data movement copies bits through
// one strided gather (runtime/reference/strided_view.h), so every dtype moves exactly;
// reductions accumulate in f64 and round once to the output dtype.
#include "ir/error.h"
#include "ir/ops/tensor_shapes.h"
#include "runtime/reference/reference_kernels.h"
#include "runtime/reference/strided_view.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ampfuse::runtime {

namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

void register_all(std::initializer_list<const char*> names, const ReferenceKernel& k) {
  for (const char* n : names) register_reference_kernel(n, k);
}

// ---- views: the output holds the input's elements in the same order ------------------

void copy_bytes(const Tensor& in, Tensor& out) {
  if (in.bytes() != out.bytes())
    fail("internal error: copy from {} to {}", ir::type_str(in.type()), ir::type_str(out.type()));
  if (in.bytes()) std::memcpy(out.raw(), in.raw(), in.bytes());
}

void copy_all(const ir::Node&, Inputs in, Outputs out) { copy_bytes(in[0], out[0]); }

// ---- permutations, slices, broadcasts: one gather each --------------------------------

void gather(const Tensor& in, const StridedView& from, Tensor& out) {
  strided_copy(in, from, out, dense_view(out.shape()));
}

void permute(const Tensor& in, const std::vector<int64_t>& perm, Tensor& out) {
  const auto strides = dense_strides(in.shape());
  StridedView from{out.shape(), {}, 0};
  for (int64_t d : perm) from.strides.push_back(strides[d]);
  gather(in, from, out);
}

void transpose(const ir::Node& n, Inputs in, Outputs out) {
  permute(in[0], ir::transpose_permutation(in[0].shape(), n.attrs.get_ints("axes")), out[0]);
}

void swap_axis(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  std::vector<int64_t> perm;
  for (size_t d = 0; d < s.size(); ++d) perm.push_back(static_cast<int64_t>(d));
  std::swap(perm[ir::resolve_axis(n.attrs.get_int("dim1"), s, "dim1")],
            perm[ir::resolve_axis(n.attrs.get_int("dim2"), s, "dim2")]);
  permute(in[0], perm, out[0]);
}

void slice_into(const Tensor& in, const std::vector<ir::SliceDim>& dims, Tensor& out) {
  const auto strides = dense_strides(in.shape());
  StridedView from{out.shape(), {}, 0};
  for (size_t d = 0; d < dims.size(); ++d) {
    from.offset += dims[d].begin * strides[d];
    from.strides.push_back(dims[d].step * strides[d]);
  }
  gather(in, from, out);
}

void slice(const ir::Node& n, Inputs in, Outputs out) { slice_into(in[0], ir::slice_dims(in[0].shape(), n.attrs), out[0]); }
void slice_axis(const ir::Node& n, Inputs in, Outputs out) {
  slice_into(in[0], ir::slice_axis_dims(in[0].shape(), n.attrs), out[0]);
}
void slice_like(const ir::Node& n, Inputs in, Outputs out) {
  slice_into(in[0], ir::slice_like_dims(in[0].shape(), in[1].shape(), n.attrs), out[0]);
}

// Every broadcast op keeps the rank: a dim of extent 1 grown in the output reads stride 0.
void broadcast(const ir::Node&, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  if (s.size() != out[0].shape().size())
    fail("internal error: broadcast from {} to {}", ir::shape_str(s), ir::shape_str(out[0].shape()));
  const auto strides = dense_strides(s);
  StridedView from{out[0].shape(), {}, 0};
  for (size_t d = 0; d < s.size(); ++d) from.strides.push_back(s[d] == 1 ? 0 : strides[d]);
  gather(in[0], from, out[0]);
}

// ---- joins and splits -----------------------------------------------------------------

void concat(const ir::Node& n, Inputs in, Outputs out) {
  const int64_t axis = ir::resolve_axis(n.attrs.get_int("dim"), in[0].shape(), "dim");
  const auto strides = dense_strides(out[0].shape());
  int64_t position = 0;
  for (const Tensor& part : in) {
    strided_copy(part, dense_view(part.shape()), out[0], {part.shape(), strides, position * strides[axis]});
    position += part.shape()[axis];
  }
}

void stack(const ir::Node& n, Inputs in, Outputs out) {
  const int64_t axis = ir::resolve_insert_axis(n.attrs.get_int("axis"), in[0].shape(), "axis");
  auto strides = dense_strides(out[0].shape());
  const int64_t step = strides[axis];
  strides.erase(strides.begin() + axis);  // each input fills the output with the new dim fixed
  for (size_t k = 0; k < in.size(); ++k)
    strided_copy(in[k], dense_view(in[k].shape()), out[0], {in[k].shape(), strides, static_cast<int64_t>(k) * step});
}

void slice_channel(const ir::Node& n, Inputs in, Outputs out) {
  const Shape& s = in[0].shape();
  const int64_t axis = ir::resolve_axis(n.attrs.get_int("axis"), s, "axis");
  const int64_t chunk = s[axis] / static_cast<int64_t>(out.size());
  // Squeezing a dim of extent 1 does not move elements, so every output is gathered with
  // the unsqueezed chunk shape.
  Shape part = s;
  part[axis] = chunk;
  const auto strides = dense_strides(s);
  for (size_t k = 0; k < out.size(); ++k) {
    if (ir::num_elements(part) != out[k].size())
      fail("internal error: SliceChannel part {} into {}", ir::shape_str(part), ir::type_str(out[k].type()));
    strided_copy(in[0], {part, strides, static_cast<int64_t>(k) * chunk * strides[axis]}, out[k], dense_view(part));
  }
}

// ---- reductions ------------------------------------------------------------------------

// The input walked with its kept dims outermost and reduced dims innermost, so each run of
// `group` consecutive offsets feeds one output element, in the output's row-major order.
struct ReductionWalk {
  StridedView view;
  int64_t group = 1;
};

ReductionWalk reduction_walk(const Tensor& in, const ir::ReducePlan& plan) {
  const Shape& s = in.shape();
  const auto strides = dense_strides(s);
  ReductionWalk w;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t d = 0; d < s.size(); ++d)
      if (plan.reduced[d] == (pass == 1)) {
        w.view.shape.push_back(s[d]);
        w.view.strides.push_back(strides[d]);
        if (pass == 1) w.group *= s[d];
      }
  return w;
}

enum class Fold { sum, mean, prod };

void fold(Fold f, const ir::Node& n, Inputs in, Outputs out) {
  const ReductionWalk w = reduction_walk(in[0], ir::reduce_plan(in[0].shape(), n.attrs));
  const double start = f == Fold::prod ? 1.0 : 0.0;
  auto finish = [&](double acc) { return f == Fold::mean ? acc / static_cast<double>(w.group) : acc; };
  if (w.group == 0) {  // every output folds nothing: sum 0, prod 1, mean NaN (0/0)
    for (int64_t o = 0; o < out[0].size(); ++o) out[0].set_f64(o, finish(start));
    return;
  }
  double acc = start;
  int64_t count = 0, o = 0;
  for_each_offset(w.view, [&](int64_t off) {
    const double v = in[0].get_f64(off);
    acc = f == Fold::prod ? acc * v : acc + v;
    if (++count == w.group) {
      out[0].set_f64(o++, finish(acc));
      acc = start;
      count = 0;
    }
  });
}

// max and min return one of the input elements, copied bit for bit; the first NaN wins,
// as the NaN-propagating max/min of ir/scalar_program.h.
void select(bool want_max, const ir::Node& n, Inputs in, Outputs out) {
  const Tensor& x = in[0];
  const ReductionWalk w = reduction_walk(x, ir::reduce_plan(x.shape(), n.attrs));
  if (w.group == 0) {  // the identity of an empty max / min
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t o = 0; o < out[0].size(); ++o) out[0].set_f64(o, want_max ? -inf : inf);
    return;
  }
  // i64 compares exactly; every other dtype is exact as a double.
  auto better = [&](int64_t a, int64_t b) {
    if (x.dtype() == DType::i64) {
      const int64_t va = x.data<int64_t>()[a], vb = x.data<int64_t>()[b];
      return want_max ? va > vb : va < vb;
    }
    const double va = x.get_f64(a), vb = x.get_f64(b);
    return std::isnan(va) || (want_max ? va > vb : va < vb);
  };
  const size_t bytes = ir::dtype_size(x.dtype());
  const auto* src = static_cast<const std::byte*>(x.raw());
  auto* dst = static_cast<std::byte*>(out[0].raw());
  int64_t best = -1, count = 0, o = 0;
  for_each_offset(w.view, [&](int64_t off) {
    if (best < 0 || (!std::isnan(x.get_f64(best)) && better(off, best))) best = off;
    if (++count == w.group) {
      std::memcpy(dst + o++ * bytes, src + best * bytes, bytes);
      best = -1;
      count = 0;
    }
  });
}

// ---- overflow checks --------------------------------------------------------------------

bool all_elements_finite(const Tensor& t) {
  if (!ir::is_float(t.dtype())) return true;
  for (int64_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t.get_f64(i))) return false;
  return true;
}

void all_finite(const ir::Node&, Inputs in, Outputs out) {
  bool finite = true;
  for (const Tensor& t : in) finite = finite && all_elements_finite(t);
  out[0].set_f64(0, finite ? 1.0 : 0.0);
}

// ---- sources and casts --------------------------------------------------------------------

void fill(Outputs out, double value) {
  for (int64_t i = 0; i < out[0].size(); ++i) out[0].set_f64(i, value);
}

void amp_multicast(const ir::Node&, Inputs in, Outputs out) {
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].dtype() == out[k].dtype()) {
      copy_bytes(in[k], out[k]);
      continue;
    }
    // Widening is exact and narrowing rounds once to nearest even (Tensor::set_f64).
    for (int64_t i = 0; i < in[k].size(); ++i) out[k].set_f64(i, in[k].get_f64(i));
  }
}

}  // namespace

void register_tensor_kernels() {
  register_all({"Reshape", "Flatten", "expand_dims", "squeeze"}, copy_all);
  register_all({"transpose"}, transpose);
  register_all({"SwapAxis"}, swap_axis);
  register_all({"Concat"}, concat);
  register_all({"stack"}, stack);
  register_all({"SliceChannel"}, slice_channel);
  register_all({"slice"}, slice);
  register_all({"slice_axis"}, slice_axis);
  register_all({"slice_like"}, slice_like);
  register_all({"broadcast_to", "broadcast_axis", "broadcast_like"}, broadcast);
  register_all({"sum"}, [](const ir::Node& n, Inputs in, Outputs out) { fold(Fold::sum, n, in, out); });
  register_all({"mean"}, [](const ir::Node& n, Inputs in, Outputs out) { fold(Fold::mean, n, in, out); });
  register_all({"prod"}, [](const ir::Node& n, Inputs in, Outputs out) { fold(Fold::prod, n, in, out); });
  register_all({"max"}, [](const ir::Node& n, Inputs in, Outputs out) { select(true, n, in, out); });
  register_all({"min"}, [](const ir::Node& n, Inputs in, Outputs out) { select(false, n, in, out); });
  register_all({"all_finite", "multi_all_finite"}, all_finite);
  register_all({"_zeros"}, [](const ir::Node&, Inputs, Outputs out) { fill(out, 0.0); });
  register_all({"_ones"}, [](const ir::Node&, Inputs, Outputs out) { fill(out, 1.0); });
  register_all({"_full"}, [](const ir::Node& n, Inputs, Outputs out) { fill(out, n.attrs.get_float("value")); });
  register_all({"amp_multicast"}, amp_multicast);
}

}  // namespace ampfuse::runtime
