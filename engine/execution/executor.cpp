#include "engine/execution/executor.h"

#include "engine/plan_cache.h"
#include "engine/planning/kernel_lowering.h"
#include "engine/planning/row_fusion.h"
#include "ir/dump.h"
#include "ir/error.h"
#include "runtime/device_api.h"
#include "runtime/disk_cache.h"
#include "runtime/kernel_cache.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/team_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include <unistd.h>

namespace ampfuse::engine {

namespace {

using ir::ValueRef;
using runtime::DevicePtr;
using runtime::Tensor;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string node_label(const ir::Graph& g, int32_t n) { return fmt::format("node '{}' ({})", g.nodes[n].name, g.nodes[n].op); }

size_t space_index(Space s) { return static_cast<size_t>(s); }

// A fused kernel step: its lowered spec and device code, or why it has none.
struct KernelStep {
  const FusedKernel* kernel = nullptr;
  std::string name;
  bool empty = false;  // no elements: nothing runs
  LoweredKernel lowered;
  std::shared_ptr<const runtime::DeviceKernel> code;  // null: node by node on the interpreter
  size_t flag_offset = 0;                             // its flags' index in the flag array
};

// How an external step whose oneDNN primitive differs from the reference kernel on
// non-finite data (runtime::onednn_differs_on_nonfinite: max pooling and its gradient,
// softmax) learns
// whether its data is all finite; where it is not, the step runs the reference kernel.
enum class FiniteGuard : uint8_t {
  none,  // another op, no primitive, or max pooling of what relu post-ops made (no NaN)
  flag,  // the fused kernels that write the data raise flags (ExternalStepInfo::guard_flags)
  scan,  // the data is read once more before the primitive runs (another producer)
};

// An external step: oneDNN's primitive, or null for the interpreter.
struct ExternalStepInfo {
  std::shared_ptr<const runtime::OnednnPrimitive> onednn;
  bool constant_weights = false;  // input 1 is a constant: oneDNN's reorder of it is kept
  FiniteGuard guard = FiniteGuard::none;
  // The steps that write the data, through views and Concat (plan_finite_guards): fused
  // kernels, each flagging its output, and ops with a relu post-op (max pooling only).
  std::vector<int64_t> guard_kernels, guard_relu_ops;
  std::vector<size_t> guard_flags;  // FiniteGuard::flag: the kernels' flags in the flag array
};

bool ends_in_relu_post_op(const ir::Node& n) {
  return (n.op == "_fused_conv" || n.op == "_fused_fc") && n.attrs.get_string("act_type") == "relu";
}

// Per external step whose primitive differs from the reference on non-finite data, the
// steps that write its data, looking through views and Concat (squeezenet pools the
// concatenation of two relus): a fused kernel other than a row kernel gets a flag over that
// output (`guarded_outputs`: kernel step -> outputs to flag); before a max pooling, an op
// with a relu post-op needs none where oneDNN runs it (no NaN comes out of it, and the
// pooling takes +-Inf as the reference does). Any other writer, or a graph input, and the
// data is scanned (FiniteGuard::scan). The rest is settled once the kernels are compiled
// and the primitives made (Executable::compile).
void plan_finite_guards(const ir::Graph& g, const Plan& plan, std::vector<ExternalStepInfo>& externals,
                        std::map<size_t, std::vector<int>>& guarded_outputs) {
  std::map<ValueRef, size_t> writer;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (ValueRef v : step_writes(g, plan.steps[s])) writer[v] = s;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const auto* e = std::get_if<ExternalStep>(&plan.steps[s]);
    if (!e || !runtime::onednn_differs_on_nonfinite(g.nodes[e->node])) continue;
    const bool pooling = g.nodes[e->node].op == "Pooling";
    ExternalStepInfo& info = externals[s];
    info.guard = FiniteGuard::flag;
    std::vector<ValueRef> pending{g.nodes[e->node].inputs.at(0)};
    while (!pending.empty() && info.guard == FiniteGuard::flag) {
      const ValueRef data = pending.back();
      pending.pop_back();
      const auto w = writer.find(data);
      if (w == writer.end()) {
        info.guard = FiniteGuard::scan;  // a graph input
        break;
      }
      const PlanStep& step = plan.steps[w->second];
      const auto* k = std::get_if<FusedKernel>(&step);
      const auto* x = std::get_if<ExternalStep>(&step);
      if (const auto* view = std::get_if<ViewStep>(&step)) {
        pending.push_back(g.nodes[view->node].inputs.at(0));
      } else if (x && g.nodes[x->node].op == "Concat") {
        pending.insert(pending.end(), g.nodes[x->node].inputs.begin(), g.nodes[x->node].inputs.end());
      } else if (k && row_op_index(g, *k) == k->nodes.size()) {
        const auto out = std::find_if(k->outputs.begin(), k->outputs.end(), [&](const KernelOperand& o) { return o.value == data; });
        std::vector<int>& flagged = guarded_outputs[w->second];
        const int o = static_cast<int>(out - k->outputs.begin());
        if (std::find(flagged.begin(), flagged.end(), o) == flagged.end()) flagged.push_back(o);
        info.guard_kernels.push_back(static_cast<int64_t>(w->second));
      } else if (x && pooling && ends_in_relu_post_op(g.nodes[x->node])) {
        info.guard_relu_ops.push_back(static_cast<int64_t>(w->second));
      } else {
        info.guard = FiniteGuard::scan;
      }
    }
  }
}

// Whether no element of p[0, n) has an exponent of all ones (NaN or +-Inf), checked a
// block at a time without a branch per element, so that the compiler vectorizes it.
template <class Bits>
bool exponents_finite(const Bits* p, int64_t n, Bits exponent) {
  constexpr int64_t kBlock = 4096;
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t end = std::min(n, i + kBlock);
    bool nonfinite = false;
    for (int64_t j = i; j < end; ++j) nonfinite |= (p[j] & exponent) == exponent;
    if (nonfinite) return false;
  }
  return true;
}

// Whether every element of `t` (a float tensor in its own dense buffer) is finite. Where
// the guard scans (FiniteGuard::scan), on the calling thread: that guard is for the rare
// graphs whose pooling or softmax reads a graph input or a oneDNN op's output directly.
bool all_finite(const Tensor& t) {
  const int64_t n = ir::num_elements(t.type().shape);
  switch (t.type().dtype) {
    case ir::DType::f32: return exponents_finite(static_cast<const uint32_t*>(t.raw()), n, uint32_t{0x7F800000u});
    case ir::DType::f64:
      return exponents_finite(static_cast<const uint64_t*>(t.raw()), n, uint64_t{0x7FF0000000000000u});
    case ir::DType::bf16: return exponents_finite(static_cast<const uint16_t*>(t.raw()), n, uint16_t{0x7F80});
    case ir::DType::f16: return exponents_finite(static_cast<const uint16_t*>(t.raw()), n, uint16_t{0x7C00});
    default: return true;
  }
}

// Where each value is during a run: a host tensor (arena part, output buffer, the caller's
// variable, a constant) and its device address. On the CPU both name the same bytes.
struct ValueTable {
  std::vector<Tensor> host;    // per value id (views: the root's bytes under the view's type)
  std::vector<DevicePtr> dev;  // per root value id
};

