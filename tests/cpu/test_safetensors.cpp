// safetensors reader and writer: round trips, conversions, and one test per corrupt file,
// each checking that the error names the problem. The corrupt files are also the committed
// seed corpus of fuzz/fuzz_safetensors.cpp (tests/data/corrupt).
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "io_test_util.h"

namespace s3d::io {
namespace {

using test::TempDir;

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file from its parts: the 8-byte length (the header's own unless overridden), the header
// text, and the data section.
std::string raw_file(const std::string& header, const std::string& data = "") {
  return u64_le(header.size()) + header + data;
}

std::string zeros(size_t n) { return std::string(n, '\0'); }

struct CorruptCase {
  std::string name;   // file name stem in tests/data/corrupt
  std::string bytes;
  std::vector<std::string> needles;  // what the error must mention
};

std::vector<CorruptCase> corrupt_cases() {
  const std::string t1 = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<CorruptCase> c;
  c.push_back({"empty_file", "", {"0 bytes", "shorter than the 8-byte"}});
  c.push_back({"truncated_length", std::string("\x10\0\0\0", 4), {"4 bytes", "shorter than"}});
  c.push_back({"header_cut", raw_file("{" + t1 + "}", zeros(8)).substr(0, 20),
               {"not a safetensors file (the header length in its first 8 bytes is larger than "
                "the file, 20 bytes)"}});
  c.push_back({"data_cut", raw_file("{" + t1 + "}", zeros(5)),
               {"truncated", "need 8 bytes", "holds 5"}});
  c.push_back({"header_length_over_limit", u64_le(100'000'001) + "{}",
               {"not a safetensors file", "larger than the file, 10 bytes"}});
  c.push_back({"header_length_max_u64", u64_le(~0ull) + "{}",
               {"not a safetensors file", "larger than the file, 10 bytes"}});
  c.push_back({"header_length_past_end", u64_le(1000) + "{}" + zeros(30),
               {"not a safetensors file", "larger than the file, 40 bytes"}});
  c.push_back({"not_json", raw_file("{this is not json}"), {"header: invalid JSON"}});
  c.push_back({"trailing_json_junk", raw_file("{} x"), {"invalid JSON"}});
  c.push_back({"not_utf8", raw_file("{\"t\xff\":{}}"), {"invalid JSON", "UTF-8"}});
  c.push_back({"leading_junk", raw_file("x{}"), {"not a safetensors file (its header does not start with '{')"}});
  c.push_back({"leading_bom", raw_file("\xEF\xBB\xBF{}"), {"does not start with '{': it starts with a UTF-8 byte-order mark"}});
  c.push_back({"header_all_spaces", raw_file("        "), {"does not start with '{': it is only white space"}});
  c.push_back({"root_array", raw_file("[]"), {"does not start with '{'"}});
  c.push_back({"deep_json", raw_file("{\"a\":" + std::string(1000, '[') + std::string(1000, ']') + "}"),
               {"nests deeper than 64 levels"}});
  c.push_back({"duplicate_json_key",
               raw_file(R"({"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                        zeros(8)),
               {"duplicate key 'dtype'"}});
  c.push_back({"duplicate_tensor_name", raw_file("{" + t1 + "," + t1 + "}", zeros(8)),
               {"duplicate key 't'"}});
  c.push_back({"unknown_dtype",
               raw_file(R"({"t":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", zeros(16)),
               {"tensor 't' has unknown dtype 'F128'", "BF16"}});
  c.push_back({"dtype_not_string",
               raw_file(R"({"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", zeros(4)),
               {"tensor 't' has dtype 4, which is not a string"}});
  c.push_back({"wrong_dtype_size",
               raw_file(R"({"t":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", zeros(16)),
               {"tensor 't' has data_offsets [0, 16] (16 bytes) but shape [4] x BF16 needs 8 bytes"}});
  c.push_back({"span_too_short",
               raw_file(R"({"t":{"dtype":"F32","shape":[8192,1536],"data_offsets":[0,20]}})",
                        zeros(20)),
               {"shape [8192, 1536] x F32 needs 50331648 bytes"}});
  c.push_back({"overlapping_offsets",
               raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        zeros(12)),
               {"tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' (data_offsets [0, 8])"}});
  c.push_back({"same_offsets",
               raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                        zeros(8)),
               {"overlaps"}});
  c.push_back({"gap_between_tensors",
               raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                        zeros(20)),
               {"gap of 4 bytes between tensor 'a'", "tensor 'b'"}});
  c.push_back({"first_not_at_zero",
               raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", zeros(16)),
               {"tensor 'a' is the first", "starts at offset 8 instead of 0"}});
  c.push_back({"trailing_bytes", raw_file("{" + t1 + "}", zeros(12)),
               {"4 trailing bytes after the last tensor"}});
  c.push_back({"trailing_bytes_no_tensors", raw_file("{}", "PK\3\4"), {"4 trailing bytes"}});
  c.push_back({"misaligned_tensor",
               raw_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                        zeros(6)),
               {"tensor 'b' starts at data offset 2", "not aligned", "F32, 4 bytes"}});
  c.push_back({"negative_shape",
               raw_file(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})"),
               {"tensor 't' has shape [-1]", "non-negative integers"}});
  c.push_back({"float_shape",
               raw_file(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", zeros(8)),
               {"tensor 't' has shape [2.0]", "non-negative integers"}});
  c.push_back({"shape_2pow63",
               raw_file(R"({"t":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})"),
               {"tensor 't' has shape [9223372036854775808]", "below 2^63"}});
  c.push_back({"shape_2pow64",
               raw_file(R"({"t":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}})"),
               {"tensor 't' has shape", "non-negative integers"}});
  c.push_back({"shape_not_array",
               raw_file(R"({"t":{"dtype":"U8","shape":4,"data_offsets":[0,4]}})", zeros(4)),
               {"tensor 't' has shape 4"}});
  c.push_back({"shape_product_overflow",
               raw_file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})"),
               {"shape [4294967296, 4294967296, 2] x F32", "does not fit in 64 bits"}});
  {
    // Eight 2^61-byte tensors: the last one ends at 2^64, which no 64-bit offset can hold.
    // The reference reader's final coverage sum overflowed on a header like this.
    std::string h = "{";
    for (uint64_t k = 0; k < 8; ++k) {
      h += (k ? "," : "") + cat("\"t", k, "\":{\"dtype\":\"U8\",\"shape\":[", 1ull << 61,
                                "],\"data_offsets\":[", k << 61, ",",
                                k == 7 ? std::string("18446744073709551616")
                                       : std::to_string((k + 1) << 61),
                                "]}");
    }
    c.push_back({"eight_2pow61_tensors", raw_file(h + "}"),
                 {"tensor 't7' has data_offsets [16140901064495857664,", "two non-negative 64-bit"}});
    // Seven of them are individually valid and contiguous, ending 2^61 short of 2^64: the
    // coverage check must compare, not add, or it wraps.
    h = "{";
    for (uint64_t k = 0; k < 7; ++k) {
      h += (k ? "," : "") + cat("\"t", k, "\":{\"dtype\":\"U8\",\"shape\":[", 1ull << 61,
                                "],\"data_offsets\":[", k << 61, ",", (k + 1) << 61, "]}");
    }
    c.push_back({"seven_2pow61_tensors", raw_file(h + "}"),
                 {"truncated: the tensors need 16140901064495857664 bytes", "holds 0"}});
  }
  c.push_back({"unknown_entry_field",
               raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"offset":0}})",
                        zeros(8)),
               {"tensor 't' has unknown field 'offset'"}});
  c.push_back({"missing_data_offsets", raw_file(R"({"t":{"dtype":"F32","shape":[0]}})"),
               {"tensor 't' has no 'data_offsets'"}});
  c.push_back({"entry_not_object", raw_file(R"({"t":[1,2]})"),
               {"tensor 't' must be an object"}});
  c.push_back({"offsets_reversed",
               raw_file(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})"),
               {"tensor 't' has data_offsets [8,0]", "begin <= end"}});
  c.push_back({"offsets_one_value",
               raw_file(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[0]}})"),
               {"tensor 't' has data_offsets [0]"}});
  c.push_back({"offsets_negative",
               raw_file(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}})"),
               {"tensor 't' has data_offsets [-4,0]"}});
  c.push_back({"metadata_value_not_string",
               raw_file(R"({"__metadata__":{"format":"pt","step":5}})"),
               {"__metadata__ value of 'step' must be a string, found 5"}});
  c.push_back({"metadata_not_object", raw_file(R"({"__metadata__":["a","b"]})"),
               {"__metadata__ must map strings to strings"}});
  c.push_back({"metadata_nested", raw_file(R"({"__metadata__":{"a":{"b":"c"}}})"),
               {"__metadata__ value of 'a' must be a string"}});
  return c;
}

