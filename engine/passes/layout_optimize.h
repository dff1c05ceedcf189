// layout_optimize: runs convolution regions channels-last, with transposes only at their edges.
#pragma once

#include "ir/graph.h"

#include <string_view>

namespace ampfuse::engine {

// Rewrites `g` (types inferred first if missing) so that Convolution and Deconvolution (the
// ops whose channels-last rule starts a region) run channels-last (`layout` "nhwc": NWC,
// NHWC or NDHWC by rank), as MXNet's layout optimization does:
//  - each such op gets transposes into channels-last on its data and weight and one back
//    to channels-first on its output;
//  - a transpose back to channels-first sinks below the ops that do not care about layout
//    (same-shape elementwise ops and casts, amp_multicast, BatchNorm and Concat with their
//    axis moved, Pooling with its layout switched: what each op's ir::ChannelsLastRule
//    declares) and a transpose into channels-last rises above them, whenever that does not
//    add transposes; so regions grow to take those ops in;
//  - a transpose of a transpose becomes one, an identity transpose disappears, and two
//    equal transposes of one value become one.
// Regions start only at convolutions: a Pooling or BatchNorm alone keeps its layout (it
// would cost two transposes for nothing). What the graph computes is unchanged up to the
// summation order of the channels-last kernels, and its outputs keep their names
// (ir::Graph::output_name). Returns whether anything changed. Throws
// ampfuse::Error for a layout other than "nhwc".
bool layout_optimize(ir::Graph& g, std::string_view layout);

}  // namespace ampfuse::engine
