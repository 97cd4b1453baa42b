// Model config: presets, the released NAME.json format, round trips, and every error.
#include "model/config.h"

#include <gtest/gtest.h>

#include <chrono>

#include "io_test_util.h"

namespace s3d::model {
namespace {

// A released-style config with every key of SLatFlowModel.__init__.
const char* const kReleased = R"({"name": "SLatFlowModel", "args": {
  "resolution": 64, "in_channels": 32, "model_channels": 1536, "cond_channels": 1024,
  "out_channels": 32, "num_blocks": 30, "num_heads": 12, "mlp_ratio": 5.3334,
  "pe_mode": "rope", "rope_freq": [1.0, 10000.0], "share_mod": true, "qk_rms_norm": true,
  "qk_rms_norm_cross": true, "initialization": "scaled", "dtype": "bfloat16",
  "use_checkpoint": true}})";

// The released config with one args key replaced (or added) by `key: value`.
std::string with_arg(const std::string& key, const std::string& value) {
  io::Json j = io::parse_json(kReleased, "t");
  j["args"].erase(key);
  std::string args = j["args"].dump();
  args.insert(1, "\"" + key + "\":" + value + (j["args"].empty() ? "" : ","));
  return R"({"name":"SLatFlowModel","args":)" + args + "}";
}

ModelConfig parse(const std::string& text) {
  return config_from_json(io::parse_json(text, "config c.json"), "config c.json");
}

TEST(Config, ReleasedJsonGivesTheShapePreset) {
  ModelConfig c = parse(kReleased);
  EXPECT_EQ(config_to_json(c), config_to_json(preset("trellis2-shape-1024")));
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.mlp_hidden(), 8192);
}

TEST(Config, Presets) {
  ModelConfig s = preset("trellis2-shape-1024");
  EXPECT_EQ(s.model_channels, 1536);
  EXPECT_EQ(s.num_blocks, 30);
  EXPECT_EQ(s.num_heads, 12);
  EXPECT_EQ(s.cond_channels, 1024);
  EXPECT_EQ(s.in_channels, 32);
  EXPECT_EQ(s.out_channels, 32);
  EXPECT_EQ(s.resolution, 64);
  EXPECT_EQ(s.pe_mode, "rope");
  EXPECT_TRUE(s.share_mod && s.qk_rms_norm && s.qk_rms_norm_cross);
  EXPECT_EQ(s.initialization, "scaled");
  EXPECT_EQ(s.dtype, "bfloat16");
  EXPECT_EQ(preset("trellis2-tex-1024").in_channels, 64);
  EXPECT_EQ(preset("trellis2-tex-1024").out_channels, 32);
  ModelConfig t = preset("tiny");
  EXPECT_EQ(t.model_channels, 128);
  EXPECT_EQ(t.num_blocks, 2);
  EXPECT_EQ(t.head_dim(), 64);
  EXPECT_EQ(t.mlp_hidden(), 512);
  EXPECT_EQ(t.cond_channels, 64);
  EXPECT_TRUE(t.share_mod && t.qk_rms_norm && t.qk_rms_norm_cross);
  for (const auto& name : preset_names()) EXPECT_NO_THROW(preset(name).validate()) << name;
  EXPECT_ERROR(preset("huge"), "unknown model preset 'huge'", "trellis2-shape-1024, trellis2-tex-1024, tiny");
}

TEST(Config, JsonRoundTrips) {
  for (const auto& name : preset_names()) {
    io::Json j = config_to_json(preset(name));
    io::Json again = config_to_json(config_from_json(j, name));
    EXPECT_EQ(j, again) << name;
    // Through text as well: doubles such as 5.3334 must survive dump and parse.
    EXPECT_EQ(config_to_json(parse(j.dump())), j) << name;
  }
  EXPECT_EQ(config_to_json(preset("trellis2-shape-1024"))["args"]["num_heads"], 12);
  EXPECT_EQ(config_to_json(preset("tiny"))["args"]["rope_freq"], io::Json::parse("[1.0, 10000.0]"));
}

TEST(Config, AbsentKeysTakeTheOriginalDefaults) {
  ModelConfig c = parse(R"({"name":"SLatFlowModel","args":{"resolution":64,"in_channels":8,
      "model_channels":256,"cond_channels":64,"out_channels":8,"num_blocks":2}})");
  EXPECT_EQ(c.num_heads, 4);  // model_channels / num_head_channels (default 64)
  EXPECT_DOUBLE_EQ(c.mlp_ratio, 4.0);
  EXPECT_EQ(c.pe_mode, "ape");
  EXPECT_DOUBLE_EQ(c.rope_freq0, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.share_mod || c.qk_rms_norm || c.qk_rms_norm_cross);
  EXPECT_EQ(c.initialization, "vanilla");
  EXPECT_EQ(c.dtype, "float32");
}

