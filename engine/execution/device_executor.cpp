// The device executor (engine/execution/device_executor.h).
#include "engine/execution/device_executor.h"

#include "engine/planning/kernel_lowering.h"
#include "engine/passes/dce.h"
#include "ir/dump.h"
#include "ir/error.h"
#include "ir/verifier.h"
#include "runtime/onednn/onednn_ops.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

namespace ampfuse::engine {

namespace {

using ir::ValueRef;
using runtime::DevicePtr;
using runtime::Tensor;

size_t bytes_of(const ir::TensorType& t) { return static_cast<size_t>(ir::num_elements(t.shape)) * ir::dtype_size(t.dtype); }

std::string node_label(const ir::Graph& g, int32_t n) { return fmt::format("node '{}' ({})", g.nodes[n].name, g.nodes[n].op); }

// One device allocation. Values (a tensor and its views) share it through shared_ptr; the
// pool holds every block too, so a block only the pool holds is free.
struct DeviceBlock {
  DevicePtr ptr = 0;  // 0 for the block of an empty value: nothing reads or writes it
  size_t capacity = 0;
};

class DevicePool {
 public:
  explicit DevicePool(runtime::DeviceApi& device) : device_(device) {}
  ~DevicePool() {
    for (const auto& b : blocks_) device_.free(b->ptr);
  }
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // The smallest free block of at least `bytes`, else a new one. Empty values get a block
  // of their own with no memory (devices may refuse 0-byte allocations).
  std::shared_ptr<DeviceBlock> acquire(size_t bytes) {
    if (bytes == 0) return std::make_shared<DeviceBlock>();
    std::shared_ptr<DeviceBlock>* best = nullptr;
    for (auto& b : blocks_)
      if (b.use_count() == 1 && b->capacity >= bytes && (!best || b->capacity < (*best)->capacity)) best = &b;
    if (best) return *best;
    blocks_.push_back(std::make_shared<DeviceBlock>(DeviceBlock{device_.alloc(bytes), bytes}));
    bytes_ += static_cast<int64_t>(bytes);
    return blocks_.back();
  }
  int64_t bytes() const { return bytes_; }

 private:
  runtime::DeviceApi& device_;
  std::vector<std::shared_ptr<DeviceBlock>> blocks_;
  int64_t bytes_ = 0;
};

// A value during a run: a host copy, a device copy, or both (values never change once
// computed, so either copy stays valid).
struct Value {
  std::optional<Tensor> host;
  std::shared_ptr<DeviceBlock> device;
};
using Values = std::map<ValueRef, Value>;

}  // namespace

struct DeviceExecutable::Impl {
  ir::Graph graph;
  Plan plan;
  DeviceExecutorOptions opts;
  DeviceCompileStats stats;
  std::unique_ptr<runtime::DeviceApi> owned_device;  // the CUDA device when opts.device is null
  runtime::DeviceApi* device = nullptr;

  struct Kernel {
    const FusedKernel* kernel = nullptr;
    bool empty = false;  // no elements: outputs get empty blocks, nothing launches
    LoweredKernel lowered;
    std::shared_ptr<const runtime::DeviceKernel> code;  // null: runs on the host, node by node
    size_t flag_offset = 0;                             // its flags' index in the flag array
  };
  std::vector<Kernel> kernels;          // one per FusedKernel step, in plan order
  std::vector<int32_t> kernel_of_step;  // index into kernels, -1 for other steps
  std::vector<std::vector<ValueRef>> dead_after;
  std::vector<bool> onednn_node;        // per graph node
  size_t flag_count = 0;                // int32 flags of every device kernel
  // Declared after the device so that it is destroyed first (it frees into the device).
  mutable std::unique_ptr<DevicePool> pool;

