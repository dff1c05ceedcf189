// Reference kernels: argmax, argmin, argmax_channel, norm, nansum, nanprod, topk, sort,
// argsort and the gradients of topk and sort (schemas and shape rules in
// ir/ops/nn_ordering.cpp).
//
// Ties: MXNet's CPU topk, sort and argsort order the indices of each row with std::sort
// (when k * 8 > n) or std::partial_sort (the first k), comparing values with < (ascending)
// or > (descending). Neither is stable, so the order of equal values is whatever those
// algorithms leave; these kernels call the same algorithms with the same comparisons on the
// same initial order 0..n-1, so with the same C++ library (libstdc++) they leave the same
// order, ties and NaNs included (tests/nn_zoo_ops_test.cpp checks this against MXNet).
// One exception: in a row of more than 16 elements a NaN breaks the algorithms' unguarded
// loops (< and > are no ordering with NaN; std::sort may then read outside the row, in
// MXNet too), so such rows order NaNs after all numbers, ascending or descending.
#include "ir/error.h"
#include "ir/ops/nn_ordering.h"
#include "ir/ops/tensor_shapes.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ampfuse::runtime::ref {

namespace {

using ir::nn::AxisRows;

// The flat index of element i of row (o, j).
int64_t row_at(const AxisRows& r, int64_t o, int64_t j, int64_t i) { return (o * r.n + i) * r.inner + j; }

// The index of the first largest (`max`) or smallest element of each row; a NaN beats
// every number, and the first NaN every later one (what MXNet 1.9.1 returns).
void arg_reduce(const AxisRows& r, bool max, const Tensor& in, Tensor& out) {
  with_compute_type({in.dtype()}, [&]<class T>() {
    const std::vector<T> x = load<T>(in);
    std::vector<double> idx(static_cast<size_t>(r.outer * r.inner));
    for (int64_t o = 0; o < r.outer; ++o)
      for (int64_t j = 0; j < r.inner; ++j) {
        int64_t best = 0;
        for (int64_t i = 1; i < r.n && !std::isnan(x[row_at(r, o, j, best)]); ++i) {
          const T v = x[row_at(r, o, j, i)], b = x[row_at(r, o, j, best)];
          if (std::isnan(v) || (max ? v > b : v < b)) best = i;
        }
        idx[o * r.inner + j] = static_cast<double>(best);
      }
    store(idx, out);
  });
}

void arg_reduce_kernel(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out, bool max) {
  arg_reduce(ir::nn::axis_rows(in[0].shape(), node.attrs), max, in[0], out[0]);
}

void argmax_channel(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[0].shape();
  arg_reduce({s[0], s[1], extent(s, 2, s.size()), 1}, true, in[0], out[0]);
}

// For each input element, the flat index of the output element it folds into.
std::vector<int64_t> fold_targets(const ir::Shape& in, const std::vector<bool>& reduced) {
  std::vector<int64_t> target(static_cast<size_t>(ir::num_elements(in)));
  std::vector<int64_t> coord(in.size(), 0);
  for (size_t flat = 0; flat < target.size(); ++flat) {
    int64_t t = 0;
    for (size_t d = 0; d < in.size(); ++d)
      if (!reduced[d]) t = t * in[d] + coord[d];
    target[flat] = t;
    for (size_t d = in.size(); d-- > 0;) {
      if (++coord[d] < in[d]) break;
      coord[d] = 0;
    }
  }
  return target;
}

// Folds `in` over plan's reduced dims: acc = step(acc, x) from `init`, then `finish(acc)`,
// in f64 (as sum and prod do here) and rounded once to the output dtype.
template <class Step, class Finish>
void fold(const Tensor& in, const ir::ReducePlan& plan, double init, Step step, Finish finish, Tensor& out) {
  const std::vector<double> x = load<double>(in);
  const std::vector<int64_t> target = fold_targets(in.shape(), plan.reduced);
  std::vector<double> acc(static_cast<size_t>(out.size()), init);
  for (size_t i = 0; i < x.size(); ++i) acc[target[i]] = step(acc[target[i]], x[i]);
  for (double& a : acc) a = finish(a);
  store(acc, out);
}

void nan_fold(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out, bool prod) {
  const ir::ReducePlan plan = ir::reduce_plan(in[0].shape(), node.attrs);
  const auto identity = [](double a) { return a; };
  if (prod)
    fold(in[0], plan, 1.0, [](double a, double x) { return std::isnan(x) ? a : a * x; }, identity, out[0]);
  else
    fold(in[0], plan, 0.0, [](double a, double x) { return std::isnan(x) ? a : a + x; }, identity, out[0]);
}

void norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  ir::Attrs plan_attrs = node.attrs;
  plan_attrs.set("exclude", false);
  const ir::ReducePlan plan = ir::reduce_plan(in[0].shape(), plan_attrs);
  if (node.attrs.get_int("ord") == 1)
    fold(in[0], plan, 0.0, [](double a, double x) { return a + std::abs(x); }, [](double a) { return a; }, out[0]);
  else
    fold(in[0], plan, 0.0, [](double a, double x) { return a + x * x; }, [](double a) { return std::sqrt(a); },
         out[0]);
}

