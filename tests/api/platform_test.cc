// recur_set_platform: an application's own file, clock and log functions
// (the platform layer of docs/design.md), and the errors of the table itself.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include "core/platform.h"
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
