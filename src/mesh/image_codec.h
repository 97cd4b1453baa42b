// Encoding 8-bit images for the GLB: PNG (libpng) and WebP (libwebp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace s3d::mesh {

enum class ImageCodec { png, webp };

struct EncodeOptions {
  ImageCodec codec = ImageCodec::webp;
  // Lossy WebP quality. The original writes Pillow's default, 80, at libwebp's method 4; at
  // method 2 (below) q80 loses more, and the encoder's loss is most of the texture's error
  // against the attribute volume (bunny at 500,000 / 2048: base colour MAE 0.0020 as PNG,
  // 0.0056 as WebP q80 method 2, 0.0045 at method 3 or 4, 0.0043 at q90 method 2, at method
  // 2's time; files 1.5% larger: bench/results/2026-12-03-local-webp-effort.md).
  int32_t webp_quality = 90;
  bool webp_lossless = false;
  int32_t png_level = 1;       // zlib level
  // libwebp's effort, 0..6 (Pillow's default is 4). 2 is the knee on 4096^2 textures: 2.7x
  // less time than 4 for 2.5% more bytes and 0.7 dB less PSNR at q80; 3..6 cost as much as 4
  // (on the H200 machine's cores, method 3 cost 0.35 s more at 2048^2).
  int32_t webp_method = 2;
};

// pixels: width*height*channels bytes, rows top to bottom; channels 1, 2, 3 or 4. Throws
// s3d::Error when the encoder fails.
std::string encode_image(const uint8_t* pixels, int32_t width, int32_t height, int32_t channels,
                         const EncodeOptions& options);
const char* mime_type(ImageCodec codec);

}  // namespace s3d::mesh
