// Counting what AMP conversion produced, the way MXNet's AMP tests count it.
//
// MXNet's check_amp_net_stats (tests/python/amp/common.py) hooks every op output while the
// converted net runs: an output in the target type is a low-precision tensor; an output of
// an `amp_cast` is a low-precision cast when it is in the target type and an "other" cast
// otherwise. Variables are not op outputs, so a param stored low (offline casting) counts
// as neither. On a static graph that is: every output of every op node (each once).
#pragma once

#include "ir/graph.h"

#include <map>
#include <ostream>
#include <set>
#include <utility>

namespace ampfuse::testing {

struct AmpCounts {
  int lp16_tensors = 0, lp16_casts = 0, other_casts = 0;
  friend bool operator==(const AmpCounts&, const AmpCounts&) = default;
  friend std::ostream& operator<<(std::ostream& os, const AmpCounts& c) {
    return os << "(" << c.lp16_tensors << ", " << c.lp16_casts << ", " << c.other_casts << ")";
  }
};

inline AmpCounts count_amp(const ir::Graph& g, ir::DType target) {
  AmpCounts c;
  for (const ir::Node& n : g.nodes) {
    if (n.is_var()) continue;
    for (const ir::TensorType& t : n.outputs) {
      const bool low = t.dtype == target;
      c.lp16_tensors += low;
      if (n.op == "amp_cast") (low ? c.lp16_casts : c.other_casts)++;
    }
  }
  return c;
}

// The (input, type) pairs cast more than once: empty when every tensor is cast at most once
// to each type.
inline std::set<std::pair<ir::ValueRef, ir::DType>> repeated_casts(const ir::Graph& g) {
  std::map<std::pair<ir::ValueRef, ir::DType>, int> seen;
  std::set<std::pair<ir::ValueRef, ir::DType>> repeated;
  for (const ir::Node& n : g.nodes)
    if (n.op == "amp_cast" || n.op == "Cast")
      if (++seen[{n.inputs.at(0), n.outputs.at(0).dtype}] > 1) repeated.insert({n.inputs[0], n.outputs[0].dtype});
  return repeated;
}

}  // namespace ampfuse::testing
