#include "converter/pt_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>

#include <zip.h>

namespace recur::impl::converter {
namespace {

uint64_t LE(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- zip, read by libzip ----

// An entry's bytes: in the file itself (an entry stored as it is, a legacy
// storage) or in a copy (an entry that was compressed).
struct Span {
  const uint8_t* data = nullptr;
  std::size_t size = 0;
};
using Entries = std::map<std::string, Span>;
using Copies = std::map<std::string, std::vector<uint8_t>>;

Status ZipError(const std::string& src, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, src + ": " + what);
}

std::string ZipMessage(zip_error_t* error) { return zip_error_strerror(error); }

struct Discard {
  void operator()(zip_t* archive) const { zip_discard(archive); }
};

// The bound on the entries' declared uncompressed sizes, together: torch.save
// stores its entries uncompressed (they sum to less than the file), and float
// weights hardly deflate (the zoo models' weights to 93 %), so 64 times the
// archive admits any checkpoint re-zipped with deflate, while deflate bombs
// reach 1,000 times; the 64 KiB cover tiny archives, whose pickles deflate
// well. As a compressed entry is copied out, it also bounds archives whose
// directory points many such entries at the same bytes. A re-zipped checkpoint
// of mostly constant tensors can exceed it.
uint64_t MaxUncompressed(uint64_t archive_bytes) { return 64 * archive_bytes + 64 * 1024; }

constexpr uint64_t kUnknown = ~uint64_t{0};

// Where each entry's data begins in the archive, by entry index (the central
// directory's order, which is libzip's), as the central directory (zip64 or
// not) and the local headers say; kUnknown where they cannot be followed. A
// guess that saves a copy: ReadZip takes an entry in place only when libzip
// reads the same bytes as lie there.
std::vector<uint64_t> DataOffsets(const uint8_t* b, uint64_t n, uint64_t count) {
  std::vector<uint64_t> out(count, kUnknown);
  auto u16 = [&](uint64_t at) { return LE(b + at, 2); };
  auto u32 = [&](uint64_t at) { return LE(b + at, 4); };
  auto u64 = [&](uint64_t at) { return LE(b + at, 8); };
  // The end of central directory record: the last one whose comment ends the file.
  if (n < 22) return out;
  uint64_t eocd = kUnknown;
  const uint64_t lowest = n - 22 > 0xFFFF ? n - 22 - 0xFFFF : 0;
  for (uint64_t at = n - 22 + 1; at-- > lowest;) {
    if (u32(at) == 0x06054b50 && at + 22 + u16(at + 20) == n) {
      eocd = at;
      break;
    }
  }
  if (eocd == kUnknown) return out;
  uint64_t entries = u16(eocd + 10), at = u32(eocd + 16);
  if (eocd >= 20 && u32(eocd - 20) == 0x07064b50) {  // the zip64 locator
    const uint64_t z = u64(eocd - 20 + 8);
    if (n < 56 || z > n - 56 || u32(z) != 0x06064b50) return out;
    entries = u64(z + 32);
    at = u64(z + 48);
  }
  if (entries != count) return out;
  for (uint64_t i = 0; i < count; ++i) {
    if (at > n || n - at < 46 || u32(at) != 0x02014b50) return out;
    const uint64_t name = u16(at + 28), extra = u16(at + 30), comment = u16(at + 32);
    if (n - at - 46 < name + extra + comment) return out;
    const uint64_t next = at + 46 + name + extra + comment;
    // Fields of 0xFFFFFFFF are in the zip64 extra field (id 1), in this order.
    uint64_t fields[3] = {u32(at + 24), u32(at + 20), u32(at + 42)};  // sizes, local header
    bool known = true;
    if (fields[0] == 0xFFFFFFFF || fields[1] == 0xFFFFFFFF || fields[2] == 0xFFFFFFFF) {
      known = false;
      for (uint64_t e = at + 46 + name, end = e + extra; end - e >= 4;) {
        const uint64_t id = u16(e), len = u16(e + 2);
        if (end - e - 4 < len) break;
        if (id == 1) {
          uint64_t f = e + 4;
          known = true;
          for (uint64_t& v : fields) {
            if (v != 0xFFFFFFFF) continue;
            if (e + 4 + len - f < 8) {
              known = false;
              break;
            }
            v = u64(f);
            f += 8;
          }
          break;
        }
        e += 4 + len;
      }
    }
    const uint64_t local = fields[2];
    if (known && local <= n && n - local >= 30 && u32(local) == 0x04034b50 &&
        u16(local + 26) == name && n - local - 30 >= name + u16(local + 28) &&
        std::memcmp(b + local + 30, b + at + 46, name) == 0) {
      out[i] = local + 30 + name + u16(local + 28);
    }
    at = next;
  }
  return out;
}

struct Declared {
  zip_uint64_t index;
  std::string name;
  uint64_t size;
  bool stored;  // kept as it is (not compressed)
};

// Reads entry `d` through libzip, which checks its CRC-32 on the read that
// finds its end: into `into` (d.size bytes), or, with `compare`, a chunk at a
// time compared with the d.size bytes there (*same: whether all were equal).
Status ReadEntry(zip_t* archive, const Declared& d, const std::string& src, uint8_t* into,
                 const uint8_t* compare = nullptr, bool* same = nullptr) {
  const std::string where = src + ": zip entry \"" + d.name + "\"";
  zip_file_t* file = zip_fopen_index(archive, d.index, 0);
  if (!file)
    return Status(StatusCode::kInvalidArgument,
                  where + " cannot be opened: " + ZipMessage(zip_get_error(archive)));
  std::vector<uint8_t> chunk(compare ? std::min<uint64_t>(d.size, uint64_t{1} << 20) : 0);
  uint64_t done = 0;
  zip_int64_t got = 0;
  while (done < d.size) {
    uint8_t* to = compare ? chunk.data() : into + done;
    const uint64_t want = compare ? std::min<uint64_t>(chunk.size(), d.size - done) : d.size - done;
    got = zip_fread(file, to, want);
    if (got <= 0) break;
    if (compare && std::memcmp(to, compare + done, static_cast<std::size_t>(got)) != 0) {
      zip_fclose(file);
      *same = false;
      return Status::Ok();
    }
    done += static_cast<uint64_t>(got);
  }
  uint8_t extra;
  const zip_int64_t more = got >= 0 && done == d.size ? zip_fread(file, &extra, 1) : 0;
  std::string failed;
  if (got < 0 || more < 0) failed = ZipMessage(zip_file_get_error(file));
  zip_fclose(file);
  if (!failed.empty())
    return Status(StatusCode::kInvalidArgument,
                  where + ": " + failed + " (corrupt or truncated archive?)");
  if (done != d.size || more != 0)
    return Status(StatusCode::kInvalidArgument,
                  where + " holds " + (more != 0 ? "more" : "fewer") + " bytes than the " +
                      std::to_string(d.size) + " it declares");
  if (same) *same = true;
  return Status::Ok();
}

// Reads the archive's entries, after checking the declared sizes against the
// bound above: an entry stored as it is (torch.save's) is checked (its CRC-32)
// and left in place; a compressed one is decompressed into `copies`.
Status ReadZip(const FileBytes& b, const std::string& src, Entries* entries, Copies* copies) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(b.data(), b.size(), 0, &error);
  zip_t* opened =
      source ? zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error) : nullptr;
  if (!opened) {
    if (source) zip_source_free(source);  // the archive owns it only once opened
    const bool twice = zip_error_code_zip(&error) == ZIP_ER_EXISTS;
    const std::string what = ZipMessage(&error);
    zip_error_fini(&error);
    if (twice) return ZipError(src, "the zip archive holds an entry name twice");
    return ZipError(src, "unreadable zip archive: " + what + " (truncated or corrupt archive?)");
  }
  zip_error_fini(&error);
  std::unique_ptr<zip_t, Discard> archive(opened);

