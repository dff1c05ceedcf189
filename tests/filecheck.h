// A small FileCheck for tests: match printed IR against CHECK lines, MLIR-style.
//
//   CHECK: text        the next line at or after the cursor containing the pattern
//   CHECK-NEXT: text   the line right after the previous match
//   CHECK-SAME: text   the rest of the previous match's line
//   CHECK-NOT: text    no line between the previous match and the next one contains it
//   CHECK-DAG: text    consecutive DAG lines match in any order after the cursor
//   CHECK-LABEL: text  like CHECK; a landmark
// Patterns are literal except {{regex}} and captures: [[NAME:regex]] binds NAME to what the
// regex matched, [[NAME]] must match the same text again.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace ampfuse::testing {

namespace filecheck_detail {

inline std::string escape_regex(const std::string& s) {
  static const std::string special = R"(\^$.|?*+()[]{})";
  std::string out;
  for (char c : s) {
    if (special.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

struct Pattern {
  std::regex re;
  std::vector<std::string> captures;  // names bound by the groups, in order
};

inline Pattern compile(const std::string& pat, const std::map<std::string, std::string>& vars) {
  std::string re;
  std::vector<std::string> caps;
  size_t i = 0;
  while (i < pat.size()) {
    if (pat.compare(i, 2, "{{") == 0) {
      size_t end = pat.find("}}", i + 2);
      re += "(?:" + pat.substr(i + 2, end - i - 2) + ")";
      i = end + 2;
    } else if (pat.compare(i, 2, "[[") == 0) {
      size_t end = pat.find("]]", i + 2);
      std::string body = pat.substr(i + 2, end - i - 2);
      size_t colon = body.find(':');
      if (colon == std::string::npos) {
        auto it = vars.find(body);
        re += escape_regex(it == vars.end() ? "<undefined " + body + ">" : it->second);
      } else {
        caps.push_back(body.substr(0, colon));
        re += "(" + body.substr(colon + 1) + ")";
      }
      i = end + 2;
    } else {
      size_t next = std::min(pat.find("{{", i), pat.find("[[", i));
      re += escape_regex(pat.substr(i, next == std::string::npos ? std::string::npos : next - i));
      i = next == std::string::npos ? pat.size() : next;
    }
  }
  return {std::regex(re), caps};
}

}  // namespace filecheck_detail

// Returns an empty string when `output` satisfies `checks`, else a message.
inline std::string filecheck(const std::string& output, const std::string& checks) {
  using namespace filecheck_detail;
  std::vector<std::string> lines;
  {
    std::istringstream in(output);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  struct Check {
    std::string kind, pattern;
  };
  std::vector<Check> list;
  {
    std::istringstream in(checks);
    for (std::string l; std::getline(in, l);) {
      size_t p = l.find("CHECK");
      if (p == std::string::npos) continue;
      size_t colon = l.find(':', p);
      std::string kind = l.substr(p, colon - p);
      std::string pat = l.substr(colon + 1);
      while (!pat.empty() && pat.front() == ' ') pat.erase(0, 1);
      while (!pat.empty() && pat.back() == ' ') pat.pop_back();
      list.push_back({kind, pat});
    }
  }
  std::map<std::string, std::string> vars;
  size_t cursor = 0;        // first line a CHECK may match
  long last = -1;           // line of the previous match
  size_t last_col = 0;      // column after the previous match (for SAME)
  std::vector<std::string> pending_not;
  auto fail_msg = [&](const std::string& why) {
    std::string m = why + "\n--- output ---\n" + output;
    return m;
  };
  auto match_at = [&](size_t line, size_t from, const std::string& pat, size_t* col_out) {
    Pattern p = compile(pat, vars);
    std::smatch m;
    std::string text = lines[line].substr(std::min(from, lines[line].size()));
    if (!std::regex_search(text, m, p.re)) return false;
    for (size_t k = 0; k < p.captures.size(); ++k) vars[p.captures[k]] = m[k + 1].str();
    if (col_out) *col_out = from + m.position(0) + m.length(0);
    return true;
  };
  auto check_nots = [&](size_t from, size_t to) -> std::string {
    for (const auto& pat : pending_not)
      for (size_t l = from; l < to && l < lines.size(); ++l)
        if (match_at(l, 0, pat, nullptr)) return fail_msg("CHECK-NOT: '" + pat + "' found on line " + std::to_string(l + 1) + ": " + lines[l]);
    pending_not.clear();
    return "";
  };
  for (size_t c = 0; c < list.size(); ++c) {
    const Check& ck = list[c];
    if (ck.kind == "CHECK-NOT") {
      pending_not.push_back(ck.pattern);
      continue;
    }
    if (ck.kind == "CHECK-SAME") {
      size_t col = 0;
      if (last < 0 || !match_at(last, last_col, ck.pattern, &col))
        return fail_msg("CHECK-SAME: '" + ck.pattern + "' not on line " + std::to_string(last + 1));
      last_col = col;
      continue;
    }
    if (ck.kind == "CHECK-DAG") {
      std::vector<std::string> group;
      while (c < list.size() && list[c].kind == "CHECK-DAG") group.push_back(list[c++].pattern);
      --c;
      size_t max_line = cursor;
      std::vector<bool> used(lines.size(), false);
      for (const auto& pat : group) {
        bool found = false;
        for (size_t l = cursor; l < lines.size() && !found; ++l)
          if (!used[l] && match_at(l, 0, pat, nullptr)) used[l] = true, found = true, max_line = std::max(max_line, l);
        if (!found) return fail_msg("CHECK-DAG: '" + pat + "' not found");
      }
      if (auto e = check_nots(cursor, max_line); !e.empty()) return e;
      last = static_cast<long>(max_line), cursor = max_line + 1, last_col = lines[max_line].size();
      continue;
    }
    const bool next = ck.kind == "CHECK-NEXT";
    if (ck.kind != "CHECK" && ck.kind != "CHECK-LABEL" && !next) return "unknown check kind " + ck.kind;
    size_t found = lines.size(), col = 0;
    for (size_t l = cursor; l < lines.size(); ++l) {
      if (match_at(l, 0, ck.pattern, &col)) {
        found = l;
        break;
      }
      if (next) break;
    }
    if (found == lines.size()) return fail_msg(ck.kind + ": '" + ck.pattern + "' not found after line " + std::to_string(cursor));
    if (next && static_cast<long>(found) != last + 1) return fail_msg("CHECK-NEXT: '" + ck.pattern + "' is not on the next line");
    if (auto e = check_nots(cursor, found); !e.empty()) return e;
    last = static_cast<long>(found), cursor = found + 1, last_col = col;
  }
  return check_nots(cursor, lines.size());
}

#define EXPECT_FILECHECK(output, checks)                          \
  do {                                                            \
    const std::string fc_error = ::ampfuse::testing::filecheck((output), (checks)); \
    EXPECT_TRUE(fc_error.empty()) << fc_error;                    \
  } while (0)

}  // namespace ampfuse::testing
