// Whether a trace gets AMP, decided at the moment of the trace: amp::init, amp::Scope and
// the environment (MXNET_AMP_FUSE, AMPFUSE_AMP_DTYPE).
//
// MXNet's amp.init() patches functions once, cannot be undone and only warns when a model
// already exists (#18902); it has no off switch or context manager (#19488). Here nothing
// is patched: a hybridized block asks effective_options() each time it traces, so init()
// may come before or after blocks are made, and a Scope switches AMP on or off for a
// region of one thread.
//
// Precedence, highest first:
//   on/off: the innermost Scope of this thread  >  init() was called  >  MXNET_AMP_FUSE=1
//   target: the innermost Scope naming a dtype  >  init()'s target  >  AMPFUSE_AMP_DTYPE  >  bf16
//   op lists and excluded nodes: init()'s overrides (none without init)
#pragma once

#include "engine/passes/amp_options.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampfuse::amp {

// What amp::init may change besides the target: the lists of engine::AmpOptions.
struct Overrides {
  std::vector<std::string> lp16_ops, fp32_ops, widest_ops, neutral_ops;
  std::vector<engine::CondFp32Entry> conditional_fp32_ops;
  std::vector<std::string> excluded_nodes;
  bool cast_narrow = false;
  std::string layout;  // "" or "nhwc"
};

// Turns AMP on for every later trace in the process, with `target` (f16 or bf16) and the
// overrides. May be called again (the last call wins) and before or after blocks exist;
// blocks already compiled trace again on their next call. Throws ampfuse::Error for a bad
// target or list (validated here, through engine::AmpPolicy, not at the next trace).
void init(ir::DType target = ir::DType::bf16, Overrides overrides = {});
// Forgets init(): the environment decides again. (For tests and for turning AMP off.)
void reset();
bool initialized();

// The environment switches, read now. MXNET_AMP_FUSE: "1" on; unset, "" or "0" off.
// AMPFUSE_AMP_DTYPE: bf16 | bfloat16 | fp16 | float16 | f16; unset or "" = no choice.
// Throws ampfuse::Error naming the variable for any other value.
struct EnvSwitches {
  bool amp_fuse = false;
  std::optional<ir::DType> dtype;
};
EnvSwitches read_env();

// RAII: AMP on or off for the calling thread until the Scope ends. Scopes nest (the
// innermost decides) and are per thread: another thread never sees them. Keep them on the
// stack; one destroyed out of order leaves the others in force.
class Scope {
 public:
  explicit Scope(bool enabled);
  // On, with this target (f16 or bf16; throws otherwise).
  explicit Scope(ir::DType target);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  uint64_t id_;
};

// The AMP options a trace starting now on this thread gets (the precedence above), or
// nullopt for no AMP. Throws ampfuse::Error for a bad environment value.
std::optional<engine::AmpOptions> effective_options();

// A canonical text of the options ("" for nullopt): equal texts, equal conversions. What
// caches of traced graphs key on.
std::string fingerprint(const std::optional<engine::AmpOptions>& opts);

}  // namespace ampfuse::amp
