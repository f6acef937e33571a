//! In-kernel sampling, shared by every profile: `--sample N` keeps 1 in N I/Os and
//! drops the others in the kernel, before any sample is written (the written sample is
//! what tracing costs, DESIGN §9).
//!
//! Every event of a sampled I/O must pass the same test, or chains break: the test is on
//! a value all of an I/O's events carry, one `!(field & bit)` per bit (the kernel
//! rejects `(field & mask) == 0`, see [`Filter::bits_clear`]):
//! - block and bio: bits of the start sector ([`sector_mask`]). Bits below the I/O
//!   size's alignment are always 0, so the bits start at log2(`--sample-align` in
//!   sectors). Bias: an I/O is kept when its offset, in units of the alignment, is a
//!   multiple of N; a workload whose offsets are all multiples of N × the alignment
//!   (large aligned I/O with a small `--sample-align`) is kept whole, and one that
//!   only touches offsets with those bits set is not seen at all. Random and
//!   sequential I/O of the alignment's size keep 1 in N.
//! - nvme, nvmet, nvme-tcp: bits of the command id ([`cid_mask`]). Linux hosts build
//!   it as `generation << 12 | tag` (4 generation bits, bumped each time a tag is
//!   reused): the generation bits come first (1 in up to 16, even at queue depth 1);
//!   beyond 16 the low tag bits are added, and blk-mq hands tags out round-robin, so
//!   those keep 1 in 2^k of the tags. Hosts that do not count generations (Apple
//!   controllers' quirk, other operating systems seen from nvmet) leave the
//!   generation bits 0: only the tag bits then sample.

use super::{PlanCtx, PlanError};
use crate::filter::Filter;

/// The largest `--sample`.
pub const MAX_SAMPLE: u32 = 256;

/// `--sample-align` when not given, and its floor: the usual smallest I/O (4 KiB).
pub const DEFAULT_ALIGN: u64 = 4096;

/// `--sample N`, the same definition for every profile.
pub fn sample_arg() -> clap::Arg {
    clap::Arg::new("sample")
        .long("sample")
        .value_name("N")
        .value_parser(clap::value_parser!(u32))
        .help("every profile: trace 1 in N I/Os (N a power of two, 1 to 256), chosen in the kernel so that unsampled I/Os cost nothing, keeping every event of a sampled I/O. Counts are 1/N of the traffic (the exit line and stat summary say `sampled 1 in N`); latencies are a sample of it. block, bio: by start-sector bits at and above --sample-align; nvme, nvmet, nvme-tcp: by command id bits (4 generation bits up to 16, then low tag bits). With nvme, --sample > 1 leaves out the block events (no blk_to_driver_ns, total_ns): they carry no command id")
}

/// `--sample-align BYTES`, for the profiles that sample by sector.
pub fn sample_align_arg() -> clap::Arg {
    clap::Arg::new("sample-align")
        .long("sample-align")
        .value_name("BYTES")
        .value_parser(clap::value_parser!(u64))
        .help("block, bio with --sample: the smallest I/O size (and alignment) of the workload, a power of two; sampling tests the sector bits from this size up (default: 4096, or the device's logical block size when larger). Too small and large aligned I/Os are always kept; too large and small I/Os near each other are kept or dropped together")
}

/// The rate a profile plans its filters at: N of `--sample N` (1 when not given),
/// checked: a power of two from 1 to [`MAX_SAMPLE`]. With `--max-rate` it is 2, so
/// that every sampled filter holds the test [`crate::profile::Resample`] changes; the
/// run starts at [`start_rate`].
pub fn rate(ctx: &PlanCtx<'_>) -> Result<u32, PlanError> {
    let n = start_rate(ctx)?;
    Ok(if dynamic(ctx) { 2 } else { n })
}

/// `--sample N`, checked (1 when not given).
pub fn start_rate(ctx: &PlanCtx<'_>) -> Result<u32, PlanError> {
    check_rate(ctx.flag::<u32>("sample").unwrap_or(1))
}

/// Whether the run picks its rate itself (`--max-rate`).
pub fn dynamic(ctx: &PlanCtx<'_>) -> bool {
    ctx.max_rate.is_some()
}

/// The one check of a `--sample` value.
pub fn check_rate(n: u32) -> Result<u32, PlanError> {
    if n.is_power_of_two() && n <= MAX_SAMPLE {
        Ok(n)
    } else {
        Err(PlanError::Flag {
            flag: format!("--sample {n}"),
            why: format!("give a power of two from 1 to {MAX_SAMPLE} (1, 2, 4, … {MAX_SAMPLE})"),
        })
    }
}

/// `--sample-align` checked (a power of two ≥ 512), or the default: the largest of
/// [`DEFAULT_ALIGN`] and the given logical block sizes.
pub fn align(ctx: &PlanCtx<'_>, lbs: impl IntoIterator<Item = u32>) -> Result<u64, PlanError> {
    match ctx.flag::<u64>("sample-align") {
        Some(a) => check_align(a),
        None => Ok(lbs
            .into_iter()
            .map(u64::from)
            .fold(DEFAULT_ALIGN, u64::max)
            .next_power_of_two()),
    }
}

