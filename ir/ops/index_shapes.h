// Shape and attribute rules of the indexing and data-movement ops (ir/ops/tensor_index.cpp:
// _arange, tile, repeat, take, pick, one_hot, gather_nd, depth_to_space, Crop, Pad,
// UpSampling, the Sequence* ops...), shared with their reference kernels
// (runtime/reference/index_kernels.cpp) so that inference and execution read an op's
// attributes in exactly one way.
//
// Each follows MXNet 1.9.1 and throws ampfuse::Error naming the attribute or input at fault.
#pragma once

#include "ir/attrs.h"
#include "ir/dtype.h"

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace ampfuse::ir {

// _arange: `count` distinct values start + k * step, each written `repeat` times. MXNet
// computes in the output dtype, so for integer dtypes start and step are truncated first
// (arange(0, 5, 1.5, dtype=int32) is [0, 1, 2, 3]); the count comes from the untruncated
// attributes. stop=None means the range [0, start).
struct ArangeSpec {
  double start = 0;
  double step = 1;
  int64_t count = 0;
  int64_t repeat = 1;
};
ArangeSpec arange_spec(const Attrs& attrs);

// tile: reps right-aligned against the input dims (the shorter one padded with 1s in front).
// Output rank is max(rank, len(reps)). `in_view` is the input seen with that rank.
struct TilePlan {
  Shape in_view;
  Shape out;
};
TilePlan tile_plan(const Shape& in, const Attrs& attrs);

// repeat: each element `repeats` times along `axis`; axis=None flattens first.
// Returns the axis (of the possibly flattened input) and the output shape.
struct RepeatPlan {
  Shape in_view;  // the input as repeated: flattened for axis=None
  int64_t axis = 0;
  int64_t repeats = 1;
  Shape out;
};
RepeatPlan repeat_plan(const Shape& in, const Attrs& attrs);

// take(a, indices, axis): a.shape[:axis] + indices.shape + a.shape[axis+1:].
Shape take_shape(const Shape& a, const Shape& indices, const Attrs& attrs);
// pick(data, index, axis, keepdims): data without `axis` (kept as 1 with keepdims); index
// must have that shape, or that shape with `axis` kept as 1.
Shape pick_shape(const Shape& data, const Shape& index, const Attrs& attrs);
// gather_nd(data, indices): indices (M, Y...) -> (Y..., data.shape[M:]).
Shape gather_nd_shape(const Shape& data, const Shape& indices);
// One gather_nd index (any dtype, truncated toward zero) into dim `dim` of extent n: as
// MXNet, [-n, 0) counts from the end and anything else outside [0, n) is an error.
int64_t gather_nd_index(double raw, int64_t n, int64_t dim);

// An index read from an index tensor (any dtype: MXNet truncates floats toward zero) put
// into [0, n) by mode: clip clamps, wrap takes it modulo n, raise throws (naming `what`).
enum class IndexMode : uint8_t { clip, wrap, raise };
IndexMode index_mode(const Attrs& attrs);
int64_t fit_index(double raw, int64_t n, IndexMode mode, std::string_view what);

// reshape_like: lhs dims [lhs_begin, lhs_end) replaced by rhs dims [rhs_begin, rhs_end)
// (None = the whole shape); the element counts must agree.
Shape reshape_like_shape(const Shape& lhs, const Shape& rhs, const Attrs& attrs);

// depth_to_space / space_to_depth on NCHW data with attribute block_size.
Shape depth_to_space_shape(const Shape& in, const Attrs& attrs);
Shape space_to_depth_shape(const Shape& in, const Attrs& attrs);

// Crop (legacy, NCHW): the output's height/width and the offset of its first element.
// `like` is the second input's shape when num_args=2 (it gives h and w), else empty.
struct CropWindow {
  int64_t top = 0, left = 0, height = 0, width = 0;
};
CropWindow crop_window(const Shape& in, const Shape* like, const Attrs& attrs);

// Pad: (before, after) per dim from pad_width; 4-D or 5-D input, nothing padded on the
// first two dims; reflect needs each pad smaller than its dim.
enum class PadMode : uint8_t { constant, edge, reflect };
struct PadPlan {
  PadMode mode = PadMode::constant;
  std::vector<int64_t> before, after;
  Shape out;
};
PadPlan pad_plan(const Shape& in, const Attrs& attrs);
// The input index that position j of a padded dim reads, j counted from the input's first
// element (negative in the leading pad) and n the dim's extent: j itself inside [0, n);
// outside, the nearest edge (edge), the mirror image without repeating the edge (reflect),
// or -1 (constant: the pad value).
int64_t pad_source(PadMode mode, int64_t j, int64_t n);

// UpSampling (nearest): input k of `ins` (all NCHW) scaled by the integer factor that makes
// its height that of input 0 times `scale`; the output concatenates them along channels
// (multi_input_mode=concat) or sums them (sum).
struct UpSamplingPlan {
  std::vector<int64_t> factors;  // per input
  Shape out;
};
UpSamplingPlan upsampling_plan(const std::vector<Shape>& ins, const Attrs& attrs);

// UpSampling with sample_type=bilinear is, in MXNet 1.9.1, a Deconvolution of its data by its
// weight input (channels, 1, k, k): depthwise (num_group = num_filter = `channels`), no bias,
// kernel k = 2 * scale - scale % 2, stride scale, pad ceil((scale - 1) / 2), so the output is
// the input's extents times scale. Its Deconvolution attributes; `attrs` must name num_filter
// equal to `channels` (MXNet's num_group is num_filter, so another count fails there).
bool is_bilinear_upsampling(const Attrs& attrs);
Attrs bilinear_upsampling_deconv_attrs(const Attrs& attrs, int64_t channels);

// _contrib_BilinearResize2D's output height and width (NCHW), by MXNet 1.9.1's rules: mode=size
// takes height/width, or int(extent * scale) for both when scale_height is given; mode=like
// takes the second input's; odd_scale scales an even extent and gives (extent - 1) * scale + 1
// for an odd one; to_even_down/up and to_odd_down/up move an extent of the other parity by one.
std::pair<int64_t, int64_t> bilinear_resize_size(const Shape& in, const Shape* like, const Attrs& attrs);

// The Sequence* ops' sequence axis (0 or 1; SequenceReverse: 0) and the batch axis, the other.
int64_t sequence_axis(const Shape& data, const Attrs& attrs, bool only_zero);

}  // namespace ampfuse::ir
