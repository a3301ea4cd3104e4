#include "stat/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace uroce::statview {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view text) : s_(text) {}

  std::string read(Json& out) {
    skip_space();
    if (!value(out, 0)) return error_;
    skip_space();
    if (i_ != s_.size()) return "text after the value at byte " + std::to_string(i_);
    return "";
  }

 private:
  bool fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at byte " + std::to_string(i_);
    return false;
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return fail("an unknown word");
    i_ += word.size();
    return true;
  }

  bool value(Json& out, int depth) {
    if (depth > kMaxJsonDepth) return fail("nesting deeper than " + std::to_string(kMaxJsonDepth));
    if (i_ >= s_.size()) return fail("the text ends before a value");
    const char c = s_[i_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out.type = Json::Type::kString;
      return string(out.text);
    }
    if (c == 't' || c == 'f') {
      out.type = Json::Type::kBool;
      out.boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      out.type = Json::Type::kNull;
      return literal("null");
    }
    return number(out);
  }

  bool object(Json& out, int depth) {
    out.type = Json::Type::kObject;
    ++i_;
    skip_space();
    if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
    for (;;) {
      skip_space();
      if (i_ >= s_.size() || s_[i_] != '"') return fail("an object key is not a string");
      std::string key;
      if (!string(key)) return false;
      skip_space();
      if (i_ >= s_.size() || s_[i_] != ':') return fail("no ':' after an object key");
      ++i_;
      skip_space();
      out.keys.push_back(std::move(key));
      out.items.emplace_back();
      if (!value(out.items.back(), depth + 1)) return false;
      skip_space();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
      return fail("no ',' or '}' in an object");
    }
  }

  bool array(Json& out, int depth) {
    out.type = Json::Type::kArray;
    ++i_;
    skip_space();
    if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
    for (;;) {
      skip_space();
      out.items.emplace_back();
      if (!value(out.items.back(), depth + 1)) return false;
      skip_space();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
      return fail("no ',' or ']' in an array");
    }
  }

  // Escapes are decoded; \u escapes below 0x80 become their character and
  // others '?': telemetry's names and values are ASCII.
  bool string(std::string& out) {
    ++i_;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("a control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out.push_back(e); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          if (i_ + 4 > s_.size()) return fail("a short \\u escape");
          unsigned code = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            code <<= 4;
            if (h >= '0' && h <= '9') code |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') code |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') code |= static_cast<unsigned>(h - 'A' + 10);
            else return fail("a bad \\u escape");
          }
          out.push_back(code < 0x80 ? static_cast<char>(code) : '?');
          break;
        }
        default: return fail("a bad escape in a string");
      }
    }
    return fail("a string that never ends");
  }

  bool number(Json& out) {
    const std::size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    const std::size_t digits = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    if (i_ == digits) return fail("not a JSON value");
    bool whole = s_[start] != '-';
    if (i_ < s_.size() && s_[i_] == '.') {
      whole = false;
      const std::size_t f = ++i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == f) return fail("a number with no digits after '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      whole = false;
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      const std::size_t e = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == e) return fail("a number with no exponent digits");
    }
    if (i_ - start > 64) return fail("a number of more than 64 characters");
    const std::string literal(s_.substr(start, i_ - start));
    out.type = Json::Type::kNumber;
    out.number = std::strtod(literal.c_str(), nullptr);
    if (whole) {
      // 20 digits may pass 2^64: only what strtoull reads without overflow.
      errno = 0;
      const unsigned long long v = std::strtoull(literal.c_str(), nullptr, 10);
      if (errno == 0) out.integer = v;
    }
    return true;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  std::string error_;
};

}  // namespace

const Json* Json::find(std::string_view key) const {
  if (type != Type::kObject) return nullptr;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &items[i];
  }
  return nullptr;
}

std::optional<std::uint64_t> Json::unsigned_member(std::string_view key) const {
  const Json* v = find(key);
  return v == nullptr ? std::nullopt : v->integer;
}

std::string parse_json(std::string_view text, Json& out) {
  out = Json{};
  return Reader(text).read(out);
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out.append(buf);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

void JsonWriter::start_value(std::string_view key) {
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
  if (!key.empty()) {
    out_.append(json_quote(key));
    out_.push_back(':');
  }
}

JsonWriter& JsonWriter::open_object(std::string_view key) {
  start_value(key);
  out_.push_back('{');
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::open_array(std::string_view key) {
  start_value(key);
  out_.push_back('[');
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::close_object() {
  out_.push_back('}');
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::close_array() {
  out_.push_back(']');
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view key, std::string_view json) {
  start_value(key);
  out_.append(json);
  return *this;
}

}  // namespace uroce::statview
