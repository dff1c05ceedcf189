// The op registry: every op ampfuse knows, declared once.
//
// An OpDef holds everything the rest of the system asks of an op: its inputs and outputs,
// its attribute schema, type and shape inference, its AMP class per target dtype, whether
// the fusion planner may fuse it, for elementwise ops the scalar recipe that the
// interpreter and both code generators lower, and what passes would otherwise recognise
// it by name for (a cast? an index remapping, with which access map? how does it run
// channels-last?). Ops are registered by the register_*_ops
// functions (ir/ops/*.cpp), called once by OpRegistry::global().
//
// An op has one canonical name; MXNet's other spellings of it (`cast` for Cast, `crop`
// for slice) are declared as its aliases. Graph construction (MXNet JSON import, the text
// parser, GraphBuilder, traced blocks) resolves an alias to the canonical name, so a graph
// never holds one and no pass or kernel table needs to know them.
#pragma once

#include "ir/access_map.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/gradient.h"
#include "ir/graph.h"
#include "ir/scalar_program.h"

#include <functional>
#include <map>
#include <unordered_map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ampfuse::ir {

// What an input slot holds. MXNet import marks a variable as a param (or aux) when it
// feeds such a slot; AMP keeps `keep_fp32` slots in f32 for the given targets.
enum class SlotRole : uint8_t { data, param, aux };

struct InputSlot {
  std::string name;  // "data", "weight", "bias", "gamma", "moving_mean"...
  SlotRole role = SlotRole::data;
  bool optional = false;  // e.g. bias when no_bias=True
  // The slot holds integers, whatever type carries them: indices into a table or an axis
  // (Embedding's data, take's indices, pick's index, one_hot's indices) or class labels
  // (SoftmaxOutput's label). AMP never casts such an input to a lower-precision float:
  // bf16 holds integers exactly only up to 256 and f16 up to 2048, so id 12345 would read
  // row 12352 (bf16) or 12344 (f16). Declare it with `.index = true`.
  bool index = false;
};

// The five AMP classes (MXNet's op lists). See docs/design.md "AMP conversion".
enum class AmpClass : uint8_t { lowp, fp32, widest, cond_fp32, neutral };
std::string_view amp_class_name(AmpClass c);

// For cond_fp32: the op runs in f32 when attribute `attr` has one of `values`
// (e.g. Activation act_type in {softrelu}); otherwise it is `otherwise`.
struct CondFp32 {
  std::string attr;
  std::vector<std::string> values;
  AmpClass otherwise = AmpClass::neutral;
};

// How the rest of the system treats the op's computation.
enum class OpKind : uint8_t {
  elementwise,  // same-shape (or broadcast_*) inputs, scalar recipe, fusable
  view,         // reshape-like: output shares the input's elements in order (Reshape, Flatten...)
  data_movement,  // transpose, slice, concat, broadcast_to...: re-indexing, no arithmetic
  reduction,    // sum, all_finite...
  compute,      // convolution, matmul, pooling, norms, RNN: an external kernel
  source,       // _zeros: no inputs
  opaque,       // Custom, unknown semantics
};

// What type inference sees and writes. Inputs may be unknown (nullopt) only for slots
// whose producer is a variable without a type or an op that lets consumers decide
// (_zeros with 0 extents): the op's infer either fills them (`inputs[i] = ...`, e.g.
// Convolution's weight from num_filter and kernel) or leaves them unknown. It must set
// every output. On a problem it throws ampfuse::Error with a message about the op alone
// ("input 1 (weight) has shape [3] but [64,3,7,7] is needed"); the caller adds the node.
struct InferContext {
  const Attrs& attrs;
  std::vector<std::optional<TensorType>> inputs;
  std::vector<std::optional<TensorType>> outputs;
  // The outputs consumers determined already, where the op's own inference could not (a
  // cast of a weight whose hint leaves extents open, read by a Convolution): empty
  // otherwise. A cast then gives its input the same shape, as MXNet's shape inference runs
  // both ways through it.
  std::vector<TensorType> outputs_from_consumers = {};

  const TensorType& in(size_t i) const;  // throws "input i (name) is unknown" if nullopt
};
using InferFn = std::function<void(InferContext&)>;

