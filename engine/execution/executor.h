// The executor: compiles a graph once and runs it on a device, as many times as asked.
//
//   compile:  graph --lower (engine/lower.h: passes, fusion plan)--> Plan
//                   --lower_kernel, DeviceApi::precompile--> code for every fused kernel
//                   --oneDNN primitives--> every external op it can run
//                   --plan_memory--> one arena offset per intermediate (memory_plan.h)
//   run:      steps in plan order over a run context (arenas, value table, output buffers)
//             kept between runs: no allocation after the first run at these shapes.
//
// Devices (runtime/device_api.h): the CPU (default), a CUDA GPU, or the emulated GPU. Fused
// kernels run on the device; external ops (convolution, matmul, pooling... through oneDNN,
// or the reference interpreter where oneDNN lacks the op) run on the host, which on the CPU
// is the same memory, and on a GPU means copies that the memory plan schedules.
//
// Constant params (ExecutorOptions::constant_params): whatever is computed from the weights
// alone (weights cast or widened, BatchNorm folded into convolution weights, convolution
// weights reordered by oneDNN, weights uploaded to a GPU) is computed by the first run and
// kept for as long as every weight stays bound to the same buffer.
//
// Compiling twice with new sizes (a new batch) finds every kernel in the cache: the cache
// key holds structure, dtypes, rank and layout classes, never sizes.
#pragma once

#include "engine/execution/memory_plan.h"
#include "engine/lower.h"
#include "engine/planning/fusion_plan.h"
#include "ir/graph.h"
#include "runtime/interpreter.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ampfuse::codegen {
struct KernelSpec;
}  // namespace ampfuse::codegen

namespace ampfuse::runtime {
class DeviceApi;
class DiskCache;
class KernelCache;
class ThreadPool;
}  // namespace ampfuse::runtime