  const Tensor& host_copy(Values& values, ValueRef v, DeviceRunStats& rs) const;
  DevicePtr device_copy(Values& values, ValueRef v, DeviceRunStats& rs) const;
  void launch(const Kernel& k, Values& values, DevicePtr flags, DeviceRunStats& rs) const;
  void run_on_host(const Kernel& k, Values& values, DeviceRunStats& rs) const;
  void run_external(int32_t n, Values& values, DeviceRunStats& rs) const;
};

DeviceExecutable::DeviceExecutable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceExecutable::DeviceExecutable(DeviceExecutable&&) noexcept = default;
DeviceExecutable& DeviceExecutable::operator=(DeviceExecutable&&) noexcept = default;
DeviceExecutable::~DeviceExecutable() = default;

const ir::Graph& DeviceExecutable::graph() const { return impl_->graph; }
const Plan& DeviceExecutable::plan() const { return impl_->plan; }
const DeviceCompileStats& DeviceExecutable::compile_stats() const { return impl_->stats; }

std::vector<const codegen::KernelSpec*> DeviceExecutable::kernel_specs() const {
  std::vector<const codegen::KernelSpec*> specs;
  for (const Impl::Kernel& k : impl_->kernels)
    if (k.code) specs.push_back(&k.lowered.spec);
  return specs;
}

DeviceExecutable DeviceExecutable::compile(ir::Graph g, const DeviceExecutorOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  ir::verify(g);
  dce(g);
  auto impl = std::make_unique<Impl>();
  if (opts.device) {
    impl->device = opts.device;
  } else {
    impl->owned_device = runtime::cuda_device_api();
    impl->device = impl->owned_device.get();
  }
  runtime::DeviceApi& device = *impl->device;
  DeviceCompileStats& st = impl->stats;
  st.device = device.name();
  // Unlike the CPU executor, no compute_in_f32: its casts would fuse into device kernels
  // that then download f32 copies (of weights too) for the host's oneDNN, twice the bytes
  // of what oneDNN widens on the host by itself.
  impl->graph = std::move(g);
  impl->opts = opts;
  const ir::Graph& graph = impl->graph;
  impl->plan = plan_fusion(graph, PlannerOptions{.fuse = opts.fuse});
  if (dump_enabled("plan")) std::fprintf(stderr, "=== plan\n%s", print_plan(graph, impl->plan).c_str());

  impl->onednn_node.assign(graph.nodes.size(), false);
  impl->kernels.reserve(impl->plan.steps.size());  // so that `lowered` stays valid
  std::vector<Impl::Kernel*> lowered;
  for (const PlanStep& step : impl->plan.steps) {
    impl->kernel_of_step.push_back(-1);
    if (const auto* k = std::get_if<FusedKernel>(&step)) {
      impl->kernel_of_step.back() = static_cast<int32_t>(impl->kernels.size());
      Impl::Kernel dk;
      dk.kernel = k;
      dk.empty = ir::num_elements(k->iteration) == 0;
      const std::string name = fmt::format("k{}_{}", st.kernels, graph.nodes[k->nodes.back()].op);
      ++st.kernels;
      st.fused_nodes += static_cast<int>(k->nodes.size());
      bool lowered_now = false;
      if (!dk.empty) try {
          dk.lowered = lower_kernel(graph, *k, name, opts.check_nonfinite);
          lowered_now = true;
        } catch (const Error& e) {
          // Its nodes run one by one on the host's interpreter; the report says so.
          st.fallbacks.push_back(fmt::format("kernel {}: {}", name, e.what()));
        }
      impl->kernels.push_back(std::move(dk));
      if (lowered_now) lowered.push_back(&impl->kernels.back());
    } else if (const auto* e = std::get_if<ExternalStep>(&step)) {
      ++st.external_ops;
      const ir::Node& node = graph.nodes[e->node];
      std::vector<ir::TensorType> types;
      for (ValueRef in : node.inputs) types.push_back(graph.type(in));
      impl->onednn_node[e->node] = opts.use_onednn && runtime::onednn_supports(node, types);
      st.onednn_ops += impl->onednn_node[e->node];
    } else {
      ++st.views;
    }
  }

  // Device code for every lowered kernel: one batch, or one by one when the batch fails
  // (which names the kernel that cannot be compiled; it runs on the host).
  std::vector<const codegen::KernelSpec*> specs;
  for (const Impl::Kernel* k : lowered) specs.push_back(&k->lowered.spec);
  bool batch_compiled = false;
  try {
    st.compilations = device.precompile(specs);
    batch_compiled = true;
  } catch (const Error&) {
  }
  for (size_t i = 0; i < lowered.size(); ++i) try {
      Impl::Kernel& k = *lowered[i];
      if (!batch_compiled) st.compilations += device.precompile(std::span(&specs[i], 1));
      k.code = device.prepare(k.lowered.spec);
      k.flag_offset = impl->flag_count;
      impl->flag_count += k.lowered.spec.flags.size();
      ++st.device_kernels;
    } catch (const Error& e) {
      st.fallbacks.push_back(fmt::format("kernel {}: {}", specs[i]->name, e.what()));
    }

  impl->dead_after = values_dead_after(graph, impl->plan);

  // Host steps that read what the device computed (a view of a device value is one too).
  std::map<ValueRef, bool> on_device;
  for (size_t s = 0; s < impl->plan.steps.size(); ++s) {
    const PlanStep& step = impl->plan.steps[s];
    const int32_t ki = impl->kernel_of_step[s];
    const bool device_step = ki >= 0 && (impl->kernels[ki].code || impl->kernels[ki].empty);
    if (const auto* v = std::get_if<ViewStep>(&step)) {
      on_device[{v->node, 0}] = on_device[graph.nodes[v->node].inputs.at(0)];
      continue;
    }
    if (!device_step) {
      bool reads_device = false;
      for (ValueRef r : step_reads(graph, step)) reads_device = reads_device || on_device[r];
      st.host_round_trips += reads_device;
    }
    for (ValueRef w : step_writes(graph, step)) on_device[w] = device_step;
  }

  impl->pool = std::make_unique<DevicePool>(device);
  st.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return DeviceExecutable(std::move(impl));
}

const Tensor& DeviceExecutable::Impl::host_copy(Values& values, ValueRef v, DeviceRunStats& rs) const {
  Value& val = values.at(v);
  if (!val.host) {
    Tensor t(graph.type(v));
    if (t.bytes() > 0) {
      device->download(t.raw(), val.device->ptr, t.bytes());
      ++rs.downloads;
      rs.download_bytes += static_cast<int64_t>(t.bytes());
    }
    val.host = std::move(t);
  }
  return *val.host;
}

DevicePtr DeviceExecutable::Impl::device_copy(Values& values, ValueRef v, DeviceRunStats& rs) const {
  Value& val = values.at(v);
  if (!val.device) {
    const size_t bytes = val.host->bytes();
    val.device = pool->acquire(bytes);
    if (bytes > 0) {
      device->upload(val.device->ptr, val.host->raw(), bytes);
      ++rs.uploads;
      rs.upload_bytes += static_cast<int64_t>(bytes);
    }
  }
  return val.device->ptr;
}

void DeviceExecutable::Impl::launch(const Kernel& k, Values& values, DevicePtr flags, DeviceRunStats& rs) const {
  const FusedKernel& fk = *k.kernel;
  std::vector<DevicePtr> data;
  for (size_t i = 0; i < fk.inputs.size(); ++i) {
    const ValueRef v = fk.inputs[i].value;
    const DevicePtr base = device_copy(values, v, rs);
    // Slices start inside their input's buffer.
    data.push_back(base + static_cast<DevicePtr>(k.lowered.input_offsets[i]) * ir::dtype_size(graph.type(v).dtype));
  }
  for (const KernelOperand& op : fk.outputs) {
    std::shared_ptr<DeviceBlock> out = pool->acquire(bytes_of(graph.type(op.value)));
    data.push_back(out->ptr);
    values[op.value] = Value{std::nullopt, std::move(out)};
  }
  const DevicePtr kernel_flags = k.lowered.spec.flags.empty() ? 0 : flags + k.flag_offset * sizeof(int32_t);
  with_context(fmt::format("kernel '{}'", k.lowered.spec.name),
               [&] { device->launch(*k.code, k.lowered.spec, data, kernel_flags); });
}

void DeviceExecutable::Impl::run_on_host(const Kernel& k, Values& values, DeviceRunStats& rs) const {
  std::map<ValueRef, Tensor> inside;  // values computed by the kernel's own nodes
  for (int32_t n : k.kernel->nodes) {
    std::vector<Tensor> inputs;
    for (ValueRef in : graph.nodes[n].inputs) {
      const auto it = inside.find(in);
      inputs.push_back(it != inside.end() ? it->second : host_copy(values, in, rs));
    }
    std::vector<Tensor> outs = with_context(node_label(graph, n), [&] { return runtime::run_node(graph.nodes[n], inputs); });
    for (size_t o = 0; o < outs.size(); ++o) inside[{n, static_cast<int32_t>(o)}] = std::move(outs[o]);
  }
  for (const KernelOperand& op : k.kernel->outputs) values[op.value] = Value{inside.at(op.value), nullptr};
}

void DeviceExecutable::Impl::run_external(int32_t n, Values& values, DeviceRunStats& rs) const {
  const ir::Node& node = graph.nodes[n];
  std::vector<Tensor> inputs;
  for (ValueRef in : node.inputs) inputs.push_back(host_copy(values, in, rs));
  std::vector<Tensor> outs = with_context(node_label(graph, n), [&] {
    if (!onednn_node[n]) return runtime::run_node(node, inputs);
    std::vector<Tensor> allocated;
    for (const ir::TensorType& t : node.outputs) allocated.emplace_back(t);
    runtime::onednn_run(node, inputs, allocated);
    return allocated;
  });
  for (size_t o = 0; o < outs.size(); ++o) values[{n, static_cast<int32_t>(o)}] = Value{std::move(outs[o]), nullptr};
}

std::vector<Tensor> DeviceExecutable::run(const runtime::Bindings& vars, DeviceRunStats* stats) const {
  const auto t0 = std::chrono::steady_clock::now();
  const Impl& im = *impl_;
  const ir::Graph& g = im.graph;
  Values values;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_var()) continue;
    values[{i, 0}] = Value{runtime::bound_variable(n, vars), nullptr};  // uploaded when a kernel first reads it
  }

  DeviceRunStats rs;
  std::shared_ptr<DeviceBlock> flags;
  const size_t flag_bytes = im.flag_count * sizeof(int32_t);
  if (flag_bytes > 0) {
    flags = im.pool->acquire(flag_bytes);
    const std::vector<int32_t> zeros(im.flag_count, 0);
    im.device->upload(flags->ptr, zeros.data(), flag_bytes);
  }
  for (size_t s = 0; s < im.plan.steps.size(); ++s) {
    const PlanStep& step = im.plan.steps[s];
    if (std::holds_alternative<FusedKernel>(step)) {
      const Impl::Kernel& k = im.kernels[im.kernel_of_step[s]];
      if (k.empty) {
        for (const KernelOperand& op : k.kernel->outputs) values[op.value] = Value{std::nullopt, im.pool->acquire(0)};
      } else if (k.code) {
        im.launch(k, values, flags ? flags->ptr : 0, rs);
      } else {
        im.run_on_host(k, values, rs);
      }
    } else if (const auto* e = std::get_if<ExternalStep>(&step)) {
      im.run_external(e->node, values, rs);
    } else {
      // A view: the same buffers (whichever copies exist) under the new shape.
      const int32_t n = std::get<ViewStep>(step).node;
      const Value& in = values.at(g.nodes[n].inputs.at(0));
      Value out{std::nullopt, in.device};
      if (in.host) out.host = in.host->reshaped(g.nodes[n].outputs[0].shape);
      values[{n, 0}] = std::move(out);
    }
    for (ValueRef v : im.dead_after[s]) values.erase(v);  // frees its device block unless shared
  }

  std::vector<Tensor> outputs;
  for (ValueRef v : g.outputs) outputs.push_back(im.host_copy(values, v, rs));
  if (flags) {
    std::vector<int32_t> seen(im.flag_count, 0);
    im.device->download(seen.data(), flags->ptr, flag_bytes);
    for (int32_t f : seen) rs.nonfinite = rs.nonfinite || f != 0;
  }
  im.device->synchronize();
  rs.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rs.device_bytes = im.pool->bytes();
  if (stats) *stats = rs;
  return outputs;
}

}  // namespace ampfuse::engine
