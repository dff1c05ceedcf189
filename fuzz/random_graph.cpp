#include "fuzz/random_graph.h"

#include "engine/passes/dce.h"
#include "ir/builder.h"
#include "ir/error.h"
#include "runtime/random.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace ampfuse::fuzz {

namespace {

using ir::DType;
using ir::Shape;
using ir::ValueRef;

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  RandomGraph run() {
    RandomGraph out;
    out.transcendental = pick(10) < 3;
    const Shape base = base_shape();
    const int inputs = 1 + pick(3);
    for (int i = 0; i < inputs; ++i) add_input(fmt::format("x{}", i), base, float_dtype());
    if (pick(2) == 0) add_input("b", broadcast_shape(base), float_dtype());
    if (pick(8) == 0) add_input("d", base, DType::f64);
    if (!base.empty() && base[0] > 1 && pick(4) == 0) add_slice_of_input(base);

    const int ops = 1 + pick(8);
    for (int k = 0; k < ops; ++k) exact_op();
    if (out.transcendental) {
      transcendental_op();
      for (int k = pick(3); k > 0; --k) stable_op();
    }
    // The last value and up to two other computed values are outputs.
    b_.output(values_.back().v);
    for (int k = pick(3); k > 0 && computed_.size() > 1; --k) {
      const ValueRef v = computed_[pick(static_cast<int>(computed_.size()))];
      if (std::find(outputs_.begin(), outputs_.end(), v) == outputs_.end() && v != values_.back().v) {
        outputs_.push_back(v);
        b_.output(v);
      }
    }
    out.graph = b_.finish(true);
    engine::dce(out.graph);  // values no output reads never become kernels
    return out;
  }

 private:
  struct Value {
    ValueRef v;
    Shape shape;
    DType dtype;
  };

  int pick(int n) { return static_cast<int>(rng_.next() % static_cast<uint64_t>(n)); }
  double unit() { return rng_.next_unit(); }

  Shape base_shape() {
    if (pick(40) == 0) return {(int64_t{1} << 20) + 3};
    static constexpr int64_t kExtents[] = {1, 2, 3, 7, 31, 5, 13, 17, 64, 4};
    Shape s(1 + pick(4));
    for (int64_t& e : s) e = kExtents[pick(10)];
    if (pick(25) == 0) s[pick(static_cast<int>(s.size()))] = 0;
    return s;
  }

  // `base` with some extents 1 or with leading dims dropped: numpy-broadcasts to base.
  Shape broadcast_shape(const Shape& base) {
    Shape s = base;
    if (pick(3) == 0 && s.size() > 1) s.erase(s.begin(), s.begin() + 1 + pick(static_cast<int>(s.size()) - 1));
    for (int64_t& e : s)
      if (pick(2) == 0) e = 1;
    return s;
  }

  DType float_dtype() {
    const int r = pick(7);
    return r < 3 ? DType::f32 : r < 5 ? DType::f16 : DType::bf16;
  }

  void add_input(const std::string& name, const Shape& shape, DType dtype) {
    values_.push_back({b_.input(name, {dtype, shape}), shape, dtype});
  }

  // A slice along axis 0 of a larger input: kernels read it at an offset.
  void add_slice_of_input(const Shape& base) {
    Shape big = base;
    const int64_t begin = 1 + pick(3);
    big[0] = base[0] + begin + pick(3);
    const DType dt = float_dtype();
    const ValueRef x = b_.input("s", {dt, big});
    const ValueRef sl = b_.op("slice_axis", {x}, {{"axis", "0"}, {"begin", std::to_string(begin)},
                                                  {"end", std::to_string(begin + base[0])}});
    push(sl, base, dt);
  }

  void push(ValueRef v, Shape shape, DType dtype) {
    values_.push_back({v, std::move(shape), dtype});
    computed_.push_back(v);
  }

  const Value& any_value() { return values_[pick(static_cast<int>(values_.size()))]; }
  // Prefer recent values, so chains grow long.
  const Value& recent_value() {
    const int n = static_cast<int>(values_.size());
    return values_[std::max(0, n - 1 - pick(3))];
  }

