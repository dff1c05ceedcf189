// The executor: runs a typed graph as a fusion plan.
//
//   graph --plan_fusion--> Plan --lower_kernel (each FusedKernel)--> KernelSpec
//         --KernelCache--> compiled code;  run(): steps in plan order over pooled buffers
//
// Fused kernels run as JIT-compiled code; external ops run through oneDNN where it has the
// op and dtype (ExecutorOptions::use_onednn), otherwise through the reference interpreter's
// implementation; views alias their input's buffer. A value's buffer goes back to a pool
// after its last reader ran and is reused by later steps (liveness), unless a graph output
// or another live value still shares it.
//
// Compiling twice with new sizes (a new batch) finds every kernel in the cache: the cache key
// holds structure, dtypes, rank and layout classes, never sizes.
#pragma once

#include "engine/planning/fusion_plan.h"
#include "ir/graph.h"
#include "runtime/interpreter.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampfuse::codegen {
struct KernelSpec;
}  // namespace ampfuse::codegen

namespace ampfuse::runtime {
class KernelCache;
class ThreadPool;
}  // namespace ampfuse::runtime

namespace ampfuse::engine {

struct ExecutorOptions {
  bool fuse = true;          // false: one kernel per fusable op (the unfused path)
  bool use_onednn = true;    // external ops through oneDNN where it supports them
  // Every fused kernel also reports whether any value it reads or writes is NaN or +-Inf
  // (the loss scaler's overflow check, at no extra pass over memory); see RunStats.
  bool check_nonfinite = false;
  // Show "compiling kernels i/N" on stderr while compiling, when stderr is a terminal
  // (never otherwise, so logs and --json output stay clean).
  bool progress = false;
  // Variables with the param or aux role (weights, BatchNorm statistics) keep their values
  // for as long as they stay bound to the same buffers, as at inference. Then whatever is
  // computed from them alone (weights widened to f32, convolution weights reordered by
  // oneDNN) is computed by the first run and reused by later runs while every one of them
  // is bound to the same buffer as then. Off (the default), everything is computed every
  // run: right when weights are updated in place between runs (training).
  bool constant_params = false;
  // Inference: fold a BatchNorm right after a Convolution into the convolution's weights and
  // bias (engine/passes/fold_batchnorm.h), so it costs no pass over memory. Results then
  // differ from the graph's by rounding (not bit for bit with the interpreter). Best with
  // constant_params, which computes the folded weights once.
  bool fold_batchnorm = false;
  runtime::KernelCache* cache = nullptr;  // null: KernelCache::global()
  runtime::ThreadPool* pool = nullptr;    // null: ThreadPool::global()
};

// What compile() did.
struct CompileStats {
  int kernels = 0;           // fused kernel steps
  int external_ops = 0;
  int views = 0;
  // External nodes oneDNN computes in f32 for want of bf16/f16 kernels here, rewritten with
  // explicit casts that fuse into the kernels around them (engine/passes/compute_in_f32.h).
  int widened_external = 0;
  // Steps computed from constant params only (ExecutorOptions::constant_params): run once.
  int constant_steps = 0;
  // BatchNorms folded into the Convolution before them (ExecutorOptions::fold_batchnorm).
  int folded_batchnorms = 0;
  int fused_nodes = 0;       // graph nodes computed inside fused kernels
  int compilations = 0;      // kernels compiled now (the rest were cache hits)
  int cache_hits = 0;
  double compile_seconds = 0;  // wall time of compile(), planning and lowering included
  // External nodes oneDNN runs with a reference implementation ("ref:", "simple..."):
  // "name (op): impl" each.
  std::vector<std::string> slow_external;
  // Kernels that could not be compiled and run node by node on the interpreter instead:
  // "kernel K: reason" each. Empty in a healthy build.
  std::vector<std::string> fallbacks;
};

struct RunStats {
  double seconds = 0;
  bool nonfinite = false;  // with check_nonfinite: some fused kernel saw NaN or +-Inf
  // Bytes of the buffers the executor allocated for kernel and oneDNN outputs: a buffer
  // reused after its value died counts once. (Interpreter fallbacks allocate their own.)
  int64_t peak_bytes = 0;
  // With constant_params: whether this run reused the constant steps' results (false on
  // the first run and after a param was bound to another buffer).
  bool reused_constants = false;
};

class Executable {
 public:
  // Plans `g` (types inferred; see ir/type_inference.h) and compiles every fused kernel.
  // Throws ampfuse::Error for a graph that does not verify.
  static Executable compile(ir::Graph g, const ExecutorOptions& opts = {});

  // Runs the graph; every variable must be bound with exactly its type (as interpret()).
  // Returns the outputs in order. Thread-compatible: one run at a time per Executable (the
  // constant cache of ExecutorOptions::constant_params is updated by runs).
  std::vector<runtime::Tensor> run(const runtime::Bindings& vars, RunStats* stats = nullptr) const;

  const ir::Graph& graph() const;
  const Plan& plan() const;
  const CompileStats& compile_stats() const;
  // The spec of every fused kernel that has compiled code, in plan order (for dumps, the
  // CUDA emitter and tests).
  std::vector<const codegen::KernelSpec*> kernel_specs() const;

  Executable(Executable&&) noexcept;
  Executable& operator=(Executable&&) noexcept;
  ~Executable();

 private:
  struct Impl;
  explicit Executable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampfuse::engine
