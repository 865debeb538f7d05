// recur_set_platform: an application's own file, clock, log and cache-size
// functions (the platform layer of docs/design.md), and the errors of the
// table itself.
#include "core/platform.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "recur/recur.h"
#include "test_models.h"

namespace {

// A "file system" of one in-memory model, and what the hooks saw.
struct FakePlatform {
  recur::impl::converter::AlignedBytes model;
  int maps = 0, unmaps = 0, clock_reads = 0;
  std::vector<std::string> log;
};

recur_status MapFile(void* user, const char* path, int, const void** data, size_t* size,
                     void** handle, char* error, size_t error_size) {
  auto* p = static_cast<FakePlatform*>(user);
  if (std::strcmp(path, "flash://model") != 0) {
    std::snprintf(error, error_size, "no '%s' in flash", path);
    return RECUR_IO_ERROR;
  }
  ++p->maps;
  *data = p->model.data();
  *size = p->model.size();
  *handle = p;
  return RECUR_OK;
}

void UnmapFile(void* user, const void* data, size_t, void* handle) {
  auto* p = static_cast<FakePlatform*>(user);
  CHECK(handle == p);
  CHECK(data == p->model.data());
  ++p->unmaps;
}

uint64_t Now(void* user) {
  auto* p = static_cast<FakePlatform*>(user);
  return uint64_t(++p->clock_reads) * 1000;
}

void Log(void* user, recur_status status, const char* message) {
  static_cast<FakePlatform*>(user)->log.push_back(std::string(recur_status_string(status)) +
                                                  ": " + message);
}

recur_platform Table(FakePlatform* p) {
  recur_platform t{};
  t.struct_size = sizeof(t);
  t.user = p;
  t.map_file = MapFile;
  t.unmap_file = UnmapFile;
  t.now_ns = Now;
  t.log = Log;
  return t;
}

}  // namespace

TEST_CASE("recur_set_platform: the application's file, clock and log functions") {
  FakePlatform fake;
  fake.model = recur::impl::testing::BuildTestModel(recur::impl::testing::kTinyTokensConfig, 3);
  REQUIRE(!fake.model.empty());
  const recur_platform table = Table(&fake);
  REQUIRE(recur_set_platform(&table) == RECUR_OK);

  recur_model* model = nullptr;
  REQUIRE(recur_model_load_file("flash://model", nullptr, &model) == RECUR_OK);
  CHECK(fake.maps == 1);

  // Errors go to the log with recur_last_error's text.
  recur_model* missing = nullptr;
  CHECK(recur_model_load_file("flash://other", nullptr, &missing) == RECUR_IO_ERROR);
  CHECK(std::string(recur_last_error()).find("no 'flash://other' in flash") != std::string::npos);
  REQUIRE(fake.log.size() == 1);
  CHECK(fake.log[0] == std::string("RECUR_IO_ERROR: ") + recur_last_error());

  // The automatic backend choice times with the platform's clock when this
  // build has more than one backend to choose from.
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = 8;
  recur_session* session = nullptr;
  REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
  if (std::string(recur_backends()).find(',') != std::string::npos) CHECK(fake.clock_reads > 0);
  recur_session_free(session);

  // Back to the defaults: the model is still released through the fake.
  REQUIRE(recur_set_platform(nullptr) == RECUR_OK);
  recur_model_free(model);
  CHECK(fake.unmaps == 1);
  recur_model* again = nullptr;
  CHECK(recur_model_load_file("flash://model", nullptr, &again) == RECUR_IO_ERROR);
  CHECK(fake.log.size() == 1);  // no longer the fake's log
}