  const zip_int64_t count = zip_get_num_entries(opened, 0);
  std::vector<Declared> declared;
  uint64_t total = 0;
  const uint64_t bound = MaxUncompressed(b.size());
  constexpr zip_uint64_t kNeeded = ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE |
                                   ZIP_STAT_COMP_METHOD | ZIP_STAT_ENCRYPTION_METHOD;
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(opened, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW, &st) != 0 ||
        (st.valid & kNeeded) != kNeeded)
      return ZipError(src, "zip entry " + std::to_string(i) + " is unreadable: " +
                               ZipMessage(zip_get_error(opened)));
    const std::string name = st.name;
    if (st.encryption_method != ZIP_EM_NONE)
      return Status(StatusCode::kUnsupported, src + ": zip entry \"" + name + "\" is encrypted");
    if (!zip_compression_method_supported(st.comp_method, 0)) {
      return Status(StatusCode::kUnsupported,
                    src + ": zip entry \"" + name + "\" is compressed with method " +
                        std::to_string(st.comp_method) +
                        ", which libzip cannot read; torch.save stores entries uncompressed, "
                        "re-save the checkpoint with it");
    }
    if (st.size > bound || total > bound - st.size)
      return ZipError(src, "zip entries declare more than " + std::to_string(bound) +
                               " uncompressed bytes in all (64 times the " +
                               std::to_string(b.size()) + "-byte archive, and 64 KiB), reached " +
                               "at \"" + name + "\" (" + std::to_string(st.size) +
                               " bytes): a zip bomb?");
    total += st.size;
    // libzip refuses repeated names on opening; this also covers names that
    // differ only after a NUL byte.
    if (!entries->emplace(name, Span()).second)
      return ZipError(src, "the zip archive holds \"" + name + "\" twice");
    declared.push_back({static_cast<zip_uint64_t>(i), name, st.size,
                        st.comp_method == ZIP_CM_STORE && st.comp_size == st.size});
  }
  const std::vector<uint64_t> offsets =
      DataOffsets(b.data(), b.size(), static_cast<uint64_t>(count));
  for (const Declared& d : declared) {
    Span& entry = (*entries)[d.name];
    const uint64_t at = offsets[d.index];
    if (d.stored && d.size > 0 && at != kUnknown && at <= b.size() && d.size <= b.size() - at) {
      bool same = false;
      RECUR_RETURN_IF_ERROR(ReadEntry(opened, d, src, nullptr, b.data() + at, &same));
      if (same) {
        entry = {b.data() + at, static_cast<std::size_t>(d.size)};
        continue;
      }
    }
    std::vector<uint8_t>& data = (*copies)[d.name];
    data.resize(d.size);
    RECUR_RETURN_IF_ERROR(ReadEntry(opened, d, src, data.data()));
    entry = {data.data(), data.size()};
  }
  return Status::Ok();
}

// ---- the restricted unpickler ----

enum class Kind { kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kGlobal, kStorage,
                  kTensor };

