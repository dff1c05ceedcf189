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
// For each output row (batch-major), the input row it copies, or -1: steps 1-4 above.
// topk < 1 copies every row.
template <class T>
std::vector<int64_t> nms_sources(const ir::Attrs& a, const ir::Shape& shape, const std::vector<T>& x) {
  const int64_t width = shape.back(), num = shape[shape.size() - 2];
  const int64_t batches = num == 0 ? 0 : static_cast<int64_t>(x.size()) / (num * width);
  const int64_t coord = a.get_int("coord_start"), score_at = a.get_int("score_index");
  const int64_t id_at = a.get_int("id_index"), background = a.get_int("background_id");
  const bool force = a.get_bool("force_suppress"), in_center = is_center(a, "in_format");
  const int64_t topk = a.get_int("topk") < 0 ? num : std::min(num, a.get_int("topk"));
  const double overlap = a.get_float("overlap_thresh"), valid = a.get_float("valid_thresh");
  std::vector<int64_t> source(static_cast<size_t>(batches * num), -1);
  if (topk < 1) {
    std::iota(source.begin(), source.end(), int64_t{0});
    return source;
  }
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
        if (!force && id_at >= 0 && static_cast<int64_t>(ref_box[id_at]) != static_cast<int64_t>(box[id_at])) continue;
        T inter = overlap_1d(ref_box + coord, box + coord, in_center);
        inter *= overlap_1d(ref_box + coord + 1, box + coord + 1, in_center);
        const T iou = inter / (box_area(ref_box + coord, in_center) + box_area(box + coord, in_center) - inter);
        if (iou > static_cast<T>(overlap)) suppressed[m] = true;
      }
    }
    int64_t kept = 0;
    for (size_t k = 0; k < order.size(); ++k)
      if (!suppressed[k]) source[b * num + kept++] = b * num + order[k];
  }
  return source;
}

