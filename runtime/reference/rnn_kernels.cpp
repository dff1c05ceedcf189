// Reference kernel: RNN (lstm, gru, rnn_tanh, rnn_relu; stacked, optionally bidirectional),
// following MXNet's CPU implementation (src/operator/rnn_impl.h) step for step:
//   lstm: i, f, g, o = gates(x W_i2h^T + h W_h2h^T + b_i2h + b_h2h)
//         c' = f * c + i * g,  h' = o * tanh(c')
//   gru:  r = sig(xW_r + hW_r + b_ir + b_hr),  z = sig(xW_z + hW_z + b_iz + b_hz)
//         n = tanh(xW_n + b_in + r * (hW_n + b_hn)),  h' = (1 - z) * n + z * h
//   rnn:  h' = act(xW + hW + b_i2h + b_h2h)
// The reverse direction runs from the last step to the first; its outputs fill the second
// half of each step's features. Layer l > 0 reads layer l-1's output.
//
// _backward_RNN runs that forward again keeping each step's states and gates (a Tape), then
// backpropagates through time: per layer from the top, per direction in the reverse of its
// order of steps, the gates' pre-activation gradients of every step give the input and
// weight gradients in two products at the end, as the forward computes x W_i2h^T.
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
// What one direction of one layer computed at each step t (time order, (T, N, ...) rows):
// the states before the step, the activated gates (rnn modes: the new h), the new cell
// (lstm) and h W_n + b_hn (gru, what the reset gate multiplies).
template <class T>
struct Tape {
  std::vector<T> h_prev, c_prev, gates, c_new, gru_h_part;
};

template <class T>
void run_direction(const RnnGeometry& g, int64_t layer, int64_t dir, const std::vector<T>& params, const T* x, T* y,
                   T* h, T* c, Tape<T>* tape = nullptr) {
  const int64_t steps = g.seq_len, batch = g.batch, hidden = g.hidden, gate_width = g.gates() * hidden;
  const int64_t in_size = g.layer_input_size(layer), width = g.directions * hidden;
  const T* w_x = params.data() + g.i2h_weight_offset(layer, dir);
  const T* w_h = params.data() + g.h2h_weight_offset(layer, dir);
  const T* b_x = params.data() + g.i2h_bias_offset(layer, dir);
  const T* b_h = params.data() + g.h2h_bias_offset(layer, dir);
  // Input contributions for every step at once, then one small product per step.
  std::vector<T> xw(static_cast<size_t>(steps * batch * gate_width)), hw(static_cast<size_t>(batch * gate_width));
  gemm<T>(steps * batch, gate_width, in_size, x, in_size, false, w_x, in_size, true, xw.data(), gate_width);
  if (tape) {
    const size_t states = static_cast<size_t>(steps * batch * hidden);
    tape->h_prev.resize(states), tape->gates.resize(states * static_cast<size_t>(g.gates()));
    if (g.mode == RnnMode::lstm) tape->c_prev.resize(states), tape->c_new.resize(states);
    if (g.mode == RnnMode::gru) tape->gru_h_part.resize(states);
  }
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t t = dir ? steps - 1 - i : i;
    gemm<T>(batch, gate_width, hidden, h, hidden, false, w_h, hidden, true, hw.data(), gate_width);
    for (int64_t n = 0; n < batch; ++n) {
      const T* from_x = xw.data() + (t * batch + n) * gate_width;
      const T* from_h = hw.data() + n * gate_width;
      T* hn = h + n * hidden;
      T* cn = c + n * hidden;
      const int64_t row = t * batch + n;
      if (tape) {
        std::copy(hn, hn + hidden, tape->h_prev.begin() + row * hidden);
        if (g.mode == RnnMode::lstm) std::copy(cn, cn + hidden, tape->c_prev.begin() + row * hidden);
      }
      T* gates = tape ? tape->gates.data() + row * gate_width : nullptr;
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
            if (tape) {
              gates[k] = in_gate, gates[hidden + k] = forget, gates[2 * hidden + k] = cell, gates[3 * hidden + k] = out;
              tape->c_new[row * hidden + k] = cn[k];
            }
            break;
          }
          case RnnMode::gru: {
            const T r = sigmoid(pre(0)), z = sigmoid(pre(1));
            const T cand = std::tanh(from_x[2 * hidden + k] + b_x[2 * hidden + k] +
                                     r * (from_h[2 * hidden + k] + b_h[2 * hidden + k]));
            hn[k] = (T(1) - z) * cand + z * hn[k];
            if (tape) {
              gates[k] = r, gates[hidden + k] = z, gates[2 * hidden + k] = cand;
              tape->gru_h_part[row * hidden + k] = from_h[2 * hidden + k] + b_h[2 * hidden + k];
            }
            break;
          }
          case RnnMode::rnn_tanh:
            hn[k] = std::tanh(pre(0));
            break;
          case RnnMode::rnn_relu:
            hn[k] = std::max(pre(0), T(0));
            break;
        }
        if (tape && (g.mode == RnnMode::rnn_tanh || g.mode == RnnMode::rnn_relu)) gates[k] = hn[k];
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

