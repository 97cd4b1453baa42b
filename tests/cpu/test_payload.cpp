// Payload manifests and asset files: round trips and one test per validation, each checking
// that the error names the file, the row or token, and the rule broken.
#include "payload/payload.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/rng.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace s3d::payload {
namespace {

constexpr int kGrid = 64;
constexpr int kCondTokens = 9;
constexpr int kCondChannels = 16;

// `tokens` distinct voxels in sorted (x, y, z) order, batch index 0.
Tensor sorted_coords(int tokens) {
  std::vector<int32_t> v;
  for (int i = 0; i < tokens; ++i) {
    int flat = i * 37 + 5;  // spread over the grid, still increasing
    v.insert(v.end(), {0, flat / (kGrid * kGrid), (flat / kGrid) % kGrid, flat % kGrid});
  }
  return Tensor::from_ints(v, {tokens, 4});
}

Tensor normal(uint64_t seed, int64_t rows, int64_t cols, DType dtype) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  normal_fill(seed, 0, v.size(), v.data());
  return Tensor::from_floats(v, {rows, cols}, dtype);
}

Asset make_asset(const std::string& name, int tokens, DType cond_dtype = DType::F32,
                 int concat_channels = 0) {
  Asset a;
  a.name = name;
  a.coords = sorted_coords(tokens);
  a.cond = normal(7, kCondTokens, kCondChannels, cond_dtype);
  if (concat_channels > 0) a.concat_cond = normal(8, tokens, concat_channels, DType::F32);
  a.noise_seed = 1001;
  return a;
}

Manifest make_manifest(const std::string& dir, int concat_channels = 0) {
  Manifest m;
  m.dir = dir;
  m.grid = kGrid;
  m.cond_tokens = kCondTokens;
  m.cond_channels = kCondChannels;
  m.concat_channels = concat_channels;
  return m;
}

ManifestEntry entry_for(const std::string& file, int64_t tokens) {
  ManifestEntry e;
  e.name = file.substr(0, file.find('.'));
  e.file = file;
  e.tokens = tokens;
  e.noise_seed = 1001;
  return e;
}

// Writes `a` to dir/file and reads it back through a manifest of its own.
Asset round_trip(const test::TempDir& dir, const std::string& file, const Asset& a,
                 int64_t tokens, int concat_channels = 0) {
  write_asset(dir.file(file), a);
  return read_asset(make_manifest(dir.dir(), concat_channels), entry_for(file, tokens));
}

// An asset whose coords are replaced by `rows` (x, y, z) triples (batch index `batch`).
Asset with_coords(const std::vector<std::array<int32_t, 3>>& rows, int32_t batch = 0) {
  Asset a = make_asset("x", 1);
  std::vector<int32_t> v;
  for (const auto& r : rows) v.insert(v.end(), {batch, r[0], r[1], r[2]});
  a.coords = Tensor::from_ints(v, {static_cast<int64_t>(rows.size()), 4});
  return a;
}

TEST(Payload, AssetRoundTrip) {
  test::TempDir dir;
  for (DType dt : {DType::F32, DType::BF16}) {
    Asset a = make_asset("a00-sphere", 300, dt);
    Asset b = round_trip(dir, "a00.safetensors", a, 300);
    EXPECT_EQ(b.name, "a00");
    EXPECT_EQ(b.noise_seed, 1001u);
    EXPECT_EQ(b.coords.to_floats(), a.coords.to_floats());
    EXPECT_EQ(b.cond.dtype(), dt);
    EXPECT_EQ(b.cond.to_floats(), a.cond.to_floats());
    EXPECT_FALSE(b.concat_cond.defined());
  }
  io::SafetensorsFile f = io::SafetensorsFile::open(dir.file("a00.safetensors"));
  EXPECT_EQ(f.metadata().at("format"), "sparse3d-asset");
  EXPECT_EQ(f.metadata().at("name"), "a00-sphere");
}

