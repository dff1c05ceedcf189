#include "ir/ops/tensor_shapes.h"

#include "ir/error.h"

#include <algorithm>
#include <optional>

namespace ampfuse::ir {

namespace {

int64_t rank_of(const Shape& s) { return static_cast<int64_t>(s.size()); }

std::string ints_str(const std::vector<int64_t>& v) { return format_mxnet_attr(v); }

}  // namespace

int64_t resolve_axis(int64_t axis, const Shape& in, std::string_view attr) {
  const int64_t rank = rank_of(in);
  if (axis < -rank || axis >= rank)
    fail("axis {} (attribute '{}') is out of range for input {}", axis, attr, shape_str(in));
  return axis < 0 ? axis + rank : axis;
}

int64_t resolve_insert_axis(int64_t axis, const Shape& in, std::string_view attr) {
  const int64_t rank = rank_of(in);
  if (axis < -rank - 1 || axis > rank)
    fail("axis {} (attribute '{}') is out of range for inserting a dim into input {}", axis, attr, shape_str(in));
  return axis < 0 ? axis + rank + 1 : axis;
}

// ---- Reshape ---------------------------------------------------------------------------

namespace {

// One entry of Reshape's `shape`, with -4's two parts kept beside it so that `reverse`
// can reverse the entries without tearing a split apart.
struct ReshapeCode {
  int64_t code;
  int64_t part1 = 0, part2 = 0;  // -4 only
};

std::vector<ReshapeCode> group_reshape_codes(const std::vector<int64_t>& spec, const std::string& where) {
  std::vector<ReshapeCode> codes;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] == kNoneIndex || spec[i] < -4) fail("{}: {} is not a dim or a code (0, -1, -2, -3, -4)", where, spec[i] == kNoneIndex ? "None" : std::to_string(spec[i]));
    if (spec[i] != -4) {
      codes.push_back({spec[i]});
      continue;
    }
    if (i + 2 >= spec.size()) fail("{}: -4 must be followed by the two dims it splits into", where);
    codes.push_back({-4, spec[i + 1], spec[i + 2]});
    i += 2;
  }
  return codes;
}

// -4: the two parts of `whole`; one of them may be -1 (inferred).
std::pair<int64_t, int64_t> split_parts(int64_t whole, int64_t a, int64_t b, const std::string& where) {
  auto valid = [](int64_t p) { return p == -1 || p >= 1; };
  if (!valid(a) || !valid(b)) fail("{}: -4 splits into {} and {}; each must be positive or -1", where, a, b);
  if (a == -1 && b == -1) fail("{}: -4 cannot infer both parts (-1, -1)", where);
  if (a == -1) {
    if (whole % b != 0) fail("{}: -4 cannot split {} into (-1, {})", where, whole, b);
    a = whole / b;
  } else if (b == -1) {
    if (whole % a != 0) fail("{}: -4 cannot split {} into ({}, -1)", where, whole, a);
    b = whole / a;
  }
  if (a * b != whole) fail("{}: -4 splits {} into {} x {}, which do not multiply to it", where, whole, a, b);
  return {a, b};
}

}  // namespace

Shape reshape_output_shape(const Shape& in_shape, const std::vector<int64_t>& spec, bool reverse) {
  const std::string where = fmt::format("cannot reshape input {} with shape={}{}", shape_str(in_shape), ints_str(spec),
                                        reverse ? " reverse=True" : "");
  if (spec.empty()) fail("{}: 'shape' is empty", where);
  std::vector<ReshapeCode> codes = group_reshape_codes(spec, where);
  Shape in = in_shape;
  if (reverse) {
    std::reverse(codes.begin(), codes.end());
    std::reverse(in.begin(), in.end());
  }
  Shape out;
  size_t src = 0;  // the next input dim a code consumes
  std::optional<size_t> inferred;
  auto next_dim = [&](std::string_view code) {
    if (src >= in.size()) fail("{}: code {} finds no input dim left", where, code);
    return in[src++];
  };
  for (const ReshapeCode& c : codes) {
    switch (c.code) {
      case 0: out.push_back(next_dim("0")); break;
      case -1:
        if (inferred) fail("{}: more than one -1", where);
        inferred = out.size();
        out.push_back(1);
        ++src;  // as MXNet: a -1 stands for an input dim, so a later 0 copies the one after it
        break;
      case -2:
        while (src < in.size()) out.push_back(in[src++]);
        break;
      case -3: {
        const int64_t d1 = next_dim("-3");
        const int64_t d2 = next_dim("-3");
        out.push_back(d1 * d2);
        break;
      }
      case -4: {
        auto [a, b] = split_parts(next_dim("-4"), c.part1, c.part2, where);
        // Matched right to left, the output is built reversed too: push the parts swapped.
        out.push_back(reverse ? b : a);
        out.push_back(reverse ? a : b);
        break;
      }
      default:
        out.push_back(c.code);
        ++src;
        break;
    }
  }
  const int64_t total = num_elements(in_shape);
  if (inferred) {
    const int64_t known = num_elements(out);
    if (known == 0 || total % known != 0)
      fail("{}: cannot infer -1, {} elements are not a multiple of {}", where, total, known);
    out[*inferred] = total / known;
  }
  if (reverse) std::reverse(out.begin(), out.end());
  if (num_elements(out) != total)
    fail("{}: the result {} has {} elements, the input {}", where, shape_str(out), num_elements(out), total);
  return out;
}

