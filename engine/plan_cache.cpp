#include "engine/plan_cache.h"

#include "codegen/llvm_target.h"
#include "ir/dump.h"
#include "ir/error.h"
#include "runtime/disk_cache.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace ampfuse::engine {

namespace {

// The payload's first bytes. A change to what is stored (or to the meaning of a stored
// field) bumps the number: entries of the old form then read as another key's (the key
// starts with the same line) and are replaced.
constexpr std::string_view kPlanFormat = "ampfuse plan 3\n";

// ---- writing ----------------------------------------------------------------------------------

class Writer {
 public:
  std::string out;

  template <class T>
    requires std::is_arithmetic_v<T>
  void num(T v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    out.append(bytes, sizeof(T));
  }
  void str(std::string_view s) {
    num<uint32_t>(static_cast<uint32_t>(s.size()));
    out.append(s);
  }
  template <class T>
  void nums(const std::vector<T>& v) {
    num<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const T& x : v) num<T>(x);
  }
  void strs(const std::vector<std::string>& v) {
    num<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const std::string& s : v) str(s);
  }
  void dtype(ir::DType d) { num<uint8_t>(static_cast<uint8_t>(d)); }
  void value(ir::ValueRef v) {
    num<int32_t>(v.node);
    num<int32_t>(v.index);
  }
  void map(const ir::AccessMap& m) {
    nums(m.iter_dim);
    nums(m.scale);
    nums(m.offset);
  }
  void operand(const KernelOperand& o) {
    value(o.value);
    nums(o.shape);
    map(o.map);
  }
  void attr(const ir::AttrValue& a) {
    num<uint8_t>(static_cast<uint8_t>(a.index()));
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::monostate>) {
          } else if constexpr (std::is_same_v<T, bool>) {
            num<uint8_t>(x ? 1 : 0);
          } else if constexpr (std::is_same_v<T, ir::DType>) {
            dtype(x);
          } else if constexpr (std::is_same_v<T, std::string>) {
            str(x);
          } else if constexpr (std::is_arithmetic_v<T>) {
            num<T>(x);
          } else {
            nums(x);
          }
        },
        a);
  }
  void graph(const ir::Graph& g) {
    num<uint32_t>(static_cast<uint32_t>(g.nodes.size()));
    for (const ir::Node& n : g.nodes) {
      str(n.op);
      str(n.name);
      num<uint32_t>(static_cast<uint32_t>(n.inputs.size()));
      for (ir::ValueRef v : n.inputs) value(v);
      num<uint32_t>(static_cast<uint32_t>(n.attrs.values().size()));
      for (const auto& [name, v] : n.attrs.values()) {
        str(name);
        attr(v);
      }
      num<uint32_t>(static_cast<uint32_t>(n.hints.size()));
      for (const auto& [k, v] : n.hints) {
        str(k);
        str(v);
      }
      num<uint32_t>(static_cast<uint32_t>(n.outputs.size()));
      for (const ir::TensorType& t : n.outputs) {
        dtype(t.dtype);
        nums(t.shape);
      }
      num<uint8_t>(static_cast<uint8_t>(n.role));
    }
    num<uint32_t>(static_cast<uint32_t>(g.outputs.size()));
    for (ir::ValueRef v : g.outputs) value(v);
  }
};

// ---- reading ----------------------------------------------------------------------------------

// What a payload that does not read back throws; caught in deserialize_lowered.
struct BadPlan {
  std::string why;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool done() const { return at_ == in_.size(); }

