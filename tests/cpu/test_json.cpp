// Strict JSON: depth cap, duplicate keys, and typed getters that range-check before they
// convert (docs/RELIABILITY.md: 2^64 must not become 0).
#include "io/json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "io_test_util.h"

namespace s3d::io {
namespace {

std::string nested(int levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

TEST(Json, DepthCapIs64Levels) {
  EXPECT_NO_THROW(parse_json(nested(64), "t"));
  EXPECT_ERROR(parse_json(nested(65), "cfg.json"), "cfg.json: JSON nests deeper than 64 levels");
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\":";
  objects += "1" + std::string(65, '}');
  EXPECT_ERROR(parse_json(objects, "t"), "deeper than 64");
}

TEST(Json, HundredThousandLevelsFailCleanly) {
  EXPECT_ERROR(parse_json(nested(100000), "deep.json"), "deep.json", "deeper than 64");
  // Unbalanced too: the cap must fire before the syntax error at the end.
  EXPECT_ERROR(parse_json(std::string(100000, '['), "t"), "deeper than 64");
}

TEST(Json, DuplicateKeysAreRejectedPerObject) {
  EXPECT_ERROR(parse_json(R"({"a":1,"b":2,"a":3})", "m.json"), "m.json: duplicate key 'a'");
  EXPECT_ERROR(parse_json(R"({"x":{"k":1,"k":1}})", "t"), "duplicate key 'k'");
  EXPECT_ERROR(parse_json(R"([{"k":[{"z":1,"z":2}]}])", "t"), "duplicate key 'z'");
  // The same key in sibling or nested objects is fine.
  EXPECT_NO_THROW(parse_json(R"({"a":{"a":{"a":1}},"b":{"a":2},"c":[{"a":1},{"a":2}]})", "t"));
  // After a nested object closes, its keys no longer count for the outer one.
  EXPECT_NO_THROW(parse_json(R"({"o":{"k":1},"k":2})", "t"));
}

TEST(Json, SyntaxErrorsNameTheSource) {
  EXPECT_ERROR(parse_json("{\"a\":}", "config x.json"), "config x.json: invalid JSON");
  EXPECT_ERROR(parse_json("", "t"), "invalid JSON");
  EXPECT_ERROR(parse_json("{} {}", "t"), "invalid JSON");
  EXPECT_ERROR(parse_json("{\"a\":1e400}", "t"), "invalid JSON", "1e400");
  EXPECT_ERROR(parse_json("{\"a\":\"\xc0\xaf\"}", "t"), "invalid JSON", "UTF-8");
  EXPECT_ERROR(parse_json("{/*c*/}", "t"), "invalid JSON");  // no comments
  EXPECT_ERROR(parse_json("{\"a\":NaN}", "t"), "invalid JSON");
}

TEST(Json, IntegersAreRangeCheckedBeforeConversion) {
  Json j = parse_json(R"({"small":-5,"big":9223372036854775807,"u63":9223372036854775808,
      "u64max":18446744073709551615,"two64":18446744073709551616,"f":30.0,"b":true,"s":"3"})",
                      "t");
  EXPECT_EQ(get_int(j, "small", "t", -10, 10), -5);
  EXPECT_EQ(get_int(j, "big", "t", 0, INT64_MAX), INT64_MAX);
  EXPECT_ERROR(get_int(j, "small", "cfg", 0, 10), "cfg: 'small' must be an integer in [0, 10], found -5");
  EXPECT_ERROR(get_int(j, "u63", "t", 0, INT64_MAX), "'u63'", "found 9223372036854775808");
  EXPECT_ERROR(get_int(j, "u64max", "t", INT64_MIN, INT64_MAX), "found 18446744073709551615");
  EXPECT_ERROR(get_int(j, "two64", "t", 0, 100), "'two64' must be an integer",
               "beyond the 64-bit range");
  EXPECT_ERROR(get_int(j, "f", "t", 0, 100), "'f' must be an integer", "found 30.0");
  EXPECT_ERROR(get_int(j, "b", "t", 0, 100), "'b' must be an integer", "found true");
  EXPECT_ERROR(get_int(j, "s", "t", 0, 100), "'s' must be an integer", "found \"3\"");
  EXPECT_ERROR(get_int(j, "absent", "cfg", 0, 100), "cfg: 'absent' is missing");
  EXPECT_EQ(get_int_or(j, "absent", "t", 0, 100, 42), 42);
  EXPECT_ERROR(get_int_or(j, "f", "t", 0, 100, 42), "'f' must be an integer");
  EXPECT_ERROR(get_int(parse_json("[1]", "t"), "a", "t", 0, 1), "expected a JSON object");
}

TEST(Json, U64CoversTheFullRangeAndNoMore) {
  Json j = parse_json(R"({"max":18446744073709551615,"two64":18446744073709551616,"neg":-1,"z":0})", "t");
  EXPECT_EQ(get_u64(j, "max", "t"), UINT64_MAX);
  EXPECT_EQ(get_u64(j, "z", "t"), 0u);
  EXPECT_ERROR(get_u64(j, "two64", "t"), "'two64' must be an integer in [0, 18446744073709551615]");
  EXPECT_ERROR(get_u64(j, "neg", "t"), "found -1");
  Json built = {{"i", int64_t{7}}};  // a signed value built in code, not parsed
  EXPECT_EQ(get_u64(built, "i", "t"), 7u);
}

TEST(Json, NumbersBoolsAndStringsAreStrict) {
  Json j = parse_json(R"({"r":5.3334,"i":3,"huge":1e300,"b":false,"one":1,"s":"x","n":null})", "t");
  EXPECT_DOUBLE_EQ(get_number(j, "r", "t", 0, 10), 5.3334);
  EXPECT_DOUBLE_EQ(get_number(j, "i", "t", 0, 10), 3.0);
  EXPECT_ERROR(get_number(j, "huge", "t", 0, 1e6), "'huge' must be a number in [0, 1e+06], found 1e+300");
  EXPECT_ERROR(get_number(j, "b", "t", 0, 1), "'b' must be a number", "a boolean false");
  EXPECT_ERROR(get_number(j, "s", "t", 0, 1), "a string \"x\"");
  EXPECT_DOUBLE_EQ(get_number_or(j, "absent", "t", 0, 1, 0.5), 0.5);
  EXPECT_FALSE(get_bool_or(j, "b", "t", true));
  EXPECT_TRUE(get_bool_or(j, "absent", "t", true));
  EXPECT_ERROR(get_bool_or(j, "one", "t", false), "'one' must be true or false, found an integer 1");
  EXPECT_ERROR(get_bool_or(j, "n", "t", false), "found null");
  EXPECT_EQ(get_string(j, "s", "t"), "x");
  EXPECT_EQ(get_string_or(j, "absent", "t", "d"), "d");
  EXPECT_ERROR(get_string(j, "i", "t"), "'i' must be a string, found an integer 3");
  Json nan = {{"x", std::nan("")}};  // impossible from text, possible in code
  EXPECT_ERROR(get_number(nan, "x", "t", -1e9, 1e9), "'x' must be a number");
}

TEST(Json, UnknownKeysAreNamedWithTheKnownOnes) {
  Json j = parse_json(R"({"a":1,"typo":2})", "t");
  EXPECT_ERROR(check_known_keys(j, {"a", "b"}, "cfg"), "cfg: unknown key 'typo' (known keys: a, b)");
  EXPECT_NO_THROW(check_known_keys(j, {"a", "typo"}, "cfg"));
  EXPECT_ERROR(check_known_keys(Json::array(), {"a"}, "cfg"), "expected a JSON object, found an array");
}

TEST(Json, FilesAreCappedAt64MiB) {
  test::TempDir dir;
  std::string ok = dir.file("ok.json"), big = dir.file("big.json");
  test::write_bytes(ok, R"({"a": [1, 2]})");
  EXPECT_EQ(read_json_file(ok).at("a").size(), 2u);
  test::write_bytes(big, "{}");
  std::filesystem::resize_file(big, (64u << 20) + 1);  // sparse: no 64 MiB written
  EXPECT_ERROR(read_json_file(big), big, "67108865 bytes is larger than the 67108864-byte limit");
  EXPECT_ERROR(read_json_file(dir.file("absent.json")), "absent.json", "not a readable regular file");
  test::write_bytes(ok, R"({"a":1,"a":2})");
  EXPECT_ERROR(read_json_file(ok), ok + ": duplicate key 'a'");
}

}  // namespace
}  // namespace s3d::io