// ---- transpose ---------------------------------------------------------------------------

std::vector<int64_t> transpose_permutation(const Shape& in, const std::vector<int64_t>& axes) {
  const int64_t rank = rank_of(in);
  std::vector<int64_t> perm;
  if (axes.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
    return perm;
  }
  if (rank_of(axes) != rank)
    fail("axes={} has {} entries but input {} has {} dims", ints_str(axes), axes.size(), shape_str(in), rank);
  std::vector<bool> seen(in.size(), false);
  for (int64_t a : axes) {
    const int64_t d = resolve_axis(a, in, "axes");
    if (seen[d]) fail("axes={} is not a permutation: dim {} appears twice", ints_str(axes), d);
    seen[d] = true;
    perm.push_back(d);
  }
  return perm;
}

// ---- slices ------------------------------------------------------------------------------

namespace {
std::vector<SliceDim> whole_dims(const Shape& in) {
  std::vector<SliceDim> dims;
  for (int64_t e : in) dims.push_back({0, 1, e});
  return dims;
}
}  // namespace

std::vector<SliceDim> slice_dims(const Shape& in, const Attrs& attrs) {
  const auto& begin = attrs.get_ints("begin");
  const auto& end = attrs.get_ints("end");
  const auto& step = attrs.get_ints("step");
  if (begin.size() != end.size())
    fail("begin={} and end={} differ in length", ints_str(begin), ints_str(end));
  if (!step.empty() && step.size() != begin.size())
    fail("step={} and begin={} differ in length", ints_str(step), ints_str(begin));
  if (begin.size() > in.size())
    fail("begin={} has {} entries but input {} has only {} dims", ints_str(begin), begin.size(), shape_str(in), in.size());
  std::vector<SliceDim> dims = whole_dims(in);
  for (size_t i = 0; i < begin.size(); ++i) {
    const int64_t s = step.empty() || step[i] == kNoneIndex ? 1 : step[i];
    if (s == 0) fail("step={}: entry {} is 0", ints_str(step), i);
    const int64_t len = in[i];
    int64_t b = begin[i] == kNoneIndex ? (s < 0 ? len - 1 : 0) : begin[i];
    int64_t e = end[i] == kNoneIndex ? (s < 0 ? -1 : len) : end[i];
    if (begin[i] != kNoneIndex && b < 0) b += len;
    if (end[i] != kNoneIndex && e < 0) e += len;
    // Out-of-range bounds clip as in Python (and MXNet >= 1.6); an empty range gives extent 0.
    int64_t size = 0;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, len);
      e = std::clamp<int64_t>(e, 0, len);
      size = e > b ? (e - b - 1) / s + 1 : 0;
    } else {
      b = std::min(b, len - 1);
      e = std::max<int64_t>(e, -1);
      size = b > e ? (b - e - 1) / -s + 1 : 0;
    }
    dims[i] = {size > 0 ? b : 0, s, size};
  }
  return dims;
}

std::vector<SliceDim> slice_axis_dims(const Shape& in, const Attrs& attrs) {
  const int64_t axis = resolve_axis(attrs.get_int("axis"), in, "axis");
  const int64_t len = in[axis];
  const std::optional<int64_t> end = attrs.get_opt_int("end");
  int64_t b = attrs.get_int("begin");
  int64_t e = end ? *end : len;
  if (b < 0) b += len;
  if (end && e < 0) e += len;
  // Unlike slice, slice_axis does not clip: MXNet rejects a range outside the axis.
  if (len > 0 && (b < 0 || e > len || b >= e))
    fail("begin={} end={} is not a non-empty range of axis {} (extent {}) of input {}", attrs.get_int("begin"),
         end ? std::to_string(*end) : "None", axis, len, shape_str(in));
  std::vector<SliceDim> dims = whole_dims(in);
  dims[axis] = len > 0 ? SliceDim{b, 1, e - b} : SliceDim{0, 1, 0};
  return dims;
}

std::vector<SliceDim> slice_like_dims(const Shape& in, const Shape& like, const Attrs& attrs) {
  const auto& axes = attrs.get_ints("axes");
  std::vector<SliceDim> dims = whole_dims(in);
  auto take = [&](int64_t d) {
    if (d >= rank_of(like)) fail("axis {} of axes={} is beyond shape_like {}", d, ints_str(axes), shape_str(like));
    if (like[d] > in[d])
      fail("shape_like {} is larger than input {} in dim {}", shape_str(like), shape_str(in), d);
    dims[d].size = like[d];
  };
  if (axes.empty()) {
    if (in.size() != like.size())
      fail("without 'axes' the input {} and shape_like {} must have the same rank", shape_str(in), shape_str(like));
    for (int64_t d = 0; d < rank_of(in); ++d) take(d);
  } else {
    for (int64_t a : axes) take(resolve_axis(a, in, "axes"));
  }
  return dims;
}

