#include "region.h"

#include "ir/error.h"
#include "engine/passes/training_mode.h"
#include "ir/mxnet_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <functional>

namespace ampfuse::mxnet {
namespace {

// The names of the symbol's inputs in MXNet's order: "arg_nodes", the variable nodes in
// the order of nnvm's indexed graph, which is the order list_inputs() gives and the order
// the subgraph operator receives its inputs in.
std::vector<std::string> input_names_of(const std::string& json, const std::string& region) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    throw Error(fmt::format("MXNet region '{}': subgraph JSON does not parse: {}", region, e.what()));
  }
  std::vector<std::string> names;
  const auto& nodes = j.at("nodes");
  for (const auto& idx : j.at("arg_nodes")) names.push_back(nodes.at(idx.get<size_t>()).at("name").get<std::string>());
  return names;
}

// The Dropout step input of the training form (TrainingOptions::step_input).
constexpr const char* kStepInput = "__ampfuse_dropout_step__";

}  // namespace

Region::Region(std::string json, std::string name, std::optional<engine::AmpOptions> amp, RegionForm form)
    : json_(std::move(json)), name_(std::move(name)), amp_(std::move(amp)), form_(form) {
  input_names_ = input_names_of(json_, name_);
  // Import once now without shapes, so that a region ampfuse cannot read fails when MXNet
  // creates the operator, not on its first batch.
  ir::MxnetImportOptions io;
  io.infer = false;
  (void)ir::import_mxnet_json(json_, name_, io);
}

RegionStats Region::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

Region::Signature Region::signature_of(const std::vector<RegionInput>& inputs) {
  Signature key;
  key.reserve(inputs.size());
  for (const RegionInput& in : inputs)
    key.emplace_back(static_cast<int>(in.tensor.dtype()),
                     std::vector<int64_t>(in.tensor.shape().begin(), in.tensor.shape().end()));
  return key;
}

ir::Graph Region::import_for(const std::vector<RegionInput>& inputs) const {
  ir::MxnetImportOptions io;
  for (size_t i = 0; i < inputs.size(); ++i) {
    io.input_shapes[input_names_[i]] = inputs[i].tensor.shape();
    io.input_dtypes[input_names_[i]] = inputs[i].tensor.dtype();
  }
  return ir::import_mxnet_json(json_, name_, io);
}

engine::ExecutorOptions Region::options() const {
  engine::ExecutorOptions eo;
  eo.amp = amp_;
  if (form_ == RegionForm::training) {
    // The masks' Philox key: one per region (its JSON), so that two regions drawing the
    // same step still drop different elements; the step varies them from call to call.
    eo.training = engine::TrainingOptions{std::hash<std::string>{}(json_), 0, kStepInput};
  }
  return eo;
}

runtime::Bindings Region::bindings(const std::vector<RegionInput>& inputs, const engine::Executable& exe,
                                   uint32_t step) const {
  runtime::Bindings b;
  for (size_t i = 0; i < inputs.size(); ++i) b.emplace(input_names_[i], inputs[i].tensor);
  if (exe.graph().find_var(kStepInput)) {
    if (step >= kDropoutSteps)
      throw Error(fmt::format("MXNet region '{}': Dropout step {} is not below 2^24 (the f32 step input)", name_, step));
    runtime::Tensor s(ir::TensorType{ir::DType::f32, {}});
    s.set_f64(0, static_cast<double>(step));
    b.emplace(kStepInput, std::move(s));
  }
  return b;
}

// The moving statistics training_mode appended after the model's outputs: per BatchNorm
// in graph order, the new mean and variance of the variables of its inputs 3 and 4, which
// are MXNet's aux arrays (region inputs).
std::vector<size_t> Region::moving_stat_inputs_of(const ir::Graph& g) const {
  std::vector<size_t> inputs;
  for (const ir::Node& n : g.nodes) {
    if (n.op != "_BatchNorm_train") continue;
    for (size_t j : {3, 4}) {
      const ir::Node& in = g.nodes[n.inputs.at(j).node];
      auto pos = std::find(input_names_.begin(), input_names_.end(), in.name);
      if (!in.is_var() || pos == input_names_.end())
        throw Error(fmt::format("MXNet region '{}': BatchNorm '{}' reads its moving statistics from '{}', not from "
                                "an input of the region, so training cannot update them",
                                name_, n.name, in.name));
      inputs.push_back(static_cast<size_t>(pos - input_names_.begin()));
    }
  }
  return inputs;
}

