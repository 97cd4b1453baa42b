// The sparse3d command against hostile input: output paths it cannot write, values CLI11
// alone would coerce, sizes that would exhaust memory, unknown options next to missing ones,
// and interruptions. Each must end in one clear error (exit 1 for bad data, 2 for a usage
// error) or in the signal itself, and leave nothing new behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.h"
#include "core/cuda_util.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "payload/generate.h"
#include "payload/payload.h"

namespace s3d {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::expect_cli_error;
using test::run_cli;

struct CliHostile : ::testing::Test {
  static void SetUpTestSuite() {
    dir = (fs::temp_directory_path() / ("sparse3d_cli_hostile_" + std::to_string(getpid())))
              .string();
    fs::remove_all(dir);
    test::make_tiny_model_and_payloads(dir, 40);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  static std::string dir;

  // A fresh, empty folder of this test's own.
  std::string scratch(const std::string& name) {
    const std::string d = dir + "/" + name;
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }
};
std::string CliHostile::dir;

std::vector<std::string> entries_of(const std::string& d) {
  std::vector<std::string> out;
  if (fs::exists(d))
    for (const auto& e : fs::recursive_directory_iterator(d)) out.push_back(e.path().string());
  return out;
}

// A regular file under `d` whose name starts with '.' (a temporary file), or "". The folder
// changes while it is read: errors end the walk instead of throwing.
std::string hidden_file_under(const std::string& d) {
  std::error_code ec;
  fs::recursive_directory_iterator it(d, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.' && it->is_regular_file(ec)) return it->path().string();
  }
  return "";
}

// No "internal error" (exit 3) for an output that cannot be written: a file where the folder
// goes, a name too long, a read-only folder. Each is bad input, one error line, exit 1, and
// nothing is made.
TEST_F(CliHostile, AnOutputThatCannotBeWrittenIsBadInput) {
  const std::string d = scratch("unwritable");
  std::ofstream(d + "/a_file") << "x";
  const std::string long_name(250, 'n');
  const std::pair<std::string, std::string> cases[] = {
      {"make-payloads --set small --tokens 20 --out " + d + "/a_file", "a_file is not a folder"},
      {"make-payloads --set small --tokens 20 --out " + d + "/a_file/sub", "a_file is not a folder"},
      {"make-checkpoint --preset tiny --out " + d + "/" + long_name,
       "is 262 bytes, longer than the 255 the file system allows"},
      {"make-checkpoint --preset tiny --out " + d + "/a_file/ck", "a_file is not a folder"},
      {"make-checkpoint --preset tiny --out " + d + "/a_file/deeper/ck", "a_file is not a folder"},
      {"make-payloads --set small --tokens 20 --out " + d + "/" + std::string(256, 'd'),
       "is 256 bytes, longer than the 255"},
      {"run --device cpu --steps 1 --checkpoint " + dir + "/tiny.json --manifest " + dir +
           "/pl/manifest.json --out " + d + "/a_file",
       "a_file is not a folder"},
  };
  for (const auto& [args, needle] : cases) {
    const CliResult r = run_cli(args);
    expect_cli_error(r, needle);
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << args << ":\n" << r.output;
  }
  EXPECT_EQ(entries_of(d).size(), 1u) << entries_of(d).back();
  // A folder that may not be written (as a read-only mount): root ignores permissions, so
  // this part runs only as another user; the checks above take the same path.
  if (::geteuid() != 0) {
    fs::create_directories(d + "/locked");
    fs::permissions(d + "/locked", fs::perms::owner_read | fs::perms::owner_exec);
    expect_cli_error(run_cli("make-payloads --set small --tokens 20 --out " + d + "/locked/pl"),
                     "cannot write in");
    expect_cli_error(run_cli("make-checkpoint --preset tiny --out " + d + "/locked/ck"),
                     "cannot write in");
    fs::permissions(d + "/locked", fs::perms::owner_all);
  }
}

// --out '' would have written ./.json; a folder alone (DIR/) names no file.
TEST_F(CliHostile, AnEmptyOrFolderOnlyOutIsRefused) {
  const std::string d = scratch("empty_out");
  expect_cli_error(run_cli("make-checkpoint --preset tiny --out ''"), "--out: the path is empty",
                   2);
  expect_cli_error(run_cli("make-payloads --set small --out ''"), "--out: the path is empty", 2);
  expect_cli_error(run_cli("run --device cpu --checkpoint x.json --manifest x.json --out ''"),
                   "--out: the path is empty", 2);
  expect_cli_error(run_cli("bench-report --result x.json --out ''"), "--out: the path is empty", 2);
  // An empty value of any option is refused, not taken as "not given".
  const std::string run = "run --device cpu --checkpoint x.json --manifest x.json ";
  expect_cli_error(run_cli(run + "--cfg ''"), "--cfg: the value is empty", 2);
  expect_cli_error(run_cli(run + "--interval '' 1"), "--interval: the value is empty", 2);
  expect_cli_error(run_cli(run + "--path ''"), "--path: the value is empty", 2);
  expect_cli_error(run_cli(run + "--cache-dir ''"), "--cache-dir: the path is empty", 2);
  expect_cli_error(run_cli("make-checkpoint --preset tiny --out " + d + "/"), "names a folder");
  expect_cli_error(run_cli("make-checkpoint --preset tiny --out " + d + "/.."), "names a folder");
  EXPECT_FALSE(fs::exists(".json"));
  EXPECT_TRUE(entries_of(d).empty());
}

// Seeds: a decimal integer in [0, 2^64 - 1] or nothing; -1, 2^64 and 1e23 all became
// 2^64 - 1, 0x10 became 16 and 010 became 8. A value in range is used as written, leading
// zeros and all.
TEST_F(CliHostile, SeedsAreDecimalIntegersInRange) {
  const std::string d = scratch("seeds");
  for (const std::string seed : {"-1", "18446744073709551616", "1e23", "0x10", "' 5'", "''"}) {
    const CliResult r = run_cli("make-checkpoint --preset tiny --seed " + seed + " --out " + d +
                                "/ck");
    expect_cli_error(r, "--seed: ", 2);
    EXPECT_NE(r.output.find("not a non-negative integer in decimal digits"), std::string::npos)
        << seed << ":\n" << r.output;
  }
  // The same check on every command's seed.
  expect_cli_error(run_cli("make-payloads --set small --seed -1 --out " + d + "/pl"),
                   "--seed: '-1' is not", 2);
  expect_cli_error(run_cli("run --device cpu --checkpoint x.json --inputs x.safetensors --seed "
                           "18446744073709551616"),
                   "--seed: '18446744073709551616' is not", 2);
  EXPECT_TRUE(entries_of(d).empty());
  ASSERT_EQ(run_cli("make-checkpoint --preset tiny --seed 010 --out " + d + "/ck").code, 0);
  EXPECT_EQ(io::SafetensorsFile::open(d + "/ck.safetensors").metadata().at("seed"), "10");
  ASSERT_EQ(run_cli("make-checkpoint --preset tiny --seed 18446744073709551615 --out " + d +
                    "/max").code,
            0);
  EXPECT_EQ(io::SafetensorsFile::open(d + "/max.safetensors").metadata().at("seed"),
            "18446744073709551615");
}

// Every other numeric option: a negative or fractional count, a value out of its range, a
// NaN or an infinity is refused by the option's name, before anything runs.
TEST_F(CliHostile, NumericOptionsAreRefusedByNameNotCoerced) {
  const std::string d = scratch("numbers");
  const std::string pl = "make-payloads --set small --out " + d + "/pl ";
  const std::string run = "run --device cpu --checkpoint " + d + "/nope.json --manifest " + dir +
                          "/pl/manifest.json --out " + d + "/out ";
  const std::string bench = "bench --device cpu --no-torch --checkpoint " + d +
                            "/nope.json --manifest " + dir + "/pl/manifest.json --out " + d +
                            "/bench ";
  // One case per rule and kind of option (each run is a process start).
  const std::pair<std::string, std::string> cases[] = {
      {pl + "--cond-tokens -1", "--cond-tokens: '-1' is not a non-negative integer"},
      {pl + "--cond-tokens 2000000000", "--cond-tokens: '2000000000' is outside [1, 1073741824]"},
      {pl + "--cond-channels 1.5", "--cond-channels: '1.5' is not"},
      {pl + "--concat-channels -3", "--concat-channels: '-3' is not"},
      {pl + "--tokens 5,-1", "--tokens: token count '-1' is not"},
      {pl + "--tokens 1e3,", "--tokens: token count '1e3' is not"},
      {run + "--qualify-m 0", "--qualify-m: '0' is outside [1, 1048576]"},
      // --devices: an empty item was dropped and a duplicate exited 1 from the engine.
      {run + "--devices 0,", "--devices: an empty item in the list"},
      {run + "--devices ,0", "--devices: an empty item in the list"},
      {bench + "--devices 0,,1", "--devices: an empty item in the list"},
      {run + "--devices 0,0", "--devices: device 0 is listed twice"},
      {bench + "--devices 1,0,1", "--devices: device 1 is listed twice"},
      {run + "--devices 0,x", "--devices: 'x' is not a non-negative integer"},
      {run + "--max-device-memory nan", "--max-device-memory: 'nan' is not a finite decimal number"},
      {run + "--max-device-memory 1e999", "--max-device-memory: '1e999' is not a finite"},
      {run + "--steps 010", ""},  // a valid form: reaches the missing checkpoint (below)
      {run + "--steps 0x10", "--steps: '0x10' is not a non-negative integer in decimal digits"},
      // The sampler's range, shown by --help and enforced as a usage error (was exit 1).
      {run + "--steps 0", "--steps: '0' is outside [1, 10000]"},
      {run + "--steps -1", "--steps: '-1' is not a non-negative integer"},
      {run + "--steps 10001", "--steps: '10001' is outside [1, 10000]"},
      {bench + "--repeats 0", "--repeats: '0' is outside [1, 1000000]"},
      {bench + "--warmup -1", "--warmup: '-1' is not"},
      {bench + "--batch 0", "--batch: '0' is outside [1, 64]"},
      {"profile --checkpoint x.json --manifest x.json --t nan", "--t: 'nan' is not"},
      {"bench-kernels --checkpoint x.json --tokens -5", "--tokens: '-5' is not"},
  };
  for (const auto& [args, needle] : cases) {
    const CliResult r = run_cli(args);
    if (needle.empty()) {
      expect_cli_error(r, "nope.json");  // got as far as the checkpoint
      continue;
    }
    expect_cli_error(r, needle, 2);
  }
  EXPECT_TRUE(entries_of(d).empty()) << entries_of(d).front();
}

// bench --queue runs a one-GPU engine on every listed device: one that this machine lacks was
// found only after every other measurement, and the whole report was lost. Refused before
// anything runs, naming the device (on a machine without a GPU, the first listed).
TEST_F(CliHostile, AQueueOverADeviceThisMachineLacksIsRefusedFirst) {
  const std::string d = scratch("queue");
  const CliResult r =
      run_cli("bench --no-torch --checkpoint " + d + "/nope.json --manifest " + dir +
              "/pl/manifest.json --devices 0,97 --queue --out " + d + "/bench");
  const std::string missing = s3d::cuda_device_count() == 0 ? "0" : "97";
  expect_cli_error(r, "bench --queue: device " + missing + " is not on this machine");
  EXPECT_TRUE(entries_of(d).empty()) << entries_of(d).front();
}

// Control characters in a value the error line echoes (a newline, an ESC sequence) were
// written raw: the line broke, or the terminal took the sequence. They come as \xNN.
TEST_F(CliHostile, ControlCharactersInAnEchoedValueAreEscaped) {
  const std::string d = scratch("control");
  const std::pair<std::string, std::string> cases[] = {
      {"make-checkpoint --preset \"$(printf 'x\\033[31m')\" --out " + d + "/m",
       "unknown model preset 'x\\x1b[31m'"},
      {"run --device cpu --checkpoint \"$(printf 'a\\nb.json')\" --manifest " + dir +
           "/pl/manifest.json --out " + d + "/r",
       "a\\x0ab.json"},
  };
  for (const auto& [args, needle] : cases) {
    const CliResult r = run_cli(args);
    expect_cli_error(r, needle);
    // One line: its newline at the end and no other control character.
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
    for (const char c : r.output)
      EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20) << args << ": " << r.output;
  }
  EXPECT_TRUE(entries_of(d).empty()) << entries_of(d).front();
}

// --cfg -1 and --interval -5 -1 ran as given although the API forbids them: refused by the
// option's name before anything loads (the missing checkpoint is never reached).
TEST_F(CliHostile, NegativeGuidanceValuesAreRefused) {
  const std::string base = "run --device cpu --checkpoint " + dir + "/nope.json --manifest " +
                           dir + "/pl/manifest.json --out " + dir + "/never ";
  const std::pair<const char*, const char*> cases[] = {
      {"--cfg -1", "--cfg -1: the guidance strength must be >= 0"},
      {"--cfg -0.5", "--cfg -0.5: the guidance strength must be >= 0"},
      {"--interval -5 -1", "--interval -5 -1: the ends of the guidance interval are times in "
                           "[0, 1]"},
      {"--interval -0.1 0.5", "--interval -0.1 0.5: the ends"},
      {"--interval 0.5 2", "--interval 0.5 2: the ends"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_cli(base + args);
    expect_cli_error(r, message);
    EXPECT_EQ(r.output.find("nope.json"), std::string::npos) << args << ":\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/never"));
}

// A condition of 2e9 tokens hit std::bad_alloc; sizes are estimated from the options and
// refused against the stated limits at once, before anything is allocated or made (well
// under a second of the command's CPU time; making the assets would take minutes).
TEST_F(CliHostile, HugePayloadSizesAreRefusedUpFront) {
  const std::string d = scratch("huge");
  std::string forty_assets = "40";
  for (int i = 1; i < 40; ++i) forty_assets += ",40";
  const std::pair<std::string, std::string> cases[] = {
      {"--set small --cond-tokens 1000000 --cond-channels 1024",
       "more than the limit of 1073741824 (1 GiB) for one asset file"},
      {"--set small --tokens 300 --concat-channels 1048576 --cond-channels 64",
       "and 1048576 concat channels would be"},
      {"--set small --tokens " + forty_assets + " --cond-tokens 131072 --cond-channels 2048",
       "the 40 assets would be"},
      {"--set small --tokens " + forty_assets + " --cond-tokens 131072 --cond-channels 2048",
       "more than the limit of 17179869184 (16 GiB) for one payload set"},
      {"--set small --tokens 300000", "300000 tokens do not fit the 64^3 grid"},
      {"--set dense-small --tokens 100", "a dense payload is the whole 8^3 grid"},
  };
  for (const auto& [args, needle] : cases) {
    const double cpu0 = test::children_cpu_seconds();
    const CliResult r = run_cli("make-payloads " + args + " --out " + d + "/pl");
    expect_cli_error(r, needle);
    EXPECT_LT(test::children_cpu_seconds() - cpu0, 0.5) << args << ": CPU seconds";
  }
  EXPECT_TRUE(entries_of(d).empty()) << entries_of(d).front();
}

// An unknown option is named, for every command, before a missing required option (which
// it most often is, misspelt) or anything else.
TEST_F(CliHostile, AnUnknownOptionIsReportedFirst) {
  for (const std::string command : {"info", "paths", "make-checkpoint", "make-payloads", "run",
                                    "bench", "profile", "bench-report", "bench-kernels"}) {
    const CliResult r = run_cli(command + " --bogus");
    expect_cli_error(r, command + ": unknown option '--bogus'", 2);
    EXPECT_EQ(r.output.find("is required"), std::string::npos) << command << ":\n" << r.output;
  }
  expect_cli_error(run_cli("run --chekpoint x.json --manifest m.json"),
                   "run: unknown option '--chekpoint' (did you mean --checkpoint?)", 2);
  expect_cli_error(run_cli("make-payloads --out x --seed -1 --bogus=3"),
                   "make-payloads: unknown option '--bogus'", 2);
  expect_cli_error(run_cli("make-checkpoint --out x stray"),
                   "make-checkpoint: unexpected argument 'stray'", 2);
}

// The files the commands write follow the umask as any created file does: 0644 under 022
// (others can read a checkpoint made for them), 0600 under 077.
TEST_F(CliHostile, WrittenFilesFollowTheUmask) {
  for (const auto& [mask, want] : {std::pair<mode_t, mode_t>{022, 0644}, {077, 0600}}) {
    const std::string d = scratch("umask_" + std::to_string(mask));
    const mode_t old = ::umask(mask);
    const CliResult ck = run_cli("make-checkpoint --preset tiny --out " + d + "/ck/tiny");
    const CliResult pl = run_cli("make-payloads --set small --tokens 20 --out " + d + "/pl");
    const CliResult out = run_cli("run --device cpu --steps 1 --no-qualification-cache "
                                  "--checkpoint " + d + "/ck/tiny.json --manifest " + d +
                                  "/pl/manifest.json --out " + d + "/out");
    ::umask(old);
    ASSERT_EQ(ck.code, 0) << ck.output;
    ASSERT_EQ(pl.code, 0) << pl.output;
    ASSERT_EQ(out.code, 0) << out.output;
    for (const auto& path : entries_of(d)) {
      struct stat st {};
      ASSERT_EQ(::stat(path.c_str(), &st), 0);
      const mode_t expected = S_ISDIR(st.st_mode) ? (want | ((want & 0444) >> 2)) : want;
      EXPECT_EQ(st.st_mode & 0777, expected) << path << " under umask 0" << std::oct << mask;
    }
  }
}

// A failed make-payloads into a folder that holds an earlier set leaves that set as it was:
// the new files are made aside and moved in only once all of them are written (before, the
// first assets were replaced and the old manifest kept).
TEST_F(CliHostile, AFailedMakePayloadsLeavesAnEarlierSetAsItWas) {
  const std::string d = scratch("earlier");
  ASSERT_EQ(run_cli("make-payloads --set small --tokens 30,20 --out " + d).code, 0);
  std::map<std::string, std::string> before;
  for (const auto& p : entries_of(d)) before[p] = test::file_text(p);
  for (int n = 1; n <= 4; ++n) {
    const CliResult r = run_cli("make-payloads --set small --tokens 30,20 --seed 9 --out " + d,
                                "SPARSE3D_FAULT_WRITE=" + std::to_string(n));
    expect_cli_error(r, "(No space left on device)");
    std::map<std::string, std::string> after;
    for (const auto& p : entries_of(d)) after[p] = test::file_text(p);
    EXPECT_TRUE(after == before) << "write step " << n << " changed the earlier set";
  }
}

// `run --out` made its folders before the checkpoint loaded and left them empty when it
// failed: the folder is made only when the first output is written.
TEST_F(CliHostile, AFailedRunLeavesNoOutputFolder) {
  const std::string d = scratch("run_out");
  expect_cli_error(run_cli("run --device cpu --checkpoint " + d + "/missing.json --manifest " +
                           dir + "/pl/manifest.json --out " + d + "/new/latents"),
                   "missing.json");
  EXPECT_TRUE(entries_of(d).empty()) << entries_of(d).front();
  // A run that succeeds makes it.
  const CliResult ok = run_cli("run --device cpu --steps 1 --no-qualification-cache --checkpoint " +
                               dir + "/tiny.json --manifest " + dir + "/pl/manifest.json --out " +
                               d + "/new/latents");
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_EQ(entries_of(d + "/new/latents").size(), 1u);
}

// A run of two assets whose second fails leaves neither output: a bad asset is refused
// before the checkpoint loads (it used to fail after the first asset's output was written),
// and a write that fails after the first output removes that output and the folder too.
TEST_F(CliHostile, AFailedRunRemovesTheOutputsItWrote) {
  const std::string d = scratch("two_assets");
  payload::GenerateOptions o = payload::GenerateOptions::small();
  o.default_tokens = {30, 20};
  payload::Manifest m = payload::generate_payloads(d + "/pl", o);
  const std::string run = "run --device cpu --steps 1 --no-qualification-cache --checkpoint " +
                          dir + "/tiny.json --manifest " + d + "/pl/manifest.json --out " + d +
                          "/out";
  // An output is 5 write steps (length, header, two tensors, commit): the first write of
  // the first output, then the first write and the commit of the second.
  for (int n : {1, 6, 10}) {
    const CliResult r = run_cli(run, "SPARSE3D_FAULT_WRITE=" + std::to_string(n));
    expect_cli_error(r, "(No space left on device)");
    const bool after_first = r.output.find("-> " + d + "/out/" + m.assets[0].name) !=
                             std::string::npos;
    EXPECT_EQ(after_first, n > 5) << "write step " << n << ":\n" << r.output;
    EXPECT_FALSE(fs::exists(d + "/out")) << "write step " << n << ":\n" << r.output;
  }
  payload::Asset bad = payload::read_asset(m, m.assets[1]);
  std::vector<float> c = bad.cond.to_floats();
  c[3] = NAN;
  bad.cond = Tensor::from_floats(c, bad.cond.shape(), DType::F32);
  payload::write_asset(d + "/pl/" + m.assets[1].file, bad);
  const CliResult r = run_cli(run);
  expect_cli_error(r, "cond has a NaN");
  EXPECT_EQ(r.output.find("loaded"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d + "/out"));
}

// Interrupted while it writes (SIGTERM, SIGINT): make-payloads ends by the signal and leaves
// neither a hidden temporary file nor a staged or finished asset nor the folder it made.
// The signal is sent while a temporary file exists: the command is stopped as soon as one
// is seen, and signalled only if it is still there.
TEST_F(CliHostile, AnInterruptedWriteLeavesNothingBehind) {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string d = scratch("signal_" + std::to_string(sig));
    const std::string out = d + "/pl";
    const pid_t pid = test::spawn_cli(
        {"make-payloads", "--set", "small", "--tokens", "40,40,40,40,40,40", "--cond-tokens",
         "4096", "--cond-channels", "4096", "--out", out},
        d + ".log");
    ASSERT_GT(pid, 0);
    bool signalled = false;
    const auto t0 = std::chrono::steady_clock::now();
    while (!signalled &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
      const std::string temp = hidden_file_under(out);
      if (temp.empty()) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) break;  // finished: missed every write
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      std::error_code ec;
      ::kill(pid, SIGSTOP);
      if (fs::exists(temp, ec)) {
        ::kill(pid, sig);
        signalled = true;
      }
      ::kill(pid, SIGCONT);
    }
    ASSERT_TRUE(signalled) << "never saw a temporary file:\n" << test::file_text(d + ".log");
    EXPECT_EQ(test::wait_cli(pid), 128 + sig) << test::file_text(d + ".log");
    EXPECT_FALSE(fs::exists(out)) << entries_of(out).size() << " entries left, e.g. "
                                  << (entries_of(out).empty() ? "" : entries_of(out).front());
    fs::remove(d + ".log");
  }
}

// A write past `ulimit -f` (SIGXFSZ, which killed the command mid-write and left its
// temporary file) is an ordinary failed write: one error line, exit 1, nothing left.
TEST_F(CliHostile, AFileSizeLimitIsAnErrorNotALeftover) {
  const std::string d = scratch("fsize");
  const std::pair<std::vector<std::string>, std::string> commands[] = {
      {{"make-payloads", "--set", "small", "--tokens", "40", "--cond-tokens", "1024",
        "--cond-channels", "1024", "--out", d + "/pl"},
       "pl"},
      {{"make-checkpoint", "--preset", "tiny", "--out", d + "/ck/tiny"}, "ck"},
  };
  for (const auto& [args, made] : commands) {
    const pid_t pid = test::spawn_cli(args, dir + "/fsize.log", 64 * 1024);
    ASSERT_GT(pid, 0);
    const int code = test::wait_cli(pid);
    const std::string log = test::file_text(dir + "/fsize.log");
    expect_cli_error(CliResult{code, log}, "(File too large)");
    EXPECT_FALSE(fs::exists(d + "/" + made)) << entries_of(d).front();
  }
  EXPECT_TRUE(entries_of(d).empty());
}

}  // namespace
}  // namespace s3d