namespace ampfuse::engine {

// AMPFUSE_STRICT: "1" makes a kernel that cannot be lowered or compiled an error; unset or
// "0" lets it run node by node on the interpreter, with a warning. Throws ampfuse::Error
// for any other value.
bool strict_from_environment();

struct ExecutorOptions {
  std::optional<AmpOptions> amp{};  // convert for mixed precision first (engine/lower.h)
  // Where convolution regions run (layout_optimize): "nhwc" channels-last, "keep" the
  // model's own layout, "auto" (the default) channels-last on the CPU, where oneDNN's
  // channels-last convolutions are 1.25-3x faster than its NCHW ones in inference and
  // training steps 1.3-3.7x faster (bench/README.md, "Layouts chosen"), and the model's
  // layout on a GPU. AmpOptions::layout "nhwc" asks for channels-last too.
  std::string layout = "auto";
  bool fuse = true;               // false: one kernel per fusable op (the unfused path)
  bool use_onednn = true;         // external ops through oneDNN where it supports them
  // Every fused kernel also reports whether any value it reads or writes is NaN or +-Inf
  // (the loss scaler's overflow check, at no extra pass over memory); see RunStats.
  bool check_nonfinite = false;
  // Show "compiling kernels i/N" on stderr while compiling, when stderr is a terminal
  // (never otherwise, so logs and --json output stay clean).
  bool progress = false;
  // Variables with the param or aux role (weights, BatchNorm statistics) keep their values
  // for as long as they stay bound to the same buffers, as at inference: what is computed
  // from them alone is computed by the first run and reused (see the top of this file).
  // Off (the default), everything is computed every run: right when weights are updated
  // in place between runs (training).
  bool constant_params = false;
  // Inference: fold a BatchNorm right after a Convolution into the convolution's weights and
  // bias (engine/passes/fold_batchnorm.h), so it costs no pass over memory. Results then
  // differ from the graph's by rounding (not bit for bit with the interpreter). Best with
  // constant_params, which computes the folded weights once.
  bool fold_batchnorm = false;
  // Inference on the CPU: a Convolution or FullyConnected and the add (of a residual) and
  // LeakyReLU after it become one _fused_conv / _fused_fc, which oneDNN runs with post-ops
  // (engine/passes/epilogue_fusion.h), where oneDNN has a real kernel for it: the op's
  // output is never stored and read back. In bf16/f16 results differ from the graph's by
  // rounding (one rounding instead of two); f32 results are the same. Ignored with backward
  // or training, on a GPU, and without use_onednn.
  bool fuse_epilogues = false;
  // With fuse_epilogues: a relu after the op joins as oneDNN's relu post-op too, which turns
  // NaN into 0 where the graph keeps NaN (MXNet's own oneDNN fusion does the same). Faster
  // (bench/README.md, "NaN through the epilogues": squeezenet bf16 1.24 against 1.52 ms);
  // off, the relu runs in the fused kernel after the op and NaN stays NaN.
  bool relu_post_ops = false;
  // Inference on the CPU: softmax, log_softmax and LayerNorm over the last axis and the
  // sum/mean/max/min of the last axis run as generated row kernels, with the fused kernels before and after them merged in
  // (engine/planning/row_fusion.h): their casts, bias adds and the like cost no pass over
  // memory. Results differ from the reference kernels by summation order and exp/log ULPs,
  // as oneDNN's do. Ignored with backward, training or check_nonfinite, and on a GPU.
  bool row_kernels = false;
  // Training: compile the forward graph with its gradients (engine/passes/autodiff.h);
  // run() then returns the forward outputs followed by one gradient per differentiated
  // variable (CompileStats::gradient_of), and head gradients are inputs to bind.
  std::optional<BackwardOptions> backward{};
  // With backward and fuse: cheap forward values the backward kernels read are computed
  // again there instead of stored, when that moves fewer bytes (engine/planning/recompute.h).
  bool recompute = true;
  // Training form (engine/passes/training_mode.h): batch statistics, dropout; see lower.h.
  std::optional<TrainingOptions> training{};
  // External ops oneDNN computes in f32 (bf16 without AVX-512, f16 everywhere) get explicit
  // casts that fuse into the kernels around them (engine/passes/compute_in_f32.h). Unset:
  // on where the device's memory is the host's; on a GPU the casts would run on the device
  // and send f32 copies to the host, twice the bytes oneDNN widens there by itself.
  std::optional<bool> compute_in_f32{};
  // A fused kernel that cannot be lowered or compiled is an error (true), or runs node by
  // node on the interpreter after one warning on stderr (false).
  bool strict = strict_from_environment();
  // Where fused kernels run; null: the CPU (runtime::cpu_device(), or a CPU device over
  // `cache` and `pool` when either is set). Must outlive the executable.
  runtime::DeviceApi* device = nullptr;
  runtime::KernelCache* cache = nullptr;  // CPU only; null: KernelCache::global()
  runtime::ThreadPool* pool = nullptr;    // CPU only; null: ThreadPool::global()
  // Keep lower()'s result (passes and fusion plan) in a disk cache and take it from there
  // when this graph was compiled with these options before, by any process
  // (engine/plan_cache.h): plan_disk, or when null the process's disk cache
  // (AMPFUSE_CACHE_DIR; none when that is "0"). false: always lowered afresh.
  bool cache_plan = true;
  runtime::DiskCache* plan_disk = nullptr;
};

// The graph steps and planner options `opts` compiles with on `device`: what `ampfuse dot`
// draws, so that the picture is the plan that runs.
LowerOptions lower_options(const ExecutorOptions& opts, const runtime::DeviceApi& device);

// What compile() did.
struct CompileStats {
  std::string device;            // DeviceApi::name()
  std::optional<AmpStats> amp;   // with ExecutorOptions::amp
  int kernels = 0;               // fused kernel steps
  int external_ops = 0;
  int onednn_ops = 0;            // of those, through oneDNN (the rest on the interpreter)
  // Of those, the ones whose primitive differs from the reference kernel on NaN or +-Inf
  // data (runtime::onednn_differs_on_nonfinite: max pooling and its gradient, softmax), so
  // that a run checks their data and runs the reference kernel where it is not all finite:
  // through a flag that the fused kernel writing the data raises (free), else by reading the
  // data once more. Not counted: max pooling of data a relu post-op wrote (no NaN there).
  int guarded_steps = 0;
  int guards_by_scan = 0;  // of those, the ones that read their data once more
  int views = 0;
  // External nodes oneDNN computes in f32 for want of bf16/f16 kernels here, rewritten with
  // explicit casts that fuse into the kernels around them (compute_in_f32).
  int widened_external = 0;
  // Steps computed from constant params only (ExecutorOptions::constant_params): run once.
  int constant_steps = 0;
  // BatchNorms folded into the Convolution before them (ExecutorOptions::fold_batchnorm).
  int folded_batchnorms = 0;
  // Convolutions and FullyConnecteds run with their add and LeakyReLU as oneDNN post-ops
  // (ExecutorOptions::fuse_epilogues).
  int fused_epilogues = 0;
  // Row kernels: softmax, LayerNorm and last-axis reductions generated with their neighbours
  // (ExecutorOptions::row_kernels).
  int row_kernels = 0;
  // With ExecutorOptions::backward: the forward outputs come first, then the gradients of
  // these variables; head_grads are the head-gradient inputs (autodiff.h).
  size_t forward_outputs = 0;
  std::vector<std::string> gradient_of, head_grads;
  // With backward: forward values the backward steps load, and values recomputed instead
  // (LowerStats' fields).
  int saved_values = 0;
  int64_t saved_bytes = 0;
  RecomputeStats recomputed;
  int fused_nodes = 0;           // graph nodes computed inside fused kernels
  // Kernels this compile had to produce, compiled or loaded from the disk cache
  // (runtime/disk_cache.h); disk_loads of them came from disk (the rest, compilations -
  // disk_loads, LLVM or NVRTC compiled: "cold"); cache_hits were in memory already.
  int compilations = 0;
  int disk_loads = 0;
  int cache_hits = 0;
  // The passes' graph and the fusion plan came from the disk cache (cache_plan), not from
  // running the passes and the planner; and the time either took.
  bool plan_from_disk = false;
  double plan_seconds = 0;
  double compile_seconds = 0;    // wall time of compile(), passes and planning included
  // Host steps (external ops, kernels without device code) that read a value computed on a
  // GPU, so wait for it and copy it; 0 on the CPU.
  int host_round_trips = 0;
  // Memory (memory_plan.h): the arenas a run uses, against every intermediate's bytes added
  // up (what a run without reuse would hold), and kernel outputs written in place.
  int64_t arena_bytes = 0;
  int64_t intermediate_bytes = 0;
  int in_place = 0;
  // External nodes oneDNN runs with a reference implementation ("ref:", "simple..."):
  // "name (op): impl" each.
  std::vector<std::string> slow_external;
  // Kernels that could not be lowered or compiled and run node by node on the interpreter
  // instead: "kernel K (node 'name'): reason" each. Empty in a healthy build.
  std::vector<std::string> fallbacks;
};

struct RunStats {
  double seconds = 0;
  bool nonfinite = false;  // with check_nonfinite: some fused kernel saw NaN or +-Inf
  // With constant_params: whether this run reused the constants (false on the first run and
  // after a param was bound to another buffer).
  bool reused_constants = false;
  // Buffers this run allocated: device allocations (arenas, constants) plus tensor buffers
  // (graph outputs whose previous buffers the caller still holds, interpreter fallbacks).
  // 0 once a run context exists for this thread's turn and the caller let go of the outputs.
  int64_t allocations = 0;
  // run_into: outputs copied into the caller's buffer after the run instead of computed in
  // it (see run_into); 0 when every output was written where the caller asked.
  int output_copies = 0;
  // The run went solo: every parallel op on the calling thread, because the runs before it
  // waited for cores in teams of threads (runtime/team_policy.h, AMPFUSE_TEAMS).
  bool solo = false;
  // Copies between the host and a GPU (0 on the CPU).
  int uploads = 0, downloads = 0;
  int64_t upload_bytes = 0, download_bytes = 0;
  // oneDNN steps that ran on the reference kernel instead because their data held NaN or
  // +-Inf, where the primitive would have given another result (CompileStats::guarded_steps).
  int reference_on_nonfinite = 0;
};

class Executable;

// The forward half of a training run, kept for its backward half (Executable::run_forward):
// the run's memory, holding every forward value the gradients read. Given back to its
// executable by run_backward or when destroyed; must not outlive the executable.
class ForwardPass {
 public:
  ForwardPass();
  ForwardPass(ForwardPass&&) noexcept;
  ForwardPass& operator=(ForwardPass&&) noexcept;
  ~ForwardPass();
  explicit operator bool() const { return state_ != nullptr; }