// Memory from a device seen as host memory (the CPU's arenas), freed by the device when the
// last tensor viewing it is gone.
std::shared_ptr<std::byte[]> host_memory(runtime::DeviceApi& device, size_t bytes) {
  if (bytes == 0) return {};
  const DevicePtr p = device.alloc(bytes);
  return std::shared_ptr<std::byte[]>(reinterpret_cast<std::byte*>(p),
                                      [&device](std::byte* q) { device.free(reinterpret_cast<DevicePtr>(q)); });
}

DevicePtr address_of(const Tensor& t) { return reinterpret_cast<DevicePtr>(t.raw()); }

// With backward: how many leading steps run_forward runs (the steps before the first that
// reads a head gradient, directly or through other steps), or -1 when some forward output
// is computed only after that step. Later steps that read no head gradient run in the
// backward half; they read only variables and forward values, which stay bound.
int64_t forward_pass_steps(const ir::Graph& g, const Plan& plan, const std::vector<bool>& head_grad_var,
                           size_t forward_outputs) {
  std::vector<bool> late(g.nodes.size(), false);  // per node: reads a head gradient
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const ir::Node& node = g.nodes[n];
    late[n] = node.is_var() ? head_grad_var[n]
                            : std::any_of(node.inputs.begin(), node.inputs.end(), [&](ValueRef in) { return late[in.node]; });
  }
  int64_t first_late = static_cast<int64_t>(plan.steps.size());
  std::vector<int64_t> step_of_node(g.nodes.size(), -1);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    for (ValueRef v : step_writes(g, plan.steps[s])) step_of_node[v.node] = static_cast<int64_t>(s);
    const std::vector<ValueRef> reads = step_reads(g, plan.steps[s]);
    if (first_late == static_cast<int64_t>(plan.steps.size()) &&
        std::any_of(reads.begin(), reads.end(), [&](ValueRef v) { return late[v.node]; }))
      first_late = static_cast<int64_t>(s);
  }
  for (size_t i = 0; i < forward_outputs && i < g.outputs.size(); ++i) {
    const int32_t n = g.outputs[i].node;
    if (g.nodes[n].is_var()) continue;
    if (late[n] || step_of_node[n] < 0 || step_of_node[n] >= first_late) return -1;
  }
  return first_late;
}

}  // namespace

bool strict_from_environment() {
  const char* env = std::getenv("AMPFUSE_STRICT");
  if (!env || std::strcmp(env, "0") == 0 || *env == '\0') return false;
  if (std::strcmp(env, "1") == 0) return true;
  fail("AMPFUSE_STRICT='{}': expected 1 (a kernel that does not compile is an error) or 0", env);
}

LowerOptions lower_options(const ExecutorOptions& opts, const runtime::DeviceApi& device) {
  LowerOptions lo;
  lo.amp = opts.amp;
  if (opts.layout == "auto") {
    lo.layout = device.host_addressable() ? "nhwc" : "";
  } else if (opts.layout != "keep") {
    lo.layout = opts.layout;  // layout_optimize refuses what it does not know
  }
  lo.fold_batchnorm = opts.fold_batchnorm;
  if (opts.fuse_epilogues && opts.use_onednn && device.host_addressable() && !opts.backward && !opts.training)
    lo.epilogues_run_fused = [](const ir::Node& fused, std::span<const ir::TensorType> inputs) {
      const std::string impl = runtime::onednn_impl_name(fused, inputs);
      return !impl.empty() && !runtime::onednn_impl_is_slow(impl);
    };
  lo.relu_post_ops = opts.relu_post_ops;
  lo.backward = opts.backward;
  lo.training = opts.training;
  lo.planner.fuse = opts.fuse;
  lo.planner.recompute = opts.backward && opts.recompute && opts.fuse;  // unfused: one op a kernel
  lo.planner.row_kernels = opts.row_kernels && device.host_addressable() && !opts.backward && !opts.training &&
                           !opts.check_nonfinite;
  if (opts.use_onednn && opts.compute_in_f32.value_or(device.host_addressable()))
    lo.computes_in_f32 = [](const ir::Graph& g, int32_t n) {
      std::vector<ir::TensorType> types;
      for (ValueRef in : g.nodes[n].inputs) types.push_back(g.type(in));
      return runtime::onednn_computes_in_f32(g.nodes[n], types);
    };
  return lo;
}

// ---- The compiled executable ----------------------------------------------------------------

struct Executable::Impl {
  // Declared first, destroyed last: run contexts and constants free their memory into it.
  std::unique_ptr<runtime::DeviceApi> owned_device;
  runtime::DeviceApi* device = nullptr;
  bool two_spaces = false;

  ir::Graph graph;
  Plan plan;
  ExecutorOptions opts;
  CompileStats stats;
  MemoryPlan memory;
  std::vector<KernelStep> kernels;            // one per FusedKernel step, in plan order
  std::vector<ExternalStepInfo> externals;    // per step (meaningful for external steps)
  std::vector<int32_t> kernel_of_step;        // index into kernels, -1 for other steps
  std::vector<bool> constant_node, constant_step;
  std::vector<int32_t> variable_nodes;
  std::vector<int32_t> constant_vars;         // variable nodes whose values are constants
  std::vector<int32_t> constant_values;       // value ids computed from constants (views too)
  std::vector<int32_t> output_roots;          // values with an output buffer
  // Per value id: the graph output whose caller buffer run_into may compute this output
  // root in (the first output with this root), or -1.
  std::vector<int32_t> direct_output_of_root;
  std::vector<int32_t> rebound_views;         // views of variables, constants and outputs
  std::vector<std::vector<int32_t>> views_of;  // per root value id
  size_t flag_count = 0;                      // int32 flags of every device kernel
  // With backward: per node, whether it is a head-gradient variable; the steps run_forward
  // runs (forward_pass_steps), -1 when the plan cannot be split there.
  std::vector<bool> head_grad_var;
  int64_t forward_steps = -1;

  // Scratch a step needs: operand addresses per kernel, tensors for an external op.
  struct Scratch {
    std::vector<std::vector<DevicePtr>> launch;
    std::vector<Tensor> external_in, external_out;
  };

  // What a run needs of its own: arenas, the value table, output buffers.
  struct RunContext {
    std::shared_ptr<std::byte[]> host_arena;  // the CPU's one arena, or a GPU run's host arena
    DevicePtr device_arena = 0;               // a GPU's arena (the flags at its end)
    runtime::DeviceApi* device = nullptr;
    DevicePtr flags = 0;
    std::vector<int32_t> flag_values;
    ValueTable values;
    std::vector<Tensor> outputs;  // per output buffer
    Scratch scratch;
    ~RunContext() {
      if (device_arena) device->free(device_arena);
    }
  };
  mutable std::mutex contexts_mutex;
  mutable std::vector<std::unique_ptr<RunContext>> idle_contexts;

