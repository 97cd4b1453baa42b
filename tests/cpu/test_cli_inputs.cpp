// `sparse3d run --inputs FILE.safetensors` on the CPU backend: a user's own request gives the
// latent the same request gives through the payload manifest or the Engine API, and every
// bad input ends with one error line naming the tensor and what was wrong (exit 1).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_util.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "payload/generate.h"
#include "payload/payload.h"
#include "sparse3d/engine.h"

namespace s3d {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::run_cli;
using Tensors = std::vector<std::pair<std::string, Tensor>>;

constexpr int kSteps = 2;

std::vector<float> normal(uint64_t seed, int64_t n) {
  return sparse3d::draw_noise(seed, 1, n).to_floats();
}

Tensor f32(const Shape& shape, uint64_t seed) {
  return Tensor::from_floats(normal(seed, shape_numel(shape)), shape, DType::F32);
}

struct CliInputs : ::testing::Test {
  static void SetUpTestSuite() {
    dir = (fs::temp_directory_path() / ("sparse3d_cli_inputs_" + std::to_string(getpid())))
              .string();
    fs::remove_all(dir);
    model::make_checkpoint(model::preset("tiny"), 3, dir + "/tiny", DType::BF16);
    model::make_checkpoint(model::preset("tiny-ss"), 4, dir + "/tiny-ss", DType::BF16);
    model::ModelConfig tex = model::preset("tiny");  // a texture model: 8 concat channels
    tex.in_channels = tex.out_channels + 8;
    model::make_checkpoint(tex, 5, dir + "/tiny-tex", DType::BF16);
    payload::GenerateOptions o = payload::GenerateOptions::small();
    o.default_tokens = {40};
    payload::generate_payloads(dir + "/pl", o);
    o.concat_channels = 8;
    payload::generate_payloads(dir + "/tpl", o);
    payload::GenerateOptions d = payload::GenerateOptions::dense_small();
    d.default_tokens = {512};
    payload::generate_payloads(dir + "/dpl", d);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  static std::string dir;

  static payload::Manifest manifest(const std::string& folder) {
    return payload::read_manifest(dir + "/" + folder + "/manifest.json");
  }
  static payload::Asset asset(const std::string& folder) {
    payload::Manifest m = manifest(folder);
    return payload::read_asset(m, m.assets[0]);
  }
  static std::string write(const std::string& name, const Tensors& tensors) {
    fs::create_directories(dir + "/in");
    const std::string path = dir + "/in/" + name + ".safetensors";
    io::write_safetensors(path, tensors);
    return path;
  }
  static std::string run_args(const std::string& checkpoint, const std::string& out) {
    return "run --device cpu --no-qualification-cache --steps " + std::to_string(kSteps) +
           " --checkpoint " + dir + "/" + checkpoint + ".json --out " + dir + "/" + out;
  }
  static CliResult run_inputs(const std::string& checkpoint, const std::string& inputs,
                              const std::string& out, const std::string& more = "") {
    return run_cli(run_args(checkpoint, out) + " --inputs " + inputs + " " + more);
  }
  // The payload path's latent for the first asset of `folder`.
  static std::vector<float> manifest_latent(const std::string& checkpoint,
                                            const std::string& folder) {
    const CliResult r = run_cli(run_args(checkpoint, folder + "_out") + " --manifest " + dir +
                                "/" + folder + "/manifest.json");
    EXPECT_EQ(r.code, 0) << r.output;
    return latent(folder + "_out", manifest(folder).assets[0].name);
  }
  static io::SafetensorsFile output(const std::string& out, const std::string& name) {
    return io::SafetensorsFile::open(dir + "/" + out + "/" + name + ".safetensors");
  }
  static std::vector<float> latent(const std::string& out, const std::string& name) {
    return output(out, name).load("latent", DType::F32).to_floats();
  }
};
std::string CliInputs::dir;

// The manifest's asset as an inputs file (its coords and cond as stored, its noise seed as
// --seed) gives the payload path's latent bit for bit; so does the same noise given as a
// tensor. The output is named after the file and records it.
TEST_F(CliInputs, AnInputsFileGivesThePayloadPathsLatent) {
  const payload::Asset a = asset("pl");
  const uint64_t seed = manifest("pl").assets[0].noise_seed;
  const std::vector<float> want = manifest_latent("tiny", "pl");
  ASSERT_EQ(want.size(), 40u * 32u);

  const std::string seeded = write("seeded", {{"coords", a.coords}, {"cond", a.cond}});
  CliResult r = run_inputs("tiny", seeded, "out", "--seed " + std::to_string(seed));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[seeded] 40 tokens"), std::string::npos) << r.output;
  EXPECT_EQ(latent("out", "seeded"), want);
  io::SafetensorsFile f = output("out", "seeded");
  EXPECT_EQ(f.metadata().at("inputs"), seeded);
  EXPECT_EQ(f.metadata().at("seed"), std::to_string(seed));
  EXPECT_EQ(f.load("coords", DType::I32).to_floats(), a.coords.to_floats());

  const Tensor noise = Tensor::from_floats(sparse3d::draw_noise(seed, 40, 32).to_floats(), {40, 32},
                                           DType::F32);
  const std::string given =
      write("given", {{"coords", a.coords}, {"cond", a.cond}, {"noise", noise}});
  r = run_inputs("tiny", given, "out", "--dump-first-forward");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(latent("out", "given"), want);
  EXPECT_EQ(output("out", "given").load("x_T", DType::F32).to_floats(), noise.to_floats());
  // Another seed, another latent: the comparison can fail.
  r = run_inputs("tiny", seeded, "out", "--seed " + std::to_string(seed + 1));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(latent("out", "seeded"), want);
}

// `run --tokens N --cond-tokens L --seed S` is the request payload::make_asset draws from S
// on the model's grid (coords, cond, and concat_cond for a texture model) with noise from S:
// the same latent as that request written as an inputs file, for a shape, a texture and a
// dense model.
TEST_F(CliInputs, ASyntheticRequestIsTheAssetMakeAssetDraws) {
  struct Model {
    const char* checkpoint;
    int grid, concat;
    bool dense;
    int64_t tokens;
  };
  for (const Model m : {Model{"tiny", 64, 0, false, 37}, Model{"tiny-tex", 64, 8, false, 29},
                        Model{"tiny-ss", 8, 0, true, 512}}) {
    SCOPED_TRACE(m.checkpoint);
    const uint64_t seed = 11;
    const std::string out = std::string("syn_") + m.checkpoint;
    CliResult r = run_cli(run_args(m.checkpoint, out) + " --tokens " + std::to_string(m.tokens) +
                          " --cond-tokens 5 --seed " + std::to_string(seed));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("[synthetic] " + std::to_string(m.tokens) + " tokens"),
              std::string::npos) << r.output;
    io::SafetensorsFile f = output(out, "synthetic");
    EXPECT_EQ(f.metadata().at("tokens"), std::to_string(m.tokens));
    EXPECT_EQ(f.metadata().at("cond_tokens"), "5");
    EXPECT_EQ(f.metadata().at("seed"), std::to_string(seed));

    payload::GenerateOptions o;
    o.grid = m.grid;
    o.dense = m.dense;
    o.cond_tokens = 5;
    o.cond_channels = 64;
    o.concat_channels = m.concat;
    const payload::Asset a = payload::make_asset(0, m.tokens, seed, o);
    Tensors tensors = {{"cond", a.cond}};
    if (!m.dense) {
      tensors.emplace_back("coords", a.coords);
      EXPECT_EQ(f.load("coords", DType::I32).to_floats(), a.coords.to_floats());
    }
    if (m.concat > 0) tensors.emplace_back("concat_cond", a.concat_cond);
    const std::string same = write(std::string("same_") + m.checkpoint, tensors);
    r = run_inputs(m.checkpoint, same, out, "--seed " + std::to_string(seed));
    ASSERT_EQ(r.code, 0) << r.output;
    const std::vector<float> want = latent(out, std::string("same_") + m.checkpoint);
    std::vector<float> got = latent(out, "synthetic");
    if (m.dense) {  // the inputs route writes the volume [1, C, R, R, R]; --tokens the same
      ASSERT_EQ(got.size(), want.size());
    }
    EXPECT_EQ(got, want);
    // Another seed, other voxels and another latent: the comparison can fail.
    r = run_cli(run_args(m.checkpoint, out) + " --tokens " + std::to_string(m.tokens) +
                " --cond-tokens 5 --seed " + std::to_string(seed + 1));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(latent(out, "synthetic"), want);
  }
  // A sparse model's grid bounds the count; a dense model takes its whole grid only.
  test::expect_cli_error(run_cli(run_args("tiny", "syn_x") + " --tokens 262145"),
                         "--tokens 262145: the model's grid has 64^3 = 262144 voxels");
  test::expect_cli_error(run_cli(run_args("tiny-ss", "syn_x") + " --tokens 20"),
                         "denoises its whole 8^3 grid, --tokens 512");
  EXPECT_FALSE(fs::exists(dir + "/syn_x"));
}

// Two assets packed in one file (coords batch 0 and 1, cond [2, L, C], a noise tensor) give
// what Engine::sample gives for the same request in process.
TEST_F(CliInputs, ABatchOfTwoGivesTheApisLatent) {
  std::vector<int32_t> rows;
  for (int b = 0; b < 2; ++b)
    for (int n = 0; n < (b ? 17 : 23); ++n)
      for (int32_t v : {b, n % 4, (3 * n) % 11, n}) rows.push_back(v);
  const Tensor coords = Tensor::from_ints(rows, {40, 4});
  const Tensor cond = f32({2, 9, 64}, 11);
  const Tensor noise = f32({40, 32}, 12);
  const std::string path = write("pair", {{"coords", coords}, {"cond", cond}, {"noise", noise}});
  const CliResult r = run_inputs("tiny", path, "out");
  ASSERT_EQ(r.code, 0) << r.output;

  sparse3d::EngineOptions eo;
  eo.device = sparse3d::DeviceChoice::CPU;
  eo.persist_qualification = false;
  sparse3d::Engine engine(dir + "/tiny.json", eo);
  sparse3d::SampleRequest q;
  auto view = [](const Tensor& t) {
    return sparse3d::TensorView{const_cast<void*>(t.data()), t.dtype(), Device::CPU, 0, t.shape()};
  };
  q.coords = view(coords);
  q.batch = 2;
  q.cond = view(cond);
  q.noise = view(noise);
  q.sampler.steps = kSteps;
  const std::vector<float> want = engine.sample(q).latent.to_floats();
  EXPECT_EQ(latent("out", "pair"), want);
}

// The dense model: no coords, the condition alone (noise from --seed) or with the noise
// volume [B, C, R, R, R]; the latent is that volume's layout, the token payload's transposed.
TEST_F(CliInputs, TheDenseModelTakesVolumes) {
  const payload::Asset a = asset("dpl");
  const uint64_t seed = manifest("dpl").assets[0].noise_seed;
  const std::vector<float> tokens = manifest_latent("tiny-ss", "dpl");  // [512, 8]
  ASSERT_EQ(tokens.size(), 512u * 8u);
  std::vector<float> want(tokens.size());
  for (int64_t n = 0; n < 512; ++n)
    for (int64_t c = 0; c < 8; ++c) want[c * 512 + n] = tokens[n * 8 + c];

  const std::string seeded = write("volume", {{"cond", a.cond}});
  CliResult r = run_inputs("tiny-ss", seeded, "dout", "--seed " + std::to_string(seed));
  ASSERT_EQ(r.code, 0) << r.output;
  io::SafetensorsFile f = output("dout", "volume");
  EXPECT_EQ(f.find("latent")->shape, (Shape{1, 8, 8, 8, 8}));
  EXPECT_EQ(f.find("coords"), nullptr);
  EXPECT_EQ(latent("dout", "volume"), want);

  const Tensor noise = Tensor::from_floats(sparse3d::draw_noise(seed, 8, 512).to_floats(),
                                           {1, 8, 8, 8, 8}, DType::F32);
  const std::string given = write("volume_noise", {{"cond", a.cond}, {"noise", noise}});
  r = run_inputs("tiny-ss", given, "dout", "--sampler released_sparse_structure");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_inputs("tiny-ss", seeded, "dout2",
                 "--sampler released_sparse_structure --seed " + std::to_string(seed));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(latent("dout", "volume_noise"), latent("dout2", "volume"));
  // Without --sampler, run takes the family's own preset: released_sparse_structure here
  // (rescale_t 5, guidance rescale 0.7), not the shape models' released.
  r = run_inputs("tiny-ss", given, "dout3", "");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rescale_t 5,"), std::string::npos) << r.output;
  EXPECT_EQ(latent("dout3", "volume_noise"), latent("dout", "volume_noise"));
  r = run_inputs("tiny-ss", given, "dout4", "--sampler released");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(latent("dout4", "volume_noise"), latent("dout", "volume_noise"));
}

// A texture model's concat_cond, f32 as the payload stores it (the payload path's latent) or
// bf16 (read exactly: the latent of the same values in f32).
TEST_F(CliInputs, ATextureModelTakesConcatCond) {
  const payload::Asset a = asset("tpl");
  const uint64_t seed = manifest("tpl").assets[0].noise_seed;
  const std::string more = "--seed " + std::to_string(seed);
  const std::string f32_path =
      write("tex", {{"coords", a.coords}, {"cond", a.cond}, {"concat_cond", a.concat_cond}});
  CliResult r = run_inputs("tiny-tex", f32_path, "tout", more);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(latent("tout", "tex"), manifest_latent("tiny-tex", "tpl"));

  const Tensor bf16 = Tensor::from_floats(a.concat_cond.to_floats(), a.concat_cond.shape(), DType::BF16);
  const Tensor rounded = Tensor::from_floats(bf16.to_floats(), bf16.shape(), DType::F32);
  r = run_inputs("tiny-tex",
                 write("tex_bf16", {{"coords", a.coords}, {"cond", a.cond}, {"concat_cond", bf16}}),
                 "tout", more);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_inputs("tiny-tex",
                 write("tex_rounded",
                       {{"coords", a.coords}, {"cond", a.cond}, {"concat_cond", rounded}}),
                 "tout", more);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(latent("tout", "tex_bf16"), latent("tout", "tex_rounded"));

  test::expect_cli_error(
      run_inputs("tiny-tex", write("tex_none", {{"coords", a.coords}, {"cond", a.cond}}), "tout"),
      "has no 'concat_cond' tensor");
}

// Every bad input: one error line naming the tensor and the fault, exit 1, no output file.
TEST_F(CliInputs, EveryBadInputIsRefusedByName) {
  const payload::Asset a = asset("pl");
  const Tensor& coords = a.coords;  // [40, 4]
  const Tensor cond = f32({37, 64}, 21);
  auto with = [&](std::vector<int32_t> edit_rows, int row, int col, int32_t v) {
    edit_rows[4 * row + col] = v;
    return Tensor::from_ints(edit_rows, {40, 4});
  };
  std::vector<int32_t> rows(coords.data_as<int32_t>(), coords.data_as<int32_t>() + 160);
  std::vector<float> nan_cond = cond.to_floats();
  nan_cond[5 * 64 + 7] = NAN;
  std::vector<float> inf_noise = normal(3, 40 * 32);
  inf_noise[3 * 32 + 1] = -INFINITY;
  struct Case {
    std::string name;
    Tensors tensors;
    std::string checkpoint, needle;
  };
  const std::vector<Case> cases = {
      {"no_cond", {{"coords", coords}}, "tiny", "has no 'cond' tensor"},
      {"int_cond", {{"coords", coords}, {"cond", Tensor::from_ints(std::vector<int32_t>(64), {1, 64})}},
       "tiny", "'cond' has dtype I32, expected F32 or BF16"},
      {"flat_cond", {{"coords", coords}, {"cond", f32({64}, 1)}}, "tiny",
       "'cond' has shape [64] (rank 1), expected [L, C] or [B, L, C]"},
      {"narrow_cond", {{"coords", coords}, {"cond", f32({37, 32}, 1)}}, "tiny",
       "'cond' has 32 channels, but"},
      {"nan_cond", {{"coords", coords}, {"cond", Tensor::from_floats(nan_cond, {37, 64}, DType::F32)}},
       "tiny", "'cond' has a NaN at [5, 7]"},
      {"float_coords", {{"coords", f32({40, 4}, 1)}, {"cond", cond}}, "tiny",
       "'coords' has dtype F32, expected I32"},
      {"xyz_coords", {{"coords", Tensor::from_ints(std::vector<int32_t>(120), {40, 3})}, {"cond", cond}},
       "tiny", "'coords' has shape [40, 3], expected [N, 4]"},
      {"no_coords", {{"cond", cond}}, "tiny", "has no 'coords' tensor"},
      {"second_asset", {{"coords", with(rows, 39, 0, 1)}, {"cond", cond}}, "tiny",
       "'coords' (1 asset(s), as cond [37, 64] says): coords row 39 has batch index 1"},
      {"negative_x", {{"coords", with(rows, 2, 1, -1)}, {"cond", cond}}, "tiny",
       "coords row 2 has x = -1"},
      {"inf_noise",
       {{"coords", coords}, {"cond", cond}, {"noise", Tensor::from_floats(inf_noise, {40, 32}, DType::F32)}},
       "tiny", "'noise' has an infinity at [3, 1]"},
      {"short_noise", {{"coords", coords}, {"cond", cond}, {"noise", f32({39, 32}, 1)}}, "tiny",
       "'noise' has shape [39, 32], expected [40, C_out]"},
      {"narrow_noise", {{"coords", coords}, {"cond", cond}, {"noise", f32({40, 16}, 1)}}, "tiny",
       "'noise' has shape [40, 16], but"},
      {"extra", {{"coords", coords}, {"cond", cond}, {"latent", f32({40, 32}, 1)}}, "tiny",
       "unexpected tensor 'latent' (an inputs file holds coords, cond, concat_cond, noise)"},
      {"concat_for_shape", {{"coords", coords}, {"cond", cond}, {"concat_cond", f32({40, 8}, 1)}},
       "tiny", "has 'concat_cond', but"},
      {"short_concat", {{"coords", coords}, {"cond", cond}, {"concat_cond", f32({30, 8}, 1)}},
       "tiny-tex", "'concat_cond' has shape [30, 8], expected [40, Cc]"},
      {"wide_concat", {{"coords", coords}, {"cond", cond}, {"concat_cond", f32({40, 9}, 1)}},
       "tiny-tex", "'concat_cond' has shape [40, 9], but"},
      {"coords_for_dense", {{"coords", coords}, {"cond", cond}}, "tiny-ss",
       "has 'coords', but"},
      {"token_noise_for_dense", {{"cond", cond}, {"noise", f32({512, 8}, 1)}}, "tiny-ss",
       "'noise' has shape [512, 8] (rank 2), expected the volume [B, C_out, R, R, R]"},
      {"small_volume", {{"cond", cond}, {"noise", f32({1, 8, 4, 4, 4}, 1)}}, "tiny-ss",
       "'noise' has shape [1, 8, 4, 4, 4], but"},
  };
  for (const auto& c : cases) {
    const std::string path = write(c.name, c.tensors);
    const CliResult r = run_inputs(c.checkpoint, path, "bad");
    SCOPED_TRACE(c.name);
    test::expect_cli_error(r, c.needle);
    EXPECT_NE(r.output.find("inputs " + path), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir + "/bad/" + c.name + ".safetensors"));
  }
  // Not a safetensors file, and no file at all: named.
  std::ofstream(dir + "/in/junk.safetensors") << "not a safetensors file";
  test::expect_cli_error(run_inputs("tiny", dir + "/in/junk.safetensors", "bad"),
                         "inputs " + dir + "/in/junk.safetensors");
  test::expect_cli_error(run_inputs("tiny", dir + "/in/absent.safetensors", "bad"),
                         dir + "/in/absent.safetensors");
}

