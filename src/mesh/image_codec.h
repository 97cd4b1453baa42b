// Encoding 8-bit images for the GLB: PNG (libpng) and WebP (libwebp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace s3d::mesh {

enum class ImageCodec { png, webp };

struct EncodeOptions {
  ImageCodec codec = ImageCodec::webp;
  int32_t webp_quality = 80;   // lossy WebP quality, as Pillow's default that trimesh uses
  bool webp_lossless = false;
  int32_t png_level = 1;       // zlib level
  // libwebp's effort, 0..6 (Pillow's default is 4). 2 is the knee on 4096^2 textures at q80:
  // 2.7x less time than 4 for 2.5% more bytes and 0.7 dB less PSNR; 3..6 cost as much as 4.
  int32_t webp_method = 2;
};

// pixels: width*height*channels bytes, rows top to bottom; channels 1, 2, 3 or 4. Throws
// s3d::Error when the encoder fails.
std::string encode_image(const uint8_t* pixels, int32_t width, int32_t height, int32_t channels,
                         const EncodeOptions& options);
const char* mime_type(ImageCodec codec);

}  // namespace s3d::mesh
