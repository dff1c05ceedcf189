#include "engine/training/trainer.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "runtime/mxnet_params.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ampfuse::engine {

namespace {

using runtime::Tensor;

// The input the loss scale is bound to (autodiff.h's BackwardOptions::loss_scale).
constexpr const char* kLossScaleInput = "__loss_scale__";
// The Dropout step input (TrainingOptions::step_input): the number of steps run so far, so
// the one compiled step draws a fresh mask each step.
constexpr const char* kDropoutStepInput = "__dropout_step__";
// The last step an f32 step input holds exactly (every integer up to 2^24 is an f32).
constexpr int64_t kMaxDropoutStep = int64_t{1} << 24;

// Variables training starts from constants (MXNet's and Gluon's default initializers):
// 0 for biases, BatchNorm's beta and moving mean, 1 for gamma and the moving variance.
std::map<std::string, double> constant_initial_values(const ir::Graph& g) {
  std::map<std::string, double> out;
  for (const ir::Node& n : g.nodes) {
    if (n.is_var()) continue;
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      const ir::Node& in = g.nodes[n.inputs[j].node];
      if (!in.is_var() || in.role == ir::VarRole::input) continue;
      const bool biased = n.op == "FullyConnected" || n.op == "Convolution" || n.op == "Deconvolution";
      if (biased && j == 2) out[in.name] = 0;
      if (n.op == "BatchNorm" || n.op == "LayerNorm" || n.op == "GroupNorm" || n.op == "InstanceNorm") {
        if (j == 1) out[in.name] = 1;
        if (j == 2 || j == 3) out[in.name] = 0;
        if (j == 4) out[in.name] = 1;
      }
    }
  }
  return out;
}

Tensor filled(const ir::TensorType& t, double v) {
  Tensor out = Tensor::zeros(t);
  if (v != 0)
    for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, v);
  return out;
}

// `t` in dtype `to` (itself when it already is).
Tensor as_dtype(const Tensor& t, ir::DType to) { return t.dtype() == to ? t : runtime::cast(t, to); }

// Copies `from` into `to` (same shape), converting the dtype.
void copy_into(Tensor& to, const Tensor& from) {
  if (to.shape() != from.shape()) fail("internal: copy between {} and {}", ir::type_str(to.type()), ir::type_str(from.type()));
  const Tensor src = as_dtype(from, to.dtype()).contiguous();
  if (to.bytes()) std::memcpy(to.raw(), src.raw(), to.bytes());
}

// Mean cross-entropy and correct count of `probs` (batch, classes) against class ids.
void score(const Tensor& probs, const Tensor& labels, int64_t rows, double& loss, int64_t& correct) {
  const int64_t classes = probs.shape().at(1);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t label = static_cast<int64_t>(labels.get_f64(r));
    int64_t best = 0;
    double best_p = -1;
    for (int64_t c = 0; c < classes; ++c) {
      const double p = probs.get_f64(r * classes + c);
      if (p > best_p) best_p = p, best = c;
    }
    const double p_label = label >= 0 && label < classes ? probs.get_f64(r * classes + label) : 0;
    loss -= std::log(std::max(p_label, 1e-30));
    correct += best == label;
  }
}

const ir::Node& variable(const ir::Graph& g, const std::string& name, const char* what) {
  const std::optional<int32_t> v = g.find_var(name);
  if (!v) fail("internal: the {} graph has no variable '{}'", what, name);
  return g.nodes[*v];
}

}  // namespace

void add_softmax_head(ir::Graph& g) {
  if (g.outputs.empty()) fail("train: the graph has no output");
  const ir::ValueRef logits = g.outputs[0];
  const ir::TensorType t = g.type(logits);
  if (t.shape.size() != 2) fail("train: output '{}' is {}; a SoftmaxOutput head needs (batch, classes)", g.output_name(0), ir::type_str(t));
  ir::Node label;
  label.op = ir::kVarOp;
  label.name = "softmax_label";
  if (g.find_var(label.name)) fail("train: cannot add a SoftmaxOutput head: a variable 'softmax_label' exists");
  label.role = ir::VarRole::input;
  label.outputs = {ir::TensorType{ir::DType::f32, {t.shape[0]}}};
  const ir::ValueRef label_value{g.add(std::move(label)), 0};
  ir::Node head;
  head.op = "SoftmaxOutput";
  head.name = "softmax";
  head.inputs = {logits, label_value};
  head.attrs = ir::parse_attrs(ir::OpRegistry::global().get("SoftmaxOutput"), {});
  g.outputs[0] = {g.add(std::move(head)), 0};
  ir::infer_types(g);
}