pub fn check_align(a: u64) -> Result<u64, PlanError> {
    if a.is_power_of_two() && (512..=1 << 40).contains(&a) {
        Ok(a)
    } else {
        Err(PlanError::Flag {
            flag: format!("--sample-align {a}"),
            why: "give a power of two from 512 (bytes), e.g. 4096 or 65536".into(),
        })
    }
}

/// The start-sector bits that must be clear to keep 1 in `n` I/Os aligned to `align`
/// bytes: log2(n) bits from log2(align / 512). `n` and `align` as checked above.
pub fn sector_mask(n: u32, align: u64) -> u64 {
    let first = (align / 512).max(1).trailing_zeros();
    (u64::from(n) - 1) << first
}

/// The command id bits that must be clear to keep 1 in `n` commands: the generation
/// bits 12.. first, then tag bits 0.. (see the module doc). `n` as checked above.
pub fn cid_mask(n: u32) -> u16 {
    let bits = n.trailing_zeros();
    let gen_bits = bits.min(4);
    let tag_bits = bits - gen_bits;
    let generation = ((1u16 << gen_bits) - 1) << 12;
    let tag = (1u16 << tag_bits) - 1;
    generation | tag
}

/// The flag that sets the sampling, for notes: `--max-rate`, or `--sample N`.
pub fn flag_name(ctx: &PlanCtx<'_>, n: u32) -> String {
    if dynamic(ctx) {
        "--max-rate".into()
    } else {
        format!("--sample {n}")
    }
}

/// With `--max-rate`, tell the plan its filters test the command id's sample bits.
pub fn cid_sampler<K: 'static, L: crate::decode::Layout<K> + ?Sized + 'static>(
    ctx: &PlanCtx<'_>,
    b: &mut crate::profile::PlanBuilder<'_, K, L>,
) {
    if dynamic(ctx) {
        b.sampler(&["cid"], |n| cid_mask(n).into());
    }
}

/// `!(field & b) && …` for the bits of `mask`; `None` when nothing is sampled away.
pub fn filter(field: &'static str, mask: u64) -> Option<Filter> {
    Filter::bits_clear(field, mask)
}

