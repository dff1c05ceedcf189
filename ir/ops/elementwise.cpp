#include "ir/op_registry.h"

namespace ampfuse::ir {

void register_elementwise_ops(OpRegistry& r) {}

}  // namespace ampfuse::ir
