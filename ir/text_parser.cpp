// The parser half of ir/text_format.h (the printer is text_format.cpp).
#include "ir/text_format.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/text_lexer.h"

#include <charconv>
#include <cmath>
#include <map>
#include <utility>

namespace ampfuse::ir {

using text::Token;
using text::TokKind;

namespace {

class Parser {
 public:
  Parser(std::string_view text, std::string_view source, const OpRegistry& ops)
      : source_(source), toks_(text::tokenize(text, source)), reg_(ops) {}

  Graph run() {
    expect_keyword("graph");
    expect_punct("{");
    while (!is_keyword(peek(), "return")) statement();
    next();  // return
    if (peek().kind == TokKind::value) {
      g_.outputs.push_back(value_ref());
      while (accept_punct(",")) g_.outputs.push_back(value_ref());
    }
    expect_punct("}");
    if (peek().kind != TokKind::end) error(peek(), "unexpected {} after the end of the graph", describe(peek()));
    return std::move(g_);
  }

 private:
  // --- tokens ---
  const Token& peek() const { return toks_[pos_]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (t.kind != TokKind::end) ++pos_;
    return t;
  }
  static bool is_keyword(const Token& t, std::string_view word) { return t.kind == TokKind::ident && t.text == word; }
  static bool is_punct(const Token& t, std::string_view p) { return t.kind == TokKind::punct && t.text == p; }
  bool accept_punct(std::string_view p) {
    if (!is_punct(peek(), p)) return false;
    next();
    return true;
  }
  void expect_punct(std::string_view p) {
    if (!accept_punct(p)) error(peek(), "expected '{}' but found {}", p, describe(peek()));
  }
  void expect_keyword(std::string_view word) {
    if (!is_keyword(peek(), word)) error(peek(), "expected '{}' but found {}", word, describe(peek()));
    next();
  }
  const Token& expect(TokKind kind, std::string_view what) {
    if (peek().kind != kind) error(peek(), "expected {} but found {}", what, describe(peek()));
    return next();
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokKind::end: return "the end of the text";
      case TokKind::ident: return fmt::format("'{}'", t.text);
      case TokKind::value: return fmt::format("'{}'", spell_value(t));
      case TokKind::string: return fmt::format("string {}", text::quote(t.text));
      case TokKind::number: return fmt::format("number {}", t.text);
      case TokKind::punct: return fmt::format("'{}'", t.text);
    }
    return "?";
  }
  static std::string spell_value(const Token& t) {
    std::string s = "%" + (text::is_bare_name(t.text) ? t.text : text::quote(t.text));
    if (t.dup > 1) s += fmt::format("~{}", t.dup);
    return s;
  }

  template <class... Args>
  [[noreturn]] void error(const Token& at, fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}:{}:{}: {}", source_, at.line, at.col, fmt::format(f, std::forward<Args>(args)...));
  }
  // Runs fn(); an ampfuse::Error from it (the registry's, complete_attrs') gets the
  // location of `at` in front.
  template <class Fn>
  decltype(auto) located(const Token& at, Fn&& fn) const {
    return with_context(fmt::format("{}:{}:{}", source_, at.line, at.col), std::forward<Fn>(fn));
  }

  // --- statements ---
  void statement() {
    const Token& lhs = expect(TokKind::value, "a definition '%name = ...' or 'return'");
    const int count = names_[lhs.text];
    if (lhs.dup != count + 1) {
      if (count == 0)
        error(lhs, "'{}' is the first node called {}: write it without '~{}'", spell_value(lhs),
              text::quote(lhs.text), lhs.dup);
      error(lhs, "'{}' is defined already; node {} called {} is written '{}'", spell_value(lhs), count + 1,
            text::quote(lhs.text), spell_value(Token{TokKind::value, lhs.text, count + 1}));
    }
    expect_punct("=");
    Node n;
    n.name = lhs.text;
    const Token& op = peek();
    if (op.kind != TokKind::ident && op.kind != TokKind::string)
      error(op, "expected an op name or 'var' but found {}", describe(op));
    next();
    const int num_outputs = op.kind == TokKind::ident && op.text == kVarOp ? var_rest(n) : op_rest(n, op);
    ++names_[lhs.text];
    defined_[{lhs.text, lhs.dup}] = {g_.add(std::move(n)), num_outputs};
  }

