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
