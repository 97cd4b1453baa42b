#include "mesh/image_codec.h"

#include <png.h>
#include <webp/encode.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/error.h"

namespace s3d::mesh {
namespace {

// ---- PNG ----------------------------------------------------------------------------------
// libpng reports errors through a callback that must not return. Throwing a C++ exception
// through libpng's C frames is not something libpng supports, so the callback records the
// message and longjmps back to the setjmp in write_png_rows; the error is thrown from there,
// after libpng's frames are gone.
struct PngSink {
  std::string* out = nullptr;
  char message[256] = {};
  char warning[256] = {};  // the last warning: libpng's IHDR checks warn, then fail vaguely
  std::jmp_buf jump;
};

extern "C" void png_on_error(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  std::snprintf(sink->message, sizeof(sink->message), "%s", msg != nullptr ? msg : "?");
  std::longjmp(sink->jump, 1);
}

// Warnings do not stop the encode; the last one is kept for the error message, as libpng's
// header checks warn with the reason ("Image width exceeds user limit") and then fail with
// only "Invalid IHDR data".
extern "C" void png_on_warning(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  std::snprintf(sink->warning, sizeof(sink->warning), "%s", msg != nullptr ? msg : "?");
}

extern "C" void png_on_write(png_structp png, png_bytep data, png_size_t length) {
  auto* sink = static_cast<PngSink*>(png_get_io_ptr(png));
  // An allocation failure must not unwind through libpng either: it becomes a libpng error.
  try {
    sink->out->append(reinterpret_cast<const char*>(data), length);
  } catch (const std::bad_alloc&) {
    png_error(png, "out of memory while writing the PNG");
  }
}

extern "C" void png_on_flush(png_structp) {}

// Only trivially destructible locals live in this frame: longjmp skips destructors. Returns
// false with sink.message set when libpng failed.
bool write_png_rows(png_structp png, png_infop info, PngSink& sink, const uint8_t* pixels,
                    int32_t width, int32_t height, int32_t channels, int32_t level) {
  if (setjmp(sink.jump) != 0) return false;
  static constexpr int kColorType[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                        PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  png_set_write_fn(png, &sink, png_on_write, png_on_flush);
  png_set_compression_level(png, level);
  // Level 0 stores the data: filtering would only cost time. The fast levels (1-3) use the
  // Paeth filter alone: on a smooth 4096^2 RGBA texture at level 1 it gave the size of
  // libpng's adaptive choice among all five filters (+0.01%) for 37% less time. Higher
  // levels ask for size, and get the adaptive choice.
  if (level == 0) png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
  else if (level <= 3) png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_PAETH);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               kColorType[channels], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_BASE,
               PNG_FILTER_TYPE_BASE);
  png_write_info(png, info);
  const size_t stride = static_cast<size_t>(width) * static_cast<size_t>(channels);
  for (int32_t y = 0; y < height; ++y)
    png_write_row(png, const_cast<png_bytep>(pixels + stride * static_cast<size_t>(y)));
  png_write_end(png, nullptr);
  return true;
}

std::string encode_png(const uint8_t* pixels, int32_t width, int32_t height, int32_t channels,
                       int32_t level) {
  S3D_CHECK(level >= 0 && level <= 9, "encode_image: the PNG zlib level must be in [0, 9] (got ",
            level, ")");
  std::string out;
  // A PNG of noise is a little larger than its pixels; smooth textures are far smaller.
  out.reserve(static_cast<size_t>(width) * height * channels / 2 + 1024);
  PngSink sink;
  sink.out = &out;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, png_on_error, png_on_warning);
  S3D_CHECK(png != nullptr, "encode_image: libpng could not start a PNG writer");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    fail("encode_image: libpng could not start a PNG writer");
  }
  const bool ok = write_png_rows(png, info, sink, pixels, width, height, channels, level);
  png_destroy_write_struct(&png, &info);
  S3D_CHECK(ok, "encode_image: libpng failed on a ", width, "x", height, "x", channels,
            " image: ", sink.message, sink.warning[0] != 0 ? " (" : "", sink.warning,
            sink.warning[0] != 0 ? ")" : "");
  return out;
}

// ---- WebP ---------------------------------------------------------------------------------
const char* webp_error_name(WebPEncodingError e) {
  switch (e) {
    case VP8_ENC_ERROR_OUT_OF_MEMORY: return "out of memory";
    case VP8_ENC_ERROR_BITSTREAM_OUT_OF_MEMORY: return "out of memory for the bitstream";
    case VP8_ENC_ERROR_NULL_PARAMETER: return "a null parameter";
    case VP8_ENC_ERROR_INVALID_CONFIGURATION: return "an invalid configuration";
    case VP8_ENC_ERROR_BAD_DIMENSION: return "a bad dimension";
    case VP8_ENC_ERROR_PARTITION0_OVERFLOW: return "partition 0 overflowed (over 512 KiB)";
    case VP8_ENC_ERROR_PARTITION_OVERFLOW: return "a partition overflowed (over 16 MiB)";
    case VP8_ENC_ERROR_BAD_WRITE: return "a bad write";
    case VP8_ENC_ERROR_FILE_TOO_BIG: return "the file would be over 4 GiB";
    case VP8_ENC_ERROR_USER_ABORT: return "a user abort";
    default: return "an unknown error";
  }
}

