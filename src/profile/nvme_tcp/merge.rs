//! Joining two nvme-tcp recordings, one made on the host (`--side host`) and one on
//! the target (`--side target`), into the rows a joint recording would have written.
//!
//! The two machines' clocks differ. Every stage is a difference of two times of one
//! machine, so the rows' stage values need no clock at all; only *pairing* a host row
//! with its target row does, by (cntlid, qid, cid) and time ([`super::nvme_tcp::fits`]).
//! The offset between the clocks is estimated from the rows themselves: for a true
//! pair, host send ≤ target arrival + off and target reply + off ≤ host receive, so
//! off lies in [host_send − target_recv, host_recv − target_send], an interval as wide
//! as the round trip's network time. The offset covered by the most such intervals
//! (among pairs allowed by the wall clocks the recordings noted, ± `max_skew_ns`) is
//! taken. Pure: rows in, rows out; reading and writing files is the caller's.

use super::model::{fits, TcpRecord};
use crate::correlate::FxMap;
use crate::sink::time::parse_utc;

/// A row of an nvme-tcp CSV: the record plus its two time columns as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub start_time: String,
    pub start_ns: u64,
    pub rec: TcpRecord,
}

/// What a merge did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    pub host_rows: u64,
    pub target_rows: u64,
    pub paired: u64,
    /// Target clock + `offset_ns` = host clock (the estimate used).
    pub offset_ns: i64,
    /// Intervals that agreed with the offset, of those considered.
    pub agreeing: u64,
    pub considered: u64,
}

/// realtime − monotonic of the recording, from any row's two time columns.
fn wall_offset(rows: &[&Row]) -> Option<i128> {
    rows.iter()
        .find_map(|r| Some(parse_utc(&r.start_time)? - r.start_ns as i128))
}

/// Join the host rows and target rows of two recordings (either file may hold either
/// side; rows already joined pass through). `max_skew_ns`: how far apart the two
/// machines' wall clocks may be.
pub fn merge(rows: Vec<Row>, max_skew_ns: u64) -> (Vec<Row>, MergeStats) {
    let mut st = MergeStats::default();
    let mut hosts = Vec::new();
    let mut targets = Vec::new();
    let mut out = Vec::new();
    for r in rows {
        match (&r.rec.host, &r.rec.target) {
            (Some(_), None) => hosts.push(r),
            (None, Some(_)) => targets.push(r),
            _ => out.push(r),
        }
    }
    st.host_rows = hosts.len() as u64;
    st.target_rows = targets.len() as u64;
    // Target rows by key, in time order.
    let mut by_key: FxMap<(u16, u16, u16), Vec<usize>> = FxMap::default();
    for (i, r) in targets.iter().enumerate() {
        if let Some(t) = &r.rec.target {
            by_key.entry((t.cntlid, t.qid, t.cid)).or_default().push(i);
        }
    }
    let recv = |i: &usize| targets[*i].rec.target.as_ref().map_or(0, |t| t.recv_ns);
    for v in by_key.values_mut() {
        v.sort_by_key(recv);
    }
    let off0 = match (
        wall_offset(&hosts.iter().collect::<Vec<_>>()),
        wall_offset(&targets.iter().collect::<Vec<_>>()),
    ) {
        (Some(h), Some(t)) => (t - h).clamp(i64::MIN as i128 / 2, i64::MAX as i128 / 2) as i64,
        _ => 0,
    };
    let skew = max_skew_ns.min(i64::MAX as u64 / 4) as i64;

    // Offset estimate: the point covered by the most tight intervals.
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for h in hosts.iter().filter_map(|r| r.rec.host.as_ref()) {
        let (Some(s), Some(r)) = (h.send_ns, h.recv_ns) else {
            continue;
        };
        let Some(list) = by_key.get(&(h.cntlid, h.qid, h.cid)) else {
            continue;
        };
        // Target arrivals within the skew window of this host round trip.
        let lo = (s as i64).saturating_sub(off0).saturating_sub(skew).max(0) as u64;
        let hi = (r as i64).saturating_sub(off0).saturating_add(skew).max(0) as u64;
        let first = list.partition_point(|i| recv(i) < lo);
        for i in &list[first..] {
            let Some(t) = &targets[*i].rec.target else {
                continue;
            };
            if t.recv_ns > hi {
                break;
            }
            let Some(z) = t.send_ns else { continue };
            let (a, b) = (
                (s as i64).saturating_sub(t.recv_ns as i64),
                (r as i64).saturating_sub(z as i64),
            );
            if a <= b {
                edges.push((a, 1));
                edges.push((b, -1));
                st.considered += 1;
            }
        }
    }
    // Starts before ends at the same point, so touching intervals count as overlapping.
    edges.sort_by_key(|&(x, d)| (x, -d));
    let (mut cur, mut best, mut best_lo, mut best_hi) = (0i32, 0i32, off0, off0);
    for (k, &(x, d)) in edges.iter().enumerate() {
        cur += d;
        if d > 0 && cur > best {
            best = cur;
            best_lo = x;
            // The best region ends at the next edge.
            best_hi = edges.get(k + 1).map_or(x, |e| e.0);
        }
    }
    let off = ((best_lo as i128 + best_hi as i128) / 2) as i64;
    st.offset_ns = off;
    st.agreeing = best.max(0) as u64;

    // As in a joint recording, a side's part is expected only for a controller that
    // side served during the run.
    let tgt_ctrls: std::collections::HashSet<u16> = by_key.keys().map(|(c, _, _)| *c).collect();
    let host_ctrls: std::collections::HashSet<u16> = hosts
        .iter()
        .filter_map(|r| r.rec.host.as_ref().map(|h| h.cntlid))
        .collect();

    // Pair each host row with the earliest unclaimed target row that fits.
    let mut claimed = vec![false; targets.len()];
    for mut h in hosts {
        let found = h.rec.host.as_ref().and_then(|hp| {
            let list = by_key.get(&(hp.cntlid, hp.qid, hp.cid))?;
            let lo = (hp.queue_ns.unwrap_or(hp.start_ns) as i64)
                .saturating_sub(off)
                .max(0) as u64;
            let first = list.partition_point(|i| recv(i) < lo);
            list[first..].iter().copied().find(|i| {
                !claimed[*i]
                    && targets[*i]
                        .rec
                        .target
                        .as_ref()
                        .is_some_and(|t| fits(hp, t, off))
            })
        });
        if let Some(i) = found {
            claimed[i] = true;
            h.rec.target = targets[i].rec.target;
            // As in a joint recording: a row is `dropped` when either part lost an event.
            h.rec.dropped |= targets[i].rec.dropped;
            st.paired += 1;
        }
        let cntlid = h.rec.host.as_ref().map_or(0, |p| p.cntlid);
        h.rec.expect_host = true;
        h.rec.expect_target = tgt_ctrls.contains(&cntlid);
        out.push(h);
    }
    for (i, mut t) in targets.into_iter().enumerate() {
        if !claimed[i] {
            let cntlid = t.rec.target.as_ref().map_or(0, |p| p.cntlid);
            t.rec.expect_host = host_ctrls.contains(&cntlid);
            t.rec.expect_target = true;
            out.push(t);
        }
    }
    out.sort_by_key(|r| r.start_ns);
    (out, st)
}
