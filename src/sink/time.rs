//! Wall-clock rendering of recording-clock timestamps, for spreadsheet-friendly columns.
//!
//! The form is ISO 8601 with a `T` and no zone, `2026-11-23T01:48:11.164035423` (UTC):
//! LibreOffice Calc's CSV import makes a date-time cell of it only with the `T` (the
//! space form, which earlier versions wrote, stays a string there), and DuckDB's
//! `read_csv_auto` and pandas (`parse_dates`) read it as a timestamp too. A `Z` suffix
//! would make it a string in Calc again. [`parse_utc`] reads both forms, so older
//! recordings still load.

/// realtime − monotonic at the start of a run, so monotonic sample times can be shown as
/// wall-clock times. Read once: the two clocks drift apart only through NTP slewing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WallClock {
    offset_ns: i128,
}

impl WallClock {
    pub fn now() -> WallClock {
        use nix::time::{clock_gettime, ClockId};
        let ns = |id| {
            clock_gettime(id)
                .map(|t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128)
                .unwrap_or(0)
        };
        let mono = ns(ClockId::CLOCK_MONOTONIC);
        let real = ns(ClockId::CLOCK_REALTIME);
        WallClock {
            offset_ns: real - mono,
        }
    }

    pub fn with_offset(offset_ns: i128) -> WallClock {
        WallClock { offset_ns }
    }

    /// realtime − monotonic, ns (what file metadata records).
    pub fn offset_ns(&self) -> i128 {
        self.offset_ns
    }

    /// A recording-clock time as ns since the Unix epoch.
    pub fn wall_ns(&self, mono_ns: u64) -> i128 {
        mono_ns as i128 + self.offset_ns
    }

    /// `2026-11-21T13:59:01.123456789` (UTC): a form spreadsheets read as a date-time.
    pub fn format(&self, mono_ns: u64) -> String {
        format_utc(mono_ns as i128 + self.offset_ns)
    }
}

/// Renders many times of one run: the date and time of day are formatted once per
/// second, each time then only appends its nanoseconds (no 128-bit division while the
/// second stays the same).
#[derive(Debug, Clone)]
pub struct WallCache {
    clock: WallClock,
    /// Start of the cached second, in ns since the epoch.
    sec_start: i128,
    /// Everything up to and including the '.' before the nanoseconds
    /// (`2026-11-21 13:59:01.`), in a block appended whole and then cut to length.
    prefix: [u8; 32],
    prefix_len: usize,
}

impl WallCache {
    pub fn new(clock: WallClock) -> WallCache {
        WallCache {
            clock,
            sec_start: i128::MIN,
            prefix: [0; 32],
            prefix_len: 0,
        }
    }

    /// The prefix of `mono_ns`'s second, and its nanoseconds.
    #[inline]
    fn split(&mut self, mono_ns: u64) -> u64 {
        let unix = mono_ns as i128 + self.clock.offset_ns;
        let into = unix.wrapping_sub(self.sec_start);
        if (0..1_000_000_000).contains(&into) {
            return into as u64;
        }
        let sec_start = unix.div_euclid(1_000_000_000) * 1_000_000_000;
        let full = format_utc(sec_start);
        let p = &full.as_bytes()[..full.len() - 9];
        // Years past 9999 would not fit the block: render them in full each time.
        if p.len() <= self.prefix.len() {
            self.prefix[..p.len()].copy_from_slice(p);
            self.prefix_len = p.len();
            self.sec_start = sec_start;
        } else {
            self.sec_start = i128::MIN;
        }
        (unix - sec_start) as u64
    }

    /// The wall-clock form of `mono_ns` (as [`WallClock::format`]) in the pieces a row
    /// writer stores whole: the cached second's text and the nanoseconds after it.
    #[inline]
    pub fn wall(&mut self, mono_ns: u64) -> Wall<'_> {
        let nanos = self.split(mono_ns);
        if self.sec_start == i128::MIN {
            return Wall::Full(format_utc(mono_ns as i128 + self.clock.offset_ns));
        }
        Wall::Cached {
            prefix: &self.prefix,
            len: self.prefix_len,
            nanos: nanos as u32,
        }
    }
}

/// A start time from [`WallCache::wall`].
pub enum Wall<'a> {
    /// `prefix[..len]` (`2026-11-21T13:59:01.`), then `nanos` as nine digits.
    Cached {
        prefix: &'a [u8; 32],
        len: usize,
        nanos: u32,
    },
    /// A time the cache does not hold (years past 9999), rendered in full.
    Full(String),
}

/// `v` < 10^9 as exactly nine ASCII digits: the first, and a word of the other eight
/// (in order in its little-endian bytes) that a row writer stores whole.
#[inline]
pub fn nine_digits(v: u32) -> (u8, u64) {
    (
        b'0' + (v / 100_000_000) as u8,
        crate::record::eight_ascii(v % 100_000_000),
    )
}