  // Values computed from constant params, for one binding of them.
  struct ConstantSet {
    runtime::DeviceApi* device = nullptr;
    std::vector<Tensor> bound;  // per constant_vars entry: the tensor they were computed from
    ValueTable values;          // constant values only
    std::vector<DevicePtr> device_buffers;
    std::vector<std::unique_ptr<runtime::OnednnWeightCache>> weights;  // per step
    bool nonfinite = false;     // a constant kernel saw NaN or +-Inf (check_nonfinite)
    ~ConstantSet() {
      for (DevicePtr p : device_buffers) device->free(p);
    }
  };
  mutable std::mutex constants_mutex;
  mutable std::shared_ptr<ConstantSet> constants;

  ValueTable unbound_table() const;
  std::unique_ptr<RunContext> make_context() const;
  std::unique_ptr<RunContext> take_context(RunStats& rs) const;
  void give_back(std::unique_ptr<RunContext> ctx) const;
  std::shared_ptr<ConstantSet> constants_for(const runtime::Bindings& vars, RunStats& rs) const;
  // `head_grads_later`: head-gradient variables stay unbound (run_forward).
  void bind_per_run(RunContext& ctx, const runtime::Bindings& vars, const ConstantSet* cs, std::span<Tensor> into,
                    std::vector<bool>& direct, RunStats& rs, bool head_grads_later = false) const;
  // Variable node n's bound tensor from `vars`, as value of this run.
  void bind_variable(ValueTable& t, int32_t n, const runtime::Bindings& vars) const;
  // The constants for `vars` when this executable keeps any (ExecutorOptions::constant_params).
  std::shared_ptr<ConstantSet> constants_if_kept(const runtime::Bindings& vars, RunStats& rs) const;
  bool writable_in_place(const Tensor& out, const runtime::Bindings& vars) const;
  void run(const runtime::Bindings& vars, std::span<Tensor> into, std::vector<Tensor>* returned, RunStats* stats) const;
  void release_per_run(RunContext& ctx) const;
  // Steps [from, to) of the plan on ctx (constant steps skipped when `cs` holds them).
  void run_steps(RunContext& ctx, const ConstantSet* cs, size_t from, size_t to, RunStats& rs) const;
  void clear_flags(RunContext& ctx) const;
  bool any_flag(RunContext& ctx) const;

  void execute(size_t s, ValueTable& t, Scratch& scratch, const ConstantSet* cs, DevicePtr flags, RunStats& rs) const;
  void launch(const KernelStep& k, const ValueTable& t, std::vector<DevicePtr>& data, DevicePtr flags) const;
  void run_on_interpreter(const KernelStep& k, ValueTable& t, RunStats& rs) const;
  void run_external(size_t s, ValueTable& t, Scratch& scratch, const ConstantSet* cs, DevicePtr flags,
                    RunStats& rs) const;
  void copy(const Transfer& tr, ValueTable& t, RunStats& rs) const;

  int32_t id(ValueRef v) const { return memory.id(v); }
  DevicePtr dev_of(const ValueTable& t, ValueRef v) const { return t.dev[memory.root_of(v)]; }
};

Executable::Executable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;
Executable::~Executable() = default;

const ir::Graph& Executable::graph() const { return impl_->graph; }
const Plan& Executable::plan() const { return impl_->plan; }
const MemoryPlan& Executable::memory_plan() const { return impl_->memory; }
const CompileStats& Executable::compile_stats() const { return impl_->stats; }
const std::vector<bool>& Executable::constant_steps() const { return impl_->constant_step; }

void Executable::forget_constants() const {
  std::lock_guard lock(impl_->constants_mutex);
  impl_->constants.reset();  // runs holding the old set keep it alive until they finish
}
runtime::DeviceApi& Executable::device() const { return *impl_->device; }

std::vector<const codegen::KernelSpec*> Executable::kernel_specs() const {
  std::vector<const codegen::KernelSpec*> specs;
  for (const KernelStep& k : impl_->kernels)
    if (k.code) specs.push_back(&k.lowered.spec);
  return specs;
}

// ---- compile ---------------------------------------------------------------------------------

