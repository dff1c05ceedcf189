#include "ir/op_registry.h"

namespace ampfuse::ir {

void register_tensor_ops(OpRegistry& r) {}

}  // namespace ampfuse::ir
