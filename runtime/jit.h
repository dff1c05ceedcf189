// The process's LLVM ORC JIT (LLJIT) for codegen::jit_target() (AMPFUSE_CPU).
//
// One instance per process, created on first use. Modules arrive optimized
// (codegen::build_kernel_module); the JIT turns them into machine code with the same target
// CPU, features and floating-point options (no FMA contraction), resolving calls into the
// C library (the f64 transcendental functions) from the running process. Thread-safe:
// compiles are serialized, looked-up code may be called from any thread.
#pragma once

#include "codegen/llvm_module.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ampfuse::runtime {

class Jit {
 public:
  static Jit& global();

  // Adds the module and returns the machine-code address of its `symbol`; the code lives
  // as long as the process. Throws ampfuse::Error when LLVM fails, with its message.
  void* compile(codegen::LlvmModule module);

  // compile() in two halves, so that the object file can be kept (runtime/disk_cache.h):
  // the module's machine code as a relocatable object, and that object linked into the
  // process (in a library of its own, so that objects from other processes whose symbols
  // repeat ours still link) with the address of its `symbol`. Both throw ampfuse::Error
  // when LLVM fails; load_object does for an object that does not link.
  std::string emit_object(codegen::LlvmModule module);
  void* load_object(std::string_view object, const std::string& symbol);

  // Everything besides the kernel that the machine code depends on: ampfuse and LLVM
  // versions, triple, CPU, features, code generation options. Part of the disk cache's key.
  const std::string& identity() const;

  // Modules compiled (or objects loaded) so far.
  int64_t modules() const;

  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

 private:
  Jit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampfuse::runtime