TEST(Config, NumHeadChannelsDerivesHeads) {
  io::Json j = io::parse_json(kReleased, "t");
  j["args"].erase("num_heads");
  j["args"]["num_head_channels"] = 128;
  EXPECT_EQ(config_from_json(j, "t").num_heads, 12);
  j["args"]["num_heads"] = nullptr;  // Optional[int] in the original
  EXPECT_EQ(config_from_json(j, "t").num_heads, 12);
  j["args"]["num_head_channels"] = 100;
  EXPECT_ERROR(config_from_json(j, "cfg"), "model_channels (1536) must be divisible by num_head_channels (100)");
  j["args"]["num_heads"] = 6;  // num_heads wins when both are given
  EXPECT_EQ(config_from_json(j, "t").num_heads, 6);
}

TEST(Config, StructuralErrors) {
  EXPECT_ERROR(parse(R"({"name":"ElasticSLatFlowModel","args":{}})"),
               "config c.json: 'name' must be a model family (\"SLatFlowModel\", "
               "\"SparseStructureFlowModel\"), found \"ElasticSLatFlowModel\"");
  EXPECT_ERROR(parse(R"({"name":"SLatFlowModel"})"), "'args' is missing");
  EXPECT_ERROR(parse(R"({"args":{}})"), "'name' is missing");
  EXPECT_ERROR(parse(R"({"name":"SLatFlowModel","args":{},"extra":1})"), "unknown key 'extra'");
  EXPECT_ERROR(parse(R"({"name":"SLatFlowModel","args":[1]})"), "args: expected a JSON object");
  EXPECT_ERROR(parse("[]"), "expected a JSON object");
}

TEST(Config, UnknownKeyIsNamedWithTheKnownKeys) {
  EXPECT_ERROR(parse(with_arg("num_block", "30")), "config c.json args: unknown key 'num_block'",
               "known keys: resolution, in_channels", "num_blocks");
}

TEST(Config, WrongTypesNameKeyExpectationAndValue) {
  EXPECT_ERROR(parse(with_arg("num_blocks", "\"30\"")), "'num_blocks' must be an integer in [1, 1048576], found \"30\"");
  EXPECT_ERROR(parse(with_arg("num_blocks", "30.0")), "'num_blocks' must be an integer", "found 30.0");
  EXPECT_ERROR(parse(with_arg("num_blocks", "true")), "'num_blocks' must be an integer", "found true");
  EXPECT_ERROR(parse(with_arg("share_mod", "1")), "'share_mod' must be true or false, found an integer 1");
  EXPECT_ERROR(parse(with_arg("use_checkpoint", "\"no\"")), "'use_checkpoint' must be true or false");
  EXPECT_ERROR(parse(with_arg("mlp_ratio", "\"4\"")), "'mlp_ratio' must be a number", "a string \"4\"");
  EXPECT_ERROR(parse(with_arg("pe_mode", "\"sine\"")), "'pe_mode' must be one of \"ape\", \"rope\", found \"sine\"");
  EXPECT_ERROR(parse(with_arg("pe_mode", "3")), "'pe_mode' must be a string, found an integer 3");
  EXPECT_ERROR(parse(with_arg("dtype", "\"float64\"")), "'dtype' must be one of \"bfloat16\", \"float16\", \"float32\"");
  EXPECT_ERROR(parse(with_arg("initialization", "0")), "'initialization' must be a string");
  EXPECT_ERROR(parse(with_arg("rope_freq", "10000.0")), "'rope_freq' must be an array [f0, theta], found 10000.0");
  EXPECT_ERROR(parse(with_arg("rope_freq", "[1.0, 2.0, 3.0]")), "'rope_freq' must be an array");
  EXPECT_ERROR(parse(with_arg("rope_freq", "[1.0, \"x\"]")), "'rope_freq' theta (second entry) must be a positive number, found \"x\"");
  EXPECT_ERROR(parse(with_arg("rope_freq", "[0, 10000]")), "'rope_freq' f0 (first entry) must be a positive number, found 0");
}

TEST(Config, OutOfRangeValues) {
  EXPECT_ERROR(parse(with_arg("num_heads", "0")), "'num_heads' must be an integer in [1, 1048576], found 0");
  EXPECT_ERROR(parse(with_arg("model_channels", "-1536")), "'model_channels'", "found -1536");
  EXPECT_ERROR(parse(with_arg("resolution", "1048577")), "'resolution'", "found 1048577");
  EXPECT_ERROR(parse(with_arg("num_blocks", "18446744073709551616")), "'num_blocks' must be an integer",
               "beyond the 64-bit range");
  EXPECT_ERROR(parse(with_arg("num_blocks", "18446744073709551615")), "found 18446744073709551615");
  EXPECT_ERROR(parse(with_arg("num_blocks", "4294967326")), "found 4294967326");  // 2^32 + 30
  EXPECT_ERROR(parse(with_arg("mlp_ratio", "1e300")), "'mlp_ratio' must be a number in [0, 64]");
  EXPECT_ERROR(parse(with_arg("mlp_ratio", "0")), "mlp_ratio 0 is outside (0, 64]");
  EXPECT_ERROR(parse(with_arg("mlp_ratio", "1e-9")), "MLP hidden size", "must be at least 1");
}

