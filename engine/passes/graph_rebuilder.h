// Rewriting a graph by copying it node by node into a new one.
//
// Passes that add or drop nodes walk the old graph in order and emit into a fresh one;
// the rebuilder keeps the map from old values to new ones so inputs can be remapped, and
// lets a pass redirect an old value to a replacement (cast folding does this).
#pragma once

#include "ir/graph.h"

#include <vector>

namespace ampfuse::engine {

class GraphRebuilder {
 public:
  explicit GraphRebuilder(const ir::Graph& old);

  // Appends `n` (whose inputs already refer to the new graph) and returns its index.
  int32_t emit(ir::Node n);
  // Copies old node `i` with remapped inputs; records where its outputs went.
  int32_t copy(int32_t i);
  // The new value that stands for old value `v` (throws if it was not emitted/mapped).
  ir::ValueRef map(ir::ValueRef v) const;
  // Makes old value `v` stand for new value `to` from now on.
  void set(ir::ValueRef v, ir::ValueRef to);
  bool has(ir::ValueRef v) const;
  // Remaps the old graph's outputs and returns the finished graph.
  ir::Graph finish();

  const ir::Graph& old() const { return old_; }
  ir::Graph& out() { return out_; }

 private:
  const ir::Graph& old_;
  ir::Graph out_;
  std::vector<std::vector<ir::ValueRef>> map_;
};

}  // namespace ampfuse::engine