enum class Allowed { kOrderedDict, kRebuildTensorV2, kRebuildParameter, kStorageType };

struct Obj {
  Kind kind = Kind::kNone;
  int64_t i = 0;          // int, bool; Global for kGlobal
  double f = 0;
  std::string s;          // string; storage key
  std::vector<uint32_t> items;  // list/tuple items; dict: key, value, key, value...
  DType dtype = DType::kU8;     // storage-type global, storage, tensor
  const uint8_t* data = nullptr;  // storage, tensor
  uint64_t nbytes = 0;            // storage, tensor
  std::vector<int64_t> shape;     // tensor
};

constexpr std::size_t kMaxMarks = 1000;  // MARK nesting; a state dict needs three

struct StorageName {
  const char* name;
  DType dtype;
};
constexpr StorageName kStorages[] = {
    {"FloatStorage", DType::kF32},  {"DoubleStorage", DType::kF64}, {"HalfStorage", DType::kF16},
    {"BFloat16Storage", DType::kBF16}, {"LongStorage", DType::kI64}, {"IntStorage", DType::kI32},
    {"ShortStorage", DType::kI16},  {"CharStorage", DType::kI8},   {"ByteStorage", DType::kU8},
    {"BoolStorage", DType::kBool},  {"UntypedStorage", DType::kU8},
};

class Unpickler {
 public:
  // `what` names the pickle in messages ("data.pkl"). With `defer_storages`
  // the storages' bytes are not looked up: their keys and declared sizes are
  // collected (storages()) and tensors get no data; the legacy format's
  // storages follow the pickle that names them.
  Unpickler(const uint8_t* p, std::size_t n, const std::string& src, const std::string& prefix,
            const Entries& entries, const char* what = "data.pkl", bool defer_storages = false)
      : p_(p), n_(n), src_(src), prefix_(prefix), entries_(entries), what_(what),
        defer_(defer_storages) {}

  // The index of the unpickled object.
  Result<uint32_t> Run();
  const Obj& obj(uint32_t i) const { return objs_[i]; }
  // Bytes read, the STOP included (after Run).
  std::size_t end() const { return pos_; }
  // key → (dtype, declared elements) of every storage named (defer mode).
  const std::map<std::string, std::pair<DType, uint64_t>>& storages() const { return storages_; }