Executable Executable::compile(ir::Graph g, const ExecutorOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  Impl& im = *impl;
  if (opts.device) {
    im.device = opts.device;
  } else if (opts.cache || opts.pool) {
    im.owned_device = std::make_unique<runtime::CpuDevice>(opts.cache, opts.pool);
    im.device = im.owned_device.get();
  } else {
    im.device = &runtime::cpu_device();
  }
  runtime::DeviceApi& device = *im.device;
  im.two_spaces = !device.host_addressable();
  im.opts = opts;
  CompileStats& st = im.stats;
  st.device = device.name();

  const auto t_plan = std::chrono::steady_clock::now();
  runtime::DiskCache* plan_disk = !opts.cache_plan ? nullptr : opts.plan_disk ? opts.plan_disk : runtime::DiskCache::process();
  Lowered lowered = lower_with_plan_cache(std::move(g), lower_options(opts, device), "device " + device.name(),
                                          plan_disk, &st.plan_from_disk);
  st.plan_seconds = seconds_since(t_plan);
  im.graph = std::move(lowered.graph);
  im.plan = std::move(lowered.plan);
  st.amp = std::move(lowered.stats.amp);
  st.folded_batchnorms = lowered.stats.folded_batchnorms;
  st.fused_epilogues = lowered.stats.fused_epilogues;
  st.row_kernels = lowered.stats.row_kernels;
  st.widened_external = lowered.stats.widened_external;
  st.forward_outputs = lowered.stats.forward_outputs;
  st.gradient_of = std::move(lowered.stats.gradient_of);
  st.head_grads = std::move(lowered.stats.head_grads);
  st.saved_values = lowered.stats.saved_values;
  st.saved_bytes = lowered.stats.saved_bytes;
  st.recomputed = lowered.stats.recomputed;
  const ir::Graph& graph = im.graph;
  const size_t steps = im.plan.steps.size();
  if (opts.backward) {
    im.head_grad_var.assign(graph.nodes.size(), false);
    for (const std::string& name : st.head_grads)
      if (const auto n = graph.find_var(name)) im.head_grad_var[*n] = true;
    im.forward_steps = forward_pass_steps(graph, im.plan, im.head_grad_var, st.forward_outputs);
  }

  // Lower every fused kernel to a spec; one that cannot be is an error (strict) or runs on
  // the interpreter.
  const auto fall_back = [&](KernelStep& k, const std::string& why) {
    const std::string where = fmt::format("kernel {} ({})", k.name, node_label(graph, k.kernel->nodes.back()));
    if (opts.strict) fail("{}: {}", where, why);
    st.fallbacks.push_back(fmt::format("{}: {}", where, why));
    fmt::print(stderr, "ampfuse: warning: {}: {}; its {} nodes run on the reference interpreter\n", where, why,
               k.kernel->nodes.size());
  };
  // oneDNN's primitives are made on other threads while this one lowers the kernels and
  // loads or compiles their code (OnednnPrefetch); the loop after that takes them in step order.
  const auto external_inputs = [&](const ir::Node& node) {
    std::vector<ir::TensorType> types;
    for (ValueRef in : node.inputs) types.push_back(graph.type(in));
    return types;
  };
  std::optional<runtime::OnednnPrefetch> prefetch;
  if (opts.use_onednn) {
    std::vector<runtime::OnednnPrefetch::Item> items;
    for (const PlanStep& step : im.plan.steps)
      if (const auto* e = std::get_if<ExternalStep>(&step))
        items.push_back({&graph.nodes[e->node], external_inputs(graph.nodes[e->node])});
    prefetch.emplace(std::move(items));
  }
  im.kernel_of_step.assign(steps, -1);
  im.externals.resize(steps);
  im.kernels.reserve(steps);
  // Guards for the primitives that differ from the reference on non-finite data: the
  // kernel that writes such a step's data gets a flag over that output.
  std::map<size_t, std::vector<int>> guarded_outputs;
  if (opts.use_onednn) plan_finite_guards(graph, im.plan, im.externals, guarded_outputs);
  std::vector<KernelStep*> to_compile;
  for (size_t s = 0; s < steps; ++s) {
    const PlanStep& step = im.plan.steps[s];
    if (const auto* k = std::get_if<FusedKernel>(&step)) {
      im.kernel_of_step[s] = static_cast<int32_t>(im.kernels.size());
      KernelStep& ks = im.kernels.emplace_back();
      ks.kernel = k;
      ks.name = fmt::format("k{}_{}", st.kernels++, graph.nodes[k->nodes.back()].op);
      st.fused_nodes += static_cast<int>(k->nodes.size());
      ks.empty = ir::num_elements(k->iteration) == 0;
      if (ks.empty) continue;
      try {
        const auto guarded = guarded_outputs.find(s);
        ks.lowered = lower_kernel(graph, *k, ks.name, opts.check_nonfinite,
                                  guarded == guarded_outputs.end() || opts.check_nonfinite ? std::vector<int>{}
                                                                                          : guarded->second);
        to_compile.push_back(&ks);
      } catch (const Error& e) {
        fall_back(ks, e.what());
      }
    } else if (std::holds_alternative<ExternalStep>(step)) {
      ++st.external_ops;
    } else {
      ++st.views;
    }
  }

  // Device code for every lowered kernel: one batch, or one by one when the batch fails
  // (which names the kernel that cannot be compiled).
  const bool show_progress = opts.progress && isatty(STDERR_FILENO) && !to_compile.empty();
  std::vector<const codegen::KernelSpec*> specs;
  for (const KernelStep* k : to_compile) specs.push_back(&k->lowered.spec);
  bool batch_compiled = false;
  // Disk loads happen on this thread, inside the device's compile.
  const int64_t disk_loads_before = runtime::disk_loads_on_this_thread();
  if (!show_progress) try {
      st.compilations = device.precompile(specs);
      batch_compiled = true;
    } catch (const Error&) {
    }
  for (size_t i = 0; i < to_compile.size(); ++i) {
    KernelStep& k = *to_compile[i];
    if (show_progress) fmt::print(stderr, "\rcompiling kernels {}/{}", i + 1, to_compile.size());
    try {
      bool compiled_now = false;
      k.code = device.prepare(k.lowered.spec, &compiled_now);
      if (!batch_compiled) st.compilations += compiled_now;
    } catch (const Error& e) {
      fall_back(k, e.what());
      continue;
    }
    k.flag_offset = im.flag_count;
    im.flag_count += k.lowered.spec.flags.size();
  }
  if (show_progress) fmt::print(stderr, "\r{:40}\r", "");
  const auto with_code = std::count_if(im.kernels.begin(), im.kernels.end(), [](const KernelStep& k) { return k.code != nullptr; });
  st.cache_hits = std::max(0, static_cast<int>(with_code) - st.compilations);
  st.disk_loads = static_cast<int>(runtime::disk_loads_on_this_thread() - disk_loads_before);

  // The oneDNN primitives. One that cannot be created (onednn_primitive throws;
  // AMPFUSE_FAULT=primitive makes it) is handled as a kernel that cannot be compiled: an error
  // when strict, else the node runs on the interpreter's kernel after a warning, listed in
  // CompileStats::fallbacks as "node N 'name' (op): reason".
  if (prefetch) prefetch->wait();
  for (size_t s = 0; s < steps && opts.use_onednn; ++s) {
    const auto* e = std::get_if<ExternalStep>(&im.plan.steps[s]);
    if (!e) continue;
    const ir::Node& node = graph.nodes[e->node];
    const std::vector<ir::TensorType> types = external_inputs(node);
    try {
      im.externals[s].onednn = runtime::onednn_primitive(node, types);
    } catch (const Error& err) {
      const std::string where = node_label(graph, e->node);
      if (opts.strict) fail("{}: {}", where, err.what());
      st.fallbacks.push_back(fmt::format("{}: {}", where, err.what()));
      fmt::print(stderr, "ampfuse: warning: {}: {}; it runs on the reference interpreter\n", where, err.what());
    }
    if (!im.externals[s].onednn) continue;
    ++st.onednn_ops;
    const std::string impl_name = runtime::onednn_impl_name(node, types);
    if (runtime::onednn_impl_is_slow(impl_name))
      st.slow_external.push_back(fmt::format("{} ({}): {}", node.name, node.op, impl_name));
  }

  // Constant params and the steps computed from them alone.
  im.constant_node.assign(graph.nodes.size(), false);
  if (opts.constant_params) im.constant_node = ir::computed_from_params(graph);
  for (int32_t n = 0; n < static_cast<int32_t>(graph.nodes.size()); ++n)
    if (graph.nodes[n].is_var()) {
      im.variable_nodes.push_back(n);
      if (im.constant_node[n]) im.constant_vars.push_back(n);
    }
  for (size_t s = 0; s < steps; ++s) {
    const std::vector<ValueRef> reads = step_reads(graph, im.plan.steps[s]);
    const bool constant = opts.constant_params && !reads.empty() &&
                          std::all_of(reads.begin(), reads.end(), [&](ValueRef v) { return im.constant_node[v.node]; });
    im.constant_step.push_back(constant);
    st.constant_steps += constant;
    if (const auto* e = std::get_if<ExternalStep>(&im.plan.steps[s])) {
      const ir::Node& node = graph.nodes[e->node];
      im.externals[s].constant_weights = node.inputs.size() > 1 && im.constant_node[node.inputs[1].node];
    }
  }

  // The guards settled, now that kernels have their flags and code, the primitives are made
  // and the constant steps known (a constant kernel's flags are not the run's).
  for (size_t s = 0; s < steps; ++s) {
    ExternalStepInfo& info = im.externals[s];
    if (!info.onednn) info.guard = FiniteGuard::none;
    if (info.guard != FiniteGuard::flag) {
      st.guarded_steps += info.guard == FiniteGuard::scan;
      st.guards_by_scan += info.guard == FiniteGuard::scan;
      continue;
    }
    for (int64_t p : info.guard_relu_ops)
      if (!im.externals[p].onednn) info.guard = FiniteGuard::scan;  // the reference "post-op" keeps NaN
    for (int64_t p : info.guard_kernels) {
      const KernelStep& k = im.kernels[im.kernel_of_step[p]];
      if (k.empty) continue;
      if (!k.code || im.two_spaces || (im.constant_step[p] && !im.constant_step[s]))
        info.guard = FiniteGuard::scan;
      else
        info.guard_flags.push_back(k.flag_offset + k.lowered.spec.flags.size() - 1);
    }
    if (info.guard == FiniteGuard::scan) info.guard_flags.clear();
    if (info.guard == FiniteGuard::flag && info.guard_flags.empty()) info.guard = FiniteGuard::none;
    st.guarded_steps += info.guard != FiniteGuard::none;
    st.guards_by_scan += info.guard == FiniteGuard::scan;
  }

  // Where each step runs, then the memory plan.
  MemoryPlanOptions mo;
  mo.two_spaces = im.two_spaces;
  mo.constant_step = im.constant_step;
  mo.constant_node = im.constant_node;
  for (size_t s = 0; s < steps; ++s) {
    const int32_t k = im.kernel_of_step[s];
    const bool on_device = !im.two_spaces || std::holds_alternative<ViewStep>(im.plan.steps[s]) ||
                           (k >= 0 && (im.kernels[k].code || im.kernels[k].empty));
    mo.step_space.push_back(on_device ? Space::device : Space::host);
  }
  im.memory = plan_memory(graph, im.plan, mo);
  if (dump_enabled("memory")) fmt::print(stderr, "// ----- memory -----\n{}", print_memory_plan(graph, im.plan, im.memory));
  st.arena_bytes = im.memory.total_arena_bytes();
  st.intermediate_bytes = im.memory.intermediate_bytes;
  st.in_place = im.memory.in_place;
  for (size_t s = 0; s < steps; ++s) {
    if (mo.step_space[s] != Space::host) continue;
    const auto& tr = im.memory.transfers_before[s];
    st.host_round_trips += std::any_of(tr.begin(), tr.end(), [&](const Transfer& t) {
      return t.to == Space::host && im.memory.buffers[t.value].home == Space::device;
    });
  }

  // Values bound anew every run, and views by root.
  im.views_of.resize(im.memory.root.size());
  for (size_t id = 0; id < im.memory.root.size(); ++id) {
    const int32_t r = im.memory.root[id];
    const BufferValue::Kind kind = im.memory.buffers[r].kind;
    if (r != static_cast<int32_t>(id)) im.views_of[r].push_back(static_cast<int32_t>(id));
    if (kind == BufferValue::Kind::constant) im.constant_values.push_back(static_cast<int32_t>(id));
    if (kind == BufferValue::Kind::output && r == static_cast<int32_t>(id)) im.output_roots.push_back(r);
    if (r != static_cast<int32_t>(id) && kind != BufferValue::Kind::intermediate)
      im.rebound_views.push_back(static_cast<int32_t>(id));
  }
  im.direct_output_of_root.assign(im.memory.root.size(), -1);
  for (size_t i = 0; i < im.graph.outputs.size(); ++i) {
    const int32_t r = im.memory.root_of(im.graph.outputs[i]);
    if (im.memory.buffers[r].kind == BufferValue::Kind::output && im.direct_output_of_root[r] < 0)
      im.direct_output_of_root[r] = static_cast<int32_t>(i);
  }

  st.compile_seconds = seconds_since(t0);
  return Executable(std::move(impl));
}