Shape slice_output_shape(const std::vector<SliceDim>& dims) {
  Shape out;
  for (const SliceDim& d : dims) out.push_back(d.size);
  return out;
}

// ---- reductions --------------------------------------------------------------------------

ReducePlan reduce_plan(const Shape& in, const Attrs& attrs) {
  const bool keepdims = attrs.get_bool("keepdims");
  const bool exclude = attrs.get_bool("exclude");
  ReducePlan plan;
  const bool all = attrs.is_none("axis") || attrs.get_ints("axis").empty();
  if (all) {
    plan.reduced.assign(in.size(), true);  // exclude has no effect here, as in MXNet
  } else {
    const auto& axes = attrs.get_ints("axis");
    std::vector<bool> named(in.size(), false);
    for (int64_t a : axes) {
      const int64_t d = resolve_axis(a, in, "axis");
      if (named[d]) fail("axis={} names dim {} twice", ints_str(axes), d);
      named[d] = true;
    }
    for (bool n : named) plan.reduced.push_back(n != exclude);
  }
  for (size_t d = 0; d < in.size(); ++d) {
    plan.kept.push_back(plan.reduced[d] ? 1 : in[d]);
    if (!plan.reduced[d]) plan.out.push_back(in[d]);
    else if (keepdims) plan.out.push_back(1);
  }
  if (plan.out.empty()) plan.out = {1};  // MXNet 1.x has no 0-d arrays
  return plan;
}

// ---- broadcasts --------------------------------------------------------------------------

Shape broadcast_to_shape(const Shape& in, const Attrs& attrs) {
  const auto& target = attrs.get_ints("shape");
  if (target.size() != in.size())
    fail("cannot broadcast input {} to shape={}: the ranks differ", shape_str(in), ints_str(target));
  Shape out = in;
  for (size_t d = 0; d < in.size(); ++d) {
    if (target[d] == 0) continue;  // 0 keeps the input's extent
    if (target[d] < 0 || (in[d] != target[d] && in[d] != 1))
      fail("cannot broadcast input {} to shape={}: dim {} is {}", shape_str(in), ints_str(target), d, in[d]);
    out[d] = target[d];
  }
  return out;
}

Shape broadcast_axis_shape(const Shape& in, const Attrs& attrs) {
  const auto& axes = attrs.get_ints("axis");
  const auto& sizes = attrs.get_ints("size");
  if (axes.size() != sizes.size())
    fail("axis={} and size={} differ in length", ints_str(axes), ints_str(sizes));
  Shape out = in;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t d = resolve_axis(axes[i], in, "axis");
    if (in[d] != 1) fail("cannot broadcast dim {} of input {}: its extent is {}, not 1", d, shape_str(in), in[d]);
    if (sizes[i] < 0) fail("size={}: entry {} is negative", ints_str(sizes), i);
    out[d] = sizes[i];
  }
  return out;
}

Shape broadcast_like_shape(const Shape& lhs, const Shape& rhs, const Attrs& attrs) {
  const bool lhs_none = attrs.is_none("lhs_axes"), rhs_none = attrs.is_none("rhs_axes");
  if (lhs_none != rhs_none) fail("lhs_axes and rhs_axes must be given together");
  if (lhs_none) {
    if (lhs.size() != rhs.size())
      fail("cannot broadcast lhs {} like rhs {}: the ranks differ", shape_str(lhs), shape_str(rhs));
    for (size_t d = 0; d < lhs.size(); ++d)
      if (lhs[d] != rhs[d] && lhs[d] != 1)
        fail("cannot broadcast lhs {} like rhs {}: dim {} is {}", shape_str(lhs), shape_str(rhs), d, lhs[d]);
    return rhs;
  }
  const auto& lhs_axes = attrs.get_ints("lhs_axes");
  const auto& rhs_axes = attrs.get_ints("rhs_axes");
  if (lhs_axes.size() != rhs_axes.size() || lhs_axes.empty())
    fail("lhs_axes={} and rhs_axes={} must be non-empty and of one length", ints_str(lhs_axes), ints_str(rhs_axes));
  Shape out = lhs;
  for (size_t i = 0; i < lhs_axes.size(); ++i) {
    const int64_t to = resolve_axis(lhs_axes[i], lhs, "lhs_axes");
    const int64_t from = resolve_axis(rhs_axes[i], rhs, "rhs_axes");
    if (lhs[to] != 1) fail("cannot broadcast dim {} of lhs {}: its extent is {}, not 1", to, shape_str(lhs), lhs[to]);
    out[to] = rhs[from];
  }
  return out;
}

}  // namespace ampfuse::ir
