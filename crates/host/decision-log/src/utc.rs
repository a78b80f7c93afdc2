//! A decision's time as an RFC 3339 UTC timestamp, for people reading the log.

use jiff::Timestamp;

/// `ms` since the Unix epoch as `YYYY-MM-DDThh:mm:ssZ`, to the second; an instant past jiff's
/// range as its last instant (late in the year 9999).
pub fn rfc3339(ms: u64) -> String {
    let last = Timestamp::MAX.as_second();
    let secs = i64::try_from(ms / 1000).map_or(last, |s| s.min(last));
    Timestamp::from_second(secs)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_599_999), "2026-12-31T23:59:59Z");
        assert_eq!(rfc3339(4_107_542_400_000), "2100-03-01T00:00:00Z");
        assert_eq!(
            rfc3339(u64::MAX),
            "9999-12-30T22:00:00Z",
            "jiff's last instant"
        );
    }
}
