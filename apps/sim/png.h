// A small RGB canvas written as PNG (deflate by ISA-L, our CRC-32): enough
// for the scenario plots of uroce-sim and the charts of uroce-plot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uroce::simapp {

struct Rgb {
  std::uint8_t r, g, b;
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  void pixel(int x, int y, Rgb c);
  void line(int x0, int y0, int x1, int y1, Rgb c);
  void rect(int x0, int y0, int x1, int y1, Rgb c);  // outline
  void fill(int x0, int y0, int x1, int y1, Rgb c);  // inclusive
  // `s` in a 5x7 font scaled by `scale`, its top left corner at (x, y);
  // printable ASCII (anything else is a blank).
  void text(int x, int y, const std::string& s, Rgb c, int scale = 2);
  static int text_width(const std::string& s, int scale = 2);
  static int text_height(int scale = 2) { return 7 * scale; }
  // False with `error` if the file cannot be written.
  bool write_png(const std::string& path, std::string& error) const;
  int width() const { return w_; }
  int height() const { return h_; }

 private:
  int w_, h_;
  std::vector<std::uint8_t> px_;
};

}  // namespace uroce::simapp
