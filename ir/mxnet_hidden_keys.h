// MXNet's "hidden keys": symbol attributes that older files wrote beside op parameters.
#pragma once

#include "ir/graph.h"

#include <array>
#include <string_view>

namespace ampfuse::ir {

// The keys MXNet treats as symbol attributes (src/nnvm/legacy_json_util.cc, kHiddenKeys);
// files before 0.12 write them bare ("lr_mult") or with an input's name in front
// ("weight_lr_mult": the lr_mult of input "weight").
inline constexpr std::array<std::string_view, 6> kMxnetHiddenKeys = {
    "ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage", "profiler_scope"};

// Spells the hidden keys among the nodes' hints as MXNet 1.x loads and re-saves them, so that
// MXNet 1.9 accepts the exported file (it refuses a key it does not know on an op):
//  - a bare key becomes "__key__" on the same node ("ctx_group" -> "__ctx_group__");
//  - "<input>_<key>" on an op node moves to the variable that feeds the op's slot named
//    <input> (through casts AMP put in between), as "__key__", replacing the variable's own
//    as MXNet's loader does; with no such variable it is dropped, as MXNet drops it;
//  - on a variable, "<input>_<key>" stays as it is (MXNet keeps it; a variable takes any key).
// Hints already spelled "__key__" are left alone, so applying this twice changes nothing.
void upgrade_mxnet_hidden_keys(Graph& g);

}  // namespace ampfuse::ir