// --inputs and the manifest's options exclude each other (a usage error, exit 2); an output
// never replaces its own input; two inputs of one name are refused.
TEST_F(CliInputs, InputsAndTheManifestExcludeEachOther) {
  const payload::Asset a = asset("pl");
  const std::string path = write("req", {{"coords", a.coords}, {"cond", a.cond}});
  const std::string manifest = " --manifest " + dir + "/pl/manifest.json";
  test::expect_cli_error(run_inputs("tiny", path, "x", manifest),
                         "--manifest, --inputs and --tokens exclude each other", 2);
  test::expect_cli_error(run_inputs("tiny", path, "x", "--tokens 5"),
                         "--manifest, --inputs and --tokens exclude each other", 2);
  test::expect_cli_error(run_cli(run_args("tiny", "x")),
                         "run needs one of --manifest, --inputs or --tokens", 2);
  test::expect_cli_error(run_cli(run_args("tiny", "x") + " --cond-tokens 5 --inputs " + path),
                         "--cond-tokens requires --tokens", 2);
  // An empty argument is an unexpected one, never a hang.
  test::expect_cli_error(run_cli(run_args("tiny", "x") + " '' --seed 1 --inputs " + path),
                         "not expected", 2);
  test::expect_cli_error(run_inputs("tiny", path, "x", "--asset a00"), "--asset requires --manifest",
                         2);
  test::expect_cli_error(run_cli(run_args("tiny", "x") + manifest + " --seed 3"),
                         "--seed goes with --inputs or --tokens", 2);

  const auto bytes = fs::file_size(path);
  const auto when = fs::last_write_time(path);
  test::expect_cli_error(run_inputs("tiny", path, "in"), "would overwrite its own input " + path);
  EXPECT_EQ(fs::file_size(path), bytes);
  EXPECT_EQ(fs::last_write_time(path), when);

  fs::create_directories(dir + "/in2");
  fs::copy_file(path, dir + "/in2/req.safetensors", fs::copy_options::overwrite_existing);
  test::expect_cli_error(
      run_inputs("tiny", path, "x", "--inputs " + dir + "/in2/req.safetensors"),
      "would both be written to " + dir + "/x/req.safetensors");
}

