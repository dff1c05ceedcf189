// Reference kernel of _contrib_ModulatedDeformableConvolution (schema in
// ir/ops/nn_deformable_conv.cpp), MXNet 1.9.1's CPU algorithm: per image, a column buffer
// (MXNet's modulated_deformable_im2col) holds for every input channel c, tap (i, j) and
// output position (y, x) the bilinear sample of channel c at
//   (y * stride_h - pad_h + i * dilate_h + dy,  x * stride_w - pad_w + j * dilate_w + dx)
// times the mask, (dy, dx) and the mask read from the channels of c's deformable group; then
// each group's weights (num_filter / num_group, C / num_group * kh * kw) multiply its rows
// of the buffer, and the bias is added. Everything in the compute type (f32, f64 for f64;
// low-precision data is widened and the output rounded once, where MXNet's half kernel
// computes in half). The sums run over (c, i, j) in order, one f32 sum per output, where
// MXNet's BLAS chooses its own order: results agree within f32 rounding, not bit for bit.
#include "ir/ops/nn_params.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <cmath>

namespace ampfuse::runtime::ref {

namespace {

// MXNet's dmcn_im2col_bilinear_cpu: the four neighbours of (h, w), each read only where it
// lies inside the plane (zero elsewhere), weighted in the compute type and summed in MXNet's
// order. The caller has checked -1 < h < height and -1 < w < width.
template <class T>
T bilinear(const T* plane, int64_t height, int64_t width, T h, T w) {
  const int64_t h_low = static_cast<int64_t>(std::floor(h)), w_low = static_cast<int64_t>(std::floor(w));
  const int64_t h_high = h_low + 1, w_high = w_low + 1;
  const T lh = h - static_cast<T>(h_low), lw = w - static_cast<T>(w_low);
  const T hh = 1 - lh, hw = 1 - lw;
  const T v1 = h_low >= 0 && w_low >= 0 ? plane[h_low * width + w_low] : T(0);
  const T v2 = h_low >= 0 && w_high <= width - 1 ? plane[h_low * width + w_high] : T(0);
  const T v3 = h_high <= height - 1 && w_low >= 0 ? plane[h_high * width + w_low] : T(0);
  const T v4 = h_high <= height - 1 && w_high <= width - 1 ? plane[h_high * width + w_high] : T(0);
  const T w1 = hh * hw, w2 = hh * lw, w3 = lh * hw, w4 = lh * lw;
  return w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4;
}

void modulated_deformable_conv(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::nn::DeformableConvGeometry g = ir::nn::deformable_conv_geometry(node.attrs, in[0].shape());
  const bool has_bias = in.size() > 4;
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> data = load<T>(in[0]), offset = load<T>(in[1]), mask = load<T>(in[2]), weight = load<T>(in[3]);
    const std::vector<T> bias = has_bias ? load<T>(in[4]) : std::vector<T>();
    const int64_t height = g.in_size[0], width = g.in_size[1], oh = g.out_size[0], ow = g.out_size[1];
    const int64_t kh = g.kernel[0], kw = g.kernel[1], taps = kh * kw, positions = oh * ow;
    const int64_t channels = g.in_channels, per_dgroup = channels / g.deformable_groups;
    const int64_t group_in = channels / g.groups, group_out = g.out_channels / g.groups;
    const int64_t k_dim = group_in * taps;  // a group's rows of the column buffer
    std::vector<T> col(static_cast<size_t>(channels * taps * positions));
    std::vector<T> y(static_cast<size_t>(out[0].size()));
    for (int64_t n = 0; n < g.batch; ++n) {
      // The column buffer: row c * taps + i * kw + j, column y * ow + x (MXNet's layout).
      for (int64_t c = 0; c < channels; ++c) {
        const T* plane = data.data() + (n * channels + c) * height * width;
        const int64_t dg = c / per_dgroup;
        const T* off = offset.data() + (n * g.deformable_groups + dg) * 2 * taps * positions;
        const T* msk = mask.data() + (n * g.deformable_groups + dg) * taps * positions;
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t tap = i * kw + j;
            T* row = col.data() + (c * taps + tap) * positions;
            for (int64_t oy = 0; oy < oh; ++oy)
              for (int64_t ox = 0; ox < ow; ++ox) {
                const int64_t p = oy * ow + ox;
                // MXNet: the integer grid position plus the offset, in the compute type.
                const T h = static_cast<T>(oy * g.stride[0] - g.pad[0] + i * g.dilate[0]) + off[2 * tap * positions + p];
                const T w = static_cast<T>(ox * g.stride[1] - g.pad[1] + j * g.dilate[1]) + off[(2 * tap + 1) * positions + p];
                // Outside (-1, H) x (-1, W) nothing is read (NaN offsets fail the test too).
                const T val = h > -1 && w > -1 && h < static_cast<T>(height) && w < static_cast<T>(width)
                                  ? bilinear(plane, height, width, h, w)
                                  : T(0);
                row[p] = val * msk[tap * positions + p];
              }
          }
      }
      for (int64_t grp = 0; grp < g.groups; ++grp)
        for (int64_t o = 0; o < group_out; ++o) {
          const int64_t oc = grp * group_out + o;
          const T* wrow = weight.data() + oc * k_dim;
          const T* block = col.data() + grp * k_dim * positions;
          T* dst = y.data() + (n * g.out_channels + oc) * positions;
          for (int64_t p = 0; p < positions; ++p) {
            T sum = 0;
            for (int64_t k = 0; k < k_dim; ++k) sum += wrow[k] * block[k * positions + p];
            dst[p] = has_bias ? sum + bias[oc] : sum;
          }
        }
    }
    store(y, out[0]);
  });
}

}  // namespace

void register_deformable_conv_kernels() {
  register_reference_kernel("_contrib_ModulatedDeformableConvolution", modulated_deformable_conv);
}

}  // namespace ampfuse::runtime::ref
