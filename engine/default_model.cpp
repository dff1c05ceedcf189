#include "engine/default_model.h"

#include "ir/error.h"

namespace ampfuse::engine {

ir::Graph build_default_model(int64_t batch) { fail("the default model is not built yet"); }

}  // namespace ampfuse::engine
