// RNN (MXNet's fused, cuDNN-compatible recurrent layer): schema and type inference.
#include "ir/error.h"
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
  return d;
}

}  // namespace

void register_rnn_ops(OpRegistry& r) { r.add(rnn_def()); }

}  // namespace ampfuse::ir::nn
