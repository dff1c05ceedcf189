#include "runtime/reference/reference_kernels.h"

#include "ir/error.h"
#include "runtime/reference/detection_kernels.h"
#include "ir/op_registry.h"

#include <map>
#include <mutex>
#include <string>

namespace ampfuse::runtime {

namespace {
std::map<std::string, ReferenceKernel, std::less<>>& table() {
  static std::map<std::string, ReferenceKernel, std::less<>> t;
  return t;
}
}  // namespace

void register_reference_kernel(std::string op, ReferenceKernel k) {
  // Graphs hold canonical op names only (ir/op_registry.h): a kernel under an alias would never run.
  if (!ir::OpRegistry::global().find(op)) fail("reference kernel for '{}', which is not an op's canonical name", op);
  if (!table().emplace(op, std::move(k)).second) fail("reference kernel for '{}' registered twice", op);
}

const ReferenceKernel* find_reference_kernel(std::string_view op) {
  static std::once_flag once;
  std::call_once(once, [] {
    register_nn_kernels();
    register_tensor_kernels();
    register_index_kernels();
    register_tensor_backward_kernels();
    register_detection_kernels();
  });
  auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

}  // namespace ampfuse::runtime