// gtest prints parameters; the name says more than the bytes.
void PrintTo(const CorruptCase& c, std::ostream* os) { *os << c.name; }

class CorruptFile : public ::testing::TestWithParam<CorruptCase> {};

TEST_P(CorruptFile, ErrorNamesTheProblem) {
  TempDir dir;
  const CorruptCase& c = GetParam();
  std::string path = dir.file(c.name + ".safetensors");
  test::write_bytes(path, c.bytes);
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << c.name << ": opened without an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;  // names the file
    for (const auto& n : c.needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "\"" << msg << "\" does not mention \"" << n << "\"";
  }
}

INSTANTIATE_TEST_SUITE_P(All, CorruptFile, ::testing::ValuesIn(corrupt_cases()),
                         [](const auto& info) { return info.param.name; });

// Small valid files, also seeds for the fuzzer.
std::vector<std::pair<std::string, std::string>> valid_seeds() {
  std::string f32 = zeros(8), f16(4, '\0'), i32 = zeros(4);
  float vals[2] = {1.5f, -2.0f};
  std::memcpy(f32.data(), vals, 8);
  return {
      {"valid_no_tensors", raw_file("{}")},
      {"valid_leading_spaces", raw_file("  \n{}")},
      {"valid_three_dtypes",
       raw_file(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
                R"("c":{"dtype":"I32","shape":[1,1],"data_offsets":[12,16]}})",
                f32 + std::string("\x00\x3c\x00\xc0", 4) + i32)},
      {"valid_zero_element",
       raw_file(R"({"e":{"dtype":"BF16","shape":[0,3],"data_offsets":[0,0]},)"
                R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                zeros(4))},
  };
}

