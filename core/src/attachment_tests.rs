use proptest::prelude::*;

use super::*;

/// The smallest valid header of each kind, and a byte longer.
fn header(kind: ImageKind) -> Vec<u8> {
    match kind {
        ImageKind::Png => b"\x89PNG\r\n\x1a\n\0".to_vec(),
        ImageKind::Jpeg => b"\xff\xd8\xff\xe0".to_vec(),
        ImageKind::Gif => b"GIF89a\0".to_vec(),
        ImageKind::Webp => b"RIFF\x10\0\0\0WEBPVP8 ".to_vec(),
    }
}

#[test]
fn sniffs_each_kind_by_its_magic_number() {
    for kind in ImageKind::ALL {
        assert_eq!(ImageKind::sniff(&header(kind)), Some(kind), "{kind:?}");
    }
    assert_eq!(ImageKind::sniff(b"GIF87a"), Some(ImageKind::Gif));
}

#[test]
fn refuses_what_is_not_an_image_or_is_cut_short() {
    for bytes in [
        &b""[..],
        b"\x89PNG\r\n\x1a",
        b"\xff\xd8",
        b"GIF90a",
        b"RIFF\0\0\0\0WAVE",
        b"RIFF\0\0\0\0WEB",
        b"<svg xmlns='http://www.w3.org/2000/svg'/>",
        b"%PDF-1.7",
    ] {
        assert_eq!(ImageKind::sniff(bytes), None, "{bytes:?}");
    }
}

#[test]
fn media_types_match_exactly() {
    for kind in ImageKind::ALL {
        assert_eq!(ImageKind::from_mime_type(kind.mime_type()), Some(kind));
    }
    for loose in ["image/jpg", "IMAGE/PNG", "image/png ", "image/svg+xml", ""] {
        assert_eq!(ImageKind::from_mime_type(loose), None, "{loose:?}");
    }
}

