// mesh/image_codec: what is encoded decodes back (PNG and lossless WebP exactly, lossy WebP
// within a bound on a smooth image), for every channel count, odd sizes and 1-pixel sides,
// into poisoned buffers; and each bad input is one error naming it.
#include "mesh/image_codec.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <png.h>
#include <webp/decode.h>

#include <cmath>
#include <csetjmp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "expect_error.h"

namespace s3d::mesh {
namespace {

constexpr uint8_t kPoison = 0xAB;

std::vector<uint8_t> random_pixels(int w, int h, int c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> p(static_cast<size_t>(w) * h * c);
  for (auto& v : p) v = static_cast<uint8_t>(rng() & 0xFF);
  return p;
}

// A smooth image (a few random low-frequency waves per channel), the kind of content a baked
// texture has and the kind lossy WebP is meant for.
std::vector<uint8_t> smooth_pixels(int w, int h, int c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<uint8_t> p(static_cast<size_t>(w) * h * c);
  for (int k = 0; k < c; ++k) {
    const float fx = 0.5f + 2 * u(rng), fy = 0.5f + 2 * u(rng), ph = 6.28f * u(rng);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const float v = 0.5f + 0.4f * std::sin(fx * 6.28f * x / w + fy * 6.28f * y / h + ph);
        p[(static_cast<size_t>(y) * w + x) * c + k] = static_cast<uint8_t>(std::lround(v * 255));
      }
  }
  return p;
}

struct DecodedPng {
  int width = 0, height = 0, color_type = -1, bit_depth = 0;
  std::vector<uint8_t> pixels;
};

struct PngSource {
  const std::string* bytes;
  size_t pos = 0;
};

extern "C" void read_from_string(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (src->pos + n > src->bytes->size()) png_error(png, "read past the end");
  std::memcpy(out, src->bytes->data() + src->pos, n);
  src->pos += n;
}

// libpng's own reading API, rows into a buffer poisoned beforehand (with a poisoned guard
// past the end, which must stay). Returns false when libpng failed.
bool decode_png_rows(png_structp png, png_infop info, PngSource& src, DecodedPng& out) {
  if (setjmp(png_jmpbuf(png)) != 0) return false;
  png_set_read_fn(png, &src, read_from_string);
  png_read_info(png, info);
  out.width = static_cast<int>(png_get_image_width(png, info));
  out.height = static_cast<int>(png_get_image_height(png, info));
  out.color_type = png_get_color_type(png, info);
  out.bit_depth = png_get_bit_depth(png, info);
  const size_t stride = png_get_rowbytes(png, info);
  out.pixels.assign(stride * out.height + 16, kPoison);
  for (int y = 0; y < out.height; ++y) png_read_row(png, out.pixels.data() + stride * y, nullptr);
  png_read_end(png, nullptr);
  return true;
}

DecodedPng decode_png(const std::string& bytes) {
  DecodedPng out;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  PngSource src{&bytes};
  const bool ok = decode_png_rows(png, info, src, out);
  png_destroy_read_struct(&png, &info, nullptr);
  EXPECT_TRUE(ok) << "libpng could not read what encode_image wrote";
  EXPECT_EQ(src.pos, bytes.size()) << "bytes left after the PNG's IEND";
  return out;
}

// What WebP holds for `pixels`: gray copied into RGB, alpha 255 where there was none.
std::vector<uint8_t> as_rgba(const std::vector<uint8_t>& pixels, int c) {
  const size_t n = pixels.size() / c;
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* s = &pixels[i * c];
    const bool gray = c <= 2;
    out[4 * i + 0] = s[0];
    out[4 * i + 1] = gray ? s[0] : s[1];
    out[4 * i + 2] = gray ? s[0] : s[2];
    out[4 * i + 3] = c == 2 ? s[1] : c == 4 ? s[3] : 255;
  }
  return out;
}

// Decodes into a poisoned RGBA buffer with a guard past its end.
std::vector<uint8_t> decode_webp_rgba(const std::string& bytes, int w, int h) {
  int dw = 0, dh = 0;
  EXPECT_TRUE(WebPGetInfo(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &dw, &dh));
  EXPECT_EQ(dw, w);
  EXPECT_EQ(dh, h);
  const size_t size = static_cast<size_t>(w) * h * 4;
  std::vector<uint8_t> out(size + 16, kPoison);
  const uint8_t* r = WebPDecodeRGBAInto(reinterpret_cast<const uint8_t*>(bytes.data()),
                                        bytes.size(), out.data(), size, w * 4);
  EXPECT_NE(r, nullptr) << "libwebp could not decode what encode_image wrote";
  for (size_t i = size; i < out.size(); ++i) EXPECT_EQ(out[i], kPoison) << "written past the end";
  out.resize(size);
  return out;
}

