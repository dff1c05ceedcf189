#include "engine/execution/executor.h"

#include "engine/planning/kernel_lowering.h"
#include "engine/passes/compute_in_f32.h"
#include "engine/passes/fold_batchnorm.h"
#include "engine/passes/dce.h"
#include "ir/dump.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/verifier.h"
#include "runtime/kernel_cache.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/thread_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include <unistd.h>

namespace ampfuse::engine {

namespace {

using ir::ValueRef;
using runtime::Tensor;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A fused kernel ready to run: its lowered spec and compiled code, or why it has none.
struct PreparedKernel {
  const FusedKernel* kernel = nullptr;
  bool empty = false;  // no elements: the outputs are allocated, nothing runs
  LoweredKernel lowered;
  std::shared_ptr<const runtime::CompiledKernel> compiled;
};

std::string node_label(const ir::Graph& g, int32_t n) { return fmt::format("node '{}' ({})", g.nodes[n].name, g.nodes[n].op); }

// Buffers of dead values, handed out again for new ones (best fit by capacity).
class BufferPool {
 public:
  Tensor acquire(const ir::TensorType& t) {
    const size_t need = static_cast<size_t>(ir::num_elements(t.shape)) * ir::dtype_size(t.dtype);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->capacity() >= need && (best == free_.end() || it->capacity() < best->capacity())) best = it;
    if (best != free_.end()) {
      Tensor buffer = *best;
      free_.erase(best);
      return buffer.reinterpreted(t);
    }
    Tensor fresh(t);
    allocated_bytes_ += static_cast<int64_t>(fresh.capacity());
    return fresh;
  }
  // Takes `t`'s buffer back when nothing else shares it.
  void release(Tensor t) {
    if (!t.empty_storage() && t.sole_owner()) free_.push_back(std::move(t));
  }
  int64_t allocated_bytes() const { return allocated_bytes_; }

 private:
  std::vector<Tensor> free_;
  int64_t allocated_bytes_ = 0;
};

}  // namespace

struct Executable::Impl {
  ir::Graph graph;
  Plan plan;
  ExecutorOptions opts;
  CompileStats stats;
  std::vector<PreparedKernel> kernels;   // one per FusedKernel step, in plan order
  std::vector<int32_t> kernel_of_step;   // index into kernels, -1 for other steps
  std::vector<std::vector<ValueRef>> dead_after;  // per step: values no later step reads
  std::vector<bool> onednn_node;         // per graph node: runs through oneDNN
  // constant_params: per graph node, whether it is a constant param or computed from those
  // alone; per step, whether it only reads such values.
  std::vector<bool> constant_node;
  std::vector<bool> constant_step;
  std::vector<int32_t> constant_vars;    // the constant param variables, in node order

  // What runs keep between them (constant_params): the constant steps' outputs, the buffers
  // they were computed from, and convolution weights reordered by oneDNN.
  struct ConstantCache {
    std::vector<Tensor> bound;              // per constant_vars entry; empty: nothing cached
    std::map<ValueRef, Tensor> values;
    std::map<int32_t, runtime::OnednnWeightCache> weights;  // by node
  };
  mutable ConstantCache constants;

  runtime::ThreadPool& pool() const { return opts.pool ? *opts.pool : runtime::ThreadPool::global(); }

  void run_fused(const PreparedKernel& pk, std::map<ValueRef, Tensor>& values, BufferPool& buffers,
                 RunStats& rs) const;
  void run_external(int32_t n, std::map<ValueRef, Tensor>& values, BufferPool& buffers) const;
  bool constants_still_bound(const std::map<ValueRef, Tensor>& values) const;
};

Executable::Executable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;
Executable::~Executable() = default;

const ir::Graph& Executable::graph() const { return impl_->graph; }
const Plan& Executable::plan() const { return impl_->plan; }
const CompileStats& Executable::compile_stats() const { return impl_->stats; }

std::vector<const codegen::KernelSpec*> Executable::kernel_specs() const {
  std::vector<const codegen::KernelSpec*> specs;
  for (const PreparedKernel& pk : impl_->kernels)
    if (pk.compiled) specs.push_back(&pk.lowered.spec);
  return specs;
}

