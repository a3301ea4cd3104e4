// A whole text file at once, for the tools' configuration options.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace uroce::app {

// The contents of the file at `path` into `text`; false if it cannot be read.
inline bool read_text_file(const std::string& path, std::string& text) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream s;
  s << in.rdbuf();
  text = s.str();
  return true;
}

}  // namespace uroce::app