WebPBitstreamFeatures webp_features(const std::string& bytes) {
  WebPBitstreamFeatures f{};
  EXPECT_EQ(WebPGetFeatures(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &f),
            VP8_STATUS_OK);
  return f;
}

struct Size {
  int w, h;
};
constexpr Size kSizes[] = {{37, 19}, {1, 1}, {1, 53}, {61, 1}, {64, 3}};

TEST(ImageCodec, PngRoundTripIsExactForEveryChannelCount) {
  static constexpr int kColorType[5] = {-1, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                        PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  for (int c = 1; c <= 4; ++c)
    for (Size s : kSizes)
      for (int level : {0, 1, 9}) {
        SCOPED_TRACE(testing::Message() << s.w << "x" << s.h << "x" << c << " level " << level);
        const auto pixels = random_pixels(s.w, s.h, c, 100 * c + s.w + level);
        EncodeOptions o;
        o.codec = ImageCodec::png;
        o.png_level = level;
        const std::string png = encode_image(pixels.data(), s.w, s.h, c, o);
        ASSERT_GE(png.size(), 8u);
        EXPECT_EQ(png.compare(0, 8, "\x89PNG\r\n\x1a\n"), 0);
        const DecodedPng d = decode_png(png);
        EXPECT_EQ(d.width, s.w);
        EXPECT_EQ(d.height, s.h);
        EXPECT_EQ(d.color_type, kColorType[c]);
        EXPECT_EQ(d.bit_depth, 8);
        ASSERT_EQ(d.pixels.size(), pixels.size() + 16);
        EXPECT_EQ(std::memcmp(d.pixels.data(), pixels.data(), pixels.size()), 0);
        for (size_t i = pixels.size(); i < d.pixels.size(); ++i) EXPECT_EQ(d.pixels[i], kPoison);
      }
}

TEST(ImageCodec, PngLevelTradesSizeOnASmoothImage) {
  const auto pixels = smooth_pixels(97, 61, 3, 7);
  EncodeOptions o;
  o.codec = ImageCodec::png;
  o.png_level = 0;
  const size_t stored = encode_image(pixels.data(), 97, 61, 3, o).size();
  o.png_level = 9;
  const size_t best = encode_image(pixels.data(), 97, 61, 3, o).size();
  EXPECT_GT(stored, pixels.size());  // level 0 stores: the pixels plus framing
  EXPECT_LT(best, stored / 2);
}

TEST(ImageCodec, WebpLosslessRoundTripIsExactForEveryChannelCount) {
  for (int c = 1; c <= 4; ++c)
    for (Size s : kSizes) {
      SCOPED_TRACE(testing::Message() << s.w << "x" << s.h << "x" << c);
      auto pixels = random_pixels(s.w, s.h, c, 300 * c + s.h);
      // Fully transparent pixels with colour under them: lossless keeps that colour too.
      if (c == 2 || c == 4)
        for (size_t i = 0; i < pixels.size(); i += 3 * c) pixels[i + c - 1] = 0;
      EncodeOptions o;
      o.codec = ImageCodec::webp;
      o.webp_lossless = true;
      const std::string webp = encode_image(pixels.data(), s.w, s.h, c, o);
      const WebPBitstreamFeatures f = webp_features(webp);
      EXPECT_EQ(f.format, 2) << "lossless (VP8L) expected";
      EXPECT_EQ(f.has_alpha != 0, c == 2 || c == 4);
      EXPECT_EQ(decode_webp_rgba(webp, s.w, s.h), as_rgba(pixels, c));
    }
}

TEST(ImageCodec, WebpLossyIsCloseOnASmoothImage) {
  for (int method : {0, 2, 6})
    for (int c = 1; c <= 4; ++c) {
      SCOPED_TRACE(testing::Message() << "channels " << c << ", method " << method);
      const int w = 97, h = 61;
      const auto pixels = smooth_pixels(w, h, c, 11 * c);
      EncodeOptions o;  // lossy WebP at the default quality
      o.webp_method = method;
      const std::string webp = encode_image(pixels.data(), w, h, c, o);
      const WebPBitstreamFeatures f = webp_features(webp);
      EXPECT_EQ(f.format, 1) << "lossy (VP8) expected";
      EXPECT_EQ(f.has_alpha != 0, c == 2 || c == 4);
      const auto want = as_rgba(pixels, c);
      const auto got = decode_webp_rgba(webp, w, h);
      double sum = 0;
      int worst = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const int d = std::abs(int(want[i]) - int(got[i]));
        sum += d;
        worst = std::max(worst, d);
      }
      // Pillow (libwebp 1.6) at quality 80 on such images: mean error about 3, worst about 24
      // (4:2:0 chroma on saturated colour); less at the default 90. A swapped channel or a
      // stride slip gives ~100.
      EXPECT_LT(sum / want.size(), 4.0);
      EXPECT_LE(worst, 32);
      EXPECT_GT(worst, 0) << "lossy WebP reproduced a random image exactly: was it lossy?";
      // Quality matters: a low one gives a smaller file.
      o.webp_quality = 10;
      EXPECT_LT(encode_image(pixels.data(), w, h, c, o).size(), webp.size());
    }
}