// ---- run contexts and constants ---------------------------------------------------------------


ValueTable Executable::Impl::unbound_table() const {
  ValueTable t;
  t.host.reserve(memory.root.size());
  for (const ir::Node& n : graph.nodes)
    for (const ir::TensorType& type : n.outputs) t.host.push_back(Tensor::unbound(type));
  t.dev.assign(memory.root.size(), 0);
  return t;
}

std::unique_ptr<Executable::Impl::RunContext> Executable::Impl::make_context() const {
  auto ctx = std::make_unique<RunContext>();
  ctx->device = device;
  ctx->values = unbound_table();

  // The arenas. On the CPU the one arena is host memory, the flags at its end; on a GPU the
  // device arena holds the flags and the host arena is separate.
  const size_t flag_bytes = flag_count * sizeof(int32_t);
  const size_t device_bytes = static_cast<size_t>(memory.arena_bytes[space_index(Space::device)]);
  if (!two_spaces) {
    ctx->host_arena = host_memory(*device, device_bytes + flag_bytes);
    if (flag_bytes) ctx->flags = reinterpret_cast<DevicePtr>(ctx->host_arena.get() + device_bytes);
  } else {
    if (device_bytes + flag_bytes > 0) {
      ctx->device_arena = device->alloc(device_bytes + flag_bytes);
      std::vector<runtime::DeviceRegion> regions = memory.regions[space_index(Space::device)];
      if (flag_bytes) regions.push_back({device_bytes, flag_bytes});
      device->declare_regions(ctx->device_arena, regions);
    }
    if (flag_bytes) ctx->flags = ctx->device_arena + device_bytes;
    ctx->host_arena = host_memory(runtime::cpu_device(), static_cast<size_t>(memory.arena_bytes[space_index(Space::host)]));
  }
  ctx->flag_values.assign(flag_count, 0);

  // Every slot: its host tensor where it is host memory, its device address.
  const Space host_space = two_spaces ? Space::host : Space::device;
  for (size_t id = 0; id < memory.root.size(); ++id) {
    if (memory.root[id] != static_cast<int32_t>(id)) continue;
    const BufferValue& b = memory.buffers[id];
    if (const int64_t slot = b.slot[space_index(host_space)]; slot >= 0) {
      Tensor& t = ctx->values.host[id];
      t = Tensor::view_of(t.type(), ctx->host_arena, ctx->host_arena.get() + slot, static_cast<size_t>(b.bytes));
      if (!two_spaces) ctx->values.dev[id] = address_of(t);
      for (int32_t v : views_of[id]) ctx->values.host[v].share_storage(t);
    }
    if (const int64_t slot = b.slot[space_index(Space::device)]; two_spaces && slot >= 0)
      ctx->values.dev[id] = ctx->device_arena + static_cast<DevicePtr>(slot);
  }
  ctx->outputs.resize(static_cast<size_t>(memory.output_buffers));
  ctx->scratch.launch.resize(kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k)
    ctx->scratch.launch[k].resize(kernels[k].kernel->inputs.size() + kernels[k].kernel->outputs.size());
  return ctx;
}