Region::Compiled& Region::compiled_for(const std::vector<RegionInput>& inputs) {
  Signature key = signature_of(inputs);
  auto it = compiled_.find(key);
  if (it != compiled_.end()) return *it->second;

  ir::Graph g = import_for(inputs);
  const size_t model_outputs = g.outputs.size();
  engine::ExecutorOptions eo = options();
  // Inference: weight casts once per (buffer, version), see region.h. The training form
  // reads moving statistics it rewrites every call, and trains weights that change every
  // step: nothing there stays constant long enough to keep.
  eo.constant_params = form_ != RegionForm::training;
  // Convolutions and FullyConnecteds with their add and LeakyReLU as oneDNN post-ops, as MXNet's
  // own oneDNN fusion runs them: the same f32 results, one rounding fewer in bf16
  // (engine/passes/epilogue_fusion.h).
  eo.fuse_epilogues = form_ != RegionForm::training;
  // softmax, LayerNorm and last-axis reductions as generated kernels with their casts and neighbours
  // (engine/planning/row_fusion.h).
  eo.row_kernels = form_ != RegionForm::training;
  auto c = std::make_unique<Compiled>(Compiled{engine::Executable::compile(std::move(g), eo), {}, {}});
  const ir::Graph& cg = c->exe.graph();
  // Which inputs the executable treats as constants: variables in weight or aux slots.
  std::map<std::string, ir::VarRole> roles;
  for (const ir::Node& n : cg.nodes)
    if (n.is_var()) roles[n.name] = n.role;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto r = roles.find(input_names_[i]);
    if (r == roles.end() || r->second == ir::VarRole::input || !eo.constant_params) continue;
    c->weights.push_back({.input = i, .aux = r->second == ir::VarRole::aux});
  }
  if (form_ == RegionForm::training) {
    c->moving_stat_inputs = moving_stat_inputs_of(cg);
    if (model_outputs + c->moving_stat_inputs.size() != cg.outputs.size())
      throw Error(fmt::format("MXNet region '{}': internal: {} moving statistics for {} extra outputs", name_,
                              c->moving_stat_inputs.size(), cg.outputs.size() - model_outputs));
  }
  ++stats_.compilations;
  return *compiled_.emplace(std::move(key), std::move(c)).first->second;
}

// What identifies the forward a backward call belongs to: the inputs' buffers and versions
// (the moving statistics aside: the forward itself rewrote them) and the Dropout step.
KeptForward::Key Region::kept_key(const std::vector<RegionInput>& inputs, const std::vector<size_t>& moving_stats,
                                  uint32_t step) {
  KeptForward::Key key{{}, step};
  for (size_t i = 0; i < inputs.size(); ++i)
    if (std::find(moving_stats.begin(), moving_stats.end(), i) == moving_stats.end())
      key.inputs.emplace_back(inputs[i].tensor.raw(), inputs[i].version);
  return key;
}

void Region::run(const std::vector<RegionInput>& inputs, std::vector<runtime::Tensor>& outputs, uint32_t step,
                 std::unique_ptr<KeptForward>* keep) {
  if (inputs.size() != input_names_.size())
    throw Error(fmt::format("MXNet region '{}': {} inputs given, the subgraph has {}", name_, inputs.size(),
                            input_names_.size()));
  std::lock_guard lock(mutex_);
  if (keep) keep->reset();  // the memory of an earlier forward this state kept goes back first
  if (keep && form_ == RegionForm::training) {
    Backward& bw = backward_for(inputs);
    if (bw.exe->splits_at_head_grads()) {
      std::vector<runtime::Tensor> all = with_moving_stats(*bw.exe, bw.exe->compile_stats().forward_outputs, inputs,
                                                           outputs, bw.moving_stat_inputs);
      auto kept = std::make_unique<KeptForward>();
      kept->exe = bw.exe.get();
      kept->key = kept_key(inputs, bw.moving_stat_inputs, step);
      kept->pass = bw.exe->run_forward(bindings(inputs, *bw.exe, step), all);
      *keep = std::move(kept);
      ++stats_.kept_forwards;
      return;
    }
  }
  Compiled& c = compiled_for(inputs);

  // A weight written in place since the last run (same buffer, new version) makes the
  // kept casts stale; a new buffer the executable notices by itself. MXNet's engine counts
  // every call of this operator as a write of its aux inputs (a subgraph operator declares
  // the moving statistics mutable), so their versions grow by one a call though the
  // inference form only reads them: that step is expected, and any other version is a
  // write of someone else's (set_data, a load). Taken for a write, it made every call
  // recompute the weights' casts, transposes and oneDNN reorders.
  bool written = false;
  for (Compiled::WeightInput& w : c.weights) {
    const RegionInput& in = inputs[w.input];
    written |= w.buffer && (in.tensor.raw() != w.buffer || in.version != w.version);
    w.buffer = in.tensor.raw();
    w.version = in.version + (w.aux ? 1 : 0);
  }
  if (written) {
    c.exe.forget_constants();
    ++stats_.constant_refreshes;
  }

  // Straight into MXNet's output buffers: the kernels that compute the outputs write them.
  // The new moving statistics go into the aux inputs they replace; run_into computes an
  // output that overlaps a bound variable aside and copies it in after the run, so the old
  // values are read before they are overwritten.
  std::vector<runtime::Tensor> all =
      with_moving_stats(c.exe, c.exe.graph().outputs.size(), inputs, outputs, c.moving_stat_inputs);
  c.exe.run_into(bindings(inputs, c.exe, step), all);
}

