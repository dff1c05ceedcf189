// Blocks in the spirit of Gluon's HybridBlock: parameters plus a forward written once,
// run op by op until hybridize(), then traced into a graph, converted for AMP when the
// effective AMP state says so (engine/api/amp_scope.h), planned, compiled and replayed.
//
//   call(inputs) ──not hybridized──> forward(F eager): each op runs on the interpreter
//        │
//        └─hybridized─> key = inputs' (dtype, rank, contiguity) + params' (dtype, rank)
//                             + amp::fingerprint(effective_options())
//                       traces[key] missing?  forward(F tracing) -> graph       (a trace)
//                       plans[shapes] missing? infer types, convert_for_amp,
//                                              Executable::compile              (a plan;
//                                              kernels come from the cache on a new size)
//                       bind inputs, params (lp16 ones from the weight-cast cache), run
//
// The weight-cast cache (MXNet #19019, where an unrolled recurrent net re-casts its weights
// at every step of every call): traced graphs are converted with cast_params_offline, so a
// param every consumer reads in low precision becomes an lp16 input of the executable, and
// the block casts it once per (param, version, dtype) and hands the same tensor to every
// later call, plan and step. Parameter::set_data / mark_updated bump the version, which
// invalidates it.
#pragma once

#include "engine/passes/amp_options.h"
#include "engine/lower.h"
#include "engine/execution/executor.h"
#include "ir/graph.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace ampfuse::engine {

class Block;
class F;

// A value inside forward: an opaque handle into the F that made it (a tensor when eager,
// a graph value when tracing). Syms do not outlive the forward call that made them.
class Sym {
 public:
  Sym() = default;
  bool valid() const { return owner_ != nullptr; }

 private:
  friend class F;
  Sym(const F* owner, int32_t id) : owner_(owner), id_(id) {}
  const F* owner_ = nullptr;
  int32_t id_ = -1;
};

// A named tensor of a block with a version that every update bumps.
class Parameter {
 public:
  const std::string& name() const { return name_; }
  const runtime::Tensor& data() const { return data_; }
  uint64_t version() const { return version_; }
  // Replaces the value (any type) and bumps the version.
  void set_data(runtime::Tensor t);
  // Call after changing data()'s buffer in place (an optimizer step): bumps the version,
  // so cached low-precision copies are made again.
  void mark_updated() { ++version_; }

 private:
  friend class Block;
  std::string name_;
  runtime::Tensor data_;
  uint64_t version_ = 0;
};

// The op namespace forward is written against (Gluon's F). Ops take MXNet's names and
// attribute spellings (ir/ops/*.cpp); attribute keys starting with "__" become node hints
// ("__amp_disable__": "1" runs the node in f32 under AMP).
class F {
 public:
  bool tracing() const { return tracing_; }

  // The block's parameter `name` (the same Sym however often it is asked for: a graph has
  // one variable per parameter, which is what lets AMP cast a shared weight once).
  Sym param(const std::string& name);

  // Node names: `name` when given (several nodes may share one, as in MXNet graphs),
  // else "<block>_<op><k>".
  Sym op(const std::string& op, const std::vector<Sym>& inputs, const std::map<std::string, std::string>& attrs = {},
         const std::string& name = "");
  std::vector<Sym> op_multi(const std::string& op, const std::vector<Sym>& inputs,
                            const std::map<std::string, std::string>& attrs = {}, const std::string& name = "");

  // Shorthands for the common ops.
  Sym fully_connected(Sym x, Sym weight, Sym bias, int64_t num_hidden, const std::string& name = "");
  Sym activation(Sym x, const std::string& act_type, const std::string& name = "");
  Sym tanh(Sym x) { return op("tanh", {x}); }
  Sym sigmoid(Sym x) { return op("sigmoid", {x}); }
  Sym relu(Sym x) { return op("relu", {x}); }
  Sym add(Sym a, Sym b) { return op("elemwise_add", {a, b}); }  // same shapes
  Sym mul(Sym a, Sym b) { return op("elemwise_mul", {a, b}); }
  Sym broadcast_add(Sym a, Sym b) { return op("broadcast_add", {a, b}); }
  Sym broadcast_mul(Sym a, Sym b) { return op("broadcast_mul", {a, b}); }
  Sym mul_scalar(Sym x, double s);
  Sym slice_axis(Sym x, int64_t axis, int64_t begin, int64_t end);
  Sym concat(const std::vector<Sym>& xs, int64_t dim = 1);
  Sym reshape(Sym x, const ir::Shape& shape);

  // While one is alive, the nodes forward makes carry "__amp_disable__" (f32 under AMP).
  class AmpOff {
   public:
    explicit AmpOff(F& f) : f_(f) { ++f_.amp_off_depth_; }
    ~AmpOff() { --f_.amp_off_depth_; }
    AmpOff(const AmpOff&) = delete;
    AmpOff& operator=(const AmpOff&) = delete;

   private:
    F& f_;
  };

 private:
  friend class Block;
  F(Block& block, bool tracing) : block_(block), tracing_(tracing) {}
  Sym input(const std::string& name, const runtime::Tensor& t);
  int32_t check(Sym s, const std::string& what) const;

