#include "engine/execution/memory_plan.h"

#include "engine/planning/row_fusion.h"
#include "ir/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace ampfuse::engine {

namespace {

using ir::ValueRef;

// Every slot starts on a cache line (and on the alignment vector loads want).
constexpr int64_t kSlotAlign = 64;

int64_t aligned(int64_t bytes) { return (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

// Offsets in one growing arena: best fit from the freed blocks (coalesced with their
// neighbours), else the end. O(log n) per call, so plans of 100k values take milliseconds.
class ArenaAllocator {
 public:
  int64_t allocate(int64_t bytes) {
    bytes = aligned(bytes);
    const auto fit = by_size_.lower_bound({bytes, -1});
    if (fit != by_size_.end()) {
      const auto [size, offset] = *fit;
      erase(offset, size);
      if (size > bytes) insert(offset + bytes, size - bytes);
      return offset;
    }
    // No free block fits: grow the arena, starting inside a free block at its end if any.
    int64_t offset = top_;
    if (!by_offset_.empty()) {
      const auto last = std::prev(by_offset_.end());
      if (last->first + last->second == top_) {
        offset = last->first;
        erase(last->first, last->second);
      }
    }
    top_ = offset + bytes;
    return offset;
  }

  void release(int64_t offset, int64_t bytes) {
    bytes = aligned(bytes);
    const auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && offset + bytes == next->first) {
      bytes += next->second;
      erase(next->first, next->second);
    }
    const auto after = by_offset_.lower_bound(offset);
    if (after != by_offset_.begin()) {
      const auto prev = std::prev(after);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        bytes += prev->second;
        erase(prev->first, prev->second);
      }
    }
    insert(offset, bytes);
  }

  int64_t high_water() const { return top_; }

 private:
  void insert(int64_t offset, int64_t bytes) {
    by_offset_.emplace(offset, bytes);
    by_size_.emplace(bytes, offset);
  }
  void erase(int64_t offset, int64_t bytes) {
    by_offset_.erase(offset);
    by_size_.erase({bytes, offset});
  }

  std::map<int64_t, int64_t> by_offset_;           // free blocks: offset -> bytes
  std::set<std::pair<int64_t, int64_t>> by_size_;  // free blocks: (bytes, offset)
  int64_t top_ = 0;
};

int64_t bytes_of(const ir::TensorType& t) { return ir::num_elements(t.shape) * static_cast<int64_t>(ir::dtype_size(t.dtype)); }

class MemoryPlanner {
 public:
  MemoryPlanner(const ir::Graph& g, const Plan& plan, const MemoryPlanOptions& opts) : g_(g), plan_(plan), opts_(opts) {}

  MemoryPlan run() {
    m_.two_spaces = opts_.two_spaces;
    number_values();
    classify();
    schedule_transfers_and_liveness();
    assign_slots();
    return std::move(m_);
  }

 private:
  static size_t index(Space s) { return static_cast<size_t>(s); }
  bool constant_root(int32_t r) const { return opts_.constant_node[node_of_[r]]; }

  void number_values() {
    int32_t next = 0;
    for (const ir::Node& n : g_.nodes) {
      m_.first_value.push_back(next);
      next += static_cast<int32_t>(n.outputs.size());
    }
    m_.root.resize(next);
    m_.buffers.resize(next);
    node_of_.resize(next);
    for (int32_t n = 0; n < static_cast<int32_t>(g_.nodes.size()); ++n)
      for (size_t o = 0; o < g_.nodes[n].outputs.size(); ++o) {
        const int32_t id = m_.first_value[n] + static_cast<int32_t>(o);
        m_.root[id] = id;
        node_of_[id] = n;
        m_.buffers[id].bytes = bytes_of(g_.nodes[n].outputs[o]);
      }
    step_of_node_.assign(g_.nodes.size(), -1);
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      const PlanStep& step = plan_.steps[s];
      if (const auto* k = std::get_if<FusedKernel>(&step)) {
        // A node that several kernels compute (recompute.h) belongs to the first.
        for (int32_t n : k->nodes)
          if (step_of_node_[n] < 0) step_of_node_[n] = static_cast<int32_t>(s);
      } else {
        step_of_node_[step_node(step)] = static_cast<int32_t>(s);
      }
    }
    // Views share their input's bytes; the graph is in topological order, so the input's
    // root is known by then.
    for (int32_t n = 0; n < static_cast<int32_t>(g_.nodes.size()); ++n) {
      const int32_t s = step_of_node_[n];
      if (s >= 0 && std::holds_alternative<ViewStep>(plan_.steps[s]))
        m_.root[m_.first_value[n]] = m_.root[m_.id(g_.nodes[n].inputs.at(0))];
    }
  }