// MXNet's output buffers, checked against the first `forward_outputs` graph outputs of
// `exe`, followed by the aux inputs the training form's new moving statistics go into.
std::vector<runtime::Tensor> Region::with_moving_stats(const engine::Executable& exe, size_t forward_outputs,
                                                       const std::vector<RegionInput>& inputs,
                                                       const std::vector<runtime::Tensor>& outputs,
                                                       const std::vector<size_t>& moving_stat_inputs) const {
  const ir::Graph& g = exe.graph();
  if (forward_outputs != outputs.size() + moving_stat_inputs.size())
    throw Error(fmt::format("MXNet region '{}': the graph has {} outputs, MXNet expects {}", name_,
                            forward_outputs - moving_stat_inputs.size(), outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i)
    if (g.type(g.outputs[i]) != outputs[i].type())
      throw Error(fmt::format("MXNet region '{}': output {} is {}, MXNet expects {}", name_, i,
                              ir::type_str(g.type(g.outputs[i])), ir::type_str(outputs[i].type())));
  std::vector<runtime::Tensor> all = outputs;
  for (size_t i : moving_stat_inputs) all.push_back(inputs[i].tensor);
  return all;
}

Region::Backward& Region::backward_for(const std::vector<RegionInput>& inputs) {
  Signature key = signature_of(inputs);
  auto it = backward_.find(key);
  if (it != backward_.end()) return it->second;
  ir::Graph g = import_for(inputs);
  if (form_ == RegionForm::unknown) {
    ir::Graph training = g;
    if (engine::to_training_mode(training) > 0)
      throw Error(fmt::format(
          "MXNet region '{}': backward through a region with BatchNorm or Dropout needs to know whether MXNet "
          "trains (is_train), which its extension API does not tell the operator: partition with the option "
          "training=1 (or 0), or let ampfuse.mxnet partition the Gluon block (it picks the form by "
          "autograd.is_training())",
          name_));
  }
  engine::ExecutorOptions eo = options();
  engine::BackwardOptions bo;
  bo.with_inputs = true;  // MXNet asks for the data's gradient too (a region inside a network)
  eo.backward = bo;
  Backward bw;
  bw.exe = std::make_unique<engine::Executable>(engine::Executable::compile(std::move(g), eo));
  if (form_ == RegionForm::training) bw.moving_stat_inputs = moving_stat_inputs_of(bw.exe->graph());
  ++stats_.compilations;
  return backward_.emplace(std::move(key), std::move(bw)).first->second;
}

void Region::backward(const std::vector<RegionInput>& inputs, const std::vector<runtime::Tensor>& head_grads,
                      std::vector<runtime::Tensor>& input_grads, uint32_t step, std::unique_ptr<KeptForward> kept) {
  if (inputs.size() != input_names_.size() || input_grads.size() != inputs.size())
    throw Error(fmt::format("MXNet region '{}': backward got {} inputs and {} gradients for {} inputs", name_,
                            inputs.size(), input_grads.size(), input_names_.size()));
  std::lock_guard lock(mutex_);
  const Backward& bw = backward_for(inputs);
  const engine::Executable& exe = *bw.exe;
  const engine::CompileStats& st = exe.compile_stats();
  if (st.head_grads.size() != head_grads.size())
    throw Error(fmt::format("MXNet region '{}': {} head gradients given, the region has {} outputs", name_,
                            head_grads.size(), st.head_grads.size()));
  // The training form's forward outputs include the new moving statistics: they get no
  // head gradient (lower.cpp differentiates the model's outputs only) and are not written
  // back here, the forward did that.
  runtime::Bindings heads;
  for (size_t i = 0; i < head_grads.size(); ++i) heads.emplace(st.head_grads[i], head_grads[i]);
  std::vector<runtime::Tensor> gradients;
  if (kept && kept->exe == &exe && kept->key == kept_key(inputs, bw.moving_stat_inputs, step)) {
    // The forward's values, kept by run: the backward half only.
    gradients = exe.run_backward(std::move(kept->pass), heads);
    ++stats_.kept_backwards;
  } else {
    // Forward and backward together: the forward's values were not kept (another form, a
    // plan that cannot stop between the halves) or belong to another forward.
    runtime::Bindings b = bindings(inputs, exe, step);
    b.merge(heads);
    std::vector<runtime::Tensor> result = exe.run(b);
    gradients.assign(result.begin() + static_cast<std::ptrdiff_t>(st.forward_outputs), result.end());
  }

  std::vector<bool> written(inputs.size(), false);
  for (size_t j = 0; j < st.gradient_of.size(); ++j) {
    auto pos = std::find(input_names_.begin(), input_names_.end(), st.gradient_of[j]);
    if (pos == input_names_.end()) continue;
    const size_t i = static_cast<size_t>(pos - input_names_.begin());
    const runtime::Tensor& grad = gradients.at(j);
    if (grad.type() != input_grads[i].type())
      throw Error(fmt::format("MXNet region '{}': the gradient of '{}' is {}, MXNet expects {}", name_,
                              st.gradient_of[j], ir::type_str(grad.type()), ir::type_str(input_grads[i].type())));
    std::memcpy(input_grads[i].raw(), grad.raw(), grad.bytes());
    written[i] = true;
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!written[i] && input_grads[i].bytes()) std::memset(input_grads[i].raw(), 0, input_grads[i].bytes());
}

}  // namespace ampfuse::mxnet