  static bool broadcastable(const Shape& a, const Shape& b) {
    for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
      const int64_t x = a[a.size() - 1 - k], y = b[b.size() - 1 - k];
      if (x != y && x != 1 && y != 1) return false;
    }
    return true;
  }
  static Shape broadcast_result(const Shape& a, const Shape& b) {
    Shape r(std::max(a.size(), b.size()));
    for (size_t k = 0; k < r.size(); ++k) {
      const int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1, y = k < b.size() ? b[b.size() - 1 - k] : 1;
      r[r.size() - 1 - k] = x == 1 ? y : x;
    }
    return r;
  }

  // `v` in dtype `dt` (an amp_cast when it differs).
  ValueRef as_dtype(const Value& v, DType dt) {
    if (v.dtype == dt) return v.v;
    return b_.op("Cast", {v.v}, {{"dtype", std::string(ir::mxnet_dtype_name(dt))}});
  }

  std::string scalar() {
    static constexpr const char* kScalars[] = {"0.5", "2", "-1.5", "3", "0", "1e-3", "100", "-0.25", "65504", "1e30"};
    return kScalars[pick(10)];
  }

  void unary(const Value& x, const std::string& op, std::map<std::string, std::string> attrs = {}) {
    push(b_.op(op, {x.v}, std::move(attrs)), x.shape, x.dtype);
  }

  void exact_op() {
    const Value x = recent_value();
    switch (pick(14)) {
      case 0: return unary(x, "Activation", {{"act_type", "relu"}});
      case 1: {
        static constexpr const char* kOps[] = {"abs",  "negative",   "square", "sign",  "floor", "ceil",
                                               "trunc", "sqrt", "reciprocal", "rsqrt", "round", "rint"};
        return unary(x, kOps[pick(12)]);
      }
      case 2: {
        static constexpr const char* kOps[] = {"_mul_scalar",     "_plus_scalar",    "_minus_scalar",
                                               "_rminus_scalar",  "_div_scalar",     "_rdiv_scalar",
                                               "_maximum_scalar", "_minimum_scalar", "_mod_scalar",
                                               "_rmod_scalar"};
        return unary(x, kOps[pick(10)], {{"scalar", scalar()}});
      }
      case 3: return unary(x, "clip", {{"a_min", "-0.5"}, {"a_max", pick(2) ? "0.75" : "1e30"}});
      case 4:
      case 5: {  // a cast
        const DType to = pick(6) == 0 ? DType::f64 : float_dtype();
        // amp_cast leaves f64 alone (MXNet's rule), so casts to and from f64 are Casts.
        const char* op = pick(2) && to != DType::f64 && x.dtype != DType::f64 ? "amp_cast" : "Cast";
        push(b_.op(op, {x.v}, {{"dtype", std::string(ir::mxnet_dtype_name(to))}}), x.shape, to);
        return;
      }
      case 6:
      case 7:
      case 8: {  // a broadcasting binary op
        static constexpr const char* kOps[] = {"broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
                                               "broadcast_maximum", "broadcast_minimum"};
        const Value& y = any_value();
        if (!broadcastable(x.shape, y.shape)) return unary(x, "negative");
        const ValueRef yv = as_dtype(y, x.dtype);
        push(b_.op(kOps[pick(6)], {x.v, yv}), broadcast_result(x.shape, y.shape), x.dtype);
        return;
      }
      case 9: {  // a compare: 1 or 0 in the input's dtype
        static constexpr const char* kOps[] = {"broadcast_greater", "broadcast_lesser_equal", "broadcast_equal",
                                               "broadcast_not_equal"};
        const Value& y = any_value();
        if (!broadcastable(x.shape, y.shape)) return unary(x, "abs");
        push(b_.op(kOps[pick(4)], {x.v, as_dtype(y, x.dtype)}), broadcast_result(x.shape, y.shape), x.dtype);
        return;
      }
      case 10: {  // select between two same-shape values
        const Value& c = any_value();
        const Value& y = any_value();
        if (c.shape != x.shape || y.shape != x.shape) return unary(x, "Activation", {{"act_type", "relu"}});
        push(b_.op("where", {c.v, x.v, as_dtype(y, x.dtype)}), x.shape, x.dtype);
        return;
      }
      case 11:
      case 12: {  // a transpose: kernels store it through permuted strides
        if (x.shape.size() < 2) return unary(x, "_mul_scalar", {{"scalar", "0.5"}});
        std::vector<int64_t> perm(x.shape.size());
        for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(k);
        for (size_t k = perm.size(); k > 1; --k) std::swap(perm[k - 1], perm[pick(static_cast<int>(k))]);
        Shape out(perm.size());
        for (size_t k = 0; k < perm.size(); ++k) out[k] = x.shape[perm[k]];
        push(b_.op("transpose", {x.v}, {{"axes", fmt::format("({})", fmt::join(perm, ","))}}), out, x.dtype);
        return;
      }
      default: {  // elemwise_add / elemwise_mul of two same-shape values
        const Value& y = any_value();
        if (y.shape != x.shape) return unary(x, "_plus_scalar", {{"scalar", scalar()}});
        push(b_.op(pick(2) ? "elemwise_add" : "elemwise_mul", {x.v, as_dtype(y, x.dtype)}), x.shape, x.dtype);
        return;
      }
    }
  }

  void transcendental_op() {
    const Value x = values_.back();
    switch (pick(12)) {
      case 0: return unary(x, "exp");
      case 1: return unary(x, "log");
      case 2: return unary(x, "tanh");
      case 3: return unary(x, "erf");
      case 4: return unary(x, "Activation", {{"act_type", "sigmoid"}});
      case 5: return unary(x, "Activation", {{"act_type", "softrelu"}});
      case 6: return unary(x, "expm1");
      // Library calls (ir/scalar_program.h): exact on the CPU, within CUDA's bound on a GPU.
      case 7: return unary(x, "sin");
      case 8: return unary(x, "arctan");
      case 9: return unary(x, "cbrt");
      case 10: return unary(x, "log2");
      default: return unary(x, "log1p");
    }
  }

  // Ops after the transcendental one that keep its relative error bounded.
  void stable_op() {
    const Value x = values_.back();
    switch (pick(4)) {
      case 0: return unary(x, "Activation", {{"act_type", "relu"}});
      case 1: return unary(x, "_mul_scalar", {{"scalar", "2.5"}});
      case 2: return unary(x, "clip", {{"a_min", "-0.5"}, {"a_max", "0.75"}});
      default: {
        const DType to = float_dtype();
        push(b_.op("Cast", {x.v}, {{"dtype", std::string(ir::mxnet_dtype_name(to))}}), x.shape, to);
      }
    }
  }

  runtime::SplitMix64 rng_;
  ir::GraphBuilder b_;
  std::vector<Value> values_;
  std::vector<ValueRef> computed_;
  std::vector<ValueRef> outputs_;
};

}  // namespace

RandomGraph random_fusable_graph(uint64_t seed) {
  return with_context(fmt::format("random graph {}", seed), [&] { return Generator(seed).run(); });
}

}  // namespace ampfuse::fuzz
