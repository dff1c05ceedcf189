#include "runtime/reference/custom_kernels.h"

#include <map>

#include "ir/custom_ops.h"
#include "ir/error.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

namespace ampfuse::runtime {

namespace {
std::map<std::string, CustomKernel, std::less<>>& table() {
  static std::map<std::string, CustomKernel, std::less<>> t;
  return t;
}
}  // namespace

void register_custom_kernel(std::string op_type, CustomKernel k) {
  if (!table().emplace(op_type, std::move(k)).second) fail("Custom kernel for op_type '{}' registered twice", op_type);
}

const CustomKernel* find_custom_kernel(std::string_view op_type) {
  find_reference_kernel("Custom");  // registers every kernel, the custom ones included, once
  auto it = table().find(op_type);
  return it == table().end() ? nullptr : &it->second;
}

namespace ref {

void register_custom_op_kernel() {
  register_reference_kernel("Custom", [](const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
    const std::string& op_type = node.attrs.get_string("op_type");
    const ir::Attrs typed = ir::custom_op_attrs(ir::custom_op(op_type), node.attrs);
    const CustomKernel* kernel = find_custom_kernel(op_type);
    if (!kernel) fail("Custom op_type '{}' has no reference kernel", op_type);
    (*kernel)(typed, in, out);
  });
}

}  // namespace ref

}  // namespace ampfuse::runtime
