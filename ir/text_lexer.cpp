#include "ir/text_lexer.h"

#include "ir/error.h"

#include <charconv>

namespace ampfuse::ir::text {

namespace {

bool is_alpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_alpha(c) || is_digit(c) || c == '.'; }

class Lexer {
 public:
  Lexer(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    for (;;) {
      skip_space_and_comments();
      Token t;
      t.line = line_;
      t.col = col();
      if (pos_ >= text_.size()) {
        out.push_back(std::move(t));
        return out;
      }
      lex_one(t);
      out.push_back(std::move(t));
    }
  }

 private:
  int col() const { return static_cast<int>(pos_ - line_start_) + 1; }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      line_start_ = pos_ + 1;
    }
    ++pos_;
  }

  template <class... Args>
  [[noreturn]] void error(int line, int col, fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}:{}:{}: {}", source_, line, col, fmt::format(f, std::forward<Args>(args)...));
  }

  void skip_space_and_comments() {
    while (pos_ < text_.size()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        advance();
      } else if (c == '#' || (c == '/' && peek(1) == '/')) {
        while (pos_ < text_.size() && peek() != '\n') advance();
      } else {
        return;
      }
    }
  }

  void lex_one(Token& t) {
    const char c = peek();
    if (c == '%') {
      lex_value(t);
    } else if (c == '"') {
      t.kind = TokKind::string;
      t.text = lex_string();
    } else if (is_digit(c) || ((c == '-' || c == '+') && (is_digit(peek(1)) || peek(1) == '.' || is_alpha(peek(1)))) ||
               (c == '.' && is_digit(peek(1)))) {
      lex_number(t);
    } else if (is_alpha(c)) {
      t.kind = TokKind::ident;
      while (is_name_char(peek())) t.text += text_[pos_], advance();
    } else if (std::string_view("{}()[]=,:").find(c) != std::string_view::npos) {
      t.kind = TokKind::punct;
      t.text = std::string(1, c);
      advance();
    } else {
      error(line_, col(), "unexpected character '{}'", printable(c));
    }
  }

  static std::string printable(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return fmt::format("\\x{:02x}", u);
    return std::string(1, c);
  }

  void lex_value(Token& t) {
    t.kind = TokKind::value;
    advance();  // '%'
    if (peek() == '"') {
      t.text = lex_string();
    } else {
      while (is_name_char(peek())) t.text += text_[pos_], advance();
      if (t.text.empty()) error(t.line, t.col, "expected a name after '%'");
    }
    if (peek() != '~') return;
    const int tilde_col = col();
    advance();
    std::string digits;
    while (is_digit(peek())) digits += text_[pos_], advance();
    int n = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || n < 2)
      error(line_, tilde_col, "expected a number of 2 or more after '~' in '%{}~'", t.text);
    t.dup = n;
  }

  // Sign, then name characters; an exponent's sign is taken when the body is numeric
  // ("1e-05"), so "-inf" and "1.5e+20" are one token each.
  void lex_number(Token& t) {
    t.kind = TokKind::number;
    if (peek() == '-' || peek() == '+') t.text += text_[pos_], advance();
    const bool numeric = is_digit(peek()) || peek() == '.';
    while (pos_ < text_.size()) {
      const char c = peek();
      const bool exp_sign = numeric && (c == '-' || c == '+') && !t.text.empty() &&
                            (t.text.back() == 'e' || t.text.back() == 'E');
      if (!is_name_char(c) && !exp_sign) break;
      t.text += c;
      advance();
    }
  }

  std::string lex_string() {
    const int line = line_, start = col();
    advance();  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= text_.size() || peek() == '\n') error(line, start, "unterminated string");
      const char c = peek();
      if (c == '"') {
        advance();
        return out;
      }
      if (c != '\\') {
        out += c;
        advance();
        continue;
      }
      const int esc_col = col();
      advance();
      if (pos_ >= text_.size()) error(line, start, "unterminated string");
      const char e = peek();
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'x': {
          unsigned v = 0;
          const char* first = text_.data() + pos_ + 1;
          auto [p, ec] = std::from_chars(first, first + std::min<size_t>(2, text_.size() - pos_ - 1), v, 16);
          if (ec != std::errc() || p != first + 2) error(line_, esc_col, "'\\x' needs two hex digits");
          out += static_cast<char>(v);
          advance();
          advance();
          break;
        }
        default: error(line_, esc_col, "unknown escape '\\{}' in string", printable(e));
      }
      advance();
    }
  }

  std::string_view text_;
  std::string_view source_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view text, std::string_view source) {
  return Lexer(text, source).run();
}

bool is_bare_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!is_name_char(c)) return false;
  return true;
}

std::string escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
        else out += c;
    }
  }
  return out;
}

std::string one_line(std::string_view message) {
  std::string out;
  for (char c : message) {
    if (const auto u = static_cast<unsigned char>(c); u < 0x20 || u == 0x7f) out += escaped(std::string_view(&c, 1));
    else out += c;
  }
  return out;
}

std::string quote(std::string_view s) { return "\"" + escaped(s) + "\""; }

}  // namespace ampfuse::ir::text
