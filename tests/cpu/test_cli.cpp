// The sparse3d command end to end on the CPU backend: one good run, and bad inputs that
// must end with one clear error line and exit code 1 (never a crash or a hang).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_test_util.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "payload/generate.h"
#include "payload/payload.h"
#include "sparse3d/flags.h"

namespace s3d {
namespace {

namespace fs = std::filesystem;

using Result = test::CliResult;
using test::run_cli;

struct Cli : ::testing::Test {
  static void SetUpTestSuite() {
    // ctest runs each test in its own process, in parallel: one folder per process.
    dir = (fs::temp_directory_path() / ("sparse3d_cli_" + std::to_string(getpid()))).string();
    fs::remove_all(dir);
    test::make_tiny_model_and_payloads(dir, 40);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  static std::string dir;

  // A copy of the good payload folder whose one asset file is replaced.
  std::string payload_with(const std::string& name, const payload::Asset& asset) {
    std::string d = dir + "/" + name;
    fs::remove_all(d);
    fs::copy(dir + "/pl", d);
    payload::Manifest m = payload::read_manifest(d + "/manifest.json");
    payload::write_asset(d + "/" + m.assets[0].file, asset);
    return d + "/manifest.json";
  }
  payload::Asset good_asset() {
    payload::Manifest m = payload::read_manifest(dir + "/pl/manifest.json");
    return payload::read_asset(m, m.assets[0]);
  }
  std::string ck() { return dir + "/tiny.json"; }
};
std::string Cli::dir;

void expect_clean_error(const Result& r, const std::string& needle) {
  test::expect_cli_error(r, needle);
}

TEST_F(Cli, TinyRunOnTheCpuWritesFiniteLatents) {
  Result r = run_cli("run --device cpu --steps 2 --checkpoint " + ck() + " --manifest " + dir +
                     "/pl/manifest.json --dump-first-forward --out " + dir + "/out");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step  2/2"), std::string::npos) << r.output;
  payload::Manifest m = payload::read_manifest(dir + "/pl/manifest.json");
  io::SafetensorsFile f = io::SafetensorsFile::open(dir + "/out/" + m.assets[0].name + ".safetensors");
  Tensor latent = f.load("latent", DType::F32);
  EXPECT_EQ(latent.shape(), (Shape{40, 32}));
  for (float v : latent.to_floats()) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(f.find("v_uncond"), nullptr);
}

TEST_F(Cli, MissingCheckpoint) {
  expect_clean_error(run_cli("run --device cpu --checkpoint " + dir + "/nope.json --manifest " +
                             dir + "/pl/manifest.json"),
                     "nope.json");
}

TEST_F(Cli, TruncatedCheckpoint) {
  fs::copy_file(dir + "/tiny.json", dir + "/trunc.json", fs::copy_options::overwrite_existing);
  fs::copy_file(dir + "/tiny.safetensors", dir + "/trunc.safetensors",
                fs::copy_options::overwrite_existing);
  fs::resize_file(dir + "/trunc.safetensors", fs::file_size(dir + "/trunc.safetensors") - 1000);
  expect_clean_error(run_cli("run --device cpu --checkpoint " + dir + "/trunc.json --manifest " +
                             dir + "/pl/manifest.json"),
                     "trunc.safetensors");
}

// A checkpoint header far longer than its config's tensors can need (a 100 MB one cost
// 0.9 GB and 5 s to parse before its names were found not to match) is refused from its
// length, before it is read.
TEST_F(Cli, CheckpointHeaderLongerThanItsConfigNeeds) {
  fs::copy_file(dir + "/tiny.json", dir + "/wide.json", fs::copy_options::overwrite_existing);
  std::string header = "{}" + std::string(6 << 20, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(dir + "/wide.safetensors", std::ios::binary) << bytes << header;
  expect_clean_error(run_cli("run --device cpu --checkpoint " + dir + "/wide.json --manifest " +
                             dir + "/pl/manifest.json"),
                     "can need; refused before reading it");
}

// The same for a payload asset: three tensors never need a header of more than 1 MiB.
TEST_F(Cli, AssetHeaderLongerThanAnAssetNeeds) {
  const std::string d = dir + "/wide_asset";
  fs::remove_all(d);
  fs::copy(dir + "/pl", d);
  payload::Manifest m = payload::read_manifest(d + "/manifest.json");
  std::string header = "{}" + std::string(2 << 20, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(d + "/" + m.assets[0].file, std::ios::binary | std::ios::trunc) << bytes << header;
  expect_clean_error(run_cli("run --device cpu --checkpoint " + ck() + " --manifest " + d +
                             "/manifest.json --out " + dir + "/wide_out"),
                     "all that a payload asset (coords, cond, concat_cond) can need");
}

TEST_F(Cli, ConfigFieldOfTheWrongType) {
  std::ifstream in(ck());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  auto pos = text.find("\"num_blocks\": 2");
  ASSERT_NE(pos, std::string::npos) << text;
  text.replace(pos, 15, "\"num_blocks\": \"two\"");
  std::ofstream(dir + "/badcfg.json") << text;
  fs::copy_file(dir + "/tiny.safetensors", dir + "/badcfg.safetensors",
                fs::copy_options::overwrite_existing);
  expect_clean_error(run_cli("run --device cpu --checkpoint " + dir + "/badcfg.json --manifest " +
                             dir + "/pl/manifest.json"),
                     "num_blocks");
}

TEST_F(Cli, UnsortedCoordinates) {
  payload::Asset a = good_asset();
  a.coords = a.coords.to(Device::CPU);
  int32_t* p = a.coords.data_as<int32_t>();
  for (int k = 1; k < 4; ++k) std::swap(p[4 * 5 + k], p[4 * 6 + k]);
  expect_clean_error(run_cli("run --device cpu --checkpoint " + ck() + " --manifest " +
                             payload_with("unsorted", a)),
                     "sorted");
}

TEST_F(Cli, CoordinateOutsideTheGrid) {
  payload::Asset a = good_asset();
  a.coords = a.coords.to(Device::CPU);
  a.coords.data_as<int32_t>()[4 * 39 + 1] = 64;
  expect_clean_error(run_cli("run --device cpu --checkpoint " + ck() + " --manifest " +
                             payload_with("outside", a)),
                     "64");
}

TEST_F(Cli, NanInTheCondition) {
  payload::Asset a = good_asset();
  std::vector<float> c = a.cond.to_floats();
  c[5 * a.cond.size(1) + 7] = NAN;
  a.cond = Tensor::from_floats(c, a.cond.shape(), DType::F32);
  expect_clean_error(run_cli("run --device cpu --checkpoint " + ck() + " --manifest " +
                             payload_with("nan", a)),
                     "NaN");
}

TEST_F(Cli, EmptyAsset) {
  payload::Asset a = good_asset();
  a.coords = Tensor::empty({0, 4}, DType::I32, Device::CPU);
  std::string manifest = payload_with("empty", a);
  expect_clean_error(run_cli("run --device cpu --checkpoint " + ck() + " --manifest " + manifest),
                     "0 tokens");
}

TEST_F(Cli, ConditionChannelsDoNotMatchTheModel) {
  payload::GenerateOptions o = payload::GenerateOptions::small();
  o.default_tokens = {20};
  o.cond_channels = 32;
  payload::generate_payloads(dir + "/pl32", o);
  expect_clean_error(run_cli("run --device cpu --checkpoint " + ck() + " --manifest " + dir +
                             "/pl32/manifest.json"),
                     "channels");
}

TEST_F(Cli, UnknownAsset) {
  expect_clean_error(run_cli("run --device cpu --checkpoint " + ck() + " --manifest " + dir +
                             "/pl/manifest.json --asset nosuch"),
                     "nosuch");
}

// A sampler value given on the command line is used as given and checked, never taken for
// "absent": -1 steps or a NaN is refused by name, before the checkpoint is loaded.
TEST_F(Cli, SamplerValuesOutOfRangeAreRefusedNotIgnored) {
  const std::string base = "run --device cpu --checkpoint " + dir + "/nope.json --manifest " + dir +
                           "/pl/manifest.json --out " + dir + "/sentinels ";
  const std::pair<const char*, const char*> cases[] = {
      {"--cfg nan", "guidance strength must be finite"},
      {"--guidance-rescale nan", "guidance rescale must be in [0, 1]"},
      {"--guidance-rescale 1.5", "guidance rescale must be in [0, 1], got 1.5"},
      {"--rescale-t nan", "rescale_t must be"},
      {"--rescale-t -2", "rescale_t must be"},
      {"--interval 0.9 0.1", "is not an interval"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = run_cli(base + args);
    expect_clean_error(r, message);
    // Refused before loading: the missing checkpoint is never reached.
    EXPECT_EQ(r.output.find("nope.json"), std::string::npos) << args << ":\n" << r.output;
  }
}

// Every file-write step of make-checkpoint, make-payloads and run failed in turn
// (SPARSE3D_FAULT_WRITE=N, as a full disk would): each run ends with one error line and
// exit 1, and leaves no new file (nor a new folder) behind; with no fault, the files appear.
TEST_F(Cli, AFailedWriteLeavesNoFileBehind) {
  const std::string root = dir + "/faults";
  auto files_under = [](const std::string& d) {
    std::vector<std::string> out;
    if (fs::exists(d))
      for (const auto& e : fs::recursive_directory_iterator(d)) out.push_back(e.path().string());
    return out;
  };
  const std::pair<std::string, std::string> commands[] = {
      {"make-checkpoint", "make-checkpoint --preset tiny --out " + root + "/ck/tiny"},
      {"make-payloads", "make-payloads --set small --tokens 30,20 --out " + root + "/pl"},
      {"run", "run --device cpu --steps 1 --no-qualification-cache --checkpoint " + ck() +
                  " --manifest " + dir + "/pl/manifest.json --out " + root + "/out"},
  };
  for (const auto& [name, args] : commands) {
    int failures = 0;
    for (int n = 1; n < 50; ++n) {
      fs::remove_all(root);
      fs::create_directories(root);
      const Result r = run_cli(args, "SPARSE3D_FAULT_WRITE=" + std::to_string(n));
      if (r.code == 0) {  // past the last write step: the command's files are all there
        EXPECT_FALSE(files_under(root).empty()) << name;
        break;
      }
      ++failures;
      expect_clean_error(r, "failed (No space left on device)");
      // Nor a folder: run makes its output folder only to write into it.
      for (const auto& f : files_under(root)) ADD_FAILURE() << name << " step " << n << " left " << f;
    }
    EXPECT_GE(failures, 2) << name << ": every write step was tried";
  }
  fs::remove_all(root);
}

// A host allocation failed at points spread over a whole `run` (checkpoint load, payload
// read, the loop, the output): one error line, exit 1, no output file. (Every point is
// swept in-process by Faults.EveryHostAllocationOfAColdRequestFailsCleanly; this checks the
// command's own handling, and a mistyped variable is refused rather than ignored.)
TEST_F(Cli, AFailedHostAllocationLeavesNoFileBehind) {
  const std::string out = dir + "/host_faults";
  const std::string args = "run --device cpu --steps 2 --no-qualification-cache --checkpoint " +
                           ck() + " --manifest " + dir + "/pl/manifest.json --out " + out;
  int failures = 0;
  for (int n : {1, 2, 3, 5, 8, 13, 40, 100, 300, 1000, 3000}) {
    fs::remove_all(out);
    const Result r = run_cli(args, "SPARSE3D_FAULT_HOST_ALLOC=" + std::to_string(n));
    if (r.code == 0) break;  // past the run's last allocation
    ++failures;
    expect_clean_error(r, "(injected fault");
    EXPECT_FALSE(fs::exists(out)) << "fault " << n << " left the output folder";
  }
  EXPECT_GE(failures, 6);
  expect_clean_error(run_cli(args, "SPARSE3D_FAULT_HOST_ALLOC=3x"),
                     "SPARSE3D_FAULT_HOST_ALLOC is '3x'; expected a non-negative integer");
  // Past 2^64 - 1, or a sign strtoull would skip: refused, not read as the largest count.
  expect_clean_error(run_cli(args, "SPARSE3D_FAULT_HOST_ALLOC=18446744073709551616"),
                     "SPARSE3D_FAULT_HOST_ALLOC is '18446744073709551616'; expected a");
  expect_clean_error(run_cli(args, "SPARSE3D_FAULT_HOST_ALLOC=+3"),
                     "SPARSE3D_FAULT_HOST_ALLOC is '+3'; expected a");
  fs::remove_all(out);
}

// `run` on the tiny model, one step, writing into out/<name>: what the flag tests run.
std::string one_step_run(const std::string& dir, const std::string& name) {
  return "run --device cpu --steps 1 --qualify-m 1 --checkpoint " + dir +
         "/tiny.json --manifest " + dir + "/pl/manifest.json --out " + dir + "/flags/" + name;
}

// The plan a run used: its printed label, which is also the output's "path" metadata.
void expect_ran_plan(const Result& r, const std::string& dir, const std::string& name,
                     const sparse3d::ExecutionPlan& want) {
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("path " + want.label() + "; sampler:"), std::string::npos)
      << "expected path " << want.label() << " in:\n" << r.output;
  payload::Manifest m = payload::read_manifest(dir + "/pl/manifest.json");
  io::SafetensorsFile f =
      io::SafetensorsFile::open(dir + "/flags/" + name + "/" + m.assets[0].name + ".safetensors");
  EXPECT_EQ(f.metadata().at("path"), want.label());
}

// Every flag through the real binary's --enable (from pure_eager, which has none) and
// --disable (from beyond where it has the flag, else from a spec that turns it on).
TEST_F(Cli, EveryFlagCanBeEnabledAndDisabled) {
  for (const auto& f : sparse3d::flag_infos()) {
    const std::string flag(f.name);
    sparse3d::ExecutionPlan on = sparse3d::ExecutionPlan::of_path("pure_eager");
    on.enable(f.flag);
    expect_ran_plan(
        run_cli(one_step_run(dir, flag + "_on") + " --path pure_eager --enable " + flag), dir,
        flag + "_on", on);
    const sparse3d::ExecutionPlan beyond = sparse3d::ExecutionPlan::of_path("beyond");
    const std::string from = beyond.on(f.flag) ? "beyond" : "pure_eager+" + flag;
    sparse3d::ExecutionPlan off = sparse3d::ExecutionPlan::parse(from);
    off.disable(f.flag);
    expect_ran_plan(run_cli(one_step_run(dir, flag + "_off") + " --path " + from + " --disable " +
                            flag),
                    dir, flag + "_off", off);
  }
}

// A misspelt flag or path ends the run before anything loads, naming it and the known ones.
TEST_F(Cli, UnknownFlagOrPathIsNamed) {
  const std::string known_flags = "(known: batched_cfg, null_context_exact, ";
  Result r = run_cli(one_step_run(dir, "bad") + " --enable batched_cgf");
  expect_clean_error(r, "unknown optimization flag 'batched_cgf' " + known_flags);
  r = run_cli(one_step_run(dir, "bad") + " --path beyond --disable cuda_graph");
  expect_clean_error(r, "unknown optimization flag 'cuda_graph' " + known_flags);
  r = run_cli(one_step_run(dir, "bad") + " --path beyond+warp_drive");
  expect_clean_error(r, "unknown optimization flag 'warp_drive' " + known_flags);
  r = run_cli(one_step_run(dir, "bad") + " --path warp_speed");
  expect_clean_error(r, "unknown execution path 'warp_speed' (known: pure_eager, kernel_fusion, ");
}

}  // namespace
}  // namespace s3d
