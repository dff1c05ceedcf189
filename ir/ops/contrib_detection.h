// MXNet's contrib detection ops (_contrib_box_nms, _contrib_box_decode,
// _contrib_ROIAlign): registered by
// OpRegistry::global() (ir/op_registry.cpp); docs/ops.md "Contrib detection ops".
#pragma once

#include "ir/op_registry.h"

namespace ampfuse::ir {

void register_contrib_detection_ops(OpRegistry& r);

}  // namespace ampfuse::ir
