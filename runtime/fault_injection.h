// Injected faults, a test switch: AMPFUSE_FAULT makes one kind of failure happen on purpose
// so that tests (and a user checking a deployment) can see what each one does. Every fault
// must give a clear error or a reported fallback, never a wrong or partial result, and the
// process must go on serving the next call.
//
//   AMPFUSE_FAULT=KIND[:N][,KIND[:N]...]
//     compile      the JIT compile of a kernel fails (runtime/jit.cpp)
//     primitive    creating a oneDNN primitive fails (runtime/onednn/)
//     alloc        a memory allocation fails: arenas, device buffers, tensor storage
//     cache_write  a write to the on-disk kernel cache stops half-way
//   KIND alone strikes every time; KIND:N only the Nth time (counting from 1 in this process).
//
// The variable is read once, on the first check; tests replace it with ScopedFault.
#pragma once

#include <optional>
#include <string>

namespace ampfuse::runtime {

enum class Fault {
  compile,
  primitive,
  alloc,
  // The on-disk kernel cache: the writer (runtime/disk_cache.cpp) writes only half of the entry, as a crash or a
  // full disk would leave it, and the store fails with a warning.
  cache_write,
};

// "compile", "primitive", "alloc", "cache_write".
const char* fault_name(Fault f);

// Whether fault `f` happens now. Cheap when AMPFUSE_FAULT is unset (one atomic load).
// Throws ampfuse::Error for a malformed AMPFUSE_FAULT, quoting it.
bool fault_strikes(Fault f);

// "(injected fault: AMPFUSE_FAULT=...)": what an error caused by an injected fault ends with,
// so that nobody mistakes it for a real failure.
std::string injected_fault_note();

// Replaces AMPFUSE_FAULT with `spec` (same syntax; "" injects nothing) while it lives, counting
// from zero again; the previous setting and counts come back after. Not for concurrent use.
class ScopedFault {
 public:
  explicit ScopedFault(const std::string& spec);
  ~ScopedFault();
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;

 private:
  struct Saved;
  Saved* saved_ = nullptr;
};

}  // namespace ampfuse::runtime
