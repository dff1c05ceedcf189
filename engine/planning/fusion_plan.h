// The fusion planner: partitions a typed graph into fused kernels, views and external ops.
//
//          x:f32  w:bf16
//            |      |
//       amp_cast    |          kernel 0: iteration space [N,C,H,W]
//            \     /              loads x (f32), stores y (bf16, NHWC strides)
//           transpose ...      external: Convolution (oneDNN or reference)
//
// A fused kernel computes several graph nodes in one pass over one iteration space. Every
// value computed inside a kernel is indexed by a permutation of the iteration index (so a
// cast followed by a transpose is one pass: the transpose only changes where the result is
// stored). Values read from outside are loaded through an affine access map, which is
// how broadcasts (stride 0), slices (offset and step) and transposes of inputs cost
// nothing. Views (Reshape, Flatten, expand_dims...) are not kernels at all: the executor
// gives the consumer the same buffer under the new shape.
#pragma once

#include "ir/access_map.h"
#include "ir/graph.h"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace ampfuse::engine {

// How one tensor is indexed from a kernel's iteration index (ir/access_map.h).
using ir::AccessMap;

struct KernelOperand {
  ir::ValueRef value;
  // The shape the map indexes: the value's own shape, or the view an op declares through
  // OpDef::broadcast_view (PReLU's gamma [C] read as [1,C,1,1]); same elements either way.
  ir::Shape shape;
  AccessMap map;
  friend bool operator==(const KernelOperand&, const KernelOperand&) = default;
};

struct FusedKernel {
  ir::Shape iteration;          // the iteration space
  // The type every node of the kernel computes in: the reference interpreter's choice for
  // each of them (ir::compute_type), so a kernel matches it bit for bit. Nodes with
  // different compute types never share a kernel.
  ir::DType compute = ir::DType::f32;
  std::vector<int32_t> nodes;   // the graph nodes it computes, in graph order
  // For each node of `nodes`, the access map of its outputs (a permutation of the
  // iteration index: the map every output of that node is computed under).
  std::vector<AccessMap> node_maps;
  std::vector<KernelOperand> inputs;   // distinct (value, map) loads from outside
  std::vector<KernelOperand> outputs;  // values other steps or the graph read
  // Nodes of `nodes` that an earlier kernel computes too: this kernel computes them again
  // from that kernel's inputs instead of loading their values (engine/planning/recompute.h).
  std::vector<int32_t> recomputed{};
};

struct ExternalStep {
  int32_t node;
};

// A view op: the output is the input's buffer under another shape.
struct ViewStep {
  int32_t node;
};

using PlanStep = std::variant<FusedKernel, ExternalStep, ViewStep>;

struct Plan {
  std::vector<PlanStep> steps;  // in an order that respects every dependency
};

// How a node takes part in fusion.
enum class FusionRole : uint8_t {
  external,  // runs alone (convolution, matmul, reductions, Concat, ops without a recipe)
  view,      // a reshape-like alias
  elementwise,  // a recipe over inputs broadcast to the output
  remap,     // an op with OpDef::remap_access (transpose, slice, broadcast_to...): input 0 re-indexed
};
FusionRole fusion_role(const ir::Node& n);

// Whether a node of `shape` computed under `map` (a permutation of the iteration index)
// meets its elements in row-major order, so that its row-major element index is the
// kernel's flat iteration index: what philox_bits24 reads (ir/scalar_program.h). The
// planner computes a node whose recipe draws random bits (Dropout in training) only under
// such a map, so each element gets the random bits the interpreter gives it.
bool keeps_row_major_order(const AccessMap& map, const ir::Shape& shape);

// Whether fused node n's recipe draws random bits, which depend on the element's index.
bool draws_random_bits(const ir::Graph& g, int32_t n);

// The compute type the reference interpreter evaluates node n in (f64 for f64 or integer
// operands, else f32).
ir::DType node_compute_type(const ir::Graph& g, int32_t n);

// The access map of node n's input `i` relative to n's output index (its output 0): which
// input element each output element reads. Throws ampfuse::Error for nodes whose role is
// external or view.
AccessMap input_access(const ir::Graph& g, int32_t n, size_t i);

// The shape node n's input i is indexed as inside a kernel: OpDef::broadcast_view's view
// for elementwise ops that declare one (PReLU's gamma), else the value's own shape.
ir::Shape operand_shape(const ir::Graph& g, int32_t n, size_t i);

// The map of `inner` (node output index -> input index) read under `outer` (iteration
// index -> node output index): iteration index -> input index.
AccessMap compose_maps(const AccessMap& inner, const AccessMap& outer);

// Whether `a` reads every element of a rank-`out_rank` tensor exactly once, from a
// permutation of the iteration index (no broadcast, offset or stride).
bool is_permutation(const AccessMap& a, size_t out_rank);

// "%name" for output 0 of a node, "%name:k" for output k: how dumps name values.
std::string value_name(const ir::Graph& g, ir::ValueRef v);