 private:
  friend class Executable;
  struct State;
  std::unique_ptr<State> state_;
};

class Executable {
 public:
  // Lowers `g` (engine/lower.h; types are inferred when missing), compiles every fused
  // kernel and plans memory. Throws ampfuse::Error for a graph that does not verify, bad
  // options, no device, or (strict) a kernel that does not compile.
  static Executable compile(ir::Graph g, const ExecutorOptions& opts = {});

  // Runs the graph; every variable of graph() must be bound with exactly its type (as
  // interpret()). Returns the outputs in order, in buffers the executable reuses on a later
  // run once the caller has let go of them. Safe to call from several threads at once: each
  // run takes a run context of its own (made on first need, kept for later runs).
  std::vector<runtime::Tensor> run(const runtime::Bindings& vars, RunStats* stats = nullptr) const;

  // Runs the graph into the caller's buffers, as a framework with its own output tensors
  // needs: outputs[i] must have exactly graph output i's type (throws ampfuse::Error
  // naming the output otherwise) and is written, nothing else. The plan computes each
  // output directly in the caller's memory when it can: the buffer is contiguous, overlaps
  // no bound variable, and no earlier output is the same value. Otherwise (and for outputs
  // that are variables or constants) the result is computed aside and copied in, counted
  // in RunStats::output_copies. Thread-safe as run().
  void run_into(const runtime::Bindings& vars, std::span<runtime::Tensor> outputs, RunStats* stats = nullptr) const;

