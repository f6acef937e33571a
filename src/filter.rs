//! Typed ftrace filters (`PERF_EVENT_IOC_SET_FILTER`), rendered in the forms the kernel
//! accepts.
//!
//! Why typed: the kernel's filter grammar is narrower than C. `!(cid & 4096)` and
//! `cid & 4096` are accepted, `(cid & 12288) == 0` is rejected on 6.x; a profile that
//! builds strings by hand finds out only when `perf_event_open` fails on a customer's
//! host. Every filter here is made of comparisons and single-bit tests joined by `&&`
//! and `||`, with parentheses where an `||` group sits inside an `&&`.

use std::fmt;

/// A comparison operator the kernel's filter accepts for integer fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    /// `>=`: with [`Cmp::Lt`], a span of positions (a partition's sectors).
    Ge,
    Lt,
}

/// A tracepoint filter expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// `field == value` / `field != value`.
    Cmp(&'static str, Cmp, u64),
    /// `!(field & bit)`: the bit is clear. One bit per test: a mask of several bits
    /// compared to 0 is what the kernel rejects.
    BitClear(&'static str, u64),
    /// `field & bit`: the bit is set.
    BitSet(&'static str, u64),
    All(Vec<Filter>),
    Any(Vec<Filter>),
}

impl Filter {
    pub fn eq(field: &'static str, v: u64) -> Filter {
        Filter::Cmp(field, Cmp::Eq, v)
    }

    pub fn ne(field: &'static str, v: u64) -> Filter {
        Filter::Cmp(field, Cmp::Ne, v)
    }

    /// `field >= start && field < end`.
    pub fn within(field: &'static str, span: &std::ops::Range<u64>) -> Filter {
        Filter::All(vec![
            Filter::Cmp(field, Cmp::Ge, span.start),
            Filter::Cmp(field, Cmp::Lt, span.end),
        ])
    }

    /// Any of the parts; `None` when there are none.
    pub fn any(parts: impl IntoIterator<Item = Filter>) -> Option<Filter> {
        Filter::joined(parts, false)
    }

    /// `field == a || field == b …` over the sorted, distinct values; `None` for none
    /// (no restriction).
    pub fn one_of(field: &'static str, values: &[u64]) -> Option<Filter> {
        let mut v = values.to_vec();
        v.sort_unstable();
        v.dedup();
        match v.len() {
            0 => None,
            1 => Some(Filter::eq(field, v[0])),
            _ => Some(Filter::Any(
                v.into_iter().map(|x| Filter::eq(field, x)).collect(),
            )),
        }
    }

    /// Every bit of `mask` clear: keeps 1 in 2^(bits of mask) values whose bits are
    /// spread evenly. `None` for an empty mask.
    pub fn bits_clear(field: &'static str, mask: u64) -> Option<Filter> {
        let parts: Vec<Filter> = (0..64)
            .filter(|b| mask & (1 << b) != 0)
            .map(|b| Filter::BitClear(field, 1 << b))
            .collect();
        Filter::all(parts)
    }

    /// The conjunction of the parts; `None` when there are none.
    pub fn all(parts: impl IntoIterator<Item = Filter>) -> Option<Filter> {
        Filter::joined(parts, true)
    }

    /// The parts joined by `&&` (`and`) or `||`, a part of the same join flattened
    /// into it; one part alone as it is, `None` for none.
    fn joined(parts: impl IntoIterator<Item = Filter>, and: bool) -> Option<Filter> {
        let mut v: Vec<Filter> = Vec::new();
        for p in parts {
            match p {
                Filter::All(inner) if and => v.extend(inner),
                Filter::Any(inner) if !and => v.extend(inner),
                other => v.push(other),
            }
        }
        match v.len() {
            0 => None,
            1 => v.pop(),
            _ if and => Some(Filter::All(v)),
            _ => Some(Filter::Any(v)),
        }
    }

    /// `self && other`, either side optional.
    pub fn and(a: Option<Filter>, b: Option<Filter>) -> Option<Filter> {
        Filter::all(a.into_iter().chain(b))
    }

    /// The text for `PERF_EVENT_IOC_SET_FILTER`.
    pub fn render(&self) -> String {
        self.to_string()
    }

    /// Whether this filter tests bits of `field` (`!(field & bit)`).
    pub fn tests(&self, field: &str) -> bool {
        match self {
            Filter::BitClear(f, _) | Filter::BitSet(f, _) => *f == field,
            Filter::Cmp(..) => false,
            Filter::All(p) | Filter::Any(p) => p.iter().any(|p| p.tests(field)),
        }
    }

    /// This filter with its sample test on `field` (the one `!(field & bit)` of a plan
    /// made at 1 in 2) replaced by: every bit of `clear` clear and, when `set` is not
    /// 0, that bit set. How `--max-rate` cuts the sample into disjoint parts. `None`
    /// when what is left keeps everything.
    pub fn remask(&self, field: &str, clear: u64, set: u64) -> Option<Filter> {
        match self {
            Filter::BitClear(f, _) if *f == field => Filter::all(
                Filter::bits_clear(f, clear)
                    .into_iter()
                    .chain((set != 0).then_some(Filter::BitSet(f, set))),
            ),
            Filter::Cmp(..) | Filter::BitClear(..) | Filter::BitSet(..) => Some(self.clone()),
            Filter::All(parts) => {
                Filter::all(parts.iter().filter_map(|p| p.remask(field, clear, set)))
            }
            Filter::Any(parts) => {
                let kept: Option<Vec<Filter>> =
                    parts.iter().map(|p| p.remask(field, clear, set)).collect();
                Some(Filter::Any(kept?))
            }
        }
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Filter::Cmp(field, Cmp::Eq, v) => write!(f, "{field} == {v}"),
            Filter::Cmp(field, Cmp::Ne, v) => write!(f, "{field} != {v}"),
            Filter::Cmp(field, Cmp::Ge, v) => write!(f, "{field} >= {v}"),
            Filter::Cmp(field, Cmp::Lt, v) => write!(f, "{field} < {v}"),
            Filter::BitClear(field, bit) => write!(f, "!({field} & {bit})"),
            Filter::BitSet(field, bit) => write!(f, "{field} & {bit}"),
            Filter::All(parts) => join(f, parts, " && ", true),
            Filter::Any(parts) => join(f, parts, " || ", false),
        }
    }
}

fn join(f: &mut fmt::Formatter<'_>, parts: &[Filter], sep: &str, and: bool) -> fmt::Result {
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        // `a || b && c` would bind the && first: an `||` group inside `&&` (or an
        // `&&` group inside `||`) gets parentheses.
        let wrap = matches!((and, p), (true, Filter::Any(_)) | (false, Filter::All(_)));
        if wrap {
            write!(f, "({p})")?;
        } else {
            write!(f, "{p}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remask_replaces_the_sample_bit_wherever_it_sits() {
        let plan = Filter::Any(vec![
            Filter::all([Filter::eq("old_dev", 7), Filter::BitClear("old_sector", 8)]).unwrap(),
            Filter::eq("old_dev", 9),
        ]);
        assert!(plan.tests("old_sector") && !plan.tests("sector"));
        let part = plan.remask("old_sector", 0b1000, 0b10000).unwrap();
        assert_eq!(
            part.render(),
            "(old_dev == 7 && !(old_sector & 8) && old_sector & 16) || old_dev == 9"
        );
        // All I/Os: the test is gone, the device selection stays.
        assert_eq!(
            plan.remask("old_sector", 0, 0).unwrap().render(),
            "old_dev == 7 || old_dev == 9"
        );
        // Other fields' bits are not the sample's.
        let other =
            Filter::all([Filter::BitClear("flags", 1), Filter::BitClear("cid", 4096)]).unwrap();
        assert_eq!(other.remask("cid", 0, 0).unwrap().render(), "!(flags & 1)");
        // The sample test alone: nothing left means everything passes.
        assert_eq!(Filter::BitClear("cid", 4096).remask("cid", 0, 0), None);
        let any = Filter::Any(vec![Filter::BitClear("cid", 4096), Filter::eq("qid", 0)]);
        assert_eq!(any.remask("cid", 0, 0), None);
    }

    #[test]
    fn comparisons_and_device_lists() {
        assert_eq!(Filter::eq("qid", 3).render(), "qid == 3");
        assert_eq!(Filter::ne("qid", 0).render(), "qid != 0");
        assert_eq!(Filter::one_of("dev", &[]), None);
        assert_eq!(Filter::one_of("dev", &[7]).unwrap().render(), "dev == 7");
        assert_eq!(
            Filter::one_of("dev", &[9, 7, 9]).unwrap().render(),
            "dev == 7 || dev == 9"
        );
    }

    #[test]
    fn bit_tests_are_one_bit_each_never_a_mask_compared_to_zero() {
        assert_eq!(Filter::bits_clear("cid", 0), None);
        assert_eq!(
            Filter::bits_clear("cid", 0x1000).unwrap().render(),
            "!(cid & 4096)"
        );
        let r = Filter::bits_clear("sector", 8 | 16 | 32).unwrap().render();
        assert_eq!(r, "!(sector & 8) && !(sector & 16) && !(sector & 32)");
        assert!(!r.contains("=="), "{r}");
    }

    #[test]
    fn or_groups_inside_and_are_parenthesised() {
        let devs = Filter::one_of("dev", &[1, 2]);
        let f = Filter::and(devs, Filter::bits_clear("sector", 8)).unwrap();
        assert_eq!(f.render(), "(dev == 1 || dev == 2) && !(sector & 8)");
        let f = Filter::all([
            Filter::eq("ctrl_id", 1),
            Filter::ne("qid", 0),
            Filter::all([Filter::eq("nsid", 2)]).unwrap(),
        ])
        .unwrap();
        assert_eq!(f.render(), "ctrl_id == 1 && qid != 0 && nsid == 2");
        assert_eq!(Filter::and(None, None), None);
    }

    #[test]
    fn spans_are_two_comparisons_grouped_where_they_sit_in_an_or() {
        assert_eq!(
            Filter::within("sector", &(2048..4096)).render(),
            "sector >= 2048 && sector < 4096"
        );
        let f = Filter::any([
            Filter::eq("sector", 0),
            Filter::within("sector", &(8..16)),
            Filter::any([Filter::eq("dev", 1), Filter::eq("dev", 2)]).unwrap(),
        ])
        .unwrap();
        assert_eq!(
            f.render(),
            "sector == 0 || (sector >= 8 && sector < 16) || dev == 1 || dev == 2"
        );
        assert_eq!(Filter::any([]), None);
        assert_eq!(
            Filter::any([Filter::eq("dev", 1)]),
            Some(Filter::eq("dev", 1))
        );
    }
}
