#include "pixels.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

namespace image {
namespace {

bool ReadAll(const std::string& path, std::vector<uint8_t>* bytes, std::string* error) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (f == nullptr) {
    *error = path + ": cannot open (" + std::strerror(errno) + ")";
    return false;
  }
  uint8_t buffer[1 << 16];
  int n = 0;
  while ((n = gzread(f, buffer, sizeof(buffer))) > 0) bytes->insert(bytes->end(), buffer, buffer + n);
  int code = 0;
  const char* message = gzerror(f, &code);
  gzclose(f);
  if (n < 0 || code < 0) {
    *error = path + ": " + (message ? message : "read error");
    return false;
  }
  return true;
}

uint32_t BigEndian32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

}  // namespace

bool ReadIdxImages(const std::string& path, std::vector<uint8_t>* images, size_t* count,
                   std::string* error) {
  std::vector<uint8_t> bytes;
  if (!ReadAll(path, &bytes, error)) return false;
  if (bytes.size() < 16 || BigEndian32(bytes.data()) != 0x00000803) {
    *error = path + ": not an IDX file of 28×28 byte images (magic 0x00000803 expected)";
    return false;
  }
  const uint32_t n = BigEndian32(&bytes[4]);
  if (BigEndian32(&bytes[8]) != kSide || BigEndian32(&bytes[12]) != kSide) {
    *error = path + ": images are " + std::to_string(BigEndian32(&bytes[8])) + "×" +
             std::to_string(BigEndian32(&bytes[12])) + ", expected 28×28";
    return false;
  }
  if (bytes.size() - 16 != uint64_t{n} * kPixels) {
    *error = path + ": header says " + std::to_string(n) + " images, the file holds " +
             std::to_string(bytes.size() - 16) + " bytes of pixels (truncated?)";
    return false;
  }
  images->assign(bytes.begin() + 16, bytes.end());
  *count = n;
  return true;
}

bool WritePngGrid(const std::string& path, const std::vector<uint8_t>& tiles, int columns,
                  int scale, std::string* error) {
  const int count = static_cast<int>(tiles.size() / kPixels);
  if (count == 0 || columns <= 0 || scale <= 0) {
    *error = path + ": nothing to write";
    return false;
  }
  const int rows = (count + columns - 1) / columns;
  const int cell = kSide * scale + 2;
  const int width = columns * cell + 2, height = rows * cell + 2;
  std::vector<uint8_t> canvas(static_cast<size_t>(width) * height, 96);  // grey border
  for (int i = 0; i < count; ++i) {
    const int x0 = 2 + (i % columns) * cell, y0 = 2 + (i / columns) * cell;
    for (int y = 0; y < kSide * scale; ++y)
      for (int x = 0; x < kSide * scale; ++x)
        canvas[static_cast<size_t>(y0 + y) * width + x0 + x] =
            tiles[static_cast<size_t>(i) * kPixels + (y / scale) * kSide + x / scale];
  }
  if (!stbi_write_png(path.c_str(), width, height, 1, canvas.data(), width)) {
    *error = path + ": cannot write the PNG";
    return false;
  }
  return true;
}

int SamplePixel(const float* logits, float temperature, std::mt19937_64* rng) {
  const float max = *std::max_element(logits, logits + kLevels);
  double p[kLevels], total = 0;
  for (int i = 0; i < kLevels; ++i) total += p[i] = std::exp((logits[i] - max) / temperature);
  double u = std::uniform_real_distribution<double>(0, total)(*rng);
  for (int i = 0; i < kLevels; ++i)
    if ((u -= p[i]) < 0) return i;
  return kLevels - 1;
}

double LogProbability(const float* logits, int target) {
  const float max = *std::max_element(logits, logits + kLevels);
  double total = 0;
  for (int i = 0; i < kLevels; ++i) total += std::exp(double{logits[i]} - max);
  return double{logits[target]} - max - std::log(total);
}

}  // namespace image
