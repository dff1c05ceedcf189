// The MXNet extension library (lib_api.h of the mxnet wheel): a partitioner named
// "ampfuse" and the stateful subgraph operator "_ampfuse_subgraph" that runs each region it
// claims through ampfuse (region.h). What `mx.library.load` sees:
//
//   supportedOps    every op node ampfuse's registry resolves, with attributes its schema
//                   parses (the registry decides; there is no list here)
//   reviewSubgraph  a region is accepted when ampfuse imports it (and, where MXNet has
//                   propagated shapes, infers its types); the AMP choice is written into
//                   the subgraph node's attributes
//   createOpState   the Region of the subgraph (one per JSON and AMP choice, kept across
//                   the states MXNet makes); Forward and Backward wrap MXNet's memory
//
// Options (optimize_for(..., backend='ampfuse', amp=...), hybridize(backend_opts=...)):
//   amp = off | bf16 | fp16   AMP inside the regions. Unset: the environment decides, as for
//                             ampfuse's own hybridized blocks: MXNET_AMP_FUSE=1 turns it on,
//                             with AMPFUSE_AMP_DTYPE's target (bf16 by default).
//   training = 0 | 1          which form of BatchNorm and Dropout the regions compute (region.h:
//                             lib_api does not pass MXNet's is_train to the operator). 1: batch
//                             statistics, moving statistics written back into the aux arrays,
//                             Dropout drops; 0: the inference form and its gradient. Unset: the
//                             inference form, and backward through BatchNorm/Dropout refused.
//                             ampfuse.mxnet sets it for Gluon blocks, one partition per form.
// lib_api has no bf16 type, so region boundaries stay f32 (or f16): a region's graph
// outputs keep their types through the AMP passes, the inside runs in bf16/fp16.
//
// AMPFUSE_MXNET_VERBOSE=1 prints each region's verdict and each compilation on stderr.
#include <mxnet/lib_api.h>

#include "engine/api/amp_scope.h"
#include "ir/error.h"
#include "ir/mxnet_json.h"
#include "ir/op_registry.h"
#include "region.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <cstdlib>
#include <iostream>

using namespace mxnet::ext;

