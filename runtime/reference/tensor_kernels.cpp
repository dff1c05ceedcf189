#include "runtime/reference/reference_kernels.h"

namespace ampfuse::runtime {

void register_tensor_kernels() {}

}  // namespace ampfuse::runtime
