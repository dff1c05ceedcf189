// `ampfuse train MODEL.json --data X.npy --labels Y.npy`: trains a classifier graph (a
// SoftmaxOutput head) with engine::Trainer (engine/training/trainer.h): AMP, dynamic loss
// scaling, a generated optimizer; a progress line per epoch, the trained weights as an
// MXNet .params file.
#include "engine/training/trainer.h"
#include "ir/error.h"
#include "runtime/npy.h"
#include "tools/amp_args.h"
#include "tools/commands.h"
#include "tools/model_input.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <set>

namespace ampfuse::tools {

namespace {

using runtime::Tensor;

struct TrainOptions {
  std::string model, data, labels, test_data, test_labels, save_params;
  AmpArgs amp;
  std::string optimizer = "sgd";
  double lr = 0.01, momentum = 0, wd = 0, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, clip = -1;
  int epochs = 10;
  int64_t batch = 32;
  uint64_t seed = 0;
  std::string loss_scale;  // "" (dynamic with --amp, none without), "dynamic", "none", or a number
  std::vector<int64_t> inject_overflow;
  bool no_fuse = false;
  bool json = false;
};

struct EpochRecord {
  int epoch = 0;
  double loss = 0, train_accuracy = 0;
  std::optional<double> test_loss, test_accuracy;
  double scale = 1;
  int64_t steps = 0, skipped = 0;
  double seconds = 0;
};

engine::OptimizerOptions optimizer_options(const TrainOptions& o) {
  engine::OptimizerOptions opt;
  if (o.optimizer == "sgd")
    opt.kind = engine::OptimizerKind::sgd;
  else if (o.optimizer == "adam")
    opt.kind = engine::OptimizerKind::adam;
  else if (o.optimizer == "adamw")
    opt.kind = engine::OptimizerKind::adamw;
  else
    fail("--optimizer: '{}' is not one of sgd, adam, adamw", o.optimizer);
  opt.lr = o.lr;
  opt.momentum = o.momentum;
  opt.wd = o.wd;
  opt.beta1 = o.beta1;
  opt.beta2 = o.beta2;
  opt.epsilon = o.epsilon;
  opt.clip_gradient = o.clip;
  return opt;
}

std::optional<engine::LossScalerOptions> loss_scaling(const TrainOptions& o, bool amp) {
  const std::string& s = o.loss_scale;
  if (s == "none" || (s.empty() && !amp)) return std::nullopt;
  engine::LossScalerOptions ls;
  if (s.empty() || s == "dynamic") return ls;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !(v > 0)) fail("--loss-scale: '{}' is not dynamic, none or a positive number", s);
  ls.dynamic = false;
  ls.init_scale = v;
  ls.min_scale = std::min(ls.min_scale, v);
  ls.max_scale = std::max(ls.max_scale, v);
  return ls;
}

// The model with the data input's shape set to (batch, one row of X) and the label's, if it
// has one, to (batch,).
ir::Graph load_for_training(const TrainOptions& o, const Tensor& x) {
  std::set<std::string> unreached;
  ir::Graph g = load_model_file(o.model, &unreached);
  std::string label;
  for (const ir::Node& n : g.nodes)
    if (n.op == "SoftmaxOutput" && n.inputs.size() > 1 && g.nodes[n.inputs[1].node].is_var())
      label = g.nodes[n.inputs[1].node].name;
  // No SoftmaxOutput (a Gluon export's logits): the trainer adds one (engine::add_softmax_head).
  std::map<std::string, ir::TensorType> types;
  for (const ir::Node* n : input_variables(g)) {
    if (n->name == label) {
      types[n->name] = {ir::DType::f32, {o.batch}};
    } else {
      ir::Shape s = x.shape();
      s.at(0) = o.batch;
      types[n->name] = {x.dtype(), s};
    }
  }
  set_variable_types(g, types);
  infer_types_naming_missing_shapes(g);
  return g;
}

Tensor read_rows(const std::string& path, const char* option) {
  Tensor t = runtime::read_npy(path);
  if (t.shape().empty()) fail("{} {}: a 0-d array has no rows", option, path);
  return t;
}

nlohmann::json to_json(const EpochRecord& e) {
  nlohmann::json j = {{"epoch", e.epoch},   {"loss", e.loss},       {"train_accuracy", e.train_accuracy},
                      {"scale", e.scale},   {"steps", e.steps},     {"skipped", e.skipped},
                      {"seconds", e.seconds}};
  j["test_loss"] = e.test_loss ? nlohmann::json(*e.test_loss) : nlohmann::json(nullptr);
  j["test_accuracy"] = e.test_accuracy ? nlohmann::json(*e.test_accuracy) : nlohmann::json(nullptr);
  return j;
}

int train(const TrainOptions& o) {
  if (o.epochs < 1) fail("--epochs: {} (at least 1)", o.epochs);
  if (o.batch < 1) fail("--batch: {} (at least 1)", o.batch);
  if (o.test_data.empty() != o.test_labels.empty()) fail("--test-data and --test-labels go together");
  const Tensor x = read_rows(o.data, "--data");
  const Tensor y = read_rows(o.labels, "--labels");
  const int64_t n = x.shape()[0];
  if (y.size() != n) fail("--labels {}: {} labels for {} rows of --data", o.labels, y.size(), n);
  if (n < o.batch) fail("--batch {}: --data has only {} rows", o.batch, n);
  std::optional<Tensor> tx, ty;
  if (!o.test_data.empty()) {
    tx = read_rows(o.test_data, "--test-data");
    ty = read_rows(o.test_labels, "--test-labels");
    if (ty->size() != tx->shape()[0])
      fail("--test-labels {}: {} labels for {} rows of --test-data", o.test_labels, ty->size(), tx->shape()[0]);
  }
  const std::set<int64_t> inject(o.inject_overflow.begin(), o.inject_overflow.end());

  engine::TrainerOptions to;
  to.amp = o.amp.options();
  to.optimizer = optimizer_options(o);
  to.loss_scaling = loss_scaling(o, to.amp.has_value());
  if (!inject.empty() && !to.loss_scaling) fail("--inject-overflow needs loss scaling (--loss-scale)");
  to.fuse = !o.no_fuse;
  to.seed = o.seed;
  engine::Trainer trainer(load_for_training(o, x), to);

  const int64_t steps_per_epoch = n / o.batch;  // the last partial batch is dropped (MXNet's 'discard')
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::mt19937_64 rng(o.seed);
  std::vector<EpochRecord> epochs;
  int64_t step = 0;
  const Tensor labels_flat = y.reshaped({n});
  if (!o.json)
    fmt::print("train {}: {} rows, batch {}, {} steps an epoch, amp {}, optimizer {} (lr {}), loss scale {}\n", o.model,
               n, o.batch, steps_per_epoch, o.amp.amp, o.optimizer, o.lr,
               to.loss_scaling ? (to.loss_scaling->dynamic ? "dynamic" : "static") : "none");
  for (int e = 1; e <= o.epochs; ++e) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    EpochRecord r;
    r.epoch = e;
    int64_t correct = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      const std::vector<int64_t> rows(order.begin() + s * o.batch, order.begin() + (s + 1) * o.batch);
      const engine::StepResult sr = trainer.step(engine::take_rows(x, rows), engine::take_rows(labels_flat, rows),
                                                 inject.count(++step) != 0);
      r.loss += sr.loss;
      correct += sr.correct;
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.steps = steps_per_epoch;
    r.loss /= static_cast<double>(steps_per_epoch);
    r.train_accuracy = static_cast<double>(correct) / static_cast<double>(steps_per_epoch * o.batch);
    if (tx) {
      const engine::Evaluation ev = trainer.evaluate(*tx, *ty);
      r.test_loss = ev.loss;
      r.test_accuracy = ev.accuracy;
    }
    r.scale = trainer.scaler() ? trainer.scaler()->scale() : 1.0;
    r.skipped = trainer.skipped_steps();
    if (!o.json) {
      std::string test;
      if (tx) test = fmt::format("  test loss {:.4f} acc {:.2f}%", *r.test_loss, 100 * *r.test_accuracy);
      fmt::print("epoch {}/{}  loss {:.4f}  train acc {:.2f}%{}  scale {}  skipped {}  {:.2f} s\n", e, o.epochs,
                 r.loss, 100 * r.train_accuracy, test, r.scale, r.skipped, r.seconds);
    }
    epochs.push_back(r);
  }
  if (!o.save_params.empty()) trainer.save_params(o.save_params);
  if (o.json) {
    nlohmann::json j = {{"model", o.model},         {"amp", o.amp.amp}, {"optimizer", o.optimizer},
                        {"lr", o.lr},               {"batch", o.batch}, {"seed", o.seed},
                        {"fused", !o.no_fuse},      {"rows", n},        {"steps_per_epoch", steps_per_epoch}};
    j["loss_scale"] = to.loss_scaling ? (to.loss_scaling->dynamic ? "dynamic" : "static") : "none";
    j["epochs"] = nlohmann::json::array();
    for (const EpochRecord& r : epochs) j["epochs"].push_back(to_json(r));
    j["saved"] = o.save_params.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.save_params);
    fmt::print("{}\n", j.dump(2));
  } else if (!o.save_params.empty()) {
    fmt::print("saved {}\n", o.save_params);
  }
  return 0;
}

}  // namespace

