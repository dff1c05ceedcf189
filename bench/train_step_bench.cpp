// Training steps through engine::Trainer, the path `ampfuse train` takes: forward, backward
// and the optimizer update of cifar_resnet20_v2 (batch 64, a SoftmaxOutput head on its
// logits) and of one Transformer encoder layer (models/bench/, batch 32 x 64 tokens x 256),
// in f32 and bf16 AMP, fused and unfused; and the cost of the overflow check, folded into
// the kernels against a separate pass (bench/README.md, "Training steps").
//
// "MB moved" is the step's minimum traffic: every plan step's inputs read once and outputs
// written once (fused kernels: kernel_bytes; external ops: their operands), plus the
// update's (gradient read; f32 master and state read and written; lp16 copy written).
#include "engine/planning/fusion_plan.h"
#include "engine/training/trainer.h"
#include "ir/mxnet_json.h"
#include "runtime/interpreter.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <string>
#include <variant>

namespace ampfuse::bench {
namespace {

using runtime::Tensor;

struct TrainModel {
  const char* name;
  const char* file;
  ir::Shape data;
};
const TrainModel kTrainModels[] = {
    {"cifar_resnet20_v2", "cifar_resnet20_v2-gluoncv-symbol.json", {64, 3, 32, 32}},
    {"transformer_layer", "bench/transformer_encoder_layer-symbol.json", {32, 64, 256}},
};

int64_t type_bytes(const ir::TensorType& t) {
  return ir::num_elements(t.shape) * static_cast<int64_t>(ir::dtype_size(t.dtype));
}

// Each plan step's inputs once and outputs once.
int64_t plan_bytes(const engine::Executable& exe) {
  const ir::Graph& g = exe.graph();
  int64_t total = 0;
  for (const engine::PlanStep& s : exe.plan().steps) {
    if (const auto* k = std::get_if<engine::FusedKernel>(&s)) {
      total += engine::kernel_bytes(g, *k);
    } else if (std::holds_alternative<engine::ExternalStep>(s)) {
      for (ir::ValueRef v : engine::step_reads(g, s)) total += type_bytes(g.type(v));
      for (ir::ValueRef v : engine::step_writes(g, s)) total += type_bytes(g.type(v));
    }
  }
  return total;
}

// The update: per param, its gradient read, the f32 master and `states` f32 states read and
// written, and the lp16 copy (the variable the forward binds, when not f32) written.
int64_t update_bytes(const engine::Trainer& t, int states) {
  const engine::Executable& exe = t.training_executable();
  const ir::Graph& g = exe.graph();
  const size_t first = exe.compile_stats().forward_outputs;
  int64_t total = 0;
  for (size_t i = 0; i < exe.compile_stats().gradient_of.size(); ++i) {
    const ir::TensorType grad = g.type(g.outputs[first + i]);
    const int64_t n = ir::num_elements(grad.shape);
    total += type_bytes(grad) + n * 4 * 2 * (1 + states);
    const ir::DType bound = g.nodes[*g.find_var(exe.compile_stats().gradient_of[i])].outputs[0].dtype;
    if (bound != ir::DType::f32) total += n * static_cast<int64_t>(ir::dtype_size(bound));
  }
  return total;
}

struct Batch {
  Tensor x, y;
};

Batch random_batch(const TrainModel& m) {
  Batch b;
  b.x = Tensor(ir::TensorType{ir::DType::f32, m.data});
  uint64_t s = 12345;
  for (int64_t i = 0; i < b.x.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b.x.data<float>()[i] = static_cast<float>(static_cast<double>(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  b.y = Tensor(ir::TensorType{ir::DType::f32, {m.data[0]}});
  for (int64_t i = 0; i < b.y.size(); ++i) b.y.data<float>()[i] = static_cast<float>(i % 10);
  return b;
}

std::optional<engine::Trainer> make_trainer(benchmark::State& state, const TrainModel& m, bool bf16, bool fuse,
                                            engine::OverflowCheck check) {
  const std::string path = std::string(AMPFUSE_MODELS_DIR) + "/" + m.file;
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("no model at " + path).c_str());
    return std::nullopt;
  }
  ir::MxnetImportOptions io;
  io.input_shapes = {{"data", m.data}};
  engine::TrainerOptions o;
  if (bf16) {
    o.amp = engine::AmpOptions{};
    o.amp->target = ir::DType::bf16;
    o.loss_scaling = engine::LossScalerOptions{};
  }
  o.fuse = fuse;
  o.overflow_check = check;
  o.optimizer.kind = engine::OptimizerKind::sgd;
  o.optimizer.lr = 0.01;  // small: 100s of steps on random data stay finite
  o.optimizer.momentum = 0.9;
  return engine::Trainer(ir::load_mxnet_json_file(path, io), o);
}

void run_steps(benchmark::State& state, engine::Trainer& t, const Batch& b) {
  for (int k = 0; k < 2; ++k) t.step(b.x, b.y);  // warm: first touch, oneDNN primitives
  int64_t skipped = 0;
  for (auto _ : state) skipped += !t.step(b.x, b.y).applied;
  if (skipped) state.SkipWithError(fmt::format("{} steps overflowed", skipped).c_str());
}

// model, bf16, fused: the time of one training step and its bytes.
void BM_TrainStep(benchmark::State& state) {
  const TrainModel& m = kTrainModels[state.range(0)];
  const bool bf16 = state.range(1) != 0, fuse = state.range(2) != 0;
  std::optional<engine::Trainer> t = make_trainer(state, m, bf16, fuse, engine::OverflowCheck::folded);
  if (!t) return;
  const Batch b = random_batch(m);
  run_steps(state, *t, b);
  const engine::CompileStats& cs = t->training_executable().compile_stats();
  const double mb = static_cast<double>(plan_bytes(t->training_executable()) + update_bytes(*t, 1)) / 1e6;
  state.counters["MB_moved"] = mb;
  state.counters["arena_MB"] = static_cast<double>(cs.arena_bytes) / 1e6;
  state.SetLabel(fmt::format("{} {} {}: {} kernels, {} external, {:.1f} MB moved", m.name, bf16 ? "bf16" : "f32",
                             fuse ? "fused" : "unfused", cs.kernels, cs.external_ops, mb));
}

// model, check (0 folded, 1 a separate pass, 2 the update kernel's only): bf16 fused steps.
void BM_TrainStepOverflowCheck(benchmark::State& state) {
  const TrainModel& m = kTrainModels[state.range(0)];
  static constexpr engine::OverflowCheck kChecks[] = {engine::OverflowCheck::folded,
                                                      engine::OverflowCheck::separate_pass,
                                                      engine::OverflowCheck::update_only};
  static constexpr const char* kNames[] = {"folded into the kernels", "separate pass", "update kernel only"};
  std::optional<engine::Trainer> t = make_trainer(state, m, true, true, kChecks[state.range(1)]);
  if (!t) return;
  const Batch b = random_batch(m);
  run_steps(state, *t, b);
  state.SetLabel(fmt::format("{} bf16 fused, overflow check {}", m.name, kNames[state.range(1)]));
}

BENCHMARK(BM_TrainStep)
    ->ArgNames({"model", "bf16", "fused"})
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrainStepOverflowCheck)
    ->ArgNames({"model", "check"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ampfuse::bench