TEST(Config, ValidateRejectsShapesThatCannotRun) {
  EXPECT_ERROR(parse(with_arg("num_heads", "7")), "config c.json: model config: model_channels (1536) must be divisible by num_heads (7)");
  EXPECT_ERROR(parse(with_arg("num_heads", "512")), "head dim model_channels / num_heads = 3 must be even");
  EXPECT_ERROR(parse(with_arg("num_heads", "384")), "RoPE needs head dim >= 6", "found 4");
  ModelConfig ape = preset("tiny");
  ape.pe_mode = "ape";
  ape.num_heads = 32;  // head dim 4: fine without RoPE
  EXPECT_NO_THROW(ape.validate());
  ModelConfig c = preset("tiny");
  c.out_channels = 0;
  EXPECT_ERROR(c.validate(), "out_channels = 0 is outside [1, 1048576]");
  c = preset("tiny");
  c.rope_theta = -1;
  EXPECT_ERROR(c.validate(), "rope_freq [1, -1] must be two positive finite numbers");
  c = preset("tiny");
  c.dtype = "int8";
  EXPECT_ERROR(c.validate(), "dtype must be");
}

// Configs far past any real model are refused from the config alone, in microseconds, with
// the estimate: no parameter list is built for them, no count overflows.
TEST(Config, AbsurdSizesAreRefusedBeforeAnythingIsBuilt) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR(parse(with_arg("num_blocks", "1048576")), "num_blocks = 1048576 is more than 1024");
  EXPECT_ERROR(parse(with_arg("num_blocks", "1025")), "num_blocks = 1025 is more than 1024");
  ModelConfig c = preset("trellis2-shape-1024");
  c.model_channels = 1 << 20;
  c.num_heads = 1 << 14;
  EXPECT_ERROR(c.validate(), "parameters (30 blocks of 1048576 channels) is more than");
  c = preset("trellis2-shape-1024");
  c.num_blocks = 1024;
  c.model_channels = 12288;
  c.num_heads = 96;
  EXPECT_ERROR(c.validate(), "is more than the");  // ~1.9e12 parameters
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // The released sizes pass.
  EXPECT_NO_THROW(preset("trellis2-shape-1024").validate());
  EXPECT_NO_THROW(preset("trellis2-tex-1024").validate());
}

TEST(Config, ReadConfigFileNamesTheFile) {
  test::TempDir dir;
  std::string path = dir.file("m.json");
  test::write_bytes(path, kReleased);
  EXPECT_EQ(read_config_file(path).num_blocks, 30);
  test::write_bytes(path, with_arg("num_heads", "7"));
  EXPECT_ERROR(read_config_file(path), "config " + path + ": model config: model_channels");
  test::write_bytes(path, R"({"name":"SLatFlowModel","name":"x"})");
  EXPECT_ERROR(read_config_file(path), path + ": duplicate key 'name'");
  test::write_bytes(path, "{\"name\":" + std::string(1000, '[') + std::string(1000, ']') + "}");
  EXPECT_ERROR(read_config_file(path), "deeper than 64 levels");
}

// Bad configs for fuzz/fuzz_config.cpp's seed corpus, each checked to fail here.
TEST(Config, CommittedCorpus) {
  std::vector<std::pair<std::string, std::string>> seeds = {
      {"config_valid_released.json", kReleased},
      {"config_unknown_key.json", with_arg("num_block", "30")},
      {"config_string_for_int.json", with_arg("num_blocks", "\"30\"")},
      {"config_float_for_int.json", with_arg("num_blocks", "30.0")},
      {"config_2pow64.json", with_arg("num_blocks", "18446744073709551616")},
      {"config_heads_not_dividing.json", with_arg("num_heads", "7")},
      {"config_rope_freq_scalar.json", with_arg("rope_freq", "10000.0")},
      {"config_bool_as_int.json", with_arg("share_mod", "1")},
      {"config_duplicate_key.json", R"({"name":"SLatFlowModel","name":"SLatFlowModel","args":{}})"},
      {"config_deep.json", "{\"args\":" + std::string(200, '[') + std::string(200, ']') + "}"},
  };
  for (const auto& [name, text] : seeds) {
    test::check_corpus_file(name, text);
    if (name.find("valid") != std::string::npos) EXPECT_NO_THROW(parse(text));
    else EXPECT_THROW(parse(text), Error) << name;
  }
}

}  // namespace
}  // namespace s3d::model