// Constants for this binding of the constant params: the ones made for it before, or made
// now (once, by whichever run asks first; other runs wait for it).
std::shared_ptr<Executable::Impl::ConstantSet> Executable::Impl::constants_for(const runtime::Bindings& vars,
                                                                              RunStats& rs) const {
  std::lock_guard lock(constants_mutex);
  if (constants) {
    bool same = true;
    for (size_t i = 0; i < constant_vars.size() && same; ++i) {
      const Tensor& now = runtime::bound_variable(graph.nodes[constant_vars[i]], vars);
      same = now.raw() == constants->bound[i].raw();
    }
    if (same) {
      rs.reused_constants = true;
      return constants;
    }
  }
  constants.reset();  // the old binding's memory goes before the new one's is allocated
  auto cs = std::make_shared<ConstantSet>();
  cs->device = device;
  cs->values = unbound_table();
  cs->weights.resize(plan.steps.size());
  for (size_t s = 0; s < plan.steps.size(); ++s)
    if (externals[s].onednn && externals[s].constant_weights)
      cs->weights[s] = std::make_unique<runtime::OnednnWeightCache>();
  ValueTable& t = cs->values;
  for (int32_t n : constant_vars) {
    const Tensor& bound = runtime::bound_variable(graph.nodes[n], vars);
    cs->bound.push_back(bound);
    const int32_t id = memory.first_value[n];
    t.host[id].share_storage(bound);
    if (!two_spaces) t.dev[id] = address_of(bound);
  }

  // Flags of the constant kernels, read once they ran.
  std::vector<int32_t> flag_values(flag_count, 0);
  DevicePtr flags = 0;
  if (flag_count) {
    if (two_spaces) {
      flags = device->alloc(flag_count * sizeof(int32_t));
      cs->device_buffers.push_back(flags);
      device->upload(flags, flag_values.data(), flag_count * sizeof(int32_t));
      ++rs.allocations;
    } else {
      flags = reinterpret_cast<DevicePtr>(flag_values.data());
    }
  }
  Scratch scratch;
  scratch.launch.resize(kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k)
    scratch.launch[k].resize(kernels[k].kernel->inputs.size() + kernels[k].kernel->outputs.size());
  // Constant values live outside the arenas, in buffers of the set's own: on the device
  // (GPU) or in a host tensor (which is also the device's memory on the CPU).
  const auto allocate = [&](int32_t r, Space space) {
    if (space == Space::device) {
      if (const int64_t bytes = memory.buffers[r].bytes; bytes > 0) {
        t.dev[r] = device->alloc(static_cast<size_t>(bytes));
        cs->device_buffers.push_back(t.dev[r]);
        ++rs.allocations;
      }
      return;
    }
    t.host[r] = Tensor(t.host[r].type());
    ++rs.allocations;
    if (!two_spaces) t.dev[r] = address_of(t.host[r]);
  };
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    for (const Transfer& tr : memory.constant_transfers_before[s]) {
      allocate(tr.value, tr.to);
      if (tr.to == Space::host)
        for (int32_t v : views_of[tr.value]) t.host[v].share_storage(t.host[tr.value]);
      copy(tr, t, rs);
    }
    if (!constant_step[s]) continue;
    const PlanStep& step = plan.steps[s];
    if (!std::holds_alternative<ViewStep>(step))
      for (ValueRef w : step_writes(graph, step)) {
        const int32_t r = id(w);
        allocate(r, two_spaces && memory.buffers[r].home == Space::device ? Space::device : Space::host);
      }
    execute(s, t, scratch, cs.get(), flags, rs);
  }
  if (flag_count) {
    if (two_spaces) device->download(flag_values.data(), flags, flag_count * sizeof(int32_t));
    cs->nonfinite = opts.check_nonfinite && std::any_of(flag_values.begin(), flag_values.end(), [](int32_t f) { return f != 0; });
  }
  device->synchronize();
  constants = cs;
  return cs;
}

// Variables, constants and output buffers: bound for this run only.
void Executable::Impl::bind_per_run(RunContext& ctx, const runtime::Bindings& vars, const ConstantSet* cs,
                                    std::span<Tensor> into, std::vector<bool>& direct, RunStats& rs,
                                    bool head_grads_later) const {
  ValueTable& t = ctx.values;
  for (int32_t n : variable_nodes)
    if (!head_grads_later || !head_grad_var[n]) bind_variable(t, n, vars);
  if (cs) {
    for (int32_t id : constant_values) {
      if (!cs->values.host[id].empty_storage()) t.host[id].share_storage(cs->values.host[id]);
      t.dev[id] = cs->values.dev[id];
    }
    // Constant variables' copies on a GPU live with the constants too.
    for (int32_t n : constant_vars) {
      const int32_t id = memory.first_value[n];
      if (cs->values.dev[id]) t.dev[id] = cs->values.dev[id];
    }
  }
  for (int32_t id : output_roots) {
    // run_into: the caller's buffer where the kernels can write it directly.
    if (const int32_t i = into.empty() ? -1 : direct_output_of_root[id]; i >= 0 && writable_in_place(into[i], vars)) {
      t.host[id].share_storage(into[i]);
      if (!two_spaces) t.dev[id] = address_of(into[i]);
      direct[static_cast<size_t>(i)] = true;
      continue;
    }
    // The previous run's buffer, unless the caller still holds it.
    Tensor& out = ctx.outputs[static_cast<size_t>(memory.buffers[id].output_index)];
    if (out.empty_storage() || !out.sole_owner()) {
      out = Tensor(t.host[id].type());
      ++rs.allocations;
    }
    t.host[id].share_storage(out);
    if (!two_spaces) t.dev[id] = address_of(out);
  }
  for (int32_t v : rebound_views) {
    const Tensor& root = t.host[memory.root[v]];
    if (!root.empty_storage()) t.host[v].share_storage(root);
  }
}

void Executable::Impl::bind_variable(ValueTable& t, int32_t n, const runtime::Bindings& vars) const {
  const int32_t id = memory.first_value[n];
  const Tensor& bound = runtime::bound_variable(graph.nodes[n], vars);
  t.host[id].share_storage(bound);
  if (!two_spaces) t.dev[id] = address_of(bound);
}

std::shared_ptr<Executable::Impl::ConstantSet> Executable::Impl::constants_if_kept(const runtime::Bindings& vars,
                                                                                  RunStats& rs) const {
  if (!opts.constant_params || (constant_vars.empty() && constant_values.empty())) return nullptr;
  return constants_for(vars, rs);
}

// A caller's output buffer the plan can compute in: dense (kernels write row-major) and
// apart from every input, which steps may still read after the output is written.
bool Executable::Impl::writable_in_place(const Tensor& out, const runtime::Bindings& vars) const {
  if (!out.is_contiguous() || out.empty_storage()) return false;
  const auto* begin = static_cast<const std::byte*>(out.raw());
  const auto* end = begin + out.bytes();
  for (int32_t n : variable_nodes) {
    const Tensor& in = runtime::bound_variable(graph.nodes[n], vars);
    if (in.empty_storage()) continue;
    const std::byte* in_begin = in.is_contiguous() ? static_cast<const std::byte*>(in.raw()) : nullptr;
    if (!in_begin) return false;  // strided inputs: not worth proving apart
    if (in_begin < end && begin < in_begin + in.capacity()) return false;
  }
  return true;
}

// Drops what the run bound, so that the caller's tensors and the returned outputs are the
// caller's alone again.
void Executable::Impl::release_per_run(RunContext& ctx) const {
  ValueTable& t = ctx.values;
  for (int32_t n : variable_nodes) t.host[memory.first_value[n]].release_storage();
  for (int32_t id : constant_values) t.host[id].release_storage();
  for (int32_t v : rebound_views) t.host[v].release_storage();
  for (int32_t id : output_roots) t.host[id].release_storage();
  for (Tensor& x : ctx.scratch.external_in) x.release_storage();
  for (Tensor& x : ctx.scratch.external_out) x.release_storage();
}

// ---- steps -------------------------------------------------------------------------------------

void Executable::Impl::copy(const Transfer& tr, ValueTable& t, RunStats& rs) const {
  const size_t bytes = static_cast<size_t>(memory.buffers[tr.value].bytes);
  if (bytes == 0) return;
  if (tr.to == Space::device) {
    device->upload(t.dev[tr.value], t.host[tr.value].raw(), bytes);
    ++rs.uploads;
    rs.upload_bytes += static_cast<int64_t>(bytes);
  } else {
    device->download(t.host[tr.value].raw(), t.dev[tr.value], bytes);
    ++rs.downloads;
    rs.download_bytes += static_cast<int64_t>(bytes);
  }
}