namespace {

namespace af = ampfuse;

bool verbose() {
  const char* v = std::getenv("AMPFUSE_MXNET_VERBOSE");
  return v && std::string(v) == "1";
}

constexpr const char* kAmpAttr = "ampfuse_amp";  // on the subgraph node: off | bf16 | fp16
constexpr const char* kTrainingAttr = "ampfuse_training";  // on the subgraph node: 0 | 1, or absent

// The AMP target the options ask for: "off", "bf16" or "fp16".
std::string amp_choice(const std::unordered_map<std::string, std::string>& options) {
  auto it = options.find("amp");
  if (it == options.end()) {
    const af::amp::EnvSwitches env = af::amp::read_env();
    if (!env.amp_fuse) return "off";
    return env.dtype == af::ir::DType::f16 ? "fp16" : "bf16";
  }
  const std::string& v = it->second;
  if (v == "off" || v == "0" || v == "False" || v == "false" || v == "None") return "off";
  if (v == "bf16" || v == "bfloat16") return "bf16";
  if (v == "fp16" || v == "float16" || v == "f16") return "fp16";
  af::fail("ampfuse backend: option amp='{}': expected off, bf16 or fp16", v);
}

// The form the options ask for: "0", "1", or "" (unset).
std::string training_choice(const std::unordered_map<std::string, std::string>& options) {
  auto it = options.find("training");
  if (it == options.end()) return "";
  const std::string& v = it->second;
  if (v == "1" || v == "True" || v == "true") return "1";
  if (v == "0" || v == "False" || v == "false") return "0";
  af::fail("ampfuse backend: option training='{}': expected 0 or 1", v);
}

af::mxnet::RegionForm region_form(const std::string& choice) {
  if (choice == "1") return af::mxnet::RegionForm::training;
  if (choice == "0") return af::mxnet::RegionForm::inference;
  return af::mxnet::RegionForm::unknown;
}

std::optional<af::engine::AmpOptions> amp_options(const std::string& choice) {
  if (choice == "off") return std::nullopt;
  af::engine::AmpOptions o;
  o.target = choice == "fp16" ? af::ir::DType::f16 : af::ir::DType::bf16;
  return o;
}

std::optional<af::ir::DType> dtype_of(int mx) {
  switch (mx) {
    case kFloat32: return af::ir::DType::f32;
    case kFloat64: return af::ir::DType::f64;
    case kFloat16: return af::ir::DType::f16;
    case kUint8: return af::ir::DType::u8;
    case kInt32: return af::ir::DType::i32;
    case kInt8: return af::ir::DType::i8;
    case kInt64: return af::ir::DType::i64;
    default: return std::nullopt;
  }
}

// Whether ampfuse can run op node `n`: its registry resolves the op (or MXNet's alias of
// it) and the op's schema parses every attribute.
bool supported(const Node& n, std::string* why) {
  try {
    const af::ir::OpDef& def = af::ir::OpRegistry::global().resolve(n.op);
    std::map<std::string, std::string> raw;
    for (const auto& [k, v] : n.attrs)
      if (k.rfind("__", 0) != 0) raw.emplace(k, v);
    (void)af::ir::parse_attrs(def, raw);
    return true;
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
}

MXReturnValue supported_ops(const Graph* graph, std::vector<int>* ids,
                            const std::unordered_map<std::string, std::string>& options) {
  try {
    // A bad option fails here, before any region forms. MXNet reports only that the
    // partitioner failed, so the reason goes to stderr as well (ampfuse.mxnet checks the
    // options in Python first).
    try {
      (void)amp_choice(options);
      (void)training_choice(options);
    } catch (const std::exception& e) {
      std::cerr << e.what() << "\n";
      throw;
    }
    for (size_t i = 0; i < graph->size(); ++i) {
      const Node* n = graph->getNode(i);
      if (n->op == "null") continue;
      std::string why;
      if (supported(*n, &why))
        (*ids)[i] = -1;  // any region
      else if (verbose())
        std::cerr << "ampfuse: MXNet node '" << n->name << "' (" << n->op << ") stays with MXNet: " << why << "\n";
    }
    return MX_SUCCESS;
  } catch (const std::exception& e) {
    MX_ERROR_MSG << e.what();
    return MX_FAIL;
  }
}

// "[[1,3,224,224]]" / "[0]": MXNet's __ext_shape__ / __ext_dtype__ for output 0.
std::optional<std::pair<af::ir::Shape, af::ir::DType>> propagated_type(const Node& n) {
  auto s = n.attrs.find(MX_STR_SHAPE);
  auto d = n.attrs.find(MX_STR_DTYPE);
  if (s == n.attrs.end() || d == n.attrs.end()) return std::nullopt;
  const auto shapes = nlohmann::json::parse(s->second, nullptr, false);
  const auto dtypes = nlohmann::json::parse(d->second, nullptr, false);
  if (!shapes.is_array() || shapes.empty() || !shapes[0].is_array() || !dtypes.is_array() || dtypes.empty())
    return std::nullopt;
  af::ir::Shape shape;
  for (const auto& e : shapes[0]) {
    if (!e.is_number_integer() || e.get<int64_t>() <= 0) return std::nullopt;  // unknown extent
    shape.push_back(e.get<int64_t>());
  }
  auto dt = dtype_of(dtypes[0].is_number_integer() ? dtypes[0].get<int>() : -1);
  if (!dt) return std::nullopt;
  return std::pair{shape, *dt};
}

MXReturnValue review_subgraph(const Graph* subgraph, int subgraph_id, bool* accept,
                              const std::unordered_map<std::string, std::string>& options,
                              std::unordered_map<std::string, std::string>* attrs) {
  const std::string name = "ampfuse region " + std::to_string(subgraph_id);
  try {
    const std::string amp = amp_choice(options);
    const std::string training = training_choice(options);
    af::ir::MxnetImportOptions io;
    // With every input's shape propagated (optimize_for with example inputs), the region
    // must also type-check; otherwise it must import.
    io.infer = !subgraph->inputs.empty();
    for (const Node* in : subgraph->inputs) {
      auto t = propagated_type(*in);
      if (!t) {
        io.infer = false;
        break;
      }
      io.input_shapes[in->name] = t->first;
      io.input_dtypes[in->name] = t->second;
    }
    if (!io.infer) io.input_shapes.clear(), io.input_dtypes.clear();
    const af::ir::Graph g = af::ir::import_mxnet_json(subgraph->toString(), name, io);
    *accept = true;
    (*attrs)[kAmpAttr] = amp;
    if (!training.empty()) (*attrs)[kTrainingAttr] = training;
    if (verbose())
      std::cerr << "ampfuse: " << name << ": accepted, " << g.nodes.size() - subgraph->inputs.size()
                << " ops, amp " << amp << (training.empty() ? "" : ", training " + training)
                << (io.infer ? ", types checked" : "") << "\n";
  } catch (const std::exception& e) {
    *accept = false;  // MXNet runs the region itself
    if (verbose()) std::cerr << "ampfuse: " << name << ": rejected: " << e.what() << "\n";
  }
  return MX_SUCCESS;
}

class SubgraphOp : public CustomStatefulOp {
 public:
  explicit SubgraphOp(std::shared_ptr<af::mxnet::Region> region) : region_(std::move(region)) {}

  MXReturnValue Forward(std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                        const OpResource& res) override {
    try {
      std::vector<af::mxnet::RegionInput> in;
      in.reserve(inputs->size());
      for (size_t i = 0; i < inputs->size(); ++i) in.push_back({wrap((*inputs)[i], "input", i), (*inputs)[i].verID});
      std::vector<af::runtime::Tensor> out;
      for (size_t i = 0; i < outputs->size(); ++i) out.push_back(wrap((*outputs)[i], "output", i));
      const af::mxnet::RegionStats before = verbose() ? region_->stats() : af::mxnet::RegionStats{};
      if (region_->form() == af::mxnet::RegionForm::training) step_ = draw_step(res);
      region_->run(in, out, step_, &kept_);
      if (verbose()) {
        const af::mxnet::RegionStats after = region_->stats();
        if (after.compilations != before.compilations)
          std::cerr << "ampfuse: " << name() << ": compiled for a new input signature\n";
        if (after.constant_refreshes != before.constant_refreshes)
          std::cerr << "ampfuse: " << name() << ": weights written in place, their casts computed again\n";
      }
      return MX_SUCCESS;
    } catch (const std::exception& e) {
      MX_ERROR_MSG << "ampfuse: " << e.what();
      return MX_FAIL;
    }
  }

  // MXNet's stateful backward gets the head gradients, then the forward inputs, then the
  // forward outputs, and writes one gradient per forward input.
  MXReturnValue Backward(std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                         const OpResource& res) override {
    try {
      const size_t n_in = region_->input_names().size();
      if (outputs->size() != n_in || inputs->size() < n_in || (inputs->size() - n_in) % 2 != 0)
        af::fail("{}: backward got {} inputs and {} outputs, which is not (head gradients, {} inputs, outputs)",
                 name(), inputs->size(), outputs->size(), n_in);
      const size_t n_out = (inputs->size() - n_in) / 2;
      std::vector<af::runtime::Tensor> heads;
      for (size_t i = 0; i < n_out; ++i) heads.push_back(wrap((*inputs)[i], "head gradient", i));
      std::vector<af::mxnet::RegionInput> in;
      for (size_t i = 0; i < n_in; ++i)
        in.push_back({wrap((*inputs)[n_out + i], "input", i), (*inputs)[n_out + i].verID});
      std::vector<af::runtime::Tensor> grads;
      for (size_t i = 0; i < n_in; ++i) grads.push_back(wrap((*outputs)[i], "gradient", i));
      const af::mxnet::RegionStats before = verbose() ? region_->stats() : af::mxnet::RegionStats{};
      region_->backward(in, heads, grads, step_, std::move(kept_));
      if (verbose()) {
        const af::mxnet::RegionStats after = region_->stats();
        if (after.compilations != before.compilations)
          std::cerr << "ampfuse: " << name() << ": backward compiled for a new input signature\n";
        std::cerr << "ampfuse: " << name() << ": backward "
                  << (after.kept_backwards != before.kept_backwards ? "ran on the values its forward kept"
                                                                    : "computed the forward again")
                  << "\n";
      }
      return MX_SUCCESS;
    } catch (const std::exception& e) {
      MX_ERROR_MSG << "ampfuse: " << e.what();
      return MX_FAIL;
    }
  }

 private:
  std::string name() const {
    const char* form = region_->form() == af::mxnet::RegionForm::training    ? " (training form)"
                       : region_->form() == af::mxnet::RegionForm::inference ? " (inference form)"
                                                                             : "";
    return "region with inputs " + fmt::format("{}", fmt::join(region_->input_names(), ", ")) + form;
  }

  // The Dropout step of a training forward, drawn from MXNet's CPU random state (seeded by
  // mx.random.seed), so masks change every call and a seeded run repeats. Two calls draw
  // the same step (the same masks) with probability 2^-24.
  static uint32_t draw_step(const OpResource& res) {
    mx_cpu_rand_t* states = res.get_cpu_rand_states();
    if (!states) af::fail("ampfuse backend: MXNet gave the operator no CPU random state for Dropout's masks");
    return static_cast<uint32_t>((*states)() % af::mxnet::kDropoutSteps);
  }

  af::runtime::Tensor wrap(const MXTensor& t, const char* what, size_t i) const {
    if (t.stype != kDefaultStorage)
      af::fail("{}: {} {} is a sparse array; the ampfuse backend takes dense ones", name(), what, i);
    auto dt = dtype_of(t.dtype);
    if (!dt) af::fail("{}: {} {} has MXNet dtype {}, which ampfuse does not take", name(), what, i, int(t.dtype));
    af::ir::TensorType type{*dt, af::ir::Shape(t.shape.begin(), t.shape.end())};
    return af::runtime::Tensor::wrap(t.data_ptr, type);
  }

  std::shared_ptr<af::mxnet::Region> region_;
  // The Dropout step of the last forward through this state: MXNet runs a node's backward
  // on the state of its forward, and backward must draw the forward's masks again.
  uint32_t step_ = 0;
  // The training forward's values (Region::run), for the backward MXNet runs on this state;
  // used once, and replaced by the next forward.
  std::unique_ptr<af::mxnet::KeptForward> kept_;
};

// Regions by (AMP choice, form, subgraph JSON), shared by every operator state made for them.
// MXNet's imperative path (a CachedOp without static_alloc) creates the subgraph operator's
// state anew on every forward call; without this cache each call would import, plan and
// compile its region again. Bounded: the least recently created region goes first.
class RegionCache {
 public:
  std::shared_ptr<af::mxnet::Region> get(const std::string& json, const std::string& amp, const std::string& training) {
    std::lock_guard lock(mutex_);
    const std::string key = amp + "\n" + training + "\n" + json;
    auto it = regions_.find(key);
    if (it != regions_.end()) return it->second;
    auto region = std::make_shared<af::mxnet::Region>(json, "ampfuse region #" + std::to_string(made_++),
                                                      amp_options(amp), region_form(training));
    if (order_.size() >= kCapacity) {
      regions_.erase(order_.front());
      order_.erase(order_.begin());
    }
    order_.push_back(key);
    return regions_.emplace(key, std::move(region)).first->second;
  }

 private:
  static constexpr size_t kCapacity = 256;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<af::mxnet::Region>> regions_;
  std::vector<std::string> order_;
  int made_ = 0;
};

RegionCache& region_cache() {
  static auto* cache = new RegionCache;  // never destroyed: MXNet may free states at exit
  return *cache;
}

MXReturnValue create_op_state(const std::unordered_map<std::string, std::string>& attrs, const MXContext& ctx,
                              const std::vector<std::vector<unsigned int>>& in_shapes, const std::vector<int> in_types,
                              CustomStatefulOp** op) {
  try {
    if (ctx.dev_type != "cpu")
      af::fail("ampfuse backend: regions run on the CPU only; this one is on {}({})", ctx.dev_type, ctx.dev_id);
    auto json = attrs.find(MX_STR_SUBGRAPH_SYM_JSON);
    if (json == attrs.end()) af::fail("ampfuse backend: the subgraph node has no {} attribute", MX_STR_SUBGRAPH_SYM_JSON);
    auto amp = attrs.find(kAmpAttr);
    const std::string choice = amp == attrs.end() ? std::string("off") : amp->second;
    auto training = attrs.find(kTrainingAttr);
    const std::string form = training == attrs.end() ? std::string() : training->second;
    *op = CustomStatefulOp::create<SubgraphOp>(region_cache().get(json->second, choice, form));
    return MX_SUCCESS;
  } catch (const std::exception& e) {
    MX_ERROR_MSG << e.what();
    return MX_FAIL;
  }
}

}  // namespace

REGISTER_OP(_ampfuse_subgraph).setIsSubgraphOp().setCreateOpState(create_op_state, "cpu");

REGISTER_PARTITIONER(ampfuse)
    .addStrategy("fuse", "_ampfuse_subgraph")
    .setSupportedOps("fuse", supported_ops)
    .setReviewSubgraph("fuse", review_subgraph);

MXReturnValue initialize(int version) {
  // Built against the lib_api.h of MXNet 1.9 (MX_LIBRARY_VERSION 11).
  if (version < 10900) {
    MX_ERROR_MSG << "ampfuse: the MXNet backend needs MXNet 1.9 or later; this is " << version;
    return MX_FAIL;
  }
  return MX_SUCCESS;
}
