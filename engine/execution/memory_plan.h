// The static memory plan: where every value of a fusion plan lives during a run, decided
// once at compile time (as XLA's buffer assignment and TVM's storage planning do).
//
// Every intermediate gets an offset in one arena per memory space, from the plan's
// liveness: a buffer is reused as soon as the last step that reads its value has run.
//
//   steps:        k0          ext1          k2           k3
//   values:    a=====|     b=====|=====|  c====|     d (output buffer)
//   arena:     [ a  ][ b  ]        c takes a's bytes after k0 ... and so on
//
// A fused kernel may also write its output over a dead input of the same element size read
// under the same access (in place): each element is read before it is overwritten, by the
// same thread. So may a _fused_conv or _fused_fc over its residual, which oneDNN's sum
// post-op reads from the output buffer anyway (engine/passes/epilogue_fusion.h).
//
// Spaces. On a device whose memory is the host's (the CPU) there is one: kernels, oneDNN
// and the interpreter all read the one arena, and nothing is ever copied. On a GPU there
// are two: device kernels write the device arena, external ops (oneDNN on the host) the
// host arena, and a value read in the other space is copied there once, right before its
// first reader there (a transfer), into a slot of its own.
//
// What lives elsewhere: variables (the caller's tensors), graph outputs (buffers the run
// hands back), and with constant params, values computed from the weights alone (kept by
// the executable between runs).
#pragma once

#include "engine/planning/fusion_plan.h"
#include "ir/graph.h"
#include "runtime/device_api.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ampfuse::engine {

enum class Space : uint8_t { device = 0, host = 1 };

// A value with its own bytes (not a view). Values are numbered densely; views point to the
// value whose bytes they share.
struct BufferValue {
  enum class Kind : uint8_t {
    variable,      // bound by the caller
    constant,      // computed from params alone, kept between runs (constant_params)
    intermediate,  // an arena slot in its home space
    output,        // a graph output (or viewed by one): a buffer handed to the caller
  };
  Kind kind = Kind::intermediate;
  Space home = Space::device;  // where it is computed (variables: where the caller's memory is)
  int64_t bytes = 0;
  // Arena offset per space (-1: none there). Intermediates have one in their home space,
  // and every value has one in each other space it is copied to (constants excepted).
  std::array<int64_t, 2> slot = {-1, -1};
  int32_t output_index = -1;  // kind output: its output buffer
  // Per space with a slot: the steps from the one that fills it to the last that reads it
  // (steps.size() for graph outputs downloaded at the end).
  std::array<std::pair<int32_t, int32_t>, 2> live = {{{-1, -1}, {-1, -1}}};
  int32_t in_place_of = -1;  // the dead kernel input whose slot it took, if any
};

struct Transfer {
  int32_t value;  // a root value id
  Space to;
};

struct MemoryPlanOptions {
  bool two_spaces = false;  // the device's memory is not the host's
  // Per plan step: where it runs (only device in one space). Views are never read.
  std::vector<Space> step_space;
  // Per plan step: computed from constant params only, once per binding, outside the arena.
  std::vector<bool> constant_step;
  // Per graph node: its values are constants (constant_params), see ir::computed_from_params.
  std::vector<bool> constant_node;
};

struct MemoryPlan {
  bool two_spaces = false;
  std::vector<int32_t> first_value;  // per graph node: id of its output 0
  std::vector<int32_t> root;         // per value id: the value whose bytes it uses
  std::vector<BufferValue> buffers;  // per value id (meaningful for roots)
  int32_t output_buffers = 0;        // distinct roots of graph outputs
  std::vector<std::vector<Transfer>> transfers_before;  // per step
  // Per step: copies of constants it needs, made once per constant binding (not in the arena).
  std::vector<std::vector<Transfer>> constant_transfers_before;
  // Graph outputs computed on the device that no step copied to the host: downloaded last.
  std::vector<Transfer> transfers_at_end;
  std::array<int64_t, 2> arena_bytes = {0, 0};
  // The arenas' parts, for DeviceApi::declare_regions (overlapping when reused).
  std::array<std::vector<runtime::DeviceRegion>, 2> regions;
  int64_t intermediate_bytes = 0;  // every slot's bytes added up: an arena without reuse
  int in_place = 0;                // kernel (and _fused_*) outputs written over a dead input

  int32_t id(ir::ValueRef v) const { return first_value[v.node] + v.index; }
  int32_t root_of(ir::ValueRef v) const { return root[id(v)]; }
  int64_t total_arena_bytes() const { return arena_bytes[0] + arena_bytes[1]; }
};

// Plans `plan`'s memory for graph `g` (types inferred). Deterministic.
MemoryPlan plan_memory(const ir::Graph& g, const Plan& plan, const MemoryPlanOptions& opts);

// The plan in text, for AMPFUSE_DUMP=memory and tests:
//   arena device: 4096 bytes (12288 without reuse), 1 in place
//   %a  device [0, 1024)  steps 0-2
//   %b  device [1024, 2048)  in place of %a
//   %y  output 0
std::string print_memory_plan(const ir::Graph& g, const Plan& plan, const MemoryPlan& m);

}  // namespace ampfuse::engine
