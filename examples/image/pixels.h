// What the image demo needs besides the runtime: Fashion-MNIST's IDX files,
// PNG grids, and the 256-way pixel distribution (sampling, log-likelihood).
// Errors are returned as false + a message naming the file and the problem.
#ifndef RECUR_EXAMPLES_IMAGE_PIXELS_H_
#define RECUR_EXAMPLES_IMAGE_PIXELS_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace image {

constexpr int kSide = 28;
constexpr int kPixels = kSide * kSide;
constexpr int kLevels = 256;          // pixel intensities, the model's output width
constexpr int32_t kStartToken = 256;  // fed before pixel 0 (vocabulary 257)

// Reads a gzipped (or plain) IDX file of unsigned bytes with 3 dimensions
// (n, 28, 28) into `images` (n × 784, raster order).
bool ReadIdxImages(const std::string& path, std::vector<uint8_t>* images, size_t* count,
                   std::string* error);

// Writes `tiles` 28×28 grey images (kPixels bytes each, consecutive) as a PNG
// grid of `columns` tiles per row with a 2-pixel border, scaled `scale`×.
bool WritePngGrid(const std::string& path, const std::vector<uint8_t>& tiles, int columns,
                  int scale, std::string* error);

// A draw from softmax(logits / temperature) over kLevels values.
int SamplePixel(const float* logits, float temperature, std::mt19937_64* rng);

// log p(target) under softmax(logits) over kLevels values, in nats.
double LogProbability(const float* logits, int target);

}  // namespace image

#endif  // RECUR_EXAMPLES_IMAGE_PIXELS_H_
