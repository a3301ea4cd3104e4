// The JSON uroce-stat reads (DPDK telemetry's answers) and writes (--json).
// The reader trusts nothing: the other end may be any process, so nesting
// and sizes are bounded and every lookup says when a value is missing or
// of another type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::statview {

struct Json {
  enum class Type : std::uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  // A number written as a non-negative integer that fits 64 bits, exactly
  // (counters pass 2^53, where a double would round them).
  std::optional<std::uint64_t> integer;
  std::string text;
  std::vector<Json> items;        // an array's values, or an object's
  std::vector<std::string> keys;  // an object's keys, beside its items

  bool is_object() const { return type == Type::kObject; }
  bool is_array() const { return type == Type::kArray; }
  bool is_string() const { return type == Type::kString; }
  // The member called `key` of an object, or nullptr (also when not an object).
  const Json* find(std::string_view key) const;
  // The member `key` as an unsigned integer, if it is one.
  std::optional<std::uint64_t> unsigned_member(std::string_view key) const;
};

// Reads `text` (one whole JSON value, whitespace around it allowed) into
// `out`; "" or what is wrong with it, in a few words. Nesting deeper than
// kMaxJsonDepth is refused.
constexpr int kMaxJsonDepth = 16;
std::string parse_json(std::string_view text, Json& out);

// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);
// A finite double as JSON (null for NaN and infinities, which JSON lacks).
std::string json_number(double v);

// A JSON object or array written in order, for --json: the caller opens and
// closes containers; commas are placed here.
class JsonWriter {
 public:
  JsonWriter& open_object(std::string_view key = {});
  JsonWriter& open_array(std::string_view key = {});
  JsonWriter& close_object();
  JsonWriter& close_array();
  JsonWriter& raw(std::string_view key, std::string_view json);  // a value already in JSON
  JsonWriter& text(std::string_view key, std::string_view value) { return raw(key, json_quote(value)); }
  JsonWriter& number(std::string_view key, double value) { return raw(key, json_number(value)); }
  JsonWriter& integer(std::string_view key, std::uint64_t value) { return raw(key, std::to_string(value)); }
  JsonWriter& boolean(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
  JsonWriter& null(std::string_view key) { return raw(key, "null"); }
  const std::string& str() const { return out_; }

 private:
  void start_value(std::string_view key);

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
};

}  // namespace uroce::statview
