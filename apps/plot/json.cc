#include "plot/json.h"

#include <cstdlib>

namespace uroce::plotapp {
namespace {

constexpr int kMaxDepth = 64;

class Reader {
 public:
  explicit Reader(const std::string& text) : t_(text) {}

  bool document(JsonValue& out) {
    if (!value(out, 0)) return false;
    skip_space();
    return pos_ == t_.size() || fail("unexpected text after the document");
  }
  const std::string& error() const { return error_; }

 private:
  // Records the first fault only; the callers unwind with false.
  bool fail(const std::string& what) {
    if (error_.empty()) error_ = "bad JSON at offset " + std::to_string(pos_) + ": " + what;
    return false;
  }
  void skip_space() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < t_.size() && t_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool word(const char* w) {
    const std::string s(w);
    if (t_.compare(pos_, s.size(), s) != 0) return fail("expected a value");
    pos_ += s.size();
    return true;
  }

  bool value(JsonValue& v, int depth) {
    skip_space();
    v.offset = pos_;
    if (pos_ == t_.size()) return fail("unexpected end of the file");
    if (depth > kMaxDepth) return fail("nested too deeply");
    switch (t_[pos_]) {
      case '{': return object(v, depth);
      case '[': return array(v, depth);
      case '"': v.kind = JsonValue::Kind::kString; return string(v.string);
      case 't': v.kind = JsonValue::Kind::kBool; v.boolean = true; return word("true");
      case 'f': v.kind = JsonValue::Kind::kBool; return word("false");
      case 'n': return word("null");
      default: return number(v);
    }
  }

  bool object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kObject;
    ++pos_;
    if (eat('}')) return true;
    do {
      skip_space();
      if (pos_ == t_.size() || t_[pos_] != '"') return fail("expected a key in double quotes");
      std::string key;
      if (!string(key)) return false;
      if (!eat(':')) return fail("expected ':'");
      v.members.emplace_back(std::move(key), JsonValue{});
      if (!value(v.members.back().second, depth + 1)) return false;
    } while (eat(','));
    return eat('}') || fail("expected ',' or '}'");
  }

  bool array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kArray;
    ++pos_;
    if (eat(']')) return true;
    do {
      v.items.emplace_back();
      if (!value(v.items.back(), depth + 1)) return false;
    } while (eat(','));
    return eat(']') || fail("expected ',' or ']'");
  }

  bool hex4(unsigned& u) {
    if (pos_ + 4 > t_.size()) return fail("expected four hex digits");
    u = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char c = t_[pos_];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return fail("expected four hex digits");
      u = u * 16 + static_cast<unsigned>(d);
    }
    return true;
  }

  static void put_utf8(std::string& s, unsigned u) {
    if (u < 0x80) {
      s += static_cast<char>(u);
    } else if (u < 0x800) {
      s += static_cast<char>(0xc0 | u >> 6);
      s += static_cast<char>(0x80 | (u & 0x3f));
    } else if (u < 0x10000) {
      s += static_cast<char>(0xe0 | u >> 12);
      s += static_cast<char>(0x80 | (u >> 6 & 0x3f));
      s += static_cast<char>(0x80 | (u & 0x3f));
    } else {
      s += static_cast<char>(0xf0 | u >> 18);
      s += static_cast<char>(0x80 | (u >> 12 & 0x3f));
      s += static_cast<char>(0x80 | (u >> 6 & 0x3f));
      s += static_cast<char>(0x80 | (u & 0x3f));
    }
  }

  bool string(std::string& s) {
    ++pos_;  // the opening quote
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string");
      ++pos_;
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ == t_.size()) break;
      const char e = t_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': s += e; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          unsigned u = 0;
          if (!hex4(u)) return false;
          // A high surrogate takes the low one after it (RFC 8259, 7).
          if (u >= 0xd800 && u < 0xdc00 && t_.compare(pos_, 2, "\\u") == 0) {
            pos_ += 2;
            unsigned lo = 0;
            if (!hex4(lo)) return false;
            if (lo >= 0xdc00 && lo < 0xe000) {
              u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            } else {
              put_utf8(s, u);
              u = lo;
            }
          }
          put_utf8(s, u);
          break;
        }
        default: --pos_; return fail("unknown escape in a string");
      }
    }
    return fail("unterminated string");
  }

  bool number(JsonValue& v) {
    // The JSON grammar, which is stricter than strtod's: no '+', no hex,
    // no leading zeros, no bare '.', no inf or nan.
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (pos_ < t_.size() && t_[pos_] == '-') ++pos_;
    const std::size_t int_start = pos_;
    if (!digits()) return fail("expected a value");
    if (t_[int_start] == '0' && pos_ - int_start > 1) return pos_ = int_start, fail("leading zero in a number");
    if (pos_ < t_.size() && t_[pos_] == '.') {
      ++pos_;
      if (!digits()) return fail("expected a digit after '.'");
    }
    if (pos_ < t_.size() && (t_[pos_] == 'e' || t_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < t_.size() && (t_[pos_] == '+' || t_[pos_] == '-')) ++pos_;
      if (!digits()) return fail("expected a digit in the exponent");
    }
    v.kind = JsonValue::Kind::kNumber;
    v.number = std::strtod(t_.substr(start, pos_ - start).c_str(), nullptr);
    return true;
  }

  const std::string& t_;
  std::size_t pos_ = 0;
  std::string error_;
};

}  // namespace

const char* json_kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull: return "null";
    case JsonValue::Kind::kBool: return "a boolean";
    case JsonValue::Kind::kNumber: return "a number";
    case JsonValue::Kind::kString: return "a string";
    case JsonValue::Kind::kArray: return "an array";
    case JsonValue::Kind::kObject: return "an object";
  }
  return "?";
}

bool parse_json(const std::string& text, JsonValue& out, std::string& error) {
  Reader r(text);
  out = JsonValue{};
  if (r.document(out)) return true;
  error = r.error();
  return false;
}

}  // namespace uroce::plotapp