// The gradients of one direction of one layer, from its tape: adds x's gradient into dx
// (T, N, in_size) and the weights' and biases' into dparams; dh and dc (N, H) hold the
// gradients reaching the final states and leave holding those of the initial ones.
template <class T>
void backprop_direction(const RnnGeometry& g, int64_t layer, int64_t dir, const std::vector<T>& params,
                        const Tape<T>& tape, const T* x, const T* dy, T* dx, std::vector<T>& dparams, T* dh, T* dc) {
  const int64_t steps = g.seq_len, batch = g.batch, hidden = g.hidden, gate_width = g.gates() * hidden;
  const int64_t in_size = g.layer_input_size(layer), width = g.directions * hidden;
  const T* w_x = params.data() + g.i2h_weight_offset(layer, dir);
  const T* w_h = params.data() + g.h2h_weight_offset(layer, dir);
  T* dw_x = dparams.data() + g.i2h_weight_offset(layer, dir);
  T* dw_h = dparams.data() + g.h2h_weight_offset(layer, dir);
  T* db_x = dparams.data() + g.i2h_bias_offset(layer, dir);
  T* db_h = dparams.data() + g.h2h_bias_offset(layer, dir);
  // Pre-activation gradients of the x part (every step, for the products at the end) and
  // of the h part (one step); they differ only in gru's candidate gate.
  std::vector<T> dgx(static_cast<size_t>(steps * batch * gate_width)), dgh(static_cast<size_t>(batch * gate_width));
  for (int64_t i = steps; i-- > 0;) {
    const int64_t t = dir ? steps - 1 - i : i;
    for (int64_t n = 0; n < batch; ++n) {
      const int64_t row = t * batch + n;
      const T* gates = tape.gates.data() + row * gate_width;
      T* gx = dgx.data() + row * gate_width;
      T* gh = dgh.data() + n * gate_width;
      for (int64_t k = 0; k < hidden; ++k) {
        const int64_t s = n * hidden + k;
        const T dh_out = dh[s] + dy[row * width + dir * hidden + k];
        switch (g.mode) {
          case RnnMode::lstm: {
            const T in_gate = gates[k], forget = gates[hidden + k], cell = gates[2 * hidden + k],
                    out = gates[3 * hidden + k];
            const T tanh_c = std::tanh(tape.c_new[row * hidden + k]);
            const T dc_new = dc[s] + dh_out * out * (T(1) - tanh_c * tanh_c);
            gx[k] = dc_new * cell * in_gate * (T(1) - in_gate);
            gx[hidden + k] = dc_new * tape.c_prev[row * hidden + k] * forget * (T(1) - forget);
            gx[2 * hidden + k] = dc_new * in_gate * (T(1) - cell * cell);
            gx[3 * hidden + k] = dh_out * tanh_c * out * (T(1) - out);
            for (int64_t q = 0; q < 4; ++q) gh[q * hidden + k] = gx[q * hidden + k];
            dc[s] = dc_new * forget;
            dh[s] = 0;
            break;
          }
          case RnnMode::gru: {
            const T r = gates[k], z = gates[hidden + k], cand = gates[2 * hidden + k];
            const T d_cand = dh_out * (T(1) - z) * (T(1) - cand * cand);
            const T dr = d_cand * tape.gru_h_part[row * hidden + k];
            gx[k] = gh[k] = dr * r * (T(1) - r);
            gx[hidden + k] = gh[hidden + k] = dh_out * (tape.h_prev[row * hidden + k] - cand) * z * (T(1) - z);
            gx[2 * hidden + k] = d_cand;
            gh[2 * hidden + k] = d_cand * r;
            dh[s] = dh_out * z;
            break;
          }
          case RnnMode::rnn_tanh:
            gx[k] = gh[k] = dh_out * (T(1) - gates[k] * gates[k]);
            dh[s] = 0;
            break;
          case RnnMode::rnn_relu:
            gx[k] = gh[k] = gates[k] > T(0) ? dh_out : T(0);
            dh[s] = 0;
            break;
        }
      }
      for (int64_t j = 0; j < gate_width; ++j) db_x[j] += gx[j], db_h[j] += gh[j];
    }
    // dW_h += dgh^T h_prev; the previous state's gradient += dgh W_h.
    const T* h_prev = tape.h_prev.data() + t * batch * hidden;
    gemm<T>(gate_width, hidden, batch, dgh.data(), gate_width, true, h_prev, hidden, false, dw_h, hidden, true);
    gemm<T>(batch, hidden, gate_width, dgh.data(), gate_width, false, w_h, hidden, false, dh, hidden, true);
  }
  gemm<T>(steps * batch, in_size, gate_width, dgx.data(), gate_width, false, w_x, in_size, false, dx, in_size, true);
  gemm<T>(gate_width, in_size, steps * batch, dgx.data(), gate_width, true, x, in_size, false, dw_x, in_size, true);
}

