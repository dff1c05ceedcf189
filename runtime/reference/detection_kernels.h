// Reference kernels of the contrib detection ops (ir/ops/contrib_detection.h), registered
// by find_reference_kernel's first call (runtime/reference/registry.cpp).
#pragma once

namespace ampfuse::runtime {

void register_detection_kernels();

}  // namespace ampfuse::runtime
