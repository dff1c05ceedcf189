// The device executor: runs a typed graph's fusion plan on a device (runtime/device_api.h:
// a CUDA GPU, or its emulation on the CPU). Host tensors in, host tensors out.
//
//   graph --dce, plan_fusion--> Plan (the CPU executor's, less compute_in_f32: see compile)
//         --lower_kernel (each FusedKernel)--> KernelSpec --DeviceApi::precompile--> device code
//   run(): variables uploaded once per run, when a device step first reads them; steps in plan order:
//     fused kernel   launched on the device, over pooled device buffers
//     view           the same device buffer under the new shape
//     external op    on the host (oneDNN where it has the op, else the interpreter): inputs
//     (and kernels   that live on the device are downloaded, outputs stay on the host and
//     without code)  are uploaded when a device step reads them: a "host round trip"
//   graph outputs downloaded at the end (only they, and the non-finite flags).
//
// Every value may have a host copy, a device copy or both; values never change once
// computed, so a copy made once stays valid. Device buffers come from a pool kept between
// runs: a buffer is free again when no live value holds it (liveness from
// values_dead_after), so after the first run a run allocates nothing.
#pragma once

#include "engine/planning/fusion_plan.h"
#include "ir/graph.h"
#include "runtime/device_api.h"
#include "runtime/interpreter.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampfuse::engine {

struct DeviceExecutorOptions {
  bool fuse = true;        // false: one kernel per fusable op
  bool use_onednn = true;  // external ops through oneDNN where it supports them, else the interpreter
  // Every fused kernel also reports whether a value it reads or writes is NaN or +-Inf, into
  // a device flag array downloaded after the run (DeviceRunStats::nonfinite).
  bool check_nonfinite = false;
  // Where kernels run; null: the CUDA device (compile throws cuda_available()'s reason when
  // there is none). Must outlive the executable.
  runtime::DeviceApi* device = nullptr;
};

// What compile() did.
struct DeviceCompileStats {
  std::string device;          // DeviceApi::name()
  int kernels = 0;             // fused kernel steps
  int device_kernels = 0;      // of those, running on the device (the rest: `fallbacks`)
  int fused_nodes = 0;
  int views = 0;
  int external_ops = 0;        // all on the host
  int onednn_ops = 0;          // of those, through oneDNN (the rest on the interpreter)
  // Host steps (external ops, kernels without device code) that read a value the device
  // computed: each waits for the device and downloads, and its outputs are uploaded again
  // if a device step reads them.
  int host_round_trips = 0;
  int compilations = 0;        // device kernels compiled now (the rest were cached)
  double compile_seconds = 0;  // wall time of compile(), planning and lowering included
  // Kernels that have no device code and run node by node on the host's interpreter:
  // "kernel K: reason" each. Empty in a healthy build.
  std::vector<std::string> fallbacks;
};

struct DeviceRunStats {
  double seconds = 0;
  bool nonfinite = false;    // with check_nonfinite: some device kernel saw NaN or +-Inf
  // Bytes of device memory the executable holds in its buffer pool (kept between runs).
  int64_t device_bytes = 0;
  int uploads = 0, downloads = 0;  // host <-> device copies in this run (flags not counted)
  int64_t upload_bytes = 0, download_bytes = 0;
};

class DeviceExecutable {
 public:
  // Plans `g` (types inferred), lowers every fused kernel and compiles them for the device
  // in one batch. Throws ampfuse::Error for a graph that does not verify or when there is
  // no device.
  static DeviceExecutable compile(ir::Graph g, const DeviceExecutorOptions& opts = {});

  // Runs the graph; every variable must be bound with exactly its type (as
  // Executable::run). Returns the outputs, on the host, in order. One run at a time per
  // DeviceExecutable (they share the buffer pool).
  std::vector<runtime::Tensor> run(const runtime::Bindings& vars, DeviceRunStats* stats = nullptr) const;

  const ir::Graph& graph() const;
  const Plan& plan() const;
  const DeviceCompileStats& compile_stats() const;
  // The spec of every kernel that runs on the device, in plan order.
  std::vector<const codegen::KernelSpec*> kernel_specs() const;

  DeviceExecutable(DeviceExecutable&&) noexcept;
  DeviceExecutable& operator=(DeviceExecutable&&) noexcept;
  ~DeviceExecutable();

 private:
  struct Impl;
  explicit DeviceExecutable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampfuse::engine
