use sha2::{Digest, Sha256};

/// The namespace of the user identified by `sub`: `sless-` + hex of the first 8 bytes of
/// SHA-256(sub). Deterministic and does not reveal `sub`.
pub fn namespace_for_sub(sub: &str) -> String {
    let digest = Sha256::digest(sub.as_bytes());
    format!("sless-{}", hex::encode(&digest[..8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_is_prefix_plus_16_hex_chars_of_sha256() {
        // sha256("alice") = 2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90
        assert_eq!(namespace_for_sub("alice"), "sless-2bd806c97f0e00af");
        assert_eq!(namespace_for_sub("alice").len(), 22);
        assert_ne!(namespace_for_sub("alice"), namespace_for_sub("bob"));
    }
}
