#include "codegen/library_calls.h"

#include "codegen/vector_math.h"
#include "ir/error.h"
#include "ir/special_functions.h"

#include <llvm/IR/Module.h>

namespace ampfuse::codegen {

using ir::ScalarOp;

std::string library_symbol(ScalarOp op, bool f64) {
  // erfinv is always computed in double (MXNet's algorithm), whatever the compute type.
  if (op == ScalarOp::erfinv) return std::string(ir::kErfinvSymbol);
  if (op == ScalarOp::lgamma) return std::string(f64 ? ir::kLgammaF64Symbol : ir::kLgammaF32Symbol);
  if (!ir::is_library_call(op)) fail("internal error: {} is not a library call", ir::scalar_op_name(op));
  // The other library ops are named as in <math.h>, float versions with an f suffix.
  const std::string base(ir::scalar_op_name(op));
  return f64 ? base : base + "f";
}

llvm::Value* emit_library_call(llvm::IRBuilder<>& b, ScalarOp op, llvm::Value* x) {
  const bool f64 = x->getType()->isDoubleTy();
  const bool widen = op == ScalarOp::erfinv && !f64;
  llvm::Type* arg_type = widen ? b.getDoubleTy() : x->getType();
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  llvm::FunctionCallee callee =
      m.getOrInsertFunction(library_symbol(op, f64), llvm::FunctionType::get(arg_type, {arg_type}, false));
  if (auto* fn = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    // Pure as far as a kernel can tell (errno is never read; the lgamma helpers keep the
    // sign to themselves), so LLVM may hoist a call on a loop-invariant value.
    fn->setDoesNotAccessMemory();
    fn->setDoesNotThrow();
    fn->setWillReturn();
  }
  llvm::Value* result = b.CreateCall(callee, {widen ? b.CreateFPExt(x, arg_type) : x});
  // double -> float rounds to nearest, as the interpreter's static_cast<float>.
  return widen ? b.CreateFPTrunc(result, x->getType()) : result;
}

}  // namespace ampfuse::codegen