 private:
  Status Fail(const std::string& what) const {
    return Status(StatusCode::kInvalidArgument,
                  src_ + ": " + what_ + " at byte " + std::to_string(op_pos_) + ": " + what);
  }
  bool Need(std::size_t k) const { return n_ - pos_ >= k; }
  uint32_t New(Obj o) {
    objs_.push_back(std::move(o));
    return static_cast<uint32_t>(objs_.size() - 1);
  }
  uint32_t NewInt(Kind kind, int64_t v) {
    Obj o;
    o.kind = kind;
    o.i = v;
    return New(std::move(o));
  }
  Result<uint32_t> Pop() {
    if (stack_.size() <= Floor()) return Fail("stack underflow");
    const uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops everything above the last MARK, and the MARK.
  Result<std::vector<uint32_t>> PopMark() {
    if (marks_.empty()) return Fail("no MARK to pop to");
    std::vector<uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()),
                                stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Result<uint32_t> Global(const std::string& module, const std::string& name);
  Result<uint32_t> Reduce(uint32_t callable, uint32_t args);
  Result<uint32_t> PersistentLoad(uint32_t pid);
  Status AddItems(uint32_t container, const std::vector<uint32_t>& items, bool dict);

  const uint8_t* p_;
  std::size_t n_;
  std::size_t pos_ = 0, op_pos_ = 0;
  const std::string& src_;
  const std::string& prefix_;
  const Entries& entries_;
  const char* what_;
  bool defer_;
  std::map<std::string, std::pair<DType, uint64_t>> storages_;
  std::vector<Obj> objs_;
  std::vector<uint32_t> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<uint64_t, uint32_t> memo_;
};

Result<uint32_t> Unpickler::Global(const std::string& module, const std::string& name) {
  Obj o;
  o.kind = Kind::kGlobal;
  if (module == "collections" && name == "OrderedDict") {
    o.i = static_cast<int64_t>(Allowed::kOrderedDict);
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    o.i = static_cast<int64_t>(Allowed::kRebuildTensorV2);
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    o.i = static_cast<int64_t>(Allowed::kRebuildParameter);
  } else {
    bool found = false;
    if (module == "torch" || (module == "torch.storage" && name == "UntypedStorage")) {
      for (const auto& s : kStorages) {
        if (name == s.name) {
          o.i = static_cast<int64_t>(Allowed::kStorageType);
          o.dtype = s.dtype;
          found = true;
        }
      }
    }
    if (!found) {
      return Fail("global \"" + module + "." + name +
                  "\" is not allowed in a state dict (only tensors, dicts, lists, tuples, strings "
                  "and numbers are read)");
    }
  }
  return New(std::move(o));
}

Result<uint32_t> Unpickler::PersistentLoad(uint32_t pid) {
  const Obj& t = objs_[pid];
  // The legacy format appends a view's metadata, None for a whole storage.
  const bool legacy = t.kind == Kind::kTuple && t.items.size() == 6;
  if (t.kind != Kind::kTuple || (t.items.size() != 5 && !legacy) ||
      objs_[t.items[0]].kind != Kind::kString || objs_[t.items[0]].s != "storage")
    return Fail("persistent id is not a ('storage', type, key, location, size) tuple");
  if (legacy && objs_[t.items[5]].kind != Kind::kNone)
    return Fail("persistent id names a storage view (legacy view metadata is not read)");
  const Obj& type = objs_[t.items[1]];
  const Obj& key = objs_[t.items[2]];
  const Obj& numel = objs_[t.items[4]];
  if (type.kind != Kind::kGlobal || type.i != static_cast<int64_t>(Allowed::kStorageType))
    return Fail("persistent id names no storage type");
  if (key.kind != Kind::kString || numel.kind != Kind::kInt || numel.i < 0)
    return Fail("persistent id: storage key or size has the wrong type");
  const uint64_t esize = DTypeSize(type.dtype);
  const uint64_t numel_u = static_cast<uint64_t>(numel.i);
  if (defer_) {
    if (numel_u > (uint64_t{1} << 62) / esize) return Fail("storage size is out of range");
    auto [known, fresh] = storages_.emplace(key.s, std::make_pair(type.dtype, numel_u));
    if (!fresh && known->second != std::make_pair(type.dtype, numel_u))
      return Fail("storage \"" + key.s + "\" is named twice with different types or sizes");
    Obj o;
    o.kind = Kind::kStorage;
    o.dtype = type.dtype;
    o.s = key.s;
    o.nbytes = numel_u * esize;
    return New(std::move(o));
  }
  auto it = entries_.find(prefix_ + "data/" + key.s);
  if (it == entries_.end()) return Fail("storage \"" + key.s + "\" is missing from the archive");
  if (numel_u > it->second.size / esize) {
    return Fail("storage \"" + key.s + "\" declares " + std::to_string(numel_u) + " elements of " +
                DTypeName(type.dtype) + " but its entry holds " +
                std::to_string(it->second.size) + " bytes");
  }
  Obj o;
  o.kind = Kind::kStorage;
  o.dtype = type.dtype;
  o.s = key.s;
  o.data = it->second.data;
  o.nbytes = numel_u * esize;
  return New(std::move(o));
}

Result<uint32_t> Unpickler::Reduce(uint32_t callable, uint32_t args_index) {
  const Obj& g = objs_[callable];
  const Obj& args = objs_[args_index];
  if (g.kind != Kind::kGlobal || args.kind != Kind::kTuple)
    return Fail("REDUCE of something other than an allowed global and a tuple");
  switch (static_cast<Allowed>(g.i)) {
    case Allowed::kOrderedDict: {
      if (!args.items.empty()) return Fail("collections.OrderedDict called with arguments");
      Obj o;
      o.kind = Kind::kDict;
      return New(std::move(o));
    }
    case Allowed::kRebuildParameter: {
      if (args.items.size() != 3 || objs_[args.items[0]].kind != Kind::kTensor)
        return Fail("torch._utils._rebuild_parameter needs (tensor, requires_grad, hooks)");
      return args.items[0];
    }
    case Allowed::kRebuildTensorV2:
      break;
    case Allowed::kStorageType:
      return Fail("a storage type is called; storages come only by persistent id");
  }
  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  const auto& a = args.items;
  if (a.size() != 6 && a.size() != 7)
    return Fail("torch._utils._rebuild_tensor_v2 takes 6 or 7 arguments, got " +
                std::to_string(a.size()));
  const Obj& storage = objs_[a[0]];
  const Obj& offset = objs_[a[1]];
  const Obj& size = objs_[a[2]];
  const Obj& stride = objs_[a[3]];
  if (storage.kind != Kind::kStorage) return Fail("tensor rebuilt from something not a storage");
  if (offset.kind != Kind::kInt || offset.i < 0)
    return Fail("tensor storage offset is not a non-negative int");
  if (size.kind != Kind::kTuple || stride.kind != Kind::kTuple ||
      size.items.size() != stride.items.size())
    return Fail("tensor sizes and strides are not tuples of one length");
  Obj t;
  t.kind = Kind::kTensor;
  t.dtype = storage.dtype;
  uint64_t numel = 1;
  bool overflow = false;
  for (uint32_t d : size.items) {
    const Obj& v = objs_[d];
    if (v.kind != Kind::kInt || v.i < 0) return Fail("tensor sizes must be non-negative ints");
    t.shape.push_back(v.i);
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(v.i), &numel)) overflow = true;
  }
  if (overflow) return Fail("tensor of shape " + ShapeString(t.shape) + " has too many elements");
  // Contiguous (row-major) strides; a dimension of size 1 may have any stride.
  uint64_t expected = 1;
  for (std::size_t k = t.shape.size(); k-- > 0;) {
    const Obj& v = objs_[stride.items[k]];
    if (v.kind != Kind::kInt) return Fail("tensor strides must be ints");
    if (numel != 0 && t.shape[k] != 1 && static_cast<uint64_t>(v.i) != expected) {
      std::string strides = "[";
      for (std::size_t j = 0; j < stride.items.size(); ++j)
        strides += (j ? "," : "") + std::to_string(objs_[stride.items[j]].i);
      return Fail("tensor of shape " + ShapeString(t.shape) + " with strides " + strides +
                  "] in storage \"" + storage.s +
                  "\" is not contiguous (a view such as a transpose); save tensor.contiguous() "
                  "instead");
    }
    expected *= static_cast<uint64_t>(t.shape[k]);  // <= numel: no overflow
  }
  const uint64_t esize = DTypeSize(storage.dtype);
  const uint64_t storage_numel = storage.nbytes / esize;
  const uint64_t off = static_cast<uint64_t>(offset.i);
  if (off > storage_numel || numel > storage_numel - off) {
    return Fail("tensor of shape " + ShapeString(t.shape) + " at offset " + std::to_string(off) +
                " needs " + (numel == 0 ? std::to_string(off) : std::to_string(off) + " + " +
                                                                    std::to_string(numel)) +
                " elements, but storage \"" + storage.s + "\" holds " +
                std::to_string(storage_numel));
  }
  t.data = storage.data == nullptr ? nullptr : storage.data + off * esize;  // null: deferred
  t.nbytes = numel * esize;
  return New(std::move(t));
}