TEST_CASE("recur_set_platform: partial tables keep the defaults, bad tables are refused") {
  FakePlatform fake;
  recur_platform only_log{};
  only_log.struct_size = sizeof(only_log);
  only_log.user = &fake;
  only_log.log = Log;
  REQUIRE(recur_set_platform(&only_log) == RECUR_OK);
  recur_model* model = nullptr;
  CHECK(recur_model_load_file("/no/such/model.recur", nullptr, &model) == RECUR_IO_ERROR);
  REQUIRE(fake.log.size() == 1);
  CHECK(fake.log[0].find("/no/such/model.recur") != std::string::npos);  // the default map_file

  recur_platform bad = only_log;
  bad.struct_size = 3;
  CHECK(recur_set_platform(&bad) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("recur_platform.struct_size is 3") != std::string::npos);
  bad = only_log;
  bad.map_file = MapFile;  // without unmap_file
  CHECK(recur_set_platform(&bad) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("map_file and unmap_file must be given together") !=
        std::string::npos);
  REQUIRE(recur_set_platform(nullptr) == RECUR_OK);
}

namespace {

// RWKV-7 with 64 channels: its low-rank, projection and feed-forward layers
// hold 16-64 KiB of f32 each (~0.6 MB in all).
const char* kRwkv7Width64Config = R"({
  "layout": "recur", "d_model": 64, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11, "norm": true},
  "max_positions": 0,
  "mixer": {"type": "rwkv7", "heads": 2, "head_size": 32, "decay_rank": 64, "rate_rank": 64,
            "value_rank": 64, "gate_rank": 64},
  "ffn": {"d_ff": 256, "activation": "relu_squared", "token_mix": true}, "final_norm": true,
  "head": {"out": 11, "activation": "none"}})";

size_t CacheBytes(void* user) { return *static_cast<const size_t*>(user); }

// 24 steps of one stream (one thread, highway); the outputs, and the
// session's backends summary in *summary.
std::vector<float> StepOneStream(recur_model* model, std::string* summary) {
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.backend = "highway";
  recur_session* session = nullptr;
  REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
  *summary = recur_session_backends(session);
  std::vector<float> all, out(11);
  for (int32_t t = 0; t < 24; ++t) {
    const int32_t token = (t * 7) % 11;
    recur_input in{&token, nullptr, 1};
    REQUIRE(recur_session_step(session, &in, out.data()) == RECUR_OK);
    all.insert(all.end(), out.begin(), out.end());
  }
  recur_session_free(session);
  return all;
}

}  // namespace

TEST_CASE("recur_set_platform: a step's weights beyond last_level_cache_bytes come from memory") {
  const auto bytes = recur::impl::testing::BuildTestModel(kRwkv7Width64Config, 9);
  REQUIRE(!bytes.empty());
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  constexpr char kMarker[] = "weights from memory";

  // The defaults: the model is far smaller than any last-level cache (or the
  // 8 MiB assumed where the platform does not know).
  std::string summary;
  const std::vector<float> cached = StepOneStream(model, &summary);
  CAPTURE(summary);
  CHECK(summary.find(kMarker) == std::string::npos);

  size_t cache = 1;
  recur_platform table{};
  table.struct_size = sizeof(table);
  table.user = &cache;
  table.last_level_cache_bytes = CacheBytes;
  REQUIRE(recur_set_platform(&table) == RECUR_OK);
  const std::vector<float> streamed = StepOneStream(model, &summary);
  CAPTURE(summary);
  CHECK(summary.find(kMarker) != std::string::npos);
  // The same outputs up to the order of the sums.
  REQUIRE(streamed.size() == cached.size());
  double scale = 1, diff = 0;
  for (size_t i = 0; i < cached.size(); ++i) {
    scale = std::max(scale, std::fabs(double(cached[i])));
    diff = std::max(diff, std::fabs(double(streamed[i]) - double(cached[i])));
  }
  CHECK(diff <= 1e-4 * scale);

  // 0: unknown, so 8 MiB.
  cache = 0;
  StepOneStream(model, &summary);
  CHECK(summary.find(kMarker) == std::string::npos);
  // A table from before last_level_cache_bytes keeps the default.
  cache = 1;
  table.struct_size = offsetof(recur_platform, last_level_cache_bytes);
  REQUIRE(recur_set_platform(&table) == RECUR_OK);
  StepOneStream(model, &summary);
  CHECK(summary.find(kMarker) == std::string::npos);

  REQUIRE(recur_set_platform(nullptr) == RECUR_OK);
  recur_model_free(model);
}