/// Julian day number of 1970-01-01.
const UNIX_JULIAN_DAY: i64 = 2_440_588;

/// Format ns since the Unix epoch as UTC `YYYY-MM-DDTHH:MM:SS.nnnnnnnnn`; a time past
/// the calendar's range (year ±9999) as its plain ns count.
pub fn format_utc(unix_ns: i128) -> String {
    let secs = unix_ns.div_euclid(1_000_000_000);
    let nanos = unix_ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let date = i32::try_from(days as i64 + UNIX_JULIAN_DAY)
        .ok()
        .and_then(|jd| time::Date::from_julian_day(jd).ok());
    let Some(date) = date else {
        return unix_ns.to_string();
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{nanos:09}",
        date.year(),
        u8::from(date.month()),
        date.day(),
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnn` (UTC, as [`format_utc`] writes; the space between
/// date and time that earlier versions wrote is read too) to ns since the epoch.
pub fn parse_utc(s: &str) -> Option<i128> {
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, dd) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let nanos: i64 = format!("{frac:0<9}").get(..9)?.parse().ok()?;
    // Out-of-range fields are not a time (and would overflow the arithmetic below).
    let ok = (0..=9999).contains(&y)
        && (1..=12).contains(&m)
        && (1..=31).contains(&dd)
        && (0..24).contains(&hh)
        && (0..60).contains(&mm)
        && (0..=60).contains(&ss)
        && nanos >= 0;
    if !ok {
        return None;
    }
    // A date that is not in the calendar (February 31st) is not a time.
    let month = time::Month::try_from(m as u8).ok()?;
    let date = time::Date::from_calendar_date(y as i32, month, dd as u8).ok()?;
    let days = date.to_julian_day() as i64 - UNIX_JULIAN_DAY;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(secs as i128 * 1_000_000_000 + nanos as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wall-clock form of `mono_ns` from the cache's pieces, appended.
    fn push_bytes(cache: &mut WallCache, mono_ns: u64, out: &mut Vec<u8>) {
        match cache.wall(mono_ns) {
            Wall::Cached { prefix, len, nanos } => {
                out.extend_from_slice(&prefix[..len]);
                let (first, rest) = nine_digits(nanos);
                out.push(first);
                out.extend_from_slice(&rest.to_le_bytes());
            }
            Wall::Full(s) => out.extend_from_slice(s.as_bytes()),
        }
    }

    #[test]
    fn utc_round_trip() {
        for ns in [0i128, 1_795_219_200_000_000_001, 951_827_696_500_000_000] {
            assert_eq!(parse_utc(&format_utc(ns)), Some(ns));
        }
        assert_eq!(
            parse_utc("2026-11-21 14:00:00"),
            Some(1_795_269_600_000_000_000)
        );
        // The space form of earlier recordings still loads.
        assert_eq!(
            parse_utc("2026-11-21 00:00:00.000000001"),
            Some(1_795_219_200_000_000_001)
        );
        assert_eq!(parse_utc("nonsense"), None);
        for bad in [
            "99999999999999-01-01T00:00:00",
            "2026-13-01T00:00:00",
            "2026-01-01T24:00:00",
            "2026-01-01T00:00:00.-5",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00.000000000");
        // 2000-02-29 12:34:56.5 (a leap day)
        assert_eq!(
            format_utc(951_827_696_500_000_000),
            "2000-02-29T12:34:56.500000000"
        );
        assert_eq!(
            format_utc(1_795_219_200_000_000_001),
            "2026-11-21T00:00:00.000000001"
        );
        assert_eq!(format_utc(-1), "1969-12-31T23:59:59.999999999");
    }

    #[test]
    fn cached_rendering_equals_formatting() {
        let c = WallClock::with_offset(1_795_219_200_000_000_000);
        let mut cache = WallCache::new(c);
        for t in [
            0u64,
            1,
            999_999_999,
            1_000_000_000,
            1_000_000_007,
            86_400_000_000_123,
        ] {
            let mut b = Vec::new();
            push_bytes(&mut cache, t, &mut b);
            assert_eq!(b, c.format(t).as_bytes());
        }
        // Back and forth across seconds, and before the epoch.
        let c = WallClock::with_offset(-2_500_000_000);
        let mut cache = WallCache::new(c);
        for t in [0u64, 3_000_000_000, 1, 2_499_999_999, 2_500_000_000, 7] {
            let mut b = Vec::new();
            push_bytes(&mut cache, t, &mut b);
            assert_eq!(b, c.format(t).as_bytes(), "{t}");
        }
    }

    #[test]
    fn wall_clock_is_near_now() {
        let w = WallClock::now();
        let s = w.format(0);
        assert!(s.len() == 29, "{s}");
        assert_eq!(
            WallClock::with_offset(5).format(5),
            "1970-01-01T00:00:00.000000010"
        );
    }
}
