#include "sim/png.h"

#include <cstdlib>
#include <fstream>

#include <isa-l/igzip_lib.h>

#include "wire/crc32.h"

namespace uroce::simapp {
namespace {

void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
}

void chunk(std::vector<std::uint8_t>& out, const char type[4], const std::vector<std::uint8_t>& data) {
  put32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  // PNG's CRC is CRC-32 over the type and the data.
  put32(out, wire::crc32_slice8(0, out.data() + start, out.size() - start));
}

}  // namespace

Canvas::Canvas(int width, int height, Rgb bg) : w_(width), h_(height), px_(static_cast<std::size_t>(width * height * 3)) {
  for (std::size_t i = 0; i < px_.size(); i += 3) {
    px_[i] = bg.r;
    px_[i + 1] = bg.g;
    px_[i + 2] = bg.b;
  }
}

void Canvas::pixel(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  std::uint8_t* p = &px_[static_cast<std::size_t>((y * w_ + x) * 3)];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

void Canvas::line(int x0, int y0, int x1, int y1, Rgb c) {
  // Bresenham.
  const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
  const int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
  for (int err = dx + dy;;) {
    pixel(x0, y0, c);
    if (x0 == x1 && y0 == y1) return;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

void Canvas::rect(int x0, int y0, int x1, int y1, Rgb c) {
  line(x0, y0, x1, y0, c);
  line(x1, y0, x1, y1, c);
  line(x1, y1, x0, y1, c);
  line(x0, y1, x0, y0, c);
}

bool Canvas::write_png(const std::string& path, std::string& error) const {
  // Raw scanlines, each with filter type 0.
  std::vector<std::uint8_t> raw;
  for (int y = 0; y < h_; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), px_.begin() + y * w_ * 3, px_.begin() + (y + 1) * w_ * 3);
  }
  // The zlib stream, by ISA-L's deflate (level 0 needs no extra buffers).
  std::vector<std::uint8_t> z(raw.size() + raw.size() / 8 + 1024);
  isal_zstream s;
  isal_deflate_init(&s);
  s.gzip_flag = IGZIP_ZLIB;
  s.end_of_stream = 1;
  s.flush = NO_FLUSH;
  s.next_in = raw.data();
  s.avail_in = static_cast<std::uint32_t>(raw.size());
  s.next_out = z.data();
  s.avail_out = static_cast<std::uint32_t>(z.size());
  if (isal_deflate(&s) != COMP_OK || s.internal_state.state != ZSTATE_END) {
    error = "PNG compression failed";
    return false;
  }
  z.resize(s.total_out);
  std::vector<std::uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<std::uint8_t> ihdr;
  put32(ihdr, static_cast<std::uint32_t>(w_));
  put32(ihdr, static_cast<std::uint32_t>(h_));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, no filter, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", {});
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!f) {
    error = "cannot write " + path;
    return false;
  }
  return true;
}

}  // namespace uroce::simapp