  Block& block_;
  bool tracing_;
  int amp_off_depth_ = 0;
  std::map<std::string, Sym> params_;
  std::map<std::string, int> name_counts_;
  std::vector<runtime::Tensor> eager_;  // eager: Sym id -> tensor
  ir::Graph graph_;                     // tracing: the graph so far
  std::vector<ir::ValueRef> values_;    // tracing: Sym id -> graph value
};

struct HybridizeOptions {
  ExecutorOptions exec;  // fuse, oneDNN, check_nonfinite, kernel cache, pool
  // Store lp16 params as lp16 executable inputs and cast them through the weight-cast cache
  // (false: the graph casts them itself, on every call).
  bool cast_params_offline = true;
  // Plans kept per trace (distinct input shapes); the oldest goes first.
  size_t max_plans_per_trace = 32;
};

struct BlockStats {
  int64_t eager_calls = 0;
  int64_t hybrid_calls = 0;
  int64_t traces = 0;        // forward traced into a graph (new signature or AMP state)
  int64_t plans = 0;         // Executable::compile calls (new signature, state or shape)
  int64_t compilations = 0;  // kernels compiled by those plans (the rest were cache hits)
  int64_t kernel_cache_hits = 0;
  int64_t weight_casts = 0;      // params cast to lp16 (weight-cast cache misses)
  int64_t weight_cast_hits = 0;  // bindings served from the cache
  double last_call_seconds = 0;
};

class Block {
 public:
  explicit Block(std::string name);
  virtual ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  const std::string& name() const { return name_; }

  // Adds a parameter holding `init`. Throws for a duplicate name or one an input uses
  // ("data", "data1", ...).
  Parameter& add_param(const std::string& name, runtime::Tensor init);
  // Throws ampfuse::Error naming the block and the parameter when there is none.
  Parameter& param(const std::string& name);
  const Parameter& param(const std::string& name) const;
  std::vector<std::string> param_names() const;

  // Later calls trace, compile and replay. Calling it again drops every trace and plan
  // (new options); the weight-cast cache stays.
  void hybridize(HybridizeOptions opts = {});
  bool hybridized() const { return hybridized_; }

  // Runs forward on `inputs` (named "data", "data1", ... in traced graphs) and returns its
  // outputs. Not thread-safe: one call at a time per block. `stats` (hybridized) gets the
  // executable's RunStats, nonfinite included.
  std::vector<runtime::Tensor> operator()(const std::vector<runtime::Tensor>& inputs, RunStats* stats = nullptr);

  const BlockStats& stats() const { return stats_; }
  // What the last hybridized call ran (null before one): plan(), graph(), compile_stats().
  const Executable* last_executable() const { return last_ ? &last_->exe : nullptr; }
  // The AMP conversion of the last hybridized call's plan (nullopt when AMP was off).
  const std::optional<AmpStats>& last_amp_stats() const;
  // The low-precision copy of a parameter the cache holds now, if any (tests, memory dumps).
  std::optional<runtime::Tensor> cached_cast(const std::string& param, ir::DType dtype) const;

 protected:
  virtual std::vector<Sym> forward(F& f, const std::vector<Sym>& inputs) = 0;

 private:
  friend class F;
  struct Plan {
    Executable exe;
    std::optional<AmpStats> amp;
  };
  struct Trace {
    ir::Graph graph;  // op outputs untyped; variables typed at plan time
    std::optional<AmpOptions> amp;
    std::map<std::string, std::unique_ptr<Plan>> plans;  // by exact input and param types
    std::vector<std::string> plan_order;                 // oldest first
  };
  struct CastEntry {
    uint64_t version;
    runtime::Tensor data;
  };

  std::vector<runtime::Tensor> call_eager(const std::vector<runtime::Tensor>& inputs);
  std::vector<runtime::Tensor> call_hybrid(const std::vector<runtime::Tensor>& inputs, RunStats* stats);
  Trace trace(const std::vector<runtime::Tensor>& inputs, std::optional<AmpOptions> amp);
  Plan& plan(Trace& t, const std::vector<runtime::Tensor>& inputs);
  const runtime::Tensor& lowp_param(const Parameter& p, ir::DType dtype);

  std::string name_;
  std::map<std::string, Parameter> params_;
  bool hybridized_ = false;
  HybridizeOptions hopts_;
  std::map<std::string, Trace> traces_;  // by signature + AMP fingerprint
  const Plan* last_ = nullptr;
  std::map<std::tuple<std::string, ir::DType>, CastEntry> casts_;
  BlockStats stats_;
};

// A Block whose forward is a function: small models, tests, examples.
class FunctionBlock : public Block {
 public:
  using Forward = std::function<std::vector<Sym>(F&, const std::vector<Sym>&)>;
  FunctionBlock(std::string name, Forward fn) : Block(std::move(name)), fn_(std::move(fn)) {}

 protected:
  std::vector<Sym> forward(F& f, const std::vector<Sym>& inputs) override { return fn_(f, inputs); }

 private:
  Forward fn_;
};

// "data" for input 0, "data<i>" after: the variable names of a traced block's inputs.
std::string block_input_name(size_t i);

}  // namespace ampfuse::engine
