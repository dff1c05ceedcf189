// Reference kernels of the contrib detection ops (ir/ops/contrib_detection.cpp), with the
// semantics of MXNet 1.9.1's CPU implementation (src/operator/contrib/bounding_box-inl.h),
// checked against MXNet's outputs in tests/contrib_detection_test.cpp.
#include "runtime/reference/detection_kernels.h"

#include "ir/error.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ampfuse::runtime {

namespace {

bool is_center(const ir::Attrs& a, const std::string& name) { return a.get_string(name) == "center"; }

// The overlap of two boxes along one axis: a[0], a[2] are (left, right) for corner boxes,
// (center, width) for center boxes.
template <class T>
T overlap_1d(const T* a, const T* b, bool center) {
  T lo, hi;
  if (center) {
    lo = std::max(b[0] - b[2] / 2, a[0] - a[2] / 2);
    hi = std::min(b[0] + b[2] / 2, a[0] + a[2] / 2);
  } else {
    lo = std::max(a[0], b[0]);
    hi = std::min(a[2], b[2]);
  }
  const T w = hi - lo;
  return w > 0 ? w : T(0);
}

// A box's area; 0 for a box with a negative width or height.
template <class T>
T box_area(const T* box, bool center) {
  const T w = center ? box[2] : box[2] - box[0];
  const T h = center ? box[3] : box[3] - box[1];
  return (w < 0 || h < 0) ? T(0) : w * h;
}

// box_nms over each (N, W) batch of boxes:
//   1. a box is a candidate when its score > valid_thresh and, with id_index and
//      background_id >= 0, its class id is not the background's;
//   2. candidates sorted by score, highest first, ties in input order (MXNet's stable sort);
//   3. the first topk of them (all with topk < 0) are suppressed greedily: each kept box
//      removes every later one whose IoU with it is > overlap_thresh (only boxes of its own
//      class unless force_suppress or id_index < 0);
//   4. the kept boxes of those topk are written first, whole rows; every other row is -1;
//   5. with out_format != in_format the coordinates of every row whose first coordinate is
//      >= 0 are converted (MXNet's check for the -1 rows, which also skips real boxes left of
//      or above the origin).
// topk = 0 copies the input. Nothing valid in any batch: every row is -1.
void box_nms(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Attrs& a = node.attrs;
  const ir::Shape& shape = in[0].shape();
  const int64_t width = shape.back(), num = shape[shape.size() - 2];
  const int64_t batches = num == 0 ? 0 : in[0].size() / (num * width);
  const int64_t coord = a.get_int("coord_start"), score_at = a.get_int("score_index");
  const int64_t id_at = a.get_int("id_index"), background = a.get_int("background_id");
  const bool force = a.get_bool("force_suppress");
  const bool in_center = is_center(a, "in_format"), out_center = is_center(a, "out_format");
  const int64_t topk = a.get_int("topk") < 0 ? num : std::min(num, a.get_int("topk"));
  const double overlap = a.get_float("overlap_thresh"), valid = a.get_float("valid_thresh");

  ref::with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> x = ref::load<T>(in[0]);
    if (topk < 1) {
      ref::store(x, out[0]);
      return;
    }
    std::vector<T> y(x.size(), T(-1));
    const auto row = [&](int64_t b, int64_t i) { return x.data() + (b * num + i) * width; };
    for (int64_t b = 0; b < batches; ++b) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < num; ++i) {
        const T* r = row(b, i);
        const bool is_background = id_at >= 0 && background >= 0 && static_cast<int64_t>(r[id_at]) == background;
        if (r[score_at] > static_cast<T>(valid) && !is_background) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t i, int64_t j) { return row(b, i)[score_at] > row(b, j)[score_at]; });
      order.resize(std::min<size_t>(order.size(), static_cast<size_t>(topk)));
      std::vector<bool> suppressed(order.size(), false);
      for (size_t k = 0; k < order.size(); ++k) {
        if (suppressed[k]) continue;
        const T* ref_box = row(b, order[k]);
        for (size_t m = k + 1; m < order.size(); ++m) {
          if (suppressed[m]) continue;
          const T* box = row(b, order[m]);
          if (!force && id_at >= 0 && static_cast<int64_t>(ref_box[id_at]) != static_cast<int64_t>(box[id_at]))
            continue;
          T inter = overlap_1d(ref_box + coord, box + coord, in_center);
          inter *= overlap_1d(ref_box + coord + 1, box + coord + 1, in_center);
          const T iou = inter / (box_area(ref_box + coord, in_center) + box_area(box + coord, in_center) - inter);
          if (iou > static_cast<T>(overlap)) suppressed[m] = true;
        }
      }
      int64_t kept = 0;
      for (size_t k = 0; k < order.size(); ++k)
        if (!suppressed[k]) std::copy_n(row(b, order[k]), width, y.data() + (b * num + kept++) * width);
    }
    if (in_center != out_center)
      for (int64_t r = 0; r < batches * num; ++r) {
        T* c = y.data() + r * width + coord;
        if (c[0] < 0) continue;
        if (out_center) {
          const T l = c[0], t = c[1], rt = c[2], bt = c[3];
          c[0] = (l + rt) / 2, c[1] = (t + bt) / 2, c[2] = rt - l, c[3] = bt - t;
        } else {
          const T cx = c[0], cy = c[1], hw = c[2] / 2, hh = c[3] / 2;
          c[0] = cx - hw, c[1] = cy - hh, c[2] = cx + hw, c[3] = cy + hh;
        }
      }
    ref::store(y, out[0]);
  });
}

