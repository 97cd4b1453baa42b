"""A point-splat renderer in NumPy for the judge's side-by-side views. It is NOT a rasteriser:
it draws dense surface samples as 2x2-pixel splats with a z-buffer, orthographic, shaded with
Lambert's law on the base colour (ambient 0.25 plus 0.75 |n.l|, two-sided), so thin gaps
between samples may show as background where the sampling is sparse."""
import numpy as np

# Each view: (name, screen-right axis, screen-up axis, toward-the-viewer axis) in glTF axes
# (+Y up), as signed unit vectors.
VIEWS = (("front", (1, 0, 0), (0, 1, 0), (0, 0, 1)),
         ("side", (0, 0, -1), (0, 1, 0), (1, 0, 0)),
         ("top", (1, 0, 0), (0, 0, -1), (0, 1, 0)))
LIGHT = np.array([0.35, 0.55, 1.0]) / np.linalg.norm([0.35, 0.55, 1.0])  # in view space
BACKGROUND = np.array([236, 236, 240], dtype=np.uint8)


def render_views(points, normals, colors, center, half, size=512):
    """Three uint8 [size, size, 3] images (front, side, top) of points [N, 3] (glTF axes) with
    unit normals [N, 3] and base colours [N, 3] in [0, 1]; the square view spans
    center +- half on both screen axes."""
    images = []
    for _, right, up, toward in VIEWS:
        basis = np.array([right, up, toward], dtype=np.float64)
        rel = (points - center) @ basis.T
        n = normals @ basis.T
        shade = 0.25 + 0.75 * np.abs(n @ LIGHT)
        rgb = np.clip(colors * shade[:, None], 0, 1)
        scale = 0.5 * size / half
        px = np.floor(rel[:, 0] * scale + size / 2).astype(np.int64)
        py = np.floor(size / 2 - rel[:, 1] * scale).astype(np.int64)
        images.append(_splat(px, py, rel[:, 2], rgb, size))
    return images


def _splat(px, py, depth, rgb, size):
    img = np.tile(BACKGROUND, (size * size, 1))
    offsets = ((0, 0), (1, 0), (0, 1), (1, 1))
    xs = np.concatenate([px + dx for dx, _ in offsets])
    ys = np.concatenate([py + dy for _, dy in offsets])
    ds = np.tile(depth, len(offsets))
    src = np.tile(np.arange(len(px)), len(offsets))
    ok = (xs >= 0) & (xs < size) & (ys >= 0) & (ys < size)
    pix, ds, src = ys[ok] * size + xs[ok], ds[ok], src[ok]
    order = np.lexsort((-ds, pix))  # by pixel, nearest (largest depth) first
    pix, src = pix[order], src[order]
    first = np.ones(len(pix), dtype=bool)
    first[1:] = pix[1:] != pix[:-1]
    img[pix[first]] = np.round(rgb[src[first]] * 255).astype(np.uint8)
    return img.reshape(size, size, 3)


def compose(rows, labels, size):
    """One PNG-ready Pillow image: a row per entry of `rows` (three views each) with its
    label and the view names above it."""
    from PIL import Image, ImageDraw
    pad = 22
    sheet = Image.new("RGB", (3 * size, len(rows) * (size + pad)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for r, (views, label) in enumerate(zip(rows, labels)):
        top = r * (size + pad)
        for c, (view, (name, *_)) in enumerate(zip(views, VIEWS)):
            sheet.paste(Image.fromarray(view), (c * size, top + pad))
            draw.text((c * size + 6, top + 5), f"{label} - {name}", fill=(0, 0, 0))
    return sheet