Status Unpickler::AddItems(uint32_t container, const std::vector<uint32_t>& items, bool dict) {
  Obj& c = objs_[container];
  if (dict) {
    if (c.kind != Kind::kDict) return Fail("SETITEM(S) on something not a dict");
    if (items.size() % 2 != 0) return Fail("SETITEMS with an odd number of items");
    // A repeated key is kept twice here; readers take the last, as Python does.
    c.items.insert(c.items.end(), items.begin(), items.end());
    return Status::Ok();
  }
  if (c.kind != Kind::kList) return Fail("APPEND(S) on something not a list");
  c.items.insert(c.items.end(), items.begin(), items.end());
  return Status::Ok();
}

#define RECUR_PT_TRY(var, expr)            \
  auto var##_r = (expr);                   \
  if (!var##_r.ok()) return var##_r.status(); \
  const auto var = *var##_r

Result<uint32_t> Unpickler::Run() {
  while (true) {
    op_pos_ = pos_;
    if (!Need(1)) return Fail("the pickle ends without STOP (truncated)");
    const uint8_t op = p_[pos_++];
    switch (op) {
      case 0x80:  // PROTO
        if (!Need(1)) return Fail("truncated PROTO");
        if (p_[pos_] > 5) return Fail("pickle protocol " + std::to_string(p_[pos_]) + " is unknown");
        ++pos_;
        break;
      case 0x95:  // FRAME (protocol 4): a length hint only
        if (!Need(8)) return Fail("truncated FRAME");
        pos_ += 8;
        break;
      case '.': {  // STOP
        if (!marks_.empty() || stack_.size() != 1)
          return Fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
        return stack_.back();
      }
      case '(':
        if (marks_.size() >= kMaxMarks)
          return Fail("MARKs nest deeper than " + std::to_string(kMaxMarks));
        marks_.push_back(stack_.size());
        break;
      case '}':
      case ']':
      case ')': {
        Obj o;
        o.kind = op == '}' ? Kind::kDict : op == ']' ? Kind::kList : Kind::kTuple;
        stack_.push_back(New(std::move(o)));
        break;
      }
      case 'N':
        stack_.push_back(NewInt(Kind::kNone, 0));
        break;
      case 0x88:
      case 0x89:
        stack_.push_back(NewInt(Kind::kBool, op == 0x88));
        break;
      case 'K':
      case 'M':
      case 'J': {
        const int len = op == 'K' ? 1 : op == 'M' ? 2 : 4;
        if (!Need(len)) return Fail("truncated integer");
        int64_t v = static_cast<int64_t>(LE(p_ + pos_, len));
        if (op == 'J') v = static_cast<int32_t>(static_cast<uint32_t>(v));
        pos_ += len;
        stack_.push_back(NewInt(Kind::kInt, v));
        break;
      }
      case 0x8a: {  // LONG1: n-byte two's complement
        if (!Need(1)) return Fail("truncated LONG1");
        const std::size_t len = p_[pos_++];
        if (len > 8) return Fail("integer of " + std::to_string(len) + " bytes is too large");
        if (!Need(len)) return Fail("truncated LONG1");
        uint64_t u = LE(p_ + pos_, static_cast<int>(len));
        if (len > 0 && len < 8 && (p_[pos_ + len - 1] & 0x80)) u |= ~uint64_t{0} << (8 * len);
        pos_ += len;
        stack_.push_back(NewInt(Kind::kInt, static_cast<int64_t>(u)));
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        if (!Need(8)) return Fail("truncated BINFLOAT");
        uint64_t u = 0;
        for (int k = 0; k < 8; ++k) u = (u << 8) | p_[pos_ + k];
        pos_ += 8;
        Obj o;
        o.kind = Kind::kFloat;
        std::memcpy(&o.f, &u, 8);
        stack_.push_back(New(std::move(o)));
        break;
      }
      case 'X':
      case 0x8c:
      case 0x8d: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
        const int width = op == 'X' ? 4 : op == 0x8c ? 1 : 8;
        if (!Need(width)) return Fail("truncated string length");
        const uint64_t len = LE(p_ + pos_, width);
        pos_ += width;
        if (len > n_ - pos_)
          return Fail("string of " + std::to_string(len) + " bytes runs past the pickle's end");
        Obj o;
        o.kind = Kind::kString;
        o.s.assign(reinterpret_cast<const char*>(p_ + pos_), len);
        pos_ += len;
        stack_.push_back(New(std::move(o)));
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        std::string parts[2];
        for (std::string& part : parts) {
          const void* nl = std::memchr(p_ + pos_, '\n', n_ - pos_);
          if (!nl) return Fail("truncated GLOBAL");
          const std::size_t len = static_cast<const uint8_t*>(nl) - (p_ + pos_);
          part.assign(reinterpret_cast<const char*>(p_ + pos_), len);
          pos_ += len + 1;
        }
        RECUR_PT_TRY(g, Global(parts[0], parts[1]));
        stack_.push_back(g);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        RECUR_PT_TRY(name, Pop());
        RECUR_PT_TRY(module, Pop());
        if (objs_[name].kind != Kind::kString || objs_[module].kind != Kind::kString)
          return Fail("STACK_GLOBAL of non-strings");
        RECUR_PT_TRY(g, Global(objs_[module].s, objs_[name].s));
        stack_.push_back(g);
        break;
      }
      case 'q':
      case 'r':
      case 0x94: {  // BINPUT, LONG_BINPUT, MEMOIZE
        uint64_t index = memo_.size();
        if (op != 0x94) {
          const int len = op == 'q' ? 1 : 4;
          if (!Need(len)) return Fail("truncated memo index");
          index = LE(p_ + pos_, len);
          pos_ += len;
        }
        if (stack_.size() <= Floor()) return Fail("memo store with an empty stack");
        memo_[index] = stack_.back();
        break;
      }
      case 'h':
      case 'j': {  // BINGET, LONG_BINGET
        const int len = op == 'h' ? 1 : 4;
        if (!Need(len)) return Fail("truncated memo index");
        const uint64_t index = LE(p_ + pos_, len);
        pos_ += len;
        auto it = memo_.find(index);
        if (it == memo_.end()) return Fail("memo index " + std::to_string(index) + " was never stored");
        stack_.push_back(it->second);
        break;
      }
      case 't':
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE, TUPLE1..3
        Obj o;
        o.kind = Kind::kTuple;
        if (op == 't') {
          RECUR_PT_TRY(items, PopMark());
          o.items = items;
        } else {
          const std::size_t k = op - 0x84;
          if (stack_.size() < Floor() + k) return Fail("stack underflow");
          o.items.assign(stack_.end() - static_cast<std::ptrdiff_t>(k), stack_.end());
          stack_.resize(stack_.size() - k);
        }
        stack_.push_back(New(std::move(o)));
        break;
      }
      case 'l':
      case 'd': {  // LIST, DICT from MARK
        RECUR_PT_TRY(items, PopMark());
        Obj o;
        o.kind = op == 'l' ? Kind::kList : Kind::kDict;
        const uint32_t c = New(std::move(o));
        RECUR_RETURN_IF_ERROR(AddItems(c, items, op == 'd'));
        stack_.push_back(c);
        break;
      }
      case 's': {  // SETITEM
        RECUR_PT_TRY(value, Pop());
        RECUR_PT_TRY(key, Pop());
        if (stack_.size() <= Floor()) return Fail("SETITEM without a dict");
        RECUR_RETURN_IF_ERROR(AddItems(stack_.back(), {key, value}, true));
        break;
      }
      case 'u':
      case 'e': {  // SETITEMS, APPENDS
        RECUR_PT_TRY(items, PopMark());
        if (stack_.size() <= Floor()) return Fail("SETITEMS/APPENDS without a container");
        RECUR_RETURN_IF_ERROR(AddItems(stack_.back(), items, op == 'u'));
        break;
      }
      case 'a': {  // APPEND
        RECUR_PT_TRY(value, Pop());
        if (stack_.size() <= Floor()) return Fail("APPEND without a list");
        RECUR_RETURN_IF_ERROR(AddItems(stack_.back(), {value}, false));
        break;
      }
      case 'R': {  // REDUCE
        RECUR_PT_TRY(args, Pop());
        RECUR_PT_TRY(callable, Pop());
        RECUR_PT_TRY(result, Reduce(callable, args));
        stack_.push_back(result);
        break;
      }
      case 'Q': {  // BINPERSID
        RECUR_PT_TRY(pid, Pop());
        RECUR_PT_TRY(storage, PersistentLoad(pid));
        stack_.push_back(storage);
        break;
      }
      case 'b': {  // BUILD: a state dict's `_metadata` attribute; ignored
        RECUR_PT_TRY(state, Pop());
        (void)state;
        if (stack_.size() <= Floor() || objs_[stack_.back()].kind != Kind::kDict)
          return Fail("BUILD on something not a dict");
        break;
      }
      case '2':  // DUP
        if (stack_.size() <= Floor()) return Fail("DUP with an empty stack");
        stack_.push_back(stack_.back());
        break;
      case '0': {  // POP
        RECUR_PT_TRY(v, Pop());
        (void)v;
        break;
      }
      case '1': {  // POP_MARK
        RECUR_PT_TRY(items, PopMark());
        (void)items;
        break;
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", op);
        return Fail(std::string("pickle opcode ") + hex +
                    " is not allowed in a state dict");
      }
    }
  }
}

