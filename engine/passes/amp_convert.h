// amp_convert: inserts the casts that run a graph in mixed precision (MXNet's ReducePrecision).
#pragma once

#include "engine/passes/amp_options.h"
#include "ir/graph.h"

namespace ampfuse::engine {

// Rewrites `g` (types inferred, or inferable) to run in `opts.target` where the op classes
// allow, inserting `amp_cast` nodes marked with the hint `__amp_inserted__`="1":
//  - lowp ops read their float inputs in the target type, except the slots the registry
//    keeps in f32 (bf16 BatchNorm's gamma/beta/moving_*), aux slots and index slots
//    (InputSlot::index: Embedding's ids, labels), which keep their type in every op;
//  - fp32 ops, excluded nodes and conditional ops whose attribute matches read every input
//    in its original type;
//  - widest ops run low only when every float input already exists in low precision
//    (amp_multicast's rule: f32 if any input is f32), or, with `cast_narrow`, when any does;
//  - neutral ops run low when any float input already exists in low precision;
//  - amp_cast / Cast nodes already in the graph read whatever their input has become;
//    so does amp_multicast (OpDef::is_multicast), with no cast, its outputs taking the
//    type that gives (as MXNet's convert_symbol leaves it).
// "Exists in low precision" is decided for the whole graph at once (a fixed point over the
// neutral and widest ops), so the result does not depend on the order of nodes or of a
// tensor's consumers. Every (tensor, dtype) pair gets at most one cast, however many
// consumers share it (fan-out, shared weights, unrolled recurrent steps). Graph outputs keep
// their original types. With `cast_params_offline`, a param every consumer reads in low
// precision is stored in it instead (its variable's type changes, no cast). Source ops of the
// low-precision class (only by a user's override: MXNet's lists have _zeros, _ones and
// _full neutral for fp16, fp32 for bf16) that make a value exactly in any type (zeros,
// ones, an f32-exact fill) are made in the type their readers want instead of being cast. Types of the result are inferred and
// checked. Returns the number of casts inserted.
int amp_convert(ir::Graph& g, const AmpOptions& opts);

}  // namespace ampfuse::engine
