// MXNet's contrib detection ops that GluonCV's detectors export: _contrib_box_nms (SSD,
// YOLOv3, Faster R-CNN), _contrib_box_decode (SSD) and _contrib_ROIAlign (Faster and Mask
// R-CNN). Schemas, type inference and gradients (MXNet's: box_nms copies each kept row's
// gradient back to its input row, box_decode has none, ROIAlign spreads each output's
// gradient over its bilinear taps and gives the rois none);
// runtime/reference/detection_kernels.cpp computes them, with MXNet 1.9.1's
// semantics (src/operator/contrib/bounding_box-inl.h), docs/ops.md "Contrib detection ops".
#include "ir/ops/contrib_detection.h"

#include "ir/error.h"
#include "ir/gradient.h"
#include "ir/ops/op_helpers.h"
#include "ir/ops/nn_ops.h"

namespace ampfuse::ir {

namespace {

using nn::known_input;
using nn::one_of;
using nn::optional;
using nn::require_float;

// box_nms: (..., N, W) boxes in, the same shape out (kept boxes first, the rest -1).
// MXNet's second, hidden output (which input row each output row came from) only serves
// its backward pass, and a symbol cannot reference it: it is not declared here.
OpDef box_nms_def() {
  OpDef d;
  d.name = "_contrib_box_nms";
  d.aliases = {"_contrib_box_non_maximum_suppression"};
  d.kind = OpKind::compute;
  d.inputs = {{"data"}};
  d.attrs = {optional("overlap_thresh", AttrKind::Float, 0.5), optional("valid_thresh", AttrKind::Float, 0.0),
             optional("topk", AttrKind::Int, int64_t{-1}),       optional("coord_start", AttrKind::Int, int64_t{2}),
             optional("score_index", AttrKind::Int, int64_t{1}), optional("id_index", AttrKind::Int, int64_t{-1}),
             optional("background_id", AttrKind::Int, int64_t{-1}),
             optional("force_suppress", AttrKind::Bool, false),
             one_of("in_format", "corner", {"corner", "center"}),
             one_of("out_format", "corner", {"corner", "center"})};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the boxes");
    const Shape& s = data->shape;
    if (s.size() < 2) fail("the boxes {} need at least 2 axes (..., boxes, box width)", shape_str(s));
    const int64_t width = s.back();
    const int64_t coord = ctx.attrs.get_int("coord_start"), score = ctx.attrs.get_int("score_index");
    const int64_t id = ctx.attrs.get_int("id_index");
    // As MXNet's BoxNMSShape: a score and 4 coordinates, and the class id when id_index > 0.
    const int64_t needed = id > 0 ? 6 : 5;
    if (width < needed) fail("a box has {} elements, {} are needed (score, 4 coordinates{})", width, needed, id > 0 ? ", id" : "");
    if (score < 0 || score >= width) fail("score_index={} is outside a box of {} elements", score, width);
    if (coord < 0 || coord + 3 >= width) fail("coord_start={} puts the coordinates outside a box of {} elements", coord, width);
    if (score >= coord && score <= coord + 3) fail("score_index={} is one of the coordinates {}..{}", score, coord, coord + 3);
    if (id >= 0) {
      if (id >= width) fail("id_index={} is outside a box of {} elements", id, width);
      if (id >= coord && id <= coord + 3) fail("id_index={} is one of the coordinates {}..{}", id, coord, coord + 3);
      if (id == score) fail("id_index={} is also score_index", id);
    }
    ctx.outputs[0] = *data;
  };
  // MXNet 1.9.1: WIDEST_TYPE_CASTS for both targets.
  d.amp_bf16 = d.amp_fp16 = AmpClass::widest;
  d.gradient = [](GradContext& c) -> InputGrads {
    if (!c.out_grad_opt(0)) return {std::nullopt};
    return {c.emit_typed("_backward_contrib_box_nms", {c.input(0), *c.out_grad_opt(0)}, c.attrs())};
  };
  return d;
}

// A backward op of a detection op: the forward's inputs and the output's gradient in, the
// first input's gradient out.
OpDef detection_backward_def(const OpDef& forward, std::string name, std::vector<InputSlot> inputs) {
  OpDef d;
  d.name = std::move(name);
  d.kind = OpKind::compute;
  d.inputs = std::move(inputs);
  d.attrs = forward.attrs;
  d.infer = [infer = forward.infer, n = d.inputs.size()](InferContext& ctx) {
    // The gradient must have the forward output's type.
    InferContext fwd = ctx;
    fwd.inputs.resize(n - 1);
    fwd.outputs.assign(1, std::nullopt);
    infer(fwd);
    if (!fwd.outputs[0] || ctx.in(n - 1) != *fwd.outputs[0])
      fail("input {} (out_grad) is {} but the forward output is {}", n - 1, type_str(ctx.in(n - 1)),
           fwd.outputs[0] ? type_str(*fwd.outputs[0]) : std::string("unknown"));
    ctx.outputs[0] = ctx.in(0);
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::neutral;
  return d;
}

// box_decode: offsets (B, N, 4) against anchors (1, N, 4) -> corner boxes (B, N, 4).
OpDef box_decode_def() {
  OpDef d;
  d.name = "_contrib_box_decode";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"anchors"}};
  d.attrs = {optional("std0", AttrKind::Float, 1.0), optional("std1", AttrKind::Float, 1.0),
             optional("std2", AttrKind::Float, 1.0), optional("std3", AttrKind::Float, 1.0),
             optional("clip", AttrKind::Float, -1.0), one_of("format", "center", {"corner", "center"})};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    const TensorType* anchors = known_input(ctx, 1);
    if (!data || !anchors) return;
    require_float(*data, "the offsets");
    if (anchors->dtype != data->dtype)
      fail("the anchors are {} but the offsets {}", dtype_name(anchors->dtype), dtype_name(data->dtype));
    const Shape& s = data->shape;
    const Shape& a = anchors->shape;
    if (s.size() != 3 || s[2] != 4) fail("the offsets {} must be (batch, boxes, 4)", shape_str(s));
    if (a.size() != 3 || a[0] != 1 || a[1] != s[1] || a[2] != 4)
      fail("the anchors {} must be (1, {}, 4) for offsets {}", shape_str(a), s[1], shape_str(s));
    ctx.outputs[0] = *data;
  };
  // Not in MXNet 1.9.1's AMP lists. Its outputs are pixel coordinates (hundreds), which
  // bf16 would round to whole pixels or worse: it runs in f32.
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = no_gradient;  // MXNet: MakeZeroGradNodes
  return d;
}