// An asset path is resolved through every symbolic link: a link out of the manifest's folder
// (to another payload, or to any file) is refused by where it leads, without reading it, and
// so is something that is not a regular file; a link inside the folder is fine.
TEST(Payload, SymbolicLinksMustStayInsideTheManifestsFolder) {
  namespace fs = std::filesystem;
  test::TempDir outside;
  test::TempDir dir;
  write_asset(outside.file("elsewhere.safetensors"), make_asset("x", 20));
  write_asset(dir.file("real.safetensors"), make_asset("r", 20));
  fs::create_symlink(outside.file("elsewhere.safetensors"), dir.file("out.safetensors"));
  fs::create_symlink("/etc/passwd", dir.file("passwd.safetensors"));
  fs::create_symlink(dir.file("real.safetensors"), dir.file("in.safetensors"));
  fs::create_directory(dir.file("folder.safetensors"));
  Manifest m = make_manifest(dir.dir());
  for (const char* file : {"out.safetensors", "passwd.safetensors"}) {
    try {
      read_asset(m, entry_for(file, 20));
      FAIL() << file << " was read";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("outside the manifest's folder"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("root:"), std::string::npos) << msg;  // nothing of the file itself
    }
  }
  EXPECT_THROW(
      {
        try {
          read_asset(m, entry_for("folder.safetensors", 20));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_EQ(read_asset(m, entry_for("in.safetensors", 20)).coords.size(0), 20);
}

// A header that promises 2^26 rows of coordinates (1 GiB) over a sparse file of zeros: the
// rows are checked in pieces before the whole tensor is allocated, so the refusal comes after
// reading one piece, in well under a second and without the gigabyte.
TEST(Payload, ManyBadRowsAreRefusedBeforeTheWholeTensorIsAllocated) {
  test::TempDir dir;
  const int64_t rows = int64_t{1} << 26;
  const std::vector<float> cond(kCondTokens * kCondChannels, 0.5f);
  const uint64_t cond_bytes = cond.size() * 4;
  io::Json header = {
      {"cond", {{"dtype", "F32"}, {"shape", {kCondTokens, kCondChannels}}, {"data_offsets", {0, cond_bytes}}}},
      {"coords", {{"dtype", "I32"}, {"shape", {rows, 4}}, {"data_offsets", {cond_bytes, cond_bytes + rows * 16}}}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(uint64_t(text.size()) >> (8 * i));
  bytes += text;
  bytes.append(reinterpret_cast<const char*>(cond.data()), cond_bytes);
  test::write_bytes(dir.file("sparse.safetensors"), bytes);
  std::filesystem::resize_file(dir.file("sparse.safetensors"), bytes.size() + rows * 16);

  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR(read_asset(make_manifest(dir.dir()), entry_for("sparse.safetensors", rows)),
               "coords row 1 (0, 0, 0) is not after row 0");
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "KiB of peak memory added";
}

// A condition of 4 GiB, as the manifest says, over a sparse file: refused from the header
// against the asset limit (1 GiB), in well under a second, without allocating it.
TEST(Payload, AHugeSparseConditionIsRefusedFromTheHeader) {
  test::TempDir dir;
  const int64_t L = int64_t{1} << 20, C = 2048;
  const uint64_t cond_bytes = uint64_t(L) * C * 2;
  io::Json header = {
      {"cond", {{"dtype", "BF16"}, {"shape", {L, C}}, {"data_offsets", {0, cond_bytes}}}},
      {"coords", {{"dtype", "I32"}, {"shape", {1, 4}}, {"data_offsets", {cond_bytes, cond_bytes + 16}}}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(uint64_t(text.size()) >> (8 * i));
  test::write_bytes(dir.file("huge.safetensors"), bytes + text);
  std::filesystem::resize_file(dir.file("huge.safetensors"), bytes.size() + text.size() + cond_bytes + 16);
  Manifest m = make_manifest(dir.dir());
  m.cond_tokens = static_cast<int>(L);
  m.cond_channels = static_cast<int>(C);
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR(read_asset(m, entry_for("huge.safetensors", 1)),
               "payload huge.safetensors: tensor 'cond' (BF16 [1048576, 2048]) is 4294967296 "
               "bytes, more than the 1073741824 bytes a payload asset may hold in one tensor");
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "KiB of peak memory added";
}

// A file in the manifest's folder that is no asset at all (here a hard link to a text file)
// is named as not a safetensors file; none of its bytes reach the message, not even as the
// number its first 8 bytes make.
TEST(Payload, AFileThatIsNoAssetIsNotEchoed) {
  test::TempDir dir;
  test::TempDir elsewhere;
  const std::string secret = "password=hunter2 and more secret text\n";
  test::write_bytes(elsewhere.file("secret.txt"), secret);
  std::filesystem::create_hard_link(elsewhere.file("secret.txt"), dir.file("link.safetensors"));
  uint64_t as_length = 0;
  for (int i = 7; i >= 0; --i) as_length = (as_length << 8) | uint8_t(secret[i]);
  try {
    read_asset(make_manifest(dir.dir()), entry_for("link.safetensors", 1));
    ADD_FAILURE() << "read";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("payload link.safetensors: not a safetensors file"), std::string::npos)
        << msg;
    EXPECT_EQ(msg.find(std::to_string(as_length)), std::string::npos) << msg;
    EXPECT_EQ(msg.find("password"), std::string::npos) << msg;
  }
}

// More rows than one piece (65,536): read back exactly, and a fault in the second piece (an
// unsorted row just past the boundary, checked against the last row of the first) is found.
TEST(Payload, CoordinatesSpanningSeveralPiecesRoundTrip) {
  test::TempDir dir;
  const int tokens = 70000;
  std::vector<int32_t> v;
  for (int i = 0; i < tokens; ++i) {
    const int flat = i * 3 + 1;
    v.insert(v.end(), {0, flat / (kGrid * kGrid), (flat / kGrid) % kGrid, flat % kGrid});
  }
  Asset a = make_asset("big", 1);
  a.coords = Tensor::from_ints(v, {tokens, 4});
  Asset b = round_trip(dir, "big.safetensors", a, tokens);
  EXPECT_EQ(b.coords.to_floats(), a.coords.to_floats());
  std::swap_ranges(v.begin() + 4 * 65535, v.begin() + 4 * 65536, v.begin() + 4 * 65536);
  a.coords = Tensor::from_ints(v, {tokens, 4});
  write_asset(dir.file("swapped.safetensors"), a);
  EXPECT_ERROR(read_asset(make_manifest(dir.dir()), entry_for("swapped.safetensors", tokens)),
               "coords row 65536", "is not after row 65535");
}

TEST(Payload, TextureAssetCarriesConcatCond) {
  test::TempDir dir;
  Asset a = make_asset("tex", 50, DType::BF16, 32);
  Asset b = round_trip(dir, "tex.safetensors", a, 50, 32);
  ASSERT_TRUE(b.concat_cond.defined());
  EXPECT_EQ(b.concat_cond.shape(), (Shape{50, 32}));
  EXPECT_EQ(b.concat_cond.to_floats(), a.concat_cond.to_floats());
  // Expected but absent, and present but not expected.
  EXPECT_ERROR(round_trip(dir, "t1.safetensors", make_asset("t", 50), 50, 32),
               "payload t1.safetensors: has no 'concat_cond' tensor");
  EXPECT_ERROR(round_trip(dir, "t2.safetensors", a, 50, 0),
               "payload t2.safetensors: has a concat_cond tensor, but the manifest's concat_channels is 0");
  EXPECT_ERROR(round_trip(dir, "t3.safetensors", a, 50, 16),
               "'concat_cond' has shape [50, 32], expected [50, 16]");
  Asset nan = a;
  nan.concat_cond = a.concat_cond.to(Device::CPU);
  nan.concat_cond.data_as<float>()[3 * 32 + 4] = std::numeric_limits<float>::infinity();
  EXPECT_ERROR(round_trip(dir, "t4.safetensors", nan, 50, 32),
               "concat_cond has an infinity at token 3, channel 4");
}

TEST(Payload, CoordsOutsideTheGrid) {
  test::TempDir dir;
  std::vector<std::array<int32_t, 3>> rows;
  for (int i = 0; i < 812; ++i) rows.push_back({i / 64 / 64, (i / 64) % 64, i % 64});
  rows.push_back({64, 0, 0});
  EXPECT_ERROR(round_trip(dir, "a03.safetensors", with_coords(rows), 813),
               "payload a03.safetensors: coords row 812 has x = 64, but the grid is 64^3");
  EXPECT_ERROR(round_trip(dir, "b.safetensors", with_coords({{0, 0, 0}, {0, -1, 5}}), 2),
               "coords row 1 has y = -1");
  EXPECT_ERROR(round_trip(dir, "c.safetensors", with_coords({{0, 0, 2147483647}}), 1),
               "coords row 0 has z = 2147483647");
}

TEST(Payload, CoordsMustBeSortedWithoutDuplicates) {
  test::TempDir dir;
  std::vector<std::array<int32_t, 3>> rows;
  for (int i = 0; i < 17; ++i) rows.push_back({1, 2, i});
  rows.push_back({1, 1, 63});  // row 17 goes back in y
  EXPECT_ERROR(round_trip(dir, "a.safetensors", with_coords(rows), 18),
               "coords row 17 (1, 1, 63) is not after row 16 (1, 2, 16)",
               "(coords must be sorted by x, y, z, without duplicates)");
  EXPECT_ERROR(round_trip(dir, "b.safetensors", with_coords({{3, 4, 5}, {3, 4, 5}}), 2),
               "coords row 1 (3, 4, 5) is not after row 0 (3, 4, 5)");
  EXPECT_ERROR(round_trip(dir, "c.safetensors", with_coords({{1, 0, 0}, {0, 63, 63}}), 2),
               "coords row 1 (0, 63, 63) is not after row 0");
}

TEST(Payload, BatchColumnMustBeZero) {
  test::TempDir dir;
  EXPECT_ERROR(round_trip(dir, "a.safetensors", with_coords({{0, 0, 0}}, 1), 1),
               "coords row 0 has batch index 1, but an asset file holds one asset");
}

TEST(Payload, CondMustBeFiniteAndShapedAsTheManifestSays) {
  test::TempDir dir;
  Asset a = make_asset("a", 4);
  a.cond.data_as<float>()[5 * kCondChannels + 7] = std::nanf("");
  EXPECT_ERROR(round_trip(dir, "a.safetensors", a, 4), "payload a.safetensors: cond has a NaN at token 5, channel 7");
  Asset b = make_asset("b", 4, DType::BF16);
  b.cond.data_as<uint16_t>()[1] = 0xff80;  // -inf in bf16
  EXPECT_ERROR(round_trip(dir, "b.safetensors", b, 4), "cond has an infinity at token 0, channel 1");
  Asset c = make_asset("c", 4);
  c.cond = normal(1, kCondTokens + 1, kCondChannels, DType::F32);
  EXPECT_ERROR(round_trip(dir, "c.safetensors", c, 4), "'cond' has shape [10, 16], expected [9, 16]");
  c.cond = Tensor::from_ints(std::vector<int32_t>(kCondTokens * kCondChannels), {kCondTokens, kCondChannels});
  EXPECT_ERROR(round_trip(dir, "d.safetensors", c, 4), "'cond' has dtype I32, expected BF16 or F32");
}

TEST(Payload, TokenCountsAndTensorSet) {
  test::TempDir dir;
  Asset empty = make_asset("e", 1);
  empty.coords = Tensor::empty({0, 4}, DType::I32, Device::CPU);
  EXPECT_ERROR(round_trip(dir, "e.safetensors", empty, 1), "payload e.safetensors: asset has 0 tokens");
  EXPECT_ERROR(round_trip(dir, "f.safetensors", make_asset("f", 10), 11),
               "coords has 10 rows, but the manifest says the asset has 11 tokens");
  Asset wide = make_asset("w", 2);
  wide.coords = Tensor::from_ints({0, 1, 2, 3, 4, 0, 1, 2, 3, 5}, {2, 5});
  EXPECT_ERROR(round_trip(dir, "w.safetensors", wide, 2), "'coords' has shape [2, 5], expected [T, 4]");
  io::write_safetensors(dir.file("x.safetensors"),
                        {{"coords", sorted_coords(2)}, {"cond", normal(1, kCondTokens, kCondChannels, DType::F32)},
                         {"feats", normal(2, 2, 3, DType::F32)}});
  EXPECT_ERROR(read_asset(make_manifest(dir.dir()), entry_for("x.safetensors", 2)),
               "unexpected tensor 'feats'");
  io::write_safetensors(dir.file("y.safetensors"), {{"cond", normal(1, kCondTokens, kCondChannels, DType::F32)}});
  EXPECT_ERROR(read_asset(make_manifest(dir.dir()), entry_for("y.safetensors", 2)), "has no 'coords' tensor");
  io::write_safetensors(dir.file("z.safetensors"),
                        {{"coords", sorted_coords(2)}, {"cond", normal(1, kCondTokens, kCondChannels, DType::F32)}},
                        {{"format", "something-else"}});
  EXPECT_ERROR(read_asset(make_manifest(dir.dir()), entry_for("z.safetensors", 2)),
               "metadata 'format' is \"something-else\"");
  EXPECT_ERROR(read_asset(make_manifest(dir.dir()), entry_for("absent.safetensors", 2)),
               "payload absent.safetensors: cannot open");
}

// ---- manifest ----

std::string manifest_text(const std::string& asset_fields, const std::string& top = "") {
  return R"({"format": "sparse3d-payload-manifest", "version": 1, "grid": 64,
    "cond_tokens": 9, "cond_channels": 16)" + top + R"(, "assets": [)" + asset_fields + "]}";
}

const char* const kEntry =
    R"({"name": "a00", "file": "a00.safetensors", "tokens": 300, "noise_seed": 1001, "set": "default"})";

std::string entry_with(const std::string& key, const std::string& value) {
  io::Json j = io::Json::parse(kEntry);
  j.erase(key);
  std::string s = j.dump();
  s.insert(1, "\"" + key + "\":" + value + ",");
  return s;
}

Manifest read_text(const test::TempDir& dir, const std::string& text) {
  std::string path = dir.file("m.json");
  test::write_bytes(path, text);
  return read_manifest(path);
}

TEST(Manifest, RoundTrip) {
  test::TempDir dir;
  Manifest m = make_manifest("ignored", 32);
  m.assets.push_back(entry_for("a00.safetensors", 300));
  ManifestEntry e = entry_for("sub/b01.safetensors", 5);
  e.name = "b01";
  e.noise_seed = (uint64_t{1} << 53) - 1;
  e.set = "long-tail";
  m.assets.push_back(e);
  write_manifest(dir.file("m.json"), m);
  Manifest r = read_manifest(dir.file("m.json"));
  EXPECT_EQ(r.dir, dir.dir());
  EXPECT_EQ(r.grid, 64);
  EXPECT_EQ(r.cond_tokens, kCondTokens);
  EXPECT_EQ(r.cond_channels, kCondChannels);
  EXPECT_EQ(r.concat_channels, 32);
  ASSERT_EQ(r.assets.size(), 2u);
  EXPECT_EQ(r.assets[1].file, "sub/b01.safetensors");
  EXPECT_EQ(r.assets[1].noise_seed, (uint64_t{1} << 53) - 1);
  EXPECT_EQ(r.assets[1].set, "long-tail");
  m.assets.push_back(m.assets[0]);
  EXPECT_ERROR(write_manifest(dir.file("m2.json"), m), "assets[2] repeats the name \"a00\"");
  m.assets.pop_back();
  m.assets[1].file = "../b01.safetensors";
  EXPECT_ERROR(write_manifest(dir.file("m2.json"), m), "writing manifest", "assets[1]", "\"..\" component");
  EXPECT_EQ(read_text(dir, manifest_text(kEntry)).concat_channels, 0);  // optional
  std::string no_set = R"({"name": "a", "file": "a.safetensors", "tokens": 1, "noise_seed": 0})";
  EXPECT_EQ(read_text(dir, manifest_text(no_set)).assets[0].set, "default");
}

TEST(Manifest, TopLevelErrors) {
  test::TempDir dir;
  std::string m = dir.file("m.json");
  EXPECT_ERROR(read_text(dir, R"({"format": "other", "version": 1})"),
               "manifest " + m + ": 'format' must be \"sparse3d-payload-manifest\", found \"other\"");
  EXPECT_ERROR(read_text(dir, R"({"format": "sparse3d-payload-manifest", "version": 2})"),
               "'version' must be an integer in [1, 1], found 2");
  EXPECT_ERROR(read_text(dir, manifest_text(kEntry, R"(, "grid2": 5)")), "unknown key 'grid2'");
  EXPECT_ERROR(read_text(dir, manifest_text("")), "'assets' lists no assets");
  EXPECT_ERROR(read_text(dir, R"({"format": "sparse3d-payload-manifest", "version": 1, "grid": 64,
      "cond_tokens": 9, "cond_channels": 16, "assets": {}})"), "'assets' must be an array");
  EXPECT_ERROR(read_text(dir, R"({"format": "sparse3d-payload-manifest", "version": 1,
      "cond_tokens": 9, "cond_channels": 16, "assets": []})"), "'grid' is missing");
  EXPECT_ERROR(read_text(dir, manifest_text(kEntry, R"(, "concat_channels": -1)")),
               "'concat_channels' must be an integer in [0, 1048576], found -1");
  EXPECT_ERROR(read_text(dir, manifest_text(kEntry, R"(, "cond_tokens": 9)")), "duplicate key 'cond_tokens'");
}

TEST(Manifest, AssetEntryErrors) {
  test::TempDir dir;
  auto read_entry = [&](const std::string& e) { return read_text(dir, manifest_text(e)); };
  EXPECT_ERROR(read_text(dir, manifest_text(std::string(kEntry) + "," + kEntry)),
               "assets[1] repeats the name \"a00\"");
  EXPECT_ERROR(read_entry(entry_with("name", "\"\"")), "assets[0]: 'name' is empty");
  EXPECT_ERROR(read_entry(entry_with("name", "\"a/b\"")), "contains a path separator");
  EXPECT_ERROR(read_entry(entry_with("name", "\"..\"")), "'name' cannot be \"..\"");
  EXPECT_ERROR(read_entry(entry_with("file", "\"../x.safetensors\"")), "has a \"..\" component");
  EXPECT_ERROR(read_entry(entry_with("file", "\"a/../../x\"")), "has a \"..\" component");
  EXPECT_ERROR(read_entry(entry_with("file", "\"sub/..\"")), "has a \"..\" component");
  EXPECT_ERROR(read_entry(entry_with("file", "\"/etc/passwd\"")), "is absolute");
  EXPECT_ERROR(read_entry(entry_with("file", "\"\"")), "'file' is empty");
  EXPECT_NO_THROW(read_entry(entry_with("file", "\"a..b/..c.safetensors\"")));
  EXPECT_ERROR(read_entry(entry_with("tokens", "0")), "'tokens' must be an integer in [1, 1073741824], found 0");
  EXPECT_ERROR(read_entry(entry_with("noise_seed", "9007199254740992")),
               "'noise_seed' must be an integer in [0, 9007199254740991], found 9007199254740992");
  EXPECT_ERROR(read_entry(entry_with("noise_seed", "-1")), "'noise_seed'", "found -1");
  EXPECT_ERROR(read_entry(entry_with("noise_seed", "1001.0")), "'noise_seed'", "found 1001.0");
  EXPECT_ERROR(read_entry(entry_with("noise_seed", "18446744073709551616")), "'noise_seed'",
               "beyond the 64-bit range");
  EXPECT_ERROR(read_entry(entry_with("set", "\"tail\"")), "'set' must be \"default\" or \"long-tail\", found \"tail\"");
  EXPECT_ERROR(read_entry(entry_with("seed", "1")), "assets[0]: unknown key 'seed'");
}

TEST(Manifest, CommittedCorpus) {
  test::TempDir dir;
  std::vector<std::pair<std::string, std::string>> seeds = {
      {"manifest_valid.json", manifest_text(kEntry)},
      {"manifest_seed_2pow53.json", manifest_text(entry_with("noise_seed", "9007199254740992"))},
      {"manifest_seed_2pow64.json", manifest_text(entry_with("noise_seed", "18446744073709551616"))},
      {"manifest_dotdot_file.json", manifest_text(entry_with("file", "\"../x.safetensors\""))},
      {"manifest_duplicate_name.json", manifest_text(std::string(kEntry) + "," + kEntry)},
      {"manifest_bad_set.json", manifest_text(entry_with("set", "\"tail\""))},
      {"manifest_wrong_format.json", R"({"format": "other", "version": 1})"},
  };
  for (const auto& [name, text] : seeds) {
    test::check_corpus_file(name, text);
    if (name.find("valid") != std::string::npos) EXPECT_NO_THROW(read_text(dir, text));
    else EXPECT_THROW(read_text(dir, text), Error) << name;
  }
}

// Asset files that are valid safetensors but bad payloads, for fuzz_safetensors (which reads
// them as assets too). Written by the library's own writer, so regenerated bytes are stable.
TEST(Payload, CommittedCorpus) {
  test::TempDir dir;
  Asset nan = make_asset("nan", 4);
  nan.cond.data_as<float>()[5 * kCondChannels + 7] = std::nanf("");
  Asset tex = make_asset("tex", 3, DType::BF16, 8);
  std::vector<std::pair<std::string, Asset>> seeds = {
      {"payload_valid.safetensors", make_asset("ok", 6)},
      {"payload_valid_texture.safetensors", tex},
      {"payload_nan_cond.safetensors", nan},
      {"payload_unsorted.safetensors", with_coords({{1, 2, 3}, {1, 2, 2}})},
      {"payload_out_of_grid.safetensors", with_coords({{0, 0, 64}})},
      {"payload_batch_1.safetensors", with_coords({{0, 0, 0}}, 1)},
  };
  for (const auto& [name, asset] : seeds) {
    write_asset(dir.file(name), asset);
    test::check_corpus_file(name, test::read_bytes(dir.file(name)));
  }
}

// ---- packed multi-asset coords ----

Tensor packed(const std::vector<std::array<int32_t, 4>>& rows) {
  std::vector<int32_t> v;
  for (const auto& r : rows) v.insert(v.end(), r.begin(), r.end());
  return Tensor::from_ints(v, {static_cast<int64_t>(rows.size()), 4});
}

TEST(PackedCoords, Validation) {
  EXPECT_NO_THROW(validate_packed_coords(packed({{0, 1, 2, 3}, {0, 0, 0, 0}, {1, 5, 5, 5}, {2, 63, 63, 63}}), 3, 64, "b"));
  EXPECT_ERROR(validate_packed_coords(packed({{0, 0, 0, 0}, {3, 0, 0, 0}}), 2, 64, "payload bunny.json"),
               "payload bunny.json: coords row 1 has batch index 3, but the batch has 2 assets");
  EXPECT_ERROR(validate_packed_coords(packed({{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}}), 2, 64, "b"),
               "coords row 2 has batch index 0 after batch index 1", "contiguous");
  EXPECT_ERROR(validate_packed_coords(packed({{0, 0, 0, 0}, {2, 0, 0, 0}}), 3, 64, "b"),
               "coords row 1 has batch index 2 after batch index 0: asset 1 has no rows");
  EXPECT_ERROR(validate_packed_coords(packed({{1, 0, 0, 0}}), 2, 64, "b"),
               "coords start with batch index 1: asset 0 has no rows");
  EXPECT_ERROR(validate_packed_coords(packed({{0, 0, 0, 0}, {1, 0, 0, 0}}), 4, 64, "b"),
               "coords cover assets 0..1, but the batch has 4 assets");
  EXPECT_ERROR(validate_packed_coords(packed({{0, 0, 64, 0}}), 1, 64, "b"), "coords row 0 has y = 64, but the grid is 64^3");
  EXPECT_ERROR(validate_packed_coords(packed({{-1, 0, 0, 0}}), 1, 64, "b"), "batch index -1");
  EXPECT_ERROR(validate_packed_coords(Tensor::empty({0, 4}, DType::I32, Device::CPU), 1, 64, "b"),
               "coords has no rows");
  EXPECT_ERROR(validate_packed_coords(packed({{0, 0, 0, 0}}), 0, 64, "b"), "batch must be at least 1");
  EXPECT_ERROR(validate_packed_coords(Tensor::from_ints({0, 0, 0}, {1, 3}), 1, 64, "b"), "b: expected i32[-1, 4]");
}

}  // namespace
}  // namespace s3d::payload