  void classify() {
    for (size_t id = 0; id < m_.buffers.size(); ++id) {
      BufferValue& b = m_.buffers[id];
      const int32_t n = node_of_[id];
      if (g_.nodes[n].is_var()) {
        b.kind = BufferValue::Kind::variable;
        b.home = opts_.two_spaces ? Space::host : Space::device;
        continue;
      }
      b.kind = opts_.constant_node[n] ? BufferValue::Kind::constant : BufferValue::Kind::intermediate;
      b.home = opts_.step_space[step_of_node_[n]];
    }
    for (ValueRef v : g_.outputs) {
      BufferValue& b = m_.buffers[m_.root_of(v)];
      if (b.kind != BufferValue::Kind::intermediate) continue;
      b.kind = BufferValue::Kind::output;
      b.output_index = m_.output_buffers++;
    }
  }

  // The last step that reads a root in a space (or the one that fills it there), and the
  // copies made, in plan order.
  void schedule_transfers_and_liveness() {
    m_.transfers_before.resize(plan_.steps.size());
    m_.constant_transfers_before.resize(plan_.steps.size());
    std::vector<std::array<bool, 2>> present(m_.buffers.size(), {false, false});
    for (size_t id = 0; id < m_.buffers.size(); ++id)
      if (m_.root[id] == static_cast<int32_t>(id)) present[id][index(m_.buffers[id].home)] = true;
    const auto use = [&](int32_t r, Space sp, int32_t s) {
      auto& live = m_.buffers[r].live[index(sp)];
      if (live.first < 0) live.first = s;
      live.second = std::max(live.second, s);
    };
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      const PlanStep& step = plan_.steps[s];
      if (std::holds_alternative<ViewStep>(step)) continue;
      const Space sp = opts_.step_space[s];
      const bool constant = opts_.constant_step[s];
      for (ValueRef v : step_reads(g_, step)) {
        const int32_t r = m_.root_of(v);
        if (!present[r][index(sp)]) {
          present[r][index(sp)] = true;
          if (constant_root(r)) {
            m_.constant_transfers_before[s].push_back({r, sp});
          } else {
            m_.transfers_before[s].push_back({r, sp});
            use(r, m_.buffers[r].home, static_cast<int32_t>(s));  // the copy reads it at home
          }
        }
        if (!constant && !constant_root(r)) use(r, sp, static_cast<int32_t>(s));
      }
      if (!constant)
        for (ValueRef w : step_writes(g_, step)) use(m_.id(w), sp, static_cast<int32_t>(s));
    }
    const int32_t end = static_cast<int32_t>(plan_.steps.size());
    for (size_t id = 0; id < m_.buffers.size(); ++id) {
      BufferValue& b = m_.buffers[id];
      if (b.kind == BufferValue::Kind::output && b.home == Space::device && opts_.two_spaces &&
          !present[id][index(Space::host)]) {
        m_.transfers_at_end.push_back({static_cast<int32_t>(id), Space::host});
        b.live[index(Space::device)].second = end;
      }
    }
  }

  bool needs_slot(int32_t r, Space sp) const {
    const BufferValue& b = m_.buffers[r];
    if (b.kind == BufferValue::Kind::constant) return false;
    if (b.kind == BufferValue::Kind::output && sp == Space::host) return false;  // its host copy is its output buffer
    if (sp != b.home) return !constant_root(r);  // a copy
    if (b.kind == BufferValue::Kind::variable) return false;
    // Outputs the host computes are written straight into their output buffer.
    return b.kind == BufferValue::Kind::intermediate || (b.kind == BufferValue::Kind::output && sp == Space::device && opts_.two_spaces);
  }

  // An input of kernel `k` (step s) whose slot output `out` can take: dead after this step,
  // read once, element for element as `out` is written, same element size. Not an output
  // a row kernel stores in its first pass (computed before its row op, row_fusion.h): its
  // later passes read their inputs again.
  int32_t in_place_input(const FusedKernel& k, const KernelOperand& out, int32_t s, Space sp,
                         const std::vector<bool>& taken) const {
    const size_t centre = row_op_index(g_, k);
    if (centre < k.nodes.size() &&
        std::find(k.nodes.begin(), k.nodes.begin() + static_cast<std::ptrdiff_t>(centre), out.value.node) !=
            k.nodes.begin() + static_cast<std::ptrdiff_t>(centre))
      return -1;
    const int32_t o = m_.id(out.value);
    for (const KernelOperand& in : k.inputs) {
      const int32_t r = m_.root_of(in.value);
      if (r != m_.id(in.value) || taken[r] || m_.buffers[r].slot[index(sp)] < 0) continue;
      if (m_.buffers[r].live[index(sp)].second != s) continue;
      if (in.shape != out.shape || !(in.map == out.map)) continue;
      if (ir::dtype_size(g_.type(in.value).dtype) != ir::dtype_size(g_.type(out.value).dtype)) continue;
      if (m_.buffers[r].bytes != m_.buffers[o].bytes) continue;
      const auto reads = std::count_if(k.inputs.begin(), k.inputs.end(),
                                       [&](const KernelOperand& x) { return m_.root_of(x.value) == r; });
      if (reads == 1) return r;
    }
    return -1;
  }

  // The residual of a _fused_conv or _fused_fc (step s), whose slot its output can take:
  // oneDNN's sum post-op adds what the output buffer holds (runtime/onednn/onednn_ops.cpp),
  // so over its own residual the op needs no copy. Dead after this step, not also the data.
  int32_t in_place_residual(int32_t node, int32_t s, Space sp, const std::vector<bool>& taken) const {
    const ir::Node& n = g_.nodes[node];
    if ((n.op != "_fused_conv" && n.op != "_fused_fc") || !n.attrs.get_bool("with_residual")) return -1;
    const ValueRef residual = n.inputs.back();
    const int32_t r = m_.root_of(residual);
    if (r != m_.id(residual) || taken[r] || m_.buffers[r].slot[index(sp)] < 0) return -1;
    if (m_.buffers[r].live[index(sp)].second != s || m_.buffers[r].bytes != m_.buffers[m_.id({node, 0})].bytes)
      return -1;
    const auto reads = std::count_if(n.inputs.begin(), n.inputs.end(), [&](ValueRef x) { return m_.root_of(x) == r; });
    return reads == 1 ? r : -1;
  }

  void assign_slots() {
    std::array<ArenaAllocator, 2> arena;
    const auto place = [&](int32_t r, Space sp, int64_t offset) {
      BufferValue& b = m_.buffers[r];
      b.slot[index(sp)] = offset;
      m_.intermediate_bytes += b.bytes;
      if (b.bytes > 0) m_.regions[index(sp)].push_back({static_cast<size_t>(offset), static_cast<size_t>(b.bytes)});
    };
    const auto allocate = [&](int32_t r, Space sp) {
      const int64_t bytes = m_.buffers[r].bytes;
      place(r, sp, bytes > 0 ? arena[index(sp)].allocate(bytes) : 0);
    };
    // Slots to free after each step: (root, space) whose last reader it is.
    std::vector<std::vector<std::pair<int32_t, Space>>> dies(plan_.steps.size() + 1);
    for (size_t id = 0; id < m_.buffers.size(); ++id)
      for (Space sp : {Space::device, Space::host})
        if (m_.root[id] == static_cast<int32_t>(id) && m_.buffers[id].live[index(sp)].second >= 0 && needs_slot(static_cast<int32_t>(id), sp))
          dies[m_.buffers[id].live[index(sp)].second].push_back({static_cast<int32_t>(id), sp});
    std::vector<bool> taken(m_.buffers.size(), false);  // slots handed over to an in-place output

    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      const PlanStep& step = plan_.steps[s];
      if (opts_.constant_step[s] || std::holds_alternative<ViewStep>(step)) continue;
      for (const Transfer& t : m_.transfers_before[s]) allocate(t.value, t.to);
      const Space sp = opts_.step_space[s];
      const auto* kernel = std::get_if<FusedKernel>(&step);
      for (ValueRef w : step_writes(g_, step)) {
        const int32_t r = m_.id(w);
        if (!needs_slot(r, sp)) continue;
        int32_t dead = -1;
        if (kernel) {
          const auto out = std::find_if(kernel->outputs.begin(), kernel->outputs.end(),
                                        [&](const KernelOperand& op) { return op.value == w; });
          dead = in_place_input(*kernel, *out, static_cast<int32_t>(s), sp, taken);
        } else if (const auto* external = std::get_if<ExternalStep>(&step)) {
          dead = in_place_residual(external->node, static_cast<int32_t>(s), sp, taken);
        }
        if (dead >= 0) {
          taken[dead] = true;
          ++m_.in_place;
          m_.buffers[r].in_place_of = dead;
          // The output owns the bytes now: they are freed when it dies (its entry in
          // `dies`), not when the input does.
          place(r, sp, m_.buffers[dead].slot[index(sp)]);
        } else {
          allocate(r, sp);
        }
      }
      for (const auto& [r, sp_dead] : dies[s]) {
        if (taken[r]) continue;
        const BufferValue& b = m_.buffers[r];
        if (b.bytes > 0) arena[index(sp_dead)].release(b.slot[index(sp_dead)], b.bytes);
      }
    }
    for (Space sp : {Space::device, Space::host}) m_.arena_bytes[index(sp)] = arena[index(sp)].high_water();
  }

  const ir::Graph& g_;
  const Plan& plan_;
  const MemoryPlanOptions& opts_;
  MemoryPlan m_;
  std::vector<int32_t> node_of_;       // per value id
  std::vector<int32_t> step_of_node_;  // per node; -1 for variables
};

}  // namespace