// box_decode: anchor (ax, ay, aw, ah) in center form (converted from corners with
// format=corner); the box centered at (ax + dx*std0*aw, ay + dy*std1*ah) with width
// aw*exp(dw*std2) and height ah*exp(dh*std3), dw*std2 and dh*std3 first clipped to `clip`
// when clip > 0; written as corners.
void box_decode(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Attrs& a = node.attrs;
  const bool center = is_center(a, "format");
  const double clip = a.get_float("clip");
  const int64_t num = in[0].shape()[1];
  ref::with_compute_type({in[0].dtype(), in[1].dtype()}, [&]<class T>() {
    const std::vector<T> d = ref::load<T>(in[0]), anchors = ref::load<T>(in[1]);
    const T std0 = static_cast<T>(a.get_float("std0")), std1 = static_cast<T>(a.get_float("std1"));
    const T std2 = static_cast<T>(a.get_float("std2")), std3 = static_cast<T>(a.get_float("std3"));
    std::vector<T> y(d.size());
    for (size_t i = 0; i < d.size() / 4; ++i) {
      const T* an = anchors.data() + (static_cast<int64_t>(i) % num) * 4;
      T aw = an[2], ah = an[3], ax = an[0], ay = an[1];
      if (!center) aw = an[2] - an[0], ah = an[3] - an[1], ax = an[0] + aw / 2, ay = an[1] + ah / 2;
      const T* o = d.data() + i * 4;
      const T cx = o[0] * std0 * aw + ax, cy = o[1] * std1 * ah + ay;
      T dw = o[2] * std2, dh = o[3] * std3;
      if (clip > 0) dw = std::min(dw, static_cast<T>(clip)), dh = std::min(dh, static_cast<T>(clip));
      const T hw = std::exp(dw) * aw / 2, hh = std::exp(dh) * ah / 2;
      T* r = y.data() + i * 4;
      r[0] = cx - hw, r[1] = cy - hh, r[2] = cx + hw, r[3] = cy + hh;
    }
    ref::store(y, out[0]);
  });
}

}  // namespace

void register_detection_kernels() {
  register_reference_kernel("_contrib_box_nms", box_nms);
  register_reference_kernel("_contrib_box_decode", box_decode);
}

}  // namespace ampfuse::runtime
