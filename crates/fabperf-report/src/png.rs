//! A minimal PNG encoder for the HTML report's raster heat maps (a mesh
//! of hundreds of nodes is too many cells for SVG): 8-bit RGB, one IDAT
//! chunk, every scanline with filter 0 (none), zlib from flate2.

use std::io::Write as _;

/// An RGB image, row-major, 3 bytes per pixel.
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl Rgb {
    pub fn new(width: u32, height: u32, fill: [u8; 3]) -> Rgb {
        Rgb {
            width,
            height,
            pixels: fill.repeat(width as usize * height as usize),
        }
    }

    pub fn set(&mut self, x: u32, y: u32, c: [u8; 3]) {
        if x < self.width && y < self.height {
            let i = 3 * (y as usize * self.width as usize + x as usize);
            self.pixels[i..i + 3].copy_from_slice(&c);
        }
    }

    /// The PNG file.
    pub fn encode(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity(self.pixels.len() + self.height as usize);
        for row in self.pixels.chunks(3 * self.width as usize) {
            raw.push(0); // filter: none
            raw.extend_from_slice(row);
        }
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&raw).expect("writing into memory");
        let idat = z.finish().expect("writing into memory");
        let mut ihdr = Vec::with_capacity(13);
        ihdr.extend(self.width.to_be_bytes());
        ihdr.extend(self.height.to_be_bytes());
        ihdr.extend([8, 2, 0, 0, 0]); // 8 bits, RGB, deflate, adaptive filters, no interlace
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, data) in [(b"IHDR", &ihdr), (b"IDAT", &idat), (b"IEND", &Vec::new())] {
            out.extend((data.len() as u32).to_be_bytes());
            let mut crc = flate2::Crc::new();
            crc.update(kind);
            crc.update(data);
            out.extend(kind);
            out.extend(data.iter());
            out.extend(crc.sum().to_be_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// The file is a PNG: signature, chunk lengths and CRCs (checked against
    /// the standard check value), and an IDAT that inflates to the
    /// scanlines.
    #[test]
    fn encodes_a_valid_png() {
        let mut img = Rgb::new(3, 2, [255, 255, 255]);
        img.set(1, 1, [10, 20, 30]);
        img.set(9, 9, [1, 1, 1]); // outside: ignored
        let png = img.encode();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let mut at = 8;
        let mut kinds = Vec::new();
        let mut idat = Vec::new();
        while at < png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let kind = &png[at + 4..at + 8];
            let data = &png[at + 8..at + 8 + len];
            let crc = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
            let mut c = flate2::Crc::new();
            c.update(kind);
            c.update(data);
            assert_eq!(c.sum(), crc, "chunk {}", String::from_utf8_lossy(kind));
            if kind == b"IDAT" {
                idat.extend_from_slice(data);
            }
            kinds.push(String::from_utf8_lossy(kind).to_string());
            at += 12 + len;
        }
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(&idat[..])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(raw.len(), 2 * (1 + 3 * 3));
        assert_eq!(&raw[10..20], &[0, 255, 255, 255, 10, 20, 30, 255, 255, 255]);
        // CRC-32 as PNG defines it (the standard check value).
        let mut c = flate2::Crc::new();
        c.update(b"123456789");
        assert_eq!(c.sum(), 0xCBF4_3926);
    }
}
