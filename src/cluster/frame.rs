//! The CRC32C-checked frame both metadata logs store records in: `[length u32][crc32c u32]
//! [body]`, big endian. A frame that is cut, claims too much or fails its CRC is a torn write.

use crate::error::{Error, Result};

pub(crate) const FRAME_HEADER_BYTES: usize = 8;

/// Appends the frame of `body` to `out`.
pub(crate) fn encode_frame(body: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let len = u32::try_from(body.len())
        .map_err(|_| Error::InvalidRequest(format!("a frame of {} bytes is too large", body.len())))?;
    out.reserve(FRAME_HEADER_BYTES + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&crate::crc::crc32c(body).to_be_bytes());
    out.extend_from_slice(body);
    Ok(())
}

/// The body of the frame at the start of `bytes` and the frame's whole length, or None when the
/// frame is incomplete, claims more than `body_bytes_max` or fails its CRC: a torn write.
pub(crate) fn decode_frame(bytes: &[u8], body_bytes_max: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(..FRAME_HEADER_BYTES)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let len = usize::try_from(len).ok().filter(|len| *len <= body_bytes_max)?;
    let body = bytes.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len)?;
    (crate::crc::crc32c(body) == crc).then_some((body, FRAME_HEADER_BYTES + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_any_cut_or_flip_is_refused() {
        let mut bytes = Vec::new();
        encode_frame(b"hello raft", &mut bytes).unwrap();
        assert_eq!(decode_frame(&bytes, 1024), Some((&b"hello raft"[..], bytes.len())));
        for cut in 0..bytes.len() {
            assert_eq!(decode_frame(&bytes[..cut], 1024), None, "cut at {cut}");
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert_eq!(decode_frame(&flipped, 1024), None, "flip at {at}");
        }
        // A claimed length past the bound is refused before anything is read.
        assert_eq!(decode_frame(&bytes, 4), None);
    }
}