Command add_train_command(CLI::App& parent) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "train", "Train a classifier (an MXNet *-symbol.json with a SoftmaxOutput head) on .npy data: AMP, dynamic "
               "loss scaling with the overflow check folded into the kernels, a generated optimizer.");
  cmd->add_option("model", o->model, "MXNet *-symbol.json file with a SoftmaxOutput head")
      ->check(non_empty_path())
      ->required()
      ->type_name("MODEL.json");
  cmd->add_option("--data", o->data, "Training inputs: a .npy array, one row per example (first axis)")
      ->check(non_empty_path())
      ->required()
      ->type_name("X.npy");
  cmd->add_option("--labels", o->labels, "Training labels: a .npy array of class ids, one per row of --data")
      ->check(non_empty_path())
      ->required()
      ->type_name("Y.npy");
  cmd->add_option("--test-data", o->test_data, "Held-out inputs, evaluated after every epoch")
      ->check(non_empty_path())
      ->type_name("X.npy");
  cmd->add_option("--test-labels", o->test_labels, "Held-out labels")
      ->check(non_empty_path())
      ->type_name("Y.npy");
  add_amp_args(*cmd, o->amp, "Train with automatic mixed precision: f32 master weights, lp16 copies the forward reads",
               false);
  cmd->add_option("--optimizer", o->optimizer, "sgd (with --momentum), adam or adamw (default sgd)")
      ->type_name("sgd|adam|adamw");
  cmd->add_option("--lr", o->lr, "Learning rate (default 0.01, as MXNet's)")->type_name("X");
  cmd->add_option("--momentum", o->momentum, "SGD momentum (default 0)")->type_name("X");
  cmd->add_option("--wd", o->wd, "Weight decay (default 0)")->type_name("X");
  cmd->add_option("--beta1", o->beta1, "Adam's beta1 (default 0.9)")->type_name("X");
  cmd->add_option("--beta2", o->beta2, "Adam's beta2 (default 0.999)")->type_name("X");
  cmd->add_option("--epsilon", o->epsilon, "Adam's epsilon (default 1e-8)")->type_name("X");
  cmd->add_option("--clip-gradient", o->clip, "Clip each gradient element to [-X, X] (default: no clipping)")
      ->type_name("X");
  cmd->add_option("--epochs", o->epochs, "Passes over --data (default 10)")->type_name("N");
  cmd->add_option("--batch", o->batch, "Rows per step (default 32); the last partial batch of an epoch is dropped")
      ->type_name("N");
  cmd->add_option("--seed", o->seed, "Seed of the initial weights and the batch order (default 0)")->type_name("N");
  cmd->add_option("--loss-scale", o->loss_scale,
                  "dynamic (the default with --amp: start at 2^16, halve on overflow, double after 2000 clean "
                  "steps), none (the default without --amp), or a fixed positive scale")
      ->type_name("dynamic|none|X");
  cmd->add_option("--inject-overflow", o->inject_overflow,
                  "Bind an infinite loss scale at step N (counted from 1 over all epochs; repeatable): the step "
                  "must be skipped and the scale halved")
      ->allow_extra_args(false)
      ->type_name("N");
  cmd->add_flag("--no-fuse", o->no_fuse, "One kernel per op (the unfused path), for comparisons");
  cmd->add_option("--save-params", o->save_params,
                  "Write the trained f32 weights and moving statistics as an MXNet .params file "
                  "(\"arg:NAME\", \"aux:NAME\", as HybridBlock.export)")
      ->check(non_empty_path())
      ->type_name("FILE.params");
  cmd->add_flag("--json", o->json,
                "Print one JSON object {model, amp, optimizer, lr, batch, seed, fused, rows, steps_per_epoch, "
                "loss_scale, epochs: [{epoch, loss, train_accuracy, test_loss, test_accuracy, scale, steps, skipped, "
                "seconds}], saved} instead of the progress lines");
  return {cmd, [o] { return train(*o); }};
}

}  // namespace ampfuse::tools