// How an op runs on channels-last data, for layout_optimize (engine/passes/layout_optimize.h):
// data of rank 3 to 5 with its channels at axis 1, (N, C, spatial...), stored as
// (N, spatial..., C) instead. Ops without a rule are never moved across a layout change.
struct ChannelsLastRule {
  // What tells the op where the channels are.
  enum class Channels : uint8_t {
    anywhere,     // nothing: each output element comes from the input elements at its own
                  // index (elementwise ops whose inputs all have the output's shape, casts)
    layout_attr,  // attribute `attr` names the layout, "NCHW" or "NHWC" (Convolution, Pooling)
    axis_attr,    // attribute `attr` is an axis of the data, moved with it (BatchNorm's
                  // axis, Concat's dim)
  };
  Channels channels = Channels::anywhere;
  std::string attr;
  // Which inputs hold the data: every input (Concat's pieces, an elementwise op's operands)
  // or input 0 alone; the others (weights, per-channel statistics) keep their layout.
  bool every_input = false;
  // Output k holds input k's data (amp_multicast); otherwise output 0 alone does
  // (BatchNorm's mean and inverse-std outputs are per channel).
  bool output_per_input = false;
  // Convolution and Deconvolution: channels-last on their own (oneDNN's faster layout), so
  // regions start at them; their weight (input 1) is permuted like the data (OIHW -> OHWI).
  bool starts_region = false;
};

// An input that indexes a table (Embedding's data): meaningful values are the integers
// 0 .. N-1, N being the value of attribute `size_attr` (input_dim).
struct TableIndex {
  size_t slot = 0;
  std::string size_attr;
};

struct OpDef {
  std::string name;  // canonical
  // MXNet's other names for the op; resolve() maps them to `name`.
  std::vector<std::string> aliases;
  OpKind kind = OpKind::compute;
  std::vector<InputSlot> inputs;  // the input slots, in order
  // Ops whose slots depend on an attribute: where `alt_inputs_apply(attrs)` holds,
  // `alt_inputs` replaces `inputs` (UpSampling: num_args data inputs for nearest, data and a
  // weight for bilinear). slot(i, attrs) takes it into account; slot(i) refuses such an op.
  std::vector<InputSlot> alt_inputs;
  std::function<bool(const Attrs&)> alt_inputs_apply;
  // The input count when it depends on attributes: Convolution has 2 with no_bias=True,
  // else 3; Concat has num_args (all like the last slot). Unset: inputs.size().
  std::function<int(const Attrs&)> num_inputs;
  // Outputs: 1 unless set (SliceChannel: num_outputs).
  std::function<int(const Attrs&)> num_outputs;
  std::vector<AttrSpec> attrs;
  // MXNet parameters that do not change results here (Convolution's workspace,
  // cudnn_tune...): accepted on import and dropped. Anything not in attrs or here is an error.
  std::vector<std::string> ignored_attrs;
  // Custom: attributes beyond the declared ones are kept as strings (its op_type decides
  // what they mean) instead of being an error.
  bool open_attrs = false;
  InferFn infer;

  AmpClass amp_bf16 = AmpClass::neutral;
  AmpClass amp_fp16 = AmpClass::neutral;
  std::optional<CondFp32> cond_fp32_bf16, cond_fp32_fp16;  // when amp_* == cond_fp32
  // Input slots AMP leaves in f32 for the target (bf16 BatchNorm gamma/beta/moving_*).
  std::vector<int> keep_fp32_inputs_bf16, keep_fp32_inputs_fp16;

  bool fusable = false;
  ScalarRecipe recipe;  // elementwise ops: the one definition of the op's math
  // Set for ops whose recipe covers some attribute values only (BatchNorm without
  // output_mean_var): elsewhere the reference kernel defines the op and it is not fused.
  std::function<bool(const Attrs&)> recipe_applies;
  // The recipe defines this node's math (recipe set and recipe_applies, if any, holds).
  bool has_recipe(const Attrs& a) const { return recipe && (!recipe_applies || recipe_applies(a)); }
  // Elementwise ops with an input that does not broadcast numpy-style (right-aligned) to
  // the output: the shape to view input `i` as (same element count) before broadcasting.
  // PReLU's gamma (C,) becomes [1,C,1,1] for an NCHW output; legacy `where`'s 1-D condition
  // (N,) becomes [N,1,...]. Unset, or returning `in`: plain numpy broadcasting. Whoever
  // evaluates or fuses a recipe must apply it (eval_scalar_program does not know the op).
  std::function<Shape(const Attrs&, size_t i, const Shape& in, const Shape& out)> broadcast_view;
  // Ops that only re-index their one input (transpose, slice, broadcast_to...): for an
  // input of shape `in` and an output of shape `out`, which input element each output
  // element copies. The planner fuses such ops as remappings (engine/planning/fusion_plan.h):
  // the map moves into a kernel's loads or stores and the op computes nothing.
  std::function<AccessMap(const Attrs&, const Shape& in, const Shape& out)> remap_access;

