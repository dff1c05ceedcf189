// Every registered op's AMP classes, per target, against MXNet 1.9.1's own lists
// (tests/data/mxnet_amp_lists.txt, written by tests/mxnet/dump_amp_lists.py from
// mxnet/contrib/amp/lists/symbol_fp16.py and symbol_bf16.py).
#include "ir/op_registry.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ampfuse::testing {
namespace {

using ir::AmpClass;
using ir::DType;

struct MxnetClass {
  std::string cls;  // lowp fp32 neutral widest cond_fp32
  std::string cond_attr;
  std::vector<std::string> cond_values;
};

struct MxnetLists {
  std::map<std::string, MxnetClass> classes;
  std::map<std::string, std::vector<std::string>> fp32_params;  // op -> slot names
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// target ("fp16" / "bf16") -> its lists.
std::map<std::string, MxnetLists> read_lists(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::map<std::string, MxnetLists> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string target, cls, op, a, b;
    words >> target >> cls >> op >> a >> b;
    if (op.empty()) throw std::runtime_error(path + ":" + std::to_string(line_no) + ": too few words");
    MxnetLists& lists = out[target];
    if (cls == "fp32_params") {
      lists.fp32_params[op] = split_commas(a);
    } else if (cls == "cond_fp32") {
      lists.classes[op] = {cls, a, split_commas(b)};
    } else {
      lists.classes[op] = {cls, "", {}};
    }
  }
  return out;
}

const std::map<std::string, MxnetLists>& mxnet_lists() {
  static const auto lists = read_lists(std::string(AMPFUSE_TESTDATA_DIR) + "/mxnet_amp_lists.txt");
  return lists;
}

TEST(AmpLists, TheMxnetListsAreReadable) {
  const auto& lists = mxnet_lists();
  ASSERT_EQ(lists.size(), 2u);
  // A few entries that the rest of this file depends on being parsed right.
  EXPECT_EQ(lists.at("fp16").classes.at("RNN").cls, "lowp");
  EXPECT_EQ(lists.at("bf16").classes.at("RNN").cls, "fp32");
  EXPECT_EQ(lists.at("bf16").classes.at("Concat").cls, "neutral");
  EXPECT_EQ(lists.at("fp16").classes.at("Concat").cls, "widest");
  EXPECT_EQ(lists.at("bf16").classes.at("LeakyReLU").cond_values, (std::vector<std::string>{"elu", "selu"}));
  EXPECT_EQ(lists.at("bf16").fp32_params.at("BatchNorm"),
            (std::vector<std::string>{"gamma", "beta", "moving_mean", "moving_var"}));
}

// What MXNet says of op `def` for one target: the entry of its canonical name or of an
// alias (which must agree), or nullptr when MXNet lists none of its names.
const MxnetClass* mxnet_class_of(const ir::OpDef& def, const MxnetLists& lists, std::string* name) {
  const MxnetClass* found = nullptr;
  std::vector<std::string> names = {def.name};
  names.insert(names.end(), def.aliases.begin(), def.aliases.end());
  for (const std::string& n : names) {
    auto it = lists.classes.find(n);
    if (it == lists.classes.end()) continue;
    if (found && found->cls != it->second.cls)
      ADD_FAILURE() << "MXNet lists " << *name << " as " << found->cls << " but its alias " << n << " as "
                    << it->second.cls;
    if (!found) {
      found = &it->second;
      *name = n;
    }
  }
  return found;
}

TEST(AmpLists, EveryOpMxnetListsHasMxnetsClassForEachTarget) {
  const ir::OpRegistry& reg = ir::OpRegistry::global();
  int checked = 0;
  for (const auto& [target_name, target] : {std::pair{"fp16", DType::f16}, std::pair{"bf16", DType::bf16}}) {
    const MxnetLists& lists = mxnet_lists().at(target_name);
    for (const std::string& op : reg.names()) {
      const ir::OpDef& def = reg.get(op);
      std::string listed_as;
      const MxnetClass* want = mxnet_class_of(def, lists, &listed_as);
      if (!want) continue;
      ++checked;
      const AmpClass got = def.amp_class(target);
      EXPECT_EQ(ir::amp_class_name(got), want->cls)
          << target_name << ": " << op << " (MXNet: " << listed_as << ")";
      if (want->cls == "cond_fp32" && got == AmpClass::cond_fp32) {
        const auto& cond = target == DType::bf16 ? def.cond_fp32_bf16 : def.cond_fp32_fp16;
        ASSERT_TRUE(cond.has_value()) << op;
        EXPECT_EQ(cond->attr, want->cond_attr) << target_name << ": " << op;
        EXPECT_EQ(cond->values, want->cond_values) << target_name << ": " << op;
        // MXNet's pass leaves an op whose condition does not hold as it is (neutral).
        EXPECT_EQ(cond->otherwise, AmpClass::neutral) << target_name << ": " << op;
      }
    }
  }
  EXPECT_GT(checked, 100);  // the registry and the file met
}

TEST(AmpLists, InputsKeptInF32AreMxnetsUseFp32Params) {
  const ir::OpRegistry& reg = ir::OpRegistry::global();
  for (const std::string& op : reg.names()) {
    const ir::OpDef& def = reg.get(op);
    std::vector<std::string> kept;
    for (int slot : def.keep_fp32_inputs_bf16) kept.push_back(def.slot(slot).name);
    const auto& params = mxnet_lists().at("bf16").fp32_params;
    auto it = params.find(op);
    if (it != params.end()) {
      EXPECT_EQ(kept, it->second) << "bf16: " << op;
    } else {
      EXPECT_TRUE(kept.empty()) << "bf16: " << op << " keeps inputs in f32 that MXNet does not";
    }
  }
}

}  // namespace
}  // namespace ampfuse::testing
