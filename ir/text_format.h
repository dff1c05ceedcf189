// The textual form of a graph: printer and parser that round-trip exactly.
//
//   graph {
//     %data = var input : f32[1,3,32,32]
//     %w = var param : f32[8,3,3,3]
//     %conv = Convolution(%data, %w) {kernel=[3,3], no_bias=true, num_filter=8} : f32[1,8,30,30]
//     %split = SliceChannel(%conv) {num_outputs=2} : (f32[1,4,30,30], f32[1,4,30,30])
//     %y = elemwise_add(%split, %split:1) : f32[1,4,30,30]
//     return %y
//   }
//
// `%name` is output 0 of the node called name, `%name:k` its output k. Names that are not
// [A-Za-z0-9_.]+ are quoted: %"a b". A name used by several nodes is written %name~2,
// %name~3 ... for its second, third ... node (the node's name is still "name"). Types after
// ':' are optional (a graph before inference). Hints print as hints={"__layout__":"NCHW"}.
// Comments run from '#' or "//" to the end of the line.
#pragma once

#include "ir/graph.h"

#include <string>
#include <string_view>

namespace ampfuse::ir {

std::string print_graph(const Graph& g);
// Throws ampfuse::Error with "line L, column C: ..." on malformed text, an unknown op or a
// reference to an undefined value. `source_name` prefixes messages (a file name).
Graph parse_graph(std::string_view text, std::string_view source_name = "<text>");

}  // namespace ampfuse::ir