  // A conversion of input 0 to the output's dtype and nothing else (Cast, amp_cast): what
  // the AMP passes and cast folding treat as a cast, and the AMP statistics count.
  bool is_cast = false;
  // A cast whose output type follows from its inputs' types (amp_multicast: the widest
  // AMP type among them, or with cast_narrow the narrowest). AMP conversion leaves it as
  // it finds it, as MXNet's convert_symbol does: it reads each input in the type that
  // input has after conversion, with no cast, and its outputs take the type that gives.
  bool is_multicast = false;
  std::optional<ChannelsLastRule> channels_last;  // unset: layout_optimize never moves the op
  std::optional<TableIndex> table_index;          // Embedding's indices

  // The op's gradient (ir/gradient.h). Unset on an op with a recipe: derived from the
  // recipe (elementwise_gradient). Unset otherwise: the op has no gradient yet, and
  // differentiating a graph through it is an error naming it.
  GradFn gradient;
  // A loss head (SoftmaxOutput, LinearRegressionOutput, MakeLoss...): as a graph output
  // its gradient rule supplies the gradient itself, as MXNet's loss layers do, and ignores
  // the head gradient, so none is asked for.
  bool loss_head = false;

  int input_count(const Attrs& a) const;
  // Slot i of a node with attributes `a`; slots past the declared ones repeat the last
  // (variadic ops). slot(i) without them is for ops whose slots do not depend on
  // attributes, and throws for one that has alt_inputs.
  const InputSlot& slot(size_t i) const;
  const InputSlot& slot(size_t i, const Attrs& a) const;
  int output_count(const Attrs& a) const;
  const AttrSpec* find_attr(std::string_view name) const;
  AmpClass amp_class(DType target) const;  // target: f16 or bf16
};

class OpRegistry {
 public:
  OpRegistry() = default;
  OpRegistry(const OpRegistry&) = delete;  // by_name_ points into ops_
  OpRegistry& operator=(const OpRegistry&) = delete;

  // The registry with every built-in op.
  static OpRegistry& global();

  // Throws when the name or an alias is already taken by another op's name or alias.
  void add(OpDef def);
  // The op with this canonical name (what graph nodes hold); nullptr otherwise, also for
  // an alias.
  const OpDef* find(std::string_view name) const;
  // As find, but throws ampfuse::Error: "unknown op 'X'" with the closest name suggested,
  // or for an alias, that graphs hold the canonical name instead.
  const OpDef& get(std::string_view name) const;
  // The op named `name_or_alias`: what graph construction calls on names from outside
  // (files, users), storing the result's canonical `name` in the node. Throws
  // ampfuse::Error "unknown op 'X'" with the closest name or alias suggested.
  const OpDef& resolve(std::string_view name_or_alias) const;
  std::vector<std::string> names() const;  // canonical names, sorted

 private:
  // Throws "unknown op 'X'" suggesting the closest name (with `aliases`, or alias).
  [[noreturn]] void fail_unknown(std::string_view name, bool aliases) const;

  std::map<std::string, OpDef, std::less<>> ops_;
  std::map<std::string, std::string, std::less<>> canonical_of_alias_;
  // ops_ by hash, for find(): every pass, the verifier and the planner look an op up for
  // each node they visit, and the sorted map's string compares showed in compile profiles.
  // The views point into ops_'s keys, which stay put (map nodes never move).
  std::unordered_map<std::string_view, const OpDef*> by_name_;
};

// Whether op node `n` is a cast (OpDef::is_cast); false for variables.
bool is_cast(const Node& n);

// Typed attributes for `def` from MXNet's strings: parses declared ones, fills defaults,
// drops ignored ones, and throws on a missing required or an undeclared attribute
// (naming it). Keys starting with "__" are not attributes; callers keep them as hints.
Attrs parse_attrs(const OpDef& def, const std::map<std::string, std::string>& raw);
// Fills defaults into already-typed attributes and checks kinds and choices.
Attrs complete_attrs(const OpDef& def, Attrs given);
// Whether complete_attrs(def, given) would succeed and return `given` unchanged (every
// declared attribute present, of its declared kind, no widening left to do): the verifier's
// check of every node after every pass, without copying the attributes.
bool attrs_complete(const OpDef& def, const Attrs& given);

// Registration entry points, one per file in ir/ops/.
void register_elementwise_ops(OpRegistry& r);
void register_nn_ops(OpRegistry& r);
void register_tensor_ops(OpRegistry& r);
void register_index_ops(OpRegistry& r);
void register_tensor_backward_ops(OpRegistry& r);  // ir/ops/tensor_backward.cpp
void register_gradient_ops(OpRegistry& r);  // ir/gradient.cpp

}  // namespace ampfuse::ir