// The first k indices of each row in MXNet's order (see the file comment).
template <class T>
void order_row(std::vector<int64_t>& idx, const std::vector<T>& vals, int64_t k, bool ascend) {
  std::iota(idx.begin(), idx.end(), int64_t{0});
  const auto n = static_cast<int64_t>(idx.size());
  const bool full_sort = k * 8 > n;
  // std::sort's insertion sort covers rows of up to 16 elements, where NaNs are harmless.
  const bool nan_last = n > 16 && std::any_of(vals.begin(), vals.end(), [](T v) { return std::isnan(v); });
  const auto less = [&](int64_t a, int64_t b) {
    if (nan_last) return !std::isnan(vals[a]) && (std::isnan(vals[b]) || vals[a] < vals[b]);
    return vals[a] < vals[b];
  };
  const auto greater = [&](int64_t a, int64_t b) {
    if (nan_last) return !std::isnan(vals[a]) && (std::isnan(vals[b]) || vals[a] > vals[b]);
    return vals[a] > vals[b];
  };
  if (ascend) {
    if (full_sort) std::sort(idx.begin(), idx.end(), less);
    else std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), less);
  } else {
    if (full_sort) std::sort(idx.begin(), idx.end(), greater);
    else std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), greater);
  }
}

// topk (is_topk) and sort / argsort: `values` and `indices` name the outputs to write
// (either may be null), `mask` topk's mask output; their gradients (_backward_topk,
// _backward_sort) give `dy`, the values' gradient, to scatter into `dx`.
struct SortOutputs {
  Tensor* values = nullptr;
  Tensor* indices = nullptr;
  Tensor* mask = nullptr;
  const Tensor* dy = nullptr;
  Tensor* dx = nullptr;
};

void sort_rows(const ir::Node& node, const Tensor& in, bool is_topk, bool ascend, SortOutputs outs) {
  const ir::nn::SortPlan plan = ir::nn::sort_plan(in.shape(), node.attrs, is_topk);
  const AxisRows& r = plan.rows;
  with_compute_type({in.dtype()}, [&]<class T>() {
    const std::vector<T> x = load<T>(in);
    const size_t kept = static_cast<size_t>(r.outer * plan.k * r.inner);
    std::vector<T> values(outs.values ? kept : 0);
    std::vector<double> indices(outs.indices ? kept : 0);
    std::vector<T> mask(outs.mask ? x.size() : 0, T(0));
    const std::vector<T> dy = outs.dy ? load<T>(*outs.dy) : std::vector<T>();
    std::vector<T> dx(outs.dx ? x.size() : 0, T(0));
    std::vector<T> row(static_cast<size_t>(r.n));
    std::vector<int64_t> idx(static_cast<size_t>(r.n));
    for (int64_t o = 0; o < r.outer; ++o)
      for (int64_t j = 0; j < r.inner; ++j) {
        for (int64_t i = 0; i < r.n; ++i) row[i] = x[row_at(r, o, j, i)];
        order_row(idx, row, plan.k, ascend);
        for (int64_t i = 0; i < plan.k; ++i) {
          const int64_t at = (o * plan.k + i) * r.inner + j;
          if (outs.values) values[at] = row[idx[i]];
          if (outs.indices) indices[at] = static_cast<double>(idx[i]);
          if (outs.mask) mask[row_at(r, o, j, idx[i])] = T(1);
          if (outs.dx) dx[row_at(r, o, j, idx[i])] = dy[at];
        }
      }
    if (outs.values) store(values, *outs.values);
    if (outs.indices) store(indices, *outs.indices);
    if (outs.mask) store(mask, *outs.mask);
    if (outs.dx) store(dx, *outs.dx);
  });
}

void topk(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const std::string& ret = node.attrs.get_string("ret_typ");
  SortOutputs outs;
  if (ret == "value" || ret == "both") outs.values = &out[0];
  if (ret == "indices") outs.indices = &out[0];
  if (ret == "both") outs.indices = &out[1];
  if (ret == "mask") outs.mask = &out[0];
  sort_rows(node, in[0], true, node.attrs.get_bool("is_ascend"), outs);
}

}  // namespace

void register_ordering_kernels() {
  register_reference_kernel("argmax", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    arg_reduce_kernel(n, in, out, true);
  });
  register_reference_kernel("argmin", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    arg_reduce_kernel(n, in, out, false);
  });
  register_reference_kernel("argmax_channel", argmax_channel);
  register_reference_kernel("norm", norm);
  register_reference_kernel("nansum", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    nan_fold(n, in, out, false);
  });
  register_reference_kernel("nanprod", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    nan_fold(n, in, out, true);
  });
  register_reference_kernel("topk", topk);
  register_reference_kernel("sort", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    sort_rows(n, in[0], false, n.attrs.get_bool("is_ascend"), {.values = &out[0]});
  });
  register_reference_kernel("argsort", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    sort_rows(n, in[0], false, n.attrs.get_bool("is_ascend"), {.indices = &out[0]});
  });
  register_reference_kernel("_backward_topk", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    sort_rows(n, in[0], true, n.attrs.get_bool("is_ascend"), {.dy = &in[1], .dx = &out[0]});
  });
  register_reference_kernel("_backward_sort", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    sort_rows(n, in[0], false, n.attrs.get_bool("is_ascend"), {.dy = &in[1], .dx = &out[0]});
  });
}

}  // namespace ampfuse::runtime::ref