  template <class T>
    requires std::is_arithmetic_v<T>
  T num() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  // A count of items that take at least `min_bytes` each: never more than the bytes left,
  // so a damaged count cannot ask for a huge allocation.
  size_t count(size_t min_bytes) {
    const auto n = num<uint32_t>();
    if (static_cast<uint64_t>(n) * min_bytes > in_.size() - at_) bad("a count past the end of the entry");
    return n;
  }
  std::string str() {
    const size_t n = count(1);
    std::string s(in_.substr(at_, n));
    at_ += n;
    return s;
  }
  template <class T>
  std::vector<T> nums() {
    std::vector<T> v(count(sizeof(T)));
    for (T& x : v) x = num<T>();
    return v;
  }
  std::vector<std::string> strs() {
    std::vector<std::string> v(count(4));
    for (std::string& s : v) s = str();
    return v;
  }
  ir::DType dtype() {
    const auto d = num<uint8_t>();
    if (d > static_cast<uint8_t>(ir::DType::boolean)) bad(fmt::format("dtype number {}", d));
    return static_cast<ir::DType>(d);
  }
  ir::ValueRef value() {
    ir::ValueRef v;
    v.node = num<int32_t>();
    v.index = num<int32_t>();
    return v;
  }
  ir::AccessMap map() {
    ir::AccessMap m;
    m.iter_dim = nums<int32_t>();
    m.scale = nums<int64_t>();
    m.offset = nums<int64_t>();
    return m;
  }
  KernelOperand operand() {
    KernelOperand o;
    o.value = value();
    o.shape = nums<int64_t>();
    o.map = map();
    return o;
  }
  ir::AttrValue attr() {
    switch (num<uint8_t>()) {
      case 0: return std::monostate{};
      case 1: return num<uint8_t>() != 0;
      case 2: return num<int64_t>();
      case 3: return num<double>();
      case 4: return str();
      case 5: return nums<int64_t>();
      case 6: return nums<double>();
      case 7: return dtype();
      default: bad("an unknown attribute kind");
    }
  }
  ir::Graph graph() {
    ir::Graph g;
    g.nodes.resize(count(16));
    for (ir::Node& n : g.nodes) {
      n.op = str();
      n.name = str();
      n.inputs.resize(count(8));
      for (ir::ValueRef& v : n.inputs) v = value();
      for (size_t i = 0, e = count(5); i < e; ++i) {
        std::string name = str();
        n.attrs.set(name, attr());
      }
      for (size_t i = 0, e = count(8); i < e; ++i) {
        std::string k = str();
        n.hints[k] = str();
      }
      n.outputs.resize(count(5));
      for (ir::TensorType& t : n.outputs) {
        t.dtype = dtype();
        t.shape = nums<int64_t>();
      }
      const auto role = num<uint8_t>();
      if (role > static_cast<uint8_t>(ir::VarRole::aux)) bad(fmt::format("variable role number {}", role));
      n.role = static_cast<ir::VarRole>(role);
    }
    g.outputs.resize(count(8));
    for (ir::ValueRef& v : g.outputs) v = value();
    // Every reference names an earlier node's existing output (the graph is topological).
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (ir::ValueRef v : g.nodes[i].inputs) check_value(g, v, i);
    for (ir::ValueRef v : g.outputs) check_value(g, v, g.nodes.size());
    return g;
  }

  [[noreturn]] void bad(std::string why) const { throw BadPlan{fmt::format("{} (at byte {})", why, at_)}; }

  static void check_value(const ir::Graph& g, ir::ValueRef v, size_t before) {
    if (v.node < 0 || static_cast<size_t>(v.node) >= before || v.index < 0 ||
        static_cast<size_t>(v.index) >= g.nodes[v.node].outputs.size())
      throw BadPlan{fmt::format("value {}:{} does not exist", v.node, v.index)};
  }

 private:
  void need(size_t bytes) const {
    if (in_.size() - at_ < bytes) bad("truncated");
  }
  std::string_view in_;
  size_t at_ = 0;
};

enum class StepKind : uint8_t { kernel, external, view };

// ---- the key's words ----------------------------------------------------------------------------

std::string join(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, ",")); }

std::string options_text(const LowerOptions& o) {
  std::string s;
  if (o.amp) {
    const AmpOptions& a = *o.amp;
    s += fmt::format("amp: target {} lp16 [{}] fp32 [{}] widest [{}] neutral [{}] excluded [{}] offline {} narrow {} "
                     "layout '{}' conditional",
                     ir::dtype_name(a.target), join(a.lp16_ops), join(a.fp32_ops), join(a.widest_ops),
                     join(a.neutral_ops), join(a.excluded_nodes), a.cast_params_offline, a.cast_narrow, a.layout);
    for (const CondFp32Entry& c : a.conditional_fp32_ops) s += fmt::format(" {}.{}=[{}]", c.op, c.attr, join(c.values));
    s += "\n";
  }
  s += fmt::format("layout '{}'\n", o.layout);
  s += fmt::format("fold_batchnorm {}\n", o.fold_batchnorm);
  s += fmt::format("fuse_epilogues {} relu {}\n", static_cast<bool>(o.epilogues_run_fused), o.relu_post_ops);
  if (o.backward)
    s += fmt::format("backward: wrt [{}] with_inputs {} heads {} loss_scale '{}'\n", join(o.backward->wrt),
                     o.backward->with_inputs, o.backward->heads ? fmt::format("{}", *o.backward->heads) : "all",
                     o.backward->loss_scale);
  if (o.training)
    s += fmt::format("training: seed {} offset {} step_input '{}'\n", o.training->seed, o.training->offset,
                     o.training->step_input);
  s += fmt::format("planner: fuse {} recompute {} row_kernels {} caps {} {} {}\n", o.planner.fuse, o.planner.recompute,
                   o.planner.row_kernels,
                   o.planner.max_kernel_transcendental_cost, o.planner.max_kernel_instructions,
                   o.planner.max_kernel_inputs);
  s += fmt::format("computes_in_f32 {}\n", static_cast<bool>(o.computes_in_f32));
  return s;
}