namespace {

// The VmFlags of the mapping holding `p` in /proc/self/smaps, or "" where
// there is no such file (not Linux) or no mapping holds p.
std::string VmFlagsOf(const void* p) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return "";
  const auto a = reinterpret_cast<uintptr_t>(p);
  char line[512];
  bool inside = false;
  std::string flags;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line, "%lx-%lx ", &begin, &end) == 2 && std::strchr(line, ':') != nullptr &&
        std::strncmp(line, "VmFlags", 7) != 0) {
      inside = a >= begin && a < end;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      flags = line + 8;
      break;
    }
  }
  std::fclose(f);
  return flags;
}

bool HasFlag(const std::string& flags, const std::string& flag) {
  std::istringstream words(flags);
  for (std::string w; words >> w;) {
    if (w == flag) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("StreamedAlloc: huge-page alignment from 2 MiB, huge pages asked for, sizes refused") {
  namespace platform = recur::impl::platform;
  CHECK(platform::StreamedAlloc(0) == nullptr);
  CHECK(platform::StreamedAlloc(SIZE_MAX) == nullptr);
  CHECK(platform::StreamedAlloc(SIZE_MAX - platform::kHugePageBytes) == nullptr);
  CHECK(platform::StreamedAlloc(static_cast<size_t>(PTRDIFF_MAX)) == nullptr);
  CHECK(platform::AllocateStreamed<float>(SIZE_MAX / 2) == nullptr);

  auto small = platform::AllocateStreamed<uint8_t>(1000);
  REQUIRE(small != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(small.get()) % 64 == 0);
  std::memset(small.get(), 1, 1000);

  const size_t bytes = 2 * platform::kHugePageBytes + 12345;
  auto large = platform::AllocateStreamed<uint8_t>(bytes);
  REQUIRE(large != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(large.get()) % platform::kHugePageBytes == 0);
  std::memset(large.get(), 2, bytes);
  CHECK(large[bytes - 1] == 2);
#if defined(__linux__)
  // The whole huge pages carry the advice (VmFlags "hg"); the tail does not.
  const std::string head = VmFlagsOf(large.get());
  CAPTURE(head);
  CHECK(HasFlag(head, "hg"));
  CHECK_FALSE(HasFlag(VmFlagsOf(large.get() + 2 * platform::kHugePageBytes + 4096), "hg"));
  CHECK_FALSE(HasFlag(VmFlagsOf(small.get()), "hg"));
#endif
}

TEST_CASE("MapFile: a mapped model asks for huge pages, a model read into memory of 2 MiB too") {
  namespace platform = recur::impl::platform;
  const char* path = "platform_test_large.bin";
  std::vector<uint8_t> bytes(3 * platform::kHugePageBytes, 7);
  FILE* f = std::fopen(path, "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  for (bool read_into_memory : {false, true}) {
    CAPTURE(read_into_memory);
    platform::MappedFile file;
    REQUIRE(platform::MapFile(path, read_into_memory, &file).ok());
    REQUIRE(file.size == bytes.size());
    CHECK(std::memcmp(file.data, bytes.data(), bytes.size()) == 0);
    if (read_into_memory) {
      CHECK(reinterpret_cast<uintptr_t>(file.data) % platform::kHugePageBytes == 0);
    }
#if defined(__linux__)
    const std::string flags = VmFlagsOf(file.data);
    CAPTURE(flags);
    CHECK(HasFlag(flags, "hg"));
#endif
    platform::UnmapFile(&file);
  }
  std::remove(path);
}