Executable Executable::compile(ir::Graph g, const ExecutorOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  ir::verify(g);
  dce(g);  // nodes no output depends on never run
  auto impl = std::make_unique<Impl>();
  CompileStats& st = impl->stats;
  if (opts.fold_batchnorm) st.folded_batchnorms = fold_batchnorm(g);
  if (opts.use_onednn)
    st.widened_external = compute_in_f32(g, [](const ir::Graph& gr, int32_t n) {
      std::vector<ir::TensorType> types;
      for (ValueRef in : gr.nodes[n].inputs) types.push_back(gr.type(in));
      return runtime::onednn_computes_in_f32(gr.nodes[n], types);
    });
  impl->graph = std::move(g);
  impl->opts = opts;
  const ir::Graph& graph = impl->graph;
  impl->plan = plan_fusion(graph, PlannerOptions{.fuse = opts.fuse});
  if (dump_enabled("plan")) std::fprintf(stderr, "=== plan\n%s", print_plan(graph, impl->plan).c_str());

  runtime::KernelCache& cache = opts.cache ? *opts.cache : runtime::KernelCache::global();
  impl->onednn_node.assign(graph.nodes.size(), false);
  impl->kernels.reserve(impl->plan.steps.size());
  const bool show_progress = opts.progress && isatty(STDERR_FILENO);
  const auto total_kernels = std::count_if(impl->plan.steps.begin(), impl->plan.steps.end(),
                                           [](const PlanStep& s) { return std::holds_alternative<FusedKernel>(s); });
  for (const PlanStep& step : impl->plan.steps) {
    impl->kernel_of_step.push_back(-1);
    if (const auto* k = std::get_if<FusedKernel>(&step)) {
      impl->kernel_of_step.back() = static_cast<int32_t>(impl->kernels.size());
      PreparedKernel pk;
      pk.kernel = k;
      const std::string name = fmt::format("k{}_{}", st.kernels, graph.nodes[k->nodes.back()].op);
      ++st.kernels;
      st.fused_nodes += static_cast<int>(k->nodes.size());
      if (show_progress) std::fprintf(stderr, "\rcompiling kernels %d/%ld", st.kernels, static_cast<long>(total_kernels));
      pk.empty = ir::num_elements(k->iteration) == 0;
      if (!pk.empty) try {
        pk.lowered = lower_kernel(graph, *k, name, opts.check_nonfinite);
        const runtime::KernelCacheStats before = cache.stats();
        pk.compiled = cache.get(pk.lowered.spec);
        const runtime::KernelCacheStats after = cache.stats();
        st.compilations += static_cast<int>(after.compilations - before.compilations);
        st.cache_hits += static_cast<int>(after.hits - before.hits);
      } catch (const Error& e) {
        // The kernel's nodes still run, one by one on the interpreter; the report says so.
        st.fallbacks.push_back(fmt::format("kernel {}: {}", name, e.what()));
      }
      impl->kernels.push_back(std::move(pk));
    } else if (const auto* e = std::get_if<ExternalStep>(&step)) {
      ++st.external_ops;
      const ir::Node& node = graph.nodes[e->node];
      std::vector<ir::TensorType> types;
      for (ValueRef in : node.inputs) types.push_back(graph.type(in));
      if (opts.use_onednn && runtime::onednn_supports(node, types)) {
        impl->onednn_node[e->node] = true;
        const std::string impl_name =
            with_context(node_label(graph, e->node), [&] { return runtime::onednn_impl_name(node, types); });
        if (runtime::onednn_impl_is_slow(impl_name))
          st.slow_external.push_back(fmt::format("{} ({}): {}", node.name, node.op, impl_name));
      }
    } else {
      ++st.views;
    }
  }

  if (show_progress && total_kernels > 0) std::fprintf(stderr, "\r%40s\r", "");

  impl->dead_after = values_dead_after(graph, impl->plan);

  // Constant params and what is computed from them alone.
  impl->constant_node.assign(graph.nodes.size(), false);
  if (opts.constant_params) {
    impl->constant_node = ir::computed_from_params(graph);
    for (size_t i = 0; i < graph.nodes.size(); ++i)
      if (graph.nodes[i].is_var() && impl->constant_node[i]) impl->constant_vars.push_back(static_cast<int32_t>(i));
  }
  for (const PlanStep& step : impl->plan.steps) {
    const std::vector<ValueRef> reads = step_reads(graph, step);
    const bool constant = opts.constant_params && !reads.empty() &&
                          std::all_of(reads.begin(), reads.end(), [&](ValueRef v) { return impl->constant_node[v.node]; });
    impl->constant_step.push_back(constant);
    st.constant_steps += constant;
  }

  st.compile_seconds = seconds_since(t0);
  return Executable(std::move(impl));
}