namespace s3d::io {
namespace {

// Many small containers parse in linear time: 200,000 empty objects in an array (600 KB)
// took 20 s with nlohmann's callback parser; now a fraction of a second (the bound is loose
// for a loaded CI machine). A document of more than 2^20 values (here 2.8 million, 8 MiB) is
// refused when the count passes the limit, also in a fraction of a second.
TEST(JsonParse, ManyEmptyObjectsParseInLinearTime) {
  for (size_t n : {size_t(200000), size_t(2800000)}) {
    std::string text = "[";
    for (size_t i = 0; i < n; ++i) text += i ? ",{}" : "{}";
    text += "]";
    const auto t0 = std::chrono::steady_clock::now();
    if (n < (size_t(1) << 20)) {
      EXPECT_EQ(parse_json(text, "many objects").size(), n);
    } else {
      EXPECT_ERROR(parse_json(text, "many objects"), "more than 1048576 JSON values");
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0) << n << " empty objects took " << s << " s";
  }
  // The checks still hold inside such a document.
  EXPECT_THROW(parse_json("[{}, {\"a\": 1, \"a\": 2}]", "dup"), Error);
  std::string deep(65, '['), close(65, ']');
  EXPECT_THROW(parse_json(deep + close, "deep"), Error);
  EXPECT_NO_THROW(parse_json(std::string(64, '[') + std::string(64, ']'), "deep enough"));
}

// dump_readable: the same value back, sample arrays on a few lines instead of one per number.
TEST(Json, ReadableDumpReadsBackTheSameValueInFewLines) {
  Json samples = Json::array();
  for (int i = 0; i < 300; ++i) samples.push_back(0.001 * i + 1e-9 * i * i);
  const Json v = {{"name", "bench \"x\""},
                  {"empty_object", Json::object()},
                  {"empty_array", Json::array()},
                  {"samples", samples},
                  {"rows", {{{"a", 1}, {"b", {true, nullptr, "s"}}}, {{"a", -2}}}},
                  {"small", {{"a", 1}, {"b", "c,d:e"}}},
                  {"big", uint64_t{18446744073709551615ull}}};
  const std::string text = dump_readable(v);
  EXPECT_EQ(parse_json(text, "readable"), v);
  const auto lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_LT(lines, 80) << text;  // dump(2) takes over 300 lines for the samples alone
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    EXPECT_LE(end - start, 110u) << text.substr(start, end - start);
    start = end + 1;
  }
  EXPECT_NE(text.find("\"empty_object\": {}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"empty_array\": []"), std::string::npos) << text;
  // What fits on a line stays on it; separators inside strings are left alone.
  EXPECT_NE(text.find("\"small\": {\"a\": 1, \"b\": \"c,d:e\"}"), std::string::npos) << text;
  // Invalid UTF-8 is replaced, as the bench's writer did with dump(2).
  const Json bad = std::string("a\xff");
  EXPECT_NO_THROW(parse_json(dump_readable(bad), "bad"));
}

// The C++ writer and tools/compact_json.py (tests/python/test_compact_json.py reads the same
// file) lay a value out alike: tests/data/json_layout.json is that layout, byte for byte.
TEST(Json, ReadableDumpIsTheLayoutThePythonWriterUses) {
  const std::string path = std::string(SPARSE3D_TEST_DATA) + "/json_layout.json";
  std::ifstream f(path, std::ios::binary);
  ASSERT_TRUE(f) << path;
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(dump_readable(parse_json(text, path)) + "\n", text);
}

}  // namespace
}  // namespace s3d::io
