// The process's LLVM ORC JIT (LLJIT) for codegen::jit_target() (AMPFUSE_CPU).
//
// One instance per process, created on first use. Modules arrive optimized
// (codegen::build_kernel_module); the JIT turns them into machine code with the same target
// CPU, features and floating-point options (no FMA contraction), resolving calls into the
// C library (the f64 transcendental functions) from the running process. Thread-safe:
// compiles are serialized, looked-up code may be called from any thread.
//
// Code is owned: each loaded object stays in the process while a copy of its JitCode's
// owner lives, and is removed (its memory unmapped) at the JIT's next compile or load after
// the last copy is gone. Near Linux's cap on memory maps (runtime/memory_maps.h) the JIT
// refuses to compile or load with an Error instead of letting LLVM abort the process.
#pragma once

#include "codegen/llvm_module.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ampfuse::runtime {

// Machine code the JIT loaded: the address of an object's symbol, and what keeps the object
// loaded (copy it into whatever calls the code).
struct JitCode {
  void* address = nullptr;
  std::shared_ptr<const void> owner;
};

class Jit {
 public:
  static Jit& global();

  // Adds the module and returns the machine-code address of its `symbol`. Throws
  // ampfuse::Error when LLVM fails, with its message, or near the map cap.
  JitCode compile(codegen::LlvmModule module);

  // compile() in two halves, so that the object file can be kept (runtime/disk_cache.h):
  // the module's machine code as a relocatable object, and that object linked into the
  // process (in a library of its own, so that objects from other processes whose symbols
  // repeat ours still link) with the address of its `symbol`. Both throw ampfuse::Error
  // when LLVM fails; load_object does for an object that does not link. Both throw, naming
  // the process's maps and the limit, when the maps are near it (jit_map_limit()).
  std::string emit_object(codegen::LlvmModule module);
  JitCode load_object(std::string_view object, const std::string& symbol);

  // Everything besides the kernel that the machine code depends on: ampfuse and LLVM
  // versions, triple, CPU, features, code generation options. Part of the disk cache's key.
  const std::string& identity() const;

  // Modules compiled (or objects loaded) so far, and of those the ones still loaded: not yet
  // released, or released but not yet removed (that waits for the next compile or load).
  int64_t modules() const;
  int64_t loaded_objects() const;

  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

 private:
  Jit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampfuse::runtime
