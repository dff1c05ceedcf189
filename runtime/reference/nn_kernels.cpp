#include "runtime/reference/reference_kernels.h"

namespace ampfuse::runtime {

void register_nn_kernels() {}

}  // namespace ampfuse::runtime