TEST(Safetensors, ValidSeedsOpen) {
  TempDir dir;
  for (const auto& [name, bytes] : valid_seeds()) {
    std::string path = dir.file(name + ".safetensors");
    test::write_bytes(path, bytes);
    SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& e : f.entries()) {
      if (e.dtype == "I32") f.load(e.name, DType::I32);
      else f.load(e.name, DType::F32);
    }
  }
}

TEST(Safetensors, CommittedCorpusMatchesAndFails) {
  for (const auto& c : corrupt_cases()) {
    test::check_corpus_file(c.name + ".safetensors", c.bytes);
    EXPECT_THROW(SafetensorsFile::open(test::corpus_dir() + "/" + c.name + ".safetensors"), Error)
        << c.name;
  }
  for (const auto& [name, bytes] : valid_seeds()) test::check_corpus_file(name + ".safetensors", bytes);
}

TEST(Safetensors, HundredThousandLevelsDoNotCrash) {
  TempDir dir;
  std::string path = dir.file("deep.safetensors");
  test::write_bytes(path, raw_file("{\"a\":" + std::string(100000, '[') +
                                   std::string(100000, ']') + "}"));
  EXPECT_ERROR(SafetensorsFile::open(path), "nests deeper than 64 levels");
}

// A header may name some 150,000 tensors (2^20 JSON values), and loaders look each
// one up by name: found by an index, 120,000 lookups take milliseconds (a linear find made
// the fuzzer's pass over such a file quadratic: minutes).
TEST(Safetensors, EveryNameOfAHugeHeaderIsFoundFast) {
  TempDir dir;
  const int n = 120000;  // about 840,000 JSON values, under the 2^20 limit
  std::string header = "{";
  for (int i = 0; i < n; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":{\"dtype\":\"BF16\",\"shape\":[1],"
              "\"data_offsets\":[" + std::to_string(2 * i) + "," + std::to_string(2 * i + 2) + "]}";
  header += "}";
  std::string path = dir.file("wide.safetensors");
  test::write_bytes(path, raw_file(header, std::string(2 * n, '\0')));
  SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_EQ(f.entries().size(), static_cast<size_t>(n));
  const auto start = std::chrono::steady_clock::now();
  for (int i = n - 1; i >= 0; --i) {
    const TensorEntry* e = f.find("t" + std::to_string(i));
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->begin, static_cast<uint64_t>(2 * i));
  }
  EXPECT_EQ(f.find("t-1"), nullptr);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
}