void Executable::Impl::run_fused(const PreparedKernel& pk, std::map<ValueRef, Tensor>& values, BufferPool& buffers,
                                 RunStats& rs) const {
  const FusedKernel& k = *pk.kernel;
  if (pk.empty) {
    for (const KernelOperand& op : k.outputs) values[op.value] = buffers.acquire(graph.type(op.value));
    return;
  }
  if (!pk.compiled) {
    // No code for this kernel (see CompileStats::fallbacks): its nodes one by one.
    for (int32_t n : k.nodes) {
      std::vector<Tensor> inputs;
      for (ValueRef in : graph.nodes[n].inputs) inputs.push_back(values.at(in));
      std::vector<Tensor> outs = with_context(node_label(graph, n), [&] { return runtime::run_node(graph.nodes[n], inputs); });
      for (size_t o = 0; o < outs.size(); ++o) values[{n, static_cast<int32_t>(o)}] = std::move(outs[o]);
    }
    return;
  }
  const codegen::KernelSpec& spec = pk.lowered.spec;
  std::vector<void*> data;
  data.reserve(k.inputs.size() + k.outputs.size());
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const Tensor& t = values.at(k.inputs[i].value);
    const int64_t offset = pk.lowered.input_offsets[i] * static_cast<int64_t>(ir::dtype_size(t.dtype()));
    data.push_back(static_cast<std::byte*>(const_cast<void*>(t.raw())) + offset);
  }
  for (const KernelOperand& op : k.outputs) {
    Tensor out = buffers.acquire(graph.type(op.value));
    data.push_back(out.raw());
    values[op.value] = std::move(out);
  }
  std::vector<int32_t> flags(spec.flags.size(), 0);
  // Shapes vary between compiles of one cached kernel; this spec has this plan's sizes.
  runtime::run_kernel(*pk.compiled, spec, data, {}, flags, pool());
  for (int32_t f : flags) rs.nonfinite = rs.nonfinite || f != 0;
}

void Executable::Impl::run_external(int32_t n, std::map<ValueRef, Tensor>& values, BufferPool& buffers) const {
  const ir::Node& node = graph.nodes[n];
  std::vector<Tensor> inputs;
  for (ValueRef in : node.inputs) inputs.push_back(values.at(in));
  with_context(node_label(graph, n), [&] {
    if (onednn_node[n]) {
      std::vector<Tensor> outs;
      for (const ir::TensorType& t : node.outputs) outs.push_back(buffers.acquire(t));
      // Constant weights are reordered once (ExecutorOptions::constant_params).
      runtime::OnednnWeightCache* weights =
          node.inputs.size() > 1 && constant_node[node.inputs[1].node] ? &constants.weights[n] : nullptr;
      runtime::onednn_run(node, inputs, outs, weights);
      for (size_t o = 0; o < outs.size(); ++o) values[{n, static_cast<int32_t>(o)}] = std::move(outs[o]);
    } else {
      std::vector<Tensor> outs = runtime::run_node(node, inputs);
      for (size_t o = 0; o < outs.size(); ++o) values[{n, static_cast<int32_t>(o)}] = std::move(outs[o]);
    }
  });
}

bool Executable::Impl::constants_still_bound(const std::map<ValueRef, Tensor>& values) const {
  if (constants.bound.size() != constant_vars.size()) return false;
  for (size_t i = 0; i < constant_vars.size(); ++i)
    if (values.at({constant_vars[i], 0}).raw() != constants.bound[i].raw()) return false;
  return true;
}

std::vector<Tensor> Executable::run(const runtime::Bindings& vars, RunStats* stats) const {
  const auto t0 = std::chrono::steady_clock::now();
  const Impl& im = *impl_;
  const ir::Graph& g = im.graph;
  std::map<ValueRef, Tensor> values;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_var()) continue;
    values[{i, 0}] = runtime::bound_variable(n, vars);
  }

  RunStats rs;
  BufferPool buffers;
  // Constant steps run on the first run and whenever a param is bound to another buffer;
  // their outputs stay in the cache (shared, so the pool never hands their buffers out).
  rs.reused_constants = !im.constant_vars.empty() && im.constants_still_bound(values);
  if (!rs.reused_constants) im.constants = {};
  for (size_t s = 0; s < im.plan.steps.size(); ++s) {
    const PlanStep& step = im.plan.steps[s];
    if (im.constant_step[s] && rs.reused_constants) {
      for (ValueRef v : step_writes(g, step)) values[v] = im.constants.values.at(v);
    } else if (std::holds_alternative<FusedKernel>(step)) {
      im.run_fused(im.kernels[im.kernel_of_step[s]], values, buffers, rs);
    } else if (const auto* e = std::get_if<ExternalStep>(&step)) {
      im.run_external(e->node, values, buffers);
    } else {
      const int32_t n = std::get<ViewStep>(step).node;
      const ir::Node& node = g.nodes[n];
      values[{n, 0}] = values.at(node.inputs.at(0)).reshaped(node.outputs[0].shape);
    }
    if (im.constant_step[s] && !rs.reused_constants)
      for (ValueRef v : step_writes(g, step)) im.constants.values[v] = values.at(v);
    for (ValueRef v : im.dead_after[s]) {
      auto it = values.find(v);
      if (it == values.end()) continue;
      Tensor t = std::move(it->second);
      values.erase(it);
      buffers.release(std::move(t));
    }
  }
  if (!rs.reused_constants)
    for (int32_t var : im.constant_vars) im.constants.bound.push_back(values.at({var, 0}));
  std::vector<Tensor> outputs;
  for (ValueRef v : g.outputs) outputs.push_back(values.at(v));
  rs.seconds = seconds_since(t0);
  rs.peak_bytes = buffers.allocated_bytes();
  if (stats) *stats = rs;
  return outputs;
}

}  // namespace ampfuse::engine