void box_nms(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Attrs& a = node.attrs;
  const int64_t width = in[0].shape().back(), coord = a.get_int("coord_start");
  const bool in_center = is_center(a, "in_format"), out_center = is_center(a, "out_format");
  ref::with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> x = ref::load<T>(in[0]);
    if (a.get_int("topk") == 0) {  // a copy, formats as they are (MXNet)
      ref::store(x, out[0]);
      return;
    }
    const std::vector<int64_t> source = nms_sources(a, in[0].shape(), x);
    std::vector<T> y(x.size(), T(-1));
    for (size_t r = 0; r < source.size(); ++r)
      if (source[r] >= 0) std::copy_n(x.data() + source[r] * width, width, y.data() + static_cast<int64_t>(r) * width);
    if (in_center != out_center)
      for (size_t r = 0; r < source.size(); ++r) {
        T* c = y.data() + static_cast<int64_t>(r) * width + coord;
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

// _backward_contrib_box_nms(data, dy): each output row's gradient, whole, added to the input
// row it came from (MXNet's nms_backward: a copy, without the format conversion's Jacobian);
// suppressed and -1 rows get zeros.
void box_nms_backward(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t width = in[0].shape().back();
  ref::with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> x = ref::load<T>(in[0]), dy = ref::load<T>(in[1]);
    const std::vector<int64_t> source = nms_sources(node.attrs, in[0].shape(), x);
    std::vector<T> dx(x.size(), T(0));
    for (size_t r = 0; r < source.size(); ++r)
      if (source[r] >= 0)
        for (int64_t k = 0; k < width; ++k) dx[source[r] * width + k] += dy[static_cast<int64_t>(r) * width + k];
    ref::store(dx, out[0]);
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

// The bilinear sample of one (H, W) plane at (y, x), as MXNet's (Detectron's) ROIAlign
// takes it: 0 outside [-1, H] x [-1, W]; coordinates below 0 read row/column 0, and past
// the last row/column read that one. Weights and positions in w[4], pos[4]; the caller sums
// w[k] * plane[pos[k]] in that order.
template <class T>
void bilinear_taps(T y, T x, int64_t height, int64_t width, T w[4], int64_t pos[4]) {
  if (y < T(-1) || y > static_cast<T>(height) || x < T(-1) || x > static_cast<T>(width)) {
    for (int k = 0; k < 4; ++k) w[k] = T(0), pos[k] = 0;
    return;
  }
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<T>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<T>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const T ly = y - static_cast<T>(y_low), lx = x - static_cast<T>(x_low), hy = T(1) - ly, hx = T(1) - lx;
  w[0] = hy * hx, w[1] = hy * lx, w[2] = ly * hx, w[3] = ly * lx;
  pos[0] = y_low * width + x_low, pos[1] = y_low * width + x_high;
  pos[2] = y_high * width + x_low, pos[3] = y_high * width + x_high;
}

// ROIAlign: each region (batch b, x1, y1, x2, y2) is scaled by spatial_scale (and shifted by
// -0.5 with `aligned`), given at least 1x1 extent (without `aligned`), and cut into PH x PW
// bins; each output is the mean of grid_h x grid_w bilinear samples at the centres of a
// regular grid in its bin (grid = sample_ratio, or ceil(region extent / pooled extent)). A
// region with a negative batch index gives zeros, and zeroes output element r (MXNet's).
// Visits every bilinear sample of every output element of ROIAlign, in the order the
// forward sums them: visit(out_index, plane_offset, w, pos) once per sample, after
// begin(out_index) and before end(out_index, count). A region with a negative batch index
// calls skipped(r) instead (see roi_align).
template <class T, class Begin, class Visit, class End, class Skipped>
void for_each_roi_sample(const ir::Attrs& a, const ir::Shape& ds, const std::vector<T>& rois, Begin begin,
                         Visit visit, End end, Skipped skipped) {
  const std::vector<int64_t>& pooled = a.get_ints("pooled_size");
  const int64_t ph_n = pooled[0], pw_n = pooled[1];
  const int64_t sample_ratio = a.get_int("sample_ratio");
  const bool aligned = a.get_bool("aligned");
  const int64_t batch = ds[0], channels = ds[1], height = ds[2], width = ds[3];
  const int64_t regions = static_cast<int64_t>(rois.size()) / 5;
  const T scale = static_cast<T>(a.get_float("spatial_scale"));
  for (int64_t r = 0; r < regions; ++r) {
    const T* roi = rois.data() + r * 5;
    const int64_t b = static_cast<int64_t>(roi[0]);
    if (b < 0) {
      skipped(r);
      continue;
    }
    if (b >= batch) fail("ROIAlign: region {} names batch {} of {}", r, b, batch);
    const T offset = aligned ? T(0.5) : T(0);
    const T x0 = roi[1] * scale - offset, y0 = roi[2] * scale - offset;
    T roi_w = roi[3] * scale - offset - x0, roi_h = roi[4] * scale - offset - y0;
    if (!aligned) roi_w = std::max(roi_w, T(1)), roi_h = std::max(roi_h, T(1));
    const T bin_h = roi_h / static_cast<T>(ph_n), bin_w = roi_w / static_cast<T>(pw_n);
    const int64_t grid_h = sample_ratio > 0 ? sample_ratio : static_cast<int64_t>(std::ceil(roi_h / static_cast<T>(ph_n)));
    const int64_t grid_w = sample_ratio > 0 ? sample_ratio : static_cast<int64_t>(std::ceil(roi_w / static_cast<T>(pw_n)));
    const T count = static_cast<T>(grid_h * grid_w);
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t plane = (b * channels + c) * height * width;
      for (int64_t ph = 0; ph < ph_n; ++ph)
        for (int64_t pw = 0; pw < pw_n; ++pw) {
          const int64_t o = ((r * channels + c) * ph_n + ph) * pw_n + pw;
          begin(o);
          for (int64_t iy = 0; iy < grid_h; ++iy) {
            const T yy = y0 + static_cast<T>(ph) * bin_h + static_cast<T>(iy + 0.5f) * bin_h / static_cast<T>(grid_h);
            for (int64_t ix = 0; ix < grid_w; ++ix) {
              const T xx = x0 + static_cast<T>(pw) * bin_w + static_cast<T>(ix + 0.5f) * bin_w / static_cast<T>(grid_w);
              T w[4];
              int64_t pos[4];
              bilinear_taps(yy, xx, height, width, w, pos);
              visit(o, plane, w, pos);
            }
          }
          end(o, count);
        }
    }
  }
}

// ROIAlign: each region (batch b, x1, y1, x2, y2) is scaled by spatial_scale (and shifted by
// -0.5 with `aligned`), given at least 1x1 extent (without `aligned`), and cut into PH x PW
// bins; each output is the mean of grid_h x grid_w bilinear samples at the centres of a
// regular grid in its bin (grid = sample_ratio, or ceil(region extent / pooled extent)). A
// region with a negative batch index gives zeros, and zeroes output element r (MXNet's).
void roi_align(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  ref::with_compute_type({in[0].dtype(), in[1].dtype()}, [&]<class T>() {
    const std::vector<T> data = ref::load<T>(in[0]), rois = ref::load<T>(in[1]);
    std::vector<T> y(static_cast<size_t>(out[0].size()), T(0));
    T sum = 0;
    for_each_roi_sample<T>(
        node.attrs, in[0].shape(), rois, [&](int64_t) { sum = 0; },
        [&](int64_t, int64_t plane, const T* w, const int64_t* pos) {
          const T* p = data.data() + plane;
          sum += w[0] * p[pos[0]] + w[1] * p[pos[1]] + w[2] * p[pos[2]] + w[3] * p[pos[3]];
        },
        [&](int64_t o, T count) { y[o] = sum / count; },
        // MXNet 1.9.1 zeroes flat output element r here (its block was meant) and leaves the
        // region's block unwritten; its regions run in order, so a later one may write
        // element r again. Same here, the block being zeros.
        [&](int64_t r) { y[r] = T(0); });
    ref::store(y, out[0]);
  });
}

// _backward_ROIAlign(data, rois, dy): each output's gradient divided by its sample count
// and spread over the samples' four taps with their weights (MXNet's ROIAlign backward);
// regions with a negative batch index give nothing (and take flat element r's, see
// roi_align). The rois get no gradient.
void roi_align_backward(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  ref::with_compute_type({in[0].dtype(), in[1].dtype()}, [&]<class T>() {
    const std::vector<T> rois = ref::load<T>(in[1]);
    std::vector<T> dy = ref::load<T>(in[2]);
    // The forward's zeroing of flat element r by a region r with a negative batch index
    // comes after every region that could have written that element: it gets no gradient.
    for (size_t r = 0; r < rois.size() / 5; ++r)
      if (static_cast<int64_t>(rois[r * 5]) < 0 && r < dy.size()) dy[r] = T(0);
    std::vector<T> dx(static_cast<size_t>(in[0].size()), T(0));
    const ir::Shape& ds = in[0].shape();
    // The sample count of a bin is known only at its end: gather the bin's taps first.
    std::vector<std::pair<int64_t, T>> taps;
    for_each_roi_sample<T>(
        node.attrs, ds, rois, [&](int64_t) { taps.clear(); },
        [&](int64_t, int64_t plane, const T* w, const int64_t* pos) {
          for (int k = 0; k < 4; ++k) taps.emplace_back(plane + pos[k], w[k]);
        },
        [&](int64_t o, T count) {
          const T g = dy[o] / count;
          for (const auto& [at, w] : taps) dx[at] += g * w;
        },
        [](int64_t) {});
    ref::store(dx, out[0]);
  });
}

}  // namespace

void register_detection_kernels() {
  register_reference_kernel("_contrib_box_nms", box_nms);
  register_reference_kernel("_contrib_box_decode", box_decode);
  register_reference_kernel("_contrib_ROIAlign", roi_align);
  register_reference_kernel("_backward_contrib_box_nms", box_nms_backward);
  register_reference_kernel("_backward_ROIAlign", roi_align_backward);
}

}  // namespace ampfuse::runtime