// Same input, same bytes, whatever the thread count (gray expansion is an OpenMP loop;
// libwebp's thread_level must not change the stream).
TEST(ImageCodec, OutputDoesNotDependOnThreads) {
  const int w = 300, h = 257;  // over the gray expansion's parallel threshold
  const auto pixels = smooth_pixels(w, h, 2, 5);
  EncodeOptions o;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::string one = encode_image(pixels.data(), w, h, 2, o);
  omp_set_num_threads(4);
  const std::string four = encode_image(pixels.data(), w, h, 2, o);
  omp_set_num_threads(saved);
  EXPECT_TRUE(one == four);
  EXPECT_TRUE(one == encode_image(pixels.data(), w, h, 2, o));
}

TEST(ImageCodec, MimeTypes) {
  EXPECT_STREQ(mime_type(ImageCodec::png), "image/png");
  EXPECT_STREQ(mime_type(ImageCodec::webp), "image/webp");
}

TEST(ImageCodec, BadInputIsOneErrorNamingIt) {
  const std::vector<uint8_t> px(16384 * 4, 1);
  EncodeOptions webp, png;
  png.codec = ImageCodec::png;
  for (const EncodeOptions& o : {webp, png}) {
    EXPECT_ERROR(encode_image(px.data(), 4, 4, 0, o), "channels", "got 0");
    EXPECT_ERROR(encode_image(px.data(), 4, 4, 5, o), "channels", "got 5");
    EXPECT_ERROR(encode_image(px.data(), 0, 4, 3, o), "at least 1x1", "0x4");
    EXPECT_ERROR(encode_image(px.data(), 4, -2, 3, o), "at least 1x1", "4x-2");
    EXPECT_ERROR(encode_image(nullptr, 4, 4, 3, o), "no pixels");
  }
  EXPECT_ERROR(encode_image(px.data(), 16384, 1, 1, webp), "16383", "16384x1", "PNG");
  EXPECT_ERROR(encode_image(px.data(), 1, 16384, 4, webp), "16383", "1x16384");
  EncodeOptions q = webp;
  q.webp_quality = 101;
  EXPECT_ERROR(encode_image(px.data(), 4, 4, 3, q), "WebP quality", "101");
  q.webp_quality = -1;
  EXPECT_ERROR(encode_image(px.data(), 4, 4, 3, q), "WebP quality", "-1");
  q = webp;
  q.webp_method = 7;
  EXPECT_ERROR(encode_image(px.data(), 4, 4, 3, q), "WebP method", "7");
  q.webp_method = -1;
  EXPECT_ERROR(encode_image(px.data(), 4, 4, 3, q), "WebP method", "-1");
  EncodeOptions l = png;
  l.png_level = 10;
  EXPECT_ERROR(encode_image(px.data(), 4, 4, 3, l), "zlib level", "10");
  // WebP's limit does not apply to PNG.
  EXPECT_NO_THROW(encode_image(px.data(), 16384, 1, 4, png));
}

// A failure inside libpng comes back as one s3d::Error with libpng's reason (through the
// longjmp in the error callback, not an exception through C frames). libpng refuses rows
// wider than its default user limit of 1,000,000 pixels.
TEST(ImageCodec, LibpngFailureIsOneErrorWithItsReason) {
  const std::vector<uint8_t> px(1000001, 7);
  EncodeOptions png;
  png.codec = ImageCodec::png;
  EXPECT_ERROR(encode_image(px.data(), 1000001, 1, 1, png), "libpng failed", "1000001x1x1",
               "width");
  // And the encoder still works afterwards.
  EXPECT_EQ(decode_png(encode_image(px.data(), 1000, 1, 1, png)).width, 1000);
}

}  // namespace
}  // namespace s3d::mesh