#undef RECUR_PT_TRY

// ---- the legacy format (torch.save before 1.6, or _use_new_zipfile_serialization=False) ----
// Pickles one after another: the magic number, the protocol version 1001, a
// dict of system information, the object (storages as persistent ids
// ('storage', type, key, location, size, None)), the sorted list of storage
// keys; then each storage in that order: its element count (int64,
// little-endian) and its bytes.

// The magic number 0x1950a86a20f9469cfc6c as a LONG1, then STOP.
constexpr uint8_t kLegacyMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                    0x20, 0x6a, 0xa8, 0x50, 0x19, '.'};

// Where the magic pickle ends, or 0 when `b` does not start with one: PROTO,
// a FRAME from protocol 4 on, the LONG1.
std::size_t LegacyMagicEnd(const FileBytes& b) {
  if (b.size() < 2 || b.data()[0] != 0x80) return 0;
  std::size_t at = 2;
  if (b.size() > at && b.data()[at] == 0x95) at += 9;
  if (b.size() < at + sizeof(kLegacyMagic)) return 0;
  return std::memcmp(b.data() + at, kLegacyMagic, sizeof(kLegacyMagic)) == 0
             ? at + sizeof(kLegacyMagic)
             : 0;
}

Status LegacyError(const std::string& src, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, src + ": legacy torch.save file: " + what);
}