// in: data, parameters, state, [state_cell], dy, dhy, [dcy];
// out: ddata, dparameters, dstate, [dstate_cell].
void rnn_backward(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const RnnGeometry g = ir::nn::rnn_geometry(node.attrs, in[0].shape());
  const bool lstm = g.mode == RnnMode::lstm;
  const size_t dy_slot = lstm ? 4 : 3;
  const int64_t state_size = g.batch * g.hidden;
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> params = load<T>(in[1]);
    std::vector<T> h = load<T>(in[2]);
    std::vector<T> c = lstm ? load<T>(in[3]) : std::vector<T>(h.size(), T(0));
    // The forward again, keeping every layer's input and every direction's tape.
    std::vector<std::vector<T>> layer_inputs = {load<T>(in[0])};
    std::vector<Tape<T>> tapes(static_cast<size_t>(g.layers * g.directions));
    std::vector<T> y(static_cast<size_t>(g.seq_len * g.batch * g.directions * g.hidden));
    for (int64_t l = 0; l < g.layers; ++l) {
      for (int64_t d = 0; d < g.directions; ++d) {
        const int64_t s = (l * g.directions + d) * state_size;
        run_direction<T>(g, l, d, params, layer_inputs.back().data(), y.data(), h.data() + s, c.data() + s,
                         &tapes[static_cast<size_t>(l * g.directions + d)]);
      }
      if (l + 1 < g.layers) layer_inputs.push_back(y);
    }
    // Backwards through the layers: each layer's input gradient is the one below's dy.
    std::vector<T> dy = load<T>(in[dy_slot]);
    std::vector<T> dh = load<T>(in[dy_slot + 1]);
    std::vector<T> dc = lstm ? load<T>(in[dy_slot + 2]) : std::vector<T>(dh.size(), T(0));
    std::vector<T> dparams(params.size(), T(0));
    for (int64_t l = g.layers; l-- > 0;) {
      const std::vector<T>& x = layer_inputs[static_cast<size_t>(l)];
      std::vector<T> dx(x.size(), T(0));
      for (int64_t d = 0; d < g.directions; ++d) {
        const int64_t s = (l * g.directions + d) * state_size;
        backprop_direction<T>(g, l, d, params, tapes[static_cast<size_t>(l * g.directions + d)], x.data(), dy.data(),
                              dx.data(), dparams, dh.data() + s, dc.data() + s);
      }
      dy = std::move(dx);
    }
    store(dy, out[0]);
    store(dparams, out[1]);
    store(dh, out[2]);
    if (lstm) store(dc, out[3]);
  });
}

}  // namespace

void register_rnn_kernels() {
  register_reference_kernel("RNN", rnn);
  register_reference_kernel("_backward_RNN", rnn_backward);
}

}  // namespace ampfuse::runtime::ref