// ROIAlign: features (N, C, H, W) and regions (R, 5) rows (batch index, x1, y1, x2, y2)
// in image coordinates -> (R, C, PH, PW).
OpDef roi_align_def() {
  OpDef d;
  d.name = "_contrib_ROIAlign";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"rois"}};
  d.attrs = {nn::required("pooled_size", AttrKind::IntList), nn::required("spatial_scale", AttrKind::Float),
             optional("sample_ratio", AttrKind::Int, int64_t{-1}), optional("position_sensitive", AttrKind::Bool, false),
             optional("aligned", AttrKind::Bool, false)};
  d.infer = [](InferContext& ctx) {
    const std::vector<int64_t>& pooled = ctx.attrs.get_ints("pooled_size");
    if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1)
      fail("pooled_size must be two positive extents (h, w), not {} of them", pooled.size());
    // GluonCV never asks for the position-sensitive variant (R-FCN's).
    if (ctx.attrs.get_bool("position_sensitive")) fail("position_sensitive=True is not supported");
    const TensorType* data = known_input(ctx, 0);
    const TensorType* rois = known_input(ctx, 1);
    if (!data || !rois) return;
    require_float(*data, "the features");
    if (data->shape.size() != 4) fail("the features {} must be (N, C, H, W)", shape_str(data->shape));
    if (rois->dtype != data->dtype)
      fail("the rois are {} but the features {}", dtype_name(rois->dtype), dtype_name(data->dtype));
    if (rois->shape.size() != 2 || rois->shape[1] != 5)
      fail("the rois {} must be (R, 5): batch index, x1, y1, x2, y2", shape_str(rois->shape));
    ctx.outputs[0] = TensorType{data->dtype, {rois->shape[0], data->shape[1], pooled[0], pooled[1]}};
  };
  // MXNet 1.9.1: WIDEST_TYPE_CASTS for both targets.
  d.amp_bf16 = d.amp_fp16 = AmpClass::widest;
  d.gradient = [](GradContext& c) -> InputGrads {
    if (!c.out_grad_opt(0) || !c.wants(0)) return {std::nullopt, std::nullopt};
    return {c.emit_typed("_backward_ROIAlign", {c.input(0), c.input(1), *c.out_grad_opt(0)}, c.attrs()), std::nullopt};
  };
  return d;
}

}  // namespace

void register_contrib_detection_ops(OpRegistry& r) {
  r.add(box_nms_def());
  r.add(box_decode_def());
  r.add(roi_align_def());
  r.add(detection_backward_def(r.get("_contrib_box_nms"), "_backward_contrib_box_nms", {{"data"}, {"out_grad"}}));
  r.add(detection_backward_def(r.get("_contrib_ROIAlign"), "_backward_ROIAlign", {{"data"}, {"rois"}, {"out_grad"}}));
}

}  // namespace ampfuse::ir
