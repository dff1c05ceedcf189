// Tokens of the textual IR (ir/text_format.h), and the quoting both directions share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ampfuse::ir::text {

enum class TokKind {
  end,     // after the last token
  ident,   // [A-Za-z_][A-Za-z0-9_.]*: keywords, op names, dtypes, true/false/none/inf/nan
  value,   // %name or %"quoted name", with an optional ~N suffix (dup)
  string,  // "..." with escapes resolved
  number,  // as written, sign included: -3, 1.5e-05, -inf
  punct,   // one of { } ( ) [ ] = , :
};

struct Token {
  TokKind kind = TokKind::end;
  std::string text;  // name, unescaped string, number spelling or the punctuation char
  int dup = 1;       // value tokens: N of the ~N suffix, 1 when absent
  int line = 1;
  int col = 1;
};

// Splits `text` into tokens ending with one TokKind::end token. Throws ampfuse::Error
// "<source>:L:C: message" on a character that starts no token or an unterminated string.
std::vector<Token> tokenize(std::string_view text, std::string_view source);

// Names matching [A-Za-z0-9_.]+ print bare after '%'; anything else is quoted.
bool is_bare_name(std::string_view name);
// A double-quoted string that tokenize() reads back to `s`: escapes '"', '\\' and control
// characters (\n \t \r, else \xHH); other bytes, UTF-8 included, stay as they are.
std::string quote(std::string_view s);
// quote(s) without the quotes: for a name or value from a file inside a one-line message.
std::string escaped(std::string_view s);
// `message` with its control characters escaped as quote() does (quotes and backslashes
// kept): what a parser's error becomes, so that a name or value from a corrupt file cannot
// split the one line an error is (the fuzzers check every rejection for this).
std::string one_line(std::string_view message);

}  // namespace ampfuse::ir::text
