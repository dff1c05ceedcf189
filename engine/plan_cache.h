// The plan cache: lower()'s result (the graph after every pass, the fusion plan and the
// passes' statistics) kept in the disk cache (runtime/disk_cache.h) next to the kernels, so
// that a new process compiling a graph it compiled before skips the passes and planning.
//
// lower() is a pure function of the input graph (types included; weights are variables,
// never in the graph, so their values cannot change a plan), the LowerOptions, the op
// registry and pass code (both part of the ampfuse build: DiskCache::build_identity), and,
// through compute-in-f32, what oneDNN computes natively on this CPU. The entry's key holds
// all of these: the build identity, the JIT target and the host CPU's features, the oneDNN
// ISA limit variables, the device name, every option in words and the input graph in its
// binary form. The entry itself is a versioned binary form of the result, checked as it
// is read (every node and value index in range); DiskCache adds the checksum, the atomic
// write and the shared size limit with LRU eviction. A payload that does not read back is
// warned about once (DiskCache::reject) and the graph is lowered afresh, which replaces it.
#pragma once

#include "engine/lower.h"

#include <optional>
#include <string>
#include <string_view>

namespace ampfuse::runtime {
class DiskCache;
}  // namespace ampfuse::runtime

namespace ampfuse::engine {

// lower(g, opts), through `disk` when it is not null: the stored result when there is one
// (then *from_disk is set), else lowered now and stored. `context` holds what the key needs
// beyond g and opts: the device's name ("device cpu"). (opts.computes_in_f32, a function,
// is keyed by whether it is set; what it answers follows from the host CPU in the key.)
// Throws what lower() throws.
Lowered lower_with_plan_cache(ir::Graph g, const LowerOptions& opts, const std::string& context,
                              runtime::DiskCache* disk, bool* from_disk = nullptr);

// The binary forms, exposed for tests: serialize, and read back (nullopt with *error set
// when the bytes are not a whole, consistent plan of this format).
std::string serialize_lowered(const Lowered& l);
std::optional<Lowered> deserialize_lowered(std::string_view bytes, std::string* error);
// The cache key of lowering g with opts in `context` (see above).
std::string plan_cache_key(const ir::Graph& g, const LowerOptions& opts, const std::string& context);

}  // namespace ampfuse::engine
