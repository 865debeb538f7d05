// DecodeWeightRows (dense.h) on every Highway target: each weight type's
// rows decoded to f32 equal the scalar spec, static_cast<float> of
// ref::DecodeWeight, bit for bit but for the sign of a zero (Q6_K's kernels
// compute q·s − 32·s, +0 where the spec's s·(q − 32) is −0 for s < 0), with
// nothing written outside the rows asked for.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

// Random stored values of `type` for an (out, in) weight: any bits, but
// halves (f16 values, K-quant d and dmin) and bf16 values finite, so that
// equal bits are the test (a NaN's payload is no weight's).
std::vector<uint8_t> RandomWeightBytes(std::mt19937& rng, WeightType type, size_t out, size_t in) {
  std::vector<uint8_t> bytes(out * WeightRowBytes(type, in));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
  auto finite_half = [](uint8_t* p) {  // little-endian half: exponent below 31
    if ((p[1] & 0x7C) == 0x7C) p[1] &= 0xBB;
  };
  switch (type) {
    case WeightType::kF32:
      for (size_t k = 0; k + 4 <= bytes.size(); k += 4) {
        if ((bytes[k + 3] & 0x7F) == 0x7F && (bytes[k + 2] & 0x80)) bytes[k + 3] &= 0xBF;
      }
      break;
    case WeightType::kF16:
      for (size_t k = 0; k + 2 <= bytes.size(); k += 2) finite_half(&bytes[k]);
      break;
    case WeightType::kBF16:
      for (size_t k = 0; k + 2 <= bytes.size(); k += 2) {
        if ((bytes[k + 1] & 0x7F) == 0x7F && (bytes[k] & 0x80)) bytes[k + 1] &= 0xBF;
      }
      break;
    case WeightType::kI8:
    case WeightType::kI4:
    case WeightType::kQ8_0:
      break;  // every byte is a value; the scales are apart
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K: {
      const size_t block_bytes = Traits(type).block_bytes;
      for (size_t k = 0; k < bytes.size(); k += block_bytes) {
        if (type == WeightType::kQ6_K) {
          finite_half(&bytes[k + ref::kQ6KD]);
        } else {
          finite_half(&bytes[k]);
          finite_half(&bytes[k + 2]);
        }
      }
      break;
    }
  }
  return bytes;
}

// Random finite f16 scale bits: either sign, zeros and subnormals among them.
uint16_t RandomHalfScale(std::mt19937& rng) {
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFu);
  const uint32_t r = bits(rng);
  if (r % 16 == 0) return 0;
  if (r % 16 == 1) return static_cast<uint16_t>(r & 0x83FF);  // subnormal
  return static_cast<uint16_t>((r & 0x83FF) | (1 + r % 29) << 10);
}

// Equal bits, or two zeros.
bool SameValue(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0 || (a == 0.0f && b == 0.0f);
}

struct DecodeCase {
  WeightType type;
  size_t out, in;
  size_t group = 0;  // per-group scales: inputs per scale
};

// Decodes c's rows one at a time and all at once on the current target;
// returns the number of values that differ from the spec or written outside.
size_t CheckDecode(std::mt19937& rng, const DecodeCase& c) {
  const std::vector<uint8_t> stored = RandomWeightBytes(rng, c.type, c.out, c.in);
  // Misaligned by one element (by one byte for the byte-wise types).
  const size_t shift = Traits(c.type).block == 1 ? Traits(c.type).block_bytes : 1;
  std::vector<uint8_t> storage(stored.size() + 64 + shift);
  const uintptr_t base = reinterpret_cast<uintptr_t>(storage.data());
  uint8_t* weights = storage.data() + (64 - base % 64) % 64 + shift;
  std::memcpy(weights, stored.data(), stored.size());
  std::vector<float> row_scales(c.out);
  std::vector<uint16_t> group_scales;
  DenseWeights w;
  w.weight = weights;
  w.type = c.type;
  w.in = static_cast<uint32_t>(c.in);
  w.out = static_cast<uint32_t>(c.out);
  switch (Traits(c.type).scales) {
    case WeightScales::kPerRow: {
      std::uniform_real_distribution<float> scale(1e-4f, 2.0f);
      for (float& s : row_scales) s = scale(rng);
      w.scales = row_scales.data();
      break;
    }
    case WeightScales::kPerGroup:
      group_scales.resize(c.out * (c.in / c.group));
      for (uint16_t& s : group_scales) s = RandomHalfScale(rng);
      w.group_scales = group_scales.data();
      w.group = static_cast<uint32_t>(c.group);
      break;
    case WeightScales::kNone:
    case WeightScales::kInBlock:
      break;
  }

  size_t failures = 0;
  auto check_row = [&](const float* got, size_t o) {
    for (size_t i = 0; i < c.in; ++i) {
      const auto want = static_cast<float>(ref::DecodeWeight(w, o, i));
      if (!SameValue(got[i], want) && failures++ < 3) {
        FAIL_CHECK("row " << o << " input " << i << ": got " << got[i] << " want " << want);
      }
    }
  };
  for (size_t o = 0; o < c.out; ++o) {
    Buffer row(c.in, o % 4);
    DecodeWeightRows(w, o, 1, row.data());
    check_row(row.data(), o);
    if (!row.GuardsIntact() && failures++ < 3) FAIL_CHECK("row " << o << ": wrote outside");
  }
  Buffer all(c.out * c.in, 1);
  DecodeWeightRows(w, 0, c.out, all.data());
  for (size_t o = 0; o < c.out; ++o) check_row(all.data() + o * c.in, o);
  if (!all.GuardsIntact() && failures++ < 3) FAIL_CHECK("all rows: wrote outside");
  return failures;
}

TEST_CASE("DecodeWeightRows: every weight type equals ref::DecodeWeight row by row") {
  std::vector<DecodeCase> cases;
  for (WeightType type : kWeightTypes) {
    const WeightTypeTraits& t = Traits(type);
    if (t.block == 1) {
      // Rows shorter than a vector, with tails, and long ones.
      for (size_t in : {1, 5, 16, 37, 64, 300}) cases.push_back({type, 7, in});
    } else if (t.scales == WeightScales::kPerGroup) {
      for (size_t group : {32, 64, 128}) {
        for (size_t in : {group, 2 * group, 12 * group}) cases.push_back({type, 5, in, group});
      }
      cases.push_back({type, 3, 32 * 40, 32});  // more groups than a run of scales
    } else {
      for (size_t in : {256, 768, 2048}) cases.push_back({type, 4, in});
    }
  }
  ForEachTarget([&](const std::string&) {
    std::mt19937 rng(20);
    for (const DecodeCase& c : cases) {
      INFO(std::string(WeightTypeName(c.type)), " out=", c.out, " in=", c.in, " group=", c.group);
      CHECK(CheckDecode(rng, c) == 0);
    }
  });
}

TEST_CASE("DecodeWeightRows: nothing to decode writes nothing") {
  const float w[4] = {1, 2, 3, 4};
  DenseWeights dw;
  dw.weight = w;
  dw.in = 2;
  dw.out = 2;
  float dst[2] = {-1, -1};
  DecodeWeightRows(dw, 1, 0, dst);
  CHECK(dst[0] == -1);
  DecodeWeightRows(dw, 1, 1, dst);
  CHECK(dst[0] == 3);
  CHECK(dst[1] == 4);
}

}  // namespace
}  // namespace recur::impl::kernels::test
