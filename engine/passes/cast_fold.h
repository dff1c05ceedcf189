// cast_fold: removes casts that do not change values, and the AMP pass's own lossy pairs.
#pragma once

#include "ir/graph.h"

namespace ampfuse::engine {

// Simplifies the `Cast` and `amp_cast` nodes of `g` (types inferred first if missing):
//  - a cast to the type its input already has disappears;
//  - a cast of a cast whose first step loses nothing (lp16 -> f32, f32 -> f64, i8 -> i32,
//    bool -> anything...) reads the first cast's input instead: cast(cast(x, A), B) is
//    cast(x, B) then, and x itself when B is x's type (exact round trips: bf16->f32->bf16);
//  - a lossy f32 -> lp16 -> f32 pair is dropped only when amp_convert inserted both casts
//    (hint `__amp_inserted__`="1"): the AMP pass decides that rounding, nobody else's does;
//  - two casts of one value to one type become one (the first);
//  - casts nothing reads any more are deleted.
// Apart from the AMP pairs, what the interpreter computes is unchanged (NaN payloads
// aside, which docs/design.md leaves open). Returns the number of cast nodes removed.
int cast_fold(ir::Graph& g);

}  // namespace ampfuse::engine