Tensor take_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  if (t.shape().empty()) fail("take_rows: a 0-d tensor has no rows");
  ir::TensorType type = t.type();
  const int64_t n = type.shape[0];
  type.shape[0] = static_cast<int64_t>(rows.size());
  Tensor out(type);
  const Tensor src = t.contiguous();
  const size_t row_bytes = n ? src.bytes() / static_cast<size_t>(n) : 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    if (rows[k] < 0 || rows[k] >= n) fail("take_rows: row {} of {}", rows[k], n);
    std::memcpy(static_cast<std::byte*>(out.raw()) + k * row_bytes,
                static_cast<const std::byte*>(src.raw()) + static_cast<size_t>(rows[k]) * row_bytes, row_bytes);
  }
  return out;
}

struct Trainer::Impl {
  TrainerOptions opts;
  std::string data, label;
  ir::TensorType label_type;
  int64_t batch = 0;
  int classes = 0;
  double grad_rescale = 1;
  std::optional<Executable> train, infer;
  std::optional<Optimizer> optimizer;
  std::optional<LossScaler> scaler;
  std::map<std::string, int> param_index;     // variable name -> the optimizer's param
  std::map<std::string, Tensor> aux;          // moving statistics (f32), by name
  std::vector<std::string> moving_stat_vars;  // per moving-statistics output, its variable
  size_t model_outputs = 0;
  int64_t skipped = 0;
  int64_t steps = 0;             // steps run so far, skipped ones too: the next Dropout step
  bool dropout_step = false;     // the training graph reads kDropoutStepInput

  Tensor labels_for(const Tensor& labels) const {
    return as_dtype(labels, label_type.dtype).reshaped(label_type.shape);
  }
  // The value to bind for `var` of an executable: a param's forward value (lp16 copy or
  // master) or an aux state, in the variable's dtype.
  Tensor param_binding(const ir::Node& var) const {
    if (auto it = param_index.find(var.name); it != param_index.end()) {
      return as_dtype(optimizer->forward_value(it->second), var.outputs[0].dtype);
    }
    auto a = aux.find(var.name);
    if (a == aux.end()) fail("internal: no value for variable '{}'", var.name);
    return as_dtype(a->second, var.outputs[0].dtype);
  }
};

