//! CRC-32C (Castagnoli), the checksum of Kafka's record batches (magic 2) and of Sluice's own
//! checkpoint and cluster frames. One place, so that every caller gets the fastest kernel the
//! CPU has (crc-fast picks PCLMULQDQ or AVX-512 VPCLMULQDQ folding at run time): checking a
//! Produce request's batches is the broker's largest cost after the two copies of its bytes.

/// The CRC-32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

/// The CRC-32C of the concatenation of `parts`, without concatenating them.
pub fn crc32c_of_parts(parts: &[&[u8]]) -> u32 {
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    for part in parts {
        digest.update(part);
    }
    // The digest of a 32-bit CRC fits its low half.
    digest.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length up to a few folds and some large ones, at every alignment of a 64-byte
    /// line, against the reference implementation, whole and cut into two or three parts.
    #[test]
    fn matches_the_reference_crc32c_at_every_length_alignment_and_split() {
        let data: Vec<u8> = (0..(1 << 20) + 200_u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(crc32c(b"123456789"), 0xe306_9283, "the check value of CRC-32/ISCSI");
        let lengths = (0..600).chain([1023, 1024, 4095, 4096, 65_537, 1 << 20]);
        for len in lengths {
            for start in [0, 1, 7, 31, 63] {
                let bytes = &data[start..start + len];
                let expected = crc32c::crc32c(bytes);
                assert_eq!(crc32c(bytes), expected, "length {len} at {start}");
                let (a, b) = bytes.split_at(len / 3);
                let (b, c) = b.split_at(b.len() / 2);
                assert_eq!(crc32c_of_parts(&[a, b, c]), expected, "three parts of {len} at {start}");
                assert_eq!(crc32c_of_parts(&[bytes, &[]]), expected, "{len} and nothing");
            }
        }
        assert_eq!(crc32c_of_parts(&[]), crc32c::crc32c(&[]));
    }
}