// Reads a legacy file into the zip format's entries, which point into it: the
// object pickle as "data.pkl", each storage as "data/<key>".
Status ReadLegacy(const FileBytes& b, const std::string& src, Entries* entries) {
  std::size_t pos = LegacyMagicEnd(b);
  const Entries none;       // the Unpicklers keep references to these two
  const std::string no_prefix;
  // Runs the pickle at `pos` and moves past it; `root` is its object.
  auto run = [&](const char* what, bool defer, std::unique_ptr<Unpickler>* u,
                 uint32_t* root) -> Status {
    *u = std::make_unique<Unpickler>(b.data() + pos, b.size() - pos, src, no_prefix, none, what,
                                     defer);
    auto r = (*u)->Run();
    if (!r.ok()) return r.status();
    *root = *r;
    pos += (*u)->end();
    return Status::Ok();
  };
  std::unique_ptr<Unpickler> u;
  uint32_t root = 0;
  RECUR_RETURN_IF_ERROR(run("the protocol version", false, &u, &root));
  if (u->obj(root).kind != Kind::kInt || u->obj(root).i != 1001)
    return LegacyError(src, "protocol version is not 1001");
  RECUR_RETURN_IF_ERROR(run("the system information", false, &u, &root));
  const Obj& info = u->obj(root);
  if (info.kind != Kind::kDict) return LegacyError(src, "the system information is not a dict");
  for (std::size_t k = 0; k + 1 < info.items.size(); k += 2) {
    const Obj& key = u->obj(info.items[k]);
    const Obj& value = u->obj(info.items[k + 1]);
    if (key.kind == Kind::kString && key.s == "little_endian" &&
        !(value.kind == Kind::kBool && value.i == 1))
      return Status(StatusCode::kUnsupported,
                    src + ": legacy torch.save file written on a big-endian machine");
  }
  const std::size_t object_start = pos;
  RECUR_RETURN_IF_ERROR(run("the object pickle", true, &u, &root));
  (*entries)["data.pkl"] = {b.data() + object_start, pos - object_start};
  const auto declared = u->storages();  // key → (dtype, elements)
  std::unique_ptr<Unpickler> list;
  RECUR_RETURN_IF_ERROR(run("the storage key list", false, &list, &root));
  const Obj& keys = list->obj(root);
  if (keys.kind != Kind::kList) return LegacyError(src, "the storage keys are not a list");
  for (uint32_t index : keys.items) {
    const Obj& key = list->obj(index);
    if (key.kind != Kind::kString) return LegacyError(src, "a storage key is not a string");
    auto it = declared.find(key.s);
    if (it == declared.end())
      return LegacyError(src, "storage \"" + key.s + "\" is listed but no tensor names it");
    if (entries->count("data/" + key.s))
      return LegacyError(src, "storage \"" + key.s + "\" is listed twice");
    const auto [dtype, numel] = it->second;
    if (b.size() - pos < 8)
      return LegacyError(src, "truncated: storage \"" + key.s + "\" has no element count");
    const uint64_t count = LE(b.data() + pos, 8);
    pos += 8;
    if (count != numel)
      return LegacyError(src, "storage \"" + key.s + "\" holds " + std::to_string(count) +
                                  " elements but its persistent id declares " +
                                  std::to_string(numel));
    const uint64_t nbytes = numel * DTypeSize(dtype);  // numel < 2^62 / size (defer mode)
    if (b.size() - pos < nbytes)
      return LegacyError(src, "truncated: storage \"" + key.s + "\" needs " +
                                  std::to_string(nbytes) + " bytes, " +
                                  std::to_string(b.size() - pos) + " remain");
    (*entries)["data/" + key.s] = {b.data() + pos, static_cast<std::size_t>(nbytes)};
    pos += nbytes;
  }
  for (const auto& [key, value] : declared) {
    (void)value;
    if (!entries->count("data/" + key))
      return LegacyError(src, "storage \"" + key + "\" is named by a tensor but not listed");
  }
  return Status::Ok();
}

std::string Describe(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "a bool";
    case Kind::kInt: return "an int";
    case Kind::kFloat: return "a float";
    case Kind::kString: return "a string";
    case Kind::kList: return "a list";
    case Kind::kTuple: return "a tuple";
    case Kind::kDict: return "a dict";
    case Kind::kGlobal: return "a global";
    case Kind::kStorage: return "a storage";
    case Kind::kTensor: return "a tensor";
  }
  return "?";
}

}  // namespace

bool LooksLikeZip(const uint8_t* data, std::size_t size) {
  return size >= 4 && std::memcmp(data, "PK\3\4", 4) == 0;
}

