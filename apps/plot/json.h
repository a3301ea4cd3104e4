// A small JSON reader for uroce-plot's input file: the whole document into a
// tree, or the byte offset where it stops being JSON.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace uroce::plotapp {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;                                    // UTF-8
  std::vector<JsonValue> items;                          // kArray
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject, in document order
  std::size_t offset = 0;                                // where the value starts in the text
};

// The name of `kind` for messages ("a number", "an object").
const char* json_kind_name(JsonValue::Kind kind);

// Parses all of `text` (RFC 8259; \u escapes become UTF-8, nesting at most
// 64 deep) into `out`. False with `error` set to "bad JSON at offset N: ..."
// at the first byte that does not fit.
bool parse_json(const std::string& text, JsonValue& out, std::string& error);

}  // namespace uroce::plotapp
