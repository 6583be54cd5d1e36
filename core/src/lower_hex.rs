//! Lower-case hex, the one spelling of bytes the log's ids accept: an
//! attachment's digest and a W3C trace context's ids. Upper case is
//! refused (W3C `traceparent`; the attachment id's canonical form).

/// Decodes `text`, exactly `2 * N` lower-case hex digits, in one pass;
/// `None` for any other length or byte.
pub(crate) fn decode<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The value of one lower-case hex digit.
fn digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}
