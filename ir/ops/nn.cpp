#include "ir/op_registry.h"

namespace ampfuse::ir {

void register_nn_ops(OpRegistry& r) {}

}  // namespace ampfuse::ir