void Executable::Impl::launch(const KernelStep& k, const ValueTable& t, std::vector<DevicePtr>& data,
                              DevicePtr flags) const {
  const FusedKernel& fk = *k.kernel;
  for (size_t i = 0; i < fk.inputs.size(); ++i) {
    const ValueRef v = fk.inputs[i].value;
    // Slices start inside their input's buffer.
    data[i] = dev_of(t, v) + static_cast<DevicePtr>(k.lowered.input_offsets[i]) * ir::dtype_size(graph.type(v).dtype);
  }
  for (size_t o = 0; o < fk.outputs.size(); ++o) data[fk.inputs.size() + o] = dev_of(t, fk.outputs[o].value);
  const DevicePtr kernel_flags = k.lowered.spec.flags.empty() ? 0 : flags + k.flag_offset * sizeof(int32_t);
  try {
    device->launch(*k.code, k.lowered.spec, data, kernel_flags);
  } catch (const Error& e) {
    fail("kernel '{}': {}", k.name, e.what());
  }
}

// A kernel without code: its nodes one by one, the results copied to where the plan keeps them.
void Executable::Impl::run_on_interpreter(const KernelStep& k, ValueTable& t, RunStats& rs) const {
  const int64_t before = runtime::tensor_buffer_allocations();
  std::map<ValueRef, Tensor> inside;
  for (int32_t n : k.kernel->nodes) {
    std::vector<Tensor> inputs;
    for (ValueRef in : graph.nodes[n].inputs) {
      const auto it = inside.find(in);
      inputs.push_back(it != inside.end() ? it->second : t.host[id(in)]);
    }
    std::vector<Tensor> outs = with_context(node_label(graph, n), [&] { return runtime::run_node(graph.nodes[n], inputs); });
    for (size_t o = 0; o < outs.size(); ++o) inside[{n, static_cast<int32_t>(o)}] = std::move(outs[o]);
  }
  for (const KernelOperand& op : k.kernel->outputs) {
    Tensor& dst = t.host[id(op.value)];
    const Tensor& src = inside.at(op.value);
    if (dst.bytes() > 0) std::memcpy(dst.raw(), src.raw(), dst.bytes());
  }
  rs.allocations += runtime::tensor_buffer_allocations() - before;
}

void Executable::Impl::run_external(size_t s, ValueTable& t, Scratch& scratch, const ConstantSet* cs, DevicePtr flags,
                                    RunStats& rs) const {
  const int32_t n = std::get<ExternalStep>(plan.steps[s]).node;
  const ir::Node& node = graph.nodes[n];
  // Copy-assigned into tensors kept between runs: no allocation once they are big enough.
  if (scratch.external_in.size() < node.inputs.size()) scratch.external_in.resize(node.inputs.size());
  if (scratch.external_out.size() < node.outputs.size()) scratch.external_out.resize(node.outputs.size());
  for (size_t i = 0; i < node.inputs.size(); ++i) scratch.external_in[i] = t.host[id(node.inputs[i])];
  for (size_t o = 0; o < node.outputs.size(); ++o) scratch.external_out[o] = t.host[id({n, static_cast<int32_t>(o)})];
  const std::span<const Tensor> in(scratch.external_in.data(), node.inputs.size());
  const std::span<Tensor> out(scratch.external_out.data(), node.outputs.size());
  const ExternalStepInfo& info = externals[s];
  bool finite = true;
  if (info.guard == FiniteGuard::scan) finite = all_finite(in[0]);
  for (size_t f : info.guard_flags) finite = finite && reinterpret_cast<const int32_t*>(flags)[f] == 0;
  rs.reference_on_nonfinite += !finite;
  try {
    if (const auto& prim = info.onednn; prim && finite) {
      runtime::OnednnWeightCache* weights = cs && cs->weights[s] ? cs->weights[s].get() : nullptr;
      runtime::onednn_execute(*prim, node, in, out, weights);
    } else {
      runtime::run_node_into(node, in, out);
    }
  } catch (const Error& e) {
    fail("{}: {}", node_label(graph, n), e.what());
  }
}

void Executable::Impl::execute(size_t s, ValueTable& t, Scratch& scratch, const ConstantSet* cs, DevicePtr flags,
                               RunStats& rs) const {
  const PlanStep& step = plan.steps[s];
  if (std::holds_alternative<FusedKernel>(step)) {
    const int32_t ki = kernel_of_step[s];
    const KernelStep& k = kernels[ki];
    if (k.empty) return;
    if (k.code)
      launch(k, t, scratch.launch[ki], flags);
    else
      run_on_interpreter(k, t, rs);
  } else if (std::holds_alternative<ExternalStep>(step)) {
    run_external(s, t, scratch, cs, flags, rs);
  } else {
    // A view: its root's bytes, bound when the root was (arena slots, per-run values).
    const int32_t v = id({std::get<ViewStep>(step).node, 0});
    const Tensor& root = t.host[memory.root[v]];
    if (!root.empty_storage()) t.host[v].share_storage(root);
  }
}

// ---- run ----------------------------------------------------------------------------------------

std::vector<Tensor> Executable::run(const runtime::Bindings& vars, RunStats* stats) const {
  std::vector<Tensor> outputs;
  impl_->run(vars, {}, &outputs, stats);
  return outputs;
}

void Executable::run_into(const runtime::Bindings& vars, std::span<Tensor> outputs, RunStats* stats) const {
  const ir::Graph& g = impl_->graph;
  if (outputs.size() != g.outputs.size())
    fail("run_into: {} output buffers given for a graph with {} outputs", outputs.size(), g.outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ir::TensorType& want = g.type(g.outputs[i]);
    if (outputs[i].type() != want)
      fail("run_into: output {} (node '{}') is {}, its buffer is {}", i, g.nodes[g.outputs[i].node].name,
           ir::type_str(want), ir::type_str(outputs[i].type()));
    if (outputs[i].empty_storage() && outputs[i].size() > 0)
      fail("run_into: output {} (node '{}') has no buffer", i, g.nodes[g.outputs[i].node].name);
  }
  impl_->run(vars, outputs, nullptr, stats);
}

std::unique_ptr<Executable::Impl::RunContext> Executable::Impl::take_context(RunStats& rs) const {
  {
    std::lock_guard lock(contexts_mutex);
    if (!idle_contexts.empty()) {
      std::unique_ptr<RunContext> ctx = std::move(idle_contexts.back());
      idle_contexts.pop_back();
      return ctx;
    }
  }
  std::unique_ptr<RunContext> ctx = make_context();
  rs.allocations += (ctx->host_arena ? 1 : 0) + (ctx->device_arena ? 1 : 0);
  return ctx;
}

void Executable::Impl::give_back(std::unique_ptr<RunContext> ctx) const {
  release_per_run(*ctx);
  std::lock_guard lock(contexts_mutex);
  idle_contexts.push_back(std::move(ctx));
}