// What oneDNN's choice of native bf16/f16 kernels (compute-in-f32) depends on beyond the
// build: the host CPU (whatever AMPFUSE_CPU says, oneDNN runs on what it finds) and the
// variables that cap oneDNN's ISA.
const std::string& host_text() {
  static const std::string text = [] {
    const codegen::HostCpu host = codegen::detect_host_cpu();
    std::string s = fmt::format("host {} {}", host.triple, host.name);
    for (const auto& [name, on] : host.features)
      if (on) s += " +" + name;
    for (const char* var : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
      if (const char* v = std::getenv(var)) s += fmt::format(" {}={}", var, v);
    return s;
  }();
  return text;
}

}  // namespace

std::string serialize_lowered(const Lowered& l) {
  Writer w;
  w.out += kPlanFormat;
  w.graph(l.graph);
  w.num<uint32_t>(static_cast<uint32_t>(l.plan.steps.size()));
  for (const PlanStep& step : l.plan.steps) {
    if (const auto* k = std::get_if<FusedKernel>(&step)) {
      w.num<uint8_t>(static_cast<uint8_t>(StepKind::kernel));
      w.nums(k->iteration);
      w.dtype(k->compute);
      w.nums(k->nodes);
      w.num<uint32_t>(static_cast<uint32_t>(k->node_maps.size()));
      for (const ir::AccessMap& m : k->node_maps) w.map(m);
      w.num<uint32_t>(static_cast<uint32_t>(k->inputs.size()));
      for (const KernelOperand& o : k->inputs) w.operand(o);
      w.num<uint32_t>(static_cast<uint32_t>(k->outputs.size()));
      for (const KernelOperand& o : k->outputs) w.operand(o);
      w.nums(k->recomputed);
    } else {
      w.num<uint8_t>(static_cast<uint8_t>(std::holds_alternative<ExternalStep>(step) ? StepKind::external : StepKind::view));
      w.num<int32_t>(step_node(step));
    }
  }
  const LowerStats& s = l.stats;
  w.num<uint8_t>(s.amp ? 1 : 0);
  if (s.amp) {
    const AmpStats& a = *s.amp;
    for (int v : {a.casts_inserted, a.casts_removed, a.casts_final, a.casts_shared, a.params_offline, a.lp16_nodes,
                  a.fp32_nodes})
      w.num<int32_t>(v);
    w.num<uint32_t>(static_cast<uint32_t>(a.class_counts.size()));
    for (const auto& [name, count] : a.class_counts) {
      w.str(name);
      w.num<int32_t>(count);
    }
  }
  w.num<int32_t>(s.folded_batchnorms);
  w.num<int32_t>(s.fused_epilogues);
  w.num<int32_t>(s.row_kernels);
  w.num<int32_t>(s.widened_external);
  w.num<uint64_t>(s.forward_outputs);
  w.strs(s.gradient_of);
  w.strs(s.head_grads);
  w.num<int32_t>(s.saved_values);
  w.num<int64_t>(s.saved_bytes);
  w.num<int32_t>(s.recomputed.values);
  w.num<int64_t>(s.recomputed.bytes_not_moved);
  return std::move(w.out);
}

