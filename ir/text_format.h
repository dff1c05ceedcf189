// The textual form of a graph: printer and parser that round-trip exactly.
//
//   graph {
//     %data = var input : f32[1,3,32,32]
//     %w = var param : f32[8,3,3,3]
//     %conv = Convolution(%data, %w) {kernel=[3,3], no_bias=true, num_filter=8} : f32[1,8,30,30]
//     %split = SliceChannel(%conv) {num_outputs=2} : (f32[1,4,30,30], f32[1,4,30,30])
//     %y = elemwise_add(%split, %split:1) hints={"__layout__":"NCHW"} : f32[1,4,30,30]
//     return %y
//   }
//
// A statement is `%name = var ROLE [hints] [: TYPE]` (ROLE: input, param or aux) or
// `%name = Op(ARGS) [{ATTRS}] [hints] [: TYPE | : (TYPE, TYPE...)]`; the graph ends with
// `return` and zero or more values. Line breaks are not significant.
//
// `%name` is output 0 of the node called name, `%name:k` its output k. Names that are not
// [A-Za-z0-9_.]+ are quoted: %"a b". A name used by several nodes is written %name~2,
// %name~3 ... for its second, third ... node (the node's name is still "name"); the parser
// insists on that numbering so that every reference is unambiguous. Types after ':' are
// optional (a graph before inference). Hints print as hints={"__layout__":"NCHW"}.
// Comments run from '#' or "//" to the end of the line.
//
// Attribute values: 3, -1.5, 1e-05, inf, -inf, nan, true, false, none, "relu" (with the
// escapes \" \\ \n \t \r \xHH), f16 (a dtype), [3,3], [none,2] (kNoneIndex), [0.5,2.0], [].
// A literal is typed by its spelling and then by the op's schema (complete_attrs): an int
// where a float is declared widens and missing attributes take their defaults, so the
// printer writes every attribute, defaults included, to keep parse_graph(print_graph(g)) == g.
#pragma once

#include "ir/graph.h"

#include <string>
#include <string_view>

namespace ampfuse::ir {

std::string print_graph(const Graph& g);
// Throws ampfuse::Error "<source_name>:L:C: message" (line and column from 1) on malformed
// text, an unknown op, a reference to an undefined value or output, a wrong input or type
// count, or attributes that do not fit the op's schema.
Graph parse_graph(std::string_view text, std::string_view source_name = "<text>");
// The same with the ops of `ops` instead of OpRegistry::global() (tests with ops of their own).
class OpRegistry;
Graph parse_graph(std::string_view text, std::string_view source_name, const OpRegistry& ops);

}  // namespace ampfuse::ir