struct PlannerOptions {
  bool fuse = true;  // false: every fusable node becomes a kernel of its own (the unfused path)
  // After planning, cheap values only later fused kernels read are computed again there
  // instead of being stored (engine/planning/recompute.h). lower() runs it; plan_fusion
  // does not.
  bool recompute = false;
  // Training graphs (lower() sets it from autodiff): per node, whether it computes the
  // backward pass (reads a head gradient, directly or not). Such nodes never share a kernel
  // with forward ones, and every forward step comes before every backward step, so that the
  // forward steps can run as a pass of their own and the backward ones later, on the values
  // the forward kept (Executable::run_forward / run_backward). Empty: one phase.
  std::vector<bool> backward_nodes{};
  // After planning, softmax, log_softmax and LayerNorm over the last axis and the
  // sum/mean/max/min of the last axis become generated row kernels, with their neighbouring kernels merged in (engine/planning/row_fusion.h;
  // results differ from the reference kernels by summation order and exp/log ULPs, as
  // oneDNN's do). lower() runs it; plan_fusion does not. CPU only: the CUDA emitter has no
  // row kernels.
  bool row_kernels = false;

  // Kernel size caps. LLVM's time grows with a kernel's body, and faster than linearly: one
  // kernel of 16 tanh took 0.6 s to compile, of 64 tanh 4.2 s, of 400 more than two
  // minutes. So a node does not join a kernel that it would take past a cap; it starts or
  // joins another, which loads the values it reads from the first (a long chain becomes
  // several kernels). No count grows past its cap except where one node passes it alone
  // (Activation mish: exp, log1p and tanh, a transcendental cost of 4): such a node still
  // has a kernel, and
  // takes in the nodes that add nothing to that count.
  //
  // The numbers come from bench/planner_bench.cpp's BM_CompileKernel (CPU time of one
  // KernelCache::get, release build, LLVM 19 at O3; bench/README.md): any kernel cost
  // 25-35 ms, and a kernel at one of these caps 50-80 ms, when these were set (every
  // contiguous kernel was then compiled with a streaming loop too; now only those writing
  // more than 32 MiB are, and the others take about half the time).
  //
  // Transcendental calls (ir::is_transcendental), most of a kernel's time, weighed in units
  // of one exp: exp, log, log1p and expm1 cost 10-15 ms each and count 1; tanh, erf and pow
  // cost 25-40 ms and count 2. So a kernel holds one tanh (58 ms) or two exp (sigmoid then
  // exp: 43 ms); two tanh took 76-82 ms.
  int max_kernel_transcendental_cost = 2;
  // The body's other scalar instructions (arithmetic, compares and selects of the recipes,
  // and a rounding to each node's output dtype; loads, constants and remaps are free):
  // 0.1 ms (add) to 1.5 ms (NaN-propagating max) each; of docs/design.md's C8 mix, 20 took
  // 31-51 ms and 80 took 69-80 ms. The outputs a kernel stores (about 2.5 ms each) are
  // known only once later nodes are planned, so they have no cap of their own: each is a
  // node's value, and nodes other than remaps and copies count an instruction at least.
  int max_kernel_instructions = 32;
  // Distinct values a kernel loads, each an operand with its own pointer, strides and
  // alias scope in every loop shape: about 2 ms each (16 took 57-64 ms, 64 took 200 ms).
  int max_kernel_inputs = 12;
};

// Partitions `g` (types inferred) into steps. Groups never create a cycle between steps,
// and kernels stay within opts' caps (see there).
Plan plan_fusion(const ir::Graph& g, const PlannerOptions& opts = {});

// What a kernel's nodes ask of the compiler, in the terms of PlannerOptions' caps.
struct KernelWork {
  int transcendental_cost = 0;  // see PlannerOptions::max_kernel_transcendental_cost
  int instructions = 0;         // besides the transcendental ones
  int inputs = 0;               // distinct values loaded
  friend bool operator==(const KernelWork&, const KernelWork&) = default;
};
KernelWork kernel_work(const ir::Graph& g, const FusedKernel& k);

// The node of an external or view step.
int32_t step_node(const PlanStep& step);
// The values a step reads (a kernel's loads; a node's inputs) and produces.
std::vector<ir::ValueRef> step_reads(const ir::Graph& g, const PlanStep& step);
std::vector<ir::ValueRef> step_writes(const ir::Graph& g, const PlanStep& step);

// Liveness: for each step, the values no later step reads, so their buffers can be reused
// after it. Graph outputs and variables never appear (they outlive the run).
std::vector<std::vector<ir::ValueRef>> values_dead_after(const ir::Graph& g, const Plan& p);

// The distinct (value, map) loads of a kernel computing `nodes` under `node_maps`: every
// input of a node that no node of the list computes, in node and input order.
std::vector<KernelOperand> kernel_loads(const ir::Graph& g, const std::vector<int32_t>& nodes,
                                        const std::vector<AccessMap>& node_maps);

// Bytes a kernel reads and writes (each distinct operand once).
int64_t kernel_bytes(const ir::Graph& g, const FusedKernel& k);

// The plan in text, for AMPFUSE_DUMP=plan and tests:
//   kernel 0 [2,3] nodes: %a=amp_cast %b=relu  in: %x  out: %b  bytes: 36
//   kernel 1 [2,3] nodes: %a=amp_cast %d=mul  in: %x %dy  out: %d  bytes: 48  recomputed: %a
//   external %conv=Convolution
//   view %r=Reshape
std::string print_plan(const ir::Graph& g, const Plan& p);

}  // namespace ampfuse::engine