/// The line outputs print so that counts can be scaled.
pub fn describe(n: u32) -> Option<String> {
    (n > 1).then(|| format!("sampled 1 in {n} I/Os"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_powers_of_two_up_to_256() {
        for n in [1, 2, 4, 8, 16, 32, 64, 128, 256] {
            assert_eq!(check_rate(n).unwrap(), n);
        }
        for bad in [0, 3, 6, 12, 100, 512, 1024, u32::MAX] {
            let e = check_rate(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("--sample {bad}")), "{e}");
            assert!(e.contains("power of two"), "{e}");
        }
    }

    #[test]
    fn aligns_are_powers_of_two_from_a_sector() {
        for a in [512, 4096, 65536, 1 << 20] {
            assert_eq!(check_align(a).unwrap(), a);
        }
        for bad in [0, 1, 256, 511, 3000, 4097] {
            assert!(check_align(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sector_bits_start_at_the_alignment() {
        assert_eq!(sector_mask(1, 4096), 0);
        assert_eq!(filter("sector", sector_mask(1, 4096)), None);
        // 4 KiB = 8 sectors: bits 3.. .
        assert_eq!(sector_mask(8, 4096), 8 | 16 | 32);
        assert_eq!(
            filter("sector", sector_mask(8, 4096)).unwrap().render(),
            "!(sector & 8) && !(sector & 16) && !(sector & 32)"
        );
        assert_eq!(sector_mask(2, 512), 1);
        assert_eq!(sector_mask(256, 4096), 0xff << 3);
        // 64 KiB = 128 sectors: bits 7.. .
        assert_eq!(
            filter("old_sector", sector_mask(4, 65536))
                .unwrap()
                .render(),
            "!(old_sector & 128) && !(old_sector & 256)"
        );
    }

    #[test]
    fn sector_sampling_keeps_one_in_n_of_sequential_and_aligned_io() {
        for n in [2u32, 8, 64, 256] {
            let m = sector_mask(n, 4096);
            let kept = (0..65_536u64).filter(|i| (i * 8) & m == 0).count();
            assert_eq!(kept, 65_536 / n as usize, "n {n}");
        }
    }

    #[test]
    fn cid_bits_are_generation_first_then_tag() {
        assert_eq!(cid_mask(1), 0);
        assert_eq!(cid_mask(2), 0x1000);
        assert_eq!(cid_mask(16), 0xf000);
        assert_eq!(cid_mask(32), 0xf001);
        assert_eq!(cid_mask(256), 0xf00f);
        assert_eq!(
            filter("cid", cid_mask(4).into()).unwrap().render(),
            "!(cid & 4096) && !(cid & 8192)"
        );
        assert_eq!(
            filter("cid", cid_mask(32).into()).unwrap().render(),
            "!(cid & 1) && !(cid & 4096) && !(cid & 8192) && !(cid & 16384) && !(cid & 32768)"
        );
        // Over every (generation, tag) a host can form, exactly 1 in N pass.
        for n in [2u32, 16, 64, 256] {
            let m = cid_mask(n);
            let kept = (0..=u16::MAX).filter(|c| c & m == 0).count();
            assert_eq!(kept, 65_536 / n as usize, "n {n}");
        }
    }

    #[test]
    fn the_rate_is_described_only_when_sampling() {
        assert_eq!(describe(1), None);
        assert_eq!(describe(8).as_deref(), Some("sampled 1 in 8 I/Os"));
    }
}

/// The filters the profiles' plans really open, on a captured tracefs tree.
#[cfg(test)]
mod plan_tests {
    use crate::device::SysBlock;
    use crate::profile::{self, PlanCtx};
    use crate::tracefs::Tracefs;
    use std::path::Path;

    /// `(event, filter)` of every event `profile` opens with `flags`.
    fn filters(profile: &str, flags: &[&str]) -> Result<Vec<(String, String)>, String> {
        let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("tracefs/6.1.192-ntprof");
        let tfs = Tracefs::at(&tree).unwrap();
        let p = profile::find(profile).unwrap();
        let args = clap::Command::new("t")
            .args(p.args())
            .try_get_matches_from(std::iter::once("t").chain(flags.iter().copied()))
            .map_err(|e| e.to_string())?;
        let ctx = PlanCtx {
            profile: p.name(),
            status: profile::check(p, &tfs),
            tfs: &tfs,
            args: &args,
            sys: SysBlock::default(),
            max_rate: None,
            capture: false,
        };
        let plan = p.plan(&ctx).map_err(|e| e.to_string())?;
        assert_eq!(
            plan.sample,
            flags
                .iter()
                .position(|f| *f == "--sample")
                .map_or(1, |i| flags[i + 1].parse().unwrap())
        );
        Ok(plan
            .events
            .iter()
            .map(|e| {
                (
                    e.name.clone(),
                    e.filter.as_ref().map_or(String::new(), |f| f.render()),
                )
            })
            .collect())
    }

    /// Bar the front merge, opened whole: it moves a request's start, in or out of the
    /// sample, and the correlator must see both.
    #[test]
    fn block_events_all_test_the_same_sector_bits() {
        let f = filters("block", &["--sample", "8"]).unwrap();
        assert!(f.len() >= 3, "{f:?}");
        for (e, filter) in &f {
            let want = match e.as_str() {
                "block:block_bio_frontmerge" => "",
                _ => "!(sector & 8) && !(sector & 16) && !(sector & 32)",
            };
            assert_eq!(filter, want, "{e}");
        }
        let f = filters("block", &["--sample", "4", "--sample-align", "65536"]).unwrap();
        for (e, filter) in &f {
            if e != "block:block_bio_frontmerge" {
                assert_eq!(filter, "!(sector & 128) && !(sector & 256)", "{e}");
            }
        }
        assert!(filters("block", &[])
            .unwrap()
            .iter()
            .all(|(_, f)| f.is_empty()));
        let e = filters("block", &["--sample", "6"]).unwrap_err();
        assert!(
            e.contains("--sample 6") && e.contains("power of two"),
            "{e}"
        );
        let e = filters("block", &["--sample", "2", "--sample-align", "1000"]).unwrap_err();
        assert!(e.contains("--sample-align 1000"), "{e}");
    }

    #[test]
    fn nvme_and_nvmet_commands_and_completions_test_the_same_cid_bits() {
        let f = filters("nvme", &["--sample", "32"]).unwrap();
        // Only the command events: block events carry no cid.
        assert_eq!(f.len(), 2, "{f:?}");
        for (e, filter) in &f {
            assert!(
                filter.ends_with(
                    "!(cid & 1) && !(cid & 4096) && !(cid & 8192) && !(cid & 16384) && !(cid & 32768)"
                ) && filter.starts_with("qid != 0"),
                "{e}: {filter}"
            );
        }
        let f = filters("nvmet", &["--sample", "2", "--qid", "3"]).unwrap();
        assert_eq!(f.len(), 2, "{f:?}");
        for (e, filter) in &f {
            assert_eq!(filter, "qid == 3 && !(cid & 4096)", "{e}");
        }
        let f = filters("nvme-tcp", &["--sample", "256"]).unwrap();
        let tcp: Vec<_> = f.iter().filter(|(e, _)| e.contains("_tcp:")).collect();
        assert!(tcp.len() > 10, "{f:?}");
        for (e, filter) in tcp {
            assert!(
                filter.contains("!(cid & 8) && !(cid & 4096)"),
                "{e}: {filter}"
            );
        }
    }
}