// A file that is not a safetensors file (a text file, a hard link to anything) is named as
// such; its first 8 bytes, read as a header length, are never printed (they would echo the
// file's content as a number).
TEST(Safetensors, AFileThatIsNotOneIsNotEchoed) {
  TempDir dir;
  const std::string text = "hello world! this is a text file, not a tensor file\n";
  test::write_bytes(dir.file("text.safetensors"), text);
  uint64_t as_length = 0;
  for (int i = 7; i >= 0; --i) as_length = (as_length << 8) | uint8_t(text[i]);
  try {
    SafetensorsFile::open(dir.file("text.safetensors"));
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("not a safetensors file (the header length in its first 8 bytes is "
                       "larger than the file, " +
                       std::to_string(text.size()) + " bytes)"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find(std::to_string(as_length)), std::string::npos) << msg;
    EXPECT_EQ(msg.find("hello"), std::string::npos) << msg;
  }
  // A length that fits a (sparse) file but not the limits: named by the limits alone.
  const uint64_t length = 100'000'123;
  test::write_bytes(dir.file("big.safetensors"), u64_le(length) + "{}");
  std::filesystem::resize_file(dir.file("big.safetensors"), length + 100);
  try {
    SafetensorsFile::open(dir.file("big.safetensors"));
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the header length in its first 8 bytes is larger than the limit of "
                       "100000000 bytes"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find(std::to_string(length)), std::string::npos) << msg;
  }
  test::write_bytes(dir.file("wide.safetensors"), u64_le(4000) + "{}" + std::string(3998, ' '));
  EXPECT_ERROR(SafetensorsFile::open(dir.file("wide.safetensors"), "payload x", 1024, "an asset"),
               "payload x: the header length in its first 8 bytes is more than 1024 bytes, all "
               "that an asset can need");
}

// A reader that knows what to expect bounds each tensor's size before anything is read: a
// sparse file costs its maker nothing, whatever its header promises.
TEST(Safetensors, ATensorOverTheReadersLimitIsRefusedFromTheHeader) {
  TempDir dir;
  const uint64_t bytes = uint64_t{4} << 30;
  const std::string header =
      cat(R"({"cond":{"dtype":"F32","shape":[1048576,1024],"data_offsets":[0,)", bytes, "]}}");
  test::write_bytes(dir.file("sparse.safetensors"), raw_file(header));
  std::filesystem::resize_file(dir.file("sparse.safetensors"), 8 + header.size() + bytes);
  const auto t0 = std::chrono::steady_clock::now();
  SafetensorsFile f = SafetensorsFile::open(dir.file("sparse.safetensors"), "inputs x");
  EXPECT_ERROR(f.check_tensor_bytes(uint64_t{2} << 30, "an inputs file"),
               "inputs x: tensor 'cond' (F32 [1048576, 1024]) is 4294967296 bytes, more than the "
               "2147483648 bytes an inputs file may hold in one tensor; refused before reading it");
  f.check_tensor_bytes(bytes, "a large file");  // at the limit: fine
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(Safetensors, RoundTripKeepsValuesOrderAndMetadata) {
  TempDir dir;
  std::string path = dir.file("rt.safetensors");
  Tensor f = Tensor::from_floats({1.f, -2.5f, 3.25f, 1e-30f, 7.f, 8.f}, {2, 3}, DType::F32);
  Tensor b = Tensor::from_floats({0.5f, -1.f, 3.f}, {3}, DType::BF16);
  Tensor i = Tensor::from_ints({1, -2, 2147483647, -2147483647 - 1}, {4, 1});
  Tensor empty = Tensor::empty({0, 5}, DType::F32, Device::CPU);
  // A 3-element bf16 tensor first: written in this order, the f32 after it would start at
  // byte 6. The writer puts 4-byte dtypes first so every tensor stays aligned.
  write_safetensors(path, {{"z_bf16", b}, {"empty", empty}, {"a_f32", f}, {"ints", i}},
                    {{"format", "pt"}, {"note", "x\"y"}});

  std::string bytes = test::read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";

  SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.entries().size(), 4u);
  std::vector<std::string> order;
  for (const auto& e : file.entries()) order.push_back(e.name);
  EXPECT_EQ(order, (std::vector<std::string>{"empty", "a_f32", "ints", "z_bf16"}));
  EXPECT_EQ(file.find("z_bf16")->dtype, "BF16");
  EXPECT_EQ(file.find("z_bf16")->begin, 40u);
  EXPECT_EQ(file.metadata().at("note"), "x\"y");
  EXPECT_EQ(file.find("missing"), nullptr);
  ASSERT_NE(file.find("ints"), nullptr);
  EXPECT_EQ(file.find("ints")->shape, (Shape{4, 1}));

  EXPECT_EQ(file.load("a_f32", DType::F32).to_floats(), f.to_floats());
  EXPECT_EQ(file.load("z_bf16", DType::BF16).to_floats(), b.to_floats());
  EXPECT_EQ(file.load("z_bf16", DType::F32).to_floats(), b.to_floats());
  Tensor ii = file.load("ints", DType::I32);
  EXPECT_EQ(std::vector<int32_t>(ii.data_as<int32_t>(), ii.data_as<int32_t>() + 4),
            (std::vector<int32_t>{1, -2, 2147483647, -2147483647 - 1}));
  Tensor e = file.load("empty", DType::BF16);
  EXPECT_EQ(e.shape(), (Shape{0, 5}));
  EXPECT_EQ(e.numel(), 0);
}