Trainer::Trainer(ir::Graph model, TrainerOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opts = opts;
  ir::infer_types(model);
  if (model.outputs.empty()) fail("train: the graph has no output");
  if (model.nodes[model.outputs[0].node].op != "SoftmaxOutput") add_softmax_head(model);
  const ir::Node& head = model.nodes[model.outputs[0].node];
  if (head.op != "SoftmaxOutput")
    fail("train: the first output must be a SoftmaxOutput loss head (it is node '{}', {})", head.name, head.op);
  const ir::Node& label = model.nodes[head.inputs.at(1).node];
  if (!label.is_var() || label.role != ir::VarRole::input)
    fail("train: SoftmaxOutput '{}' must read its label from an input variable", head.name);
  m.label = label.name;
  m.label_type = label.outputs.at(0);
  for (const ir::Node& n : model.nodes)
    if (n.is_var() && n.role == ir::VarRole::input && n.name != m.label) {
      if (!m.data.empty()) fail("train: the graph has two data inputs, '{}' and '{}'", m.data, n.name);
      m.data = n.name;
    }
  if (m.data.empty()) fail("train: the graph has no data input");
  const ir::TensorType out_type = model.type(model.outputs[0]);
  if (out_type.shape.size() != 2)
    fail("train: SoftmaxOutput '{}' gives {}; a (batch, classes) output is needed", head.name, ir::type_str(out_type));
  m.batch = out_type.shape[0];
  m.classes = static_cast<int>(out_type.shape[1]);
  m.grad_rescale = opts.grad_rescale > 0 ? opts.grad_rescale
                   : head.attrs.get_string("normalization") == "null" ? 1.0 / static_cast<double>(m.batch)
                                                                       : 1.0;
  if (opts.loss_scaling) m.scaler.emplace(*opts.loss_scaling);
  m.model_outputs = model.outputs.size();

  ExecutorOptions eo;
  if (opts.amp) {
    eo.amp = *opts.amp;
    eo.amp->cast_params_offline = true;  // the optimizer writes the lp16 copies the forward reads
  }
  eo.fuse = opts.fuse;
  eo.pool = opts.pool;
  eo.check_nonfinite = opts.overflow_check == OverflowCheck::folded;
  ExecutorOptions infer_opts = eo;
  infer_opts.check_nonfinite = false;
  eo.backward = BackwardOptions{};
  if (m.scaler) eo.backward->loss_scale = kLossScaleInput;
  // Dropout reads the step as an input (to_training_mode adds it only when the model has a
  // training Dropout), so its masks change every step while the step compiles once.
  eo.training = TrainingOptions{opts.seed, 0, kDropoutStepInput};
  m.train.emplace(Executable::compile(model, eo));
  m.dropout_step = m.train->graph().find_var(kDropoutStepInput).has_value();
  m.infer.emplace(Executable::compile(model, infer_opts));

  // Initial values: seeded random, constants where training starts from them.
  const runtime::Bindings initial = runtime::random_bindings(model, opts.seed);
  const std::map<std::string, double> constants = constant_initial_values(model);
  auto initial_value = [&](const ir::Node& var) {
    auto c = constants.find(var.name);
    return c != constants.end() ? filled(var.outputs[0], c->second) : initial.at(var.name);
  };
  const ir::Graph& tg = m.train->graph();
  const CompileStats& cs = m.train->compile_stats();
  m.optimizer.emplace(opts.optimizer, opts.pool);
  for (const std::string& name : cs.gradient_of) {
    const ir::DType bound = variable(tg, name, "training").outputs.at(0).dtype;
    const ir::Node& var = variable(model, name, "model");
    std::optional<ir::DType> lowp;
    if (bound == ir::DType::f16 || bound == ir::DType::bf16) lowp = bound;
    m.param_index[name] = m.optimizer->add_param(name, as_dtype(initial_value(var), ir::DType::f32), lowp);
  }
  for (const ir::Node& n : model.nodes)
    if (n.is_var() && n.role != ir::VarRole::input && !m.param_index.count(n.name))
      m.aux.emplace(n.name, as_dtype(initial_value(n), ir::DType::f32));

  // The moving statistics training_mode appended: per rewritten BatchNorm in graph order,
  // the new moving mean and variance, written back into the variables of its inputs 3, 4.
  for (const ir::Node& n : tg.nodes) {
    if (n.op != "_BatchNorm_train") continue;
    for (size_t j : {3, 4}) {
      const ir::Node& in = tg.nodes[n.inputs.at(j).node];
      if (!in.is_var() || !m.aux.count(in.name))
        fail("train: BatchNorm '{}' reads its moving statistics from '{}', not from an aux variable", n.name, in.name);
      m.moving_stat_vars.push_back(in.name);
    }
  }
  if (m.model_outputs + m.moving_stat_vars.size() != cs.forward_outputs)
    fail("internal: {} moving statistics for {} extra forward outputs", m.moving_stat_vars.size(),
         cs.forward_outputs - m.model_outputs);
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;

const std::string& Trainer::data_name() const { return impl_->data; }
const std::string& Trainer::label_name() const { return impl_->label; }
int64_t Trainer::batch() const { return impl_->batch; }
int Trainer::num_classes() const { return impl_->classes; }
const LossScaler* Trainer::scaler() const { return impl_->scaler ? &*impl_->scaler : nullptr; }
OptimizerOptions& Trainer::optimizer_options() { return impl_->optimizer->options(); }
int64_t Trainer::skipped_steps() const { return impl_->skipped; }
int64_t Trainer::steps() const { return impl_->steps; }
const Executable& Trainer::training_executable() const { return *impl_->train; }

StepResult Trainer::step(const Tensor& data, const Tensor& labels, bool inject_overflow) {
  Impl& m = *impl_;
  const ir::Graph& tg = m.train->graph();
  runtime::Bindings vars;
  vars.emplace(m.data, data);
  vars.emplace(m.label, m.labels_for(labels));
  for (const ir::Node& n : tg.nodes)
    if (n.is_var() && n.role != ir::VarRole::input) vars.emplace(n.name, m.param_binding(n));
  StepResult r;
  r.scale = m.scaler ? m.scaler->scale() : 1.0;
  if (m.scaler) {
    Tensor scale(ir::TensorType{ir::DType::f32, {}});
    scale.set_f64(0, inject_overflow ? std::numeric_limits<double>::infinity() : r.scale);
    vars.emplace(kLossScaleInput, scale);
  } else if (inject_overflow) {
    fail("train: an overflow can only be injected with loss scaling");
  }
  if (m.dropout_step) {
    if (m.steps > kMaxDropoutStep)
      fail("train: step {} is beyond 2^24, where the f32 Dropout step input is no longer exact (masks would repeat)",
           m.steps);
    Tensor step(ir::TensorType{ir::DType::f32, {}});
    step.set_f64(0, static_cast<double>(m.steps));
    vars.emplace(kDropoutStepInput, step);
  }
  ++m.steps;

  RunStats rs;
  std::vector<Tensor> outs = m.train->run(vars, &rs);
  score(outs[0], labels, m.batch, r.loss, r.correct);
  r.loss /= static_cast<double>(m.batch);

  const size_t first_grad = m.train->compile_stats().forward_outputs;
  const std::vector<Tensor> grads(outs.begin() + static_cast<std::ptrdiff_t>(first_grad), outs.end());
  bool flagged = rs.nonfinite;
  if (m.opts.overflow_check == OverflowCheck::separate_pass) flagged = LossScaler::any_nonfinite(grads, m.opts.pool);
  const OptimizerStep os = m.optimizer->step(grads, m.grad_rescale / r.scale, flagged);
  r.applied = os.applied;
  r.overflow = os.overflow;  // set for `flagged` too: the update did not launch
  if (m.scaler) m.scaler->update(r.overflow);
  if (r.applied) {
    for (size_t k = 0; k < m.moving_stat_vars.size(); ++k)
      copy_into(m.aux.at(m.moving_stat_vars[k]), outs[m.model_outputs + k]);
  } else {
    ++m.skipped;
  }
  return r;
}

Evaluation Trainer::evaluate(const Tensor& data, const Tensor& labels) {
  Impl& m = *impl_;
  const ir::Graph& ig = m.infer->graph();
  runtime::Bindings vars;
  for (const ir::Node& n : ig.nodes)
    if (n.is_var() && n.role != ir::VarRole::input) vars.emplace(n.name, m.param_binding(n));
  Evaluation e;
  const int64_t n = data.shape().at(0);
  if (labels.size() != n) fail("evaluate: {} rows of data but {} labels", n, labels.size());
  int64_t correct = 0;
  for (int64_t begin = 0; begin < n; begin += m.batch) {
    const int64_t rows = std::min(m.batch, n - begin);
    std::vector<int64_t> idx(static_cast<size_t>(m.batch));
    for (int64_t k = 0; k < m.batch; ++k) idx[static_cast<size_t>(k)] = begin + std::min(k, rows - 1);
    const Tensor y = take_rows(labels.reshaped({n}), idx);
    vars.insert_or_assign(m.data, take_rows(data, idx));
    vars.insert_or_assign(m.label, m.labels_for(y));
    const std::vector<Tensor> outs = m.infer->run(vars);
    score(outs[0], y, rows, e.loss, correct);
  }
  e.rows = n;
  if (n) e.loss /= static_cast<double>(n), e.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return e;
}

std::map<std::string, Tensor> Trainer::arg_params() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, i] : impl_->param_index) out.emplace(name, impl_->optimizer->master(i).clone());
  return out;
}

std::map<std::string, Tensor> Trainer::aux_params() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : impl_->aux) out.emplace(name, t.clone());
  return out;
}

void Trainer::save_params(const std::string& path) const {
  runtime::NDArrayList list;
  for (auto& [name, t] : arg_params()) list.names.push_back("arg:" + name), list.arrays.push_back(t);
  for (auto& [name, t] : aux_params()) list.names.push_back("aux:" + name), list.arrays.push_back(t);
  runtime::write_mxnet_params(path, list);
}

}  // namespace ampfuse::engine
