// RNN (MXNet's fused, cuDNN-compatible recurrent layer): schema, type inference and its
// gradient, one `_backward_RNN` node:
//   _backward_RNN(data, parameters, state, [state_cell], dy, dhy, [dcy])
//       -> (ddata, dparameters, dstate, [dstate_cell])
// dhy and dcy are the gradients reaching the final states (zeros without state_outputs or
// when none arrives). The reference kernel (runtime/reference/rnn_kernels.cpp) runs the
// forward again, keeping each step's gates, then backpropagates through time.
#include "ir/error.h"
#include "ir/gradient.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

namespace {

bool is_lstm(const Attrs& a) { return a.get_string("mode") == "lstm"; }

OpDef rnn_def() {
  OpDef d;
  d.name = "RNN";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"parameters", SlotRole::param}, {"state"}, {"state_cell"}, {"sequence_length"}};
  // state_cell exists for LSTM only; sequence_length is accepted so that inference can
  // refuse use_sequence_length with a message rather than an input count mismatch.
  d.num_inputs = [](const Attrs& a) { return 3 + (is_lstm(a) ? 1 : 0) + (a.get_bool("use_sequence_length") ? 1 : 0); };
  d.num_outputs = [](const Attrs& a) { return a.get_bool("state_outputs") ? (is_lstm(a) ? 3 : 2) : 1; };
  d.attrs = {required("state_size", AttrKind::Int),
             required("num_layers", AttrKind::Int),
             optional("bidirectional", AttrKind::Bool, false),
             {"mode", AttrKind::String, std::nullopt, {"rnn_relu", "rnn_tanh", "lstm", "gru"}},
             optional("state_outputs", AttrKind::Bool, false),
             none_by_default("projection_size", AttrKind::Int),
             none_by_default("lstm_state_clip_min", AttrKind::Float),
             none_by_default("lstm_state_clip_max", AttrKind::Float),
             optional("use_sequence_length", AttrKind::Bool, false)};
  // p is dropout between layers, off at inference; clip_nan only acts with the refused clips.
  d.ignored_attrs = {"p", "lstm_state_clip_nan", "cudnn_off"};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const TensorType in = *data;
    const RnnGeometry g = rnn_geometry(ctx.attrs, in.shape);
    fill_input(ctx, 1, "parameters", {in.dtype, {g.param_count()}},
               fmt::format("{} layers, {} directions, input size {}, state size {}", g.layers, g.directions,
                           g.input_size, g.hidden));
    const TensorType state{in.dtype, g.state_shape()};
    fill_input(ctx, 2, "state", state);
    if (g.mode == RnnMode::lstm) fill_input(ctx, 3, "state_cell", state);
    ctx.outputs[0] = TensorType{in.dtype, {g.seq_len, g.batch, g.directions * g.hidden}};
    for (size_t k = 1; k < ctx.outputs.size(); ++k) ctx.outputs[k] = state;  // final h, then c
  };
  // MXNet 1.9.1: FP16_FUNCS in the fp16 list, FP32_FUNCS in the bf16 one (no bf16 RNN
  // kernel there).
  d.amp_fp16 = AmpClass::lowp;
  d.amp_bf16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) {
    const bool lstm = is_lstm(c.attrs());
    const size_t state_inputs = lstm ? 2 : 1;
    InputGrads grads(c.num_inputs());
    std::vector<ValueRef> ins = {c.input(0), c.input(1), c.input(2)};
    if (lstm) ins.push_back(c.input(3));
    ins.push_back(c.out_grad(0));
    for (size_t k = 1; k <= state_inputs; ++k)
      ins.push_back(k < c.num_outputs() ? c.out_grad(k) : c.zeros_like(c.input(1 + k)));
    const ValueRef d = c.emit_typed("_backward_RNN", ins, c.attrs());
    for (size_t i = 0; i < 2 + state_inputs; ++i) grads[i] = ValueRef{d.node, static_cast<int32_t>(i)};
    return grads;
  };
  return d;
}

// _backward_RNN: the forward's inputs, then the gradients of y and of the final states.
OpDef rnn_backward_def(const OpDef& forward) {
  OpDef d;
  d.name = "_backward_RNN";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"parameters"}, {"state"}, {"state_cell"}, {"dy"}, {"dhy"}, {"dcy"}};
  d.num_inputs = [](const Attrs& a) { return is_lstm(a) ? 7 : 5; };
  d.num_outputs = [](const Attrs& a) { return is_lstm(a) ? 4 : 3; };
  d.attrs = forward.attrs;
  d.ignored_attrs = forward.ignored_attrs;
  d.infer = [](InferContext& ctx) {
    const TensorType in = ctx.in(0);
    require_float(in, "the data");
    const RnnGeometry g = rnn_geometry(ctx.attrs, in.shape);
    const bool lstm = g.mode == RnnMode::lstm;
    const TensorType params{in.dtype, {g.param_count()}}, state{in.dtype, g.state_shape()},
        y{in.dtype, {g.seq_len, g.batch, g.directions * g.hidden}};
    const size_t states = lstm ? 2 : 1, dy = 2 + states;
    const auto require = [&](size_t i, const TensorType& want, const char* what) {
      if (ctx.in(i) != want) fail("input {} ({}) is {} but must be {}", i, what, type_str(ctx.in(i)), type_str(want));
    };
    require(1, params, "parameters");
    for (size_t k = 0; k < states; ++k) require(2 + k, state, k ? "state_cell" : "state");
    require(dy, y, "dy: the gradient of the output");
    for (size_t k = 0; k < states; ++k) require(dy + 1 + k, state, k ? "dcy" : "dhy");
    ctx.outputs[0] = in;
    ctx.outputs[1] = params;
    for (size_t k = 0; k < states; ++k) ctx.outputs[2 + k] = state;
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::neutral;
  return d;
}

}  // namespace

void register_rnn_ops(OpRegistry& r) {
  r.add(rnn_def());
  r.add(rnn_backward_def(r.get("RNN")));
}

}  // namespace ampfuse::ir::nn
