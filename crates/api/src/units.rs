const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// A size for people: whole units exactly ("50 MiB", a limit), others to one decimal
/// ("1.5 KiB", a file), small ones in bytes.
pub fn human_bytes(bytes: u64) -> String {
    let (unit, name) = match bytes {
        b if b >= MIB => (MIB, "MiB"),
        b if b >= KIB => (KIB, "KiB"),
        1 => return "1 byte".into(),
        b => return format!("{b} bytes"),
    };
    if bytes.is_multiple_of(unit) {
        format!("{} {name}", bytes / unit)
    } else {
        format!("{:.1} {name}", bytes as f64 / unit as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(1), "1 byte");
        assert_eq!(human_bytes(1000), "1000 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(4 * KIB), "4 KiB");
        assert_eq!(human_bytes(50 * MIB), "50 MiB");
        assert_eq!(human_bytes(5 * MIB + MIB / 2), "5.5 MiB");
    }
}