  // `ROLE [hints] [: TYPE]` after `var`. Returns the output count.
  int var_rest(Node& n) {
    n.op = kVarOp;
    n.role = var_role();
    hints(n);
    if (accept_punct(":")) n.outputs.push_back(tensor_type());
    return 1;
  }

  // `(ARGS) [{ATTRS}] [hints] [: TYPES]` after the op name. Returns the output count.
  int op_rest(Node& n, const Token& op) {
    const OpDef& def = located(op, [&]() -> const OpDef& { return reg_.resolve(op.text); });
    n.op = def.name;  // canonical: an alias (`cast`) ends here
    const std::string label = fmt::format("node '{}' ({})", n.name, n.op);
    expect_punct("(");
    if (!is_punct(peek(), ")")) {
      n.inputs.push_back(value_ref());
      while (accept_punct(",")) n.inputs.push_back(value_ref());
    }
    expect_punct(")");
    n.attrs = attrs(def, label, op);
    const size_t ins = n.inputs.size();
    const int expected = def.input_count(n.attrs);
    if (static_cast<int>(ins) != expected)
      error(op, "{}: {} input{} given, {} expected", label, ins, ins == 1 ? "" : "s", expected);
    const int outs = def.output_count(n.attrs);
    hints(n);
    if (accept_punct(":")) {
      const Token& at = peek();
      n.outputs = tensor_types();
      const size_t types = n.outputs.size();
      if (static_cast<int>(types) != outs)
        error(at, "{}: {} type{} given for {} output{}", label, types, types == 1 ? "" : "s", outs,
              outs == 1 ? "" : "s");
    }
    return outs;
  }

  VarRole var_role() {
    const Token& t = expect(TokKind::ident, "a variable role (input, param or aux)");
    for (VarRole r : {VarRole::input, VarRole::param, VarRole::aux})
      if (t.text == var_role_name(r)) return r;
    error(t, "unknown variable role '{}' (expected input, param or aux)", t.text);
  }

  ValueRef value_ref() {
    const Token& t = expect(TokKind::value, "a value '%name'");
    auto it = defined_.find({t.text, t.dup});
    if (it == defined_.end()) error(t, "undefined value '{}'", spell_value(t));
    const auto [node, outputs] = it->second;
    if (!is_punct(peek(), ":")) return {node, 0};
    next();
    const Token& idx = expect(TokKind::number, "an output index after ':'");
    const int64_t k = int_literal(idx);
    if (k < 0 || k >= outputs)
      error(idx, "'{}' has {} output{}, so there is no output {}", spell_value(t), outputs, outputs == 1 ? "" : "s", k);
    return {node, static_cast<int32_t>(k)};
  }

  // --- attributes and hints ---
  Attrs attrs(const OpDef& def, const std::string& label, const Token& op) {
    Attrs given;
    if (accept_punct("{")) {
      while (!is_punct(peek(), "}")) {
        const Token& key = peek();
        if (key.kind != TokKind::ident && key.kind != TokKind::string)
          error(key, "expected an attribute name but found {}", describe(key));
        next();
        if (given.has(key.text)) error(key, "{}: attribute '{}' is given twice", label, key.text);
        expect_punct("=");
        given.set(key.text, attr_value());
        if (!accept_punct(",")) break;
      }
      expect_punct("}");
    }
    return located(op, [&] { return with_context(label, [&] { return complete_attrs(def, std::move(given)); }); });
  }

  // A literal typed by its spelling; complete_attrs then widens ints where floats are
  // declared and checks the kind against the schema.
  AttrValue attr_value() {
    const Token& t = next();
    switch (t.kind) {
      case TokKind::string: return t.text;
      case TokKind::number: return number(t);
      case TokKind::ident:
        if (t.text == "none") return std::monostate{};
        if (t.text == "true") return true;
        if (t.text == "false") return false;
        if (t.text == "inf" || t.text == "nan") return number(t);
        if (auto d = parse_dtype(t.text)) return *d;
        error(t, "'{}' is not a value (strings are quoted: \"{}\")", t.text, t.text);
      case TokKind::punct:
        if (t.text == "[") return list();
        break;
      default: break;
    }
    error(t, "expected an attribute value but found {}", describe(t));
  }

