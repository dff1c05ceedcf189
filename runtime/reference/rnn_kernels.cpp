// Reference kernel: RNN (lstm, gru, rnn_tanh, rnn_relu; stacked, optionally bidirectional),
// following MXNet's CPU implementation (src/operator/rnn_impl.h) step for step:
//   lstm: i, f, g, o = gates(x W_i2h^T + h W_h2h^T + b_i2h + b_h2h)
//         c' = f * c + i * g,  h' = o * tanh(c')
//   gru:  r = sig(xW_r + hW_r + b_ir + b_hr),  z = sig(xW_z + hW_z + b_iz + b_hz)
//         n = tanh(xW_n + b_in + r * (hW_n + b_hn)),  h' = (1 - z) * n + z * h
//   rnn:  h' = act(xW + hW + b_i2h + b_h2h)
// The reverse direction runs from the last step to the first; its outputs fill the second
// half of each step's features. Layer l > 0 reads layer l-1's output.
#include "ir/error.h"
#include "ir/ops/nn_params.h"
#include "runtime/reference/gemm.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>

namespace ampfuse::runtime::ref {

namespace {

using ir::nn::RnnGeometry;
using ir::nn::RnnMode;

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// One direction of one layer over the whole sequence. `x` is (T, N, in_size); writes h into
// columns [dir*H, dir*H + H) of `y` (T, N, D*H) and leaves the final h and c in h, c.
template <class T>
void run_direction(const RnnGeometry& g, int64_t layer, int64_t dir, const std::vector<T>& params, const T* x, T* y,
                   T* h, T* c) {
  const int64_t steps = g.seq_len, batch = g.batch, hidden = g.hidden, gate_width = g.gates() * hidden;
  const int64_t in_size = g.layer_input_size(layer), width = g.directions * hidden;
  const T* w_x = params.data() + g.i2h_weight_offset(layer, dir);
  const T* w_h = params.data() + g.h2h_weight_offset(layer, dir);
  const T* b_x = params.data() + g.i2h_bias_offset(layer, dir);
  const T* b_h = params.data() + g.h2h_bias_offset(layer, dir);
  // Input contributions for every step at once, then one small product per step.
  std::vector<T> xw(static_cast<size_t>(steps * batch * gate_width)), hw(static_cast<size_t>(batch * gate_width));
  gemm<T>(steps * batch, gate_width, in_size, x, in_size, false, w_x, in_size, true, xw.data(), gate_width);
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t t = dir ? steps - 1 - i : i;
    gemm<T>(batch, gate_width, hidden, h, hidden, false, w_h, hidden, true, hw.data(), gate_width);
    for (int64_t n = 0; n < batch; ++n) {
      const T* from_x = xw.data() + (t * batch + n) * gate_width;
      const T* from_h = hw.data() + n * gate_width;
      T* hn = h + n * hidden;
      T* cn = c + n * hidden;
      for (int64_t k = 0; k < hidden; ++k) {
        // pre(q) is gate q's pre-activation in MXNet's order of additions.
        auto pre = [&](int64_t q) {
          return from_x[q * hidden + k] + from_h[q * hidden + k] + b_x[q * hidden + k] + b_h[q * hidden + k];
        };
        switch (g.mode) {
          case RnnMode::lstm: {
            const T in_gate = sigmoid(pre(0)), forget = sigmoid(pre(1)), cell = std::tanh(pre(2)),
                    out = sigmoid(pre(3));
            cn[k] = cn[k] * forget + in_gate * cell;
            hn[k] = out * std::tanh(cn[k]);
            break;
          }
          case RnnMode::gru: {
            const T r = sigmoid(pre(0)), z = sigmoid(pre(1));
            const T cand = std::tanh(from_x[2 * hidden + k] + b_x[2 * hidden + k] +
                                     r * (from_h[2 * hidden + k] + b_h[2 * hidden + k]));
            hn[k] = (T(1) - z) * cand + z * hn[k];
            break;
          }
          case RnnMode::rnn_tanh:
            hn[k] = std::tanh(pre(0));
            break;
          case RnnMode::rnn_relu:
            hn[k] = std::max(pre(0), T(0));
            break;
        }
        y[(t * batch + n) * width + dir * hidden + k] = hn[k];
      }
    }
  }
}

void rnn(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const RnnGeometry g = ir::nn::rnn_geometry(node.attrs, in[0].shape());
  const bool lstm = g.mode == RnnMode::lstm;
  const int64_t state_size = g.batch * g.hidden;
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> layer_in = load<T>(in[0]);
    const std::vector<T> params = load<T>(in[1]);
    std::vector<T> h = load<T>(in[2]);
    std::vector<T> c = lstm ? load<T>(in[3]) : std::vector<T>(h.size(), T(0));
    std::vector<T> y(static_cast<size_t>(g.seq_len * g.batch * g.directions * g.hidden));
    for (int64_t l = 0; l < g.layers; ++l) {
      for (int64_t d = 0; d < g.directions; ++d) {
        const int64_t s = (l * g.directions + d) * state_size;  // h and c update in place
        run_direction<T>(g, l, d, params, layer_in.data(), y.data(), h.data() + s, c.data() + s);
      }
      if (l + 1 < g.layers) layer_in = y;
    }
    store(y, out[0]);
    if (out.size() > 1) store(h, out[1]);
    if (out.size() > 2) store(c, out[2]);
  });
}

}  // namespace

void register_rnn_kernels() { register_reference_kernel("RNN", rnn); }

}  // namespace ampfuse::runtime::ref
