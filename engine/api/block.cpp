#include "engine/api/block.h"

#include "engine/api/amp_scope.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>

namespace ampfuse::engine {

namespace {

using runtime::Tensor;

std::string block_label(const Block& b) { return fmt::format("block '{}'", b.name()); }

bool is_input_name(const std::string& s) {
  if (!s.starts_with("data")) return false;
  return std::all_of(s.begin() + 4, s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// What decides a trace: per tensor its dtype, rank and contiguity. runtime::Tensor is
// always dense row-major, so contiguity is "c" for now; strided tensors will key apart.
std::string signature_of(const Tensor& t) { return fmt::format("{}:r{}:c", ir::dtype_name(t.dtype()), t.shape().size()); }

}  // namespace

std::string block_input_name(size_t i) { return i == 0 ? "data" : fmt::format("data{}", i); }

// ---- Parameter

void Parameter::set_data(Tensor t) {
  data_ = std::move(t);
  ++version_;
}

// ---- F

int32_t F::check(Sym s, const std::string& what) const {
  if (!s.valid()) fail("{}: {} is an empty Sym", block_label(block_), what);
  if (s.owner_ != this) fail("{}: {} comes from another forward call", block_label(block_), what);
  return s.id_;
}

Sym F::input(const std::string& name, const Tensor& t) {
  if (tracing_) {
    ir::Node n;
    n.op = ir::kVarOp;
    n.name = name;
    n.role = ir::VarRole::input;
    n.outputs = {t.type()};
    values_.push_back({graph_.add(std::move(n)), 0});
    return Sym(this, static_cast<int32_t>(values_.size() - 1));
  }
  eager_.push_back(t);
  return Sym(this, static_cast<int32_t>(eager_.size() - 1));
}

Sym F::param(const std::string& name) {
  if (auto it = params_.find(name); it != params_.end()) return it->second;
  const Parameter& p = block_.param(name);
  if (p.data().empty_storage() && ir::num_elements(p.data().shape()) > 0)
    fail("{}: parameter '{}' has no data", block_label(block_), name);
  Sym s;
  if (tracing_) {
    ir::Node n;
    n.op = ir::kVarOp;
    n.name = name;
    n.role = ir::VarRole::param;
    n.outputs = {p.data().type()};
    values_.push_back({graph_.add(std::move(n)), 0});
    s = Sym(this, static_cast<int32_t>(values_.size() - 1));
  } else {
    eager_.push_back(p.data());
    s = Sym(this, static_cast<int32_t>(eager_.size() - 1));
  }
  params_.emplace(name, s);
  return s;
}

std::vector<Sym> F::op_multi(const std::string& op, const std::vector<Sym>& inputs,
                             const std::map<std::string, std::string>& attrs, const std::string& name) {
  const std::string blk = block_label(block_);
  const ir::OpDef& def = with_context(blk, [&]() -> const ir::OpDef& { return ir::OpRegistry::global().resolve(op); });
  ir::Node n;
  n.op = def.name;  // canonical: an alias (`cast`) ends here
  n.name = name.empty() ? fmt::format("{}_{}{}", block_.name(), op, name_counts_[op]++) : name;
  const std::string label = fmt::format("{}: node '{}' ({})", blk, n.name, op);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < inputs.size(); ++i) ids.push_back(check(inputs[i], fmt::format("node '{}' ({}) input {}", n.name, op, i)));
  std::map<std::string, std::string> raw;
  for (const auto& [k, v] : attrs) (k.starts_with("__") ? n.hints[k] : raw[k]) = v;
  if (amp_off_depth_ > 0) n.hints["__amp_disable__"] = "1";
  n.attrs = with_context(label, [&] { return ir::parse_attrs(def, raw); });
  const int expected = def.input_count(n.attrs);
  if (static_cast<int>(inputs.size()) != expected) fail("{}: {} inputs given, {} expected", label, inputs.size(), expected);
  const int outs = def.output_count(n.attrs);

  std::vector<Sym> result;
  if (tracing_) {
    for (int32_t id : ids) n.inputs.push_back(values_[id]);
    const int32_t node = graph_.add(std::move(n));
    for (int k = 0; k < outs; ++k) {
      values_.push_back({node, k});
      result.push_back(Sym(this, static_cast<int32_t>(values_.size() - 1)));
    }
    return result;
  }
  // Eager: a graph of this one node, typed and run on the interpreter.
  ir::Graph g;
  std::vector<Tensor> args;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Tensor& t = eager_[ids[i]];
    ir::Node v;
    v.op = ir::kVarOp;
    v.name = fmt::format("in{}", i);
    v.outputs = {t.type()};
    n.inputs.push_back({g.add(std::move(v)), 0});
    args.push_back(t);
  }
  g.add(std::move(n));
  with_context(blk, [&] { ir::infer_types(g); });
  std::vector<Tensor> values = with_context(label, [&] { return runtime::run_node(g.nodes.back(), args); });
  for (Tensor& t : values) {
    eager_.push_back(std::move(t));
    result.push_back(Sym(this, static_cast<int32_t>(eager_.size() - 1)));
  }
  return result;
}

Sym F::op(const std::string& op, const std::vector<Sym>& inputs, const std::map<std::string, std::string>& attrs,
          const std::string& name) {
  return op_multi(op, inputs, attrs, name).at(0);
}

Sym F::fully_connected(Sym x, Sym weight, Sym bias, int64_t num_hidden, const std::string& name) {
  return op("FullyConnected", {x, weight, bias}, {{"num_hidden", std::to_string(num_hidden)}}, name);
}

Sym F::activation(Sym x, const std::string& act_type, const std::string& name) {
  return op("Activation", {x}, {{"act_type", act_type}}, name);
}

Sym F::mul_scalar(Sym x, double s) { return op("_mul_scalar", {x}, {{"scalar", fmt::format("{}", s)}}); }

Sym F::slice_axis(Sym x, int64_t axis, int64_t begin, int64_t end) {
  return op("slice_axis", {x}, {{"axis", std::to_string(axis)}, {"begin", std::to_string(begin)}, {"end", std::to_string(end)}});
}

Sym F::concat(const std::vector<Sym>& xs, int64_t dim) {
  return op("Concat", xs, {{"num_args", std::to_string(xs.size())}, {"dim", std::to_string(dim)}});
}

Sym F::reshape(Sym x, const ir::Shape& shape) {
  return op("Reshape", {x}, {{"shape", fmt::format("({})", fmt::join(shape, ","))}});
}

// ---- Block

Block::Block(std::string name) : name_(std::move(name)) {
  if (name_.empty()) fail("Block: the name is empty");
}

Block::~Block() = default;

Parameter& Block::add_param(const std::string& name, Tensor init) {
  if (name.empty()) fail("{}: add_param: the name is empty", block_label(*this));
  if (is_input_name(name)) fail("{}: add_param: '{}' is the name of an input; choose another", block_label(*this), name);
  if (params_.count(name)) fail("{}: add_param: parameter '{}' exists already", block_label(*this), name);
  Parameter& p = params_[name];
  p.name_ = name;
  p.data_ = std::move(init);
  return p;
}

Parameter& Block::param(const std::string& name) {
  auto it = params_.find(name);
  if (it == params_.end()) {
    std::vector<std::string> names = param_names();
    fail("{}: no parameter '{}' (it has: {})", block_label(*this), name, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
  }
  return it->second;
}

const Parameter& Block::param(const std::string& name) const { return const_cast<Block*>(this)->param(name); }

std::vector<std::string> Block::param_names() const {
  std::vector<std::string> names;
  for (const auto& [n, p] : params_) names.push_back(n);
  return names;
}

void Block::hybridize(HybridizeOptions opts) {
  if (opts.max_plans_per_trace == 0) fail("{}: hybridize: max_plans_per_trace must be >= 1", block_label(*this));
  hybridized_ = true;
  hopts_ = opts;
  traces_.clear();
  last_ = nullptr;
}

const std::optional<AmpStats>& Block::last_amp_stats() const {
  static const std::optional<AmpStats> none;
  return last_ ? last_->amp : none;
}

std::optional<Tensor> Block::cached_cast(const std::string& param, ir::DType dtype) const {
  auto it = casts_.find({param, dtype});
  if (it == casts_.end()) return std::nullopt;
  return it->second.data;
}

std::vector<Tensor> Block::operator()(const std::vector<Tensor>& inputs, RunStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].empty_storage() && ir::num_elements(inputs[i].shape()) > 0)
      fail("{}: input {} ({}) has no storage", block_label(*this), i, block_input_name(i));
  std::vector<Tensor> out = hybridized_ ? call_hybrid(inputs, stats) : call_eager(inputs);
  stats_.last_call_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::vector<Tensor> Block::call_eager(const std::vector<Tensor>& inputs) {
  F f(*this, false);
  std::vector<Sym> syms;
  for (size_t i = 0; i < inputs.size(); ++i) syms.push_back(f.input(block_input_name(i), inputs[i]));
  const std::vector<Sym> outs = forward(f, syms);
  std::vector<Tensor> result;
  for (size_t i = 0; i < outs.size(); ++i) result.push_back(f.eager_[f.check(outs[i], fmt::format("output {}", i))]);
  ++stats_.eager_calls;
  return result;
}

Block::Trace Block::trace(const std::vector<Tensor>& inputs, std::optional<AmpOptions> amp) {
  F f(*this, true);
  std::vector<Sym> syms;
  for (size_t i = 0; i < inputs.size(); ++i) syms.push_back(f.input(block_input_name(i), inputs[i]));
  const std::vector<Sym> outs = forward(f, syms);
  if (outs.empty()) fail("{}: forward returned no outputs", block_label(*this));
  Trace t;
  t.graph = std::move(f.graph_);
  for (size_t i = 0; i < outs.size(); ++i) t.graph.outputs.push_back(f.values_[f.check(outs[i], fmt::format("output {}", i))]);
  t.amp = std::move(amp);
  ++stats_.traces;
  return t;
}

Block::Plan& Block::plan(Trace& t, const std::vector<Tensor>& inputs) {
  // Exact types of everything the graph reads: a new size is a new plan (cache hits only).
  std::string key;
  std::map<std::string, ir::TensorType> var_types;
  for (size_t i = 0; i < inputs.size(); ++i) var_types[block_input_name(i)] = inputs[i].type();
  for (const ir::Node& n : t.graph.nodes)
    if (n.is_var() && n.role == ir::VarRole::param) var_types[n.name] = param(n.name).data().type();
  for (const auto& [name, type] : var_types) key += fmt::format("{}={};", name, ir::type_str(type));
  if (auto it = t.plans.find(key); it != t.plans.end()) return *it->second;

  ir::Graph g = t.graph;
  for (ir::Node& n : g.nodes)
    if (n.is_var()) n.outputs = {var_types.at(n.name)};
  with_context(block_label(*this), [&] { ir::infer_types(g); });
  ExecutorOptions exec = hopts_.exec;
  exec.amp = t.amp;
  Executable exe = with_context(block_label(*this), [&] { return Executable::compile(std::move(g), exec); });
  std::optional<AmpStats> amp_stats = exe.compile_stats().amp;
  auto p = std::make_unique<Plan>(Plan{std::move(exe), std::move(amp_stats)});
  ++stats_.plans;
  stats_.compilations += p->exe.compile_stats().compilations;
  stats_.kernel_cache_hits += p->exe.compile_stats().cache_hits;
  if (t.plans.size() >= hopts_.max_plans_per_trace) {
    if (last_ == t.plans.at(t.plan_order.front()).get()) last_ = nullptr;
    t.plans.erase(t.plan_order.front());
    t.plan_order.erase(t.plan_order.begin());
  }
  t.plan_order.push_back(key);
  return *t.plans.emplace(key, std::move(p)).first->second;
}

const Tensor& Block::lowp_param(const Parameter& p, ir::DType dtype) {
  CastEntry& e = casts_[{p.name(), dtype}];
  if (!e.data.empty_storage() && e.version == p.version() && e.data.shape() == p.data().shape()) {
    ++stats_.weight_cast_hits;
    return e.data;
  }
  e.data = runtime::cast(p.data(), dtype);
  e.version = p.version();
  ++stats_.weight_casts;
  return e.data;
}

std::vector<Tensor> Block::call_hybrid(const std::vector<Tensor>& inputs, RunStats* stats) {
  std::optional<AmpOptions> amp = with_context(block_label(*this), [] { return amp::effective_options(); });
  if (amp) amp->cast_params_offline = hopts_.cast_params_offline;
  std::string key;
  for (const Tensor& t : inputs) key += signature_of(t) + ";";
  key += "|";
  for (const auto& [name, p] : params_) key += fmt::format("{}={};", name, signature_of(p.data()));
  key += "|" + amp::fingerprint(amp);
  auto it = traces_.find(key);
  if (it == traces_.end()) it = traces_.emplace(key, trace(inputs, std::move(amp))).first;
  const Plan& p = plan(it->second, inputs);
  last_ = &p;

  runtime::Bindings vars;
  for (const ir::Node& n : p.exe.graph().nodes) {
    if (!n.is_var()) continue;
    if (n.role != ir::VarRole::param) {
      // Inputs: data, data1, ... in order.
      const size_t i = n.name == "data" ? 0 : std::stoul(n.name.substr(4));
      vars[n.name] = inputs.at(i);
      continue;
    }
    const Parameter& prm = param(n.name);
    const ir::TensorType& want = n.outputs.at(0);
    if (prm.data().type() == want)
      vars[n.name] = prm.data();
    else if (ir::is_lowp(want.dtype) && want.shape == prm.data().shape())
      vars[n.name] = lowp_param(prm, want.dtype);
    else
      fail("{}: parameter '{}' is {} but the plan reads {}", block_label(*this), n.name, ir::type_str(prm.data().type()),
           ir::type_str(want));
  }
  ++stats_.hybrid_calls;
  return with_context(block_label(*this), [&] { return p.exe.run(vars, stats); });
}

}  // namespace ampfuse::engine