  AttrValue list() {
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool is_float = false;
    while (!is_punct(peek(), "]")) {
      const Token& t = next();
      if (is_keyword(t, "none")) {
        if (is_float) error(t, "'none' can only be an entry of an int list");
        ints.push_back(kNoneIndex);
      } else if (t.kind == TokKind::number || is_keyword(t, "inf") || is_keyword(t, "nan")) {
        AttrValue v = number(t);
        if (const double* d = std::get_if<double>(&v)) {
          if (!is_float) {
            for (int64_t i : ints) {
              if (i == kNoneIndex) error(t, "'none' can only be an entry of an int list");
              floats.push_back(static_cast<double>(i));
            }
            is_float = true;
          }
          floats.push_back(*d);
        } else {
          const int64_t i = std::get<int64_t>(v);
          if (is_float) floats.push_back(static_cast<double>(i));
          else ints.push_back(i);
        }
      } else {
        error(t, "expected a number or 'none' in a list but found {}", describe(t));
      }
      if (!accept_punct(",")) break;
    }
    expect_punct("]");
    if (is_float) return floats;
    return ints;
  }

  // Digits only (after the sign) is an int; anything else must read fully as a double.
  AttrValue number(const Token& t) const {
    std::string_view s = t.text;
    const bool negative = !s.empty() && s.front() == '-';
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
    if (s == "inf" || s == "infinity") return negative ? -INFINITY : INFINITY;
    if (s == "nan") return negative ? -NAN : NAN;
    if (!s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos) return int_literal(t);
    std::string_view full = t.text;
    if (full.front() == '+') full.remove_prefix(1);
    double d = 0;
    auto [p, ec] = std::from_chars(full.data(), full.data() + full.size(), d);
    if (ec == std::errc::result_out_of_range) error(t, "number {} is out of the range of a double", t.text);
    if (ec != std::errc() || p != full.data() + full.size()) error(t, "malformed number '{}'", t.text);
    return d;
  }

  int64_t int_literal(const Token& t) const {
    std::string_view s = t.text;
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) error(t, "integer {} does not fit in 64 bits", t.text);
    if (ec != std::errc() || p != s.data() + s.size()) error(t, "expected an integer but found '{}'", t.text);
    return v;
  }

  void hints(Node& n) {
    if (!is_keyword(peek(), "hints")) return;
    next();
    expect_punct("=");
    expect_punct("{");
    while (!is_punct(peek(), "}")) {
      const Token& key = expect(TokKind::string, "a quoted hint name");
      if (n.hints.count(key.text)) error(key, "hint {} is given twice", text::quote(key.text));
      expect_punct(":");
      n.hints[key.text] = expect(TokKind::string, "a quoted hint value").text;
      if (!accept_punct(",")) break;
    }
    expect_punct("}");
  }

  // --- types ---
  std::vector<TensorType> tensor_types() {
    if (!accept_punct("(")) return {tensor_type()};
    std::vector<TensorType> types{tensor_type()};
    while (accept_punct(",")) types.push_back(tensor_type());
    expect_punct(")");
    return types;
  }

  TensorType tensor_type() {
    const Token& t = expect(TokKind::ident, "a type such as f32[1,3]");
    TensorType type;
    if (auto d = parse_dtype(t.text)) type.dtype = *d;
    else error(t, "unknown element type '{}'", t.text);
    expect_punct("[");
    while (!is_punct(peek(), "]")) {
      const Token& e = expect(TokKind::number, "an extent");
      const int64_t v = int_literal(e);
      if (v < 0) error(e, "negative extent {}", v);
      type.shape.push_back(v);
      if (!accept_punct(",")) break;
    }
    expect_punct("]");
    return type;
  }

  std::string_view source_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  const OpRegistry& reg_;
  Graph g_;
  std::map<std::string, int> names_;                                  // nodes defined per name
  std::map<std::pair<std::string, int>, std::pair<int32_t, int>> defined_;  // (name, ~N) -> node, outputs
};

}  // namespace

Graph parse_graph(std::string_view text, std::string_view source_name) {
  return parse_graph(text, source_name, OpRegistry::global());
}

Graph parse_graph(std::string_view text, std::string_view source_name, const OpRegistry& ops) {
  try {
    return Parser(text, source_name, ops).run();
  } catch (const Error& e) {
    // Quoted names and string values may hold line breaks (%"a\nb", "re\nlu").
    throw Error(text::one_line(e.what()));
  }
}

}  // namespace ampfuse::ir