MemoryPlan plan_memory(const ir::Graph& g, const Plan& plan, const MemoryPlanOptions& opts) {
  if (opts.step_space.size() != plan.steps.size() || opts.constant_step.size() != plan.steps.size() ||
      opts.constant_node.size() != g.nodes.size())
    fail("internal: memory plan options do not match the plan ({} steps, {} nodes)", plan.steps.size(), g.nodes.size());
  return MemoryPlanner(g, plan, opts).run();
}

std::string print_memory_plan(const ir::Graph& g, const Plan& plan, const MemoryPlan& m) {
  std::string out;
  const char* names[] = {"device", "host"};
  for (size_t sp = 0; sp < (m.two_spaces ? 2u : 1u); ++sp)
    out += fmt::format("arena {}: {} bytes\n", names[sp], m.arena_bytes[sp]);
  out += fmt::format("{} bytes without reuse, {} in place\n", m.intermediate_bytes, m.in_place);
  for (int32_t n = 0; n < static_cast<int32_t>(g.nodes.size()); ++n)
    for (size_t o = 0; o < g.nodes[n].outputs.size(); ++o) {
      const ValueRef v{n, static_cast<int32_t>(o)};
      const int32_t id = m.id(v);
      if (m.root[id] != id) continue;
      const BufferValue& b = m.buffers[id];
      std::string where;
      for (size_t sp = 0; sp < 2; ++sp)
        if (b.slot[sp] >= 0)
          where += fmt::format("  {} [{}, {}) steps {}-{}", names[sp], b.slot[sp], b.slot[sp] + b.bytes, b.live[sp].first,
                               b.live[sp].second);
      if (b.kind == BufferValue::Kind::output) where += fmt::format("  output {}", b.output_index);
      if (b.kind == BufferValue::Kind::constant) where += "  constant";
      if (b.in_place_of >= 0) where += "  in place";
      if (!where.empty()) out += fmt::format("{}{}\n", value_name(g, v), where);
    }
  return out;
}

}  // namespace ampfuse::engine