// WebP stores RGB or RGBA only: gray becomes RGB and gray+alpha RGBA, each gray value copied
// into the three colour channels (what Pillow's convert("RGB") does).
std::vector<uint8_t> expand_gray(const uint8_t* pixels, size_t count, int32_t channels) {
  const int32_t out_channels = channels + 2;
  std::vector<uint8_t> out(count * static_cast<size_t>(out_channels));
#pragma omp parallel for schedule(static) if (count >= (1u << 16))
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
    const uint8_t* src = pixels + i * channels;
    uint8_t* dst = out.data() + i * out_channels;
    dst[0] = dst[1] = dst[2] = src[0];
    if (channels == 2) dst[3] = src[1];
  }
  return out;
}

// The settings used for every WebP are Pillow's (the default preset at the given quality,
// exact off for lossy) but for the method, which is the caller's (EncodeOptions). thread_level
// lets libwebp overlap its analysis and alpha passes with the main one; the bytes are the same
// either way.
std::string encode_webp(const uint8_t* pixels, int32_t width, int32_t height, int32_t channels,
                        const EncodeOptions& options) {
  S3D_CHECK(width <= WEBP_MAX_DIMENSION && height <= WEBP_MAX_DIMENSION,
            "encode_image: a WebP image is at most ", WEBP_MAX_DIMENSION, " pixels per side (got ",
            width, "x", height, "); use PNG for larger textures");
  S3D_CHECK(options.webp_quality >= 0 && options.webp_quality <= 100,
            "encode_image: the WebP quality must be in [0, 100] (got ", options.webp_quality, ")");
  S3D_CHECK(options.webp_method >= 0 && options.webp_method <= 6,
            "encode_image: the WebP method must be in [0, 6] (got ", options.webp_method, ")");
  std::vector<uint8_t> expanded;
  if (channels <= 2) {
    expanded = expand_gray(pixels, static_cast<size_t>(width) * height, channels);
    pixels = expanded.data();
    channels += 2;
  }
  WebPConfig config;
  S3D_CHECK(WebPConfigPreset(&config, WEBP_PRESET_DEFAULT,
                             static_cast<float>(options.webp_quality)),
            "encode_image: libwebp's headers and library do not match");
  config.method = options.webp_method;
  config.thread_level = 1;
  config.lossless = options.webp_lossless ? 1 : 0;
  // Lossless means lossless: keep the colour under fully transparent pixels as well.
  config.exact = options.webp_lossless ? 1 : 0;
  S3D_CHECK(WebPValidateConfig(&config), "encode_image: libwebp refused the WebP settings");

  WebPPicture picture;
  S3D_CHECK(WebPPictureInit(&picture), "encode_image: libwebp's headers and library do not match");
  picture.width = width;
  picture.height = height;
  picture.use_argb = config.lossless;  // lossless encodes ARGB; lossy YUV (no round trip)
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  picture.writer = WebPMemoryWrite;
  picture.custom_ptr = &writer;
  const int stride = width * channels;
  const bool imported = channels == 4 ? WebPPictureImportRGBA(&picture, pixels, stride)
                                      : WebPPictureImportRGB(&picture, pixels, stride);
  const bool encoded = imported && WebPEncode(&config, &picture);
  const WebPEncodingError error = picture.error_code;
  WebPPictureFree(&picture);
  std::string out;
  if (encoded) out.assign(reinterpret_cast<const char*>(writer.mem), writer.size);
  WebPMemoryWriterClear(&writer);
  S3D_CHECK(imported, "encode_image: libwebp could not take a ", width, "x", height, "x",
            channels, " image (out of memory?)");
  S3D_CHECK(encoded, "encode_image: libwebp failed on a ", width, "x", height, "x", channels,
            " image: ", webp_error_name(error));
  return out;
}

}  // namespace

std::string encode_image(const uint8_t* pixels, int32_t width, int32_t height, int32_t channels,
                         const EncodeOptions& options) {
  S3D_CHECK(channels >= 1 && channels <= 4,
            "encode_image: channels must be 1, 2, 3 or 4 (got ", channels, ")");
  S3D_CHECK(width >= 1 && height >= 1, "encode_image: the image size must be at least 1x1 (got ",
            width, "x", height, ")");
  S3D_CHECK(pixels != nullptr, "encode_image: no pixels given for a ", width, "x", height,
            " image");
  switch (options.codec) {
    case ImageCodec::png: return encode_png(pixels, width, height, channels, options.png_level);
    case ImageCodec::webp: return encode_webp(pixels, width, height, channels, options);
  }
  fail("encode_image: unknown codec ", static_cast<int>(options.codec));
}

const char* mime_type(ImageCodec codec) {
  switch (codec) {
    case ImageCodec::png: return "image/png";
    case ImageCodec::webp: return "image/webp";
  }
  fail("mime_type: unknown codec ", static_cast<int>(codec));
}

}  // namespace s3d::mesh
