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

/// A run's duration for people: "850 ms", "12.3 s", "4 min 5 s".
pub fn human_duration_ms(ms: u64) -> String {
    match ms {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration_ms(850), "850 ms");
        assert_eq!(human_duration_ms(12_345), "12.3 s");
        assert_eq!(human_duration_ms(245_000), "4 min 5 s");
    }

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
