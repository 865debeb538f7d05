// TorchRandnFloat against torch.randn: values printed by PyTorch 1.13 on the
// CPU with its baseline kernel (ATEN_CPU_CAPABILITY=default), bit for bit.
#include "converter/torch_random.h"

#include <doctest/doctest.h>

#include <vector>

namespace recur::impl::converter {
namespace {

void CheckDraws(uint64_t seed, const std::vector<float>& torch_values) {
  const std::vector<float> ours = TorchRandnFloat(seed, torch_values.size());
  REQUIRE(ours.size() == torch_values.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    CAPTURE(seed);
    CAPTURE(i);
    CHECK(ours[i] == torch_values[i]);
  }
}

TEST_CASE("TorchRandnFloat equals torch.randn: the Box-Muller fill of 16 (count 16)") {
  CheckDraws(0, {-1.12583983f, -1.1523602f, -0.250578582f, -0.433878839f, 0.848710358f,
                 0.692009211f, -0.31601277f, -2.11521959f, 0.322274923f, -1.26333475f,
                 0.349983186f, 0.3081339f, 0.119841509f, 1.2376579f, 1.11677718f,
                 -0.247277647f});
}

TEST_CASE("TorchRandnFloat equals torch.randn: the last 16 redrawn (count 17)") {
  CheckDraws(11, {-0.51079756f, 1.5727036f, -1.63946426f, -1.59253204f, -0.154625118f,
                  -1.09643877f, 1.36659753f, 0.689282119f, 0.0744391829f, 0.61710012f,
                  0.752840579f, 0.602252543f, 2.01754236f, -1.16862941f, -1.32419407f,
                  1.12674356f, 1.9112736f});
}

TEST_CASE("TorchRandnFloat equals torch.randn: double normals in pairs (count 7)") {
  CheckDraws(5, {-0.486780763f, -0.603821576f, -0.55809623f, 0.667524278f, -0.197415099f,
                 1.94278347f, -1.40170205f});
}

TEST_CASE("TorchRandnFloat: no draws for count 0, and a prefix is not a shorter call") {
  CHECK(TorchRandnFloat(3, 0).empty());
  // 16 values are the Box-Muller fill; 15 are serial double normals.
  CHECK(TorchRandnFloat(3, 15)[0] != TorchRandnFloat(3, 16)[0]);
}

}  // namespace
}  // namespace recur::impl::converter