Result<PtFile> ParsePt(FileBytes bytes, const std::string& src, const std::string& key_path) {
  try {
    const bool legacy = LegacyMagicEnd(bytes) != 0;
    if (!LooksLikeZip(bytes.data(), bytes.size()) && !legacy) {
      return Status(StatusCode::kInvalidArgument,
                    src + ": not a PyTorch checkpoint (neither a zip archive nor a legacy "
                          "torch.save file)");
    }
    PtFile file;
    file.bytes_ = std::move(bytes);  // the bytes stay where they are
    Entries entries;
    RECUR_RETURN_IF_ERROR(legacy ? ReadLegacy(file.bytes_, src, &entries)
                                 : ReadZip(file.bytes_, src, &entries, &file.copies_));
    // The archive's folder: the first entry's, as torch reads it (legacy: none).
    std::string prefix;
    for (const auto& [name, e] : entries) {
      if (legacy) break;
      (void)e;
      const std::size_t slash = name.find('/');
      if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
        prefix = name.substr(0, slash + 1);
        break;
      }
    }
    auto pkl = entries.find(prefix + "data.pkl");
    if ((prefix.empty() && !legacy) || pkl == entries.end())
      return Status(StatusCode::kInvalidArgument,
                    src + ": the zip archive holds no <folder>/data.pkl (not a torch.save file)");
    auto order = entries.find(prefix + "byteorder");
    if (order != entries.end() &&
        std::string(reinterpret_cast<const char*>(order->second.data), order->second.size) !=
            "little")
      return Status(StatusCode::kUnsupported,
                    src + ": byteorder is not \"little\" (a big-endian checkpoint)");

    Unpickler u(pkl->second.data, pkl->second.size, src, prefix, entries);
    auto root = u.Run();
    if (!root.ok()) return root.status();

    uint32_t at = *root;
    std::string where;  // the key path walked so far
    std::string rest = key_path;
    while (!rest.empty()) {
      const Obj& d = u.obj(at);
      if (d.kind != Kind::kDict)
        return Status(StatusCode::kInvalidArgument,
                      src + ": " + (where.empty() ? "the checkpoint" : "\"" + where + "\"") +
                          " is " + Describe(d.kind) + ", not a dict, so --state-dict-key \"" +
                          key_path + "\" cannot select in it");
      // The longest key that is `rest` or a dot-ended prefix of it.
      std::size_t best = 0;
      bool found = false;
      uint32_t next = 0;
      for (std::size_t k = 0; k < d.items.size(); k += 2) {
        const Obj& key = u.obj(d.items[k]);
        if (key.kind != Kind::kString || key.s.size() < best) continue;  // the last of equals
        if (rest == key.s || (rest.size() > key.s.size() && rest.compare(0, key.s.size(), key.s) == 0 &&
                              rest[key.s.size()] == '.')) {
          best = key.s.size();
          found = true;
          next = d.items[k + 1];
        }
      }
      if (!found) {
        std::string keys;
        std::size_t shown = 0;
        for (std::size_t k = 0; k < d.items.size() && shown < 8; k += 2, ++shown) {
          const Obj& key = u.obj(d.items[k]);
          keys += (shown ? ", " : "") +
                  (key.kind == Kind::kString ? "\"" + key.s + "\"" : Describe(key.kind));
        }
        if (d.items.size() > 16) keys += ", ...";
        return Status(StatusCode::kInvalidArgument,
                      src + ": --state-dict-key \"" + key_path + "\": " +
                          (where.empty() ? "the checkpoint" : "\"" + where + "\"") +
                          " has no key \"" + rest.substr(0, rest.find('.')) + "\" (its keys: " +
                          (keys.empty() ? "none" : keys) + ")");
      }
      where += (where.empty() ? "" : ".") + rest.substr(0, best);
      rest = best == rest.size() ? "" : rest.substr(best + 1);
      at = next;
    }

    const Obj& dict = u.obj(at);
    if (dict.kind != Kind::kDict)
      return Status(StatusCode::kInvalidArgument,
                    src + ": " + (where.empty() ? "the checkpoint" : "\"" + where + "\"") + " is " +
                        Describe(dict.kind) + ", not a state dict");
    std::map<std::string, uint32_t> values;  // a repeated key: the last value, as in Python
    for (std::size_t k = 0; k < dict.items.size(); k += 2) {
      const Obj& key = u.obj(dict.items[k]);
      if (key.kind != Kind::kString)
        return Status(StatusCode::kInvalidArgument,
                      src + ": a state dict key is " + Describe(key.kind) + ", not a string");
      values[key.s] = dict.items[k + 1];
    }
    // A value that is no tensor: a dict is named first, being most likely
    // the state dict wanted ({"model": ..., "epoch": 3}).
    for (const bool dicts : {true, false}) {
      for (const auto& [name, index] : values) {
        const Obj& value = u.obj(index);
        if (value.kind == Kind::kTensor || (dicts && value.kind != Kind::kDict)) continue;
        std::string hint;
        if (value.kind == Kind::kDict) {
          hint = " (choose a nested state dict with --state-dict-key " +
                 (where.empty() ? "" : where + ".") + name + ")";
        }
        return Status(StatusCode::kInvalidArgument,
                      src + ": \"" + name + "\" holds " + Describe(value.kind) +
                          ", not a tensor" + hint);
      }
    }
    for (const auto& [name, index] : values) {
      const Obj& value = u.obj(index);
      TensorView view;
      view.dtype = value.dtype;
      view.shape = value.shape;
      view.data = value.data;
      view.nbytes = static_cast<std::size_t>(value.nbytes);
      file.tensors_[name] = std::move(view);
    }
    return file;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, src + ": out of memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, src + ": " + e.what());
  }
}

}  // namespace recur::impl::converter