TEST(Safetensors, F32ToBf16RoundsToNearestEvenAcrossChunks) {
  TempDir dir;
  std::string path = dir.file("big.safetensors");
  // More elements than one conversion chunk (1 Mi floats), with ties and specials.
  std::vector<float> v(2'500'003);
  for (size_t k = 0; k < v.size(); ++k) v[k] = std::ldexp(1.0f + static_cast<float>(k % 997) / 4096.0f, static_cast<int>(k % 40) - 20) * (k % 3 ? 1.f : -1.f);
  v[1'048'576] = 1.00390625f;           // exactly halfway between two bf16: rounds to even (1.0)
  v[1'048'577] = 1.01171875f;           // halfway, rounds up to even 1.015625
  v[2'500'000] = std::numeric_limits<float>::infinity();
  v[2'500'001] = std::numeric_limits<float>::quiet_NaN();
  write_safetensors(path, {{"w", Tensor::from_floats(v, {static_cast<int64_t>(v.size())}, DType::F32)}});
  Tensor t = SafetensorsFile::open(path).load("w", DType::BF16);
  const uint16_t* p = t.data_as<uint16_t>();
  size_t mismatches = 0;
  for (size_t k = 0; k < v.size(); ++k) mismatches += p[k] != float_to_bf16(v[k]);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(bf16_to_float(p[1'048'576]), 1.0f);
  EXPECT_EQ(bf16_to_float(p[1'048'577]), 1.015625f);
  EXPECT_TRUE(std::isinf(bf16_to_float(p[2'500'000])));
  EXPECT_TRUE(std::isnan(bf16_to_float(p[2'500'001])));
}

