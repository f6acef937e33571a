//! The profiles ntprof-perf knows, and whether a kernel (a tracefs tree) supports them.

use crate::correlate::{self, EventReq, ProfileInfo};
use crate::tracefs::{Tracefs, TracefsError};

/// Every profile, in the order `list` shows them.
pub fn all() -> Vec<&'static ProfileInfo> {
    vec![
        &correlate::block::INFO,
        &correlate::nvme::INFO,
        &correlate::nvmet::INFO,
        &correlate::nvme_tcp::INFO,
    ]
}

pub fn find(name: &str) -> Option<&'static ProfileInfo> {
    all().into_iter().find(|p| p.name == name)
}

/// Whether one event is available, and if not, why.
#[derive(Debug)]
pub struct EventStatus {
    pub req: EventReq,
    pub missing: Option<String>,
}

/// The per-event availability of a profile on `tfs`.
pub fn check(info: &ProfileInfo, tfs: &Tracefs) -> Vec<EventStatus> {
    info.events
        .iter()
        .map(|req| {
            let missing = match tfs.event(req.system, req.event) {
                Ok(_) => None,
                Err(TracefsError::MissingEvent { reason, .. }) => {
                    Some(format!("{reason}; {}", req.hint))
                }
                Err(e) => Some(e.to_string()),
            };
            EventStatus { req: *req, missing }
        })
        .collect()
}

/// True when every required event is there.
pub fn supported(status: &[EventStatus]) -> bool {
    status
        .iter()
        .all(|s| !s.req.required || s.missing.is_none())
}