  // Training executables (ExecutorOptions::backward) in two calls, as a framework whose
  // autograd calls forward and backward separately (MXNet) needs. run_forward runs the
  // forward steps, binding every variable but the head gradients, writes the forward
  // outputs (the first CompileStats::forward_outputs graph outputs) into `forward_outputs`
  // (types as run_into) and keeps the run's memory; run_backward binds the head gradients,
  // runs the rest of the plan on that memory and returns the gradients (the remaining graph
  // outputs, in CompileStats::gradient_of order). Nothing is computed twice: the results
  // equal run()'s bit for bit. The variables bound to run_forward must stay alive and
  // unchanged until run_backward. The planner keeps the forward steps first
  // (PlannerOptions::backward_nodes); splits_at_head_grads() is false when a forward output
  // still needs a step that reads a head gradient, and then, as without backward or on a
  // GPU (two memory spaces), run_forward throws ampfuse::Error. Thread-safe as run(): each
  // pass holds a run context of its own.
  bool splits_at_head_grads() const;
  ForwardPass run_forward(const runtime::Bindings& vars, std::span<runtime::Tensor> forward_outputs,
                          RunStats* stats = nullptr) const;
  std::vector<runtime::Tensor> run_backward(ForwardPass pass, const runtime::Bindings& head_grads,
                                            RunStats* stats = nullptr) const;

  // Drops what the first run computed from the constant params (ExecutorOptions::
  // constant_params), so that the next run computes it again: for callers whose weights
  // change in place, in the same buffers (a framework's parameters after an optimizer step,
  // which a buffer comparison cannot see). Safe while other threads run.
  void forget_constants() const;

  const ir::Graph& graph() const;  // after the passes: what the plan computes
  const Plan& plan() const;
  const MemoryPlan& memory_plan() const;
  const CompileStats& compile_stats() const;
  // Per plan step: computed from constant params alone, by the first run of a binding only.
  const std::vector<bool>& constant_steps() const;
  runtime::DeviceApi& device() const;
  // The spec of every fused kernel that has compiled code, in plan order (for dumps, the
  // CUDA emitter and tests).
  std::vector<const codegen::KernelSpec*> kernel_specs() const;

  Executable(Executable&&) noexcept;
  Executable& operator=(Executable&&) noexcept;
  ~Executable();

 private:
  friend class ForwardPass;
  struct Impl;
  explicit Executable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampfuse::engine