TEST(Safetensors, F16LoadsAsF32AndBf16) {
  TempDir dir;
  std::string path = dir.file("f16.safetensors");
  // 1, -2, 65504 (max), 2^-24 (smallest subnormal), 2^-14 (smallest normal), +inf, NaN, -0.
  const uint16_t halves[8] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00, 0x7e00, 0x8000};
  std::string data(16, '\0');
  std::memcpy(data.data(), halves, 16);
  test::write_bytes(path, raw_file(R"({"h":{"dtype":"F16","shape":[8],"data_offsets":[0,16]}})", data));
  SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<float> f = file.load("h", DType::F32).to_floats();
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], 65504.0f);
  EXPECT_EQ(f[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(f[4], std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(f[5]) && f[5] > 0);
  EXPECT_TRUE(std::isnan(f[6]));
  EXPECT_TRUE(f[7] == 0.0f && std::signbit(f[7]));
  Tensor b = file.load("h", DType::BF16);
  EXPECT_EQ(b.data_as<uint16_t>()[2], float_to_bf16(65504.0f));
  EXPECT_EQ(bf16_to_float(b.data_as<uint16_t>()[0]), 1.0f);
}

TEST(Safetensors, LoadRefusesWrongTargetsAndUnsupportedDtypes) {
  TempDir dir;
  std::string path = dir.file("mixed.safetensors");
  test::write_bytes(path, raw_file(R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                                   R"("f":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                                   R"("i":{"dtype":"I32","shape":[1],"data_offsets":[12,16]}})",
                                   zeros(16)));
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_ERROR(file.load("d", DType::F32), "tensor 'd' has dtype F64", "sparse3d loads");
  EXPECT_ERROR(file.load("f", DType::I32), "tensor 'f' has dtype F32", "cannot be loaded as i32");
  EXPECT_ERROR(file.load("i", DType::F32), "tensor 'i' has dtype I32", "cannot be loaded as f32");
  EXPECT_ERROR(file.load("nope", DType::F32), "has no tensor 'nope'", path);
}

TEST(Safetensors, LoadNoticesAFileTruncatedAfterOpen) {
  TempDir dir;
  std::string path = dir.file("shrink.safetensors");
  write_safetensors(path, {{"a", Tensor::from_floats({1, 2, 3, 4}, {4}, DType::F32)}});
  SafetensorsFile file = SafetensorsFile::open(path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  EXPECT_ERROR(file.load("a", DType::F32), "shrank");
}

TEST(Safetensors, OpenWithWhatNamesTheFileThatWay) {
  TempDir dir;
  std::string path = dir.file("c.safetensors");
  test::write_bytes(path, raw_file("{" R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})" "}", zeros(12)));
  EXPECT_ERROR(SafetensorsFile::open(path, "checkpoint c.safetensors"),
               "checkpoint c.safetensors: 4 trailing bytes");
  EXPECT_ERROR(SafetensorsFile::open(dir.file("absent.safetensors")), "absent.safetensors",
               "cannot open");
  EXPECT_ERROR(SafetensorsFile::open(dir.dir()), "not a regular file");
  // A FIFO must be refused, not block the open waiting for a writer.
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_ERROR(SafetensorsFile::open(dir.file("fifo")), "not a regular file");
}

TEST(Safetensors, ZeroSizeTensorsMayShareAnOffset) {
  TempDir dir;
  std::string path = dir.file("z.safetensors");
  test::write_bytes(path, raw_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                                   R"("b":{"dtype":"I32","shape":[2,0],"data_offsets":[0,0]},)"
                                   R"("c":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("d":{"dtype":"BF16","shape":[0,9223372036854775807],"data_offsets":[4,4]}})",
                                   zeros(4)));
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.entries().size(), 4u);
  EXPECT_EQ(file.load("b", DType::I32).numel(), 0);
  EXPECT_EQ(file.load("d", DType::BF16).numel(), 0);
}

TEST(Safetensors, WriterRefusesBadInput) {
  TempDir dir;
  Tensor t = Tensor::from_floats({1}, {1}, DType::F32);
  EXPECT_ERROR(write_safetensors(dir.file("a.safetensors"), {{"x", t}, {"x", t}}),
               "duplicate tensor name 'x'");
  EXPECT_ERROR(write_safetensors(dir.file("a.safetensors"), {{"x", Tensor()}}),
               "tensor 'x' is undefined");
  EXPECT_ERROR(write_safetensors(dir.file("a.safetensors"), {{"__metadata__", t}}),
               "cannot be named __metadata__");
  EXPECT_ERROR(write_safetensors(dir.file("a.safetensors"), {{"bad\xff", t}}),
               "cannot encode the header");
  EXPECT_ERROR(write_safetensors(dir.file("no/such/dir/a.safetensors"), {{"x", t}}),
               "creating a temporary file");
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.safetensors")));
}

}  // namespace
}  // namespace s3d::io