void Executable::Impl::clear_flags(RunContext& ctx) const {
  if (flag_count == 0) return;
  std::fill(ctx.flag_values.begin(), ctx.flag_values.end(), 0);
  device->upload(ctx.flags, ctx.flag_values.data(), flag_count * sizeof(int32_t));
}

bool Executable::Impl::any_flag(RunContext& ctx) const {
  // Without check_nonfinite the only flags are the guards', which RunStats::nonfinite does
  // not report.
  if (flag_count == 0 || !opts.check_nonfinite) return false;
  device->download(ctx.flag_values.data(), ctx.flags, flag_count * sizeof(int32_t));
  return std::any_of(ctx.flag_values.begin(), ctx.flag_values.end(), [](int32_t f) { return f != 0; });
}

void Executable::Impl::run_steps(RunContext& ctx, const ConstantSet* cs, size_t from, size_t to, RunStats& rs) const {
  for (size_t s = from; s < to; ++s) {
    if (cs && constant_step[s]) continue;
    for (const Transfer& tr : memory.transfers_before[s]) copy(tr, ctx.values, rs);
    execute(s, ctx.values, ctx.scratch, cs, ctx.flags, rs);
  }
}

void Executable::Impl::run(const runtime::Bindings& vars, std::span<Tensor> into, std::vector<Tensor>* returned,
                           RunStats* stats) const {
  const auto t0 = std::chrono::steady_clock::now();
  RunStats rs;
  // Declared first, so that it measures the whole run, its teams' waits included.
  const runtime::RunTeams teams;
  rs.solo = teams.solo();

  // The context goes back for the next run however this one ends.
  struct Return {
    const Impl& im;
    std::unique_ptr<RunContext> ctx;
    ~Return() { im.give_back(std::move(ctx)); }
  } held{*this, take_context(rs)};
  RunContext& ctx = *held.ctx;

  const std::shared_ptr<const ConstantSet> cs = constants_if_kept(vars, rs);
  std::vector<bool> direct(into.size(), false);
  bind_per_run(ctx, vars, cs.get(), into, direct, rs);
  if (cs) rs.nonfinite = cs->nonfinite;

  clear_flags(ctx);
  run_steps(ctx, cs.get(), 0, plan.steps.size(), rs);
  ValueTable& t = ctx.values;
  for (const Transfer& tr : memory.transfers_at_end) copy(tr, t, rs);
  rs.nonfinite = any_flag(ctx) || rs.nonfinite;
  device->synchronize();

  if (returned) {
    returned->reserve(graph.outputs.size());
    for (ValueRef v : graph.outputs) returned->push_back(t.host[id(v)]);
  }
  for (size_t i = 0; i < into.size(); ++i) {
    if (direct[i]) continue;
    into[i].copy_from(t.host[id(graph.outputs[i])]);
    ++rs.output_copies;
  }
  rs.seconds = seconds_since(t0);
  if (stats) *stats = rs;
}

// ---- forward and backward in two calls ----------------------------------------------------

struct ForwardPass::State {
  const Executable::Impl* im = nullptr;
  std::unique_ptr<Executable::Impl::RunContext> ctx;
  std::shared_ptr<const Executable::Impl::ConstantSet> cs;
  ~State() {
    if (ctx) im->give_back(std::move(ctx));
  }
};

ForwardPass::ForwardPass() = default;
ForwardPass::ForwardPass(ForwardPass&&) noexcept = default;
ForwardPass& ForwardPass::operator=(ForwardPass&&) noexcept = default;
ForwardPass::~ForwardPass() = default;

bool Executable::splits_at_head_grads() const { return impl_->forward_steps >= 0 && !impl_->two_spaces; }

ForwardPass Executable::run_forward(const runtime::Bindings& vars, std::span<Tensor> forward_outputs,
                                    RunStats* stats) const {
  const Impl& im = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  if (!im.opts.backward) fail("run_forward: the executable was compiled without backward");
  if (im.two_spaces) fail("run_forward: not on {}, whose memory is not the host's; run() computes both halves", im.device->name());
  if (im.forward_steps < 0)
    fail("run_forward: a forward output is computed by a step that reads a head gradient, so the plan cannot stop "
         "between forward and backward; run() computes both halves");
  const size_t n_forward = im.stats.forward_outputs;
  if (forward_outputs.size() != n_forward)
    fail("run_forward: {} output buffers given for {} forward outputs", forward_outputs.size(), n_forward);
  for (size_t i = 0; i < n_forward; ++i) {
    const ir::TensorType& want = im.graph.type(im.graph.outputs[i]);
    if (forward_outputs[i].type() != want)
      fail("run_forward: output {} (node '{}') is {}, its buffer is {}", i, im.graph.nodes[im.graph.outputs[i].node].name,
           ir::type_str(want), ir::type_str(forward_outputs[i].type()));
  }
  RunStats rs;
  const runtime::RunTeams teams;
  rs.solo = teams.solo();
  ForwardPass pass;
  pass.state_ = std::make_unique<ForwardPass::State>();
  ForwardPass::State& p = *pass.state_;
  p.im = &im;
  p.ctx = im.take_context(rs);
  p.cs = im.constants_if_kept(vars, rs);
  std::vector<bool> direct;
  im.bind_per_run(*p.ctx, vars, p.cs.get(), {}, direct, rs, /*head_grads_later=*/true);
  im.clear_flags(*p.ctx);
  im.run_steps(*p.ctx, p.cs.get(), 0, static_cast<size_t>(im.forward_steps), rs);
  im.device->synchronize();
  // The forward outputs are the pass's own buffers, which backward steps may read; the
  // caller gets copies.
  for (size_t i = 0; i < n_forward; ++i) {
    forward_outputs[i].copy_from(p.ctx->values.host[im.id(im.graph.outputs[i])]);
    ++rs.output_copies;
  }
  rs.nonfinite = im.any_flag(*p.ctx) || (p.cs && p.cs->nonfinite);
  rs.seconds = seconds_since(t0);
  if (stats) *stats = rs;
  return pass;
}

std::vector<Tensor> Executable::run_backward(ForwardPass pass, const runtime::Bindings& head_grads,
                                             RunStats* stats) const {
  const Impl& im = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  if (!pass.state_ || pass.state_->im != &im) fail("run_backward: the forward pass is empty or from another executable");
  RunStats rs;
  const runtime::RunTeams teams;
  rs.solo = teams.solo();
  ForwardPass::State& p = *pass.state_;
  ValueTable& t = p.ctx->values;
  for (int32_t n : im.variable_nodes)
    if (im.head_grad_var[n]) im.bind_variable(t, n, head_grads);
  im.run_steps(*p.ctx, p.cs.get(), static_cast<size_t>(im.forward_steps), im.plan.steps.size(), rs);
  // The flags were cleared before the forward steps: they cover the whole run.
  rs.nonfinite = im.any_flag(*p.ctx) || (p.cs && p.cs->nonfinite);
  im.device->synchronize();
  std::vector<Tensor> gradients;
  for (size_t i = im.stats.forward_outputs; i < im.graph.outputs.size(); ++i)
    gradients.push_back(t.host[im.id(im.graph.outputs[i])]);
  rs.seconds = seconds_since(t0);
  if (stats) *stats = rs;
  return gradients;  // the pass gives its memory back as it goes out of scope
}

}  // namespace ampfuse::engine