// A write that fails (as on a full disk) ends the run with one error line and leaves no
// output file behind.
TEST_F(CliInputs, AFailedWriteLeavesNoOutput) {
  const payload::Asset a = asset("pl");
  const std::string path = write("full_disk", {{"coords", a.coords}, {"cond", a.cond}});
  const CliResult r = run_cli(run_args("tiny", "full") + " --inputs " + path, "SPARSE3D_FAULT_WRITE=1");
  test::expect_cli_error(r, "failed (No space left on device)");
  EXPECT_FALSE(fs::exists(dir + "/full")) << r.output;  // nor the folder it would have made
}

// A header that promises a 4 GiB condition over a sparse file (free to make) is refused from
// the header, against the stated limit for one tensor, before anything is allocated or read.
TEST_F(CliInputs, AHugeSparseTensorIsRefusedFromItsHeader) {
  const uint64_t cond_bytes = uint64_t{4} << 30;
  std::string header = "{\"cond\":{\"dtype\":\"F32\",\"shape\":[1,1048576,1024],"
                       "\"data_offsets\":[0," + std::to_string(cond_bytes) + "]},"
                       "\"coords\":{\"dtype\":\"I32\",\"shape\":[1,4],\"data_offsets\":[" +
                       std::to_string(cond_bytes) + "," + std::to_string(cond_bytes + 16) + "]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
  fs::create_directories(dir + "/in");
  const std::string path = dir + "/in/sparse.safetensors";
  std::ofstream(path, std::ios::binary) << bytes << header;
  fs::resize_file(path, 8 + header.size() + cond_bytes + 16);
  const double cpu0 = test::children_cpu_seconds();
  const CliResult r = run_inputs("tiny", path, "sparse_out");
  const double cpu = test::children_cpu_seconds() - cpu0;
  fs::remove(path);
  test::expect_cli_error(r, "tensor 'cond' (F32 [1, 1048576, 1024]) is 4294967296 bytes, more "
                            "than the 2147483648 bytes an inputs file may hold in one tensor");
  // CPU time, not wall time (a loaded machine's start-up): reading 4 GiB takes seconds.
  EXPECT_LT(cpu, 0.5);
  EXPECT_FALSE(fs::exists(dir + "/sparse_out"));
}

}  // namespace
}  // namespace s3d