#[test]
fn an_id_is_the_sha256_of_the_bytes() {
    // SHA-256 of "abc" (FIPS 180-2, appendix B.1).
    let id = AttachmentId::of(b"abc");
    assert_eq!(
        id.to_string(),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(Attachment::new(b"abc".to_vec()).id(), id);
}

#[test]
fn malformed_ids_are_refused() {
    let good = AttachmentId::of(b"x").to_string();
    let hex = &good[7..];
    for bad in [
        String::new(),
        hex.to_string(),
        format!("sha1:{hex}"),
        format!("sha256:{}", &hex[1..]),
        format!("sha256:{hex}0"),
        format!("sha256:{}", hex.to_uppercase()),
        format!("sha256:{}g", &hex[1..]),
        format!("sha256:{}é", &hex[2..]),
    ] {
        assert!(bad.parse::<AttachmentId>().is_err(), "{bad:?}");
    }
}

#[test]
fn debug_of_an_attachment_shows_its_size_not_its_bytes() {
    let text = format!("{:?}", Attachment::new(vec![7; 1000]));
    assert!(text.contains("bytes: 1000"), "{text}");
}

proptest! {
    #[test]
    fn ids_round_trip_through_text_and_json(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let id = AttachmentId::of(&bytes);
        prop_assert_eq!(id.to_string().parse::<AttachmentId>().unwrap(), id);
        let json = serde_json::to_string(&id).unwrap();
        prop_assert_eq!(serde_json::from_str::<AttachmentId>(&json).unwrap(), id);
        prop_assert_eq!(AttachmentId::from_digest(*id.digest()), id);
    }

    /// The kind is decided by the header alone: what follows it never
    /// changes the answer.
    #[test]
    fn the_header_alone_decides_the_kind(
        kind in proptest::sample::select(ImageKind::ALL.to_vec()),
        tail in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let mut bytes = header(kind);
        bytes.extend(tail);
        prop_assert_eq!(ImageKind::sniff(&bytes), Some(kind));
    }
}

/// A whole `width`×`height` image of `kind`, encoded by the `image` crate.
fn encoded(kind: ImageKind, width: u32, height: u32) -> Vec<u8> {
    let format = match kind {
        ImageKind::Png => image::ImageFormat::Png,
        ImageKind::Jpeg => image::ImageFormat::Jpeg,
        ImageKind::Gif => image::ImageFormat::Gif,
        ImageKind::Webp => image::ImageFormat::WebP,
    };
    let pixels = image::RgbaImage::from_fn(width, height, |x, y| {
        image::Rgba([(x * 40) as u8, (y * 40) as u8, 128, 255])
    });
    let mut bytes = std::io::Cursor::new(Vec::new());
    image::DynamicImage::ImageRgba8(pixels)
        .to_rgb8()
        .write_to(&mut bytes, format)
        .expect("the image encodes");
    bytes.into_inner()
}

#[test]
fn a_whole_image_of_each_kind_is_admitted_with_its_dimensions() {
    for kind in ImageKind::ALL {
        let bytes = encoded(kind, 5, 3);
        assert_eq!(
            inspect(&bytes),
            Ok(ImageInfo {
                kind,
                width: 5,
                height: 3
            }),
            "{kind:?}"
        );
    }
}

/// The bytes a format's encoding ends with whose loss alone still leaves
/// a whole image: PNG's `IEND` chunk, JPEG's `EOI` marker; a GIF must end
/// with its trailer, and WebP has none.
fn trailer(kind: ImageKind) -> usize {
    match kind {
        ImageKind::Png => 12,
        ImageKind::Jpeg => 2,
        ImageKind::Gif | ImageKind::Webp => 0,
    }
}

#[test]
fn an_image_cut_short_anywhere_is_malformed() {
    for kind in ImageKind::ALL {
        let bytes = encoded(kind, 16, 16);
        // Every cut that keeps the magic number and loses pixel data: past
        // the header too, where the dimensions alone still read.
        for cut in (12..bytes.len() - trailer(kind)).step_by(3) {
            match inspect(&bytes[..cut]) {
                Err(ImageFault::Malformed { kind: found, .. }) => assert_eq!(found, kind),
                other => panic!("{kind:?} cut at {cut} of {}: {other:?}", bytes.len()),
            }
        }
    }
}

#[test]
fn the_png_of_the_report_cut_after_its_header_is_refused() {
    // A 2x2 PNG of 75 bytes, cut after its signature and IHDR (33) and
    // four bytes into its IDAT (37).
    let whole: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x02\x00\x00\x00\x02\x08\x02\x00\x00\x00\xfd\xd4\x9a\x73\x00\x00\x00\x12\x49\x44\x41\x54\x78\x9c\x63\xf8\xcf\xc0\xc0\x00\xc2\x0c\xff\x81\x00\x00\x1f\xee\x05\xfb\x0b\xd9\x68\x8b\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";
    assert_eq!(whole.len(), 75);
    assert!(inspect(whole).is_ok());
    for cut in [33, 37] {
        let fault = inspect(&whole[..cut]).expect_err("cut short");
        assert!(
            fault
                .to_string()
                .starts_with("the bytes start as image/png but are not a whole image of it"),
            "{fault}"
        );
    }
}

#[test]
fn a_header_claiming_more_pixels_than_the_cap_is_refused_before_decoding() {
    // A PNG whose IHDR claims 9000x16 (its CRC recomputed), with no data.
    let mut bytes = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    let ihdr = [
        &9000u32.to_be_bytes()[..],
        &16u32.to_be_bytes(),
        &[8, 2, 0, 0, 0],
    ]
    .concat();
    bytes.extend_from_slice(&ihdr);
    let crc = crc32(&[&b"IHDR"[..], &ihdr].concat());
    bytes.extend_from_slice(&crc.to_be_bytes());
    // An empty IDAT: the decoder reads up to the image data for the header.
    bytes.extend_from_slice(b"\x00\x00\x00\x00IDAT");
    bytes.extend_from_slice(&crc32(b"IDAT").to_be_bytes());
    assert_eq!(
        inspect(&bytes),
        Err(ImageFault::TooLarge {
            kind: ImageKind::Png,
            width: 9000,
            height: 16
        })
    );
    assert!(inspect(&bytes)
        .unwrap_err()
        .to_string()
        .contains("9000x16 pixels, over the caps of 8192 pixels a side"));
}

/// The CRC-32 (IEEE) PNG chunks carry.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn what_is_not_an_image_is_said_so() {
    assert_eq!(inspect(b"%PDF-1.7"), Err(ImageFault::NotAnImage));
    assert_eq!(inspect(b""), Err(ImageFault::NotAnImage));
}

#[test]
fn a_cut_jpeg_is_refused_though_its_exif_thumbnail_is_whole() {
    let main = encoded(ImageKind::Jpeg, 16, 16);
    let thumbnail = encoded(ImageKind::Jpeg, 4, 4);
    // SOI, an APP1 "Exif" segment carrying a whole JPEG (its own scan and
    // end marker), then the main image's segments.
    let payload = [&b"Exif\0\0"[..], &thumbnail].concat();
    let length = u16::try_from(payload.len() + 2).unwrap().to_be_bytes();
    let whole = [&main[..2], &[0xff, 0xe1], &length[..], &payload, &main[2..]].concat();
    assert!(inspect(&whole).is_ok(), "the whole image is admitted");
    let cut = &whole[..whole.len() - 40];
    match inspect(cut) {
        Err(ImageFault::Malformed {
            kind: ImageKind::Jpeg,
            reason,
        }) => {
            assert!(reason.contains("end-of-image marker"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