std::optional<Lowered> deserialize_lowered(std::string_view bytes, std::string* error) {
  if (!bytes.starts_with(kPlanFormat)) {
    if (error) *error = "not a plan of this format";
    return std::nullopt;
  }
  Reader r(bytes.substr(kPlanFormat.size()));
  try {
    Lowered l;
    l.graph = r.graph();
    const size_t nodes = l.graph.nodes.size();
    const auto check_node = [&](int32_t n) {
      if (n < 0 || static_cast<size_t>(n) >= nodes) r.bad(fmt::format("node {} of {}", n, nodes));
      return n;
    };
    const auto check_operand = [&](const KernelOperand& o) { Reader::check_value(l.graph, o.value, nodes); };
    l.plan.steps.reserve(r.count(5));
    for (size_t i = 0, e = l.plan.steps.capacity(); i < e; ++i) {
      const auto kind = r.num<uint8_t>();
      if (kind == static_cast<uint8_t>(StepKind::kernel)) {
        FusedKernel k;
        k.iteration = r.nums<int64_t>();
        k.compute = r.dtype();
        k.nodes = r.nums<int32_t>();
        for (int32_t n : k.nodes) check_node(n);
        k.node_maps.resize(r.count(12));
        for (ir::AccessMap& m : k.node_maps) m = r.map();
        if (k.node_maps.size() != k.nodes.size()) r.bad("a kernel's node maps do not match its nodes");
        k.inputs.resize(r.count(8));
        for (KernelOperand& o : k.inputs) check_operand(o = r.operand());
        k.outputs.resize(r.count(8));
        for (KernelOperand& o : k.outputs) check_operand(o = r.operand());
        k.recomputed = r.nums<int32_t>();
        for (int32_t n : k.recomputed) check_node(n);
        l.plan.steps.emplace_back(std::move(k));
      } else if (kind == static_cast<uint8_t>(StepKind::external)) {
        l.plan.steps.emplace_back(ExternalStep{check_node(r.num<int32_t>())});
      } else if (kind == static_cast<uint8_t>(StepKind::view)) {
        l.plan.steps.emplace_back(ViewStep{check_node(r.num<int32_t>())});
      } else {
        r.bad(fmt::format("step kind {}", kind));
      }
    }
    LowerStats& s = l.stats;
    if (r.num<uint8_t>()) {
      AmpStats a;
      for (int* v : {&a.casts_inserted, &a.casts_removed, &a.casts_final, &a.casts_shared, &a.params_offline,
                     &a.lp16_nodes, &a.fp32_nodes})
        *v = r.num<int32_t>();
      for (size_t i = 0, e = r.count(8); i < e; ++i) {
        std::string name = r.str();
        a.class_counts[name] = r.num<int32_t>();
      }
      s.amp = std::move(a);
    }
    s.folded_batchnorms = r.num<int32_t>();
    s.fused_epilogues = r.num<int32_t>();
    s.row_kernels = r.num<int32_t>();
    s.widened_external = r.num<int32_t>();
    s.forward_outputs = r.num<uint64_t>();
    s.gradient_of = r.strs();
    s.head_grads = r.strs();
    s.saved_values = r.num<int32_t>();
    s.saved_bytes = r.num<int64_t>();
    s.recomputed.values = r.num<int32_t>();
    s.recomputed.bytes_not_moved = r.num<int64_t>();
    if (!r.done()) r.bad("bytes after the end of the plan");
    return l;
  } catch (const BadPlan& b) {
    if (error) *error = b.why;
    return std::nullopt;
  }
}

std::string plan_cache_key(const ir::Graph& g, const LowerOptions& opts, const std::string& context) {
  std::string target;
  try {
    target = codegen::jit_target().cache_tag;
  } catch (const Error& e) {  // a GPU's compile with an AMPFUSE_CPU this host cannot run
    target = e.what();
  }
  Writer w;
  w.out = fmt::format("{}build: {}\ntarget: {}\n{}\ncontext: {}\n{}graph:\n", kPlanFormat,
                      runtime::DiskCache::build_identity(), target, host_text(), context,
                      options_text(opts));
  w.graph(g);
  return std::move(w.out);
}

Lowered lower_with_plan_cache(ir::Graph g, const LowerOptions& opts, const std::string& context,
                              runtime::DiskCache* disk, bool* from_disk) {
  if (from_disk) *from_disk = false;
  // Dumps print what the passes and the planner do as they run: with AMPFUSE_DUMP=ir or
  // plan asked for, they run.
  if (!disk || dump_enabled("ir") || dump_enabled("plan")) return lower(std::move(g), opts);
  const std::string key = plan_cache_key(g, opts, context);
  if (std::optional<std::string> payload = disk->load(key)) {
    std::string error;
    if (std::optional<Lowered> l = deserialize_lowered(*payload, &error)) {
      if (from_disk) *from_disk = true;
      return std::move(*l);
    }
    disk->reject(key, "a plan that does not read back: " + error);
  }
  Lowered l = lower(std::move(g), opts);
  disk->store(key, serialize_lowered(l));
  return l;
}

}  // namespace ampfuse::engine
